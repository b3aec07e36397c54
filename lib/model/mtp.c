/*
 * mtp.c - multi-token prediction (Megatron Core's MultiTokenPredictionBlock
 * and process_mtp_loss; docs/mtp.md), on the chunk with the head. Depth k
 * (0-based) of D predicts the token k + 2 places ahead:
 *
 *   ids_k    = roll(ids, k + 1)             each sample's ids moved left, 0 at the end
 *   e        = enorm(embedding(ids_k))      the model's word embeddings, shared
 *   h        = hnorm(hin_k)                 hin_0: the decoder's final-norm output
 *   x        = eh_proj([e ; h])             [Nl, 2h] -> [Nl, h], no bias
 *   hin_k+1  = final_layernorm(layer_k(x))  a layer of the last decoder layer's kind
 *   loss_k   = xent(output_layer(hin_k+1), roll(labels, k + 1))
 *
 * with the loss mask rolled alike (zero-filled). Under context parallelism
 * the rolls are on the whole sequence, then each rank takes its positions
 * (mtp_load_inputs); the depth's layer runs through the ring as the
 * decoder's, and the hidden state is not rolled. Each depth's loss enters
 * the gradient as Megatron's MTPLossAutoScaler does: mtp_scale / D x the
 * depth's masked mean over the micro-batch, times the main loss's backward
 * scale (loss scale / micro-batches); with --calculate-per-token-loss the
 * masked sum times (the micro-batch's tokens / the depth's tokens).
 *
 * eh_proj is column-parallel, as Megatron's: each tensor-parallel rank
 * holds h/t of its output rows and runs them on all rows of [e ; h]
 * (gathered under SP); the outputs are gathered over TP along the hidden
 * dimension, and under SP each rank keeps its sequence shard. Forward and
 * backward side by side.
 *
 * Dropout: a depth's embedding dropout and its layer's masks are drawn as
 * the decoder's (site 3L, sites 3(L+k) ..), each from a seed of its own
 * derived from the micro-batch's, so no mask repeats another's (Megatron
 * draws them from its RNG state, as every mask).
 */
#include "model/gpt_int.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"

void gpt_mtp_layer_name(const struct gpt_config *c, char *name, size_t n)
{
	int l, used = 0;
	if (sscanf(name, "decoder.layers.%d.%n", &l, &used) != 1 || used == 0 || l < c->L)
		return;
	char rest[PARAM_NAME_MAX * 2];
	snprintf(rest, sizeof(rest), "%s", name + used);
	snprintf(name, n, "mtp.layers.%d.transformer_layer.%s", l - c->L, rest);
}

/* Megatron's MultiTokenPredictionLayer order: enorm, hnorm, eh_proj, the
 * transformer layer, final_layernorm. */
void mtp_register(struct gpt_model *m)
{
	const struct gpt_config *c = &m->c;
	struct transformer_layer_spec fs;
	gpt_layer_spec(c, 0, &fs);
	bool ln = fs.norm != LAYER_RMSNORM;
	char name[PARAM_NAME_MAX];
#define NAME(k, what) (snprintf(name, sizeof(name), "mtp.layers.%d.%s", k, what), name)
	m->mtp = xcalloc((size_t)c->mtp, sizeof(*m->mtp));
	for (int k = 0; k < c->mtp; k++) {
		struct gpt_mtp_params *q = &m->mtp[k];
		q->pfirst = m->reg.n;
		q->en_w = reg_norm(m, NAME(k, "enorm.weight"), &fs, false);
		q->en_b = ln ? reg_norm(m, NAME(k, "enorm.bias"), &fs, true) : -1;
		q->hn_w = reg_norm(m, NAME(k, "hnorm.weight"), &fs, false);
		q->hn_b = ln ? reg_norm(m, NAME(k, "hnorm.bias"), &fs, true) : -1;
		q->eh_w = reg_weight(m, NAME(k, "eh_proj.weight"), c->h, 2 * (int64_t)c->h, 0, c->init_std, 0);
		int l = c->L + k, first = m->reg.n;
		transformer_layer_register(m, l);
		for (int i = first; i < m->reg.n; i++)
			gpt_mtp_layer_name(c, m->reg.p[i].name, sizeof(m->reg.p[i].name));
		q->fn_w = reg_norm(m, NAME(k, "final_layernorm.weight"), &fs, false);
		q->fn_b = ln ? reg_norm(m, NAME(k, "final_layernorm.bias"), &fs, true) : -1;
		q->pend = m->reg.n;
	}
#undef NAME
}

void mtp_alloc_slot(struct gpt_model *m, struct gpt_slot *sl)
{
	const struct gpt_config *c = &m->lc;
	size_t BT = (size_t)m->B * c->S, BTl = (size_t)m->Nl, h = c->h;
	bool ln = !c->rmsnorm;
	sl->lnf_local = m->par.sp ? gpt_take(m, BTl * h) : sl->lnf;
	sl->mtp = xcalloc((size_t)c->mtp, sizeof(*sl->mtp));
	for (int k = 0; k < c->mtp; k++) {
		struct gpt_mtp_acts *A = &sl->mtp[k];
		A->tokens = gpt_take_bytes(m, BT * sizeof(int32_t));
		A->targets = gpt_take_bytes(m, BT * sizeof(int32_t));
		A->positions = gpt_take_bytes(m, BT * sizeof(int32_t));
		A->emb = gpt_take(m, BTl * h);
		A->en = gpt_take(m, BTl * h);
		A->en_mean = ln ? gpt_take(m, BTl) : NULL;
		A->en_rstd = gpt_take(m, BTl);
		A->hn = gpt_take(m, BTl * h);
		A->hn_mean = ln ? gpt_take(m, BTl) : NULL;
		A->hn_rstd = gpt_take(m, BTl);
		A->x = gpt_take(m, BTl * h);
		A->y = gpt_take(m, BTl * h);
		A->out = gpt_take(m, BTl * h);
		A->out_mean = ln ? gpt_take(m, BTl) : NULL;
		A->out_rstd = gpt_take(m, BTl);
		A->outg = m->par.sp ? gpt_take(m, BT * h) : A->out;
		A->logits = gpt_take(m, BT * (size_t)c->Vp);
		A->losses = gpt_take(m, BT);
		A->lse = gpt_take(m, BT);
		A->dloss_host = xcalloc(BT, sizeof(float));
	}
}

void mtp_alloc_scratch(struct gpt_model *m)
{
	size_t nh = (size_t)m->Nl * m->c.h, BT = (size_t)m->B * m->lc.S, h = m->c.h;
	m->mtp_cat = gpt_take(m, BT * 2 * h);
	m->mtp_dcat = gpt_take(m, BT * 2 * h);
	m->mtp_part = m->par.tp ? gpt_take(m, BT * (h / (size_t)m->par.tp_size)) : NULL;
	m->mtp_all = m->par.tp ? gpt_take(m, BT * h) : NULL;
	m->mtp_de = gpt_take(m, nh);
	m->mtp_dh = gpt_take(m, nh);
	m->mtp_demb = gpt_take(m, nh);
	m->mtp_dnext[0] = gpt_take(m, nh);
	m->mtp_dnext[1] = gpt_take(m, nh);
	m->mtp_log = xcalloc((size_t)m->c.mtp, sizeof(double));
}

/* The micro-batch over every position of the sequence: the trainer's
 * mtp_in, or without context parallelism the chunk's own inputs. */
static struct gpt_mtp_input whole_batch(const struct gpt_model *m, const int32_t *tokens, const int32_t *labels,
					const int32_t *positions)
{
	if (m->mtp_in.tokens)
		return m->mtp_in;
	if (m->par.cp)
		BUG("multi-token prediction under context parallelism without the whole micro-batch (mtp_in)");
	return (struct gpt_mtp_input){ tokens, labels, positions, m->mtp_in.mask };
}

/* Megatron's roll_tensor(shifts=-1) applied `by` times to sample b of x
 * [B, S], read at global position g: x[b, g + by], 0 past the end; x NULL
 * stands for the positions 0..S-1. */
static int32_t rolled_at(const int32_t *x, int b, int S, int g, int by)
{
	if (g + by >= S)
		return 0;
	return x ? x[(size_t)b * S + g + by] : g + by;
}

/* Each depth's ids, labels and positions at this rank's positions, rolled
 * on the whole sequence. Under context parallelism Megatron rolls each of
 * the rank's two chunks and trades the boundary elements with the
 * neighbouring CP ranks (the next chunk's first element comes from the rank
 * that holds it, the last chunk's end is filled with 0); every rank here
 * holds the whole micro-batch before it takes its positions, so rolling the
 * whole sequence and then taking them gives the same values with no
 * communication. */
void mtp_load_inputs(struct gpt_model *m, struct gpt_slot *sl, const int32_t *tokens, const int32_t *labels,
		     const int32_t *positions)
{
	const struct gpt_config *c = &m->lc;
	struct gpt_mtp_input in = whole_batch(m, tokens, labels, positions);
	int S = m->c.S, T = c->S, N = m->B * T, vstart = m->par.vstart;
	int32_t *t = xmalloc((size_t)N * 3 * sizeof(int32_t)), *y = t + N, *pos = t + 2 * N;
	for (int k = 0; k < c->mtp; k++) {
		struct gpt_mtp_acts *A = &sl->mtp[k];
		for (int i = 0; i < N; i++) {
			int b = i / T, g = gpt_global_pos(m, i % T);
			int32_t tl = rolled_at(in.tokens, b, S, g, k + 1) - vstart;
			int32_t ll = rolled_at(in.labels, b, S, g, k + 1) - vstart;
			t[i] = tl >= 0 && tl < c->Vp ? tl : -1;
			y[i] = ll >= 0 && ll < c->Vp ? ll : -1;
			pos[i] = rolled_at(in.positions, b, S, g, k + 1);
		}
		m->k->to_device(A->tokens, t, (size_t)N * 4);
		m->k->to_device(A->targets, y, (size_t)N * 4);
		m->k->to_device(A->positions, pos, (size_t)N * 4);
	}
	free(t);
}

/* [e ; h] on all rows into m->mtp_cat [B*T, 2h]: the norms' outputs, gathered under SP */
static const float *cat_full(struct gpt_model *m, const struct gpt_pass *P, const struct gpt_mtp_acts *A)
{
	size_t h = m->c.h, F = sizeof(float);
	const float *half[2] = { A->en, A->hn };
	for (int i = 0; i < 2; i++) {
		const float *src = seq_full(m, P, half[i]);
		m->k->copy_rows(m->mtp_cat + (size_t)i * h, 2 * h * F, src, h * F, h * F, (size_t)P->N);
	}
	return m->mtp_cat;
}

/* x = eh_proj([e ; h]): this rank's h/t output columns on all rows, gathered
 * over TP along the hidden dimension ([t][B*T][h/t] -> [B*T][h]), then
 * under SP this rank's sequence shard (rows b*S + r*S/t ... of each sample). */
static void eh_proj_forward(struct gpt_model *m, const struct gpt_pass *P, struct gpt_mtp_acts *A, int w)
{
	size_t h = m->c.h, F = sizeof(float), N = (size_t)P->N;
	const float *cat = cat_full(m, P, A);
	if (!m->par.tp) {
		linear_fwd(m, A->x, cat, w, -1, P->N, (int)(2 * h), (int)h);
		return;
	}
	int t = m->par.tp_size;
	size_t hl = h / (size_t)t;
	linear_fwd(m, m->mtp_part, cat, w, -1, P->N, (int)(2 * h), (int)hl);
	dist_allgather_equal_f32(m->par.tp, m->mtp_part, N * hl, m->mtp_all);
	float *full = m->par.sp ? m->s.tmp : A->x;
	for (int r = 0; r < t; r++)
		m->k->copy_rows(full + (size_t)r * hl, h * F, m->mtp_all + (size_t)r * N * hl, hl * F, hl * F, N);
	if (!m->par.sp)
		return;
	size_t rows = (size_t)(P->T / t), S = (size_t)P->T;
	m->k->copy_rows(A->x, rows * h * F, full + (size_t)m->par.tp_rank * rows * h, S * h * F, rows * h * F,
			(size_t)P->B);
}

/* dx: dL/dx, this rank's rows [Nl, h]. The weight's gradient, and dL/de and
 * dL/dh on this rank's rows into m->mtp_de and m->mtp_dh: the column-parallel
 * input gradient summed over TP (reduce-scattered under SP). */
static void eh_proj_backward(struct gpt_model *m, const struct gpt_pass *P, const struct gpt_mtp_acts *A, int w,
			     const float *dx)
{
	size_t h = m->c.h, F = sizeof(float), N = (size_t)P->N;
	const float *dfull = m->par.sp ? (sp_gather(m, P, m->s.gath, dx), m->s.gath) : dx;
	const float *dpart = dfull;
	size_t hl = h;
	if (m->par.tp) { /* the gather's backward: this rank's columns */
		hl = h / (size_t)m->par.tp_size;
		m->k->copy_rows(m->mtp_part, hl * F, dfull + (size_t)m->par.tp_rank * hl, h * F, hl * F, N);
		dpart = m->mtp_part;
	}
	const float *cat = cat_full(m, P, A);
	linear_bwd(m, m->mtp_dcat, dpart, cat, w, -1, P->N, (int)(2 * h), (int)hl);
	if (!m->par.sp) {
		tp_sum(m, m->mtp_dcat, N * 2 * h);
		m->k->copy_rows(m->mtp_de, h * F, m->mtp_dcat, 2 * h * F, h * F, N);
		m->k->copy_rows(m->mtp_dh, h * F, m->mtp_dcat + h, 2 * h * F, h * F, N);
		return;
	}
	float *half = m->s.dtmp; /* [B*T, h] */
	m->k->copy_rows(half, h * F, m->mtp_dcat, 2 * h * F, h * F, N);
	sp_reduce_scatter(m, P, m->mtp_de, half);
	m->k->copy_rows(half, h * F, m->mtp_dcat + h, 2 * h * F, h * F, N);
	sp_reduce_scatter(m, P, m->mtp_dh, half);
}

/* The dropout seed of depth k's embedding (part 0) or layer (part 1). */
static uint64_t depth_seed(uint64_t seed, int k, int part)
{
	uint64_t z = seed + 0x9E3779B97F4A7C15ULL * (uint64_t)(2 * k + part + 1); /* splitmix64 */
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

/* Depth k's view of the slot: its rolled inputs, its head's buffers, and
 * the slot's layer activations (its layer is L + k). */
static struct gpt_slot depth_slot(const struct gpt_slot *sl, const struct gpt_mtp_acts *A)
{
	struct gpt_slot d = *sl;
	d.tokens = A->tokens;
	d.targets = A->targets;
	d.positions = A->positions;
	d.lnf = A->outg;
	d.logits = A->logits;
	d.losses = A->losses;
	d.lse = A->lse;
	return d;
}

/* The depth's loss: logged (its masked mean) and its gradient weights on
 * this rank's positions. The token counts are the whole micro-batch's
 * (every CP rank's positions), so the CP ranks' shares add up to the
 * one-rank loss and gradient. */
static void depth_loss(struct gpt_model *m, int k, const float *losses, float *dloss)
{
	const float *mask = m->mtp_in.mask;
	int S = m->c.S, T = m->lc.S, B = m->B, N = B * T, by = k + 1;
	double sum = 0, ntok = 0, orig = 0;
	for (int b = 0; b < B; b++)
		for (int g = 0; g < S; g++) {
			orig += mask ? mask[(size_t)b * S + g] : 1.0;
			if (g + by < S) /* the rolled mask */
				ntok += mask ? mask[(size_t)b * S + g + by] : 1.0;
		}
	for (int i = 0; i < N; i++) {
		int b = i / T, g = gpt_global_pos(m, i % T);
		double wk = g + by < S ? (mask ? mask[(size_t)b * S + g + by] : 1.0) : 0.0;
		dloss[i] = (float)wk; /* the rolled mask, weighted below */
		sum += wk * losses[i];
	}
	double safe = ntok > 1 ? ntok : 1;
	if (ntok > 0) /* this rank's share: the trainer sums the CP ranks' */
		m->mtp_log[k] += sum / safe;
	double w = m->mtp_grad_scale * (double)m->lc.mtp_scale / (double)m->lc.mtp;
	w = m->mtp_per_token ? w * orig / safe : w / safe;
	for (int i = 0; i < N; i++)
		dloss[i] = (float)(dloss[i] * w);
}

void mtp_forward(struct gpt_model *m, const struct gpt_pass *P)
{
	const struct gpt_config *c = &m->lc;
	size_t h = c->h;
	float *losses = xmalloc((size_t)P->N * sizeof(float));
	const float *hin = P->sl->lnf_local;
	for (int k = 0; k < c->mtp; k++) {
		struct gpt_mtp_acts *A = &P->sl->mtp[k];
		const struct gpt_mtp_params *q = &m->mtp[k];
		struct gpt_slot ds = depth_slot(P->sl, A);
		struct gpt_pass D = *P;
		D.sl = &ds;
		for (int i = q->pfirst; i < q->pend; i++)
			gpt_need_param(m, i);
		int wte = m->wte;
		m->wte = m->mtp_emb; /* the word embeddings this chunk holds */
		ds.drop_seed = depth_seed(P->sl->drop_seed, k, 0);
		embedding_forward(m, &D, A->emb);
		ds.drop_seed = depth_seed(P->sl->drop_seed, k, 1);
		m->wte = wte;
		norm_fwd(m, A->en, A->en_mean, A->en_rstd, A->emb, q->en_w, q->en_b, P->Nl);
		norm_fwd(m, A->hn, A->hn_mean, A->hn_rstd, hin, q->hn_w, q->hn_b, P->Nl);
		eh_proj_forward(m, &D, A, q->eh_w);
		int l = c->L + k, li = l - P->l0;
		transformer_layer_forward(m, &D, l, A->x, A->y);
		if (P->train && ds.stash)
			transformer_layer_stash(m, &ds.acts[li], &ds.stash[li], true);
		norm_fwd(m, A->out, A->out_mean, A->out_rstd, A->y, q->fn_w, q->fn_b, P->Nl);
		if (m->par.sp)
			sp_gather(m, &D, A->outg, A->out);
		linear_fwd(m, A->logits, A->outg, m->out_w, -1, P->N, (int)h, c->Vp);
		vocab_parallel_xent_forward(m, &D, losses);
		if (P->train)
			depth_loss(m, k, losses, A->dloss_host);
		hin = A->out;
	}
	free(losses);
}

const float *mtp_backward(struct gpt_model *m, const struct gpt_pass *P)
{
	const struct gpt_config *c = &m->lc;
	size_t h = c->h, Nl = (size_t)P->Nl, nh = Nl * h;
	void (*ready)(void *, int) = m->grad_ready;
	float *dnext = NULL; /* dL/d(this depth's output) from the depth after it */
	for (int k = c->mtp - 1; k >= 0; k--) {
		struct gpt_mtp_acts *A = &P->sl->mtp[k];
		const struct gpt_mtp_params *q = &m->mtp[k];
		struct gpt_slot ds = depth_slot(P->sl, A);
		struct gpt_pass D = *P;
		D.sl = &ds;
		const float *hin = k > 0 ? P->sl->mtp[k - 1].out : P->sl->lnf_local;
		/* the head: the shared output layer's gradient accumulates; the
		 * trainer hears of it after the main head's backward */
		vocab_parallel_xent_backward(m, &D, A->dloss_host);
		linear_bwd(m, m->s.dln, A->logits, A->outg, m->out_w, -1, P->N, (int)h, c->Vp);
		float *dout = (float *)column_input_grad(m, &D, m->s.dln);
		if (dnext)
			m->k->add(dout, dout, dnext, nh);
		norm_bwd(m, m->s.dres, dout, A->y, q->fn_w, q->fn_b, A->out_mean, A->out_rstd, P->Nl);
		int l = c->L + k, li = l - P->l0;
		ds.drop_seed = depth_seed(P->sl->drop_seed, k, 1);
		if (ds.stash)
			transformer_layer_stash(m, &ds.acts[li], &ds.stash[li], false);
		if (c->recompute == GPT_RECOMPUTE_SELECTIVE)
			transformer_layer_recompute(m, &D, l, A->x);
		transformer_layer_backward(m, &D, l, A->x, m->s.dres);
		eh_proj_backward(m, &D, A, q->eh_w, m->s.dres);
		float *dhin = m->mtp_dnext[k & 1];
		norm_bwd(m, dhin, m->mtp_dh, hin, q->hn_w, q->hn_b, A->hn_mean, A->hn_rstd, P->Nl);
		norm_bwd(m, m->mtp_demb, m->mtp_de, A->emb, q->en_w, q->en_b, A->en_mean, A->en_rstd, P->Nl);
		/* the word embeddings are final only after every use of them */
		int wte = m->wte;
		m->wte = m->mtp_emb;
		m->grad_ready = NULL;
		ds.drop_seed = depth_seed(P->sl->drop_seed, k, 0);
		embedding_backward(m, &D, m->mtp_demb);
		m->grad_ready = ready;
		m->wte = wte;
		for (int i = q->pfirst; ready && i < q->pend; i++)
			ready(m->grad_ctx, i);
		gpt_flush_unit(m, GPT_UNIT_LAYER, q->pfirst, q->pend); /* Megatron-FSDP: the depth is a unit */
		dnext = dhin;
	}
	if (ready && m->mtp_emb != m->wte && m->mtp_emb != m->out_w) /* the last stage's own copy */
		ready(m->grad_ctx, m->mtp_emb);
	return dnext;
}
