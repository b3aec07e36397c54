/*
 * dtype.c - see dtype.h. The half-precision conversions go through GCC's
 * _Float16 (IEEE binary16 with correct rounding on x86-64).
 */
#include "ckpt/dtype.h"

#include <string.h>

#include "base/error.h"

uint16_t ckpt_f32_to_bf16(float x)
{
	uint32_t u;
	memcpy(&u, &x, 4);
	if ((u & 0x7fffffffu) > 0x7f800000u)
		return (uint16_t)((u >> 16) | 0x40); /* NaN stays a (quiet) NaN */
	u += 0x7fffu + ((u >> 16) & 1u);
	return (uint16_t)(u >> 16);
}

float ckpt_bf16_to_f32(uint16_t b)
{
	uint32_t u = (uint32_t)b << 16;
	float x;
	memcpy(&x, &u, 4);
	return x;
}

uint16_t ckpt_f32_to_f16(float x)
{
	_Float16 h = (_Float16)x;
	uint16_t b;
	memcpy(&b, &h, 2);
	return b;
}

float ckpt_f16_to_f32(uint16_t b)
{
	_Float16 h;
	memcpy(&h, &b, 2);
	return (float)h;
}

/* src may be unaligned (a safetensors file's data need not be): 16-bit
 * values are read bytewise. */
static uint16_t u16_at(const void *src, size_t i)
{
	uint16_t v;
	memcpy(&v, (const char *)src + 2 * i, 2);
	return v;
}

void ckpt_to_f32(enum ckpt_dtype dt, const void *src, size_t n, float *dst)
{
	switch (dt) {
	case CKPT_F32:
		memmove(dst, src, n * sizeof(float));
		return;
	case CKPT_BF16:
		for (size_t i = 0; i < n; i++)
			dst[i] = ckpt_bf16_to_f32(u16_at(src, i));
		return;
	case CKPT_F16:
		for (size_t i = 0; i < n; i++)
			dst[i] = ckpt_f16_to_f32(u16_at(src, i));
		return;
	default:
		BUG("ckpt_to_f32 of %s", ckpt_dtype_name(dt));
	}
}

void ckpt_from_f32(enum ckpt_dtype dt, const float *src, size_t n, void *dst)
{
	/* in place is safe: element i's 2 bytes land at 2i, below the 4i where
	 * element i was read, over elements already converted */
	uint16_t *d16 = dst;
	switch (dt) {
	case CKPT_F32:
		memmove(dst, src, n * sizeof(float));
		return;
	case CKPT_BF16:
		for (size_t i = 0; i < n; i++)
			d16[i] = ckpt_f32_to_bf16(src[i]);
		return;
	case CKPT_F16:
		for (size_t i = 0; i < n; i++)
			d16[i] = ckpt_f32_to_f16(src[i]);
		return;
	default:
		BUG("ckpt_from_f32 to %s", ckpt_dtype_name(dt));
	}
}
