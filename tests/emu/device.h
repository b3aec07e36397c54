/*
 * device.h - what the emulated device's stand-ins share inside the emulated
 * build: runtime.cc (the CUDA runtime: memory, streams, events, launches)
 * offers its stream queues and memory checks to cublaslt.cc (the cuBLASLt
 * stand-in) and nccl.cc (the NCCL stand-in over MPI).
 *
 * Streams are ordered queues of items. An item's step() is called when the
 * item is at the head of its stream and returns true once the item has
 * completed (a kernel or a copy completes in its first step; an NCCL
 * operation may take many, polling MPI). The engine steps every stream's
 * head as far as it goes whenever the host calls into the runtime, and
 * whenever the host waits for something (a synchronising call) it keeps
 * stepping until that is done, or reports a deadlock after
 * MEGAC_EMU_TIMEOUT seconds (60) without progress, listing what every
 * stream waits for.
 */
#ifndef MEGAC_TESTS_EMU_DEVICE_H
#define MEGAC_TESTS_EMU_DEVICE_H

#include <cuda_runtime.h>

#include <functional>
#include <string>

namespace emu {

enum item_kind { ITEM_COMPUTE, ITEM_COPY, ITEM_WAIT, ITEM_COMM };

/* Queues an item on stream s (NULL, cudaStreamLegacy: the legacy default
 * stream). what names it in deadlock reports; it is called then, so it may
 * describe the item's state. */
void enqueue(cudaStream_t s, item_kind kind, std::function<bool()> step, std::function<std::string()> what);
/* Steps every stream as far as it goes without waiting. */
void progress(void);
/* Steps until done() holds; a deadlock report names `waiter` (what the host waits for). */
void wait_until(const std::function<bool()> &done, const char *waiter);
/* Everything queued on every stream done (cudaDeviceSynchronize). */
void sync_all(const char *waiter);

/* Whether [p, p + bytes) lies inside one device allocation (its device in *dev). */
bool device_range(const void *p, size_t bytes, int *dev);
/* Dies with a message naming who and what when [p, p + bytes) is not inside one device allocation. */
void need_device_range(const void *p, size_t bytes, const char *who, const char *what);
int current_device(void);
/* a monotonic clock in seconds; MEGAC_EMU_TIMEOUT (60 s): how long a wait
 * may go without progress before it is reported as a deadlock */
double now(void);
double timeout(void);
/* MPI initialised and not finalised; *world: MPI_COMM_WORLD's size and
 * *rank this process's, when it is */
bool mpi_running(int *world, int *rank);
/* The emulator's own errors: what a real device would report as a fault or a
 * hang, said plainly; exits with status 134 (as abort()). */
[[noreturn]] void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* nccl.cc: operations queued and not completed (lazy module loading needs a
 * context synchronisation, which would wait for them). */
int comm_in_flight(void);

} // namespace emu

#endif
