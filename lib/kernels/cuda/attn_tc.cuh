/*
 * attn_tc.cuh - flash attention on the tensor cores (bf16 or fp16 operands,
 * fp32 accumulators): attention_block_forward and attention_block_backward
 * (ops.h) for the half-input op tables, head dims 64 and 128, with or
 * without dropout, sliding windows and document masks. Device code
 * only: attn_tc.cu launches it on the GPU, tests/emu/test_attn_tc.cc runs
 * the same source in the thread-block emulator against the CPU twin.
 *
 * Design (flash attention 2, on mma.sync m16n8k16; tc.cuh has the fragment
 * layouts). One block of WQ warps per (sample, head, tile of BQ = 16 WQ
 * queries); each warp owns 16 query rows for the whole kernel:
 *  - Q (converted to halves as it is loaded) goes through shared memory into
 *    the warp's A fragments once; K and V tiles of BK keys are converted into
 *    shared memory, one tile at a time, by all threads.
 *  - S = Q K^T: per 16 channels, one ldmatrix.x4 of K gives the B fragments
 *    of two 8-key column tiles (K is stored [key][channel], which is B "col").
 *  - Online softmax in the log2 domain (scores times scale*log2(e), exp2f):
 *    a thread holds two rows' elements (rows gid and gid+8); the row max is
 *    reduced over the 4 lanes of a row group (shuffles xor 1, 2), the row
 *    sums stay per thread until the end (every lane rescales by the same
 *    factor, so partial sums add up at the end).
 *  - O += P V: the S accumulators of two adjacent 8-key tiles are exactly the
 *    A fragment of a 16-key step, rounded to halves in registers (no trip
 *    through shared memory); V's B fragments come from ldmatrix.trans.
 *  - Causality by positions as in attn.cu: the tile sees keys [0, nk) (a
 *    prefix, found by binary search on its last query); per element masks
 *    only in the key tiles that reach past the warp's first row's prefix.
 *  - A sliding window (ops.h's window L >= 0: qpos - L <= kpos <= qpos)
 *    cuts the other end the same way: the tile's keys start at kb, the
 *    first its first query's window holds, so the key tiles wholly behind
 *    every window are never loaded; tiles then start at kb, not at a
 *    multiple of BK. The masks also cover the tiles that start before the
 *    warp's last row's window. The dkv kernel's query range ends at the last
 *    query whose window holds the block's last key.
 *  - Document masks (ops.h's doc, packed sequences): a key of another
 *    document than the row's is masked as one outside the window is (-inf
 *    before the softmax, 0 in P and dS), element by element in every tile
 *    (ids need not be monotone, so no tile is skipped for them). The ids of
 *    a tile's keys (forward, dq) or of a step's queries (dkv) go to shared
 *    memory beside the tile, by 4-byte cp.async gathers doc[b S + pos]; a
 *    thread's own rows' (or keys') ids sit in registers. A row that sees no
 *    key of its document ends as a row in the block's future does: out 0
 *    and lse -inf, or the running state kept.
 * Rows past the end of the queries read zero Q rows (in masked tiles they see
 * no key; in unmasked ones their scores are 0, harmless, never written out);
 * key rows past nk are zero in shared memory (0 * a NaN pattern would poison
 * P V).
 *
 * Numerics against the fp32 kernel: q, k, v (and dO) are rounded to the half
 * format on their way into shared memory (exact where the model already
 * holds them in it; RoPE's outputs are not rounded, so about 2^-9 there),
 * and P (and dS) before their products, as in every flash attention on
 * tensor cores: about 2^-9 (2^-12) relative per value; the sums are fp32 in
 * the tensor core's order. In fp16, dS of a loss-scaled dO can overflow
 * where the fp32 kernels would not (as in FlashAttention 2); bf16 cannot.
 *
 * Backward (flash attention 2's, in attn.cu's deterministic shape: two
 * kernels that each own their outputs, no atomics). With P = exp(scale q.k
 * - lse) recomputed and Dr = rowsum(dO * O) (attn_tc_rowdot_kernel):
 *   dP = dO V^T,  dS = P (dP - Dr),  dV += P^T dO,  dK += scale dS^T Q,
 *   dQ += scale dS K.
 *  - dq kernel: as the forward, a warp owns 16 query rows, Q and dO in A
 *    fragments; per key tile S = Q K^T and dP = dO V^T (K, V as B "col"),
 *    then dS, rounded to halves in registers, times K (ldmatrix.trans).
 *  - dkv kernel: one block per (sample, K/V group, 64 keys), a warp owns 16
 *    keys; it loops over the group's heads and the query tiles that see its
 *    keys (a suffix), computing the transposed products S^T = K Q^T and
 *    dP^T = V dO^T with K and V as A fragments (from shared memory) and Q,
 *    dO as B, so P^T and dS^T land in A-fragment layout for dV += P^T dO and
 *    dK += dS^T Q (dO and Q through ldmatrix.trans).
 * Masked probabilities are selected to 0, never computed from a -inf lse.
 * Dropout draws the masks of attn.cu (ops.h's counters, philox.cuh) in
 * registers, per element: the forward's row sums are before dropout, P V
 * takes P M; the backward takes dP M in dS and P M in dV.
 */
#ifndef MEGAC_KERNELS_CUDA_ATTN_TC_CUH
#define MEGAC_KERNELS_CUDA_ATTN_TC_CUH

#include "tc.cuh" /* first: under MEGAC_EMU it brings emu.h, which philox.cuh needs */
#include "philox.cuh"
#include "wg.cuh"

#include <limits.h>
#include <math.h>

#ifdef MEGAC_EMU
#define TC_SMEM ((uint4 *)emu_smem())
#else
extern __shared__ uint4 tc_attn_smem[];
#define TC_SMEM tc_attn_smem

#endif

#define TC_LOG2E 1.4426950408889634f
#define TC_LN2 0.6931471805599453f

/* keys per tile; shared-memory row pitch in halves: 16 bytes of padding put
 * the 8 rows an ldmatrix reads in 8 different groups of 4 banks */
#define TC_BK 64
template <int KD> struct tc_geom {
	static constexpr int LDS = KD + 8;
};

/* Q, then two stages of K and V tiles (double buffering); rows padded for
 * ldmatrix, or (WG: the wgmma forward) as core matrices, unpadded; then the
 * two stages' key document ids (tc_doc_issue) */
template <int KD, int WQ, bool WG = false> __host__ __device__ constexpr size_t tc_fwd_smem(void)
{
	return (size_t)(16 * WQ + 4 * TC_BK) * (WG ? KD : tc_geom<KD>::LDS) * 2 + 2 * TC_BK * sizeof(int32_t);
}

static __device__ __forceinline__ int tc_count_le(const int32_t *pos, int n, int p)
{
	int lo = 0, hi = n;
	while (lo < hi) {
		const int mid = lo + (hi - lo) / 2;
		if (pos[mid] <= p)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Sliding window (ops.h; window < 0: none): the first of pos[0, n) that
 * position p's window holds (pos[i] >= p - window), and the lowest key
 * position a query at qp sees (INT_MIN without a window). qp - window
 * cannot overflow: positions are >= 0, or -1 for rows past the end. */
static __device__ __forceinline__ int tc_window_first(const int32_t *pos, int n, int p, int window)
{
	return window < 0 ? 0 : tc_count_le(pos, n, p - window - 1);
}

static __device__ __forceinline__ int tc_window_lo(int qp, int window)
{
	return window < 0 ? INT_MIN : qp - window;
}

/* Dropout of the probabilities (ops.h): prob (h, b, tq, tk) is kept when the
 * draw at counter offset + ((h B + b) S + qpos[tq]) S + kpos[tk] is >= p,
 * and then scaled by ks = 1/(1-p); p = 0: no dropout. */
struct tc_drop {
	float p, ks;
	uint64_t seed, offset;
	int B, S;
};

/* attn_wg.cu (sm_90a): the forward with wgmma, head dim k 64 or 128,
 * halves in qh/kh/vh (bf16, or fp16 when fp16); doc: NULL or [B, S] */
void cuda_attn_wg_forward(int fp16, int k, float *out, float *lse, const uint16_t *qh, const uint16_t *kh,
			  const uint16_t *vh, const int32_t *qpos, const int32_t *kpos, const int32_t *doc, int S,
			  int B, int Tq, int Tk, int a, int g, float scale, int window, int accumulate, tc_drop drop);
/* the backward's dq and dkv kernels with wgmma (Dr in dr, halves of dO in oh) */
void cuda_attn_wg_backward(int fp16, int k, float *dq, float *dk, float *dv, const uint16_t *oh, const float *lse,
			   const float *dr, const uint16_t *qh, const uint16_t *kh, const uint16_t *vh,
			   const int32_t *qpos, const int32_t *kpos, const int32_t *doc, int S, int B, int Tq, int Tk,
			   int a, int g, float scale, int window, tc_drop drop);

/* the counter of (h, b, position qp, key position 0) */
static __device__ __forceinline__ uint64_t tc_drop_row(const tc_drop &d, int b, int h, int qp)
{
	return d.offset + ((uint64_t)(h * d.B + b) * (uint64_t)d.S + (uint64_t)qp) * (uint64_t)d.S;
}

static __device__ __forceinline__ float tc_keep(const tc_drop &d, uint64_t c)
{
	return philox_u01(philox_word(philox4(d.seed, c >> 2), (unsigned)(c & 3))) >= d.p ? d.ks : 0.0f;
}

/* two draws of one row, c0 and c1, usually in one Philox block */
static __device__ __forceinline__ void tc_keep2(float m[2], const tc_drop &d, uint64_t c0, uint64_t c1)
{
	const uint4 w = philox4(d.seed, c0 >> 2);
	m[0] = philox_u01(philox_word(w, (unsigned)(c0 & 3))) >= d.p ? d.ks : 0.0f;
	m[1] = (c1 >> 2) == (c0 >> 2) ? (philox_u01(philox_word(w, (unsigned)(c1 & 3))) >= d.p ? d.ks : 0.0f)
				       : tc_keep(d, c1);
}

/* the multipliers of the key pair (key, key+1) of this thread in rows at
 * counters r0 and r1: keys past nk are masked anyway (1) */
static __device__ __forceinline__ void tc_keep_pair(float m0[2], float m1[2], const tc_drop &d, const int32_t *kpos,
						    int nk, int key, uint64_t r0, uint64_t r1)
{
	const uint64_t ka = key < nk ? (uint64_t)kpos[key] : 0, kb = key + 1 < nk ? (uint64_t)kpos[key + 1] : 0;
	tc_keep2(m0, d, r0 + ka, r0 + kb);
	tc_keep2(m1, d, r1 + ka, r1 + kb);
}

/* the A fragment of a 16-wide step from the accumulators of two adjacent
 * 8-wide column tiles (tc.cuh's layouts: they coincide, no shuffles) */
template <class H>
static __device__ __forceinline__ void tc_acc_to_a(uint32_t a[4], const float lo[4], const float hi[4])
{
	a[0] = tc_pack<H>(lo[0], lo[1]);
	a[1] = tc_pack<H>(lo[2], lo[3]);
	a[2] = tc_pack<H>(hi[0], hi[1]);
	a[3] = tc_pack<H>(hi[2], hi[3]);
}

/* wgmma: d0 = A0 B0^T and d1 = A1 B1^T over KD channels (KD/16 chained
 * steps each; every operand K-major core matrices at shared addresses
 * a0, b0, a1, b1), issued, committed and waited for; the accumulators are
 * pinned around it (wg.cuh) */
template <class H, int N, int KD>
static __device__ __forceinline__ void wg_ss_pair(float *d0, uint32_t a0, uint32_t b0, float *d1, uint32_t a1,
						  uint32_t b1)
{
	constexpr uint32_t RS = KD * 16;
	wg_fence_operand(d0, N / 2);
	wg_fence_operand(d1, N / 2);
	wg_fence();
#pragma unroll
	for (int ks = 0; ks < KD / 16; ks++) {
		wg_mma_ss<H, N>(d0, wg_desc(a0 + 256 * ks, 128, RS), wg_desc(b0 + 256 * ks, 128, RS), ks > 0);
		wg_mma_ss<H, N>(d1, wg_desc(a1 + 256 * ks, 128, RS), wg_desc(b1 + 256 * ks, 128, RS), ks > 0);
	}
	wg_commit();
	wg_wait<0>();
	wg_fence_operand(d0, N / 2);
	wg_fence_operand(d1, N / 2);
}

/* fp32 to halves, 4 values per thread and step (n4 = n / 4): the kernels'
 * inputs, converted once per call so that every block reads 2 bytes per value
 * and the tiles can go to shared memory by cp.async */
template <class H>
__global__ void __launch_bounds__(256) attn_tc_half_kernel(uint32_t *dst, const float *src, size_t n4)
{
	for (size_t i = (size_t)blockIdx.x * 256 + threadIdx.x; i < n4; i += (size_t)gridDim.x * 256) {
		const float4 x = ((const float4 *)src)[i];
		uint2 h;
		h.x = tc_pack<H>(x.x, x.y);
		h.y = tc_pack<H>(x.z, x.w);
		((uint2 *)dst)[i] = h;
	}
}

/* rows [0, n) of src (halves, row stride ld, KD channels each) into
 * dst[NR][LDS] by cp.async, 16 bytes per copy; rows n..NR-1 become zeros.
 * The caller commits the group. */
template <int KD, int NR, int NT>
static __device__ __forceinline__ void tc_copy_rows(uint16_t *dst, const uint16_t *src, size_t ld, int n)
{
	constexpr int LDS = tc_geom<KD>::LDS, C8 = KD / 8, N = NR * C8;
#pragma unroll
	for (int it = 0; it < (N + NT - 1) / NT; it++) {
		const int i = threadIdx.x + it * NT;
		if (N % NT == 0 || i < N) {
			const int r = i / C8, c = 8 * (i % C8);
			const bool in = r < n;
			tc_cp_async<16>(dst + r * LDS + c, src + (size_t)(in ? r : 0) * ld + c, in ? 16 : 0);
		}
	}
}

/* the same into wgmma's core-matrix layout (wg.cuh): the 16 bytes of row r,
 * channels 8 c8.. at halves ((r/8) KD/8 + c8) 64 + (r%8) 8 of dst. Two
 * neighbouring threads take neighbouring chunks of a row (one 32-byte
 * sector), eight rows fill a core matrix's column. */
template <int KD, int NR, int NT>
static __device__ __forceinline__ void tc_copy_rows_cm(uint16_t *dst, const uint16_t *src, size_t ld, int n)
{
	constexpr int C8 = KD / 8, N = NR * C8;
#pragma unroll
	for (int it = 0; it < (N + NT - 1) / NT; it++) {
		const int i = threadIdx.x + it * NT;
		if (N % NT == 0 || i < N) {
			const int c8 = 2 * (i / 16 % (C8 / 2)) + i % 2, r = i / 2 % 8 + 8 * (i / (8 * C8));
			const bool in = r < n;
			tc_cp_async<16>(dst + ((r / 8) * C8 + c8) * 64 + (r % 8) * 8, src + (size_t)(in ? r : 0) * ld + 8 * c8,
				      in ? 16 : 0);
		}
	}
}

/* a tile in the layout of the kernel's flavour: padded rows for ldmatrix,
 * or core matrices for wgmma (WG) */
template <int KD, int NR, int NT, bool WG>
static __device__ __forceinline__ void tc_copy(uint16_t *dst, const uint16_t *src, size_t ld, int n)
{
	if constexpr (WG)
		tc_copy_rows_cm<KD, NR, NT>(dst, src, ld, n);
	else
		tc_copy_rows<KD, NR, NT>(dst, src, ld, n);
}

/* The query tile of this block (forward and dq kernels): tile-major over
 * the grid, the last (longest) tiles first over every (sample, head); its
 * sample, head, K/V group, first row, rows, and the keys it visits: from kb
 * (the first its first query's window holds; 0 without a window) on, nk of
 * them, up to the last its last query sees (positions increase, so the
 * keys before kb are behind every row's window and those after in every
 * row's future). */
struct tc_qtile {
	int bh, b, h, G, q0, nq, kb, nk;
};

static __device__ __forceinline__ tc_qtile tc_qtile_of(int BQ, const int32_t *qpos, const int32_t *kpos, int Tq,
						       int Tk, int a, int g, int window)
{
	tc_qtile t;
	const int ntile = (Tq + BQ - 1) / BQ, nbh = (int)(gridDim.x / ntile);
	t.bh = blockIdx.x % nbh;
	const int tile = ntile - 1 - blockIdx.x / nbh;
	t.b = t.bh / a;
	t.h = t.bh % a;
	t.G = t.h / (a / g);
	t.q0 = tile * BQ;
	t.nq = Tq - t.q0 < BQ ? Tq - t.q0 : BQ;
	const int ne = tc_count_le(kpos, Tk, qpos[t.q0 + t.nq - 1]);
	t.kb = tc_window_first(kpos, ne, qpos[t.q0], window);
	t.nk = ne - t.kb;
	return t;
}

/* Document masks (ops.h's doc; D = the sample's row of it, or NULL): the
 * ids of keys [k0, k0 + BK) of the nk at kpos, D[kpos[key]] (0 past nk),
 * into ids[BK] by 4-byte cp.async (a gather: each thread its own address);
 * nothing without D. The caller commits. */
template <int BK, int NT>
static __device__ __forceinline__ void tc_doc_issue(int32_t *ids, const int32_t *D, const int32_t *kpos, int k0,
						    int nk)
{
	if (!D)
		return;
	for (int i = threadIdx.x; i < BK; i += NT) {
		const bool in = k0 + i < nk;
		tc_cp_async<4>(ids + i, D + (in ? kpos[k0 + i] : 0), in ? 4 : 0);
	}
}

/* The K/V tile from key k0 (at most BK keys of the nk) into a stage: K's
 * rows, then V's, by cp.async, and with D the keys' document ids into the
 * stage's ids[BK]; the caller commits. */
template <int KD, int BK, int NT, bool WG>
static __device__ __forceinline__ void tc_kv_issue(uint16_t *stage, int32_t *ids, const uint16_t *Kg,
						   const uint16_t *Vg, const int32_t *D, const int32_t *kpos, int k0,
						   int nk)
{
	constexpr int RH = WG ? KD : tc_geom<KD>::LDS;
	const int n = nk - k0 < BK ? nk - k0 : BK;
	tc_copy<KD, BK, NT, WG>(stage, Kg + (size_t)k0 * KD, KD, n);
	tc_copy<KD, BK, NT, WG>(stage + BK * RH, Vg + (size_t)k0 * KD, KD, n);
	tc_doc_issue<BK, NT>(ids, D, kpos, k0, nk);
}

/* One step of the K/V pipeline (forward and dq kernels), one barrier a
 * tile: this thread's copies of tile jt have landed (and, for wgmma, are
 * visible to it); the barrier shows everyone's, and every warp is done with
 * tile jt-1, whose stage tile jt+1 then takes. Returns tile jt's stage (its
 * document ids at ids + (jt & 1) BK). */
template <int KD, int BK, int NT, bool WG>
static __device__ __forceinline__ const uint16_t *tc_kv_step(uint16_t *KV, int32_t *ids, const uint16_t *Kg,
							     const uint16_t *Vg, const int32_t *D, const int32_t *kpos,
							     int jt, int ntk, int nk)
{
	constexpr int RH = WG ? KD : tc_geom<KD>::LDS;
	tc_cp_async_wait<0>();
	if constexpr (WG)
		wg_fence_proxy();
	__syncthreads();
	if (jt + 1 < ntk) {
		const int st = (jt + 1) & 1;
		tc_kv_issue<KD, BK, NT, WG>(KV + st * 2 * BK * RH, ids + st * BK, Kg, Vg, D, kpos, (jt + 1) * BK, nk);
		tc_cp_async_commit();
	}
	return KV + (jt & 1) * 2 * BK * RH;
}

/*
 * attention_block_forward (ops.h) on the tensor cores, k == KD.
 * Grid: B*a*ntile blocks of 32 WQ threads, tile-major in reverse tile order
 * (the longest first); dynamic shared memory tc_fwd_smem<KD, WQ, WG>().
 * WG (sm_90a, attn_wg.cu): S = Q K^T and O += P V by wgmma, a warpgroup (4
 * warps, 64 rows) at a time: Q and K from shared memory (K-major), P from
 * the S accumulators in registers, V transposed (MN-major); the same rows
 * per thread as mma.sync's, so everything between the products is shared.
 */
template <class H, int KD, int WQ, bool WG = false>
__global__ void __launch_bounds__(32 * WQ, WQ > 4 ? 1 : 2)
	attn_tc_fwd_kernel(float *out, float *lse, const uint16_t *qh, const uint16_t *kh, const uint16_t *vh,
			   const int32_t *qpos, const int32_t *kpos, const int32_t *doc, int S, int Tq, int Tk, int a,
			   int g, float scale, int window, int accumulate, tc_drop drop)
{
	constexpr int NT = 32 * WQ, BQ = 16 * WQ, BK = TC_BK, LDS = tc_geom<KD>::LDS;
	constexpr int NKS = KD / 16;  /* 16-channel steps of Q K^T */
	constexpr int NST = BK / 8;   /* 8-key column tiles of S */
	constexpr int NOT = KD / 8;   /* 8-channel column tiles of O */
	constexpr int RH = WG ? KD : LDS; /* halves per row of a tile */
	uint16_t *Qs = (uint16_t *)TC_SMEM, *KV = Qs + BQ * RH; /* K, V of stage t at KV + 2 t BK RH */
	int32_t *Ids = (int32_t *)(KV + 4 * BK * RH);          /* their keys' document ids at Ids + t BK */
	const int lane = threadIdx.x % 32, w = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;
	const tc_qtile qt = tc_qtile_of(BQ, qpos, kpos, Tq, Tk, a, g, window);
	const int bh = qt.bh, b = qt.b, h = qt.h, G = qt.G, q0 = qt.q0, nq = qt.nq, nk = qt.nk;
	const size_t ldo = (size_t)a * KD;
	const int32_t *D = doc ? doc + (size_t)b * S : NULL; /* this sample's document ids */
	/* this thread's two rows (gid, gid+8 of the warp's 16), tile-relative */
	const int r0 = 16 * w + gid, r1 = r0 + 8;
	kpos += qt.kb; /* from here on the keys are the visited ones, kb.. */

	if (nk == 0) { /* every key is in the tile's future or behind its windows */
		if (!accumulate)
			for (int i = threadIdx.x; i < nq * KD; i += NT) {
				out[((size_t)b * Tq + q0 + i / KD) * ldo + (size_t)h * KD + i % KD] = 0.0f;
				if (i % KD == 0)
					lse[(size_t)bh * Tq + q0 + i / KD] = -INFINITY;
			}
		return;
	}

	const int qp0 = r0 < nq ? qpos[q0 + r0] : -1, qp1 = r1 < nq ? qpos[q0 + r1] : -1;
	const int lo0 = tc_window_lo(qp0, window), lo1 = tc_window_lo(qp1, window);
	const int qd0 = D && r0 < nq ? D[qp0] : 0, qd1 = D && r1 < nq ? D[qp1] : 0;
	/* keys [kb_w, nk_w) every row of this warp sees (nk_w: its first row's
	 * prefix, kb_w: its last row's window): tiles inside need no mask but
	 * for documents */
	const int wl = 16 * w + 15 < nq ? 16 * w + 15 : nq - 1;
	const int nk_w = 16 * w < nq ? tc_count_le(kpos, nk, qpos[q0 + 16 * w]) : 0;
	const int kb_w = 16 * w < nq ? tc_window_first(kpos, nk, qpos[q0 + wl], window) : 0;

	/* Q, and the first K/V tile, in flight at once; the next tile's copies
	 * go out while this one is computed (two stages) */
	const uint16_t *Kg = kh + (((size_t)b * g + G) * Tk + qt.kb) * KD,
		       *Vg = vh + (((size_t)b * g + G) * Tk + qt.kb) * KD;
	const int ntk = (nk + BK - 1) / BK;
	tc_copy<KD, BQ, NT, WG>(Qs, qh + ((size_t)bh * Tq + q0) * KD, KD, nq);
	tc_cp_async_commit();
	tc_kv_issue<KD, BK, NT, WG>(KV, Ids, Kg, Vg, D, kpos, 0, nk);
	tc_cp_async_commit();
	if constexpr (!WG) { /* wgmma reads Q from shared memory: the loop's first wait covers it */
		tc_cp_async_wait<1>(); /* Q has landed */
		__syncthreads();
	}
	uint32_t qf[WG ? 1 : NKS][4];
	if constexpr (!WG)
#pragma unroll
		for (int ks = 0; ks < NKS; ks++) {
			const int j = lane / 8;
			tc_ldsm_x4(qf[ks], Qs + (16 * w + lane % 8 + 8 * (j % 2)) * LDS + 16 * ks + 8 * (j / 2));
		}
	/* wgmma's Q: this warpgroup's 64 rows, K-major core matrices (wg.cuh) */
	constexpr uint32_t RS = KD * 16; /* bytes from 8 rows of core matrices to the next 8 */
	const uint32_t qaddr = WG ? wg_smem_addr(Qs) + (uint32_t)(w / 4) * 8 * RS : 0;

	const float sl = scale * TC_LOG2E;
	const uint64_t dr0 = tc_drop_row(drop, b, h, qp0), dr1 = tc_drop_row(drop, b, h, qp1);
	float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;
	float acc[NOT][4];
#pragma unroll
	for (int t = 0; t < NOT; t++)
		acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;

	for (int jt = 0; jt < ntk; jt++) {
		const int k0 = jt * BK;
		const uint16_t *Ks = tc_kv_step<KD, BK, NT, WG>(KV, Ids, Kg, Vg, D, kpos, jt, ntk, nk);
		const uint16_t *Vs = Ks + BK * RH;
		const int32_t *Is = Ids + (jt & 1) * BK;

		float s[NST][4];
#pragma unroll
		for (int t = 0; t < NST; t++)
			s[t][0] = s[t][1] = s[t][2] = s[t][3] = 0.0f;
		if constexpr (WG) { /* S = Q K^T: KD/16 chained products of 64 x 16 by 16 x 64 */
			const uint32_t kaddr = wg_smem_addr(Ks);
			wg_fence_operand(&s[0][0], 4 * NST);
			wg_fence();
#pragma unroll
			for (int ks = 0; ks < NKS; ks++)
				wg_mma_ss<H, BK>(&s[0][0], wg_desc(qaddr + 256 * ks, 128, RS),
						 wg_desc(kaddr + 256 * ks, 128, RS), ks > 0);
			wg_commit();
			wg_wait<0>();
			wg_fence_operand(&s[0][0], 4 * NST);
		} else {
#pragma unroll
			for (int ks = 0; ks < NKS; ks++)
#pragma unroll
				for (int np = 0; np < NST / 2; np++) {
					const int j = lane / 8;
					uint32_t bf[4];
					tc_ldsm_x4(bf, Ks + (16 * np + lane % 8 + 8 * (j / 2)) * LDS + 16 * ks + 8 * (j % 2));
					tc_mma<H>(s[2 * np], qf[ks], bf);
					tc_mma<H>(s[2 * np + 1], qf[ks], bf + 2);
				}
		}

		/* scale into the log2 domain; mask keys past a row's position
		 * (and past nk), or behind its window, in the tiles that reach
		 * outside [kb_w, nk_w), and keys of another document than the
		 * row's in every tile */
		const bool mask = D || k0 + BK > nk_w || k0 < kb_w;
		float t0 = -INFINITY, t1 = -INFINITY;
#pragma unroll
		for (int t = 0; t < NST; t++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				float x0 = s[t][e] * sl, x1 = s[t][2 + e] * sl;
				if (mask) {
					const int j = 8 * t + 2 * tig + e, key = k0 + j;
					const int kp = key < nk ? kpos[key] : INT_MAX, kd = D ? Is[j] : 0;
					x0 = kp <= qp0 && kp >= lo0 && kd == qd0 ? x0 : -INFINITY;
					x1 = kp <= qp1 && kp >= lo1 && kd == qd1 ? x1 : -INFINITY;
				}
				s[t][e] = x0;
				s[t][2 + e] = x1;
				t0 = fmaxf(t0, x0);
				t1 = fmaxf(t1, x1);
			}
		t0 = fmaxf(t0, tc_shfl_xor(t0, 1));
		t0 = fmaxf(t0, tc_shfl_xor(t0, 2));
		t1 = fmaxf(t1, tc_shfl_xor(t1, 1));
		t1 = fmaxf(t1, tc_shfl_xor(t1, 2));
		const float n0 = fmaxf(m0, t0), n1 = fmaxf(m1, t1);
		/* a row that has seen no key yet keeps m = -inf: exp2 against 0 gives 0s, not NaNs */
		const float u0 = n0 == -INFINITY ? 0.0f : n0, u1 = n1 == -INFINITY ? 0.0f : n1;
		const float al0 = exp2f(m0 - u0), al1 = exp2f(m1 - u1);
		m0 = n0;
		m1 = n1;
		float p0 = 0.0f, p1 = 0.0f;
#pragma unroll
		for (int t = 0; t < NST; t++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				s[t][e] = exp2f(s[t][e] - u0);
				s[t][2 + e] = exp2f(s[t][2 + e] - u1);
				p0 += s[t][e];
				p1 += s[t][2 + e];
			}
		l0 = l0 * al0 + p0;
		l1 = l1 * al1 + p1;
		if (drop.p > 0.0f) /* the sums above are before dropout; P V takes the kept probabilities, scaled */
#pragma unroll
			for (int t = 0; t < NST; t++) {
				float k0m[2], k1m[2];
				tc_keep_pair(k0m, k1m, drop, kpos, nk, k0 + 8 * t + 2 * tig, dr0, dr1);
				s[t][0] *= k0m[0];
				s[t][1] *= k0m[1];
				s[t][2] *= k1m[0];
				s[t][3] *= k1m[1];
			}
#pragma unroll
		for (int t = 0; t < NOT; t++) {
			acc[t][0] *= al0;
			acc[t][1] *= al0;
			acc[t][2] *= al1;
			acc[t][3] *= al1;
		}

		/* O += P V, 16 keys per step */
		if constexpr (WG) {
			/* P's A fragments stay live until the wait: wgmma reads registers late */
			uint32_t pf[BK / 16][4];
#pragma unroll
			for (int ks = 0; ks < BK / 16; ks++) {
				tc_acc_to_a<H>(pf[ks], s[2 * ks], s[2 * ks + 1]);
			}
			const uint32_t vaddr = wg_smem_addr(Vs);
			wg_fence_operand(&acc[0][0], 4 * NOT);
			wg_fence_operand(&pf[0][0], 4 * (BK / 16));
			wg_fence();
#pragma unroll
			for (int ks = 0; ks < BK / 16; ks++) /* V transposed: LBO steps 8 keys, SBO 8 channels */
				wg_mma_rs_tb<H, KD>(&acc[0][0], pf[ks], wg_desc(vaddr + 2 * RS * ks, RS, 128), 1);
			wg_commit();
			wg_wait<0>();
			wg_fence_operand(&acc[0][0], 4 * NOT);
			wg_fence_operand(&pf[0][0], 4 * (BK / 16));
		} else {
#pragma unroll
			for (int ks = 0; ks < BK / 16; ks++) {
				uint32_t pf[4];
				tc_acc_to_a<H>(pf, s[2 * ks], s[2 * ks + 1]);
#pragma unroll
				for (int dp = 0; dp < NOT / 2; dp++) {
					const int j = lane / 8;
					uint32_t vf[4];
					tc_ldsm_x4_trans(vf, Vs + (16 * ks + lane % 8 + 8 * (j % 2)) * LDS + 16 * dp +
								     8 * (j / 2));
					tc_mma<H>(acc[2 * dp], pf, vf);
					tc_mma<H>(acc[2 * dp + 1], pf, vf + 2);
				}
			}
		}
	}

	l0 += tc_shfl_xor(l0, 1);
	l0 += tc_shfl_xor(l0, 2);
	l1 += tc_shfl_xor(l1, 1);
	l1 += tc_shfl_xor(l1, 2);

	/* merge into the running state (cpu_attention_block_forward's rules);
	 * lse is natural-log: (m + log2 l) ln 2 */
	float *L = lse + (size_t)bh * Tq + q0;
	const float old0 = accumulate && r0 < nq ? L[r0] : -INFINITY;
	const float old1 = accumulate && r1 < nq ? L[r1] : -INFINITY;
	__syncwarp(); /* the row's 4 lanes have read its old lse before lane tig 0 writes it */
#pragma unroll
	for (int half = 0; half < 2; half++) {
		const int r = half ? r1 : r0;
		const float m = half ? m1 : m0, l = half ? l1 : l0, old = half ? old1 : old0;
		if (r >= nq)
			continue;
		float *o = out + ((size_t)b * Tq + q0 + r) * ldo + (size_t)h * KD + 2 * tig;
		float keep, wt, nl;
		if (m == -INFINITY) { /* no key of this block: out and lse stay, or 0 and -inf */
			if (accumulate)
				continue;
			keep = 0.0f;
			wt = 0.0f;
			nl = -INFINITY;
		} else {
			const float blk = (m + log2f(l)) * TC_LN2;
			if (old == -INFINITY) { /* the row's first keys: plain softmax */
				keep = 0.0f;
				wt = 1.0f / l;
				nl = blk;
			} else {
				const float hi = fmaxf(old, blk), lo = fminf(old, blk);
				nl = hi + log1pf(expf(lo - hi));
				wt = expf(blk - nl) / l;
				keep = expf(old - nl);
			}
		}
#pragma unroll
		for (int t = 0; t < NOT; t++) {
			float2 y;
			y.x = acc[t][2 * half] * wt;
			y.y = acc[t][2 * half + 1] * wt;
			if (keep != 0.0f) {
				const float2 x = *(const float2 *)(o + 8 * t);
				y.x += x.x * keep;
				y.y += x.y * keep;
			}
			*(float2 *)(o + 8 * t) = y;
		}
		if (tig == 0)
			L[r] = nl;
	}
}


/* ---------------- backward ---------------- */

/* query rows per step of the dkv kernel and keys per step of the dq kernel:
 * narrower at head dim 128, where dK, dV (dQ) and both fragments' rows
 * would not fit in registers otherwise */
template <int KD> struct tc_bwd_geom {
	static constexpr int BQ2 = KD > 64 ? 32 : 64;
	static constexpr int BK2 = KD > 64 ? 32 : 64;
};

/* Q and dO of the block, then two stages of K and V tiles, then the two
 * stages' key document ids */
template <int KD, bool WG = false> __host__ __device__ constexpr size_t tc_dq_smem(void)
{
	return (size_t)(2 * 64 + 4 * tc_bwd_geom<KD>::BK2) * (WG ? KD : tc_geom<KD>::LDS) * 2 +
	       (size_t)2 * tc_bwd_geom<KD>::BK2 * sizeof(int32_t);
}

/* K and V of the block, two stages of Q and dO tiles, two stages of their
 * rows' lse, Dr and document ids */
template <int KD, bool WG = false> __host__ __device__ constexpr size_t tc_dkv_smem(void)
{
	return (size_t)(2 * 64 + 4 * tc_bwd_geom<KD>::BQ2) * (WG ? KD : tc_geom<KD>::LDS) * 2 +
	       (size_t)6 * tc_bwd_geom<KD>::BQ2 * sizeof(float);
}

/* Dr[(b a + h) Tq + t] = sum_c dout * out over row (b, t, h) of [B, Tq, a KD],
 * one warp per row; a row that sees no key of the block gets 0 */
template <int KD>
__global__ void __launch_bounds__(128)
	attn_tc_rowdot_kernel(float *dr, const float *dout, const float *out, const int32_t *qpos,
			      const int32_t *kpos, int B, int Tq, int a)
{
	const size_t row = (size_t)blockIdx.x * 4 + threadIdx.x / 32; /* (b, t, h) */
	const int lane = threadIdx.x % 32;
	if (row >= (size_t)B * Tq * a)
		return; /* the whole warp */
	const size_t h = row % a, bt = row / a, b = bt / Tq, t = bt % Tq;
	const float *x = dout + row * KD, *y = out + row * KD;
	float s = 0.0f;
	for (int i = lane; i < KD; i += 32)
		s += x[i] * y[i];
	s += tc_shfl_xor(s, 16);
	s += tc_shfl_xor(s, 8);
	s += tc_shfl_xor(s, 4);
	s += tc_shfl_xor(s, 2);
	s += tc_shfl_xor(s, 1);
	if (lane == 0)
		dr[(b * a + h) * Tq + t] = kpos[0] > qpos[t] ? 0.0f : s;
}

/*
 * dq kernel: grid B*a*ntile (64 query rows per block, reverse order), 128
 * threads, shared memory tc_dq_smem<KD, WG>(). dq += scale dS K. WG (sm_90a):
 * the block is one warpgroup; S and dP by wgmma from Q, dO, K, V in shared
 * memory (K-major), dQ from dS in registers and K transposed.
 */
template <class H, int KD, bool WG = false>
__global__ void __launch_bounds__(128)
	attn_tc_dq_kernel(float *dq, const uint16_t *oh, const float *lse, const float *dr, const uint16_t *qh,
			  const uint16_t *kh, const uint16_t *vh, const int32_t *qpos, const int32_t *kpos,
			  const int32_t *doc, int S, int Tq, int Tk, int a, int g, float scale, int window,
			  tc_drop drop)
{
	constexpr int NT = 128, BQ = 64, BK = tc_bwd_geom<KD>::BK2, LDS = tc_geom<KD>::LDS;
	constexpr int NKS = KD / 16, NST = BK / 8, NOT = KD / 8;
	constexpr int RH = WG ? KD : LDS; /* halves per row of a tile */
	constexpr uint32_t RS = KD * 16;  /* wgmma: bytes from 8 rows of core matrices to the next 8 */
	uint16_t *Qs = (uint16_t *)TC_SMEM, *Os = Qs + BQ * RH, *KV = Os + BQ * RH; /* stage t: KV + 2 t BK RH */
	int32_t *Ids = (int32_t *)(KV + 4 * BK * RH); /* stage t's key document ids at Ids + t BK */
	const int lane = threadIdx.x % 32, w = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;
	const tc_qtile qt = tc_qtile_of(BQ, qpos, kpos, Tq, Tk, a, g, window);
	const int bh = qt.bh, b = qt.b, h = qt.h, G = qt.G, q0 = qt.q0, nq = qt.nq, nk = qt.nk;
	const size_t ldo = (size_t)a * KD;
	const int32_t *D = doc ? doc + (size_t)b * S : NULL; /* this sample's document ids */
	if (nk == 0)
		return; /* no key of this block is seen by the tile */
	kpos += qt.kb; /* from here on the keys are the visited ones, kb.. */
	const uint16_t *Kg = kh + (((size_t)b * g + G) * Tk + qt.kb) * KD,
		       *Vg = vh + (((size_t)b * g + G) * Tk + qt.kb) * KD;
	const int ntk = (nk + BK - 1) / BK;
	tc_copy<KD, BQ, NT, WG>(Qs, qh + ((size_t)bh * Tq + q0) * KD, KD, nq);
	tc_copy<KD, BQ, NT, WG>(Os, oh + ((size_t)b * Tq + q0) * ldo + (size_t)h * KD, ldo, nq);
	tc_cp_async_commit();
	tc_kv_issue<KD, BK, NT, WG>(KV, Ids, Kg, Vg, D, kpos, 0, nk);
	tc_cp_async_commit();
	const int r0 = 16 * w + gid, r1 = r0 + 8;
	const int qp0 = r0 < nq ? qpos[q0 + r0] : -1, qp1 = r1 < nq ? qpos[q0 + r1] : -1;
	const int lo0 = tc_window_lo(qp0, window), lo1 = tc_window_lo(qp1, window);
	const int qd0 = D && r0 < nq ? D[qp0] : 0, qd1 = D && r1 < nq ? D[qp1] : 0;
	/* keys [kb_w, nk_w) every row of the warp sees, as in the forward */
	const int wl = 16 * w + 15 < nq ? 16 * w + 15 : nq - 1;
	const int nk_w = 16 * w < nq ? tc_count_le(kpos, nk, qpos[q0 + 16 * w]) : 0;
	const int kb_w = 16 * w < nq ? tc_window_first(kpos, nk, qpos[q0 + wl], window) : 0;
	/* lse in the log2 domain and Dr of this thread's rows (0 for rows that
	 * see no visited key; a row whose window or document holds none has
	 * p = 0 in every masked tile, whatever its lse, and no unmasked one) */
	const float *Lr = lse + (size_t)bh * Tq + q0, *Dg = dr + (size_t)bh * Tq + q0;
	const bool see0 = qp0 >= kpos[0], see1 = qp1 >= kpos[0];
	const float ls0 = see0 ? Lr[r0] * TC_LOG2E : 0.0f, ls1 = see1 ? Lr[r1] * TC_LOG2E : 0.0f;
	const float d0 = see0 ? Dg[r0] : 0.0f, d1 = see1 ? Dg[r1] : 0.0f;
	const uint64_t dr0 = tc_drop_row(drop, b, h, qp0), dr1 = tc_drop_row(drop, b, h, qp1);

	if constexpr (!WG) { /* wgmma reads Q and dO from shared memory: the loop's first wait covers them */
		tc_cp_async_wait<1>(); /* Q and dO have landed */
		__syncthreads();
	}
	uint32_t qf[WG ? 1 : NKS][4], of[WG ? 1 : NKS][4];
	if constexpr (!WG)
#pragma unroll
		for (int ks = 0; ks < NKS; ks++) {
			const int j = lane / 8, off = (16 * w + lane % 8 + 8 * (j % 2)) * LDS + 16 * ks + 8 * (j / 2);
			tc_ldsm_x4(qf[ks], Qs + off);
			tc_ldsm_x4(of[ks], Os + off);
		}
	const uint32_t qaddr = WG ? wg_smem_addr(Qs) : 0, oaddr = WG ? wg_smem_addr(Os) : 0;
	const float sl = scale * TC_LOG2E;
	float acc[NOT][4];
#pragma unroll
	for (int t = 0; t < NOT; t++)
		acc[t][0] = acc[t][1] = acc[t][2] = acc[t][3] = 0.0f;

	for (int jt = 0; jt < ntk; jt++) {
		const int k0 = jt * BK;
		const uint16_t *Ks = tc_kv_step<KD, BK, NT, WG>(KV, Ids, Kg, Vg, D, kpos, jt, ntk, nk);
		const uint16_t *Vs = Ks + BK * RH;
		const int32_t *Is = Ids + (jt & 1) * BK;
		float s[NST][4], dp[NST][4];
#pragma unroll
		for (int t = 0; t < NST; t++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				s[t][e] = dp[t][e] = 0.0f;
		if constexpr (WG) { /* S = Q K^T, dP = dO V^T: 64 x BK each, KD/16 chained steps */
			wg_ss_pair<H, BK, KD>(&s[0][0], qaddr, wg_smem_addr(Ks), &dp[0][0], oaddr, wg_smem_addr(Vs));
		} else {
#pragma unroll
			for (int ks = 0; ks < NKS; ks++)
#pragma unroll
				for (int np = 0; np < NST / 2; np++) {
					const int j = lane / 8,
						  off = (16 * np + lane % 8 + 8 * (j / 2)) * LDS + 16 * ks + 8 * (j % 2);
					uint32_t bf[4];
					tc_ldsm_x4(bf, Ks + off);
					tc_mma<H>(s[2 * np], qf[ks], bf);
					tc_mma<H>(s[2 * np + 1], qf[ks], bf + 2);
					tc_ldsm_x4(bf, Vs + off);
					tc_mma<H>(dp[2 * np], of[ks], bf);
					tc_mma<H>(dp[2 * np + 1], of[ks], bf + 2);
				}
		}
		/* P, then dS = P (dP M - Dr) in s, M the dropout multipliers */
		const bool mask = D || k0 + BK > nk_w || k0 < kb_w;
#pragma unroll
		for (int t = 0; t < NST; t++) {
			float m0[2] = { 1.0f, 1.0f }, m1[2] = { 1.0f, 1.0f };
			if (drop.p > 0.0f)
				tc_keep_pair(m0, m1, drop, kpos, nk, k0 + 8 * t + 2 * tig, dr0, dr1);
#pragma unroll
			for (int e = 0; e < 2; e++) {
				bool v0 = true, v1 = true;
				if (mask) {
					const int j = 8 * t + 2 * tig + e, key = k0 + j;
					const int kp = key < nk ? kpos[key] : INT_MAX, kd = D ? Is[j] : 0;
					v0 = kp <= qp0 && kp >= lo0 && kd == qd0;
					v1 = kp <= qp1 && kp >= lo1 && kd == qd1;
				}
				const float p0 = v0 ? exp2f(s[t][e] * sl - ls0) : 0.0f;
				const float p1 = v1 ? exp2f(s[t][2 + e] * sl - ls1) : 0.0f;
				s[t][e] = p0 * (dp[t][e] * m0[e] - d0);
				s[t][2 + e] = p1 * (dp[t][2 + e] * m1[e] - d1);
			}
		}
		/* dQ += dS K, 16 keys per step */
		uint32_t af[BK / 16][4]; /* wgmma reads them late: live until its wait */
#pragma unroll
		for (int ks = 0; ks < BK / 16; ks++) {
			tc_acc_to_a<H>(af[ks], s[2 * ks], s[2 * ks + 1]);
		}
		if constexpr (WG) { /* K transposed: LBO steps 8 keys, SBO 8 channels */
			const uint32_t kaddr = wg_smem_addr(Ks);
			wg_fence_operand(&acc[0][0], 4 * NOT);
			wg_fence_operand(&af[0][0], 4 * (BK / 16));
			wg_fence();
#pragma unroll
			for (int ks = 0; ks < BK / 16; ks++)
				wg_mma_rs_tb<H, KD>(&acc[0][0], af[ks], wg_desc(kaddr + 2 * RS * ks, RS, 128), 1);
			wg_commit();
			wg_wait<0>();
			wg_fence_operand(&acc[0][0], 4 * NOT);
			wg_fence_operand(&af[0][0], 4 * (BK / 16));
		} else {
#pragma unroll
			for (int ks = 0; ks < BK / 16; ks++)
#pragma unroll
				for (int dp2 = 0; dp2 < NOT / 2; dp2++) {
					const int j = lane / 8;
					uint32_t kf[4];
					tc_ldsm_x4_trans(kf, Ks + (16 * ks + lane % 8 + 8 * (j % 2)) * LDS + 16 * dp2 +
								     8 * (j / 2));
					tc_mma<H>(acc[2 * dp2], af[ks], kf);
					tc_mma<H>(acc[2 * dp2 + 1], af[ks], kf + 2);
				}
		}
	}
	float *Dq = dq + ((size_t)bh * Tq + q0) * KD + 2 * tig;
#pragma unroll
	for (int half = 0; half < 2; half++) {
		const int r = half ? r1 : r0;
		if (r >= nq)
			continue;
#pragma unroll
		for (int t = 0; t < NOT; t++) {
			float2 *o = (float2 *)(Dq + (size_t)r * KD + 8 * t);
			float2 y = *o;
			y.x += acc[t][2 * half] * scale;
			y.y += acc[t][2 * half + 1] * scale;
			*o = y;
		}
	}
}

/*
 * dkv kernel: grid B*g*ceil(Tk/64) blocks, 128 threads (a warp per 16 keys),
 * shared memory tc_dkv_smem<KD, WG>(). dk += scale dS^T Q, dv += P^T dO over
 * the group's heads; a NULL dk or dv is not written. WG (sm_90a): the block
 * is one warpgroup of 64 keys; S^T and dP^T by wgmma from K, V, Q, dO in
 * shared memory (K-major), dV and dK from P^T and dS^T in registers with dO
 * and Q transposed.
 */
template <class H, int KD, bool WG = false>
__global__ void __launch_bounds__(128)
	attn_tc_dkv_kernel(float *dk, float *dv, const uint16_t *oh, const float *lse, const float *dr,
			   const uint16_t *qh, const uint16_t *kh, const uint16_t *vh, const int32_t *qpos,
			   const int32_t *kpos, const int32_t *doc, int S, int Tq, int Tk, int a, int g, float scale,
			   int window, tc_drop drop)
{
	constexpr int NT = 128, BKV = 64, BQ = tc_bwd_geom<KD>::BQ2, LDS = tc_geom<KD>::LDS;
	constexpr int NKS = KD / 16, NST = BQ / 8, NOT = KD / 8;
	constexpr int RH = WG ? KD : LDS; /* halves per row of a tile */
	constexpr uint32_t RS = KD * 16;  /* wgmma: bytes from 8 rows of core matrices to the next 8 */
	uint16_t *Ks = (uint16_t *)TC_SMEM, *Vs = Ks + BKV * RH, *QO = Vs + BKV * RH; /* stage t: QO + 2 t BQ RH */
	float *LD = (float *)(QO + 4 * BQ * RH); /* lse, Dr and document ids of stage t at LD + 3 t BQ */
	const int lane = threadIdx.x % 32, w = threadIdx.x / 32, gid = lane / 4, tig = lane % 4;
	const int ntile = (Tk + BKV - 1) / BKV;
	const int bg = blockIdx.x / ntile, kt = blockIdx.x % ntile;
	const int b = bg / g, G = bg % g, m = a / g;
	const int k0 = kt * BKV, nkk = Tk - k0 < BKV ? Tk - k0 : BKV;
	const size_t ldo = (size_t)a * KD;
	const int32_t *D = doc ? doc + (size_t)b * S : NULL; /* this sample's document ids */
	/* the queries [qa, qe) that see a key of the tile: from the first that
	 * sees its first key to the last whose window holds its last key */
	const int qa = tc_count_le(qpos, Tq, kpos[k0] - 1), kl = kpos[k0 + nkk - 1];
	const int qe = window < 0 ? Tq : tc_count_le(qpos, Tq, kl > INT_MAX - window ? INT_MAX : kl + window);
	if (qa >= qe)
		return; /* every query is before every key of the tile, or past its window */
	/* this thread's keys: rows gid, gid+8 of the warp's 16 */
	const int c0 = 16 * w + gid, c1 = c0 + 8;
	const int kp0 = c0 < nkk ? kpos[k0 + c0] : INT_MAX, kp1 = c1 < nkk ? kpos[k0 + c1] : INT_MAX;
	const int kd0 = D && c0 < nkk ? D[kp0] : 0, kd1 = D && c1 < nkk ? D[kp1] : 0;
	/* the warp's last and first keys: query tiles from the last's position
	 * on, up to the first's window, need no mask */
	const int wlast = 16 * w + 15 < nkk ? 16 * w + 15 : nkk - 1;
	const int kp_w = 16 * w < nkk ? kpos[k0 + wlast] : INT_MAX;
	const int kf_w = 16 * w < nkk ? kpos[k0 + 16 * w] : INT_MAX;

	/* the steps: each head of the group, each tile of BQ queries of
	 * [qa, qe); step sn's Q, dO, lse and Dr go to stage sn & 1 by cp.async
	 * while step sn-1 is computed (with D, the rows' document ids too) */
	const int nqt = (qe - qa + BQ - 1) / BQ, nstep = m * nqt;
	auto load_step = [&](int sn) {
		const int hs = G * m + sn / nqt, qs = qa + (sn % nqt) * BQ, ns = qe - qs < BQ ? qe - qs : BQ;
		const size_t bhs = (size_t)b * a + hs;
		uint16_t *Qt = QO + 2 * (sn & 1) * BQ * RH;
		tc_copy<KD, BQ, NT, WG>(Qt, qh + (bhs * Tq + qs) * KD, KD, ns);
		tc_copy<KD, BQ, NT, WG>(Qt + BQ * RH, oh + ((size_t)b * Tq + qs) * ldo + (size_t)hs * KD, ldo, ns);
		/* the rows' lse and Dr by cp.async too (no round trip before the
		 * barrier); rows past the end, and Dr when dK is not wanted, are 0 */
		float *Lt = LD + 3 * (sn & 1) * BQ;
		const float *lg = lse + bhs * Tq + qs, *dg = dr ? dr + bhs * Tq + qs : lg;
		for (int i = threadIdx.x; i < BQ; i += NT) {
			tc_cp_async<4>(Lt + i, lg + (i < ns ? i : 0), i < ns ? 4 : 0);
			tc_cp_async<4>(Lt + BQ + i, dg + (i < ns ? i : 0), i < ns && dr ? 4 : 0);
		}
		tc_doc_issue<BQ, NT>((int32_t *)(Lt + 2 * BQ), D, qpos + qs, 0, ns);
	};
	tc_copy<KD, BKV, NT, WG>(Ks, kh + (((size_t)b * g + G) * Tk + k0) * KD, KD, nkk);
	tc_copy<KD, BKV, NT, WG>(Vs, vh + (((size_t)b * g + G) * Tk + k0) * KD, KD, nkk);
	load_step(0);
	tc_cp_async_commit();
	const float sl = scale * TC_LOG2E;
	float adk[NOT][4], adv[NOT][4];
#pragma unroll
	for (int t = 0; t < NOT; t++)
#pragma unroll
		for (int e = 0; e < 4; e++)
			adk[t][e] = adv[t][e] = 0.0f;

	const uint32_t kaddr = WG ? wg_smem_addr(Ks) : 0, vaddr = WG ? wg_smem_addr(Vs) : 0;
	for (int step = 0; step < nstep; step++) {
		tc_cp_async_wait<0>();
		if constexpr (WG)
			wg_fence_proxy();
		__syncthreads(); /* this step's tiles (and K, V) have landed; every warp is done with step-1's stage */
		if (step + 1 < nstep) {
			load_step(step + 1);
			tc_cp_async_commit();
		}
		const int h = G * m + step / nqt, q0 = qa + (step % nqt) * BQ;
		const uint16_t *Qs = QO + 2 * (step & 1) * BQ * RH, *Os = Qs + BQ * RH;
		const float *Ls = LD + 3 * (step & 1) * BQ, *Ds = Ls + BQ;
		const int32_t *Cs = (const int32_t *)(Ls + 2 * BQ); /* the rows' document ids (with D) */
		/* S^T = K Q^T and dP^T = V dO^T for the warp's 16 keys */
		float st[NST][4], dpt[NST][4];
#pragma unroll
		for (int t = 0; t < NST; t++)
#pragma unroll
			for (int e = 0; e < 4; e++)
				st[t][e] = dpt[t][e] = 0.0f;
		const uint32_t qaddr = WG ? wg_smem_addr(Qs) : 0, oaddr = WG ? wg_smem_addr(Os) : 0;
		if constexpr (WG) { /* 64 keys x BQ queries each, KD/16 chained steps */
			wg_ss_pair<H, BQ, KD>(&st[0][0], kaddr, qaddr, &dpt[0][0], vaddr, oaddr);
		} else {
#pragma unroll
			for (int ks = 0; ks < NKS; ks++) {
				const int j = lane / 8;
				const int aoff = (16 * w + lane % 8 + 8 * (j % 2)) * LDS + 16 * ks + 8 * (j / 2);
				uint32_t kf[4], vf[4];
				tc_ldsm_x4(kf, Ks + aoff);
				tc_ldsm_x4(vf, Vs + aoff);
#pragma unroll
				for (int np = 0; np < NST / 2; np++) {
					const int boff = (16 * np + lane % 8 + 8 * (j / 2)) * LDS + 16 * ks + 8 * (j % 2);
					uint32_t bf[4];
					tc_ldsm_x4(bf, Qs + boff);
					tc_mma<H>(st[2 * np], kf, bf);
					tc_mma<H>(st[2 * np + 1], kf, bf + 2);
					tc_ldsm_x4(bf, Os + boff);
					tc_mma<H>(dpt[2 * np], vf, bf);
					tc_mma<H>(dpt[2 * np + 1], vf, bf + 2);
				}
			}
		}
		/* P^T (dropped) into st, dS^T into dpt */
		const bool mask = D || q0 + BQ > qe || qpos[q0] < kp_w ||
				  (window >= 0 && qpos[q0 + BQ - 1] - window > kf_w);
#pragma unroll
		for (int t = 0; t < NST; t++)
#pragma unroll
			for (int e = 0; e < 2; e++) {
				const int col = 8 * t + 2 * tig + e;
				bool v0 = true, v1 = true;
				if (mask) {
					const int qp = q0 + col < qe ? qpos[q0 + col] : -1, lo = tc_window_lo(qp, window);
					const int qd = D ? Cs[col] : 0;
					v0 = kp0 <= qp && kp0 >= lo && kd0 == qd;
					v1 = kp1 <= qp && kp1 >= lo && kd1 == qd;
				}
				const float l2 = Ls[col] * TC_LOG2E;
				const float p0 = v0 ? exp2f(st[t][e] * sl - l2) : 0.0f;
				const float p1 = v1 ? exp2f(st[t][2 + e] * sl - l2) : 0.0f;
				float ma = 1.0f, mb = 1.0f; /* dropout: P M for dV, dP M for dS */
				if (drop.p > 0.0f) {
					const int qp = q0 + col < qe ? qpos[q0 + col] : -1;
					const uint64_t r = tc_drop_row(drop, b, h, qp);
					ma = tc_keep(drop, r + (uint64_t)kp0);
					mb = tc_keep(drop, r + (uint64_t)kp1);
				}
				st[t][e] = p0 * ma;
				st[t][2 + e] = p1 * mb;
				dpt[t][e] = p0 * (dpt[t][e] * ma - Ds[col]);
				dpt[t][2 + e] = p1 * (dpt[t][2 + e] * mb - Ds[col]);
			}
		/* dV += P^T dO, dK += dS^T Q, 16 queries per step */
		uint32_t pf[BQ / 16][4], sf[BQ / 16][4]; /* wgmma reads them late: live until its wait */
#pragma unroll
		for (int ks = 0; ks < BQ / 16; ks++) {
			tc_acc_to_a<H>(pf[ks], st[2 * ks], st[2 * ks + 1]);
			tc_acc_to_a<H>(sf[ks], dpt[2 * ks], dpt[2 * ks + 1]);
		}
		if constexpr (WG) { /* dO and Q transposed: LBO steps 8 queries, SBO 8 channels */
			wg_fence_operand(&adv[0][0], 4 * NOT);
			wg_fence_operand(&adk[0][0], 4 * NOT);
			wg_fence_operand(&pf[0][0], 4 * (BQ / 16));
			wg_fence_operand(&sf[0][0], 4 * (BQ / 16));
			wg_fence();
#pragma unroll
			for (int ks = 0; ks < BQ / 16; ks++) {
				wg_mma_rs_tb<H, KD>(&adv[0][0], pf[ks], wg_desc(oaddr + 2 * RS * ks, RS, 128), 1);
				wg_mma_rs_tb<H, KD>(&adk[0][0], sf[ks], wg_desc(qaddr + 2 * RS * ks, RS, 128), 1);
			}
			wg_commit();
			wg_wait<0>();
			wg_fence_operand(&adv[0][0], 4 * NOT);
			wg_fence_operand(&adk[0][0], 4 * NOT);
			wg_fence_operand(&pf[0][0], 4 * (BQ / 16));
			wg_fence_operand(&sf[0][0], 4 * (BQ / 16));
		} else {
#pragma unroll
			for (int ks = 0; ks < BQ / 16; ks++)
#pragma unroll
				for (int dp2 = 0; dp2 < NOT / 2; dp2++) {
					const int j = lane / 8;
					const int off = (16 * ks + lane % 8 + 8 * (j % 2)) * LDS + 16 * dp2 + 8 * (j / 2);
					uint32_t bf[4];
					tc_ldsm_x4_trans(bf, Os + off);
					tc_mma<H>(adv[2 * dp2], pf[ks], bf);
					tc_mma<H>(adv[2 * dp2 + 1], pf[ks], bf + 2);
					tc_ldsm_x4_trans(bf, Qs + off);
					tc_mma<H>(adk[2 * dp2], sf[ks], bf);
					tc_mma<H>(adk[2 * dp2 + 1], sf[ks], bf + 2);
				}
		}
	}
	const size_t base = (((size_t)b * g + G) * Tk + k0) * KD + 2 * tig;
#pragma unroll
	for (int half = 0; half < 2; half++) {
		const int c = half ? c1 : c0;
		if (c >= nkk)
			continue;
#pragma unroll
		for (int t = 0; t < NOT; t++) {
			const size_t x = base + (size_t)c * KD + 8 * t;
			if (dk) {
				float2 y = *(float2 *)(dk + x);
				y.x += adk[t][2 * half] * scale;
				y.y += adk[t][2 * half + 1] * scale;
				*(float2 *)(dk + x) = y;
			}
			if (dv) {
				float2 y = *(float2 *)(dv + x);
				y.x += adv[t][2 * half];
				y.y += adv[t][2 * half + 1];
				*(float2 *)(dv + x) = y;
			}
		}
	}
}


#endif
