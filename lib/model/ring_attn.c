/*
 * ring_attn.c - context-parallel ring attention (see ring_attn.h): the ring
 * schedule and its buffers; the arithmetic of each step is the op table's
 * attention_block_forward/backward.
 *
 * Every transfer is non-blocking and started before the step's compute, so
 * the next K/V block arrives while this one is worked on. A buffer is
 * written (received into) only after the send that last read it has
 * completed, which is why there are two of each.
 */
#include "model/ring_attn.h"

#include "base/error.h"
#include "base/xalloc.h"

#include <stdlib.h>
#include <string.h>

/* Message tags on the cp group: one stream per kind, each in step order. */
enum { RING_TAG_K = 301, RING_TAG_V, RING_TAG_DKV };

static int ring_pos(int cp, int c, int rank, int j)
{
	return j < c ? rank * c + j : (2 * cp - 1 - rank) * c + (j - c);
}

int ring_attn_init(struct ring_attn *r, struct mem_pool *mem, struct dist_group *cp, int B, int S,
		   int a, int g, int k)
{
	memset(r, 0, sizeof(*r));
	const int n = cp->size;
	if (B <= 0 || S <= 0 || a <= 0 || g <= 0 || k <= 0 || a % g != 0)
		return error("context parallelism: bad attention shape (batch %d, sequence %d, %d heads in %d "
			     "groups of dimension %d)", B, S, a, g, k);
	if (S % (2 * n) != 0)
		return error("context parallelism: the sequence length %d must be a multiple of 2 x the "
			     "context-parallel size %d", S, n);
	r->cp = cp;
	r->mem = mem;
	r->B = B, r->S = S, r->T = S / n, r->a = a, r->g = g, r->k = k;
	r->c = S / (2 * n);
	int32_t *pos = xmalloc((size_t)n * r->T * sizeof(int32_t));
	for (int rank = 0; rank < n; rank++)
		for (int j = 0; j < r->T; j++)
			pos[(size_t)rank * r->T + j] = ring_pos(n, r->c, rank, j);
	r->pos = mem_alloc(mem, (size_t)n * r->T * sizeof(int32_t));
	mem->k->to_device(r->pos, pos, (size_t)n * r->T * sizeof(int32_t));
	free(pos);
	if (n > 1) {
		const size_t kv = 2 * (size_t)B * g * r->T * k;
		for (int i = 0; i < 2; i++) {
			r->kv_buf[i] = mem_alloc_f32(mem, kv);
			r->dkv_buf[i] = mem_alloc_f32(mem, kv);
		}
	}
	return 0;
}

void ring_attn_free(struct ring_attn *r)
{
	if (!r->mem)
		return;
	const size_t kv = 2 * (size_t)r->B * r->g * r->T * r->k * sizeof(float);
	for (int i = 0; i < 2; i++) {
		mem_free(r->mem, r->kv_buf[i], r->kv_buf[i] ? kv : 0);
		mem_free(r->mem, r->dkv_buf[i], r->dkv_buf[i] ? kv : 0);
	}
	mem_free(r->mem, r->pos, (size_t)r->cp->size * r->T * sizeof(int32_t));
	memset(r, 0, sizeof(*r));
}

int ring_attn_global_pos(const struct ring_attn *r, int j)
{
	if (j < 0 || j >= r->T)
		BUG("local position %d outside [0, %d)", j, r->T);
	return ring_pos(r->cp->size, r->c, r->cp->rank, j);
}

/*
 * The K/V ring, shared by forward and backward: step i works on the block of
 * rank (me - i) mod cp, the local kk/v at step 0 and kv_buf[i % 2] after.
 * ring_kv_step() waits for that block, starts passing it on to the next
 * rank and receiving the following one (into the other buffer, once the
 * send that read it is done), and says where the block is.
 */
struct ring_kv {
	struct dist_req send[2], recv[2]; /* K, V */
	const float *K, *V;
	int src; /* the group rank whose block it is */
};

static void ring_kv_step(struct ring_attn *r, struct ring_kv *s, int i, const float *kk,
			 const float *v)
{
	struct dist_group *g = r->cp;
	const int cp = g->size, me = g->rank;
	const size_t n = (size_t)r->B * r->g * r->T * r->k;
	if (i == 0) {
		memset(s, 0, sizeof(*s));
		s->K = kk, s->V = v;
	} else {
		dist_wait(&s->recv[0]);
		dist_wait(&s->recv[1]);
		s->K = r->kv_buf[i % 2], s->V = r->kv_buf[i % 2] + n;
	}
	s->src = (me - i + cp) % cp;
	if (i + 1 < cp) {
		float *next = r->kv_buf[(i + 1) % 2];
		dist_wait(&s->send[0]); /* step i-1 sent from `next` */
		dist_wait(&s->send[1]);
		dist_irecv_f32(g, next, n, (me + cp - 1) % cp, RING_TAG_K, &s->recv[0]);
		dist_irecv_f32(g, next + n, n, (me + cp - 1) % cp, RING_TAG_V, &s->recv[1]);
		dist_isend_f32(g, s->K, n, (me + 1) % cp, RING_TAG_K, &s->send[0]);
		dist_isend_f32(g, s->V, n, (me + 1) % cp, RING_TAG_V, &s->send[1]);
	}
}

static void ring_kv_end(struct ring_kv *s)
{
	dist_wait(&s->send[0]);
	dist_wait(&s->send[1]);
}

void ring_attn_forward(struct ring_attn *r, float *out, float *lse, const float *q,
		       const float *kk, const float *v, const int32_t *doc, float scale, int window, float dropout_p,
		       uint64_t seed, uint64_t offset)
{
	const struct kops *ops = r->mem->k;
	const int T = r->T;
	const int32_t *qpos = r->pos + (size_t)r->cp->rank * T;
	struct ring_kv s;
	for (int i = 0; i < r->cp->size; i++) {
		ring_kv_step(r, &s, i, kk, v);
		/* step 0 is the rank's own block, where every query sees at least
		 * itself: it sets out and lse, the others merge into them */
		ops->attention_block_forward(out, lse, q, s.K, s.V, qpos, r->pos + (size_t)s.src * T, doc, r->B,
					     T, T, r->a, r->g, r->k, r->S, scale, window, dropout_p, seed, offset,
					     i > 0);
	}
	ring_kv_end(&s);
}

/*
 * The dK/dV of block src are summed along the ring: step 0 adds the owner's
 * share straight into dk/dv; the accumulator for the remote shares starts
 * at zero on rank src+1 (step 1), takes each rank's share at step i in
 * dkv_buf[i % 2] and is sent on, and after step cp-1 it lands on src (cp-1
 * sends in all). Its receive is posted a step ahead into the other buffer.
 */
void ring_attn_backward(struct ring_attn *r, float *dq, float *dk, float *dv, const float *dout,
			const float *out, const float *lse, const float *q, const float *kk,
			const float *v, const int32_t *doc, float scale, int window, float dropout_p, uint64_t seed,
			uint64_t offset)
{
	const struct kops *ops = r->mem->k;
	struct dist_group *g = r->cp;
	const int cp = g->size, me = g->rank, T = r->T;
	const size_t n = (size_t)r->B * r->g * T * r->k;
	const int32_t *qpos = r->pos + (size_t)me * T;
	if (!dq || !dk || !dv)
		BUG("ring attention backward needs dq, dk and dv");
	ops->zero(dq, (size_t)r->B * r->a * T * r->k);
	ops->zero(dk, n);
	ops->zero(dv, n);
	struct ring_kv s;
	struct dist_req dsend = { 0 }, drecv = { 0 };
	for (int i = 0; i < cp; i++) {
		ring_kv_step(r, &s, i, kk, v);
		float *acc_k = dk, *acc_v = dv;
		if (i > 0) {
			float *acc = r->dkv_buf[i % 2];
			if (i == 1)
				ops->zero(acc, 2 * n);
			else
				dist_wait(&drecv);
			dist_wait(&dsend); /* step i-1 sent the other buffer */
			dist_irecv_f32(g, r->dkv_buf[(i + 1) % 2], 2 * n, (me + cp - 1) % cp, RING_TAG_DKV,
				       &drecv);
			acc_k = acc, acc_v = acc + n;
		}
		ops->attention_block_backward(dq, acc_k, acc_v, dout, out, lse, q, s.K, s.V, qpos,
					      r->pos + (size_t)s.src * T, doc, r->B, T, T, r->a, r->g, r->k,
					      r->S, scale, window, dropout_p, seed, offset);
		if (i > 0)
			dist_isend_f32(g, acc_k, 2 * n, (me + 1) % cp, RING_TAG_DKV, &dsend);
	}
	if (cp > 1) { /* the other ranks' shares of this rank's own block */
		const float *acc = r->dkv_buf[cp % 2];
		dist_wait(&drecv);
		ops->add(dk, dk, acc, n);
		ops->add(dv, dv, acc + n, n);
	}
	dist_wait(&dsend);
	ring_kv_end(&s);
}
