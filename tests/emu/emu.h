/*
 * emu.h - a CUDA thread-block emulator for the tensor-core kernels, so their
 * warp-level code runs, and is tested against the CPU twins, on a machine
 * without a GPU (issue 11: kernels written where no GPU is lent).
 *
 * The kernels include lib/kernels/cuda/tc.cuh, which on the device issues
 * PTX (ldmatrix, mma.sync, shuffles) and, compiled by a host C++ compiler
 * with -DMEGAC_EMU, calls the functions below instead. Each CUDA thread of a
 * block is a coroutine (ucontext) on one host thread; a thread runs until it
 * reaches a collective (__syncthreads, a warp shuffle, ldmatrix, mma), where
 * it waits; when every lane of its warp (or every thread of its block) waits
 * on the same collective, the emulator computes it from all lanes' operands
 * exactly as the PTX ISA lays the fragments out, and releases them.
 *
 * What it catches: fragment layouts and index arithmetic (wrong rows land in
 * the wrong lanes and the result differs from the CPU), shared-memory reads
 * out of the block's allocation (ldmatrix addresses are checked), divergent
 * collectives and barriers not reached by every thread (a deadlock is
 * reported, naming the block and the waiting threads), and missing barriers:
 * emu_launch runs one warp at a time up to its next barrier, first to last
 * warp or last to first (order bit 0), so a read of shared memory another
 * warp has not written yet gives a different answer in one of the orders;
 * likewise cp.async copies land as early as the hardware may (when issued,
 * order bit 1 clear: overwriting what a slower warp still reads) or as late
 * (at their wait, bit 1 set: a read before the wait sees the old contents).
 * The tests run all four orders and require the same bits from each. Shared memory starts filled
 * with NaN bytes, so a read of a never-written element poisons the result.
 * What it cannot catch: timing, bank conflicts, register pressure (that is
 * ptxas's report, tests/gpu/ptxas_report.sh).
 *
 * Single host thread, one block at a time: the emulator's state (the current
 * thread) is file-level in emu.cc, which is what lets threadIdx be a macro.
 */
#ifndef MEGAC_TESTS_EMU_H
#define MEGAC_TESTS_EMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)

struct dim3 {
	unsigned x, y, z;
};
struct alignas(16) float4 {
	float x, y, z, w;
};
struct alignas(8) float2 {
	float x, y;
};
struct alignas(16) uint4 {
	uint32_t x, y, z, w;
};
struct alignas(8) uint2 {
	uint32_t x, y;
};

const dim3 &emu_thread_idx(void);
const dim3 &emu_block_idx(void);
const dim3 &emu_block_dim(void);
const dim3 &emu_grid_dim(void);
#define threadIdx (emu_thread_idx())
#define blockIdx (emu_block_idx())
#define blockDim (emu_block_dim())
#define gridDim (emu_grid_dim())

/* the block's dynamic shared memory (extern __shared__ on the device) */
void *emu_smem(void);

void emu_syncthreads(void);
void emu_syncwarp(void);
#define __syncthreads() emu_syncthreads()
#define __syncwarp(...) emu_syncwarp()

/* __shfl_xor_sync(0xffffffff, v, lanemask) over the whole warp */
float emu_shfl_xor(float v, int lanemask);

/* ldmatrix.sync.aligned.m8n8.x4(.trans).shared.b16: this lane gives the
 * address of one 16-byte row (lanes 8j..8j+7 the rows of matrix j) and gets
 * its four fragment registers */
void emu_ldmatrix_x4(uint32_t r[4], const void *row, int trans);

/* mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32, d += a.b;
 * half_kind 0: bf16, 1: fp16 */
void emu_mma_m16n8k16(float d[4], const uint32_t a[4], const uint32_t b[2], int half_kind);

/* cp.async (tc.cuh): with order bit 1 set a copy is queued in this thread's
 * open group and done only when a wait retires its group, so a read before
 * the wait sees the old contents and fails; otherwise it is done at once;
 * src_bytes 0 writes zeros (the source must still be aligned). */
void emu_cp_async(void *smem, const void *gmem, int bytes, int src_bytes); /* bytes: 4, 8 or 16 */
void emu_cp_async_commit(void);
void emu_cp_async_wait(int n); /* all but the n most recent committed groups */

/* wgmma (wg.cuh): warpgroup collectives (the 128 threads of 4 aligned
 * warps). emu_wgmma: d (n/2 floats per lane) = A.B (+ d when scale_d), A
 * from shared memory through descriptor da (K-major) or, when a is not
 * NULL, from the lanes' registers, B through descriptor db, K-major or
 * (trans_b) MN-major; layouts without swizzle; kind 0 bf16, 1 fp16. Like
 * cp.async it lands when issued or at the wait that retires its group
 * (order bit 1), so accumulators read before the wait fail. */
uint32_t emu_smem_addr(const void *p); /* the shared-window address: the offset in the block's memory */
void emu_wgmma(float *d, int n, uint64_t da, const uint32_t *a, uint64_t db, int kind, int trans_b, int scale_d);
void emu_wgmma_fence(void); /* required before each batch of wgmma (since the last wait) */
/* fence.proxy.async.shared::cta: this thread's cp.async writes become
 * readable by wgmma, which fails on bytes written without it */
void emu_fence_proxy(void);
void emu_wgmma_commit(void);
void emu_wgmma_wait(int n);

/* 16-bit float conversions, round to nearest even, as the device does:
 * the checkpoint code's (lib/ckpt/dtype.c, which matches torch) */
extern "C" {
#include "ckpt/dtype.h"
}
static inline uint16_t emu_f32_to_bf16(float x) { return ckpt_f32_to_bf16(x); }
static inline uint16_t emu_f32_to_f16(float x) { return ckpt_f32_to_f16(x); }
static inline float emu_bf16_to_f32(uint16_t h) { return ckpt_bf16_to_f32(h); }
static inline float emu_f16_to_f32(uint16_t h) { return ckpt_f16_to_f32(h); }

/*
 * Runs body() as every thread of every block of the grid, blocks one after
 * the other; order (0..3) bit 0: a block's warps run last to first instead
 * of first to last, each up to its next __syncthreads; bit 1: cp.async lands
 * at its wait instead of when issued. Returns 0, or -1 after printing what
 * went wrong (a deadlock, a bad ldmatrix address).
 */
int emu_launch(dim3 grid, dim3 block, size_t smem_bytes, int order, const std::function<void()> &body);

#endif
