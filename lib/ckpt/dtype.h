/*
 * dtype.h - element conversions between float32 and the stored types of
 * checkpoints and safetensors files (bfloat16 and float16 as raw bits,
 * little-endian). float32 -> 16 bits rounds to nearest even, as PyTorch's
 * .to(torch.bfloat16) / .half() do; 16 bits -> float32 is exact.
 */
#ifndef MEGAC_CKPT_DTYPE_H
#define MEGAC_CKPT_DTYPE_H

#include <stddef.h>
#include <stdint.h>

#include "ckpt/ckpt.h"

/* n elements of dt at src into float32 (CKPT_I64 is not a float type: BUG). */
void ckpt_to_f32(enum ckpt_dtype dt, const void *src, size_t n, float *dst);
/* n float32 into dt; dst may be src (16-bit values are packed in place). */
void ckpt_from_f32(enum ckpt_dtype dt, const float *src, size_t n, void *dst);

uint16_t ckpt_f32_to_bf16(float x);
float ckpt_bf16_to_f32(uint16_t b);
uint16_t ckpt_f32_to_f16(float x);
float ckpt_f16_to_f32(uint16_t h);

#endif
