/*
 * probe.cu - the first file of the CUDA backend: asks the runtime how many
 * devices this process can use. Kept so that every build on a machine with
 * nvcc compiles and links CUDA code, and CI notices when that breaks.
 */
#include <cuda_runtime.h>

extern "C" int cuda_probe_device_count(int *err)
{
	int n = 0;
	cudaError_t e = cudaGetDeviceCount(&n);
	*err = (int)e;
	if (e != cudaSuccess) {
		cudaGetLastError(); /* clear the sticky error for later callers */
		return 0;
	}
	return n;
}
