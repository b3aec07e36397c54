/*
 * dist.c - see dist.h. MPI errors are returned, not fatal by default, so a
 * failing call dies with this rank, the call and MPI's reason; mpirun then
 * ends the other ranks. Each call decides here whether its buffer takes
 * MPI or NCCL (route()); the NCCL side lives in nccl.c, and its waits are
 * polled here so that the watchdog sees them like MPI's.
 */
#include "dist/dist.h"

#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/xalloc.h"
#include "dist/nccl.h"

#define DIST_CHECK(call)                                                                     \
	do {                                                                                 \
		int dist_rc_ = (call);                                                       \
		if (dist_rc_ != MPI_SUCCESS) {                                               \
			char dist_msg_[MPI_MAX_ERROR_STRING];                                \
			int dist_len_ = 0;                                                   \
			MPI_Error_string(dist_rc_, dist_msg_, &dist_len_);                   \
			die("%s failed (%s:%d): %s", #call, __FILE__, __LINE__, dist_msg_);  \
		}                                                                            \
	} while (0)

#define COMM(g) ((MPI_Comm)(g)->comm)

/* ---- the stall watchdog ----
 * The collective wrappers note when this rank entered a call; a thread
 * checks twice a second and ends the process when one has waited past the
 * timeout (a rank that died without the launcher noticing, a deadlock, a
 * hung network). The process exits rather than calling MPI from a second
 * thread; the launcher then ends the others. */
struct dist_watch {
	pthread_t thread;
	/* Time is counted in the watchdog's own half-second ticks, not the wall
	 * clock, so a job suspended as a whole (Slurm's scontrol suspend,
	 * preemption) does not look stalled when it resumes. */
	atomic_llong ticks;
	atomic_llong since_tick;          /* -1: not in a collective */
	_Atomic(const char *) call, group;
	atomic_bool stop, paused;
	double timeout_s;                 /* a collective's wait; 0: not watched */
	/* the hang detector: the last progress, and where this rank is */
	double hang_s;                    /* 0: off */
	atomic_llong progress_tick;
	_Atomic(const char *) phase;
	atomic_llong phase_arg;           /* -1: none */
	atomic_uint phase_seq;            /* odd while the two are being changed */
};

#define WATCH_TICK_S 0.5

static void *watch_main(void *arg)
{
	struct dist_watch *w = arg;
	while (!atomic_load(&w->stop)) {
		struct timespec nap = { 0, 500 * 1000 * 1000 };
		nanosleep(&nap, NULL);
		long long now = atomic_fetch_add(&w->ticks, 1) + 1;
		long long since = atomic_load(&w->since_tick);
		double waited = (double)(now - since) * WATCH_TICK_S;
		long long progress = atomic_load(&w->progress_tick); /* -1: not armed yet (set-up) */
		double idle = (double)(now - progress) * WATCH_TICK_S;
		if (w->hang_s > 0 && progress >= 0 && !atomic_load(&w->paused) && idle > w->hang_s) {
			char where[160] = "";
			if (since >= 0)
				snprintf(where, sizeof(where), ", waiting %.0f s in %s on the %s group", waited,
					 atomic_load(&w->call), atomic_load(&w->group));
			const char *phase;
			long long parg;
			unsigned s1, s2;
			do { /* the phase and its number as one pair */
				s1 = atomic_load(&w->phase_seq);
				phase = atomic_load(&w->phase);
				parg = atomic_load(&w->phase_arg);
				s2 = atomic_load(&w->phase_seq);
			} while ((s1 & 1) || s1 != s2);
			char num[32] = "";
			if (parg >= 0)
				snprintf(num, sizeof(num), " %lld", parg);
			fprintf(stderr,
				"%serror: no progress for %.0f s (--hang-timeout-minutes %g): this rank is in %s%s%s; "
				"ending the job\n",
				log_prog(), idle, w->hang_s / 60.0, phase, num, where);
			fflush(stderr);
			/* the other ranks' detectors fire within a tick or two: give them
			 * the time to say where they are before the launcher, seeing
			 * this exit, ends them; unless this rank got going again after
			 * all, or is ending by itself */
			struct timespec grace = { 2, 0 };
			nanosleep(&grace, NULL);
			if (atomic_load(&w->stop) || atomic_load(&w->progress_tick) != progress) {
				fprintf(stderr, "%swarning: progress again after all; the hang detector goes on watching\n",
					log_prog());
				continue;
			}
			_exit(DIE_EXIT_CODE);
		}
		if (w->timeout_s > 0 && since >= 0 && !atomic_load(&w->paused) && waited > w->timeout_s) {
			/* log_prog() is the message prefix, "[rank R] train: " */
			fprintf(stderr,
				"%serror: %s on the %s group has waited %.0f s "
				"(--distributed-timeout-minutes %g): another rank is stuck or gone; ending the job\n",
				log_prog(), atomic_load(&w->call), atomic_load(&w->group), waited, w->timeout_s / 60.0);
			fflush(stderr);
			_exit(DIE_EXIT_CODE);
		}
	}
	return NULL;
}

void dist_watchdog_pause(struct dist *d, bool pause)
{
	if (!d->watch)
		return;
	if (!pause) { /* a wait that was excused starts its count afresh, and so does the hang detector's */
		atomic_store(&d->watch->since_tick, atomic_load(&d->watch->since_tick) >= 0 ?
							    atomic_load(&d->watch->ticks) : -1);
		if (atomic_load(&d->watch->progress_tick) >= 0)
			atomic_store(&d->watch->progress_tick, atomic_load(&d->watch->ticks));
	}
	atomic_store(&d->watch->paused, pause);
}

/* The watchdog thread, started by whichever of the two asks first; both
 * settings are in place before it runs. */
static void watch_start(struct dist *d, double timeout_s, double hang_s)
{
	if (d->watch)
		BUG("the watchdog started twice");
	struct dist_watch *w = xcalloc(1, sizeof(*w));
	w->timeout_s = timeout_s;
	w->hang_s = hang_s;
	atomic_store(&w->call, "");
	atomic_store(&w->group, "");
	atomic_store(&w->phase, "set-up");
	atomic_store(&w->phase_arg, -1);
	atomic_store(&w->since_tick, -1);
	atomic_store(&w->progress_tick, -1);
	if (pthread_create(&w->thread, NULL, watch_main, w)) {
		warning("could not start the %s watchdog",
			hang_s > 0 ? "--hang-timeout-minutes" : "--distributed-timeout-minutes");
		free(w);
		return;
	}
	d->watch = w;
	struct dist_group *gs[] = { &d->world_g, &d->tp, &d->cp, &d->dp, &d->dp_cp, &d->pp, &d->mp, &d->emb,
				    &d->ep, &d->edp, &d->etp, &d->etmp };
	for (size_t i = 0; i < sizeof(gs) / sizeof(gs[0]); i++)
		gs[i]->watch = w;
}

void dist_watchdog_start(struct dist *d, double minutes, double hang_minutes)
{
	double timeout_s = d->mpi && minutes > 0 ? minutes * 60.0 : 0;
	double hang_s = hang_minutes > 0 ? hang_minutes * 60.0 : 0;
	if (timeout_s > 0 || hang_s > 0)
		watch_start(d, timeout_s, hang_s);
}

void dist_watchdog_progress(struct dist *d)
{
	if (d->watch)
		atomic_store(&d->watch->progress_tick, atomic_load(&d->watch->ticks));
}

void dist_watchdog_phase(struct dist *d, const char *phase, long long arg)
{
	if (!d->watch)
		return;
	atomic_fetch_add(&d->watch->phase_seq, 1); /* never a number with the wrong phase */
	atomic_store(&d->watch->phase, phase);
	atomic_store(&d->watch->phase_arg, arg);
	atomic_fetch_add(&d->watch->phase_seq, 1);
}

static void watch_begin(struct dist_group *g, const char *call)
{
	if (!g->watch)
		return;
	atomic_store(&g->watch->call, call);
	atomic_store(&g->watch->group, g->name);
	atomic_store(&g->watch->since_tick, atomic_load(&g->watch->ticks));
}

static void watch_end(struct dist_group *g)
{
	if (g->watch)
		atomic_store(&g->watch->since_tick, -1);
}

/* A launcher (OpenMPI's mpirun, Slurm's srun with PMIx or PMI2, MPICH's
 * hydra) leaves one of these in the environment. */
static bool launched(void)
{
	static const char *const vars[] = { "OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE" };
	for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++)
		if (getenv(vars[i]))
			return true;
	return false;
}

/* The ranks on this node by the launcher's count: Open MPI's mpirun, else
 * srun's step layout ("4", "4(x2),3": one entry per node of the step,
 * SLURM_NODEID picks ours), else the job's; 0 when none says. */
static long local_ranks(void)
{
	const char *v = getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
	if (v)
		return strtol(v, NULL, 10);
	v = getenv("SLURM_STEP_TASKS_PER_NODE");
	long node = 0;
	if (v && getenv("SLURM_NODEID"))
		node = strtol(getenv("SLURM_NODEID"), NULL, 10);
	if (!v)
		v = getenv("SLURM_NTASKS_PER_NODE");
	if (!v)
		v = getenv("SLURM_TASKS_PER_NODE");
	while (v && *v) { /* entries "N" or "N(xR)", comma-separated */
		char *end;
		long n = strtol(v, &end, 10), rep = 1;
		if (end == v)
			return 0;
		if (strncmp(end, "(x", 2) == 0) {
			rep = strtol(end + 2, &end, 10);
			end += *end == ')';
		}
		if (node < rep)
			return n;
		node -= rep;
		v = *end == ',' ? end + 1 : "";
	}
	return 0;
}

static void group_single(struct dist_group *g, const char *name)
{
	memset(g, 0, sizeof(*g));
	g->name = name;
	g->size = 1;
}

int dist_init(struct dist *d, const char *prog)
{
	memset(d, 0, sizeof(*d));
	d->world = 1;
	group_single(&d->world_g, "world");
	const char *ntasks = getenv("SLURM_STEP_NUM_TASKS");
	if (!launched() && ntasks && atoi(ntasks) > 1)
		return error("Slurm started %s tasks without MPI (srun --mpi=none?): each would train alone and "
			     "write the same files; launch with srun --mpi=pmix (or pmi2), or mpirun", ntasks);
	if (launched()) {
		/* More ranks on this node than CPUs to run them (a test box, a
		 * small allocation): Open MPI busy-polls while it waits, so a
		 * waiting rank holds the CPU the rank it waits for needs (8 ranks
		 * on 2 CPUs under srun: a 1 MB allreduce 99 ms, 1.6 ms yielding).
		 * Ask it to yield, unless the user chose. Ranks each pinned to
		 * fewer CPUs than there are ranks on the node count too, at the
		 * cost of a sched_yield per idle poll. */
		cpu_set_t set;
		long cpus = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : sysconf(_SC_NPROCESSORS_ONLN);
		if (!getenv("OMPI_MCA_mpi_yield_when_idle") && cpus > 0 && local_ranks() > cpus)
			setenv("OMPI_MCA_mpi_yield_when_idle", "1", 0);
		int provided;
		if (MPI_Init_thread(NULL, NULL, MPI_THREAD_FUNNELED, &provided) != MPI_SUCCESS)
			return error("MPI_Init_thread failed");
		if (provided < MPI_THREAD_FUNNELED) /* OpenMP threads run between MPI calls */
			warning("this MPI gives thread level %d, less than MPI_THREAD_FUNNELED", provided);
		d->mpi = true;
		MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
		DIST_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &d->rank));
		DIST_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &d->world));
		d->world_g.comm = (void *)MPI_COMM_WORLD;
		d->world_g.rank = d->rank;
		d->world_g.size = d->world;
	}
	log_init(prog, d->rank, d->world);
	return 0;
}

/* The group of this rank for a token, as its own communicator. Every rank
 * calls this for every token in the same order (MPI_Comm_split is collective). */
static int make_group(struct dist *d, struct dist_group *g, const char *name, unsigned axes,
		      const struct rank_gen *rg)
{
	group_single(g, name);
	if (!d->mpi)
		return 0;
	int size, n, *groups = NULL;
	if (rank_gen_groups(rg, axes, &groups, &size, &n) < 0)
		return -1;
	int color = -1, key = 0;
	for (int gi = 0; gi < n && color < 0; gi++)
		for (int j = 0; j < size; j++)
			if (groups[gi * size + j] == d->rank) {
				color = gi;
				key = j;
				break;
			}
	free(groups);
	if (color < 0)
		BUG("rank %d is in no %s group", d->rank, name);
	MPI_Comm c;
	DIST_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, key, &c));
	MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
	g->comm = (void *)c;
	DIST_CHECK(MPI_Comm_rank(c, &g->rank));
	DIST_CHECK(MPI_Comm_size(c, &g->size));
	if (g->rank != key || g->size != size)
		BUG("%s group: MPI placed rank %d at %d of %d, Megatron's layout at %d of %d", name, d->rank, g->rank,
		    g->size, key, size);
	return 0;
}

/* Megatron's embedding group: the first and last stage of each pipeline
 * (pretrain_gpt's rule with tied embeddings), which sum the word-embedding
 * gradients of their two copies. Stages in between, and every rank without
 * pipeline parallelism, are alone in it. */
static int make_embedding_group(struct dist *d, const struct rank_gen *rg)
{
	group_single(&d->emb, "embedding");
	if (!d->mpi)
		return 0;
	int size, n, *groups = NULL;
	if (rank_gen_groups(rg, 1u << DIST_PP, &groups, &size, &n) < 0)
		return -1;
	int color = MPI_UNDEFINED, key = 0;
	for (int gi = 0; gi < n; gi++) {
		int members[2], k = dist_embedding_ranks(groups + (size_t)gi * size, size, true, members);
		for (int j = 0; k > 1 && j < k; j++)
			if (members[j] == d->rank) {
				color = gi;
				key = j;
			}
	}
	free(groups);
	MPI_Comm c;
	DIST_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, key, &c));
	if (c == MPI_COMM_NULL)
		return 0;
	MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
	d->emb.comm = (void *)c;
	DIST_CHECK(MPI_Comm_rank(c, &d->emb.rank));
	DIST_CHECK(MPI_Comm_size(c, &d->emb.size));
	return 0;
}

int dist_setup(struct dist *d, const struct dist_layout *l)
{
	d->layout = *l;
	struct rank_gen rg;
	if (rank_gen_init(&rg, l->tp, 1, l->dp, l->pp, l->cp, "tp-cp-ep-dp-pp") < 0)
		return -1;
	rank_gen_coords(&rg, d->rank, d->coords);
	unsigned TP = 1u << DIST_TP, CP = 1u << DIST_CP, DP = 1u << DIST_DP, PP = 1u << DIST_PP;
	/* Megatron's creation order (initialize_model_parallel in megatron/core/parallel_state.py) */
	if (make_group(d, &d->dp_cp, "data-parallel with context-parallel", DP | CP, &rg) < 0 ||
	    make_group(d, &d->dp, "data-parallel", DP, &rg) < 0 ||
	    make_group(d, &d->cp, "context-parallel", CP, &rg) < 0 ||
	    make_group(d, &d->mp, "model-parallel", TP | PP, &rg) < 0 ||
	    make_group(d, &d->tp, "tensor-model-parallel", TP, &rg) < 0 ||
	    make_group(d, &d->pp, "pipeline-model-parallel", PP, &rg) < 0)
		return -1;
	if (make_embedding_group(d, &rg) < 0)
		return -1;
	/* the expert generator's groups, after the dense ones as in Megatron */
	struct rank_gen eg;
	if (dist_expert_gen(&eg, l, "tp-cp-ep-dp-pp") < 0)
		return -1;
	unsigned EP = 1u << DIST_EP;
	if (make_group(d, &d->ep, "expert-model-parallel", EP, &eg) < 0 ||
	    make_group(d, &d->etp, "expert-tensor-parallel", TP, &eg) < 0 ||
	    make_group(d, &d->etmp, "expert-tensor-and-model-parallel", TP | EP, &eg) < 0 ||
	    make_group(d, &d->edp, "expert-data-parallel", DP, &eg) < 0)
		return -1;
	return 0;
}

static void free_group(struct dist_group *g)
{
	if (g->comm) {
		MPI_Comm c = COMM(g);
		MPI_Comm_free(&c);
		g->comm = NULL;
	}
}

/* The groups in the order their NCCL communicators are made (dist_use_device)
 * and destroyed (dist_finalize): one order, the same on every rank. */
#define NCCL_GROUPS 12
static void nccl_group_order(struct dist *d, struct dist_group *gs[NCCL_GROUPS])
{
	struct dist_group *order[NCCL_GROUPS] = { &d->world_g, &d->dp_cp, &d->dp,  &d->cp,  &d->mp,  &d->tp,
						  &d->pp,      &d->emb,   &d->ep,  &d->edp, &d->etp, &d->etmp };
	memcpy(gs, order, sizeof(order));
}

void dist_finalize(struct dist *d)
{
	if (d->watch) {
		atomic_store(&d->watch->stop, true);
		pthread_join(d->watch->thread, NULL);
		free(d->watch);
		d->watch = NULL;
	}
	/* NCCL first: its communicators were made from the MPI ones (and a
	 * test may have attached some to groups of one rank, without MPI);
	 * in the order they were made, the same on every rank, as NCCL
	 * requires of the destruction of communicators (2.23 and later) */
	struct dist_group *all[NCCL_GROUPS];
	nccl_group_order(d, all);
	for (size_t i = 0; i < NCCL_GROUPS; i++)
		dist_nccl_group_free(all[i]);
	if (!d->mpi)
		return;
	struct dist_group *gs[] = { &d->tp,  &d->cp, &d->dp,  &d->dp_cp, &d->pp,  &d->mp,
				    &d->emb, &d->ep, &d->edp, &d->etp,   &d->etmp };
	for (size_t i = 0; i < sizeof(gs) / sizeof(gs[0]); i++)
		free_group(gs[i]);
	MPI_Finalize();
	d->mpi = false;
}

int dist_use_device(struct dist *d)
{
	if (dist_nccl_enable() < 0)
		return -1;
	/* the same order on every rank (creation is collective); groups of one
	 * rank, and ranks outside every embedding group, have nothing to make */
	struct dist_group *gs[NCCL_GROUPS];
	nccl_group_order(d, gs);
	for (size_t i = 0; i < NCCL_GROUPS; i++) {
		/* the expert groups move device memory only when the experts are
		 * apart (without EP and with expert TP = TP, edp is the data-parallel
		 * ranks and etp the tensor-parallel ones again) */
		bool expert = gs[i] == &d->ep || gs[i] == &d->edp || gs[i] == &d->etp || gs[i] == &d->etmp;
		if (gs[i]->size > 1 && !gs[i]->nccl && (!expert || dist_experts_apart(&d->layout)))
			dist_nccl_group_init(gs[i], gs[i] == &d->cp || gs[i] == &d->pp);
	}
	return 0;
}

bool dist_is_last(const struct dist *d)
{
	return d->rank == d->world - 1;
}

/* Large buffers go in pieces: MPI counts are ints. */
#define DIST_PIECE ((size_t)1 << 28)

/* ---- which path a call takes ---- */

enum route {
	VIA_MPI,    /* host memory: MPI, as without a GPU */
	VIA_NCCL,   /* device memory, the group has an NCCL communicator */
	VIA_ALONE,  /* device memory in a group of one rank without one: copies on the device */
};

static enum route route(const struct dist_group *g, const void *buf, const char *call)
{
	if (!dist_nccl_active() || !dist_nccl_is_device(buf))
		return VIA_MPI;
	if (g->nccl)
		return VIA_NCCL;
	if (g->size <= 1)
		return VIA_ALONE;
	BUG("%s on the %s group: the buffer is device memory and the group has no NCCL communicator "
	    "(dist_use_device() makes them)",
	    call, g->name);
}

/* A call with a second buffer (NULL: not used on this rank) on the same side. */
static enum route route2(const struct dist_group *g, const void *buf, const void *other, const char *call)
{
	enum route w = route(g, buf, call);
	if (other && dist_nccl_active() && dist_nccl_is_device(other) != (w != VIA_MPI))
		BUG("%s on the %s group with one buffer in host memory and the other in device memory", call,
		    g->name);
	return w;
}

/* Byte counts as the MPI path keeps them: groups of one rank count nothing. */
static void count(struct dist_group *g, uint64_t bytes)
{
	if (g->size <= 1)
		return;
	g->bytes += bytes;
	g->calls++;
}

/* Poll until done, with naps after a while (dist_wait's reasons). */
static void nccl_spin(struct dist_nccl_op *op)
{
	for (long i = 0; !dist_nccl_poll(op, true); i++)
		if (i >= 2000) {
			struct timespec nap = { 0, 50 * 1000 };
			nanosleep(&nap, NULL);
		}
}

/* A blocking call's NCCL operation: wait for it where the watchdog sees. */
static void nccl_finish(struct dist_group *g, const char *call, struct dist_nccl_op *op)
{
	watch_begin(g, call);
	nccl_spin(op);
	watch_end(g);
	dist_nccl_free(op);
}

static void allreduce(struct dist_group *g, void *buf, size_t n, size_t elem, MPI_Datatype t, MPI_Op op)
{
	if (!n)
		return;
	enum route w = route(g, buf, "all-reduce");
	if (w == VIA_NCCL) {
		nccl_finish(g, "all-reduce",
			    dist_nccl_allreduce(g, buf, n, t == MPI_DOUBLE ? DIST_NCCL_F64 : DIST_NCCL_F32,
						op == MPI_MAX ? DIST_NCCL_MAX : DIST_NCCL_SUM));
	} else {
		if (g->size <= 1)
			return;
		for (size_t off = 0; off < n; off += DIST_PIECE) {
			size_t m = n - off < DIST_PIECE ? n - off : DIST_PIECE;
			watch_begin(g, "all-reduce");
			DIST_CHECK(MPI_Allreduce(MPI_IN_PLACE, (char *)buf + off * elem, (int)m, t, op, COMM(g)));
			watch_end(g);
		}
	}
	count(g, 2 * (uint64_t)(g->size - 1) * n * elem / (uint64_t)g->size);
}

void dist_allreduce_sum_f32(struct dist_group *g, float *buf, size_t n)
{
	allreduce(g, buf, n, sizeof(float), MPI_FLOAT, MPI_SUM);
}

void dist_allreduce_sum_f64(struct dist_group *g, double *buf, size_t n)
{
	allreduce(g, buf, n, sizeof(double), MPI_DOUBLE, MPI_SUM);
}

void dist_allreduce_max_f32(struct dist_group *g, float *buf, size_t n)
{
	allreduce(g, buf, n, sizeof(float), MPI_FLOAT, MPI_MAX);
}

void dist_allreduce_max_f64(struct dist_group *g, double *buf, size_t n)
{
	allreduce(g, buf, n, sizeof(double), MPI_DOUBLE, MPI_MAX);
}

void dist_barrier(struct dist_group *g)
{
	if (g->size <= 1)
		return;
	watch_begin(g, "barrier");
	DIST_CHECK(MPI_Barrier(COMM(g)));
	watch_end(g);
}

void dist_bcast(struct dist_group *g, void *buf, size_t n, int root)
{
	if (!n)
		return;
	enum route w = route(g, buf, "broadcast");
	if (w == VIA_NCCL) {
		nccl_finish(g, "broadcast", dist_nccl_bcast(g, buf, n, root));
	} else {
		if (g->size <= 1)
			return;
		for (size_t off = 0; off < n; off += DIST_PIECE) {
			size_t m = n - off < DIST_PIECE ? n - off : DIST_PIECE;
			watch_begin(g, "broadcast");
			DIST_CHECK(MPI_Bcast((char *)buf + off, (int)m, MPI_BYTE, root, COMM(g)));
			watch_end(g);
		}
	}
	count(g, g->rank == root ? n : 0);
}

void dist_shard(size_t n, int size, int rank, size_t *lo, size_t *hi)
{
	*lo = n / (size_t)size * (size_t)rank + (n % (size_t)size < (size_t)rank ? n % (size_t)size : (size_t)rank);
	*hi = *lo + n / (size_t)size + ((size_t)rank < n % (size_t)size ? 1 : 0);
}

/* MPI's v-collectives count in ints. */
static void shard_counts(const struct dist_group *g, size_t n, int *counts, int *displs)
{
	for (int r = 0; r < g->size; r++) {
		size_t lo, hi;
		dist_shard(n, g->size, r, &lo, &hi);
		if (hi - lo > INT_MAX || lo > INT_MAX)
			die("a shard of %zu elements over %d ranks is beyond MPI's int counts", n, g->size);
		counts[r] = (int)(hi - lo);
		displs[r] = (int)lo;
	}
}

void dist_reduce_scatter_sum_f32(struct dist_group *g, float *buf, size_t n, float *scratch)
{
	if (!n)
		return;
	if (route2(g, buf, scratch, "reduce-scatter") == VIA_NCCL) {
		nccl_finish(g, "reduce-scatter", dist_nccl_reduce_scatter_range(g, buf, n, 0, n, scratch, true));
		count(g, (uint64_t)(g->size - 1) * n * sizeof(float) / (uint64_t)g->size);
		return;
	}
	if (g->size <= 1)
		return;
	int *counts = xmalloc((size_t)g->size * sizeof(int)), *displs = xmalloc((size_t)g->size * sizeof(int));
	shard_counts(g, n, counts, displs);
	watch_begin(g, "reduce-scatter");
	DIST_CHECK(MPI_Reduce_scatter(buf, scratch, counts, MPI_FLOAT, MPI_SUM, COMM(g)));
	watch_end(g);
	memcpy(buf + displs[g->rank], scratch, (size_t)counts[g->rank] * sizeof(float));
	free(counts);
	free(displs);
	g->bytes += (uint64_t)(g->size - 1) * n * sizeof(float) / (uint64_t)g->size;
	g->calls++;
}

void dist_allgather_f32(struct dist_group *g, float *buf, size_t n)
{
	if (!n)
		return;
	if (route(g, buf, "all-gather") == VIA_NCCL) {
		nccl_finish(g, "all-gather", dist_nccl_allgather_range(g, buf, sizeof(float), n, 0, n));
		count(g, (uint64_t)(g->size - 1) * n * sizeof(float) / (uint64_t)g->size);
		return;
	}
	if (g->size <= 1)
		return;
	int *counts = xmalloc((size_t)g->size * sizeof(int)), *displs = xmalloc((size_t)g->size * sizeof(int));
	shard_counts(g, n, counts, displs);
	watch_begin(g, "all-gather");
	DIST_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_FLOAT, COMM(g)));
	watch_end(g);
	free(counts);
	free(displs);
	g->bytes += (uint64_t)(g->size - 1) * n * sizeof(float) / (uint64_t)g->size;
	g->calls++;
}

/* Each rank's intersection of its shard of total with [a, b): counts and
 * displacements relative to a; false when a count would not fit an int. */
static bool part_counts(const struct dist_group *g, size_t total, size_t a, size_t b, int *counts, int *displs)
{
	for (int r = 0; r < g->size; r++) {
		size_t lo, hi;
		dist_shard(total, g->size, r, &lo, &hi);
		size_t x = lo > a ? lo : a, y = hi < b ? hi : b;
		if (y > x && y - x > (size_t)INT_MAX)
			return false;
		counts[r] = (int)(y > x ? y - x : 0);
		displs[r] = (int)(y > x ? x - a : 0);
	}
	return true;
}

void dist_reduce_scatter_part_f32(struct dist_group *g, const float *in, size_t total, size_t a, size_t b,
				  float *out)
{
	if (a >= b)
		return;
	if (b - a > DIST_PIECE) { /* MPI's int counts: in pieces, each rank's part of each */
		size_t lo, hi;
		dist_shard(total, g->size, g->rank, &lo, &hi);
		for (size_t pa = a; pa < b; pa += DIST_PIECE) {
			size_t pb = b - pa < DIST_PIECE ? b : pa + DIST_PIECE;
			size_t x = lo > pa ? lo : pa, x0 = lo > a ? lo : a;
			dist_reduce_scatter_part_f32(g, in + (pa - a), total, pa, pb, out + (x > x0 ? x - x0 : 0));
		}
		return;
	}
	enum route w = route2(g, in, out, "reduce-scatter");
	if (w == VIA_NCCL) {
		nccl_finish(g, "reduce-scatter", dist_nccl_reduce_scatter_part(g, in, total, a, b, out));
		count(g, (uint64_t)(g->size - 1) * (b - a) * sizeof(float) / (uint64_t)g->size);
		return;
	}
	if (g->size <= 1) {
		if (w == VIA_ALONE)
			dist_nccl_copy(out, in, (b - a) * sizeof(float));
		else
			memcpy(out, in, (b - a) * sizeof(float));
		return;
	}
	int *counts = xmalloc((size_t)g->size * 2 * sizeof(int));
	if (!part_counts(g, total, a, b, counts, counts + g->size))
		BUG("reduce-scatter part of %zu elements", b - a);
	watch_begin(g, "reduce-scatter");
	DIST_CHECK(MPI_Reduce_scatter(in, out, counts, MPI_FLOAT, MPI_SUM, COMM(g)));
	watch_end(g);
	g->bytes += (uint64_t)(g->size - 1) * (b - a) * sizeof(float) / (uint64_t)g->size;
	g->calls++;
	free(counts);
}

void dist_allgather_part(struct dist_group *g, const void *shard, size_t esize, size_t total, size_t a, size_t b,
			 void *dst)
{
	if (a >= b)
		return;
	if (esize != 2 && esize != 4)
		BUG("all-gather of %zu-byte elements", esize);
	size_t lo, hi;
	dist_shard(total, g->size, g->rank, &lo, &hi);
	if (b - a > DIST_PIECE) {
		for (size_t pa = a; pa < b; pa += DIST_PIECE) { /* each piece finds its part in the shard */
			size_t pb = b - pa < DIST_PIECE ? b : pa + DIST_PIECE;
			dist_allgather_part(g, shard, esize, total, pa, pb, (char *)dst + (pa - a) * esize);
		}
		return;
	}
	size_t x = lo > a ? lo : a, y = hi < b ? hi : b; /* this rank's part */
	const char *mine = (const char *)shard + (y > x ? x - lo : 0) * esize;
	enum route w = route2(g, dst, mine, "all-gather");
	if (w == VIA_NCCL) {
		nccl_finish(g, "all-gather", dist_nccl_allgather_part(g, mine, esize, total, a, b, dst));
		count(g, (uint64_t)(g->size - 1) * (b - a) * esize / (uint64_t)g->size);
		return;
	}
	if (g->size <= 1) {
		if (w == VIA_ALONE)
			dist_nccl_copy(dst, mine, (b - a) * esize);
		else
			memcpy(dst, mine, (b - a) * esize);
		return;
	}
	int *counts = xmalloc((size_t)g->size * 2 * sizeof(int)), *displs = counts + g->size;
	if (!part_counts(g, total, a, b, counts, displs))
		BUG("all-gather part of %zu elements", b - a);
	watch_begin(g, "all-gather");
	MPI_Datatype t = esize == 2 ? MPI_UINT16_T : MPI_FLOAT;
	DIST_CHECK(MPI_Allgatherv(mine, counts[g->rank], t, dst, counts, displs, t, COMM(g)));
	watch_end(g);
	g->bytes += (uint64_t)(g->size - 1) * (b - a) * esize / (uint64_t)g->size;
	g->calls++;
	free(counts);
}

void dist_gather_f32(struct dist_group *g, float *buf, size_t n)
{
	if (!n)
		return;
	if (route(g, buf, "gather") == VIA_NCCL) {
		size_t lo, hi;
		dist_shard(n, g->size, g->rank, &lo, &hi);
		nccl_finish(g, "gather", dist_nccl_gather_shards(g, buf, n));
		count(g, g->rank != 0 ? (hi - lo) * sizeof(float) : 0);
		return;
	}
	if (g->size <= 1)
		return;
	int *counts = xmalloc((size_t)g->size * sizeof(int)), *displs = xmalloc((size_t)g->size * sizeof(int));
	shard_counts(g, n, counts, displs);
	watch_begin(g, "gather");
	if (g->rank == 0)
		DIST_CHECK(MPI_Gatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, counts, displs, MPI_FLOAT, 0, COMM(g)));
	else
		DIST_CHECK(MPI_Gatherv(buf + displs[g->rank], counts[g->rank], MPI_FLOAT, NULL, NULL, NULL, MPI_FLOAT,
				       0, COMM(g)));
	watch_end(g);
	g->bytes += (uint64_t)counts[g->rank] * sizeof(float) * (g->rank != 0);
	g->calls++;
	free(counts);
	free(displs);
}

void dist_gather_equal_f32(struct dist_group *g, const float *in, size_t n, float *out)
{
	/* out is only used on the root */
	enum route w = route2(g, in, g->rank == 0 ? out : NULL, "gather");
	if (w == VIA_NCCL) {
		nccl_finish(g, "gather", dist_nccl_gather_equal(g, in, n, out));
		count(g, g->rank ? n * sizeof(float) : 0);
		return;
	}
	if (g->size <= 1) {
		if (w == VIA_ALONE)
			dist_nccl_copy(out, in, n * sizeof(float));
		else
			memcpy(out, in, n * sizeof(float));
		return;
	}
	if (n > INT_MAX)
		die("a gather of %zu elements is beyond MPI's int counts", n);
	watch_begin(g, "gather");
	DIST_CHECK(MPI_Gather(in, (int)n, MPI_FLOAT, out, (int)n, MPI_FLOAT, 0, COMM(g)));
	watch_end(g);
	g->bytes += g->rank ? n * sizeof(float) : 0;
	g->calls++;
}

void dist_allgather_equal_f32(struct dist_group *g, const float *in, size_t n, float *out)
{
	enum route w = route2(g, in, out, "all-gather");
	if (w == VIA_NCCL) {
		nccl_finish(g, "all-gather", dist_nccl_allgather_equal(g, in, n, out));
		count(g, (uint64_t)(g->size - 1) * n * sizeof(float));
		return;
	}
	if (g->size <= 1) {
		if (w == VIA_ALONE)
			dist_nccl_copy(out, in, n * sizeof(float));
		else
			memcpy(out, in, n * sizeof(float));
		return;
	}
	if (n > INT_MAX)
		die("an all-gather of %zu elements per rank is beyond MPI's int counts", n);
	watch_begin(g, "all-gather");
	DIST_CHECK(MPI_Allgather(in, (int)n, MPI_FLOAT, out, (int)n, MPI_FLOAT, COMM(g)));
	watch_end(g);
	g->bytes += (uint64_t)(g->size - 1) * n * sizeof(float);
	g->calls++;
}

void dist_reduce_scatter_equal_f32(struct dist_group *g, const float *in, size_t n, float *out)
{
	enum route w = route2(g, in, out, "reduce-scatter");
	if (w == VIA_NCCL) {
		nccl_finish(g, "reduce-scatter", dist_nccl_reduce_scatter_equal(g, in, n, out));
		count(g, (uint64_t)(g->size - 1) * n * sizeof(float));
		return;
	}
	if (g->size <= 1) {
		if (w == VIA_ALONE)
			dist_nccl_copy(out, in, n * sizeof(float));
		else
			memcpy(out, in, n * sizeof(float));
		return;
	}
	if (n > INT_MAX)
		die("a reduce-scatter of %zu elements per rank is beyond MPI's int counts", n);
	watch_begin(g, "reduce-scatter");
	DIST_CHECK(MPI_Reduce_scatter_block(in, out, (int)n, MPI_FLOAT, MPI_SUM, COMM(g)));
	watch_end(g);
	g->bytes += (uint64_t)(g->size - 1) * n * sizeof(float);
	g->calls++;
}

void dist_alltoallv_f32(struct dist_group *g, const float *in, const size_t *scount, float *out,
			const size_t *rcount)
{
	enum route w = route2(g, in, out, "all-to-all");
	uint64_t sent = 0;
	for (int r = 0; r < g->size; r++)
		sent += r == g->rank ? 0 : scount[r] * sizeof(float);
	if (w == VIA_NCCL) {
		nccl_finish(g, "all-to-all", dist_nccl_alltoallv(g, in, scount, out, rcount));
		count(g, sent);
		return;
	}
	if (g->size <= 1) {
		if (scount[0] != rcount[0])
			BUG("an all-to-all of one rank sends %zu floats to itself and receives %zu", scount[0], rcount[0]);
		if (w == VIA_ALONE)
			dist_nccl_copy(out, in, scount[0] * sizeof(float));
		else
			memmove(out, in, scount[0] * sizeof(float));
		return;
	}
	int *c = xmalloc(4 * (size_t)g->size * sizeof(int));
	size_t so = 0, ro = 0;
	for (int r = 0; r < g->size; r++) {
		if (scount[r] > INT_MAX || rcount[r] > INT_MAX || so > INT_MAX || ro > INT_MAX)
			die("an all-to-all of %zu floats is beyond MPI's int counts", so > ro ? so : ro);
		c[r] = (int)scount[r];
		c[g->size + r] = (int)so;
		c[2 * g->size + r] = (int)rcount[r];
		c[3 * g->size + r] = (int)ro;
		so += scount[r];
		ro += rcount[r];
	}
	watch_begin(g, "all-to-all");
	DIST_CHECK(MPI_Alltoallv(in, c, c + g->size, MPI_FLOAT, out, c + 2 * g->size, c + 3 * g->size, MPI_FLOAT,
				 COMM(g)));
	watch_end(g);
	free(c);
	g->bytes += sent;
	g->calls++;
}

void dist_allgather_i32(struct dist_group *g, const int32_t *in, size_t n, int32_t *out)
{
	if (route2(g, in, out, "all-gather") != VIA_MPI)
		BUG("dist_allgather_i32 on device memory (%s group)", g->name);
	if (g->size <= 1) {
		memmove(out, in, n * sizeof(int32_t));
		return;
	}
	if (n > INT_MAX)
		die("an all-gather of %zu elements per rank is beyond MPI's int counts", n);
	watch_begin(g, "all-gather");
	DIST_CHECK(MPI_Allgather(in, (int)n, MPI_INT32_T, out, (int)n, MPI_INT32_T, COMM(g)));
	watch_end(g);
	g->bytes += (uint64_t)(g->size - 1) * n * sizeof(int32_t);
	g->calls++;
}

/* ---- point-to-point ---- */

static int p2p_count(size_t n, const char *what)
{
	if (n > INT_MAX)
		die("a %s of %zu elements is beyond MPI's int counts", what, n);
	return (int)n;
}

void dist_isend_f32(struct dist_group *g, const float *buf, size_t n, int dest, int tag, struct dist_req *r)
{
	*r = (struct dist_req){ .g = g, .what = "send" };
	if (!n)
		return;
	if (route(g, buf, "send") == VIA_NCCL) {
		r->dev = dist_nccl_send(g, buf, n * sizeof(float), dest, tag);
		count(g, n * sizeof(float));
		return;
	}
	if (g->size <= 1)
		return;
	MPI_Request *q = xmalloc(sizeof(*q));
	DIST_CHECK(MPI_Isend(buf, p2p_count(n, "send"), MPI_FLOAT, dest, tag, COMM(g), q));
	r->req = q;
	r->nreq = 1;
	g->bytes += n * sizeof(float);
	g->calls++;
}

void dist_irecv_f32(struct dist_group *g, float *buf, size_t n, int src, int tag, struct dist_req *r)
{
	*r = (struct dist_req){ .g = g, .what = "receive" };
	if (!n)
		return;
	if (route(g, buf, "receive") == VIA_NCCL) {
		r->dev = dist_nccl_recv(g, buf, n * sizeof(float), src, tag);
		return;
	}
	if (g->size <= 1)
		return;
	MPI_Request *q = xmalloc(sizeof(*q));
	DIST_CHECK(MPI_Irecv(buf, p2p_count(n, "receive"), MPI_FLOAT, src, tag, COMM(g), q));
	r->req = q;
	r->nreq = 1;
}

/* An in-place MPI reduce-scatter leaves each piece's result at the start
 * of the piece; it moves to the rank's own place when the request is done. */
struct dist_moves {
	int n;
	struct { float *dst, *src; size_t len; } m[];
};

static void req_done(struct dist_req *r)
{
	struct dist_moves *mv = r->moves;
	for (int i = 0; mv && i < mv->n; i++)
		if (mv->m[i].dst != mv->m[i].src && mv->m[i].len)
			memmove(mv->m[i].dst, mv->m[i].src, mv->m[i].len * sizeof(float));
	free(mv);
	r->moves = NULL;
	free(r->req);
	free(r->extra);
	r->req = NULL;
	r->extra = NULL;
	r->nreq = 0;
}

void dist_wait(struct dist_req *r)
{
	if (r->dev) {
		watch_begin(r->g, r->what);
		nccl_spin(r->dev);
		watch_end(r->g);
		dist_nccl_free(r->dev);
		r->dev = NULL;
	}
	if (!r->req)
		return;
	watch_begin(r->g, r->what);
	/* Spin a little, then poll with short naps: a stage waiting out the
	 * pipeline bubble leaves its core to the ranks that compute (nodes with
	 * more ranks than cores, CI), at the price of answering up to ~0.1 ms
	 * late. (Non-blocking collectives also progress only inside MPI_Test.) */
	int done = 0;
	for (long i = 0; !done; i++) {
		DIST_CHECK(MPI_Testall(r->nreq, r->req, &done, MPI_STATUSES_IGNORE));
		if (!done && i >= 2000) {
			struct timespec nap = { 0, 50 * 1000 };
			nanosleep(&nap, NULL);
		}
	}
	watch_end(r->g);
	req_done(r);
}

bool dist_test(struct dist_req *r)
{
	if (r->dev) {
		if (!dist_nccl_poll(r->dev, false))
			return false;
		dist_nccl_free(r->dev);
		r->dev = NULL;
	}
	if (!r->req)
		return true;
	int done = 0;
	DIST_CHECK(MPI_Testall(r->nreq, r->req, &done, MPI_STATUSES_IGNORE));
	if (done)
		req_done(r);
	return done != 0;
}

void dist_sendrecv_f32(struct dist_group *g, const float *send, size_t ns, int dest, float *recv, size_t nr,
		       int src, int tag)
{
	enum route w = route2(g, send, recv, "send-receive");
	if (w == VIA_NCCL) {
		/* two channels (or a matched pair to itself): neither waits for the other */
		struct dist_nccl_op *s = ns ? dist_nccl_send(g, send, ns * sizeof(float), dest, tag) : NULL;
		struct dist_nccl_op *q = nr ? dist_nccl_recv(g, recv, nr * sizeof(float), src, tag) : NULL;
		if (q)
			nccl_finish(g, "send-receive", q);
		if (s)
			nccl_finish(g, "send-receive", s);
		count(g, ns * sizeof(float));
		return;
	}
	if (g->size <= 1) {
		if (ns != nr)
			BUG("send of %zu to myself received as %zu", ns, nr);
		if (w == VIA_ALONE)
			dist_nccl_copy(recv, send, ns * sizeof(float));
		else
			memmove(recv, send, ns * sizeof(float));
		return;
	}
	watch_begin(g, "send-receive");
	DIST_CHECK(MPI_Sendrecv(send, p2p_count(ns, "send"), MPI_FLOAT, dest, tag, recv, p2p_count(nr, "receive"),
				MPI_FLOAT, src, tag, COMM(g), MPI_STATUS_IGNORE));
	watch_end(g);
	g->bytes += ns * sizeof(float);
	g->calls++;
}

/* ---- blocking byte transfers (a checkpoint's tensors to the writer) ---- */

void dist_send_bytes(struct dist_group *g, const void *buf, size_t n, int dest, int tag)
{
	if (!n)
		return;
	if (route(g, buf, "send") == VIA_NCCL) {
		nccl_finish(g, "send", dist_nccl_send(g, buf, n, dest, tag));
		count(g, n);
		return;
	}
	if (g->size <= 1)
		return;
	for (size_t off = 0; off < n; off += DIST_PIECE) {
		size_t m = n - off < DIST_PIECE ? n - off : DIST_PIECE;
		watch_begin(g, "send");
		DIST_CHECK(MPI_Send((const char *)buf + off, (int)m, MPI_BYTE, dest, tag, COMM(g)));
		watch_end(g);
	}
	g->bytes += n;
	g->calls++;
}

void dist_recv_bytes(struct dist_group *g, void *buf, size_t n, int src, int tag)
{
	if (!n)
		return;
	if (route(g, buf, "receive") == VIA_NCCL) {
		nccl_finish(g, "receive", dist_nccl_recv(g, buf, n, src, tag)); /* the size is checked there */
		return;
	}
	if (g->size <= 1)
		return;
	for (size_t off = 0; off < n; off += DIST_PIECE) {
		size_t m = n - off < DIST_PIECE ? n - off : DIST_PIECE;
		MPI_Status st;
		int got = 0;
		watch_begin(g, "receive");
		DIST_CHECK(MPI_Recv((char *)buf + off, (int)m, MPI_BYTE, src, tag, COMM(g), &st));
		watch_end(g);
		DIST_CHECK(MPI_Get_count(&st, MPI_BYTE, &got));
		if ((size_t)got != m)
			BUG("%s group: a receive of %zu bytes from rank %d (tag %d) got a message of %d", g->name, m,
			    src, tag, got);
	}
}

/* ---- non-blocking collectives ---- */

void dist_iallreduce_sum_f32(struct dist_group *g, float *buf, size_t n, struct dist_req *r)
{
	*r = (struct dist_req){ .g = g, .what = "all-reduce" };
	if (!n)
		return;
	if (route(g, buf, "all-reduce") == VIA_NCCL) {
		r->dev = dist_nccl_allreduce(g, buf, n, DIST_NCCL_F32, DIST_NCCL_SUM);
		count(g, 2 * (uint64_t)(g->size - 1) * n * sizeof(float) / (uint64_t)g->size);
		return;
	}
	if (g->size <= 1)
		return;
	/* in pieces MPI's int counts can express */
	int k = (int)((n + DIST_PIECE - 1) / DIST_PIECE);
	MPI_Request *q = xmalloc((size_t)k * sizeof(*q));
	for (int i = 0; i < k; i++) {
		size_t off = (size_t)i * DIST_PIECE, m = n - off < DIST_PIECE ? n - off : DIST_PIECE;
		DIST_CHECK(MPI_Iallreduce(MPI_IN_PLACE, buf + off, (int)m, MPI_FLOAT, MPI_SUM, COMM(g), &q[i]));
	}
	r->req = q;
	r->nreq = k;
	g->bytes += 2 * (uint64_t)(g->size - 1) * n * sizeof(float) / (uint64_t)g->size;
	g->calls++;
}

void dist_ireduce_scatter_range_f32(struct dist_group *g, float *buf, size_t total, size_t a, size_t b,
				    float *scratch, struct dist_req *r)
{
	*r = (struct dist_req){ .g = g, .what = "reduce-scatter" };
	if (a >= b)
		return;
	if (route2(g, buf, scratch, "reduce-scatter") == VIA_NCCL) {
		r->dev = dist_nccl_reduce_scatter_range(g, buf, total, a, b, scratch, false);
		count(g, (uint64_t)(g->size - 1) * (b - a) * sizeof(float) / (uint64_t)g->size);
		return;
	}
	if (g->size <= 1)
		return;
	size_t mylo, myhi;
	dist_shard(total, g->size, g->rank, &mylo, &myhi);
	/* pieces of at most DIST_PIECE elements, so every count fits an int;
	 * MPI reads each piece's counts until it completes */
	int k = (int)((b - a + DIST_PIECE - 1) / DIST_PIECE);
	int *counts = xmalloc((size_t)k * (size_t)g->size * sizeof(int));
	MPI_Request *q = xmalloc((size_t)k * sizeof(*q));
	struct dist_moves *mv = NULL;
	if (!scratch) {
		mv = xcalloc(1, sizeof(*mv) + (size_t)k * sizeof(mv->m[0]));
		mv->n = k;
	}
	for (int i = 0; i < k; i++) {
		size_t pa = a + (size_t)i * DIST_PIECE, pb = b - pa < DIST_PIECE ? b : pa + DIST_PIECE;
		int *c = counts + (size_t)i * g->size;
		for (int j = 0; j < g->size; j++) {
			size_t lo, hi;
			dist_shard(total, g->size, j, &lo, &hi);
			size_t x = lo > pa ? lo : pa, y = hi < pb ? hi : pb;
			c[j] = (int)(y > x ? y - x : 0);
		}
		size_t mine = mylo > pa ? mylo : pa; /* where my part of the piece starts */
		if (scratch) {
			float *dst = scratch + (mine > mylo ? mine - mylo : 0);
			DIST_CHECK(MPI_Ireduce_scatter(buf + pa, dst, c, MPI_FLOAT, MPI_SUM, COMM(g), &q[i]));
		} else { /* MPI leaves the result at the piece's start */
			mv->m[i].dst = buf + mine;
			mv->m[i].src = buf + pa;
			mv->m[i].len = (size_t)c[g->rank];
			DIST_CHECK(MPI_Ireduce_scatter(MPI_IN_PLACE, buf + pa, c, MPI_FLOAT, MPI_SUM, COMM(g), &q[i]));
		}
	}
	r->moves = mv;
	r->req = q;
	r->nreq = k;
	r->extra = counts;
	g->bytes += (uint64_t)(g->size - 1) * (b - a) * sizeof(float) / (uint64_t)g->size;
	g->calls++;
}

/* The all-gather of a range, for elements of esize bytes (MPI type t). */
static void iallgather_range(struct dist_group *g, void *buf, size_t esize, MPI_Datatype t, size_t total, size_t a,
			     size_t b, struct dist_req *r)
{
	*r = (struct dist_req){ .g = g, .what = "all-gather" };
	if (a >= b)
		return;
	if (route(g, buf, "all-gather") == VIA_NCCL) {
		r->dev = dist_nccl_allgather_range(g, buf, esize, total, a, b);
		count(g, (uint64_t)(g->size - 1) * (b - a) * esize / (uint64_t)g->size);
		return;
	}
	if (g->size <= 1)
		return;
	/* pieces of at most DIST_PIECE elements; per piece the counts and
	 * displacements (relative to the piece) of every rank's part */
	int k = (int)((b - a + DIST_PIECE - 1) / DIST_PIECE);
	int *cd = xmalloc((size_t)k * 2 * (size_t)g->size * sizeof(int));
	MPI_Request *q = xmalloc((size_t)k * sizeof(*q));
	for (int i = 0; i < k; i++) {
		size_t pa = a + (size_t)i * DIST_PIECE, pb = b - pa < DIST_PIECE ? b : pa + DIST_PIECE;
		int *counts = cd + (size_t)i * 2 * g->size, *displs = counts + g->size;
		for (int j = 0; j < g->size; j++) {
			size_t lo, hi;
			dist_shard(total, g->size, j, &lo, &hi);
			size_t x = lo > pa ? lo : pa, y = hi < pb ? hi : pb;
			counts[j] = (int)(y > x ? y - x : 0);
			displs[j] = (int)(y > x ? x - pa : 0);
		}
		DIST_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, (char *)buf + pa * esize, counts, displs,
					   t, COMM(g), &q[i]));
	}
	r->req = q;
	r->nreq = k;
	r->extra = cd;
	g->bytes += (uint64_t)(g->size - 1) * (b - a) * esize / (uint64_t)g->size;
	g->calls++;
}

void dist_iallgather_range_f32(struct dist_group *g, float *buf, size_t total, size_t a, size_t b,
			       struct dist_req *r)
{
	iallgather_range(g, buf, sizeof(float), MPI_FLOAT, total, a, b, r);
}

void dist_iallgather_range_u16(struct dist_group *g, uint16_t *buf, size_t total, size_t a, size_t b,
			       struct dist_req *r)
{
	iallgather_range(g, buf, sizeof(uint16_t), MPI_UINT16_T, total, a, b, r);
}

/* The end of the piece of [a, b) that starts at element pa: at most
 * DIST_PIECE elements, and at most DIST_PIECE bytes so that every byte
 * count and displacement fits an int (an element alone larger is a BUG). */
static size_t mapped_piece_end(const struct dist_bytemap *map, size_t pa, size_t b)
{
	const size_t base = map->at(map->ctx, pa);
	size_t lo = pa + 1, hi = b - pa < DIST_PIECE ? b : pa + DIST_PIECE;

	if (map->at(map->ctx, hi) - base <= DIST_PIECE)
		return hi;
	if (map->at(map->ctx, lo) - base > DIST_PIECE)
		BUG("all-gather: element %zu takes %zu bytes, more than a piece", pa, map->at(map->ctx, lo) - base);
	while (hi - lo > 1) { /* lo fits, hi does not */
		size_t mid = lo + (hi - lo) / 2;
		if (map->at(map->ctx, mid) - base <= DIST_PIECE)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

void dist_iallgather_range_mapped(struct dist_group *g, void *buf, size_t total, size_t a, size_t b,
				  const struct dist_bytemap *map, struct dist_req *r)
{
	*r = (struct dist_req){ .g = g, .what = "all-gather" };
	if (a >= b)
		return;
	if (!map || !map->at || b > total)
		BUG("all-gather of elements [%zu, %zu) of %zu on the %s group: %s", a, b, total, g->name,
		    b > total ? "past the end" : "no byte map");
	const size_t bytes = map->at(map->ctx, b) - map->at(map->ctx, a);
	if (route(g, buf, "all-gather") == VIA_NCCL) {
		r->dev = dist_nccl_allgather_range_mapped(g, buf, total, a, b, map);
		count(g, (uint64_t)(g->size - 1) * bytes / (uint64_t)g->size);
		return;
	}
	if (g->size <= 1)
		return;
	/* the pieces' ends first (their number is not known before), then per
	 * piece the byte counts and displacements (relative to the piece's
	 * first byte) of every rank's part, which MPI reads until it completes */
	size_t *ends = NULL;
	int k = 0, cap = 0;
	for (size_t pa = a; pa < b; pa = ends[k - 1]) {
		if (k == cap) {
			cap = cap ? 2 * cap : 4;
			ends = xrealloc(ends, (size_t)cap * sizeof(*ends));
		}
		ends[k++] = mapped_piece_end(map, pa, b);
	}
	int *cd = xmalloc((size_t)k * 2 * (size_t)g->size * sizeof(int));
	MPI_Request *q = xmalloc((size_t)k * sizeof(*q));
	for (int i = 0; i < k; i++) {
		size_t pa = i ? ends[i - 1] : a, pb = ends[i];
		size_t base = map->at(map->ctx, pa);
		int *counts = cd + (size_t)i * 2 * g->size, *displs = counts + g->size;
		for (int j = 0; j < g->size; j++) {
			size_t lo, hi;
			dist_shard(total, g->size, j, &lo, &hi);
			size_t x = lo > pa ? lo : pa, y = hi < pb ? hi : pb;
			size_t bx = y > x ? map->at(map->ctx, x) : base;
			counts[j] = (int)(y > x ? map->at(map->ctx, y) - bx : 0);
			displs[j] = (int)(bx - base);
		}
		DIST_CHECK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, (char *)buf + base, counts, displs,
					   MPI_BYTE, COMM(g), &q[i]));
	}
	free(ends);
	r->req = q;
	r->nreq = k;
	r->extra = cd;
	g->bytes += (uint64_t)(g->size - 1) * bytes / (uint64_t)g->size;
	g->calls++;
}
