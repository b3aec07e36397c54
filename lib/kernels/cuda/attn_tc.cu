/*
 * attn_tc.cu - the half tables' attention_block_forward and _backward
 * (kops_cuda_half): the tensor-core flash attention of attn_tc.cuh where it
 * applies (head dim 64 or 128, 16-byte aligned rows, its shared memory within
 * the device's; with or without a sliding window or document masks),
 * attn.cu's fp32 kernels otherwise.
 * Each call first converts its fp32 inputs to halves in
 * the scratch buffer (one pass; every block then reads 2 bytes per value,
 * by cp.async). The kernels are tested without a GPU in the thread-block
 * emulator (tests/emu/test_attn_tc.cc) and on a GPU by tests/gpu/parity.c
 * and the bf16 training parity of tests/gpu/train_parity.sh.
 */
#include "common.cuh"

#include "attn_tc.cuh"

#include <stdlib.h>
#include <string.h>

/* ops.h's dropout, as attn.cu draws it */
static tc_drop tc_drop_of(float p, uint64_t seed, uint64_t offset, int B, int S)
{
	tc_drop d;
	d.p = p;
	d.ks = keep_scale_of(p);
	d.seed = seed;
	d.offset = offset;
	d.B = B;
	d.S = S;
	return d;
}

/* n fp32 values (a multiple of 4, 16-byte aligned) to halves at dst */
template <class H> static void tc_to_half(uint16_t *dst, const float *src, size_t n)
{
	launch<attn_tc_half_kernel<H>>(grid_for(n / 4), THREADS, 0, (uint32_t *)dst, src, n / 4);
	KERNEL_CHECK();
}

/* halves carved out of the scratch buffer at byte offset *off, 256-byte aligned */
static uint16_t *tc_carve(char *base, size_t *off, size_t n)
{
	uint16_t *p = (uint16_t *)(base + *off);
	*off += (n * sizeof(uint16_t) + 255) & ~(size_t)255;
	return p;
}

/* the forward's warps per block (16 query rows each): 8, or MEGAC_TC_WARPS=4,
 * which attn_bench times beside it (a measurement on a GPU decides) */
static int tc_fwd_warps(void)
{
	static bool warned;
	const char *e = getenv("MEGAC_TC_WARPS");
	if (e && strcmp(e, "4") && strcmp(e, "8") && !warned) {
		fprintf(stderr, "megac: warning: MEGAC_TC_WARPS=%s: expected 4 or 8; using 8\n", e);
		warned = true;
	}
	return e && !strcmp(e, "4") ? 4 : 8;
}

/* the current device's shared memory per block with the opt-in, asked once
 * per device: the 8-warp forward at head dim 128 (105 KB) is over the
 * 99 KB of sm_86/sm_89 parts, which take 4 warps (or the fp32 kernels) */
static size_t tc_smem_limit(void)
{
	static int limit[64]; /* per device; 0: not asked yet */
	int dev = 0;
	CUDA_CHECK(cudaGetDevice(&dev));
	if (dev < 0 || dev >= 64)
		return 48 * 1024;
	if (!limit[dev]) {
		int v = 0;
		CUDA_CHECK(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
		limit[dev] = v > 0 ? v : 48 * 1024;
	}
	return (size_t)limit[dev];
}

/* whether the forward takes wgmma (attn_wg.cu): an sm_90 device (H100,
 * H200), unless MEGAC_TC_WGMMA=0 (attn_bench times both); asked once per device */
static bool tc_use_wgmma(void)
{
	static signed char is90[64]; /* per device; 0: not asked, 1: sm_90, -1: other */
	const char *e = getenv("MEGAC_TC_WGMMA");
	if (e && !strcmp(e, "0"))
		return false;
	int dev = 0;
	CUDA_CHECK(cudaGetDevice(&dev));
	if (dev < 0 || dev >= 64)
		return false;
	if (!is90[dev]) {
		int major = 0, minor = 0;
		CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
		CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
		is90[dev] = major == 9 && minor == 0 ? 1 : -1;
	}
	return is90[dev] > 0; /* its 49 KB (k 64) or 97 KB (k 128) of shared memory fit every sm_90 part */
}

/* the forward's warps per block that fit this device, or 0: none does */
static int tc_fwd_fit(int k)
{
	const size_t lim = tc_smem_limit();
	const size_t s8 = k == 64 ? tc_fwd_smem<64, 8>() : tc_fwd_smem<128, 8>();
	const size_t s4 = k == 64 ? tc_fwd_smem<64, 4>() : tc_fwd_smem<128, 4>();
	const int want = tc_fwd_warps();
	if (want == 8 && s8 <= lim)
		return 8;
	return s4 <= lim ? 4 : 0;
}

template <class H, int KD, int WQ>
static void tc_fwd_launch(float *out, float *lse, const uint16_t *qh, const uint16_t *kh, const uint16_t *vh,
			  const int32_t *qpos, const int32_t *kpos, const int32_t *doc, int S, int B, int Tq, int Tk,
			  int a, int g, float scale, int window, int accumulate, tc_drop drop)
{
	static bool opted;
	constexpr size_t smem = tc_fwd_smem<KD, WQ>();
	smem_opt_in(attn_tc_fwd_kernel<H, KD, WQ>, smem, &opted);
	const unsigned blocks = grid_1d((size_t)B * a, Tq, 16 * WQ);
	launch<attn_tc_fwd_kernel<H, KD, WQ>>(blocks, 32 * WQ, smem, out, lse, qh, kh, vh, qpos, kpos, doc, S, Tq, Tk,
					      a, g, scale, window, accumulate, drop);
	KERNEL_CHECK();
}

template <class H>
static void tc_block_forward(float *out, float *lse, const float *q, const float *kk, const float *v,
			     const int32_t *qpos, const int32_t *kpos, const int32_t *doc, int B, int Tq, int Tk,
			     int a, int g, int k, int S, float scale, int window, float dropout_p, uint64_t seed,
			     uint64_t offset, int accumulate)
{
	const bool aligned = (((uintptr_t)q | (uintptr_t)kk | (uintptr_t)v | (uintptr_t)out) & 15) == 0;
	const int warps = k == 64 || k == 128 ? tc_fwd_fit(k) : 0;
	if (!warps || !aligned || B <= 0 || Tq <= 0 || Tk <= 0 || a <= 0 || g <= 0 || a % g) {
		cuda_attention_block_forward_f32(out, lse, q, kk, v, qpos, kpos, doc, B, Tq, Tk, a, g, k, S, scale,
						 window, dropout_p, seed, offset, accumulate);
		return;
	}
	const size_t nq = (size_t)B * a * Tq * k, nkv = (size_t)B * g * Tk * k;
	char *base = (char *)scratch_alloc((nq + 2 * nkv) * sizeof(uint16_t) + 3 * 256);
	size_t off = 0;
	uint16_t *qh = tc_carve(base, &off, nq), *kh = tc_carve(base, &off, nkv), *vh = tc_carve(base, &off, nkv);
	tc_to_half<H>(qh, q, nq);
	tc_to_half<H>(kh, kk, nkv);
	tc_to_half<H>(vh, v, nkv);
	const tc_drop drop = tc_drop_of(dropout_p, seed, offset, B, S);
	if (tc_use_wgmma()) {
		cuda_attn_wg_forward(H::kind, k, out, lse, qh, kh, vh, qpos, kpos, doc, S, B, Tq, Tk, a, g, scale,
				     window, accumulate, drop);
		scratch_free(base);
		return;
	}
#define TC_FWD(KD, WQ) \
	tc_fwd_launch<H, KD, WQ>(out, lse, qh, kh, vh, qpos, kpos, doc, S, B, Tq, Tk, a, g, scale, window, \
				 accumulate, drop)
	if (warps == 4) {
		if (k == 64)
			TC_FWD(64, 4);
		else
			TC_FWD(128, 4);
	} else {
		if (k == 64)
			TC_FWD(64, 8);
		else
			TC_FWD(128, 8);
	}
#undef TC_FWD
	scratch_free(base);
}

#define TC_BLOCK_FWD(name, H)                                                                           \
	static void name(float *out, float *lse, const float *q, const float *kk, const float *v,       \
			 const int32_t *qpos, const int32_t *kpos, const int32_t *doc, int B, int Tq,    \
			 int Tk, int a, int g, int k, int S, float scale, int window, float dropout_p,   \
			 uint64_t seed, uint64_t offset, int accumulate)                                 \
	{                                                                                               \
		tc_block_forward<H>(out, lse, q, kk, v, qpos, kpos, doc, B, Tq, Tk, a, g, k, S, scale, window, \
				    dropout_p, seed, offset, accumulate);                               \
	}
TC_BLOCK_FWD(tc_block_forward_bf16, tc_bf16)
TC_BLOCK_FWD(tc_block_forward_f16, tc_f16)

template <class H, int KD>
static void tc_bwd_launch(float *dq, float *dk, float *dv, const float *dout, const float *out, const float *lse,
			  const float *q, const float *kk, const float *v, const int32_t *qpos, const int32_t *kpos,
			  const int32_t *doc, int S, int B, int Tq, int Tk, int a, int g, float scale, int window,
			  tc_drop drop)
{
	static bool opted_dq, opted_dkv;
	const size_t nq = (size_t)B * a * Tq * KD, nkv = (size_t)B * g * Tk * KD, nl = (size_t)B * a * Tq;
	char *base = (char *)scratch_alloc(((nl * sizeof(float) + 255) & ~(size_t)255) +
					   (2 * nq + 2 * nkv) * sizeof(uint16_t) + 4 * 256);
	size_t off = (nl * sizeof(float) + 255) & ~(size_t)255;
	uint16_t *qh = tc_carve(base, &off, nq), *oh = tc_carve(base, &off, nq);
	uint16_t *kh = tc_carve(base, &off, nkv), *vh = tc_carve(base, &off, nkv);
	tc_to_half<H>(qh, q, nq);
	tc_to_half<H>(oh, dout, nq);
	tc_to_half<H>(kh, kk, nkv);
	tc_to_half<H>(vh, v, nkv);
	float *dr = NULL; /* Dr = rowsum(dO O) feeds dS, which dV alone does not need */
	if (dq || dk) {
		dr = (float *)base;
		launch<attn_tc_rowdot_kernel<KD>>(grid_blocks(((size_t)B * Tq * a + 3) / 4), 128, 0, dr, dout, out, qpos, kpos, B, Tq, a);
		KERNEL_CHECK();
	}
	if (tc_use_wgmma()) {
		cuda_attn_wg_backward(H::kind, KD, dq, dk, dv, oh, lse, dr, qh, kh, vh, qpos, kpos, doc, S, B, Tq, Tk,
				      a, g, scale, window, drop);
		scratch_free(base);
		return;
	}
	if (dq) {
		constexpr size_t smem = tc_dq_smem<KD>();
		smem_opt_in(attn_tc_dq_kernel<H, KD>, smem, &opted_dq);
		launch<attn_tc_dq_kernel<H, KD>>(grid_1d((size_t)B * a, Tq, 64), 128, smem,
			dq, oh, lse, dr, qh, kh, vh, qpos, kpos, doc, S, Tq, Tk, a, g, scale, window, drop);
		KERNEL_CHECK();
	}
	if (dk || dv) {
		constexpr size_t smem = tc_dkv_smem<KD>();
		smem_opt_in(attn_tc_dkv_kernel<H, KD>, smem, &opted_dkv);
		launch<attn_tc_dkv_kernel<H, KD>>(grid_1d((size_t)B * g, Tk, 64), 128, smem,
			dk, dv, oh, lse, dr, qh, kh, vh, qpos, kpos, doc, S, Tq, Tk, a, g, scale, window, drop);
		KERNEL_CHECK();
	}
	scratch_free(base);
}

template <class H>
static void tc_block_backward(float *dq, float *dk, float *dv, const float *dout, const float *out,
			      const float *lse, const float *q, const float *kk, const float *v, const int32_t *qpos,
			      const int32_t *kpos, const int32_t *doc, int B, int Tq, int Tk, int a, int g, int k,
			      int S, float scale, int window, float dropout_p, uint64_t seed, uint64_t offset)
{
	const uintptr_t any = (uintptr_t)dq | (uintptr_t)dk | (uintptr_t)dv | (uintptr_t)dout | (uintptr_t)out |
			      (uintptr_t)q | (uintptr_t)kk | (uintptr_t)v;
	const size_t need = k == 64 ? (tc_dq_smem<64>() > tc_dkv_smem<64>() ? tc_dq_smem<64>() : tc_dkv_smem<64>())
				    : (tc_dq_smem<128>() > tc_dkv_smem<128>() ? tc_dq_smem<128>() : tc_dkv_smem<128>());
	if ((k != 64 && k != 128) || need > tc_smem_limit() || (any & 15) || B <= 0 || Tq <= 0 ||
	    Tk <= 0 || a <= 0 || g <= 0 || a % g) {
		cuda_attention_block_backward_f32(dq, dk, dv, dout, out, lse, q, kk, v, qpos, kpos, doc, B, Tq, Tk, a,
						  g, k, S, scale, window, dropout_p, seed, offset);
		return;
	}
	if (!dq && !dk && !dv)
		return;
	const tc_drop drop = tc_drop_of(dropout_p, seed, offset, B, S);
	if (k == 64)
		tc_bwd_launch<H, 64>(dq, dk, dv, dout, out, lse, q, kk, v, qpos, kpos, doc, S, B, Tq, Tk, a, g, scale,
				     window, drop);
	else
		tc_bwd_launch<H, 128>(dq, dk, dv, dout, out, lse, q, kk, v, qpos, kpos, doc, S, B, Tq, Tk, a, g, scale,
				      window, drop);
}

#define TC_BLOCK_BWD(name, H)                                                                            \
	static void name(float *dq, float *dk, float *dv, const float *dout, const float *out,           \
			 const float *lse, const float *q, const float *kk, const float *v,               \
			 const int32_t *qpos, const int32_t *kpos, const int32_t *doc, int B, int Tq,     \
			 int Tk, int a, int g, int k, int S, float scale, int window, float dropout_p,    \
			 uint64_t seed, uint64_t offset)                                                  \
	{                                                                                                \
		tc_block_backward<H>(dq, dk, dv, dout, out, lse, q, kk, v, qpos, kpos, doc, B, Tq, Tk, a, g, k, S, \
				     scale, window, dropout_p, seed, offset);                             \
	}
TC_BLOCK_BWD(tc_block_backward_bf16, tc_bf16)
TC_BLOCK_BWD(tc_block_backward_f16, tc_f16)

void cuda_attn_tc_fill(struct kops *t, enum gemm_precision prec)
{
	if (prec == GEMM_BF16) {
		t->attention_block_forward = tc_block_forward_bf16;
		t->attention_block_backward = tc_block_backward_bf16;
	} else if (prec == GEMM_F16) {
		t->attention_block_forward = tc_block_forward_f16;
		t->attention_block_backward = tc_block_backward_f16;
	}
}
