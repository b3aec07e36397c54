/*
 * cuda_runtime.h - the emulated device's stand-in for the CUDA runtime API
 * (tests/emu/runtime.cc), used only by the emulated build (make emu): the
 * part of the API that megac's CUDA backend and lib/dist's NCCL path call,
 * with the real names, types, values and documented semantics, so that
 * lib/kernels/cuda/ and lib/dist/nccl.c compile unchanged against it. Plain
 * C for the C files; C++ adds the device side (emu.h) and the templates the
 * real header has (cudaFuncSetAttribute on a kernel).
 *
 * The device: an H200 (sm_90, 132 SMs, 227 KB of shared memory per block
 * with the opt-in), MEGAC_EMU_DEVICES of them (8; 0 gives "no CUDA device").
 * Its memory is host memory, tracked allocation by allocation so that every
 * pointer a kernel, a copy or a library call gets is checked to lie in one.
 * Streams are ordered queues and events points in them (runtime.cc).
 */
#ifndef MEGAC_EMU_CUDA_RUNTIME_H
#define MEGAC_EMU_CUDA_RUNTIME_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
#include "emu.h"
extern "C" {
#endif

typedef enum cudaError {
	cudaSuccess = 0,
	cudaErrorInvalidValue = 1,
	cudaErrorMemoryAllocation = 2,
	cudaErrorInitializationError = 3,
	cudaErrorInvalidConfiguration = 9,
	cudaErrorInvalidPitchValue = 12,
	cudaErrorInvalidMemcpyDirection = 21,
	cudaErrorInsufficientDriver = 35,
	cudaErrorNoDevice = 100,
	cudaErrorInvalidDevice = 101,
	cudaErrorInvalidResourceHandle = 400,
	cudaErrorNotReady = 600,
	cudaErrorIllegalAddress = 700,
	cudaErrorLaunchFailure = 719,
	cudaErrorUnknown = 999
} cudaError_t;

typedef struct emu_stream *cudaStream_t;
typedef struct emu_event *cudaEvent_t;
#define cudaStreamLegacy ((cudaStream_t)0x1)
#define cudaStreamPerThread ((cudaStream_t)0x2)
#define cudaStreamDefault 0x00
#define cudaStreamNonBlocking 0x01
#define cudaEventDefault 0x00
#define cudaEventBlockingSync 0x01
#define cudaEventDisableTiming 0x02

enum cudaMemcpyKind {
	cudaMemcpyHostToHost = 0,
	cudaMemcpyHostToDevice = 1,
	cudaMemcpyDeviceToHost = 2,
	cudaMemcpyDeviceToDevice = 3,
	cudaMemcpyDefault = 4
};

enum cudaMemoryType {
	cudaMemoryTypeUnregistered = 0,
	cudaMemoryTypeHost = 1,
	cudaMemoryTypeDevice = 2,
	cudaMemoryTypeManaged = 3
};

struct cudaPointerAttributes {
	enum cudaMemoryType type;
	int device;
	void *devicePointer;
	void *hostPointer;
};

enum cudaDeviceAttr {
	cudaDevAttrMaxThreadsPerBlock = 1,
	cudaDevAttrMaxSharedMemoryPerBlock = 8,
	cudaDevAttrWarpSize = 10,
	cudaDevAttrMultiProcessorCount = 16,
	cudaDevAttrL2CacheSize = 38,
	cudaDevAttrComputeCapabilityMajor = 75,
	cudaDevAttrComputeCapabilityMinor = 76,
	cudaDevAttrMaxSharedMemoryPerBlockOptin = 97
};

enum cudaFuncAttribute {
	cudaFuncAttributeMaxDynamicSharedMemorySize = 8,
	cudaFuncAttributePreferredSharedMemoryCarveout = 9
};

struct cudaFuncAttributes {
	size_t sharedSizeBytes, constSizeBytes, localSizeBytes;
	int maxThreadsPerBlock, numRegs, ptxVersion, binaryVersion, cacheModeCA;
	int maxDynamicSharedSizeBytes, preferredShmemCarveout;
};

typedef struct cudaDeviceProp {
	char name[256];
	size_t totalGlobalMem, sharedMemPerBlock;
	int regsPerBlock, warpSize;
	int maxThreadsPerBlock, maxThreadsDim[3], maxGridSize[3];
	int clockRate, major, minor, multiProcessorCount;
	size_t sharedMemPerBlockOptin, sharedMemPerMultiprocessor;
	int l2CacheSize, memoryClockRate, memoryBusWidth;
} cudaDeviceProp;

const char *cudaGetErrorString(cudaError_t e);
const char *cudaGetErrorName(cudaError_t e);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);

cudaError_t cudaGetDeviceCount(int *n);
cudaError_t cudaSetDevice(int dev);
cudaError_t cudaGetDevice(int *dev);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev);
cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr attr, int dev);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest);
cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes);

cudaError_t cudaMalloc(void **p, size_t bytes);
cudaError_t cudaFree(void *p);
cudaError_t cudaMallocHost(void **p, size_t bytes);
cudaError_t cudaFreeHost(void *p);
cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p);
cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind);
cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t height,
			 enum cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, cudaStream_t s);
cudaError_t cudaMemset(void *p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s);

cudaError_t cudaStreamCreate(cudaStream_t *s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags);
cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int priority);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamQuery(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags);
cudaError_t cudaEventCreate(cudaEvent_t *e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s);
cudaError_t cudaEventQuery(cudaEvent_t e);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end);

/* by kernel address (the real runtime's C entry points) */
cudaError_t emu_func_set_attribute(const void *kernel, enum cudaFuncAttribute attr, int value);
cudaError_t emu_func_get_attributes(struct cudaFuncAttributes *a, const void *kernel);

#ifdef __cplusplus
}

template <class T> static inline cudaError_t cudaFuncSetAttribute(T *kernel, enum cudaFuncAttribute attr, int value)
{
	return emu_func_set_attribute((const void *)kernel, attr, value);
}
template <class T> static inline cudaError_t cudaFuncGetAttributes(struct cudaFuncAttributes *a, T *kernel)
{
	return emu_func_get_attributes(a, (const void *)kernel);
}

/* ---- kernel launches (common.cuh's launch<K>(...) under MEGAC_EMU) ---- */

/* One pointer argument of a launch: which, and where it points. */
struct emu_arg_ptr {
	int index;
	const void *p;
};

/* Queues body on stream s as the kernel `kernel` (its address; name for
 * messages) with this configuration, after checking it as the runtime
 * does (a bad configuration sets the launch error that cudaGetLastError
 * returns) and checking that every pointer argument is NULL or points into
 * device memory. */
void emu_kernel_launch(const void *kernel, const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
		       const emu_arg_ptr *ptrs, int nptrs, std::function<void()> body);

template <class T> static inline void emu_collect_ptr(emu_arg_ptr *out, int *n, int index, const T &v)
{
	if constexpr (std::is_pointer<T>::value)
		out[(*n)++] = emu_arg_ptr{ index, (const void *)v };
}

/* the kernel's name, cut out of a function signature that names it as its
 * template argument ("... [with auto K = attn_fwd_kernel<64>]") */
const char *emu_name_of_signature(const char *pretty);
template <auto K> static inline const char *emu_kernel_name(void)
{
	static const char *name = emu_name_of_signature(__PRETTY_FUNCTION__);
	return name;
}

template <auto K, class... A> static inline void emu_launch_kernel(dim3 grid, dim3 block, size_t smem, cudaStream_t s,
								    A... args)
{
	emu_arg_ptr ptrs[sizeof...(A) + 1];
	int n = 0, i = 0;
	(emu_collect_ptr(ptrs, &n, i++, args), ...);
	emu_kernel_launch((const void *)K, emu_kernel_name<K>(), grid, block, smem, s, ptrs, n,
			  [=]() { K(args...); });
}
#endif

#endif
