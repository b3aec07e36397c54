/*
 * probe.cu - what the CUDA runtime says about this machine's devices, and
 * the choice of one for this process (device.c is the C side every build
 * has). Any runtime error means "no GPU here": a machine without a driver
 * answers 35, one without a device 100.
 */
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>

/* Before the process's first CUDA call: every kernel loaded when the
 * context is made (CUDA_MODULE_LOADING=EAGER) instead of at its first
 * launch. Lazy loading (CUDA's default) can need a context synchronisation
 * at a kernel's first launch, which waits for every kernel on the device,
 * an NCCL receive spinning until its peer sends among them: with a
 * pipeline or context-parallel transfer in flight during the first
 * iteration, a hang. A value the user set is kept. */
extern "C" void cuda_prepare_runtime(void)
{
	setenv("CUDA_MODULE_LOADING", "EAGER", 0);
}

extern "C" int cuda_probe_device_count(int *err)
{
	cuda_prepare_runtime();
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	*err = (int)e;
	if (e != cudaSuccess) {
		cudaGetLastError(); /* clear the sticky error for later callers */
		return 0;
	}
	return n;
}

/* Make device dev current for this process's host thread; its name and
 * memory for the log. 0, or -1 with the runtime's reason in why. */
extern "C" int cuda_probe_select(int dev, char *name, int name_len, size_t *total_mem, const char **why)
{
	cudaError_t e = cudaSetDevice(dev);
	cudaDeviceProp prop;
	if (e == cudaSuccess)
		e = cudaGetDeviceProperties(&prop, dev);
	if (e == cudaSuccess)
		e = cudaFree(0); /* create the context now, so a broken device fails here */
	if (e != cudaSuccess) {
		cudaGetLastError();
		*why = cudaGetErrorString(e);
		return -1;
	}
	snprintf(name, (size_t)name_len, "%s", prop.name);
	*total_mem = prop.totalGlobalMem;
	return 0;
}
