/*
 * device.h - which compute device this process uses. The CUDA backend of
 * the op table (lib/kernels/cuda/, compiled only when nvcc exists) fills
 * this in; without it, or without a GPU and driver, the answer is "none"
 * and everything runs on the CPU backend.
 *
 * One process per GPU, as Megatron: a process takes GPU (local rank mod
 * visible GPUs). The local rank is --local-rank when given, else the
 * launcher's (LOCAL_RANK from torchrun, OMPI_COMM_WORLD_LOCAL_RANK from
 * Open MPI, SLURM_LOCALID from srun, MPI_LOCALRANKID from MPICH), else 0.
 * With CUDA_VISIBLE_DEVICES narrowed to one GPU per task (srun
 * --gpus-per-task=1) every process sees one GPU and takes it.
 */
#ifndef MEGAC_KERNELS_DEVICE_H
#define MEGAC_KERNELS_DEVICE_H

#include <stdbool.h>
#include <stddef.h>

#include "kernels/ops.h"

/* True when this build contains the CUDA backend. */
bool device_cuda_built(void);
/* Usable CUDA devices: 0 without the backend, without a driver, or without a GPU. */
int device_cuda_count(void);
/* A one-line description for logs: "CPU (no CUDA in this build)", "CUDA: 1 device(s)", ... */
const char *device_describe(char *buf, int len);

/* This process's rank among those on its node (see above); flag < 0: not given. */
int device_local_rank(int flag);

enum device_precision { DEVICE_FP32, DEVICE_BF16, DEVICE_FP16 };

struct device_choice {
	const struct kops *k; /* the op table to compute with */
	int cuda_device;      /* the GPU taken, -1 on the CPU */
	char what[256];       /* for the log: "CUDA device 0 (NVIDIA H200, 139.8 GiB) ..." */
};

/* Choose for want = "auto" (a GPU when one is usable, else the CPU), "cpu"
 * or "cuda" (an error without a usable GPU, saying why). On a GPU the
 * device is made current and, for bf16/fp16 models, the table whose GEMMs
 * take half-precision inputs is used. error() and -1 on failure. */
int device_choose(struct device_choice *d, const char *want, int local_rank, enum device_precision prec);

/* The largest converted operand, in bytes, that a CUDA half table's GEMM
 * puts in its scratch buffer at once: larger ones are converted and
 * multiplied in pieces (lib/kernels/cuda/gemm.cu), and report_memory's
 * model of that buffer uses the same limit. 256 MiB, or
 * MEGAC_CUDA_GEMM_PIECE (bytes, at least 256) from the environment, which
 * the tests set small so that small shapes take the pieces' path. */
size_t device_gemm_piece_bytes(void);

#endif
