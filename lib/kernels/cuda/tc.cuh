/*
 * tc.cuh - the warp-level tensor-core primitives of the CUDA backend's
 * bf16/fp16 kernels (attn_tc.cuh): ldmatrix, mma.sync m16n8k16 with fp32
 * accumulators, shuffles and packing two floats into a 32-bit pair of
 * halves. On the device they are PTX; compiled by a host C++ compiler with
 * -DMEGAC_EMU they call the thread-block emulator of tests/emu/emu.h, so the
 * same kernel source runs on a machine without a GPU and is tested there
 * against the CPU twins (fragment layouts, indexing, barriers).
 *
 * Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16"): lane
 * l = 4 gid + tig of a warp holds, of the 16x16 A (row-major), a0 = row gid,
 * columns 2tig and 2tig+1; a1 = row gid+8; a2 = row gid, columns 2tig+8, +9;
 * a3 = row gid+8, those columns. Of the 16x8 B (k x n, "col"): b0 = rows
 * 2tig, 2tig+1 of column gid; b1 = rows 2tig+8, +9. Of the 16x8 fp32 C/D:
 * d0, d1 = row gid, columns 2tig, 2tig+1; d2, d3 = row gid+8. The lower
 * column (or row) is the lower 16 bits of a register.
 */
#ifndef MEGAC_KERNELS_CUDA_TC_CUH
#define MEGAC_KERNELS_CUDA_TC_CUH

#ifdef MEGAC_EMU
#include "emu.h"
#else
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#endif
#include <stdint.h>
#include <string.h>

/* the two 16-bit input formats: tags for the kernel templates */
struct tc_bf16 {
	static constexpr int kind = 0;
};
struct tc_f16 {
	static constexpr int kind = 1;
};

/* lo in the low 16 bits, each rounded to nearest even */
template <class H> __device__ __forceinline__ uint32_t tc_pack(float lo, float hi)
{
#ifdef MEGAC_EMU
	if constexpr (H::kind == 0)
		return (uint32_t)emu_f32_to_bf16(lo) | (uint32_t)emu_f32_to_bf16(hi) << 16;
	else
		return (uint32_t)emu_f32_to_f16(lo) | (uint32_t)emu_f32_to_f16(hi) << 16;
#else
	uint32_t u;
	if constexpr (H::kind == 0) {
		const __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi); /* .x = lo: the low half */
		memcpy(&u, &h, sizeof u);
	} else {
		const __half2 h = __floats2half2_rn(lo, hi);
		memcpy(&u, &h, sizeof u);
	}
	return u;
#endif
}

/* d += a . b, one m16n8k16 product per warp */
#define TC_MMA_ASM(TY)                                                                             \
	asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." TY "." TY ".f32 "                    \
		     "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"                       \
		     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                \
		     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))

template <class H> __device__ __forceinline__ void tc_mma(float d[4], const uint32_t a[4], const uint32_t b[2])
{
#ifdef MEGAC_EMU
	emu_mma_m16n8k16(d, a, b, H::kind);
#else
	if constexpr (H::kind == 0)
		TC_MMA_ASM("bf16");
	else
		TC_MMA_ASM("f16");
#endif
}
#undef TC_MMA_ASM

/* ldmatrix x4: this lane's row is row l%8 of matrix l/8 (16 bytes, 16-byte
 * aligned shared memory); r[j] is this lane's fragment of matrix j: row l/4,
 * columns 2(l%4), +1 of it, or with trans, rows 2(l%4), +1 of column l/4 */
template <bool TRANS> __device__ __forceinline__ void tc_ldsm(uint32_t r[4], const void *row)
{
#ifdef MEGAC_EMU
	emu_ldmatrix_x4(r, row, TRANS);
#else
	const unsigned s = (unsigned)__cvta_generic_to_shared(row);
	if constexpr (TRANS)
		asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
			     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
			     : "r"(s));
	else
		asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
			     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
			     : "r"(s));
#endif
}

__device__ __forceinline__ void tc_ldsm_x4(uint32_t r[4], const void *row)
{
	tc_ldsm<false>(r, row);
}

__device__ __forceinline__ void tc_ldsm_x4_trans(uint32_t r[4], const void *row)
{
	tc_ldsm<true>(r, row);
}

/* cp.async: BYTES (16, or 4) from global to shared memory without passing
 * through registers, completing later (16: .cg, cached in L2 only); src_bytes
 * 0 fills them with zeros and reads nothing. Copies are grouped by commit;
 * wait<N> returns when all but the N most recent groups have landed (in
 * this thread: a barrier then shows them to the others). */
template <int BYTES> __device__ __forceinline__ void tc_cp_async(void *smem, const void *gmem, int src_bytes)
{
	static_assert(BYTES == 4 || BYTES == 16, "cp.async of 4 (.ca) or 16 (.cg) bytes");
#ifdef MEGAC_EMU
	emu_cp_async(smem, gmem, BYTES, src_bytes);
#else
	const unsigned s = (unsigned)__cvta_generic_to_shared(smem);
	const size_t g = __cvta_generic_to_global(gmem);
	if constexpr (BYTES == 16)
		asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(g), "r"(src_bytes) : "memory");
	else /* .ca: cached in L1 too; .cg takes 16 bytes only */
		asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(s), "l"(g), "r"(src_bytes) : "memory");
#endif
}

__device__ __forceinline__ void tc_cp_async_commit(void)
{
#ifdef MEGAC_EMU
	emu_cp_async_commit();
#else
	asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

template <int N> __device__ __forceinline__ void tc_cp_async_wait(void)
{
#ifdef MEGAC_EMU
	emu_cp_async_wait(N);
#else
	asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
#endif
}

__device__ __forceinline__ float tc_shfl_xor(float v, int lanemask)
{
#ifdef MEGAC_EMU
	return emu_shfl_xor(v, lanemask);
#else
	return __shfl_xor_sync(0xffffffffu, v, lanemask);
#endif
}

#endif
