/*
 * pipeline.c - see pipeline.h.
 */
#include "train/pipeline.h"

#include <math.h>
#include <string.h>
#include <unistd.h>

#include "base/error.h"
#include "base/xalloc.h"
#include "train/trainer.h"

/* Dropout key of one micro-batch: a function of (seed, iteration, micro-batch)
 * only, so a resumed run draws the same masks. splitmix64 finaliser. */
static uint64_t micro_seed(uint64_t seed, int64_t iteration, int64_t micro)
{
	uint64_t z = seed * 0x9E3779B97F4A7C15ULL + (uint64_t)iteration * 0xD1B54A32D192ED03ULL + (uint64_t)micro;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

/* Megatron's pretraining sampler: each global batch is cut into micro-batches
 * of mbs x dp consecutive samples, and data-parallel rank r takes the r-th
 * mbs of each. Dropout is keyed by that global micro-batch number, so any
 * data-parallel size draws the masks a single rank would. */
static uint64_t micro_first(const struct trainer *t, int64_t consumed, int64_t mb)
{
	int64_t dp = t->dist.dp.size, r = t->dist.dp.rank;
	return (uint64_t)(consumed + (mb * dp + r) * t->mbs);
}

static int64_t micro_global(const struct trainer *t, int64_t mb)
{
	return mb * t->dist.dp.size + t->dist.dp.rank;
}

/* Message tags: what kind, for which chunk of the receiving rank. Between two
 * ranks, messages of one tag arrive in the order sent, and both sides run a
 * chunk's micro-batches in increasing order. */
static int tag_of(int kind, int chunk)
{
	return 2 * chunk + kind;
}

/* Finished sends give their staging copies back to the spares. */
static void reap(struct trainer *t, bool wait)
{
	size_t keep = 0;
	for (size_t i = 0; i < t->nsends; i++) {
		if (wait)
			dist_wait(&t->sends[i].req);
		if (wait || dist_test(&t->sends[i].req)) {
			if (t->nspare == t->cap_spare)
				xgrow(&t->spare, &t->cap_spare, t->nspare + 1, sizeof(*t->spare));
			t->spare[t->nspare++] = t->sends[i];
			continue;
		}
		t->sends[keep++] = t->sends[i];
	}
	t->nsends = keep;
}

void pipeline_drain(struct trainer *t)
{
	reap(t, true);
}

/* Sends still in flight (a failed run stops without waiting for them) keep
 * their buffers: the process is about to end. */
void pipeline_free(struct trainer *t)
{
	for (size_t i = 0; i < t->nspare; i++)
		t->k->free(t->spare[i].buf);
	free(t->spare);
	free(t->sends);
	t->spare = NULL;
	t->sends = NULL;
	t->nspare = t->cap_spare = t->nsends = t->cap_sends = 0;
}

/* A copy of x goes to pipeline rank dest: the source may be overwritten
 * (the next backward's gradient, a reused slot) before the receiver takes it.
 * The copy stays on the backend (device to device on a GPU, so the receiver,
 * which takes it straight into backend memory, sees the same kind of buffer)
 * in a staging buffer that finished sends hand on: every send of a run has
 * one of a few sizes, so after the first iteration none allocates. */
static void send_copy(struct trainer *t, const float *x, size_t n, int dest, int tag)
{
	reap(t, false);
	if (t->nsends == t->cap_sends)
		xgrow(&t->sends, &t->cap_sends, t->nsends + 1, sizeof(*t->sends));
	float *buf = NULL;
	for (size_t i = 0; i < t->nspare && !buf; i++)
		if (t->spare[i].n == n) {
			buf = t->spare[i].buf;
			t->spare[i] = t->spare[--t->nspare];
		}
	if (!buf)
		buf = t->k->alloc(n * sizeof(float));
	t->k->copy(buf, x, n * sizeof(float));
	t->sends[t->nsends].n = n;
	t->sends[t->nsends].buf = buf;
	dist_isend_f32(&t->dist.pp, buf, n, dest, tag, &t->sends[t->nsends].req);
	t->nsends++;
}

static void recv_into(struct trainer *t, float *x, size_t n, int src, int tag)
{
	struct dist_req r;
	dist_irecv_f32(&t->dist.pp, x, n, src, tag, &r);
	dist_wait(&r);
}

/* The schedule's timers count training passes only (Megatron drops its
 * timers during evaluate); the batch generator's counts always. */
static void tstart(struct trainer *t, const char *name, bool train)
{
	if (train)
		timers_start(&t->timers, name, 2);
}

static int model_pos(const void *m, int j)
{
	return gpt_global_pos(m, j);
}

/* --check-for-spiky-loss (health.h). Megatron then reruns the step and,
 * finding the same loss (megac's computation is deterministic, so a rerun
 * always would), goes on. */
static void spiky_check(struct trainer *t, int micro, double loss)
{
	bool sampled;
	bool spiky = health_spiky(&t->spiky, loss, &sampled);
	if (sampled)
		info("--check-for-spiky-loss: the largest of the first %d micro-batch losses is %g", HEALTH_SPIKY_SAMPLES,
		     t->spiky.max);
	if (spiky)
		warning("iteration %lld, micro-batch %d: spiky loss %g, at least %g times the largest of the first %d "
			"(%g); a rerun would give the same loss, so training goes on", (long long)t->iteration + 1, micro,
			loss, HEALTH_SPIKY_FACTOR, HEALTH_SPIKY_SAMPLES, t->spiky.max);
}

static int forward(struct trainer *t, const struct pp_sched *s, const struct pp_op *o, int split,
		   int64_t consumed, bool train, double scale, double *num, double *den)
{
	struct gpt_model *m = &t->model;
	struct batch *b = &t->batch;
	const struct gpt_chunk *ch = &m->chunks[o->chunk];
	int slot = o->micro % ch->nslots;
	size_t nh = (size_t)m->Nl * m->c.h;
	int peer, pv;
	timers_start(&t->timers, "batch-generator", 2);
	uint64_t first = micro_first(t, consumed, o->micro);
	int got = t->a->sft ? batch_get_sft(b, &t->sft, t->sft_sess, split, first, t->cfg.Vp)
			    : batch_get(b, &t->data, split, first, t->cfg.Vp);
	timers_stop(&t->timers, "batch-generator");
	if (got < 0)
		return -1;
	/* the micro-batch's mask sum: the loss gradient's denominator covers
	 * every position, those of the other context-parallel ranks too */
	size_t nfull = (size_t)b->B * b->S;
	double mfull = 0;
	for (size_t i = 0; i < nfull; i++)
		mfull += b->loss_mask[i];
	/* multi-token prediction rolls the whole micro-batch for each depth,
	 * then takes this rank's positions */
	m->mtp_in = (struct gpt_mtp_input){ b->tokens, b->labels, t->own_positions ? b->positions : NULL,
					    b->loss_mask };
	/* document ids stay the whole sequence's (ring attention masks every rank's keys) */
	const int32_t *doc = b->doc;
	if (m->par.cp) {
		batch_slice(&t->cp_batch, b, model_pos, m);
		b = &t->cp_batch;
	}
	if (pp_sched_prev(s, o->chunk, &peer, &pv)) {
		tstart(t, "forward-recv", train);
		recv_into(t, gpt_chunk_input(m, o->chunk, slot), nh, peer, tag_of(0, o->chunk));
		timers_stop(&t->timers, "forward-recv");
	}
	dist_watchdog_phase(&t->dist, train ? "the forward pass of micro-batch" : "an evaluation's forward pass of micro-batch",
			    o->micro);
	if (train && t->iteration + 1 == t->fault_hang_iter && t->dist.rank == t->fault_hang_rank)
		for (;;) /* the injected hang: only the hang detector ends it */
			sleep(1);
	tstart(t, "forward-compute", train);
	const float *out = gpt_forward_chunk(m, o->chunk, slot, b->tokens, b->labels,
					     t->own_positions ? b->positions : NULL, doc,
					     micro_seed(t->seed, t->iteration, micro_global(t, o->micro)), train,
					     t->losses);
	timers_stop(&t->timers, "forward-compute");
	if (!ch->post) {
		if (pp_sched_next(s, o->chunk, &peer, &pv)) {
			tstart(t, "forward-send", train);
			send_copy(t, out, nh, peer, tag_of(0, pv));
			timers_stop(&t->timers, "forward-send");
		}
		return 0;
	}
	/* Megatron sums loss*mask and mask in fp32 on the device; double here. */
	size_t n = (size_t)b->B * b->S;
	double lsum = 0, msum = 0;
	for (size_t i = 0; i < n; i++) {
		lsum += (double)t->losses[i] * b->loss_mask[i];
		msum += b->loss_mask[i];
	}
	if (!train && t->a->sft) {
		/* Megatron's SFT evaluation averages the micro-batches' own token
		 * means; a micro-batch counts once over its context-parallel ranks */
		*num += lsum / fmax(1.0, mfull);
		*den += 1.0 / (double)t->dist.layout.cp;
	} else {
		*num += lsum;
		*den += msum;
	}
	if (train && t->a->check_for_spiky_loss && msum > 0)
		spiky_check(t, o->micro, lsum / msum);
	if (train) {
		/* The gradient is the mean over micro-batches of each micro-batch's
		 * token-mean loss (docs/parallel.md), times the loss scale; kept for
		 * the slot's backward. With --calculate-per-token-loss it is the sum,
		 * which the trainer divides by the iteration's token count. */
		double w = t->a->calculate_per_token_loss ? scale : /* divided by the global token count later */
								  scale / (fmax(1.0, mfull) * (double)t->num_micro);
		float *dl = t->pp_dloss[slot];
		for (size_t i = 0; i < n; i++)
			dl[i] = (float)(b->loss_mask[i] * w);
	}
	return 0;
}

static void param_needed(void *ctx, int param)
{
	struct trainer *t = ctx;
	for (int i = 0; i < t->nparts; i++)
		param_gather_need(&t->part[i].pg, param);
}

static void grad_ready(void *ctx, int param)
{
	struct trainer *t = ctx;
	for (int i = 0; i < t->nparts; i++)
		grad_sync_param_ready(&t->part[i].gs, param);
}

/* last: this is the chunk's last backward of the iteration, which makes its
 * parameters' gradients final */
static void backward(struct trainer *t, const struct pp_sched *s, const struct pp_op *o, bool last)
{
	struct gpt_model *m = &t->model;
	const struct gpt_chunk *ch = &m->chunks[o->chunk];
	int slot = o->micro % ch->nslots;
	size_t nh = (size_t)m->Nl * m->c.h;
	int peer, pc;
	if (!ch->post && pp_sched_next(s, o->chunk, &peer, &pc)) {
		timers_start(&t->timers, "backward-recv", 2);
		recv_into(t, gpt_chunk_grad_input(m), nh, peer, tag_of(1, o->chunk));
		timers_stop(&t->timers, "backward-recv");
	}
	timers_start(&t->timers, "backward-compute", 2);
	dist_watchdog_phase(&t->dist, "the backward pass of micro-batch", o->micro);
	m->grad_ready = last ? grad_ready : NULL;
	m->grad_ctx = t;
	const float *din = gpt_backward_chunk(m, o->chunk, slot, ch->post ? t->pp_dloss[slot] : NULL);
	m->grad_ready = NULL;
	timers_stop(&t->timers, "backward-compute");
	if (din && pp_sched_prev(s, o->chunk, &peer, &pc)) {
		timers_start(&t->timers, "backward-send", 2);
		send_copy(t, din, nh, peer, tag_of(1, pc));
		timers_stop(&t->timers, "backward-send");
	}
}

int pipeline_run(struct trainer *t, const struct pp_sched *s, int split, int64_t consumed, bool train,
		 double scale, double *num, double *den)
{
	/* MoE: the attached losses' gradient weight, loss scale / micro-batches (Megatron's
	 * x cp is not needed: under CP each rank's aux and z losses are already its share) */
	t->model.moe.aux_scale = t->a->calculate_per_token_loss ? scale : scale / (double)t->num_micro;
	/* multi-token prediction: Megatron's MTPLossAutoScaler, loss scale / micro-batches */
	t->model.mtp_grad_scale = t->a->calculate_per_token_loss ? scale : scale / (double)t->num_micro;
	t->model.mtp_per_token = t->a->calculate_per_token_loss;
	for (int i = 0; i < s->nops; i++) {
		const struct pp_op *o = &s->ops[i];
		if (o->kind == PP_FORWARD) {
			/* a chunk's first forward waits for its parameters' gathers */
			t->model.param_needed = o->micro == 0 ? param_needed : NULL;
			t->model.param_ctx = t;
			int r = forward(t, s, o, split, consumed, train, scale, num, den);
			t->model.param_needed = NULL;
			if (r < 0)
				return -1;
		} else {
			backward(t, s, o, s->last_bwd[o->chunk] == i);
		}
	}
	return 0;
}
