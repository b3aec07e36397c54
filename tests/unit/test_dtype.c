/*
 * test_dtype.c - float32 <-> bfloat16/float16 (lib/ckpt/dtype.c): rounding
 * to nearest even on hand-made bit patterns, exact widening, NaN and
 * infinities kept, and in-place packing equal to packing into a new buffer.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/dtype.h"
#include "test.h"

static float bits(uint32_t u)
{
	float x;
	memcpy(&x, &u, 4);
	return x;
}

static void test_bf16_rounding(void)
{
	/* 1.0 + half an ulp of bf16: a tie, to even (1.0); one bit more: up */
	CHECK_INT(ckpt_f32_to_bf16(bits(0x3f808000u)), 0x3f80);
	CHECK_INT(ckpt_f32_to_bf16(bits(0x3f808001u)), 0x3f81);
	CHECK_INT(ckpt_f32_to_bf16(bits(0x3f818000u)), 0x3f82); /* tie from an odd value: up to even */
	CHECK_INT(ckpt_f32_to_bf16(bits(0x3f817fffu)), 0x3f81);
	CHECK_INT(ckpt_f32_to_bf16(INFINITY), 0x7f80);
	CHECK_INT(ckpt_f32_to_bf16(-INFINITY), 0xff80);
	CHECK(isnan(ckpt_bf16_to_f32(ckpt_f32_to_bf16(NAN))));
	CHECK(ckpt_bf16_to_f32(0x3f80) == 1.0f && ckpt_bf16_to_f32(0xc040) == -3.0f);
}

static void test_f16(void)
{
	CHECK_INT(ckpt_f32_to_f16(1.0f), 0x3c00);
	CHECK_INT(ckpt_f32_to_f16(-2.0f), 0xc000);
	CHECK_INT(ckpt_f32_to_f16(65504.0f), 0x7bff);
	CHECK_INT(ckpt_f32_to_f16(1e6f), 0x7c00); /* overflow: infinity */
	CHECK_INT(ckpt_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00); /* a tie: to even */
	CHECK_INT(ckpt_f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);
	CHECK(ckpt_f16_to_f32(0x0001) == ldexpf(1.0f, -24)); /* the smallest subnormal, exact */
}

static void test_in_place(void)
{
	enum { N = 1001 };
	float *x = malloc(N * sizeof(float)), *y = malloc(N * sizeof(float));
	uint16_t *want = malloc(N * 2);
	srand(7);
	for (enum ckpt_dtype dt = CKPT_BF16; dt <= CKPT_F16; dt++) {
		for (int i = 0; i < N; i++)
			x[i] = y[i] = (float)(rand() - RAND_MAX / 2) / 1e5f;
		ckpt_from_f32(dt, x, N, want);
		ckpt_from_f32(dt, y, N, y);
		CHECK(!memcmp(want, y, N * 2));
		float *back = malloc(N * sizeof(float));
		ckpt_to_f32(dt, (const char *)want, N, back);
		for (int i = 0; i < N; i++)
			CHECK(fabsf(back[i] - x[i]) <= fabsf(x[i]) * (dt == CKPT_BF16 ? 0x1p-8f : 0x1p-11f) + 1e-7f);
		free(back);
	}
	free(x), free(y), free(want);
}

int main(void)
{
	RUN(test_bf16_rounding);
	RUN(test_f16);
	RUN(test_in_place);
	return test_summary();
}
