/*
 * device.c - see device.h. The CUDA half lives in cuda/probe.cu; this file
 * is the C side that every build has.
 */
#include "device.h"
#include "kernels/cuda_ops.h"

#include <stdio.h>

#ifdef MEGAC_CUDA
int cuda_probe_device_count(int *err); /* cuda/probe.cu */
#endif

bool device_cuda_built(void)
{
#ifdef MEGAC_CUDA
	return true;
#else
	return false;
#endif
}

int device_cuda_count(void)
{
#ifdef MEGAC_CUDA
	int err = 0;
	int n = cuda_probe_device_count(&err);
	/* Any error (35 = no driver, 100 = no device) means "no GPU here". */
	return err ? 0 : n;
#else
	return 0;
#endif
}

const char *device_describe(char *buf, int len)
{
	if (!device_cuda_built())
		snprintf(buf, (size_t)len, "CPU (this build has no CUDA backend)");
	else {
		int n = device_cuda_count();
		if (n > 0)
			snprintf(buf, (size_t)len, "CUDA: %d device(s)", n);
		else
			snprintf(buf, (size_t)len, "CPU (CUDA backend built, no usable GPU)");
	}
	return buf;
}

#ifndef MEGAC_CUDA
const struct kops *kops_cuda(const char **why)
{
	if (why)
		*why = "this build has no CUDA backend (nvcc was not found)";
	return NULL;
}
#endif
