/*
 * device.h - which compute devices this process can use. The CUDA backend
 * of the op table (lib/kernels/cuda/, compiled only when nvcc exists) fills
 * this in; without it, or without a GPU and driver, the answer is "none" and
 * everything runs on the CPU backend.
 */
#ifndef MEGAC_KERNELS_DEVICE_H
#define MEGAC_KERNELS_DEVICE_H

#include <stdbool.h>

/* True when this build contains the CUDA backend. */
bool device_cuda_built(void);
/* Usable CUDA devices: 0 without the backend, without a driver, or without a GPU. */
int device_cuda_count(void);
/* A one-line description for logs: "CPU (no CUDA in this build)", "CUDA: 1 device(s)", ... */
const char *device_describe(char *buf, int len);

#endif
