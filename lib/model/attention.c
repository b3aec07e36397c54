/*
 * attention.c - self-attention (Megatron Core's SelfAttention with the TE
 * spec): the input norm fused into linear_qkv, the fused QKV projection
 * (column-parallel: this rank's heads), RoPE, core attention, and
 * linear_proj (row-parallel). Core attention is one of four, by what the
 * pass runs on:
 *
 *   one rank        attention_forward with probs kept for backward (document masks allowed)
 *   flash           the op table's block ops over the whole sequence (a GPU; rows keep log-sum-exp)
 *   context-parallel ring_attn over the CP group
 *   serving         each sequence's new rows against its key/value cache slot, which they extend
 *
 * Forward and backward side by side; the backward leaves this rank's share
 * of the input norm's output gradient in m->s.dln.
 */
#include "model/gpt_int.h"

#include <math.h>
#include <stdio.h>

void attention_register(struct gpt_model *m, int l)
{
	const struct gpt_config *c = &m->c; /* global shapes; the registry derives each rank's slice */
	struct gpt_layer_params *p = &m->lp[l];
	const struct transformer_layer_spec *s = &p->spec;
	char name[PARAM_NAME_MAX];
	float std = c->init_std, out_std = c->init_std / sqrtf(2.0f * (float)c->L);
	int64_t qkv = (int64_t)(c->a + 2 * c->g) * c->k, ak = (int64_t)c->a * c->k;
#define NAME(fmt) (snprintf(name, sizeof(name), "decoder.layers.%d.self_attention." fmt, l), name)
	p->ln1_w = reg_norm(m, NAME("linear_qkv.layer_norm_weight"), s, false);
	p->ln1_b = s->norm == LAYER_RMSNORM ? -1 : reg_norm(m, NAME("linear_qkv.layer_norm_bias"), s, true);
	p->qkv_w = reg_weight(m, NAME("linear_qkv.weight"), qkv, c->h, 0, std, 0);
	p->qkv_b = s->qkv_bias ? reg_bias(m, NAME("linear_qkv.bias"), qkv, 0, 0) : -1;
	p->proj_w = reg_weight(m, NAME("linear_proj.weight"), c->h, ak, 1, out_std, 0);
	p->proj_b = s->proj_bias ? reg_bias(m, NAME("linear_proj.bias"), c->h, -1, 0) : -1;
#undef NAME
}

/* Layer l's attention-dropout counters, continued past the heads of the lower
 * tensor-parallel ranks so that any TP size draws the one-rank masks. */
static uint64_t attn_offset(const struct gpt_model *m, int l)
{
	return site_offset(3 * l) + (uint64_t)m->par.tp_rank * (uint64_t)m->lc.a * (uint64_t)m->B *
					    (uint64_t)m->c.S * (uint64_t)m->c.S;
}

static float attn_scale(const struct gpt_model *m)
{
	return 1.0f / sqrtf((float)m->lc.k);
}

/* Core attention of layer l on a training pass (the block op on positions
 * 0..S-1 with S = T draws the dropout masks of attention_forward). */
void core_attention_forward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A, float p)
{
	const struct gpt_config *c = &m->lc;
	const struct gpt_slot *sl = P->sl;
	if (m->par.cp)
		ring_attn_forward(&m->par.ring, A->atty, A->alse, A->q, A->kk, A->v, attn_scale(m), p, sl->drop_seed,
				  attn_offset(m, l));
	else if (m->flash)
		m->k->attention_block_forward(A->atty, A->alse, A->q, A->kk, A->v, m->flash_pos, m->flash_pos, P->B,
					      P->T, P->T, c->a, c->g, c->k, P->T, attn_scale(m), p, sl->drop_seed,
					      attn_offset(m, l), 0);
	else
		m->k->attention_forward(A->atty, A->probs, A->q, A->kk, A->v, sl->use_doc ? sl->doc : NULL, P->B,
					P->T, c->a, c->g, c->k, attn_scale(m), p, sl->drop_seed, attn_offset(m, l));
	round_half(m, A->atty, (size_t)P->N * c->a * c->k);
}

static void core_attention_backward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A,
				    const float *datty)
{
	const struct gpt_config *c = &m->lc;
	uint64_t seed = P->sl->drop_seed;
	struct gpt_scratch *s = &m->s;
	if (m->par.cp) {
		ring_attn_backward(&m->par.ring, s->dq, s->dk, s->dv, datty, A->atty, A->alse, A->q, A->kk, A->v,
				   attn_scale(m), c->attention_dropout, seed, attn_offset(m, l));
	} else if (m->flash) {
		/* the block op adds its share into the grads */
		size_t nq = (size_t)P->N * c->a * c->k, nkv = (size_t)P->N * c->g * c->k;
		m->k->zero(s->dq, nq);
		m->k->zero(s->dk, nkv);
		m->k->zero(s->dv, nkv);
		m->k->attention_block_backward(s->dq, s->dk, s->dv, datty, A->atty, A->alse, A->q, A->kk, A->v,
					       m->flash_pos, m->flash_pos, P->B, P->T, P->T, c->a, c->g, c->k, P->T,
					       attn_scale(m), c->attention_dropout, seed, attn_offset(m, l));
	} else {
		m->k->attention_backward(s->dq, s->dk, s->dv, datty, A->q, A->kk, A->v, A->probs, P->B, P->T, c->a,
					 c->g, c->k, attn_scale(m), c->attention_dropout, seed, attn_offset(m, l));
	}
}

/* The key (or value) cache of layer l of a request slot: [g][max_seq][k],
 * this rank's query groups. */
static float *cache_at(const struct gpt_model *m, float *base, int slot, int l)
{
	size_t per = (size_t)m->lc.g * m->kv->max_seq * m->lc.k;
	return base + ((size_t)slot * m->c.L + l) * per;
}

/* Serving: each sequence's new rows (positions pos.. of its slot) rotated
 * at their positions, their keys and values written into the cache, then
 * attention against everything the slot holds up to each row's position
 * (the block op's causal rule on positions). */
static void cached_attention_forward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A)
{
	const struct gpt_config *c = &m->lc;
	const struct gpt_kv_step *st = P->kv;
	struct gpt_kv_cache *kv = m->kv;
	const struct kops *k = m->k;
	int rot = m->lp[l].spec.rot;
	size_t ak = (size_t)c->a * c->k, gk = (size_t)c->g * c->k;
	for (int s = 0, r0 = 0; s < st->nseq; r0 += st->n[s], s++) {
		int n = st->n[s], pos = st->pos[s];
		const float *cs = rot ? kv->rope_cos + (size_t)pos * rot : NULL;
		const float *sn = rot ? kv->rope_sin + (size_t)pos * rot : NULL;
		k->qkv_split_forward(A->q, A->kk, A->v, m->s.qkv + (size_t)r0 * (ak + 2 * gk), cs, sn, 1, n, c->a, c->g,
				     c->k, rot);
		float *K = cache_at(m, kv->k, st->slot[s], l), *V = cache_at(m, kv->v, st->slot[s], l);
		for (int j = 0; j < c->g; j++) {
			size_t to = ((size_t)j * kv->max_seq + pos) * c->k, from = (size_t)j * n * c->k;
			k->copy(K + to, A->kk + from, (size_t)n * c->k * sizeof(float));
			k->copy(V + to, A->v + from, (size_t)n * c->k * sizeof(float));
		}
		k->attention_block_forward(A->atty + (size_t)r0 * ak, A->alse, A->q, K, V, P->sl->positions + r0,
					   kv->kpos, 1, n, kv->max_seq, c->a, c->g, c->k, kv->max_seq, attn_scale(m), 0,
					   0, 0, 0);
	}
}

const float *attention_forward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A,
			       const float *ln1)
{
	const struct gpt_config *c = &m->lc;
	const struct gpt_layer_params *p = &m->lp[l];
	int qkv = (c->a + 2 * c->g) * c->k, ak = c->a * c->k;
	linear_fwd(m, m->s.qkv, ln1, p->qkv_w, p->qkv_b, P->N, c->h, qkv);
	if (P->kv) {
		cached_attention_forward(m, P, l, A);
	} else {
		m->k->qkv_split_forward(A->q, A->kk, A->v, m->s.qkv, m->rope_cos, m->rope_sin, P->B, P->T, c->a, c->g,
					c->k, p->spec.rot);
		if (p->spec.rot) { /* RoPE's output is 16-bit too, as Megatron's (kept so: gpt_layer_stash) */
			size_t bt = (size_t)P->B * P->T;
			round_half(m, A->q, bt * c->a * c->k);
			round_half(m, A->kk, bt * c->g * c->k);
			round_half(m, A->v, bt * c->g * c->k);
		}
		core_attention_forward(m, P, l, A, P->train ? c->attention_dropout : 0);
	}
	return row_parallel(m, P, A->atty, p->proj_w, p->proj_b, ak);
}

void attention_backward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A,
			const float *dattn)
{
	const struct gpt_config *c = &m->lc;
	const struct gpt_layer_params *p = &m->lp[l];
	struct gpt_scratch *s = &m->s;
	int N = P->N, h = c->h, qkv = (c->a + 2 * c->g) * c->k, ak = c->a * c->k;
	linear_bwd(m, s->datty, dattn, A->atty, p->proj_w, p->proj_b, N, ak, h);
	core_attention_backward(m, P, l, A, s->datty);
	m->k->qkv_split_backward(s->qkv, s->dq, s->dk, s->dv, m->rope_cos, m->rope_sin, P->B, P->T, c->a, c->g, c->k,
				 p->spec.rot);
	/* the fused QKV output's space holds its gradient: free by now */
	linear_bwd(m, s->dln, s->qkv, seq_full(m, P, A->ln1), p->qkv_w, p->qkv_b, N, h, qkv);
}
