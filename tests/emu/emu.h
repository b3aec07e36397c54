/*
 * emu.h - the device side of the emulated CUDA device: a thread-block
 * emulator in which the CUDA kernels of lib/kernels/cuda/ run from their own
 * source, compiled by a host C++ compiler with -DMEGAC_EMU, on a machine
 * without a GPU. The runtime stand-in (runtime.cc, cuda/cuda_runtime.h)
 * launches kernels through emu_launch; tests call emu_launch directly.
 *
 * Execution model. Each CUDA thread of a block is a fiber (a coroutine with
 * its own stack) on the one host thread that runs the device; a thread runs
 * until it reaches a collective (__syncthreads, a warp shuffle or vote,
 * ldmatrix, mma, wgmma), where it waits; when every lane of its warp that the
 * collective's mask names (or every thread of its block, for a barrier) waits
 * on the same collective, the emulator computes it from all lanes' operands,
 * exactly as the PTX ISA defines it, and releases them. Blocks run one after
 * the other.
 *
 * What it catches: fragment layouts and index arithmetic (wrong rows land in
 * the wrong lanes and the result differs from the CPU twin), shared-memory
 * reads out of the block's allocation (ldmatrix, cp.async, wgmma addresses
 * are checked), divergent collectives and barriers not reached by every
 * thread (reported as a deadlock naming the block and the waiting threads),
 * a collective whose mask names a lane that has exited, and missing
 * barriers: one warp runs at a time up to its next barrier, first to last
 * warp or last to first (order bit 0), lanes likewise, so a read of shared
 * memory that another thread has not written yet gives a different answer
 * in one of the orders; cp.async copies and wgmma products land as early as
 * the hardware may (when issued, order bit 1 clear) or as late (at their
 * wait, bit 1 set). Shared memory starts every block filled with NaN bytes,
 * so a read of a never-written element poisons the result.
 * What it cannot catch: timing, bank conflicts, register pressure (that is
 * ptxas's report, tests/gpu/ptxas_report.sh), races between blocks (they
 * never run at the same time), and memory ordering beyond the two schedules.
 *
 * One host thread runs every block; the emulator's state (the current
 * thread) is file-level in emu.cc, which is what lets threadIdx be a macro.
 * Static __shared__ variables are C++ statics: one copy, shared by the
 * threads of the block that runs (blocks never overlap).
 */
#ifndef MEGAC_TESTS_EMU_H
#define MEGAC_TESTS_EMU_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <type_traits>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __shared__ static
#define __constant__ static

struct dim3 {
	unsigned x, y, z;
	constexpr dim3(unsigned vx = 1, unsigned vy = 1, unsigned vz = 1) : x(vx), y(vy), z(vz) {}
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
struct alignas(16) int4 {
	int x, y, z, w;
};
struct alignas(8) int2 {
	int x, y;
};
struct alignas(16) double2 {
	double x, y;
};
static inline float4 make_float4(float x, float y, float z, float w) { return float4{ x, y, z, w }; }
static inline float2 make_float2(float x, float y) { return float2{ x, y }; }
static inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return uint4{ x, y, z, w }; }
static inline uint2 make_uint2(uint32_t x, uint32_t y) { return uint2{ x, y }; }
static inline int4 make_int4(int x, int y, int z, int w) { return int4{ x, y, z, w }; }
static inline int2 make_int2(int x, int y) { return int2{ x, y }; }

const dim3 &emu_thread_idx(void);
const dim3 &emu_block_idx(void);
const dim3 &emu_block_dim(void);
const dim3 &emu_grid_dim(void);
#define threadIdx (emu_thread_idx())
#define blockIdx (emu_block_idx())
#define blockDim (emu_block_dim())
#define gridDim (emu_grid_dim())
static constexpr int warpSize = 32;

/* the block's dynamic shared memory (extern __shared__ on the device) */
void *emu_smem(void);

void emu_syncthreads(void);
void emu_syncwarp(unsigned mask);
#define __syncthreads() emu_syncthreads()
static inline void __syncwarp(unsigned mask = 0xffffffffu) { emu_syncwarp(mask); }

/* ---- warp shuffles and votes: every lane of mask must reach them ---- */
enum emu_shfl_mode { EMU_SHFL_IDX, EMU_SHFL_UP, EMU_SHFL_DOWN, EMU_SHFL_XOR };
/* the shuffled bits (a 4- or 8-byte value in the low bits) */
uint64_t emu_shfl(unsigned mask, uint64_t bits, enum emu_shfl_mode mode, int arg, int width);
enum emu_vote_mode { EMU_VOTE_BALLOT, EMU_VOTE_ANY, EMU_VOTE_ALL };
unsigned emu_vote(unsigned mask, int pred, enum emu_vote_mode mode);

template <class T> static inline T emu_shfl_t(unsigned mask, T v, enum emu_shfl_mode mode, int arg, int width)
{
	static_assert(sizeof(T) == 4 || sizeof(T) == 8, "shuffles move 4- or 8-byte values");
	uint64_t b = 0;
	memcpy(&b, &v, sizeof v);
	b = emu_shfl(mask, b, mode, arg, width);
	T r;
	memcpy(&r, &b, sizeof r);
	return r;
}
template <class T> static inline T __shfl_sync(unsigned mask, T v, int src, int width = 32)
{
	return emu_shfl_t(mask, v, EMU_SHFL_IDX, src, width);
}
template <class T> static inline T __shfl_up_sync(unsigned mask, T v, unsigned d, int width = 32)
{
	return emu_shfl_t(mask, v, EMU_SHFL_UP, (int)d, width);
}
template <class T> static inline T __shfl_down_sync(unsigned mask, T v, unsigned d, int width = 32)
{
	return emu_shfl_t(mask, v, EMU_SHFL_DOWN, (int)d, width);
}
template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lanemask, int width = 32)
{
	return emu_shfl_t(mask, v, EMU_SHFL_XOR, lanemask, width);
}
static inline unsigned __ballot_sync(unsigned mask, int pred) { return emu_vote(mask, pred, EMU_VOTE_BALLOT); }
static inline int __any_sync(unsigned mask, int pred) { return emu_vote(mask, pred, EMU_VOTE_ANY) != 0; }
static inline int __all_sync(unsigned mask, int pred) { return emu_vote(mask, pred, EMU_VOTE_ALL) != 0; }
/* __shfl_xor_sync(0xffffffff, v, lanemask) over the whole warp (tc.cuh) */
static inline float emu_shfl_xor(float v, int lanemask) { return __shfl_xor_sync(0xffffffffu, v, lanemask); }

/* ---- atomics: the emulated threads never interleave inside one ---- */
template <class T> static inline T atomicAdd(T *p, T v) { T o = *p; *p = o + v; return o; }
template <class T> static inline T atomicSub(T *p, T v) { T o = *p; *p = o - v; return o; }
template <class T> static inline T atomicMax(T *p, T v) { T o = *p; *p = o > v ? o : v; return o; }
template <class T> static inline T atomicMin(T *p, T v) { T o = *p; *p = o < v ? o : v; return o; }
template <class T> static inline T atomicExch(T *p, T v) { T o = *p; *p = v; return o; }
template <class T> static inline T atomicCAS(T *p, T cmp, T v) { T o = *p; if (o == cmp) *p = v; return o; }
template <class T> static inline T atomicOr(T *p, T v) { T o = *p; *p = o | v; return o; }
template <class T> static inline T atomicAnd(T *p, T v) { T o = *p; *p = o & v; return o; }
static inline void __threadfence(void) {}
static inline void __threadfence_block(void) {}
template <class T> static inline T __ldg(const T *p) { return *p; }

/* ---- arithmetic intrinsics: IEEE round to nearest, never contracted (the
 * emulated build compiles with -ffp-contract=off) ---- */
static inline float __fmul_rn(float a, float b) { return a * b; }
static inline float __fadd_rn(float a, float b) { return a + b; }
static inline float __fsub_rn(float a, float b) { return a - b; }
static inline float __fdiv_rn(float a, float b) { return a / b; }
static inline float __frcp_rn(float a) { return 1.0f / a; }
static inline float __fsqrt_rn(float a) { return sqrtf(a); }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline double __dmul_rn(double a, double b) { return a * b; }
static inline double __dadd_rn(double a, double b) { return a + b; }
static inline float rsqrtf(float a) { return 1.0f / sqrtf(a); }
/* glibc declares __expf and __logf itself */
#define __expf(a) expf(a)
#define __logf(a) logf(a)
static inline float __saturatef(float a) { return a < 0.0f ? 0.0f : a > 1.0f ? 1.0f : a; }
static inline uint32_t __float_as_uint(float x) { uint32_t u; memcpy(&u, &x, 4); return u; }
static inline float __uint_as_float(uint32_t u) { float x; memcpy(&x, &u, 4); return x; }
static inline int __float_as_int(float x) { int u; memcpy(&u, &x, 4); return u; }
static inline float __int_as_float(int u) { float x; memcpy(&x, &u, 4); return x; }
static inline long long __double_as_longlong(double x) { long long u; memcpy(&u, &x, 8); return u; }
static inline double __longlong_as_double(long long u) { double x; memcpy(&x, &u, 8); return x; }
static inline uint32_t __umulhi(uint32_t a, uint32_t b) { return (uint32_t)(((uint64_t)a * b) >> 32); }
static inline int __mulhi(int a, int b) { return (int)(((int64_t)a * b) >> 32); }
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
static inline int __clz(int x) { return x ? __builtin_clz((unsigned)x) : 32; }
static inline int __ffs(int x) { return __builtin_ffs(x); }
static inline unsigned __brev(unsigned x)
{
	unsigned r = 0;
	for (int i = 0; i < 32; i++)
		r |= ((x >> i) & 1u) << (31 - i);
	return r;
}
static inline void __nanosleep(unsigned ns) { (void)ns; }
/* a kernel's assertion: the emulator names the kernel, block and thread, and stops */
[[noreturn]] void emu_trap(void);
#define __trap() emu_trap()

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
/* the emulated device's compute capability x 10 (the runtime sets it; 90):
 * wgmma on anything below 90 fails, as a kernel built for sm_90a would not
 * even load there */
extern int emu_sm;
static inline size_t __cvta_generic_to_shared(const void *p) { return emu_smem_addr(p); }
static inline size_t __cvta_generic_to_global(const void *p) { return (size_t)(uintptr_t)p; }
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
 * the other; order (0..3) bit 0: a block's warps (and a warp's lanes) run
 * last to first instead of first to last, each up to its next
 * __syncthreads; bit 1: cp.async and wgmma land at their wait instead of
 * when issued. name (may be NULL) names the kernel in what it reports.
 * Returns 0, or -1 after printing what went wrong (a deadlock, a bad
 * ldmatrix address, a trap).
 */
int emu_launch(dim3 grid, dim3 block, size_t smem_bytes, int order, const std::function<void()> &body);
int emu_launch_named(const char *name, dim3 grid, dim3 block, size_t smem_bytes, int order,
		     const std::function<void()> &body);

#endif
