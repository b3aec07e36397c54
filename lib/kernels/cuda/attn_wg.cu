/*
 * attn_wg.cu - the tensor-core attention's kernels on Hopper's warpgroup
 * products (attn_tc.cuh with WG), built for sm_90a alone (the GNUmakefile
 * gives this file its own -gencode), so they exist only where wgmma does.
 * attn_tc.cu calls cuda_attn_wg_forward/_backward on an sm_90 device unless
 * MEGAC_TC_WGMMA=0; the emulator test runs the same kernel source.
 */
#include "common.cuh"

#include "attn_tc.cuh"

template <class H, int KD>
static void wg_launch(float *out, float *lse, const uint16_t *qh, const uint16_t *kh, const uint16_t *vh,
		      const int32_t *qpos, const int32_t *kpos, const int32_t *doc, int S, int B, int Tq, int Tk,
		      int a, int g, float scale, int window, int accumulate, tc_drop drop)
{
	static bool opted;
	constexpr size_t smem = tc_fwd_smem<KD, 8, true>();
	smem_opt_in(attn_tc_fwd_kernel<H, KD, 8, true>, smem, &opted);
	launch<attn_tc_fwd_kernel<H, KD, 8, true>>(grid_1d((size_t)B * a, Tq, 128), 256, smem,
		out, lse, qh, kh, vh, qpos, kpos, doc, S, Tq, Tk, a, g, scale, window, accumulate, drop);
	KERNEL_CHECK();
}

void cuda_attn_wg_forward(int fp16, int k, float *out, float *lse, const uint16_t *qh, const uint16_t *kh,
			  const uint16_t *vh, const int32_t *qpos, const int32_t *kpos, const int32_t *doc, int S,
			  int B, int Tq, int Tk, int a, int g, float scale, int window, int accumulate, tc_drop drop)
{
#define WG_ARGS out, lse, qh, kh, vh, qpos, kpos, doc, S, B, Tq, Tk, a, g, scale, window, accumulate, drop
	if (!fp16 && k == 64)
		wg_launch<tc_bf16, 64>(WG_ARGS);
	else if (!fp16)
		wg_launch<tc_bf16, 128>(WG_ARGS);
	else if (k == 64)
		wg_launch<tc_f16, 64>(WG_ARGS);
	else
		wg_launch<tc_f16, 128>(WG_ARGS);
#undef WG_ARGS
}

template <class H, int KD>
static void wg_bwd_launch(float *dq, float *dk, float *dv, const uint16_t *oh, const float *lse, const float *dr,
			  const uint16_t *qh, const uint16_t *kh, const uint16_t *vh, const int32_t *qpos,
			  const int32_t *kpos, const int32_t *doc, int S, int B, int Tq, int Tk, int a, int g,
			  float scale, int window, tc_drop drop)
{
	static bool opted_dq, opted_dkv;
	if (dq) {
		constexpr size_t smem = tc_dq_smem<KD, true>();
		smem_opt_in(attn_tc_dq_kernel<H, KD, true>, smem, &opted_dq);
		launch<attn_tc_dq_kernel<H, KD, true>>(grid_1d((size_t)B * a, Tq, 64), 128, smem,
			dq, oh, lse, dr, qh, kh, vh, qpos, kpos, doc, S, Tq, Tk, a, g, scale, window, drop);
		KERNEL_CHECK();
	}
	if (dk || dv) {
		constexpr size_t smem = tc_dkv_smem<KD, true>();
		smem_opt_in(attn_tc_dkv_kernel<H, KD, true>, smem, &opted_dkv);
		launch<attn_tc_dkv_kernel<H, KD, true>>(grid_1d((size_t)B * g, Tk, 64), 128, smem,
			dk, dv, oh, lse, dr, qh, kh, vh, qpos, kpos, doc, S, Tq, Tk, a, g, scale, window, drop);
		KERNEL_CHECK();
	}
}

void cuda_attn_wg_backward(int fp16, int k, float *dq, float *dk, float *dv, const uint16_t *oh, const float *lse,
			   const float *dr, const uint16_t *qh, const uint16_t *kh, const uint16_t *vh,
			   const int32_t *qpos, const int32_t *kpos, const int32_t *doc, int S, int B, int Tq, int Tk,
			   int a, int g, float scale, int window, tc_drop drop)
{
#define WG_ARGS dq, dk, dv, oh, lse, dr, qh, kh, vh, qpos, kpos, doc, S, B, Tq, Tk, a, g, scale, window, drop
	if (!fp16 && k == 64)
		wg_bwd_launch<tc_bf16, 64>(WG_ARGS);
	else if (!fp16)
		wg_bwd_launch<tc_bf16, 128>(WG_ARGS);
	else if (k == 64)
		wg_bwd_launch<tc_f16, 64>(WG_ARGS);
	else
		wg_bwd_launch<tc_f16, 128>(WG_ARGS);
#undef WG_ARGS
}
