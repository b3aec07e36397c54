/*
 * cpu_attn_block.c - CPU backend (ops.h) of block attention on global
 * positions: one rank's queries against one block of keys, the step of
 * context-parallel ring attention (model/ring_attn.c); forward beside
 * backward.
 *
 * Unlike attention_forward, which keeps the probs [T, T], a block keeps only
 * the log-sum-exp of each query row: forward merges blocks by the
 * online-softmax rule, backward recomputes the probs from the scores and the
 * final lse (flash attention), so no block needs another one's data.
 *
 * Both position lists are increasing, so the keys a query sees are a prefix
 * of the block, longer for later queries: a block of queries [t0, t1) needs
 * the keys its last row sees and no more, and the score and PV sgemms (as
 * in cpu_attn.c, on the strided tensors) skip the rest. Under Megatron's
 * load-balanced chunking that is what halves the off-diagonal ring steps.
 * A sliding window also hides a prefix (the keys before its first row's
 * window), which the sgemms skip too: a row sees the range [lo, n).
 * Document masks (packed sequences) hide keys inside that range: their
 * scores are set aside after the score sgemm (prob 0), and a row whose range
 * holds no key of its document is treated as one that sees nothing.
 */
#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "base/error.h"
#include "base/xalloc.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void block_check(const int32_t *qpos, const int32_t *kpos, int Tq, int Tk, int a, int g,
			int S)
{
	if (a <= 0 || g <= 0 || a % g != 0)
		BUG("block attention: %d heads do not split into %d groups", a, g);
	for (int i = 0; i < Tq; i++)
		if (qpos[i] < 0 || qpos[i] >= S || (i && qpos[i] <= qpos[i - 1]))
			BUG("block attention: query position %d at %d is out of order or outside [0, %d)",
			    qpos[i], i, S);
	for (int i = 0; i < Tk; i++)
		if (kpos[i] < 0 || kpos[i] >= S || (i && kpos[i] <= kpos[i - 1]))
			BUG("block attention: key position %d at %d is out of order or outside [0, %d)",
			    kpos[i], i, S);
}

/* How many of the keys kpos[0..n) a query at position p sees: those at
 * positions <= p, a prefix since kpos increases. */
static int block_visible(const int32_t *kpos, int n, int p)
{
	int lo = 0, hi = n;
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		if (kpos[mid] <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* The first of the keys kpos[0..n) a query at position p sees under a
 * sliding window (ops.h; window < 0: none): the first at p - window or
 * later. */
static int block_first(const int32_t *kpos, int n, int p, int window)
{
	return window < 0 ? 0 : block_visible(kpos, n, p - window - 1);
}

/* Set the scores s[0..n) of the keys kpos[0..n) outside document d (doc:
 * the sample's ids over the whole sequence) to x. */
static void block_doc_mask(float *s, const int32_t *kpos, int n, const int32_t *doc, int32_t d, float x)
{
	for (int j = 0; j < n; j++)
		if (doc[kpos[j]] != d)
			s[j] = x;
}

/* Dropout counter of (head h, sample b, query at global position tq, key 0). */
static inline uint64_t block_counter(uint64_t offset, int h, int b, int B, int S, int tq)
{
	return offset + (((uint64_t)h * (uint64_t)B + (uint64_t)b) * (uint64_t)S + (uint64_t)tq) * (uint64_t)S;
}

/* The dropout multipliers of one query row for keys [0, n): the counters
 * follow the keys' global positions, consecutive within each run of
 * consecutive positions (a chunk), so one cpu_dropout_scales call per run. */
static void block_dropout_row(float *s, const int32_t *kpos, int n, float p, uint64_t seed,
			      uint64_t row)
{
	for (int j = 0; j < n;) {
		int e = j + 1;
		while (e < n && kpos[e] == kpos[j] + (e - j))
			e++;
		cpu_dropout_scales(s + j, (size_t)(e - j), p, seed, row + (uint64_t)kpos[j]);
		j = e;
	}
}

/*
 * Per task (sample, head, block of query rows): scores against the keys
 * the block sees, then per row the block's own softmax (max, exp, sum),
 * lse_blk = max + log(sum) and lse' = log(e^lse + e^lse_blk). The row of
 * probs is scaled to exp(s - lse') (the 1/sum of the softmax times
 * e^(lse_blk - lse')), the old out row by e^(lse - lse'), and one sgemm with
 * beta = 1 adds probs x V onto it. Dropout multiplies the scaled probs,
 * which is the same as dropping the final probs since the merge is linear.
 */
void cpu_attention_block_forward(float *out, float *lse, const float *q, const float *kk, const float *v,
				 const int32_t *qpos, const int32_t *kpos, const int32_t *doc, int B, int Tq, int Tk,
				 int a, int g, int k, int S, float scale, int window, float dropout_p, uint64_t seed,
				 uint64_t offset, int accumulate)
{
	block_check(qpos, kpos, Tq, Tk, a, g, S);
	if (B <= 0 || Tq <= 0)
		return;
	const int m = a / g, nblk = (Tq + CPU_QB - 1) / CPU_QB;
	const int ntask = B * a * nblk;
	const size_t ldo = (size_t)a * k; /* out is [B, Tq, a*k] */
	const int blas_threads = cpu_blas_serial_begin();
#pragma omp parallel if (ntask > 1)
	{
		float *P = Tk ? xmalloc((size_t)CPU_QB * Tk * sizeof(float)) : NULL;
		float *sc = dropout_p > 0.0f && Tk ? xmalloc((size_t)Tk * sizeof(float)) : NULL;
#pragma omp for schedule(dynamic)
		for (int task = 0; task < ntask; task++) {
			const int bh = task / nblk, blk = task % nblk;
			const int b = bh / a, h = bh % a, G = h / m;
			const int t0 = blk * CPU_QB, t1 = t0 + CPU_QB < Tq ? t0 + CPU_QB : Tq;
			const int nq = t1 - t0;
			const int32_t *D = doc ? doc + (size_t)b * S : NULL;
			float *O = out + ((size_t)b * Tq + t0) * ldo + (size_t)h * k;
			float *L = lse + (size_t)bh * Tq + t0;
			/* the keys the block's last query sees; every earlier row sees a prefix,
			 * and none sees a key before k0, its first row's window */
			const int nk0 = block_visible(kpos, Tk, qpos[t1 - 1]);
			const int k0 = block_first(kpos, nk0, qpos[t0], window), nk = nk0 - k0;
			if (nk == 0) { /* all in the future: nothing to add */
				if (!accumulate)
					for (int r = 0; r < nq; r++) {
						memset(O + (size_t)r * ldo, 0, (size_t)k * sizeof(float));
						L[r] = -INFINITY;
					}
				continue;
			}
			const float *Q = q + ((size_t)bh * Tq + t0) * k;
			const float *K = kk + (((size_t)b * g + G) * Tk + k0) * k;
			const float *V = v + (((size_t)b * g + G) * Tk + k0) * k;
			/* scores[nq, nk] = scale * Q K^T, keys k0.. */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, k, scale, Q, k, K, k, 0.0f,
				    P, nk);
			for (int r = 0; r < nq; r++) {
				float *o = O + (size_t)r * ldo;
				const int lo = block_first(kpos, nk0, qpos[t0 + r], window) - k0;
				const int n1 = block_visible(kpos, nk0, qpos[t0 + r]) - k0;
				const int n = n1 > lo ? n1 - lo : 0; /* the row's keys [lo, lo + n) */
				float *row = P + (size_t)r * nk + lo;
				const float old = accumulate ? L[r] : -INFINITY;
				memset(row - lo, 0, (size_t)lo * sizeof(float));
				memset(row + n, 0, (size_t)(nk - lo - n) * sizeof(float));
				if (D) /* keys of other documents: -inf scores, prob 0 below */
					block_doc_mask(row, kpos + k0 + lo, n, D, D[qpos[t0 + r]], -INFINITY);
				float mx = -INFINITY;
#pragma omp simd reduction(max : mx)
				for (int tk = 0; tk < n; tk++)
					mx = row[tk] > mx ? row[tk] : mx;
				if (n == 0 || mx == -INFINITY) { /* this row sees nothing here: out and lse stay */
					memset(row, 0, (size_t)n * sizeof(float));
					if (!accumulate)
						L[r] = -INFINITY; /* and out becomes 0 (beta = 0 below) */
					continue;
				}
				double sum = 0.0;
#pragma omp simd reduction(+ : sum)
				for (int tk = 0; tk < n; tk++) {
					float e = row[tk] == -INFINITY ? 0.0f : cpu_expf(row[tk] - mx);
					row[tk] = e;
					sum += e;
				}
				const float fsum = (float)sum, blk_lse = mx + logf(fsum);
				if (old == -INFINITY) {
					/* the first keys of this row: plain softmax, as attention_forward */
#pragma omp simd
					for (int tk = 0; tk < n; tk++)
						row[tk] /= fsum;
					if (accumulate) /* beta = 1 below adds onto an out row that must be 0 */
						memset(o, 0, (size_t)k * sizeof(float));
					L[r] = blk_lse;
				} else {
					const float hi = old > blk_lse ? old : blk_lse, low = old > blk_lse ? blk_lse : old;
					const float nl = hi + log1pf(expf(low - hi));
					const float w = expf(blk_lse - nl) / fsum, keep = expf(old - nl);
#pragma omp simd
					for (int tk = 0; tk < n; tk++)
						row[tk] *= w;
					for (int i = 0; i < k; i++)
						o[i] *= keep;
					L[r] = nl;
				}
				if (sc) {
					block_dropout_row(sc, kpos + k0 + lo, n, dropout_p, seed,
							  block_counter(offset, h, b, B, S, qpos[t0 + r]));
#pragma omp simd
					for (int tk = 0; tk < n; tk++)
						row[tk] *= sc[tk];
				}
			}
			/* out[b, t0:t1, h] (+)= P[nq, nk] V[0:nk] */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, k, nk, 1.0f, P, nk, V, k,
				    accumulate ? 1.0f : 0.0f, O, (int)ldo);
		}
		free(P);
		free(sc);
	}
	cpu_blas_serial_end(blas_threads);
}

/*
 * With S = scale Q K^T, P = exp(S - lse) (the final probs, recomputed),
 * M the dropout multipliers, O = (P * M) V over all blocks:
 *   dV += (P * M)^T dO,  dP = (dO V^T) * M,  dS = P * (dP - Dr),
 *   dQ += scale dS K,  dK += scale dS^T Q,
 * with Dr = rowsum(dO * O) = rowsum(P * dP) summed over every block, which
 * is why it is taken from out rather than from this block's probs. One
 * task per (sample, K/V group) takes its m query heads in turn, so the sums
 * into dK and dV have one owner and a fixed order, and so do the dq rows.
 */
void cpu_attention_block_backward(float *dq, float *dk, float *dv, const float *dout, const float *out,
				  const float *lse, const float *q, const float *kk, const float *v,
				  const int32_t *qpos, const int32_t *kpos, const int32_t *doc, int B, int Tq, int Tk,
				  int a, int g, int k, int S, float scale, int window, float dropout_p, uint64_t seed,
				  uint64_t offset)
{
	block_check(qpos, kpos, Tq, Tk, a, g, S);
	if ((!dq && !dk && !dv) || B <= 0 || Tq <= 0 || Tk <= 0)
		return;
	const int m = a / g, nblk = (Tq + CPU_QB - 1) / CPU_QB;
	const int ntask = B * g;
	const size_t ldo = (size_t)a * k;
	const int blas_threads = cpu_blas_serial_begin();
#pragma omp parallel if (ntask > 1)
	{
		const size_t blk_elems = (size_t)CPU_QB * Tk;
		float *P = xmalloc(blk_elems * sizeof(float));
		float *ds = xmalloc(blk_elems * sizeof(float));
		float *sc = dropout_p > 0.0f ? xmalloc(blk_elems * sizeof(float)) : NULL;
		float *drop = dropout_p > 0.0f ? xmalloc(blk_elems * sizeof(float)) : NULL;
#pragma omp for schedule(dynamic)
		for (int task = 0; task < ntask; task++) {
			const int b = task / g, G = task % g;
			const int32_t *ids = doc ? doc + (size_t)b * S : NULL;
			const size_t kv = ((size_t)b * g + G) * Tk * k;
			for (int h = G * m; h < (G + 1) * m; h++) {
				const int bh = b * a + h;
				for (int blk = 0; blk < nblk; blk++) {
					const int t0 = blk * CPU_QB, t1 = t0 + CPU_QB < Tq ? t0 + CPU_QB : Tq;
					const int nk0 = block_visible(kpos, Tk, qpos[t1 - 1]);
					const int k0 = block_first(kpos, nk0, qpos[t0], window);
					const int nq = t1 - t0, nk = nk0 - k0;
					if (nk == 0)
						continue;
					/* keys k0 .. nk0 - 1 */
					const float *K = kk + kv + (size_t)k0 * k, *V = v + kv + (size_t)k0 * k;
					float *dK = dk ? dk + kv + (size_t)k0 * k : NULL;
					float *dV = dv ? dv + kv + (size_t)k0 * k : NULL;
					const float *Q = q + ((size_t)bh * Tq + t0) * k;
					const float *dO = dout + ((size_t)b * Tq + t0) * ldo + (size_t)h * k;
					const float *O = out + ((size_t)b * Tq + t0) * ldo + (size_t)h * k;
					const float *L = lse + (size_t)bh * Tq + t0;
					/* P[nq, nk] = exp(scale Q K^T - lse), 0 for keys in a row's future */
					cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, k, scale, Q, k, K,
						    k, 0.0f, P, nk);
					for (int r = 0; r < nq; r++) {
						float *p = P + (size_t)r * nk;
						const int lo = block_first(kpos, nk0, qpos[t0 + r], window) - k0;
						const int n1 = block_visible(kpos, nk0, qpos[t0 + r]) - k0;
						const int n = n1 > lo ? n1 : lo; /* the row's keys [lo, n) */
						const float l = L[r];
						memset(p, 0, (size_t)lo * sizeof(float));
#pragma omp simd
						for (int tk = lo; tk < n; tk++)
							p[tk] = cpu_expf(p[tk] - l);
						memset(p + n, 0, (size_t)(nk - n) * sizeof(float));
						if (ids)
							block_doc_mask(p + lo, kpos + k0 + lo, n - lo, ids,
								       ids[qpos[t0 + r]], 0.0f);
						if (sc) {
							float *s = sc + (size_t)r * nk, *d = drop + (size_t)r * nk;
							memset(s, 0, (size_t)lo * sizeof(float));
							block_dropout_row(s + lo, kpos + k0 + lo, n - lo, dropout_p, seed,
									  block_counter(offset, h, b, B, S, qpos[t0 + r]));
							memset(s + n, 0, (size_t)(nk - n) * sizeof(float));
#pragma omp simd
							for (int tk = 0; tk < nk; tk++)
								d[tk] = p[tk] * s[tk];
						}
					}
					/* the probs forward multiplied V by */
					const float *D = sc ? drop : P;
					if (dV) /* dV[0:nk] += D^T dO */
						cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, k, nq, 1.0f, D, nk,
							    dO, (int)ldo, 1.0f, dV, k);
					if (!dq && !dK)
						continue;
					/* dD[nq, nk] = dO V^T */
					cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, k, 1.0f, dO,
						    (int)ldo, V, k, 0.0f, ds, nk);
					for (int r = 0; r < nq; r++) {
						float *d = ds + (size_t)r * nk;
						const float *p = P + (size_t)r * nk;
						const float *dor = dO + (size_t)r * ldo, *orow = O + (size_t)r * ldo;
						double dot = 0.0;
#pragma omp simd reduction(+ : dot)
						for (int i = 0; i < k; i++)
							dot += (double)dor[i] * orow[i];
						const float fdot = (float)dot;
						if (sc) {
							const float *s = sc + (size_t)r * nk;
#pragma omp simd
							for (int tk = 0; tk < nk; tk++)
								d[tk] *= s[tk];
						}
						/* future keys and those outside the window have p = 0, so dS = 0 there */
#pragma omp simd
						for (int tk = 0; tk < nk; tk++)
							d[tk] = p[tk] * (d[tk] - fdot);
					}
					if (dq) /* dQ[t0:t1] += scale dS K[0:nk] */
						cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, k, nk, scale, ds,
							    nk, K, k, 1.0f, dq + ((size_t)bh * Tq + t0) * k, k);
					if (dK) /* dK[0:nk] += scale dS^T Q[t0:t1] */
						cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, k, nq, scale, ds,
							    nk, Q, k, 1.0f, dK, k);
				}
			}
		}
		free(P);
		free(ds);
		free(sc);
		free(drop);
	}
	cpu_blas_serial_end(blas_threads);
}
