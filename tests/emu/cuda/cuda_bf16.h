/*
 * cuda_bf16.h - the emulated build's stand-in (make emu): the bfloat16
 * type and the conversions megac's kernels use, round to nearest even as
 * the device's cvt.rn.bf16.f32.
 */
#ifndef MEGAC_EMU_CUDA_BF16_H
#define MEGAC_EMU_CUDA_BF16_H

#include "emu.h"

struct __nv_bfloat16 {
	uint16_t x;
};
struct __nv_bfloat162 {
	__nv_bfloat16 x, y;
};
static inline __nv_bfloat16 __float2bfloat16_rn(float f) { return __nv_bfloat16{ emu_f32_to_bf16(f) }; }
static inline __nv_bfloat16 __float2bfloat16(float f) { return __float2bfloat16_rn(f); }
static inline float __bfloat162float(__nv_bfloat16 h) { return emu_bf16_to_f32(h.x); }
static inline __nv_bfloat162 __floats2bfloat162_rn(float lo, float hi)
{
	return __nv_bfloat162{ __float2bfloat16_rn(lo), __float2bfloat16_rn(hi) };
}

#endif
