/*
 * cuda_fp16.h - the emulated build's stand-in (make emu): the IEEE half
 * type and the conversions megac's kernels use, round to nearest even as
 * the device's cvt.rn.f16.f32.
 */
#ifndef MEGAC_EMU_CUDA_FP16_H
#define MEGAC_EMU_CUDA_FP16_H

#include "emu.h"

struct __half {
	uint16_t x;
};
struct __half2 {
	__half x, y;
};
static inline __half __float2half_rn(float f) { return __half{ emu_f32_to_f16(f) }; }
static inline __half __float2half(float f) { return __float2half_rn(f); }
static inline float __half2float(__half h) { return emu_f16_to_f32(h.x); }
static inline __half2 __floats2half2_rn(float lo, float hi) { return __half2{ __float2half_rn(lo), __float2half_rn(hi) }; }

#endif
