/*
 * attn.cu - the attention ops of the CUDA backend: attention_forward/backward
 * (causal, grouped K/V, document masks, probs[B,a,T,T] saved) and the
 * flash-style attention_block_forward/backward on global positions, with the
 * semantics of cpu_attn.c and cpu_attn_block.c (ops.h is the contract).
 *
 * Design. fp32 on the CUDA cores (tensor cores are a later step). A block
 * is 256 threads seen as 16 x 16: a thread owns rows ty + 16r (r < RT) and
 * columns tx + 16c (c < CT) of a score tile of 16RT x 16CT, and the same rows
 * of an output accumulator with KD/16 channels per thread (KD: the head dim
 * rounded up to 16, 32, 64, 128 or 256; padding channels are zero). Strided
 * ownership keeps the shared-memory reads conflict-free: tiles are row-major
 * [row][KD+4] (16-byte aligned rows whose 4-float skew spreads 16 rows over
 * all banks, so one float4 along the channels feeds 4 products). The 16
 * threads of a row are one half-warp, so a row's softmax max and sum are
 * 4-step shuffles, and a tile of probs (or dS) written by a warp is read back
 * only by that warp: a __syncwarp, not a block barrier, orders the two. Each
 * key tile costs two block barriers (before its loads overwrite the last
 * tile, after them); the dkv kernel's (longer) loop the same per query tile.
 *
 *  - Forward (both ops): one block per (sample, head, tile of BQ queries),
 *    looping over tiles of BK keys with K and V in shared memory; the online
 *    softmax keeps each row's max m and sum l and rescales the accumulator
 *    when m grows (flash attention 2). attention_forward must also write the
 *    normalised probs, which need the final m and l before the first one is
 *    written, so it makes two passes: statistics, then probs and P.V.
 *  - Backward: dQ needs a sum over keys, dK and dV sums over queries (and over
 *    the m = a/g query heads sharing a K/V group). Float atomics would make
 *    the sums' order, and so the bits, vary run to run; instead two kernels
 *    each own their outputs: the dq kernel (one block per query tile) loops
 *    over key tiles, the dkv kernel (one block per K/V group and key tile)
 *    loops over the group's heads and the query tiles, both in a fixed order.
 *    Both recompute dP = dO.V^T (and, for the block op, P from q.k and lse):
 *    cheaper than a round trip of T x T values through memory. The row sums
 *    Dr = rowsum(P * dP) are needed by both, so they are computed first
 *    (attention_backward: a pass of the dq kernel; block op: rowsum(dout*out),
 *    a small kernel) into the scratch buffer.
 *  - Causality: keys in a tile's future are skipped, never masked one by one:
 *    positions increase, so the keys a query tile sees are a prefix of the
 *    keys (binary search on the last query), and the queries a key tile is
 *    seen by a suffix (binary search on the first key). A sliding window
 *    (window >= 0) cuts the other end the same way: a query tile starts at
 *    the first key its first query's window holds, a key tile's queries end
 *    at the last one whose window holds its last key; inside the tiles that
 *    remain, a key is masked when it is more than window positions back
 *    (see()). attention_backward takes the window from the probs (0 outside).
 *  - Document masks (packed sequences) are masked one by one, never skipped:
 *    key_marks() reads each key's id at its global position, and a key of
 *    another document than the row's counts as unseen (as outside a window).
 *  - Dropout: each tile's keep flags are drawn into shared memory as bytes,
 *    16 consecutive keys of one query per thread; their Philox counters are
 *    consecutive within runs of consecutive key positions, so one Philox
 *    block (4 counters) serves up to 4 keys. Keep/scale follow dropout in
 *    ops.cu: uniform >= p keeps, survivors times keep_scale = 1/(1-p) in fp32,
 *    products with __fmul_rn so nvcc cannot fuse them into a later add.
 *
 * Everything is deterministic: no atomics, each output element is written by
 * one thread after sums in a fixed order. The sums run in another order than
 * the CPU's sgemms, and the softmax sums in float with rescaling (the CPU
 * takes exact maxima and sums in double), and expf is CUDA's: equal to about
 * 1e-6 relative. Head dims above 256 are not supported here (CUDA_BUG); the
 * positions of the block ops are trusted (the CPU checks their order).
 *
 * Registers: the forward and dq kernels are bounded to 128 (two blocks per
 * SM, which their shared memory allows too); the dkv kernel holds dK and dV
 * rows and takes what it needs (one block per SM at head dim 128). The
 * inner products are not unrolled across channel steps: unrolled, nvcc
 * hoists their loads and the kernels spill.
 */
#include "common.cuh"

#include <limits.h>

#define NT 256 /* threads per block: 16 x 16 */


/* Rows per thread (RT) and columns per thread (CT) of a score tile: 64 x 32
 * tiles, 32 x 32 for the widest heads so the accumulators fit in registers
 * and every kernel's tiles in A100's 163 KB of shared memory per block
 * (136 KB at most, the dq and dkv kernels at head dim 256). */
template <int KD> struct tiles {
	static constexpr int RT = KD > 128 ? 2 : 4;
	static constexpr int CT = 2;
};

/* ---- shared helpers ---- */

/* Channel of accumulator slot e of lane tx: two channels side by side, so
 * one 8-byte load of a V row feeds two slots (KD = 16: one each). */
template <int KD> static __device__ __forceinline__ int chan(int e, int tx)
{
	return KD >= 32 ? (e >> 1) * 32 + tx * 2 + (e & 1) : e * 16 + tx;
}

static __device__ __forceinline__ float f4(const float4 &v, int u)
{
	return u == 0 ? v.x : u == 1 ? v.y : u == 2 ? v.z : v.w;
}

/* Rows [0, n) of a matrix with k channels and row stride ld into a tile
 * [NR][KD+4]; zeros past row n and channel k, since padding rows and channels
 * are multiplied too and stale shared memory may hold NaNs. */
template <int KD, int NR>
static __device__ __forceinline__ void load_rows(float *dst, const float *src, size_t ld, int n, int k)
{
	for (int e = threadIdx.x; e < NR * KD; e += NT) {
		int row = e / KD, d = e % KD;
		dst[row * (KD + 4) + d] = row < n && d < k ? src[(size_t)row * ld + d] : 0.0f;
	}
}

/* acc[r][c] += A[ty+16r] . B[tx+16c] over KD channels (tiles [.][KD+4]). */
template <int KD, int RT, int CT>
static __device__ __forceinline__ void mma_abt(float (&acc)[RT][CT], const float *A, const float *Bm, int tx,
					       int ty)
{
	constexpr int LD = KD + 4;
#pragma unroll 1 /* unrolled, the hoisted loads cost the registers of a second block per SM */
	for (int d = 0; d < KD; d += 4) {
		float4 x[RT], y[CT];
#pragma unroll
		for (int r = 0; r < RT; r++)
			x[r] = *(const float4 *)(A + (ty + 16 * r) * LD + d);
#pragma unroll
		for (int c = 0; c < CT; c++)
			y[c] = *(const float4 *)(Bm + (tx + 16 * c) * LD + d);
#pragma unroll
		for (int r = 0; r < RT; r++)
#pragma unroll
			for (int c = 0; c < CT; c++) {
				acc[r][c] = fmaf(x[r].x, y[c].x, acc[r][c]);
				acc[r][c] = fmaf(x[r].y, y[c].y, acc[r][c]);
				acc[r][c] = fmaf(x[r].z, y[c].z, acc[r][c]);
				acc[r][c] = fmaf(x[r].w, y[c].w, acc[r][c]);
			}
	}
}

/* acc[r][e] += sum over j < NJ of P[ty+16r][j] V[j][chan(e)]: P has row
 * stride LP, V is a tile [NJ][KD+4]. */
template <int KD, int RT, int NJ>
static __device__ __forceinline__ void mma_pv(float (&acc)[RT][KD / 16], const float *P, int LP,
					      const float *V, int tx, int ty)
{
	constexpr int LD = KD + 4, NCH = KD / 16;
#pragma unroll 1 /* as in mma_abt */
	for (int j = 0; j < NJ; j += 4) {
		float4 p[RT];
#pragma unroll
		for (int r = 0; r < RT; r++)
			p[r] = *(const float4 *)(P + (ty + 16 * r) * LP + j);
#pragma unroll
		for (int u = 0; u < 4; u++) {
			const float *vr = V + (j + u) * LD;
			float w[NCH];
			if constexpr (KD >= 32) {
#pragma unroll
				for (int e = 0; e < NCH; e += 2) {
					float2 t = *(const float2 *)(vr + chan<KD>(e, tx));
					w[e] = t.x;
					w[e + 1] = t.y;
				}
			} else {
#pragma unroll
				for (int e = 0; e < NCH; e++)
					w[e] = vr[chan<KD>(e, tx)];
			}
#pragma unroll
			for (int r = 0; r < RT; r++) {
				const float pr = f4(p[r], u);
#pragma unroll
				for (int e = 0; e < NCH; e++)
					acc[r][e] = fmaf(pr, w[e], acc[r][e]);
			}
		}
	}
}

/* Max and sums over the 16 lanes of a row (a half-warp). Every lane gets
 * the same bits: at each step the two partners add the same two values. The
 * max ignores NaN as the CPU's "x > m ? x : m" does. */
static __device__ __forceinline__ float max16(float v)
{
	for (int o = 8; o > 0; o >>= 1) {
		float u = __shfl_xor_sync(0xffffffffu, v, o);
		v = u > v ? u : v;
	}
	return v;
}

static __device__ __forceinline__ float sum16(float v)
{
	for (int o = 8; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

static __device__ __forceinline__ double sum16d(double v)
{
	for (int o = 8; o > 0; o >>= 1)
		v += __shfl_xor_sync(0xffffffffu, v, o);
	return v;
}

/* How many of the increasing positions pos[0..n) are <= p. */
static __device__ __forceinline__ int count_le(const int32_t *pos, int n, int p)
{
	int lo = 0, hi = n;
	while (lo < hi) {
		int mid = lo + (hi - lo) / 2;
		if (pos[mid] <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Whether a query at position qp sees a key at kp: causal, and within the
 * sliding window (window < 0: none). Padding keys (kp = INT_MAX) and
 * padding queries (qp = -1) see nothing. */
static __device__ __forceinline__ bool see(int kp, int qp, int window)
{
	return kp <= qp && (window < 0 || kp >= qp - window);
}

/* The first of the increasing key positions pos[0..n) a query at position
 * p sees under the window (0 without one). */
static __device__ __forceinline__ int window_first(const int32_t *pos, int n, int p, int window)
{
	return window < 0 ? 0 : count_le(pos, n, p - window - 1);
}

/* Global position of query/key i: the list's entry, or i itself for
 * attention_forward/backward (pos NULL). */
static __device__ __forceinline__ int pos_at(const int32_t *pos, int i)
{
	return pos ? pos[i] : i;
}

/* What thread column tx needs of key tile [k0, k0 + nkt): each of its CT
 * keys' global position (INT_MAX past the tile's end, so nothing sees it)
 * and, when kd is not NULL, its document id D[position] (0 without a mask D). */
template <int CT>
static __device__ __forceinline__ void key_marks(int *kp, int *kd, const int32_t *kpos, const int32_t *D, int k0,
						 int nkt, int tx)
{
#pragma unroll
	for (int c = 0; c < CT; c++) {
		const int j = tx + 16 * c;
		kp[c] = j < nkt ? pos_at(kpos, k0 + j) : INT_MAX;
		if (kd)
			kd[c] = D && j < nkt ? D[pos_at(kpos, k0 + j)] : 0;
	}
}

/* ---- dropout keep flags ---- */

/* philox4 (common.cuh): the four words of one Philox block */

/*
 * Keep flags of a tile of probs: M[i * (NK+4) + j] = 1 when the prob of
 * query q0+i and key k0+j survives dropout, for i < nq, j < nk (0 past nk;
 * rows past nq are left alone). The counter is
 *   row0 + qpos * S + kpos,  row0 = offset + (h*B + b) * S * S
 * (ops.h), with positions i itself when the lists are NULL (S = T). A thread
 * takes 16 consecutive keys of one query and draws a Philox block only when
 * the counter leaves the last one.
 */
template <int NQ, int NK>
static __device__ __forceinline__ void drop_tile(uint8_t *M, const int32_t *qpos, const int32_t *kpos,
						 int q0, int nq, int k0, int nk, int S, uint64_t row0,
						 float p, uint64_t seed)
{
	constexpr int LM = NK + 4, SEGS = NK / 16;
	for (int it = threadIdx.x; it < NQ * SEGS; it += NT) {
		const int i = it / SEGS, j0 = (it % SEGS) * 16;
		if (i >= nq)
			continue;
		const uint64_t base = row0 + (uint64_t)pos_at(qpos, q0 + i) * (uint64_t)S;
		uint64_t cur = ~(uint64_t)0;
		uint4 w = make_uint4(0, 0, 0, 0);
		uint32_t *dst = (uint32_t *)(M + i * LM + j0);
#pragma unroll 1
		for (int j4 = 0; j4 < 4; j4++) {
			uint32_t packed = 0;
#pragma unroll 1
			for (int u = 0; u < 4; u++) {
				const int j = j0 + 4 * j4 + u;
				if (j >= nk)
					break;
				const uint64_t c = base + (uint64_t)pos_at(kpos, k0 + j);
				if (c >> 2 != cur) {
					cur = c >> 2;
					w = philox4(seed, cur);
				}
				const unsigned sel = (unsigned)(c & 3);
				const uint32_t word = sel == 0 ? w.x : sel == 1 ? w.y : sel == 2 ? w.z : w.w;
				const uint32_t keep = (float)(word >> 8) * 5.9604644775390625e-08f >= p;
				packed |= keep << (8 * u);
			}
			dst[j4] = packed;
		}
	}
}

/* The multiplier of a kept/dropped prob. */
static __device__ __forceinline__ float drop_mult(uint8_t keep, float keep_scale)
{
	return keep ? keep_scale : 0.0f;
}

/* ---- forward ---- */

/* shared memory of the forward kernels: Q tile, K tile, V tile, P tile, keep flags */
template <int KD> static size_t fwd_smem(void)
{
	constexpr int BQ = 16 * tiles<KD>::RT, BK = 16 * tiles<KD>::CT;
	return ((size_t)(BQ + 2 * BK) * (KD + 4) + (size_t)BQ * (BK + 4)) * sizeof(float) +
	       (size_t)BQ * (BK + 4);
}

/*
 * attention_block_forward: one block per (sample, head, query tile), in
 * reverse tile order so the tiles that see the most keys start first. Keys
 * [0, nk) are those the tile's last query sees (a prefix: positions
 * increase); per row, keys past its own position get score -inf.
 */
template <int KD>
__global__ void __launch_bounds__(NT, 2)
	attn_block_fwd_kernel(float *out, float *lse, const float *q, const float *kk, const float *v,
			      const int32_t *qpos, const int32_t *kpos, const int32_t *doc, int B, int Tq, int Tk,
			      int a, int g, int k, int S, float scale, int window, float p, float keep_scale,
			      uint64_t seed, uint64_t offset, int accumulate)
{
	constexpr int RT = tiles<KD>::RT, CT = tiles<KD>::CT, BQ = 16 * RT, BK = 16 * CT;
	constexpr int LD = KD + 4, LP = BK + 4, NCH = KD / 16;
	float *Qs = DYN_SMEM(float), *Ks = Qs + BQ * LD, *Vs = Ks + BK * LD, *Ps = Vs + BK * LD;
	uint8_t *Ms = (uint8_t *)(Ps + BQ * LP);
	const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
	const int ntile = (Tq + BQ - 1) / BQ;
	const int bh = blockIdx.x / ntile, tile = ntile - 1 - blockIdx.x % ntile;
	const int b = bh / a, h = bh % a, G = h / (a / g);
	const int q0 = tile * BQ, nq = Tq - q0 < BQ ? Tq - q0 : BQ;
	const size_t ldo = (size_t)a * k;
	float *O = out + ((size_t)b * Tq + q0) * ldo + (size_t)h * k;
	float *L = lse + (size_t)bh * Tq + q0;
	const int nk = count_le(kpos, Tk, qpos[q0 + nq - 1]);
	const int kb = window_first(kpos, nk, qpos[q0], window); /* keys before kb: behind every window */
	const int32_t *D = doc ? doc + (size_t)b * S : NULL;

	if (nk == kb) { /* every key is in the tile's future or behind its windows */
		if (!accumulate)
#pragma unroll
			for (int r = 0; r < RT; r++) {
				const int i = ty + 16 * r;
				if (i >= nq)
					continue;
#pragma unroll
				for (int e = 0; e < NCH; e++)
					if (chan<KD>(e, tx) < k)
						O[(size_t)i * ldo + chan<KD>(e, tx)] = 0.0f;
				if (tx == 0)
					L[i] = -INFINITY;
			}
		return;
	}

	int qp[RT], qd[RT];
#pragma unroll
	for (int r = 0; r < RT; r++) {
		const int i = ty + 16 * r;
		qp[r] = i < nq ? qpos[q0 + i] : -1; /* a padding row sees no key */
		qd[r] = D && i < nq ? D[qp[r]] : 0;
	}
	const float *Kg = kk + ((size_t)b * g + G) * Tk * k, *Vg = v + ((size_t)b * g + G) * Tk * k;
	load_rows<KD, BQ>(Qs, q + ((size_t)bh * Tq + q0) * k, k, nq, k);
	const bool drop = p > 0.0f;
	const uint64_t row0 = offset + (uint64_t)(h * B + b) * (uint64_t)S * (uint64_t)S;

	float m[RT], l[RT], acc[RT][NCH];
#pragma unroll
	for (int r = 0; r < RT; r++) {
		m[r] = -INFINITY;
		l[r] = 0.0f;
#pragma unroll
		for (int e = 0; e < NCH; e++)
			acc[r][e] = 0.0f;
	}
	for (int k0 = kb; k0 < nk; k0 += BK) {
		const int nkt = nk - k0 < BK ? nk - k0 : BK;
		__syncthreads(); /* the last tile's P.V is done with Ks, Vs, Ps, Ms */
		load_rows<KD, BK>(Ks, Kg + (size_t)k0 * k, k, nkt, k);
		load_rows<KD, BK>(Vs, Vg + (size_t)k0 * k, k, nkt, k);
		if (drop)
			drop_tile<BQ, BK>(Ms, qpos, kpos, q0, nq, k0, nkt, S, row0, p, seed);
		int kp[CT], kd[CT];
		key_marks<CT>(kp, kd, kpos, D, k0, nkt, tx);
		__syncthreads();
		float s[RT][CT] = {};
		mma_abt<KD, RT, CT>(s, Qs, Ks, tx, ty);
#pragma unroll
		for (int r = 0; r < RT; r++) {
			float mt = -INFINITY;
#pragma unroll
			for (int c = 0; c < CT; c++) {
				const bool vis = see(kp[c], qp[r], window) && kd[c] == qd[r];
				s[r][c] = vis ? __fmul_rn(s[r][c], scale) : -INFINITY;
				mt = s[r][c] > mt ? s[r][c] : mt;
			}
			mt = max16(mt);
			const float mn = m[r] > mt ? m[r] : mt;
			/* a row that has seen nothing yet keeps m = -inf: exp against 0 gives 0s, not NaNs */
			const float mu = mn == -INFINITY ? 0.0f : mn;
			const float alpha = expf(m[r] - mu);
			float ps = 0.0f;
#pragma unroll
			for (int c = 0; c < CT; c++) {
				float e = expf(s[r][c] - mu);
				ps += e;
				const int x = (ty + 16 * r) * LP + tx + 16 * c;
				if (drop)
					e = __fmul_rn(e, drop_mult(Ms[x], keep_scale));
				Ps[x] = e;
			}
			l[r] = l[r] * alpha + sum16(ps);
			m[r] = mn;
#pragma unroll
			for (int e = 0; e < NCH; e++)
				acc[r][e] *= alpha;
		}
		__syncwarp(); /* P rows are read by the warp that wrote them */
		mma_pv<KD, RT, BK>(acc, Ps, LP, Vs, tx, ty);
	}

	/* merge into the running state (cpu_attention_block_forward's rules) */
	float old[RT];
#pragma unroll
	for (int r = 0; r < RT; r++) {
		const int i = ty + 16 * r;
		old[r] = accumulate && i < nq ? L[i] : -INFINITY;
	}
	__syncwarp(); /* a row's 16 lanes (one warp) have all read its lse before lane 0 writes it */
#pragma unroll
	for (int r = 0; r < RT; r++) {
		const int i = ty + 16 * r;
		if (i >= nq)
			continue;
		float *o = O + (size_t)i * ldo;
		if (m[r] == -INFINITY) { /* no key of this block: out and lse stay, or 0 and -inf */
			if (!accumulate) {
#pragma unroll
				for (int e = 0; e < NCH; e++)
					if (chan<KD>(e, tx) < k)
						o[chan<KD>(e, tx)] = 0.0f;
				if (tx == 0)
					L[i] = -INFINITY;
			}
			continue;
		}
		const float blk = m[r] + logf(l[r]);
		if (old[r] == -INFINITY) { /* the row's first keys: plain softmax (old out ignored) */
#pragma unroll
			for (int e = 0; e < NCH; e++)
				if (chan<KD>(e, tx) < k)
					o[chan<KD>(e, tx)] = acc[r][e] / l[r];
			if (tx == 0)
				L[i] = blk;
		} else {
			const float hi = old[r] > blk ? old[r] : blk, lo = old[r] > blk ? blk : old[r];
			const float nl = hi + log1pf(expf(lo - hi));
			const float w = expf(blk - nl) / l[r], keep = expf(old[r] - nl);
#pragma unroll
			for (int e = 0; e < NCH; e++)
				if (chan<KD>(e, tx) < k)
					o[chan<KD>(e, tx)] = o[chan<KD>(e, tx)] * keep + acc[r][e] * w;
			if (tx == 0)
				L[i] = nl;
		}
	}
}

/*
 * attention_forward: as above on positions 0..T-1 (keys [0, q0+nq) for a
 * query tile), plus document masks and the probs. Pass 1 finds each row's
 * max and sum; pass 2 recomputes the scores (the same bits), writes
 * probs = exp(s - m) / l (0 where masked) and multiplies the dropped probs
 * into V. The probs past the tile's last query are zeroed at the end.
 */
template <int KD>
__global__ void __launch_bounds__(NT, 2)
	attn_fwd_kernel(float *out, float *probs, const float *q, const float *kk, const float *v,
			const int32_t *doc, int B, int T, int a, int g, int k, float scale, int window, float p,
			float keep_scale, uint64_t seed, uint64_t offset)
{
	constexpr int RT = tiles<KD>::RT, CT = tiles<KD>::CT, BQ = 16 * RT, BK = 16 * CT;
	constexpr int LD = KD + 4, LP = BK + 4, NCH = KD / 16;
	float *Qs = DYN_SMEM(float), *Ks = Qs + BQ * LD, *Vs = Ks + BK * LD, *Ps = Vs + BK * LD;
	uint8_t *Ms = (uint8_t *)(Ps + BQ * LP);
	const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
	const int ntile = (T + BQ - 1) / BQ;
	const int bh = blockIdx.x / ntile, tile = ntile - 1 - blockIdx.x % ntile;
	const int b = bh / a, h = bh % a, G = h / (a / g);
	const int q0 = tile * BQ, nq = T - q0 < BQ ? T - q0 : BQ, nk = q0 + nq;
	const int kb = window < 0 || q0 - window < 0 ? 0 : q0 - window; /* keys [kb, nk) */
	const size_t ldo = (size_t)a * k;
	const int32_t *D = doc ? doc + (size_t)b * T : NULL;
	float *P = probs + ((size_t)bh * T + q0) * T;

	int qp[RT], qd[RT];
#pragma unroll
	for (int r = 0; r < RT; r++) {
		const int i = ty + 16 * r;
		qp[r] = i < nq ? q0 + i : -1;
		qd[r] = D && i < nq ? D[q0 + i] : 0;
	}
	const float *Kg = kk + ((size_t)b * g + G) * T * k, *Vg = v + ((size_t)b * g + G) * T * k;
	load_rows<KD, BQ>(Qs, q + ((size_t)bh * T + q0) * k, k, nq, k);
	const bool drop = p > 0.0f;
	const uint64_t row0 = offset + (uint64_t)(h * B + b) * (uint64_t)T * (uint64_t)T;

	float m[RT], l[RT];
#pragma unroll
	for (int r = 0; r < RT; r++) {
		m[r] = -INFINITY;
		l[r] = 0.0f;
	}
	/* pass 1: row max and sum (every real row sees itself: m finite, l >= 1) */
	for (int k0 = kb; k0 < nk; k0 += BK) {
		const int nkt = nk - k0 < BK ? nk - k0 : BK;
		__syncthreads();
		load_rows<KD, BK>(Ks, Kg + (size_t)k0 * k, k, nkt, k);
		int kp[CT], kd[CT];
		key_marks<CT>(kp, kd, NULL, D, k0, nkt, tx);
		__syncthreads();
		float s[RT][CT] = {};
		mma_abt<KD, RT, CT>(s, Qs, Ks, tx, ty);
#pragma unroll
		for (int r = 0; r < RT; r++) {
			float mt = -INFINITY;
#pragma unroll
			for (int c = 0; c < CT; c++) {
				const bool vis = see(kp[c], qp[r], window) && kd[c] == qd[r];
				s[r][c] = vis ? __fmul_rn(s[r][c], scale) : -INFINITY;
				mt = s[r][c] > mt ? s[r][c] : mt;
			}
			mt = max16(mt);
			const float mn = m[r] > mt ? m[r] : mt;
			const float mu = mn == -INFINITY ? 0.0f : mn;
			float ps = 0.0f;
#pragma unroll
			for (int c = 0; c < CT; c++)
				ps += expf(s[r][c] - mu);
			l[r] = l[r] * expf(m[r] - mu) + sum16(ps);
			m[r] = mn;
		}
	}

	/* pass 2: probs, and out = dropped probs . V */
	float acc[RT][NCH];
#pragma unroll
	for (int r = 0; r < RT; r++)
#pragma unroll
		for (int e = 0; e < NCH; e++)
			acc[r][e] = 0.0f;
	for (int k0 = kb; k0 < nk; k0 += BK) {
		const int nkt = nk - k0 < BK ? nk - k0 : BK;
		__syncthreads();
		load_rows<KD, BK>(Ks, Kg + (size_t)k0 * k, k, nkt, k);
		load_rows<KD, BK>(Vs, Vg + (size_t)k0 * k, k, nkt, k);
		if (drop)
			drop_tile<BQ, BK>(Ms, NULL, NULL, q0, nq, k0, nkt, T, row0, p, seed);
		int kp[CT], kd[CT];
		key_marks<CT>(kp, kd, NULL, D, k0, nkt, tx);
		__syncthreads();
		float s[RT][CT] = {};
		mma_abt<KD, RT, CT>(s, Qs, Ks, tx, ty);
#pragma unroll
		for (int r = 0; r < RT; r++) {
			const int i = ty + 16 * r;
#pragma unroll
			for (int c = 0; c < CT; c++) {
				const int j = tx + 16 * c;
				const bool vis = see(kp[c], qp[r], window) && kd[c] == qd[r];
				float e = vis ? expf(__fmul_rn(s[r][c], scale) - m[r]) / l[r] : 0.0f;
				if (i < nq && j < nkt)
					P[(size_t)i * T + k0 + j] = e;
				if (drop)
					e = __fmul_rn(e, drop_mult(Ms[i * LP + j], keep_scale));
				Ps[i * LP + j] = e;
			}
		}
		__syncwarp(); /* P rows are read by the warp that wrote them */
		mma_pv<KD, RT, BK>(acc, Ps, LP, Vs, tx, ty);
	}
	for (int i = ty; i < nq; i += 16) { /* keys past the tile's last query, and behind its windows */
		for (int j = nk + tx; j < T; j += 16)
			P[(size_t)i * T + j] = 0.0f;
		for (int j = tx; j < kb; j += 16)
			P[(size_t)i * T + j] = 0.0f;
	}
#pragma unroll
	for (int r = 0; r < RT; r++) {
		const int i = ty + 16 * r;
		if (i >= nq)
			continue;
		float *o = out + ((size_t)b * T + q0 + i) * ldo + (size_t)h * k;
#pragma unroll
		for (int e = 0; e < NCH; e++)
			if (chan<KD>(e, tx) < k)
				o[chan<KD>(e, tx)] = acc[r][e];
	}
}

/* ---- backward ----
 * With P the probs, M the dropout multipliers, D = P * M, O = D V:
 *   dV = D^T dO,  dP = (dO V^T) * M,  dS = P * (dP - Dr),  Dr = rowsum(P * dP),
 *   dQ = scale dS K,  dK = scale dS^T Q.
 * FULL (attention_backward): P read from probs, positions 0..T-1, Dr from
 * the probs (the dq kernel's first pass), grads overwritten. Otherwise
 * (attention_block_backward): P = exp(scale q.k - lse) recomputed, Dr =
 * rowsum(dout * out) (attn_rowdot_kernel), grads added to. */

/* Dr of the block op: one warp per row of out, in double as the CPU. A row
 * that sees no key of the block is skipped: the other kernels read its Dr
 * only for the keys it sees, so a block in the future reads nothing. */
__global__ void attn_rowdot_kernel(float *dr, const float *dout, const float *out, const int32_t *qpos,
				   const int32_t *kpos, int B, int Tq, int a, int k)
{
	const size_t row = (size_t)blockIdx.x * (NT / WARP) + threadIdx.x / WARP; /* (b, tq, h) */
	const int lane = threadIdx.x % WARP;
	if (row >= (size_t)B * Tq * a)
		return; /* the whole warp: row is the warp's */
	const size_t h = row % a, bt = row / a, b = bt / Tq, tq = bt % Tq;
	if (kpos[0] > qpos[tq])
		return;
	const float *x = dout + row * k, *y = out + row * k;
	double s = 0.0;
	for (int i = lane; i < k; i += WARP)
		s += (double)x[i] * y[i];
	s = warp_sumd(s);
	if (lane == 0)
		dr[(b * a + h) * Tq + tq] = (float)s;
}

/* shared memory of the dq kernel: Q, dO (the block's), K, V (a key tile), dS tile, keep flags */
template <int KD> static size_t dq_smem(void)
{
	constexpr int BQ = 16 * tiles<KD>::RT, BK = 16 * tiles<KD>::CT;
	return ((size_t)(2 * BQ + 2 * BK) * (KD + 4) + (size_t)BQ * (BK + 4)) * sizeof(float) +
	       (size_t)BQ * (BK + 4);
}

/*
 * dq kernel: one block per (sample, head, query tile), reverse tile order;
 * loops over the key tiles the tile sees, accumulating dS K. FULL: a first
 * pass over the same tiles sums Dr = rowsum(P * dP) (in double, as the CPU)
 * and stores it for the dkv kernel; want_dq = 0 stops after it.
 */
template <int KD, bool FULL>
__global__ void __launch_bounds__(NT, 2)
	attn_dq_kernel(float *dq, float *dr, const float *dout, const float *q, const float *kk, const float *v,
		       const float *probs, const float *lse, const int32_t *qpos, const int32_t *kpos,
		       const int32_t *doc, int B, int Tq, int Tk, int a, int g, int k, int S, float scale, int window,
		       float p, float keep_scale, uint64_t seed, uint64_t offset, int want_dq)
{
	constexpr int RT = tiles<KD>::RT, CT = tiles<KD>::CT, BQ = 16 * RT, BK = 16 * CT;
	constexpr int LD = KD + 4, LP = BK + 4, NCH = KD / 16;
	float *Qs = DYN_SMEM(float), *dOs = Qs + BQ * LD, *Ks = dOs + BQ * LD, *Vs = Ks + BK * LD;
	float *dSs = Vs + BK * LD;
	uint8_t *Ms = (uint8_t *)(dSs + BQ * LP);
	const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
	const int ntile = (Tq + BQ - 1) / BQ;
	const int bh = blockIdx.x / ntile, tile = ntile - 1 - blockIdx.x % ntile;
	const int b = bh / a, h = bh % a, G = h / (a / g);
	const int q0 = tile * BQ, nq = Tq - q0 < BQ ? Tq - q0 : BQ;
	const size_t ldo = (size_t)a * k;
	const int nk = FULL ? q0 + nq : count_le(kpos, Tk, qpos[q0 + nq - 1]);
	/* FULL takes the window from the probs (0 outside it) */
	const int kb = FULL ? 0 : window_first(kpos, nk, qpos[q0], window);
	if (nk == kb)
		return; /* block op: nothing to add */
	const int32_t *D = doc ? doc + (size_t)b * S : NULL; /* FULL: none (the probs hold the mask) */

	int qp[RT], qd[RT];
#pragma unroll
	for (int r = 0; r < RT; r++) {
		const int i = ty + 16 * r;
		qp[r] = i < nq ? pos_at(qpos, q0 + i) : -1;
		qd[r] = D && i < nq ? D[qp[r]] : 0;
	}
	const float *Kg = kk + ((size_t)b * g + G) * Tk * k, *Vg = v + ((size_t)b * g + G) * Tk * k;
	const float *Pg = FULL ? probs + ((size_t)bh * Tq + q0) * Tk : NULL;
	load_rows<KD, BQ>(dOs, dout + ((size_t)b * Tq + q0) * ldo + (size_t)h * k, ldo, nq, k);
	if (!FULL)
		load_rows<KD, BQ>(Qs, q + ((size_t)bh * Tq + q0) * k, k, nq, k);
	const bool drop = p > 0.0f;
	const uint64_t row0 = offset + (uint64_t)(h * B + b) * (uint64_t)S * (uint64_t)S;

	float drr[RT], lr[RT];
	if (FULL) {
		double part[RT];
#pragma unroll
		for (int r = 0; r < RT; r++)
			part[r] = 0.0;
		for (int k0 = 0; k0 < nk; k0 += BK) {
			const int nkt = nk - k0 < BK ? nk - k0 : BK;
			__syncthreads();
			load_rows<KD, BK>(Vs, Vg + (size_t)k0 * k, k, nkt, k);
			if (drop)
				drop_tile<BQ, BK>(Ms, NULL, NULL, q0, nq, k0, nkt, S, row0, p, seed);
			__syncthreads();
			float dp[RT][CT] = {};
			mma_abt<KD, RT, CT>(dp, dOs, Vs, tx, ty);
#pragma unroll
			for (int r = 0; r < RT; r++) {
				const int i = ty + 16 * r;
#pragma unroll
				for (int c = 0; c < CT; c++) {
					const int j = tx + 16 * c;
					if (k0 + j > qp[r] || j >= nkt) /* also the padding rows (qp = -1) */
						continue;
					float d = dp[r][c];
					if (drop)
						d = __fmul_rn(d, drop_mult(Ms[i * LP + j], keep_scale));
					part[r] += (double)(Pg[(size_t)i * Tk + k0 + j] * d);
				}
			}
		}
#pragma unroll
		for (int r = 0; r < RT; r++) {
			const int i = ty + 16 * r;
			drr[r] = (float)sum16d(part[r]);
			lr[r] = 0.0f;
			if (tx == 0 && i < nq)
				dr[(size_t)bh * Tq + q0 + i] = drr[r];
		}
		if (!want_dq)
			return;
	} else {
#pragma unroll
		for (int r = 0; r < RT; r++) {
			const int i = ty + 16 * r;
			drr[r] = i < nq ? dr[(size_t)bh * Tq + q0 + i] : 0.0f;
			lr[r] = i < nq ? lse[(size_t)bh * Tq + q0 + i] : 0.0f;
		}
	}

	float acc[RT][NCH];
#pragma unroll
	for (int r = 0; r < RT; r++)
#pragma unroll
		for (int e = 0; e < NCH; e++)
			acc[r][e] = 0.0f;
	for (int k0 = kb; k0 < nk; k0 += BK) {
		const int nkt = nk - k0 < BK ? nk - k0 : BK;
		__syncthreads(); /* the last tile's dS K is done with Ks, dSs; Vs, Ms are free too */
		load_rows<KD, BK>(Ks, Kg + (size_t)k0 * k, k, nkt, k);
		load_rows<KD, BK>(Vs, Vg + (size_t)k0 * k, k, nkt, k);
		if (drop)
			drop_tile<BQ, BK>(Ms, qpos, kpos, q0, nq, k0, nkt, S, row0, p, seed);
		int kp[CT], kd[CT];
		key_marks<CT>(kp, kd, kpos, D, k0, nkt, tx);
		__syncthreads();
		float dp[RT][CT] = {}, sc[RT][CT] = {};
		mma_abt<KD, RT, CT>(dp, dOs, Vs, tx, ty);
		if (!FULL)
			mma_abt<KD, RT, CT>(sc, Qs, Ks, tx, ty);
#pragma unroll
		for (int r = 0; r < RT; r++) {
			const int i = ty + 16 * r;
#pragma unroll
			for (int c = 0; c < CT; c++) {
				const int j = tx + 16 * c;
				float ds = 0.0f;
				if (see(kp[c], qp[r], FULL ? -1 : window) && kd[c] == qd[r]) {
					const float pr = FULL ? Pg[(size_t)i * Tk + k0 + j]
							      : expf(__fmul_rn(sc[r][c], scale) - lr[r]);
					float d = dp[r][c];
					if (drop)
						d = __fmul_rn(d, drop_mult(Ms[i * LP + j], keep_scale));
					ds = pr * (d - drr[r]);
				}
				dSs[i * LP + j] = ds;
			}
		}
		__syncwarp(); /* dS rows are read by the warp that wrote them */
		mma_pv<KD, RT, BK>(acc, dSs, LP, Ks, tx, ty);
	}
#pragma unroll
	for (int r = 0; r < RT; r++) {
		const int i = ty + 16 * r;
		if (i >= nq)
			continue;
		float *o = dq + ((size_t)bh * Tq + q0 + i) * k;
#pragma unroll
		for (int e = 0; e < NCH; e++) {
			const int ch = chan<KD>(e, tx);
			if (ch < k)
				o[ch] = FULL ? scale * acc[r][e] : o[ch] + scale * acc[r][e];
		}
	}
}

/* shared memory of the dkv kernel: V, (block op) K of the key tile; Q, dO of
 * a query tile; the D^T / dS^T tile; (FULL) the probs tile; keep flags */
template <int KD, bool FULL> static size_t dkv_smem(void)
{
	constexpr int BK = 16 * tiles<KD>::RT, BQ = 16 * tiles<KD>::CT;
	size_t f = (size_t)(BK + 2 * BQ) * (KD + 4) + (size_t)BK * (BQ + 4);
	f += FULL ? (size_t)BQ * (BK + 1) : (size_t)BK * (KD + 4);
	return f * sizeof(float) + (size_t)BQ * (BK + 4);
}

/*
 * dkv kernel: one block per (sample, K/V group, key tile); the roles of the
 * tile's rows and columns swap (rows: keys ty+16r, columns: queries tx+16c)
 * so the block owns dK and dV rows. It loops over the group's m heads and,
 * for each, over the query tiles from the first one that sees the key tile
 * (a suffix) to the end: one owner and a fixed order for every sum. The keep
 * flags are drawn in (query, key) order, as the counters run along keys.
 */
template <int KD, bool FULL>
__global__ void __launch_bounds__(NT, 1)
	attn_dkv_kernel(float *dk, float *dv, const float *dout, const float *q, const float *kk, const float *v,
			const float *probs, const float *lse, const float *dr, const int32_t *qpos, const int32_t *kpos,
			const int32_t *doc, int B, int Tq, int Tk, int a, int g, int k, int S, float scale, int window,
			float p, float keep_scale, uint64_t seed, uint64_t offset)
{
	constexpr int RT = tiles<KD>::RT, CT = tiles<KD>::CT, BK = 16 * RT, BQ = 16 * CT;
	constexpr int LD = KD + 4, LT = BQ + 4, LM = BK + 4, LG = BK + 1, NCH = KD / 16;
	float *Vs = DYN_SMEM(float), *Qs = Vs + BK * LD, *dOs = Qs + BQ * LD, *Ts = dOs + BQ * LD;
	float *Xs = Ts + BK * LT; /* K tile (block op) or probs tile [BQ][BK+1] (FULL) */
	uint8_t *Ms = (uint8_t *)(Xs + (FULL ? BQ * LG : BK * LD));
	const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
	const int ntk = (Tk + BK - 1) / BK, ntq = (Tq + BQ - 1) / BQ, m = a / g;
	const int kt = blockIdx.x % ntk, bg = blockIdx.x / ntk, b = bg / g, G = bg % g;
	const int k0 = kt * BK, nkt = Tk - k0 < BK ? Tk - k0 : BK;
	const size_t ldo = (size_t)a * k;
	const bool want_dk = dk != NULL, want_dv = dv != NULL, drop = p > 0.0f;
	/* the first query that sees the tile's first key */
	const int first = FULL ? k0 : count_le(qpos, Tq, kpos[k0] - 1);
	/* past the last query whose window holds the tile's last key (FULL: the probs say) */
	const int last = FULL || window < 0 ? Tq : count_le(qpos, Tq, kpos[k0 + nkt - 1] + window);
	if (first >= last)
		return; /* block op: the tile is in every query's future or behind its window */
	if (FULL)
		window = -1;
	const size_t kv = ((size_t)b * g + G) * Tk + k0;
	const int32_t *D = doc ? doc + (size_t)b * S : NULL; /* FULL: none (the probs hold the mask) */

	int kp[RT], kd[RT];
#pragma unroll
	for (int r = 0; r < RT; r++) {
		const int i = ty + 16 * r;
		kp[r] = i < nkt ? pos_at(kpos, k0 + i) : INT_MAX; /* a padding row is seen by none */
		kd[r] = D && i < nkt ? D[kp[r]] : 0;
	}
	if (!FULL)
		load_rows<KD, BK>(Xs, kk + kv * k, k, nkt, k);
	if (want_dk)
		load_rows<KD, BK>(Vs, v + kv * k, k, nkt, k);

	float dka[RT][NCH], dva[RT][NCH];
#pragma unroll
	for (int r = 0; r < RT; r++)
#pragma unroll
		for (int e = 0; e < NCH; e++) {
			dka[r][e] = 0.0f;
			dva[r][e] = 0.0f;
		}
	for (int h = G * m; h < (G + 1) * m; h++) {
		const int bh = b * a + h;
		const uint64_t row0 = offset + (uint64_t)(h * B + b) * (uint64_t)S * (uint64_t)S;
		for (int qt = first / BQ; qt < ntq && qt * BQ < last; qt++) {
			const int j0 = qt * BQ, nqt = Tq - j0 < BQ ? Tq - j0 : BQ;
			__syncthreads(); /* the last query tile's products are done with every tile */
			if (want_dk || !FULL)
				load_rows<KD, BQ>(Qs, q + ((size_t)bh * Tq + j0) * k, k, nqt, k);
			const float *dOg = dout + ((size_t)b * Tq + j0) * ldo + (size_t)h * k;
			load_rows<KD, BQ>(dOs, dOg, ldo, nqt, k);
			if (drop)
				drop_tile<BQ, BK>(Ms, qpos, kpos, j0, nqt, k0, nkt, S, row0, p, seed);
			if (FULL) { /* probs[j0.., k0..]: coalesced along keys, read across below */
				const float *Pg = probs + ((size_t)bh * Tq + j0) * Tk + k0;
				for (int e = threadIdx.x; e < BQ * BK; e += NT) {
					const int i = e / BK, j = e % BK;
					Xs[i * LG + j] = i < nqt && j < nkt ? Pg[(size_t)i * Tk + j] : 0.0f;
				}
			}
			int qp[CT], qd[CT];
			float lq[CT], drc[CT];
#pragma unroll
			for (int c = 0; c < CT; c++) {
				const int j = tx + 16 * c;
				qp[c] = j < nqt ? pos_at(qpos, j0 + j) : -1;
				qd[c] = D && j < nqt ? D[qp[c]] : 0;
				lq[c] = !FULL && j < nqt ? lse[(size_t)bh * Tq + j0 + j] : 0.0f;
				drc[c] = want_dk && j < nqt ? dr[(size_t)bh * Tq + j0 + j] : 0.0f;
			}
			__syncthreads();
			float pt[RT][CT] = {};
			if (!FULL)
				mma_abt<KD, RT, CT>(pt, Xs, Qs, tx, ty);
#pragma unroll
			for (int r = 0; r < RT; r++)
#pragma unroll
				for (int c = 0; c < CT; c++) {
					const bool vis = see(kp[r], qp[c], window) && kd[r] == qd[c];
					if (FULL)
						pt[r][c] = vis ? Xs[(tx + 16 * c) * LG + ty + 16 * r] : 0.0f;
					else /* exp(scale q.k - lse): the final probs */
						pt[r][c] = vis ? expf(__fmul_rn(pt[r][c], scale) - lq[c])
							       : 0.0f;
				}
			float mu[RT][CT]; /* the flags are in (query, key) order */
#pragma unroll
			for (int r = 0; r < RT; r++)
#pragma unroll
				for (int c = 0; c < CT; c++) {
					const uint8_t f = drop ? Ms[(tx + 16 * c) * LM + ty + 16 * r] : 1;
					mu[r][c] = drop ? drop_mult(f, keep_scale) : 1.0f;
				}
			if (want_dv) {
#pragma unroll
				for (int r = 0; r < RT; r++)
#pragma unroll
					for (int c = 0; c < CT; c++)
						Ts[(ty + 16 * r) * LT + tx + 16 * c] =
							drop ? __fmul_rn(pt[r][c], mu[r][c]) : pt[r][c];
				__syncwarp(); /* Ts rows are read by the warp that wrote them */
				mma_pv<KD, RT, BQ>(dva, Ts, LT, dOs, tx, ty);
			}
			if (want_dk) {
				float dp[RT][CT] = {};
				mma_abt<KD, RT, CT>(dp, Vs, dOs, tx, ty);
				__syncwarp(); /* the warp's dV products are done with its Ts rows */
#pragma unroll
				for (int r = 0; r < RT; r++)
#pragma unroll
					for (int c = 0; c < CT; c++) {
						float d = drop ? __fmul_rn(dp[r][c], mu[r][c]) : dp[r][c];
						Ts[(ty + 16 * r) * LT + tx + 16 * c] =
							see(kp[r], qp[c], window) && kd[r] == qd[c]
								? pt[r][c] * (d - drc[c])
								: 0.0f;
					}
				__syncwarp();
				mma_pv<KD, RT, BQ>(dka, Ts, LT, Qs, tx, ty);
			}
		}
	}
#pragma unroll
	for (int r = 0; r < RT; r++) {
		const int i = ty + 16 * r;
		if (i >= nkt)
			continue;
#pragma unroll
		for (int e = 0; e < NCH; e++) {
			const int ch = chan<KD>(e, tx);
			if (ch >= k)
				continue;
			const size_t x = (kv + i) * k + ch;
			if (want_dk)
				dk[x] = FULL ? scale * dka[r][e] : dk[x] + scale * dka[r][e];
			if (want_dv)
				dv[x] = FULL ? dva[r][e] : dv[x] + dva[r][e];
		}
	}
}

/* ---- host side ---- */

static void attn_check(int a, int g, int k)
{
	if (a <= 0 || g <= 0 || a % g != 0)
		CUDA_BUG("attention: heads do not split into groups");
	if (k <= 0 || k > 256)
		CUDA_BUG("attention: the CUDA kernels take head dims 1..256");
}

static int head_pad(int k)
{
	return k <= 16 ? 16 : k <= 32 ? 32 : k <= 64 ? 64 : k <= 128 ? 128 : 256;
}

template <int KD>
static void fwd_launch(float *out, float *probs, const float *q, const float *kk, const float *v,
		       const int32_t *doc, int B, int T, int a, int g, int k, float scale, int window, float p,
		       uint64_t seed, uint64_t offset)
{
	static bool done;
	const size_t smem = fwd_smem<KD>();
	smem_opt_in(attn_fwd_kernel<KD>, smem, &done);
	const unsigned grid = grid_1d((size_t)B * a, T, 16 * tiles<KD>::RT);
	launch<attn_fwd_kernel<KD>>(grid, NT, smem, out, probs, q, kk, v, doc, B, T, a, g, k, scale, window, p,
					       keep_scale_of(p), seed, offset);
	KERNEL_CHECK();
}

static void cuda_attention_forward(float *out, float *probs, const float *q, const float *kk,
				   const float *v, const int32_t *doc, int B, int T, int a, int g, int k,
				   float scale, int window, float dropout_p, uint64_t seed, uint64_t offset)
{
	attn_check(a, g, k);
	if (B <= 0 || T <= 0)
		return;
#define F_ARGS out, probs, q, kk, v, doc, B, T, a, g, k, scale, window, dropout_p, seed, offset
	switch (head_pad(k)) {
	case 16: fwd_launch<16>(F_ARGS); break;
	case 32: fwd_launch<32>(F_ARGS); break;
	case 64: fwd_launch<64>(F_ARGS); break;
	case 128: fwd_launch<128>(F_ARGS); break;
	default: fwd_launch<256>(F_ARGS); break;
	}
#undef F_ARGS
}

/* Both backward ops: the dq kernel (and/or its Dr pass), then the dkv kernel.
 * FULL: dr is filled by the dq kernel; otherwise it holds rowsum(dout*out). */
template <int KD, bool FULL>
static void bwd_launch(float *dq, float *dk, float *dv, float *dr, const float *dout, const float *q, const float *kk,
		       const float *v, const float *probs, const float *lse, const int32_t *qpos, const int32_t *kpos,
		       const int32_t *doc, int B, int Tq, int Tk, int a, int g, int k, int S, float scale, int window,
		       float p, uint64_t seed, uint64_t offset)
{
	static bool done_q, done_kv;
	const float ks = keep_scale_of(p);
	if (dq || (FULL && dk)) {
		const size_t smem = dq_smem<KD>();
		smem_opt_in(attn_dq_kernel<KD, FULL>, smem, &done_q);
		const unsigned grid = grid_1d((size_t)B * a, Tq, 16 * tiles<KD>::RT);
		launch<attn_dq_kernel<KD, FULL>>(grid, NT, smem, dq, dr, dout, q, kk, v, probs, lse, qpos, kpos, doc, B,
						 Tq, Tk, a, g, k, S, scale, window, p, ks, seed, offset, dq != NULL);
		KERNEL_CHECK();
	}
	if (dk || dv) {
		const size_t smem = dkv_smem<KD, FULL>();
		smem_opt_in(attn_dkv_kernel<KD, FULL>, smem, &done_kv);
		const unsigned grid = grid_1d((size_t)B * g, Tk, 16 * tiles<KD>::RT);
		launch<attn_dkv_kernel<KD, FULL>>(grid, NT, smem, dk, dv, dout, q, kk, v, probs, lse, dr, qpos, kpos,
						  doc, B, Tq, Tk, a, g, k, S, scale, window, p, ks, seed, offset);
		KERNEL_CHECK();
	}
}

#define BWD_DISPATCH(FULL, ...)                                                                  \
	switch (head_pad(k)) {                                                                   \
	case 16: bwd_launch<16, FULL>(__VA_ARGS__); break;                                       \
	case 32: bwd_launch<32, FULL>(__VA_ARGS__); break;                                       \
	case 64: bwd_launch<64, FULL>(__VA_ARGS__); break;                                       \
	case 128: bwd_launch<128, FULL>(__VA_ARGS__); break;                                     \
	default: bwd_launch<256, FULL>(__VA_ARGS__); break;                                      \
	}

static void cuda_attention_backward(float *dq, float *dk, float *dv, const float *dout,
				    const float *q, const float *kk, const float *v, const float *probs,
				    int B, int T, int a, int g, int k, float scale, float dropout_p,
				    uint64_t seed, uint64_t offset)
{
	attn_check(a, g, k);
	if ((!dq && !dk && !dv) || B <= 0 || T <= 0)
		return;
	float *dr = (float *)scratch_alloc((size_t)B * a * T * sizeof(float));
	BWD_DISPATCH(true, dq, dk, dv, dr, dout, q, kk, v, probs, NULL, NULL, NULL, NULL, B, T, T, a, g, k, T,
		     scale, -1, dropout_p, seed, offset);
	scratch_free(dr);
}

template <int KD>
static void block_fwd_launch(float *out, float *lse, const float *q, const float *kk, const float *v,
			     const int32_t *qpos, const int32_t *kpos, const int32_t *doc, int B, int Tq, int Tk, int a,
			     int g, int k, int S, float scale, int window, float p, uint64_t seed, uint64_t offset,
			     int accumulate)
{
	static bool done;
	const size_t smem = fwd_smem<KD>();
	smem_opt_in(attn_block_fwd_kernel<KD>, smem, &done);
	const unsigned grid = grid_1d((size_t)B * a, Tq, 16 * tiles<KD>::RT);
	launch<attn_block_fwd_kernel<KD>>(grid, NT, smem, out, lse, q, kk, v, qpos, kpos, doc, B, Tq, Tk, a, g, k, S,
					  scale, window, p, keep_scale_of(p), seed, offset, accumulate);
	KERNEL_CHECK();
}

void cuda_attention_block_forward_f32(float *out, float *lse, const float *q, const float *kk, const float *v,
				      const int32_t *qpos, const int32_t *kpos, const int32_t *doc, int B, int Tq,
				      int Tk, int a, int g, int k, int S, float scale, int window, float dropout_p,
				      uint64_t seed, uint64_t offset, int accumulate)
{
	attn_check(a, g, k);
	if (B <= 0 || Tq <= 0)
		return;
	if (Tk < 0)
		Tk = 0;
#define BF_ARGS                                                                                  \
	out, lse, q, kk, v, qpos, kpos, doc, B, Tq, Tk, a, g, k, S, scale, window, dropout_p, seed, offset, accumulate
	switch (head_pad(k)) {
	case 16: block_fwd_launch<16>(BF_ARGS); break;
	case 32: block_fwd_launch<32>(BF_ARGS); break;
	case 64: block_fwd_launch<64>(BF_ARGS); break;
	case 128: block_fwd_launch<128>(BF_ARGS); break;
	default: block_fwd_launch<256>(BF_ARGS); break;
	}
#undef BF_ARGS
}

void cuda_attention_block_backward_f32(float *dq, float *dk, float *dv, const float *dout, const float *out,
				       const float *lse, const float *q, const float *kk, const float *v,
				       const int32_t *qpos, const int32_t *kpos, const int32_t *doc, int B, int Tq,
				       int Tk, int a, int g, int k, int S, float scale, int window, float dropout_p,
				       uint64_t seed, uint64_t offset)
{
	attn_check(a, g, k);
	if ((!dq && !dk && !dv) || B <= 0 || Tq <= 0 || Tk <= 0)
		return;
	float *dr = (float *)scratch_alloc((size_t)B * a * Tq * sizeof(float));
	if (dq || dk) {
		const size_t rows = (size_t)B * Tq * a, per = NT / WARP;
		const unsigned grid = (unsigned)((rows + per - 1) / per);
		launch<attn_rowdot_kernel>(grid, NT, 0, dr, dout, out, qpos, kpos, B, Tq, a, k);
		KERNEL_CHECK();
	}
	BWD_DISPATCH(false, dq, dk, dv, dr, dout, q, kk, v, NULL, lse, qpos, kpos, doc, B, Tq, Tk, a, g, k, S,
		     scale, window, dropout_p, seed, offset);
	scratch_free(dr);
}

void cuda_attn_fill(struct kops *t)
{
	t->attention_forward = cuda_attention_forward;
	t->attention_backward = cuda_attention_backward;
	t->attention_block_forward = cuda_attention_block_forward_f32;
	t->attention_block_backward = cuda_attention_block_backward_f32;
}
