/*
 * device.c - see device.h. The CUDA half lives in cuda/probe.cu; this file
 * is the C side that every build has.
 */
#include "device.h"
#include "kernels/cuda_ops.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

#ifdef MEGAC_CUDA
int cuda_probe_device_count(int *err); /* cuda/probe.cu */
int cuda_probe_select(int dev, char *name, int name_len, size_t *total_mem, const char **why);
#endif

size_t device_gemm_piece_bytes(void)
{
	const char *e = getenv("MEGAC_CUDA_GEMM_PIECE");
	if (e && *e) {
		char *end;
		unsigned long long v = strtoull(e, &end, 10);
		if (*end || v < 256)
			die("MEGAC_CUDA_GEMM_PIECE='%s': expected a number of bytes, at least 256", e);
		return (size_t)v;
	}
	return (size_t)256 << 20;
}

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

int device_local_rank(int flag)
{
	static const char *const vars[] = { "LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID",
					    "MPI_LOCALRANKID" };
	if (flag >= 0)
		return flag;
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
		const char *v = getenv(vars[i]);
		char *end;
		if (!v || !*v)
			continue;
		long r = strtol(v, &end, 10);
		if (!*end && r >= 0 && r < (1L << 20))
			return (int)r;
	}
	return 0;
}

static void choose_cpu(struct device_choice *d, const char *why)
{
	d->k = kops_cpu();
	d->cuda_device = -1;
	snprintf(d->what, sizeof(d->what), "the CPU (%s)", why);
}

int device_choose(struct device_choice *d, const char *want, int local_rank, enum device_precision prec)
{
	memset(d, 0, sizeof(*d));
	if (!want || !*want)
		want = "auto";
	if (strcmp(want, "auto") && strcmp(want, "cpu") && strcmp(want, "cuda"))
		return error("--device %s: expected auto, cpu or cuda", want);
	if (!strcmp(want, "cpu")) {
		choose_cpu(d, "--device cpu");
		return 0;
	}
#ifdef MEGAC_CUDA
	int err = 0, n = cuda_probe_device_count(&err);
	if (err || n <= 0) {
		const char *why = NULL;
		kops_cuda(&why); /* the runtime's words for it */
		if (!strcmp(want, "cuda"))
			return error("--device cuda: no usable GPU (%s)", why ? why : "no CUDA device is visible");
		choose_cpu(d, "no usable GPU");
		return 0;
	}
	int dev = local_rank % n;
	char name[128];
	size_t mem = 0;
	const char *why = NULL;
	if (cuda_probe_select(dev, name, (int)sizeof(name), &mem, &why) < 0) {
		if (!strcmp(want, "cuda"))
			return error("GPU %d (local rank %d of %d visible GPUs) cannot be used: %s", dev, local_rank, n,
				     why);
		warning("GPU %d (local rank %d) cannot be used (%s): computing on the CPU", dev, local_rank, why);
		choose_cpu(d, "the GPU cannot be used");
		return 0;
	}
	const struct kops *k = NULL;
	if (prec == DEVICE_FP32)
		k = kops_cuda(&why);
	else
		k = kops_cuda_half(prec == DEVICE_BF16 ? KOPS_ROUND_BF16 : KOPS_ROUND_FP16, &why);
	if (!k && !strcmp(want, "cuda"))
		return error("the CUDA backend cannot run on GPU %d: %s", dev, why ? why : "unknown reason");
	if (!k) {
		warning("the CUDA backend cannot run on GPU %d (%s): computing on the CPU", dev, why ? why : "?");
		choose_cpu(d, "the CUDA backend cannot run on this GPU");
		return 0;
	}
	d->k = k;
	d->cuda_device = dev;
	snprintf(d->what, sizeof(d->what), "CUDA device %d of %d (%s, %.1f GiB; local rank %d), op table %s", dev,
		 n, name, (double)mem / (1u << 30), local_rank, k->name);
	return 0;
#else
	(void)local_rank;
	(void)prec;
	if (!strcmp(want, "cuda"))
		return error("--device cuda: this build has no CUDA backend (nvcc was not found when it was built)");
	choose_cpu(d, "this build has no CUDA backend");
	return 0;
#endif
}

#ifndef MEGAC_CUDA
const struct kops *kops_cuda(const char **why)
{
	if (why)
		*why = "this build has no CUDA backend (nvcc was not found)";
	return NULL;
}

const struct kops *kops_cuda_half(enum kops_round kind, const char **why)
{
	(void)kind;
	return kops_cuda(why);
}

void kops_cuda_get_stats(struct kops_cuda_stats *st)
{
	memset(st, 0, sizeof(*st));
}
#endif
