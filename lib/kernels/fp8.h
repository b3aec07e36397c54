/*
 * fp8.h - the FP8 casts and scale rules, the one spec both backends follow
 * (header only: C11 for the CPU, nvcc's CUDA C++ and the emulated device's
 * host C++ for the CUDA backend). Everything is integer and bit arithmetic
 * plus single IEEE float operations (one multiply, one division), so host and
 * device give the same bits; CUDA code must not be built with fast math
 * (-ftz, approximate division) for that to hold.
 *
 * Formats (enum kops_fp8): E4M3 (float8_e4m3fn) has 4 exponent bits, bias 7,
 * 3 mantissa bits, no infinities, 0x7f/0xff the NaNs, largest 448 (0x7e),
 * smallest subnormal 2^-9. E5M2 is IEEE-like: 5 exponent bits, bias 15, 2
 * mantissa bits, 0x7c infinity, 0x7d..0x7f NaNs, largest 57344 (0x7b),
 * smallest subnormal 2^-16.
 *
 * The rules:
 *  1. fp8_from_f32 (the cast every quantization uses): round to nearest,
 *     ties to even, at every exponent and in the subnormal range (half the
 *     smallest subnormal rounds to 0, anything above it to the smallest
 *     subnormal); signed zero kept (-0 -> 0x80). Saturating (CUDA's
 *     __NV_SATFINITE, PTX cvt.rn.satfinite): a finite value whose rounding
 *     exceeds the largest finite value, and +-Inf, become +-largest (E4M3:
 *     464, the tie between 448 and 480, goes to the even 448, anything
 *     above it overflows to 0x7e|sign; E5M2: 61440, the tie between 57344
 *     and 65536, goes to the even 65536 = Inf, so >= 61440 overflows to
 *     0x7b|sign). NaN -> 0x7f whatever its sign, in both formats: the
 *     canonical NaN of cuda_fp8.hpp's host cast (__nv_cvt_float_to_fp8,
 *     which test_fp8 matches on all 2^32 patterns); the PTX
 *     cvt.rn.satfinite that cuda_fp8.hpp uses on sm_89+ is documented to
 *     give a canonical NaN too (not yet checked on a GPU).
 *  2. fp8_from_f32_nosat: the same without saturation, bit for bit what
 *     ml_dtypes' float32 -> float8_e4m3fn / float8_e5m2 gives: E4M3 overflow
 *     (and +-Inf) -> NaN 0x7f|sign; E5M2 overflow and +-Inf -> +-Inf
 *     (0x7c|sign); NaN -> 0x7f|sign (E4M3), 0x7e|sign (E5M2; ml_dtypes keeps
 *     the quiet bit and drops the payload).
 *  3. fp8_to_f32: exact; NaN codes give a quiet NaN with the code's sign,
 *     E5M2 0x7c|sign gives +-Inf.
 *  4. fp8_scale_from_amax(amax, fmax, pow2, value_for_inf) (Transformer
 *     Engine's compute_scale_from_amax with epsilon 0): amax 0, negative,
 *     +-Inf or NaN -> 1; otherwise fmax / amax correctly rounded; a quotient
 *     that overflows to Inf becomes value_for_inf; pow2 then clears the
 *     mantissa bits (rounds the scale down to a power of two).
 *  5. fp8_e8m0_from(v) (TE's float_to_e8m0, its branch for GPUs before
 *     Blackwell): the E8M0 code (biased exponent) of |v| rounded up to a
 *     power of two: NaN -> 0xff, +-Inf -> 0xfe, +-0 -> 0; otherwise the
 *     biased exponent field, plus one when any mantissa bit is set, except
 *     that it never goes past 0xfe (satfinite) and an fp32 subnormal <=
 *     2^-127 gives 0 (2^-127 is E8M0's smallest).
 *  6. fp8_e8m0_rcp(e) (TE's exp2f_rcp<float>): the quantization multiplier
 *     2^(127 - e): e 255 -> NaN, 254 -> 2^-127 (an fp32 subnormal).
 *     fp8_e8m0_to_f32(e) (TE's exp2f): the dequantization scale 2^(e - 127):
 *     255 -> NaN, 0 -> 2^-127.
 *  7. Block amax: max |x| over the block taken on the bit patterns of |x|
 *     (fp8_abs_bits): order free, and any NaN makes the amax NaN (0 for an
 *     empty block). fp8_amax and fp8_quantize's amax output use the same.
 *  8. fp8_quantize, per scaling (enum kops_fp8_scaling), for every value x
 *     of a block (br x bc, the last block of a row or column short):
 *     GIVEN: codes fp8_from_f32(x * scale); every block's sinv = 1 / scale
 *            (one block, br >= rows and bc >= cols, in the recipes);
 *     AMAX:  scale = fp8_scale_from_amax(block amax, fp8_max(fmt), pow2,
 *            FP8_BF16_MAX) (TE's value for an Inf quotient is the largest
 *            finite value of the input type, bf16 under --bf16: 0x7f7f =
 *            3.38953139e38, 2^127 after pow2); codes fp8_from_f32(x * scale);
 *            sinv = 1 / scale (correctly rounded);
 *     TENSOR: AMAX without pow2 and with FP8_F32_MAX for an Inf quotient
 *            (TE's current scaling, nvte_compute_scale_from_amax);
 *     MX:    e = fp8_e8m0_from(block amax * (1.0f / fp8_max(fmt))), the
 *            reciprocal rounded to float first (fp8_mx_code); codes
 *            fp8_from_f32(x * fp8_e8m0_rcp(e)); sinv = fp8_e8m0_to_f32(e).
 *            A NaN in the block gives e 0xff: every code and sinv NaN; an Inf
 *            gives e 0xfe (finite values mostly flush to 0, the Inf saturates).
 *     Each product x * scale is one rounded fp32 multiply (no FMA).
 */
#ifndef MEGAC_KERNELS_FP8_H
#define MEGAC_KERNELS_FP8_H

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "ops.h"

#ifdef __CUDACC__
#define FP8_HD __host__ __device__ static inline
#else
#define FP8_HD static inline
#endif

/* the largest finite bfloat16, 0x7f7f: TE's value_for_inf (rule 8, AMAX), the largest
 * value of the quantized input's type, which is bf16 under --bf16 */
#define FP8_BF16_MAX 3.38953139e38f
/* the largest finite float (FLT_MAX): TE's current scaling's value_for_inf (rule 8, TENSOR) */
#define FP8_F32_MAX 3.40282347e38f

FP8_HD uint32_t fp8_f32_bits(float x)
{
#ifdef __CUDA_ARCH__
	return __float_as_uint(x);
#else
	uint32_t u;

	memcpy(&u, &x, sizeof(u));
	return u;
#endif
}

FP8_HD float fp8_bits_f32(uint32_t u)
{
#ifdef __CUDA_ARCH__
	return __uint_as_float(u);
#else
	float x;

	memcpy(&x, &u, sizeof(x));
	return x;
#endif
}

/* a / b correctly rounded, whatever the device compiler's division flags */
FP8_HD float fp8_div(float a, float b)
{
#ifdef __CUDA_ARCH__
	return __fdiv_rn(a, b);
#else
	return a / b;
#endif
}

/* x * y rounded once (never contracted into an FMA with a neighbour) */
FP8_HD float fp8_mul(float x, float y)
{
#ifdef __CUDA_ARCH__
	return __fmul_rn(x, y);
#else
	return x * y;
#endif
}

FP8_HD float fp8_max(enum kops_fp8 f)
{
	return f == KOPS_E4M3 ? 448.0f : 57344.0f;
}

/* the bits of |x|: as unsigned integers they order like the magnitudes,
 * NaNs above +Inf (rule 7) */
FP8_HD uint32_t fp8_abs_bits(float x)
{
	return fp8_f32_bits(x) & 0x7fffffffu;
}

/* rules 1 and 2: sat picks saturation */
FP8_HD uint8_t fp8_cast_f32(float x, enum kops_fp8 f, bool sat)
{
	const uint32_t u = fp8_f32_bits(x);
	const uint32_t sign = (u >> 24) & 0x80u;
	const uint32_t a = u & 0x7fffffffu;
	const bool e4 = f == KOPS_E4M3;
	const int m = e4 ? 3 : 2;           /* mantissa bits */
	const int bias = e4 ? 7 : 15;
	const uint32_t maxcode = e4 ? 0x7eu : 0x7bu;
	const int e = (int)(a >> 23) - 127; /* unbiased exponent (fp32 subnormals: far below fp8's) */
	uint32_t code, rem, half;

	if (a > 0x7f800000u) {               /* NaN */
		if (sat)
			return 0x7f;
		return (uint8_t)(sign | (e4 ? 0x7fu : 0x7eu));
	}
	if (a == 0x7f800000u)                /* Inf */
		code = maxcode + 1;
	else if (e >= 1 - bias) {           /* fp8 normal range: drop 23 - m mantissa bits */
		code = ((uint32_t)(e + bias) << m) | ((a & 0x7fffffu) >> (23 - m));
		rem = a & ((1u << (23 - m)) - 1);
		half = 1u << (22 - m);
		if (rem > half || (rem == half && (code & 1)))
			code++;              /* a carry moves into the exponent, as it should */
	} else {                             /* fp8 subnormal range: units of 2^(1 - bias - m) */
		int shift = 23 - m + (1 - bias - e);    /* >= 24 - m */
		uint32_t sig = (a & 0x7fffffu) | (a >= 0x00800000u ? 0x800000u : 0);

		if (shift > 25) {
			code = 0;            /* below a quarter of the smallest subnormal */
		} else {
			code = sig >> shift;
			rem = sig & ((1u << shift) - 1);
			half = 1u << (shift - 1);
			if (rem > half || (rem == half && (code & 1)))
				code++;      /* may become the smallest normal: right */
		}
	}
	if (code > maxcode) {
		if (sat)
			code = maxcode;
		else
			code = e4 ? 0x7fu : 0x7cu;
	}
	return (uint8_t)(sign | code);
}

FP8_HD uint8_t fp8_from_f32(float x, enum kops_fp8 f)
{
	return fp8_cast_f32(x, f, true);
}

FP8_HD uint8_t fp8_from_f32_nosat(float x, enum kops_fp8 f)
{
	return fp8_cast_f32(x, f, false);
}

/* rule 3 */
FP8_HD float fp8_to_f32(uint8_t q, enum kops_fp8 f)
{
	const uint32_t sign = (uint32_t)(q & 0x80u) << 24;
	const bool e4 = f == KOPS_E4M3;
	const int m = e4 ? 3 : 2;
	const int bias = e4 ? 7 : 15;
	const uint32_t ef = (uint32_t)(q & 0x7fu) >> m;
	const uint32_t man = q & ((1u << m) - 1);

	if (e4 ? (q & 0x7fu) == 0x7fu : ef == 31) {
		if (!e4 && man == 0)
			return fp8_bits_f32(sign | 0x7f800000u);
		return fp8_bits_f32(sign | 0x7fc00000u);
	}
	if (ef == 0) {
		/* man * 2^(1 - bias - m): exact (an integer below 8 times a power of two) */
		float v = (float)man * fp8_bits_f32((uint32_t)(127 + 1 - bias - m) << 23);

		return fp8_bits_f32(sign | fp8_f32_bits(v));
	}
	return fp8_bits_f32(sign | ((ef - bias + 127) << 23) | (man << (23 - m)));
}

/* rule 4 */
FP8_HD float fp8_scale_from_amax(float amax, float fmax, bool pow2, float value_for_inf)
{
	const uint32_t a = fp8_f32_bits(amax);
	float scale;

	/* negative (after epsilon 0's clamp: 0), zero, Inf, NaN */
	if ((a >> 31) || (a & 0x7fffffffu) == 0 || (a & 0x7f800000u) == 0x7f800000u)
		return 1.0f;
	scale = fp8_div(fmax, amax);
	if ((fp8_f32_bits(scale) & 0x7fffffffu) == 0x7f800000u)
		scale = value_for_inf;
	if (pow2)
		scale = fp8_bits_f32(fp8_f32_bits(scale) & 0xff800000u);
	return scale;
}

/* rule 5 */
FP8_HD uint8_t fp8_e8m0_from(float v)
{
	const uint32_t a = fp8_f32_bits(v) & 0x7fffffffu;
	uint32_t e = a >> 23;
	const uint32_t man = a & 0x7fffffu;

	if (a > 0x7f800000u)
		return 0xff;
	if (a == 0x7f800000u)
		return 0xfe;
	if (a == 0)
		return 0;
	if (man > 0 && e != 0xfe && !(e == 0 && man <= 0x400000u))
		e++;
	return (uint8_t)e;
}

/* rule 6: 2^(127 - e), the multiplier that quantizes */
FP8_HD float fp8_e8m0_rcp(uint8_t e)
{
	if (e == 255)
		return fp8_bits_f32(0x7fffffffu);
	if (e == 254)
		return fp8_bits_f32(0x00400000u);
	return fp8_bits_f32((uint32_t)(254 - e) << 23);
}

/* rule 6: 2^(e - 127), the dequantization scale */
FP8_HD float fp8_e8m0_to_f32(uint8_t e)
{
	if (e == 255)
		return fp8_bits_f32(0x7fffffffu);
	if (e == 0)
		return fp8_bits_f32(0x00400000u);
	return fp8_bits_f32((uint32_t)e << 23);
}

/* rule 8, MX: a block's E8M0 code from its amax */
FP8_HD uint8_t fp8_mx_code(float amax, enum kops_fp8 f)
{
	return fp8_e8m0_from(fp8_mul(amax, fp8_div(1.0f, fp8_max(f))));
}

/* rule 8, a block's (scale, sinv) from its amax for AMAX and MX (GIVEN: the
 * caller's scale and fp8_div(1, scale)) */
FP8_HD void fp8_block_scale(float amax, enum kops_fp8 f, enum kops_fp8_scaling how, bool pow2, float *scale,
			    float *sinv)
{
	if (how == KOPS_FP8_MX) {
		uint8_t e = fp8_mx_code(amax, f);

		*scale = fp8_e8m0_rcp(e);
		*sinv = fp8_e8m0_to_f32(e);
	} else if (how == KOPS_FP8_TENSOR) {
		*scale = fp8_scale_from_amax(amax, fp8_max(f), false, FP8_F32_MAX);
		*sinv = fp8_div(1.0f, *scale);
	} else {
		*scale = fp8_scale_from_amax(amax, fp8_max(f), pow2, FP8_BF16_MAX);
		*sinv = fp8_div(1.0f, *scale);
	}
}

#endif /* MEGAC_KERNELS_FP8_H */
