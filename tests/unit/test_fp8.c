/*
 * test_fp8.c - lib/kernels/fp8.h (the FP8 casts and scale rules) and the CPU
 * backend's FP8 ops (cpu_fp8.c).
 *
 *  - the casts on hand-checked values (the largest finite values and the
 *    overflow boundaries, ties at every exponent and in the subnormals, NaN,
 *    Inf, -0), every code's round trip, and a brute-force reference (the
 *    nearest of the 256 decoded values, ties to the even code, computed in
 *    double) on structured and random samples of float bit patterns;
 *  - when the build has CUDA's headers (MEGAC_CUDA, not the emulated
 *    device), NVIDIA's host casts __nv_cvt_float_to_fp8 (__NV_SATFINITE and
 *    __NV_NOSAT) on a strided sample of all 2^32 patterns, all of them under
 *    MEGAC_LONG=1; the NaN results differ on purpose for the non-saturating
 *    cast (fp8.h rule 2 follows ml_dtypes, which keeps the sign);
 *  - the scale rules' edge cases (amax 0, Inf, NaN, a quotient that
 *    overflows, powers of two, E8M0 rounding and its reciprocals);
 *  - fp8_amax, fp8_quantize in every scaling, transposed or not, with short
 *    last blocks, against a plain loop over the same rules, with 1 and 2
 *    threads; fp8_gemm against a double-precision product of the
 *    dequantized operands, with bias and accumulation; fp8_transpose
 *    against a plain loop (codes, scale grid, dequantized values; shapes
 *    around the tiles, per-tensor and blocked grids, 1 and 2 threads, and
 *    back again), and with square blocks against quantizing the transposed
 *    values; fp8_amax_blocks and fp8_quantize_blocks (a tensor cut into
 *    1, 2, 3 and 5 uneven ranges, cuts inside rows and blocks, in
 *    128x128, 1x128 and 32x1 blocks) against one fp8_quantize AMAX of the
 *    whole tensor, bit for bit, a NaN and an Inf among the values, and
 *    the raise rule; the op profile's wrappers of the six.
 */
#include "base/error.h"
#include "base/xalloc.h"
#include "kernels/fp8.h"
#include "kernels/ops.h"
#include "kernels/profile.h"
#include "test.h"

#include <float.h>
#include <math.h>
#include <omp.h>

#if defined(MEGAC_CUDA) && !defined(MEGAC_EMU) && defined(__has_include)
#if __has_include(<cuda_fp8.h>)
#include <cuda_fp8.h>
#define HAVE_NV_FP8 1
#endif
#endif

static const struct kops *ops;

static uint64_t rng = 0x2545f4914f6cdd1dULL;
static uint64_t next_u64(void)
{
	uint64_t z = (rng += 0x9e3779b97f4a7c15ULL);
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
	return z ^ (z >> 31);
}

static float frand(float s)
{
	return s * (2.0f * (float)(next_u64() >> 40) * 0x1p-24f - 1.0f);
}

static float bits(uint32_t u)
{
	return fp8_bits_f32(u);
}

#define E4 KOPS_E4M3
#define E5 KOPS_E5M2

/* both casts of x: sat and nosat expected */
#define CAST2(x, f, sat, nosat)                                                        \
	do {                                                                           \
		CHECK_INT(fp8_from_f32((x), (f)), (sat));                              \
		CHECK_INT(fp8_from_f32_nosat((x), (f)), (nosat));                      \
	} while (0)

/* ---- the casts ---- */

static void test_cast_values(void)
{
	/* E4M3 */
	CAST2(1.0f, E4, 0x38, 0x38);
	CAST2(-1.0f, E4, 0xb8, 0xb8);
	CAST2(0.0f, E4, 0x00, 0x00);
	CAST2(-0.0f, E4, 0x80, 0x80);
	CAST2(448.0f, E4, 0x7e, 0x7e);
	CAST2(416.0f, E4, 0x7d, 0x7d);
	CAST2(432.0f, E4, 0x7e, 0x7e);             /* tie 416 | 448: even 448 (mantissa 110) */
	CAST2(464.0f, E4, 0x7e, 0x7e);             /* tie 448 | 480: even 448 */
	CAST2(nextafterf(464.0f, 1e9f), E4, 0x7e, 0x7f); /* above: overflow, NaN without saturation */
	CAST2(480.0f, E4, 0x7e, 0x7f);
	CAST2(-480.0f, E4, 0xfe, 0xff);
	CAST2(1e30f, E4, 0x7e, 0x7f);
	CAST2(FLT_MAX, E4, 0x7e, 0x7f);
	CAST2(INFINITY, E4, 0x7e, 0x7f);
	CAST2(-INFINITY, E4, 0xfe, 0xff);
	CAST2(NAN, E4, 0x7f, 0x7f);
	CAST2(-NAN, E4, 0x7f, 0xff);
	CAST2(bits(0x7f800001), E4, 0x7f, 0x7f);   /* signalling NaN */
	CAST2(bits(0xffffffff), E4, 0x7f, 0xff);
	CAST2(0x1p-6f, E4, 0x08, 0x08);            /* smallest normal */
	CAST2(0x1p-9f, E4, 0x01, 0x01);            /* smallest subnormal */
	CAST2(-0x1p-9f, E4, 0x81, 0x81);
	CAST2(0x1p-10f, E4, 0x00, 0x00);           /* half of it: tie to even 0 */
	CAST2(-0x1p-10f, E4, 0x80, 0x80);
	CAST2(nextafterf(0x1p-10f, 1.0f), E4, 0x01, 0x01);
	CAST2(0x1.8p-9f, E4, 0x02, 0x02);          /* tie 1 | 2 subnormal units */
	CAST2(0x1.4p-8f, E4, 0x02, 0x02);          /* 2.5 units: tie to 2 */
	CAST2(0x1.cp-8f, E4, 0x04, 0x04);          /* 3.5 units: tie to 4 */
	CAST2(0x1.ep-7f, E4, 0x08, 0x08);          /* 7.5 units: tie to the smallest normal */
	CAST2(0x1.dp-7f, E4, 0x07, 0x07);          /* 7.25 units */
	CAST2(0x1p-40f, E4, 0x00, 0x00);
	CAST2(bits(0x00000001), E4, 0x00, 0x00);   /* fp32 subnormals */
	CAST2(bits(0x80000001), E4, 0x80, 0x80);
	CAST2(1.0625f, E4, 0x38, 0x38);            /* tie 1 | 1.125: even 1 */
	CAST2(1.1875f, E4, 0x3a, 0x3a);            /* tie 1.125 | 1.25: even 1.25 */
	CAST2(nextafterf(1.0625f, 2.0f), E4, 0x39, 0x39);
	CAST2(0.1f, E4, 0x1d, 0x1d);               /* 0.1015625 */
	/* E5M2 */
	CAST2(1.0f, E5, 0x3c, 0x3c);
	CAST2(57344.0f, E5, 0x7b, 0x7b);
	CAST2(nextafterf(61440.0f, 0.0f), E5, 0x7b, 0x7b);
	CAST2(61440.0f, E5, 0x7b, 0x7c);           /* tie 57344 | 65536: even 65536 = Inf */
	CAST2(-61440.0f, E5, 0xfb, 0xfc);
	CAST2(65536.0f, E5, 0x7b, 0x7c);
	CAST2(INFINITY, E5, 0x7b, 0x7c);
	CAST2(-INFINITY, E5, 0xfb, 0xfc);
	CAST2(NAN, E5, 0x7f, 0x7e);
	CAST2(-NAN, E5, 0x7f, 0xfe);
	CAST2(bits(0x7f800001), E5, 0x7f, 0x7e);
	CAST2(-0.0f, E5, 0x80, 0x80);
	CAST2(0x1p-14f, E5, 0x04, 0x04);           /* smallest normal */
	CAST2(0x1p-16f, E5, 0x01, 0x01);           /* smallest subnormal */
	CAST2(0x1p-17f, E5, 0x00, 0x00);           /* half of it */
	CAST2(nextafterf(0x1p-17f, 1.0f), E5, 0x01, 0x01);
	CAST2(0x1.8p-16f, E5, 0x02, 0x02);         /* tie 1 | 2 units */
	CAST2(0x1.cp-15f, E5, 0x04, 0x04);         /* 3.5 units: tie to the smallest normal */
	CAST2(1.125f, E5, 0x3c, 0x3c);             /* tie 1 | 1.25: even 1 */
	CAST2(1.375f, E5, 0x3e, 0x3e);             /* tie 1.25 | 1.5: even 1.5 */
	CAST2(0x1.cp15f, E5, 0x7b, 0x7b);          /* 57344 */
	CAST2(0x1.ap15f, E5, 0x7a, 0x7a);          /* tie 49152 | 57344: even 49152 */
	CAST2(0x1.ep14f, E5, 0x78, 0x78);          /* tie 28672 | 32768: even 32768, a carry into the exponent */
	CAST2(fp8_max(E4), E4, 0x7e, 0x7e);
	CAST2(fp8_max(E5), E5, 0x7b, 0x7b);
}

/* the decoded value of every code: exact, NaNs and Infs where they belong */
static void test_decode(void)
{
	CHECK(fp8_to_f32(0x7e, E4) == 448.0f);
	CHECK(fp8_to_f32(0xfe, E4) == -448.0f);
	CHECK(fp8_to_f32(0x01, E4) == 0x1p-9f);
	CHECK(fp8_to_f32(0x07, E4) == 7 * 0x1p-9f);
	CHECK(fp8_to_f32(0x08, E4) == 0x1p-6f);
	CHECK(fp8_to_f32(0x38, E4) == 1.0f);
	CHECK(isnan(fp8_to_f32(0x7f, E4)) && !signbit(fp8_to_f32(0x7f, E4)));
	CHECK(isnan(fp8_to_f32(0xff, E4)) && signbit(fp8_to_f32(0xff, E4)));
	CHECK(fp8_to_f32(0x80, E4) == 0.0f && signbit(fp8_to_f32(0x80, E4)));
	CHECK(fp8_to_f32(0x7b, E5) == 57344.0f);
	CHECK(fp8_to_f32(0x01, E5) == 0x1p-16f);
	CHECK(fp8_to_f32(0x83, E5) == -3 * 0x1p-16f);
	CHECK(fp8_to_f32(0x3c, E5) == 1.0f);
	CHECK(fp8_to_f32(0x7c, E5) == INFINITY);
	CHECK(fp8_to_f32(0xfc, E5) == -INFINITY);
	for (int q = 0x7d; q <= 0x7f; q++)
		CHECK(isnan(fp8_to_f32((uint8_t)q, E5)) && isnan(fp8_to_f32((uint8_t)(q | 0x80), E5)));
	/* against the format's definition, in double */
	for (int f = 0; f < 2; f++) {
		const int m = f == E4 ? 3 : 2, bias = f == E4 ? 7 : 15;
		for (int q = 0; q < 256; q++) {
			int e = (q & 0x7f) >> m, man = q & ((1 << m) - 1);
			float v = fp8_to_f32((uint8_t)q, (enum kops_fp8)f);
			if (f == E4 ? (q & 0x7f) == 0x7f : e == 31)
				continue;
			double want = e ? ldexp(1.0 + man / (double)(1 << m), e - bias) : ldexp(man, 1 - bias - m);
			if (q & 0x80)
				want = -want;
			CHECK((double)v == want && !!signbit(v) == !!(q & 0x80));
		}
	}
}

/* every code decodes and encodes back to itself (NaNs: to a NaN) */
static void test_round_trip(void)
{
	for (int f = 0; f < 2; f++)
		for (int q = 0; q < 256; q++) {
			float v = fp8_to_f32((uint8_t)q, (enum kops_fp8)f);
			uint8_t s = fp8_from_f32(v, (enum kops_fp8)f), n = fp8_from_f32_nosat(v, (enum kops_fp8)f);
			if (isnan(v)) {
				CHECK(isnan(fp8_to_f32(s, (enum kops_fp8)f)) && isnan(fp8_to_f32(n, (enum kops_fp8)f)));
			} else if (isinf(v)) {
				CHECK_INT(n, q);
				CHECK_INT(s, (q & 0x80) | 0x7b);
			} else {
				CHECK_INT(s, q);
				CHECK_INT(n, q);
			}
		}
}

/* ties and their neighbours at every exponent: the midpoint between two
 * consecutive finite codes goes to the even one, one ulp either side to the
 * nearer */
static void test_ties(void)
{
	for (int f = 0; f < 2; f++) {
		const enum kops_fp8 fmt = (enum kops_fp8)f;
		const int top = f == E4 ? 0x7e : 0x7b;
		for (int q = 0; q < top; q++)
			for (int s = 0; s < 2; s++) {
				float lo = fp8_to_f32((uint8_t)q, fmt), hi = fp8_to_f32((uint8_t)(q + 1), fmt);
				float mid = (float)(((double)lo + hi) / 2); /* exact: few bits */
				int even = (q & 1) ? q + 1 : q, sg = s ? 0x80 : 0;
				float sign = s ? -1.0f : 1.0f;
				CHECK((double)mid == ((double)lo + hi) / 2);
				CHECK_INT(fp8_from_f32(sign * mid, fmt), sg | even);
				CHECK_INT(fp8_from_f32(sign * nextafterf(mid, 0.0f), fmt), sg | q);
				CHECK_INT(fp8_from_f32(sign * nextafterf(mid, INFINITY), fmt), sg | (q + 1));
				CHECK_INT(fp8_from_f32_nosat(sign * mid, fmt), sg | even);
			}
	}
}

/* The brute-force reference: the nearest finite value in double, ties to the
 * even code; beyond the largest value by half an ulp or more (E4M3: more
 * than; its tie goes to the even 448), overflow. */
static uint8_t ref_cast(float x, enum kops_fp8 f, bool sat)
{
	const bool e4 = f == E4;
	const uint8_t maxc = e4 ? 0x7e : 0x7b;
	uint8_t sign = signbit(x) ? 0x80 : 0;
	double a = fabs((double)x);

	if (isnan(x))
		return sat ? 0x7f : (uint8_t)(sign | (e4 ? 0x7f : 0x7e));
	double lim = e4 ? 464.0 : 61440.0;
	if (isinf(x) || a > lim || (!e4 && a == lim))
		return sat ? (uint8_t)(sign | maxc) : (uint8_t)(sign | (e4 ? 0x7f : 0x7c));
	/* binary search the codes 0..maxc (increasing values) */
	int lo = 0, hi = maxc;
	while (lo < hi) {
		int mid = (lo + hi + 1) / 2;
		if ((double)fp8_to_f32((uint8_t)mid, f) <= a)
			lo = mid;
		else
			hi = mid - 1;
	}
	int q = lo;
	if (q < maxc) {
		double dl = a - fp8_to_f32((uint8_t)q, f), dh = fp8_to_f32((uint8_t)(q + 1), f) - a;
		if (dh < dl || (dh == dl && (q & 1)))
			q++;
	}
	return (uint8_t)(sign | q);
}

static int ref_mismatch;
static void ref_check(uint32_t u)
{
	float x = bits(u);
	for (int f = 0; f < 2; f++)
		for (int sat = 0; sat < 2; sat++) {
			uint8_t got = sat ? fp8_from_f32(x, (enum kops_fp8)f) : fp8_from_f32_nosat(x, (enum kops_fp8)f);
			uint8_t want = ref_cast(x, (enum kops_fp8)f, sat);
			if (got != want && ref_mismatch++ < 10)
				printf("#   %08x %s %s: %02x, reference %02x\n", u, f ? "e5m2" : "e4m3",
				       sat ? "sat" : "nosat", got, want);
		}
}

/* every sign, exponent and top 7 mantissa bits, with low bits that make
 * ties, near-ties and the rest; then random patterns */
static void test_cast_reference(void)
{
	static const uint32_t low[] = { 0, 1, 2, 0x7fff, 0x8000, 0x8001, 0xffff, 0x5555, 0xaaaa };
	ref_mismatch = 0;
	for (uint32_t hi = 0; hi < 65536; hi++)
		for (size_t i = 0; i < sizeof low / sizeof low[0]; i++)
			ref_check(hi << 16 | low[i]);
	for (int i = 0; i < 300000; i++)
		ref_check((uint32_t)next_u64());
	CHECK_INT(ref_mismatch, 0);
}

#ifdef HAVE_NV_FP8
static bool long_run(void)
{
	const char *l = getenv("MEGAC_LONG");
	return l && *l;
}

/* NVIDIA's host casts over patterns i * stride (+ a varying offset); all
 * of them when stride is 1. Saturating: identical everywhere. Not
 * saturating: identical but for the NaNs' sign (and E5M2's NaN code),
 * which follow ml_dtypes (fp8.h, rule 2). */
static void test_against_cuda(void)
{
	const uint64_t stride = long_run() ? 1 : 4093;
	long bad = 0, n = 0;

#pragma omp parallel for reduction(+ : bad, n) schedule(static)
	for (uint64_t i = 0; i < (1ULL << 32) / stride; i++) {
		uint32_t u = (uint32_t)(i * stride + (i & 0xfff) % stride);
		float x = bits(u);
		for (int f = 0; f < 2; f++) {
			__nv_fp8_interpretation_t nf = f ? __NV_E5M2 : __NV_E4M3;
			uint8_t s = fp8_from_f32(x, (enum kops_fp8)f), ns = fp8_from_f32_nosat(x, (enum kops_fp8)f);
			uint8_t cs = __nv_cvt_float_to_fp8(x, __NV_SATFINITE, nf);
			uint8_t cn = __nv_cvt_float_to_fp8(x, __NV_NOSAT, nf);
			if (isnan(x))
				cn = (uint8_t)((u >> 24 & 0x80) | (f ? 0x7e : 0x7f));
			if (s != cs || ns != cn) {
#pragma omp critical
				if (bad < 10)
					printf("#   %08x %s: %02x %02x, CUDA %02x %02x\n", u, f ? "e5m2" : "e4m3", s, ns, cs,
					       cn);
				bad++;
			}
			n++;
		}
	}
	printf("#   %ld casts against __nv_cvt_float_to_fp8 (stride %llu)\n", n, (unsigned long long)stride);
	CHECK_INT(bad, 0);
}
#endif

/* ---- the scale rules ---- */

static void test_scale_rules(void)
{
	const float bmax = FP8_BF16_MAX;
	CHECK(fp8_f32_bits(bmax) == 0x7f7f0000u);
	CHECK(fp8_scale_from_amax(0.0f, 448.0f, false, bmax) == 1.0f);
	CHECK(fp8_scale_from_amax(-0.0f, 448.0f, true, bmax) == 1.0f);
	CHECK(fp8_scale_from_amax(-3.0f, 448.0f, false, bmax) == 1.0f);
	CHECK(fp8_scale_from_amax(INFINITY, 448.0f, false, bmax) == 1.0f);
	CHECK(fp8_scale_from_amax(-INFINITY, 448.0f, false, bmax) == 1.0f);
	CHECK(fp8_scale_from_amax(NAN, 448.0f, false, bmax) == 1.0f);
	CHECK(fp8_scale_from_amax(448.0f, 448.0f, false, bmax) == 1.0f);
	CHECK(fp8_scale_from_amax(1.0f, 448.0f, false, bmax) == 448.0f);
	CHECK(fp8_scale_from_amax(1.0f, 448.0f, true, bmax) == 256.0f);
	CHECK(fp8_scale_from_amax(3.0f, 448.0f, false, bmax) == 448.0f / 3.0f);
	CHECK(fp8_scale_from_amax(3.0f, 448.0f, true, bmax) == 128.0f);
	CHECK(fp8_scale_from_amax(3.0f, 57344.0f, false, bmax) == (float)(57344.0 / 3.0));
	CHECK(fp8_scale_from_amax(1e4f, 448.0f, true, bmax) == 0.03125f);
	/* the quotient overflows: value_for_inf, rounded down by pow2 */
	CHECK(fp8_scale_from_amax(1e-40f, 448.0f, false, bmax) == bmax);
	CHECK(fp8_scale_from_amax(1e-40f, 448.0f, true, bmax) == 0x1p127f);
	CHECK(fp8_scale_from_amax(bits(1), 57344.0f, false, 7.0f) == 7.0f);
	/* just below overflow: a finite quotient */
	CHECK(fp8_scale_from_amax(0x1p-119f, 448.0f, false, bmax) == 448.0f * 0x1p119f); /* 1.75 * 2^127 */
	CHECK(fp8_scale_from_amax(0x1p-120f, 448.0f, false, bmax) == bmax);             /* 1.75 * 2^128 */
	/* correctly rounded: the double quotient rounded once */
	for (int i = 0; i < 10000; i++) {
		float a = fabsf(frand(1000.0f)) + 1e-3f;
		CHECK(fp8_scale_from_amax(a, 448.0f, false, bmax) == (float)(448.0 / a));
	}

	CHECK_INT(fp8_e8m0_from(NAN), 0xff);
	CHECK_INT(fp8_e8m0_from(-NAN), 0xff);
	CHECK_INT(fp8_e8m0_from(INFINITY), 0xfe);
	CHECK_INT(fp8_e8m0_from(-INFINITY), 0xfe);
	CHECK_INT(fp8_e8m0_from(0.0f), 0);
	CHECK_INT(fp8_e8m0_from(-0.0f), 0);
	CHECK_INT(fp8_e8m0_from(1.0f), 127);
	CHECK_INT(fp8_e8m0_from(-1.0f), 127);
	CHECK_INT(fp8_e8m0_from(nextafterf(1.0f, 2.0f)), 128); /* rounded up */
	CHECK_INT(fp8_e8m0_from(1.5f), 128);
	CHECK_INT(fp8_e8m0_from(-2.0f), 128);
	CHECK_INT(fp8_e8m0_from(0x1p127f), 254);
	CHECK_INT(fp8_e8m0_from(FLT_MAX), 254);                   /* satfinite */
	CHECK_INT(fp8_e8m0_from(0x1p-126f), 1);
	CHECK_INT(fp8_e8m0_from(nextafterf(0x1p-126f, 0.0f)), 1);
	CHECK_INT(fp8_e8m0_from(bits(0x00400000)), 0);            /* 2^-127 */
	CHECK_INT(fp8_e8m0_from(bits(0x00400001)), 1);
	CHECK_INT(fp8_e8m0_from(bits(1)), 0);

	CHECK(isnan(fp8_e8m0_rcp(255)));
	CHECK(fp8_f32_bits(fp8_e8m0_rcp(254)) == 0x00400000u);
	CHECK(fp8_e8m0_rcp(253) == 0x1p-126f);
	CHECK(fp8_e8m0_rcp(127) == 1.0f);
	CHECK(fp8_e8m0_rcp(119) == 256.0f);
	CHECK(fp8_e8m0_rcp(0) == 0x1p127f);
	CHECK(isnan(fp8_e8m0_to_f32(255)));
	CHECK(fp8_f32_bits(fp8_e8m0_to_f32(0)) == 0x00400000u);
	CHECK(fp8_e8m0_to_f32(1) == 0x1p-126f);
	CHECK(fp8_e8m0_to_f32(127) == 1.0f);
	CHECK(fp8_e8m0_to_f32(254) == 0x1p127f);
	for (int e = 0; e < 255; e++)
		CHECK((double)fp8_e8m0_rcp((uint8_t)e) * fp8_e8m0_to_f32((uint8_t)e) == 1.0);

	/* MX: the amax times the float reciprocal of the largest value, rounded up */
	CHECK(1.0f / 448.0f == 0x1.24924ap-9f);
	CHECK_INT(fp8_mx_code(448.0f, E4), 127);  /* 448 * float(1/448) rounds to 1 */
	CHECK_INT(fp8_mx_code(449.0f, E4), 128);
	CHECK_INT(fp8_mx_code(1.0f, E4), 119);    /* 2^-8.8 up to 2^-8: x * 256 */
	CHECK_INT(fp8_mx_code(57344.0f, E5), 127);
	CHECK_INT(fp8_mx_code(0.0f, E4), 0);
	CHECK_INT(fp8_mx_code(NAN, E4), 255);
	CHECK_INT(fp8_mx_code(INFINITY, E5), 254);
	CHECK_INT(fp8_mx_code(FLT_MAX, E4), 247); /* 2^128 / 448 rounds up to 2^120 */
	/* no finite block value saturates: |x| <= amax lands at or below the largest code */
	for (int i = 0; i < 20000; i++) {
		float amax = ldexpf(1.0f + fabsf(frand(1.0f)), (int)(next_u64() % 200) - 100);
		for (int f = 0; f < 2; f++) {
			uint8_t e = fp8_mx_code(amax, (enum kops_fp8)f);
			CHECK(fp8_mul(amax, fp8_e8m0_rcp(e)) <= fp8_max((enum kops_fp8)f));
		}
	}
}

/* ---- the ops ---- */

/* |x| max, a NaN winning; the amax of the test's reference loops */
static float ref_amax_step(float m, float x)
{
	if (isnan(m) || isnan(x))
		return NAN;
	return fabsf(x) > m ? fabsf(x) : m;
}

static void test_amax_op(void)
{
	float x[100], a = -1;
	for (int i = 0; i < 100; i++)
		x[i] = frand(3.0f);
	x[37] = -7.5f;
	ops->fp8_amax(&a, x, 100);
	CHECK(a == 7.5f);
	ops->fp8_amax(&a, x, 0);
	CHECK(a == 0.0f && !signbit(a));
	x[90] = -INFINITY;
	ops->fp8_amax(&a, x, 100);
	CHECK(a == INFINITY);
	x[3] = -NAN;
	ops->fp8_amax(&a, x, 100);
	CHECK(isnan(a));
	float *big = xmalloc(200000 * sizeof(float));
	for (int i = 0; i < 200000; i++)
		big[i] = frand(1.0f);
	big[123457] = 2.0f;
	ops->fp8_amax(&a, big, 200000);
	CHECK(a == 2.0f);
	big[199999] = NAN;
	ops->fp8_amax(&a, big, 200000);
	CHECK(isnan(a));
	free(big);
}

struct qcase {
	int rows, cols, br, bc;
	enum kops_fp8 fmt;
	enum kops_fp8_scaling how;
	bool pow2, transpose;
	float scale;
};

/* The plain loop: element by element, its block's amax from a first pass
 * over the elements, the scale from fp8.h's rules. */
static void ref_quantize(const struct qcase *c, const float *x, uint8_t *q, float *sinv, float *amax)
{
	const int R = c->rows, C = c->cols, nbc = (C + c->bc - 1) / c->bc, nbr = (R + c->br - 1) / c->br;
	float all = 0, *bmax = xcalloc((size_t)nbr * nbc + 1, sizeof(float));
	for (int r = 0; r < R; r++)
		for (int k = 0; k < C; k++) {
			float v = c->transpose ? x[(size_t)k * R + r] : x[(size_t)r * C + k];
			float *m = &bmax[(size_t)(r / c->br) * nbc + k / c->bc];
			*m = ref_amax_step(*m, v);
			all = ref_amax_step(all, v);
		}
	for (int r = 0; r < R; r++)
		for (int k = 0; k < C; k++) {
			float v = c->transpose ? x[(size_t)k * R + r] : x[(size_t)r * C + k];
			int i = r / c->br, j = k / c->bc;
			float scale, si;
			if (c->how == KOPS_FP8_GIVEN) {
				scale = c->scale;
				si = 1.0f / scale;
			} else {
				float m = bmax[(size_t)i * nbc + j];
				if (c->how == KOPS_FP8_AMAX || c->how == KOPS_FP8_TENSOR) {
					bool t8 = c->how == KOPS_FP8_TENSOR;
					scale = fp8_scale_from_amax(m, fp8_max(c->fmt), c->pow2 && !t8,
								    t8 ? 3.40282347e38f : FP8_BF16_MAX);
					si = 1.0f / scale;
				} else {
					uint8_t e = fp8_e8m0_from(m * (1.0f / fp8_max(c->fmt)));
					scale = fp8_e8m0_rcp(e);
					si = fp8_e8m0_to_f32(e);
				}
			}
			q[(size_t)r * C + k] = fp8_from_f32(v * scale, c->fmt);
			sinv[(size_t)i * nbc + j] = si;
		}
	*amax = all;
	free(bmax);
}

static bool same_bits(const float *a, const float *b, size_t n)
{
	return !memcmp(a, b, n * sizeof(float));
}

static void run_qcase(const struct qcase *c, const float *x, const char *what)
{
	const size_t n = (size_t)c->rows * c->cols;
	const size_t nb = (size_t)((c->rows + c->br - 1) / c->br) * ((c->cols + c->bc - 1) / c->bc);
	uint8_t *q = xcalloc(n + 1, 1), *rq = xcalloc(n + 1, 1), *q1 = xcalloc(n + 1, 1);
	float *s = xcalloc(nb + 1, sizeof(float)), *rs = xcalloc(nb + 1, sizeof(float));
	float *s1 = xcalloc(nb + 1, sizeof(float)), am = 0, ram = -2, am1 = 0;
	struct kops_fp8_tensor t = { q, s, c->rows, c->cols, c->br, c->bc, c->fmt };
	struct kops_fp8_quant h = { c->how, c->scale, c->pow2, c->transpose };
	int saved = omp_get_max_threads();

	ref_quantize(c, x, rq, rs, &ram);
	omp_set_num_threads(2);
	ops->fp8_quantize(&t, x, &h, &am);
	omp_set_num_threads(1);
	t.q = q1, t.sinv = s1;
	ops->fp8_quantize(&t, x, &h, &am1);
	omp_set_num_threads(saved);
	bool ok = !memcmp(q, rq, n) && same_bits(s, rs, nb) &&
		  (fp8_f32_bits(am) == fp8_f32_bits(ram) || (isnan(am) && isnan(ram)));
	bool same = !memcmp(q, q1, n) && same_bits(s, s1, nb) && fp8_f32_bits(am) == fp8_f32_bits(am1);
	if (!ok || !same) {
		printf("#   %s: %dx%d blocks %dx%d fmt %d how %d pow2 %d tr %d: %s\n", what, c->rows, c->cols, c->br,
		       c->bc, (int)c->fmt, (int)c->how, c->pow2, c->transpose,
		       !ok ? "differs from the plain loop" : "differs between 1 and 2 threads");
		for (size_t i = 0, shown = 0; i < n && shown < 4; i++)
			if (q[i] != rq[i])
				printf("#     q[%zu] %02x, reference %02x\n", i, q[i], rq[i]), shown++;
		for (size_t i = 0, shown = 0; i < nb && shown < 4; i++)
			if (fp8_f32_bits(s[i]) != fp8_f32_bits(rs[i]))
				printf("#     sinv[%zu] %a, reference %a\n", i, s[i], rs[i]), shown++;
		printf("#     amax %a, reference %a\n", am, ram);
	}
	CHECK(ok);
	CHECK(same);
	/* the output stops where it should */
	CHECK(q[n] == 0 && s[nb] == 0.0f);
	free(q), free(rq), free(q1), free(s), free(rs), free(s1);
}

/* values over many binades, a few exact zeros */
static float *quant_input(size_t n, int spread)
{
	float *x = xmalloc(n * sizeof(float));
	for (size_t i = 0; i < n; i++) {
		x[i] = ldexpf(frand(1.0f), (int)(next_u64() % (2 * spread + 1)) - spread);
		if (next_u64() % 97 == 0)
			x[i] = 0.0f;
	}
	return x;
}

static void test_quantize(void)
{
	static const int shapes[][4] = {
		{ 37, 300, 16, 128 }, { 256, 256, 128, 128 }, { 64, 384, 1, 128 }, { 130, 70, 1, 32 },
		{ 5, 7, 5, 7 },       { 1, 1, 1, 1 },         { 200, 33, 128, 128 }, { 3, 129, 1, 128 },
	};
	for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
		for (int f = 0; f < 2; f++)
			for (int how = 0; how < 4; how++)
				for (int v = 0; v < 4; v++) {
					struct qcase c = { shapes[si][0], shapes[si][1], shapes[si][2], shapes[si][3],
							   (enum kops_fp8)f, (enum kops_fp8_scaling)how, v & 1, (v & 2) != 0,
							   0 };
					if (how == KOPS_FP8_GIVEN) {
						/* one block, the tensorwise recipes' */
						c.br = c.rows, c.bc = c.cols;
						c.scale = (v & 1) ? 0x1p5f : 37.3f;
					}
					float *x = quant_input((size_t)c.rows * c.cols, 12);
					run_qcase(&c, x, "random");
					free(x);
				}
}

/* blocks that are all zero, hold a NaN or an Inf, values that overflow
 * under a given scale, and amaxes whose quotients overflow */
static void test_quantize_edges(void)
{
	const int R = 8, C = 64;
	float *x = quant_input((size_t)R * C, 4);
	for (int k = 0; k < 16; k++)
		x[k] = 0.0f;               /* row 0, block 0: all zero */
	x[C + 20] = NAN;                   /* row 1, block 1 */
	x[2 * C + 40] = -INFINITY;         /* row 2, block 2 */
	x[3 * C + 50] = 1e-42f;            /* row 3, block 3: a tiny amax alone */
	for (int k = 48; k < 64; k++)
		if (k != 50)
			x[3 * C + k] = 0.0f;
	x[4 * C + 5] = 3e38f;
	for (int f = 0; f < 2; f++)
		for (int how = 0; how < 4; how++)
			for (int v = 0; v < 4; v++) {
				struct qcase c = { R, C, 1, 16, (enum kops_fp8)f, (enum kops_fp8_scaling)how, v & 1,
						   (v & 2) != 0, 1e3f };
				if (how == KOPS_FP8_GIVEN)
					c.br = R, c.bc = C;
				run_qcase(&c, x, "edges");
			}
	/* spot checks of the rules on those blocks */
	uint8_t q[8 * 64];
	float s[32], am = 0;
	struct kops_fp8_tensor t = { q, s, R, C, 1, 16, E4 };
	struct kops_fp8_quant h = { KOPS_FP8_AMAX, 0, false, false };
	ops->fp8_quantize(&t, x, &h, &am);
	CHECK(isnan(am));
	CHECK(s[0] == 1.0f && q[0] == 0);           /* all zero: scale 1 */
	CHECK(s[4 + 1] == 1.0f && q[C + 20] == 0x7f); /* NaN: scale 1, the NaN stays */
	CHECK(s[8 + 2] == 1.0f && q[2 * C + 40] == 0xfe); /* Inf: scale 1, saturated */
	CHECK(s[12 + 3] == 1.0f / FP8_BF16_MAX);    /* overflowing quotient */
	h.how = KOPS_FP8_TENSOR; /* TE's current scaling: FLT_MAX there */
	ops->fp8_quantize(&t, x, &h, &am);
	CHECK(s[12 + 3] == 1.0f / 3.40282347e38f && s[12 + 3] != 1.0f / FP8_BF16_MAX);
	h.how = KOPS_FP8_AMAX;
	h.how = KOPS_FP8_MX;
	ops->fp8_quantize(&t, x, &h, &am);
	CHECK(fp8_f32_bits(s[0]) == 0x00400000u && q[0] == 0);
	CHECK(isnan(s[4 + 1]) && q[C + 16] == 0x7f && q[C + 20] == 0x7f);
	CHECK(s[8 + 2] == 0x1p127f && q[2 * C + 40] == 0xfe);
	/* GIVEN: saturation of what the scale pushes over */
	h.how = KOPS_FP8_GIVEN, h.scale = 1e3f;
	t.br = R, t.bc = C;
	ops->fp8_quantize(&t, x, &h, NULL);
	CHECK(q[4 * C + 5] == 0x7e && s[0] == 1.0f / 1e3f);
	/* empty tensors: nothing written, amax 0 */
	t.rows = 0, am = 0;
	ops->fp8_quantize(&t, x, &h, &am);
	CHECK(am == 0.0f);
	/* the amax is raised, not set: a larger stored value stays, a smaller
	 * one (by magnitude) gives way, a stored NaN stays */
	float y[4] = { 0.5f, -3.0f, 2.0f, 1.0f };
	t.rows = 1, t.cols = 4, t.br = 1, t.bc = 4, am = 1e30f;
	ops->fp8_quantize(&t, y, &h, &am);
	CHECK(am == 1e30f);
	am = -0x1p-100f;
	ops->fp8_quantize(&t, y, &h, &am);
	CHECK(am == 3.0f);
	am = NAN;
	ops->fp8_quantize(&t, y, &h, &am);
	CHECK(isnan(am));
	free(x);
}

/* deq(t) in double */
static double ref_deq(const struct kops_fp8_tensor *t, int r, int c)
{
	int nbc = (t->cols + t->bc - 1) / t->bc;
	return (double)(fp8_to_f32(t->q[(size_t)r * t->cols + c], t->fmt) * t->sinv[(size_t)(r / t->br) * nbc + c / t->bc]);
}

static void quant_for_gemm(struct kops_fp8_tensor *t, int rows, int cols, enum kops_fp8 fmt,
			   enum kops_fp8_scaling how, int br, int bc)
{
	float *x = quant_input((size_t)rows * cols, 3);
	struct kops_fp8_quant h = { how, 2.0f, false, false };
	if (how == KOPS_FP8_GIVEN)
		br = rows > 0 ? rows : 1, bc = cols > 0 ? cols : 1;
	size_t nb = (size_t)((rows + br - 1) / br) * ((cols + bc - 1) / bc);
	*t = (struct kops_fp8_tensor){ xmalloc((size_t)rows * cols + 1), xmalloc(nb * sizeof(float)), rows, cols, br, bc,
				       fmt };
	ops->fp8_quantize(t, x, &h, NULL);
	free(x);
}

static void test_gemm(void)
{
	static const int shapes[][3] = { { 33, 45, 300 }, { 128, 160, 160 }, { 1, 1, 1 }, { 7, 3, 0 }, { 64, 200, 257 } };
	for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
		for (int how = 0; how < 4; how++)
			for (int v = 0; v < 3; v++) {
				const int M = shapes[si][0], N = shapes[si][1], K = shapes[si][2];
				struct kops_fp8_tensor a, b;
				quant_for_gemm(&a, M, K, E4, (enum kops_fp8_scaling)how, 1, 128);
				quant_for_gemm(&b, N, K, v == 2 ? E5 : E4, (enum kops_fp8_scaling)how, 128, 128);
				float *out = xmalloc((size_t)M * N * sizeof(float)), *bias = xmalloc(N * sizeof(float));
				float *out1 = xmalloc((size_t)M * N * sizeof(float)), *init = xmalloc((size_t)M * N * sizeof(float));
				for (int j = 0; j < N; j++)
					bias[j] = frand(2.0f);
				for (size_t i = 0; i < (size_t)M * N; i++)
					init[i] = out[i] = out1[i] = frand(5.0f);
				bool acc = v == 1;
				int saved = omp_get_max_threads();
				omp_set_num_threads(2);
				ops->fp8_gemm(out, &a, &b, acc ? NULL : bias, acc);
				omp_set_num_threads(1);
				ops->fp8_gemm(out1, &a, &b, acc ? NULL : bias, acc);
				omp_set_num_threads(saved);
				CHECK(same_bits(out, out1, (size_t)M * N));
				double worst = 0;
				for (int m = 0; m < M; m++)
					for (int n = 0; n < N; n++) {
						double s = 0, sa = 0;
						for (int k = 0; k < K; k++) {
							double p = ref_deq(&a, m, k) * ref_deq(&b, n, k);
							s += p, sa += fabs(p);
						}
						double want = s + (acc ? init[(size_t)m * N + n] : (double)bias[n]);
						/* fp32 sums in any order: within (K + 2) units of
						 * 2^-24 of the sum of magnitudes */
						double tol = (K + 2) * 0x1p-24 * (sa + fabs(want)) + 1e-30;
						double err = fabs(out[(size_t)m * N + n] - want) / tol;
						worst = err > worst ? err : worst;
					}
				if (worst > 1.0)
					printf("#   fp8_gemm %dx%dx%d how %d variant %d: error %.3g of the bound\n", M, N, K,
					       how, v, worst);
				CHECK(worst <= 1.0);
				free(a.q), free(a.sinv), free(b.q), free(b.sinv);
				free(out), free(out1), free(init), free(bias);
			}
}

/* ---- fp8_transpose ---- */

/* an R x C tensor in br x bc blocks with random codes (NaN codes too: the op moves bytes) and scales */
static struct kops_fp8_tensor rand_fp8(int R, int C, int br, int bc, enum kops_fp8 fmt)
{
	size_t nb = (size_t)((R + br - 1) / br) * ((C + bc - 1) / bc);
	struct kops_fp8_tensor t = { xmalloc((size_t)R * C + 1), xmalloc(nb * sizeof(float) + 4), R, C, br, bc, fmt };
	for (size_t i = 0; i < (size_t)R * C; i++)
		t.q[i] = (uint8_t)next_u64();
	for (size_t i = 0; i < nb; i++)
		t.sinv[i] = ldexpf(1.0f + frand(0.5f), (int)(next_u64() % 21) - 10);
	return t;
}

/* dst of src's transpose, its memory filled with a marker */
static struct kops_fp8_tensor transpose_dst(const struct kops_fp8_tensor *src)
{
	size_t nb = (size_t)((src->rows + src->br - 1) / src->br) * ((src->cols + src->bc - 1) / src->bc);
	struct kops_fp8_tensor t = { xmalloc((size_t)src->rows * src->cols + 1), xmalloc(nb * sizeof(float) + 4),
				     src->cols, src->rows, src->bc, src->br, src->fmt };
	memset(t.q, 0xa5, (size_t)src->rows * src->cols + 1);
	memset(t.sinv, 0xa5, nb * sizeof(float) + 4);
	return t;
}

/* dst is src^T, against the plain loop; its dequantized values the transposed dequantized values, bit for bit */
static bool is_transpose(const struct kops_fp8_tensor *d, const struct kops_fp8_tensor *s)
{
	const int R = s->rows, C = s->cols, nbr = (R + s->br - 1) / s->br, nbc = (C + s->bc - 1) / s->bc;
	bool ok = true;
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++) {
			ok &= d->q[(size_t)c * R + r] == s->q[(size_t)r * C + c];
			float a = (float)ref_deq(s, r, c), b = (float)ref_deq(d, c, r);
			ok &= same_bits(&a, &b, 1) || (isnan(a) && isnan(b));
		}
	for (int i = 0; i < nbr; i++)
		for (int j = 0; j < nbc; j++)
			ok &= same_bits(&d->sinv[(size_t)j * nbr + i], &s->sinv[(size_t)i * nbc + j], 1);
	ok &= d->q[(size_t)R * C] == 0xa5; /* nothing past the end */
	uint32_t past;
	memcpy(&past, &d->sinv[(size_t)nbr * nbc], 4);
	ok &= past == 0xa5a5a5a5u;
	return ok;
}

static void test_transpose(void)
{
	/* shapes around the CPU's 64-byte and the CUDA backend's 32-byte tiles, empty ones, one past CPU_PAR_MIN */
	static const int shapes[][2] = { { 1, 1 },   { 5, 7 },    { 32, 32 },  { 64, 64 }, { 65, 130 },
					 { 200, 333 }, { 333, 200 }, { 0, 5 },   { 7, 0 },   { 1, 300 }, { 300, 1 } };
	/* blocks: 0 the whole dimension (per tensor) */
	static const int blocks[][2] = { { 0, 0 }, { 128, 128 }, { 1, 32 }, { 32, 1 }, { 1, 128 }, { 7, 5 } };
	int saved = omp_get_max_threads();
	for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
		for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
			const int R = shapes[si][0], C = shapes[si][1];
			const int br = blocks[bi][0] ? blocks[bi][0] : (R ? R : 1);
			const int bc = blocks[bi][1] ? blocks[bi][1] : (C ? C : 1);
			struct kops_fp8_tensor s = rand_fp8(R, C, br, bc, bi % 2 ? E5 : E4);
			for (int th = 1; th <= 2; th++) {
				struct kops_fp8_tensor d = transpose_dst(&s);
				omp_set_num_threads(th);
				ops->fp8_transpose(&d, &s);
				bool ok = is_transpose(&d, &s);
				if (!ok)
					printf("#   fp8_transpose %dx%d in %dx%d blocks, %d threads: wrong\n", R, C,
					       br, bc, th);
				CHECK(ok);
				/* and back */
				struct kops_fp8_tensor e = transpose_dst(&d);
				ops->fp8_transpose(&e, &d);
				CHECK(!memcmp(e.q, s.q, (size_t)R * C) && is_transpose(&e, &d));
				free(d.q), free(d.sinv), free(e.q), free(e.sinv);
			}
			free(s.q), free(s.sinv);
		}
	omp_set_num_threads(saved);
}

/* With square blocks (and per tensor), the transposed codes are what
 * quantizing the transposed values gives: the blocks hold the same values. */
static void test_transpose_quantized(void)
{
	static const struct {
		int R, C, b;
		enum kops_fp8_scaling how;
	} cases[] = { { 200, 333, 128, KOPS_FP8_AMAX }, { 37, 300, 0, KOPS_FP8_TENSOR }, { 65, 66, 0, KOPS_FP8_GIVEN },
		      { 130, 129, 32, KOPS_FP8_MX } };
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		const int R = cases[i].R, C = cases[i].C;
		float *x = quant_input((size_t)R * C, 6);
		struct kops_fp8_tensor t = rand_fp8(R, C, cases[i].b ? cases[i].b : R, cases[i].b ? cases[i].b : C, E4);
		struct kops_fp8_tensor want = transpose_dst(&t), got = transpose_dst(&t);
		struct kops_fp8_quant h = { cases[i].how, 3.0f, true, false };
		ops->fp8_quantize(&t, x, &h, NULL);
		h.transpose = true; /* x is [want.cols, want.rows] */
		ops->fp8_quantize(&want, x, &h, NULL);
		ops->fp8_transpose(&got, &t);
		const size_t nb = (size_t)((C + want.br - 1) / want.br) * ((R + want.bc - 1) / want.bc);
		CHECK(!memcmp(got.q, want.q, (size_t)R * C) && same_bits(got.sinv, want.sinv, nb));
		free(x), free(t.q), free(t.sinv), free(want.q), free(want.sinv), free(got.q), free(got.sinv);
	}
}

/* ---- fp8_amax_blocks, fp8_quantize_blocks: a tensor cast shard by shard ---- */

/* nparts uneven ranges over [0, n): bounds[0] = 0 <= bounds[1] <= ... <= bounds[nparts] = n (a range may
 * be empty), random cuts that fall inside rows and blocks */
static void shard_bounds(size_t *bounds, int nparts, size_t n)
{
	bounds[0] = 0;
	for (int p = 1; p < nparts; p++) {
		size_t lo = bounds[p - 1], left = n - lo;
		/* an uneven share: between a third and five thirds of an even one */
		size_t even = left / (size_t)(nparts - p + 1), cut = even / 3 + next_u64() % (even + even / 3 + 1);
		bounds[p] = lo + (cut < left ? cut : left);
	}
	bounds[nparts] = n;
}

/* the block grid's amax over the whole tensor, as bits */
static void whole_block_amax(float *am, const float *x, int R, int C, int br, int bc)
{
	const int nbc = (C + bc - 1) / bc, nb = ((R + br - 1) / br) * nbc;
	for (int b = 0; b < nb; b++)
		am[b] = 0.0f;
	for (int r = 0; r < R; r++)
		for (int c = 0; c < C; c++) {
			float *m = &am[(r / br) * nbc + c / bc];
			if (fp8_abs_bits(x[(size_t)r * C + c]) > fp8_f32_bits(*m))
				*m = fp8_bits_f32(fp8_abs_bits(x[(size_t)r * C + c]));
		}
}

/* One shape, block size, format and split: the ranges' amaxes raised into
 * one grid (in a shuffled order), and into a grid per range reduced by bit
 * max (the ranks' all-reduce), then every range cast; all against one
 * fp8_quantize AMAX of the whole tensor, bit for bit. */
static bool shard_case(const float *x, int R, int C, int br, int bc, enum kops_fp8 fmt, bool pow2, int nparts)
{
	const size_t n = (size_t)R * C;
	const int nb = ((R + br - 1) / br) * ((C + bc - 1) / bc);
	uint8_t *want_q = xmalloc(n + 1), *q = xmalloc(n + 1);
	float *want_s = xmalloc((nb + 1) * sizeof(float)), *s = xmalloc((nb + 1) * sizeof(float));
	float *am = xcalloc(nb + 1, sizeof(float)), *red = xcalloc(nb + 1, sizeof(float));
	float *part = xmalloc((nb + 1) * sizeof(float)), *whole = xmalloc((nb + 1) * sizeof(float));
	struct kops_fp8_tensor tw = { want_q, want_s, R, C, br, bc, fmt }, t = { q, s, R, C, br, bc, fmt };
	struct kops_fp8_quant h = { KOPS_FP8_AMAX, 0, pow2, false };
	size_t bounds[8];
	int order[8];
	bool ok = true;

	ops->fp8_quantize(&tw, x, &h, NULL);
	whole_block_amax(whole, x, R, C, br, bc);
	shard_bounds(bounds, nparts, n);
	for (int p = 0; p < nparts; p++)
		order[p] = p;
	for (int p = nparts - 1; p > 0; p--) {
		int k = (int)(next_u64() % (uint64_t)(p + 1)), tmp = order[p];
		order[p] = order[k], order[k] = tmp;
	}
	for (int i = 0; i < nparts; i++) {
		const int p = order[i];
		const size_t s0 = bounds[p], len = bounds[p + 1] - s0;
		ops->fp8_amax_blocks(am, x + s0, len, s0, &t);
		for (int b = 0; b < nb; b++)
			part[b] = 0.0f;
		ops->fp8_amax_blocks(part, x + s0, len, s0, &t);
		for (int b = 0; b < nb; b++)
			if (fp8_f32_bits(part[b]) > fp8_f32_bits(red[b]))
				red[b] = part[b];
	}
	ok &= same_bits(am, whole, (size_t)nb) && same_bits(red, whole, (size_t)nb) && am[nb] == 0.0f;
	memset(q, 0xa5, n + 1);
	memset(s, 0xa5, (nb + 1) * sizeof(float));
	for (int p = 0; p < nparts; p++) {
		const size_t s0 = bounds[p], len = bounds[p + 1] - s0;
		ops->fp8_quantize_blocks(&t, x + s0, len, s0, am, pow2);
		/* the sinv grid whole after any range; codes up to the range's end, nothing after it */
		ok &= same_bits(s, want_s, (size_t)nb) && !memcmp(q, want_q, bounds[p + 1]);
		for (size_t k = bounds[p + 1]; k < n && k < bounds[p + 1] + 300; k++)
			ok &= q[k] == 0xa5;
	}
	ok &= !memcmp(q, want_q, n) && q[n] == 0xa5 && fp8_f32_bits(s[nb]) == 0xa5a5a5a5u;
	if (!ok)
		printf("#   %dx%d in %dx%d blocks, fmt %d, pow2 %d, %d ranges: differs from fp8_quantize\n", R, C,
		       br, bc, (int)fmt, pow2, nparts);
	free(want_q), free(q), free(want_s), free(s), free(am), free(red), free(part), free(whole);
	return ok;
}

static void test_quantize_shards(void)
{
	/* rows and columns around the 128 blocks; one CPU_PAR_MIN past */
	static const int shapes[][2] = { { 300, 200 }, { 200, 333 }, { 37, 300 }, { 130, 70 }, { 1, 500 },
					 { 129, 1 }, { 256, 256 }, { 5, 3 } };
	static const int blocks[][2] = { { 128, 128 }, { 1, 128 }, { 32, 1 } };
	static const int splits[] = { 1, 2, 3, 5 };
	int saved = omp_get_max_threads(), cases = 0;
	for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
		for (size_t bi = 0; bi < sizeof blocks / sizeof blocks[0]; bi++) {
			const int R = shapes[si][0], C = shapes[si][1];
			float *x = quant_input((size_t)R * C, 10);
			for (size_t pi = 0; pi < sizeof splits / sizeof splits[0]; pi++) {
				const bool pow2 = (cases & 3) != 3; /* the blockwise recipe's pow2, and without */
				omp_set_num_threads(1 + cases % 2);
				CHECK(shard_case(x, R, C, blocks[bi][0], blocks[bi][1], cases % 3 ? E4 : E5, pow2,
						 splits[pi]));
				cases++;
			}
			free(x);
		}
	omp_set_num_threads(saved);
}

/* A NaN and an Inf: their blocks' amaxes are the NaN's magnitude bits and
 * +Inf whichever ranges hold them, the codes and scales fp8_quantize's;
 * the raise keeps the larger of |stored| and the range's maximum, a stored
 * NaN stays, and blocks outside the range keep what they hold. */
static void test_quantize_shards_special(void)
{
	const int R = 200, C = 300;
	float *x = quant_input((size_t)R * C, 6);
	x[(size_t)5 * C + 7] = -NAN;      /* block (0, 0) */
	x[(size_t)150 * C + 140] = NAN;   /* block (1, 1), and a second NaN in (0, 2) */
	x[(size_t)100 * C + 280] = NAN;
	x[(size_t)130 * C + 260] = -INFINITY; /* block (1, 2) */
	for (int p = 1; p <= 5; p += 2) {
		CHECK(shard_case(x, R, C, 128, 128, E4, true, p));
		CHECK(shard_case(x, R, C, 1, 128, E5, true, p));
		CHECK(shard_case(x, R, C, 32, 1, E4, true, p));
	}
	float am[6] = { 0 };
	struct kops_fp8_tensor t = { NULL, NULL, R, C, 128, 128, E4 };
	ops->fp8_amax_blocks(am, x, (size_t)R * C, 0, &t);
	CHECK(fp8_f32_bits(am[0]) == fp8_abs_bits(-NAN) && isnan(am[2]) && isnan(am[4]));
	CHECK(am[5] == INFINITY && am[1] > 0 && am[3] > 0 && !isnan(am[1]) && !isnan(am[3]));
	/* a range inside row 10 (block row 0), columns 100 to 299: blocks (0, 0), (0, 1), (0, 2) */
	float y[200];
	for (int k = 0; k < 200; k++)
		y[k] = k == 50 ? -3.0f : 0.25f; /* column 150: block (0, 1) */
	float g[6] = { -5.0f, -2.0f, NAN, -7.0f, -1.0f, 1e-3f };
	ops->fp8_amax_blocks(g, y, 200, (size_t)10 * C + 100, &t);
	CHECK(g[0] == 5.0f && g[1] == 3.0f && isnan(g[2]));
	CHECK(g[3] == -7.0f && g[4] == -1.0f && g[5] == 1e-3f); /* not in the range: as they were */
	/* an empty range writes nothing; the cast of an empty range still writes every sinv */
	ops->fp8_amax_blocks(g, y, 0, 17, &t);
	CHECK(g[3] == -7.0f);
	uint8_t q[4] = { 1, 2, 3, 4 };
	float sv[1] = { 0 }, a1[1] = { 2.0f };
	struct kops_fp8_tensor u = { q, sv, 2, 2, 128, 128, E4 };
	ops->fp8_quantize_blocks(&u, NULL, 0, 4, a1, true);
	CHECK(sv[0] == 1.0f / 128.0f && q[0] == 1 && q[3] == 4); /* 448 / 2 = 224, rounded down to 128 */
	/* a one-element range in the middle */
	float one = 1.5f;
	ops->fp8_quantize_blocks(&u, &one, 1, 2, a1, true);
	CHECK(q[0] == 1 && q[1] == 2 && q[2] == fp8_from_f32(192.0f, E4) && q[3] == 4);
	free(x);
}

/* the op profile's FP8 wrappers compute what the CPU table does and count
 * under the ops' names */
static void test_profile_wrappers(void)
{
	const struct kops *p = kops_profile_wrap(ops);
	struct kops_fp8_tensor a, b;
	quant_for_gemm(&a, 5, 40, E4, KOPS_FP8_AMAX, 1, 16);
	quant_for_gemm(&b, 6, 40, E5, KOPS_FP8_MX, 1, 32);
	float x[200], am1, am2, o1[30], o2[30];
	uint8_t q1[200], q2[200];
	float s1[15], s2[15];
	for (int i = 0; i < 200; i++)
		x[i] = frand(9.0f);
	struct kops_fp8_tensor t1 = { q1, s1, 5, 40, 1, 16, E4 }, t2 = { q2, s2, 5, 40, 1, 16, E4 };
	struct kops_fp8_quant h = { KOPS_FP8_AMAX, 0, true, false };
	kops_profile_reset();
	ops->fp8_amax(&am1, x, 200);
	p->fp8_amax(&am2, x, 200);
	CHECK(am1 == am2);
	ops->fp8_quantize(&t1, x, &h, &am1);
	p->fp8_quantize(&t2, x, &h, &am2);
	CHECK(!memcmp(q1, q2, sizeof q1) && same_bits(s1, s2, 15) && am1 == am2);
	ops->fp8_gemm(o1, &a, &b, NULL, false);
	p->fp8_gemm(o2, &a, &b, NULL, false);
	CHECK(same_bits(o1, o2, 30));
	struct kops_fp8_tensor d1 = transpose_dst(&a), d2 = transpose_dst(&a);
	ops->fp8_transpose(&d1, &a);
	p->fp8_transpose(&d2, &a);
	CHECK(!memcmp(d1.q, d2.q, 200) && same_bits(d1.sinv, d2.sinv, 15));
	free(d1.q), free(d1.sinv), free(d2.q), free(d2.sinv);
	float g1[15] = { 0 }, g2[15] = { 0 };
	ops->fp8_amax_blocks(g1, x + 37, 150, 37, &t1);
	p->fp8_amax_blocks(g2, x + 37, 150, 37, &t2);
	CHECK(same_bits(g1, g2, 15));
	ops->fp8_quantize_blocks(&t1, x + 37, 150, 37, g1, true);
	p->fp8_quantize_blocks(&t2, x + 37, 150, 37, g2, true);
	CHECK(!memcmp(q1, q2, sizeof q1) && same_bits(s1, s2, 15));
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	kops_profile_report(f, 1, 0);
	fclose(f);
	CHECK(strstr(buf, "fp8_amax") && strstr(buf, "fp8_quantize") && strstr(buf, "fp8_gemm") &&
	      strstr(buf, "fp8_transpose") && strstr(buf, "fp8_amax_blocks") && strstr(buf, "fp8_quantize_blocks"));
	free(buf);
	free(a.q), free(a.sinv), free(b.q), free(b.sinv);
}

int main(void)
{
	log_init("test_fp8", 0, 1);
	ops = kops_cpu();
	RUN(test_cast_values);
	RUN(test_decode);
	RUN(test_round_trip);
	RUN(test_ties);
	RUN(test_cast_reference);
#ifdef HAVE_NV_FP8
	RUN(test_against_cuda);
#else
	printf("# no CUDA headers in this build: the casts were not compared with cuda_fp8.h\n");
#endif
	RUN(test_scale_rules);
	RUN(test_amax_op);
	RUN(test_quantize);
	RUN(test_quantize_edges);
	RUN(test_gemm);
	RUN(test_transpose);
	RUN(test_transpose_quantized);
	RUN(test_quantize_shards);
	RUN(test_quantize_shards_special);
	RUN(test_profile_wrappers);
	return test_summary();
}
