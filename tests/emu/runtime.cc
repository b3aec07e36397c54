/*
 * runtime.cc - the emulated device's CUDA runtime (cuda/cuda_runtime.h):
 * devices, memory, copies, streams, events and kernel launches, with the
 * semantics the CUDA programming guide and runtime API documentation give
 * them, and checks a real device makes only by faulting (or not at all).
 *
 * Memory. Device memory is host memory from aligned_alloc (256-byte
 * aligned, as cudaMalloc), filled with 0xff bytes (NaN in every float
 * format) so a kernel that reads what nobody wrote poisons its result; every
 * allocation is in a table, and every copy, memset, library call and kernel
 * pointer argument is checked against it: a device range must lie inside
 * one allocation, a host range of a copy must not be device memory, a
 * kernel's pointer arguments must be device (or page-locked host) memory.
 *
 * Streams and events (device.h): ordered queues; the legacy default stream
 * synchronises with the blocking streams as CUDA's legacy stream does
 * (non-blocking streams, which lib/dist's NCCL path uses, do not); an
 * event is a point in one stream, complete once the stream has passed it.
 * Kernels and copies complete in their first step, so a stream with
 * nothing to wait for runs its work as soon as it is queued; work behind a
 * wait (an event of another stream, an NCCL operation) waits. Synchronising
 * calls (cudaMemcpy, cudaStreamSynchronize, cudaEventSynchronize,
 * cudaDeviceSynchronize, cudaFree) step the queues until their condition
 * holds; cudaEventQuery and every other call step them once.
 * MEGAC_EMU_DEFER=1 is the other extreme: work runs only when the host
 * waits or polls (a synchronising call, cudaEventQuery, cudaStreamQuery),
 * the streams made last first, so a missing wait between streams, or a
 * host that reads what it has not waited for, shows.
 *
 * Checks modelled on what a real machine does to a program:
 *  - a CUDA-aware MPI (as clusters have) opens a context on GPU 0 inside
 *    MPI_Init; a rank that chooses another GPU after MPI_Init therefore
 *    holds two contexts: cudaSetDevice(d > 0) after MPI_Init in a job of
 *    several ranks is an error here (MEGAC_EMU_CUDA_AWARE_MPI=0 turns it off);
 *  - lazy module loading (CUDA's default, CUDA_MODULE_LOADING=LAZY): the
 *    first launch of a kernel loads it, which can need a context
 *    synchronisation; if an NCCL operation is in flight then (waiting for a
 *    peer), that can hang: an error here, unless CUDA_MODULE_LOADING=EAGER
 *    or the kernel was loaded before (cudaFuncGetAttributes,
 *    cudaFuncSetAttribute).
 *
 * The machine: MEGAC_EMU_DEVICES H200s (default 8; 0: no device, as a
 * machine without a GPU answers), MEGAC_EMU_SM (90; 80 for an A100-like
 * device without wgmma). Kernels run in the thread-block emulator (emu.cc)
 * with MEGAC_EMU_ORDER (0..3, emu.h) as their thread order; MEGAC_EMU_STATS=1
 * lists at exit how often each kernel was launched.
 */
#include "device.h"

#include <mpi.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

struct emu_stream {
	int id;
	bool legacy, blocking;
	unsigned flags;
	int priority;
	uint64_t enq, done; /* items queued and completed so far */
	struct item {
		emu::item_kind kind;
		std::function<bool()> step;
		std::function<std::string()> what;
	};
	std::deque<item> q;
	bool destroyed;
};

struct emu_event {
	emu_stream *s; /* NULL: never recorded (complete) */
	uint64_t seq;  /* complete once s->done >= seq */
	unsigned flags;
	double t; /* wall clock when found complete (cudaEventElapsedTime) */
};

namespace {

std::recursive_mutex big_lock; /* every API call: the runtime is one device driven by one host thread at a time */

struct alloc_info {
	size_t bytes;
	int device;
	bool pinned; /* cudaMallocHost: page-locked host memory */
};
std::map<uintptr_t, alloc_info> allocs;

struct state {
	bool init;
	int ndev, sm;
	int dev;             /* current device */
	bool dev_chosen;     /* cudaSetDevice called */
	bool eager;          /* CUDA_MODULE_LOADING=EAGER */
	bool cuda_aware_mpi; /* the check above */
	int order;           /* MEGAC_EMU_ORDER */
	double timeout;      /* MEGAC_EMU_TIMEOUT */
	cudaError_t last;    /* cudaGetLastError */
	size_t used[64];
	std::vector<emu_stream *> streams; /* [0]: the legacy stream */
	std::set<const void *> loaded;     /* kernels loaded (lazy loading) */
	std::map<const void *, int> smem_attr;
	std::map<std::string, long> launches; /* MEGAC_EMU_STATS: launches per kernel */
	bool stats;
	bool defer;   /* MEGAC_EMU_DEFER: work waits for the host to wait or poll */
	int polling;  /* inside a synchronising call or a query */
	int in_progress;
};
state S;

/* MEGAC_EMU_STATS=1: at exit, each kernel's launches (which kernels a run took) */
void print_stats(void)
{
	for (const auto &k : S.launches)
		fprintf(stderr, "emu: launched %8ld x %s\n", k.second, k.first.c_str());
}

const size_t H200_MEM = (size_t)143771 << 20; /* nvidia-smi's MiB of an H200 */
const int SMEM_OPTIN = 232448;               /* 227 KB: Hopper's shared memory per block with the opt-in */

using emu::now;

int env_int(const char *name, int dflt)
{
	const char *v = getenv(name);
	return v && *v ? atoi(v) : dflt;
}

emu_stream *new_stream(bool legacy, unsigned flags, int priority)
{
	emu_stream *s = new emu_stream();
	s->id = (int)S.streams.size();
	s->legacy = legacy;
	s->flags = flags;
	s->blocking = !legacy && !(flags & cudaStreamNonBlocking);
	s->priority = priority;
	S.streams.push_back(s);
	return s;
}

void init(void)
{
	if (S.init)
		return;
	S.init = true;
	S.ndev = env_int("MEGAC_EMU_DEVICES", 8);
	if (S.ndev > 64)
		S.ndev = 64;
	S.sm = env_int("MEGAC_EMU_SM", 90);
	emu_sm = S.sm;
	S.order = env_int("MEGAC_EMU_ORDER", 0) & 3;
	S.timeout = emu::timeout();
	S.cuda_aware_mpi = env_int("MEGAC_EMU_CUDA_AWARE_MPI", 1) != 0;
	const char *ml = getenv("CUDA_MODULE_LOADING");
	S.eager = ml && !strcmp(ml, "EAGER");
	S.stats = env_int("MEGAC_EMU_STATS", 0) != 0;
	S.defer = env_int("MEGAC_EMU_DEFER", 0) != 0;
	if (S.stats)
		atexit(print_stats);
	new_stream(true, 0, 0);
}

emu_stream *stream_of(cudaStream_t s)
{
	init();
	if (s == NULL || s == cudaStreamLegacy || s == cudaStreamPerThread)
		return S.streams[0];
	for (emu_stream *x : S.streams)
		if (x == s && !x->destroyed)
			return x;
	emu::fatal("a stream handle %p that is not a live stream (destroyed, or never created)", (void *)s);
}

cudaError_t err(cudaError_t e)
{
	if (e != cudaSuccess)
		S.last = e;
	return e;
}

/* the allocation holding p (device or page-locked), or NULL */
const std::pair<const uintptr_t, alloc_info> *find(const void *p)
{
	const uintptr_t a = (uintptr_t)p;
	auto it = allocs.upper_bound(a);
	if (it == allocs.begin())
		return NULL;
	--it;
	if (a >= it->first && a < it->first + (it->second.bytes ? it->second.bytes : 1))
		return &*it;
	return NULL;
}

bool is_device(const void *p)
{
	const auto *f = find(p);
	return f && !f->second.pinned;
}

bool pending_any(void)
{
	for (emu_stream *s : S.streams)
		if (!s->q.empty())
			return true;
	return false;
}

/* One sweep: every stream's head as far as it goes. */
bool sweep(void)
{
	bool any = false;
	const size_t n = S.streams.size();
	for (size_t x = 0; x < n; x++) {
		/* deferred: the streams made last first, so work that lacks its
		 * wait for the legacy stream's runs before what it depends on */
		emu_stream *s = S.streams[S.defer ? n - 1 - x : x];
		while (!s->q.empty()) {
			emu_stream::item &it = s->q.front();
			if (!it.step())
				break;
			s->q.pop_front();
			s->done++;
			any = true;
		}
	}
	return any;
}

void report_pending(void)
{
	for (emu_stream *s : S.streams) {
		if (s->q.empty())
			continue;
		fprintf(stderr, "emu:   stream %d%s: %zu item(s) queued; the first: %s\n", s->id,
			s->legacy ? " (legacy default)" : "", s->q.size(), s->q.front().what().c_str());
	}
}

/* a copy's pointers against the allocation table; 0 or an error (said) */
cudaError_t check_copy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind, const char *who)
{
	const bool dd = is_device(dst), sd = is_device(src);
	const char *want = NULL;
	switch (kind) {
	case cudaMemcpyHostToHost:
		if (dd || sd)
			want = "host memory on both sides";
		break;
	case cudaMemcpyHostToDevice:
		if (!dd || sd)
			want = "device memory at dst and host memory at src";
		break;
	case cudaMemcpyDeviceToHost:
		if (dd || !sd)
			want = "host memory at dst and device memory at src";
		break;
	case cudaMemcpyDeviceToDevice:
		if (!dd || !sd)
			want = "device memory on both sides";
		break;
	case cudaMemcpyDefault:
		break;
	default:
		fprintf(stderr, "emu: %s: unknown copy kind %d\n", who, (int)kind);
		return err(cudaErrorInvalidMemcpyDirection);
	}
	if (want) {
		fprintf(stderr, "emu: %s of %zu bytes, kind %d, wants %s; dst %p is %s, src %p is %s\n", who, bytes,
			(int)kind, want, dst, dd ? "device memory" : "host memory", src, sd ? "device memory" : "host memory");
		return err(cudaErrorInvalidValue);
	}
	if (dd)
		emu::need_device_range(dst, bytes, who, "its destination");
	if (sd)
		emu::need_device_range(src, bytes, who, "its source");
	return cudaSuccess;
}

} // namespace

/* ---- device.h ---- */

namespace emu {

void fatal(const char *fmt, ...)
{
	va_list ap;
	char buf[1024];
	va_start(ap, fmt);
	vsnprintf(buf, sizeof buf, fmt, ap);
	va_end(ap);
	int world, rank = -1;
	if (!mpi_running(&world, &rank))
		rank = -1;
	if (rank >= 0)
		fprintf(stderr, "emu: rank %d: the emulated device: %s\n", rank, buf);
	else
		fprintf(stderr, "emu: the emulated device: %s\n", buf);
	fflush(stderr);
	abort();
}

void enqueue(cudaStream_t h, item_kind kind, std::function<bool()> step, std::function<std::string()> what)
{
	std::lock_guard<std::recursive_mutex> g(big_lock);
	emu_stream *s = stream_of(h);
	/* the legacy stream's implicit synchronisation with blocking streams */
	std::vector<std::pair<emu_stream *, uint64_t>> deps;
	if (s->legacy) {
		for (emu_stream *x : S.streams)
			if (x->blocking && !x->destroyed && x->done < x->enq)
				deps.push_back({ x, x->enq });
	} else if (s->blocking) {
		emu_stream *l = S.streams[0];
		if (l->done < l->enq)
			deps.push_back({ l, l->enq });
	}
	for (auto &d : deps) {
		emu_stream *x = d.first;
		const uint64_t seq = d.second;
		s->q.push_back(emu_stream::item{ ITEM_WAIT, [x, seq] { return x->done >= seq; },
						 [x, seq] {
							 return "the implicit wait of the legacy stream for stream " +
								std::to_string(x->id) + " (item " + std::to_string(seq) +
								")";
						 } });
		s->enq++;
	}
	if (s->q.empty() && !S.in_progress && !S.defer) { /* nothing ahead of it: the common case, run now */
		s->enq++;
		if (step()) {
			s->done++;
			return;
		}
		s->q.push_back(emu_stream::item{ kind, std::move(step), std::move(what) });
		return;
	}
	s->q.push_back(emu_stream::item{ kind, std::move(step), std::move(what) });
	s->enq++;
	progress();
}

/* a call that waits or polls: under MEGAC_EMU_DEFER the only place work runs */
struct polling {
	polling() { S.polling++; }
	~polling() { S.polling--; }
};

void progress(void)
{
	std::lock_guard<std::recursive_mutex> g(big_lock);
	if (S.in_progress || !pending_any() || (S.defer && !S.polling))
		return;
	S.in_progress++;
	while (sweep()) {
	}
	S.in_progress--;
}

/* items completed on every stream so far: progress, for the deadlock clock */
uint64_t completed_total(void)
{
	uint64_t n = 0;
	for (emu_stream *s : S.streams)
		n += s->done;
	return n;
}

void wait_until(const std::function<bool()> &done, const char *waiter)
{
	std::lock_guard<std::recursive_mutex> g(big_lock);
	polling p;
	double since = now(); /* the last progress */
	uint64_t seen = completed_total();
	for (long spins = 0;; spins++) {
		progress();
		if (done())
			return;
		if (S.in_progress)
			fatal("%s: a wait inside a queued item (the emulator's own error)", waiter);
		const double t = now();
		const uint64_t c = completed_total();
		if (c != seen) {
			seen = c;
			since = t;
		}
		if (t - since > S.timeout) {
			fprintf(stderr, "emu: %s has waited %.0f s without the device finishing anything:\n", waiter,
				t - since);
			report_pending();
			fatal("a deadlock: %s waits for work that waits for something that never comes (an NCCL "
			      "peer that has not posted its side, or a cycle of waits); MEGAC_EMU_TIMEOUT sets the "
			      "seconds",
			      waiter);
		}
		if (spins > 1000)
			usleep(t - since > 0.5 ? 200 : 20); /* yield the CPU to the other ranks */
	}
}

void sync_all(const char *waiter)
{
	wait_until([] { return !pending_any(); }, waiter);
}

bool device_range(const void *p, size_t bytes, int *dev)
{
	std::lock_guard<std::recursive_mutex> g(big_lock);
	const auto *f = find(p);
	if (!f || f->second.pinned)
		return false;
	if ((uintptr_t)p + bytes > f->first + f->second.bytes)
		return false;
	if (dev)
		*dev = f->second.device;
	return true;
}

void need_device_range(const void *p, size_t bytes, const char *who, const char *what)
{
	std::lock_guard<std::recursive_mutex> g(big_lock);
	if (device_range(p, bytes, NULL))
		return;
	const auto *f = find(p);
	if (f && !f->second.pinned)
		fatal("%s: %s, %zu bytes at %p, runs %zu bytes past the end of its device allocation (%zu bytes at "
		      "%p)",
		      who, what, bytes, p, (size_t)((uintptr_t)p + bytes - f->first - f->second.bytes), f->second.bytes,
		      (void *)f->first);
	fatal("%s: %s (%p, %zu bytes) is not device memory%s", who, what, p, bytes,
	      f ? " (it is page-locked host memory)" : "");
}

int current_device(void)
{
	init();
	return S.dev;
}

double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double timeout(void)
{
	const char *v = getenv("MEGAC_EMU_TIMEOUT");
	return v && *v ? atof(v) : 60.0;
}

bool mpi_running(int *world, int *rank)
{
	int inited = 0, fin = 0;
	MPI_Initialized(&inited);
	if (inited)
		MPI_Finalized(&fin);
	if (!inited || fin)
		return false;
	MPI_Comm_size(MPI_COMM_WORLD, world);
	MPI_Comm_rank(MPI_COMM_WORLD, rank);
	return true;
}

} // namespace emu

/* ---- the runtime API ---- */

#define LOCK std::lock_guard<std::recursive_mutex> lock_(big_lock); init(); emu::progress()

static const char *error_name(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return "cudaSuccess";
	case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
	case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
	case cudaErrorInitializationError: return "cudaErrorInitializationError";
	case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
	case cudaErrorInvalidPitchValue: return "cudaErrorInvalidPitchValue";
	case cudaErrorInvalidMemcpyDirection: return "cudaErrorInvalidMemcpyDirection";
	case cudaErrorInsufficientDriver: return "cudaErrorInsufficientDriver";
	case cudaErrorNoDevice: return "cudaErrorNoDevice";
	case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
	case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
	case cudaErrorNotReady: return "cudaErrorNotReady";
	case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
	case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
	default: return "cudaErrorUnknown";
	}
}

extern "C" const char *cudaGetErrorName(cudaError_t e)
{
	return error_name(e);
}

extern "C" const char *cudaGetErrorString(cudaError_t e)
{
	switch (e) {
	case cudaSuccess: return "no error";
	case cudaErrorInvalidValue: return "invalid argument";
	case cudaErrorMemoryAllocation: return "out of memory";
	case cudaErrorInitializationError: return "initialization error";
	case cudaErrorInvalidConfiguration: return "invalid configuration argument";
	case cudaErrorInvalidPitchValue: return "invalid pitch argument";
	case cudaErrorInvalidMemcpyDirection: return "invalid copy direction for memcpy";
	case cudaErrorInsufficientDriver: return "CUDA driver version is insufficient for CUDA runtime version";
	case cudaErrorNoDevice: return "no CUDA-capable device is detected";
	case cudaErrorInvalidDevice: return "invalid device ordinal";
	case cudaErrorInvalidResourceHandle: return "invalid resource handle";
	case cudaErrorNotReady: return "device not ready";
	case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
	case cudaErrorLaunchFailure: return "unspecified launch failure";
	default: return "unknown error";
	}
}

extern "C" cudaError_t cudaGetLastError(void)
{
	LOCK;
	cudaError_t e = S.last;
	S.last = cudaSuccess;
	return e;
}

extern "C" cudaError_t cudaPeekAtLastError(void)
{
	LOCK;
	return S.last;
}

extern "C" cudaError_t cudaGetDeviceCount(int *n)
{
	LOCK;
	*n = 0;
	if (S.ndev <= 0)
		return err(cudaErrorNoDevice);
	*n = S.ndev;
	return cudaSuccess;
}

extern "C" cudaError_t cudaSetDevice(int dev)
{
	LOCK;
	if (S.ndev <= 0)
		return err(cudaErrorNoDevice);
	if (dev < 0 || dev >= S.ndev)
		return err(cudaErrorInvalidDevice);
	if (S.cuda_aware_mpi && dev != 0 && !S.dev_chosen) {
		int world = 1, rank;
		if (emu::mpi_running(&world, &rank) && world > 1)
			emu::fatal("cudaSetDevice(%d) after MPI_Init: a CUDA-aware MPI (as clusters run) has already "
				   "opened a context on GPU 0 for this rank inside MPI_Init, so every rank holds one there "
				   "(memory lost, and transfers from the wrong GPU); choose the GPU before MPI_Init, from "
				   "the launcher's local rank (MEGAC_EMU_CUDA_AWARE_MPI=0 turns this check off)",
				   dev);
	}
	S.dev = dev;
	S.dev_chosen = true;
	return cudaSuccess;
}

extern "C" cudaError_t cudaGetDevice(int *dev)
{
	LOCK;
	if (S.ndev <= 0)
		return err(cudaErrorNoDevice);
	*dev = S.dev;
	return cudaSuccess;
}

extern "C" cudaError_t cudaGetDeviceProperties(cudaDeviceProp *p, int dev)
{
	LOCK;
	if (S.ndev <= 0)
		return err(cudaErrorNoDevice);
	if (dev < 0 || dev >= S.ndev)
		return err(cudaErrorInvalidDevice);
	memset(p, 0, sizeof *p);
	snprintf(p->name, sizeof p->name, "%s (emulated)", S.sm >= 90 ? "NVIDIA H200" : "NVIDIA A100-SXM4-80GB");
	p->totalGlobalMem = S.sm >= 90 ? H200_MEM : (size_t)81920 << 20;
	p->sharedMemPerBlock = 48 * 1024;
	p->sharedMemPerBlockOptin = S.sm >= 90 ? SMEM_OPTIN : 166912;
	p->sharedMemPerMultiprocessor = S.sm >= 90 ? 233472 : 167936;
	p->regsPerBlock = 65536;
	p->warpSize = 32;
	p->maxThreadsPerBlock = 1024;
	p->maxThreadsDim[0] = p->maxThreadsDim[1] = 1024;
	p->maxThreadsDim[2] = 64;
	p->maxGridSize[0] = 0x7fffffff;
	p->maxGridSize[1] = p->maxGridSize[2] = 65535;
	p->clockRate = 1980000;
	p->major = S.sm / 10;
	p->minor = S.sm % 10;
	p->multiProcessorCount = S.sm >= 90 ? 132 : 108;
	p->l2CacheSize = S.sm >= 90 ? 60 << 20 : 40 << 20;
	p->memoryClockRate = 3201000;
	p->memoryBusWidth = 5120;
	return cudaSuccess;
}

extern "C" cudaError_t cudaDeviceGetAttribute(int *v, enum cudaDeviceAttr attr, int dev)
{
	cudaDeviceProp p;
	cudaError_t e = cudaGetDeviceProperties(&p, dev);
	if (e != cudaSuccess)
		return e;
	switch (attr) {
	case cudaDevAttrMaxThreadsPerBlock: *v = p.maxThreadsPerBlock; break;
	case cudaDevAttrMaxSharedMemoryPerBlock: *v = (int)p.sharedMemPerBlock; break;
	case cudaDevAttrWarpSize: *v = 32; break;
	case cudaDevAttrMultiProcessorCount: *v = p.multiProcessorCount; break;
	case cudaDevAttrL2CacheSize: *v = p.l2CacheSize; break;
	case cudaDevAttrComputeCapabilityMajor: *v = p.major; break;
	case cudaDevAttrComputeCapabilityMinor: *v = p.minor; break;
	case cudaDevAttrMaxSharedMemoryPerBlockOptin: *v = (int)p.sharedMemPerBlockOptin; break;
	default: return err(cudaErrorInvalidValue);
	}
	return cudaSuccess;
}

extern "C" cudaError_t cudaDeviceSynchronize(void)
{
	LOCK;
	emu::sync_all("cudaDeviceSynchronize");
	return cudaSuccess;
}

extern "C" cudaError_t cudaDeviceGetStreamPriorityRange(int *least, int *greatest)
{
	if (least)
		*least = 0;
	if (greatest)
		*greatest = -5;
	return cudaSuccess;
}

extern "C" cudaError_t cudaMemGetInfo(size_t *free_bytes, size_t *total_bytes)
{
	LOCK;
	if (S.ndev <= 0)
		return err(cudaErrorNoDevice);
	cudaDeviceProp p;
	cudaGetDeviceProperties(&p, S.dev);
	*total_bytes = p.totalGlobalMem;
	*free_bytes = p.totalGlobalMem - S.used[S.dev];
	return cudaSuccess;
}

static cudaError_t host_alloc(void **p, size_t bytes, bool pinned)
{
	*p = NULL;
	if (!pinned && S.ndev <= 0)
		return err(cudaErrorNoDevice);
	if (bytes == 0)
		return cudaSuccess;
	if (!pinned && S.used[S.dev] + bytes > H200_MEM)
		return err(cudaErrorMemoryAllocation);
	const size_t rounded = (bytes + 255) & ~(size_t)255;
	void *m = aligned_alloc(256, rounded);
	if (!m)
		return err(cudaErrorMemoryAllocation);
	memset(m, pinned ? 0 : 0xff, rounded); /* device memory: NaN until written */
	allocs[(uintptr_t)m] = alloc_info{ bytes, pinned ? -1 : S.dev, pinned };
	if (!pinned)
		S.used[S.dev] += bytes;
	*p = m;
	return cudaSuccess;
}

extern "C" cudaError_t cudaMalloc(void **p, size_t bytes)
{
	LOCK;
	return host_alloc(p, bytes, false);
}

extern "C" cudaError_t cudaMallocHost(void **p, size_t bytes)
{
	LOCK;
	return host_alloc(p, bytes, true);
}

static cudaError_t host_free(void *p, bool pinned, const char *who)
{
	if (!p)
		return cudaSuccess;
	auto it = allocs.find((uintptr_t)p);
	if (it == allocs.end() || it->second.pinned != pinned) {
		fprintf(stderr, "emu: %s(%p): not the start of a live %s allocation\n", who, p,
			pinned ? "page-locked host" : "device");
		return err(cudaErrorInvalidValue);
	}
	if (!pinned) /* cudaFree waits for the whole device, NCCL's streams too */
		emu::sync_all(who);
	if (!pinned)
		S.used[it->second.device] -= it->second.bytes;
	memset(p, 0xee, it->second.bytes); /* a use after free reads garbage */
	allocs.erase(it);
	free(p);
	return cudaSuccess;
}

extern "C" cudaError_t cudaFree(void *p)
{
	LOCK;
	if (S.ndev <= 0)
		return err(cudaErrorNoDevice);
	return host_free(p, false, "cudaFree");
}

extern "C" cudaError_t cudaFreeHost(void *p)
{
	LOCK;
	return host_free(p, true, "cudaFreeHost");
}

extern "C" cudaError_t cudaPointerGetAttributes(struct cudaPointerAttributes *a, const void *p)
{
	LOCK;
	memset(a, 0, sizeof *a);
	const auto *f = find(p);
	if (!f) {
		a->type = cudaMemoryTypeUnregistered;
		a->device = -2;
		return cudaSuccess;
	}
	a->type = f->second.pinned ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
	a->device = f->second.pinned ? S.dev : f->second.device;
	a->devicePointer = (void *)p;
	a->hostPointer = f->second.pinned ? (void *)p : NULL;
	return cudaSuccess;
}

static std::string copy_what(const char *who, size_t bytes)
{
	return std::string(who) + " of " + std::to_string(bytes) + " bytes";
}

extern "C" cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
				       cudaStream_t s)
{
	LOCK;
	if (bytes == 0)
		return cudaSuccess;
	cudaError_t e = check_copy(dst, src, bytes, kind, "cudaMemcpyAsync");
	if (e != cudaSuccess)
		return e;
	const bool src_pageable = !find(src), dst_pageable = !find(dst);
	if (src_pageable && !is_device(src)) {
		/* from pageable memory the runtime stages the source before returning */
		std::shared_ptr<std::vector<unsigned char>> stage(
			new std::vector<unsigned char>((const unsigned char *)src, (const unsigned char *)src + bytes));
		emu::enqueue(s, emu::ITEM_COPY, [dst, stage, bytes] { memcpy(dst, stage->data(), bytes); return true; },
			     [bytes] { return copy_what("cudaMemcpyAsync", bytes); });
	} else {
		emu::enqueue(s, emu::ITEM_COPY, [dst, src, bytes] { memmove(dst, src, bytes); return true; },
			     [bytes] { return copy_what("cudaMemcpyAsync", bytes); });
	}
	if (dst_pageable && !is_device(dst)) { /* to pageable memory: done when the call returns */
		emu_stream *st = stream_of(s);
		const uint64_t seq = st->enq;
		emu::wait_until([st, seq] { return st->done >= seq; }, "cudaMemcpyAsync to pageable host memory");
	}
	return cudaSuccess;
}

extern "C" cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind)
{
	LOCK;
	if (bytes == 0)
		return cudaSuccess;
	cudaError_t e = check_copy(dst, src, bytes, kind, "cudaMemcpy");
	if (e != cudaSuccess)
		return e;
	emu_stream *l = S.streams[0];
	emu::enqueue(NULL, emu::ITEM_COPY, [dst, src, bytes] { memmove(dst, src, bytes); return true; },
		     [bytes] { return copy_what("cudaMemcpy", bytes); });
	const uint64_t seq = l->enq;
	emu::wait_until([l, seq] { return l->done >= seq; }, "cudaMemcpy");
	return cudaSuccess;
}

/* A column block: height runs of width bytes at the two pitches. As the
 * runtime, a width above either pitch is cudaErrorInvalidPitchValue; both
 * spans are checked against the allocation table, then it runs as one item
 * on the legacy stream and returns when done (cudaMemcpy's semantics). */
extern "C" cudaError_t cudaMemcpy2D(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width,
				    size_t height, enum cudaMemcpyKind kind)
{
	LOCK;
	if (width > dpitch || width > spitch) {
		fprintf(stderr, "emu: cudaMemcpy2D: width %zu bytes exceeds a pitch (dpitch %zu, spitch %zu)\n", width,
			dpitch, spitch);
		return err(cudaErrorInvalidPitchValue);
	}
	if (width == 0 || height == 0)
		return cudaSuccess;
	const size_t dspan = (height - 1) * dpitch + width, sspan = (height - 1) * spitch + width;
	cudaError_t e = check_copy(dst, src, width, kind, "cudaMemcpy2D");
	if (e != cudaSuccess)
		return e;
	if (is_device(dst))
		emu::need_device_range(dst, dspan, "cudaMemcpy2D", "its destination");
	if (is_device(src))
		emu::need_device_range(src, sspan, "cudaMemcpy2D", "its source");
	emu_stream *l = S.streams[0];
	emu::enqueue(NULL, emu::ITEM_COPY,
		     [dst, dpitch, src, spitch, width, height] {
			     for (size_t r = 0; r < height; r++)
				     memmove((char *)dst + r * dpitch, (const char *)src + r * spitch, width);
			     return true;
		     },
		     [width, height] { return copy_what("cudaMemcpy2D", width * height); });
	const uint64_t seq = l->enq;
	emu::wait_until([l, seq] { return l->done >= seq; }, "cudaMemcpy2D");
	return cudaSuccess;
}

extern "C" cudaError_t cudaMemsetAsync(void *p, int value, size_t bytes, cudaStream_t s)
{
	LOCK;
	if (bytes == 0)
		return cudaSuccess;
	emu::need_device_range(p, bytes, "cudaMemset", "its destination");
	emu::enqueue(s, emu::ITEM_COPY, [p, value, bytes] { memset(p, value, bytes); return true; },
		     [bytes] { return copy_what("cudaMemset", bytes); });
	return cudaSuccess;
}

extern "C" cudaError_t cudaMemset(void *p, int value, size_t bytes)
{
	return cudaMemsetAsync(p, value, bytes, NULL);
}

extern "C" cudaError_t cudaStreamCreateWithPriority(cudaStream_t *s, unsigned flags, int priority)
{
	LOCK;
	if (S.ndev <= 0)
		return err(cudaErrorNoDevice);
	*s = new_stream(false, flags, priority);
	return cudaSuccess;
}

extern "C" cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned flags)
{
	return cudaStreamCreateWithPriority(s, flags, 0);
}

extern "C" cudaError_t cudaStreamCreate(cudaStream_t *s)
{
	return cudaStreamCreateWithPriority(s, 0, 0);
}

extern "C" cudaError_t cudaStreamDestroy(cudaStream_t h)
{
	LOCK;
	emu_stream *s = stream_of(h);
	if (s->legacy)
		return err(cudaErrorInvalidResourceHandle);
	/* the runtime releases it once its work is done; here, that work first */
	emu::wait_until([s] { return s->q.empty(); }, "cudaStreamDestroy");
	s->destroyed = true;
	return cudaSuccess;
}

extern "C" cudaError_t cudaStreamSynchronize(cudaStream_t h)
{
	LOCK;
	emu_stream *s = stream_of(h);
	const uint64_t seq = s->enq;
	emu::wait_until([s, seq] { return s->done >= seq; }, "cudaStreamSynchronize");
	return cudaSuccess;
}

extern "C" cudaError_t cudaStreamQuery(cudaStream_t h)
{
	LOCK;
	emu::polling p;
	emu::progress();
	emu_stream *s = stream_of(h);
	return s->q.empty() ? cudaSuccess : cudaErrorNotReady;
}

extern "C" cudaError_t cudaStreamWaitEvent(cudaStream_t h, cudaEvent_t e, unsigned flags)
{
	LOCK;
	if (!e)
		return err(cudaErrorInvalidResourceHandle);
	emu_stream *x = e->s;
	if (!x)
		return cudaSuccess; /* never recorded: nothing to wait for */
	const uint64_t seq = e->seq;
	emu::enqueue(h, emu::ITEM_WAIT, [x, seq] { return x->done >= seq; },
		     [x, seq] { return "a wait for an event of stream " + std::to_string(x->id) + " (its item " +
				       std::to_string(seq) + "; it has completed " + std::to_string(x->done) + ")"; });
	return cudaSuccess;
}

extern "C" cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned flags)
{
	LOCK;
	*e = new emu_event();
	(*e)->flags = flags;
	return cudaSuccess;
}

extern "C" cudaError_t cudaEventCreate(cudaEvent_t *e)
{
	return cudaEventCreateWithFlags(e, cudaEventDefault);
}

extern "C" cudaError_t cudaEventDestroy(cudaEvent_t e)
{
	LOCK;
	if (!e)
		return err(cudaErrorInvalidResourceHandle);
	delete e;
	return cudaSuccess;
}

extern "C" cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t h)
{
	LOCK;
	if (!e)
		return err(cudaErrorInvalidResourceHandle);
	emu_stream *s = stream_of(h);
	e->s = s;
	e->seq = s->enq;
	e->t = s->done >= e->seq ? now() : 0;
	return cudaSuccess;
}

extern "C" cudaError_t cudaEventQuery(cudaEvent_t e)
{
	LOCK;
	emu::polling p;
	emu::progress();
	if (!e)
		return err(cudaErrorInvalidResourceHandle);
	if (e->s && e->s->done < e->seq)
		return cudaErrorNotReady; /* not sticky: not an error state */
	if (e->t == 0)
		e->t = now();
	return cudaSuccess;
}

extern "C" cudaError_t cudaEventSynchronize(cudaEvent_t e)
{
	LOCK;
	if (!e)
		return err(cudaErrorInvalidResourceHandle);
	emu_stream *s = e->s;
	const uint64_t seq = e->seq;
	if (s)
		emu::wait_until([s, seq] { return s->done >= seq; }, "cudaEventSynchronize");
	if (e->t == 0)
		e->t = now();
	return cudaSuccess;
}

extern "C" cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t a, cudaEvent_t b)
{
	LOCK;
	if (!a || !b || (a->flags & cudaEventDisableTiming) || (b->flags & cudaEventDisableTiming))
		return err(cudaErrorInvalidResourceHandle);
	if ((a->s && a->s->done < a->seq) || (b->s && b->s->done < b->seq))
		return err(cudaErrorNotReady);
	*ms = (float)((b->t - a->t) * 1e3);
	return cudaSuccess;
}

extern "C" cudaError_t emu_func_set_attribute(const void *kernel, enum cudaFuncAttribute attr, int value)
{
	LOCK;
	if (S.ndev <= 0)
		return err(cudaErrorNoDevice);
	S.loaded.insert(kernel);
	if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) {
		if (value < 0 || value > SMEM_OPTIN)
			return err(cudaErrorInvalidValue);
		S.smem_attr[kernel] = value;
	}
	return cudaSuccess;
}

extern "C" cudaError_t emu_func_get_attributes(struct cudaFuncAttributes *a, const void *kernel)
{
	LOCK;
	if (S.ndev <= 0)
		return err(cudaErrorNoDevice);
	S.loaded.insert(kernel);
	memset(a, 0, sizeof *a);
	a->maxThreadsPerBlock = 1024;
	a->numRegs = 64;
	a->ptxVersion = a->binaryVersion = S.sm;
	auto it = S.smem_attr.find(kernel);
	a->maxDynamicSharedSizeBytes = it != S.smem_attr.end() ? it->second : 48 * 1024;
	return cudaSuccess;
}

const char *emu_name_of_signature(const char *pretty)
{
	const char *s = strstr(pretty, "K = ");
	std::string n = s ? s + 4 : pretty;
	if (!n.empty() && n.back() == ']')
		n.pop_back();
	if (n.rfind("(& ", 0) == 0 && n.back() == ')')
		n = n.substr(3, n.size() - 4);
	if (n.rfind("& ", 0) == 0)
		n = n.substr(2);
	return strdup(n.c_str());
}

void emu_kernel_launch(const void *kernel, const char *name, dim3 grid, dim3 block, size_t smem, cudaStream_t s,
		       const emu_arg_ptr *ptrs, int nptrs, std::function<void()> body)
{
	LOCK;
	if (S.ndev <= 0) {
		err(cudaErrorNoDevice);
		return;
	}
	const long threads = (long)block.x * block.y * block.z;
	const char *bad = NULL;
	if (threads < 1 || threads > 1024 || block.x > 1024 || block.y > 1024 || block.z > 64)
		bad = "a block of 1 to 1024 threads (at most 1024 x 1024 x 64)";
	else if (grid.x < 1 || grid.y < 1 || grid.z < 1 || grid.x > 0x7fffffffu || grid.y > 65535 || grid.z > 65535)
		bad = "a grid of 1 to 2^31-1 x 65535 x 65535 blocks";
	if (bad) {
		fprintf(stderr, "emu: kernel %s launched with grid (%u,%u,%u), block (%u,%u,%u): the device takes %s\n",
			name, grid.x, grid.y, grid.z, block.x, block.y, block.z, bad);
		err(cudaErrorInvalidConfiguration);
		return;
	}
	if (smem > 48 * 1024) {
		auto it = S.smem_attr.find(kernel);
		const int opt = it != S.smem_attr.end() ? it->second : 48 * 1024;
		if ((long)smem > opt) {
			fprintf(stderr,
				"emu: kernel %s asks for %zu bytes of dynamic shared memory; above 48 KB a kernel needs "
				"cudaFuncSetAttribute(MaxDynamicSharedMemorySize) first (it allows %d)\n",
				name, smem, opt);
			err(cudaErrorInvalidValue);
			return;
		}
	}
	for (int i = 0; i < nptrs; i++) {
		const void *p = ptrs[i].p;
		if (!p)
			continue;
		const auto *f = find(p);
		if (!f) { /* one past the end of an allocation (an empty range at its end) is valid */
			const auto *e = find((const char *)p - 1);
			if (e && (uintptr_t)p == e->first + e->second.bytes)
				f = e;
		}
		if (!f)
			emu::fatal("kernel %s: argument %d (%p) points to neither device memory nor page-locked host "
				   "memory: a host pointer given to a kernel (or one to freed memory)",
				   name, ptrs[i].index, p);
		if (!f->second.pinned && f->second.device != S.dev)
			emu::fatal("kernel %s: argument %d (%p) is memory of device %d, and the kernel runs on device %d",
				   name, ptrs[i].index, p, f->second.device, S.dev);
	}
	if (!S.loaded.count(kernel)) {
		if (!S.eager && emu::comm_in_flight())
			emu::fatal("kernel %s is launched for the first time (so CUDA loads it now: lazy loading, the "
				   "default) while %d NCCL operation(s) are in flight; loading may need a context "
				   "synchronisation, which waits for NCCL kernels that wait for a peer: a possible hang. "
				   "Load every kernel at start-up (cudaFuncGetAttributes) or set CUDA_MODULE_LOADING=EAGER",
				   name, emu::comm_in_flight());
		S.loaded.insert(kernel);
	}
	const int order = S.order;
	std::string kname = name;
	if (S.stats)
		S.launches[kname]++;
	emu::enqueue(
		s, emu::ITEM_COMPUTE,
		[body, grid, block, smem, order, kname] {
			if (emu_launch_named(kname.c_str(), grid, block, smem, order, body) != 0)
				emu::fatal("kernel %s failed (above)", kname.c_str());
			return true;
		},
		[kname] { return "kernel " + kname; });
}
