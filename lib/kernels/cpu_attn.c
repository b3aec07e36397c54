/*
 * cpu_attn.c - CPU backend (ops.h) of the attention path: the fused QKV
 * split with RoPE, the RoPE tables, and causal self-attention with grouped
 * K/V, document masks and attention dropout; forward beside backward.
 *
 * Attention runs per (batch, head) in blocks of CPU_QB query rows: a block
 * of queries [t0, t1) can only see keys [0, t1), so its score and PV
 * products (OpenBLAS sgemm, straight on the strided tensors, no copies)
 * skip the upper triangle the causal mask would throw away.
 */
#include "kernels/cpu.h"
#include "kernels/ops.h"
#include "base/error.h"
#include "base/xalloc.h"

#include <cblas.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>


/*
 * The attention sgemms run inside our OpenMP team, one call per thread. A
 * pthreads build of OpenBLAS would still split each large call over its own
 * threads as well, and 2 x 2 threads on 2 cores run at half speed (measured).
 * So for the duration ask it for one thread. An OpenMP build of OpenBLAS
 * does this by itself (and there openblas_set_num_threads would resize our
 * team), so it is left alone. The op table is driven from one thread, so
 * the temporary setting cannot leak into a concurrent call.
 */
int cpu_blas_serial_begin(void)
{
	if (openblas_get_parallel() != 1) /* 1: OPENBLAS_THREAD, the pthreads build */
		return 0;
	int n = openblas_get_num_threads();
	if (n > 1)
		openblas_set_num_threads(1);
	return n;
}

void cpu_blas_serial_end(int saved)
{
	if (saved > 1)
		openblas_set_num_threads(saved);
}

static void cpu_attn_check(int a, int g, int k, int rot)
{
	if (a <= 0 || g <= 0 || a % g != 0)
		BUG("attention: %d heads do not split into %d groups", a, g);
	if (rot < 0 || rot > k || rot % 2 != 0)
		BUG("attention: rotary dim %d must be even and at most the head dim %d", rot, k);
}

/* ---- RoPE ----
 * y = x cos + rotate(x) sin on the first rot channels; c, s are the table
 * rows of this position. Rotate-half: rotate([x1, x2]) = [-x2, x1] over the
 * two halves; interleaved: each pair (x[2i], x[2i+1]) -> (-x[2i+1], x[2i]).
 * Either way channel i0 pairs with i1 (i0 < i1). */
static inline void rope_pair(int i, int half, bool interleaved, int *i0, int *i1)
{
	*i0 = interleaved ? 2 * i : i;
	*i1 = interleaved ? 2 * i + 1 : i + half;
}

static inline void cpu_rope_forward(float *y, const float *x, const float *c, const float *s,
				    int rot, bool interleaved)
{
	int half = rot / 2;
	for (int i = 0; i < half; i++) {
		int a, b;
		rope_pair(i, half, interleaved, &a, &b);
		float xa = x[a], xb = x[b];
		y[a] = xa * c[a] - xb * s[a];
		y[b] = xb * c[b] + xa * s[b];
	}
}

/* The transpose of the map above: dx = R^T dy. */
static inline void cpu_rope_backward(float *dx, const float *dy, const float *c, const float *s,
				     int rot, bool interleaved)
{
	int half = rot / 2;
	for (int i = 0; i < half; i++) {
		int a, b;
		rope_pair(i, half, interleaved, &a, &b);
		float ya = dy[a], yb = dy[b];
		dx[a] = ya * c[a] + yb * s[b];
		dx[b] = yb * c[b] - ya * s[a];
	}
}

/*
 * torch's (and Megatron's) fp32 recipe, step by step:
 *   inv_freq = 1.0 / (base ** (arange(0, rot, 2, float32) / rot))
 *   freqs = outer(arange(T).float(), inv_freq); emb = cat(freqs, freqs)
 *   cos, sin = emb.cos(), emb.sin()
 */
void kops_rope_table(float *cos, float *sin, int T, int rot, float base)
{
	if (rot <= 0 || rot % 2 != 0)
		BUG("rope table: rotary dim %d must be positive and even", rot);
	int half = rot / 2;
	float *inv_freq = xmalloc((size_t)half * sizeof(float));
	for (int i = 0; i < half; i++)
		inv_freq[i] = 1.0f / powf(base, (float)(2 * i) / (float)rot);
	for (int t = 0; t < T; t++) {
		float *c = cos + (size_t)t * rot, *s = sin + (size_t)t * rot;
		for (int i = 0; i < half; i++) {
			float angle = (float)t * inv_freq[i];
			c[i] = c[i + half] = cosf(angle);
			s[i] = s[i + half] = sinf(angle);
		}
	}
	free(inv_freq);
}

/* ---- fused QKV split ----
 * Token row of qkv: for each group G, [m query heads | key | value], k
 * channels each (Megatron Core's linear_qkv layout, docs/checkpoint-format.md).
 * Piece j of group G goes to query head
 * G*m + j (j < m), the group's key (j = m) or its value (j = m + 1). */

void cpu_qkv_split_forward(float *q, float *kk, float *v, const float *qkv, const float *cos,
			   const float *sin, int B, int T, int a, int g, int k, int rot, bool interleaved)
{
	cpu_attn_check(a, g, k, rot);
	const int m = a / g;
	const size_t width = (size_t)(a + 2 * g) * k;
#pragma omp parallel for if ((size_t)B * T * width >= CPU_PAR_MIN)
	for (int bt = 0; bt < B * T; bt++) {
		const int b = bt / T, t = bt % T;
		const float *row = qkv + (size_t)bt * width;
		const float *c = rot ? cos + (size_t)t * rot : NULL, *s = rot ? sin + (size_t)t * rot : NULL;
		for (int G = 0; G < g; G++) {
			for (int j = 0; j < m + 2; j++) {
				const float *x = row + (size_t)(G * (m + 2) + j) * k;
				float *y;
				if (j < m)
					y = q + (((size_t)b * a + G * m + j) * T + t) * k;
				else if (j == m)
					y = kk + (((size_t)b * g + G) * T + t) * k;
				else
					y = v + (((size_t)b * g + G) * T + t) * k;
				int r = j <= m ? rot : 0; /* rotate queries and keys, not values */
				if (r)
					cpu_rope_forward(y, x, c, s, r, interleaved);
				memcpy(y + r, x + r, (size_t)(k - r) * sizeof(float));
			}
		}
	}
}

void cpu_qkv_split_backward(float *dqkv, const float *dq, const float *dk, const float *dv,
			    const float *cos, const float *sin, int B, int T, int a, int g, int k,
			    int rot, bool interleaved)
{
	cpu_attn_check(a, g, k, rot);
	const int m = a / g;
	const size_t width = (size_t)(a + 2 * g) * k;
#pragma omp parallel for if ((size_t)B * T * width >= CPU_PAR_MIN)
	for (int bt = 0; bt < B * T; bt++) {
		const int b = bt / T, t = bt % T;
		float *row = dqkv + (size_t)bt * width;
		const float *c = rot ? cos + (size_t)t * rot : NULL, *s = rot ? sin + (size_t)t * rot : NULL;
		for (int G = 0; G < g; G++) {
			for (int j = 0; j < m + 2; j++) {
				float *dx = row + (size_t)(G * (m + 2) + j) * k;
				const float *dy;
				if (j < m)
					dy = dq + (((size_t)b * a + G * m + j) * T + t) * k;
				else if (j == m)
					dy = dk + (((size_t)b * g + G) * T + t) * k;
				else
					dy = dv + (((size_t)b * g + G) * T + t) * k;
				int r = j <= m ? rot : 0;
				if (r)
					cpu_rope_backward(dx, dy, c, s, r, interleaved);
				memcpy(dx + r, dy + r, (size_t)(k - r) * sizeof(float));
			}
		}
	}
}

/* ---- attention ---- */

/*
 * Softmax of one row of scores in place. Query tq sees keys lo <= tk <= tq
 * (lo > 0 under a sliding window; and with doc, only those of its own
 * document; it always sees itself, so the row is never empty); every other
 * entry of the row, up to T, becomes 0, the probability backward relies on.
 * row points at key 0 of the row.
 */
static void cpu_softmax_row(float *row, int lo, int tq, int T, const int32_t *doc)
{
	const int32_t d = doc ? doc[tq] : 0;
	memset(row, 0, (size_t)lo * sizeof(float));
	row += lo;
	T -= lo;
	if (doc)
		doc += lo;
	const int n = tq - lo + 1;
	float mx = -INFINITY;
	double sum = 0.0;
	if (!doc) {
#pragma omp simd reduction(max : mx)
		for (int tk = 0; tk < n; tk++)
			mx = row[tk] > mx ? row[tk] : mx;
#pragma omp simd reduction(+ : sum)
		for (int tk = 0; tk < n; tk++) {
			float e = cpu_expf(row[tk] - mx);
			row[tk] = e;
			sum += e;
		}
	} else {
#pragma omp simd reduction(max : mx)
		for (int tk = 0; tk < n; tk++) {
			float s = cpu_selectf(doc[tk] == d, row[tk], -INFINITY);
			mx = s > mx ? s : mx;
		}
#pragma omp simd reduction(+ : sum)
		for (int tk = 0; tk < n; tk++) {
			float e = cpu_selectf(doc[tk] == d, cpu_expf(row[tk] - mx), 0.0f);
			row[tk] = e;
			sum += e;
		}
	}
	const float fsum = (float)sum;
#pragma omp simd
	for (int tk = 0; tk < n; tk++)
		row[tk] /= fsum;
	memset(row + n, 0, (size_t)(T - n) * sizeof(float));
}

/* Dropout counter of prob (head h, sample b, tq, tk = 0) (ops.h): head-major,
 * so a tensor-parallel rank's heads continue the numbering by an offset. */
static inline uint64_t cpu_attn_counter(uint64_t offset, int bh, int a, int B, int T, int tq)
{
	uint64_t b = (uint64_t)(bh / a), h = (uint64_t)(bh % a);
	return offset + ((h * (uint64_t)B + b) * (uint64_t)T + (uint64_t)tq) * (uint64_t)T;
}

void cpu_attention_forward(float *out, float *probs, const float *q, const float *kk,
			   const float *v, const int32_t *doc, int B, int T, int a, int g, int k,
			   float scale, int window, float dropout_p, uint64_t seed, uint64_t offset)
{
	cpu_attn_check(a, g, k, 0);
	const int m = a / g, nblk = (T + CPU_QB - 1) / CPU_QB;
	const int ntask = B * a * nblk;
	const size_t ldo = (size_t)a * k; /* out is [B, T, a*k] */
	const int blas_threads = cpu_blas_serial_begin();
#pragma omp parallel if (ntask > 1)
	{
		/* the dropped, rescaled probs of one block: what multiplies V */
		float *drop = dropout_p > 0.0f ? xmalloc((size_t)CPU_QB * T * sizeof(float)) : NULL;
#pragma omp for schedule(dynamic)
		for (int task = 0; task < ntask; task++) {
			const int bh = task / nblk, blk = task % nblk;
			const int b = bh / a, h = bh % a, G = h / m;
			const int t0 = blk * CPU_QB, t1 = t0 + CPU_QB < T ? t0 + CPU_QB : T;
			/* keys [k0, t1): a sliding window hides those before t0 - window */
			const int k0 = cpu_window_first(t0, window);
			const int nq = t1 - t0, nk = t1 - k0;
			const float *Q = q + ((size_t)bh * T + t0) * k;
			const float *K = kk + (((size_t)b * g + G) * T + k0) * k;
			const float *V = v + (((size_t)b * g + G) * T + k0) * k;
			float *P = probs + ((size_t)bh * T + t0) * T;
			/* scores[nq, nk] = scale * Q K^T, written into the probs rows at key k0 */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, k, scale, Q, k, K, k,
				    0.0f, P + k0, T);
			for (int r = 0; r < nq; r++)
				cpu_softmax_row(P + (size_t)r * T, cpu_window_first(t0 + r, window), t0 + r, T,
						doc ? doc + (size_t)b * T : NULL);
			const float *A = P + k0;
			int lda = T;
			if (drop) {
				for (int r = 0; r < nq; r++) {
					float *d = drop + (size_t)r * nk;
					const float *p = P + (size_t)r * T + k0;
					cpu_dropout_scales(d, (size_t)nk, dropout_p, seed,
							   cpu_attn_counter(offset, bh, a, B, T, t0 + r) + (uint64_t)k0);
#pragma omp simd
					for (int tk = 0; tk < nk; tk++)
						d[tk] *= p[tk];
				}
				A = drop;
				lda = nk;
			}
			/* out[b, t0:t1, h] = A[nq, nk] V[k0:t1] */
			cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, k, nk, 1.0f, A, lda, V, k,
				    0.0f, out + ((size_t)b * T + t0) * ldo + (size_t)h * k, (int)ldo);
		}
		free(drop);
	}
	cpu_blas_serial_end(blas_threads);
}

/*
 * With S = scale Q K^T, P = softmax(S), D = P * mask/(1-p), O = D V:
 *   dV += D^T dO,  dD = dO V^T,  dP = dD * mask/(1-p),
 *   dS = P * (dP - rowsum(P * dP)),  dQ = scale dS K,  dK += scale dS^T Q.
 * One task per (batch, K/V group) takes the group's m query heads in turn,
 * so the sums into dK and dV have one owner and a fixed order.
 */
void cpu_attention_backward(float *dq, float *dk, float *dv, const float *dout, const float *q,
			    const float *kk, const float *v, const float *probs, int B, int T,
			    int a, int g, int k, float scale, float dropout_p, uint64_t seed,
			    uint64_t offset)
{
	cpu_attn_check(a, g, k, 0);
	if (!dq && !dk && !dv)
		return;
	const int m = a / g, nblk = (T + CPU_QB - 1) / CPU_QB;
	const int ntask = B * g;
	const size_t ldo = (size_t)a * k;
	const int blas_threads = cpu_blas_serial_begin();
#pragma omp parallel if (ntask > 1)
	{
		const size_t blk_elems = (size_t)CPU_QB * T;
		float *ds = xmalloc(blk_elems * sizeof(float));
		float *sc = dropout_p > 0.0f ? xmalloc(blk_elems * sizeof(float)) : NULL;
		float *drop = dropout_p > 0.0f ? xmalloc(blk_elems * sizeof(float)) : NULL;
#pragma omp for schedule(dynamic)
		for (int task = 0; task < ntask; task++) {
			const int b = task / g, G = task % g;
			const size_t kv = ((size_t)b * g + G) * T * k;
			const float *K = kk + kv, *V = v + kv;
			float *dK = dk ? dk + kv : NULL, *dV = dv ? dv + kv : NULL;
			if (dK)
				memset(dK, 0, (size_t)T * k * sizeof(float));
			if (dV)
				memset(dV, 0, (size_t)T * k * sizeof(float));
			for (int h = G * m; h < (G + 1) * m; h++) {
				const int bh = b * a + h;
				for (int blk = 0; blk < nblk; blk++) {
					const int t0 = blk * CPU_QB, t1 = t0 + CPU_QB < T ? t0 + CPU_QB : T;
					const int nq = t1 - t0, nk = t1;
					const float *P = probs + ((size_t)bh * T + t0) * T;
					const float *Q = q + ((size_t)bh * T + t0) * k;
					const float *dO = dout + ((size_t)b * T + t0) * ldo + (size_t)h * k;
					/* D: the probs forward multiplied V by */
					const float *D = P;
					int ldd = T;
					if (sc) {
						for (int r = 0; r < nq; r++) {
							float *s = sc + (size_t)r * nk, *d = drop + (size_t)r * nk;
							const float *p = P + (size_t)r * T;
							cpu_dropout_scales(s, (size_t)nk, dropout_p, seed,
									   cpu_attn_counter(offset, bh, a, B, T, t0 + r));
#pragma omp simd
							for (int tk = 0; tk < nk; tk++)
								d[tk] = p[tk] * s[tk];
						}
						D = drop;
						ldd = nk;
					}
					if (dV) /* dV[0:nk] += D^T dO */
						cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, k, nq, 1.0f,
							    D, ldd, dO, (int)ldo, 1.0f, dV, k);
					if (!dq && !dK)
						continue;
					/* dD[nq, nk] = dO V^T */
					cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, k, 1.0f, dO,
						    (int)ldo, V, k, 0.0f, ds, nk);
					for (int r = 0; r < nq; r++) {
						float *d = ds + (size_t)r * nk;
						const float *p = P + (size_t)r * T;
						if (sc) {
							const float *s = sc + (size_t)r * nk;
#pragma omp simd
							for (int tk = 0; tk < nk; tk++)
								d[tk] *= s[tk];
						}
						double dot = 0.0;
#pragma omp simd reduction(+ : dot)
						for (int tk = 0; tk < nk; tk++)
							dot += p[tk] * d[tk];
						const float fdot = (float)dot;
						/* masked and future keys have p = 0, so dS = 0 there */
#pragma omp simd
						for (int tk = 0; tk < nk; tk++)
							d[tk] = p[tk] * (d[tk] - fdot);
					}
					if (dq) /* dQ[t0:t1] = scale dS K[0:nk] */
						cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, k, nk, scale,
							    ds, nk, K, k, 0.0f, dq + ((size_t)bh * T + t0) * k, k);
					if (dK) /* dK[0:nk] += scale dS^T Q[t0:t1] */
						cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, k, nq, scale,
							    ds, nk, Q, k, 1.0f, dK, k);
				}
			}
		}
		free(ds);
		free(sc);
		free(drop);
	}
	cpu_blas_serial_end(blas_threads);
}
