/*
 * wg.cuh - Hopper's warpgroup matrix multiply (wgmma, sm_90a) for the
 * tensor-core attention (attn_tc.cuh): shared-memory matrix descriptors,
 * wgmma.mma_async m64nNk16 with bf16/fp16 operands and fp32 accumulators
 * (N = 32, 64 and 128), its fence, commit and wait, and the proxy fence that
 * shows shared memory written by ordinary stores or cp.async to it. On the
 * device the PTX is emitted only for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL:
 * attn_wg.cu is built for that target alone); under -DMEGAC_EMU the
 * thread-block emulator computes the same products (tests/emu/emu.h).
 *
 * Layouts (PTX ISA "Matrix Descriptor", canonical layouts without swizzle;
 * the same as CUTLASS's GMMA INTERLEAVE). Shared memory holds core matrices
 * of 8 rows x 16 bytes, 128 contiguous bytes each; a descriptor gives the
 * start address, LBO, the byte distance between core matrices adjacent
 * along K, and SBO, between core matrices adjacent along M or N:
 *  - K-major (A, or B not transposed): element (mn, k) at
 *      start + (mn/8) SBO + (k/8) LBO + (mn%8) 16 + (k%8) 2;
 *  - MN-major (B transposed, imm-trans-b = 1): element (k, n) at
 *      start + (n/8) SBO + (k/8) LBO + (k%8) 16 + (n%8) 2.
 * A from registers is mma.m16n8k16's A fragment for warp w's rows 16w..16w+15
 * of the warpgroup's 64; the accumulators of m64nN: d[4j + e] of lane
 * 4 gid + tig in warp w is row 16w + gid + 8 (e/2), column 8j + 2 tig + e%2.
 * wgmma is asynchronous: its accumulators (and A registers) may not be
 * touched between the mma and the wait that retires its group; registers
 * written by ordinary code before an mma need wg_fence() first.
 */
#ifndef MEGAC_KERNELS_CUDA_WG_CUH
#define MEGAC_KERNELS_CUDA_WG_CUH

#include "tc.cuh"

#include <type_traits>

/* the shared-window address of a pointer into shared memory */
__device__ __forceinline__ uint32_t wg_smem_addr(const void *p)
{
#ifdef MEGAC_EMU
	return emu_smem_addr(p);
#else
	return (uint32_t)__cvta_generic_to_shared(p);
#endif
}

/* a descriptor without swizzle: address, LBO and SBO in bytes (multiples of 16) */
__device__ __forceinline__ uint64_t wg_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
	return (uint64_t)((addr >> 4) & 0x3fff) | (uint64_t)((lbo >> 4) & 0x3fff) << 16 |
	       (uint64_t)((sbo >> 4) & 0x3fff) << 32;
}

__device__ __forceinline__ void wg_fence(void)
{
#if defined(MEGAC_EMU)
	emu_wgmma_fence();
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
	asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void wg_commit(void)
{
#if defined(MEGAC_EMU)
	emu_wgmma_commit();
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
	asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
#endif
}

/* wait until at most N committed groups are pending */
template <int N> __device__ __forceinline__ void wg_wait(void)
{
#if defined(MEGAC_EMU)
	emu_wgmma_wait(N);
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
	asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
#endif
}

/* this thread's shared-memory writes (ordinary stores, cp.async) become
 * visible to the async proxy that wgmma reads through; each writing thread,
 * then a barrier */
__device__ __forceinline__ void wg_fence_proxy(void)
{
#if defined(MEGAC_EMU)
	emu_fence_proxy();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
	asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
#endif
}

/* the compiler must not move reads or writes of registers that an
 * asynchronous wgmma owns across its issue or wait: an empty asm that
 * "changes" each of them pins them in place (CUTLASS's fence_operand) */
template <class T> __device__ __forceinline__ void wg_fence_operand(T *x, int n)
{
#if !defined(MEGAC_EMU)
#pragma unroll
	for (int i = 0; i < n; i++)
		if constexpr (std::is_same_v<T, float>)
			asm volatile("" : "+f"(x[i])::"memory");
		else
			asm volatile("" : "+r"(x[i])::"memory");
#endif
}

/* d (N/2 accumulators) = A.B (+ d when scale_d): A [64 x 16] K-major from
 * shared memory (da), B [16 x N] K-major (db) */
template <class H, int N> __device__ __forceinline__ void wg_mma_ss(float *d, uint64_t da, uint64_t db, int scale_d);

/* the same with A from registers (a, mma's A fragment) and B MN-major (db, transposed) */
template <class H, int N>
__device__ __forceinline__ void wg_mma_rs_tb(float *d, const uint32_t a[4], uint64_t db, int scale_d);

/* the bodies per target: the emulator's call, the PTX (sm_90a), or a trap
 * (other targets never run them: attn_tc.cu takes wgmma only on sm_90) */
#if defined(MEGAC_EMU)
#define WG_SS_BODY(N, TY, KIND) emu_wgmma(d, N, da, NULL, db, KIND, 0, scale_d)
#define WG_RS_BODY(N, TY, KIND) emu_wgmma(d, N, 0, a, db, KIND, 1, scale_d)
#elif defined(__CUDA_ARCH_FEAT_SM90_ALL)
/* the accumulators are the asm's first N/2 operands */
#define WG_SS_32(TY) \
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n" \
		     "wgmma.mma_async.sync.aligned.m64n32k16.f32." TY "." TY " {" \
		     "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15" \
		     "}, %16, %17, p, 1, 1, 0, 0;\n}\n" \
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
		     "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]) \
		     : "l"(da), "l"(db), "r"(scale_d))

#define WG_RS_32(TY) \
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n" \
		     "wgmma.mma_async.sync.aligned.m64n32k16.f32." TY "." TY " {" \
		     "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15" \
		     "}, {%16,%17,%18,%19}, %20, p, 1, 1, 1;\n}\n" \
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
		     "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]) \
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d))

#define WG_SS_64(TY) \
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n" \
		     "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {" \
		     "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31" \
		     "}, %32, %33, p, 1, 1, 0, 0;\n}\n" \
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
		     "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
		     "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), \
		     "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), \
		     "+f"(d[30]), "+f"(d[31]) \
		     : "l"(da), "l"(db), "r"(scale_d))

#define WG_RS_64(TY) \
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n" \
		     "wgmma.mma_async.sync.aligned.m64n64k16.f32." TY "." TY " {" \
		     "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31" \
		     "}, {%32,%33,%34,%35}, %36, p, 1, 1, 1;\n}\n" \
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
		     "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
		     "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), \
		     "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), \
		     "+f"(d[30]), "+f"(d[31]) \
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d))

#define WG_SS_128(TY) \
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n" \
		     "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {" \
		     "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63" \
		     "}, %64, %65, p, 1, 1, 0, 0;\n}\n" \
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
		     "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
		     "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), \
		     "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), \
		     "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), \
		     "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), \
		     "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), \
		     "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), \
		     "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
		     : "l"(da), "l"(db), "r"(scale_d))

#define WG_RS_128(TY) \
	asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n" \
		     "wgmma.mma_async.sync.aligned.m64n128k16.f32." TY "." TY " {" \
		     "%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31,%32,%33,%34,%35,%36,%37,%38,%39,%40,%41,%42,%43,%44,%45,%46,%47,%48,%49,%50,%51,%52,%53,%54,%55,%56,%57,%58,%59,%60,%61,%62,%63" \
		     "}, {%64,%65,%66,%67}, %68, p, 1, 1, 1;\n}\n" \
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]), \
		     "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), \
		     "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), \
		     "+f"(d[23]), "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), \
		     "+f"(d[30]), "+f"(d[31]), "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), \
		     "+f"(d[37]), "+f"(d[38]), "+f"(d[39]), "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), \
		     "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]), "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), \
		     "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]), "+f"(d[56]), "+f"(d[57]), \
		     "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]) \
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(scale_d))
#define WG_SS_BODY(N, TY, KIND) WG_SS_##N(TY)
#define WG_RS_BODY(N, TY, KIND) WG_RS_##N(TY)
#else
#define WG_SS_BODY(N, TY, KIND) __trap()
#define WG_RS_BODY(N, TY, KIND) __trap()
#endif
#define WG_DEF(N, TAG, TY, KIND)                                                                           \
	template <> __device__ __forceinline__ void wg_mma_ss<TAG, N>(float *d, uint64_t da, uint64_t db,    \
								      int scale_d)                        \
	{                                                                                                    \
		WG_SS_BODY(N, TY, KIND);                                                                     \
	}                                                                                                    \
	template <>                                                                                          \
	__device__ __forceinline__ void wg_mma_rs_tb<TAG, N>(float *d, const uint32_t a[4], uint64_t db,     \
							     int scale_d)                                  \
	{                                                                                                    \
		WG_RS_BODY(N, TY, KIND);                                                                     \
	}
WG_DEF(32, tc_bf16, "bf16", 0)
WG_DEF(64, tc_bf16, "bf16", 0)
WG_DEF(128, tc_bf16, "bf16", 0)
WG_DEF(32, tc_f16, "f16", 1)
WG_DEF(64, tc_f16, "f16", 1)
WG_DEF(128, tc_f16, "f16", 1)
#undef WG_DEF

#endif
