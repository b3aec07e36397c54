/*
 * attention.c - self-attention (Megatron Core's SelfAttention with the TE
 * spec): the input norm fused into linear_qkv, the fused QKV projection
 * (column-parallel: this rank's heads), RoPE, core attention, and
 * linear_proj (row-parallel). Core attention is one of four, by what the
 * pass runs on:
 *
 *   one rank        attention_forward with probs kept for backward (document masks allowed)
 *   flash           the op table's block ops over the whole sequence (a GPU; rows keep log-sum-exp;
 *                   document masks on positions 0..S-1)
 *   context-parallel ring_attn over the CP group (document masks on global positions)
 *   serving         each sequence's new rows against its key/value cache slot, which they extend
 *
 * With --qk-layernorm every query and key head is normalized over its
 * channels (q_layernorm, k_layernorm: one weight of kv_channels values that
 * all heads share) after the split and before RoPE, as Megatron's
 * get_query_key_value_tensors does. The op table's split rotates as it
 * splits, so the normed heads are put back into the fused layout (the
 * split's inverse) and split again with RoPE; the backward runs the same
 * maps the other way. The norms' weights are replicated over TP while each
 * rank normalizes its own heads: their gradients are summed over TP
 * (PARAM_TP_SUM), as Megatron's finalize_model_grads does.
 *
 * Multi-latent attention (--multi-latent-attention, Megatron Core's
 * MLASelfAttention with the TE spec; docs/mla.md) replaces linear_qkv: the
 * input norm is its own module (input_layernorm); the query comes from
 * linear_q_proj, or linear_q_down_proj, a norm and linear_q_up_proj; the
 * keys and values from linear_kv_down_proj, whose last qk_pos columns are
 * one RoPE key all heads share, and linear_kv_up_proj on the rest (after
 * its norm). The norms exist with --qk-layernorm, fused into the
 * up-projections (layer_norm_weight) as in the TE spec. The heads are
 * packed into the fused layout the split op takes, one group per head:
 *   q: [RoPE part | qk_head]  k: [shared RoPE part | qk_head]  v: [v_head | 0]
 * so core attention runs unchanged on k = qk_head + qk_pos channels with
 * the value zero-padded to that width (exact: the padded output columns are
 * zero and dropped, their gradient never read back). Megatron's MLA RoPE
 * first de-interleaves the rotated channels (even ones, then odd ones) and
 * then rotates halves; the packing does the de-interleave, the split op the
 * rotation. Only the dot products of q and k see the RoPE part, so its
 * channel order after RoPE is free. The down-projections and the norms are
 * replicated over TP while each rank runs its own heads: their gradients
 * are this rank's heads' share and are summed over TP (PARAM_TP_SUM), which
 * also gives the shared RoPE key the gradient of every head.
 * Under context parallelism MLA needs nothing of its own: the padded
 * heads go through ring_attn like any others (the zero value columns travel
 * with the keys), and the RoPE tables (YaRN too) hold each local row's
 * global position, as for the dense attention (gpt.c build_rope).
 *
 * Forward and backward side by side; the backward leaves this rank's share
 * of the input norm's output gradient in m->s.dln.
 */
#include "model/gpt_int.h"

#include <math.h>
#include <stdio.h>

/* q_layernorm or k_layernorm's weight or bias: kv_channels values, replicated */
static int reg_head_norm(struct gpt_model *m, const char *name, bool bias)
{
	int64_t shape[1] = { m->c.k };
	return params_add(&m->reg, name, 1, shape, -1, m->par.tp_size, m->par.tp_rank, PARAM_NO_WD | PARAM_TP_SUM,
			  bias ? PARAM_INIT_ZERO : PARAM_INIT_ONE, 0);
}

/* A norm over the compressed query or key/value (n channels), fused into
 * the up-projection in the TE spec: replicated, its gradient summed over TP. */
static int reg_latent_norm(struct gpt_model *m, const char *name, int64_t n, bool bias)
{
	return params_add(&m->reg, name, 1, &n, -1, m->par.tp_size, m->par.tp_rank, PARAM_NO_WD | PARAM_TP_SUM,
			  bias ? PARAM_INIT_ZERO : PARAM_INIT_ONE, 0);
}

static void mla_register(struct gpt_model *m, int l)
{
	const struct gpt_config *c = &m->c;
	struct gpt_layer_params *p = &m->lp[l];
	const struct transformer_layer_spec *s = &p->spec;
	char name[PARAM_NAME_MAX];
	float std = c->init_std, out_std = gpt_output_init_std(c);
	int64_t qk = (int64_t)c->a * c->k, kvu = (int64_t)c->a * (c->qk_head + c->v_head);
	bool ln = s->norm == LAYER_NORM;
#define NAME(fmt) (snprintf(name, sizeof(name), "decoder.layers.%d." fmt, l), name)
	p->ln1_w = reg_norm(m, NAME("input_layernorm.weight"), s, false);
	p->ln1_b = ln ? reg_norm(m, NAME("input_layernorm.bias"), s, true) : -1;
	p->mqd_w = p->mqn_w = p->mqn_b = p->mkvn_w = p->mkvn_b = -1;
	if (c->q_lora) {
		p->mqd_w = reg_weight(m, NAME("self_attention.linear_q_down_proj.weight"), c->q_lora, c->h, -1, std,
				      PARAM_TP_SUM);
		if (s->mla_norm) {
			p->mqn_w = reg_latent_norm(m, NAME("self_attention.linear_q_up_proj.layer_norm_weight"), c->q_lora,
						   false);
			p->mqn_b = ln ? reg_latent_norm(m, NAME("self_attention.linear_q_up_proj.layer_norm_bias"),
							c->q_lora, true) : -1;
		}
		p->mq_w = reg_weight(m, NAME("self_attention.linear_q_up_proj.weight"), qk, c->q_lora, 0, std, 0);
	} else {
		p->mq_w = reg_weight(m, NAME("self_attention.linear_q_proj.weight"), qk, c->h, 0, std, 0);
	}
	p->mkvd_w = reg_weight(m, NAME("self_attention.linear_kv_down_proj.weight"), c->kv_lora + c->qk_pos, c->h, -1,
			       std, PARAM_TP_SUM);
	if (s->mla_norm) {
		p->mkvn_w = reg_latent_norm(m, NAME("self_attention.linear_kv_up_proj.layer_norm_weight"), c->kv_lora,
					    false);
		p->mkvn_b = ln ? reg_latent_norm(m, NAME("self_attention.linear_kv_up_proj.layer_norm_bias"), c->kv_lora,
						 true) : -1;
	}
	p->mkvu_w = reg_weight(m, NAME("self_attention.linear_kv_up_proj.weight"), kvu, c->kv_lora, 0, std, 0);
	p->proj_w = reg_weight(m, NAME("self_attention.linear_proj.weight"), c->h, (int64_t)c->a * c->v_head, 1, out_std,
			       0);
	p->proj_b = s->proj_bias ? reg_bias(m, NAME("self_attention.linear_proj.bias"), c->h, -1, 0) : -1;
	p->qkv_w = p->qkv_b = p->qn_w = p->qn_b = p->kn_w = p->kn_b = -1;
#undef NAME
}

void attention_register(struct gpt_model *m, int l)
{
	const struct gpt_config *c = &m->c; /* global shapes; the registry derives each rank's slice */
	struct gpt_layer_params *p = &m->lp[l];
	const struct transformer_layer_spec *s = &p->spec;
	char name[PARAM_NAME_MAX];
	float std = c->init_std, out_std = gpt_output_init_std(c);
	int64_t qkv = (int64_t)(c->a + 2 * c->g) * c->k, ak = (int64_t)c->a * c->k;
	p->mq_w = p->mqd_w = p->mqn_w = p->mqn_b = p->mkvd_w = p->mkvu_w = p->mkvn_w = p->mkvn_b = -1;
	if (s->mla) {
		mla_register(m, l);
		return;
	}
#define NAME(fmt) (snprintf(name, sizeof(name), "decoder.layers.%d.self_attention." fmt, l), name)
	p->ln1_w = reg_norm(m, NAME("linear_qkv.layer_norm_weight"), s, false);
	p->ln1_b = s->norm == LAYER_RMSNORM ? -1 : reg_norm(m, NAME("linear_qkv.layer_norm_bias"), s, true);
	p->qkv_w = reg_weight(m, NAME("linear_qkv.weight"), qkv, c->h, 0, std, 0);
	p->qkv_b = s->qkv_bias ? reg_bias(m, NAME("linear_qkv.bias"), qkv, 0, 0) : -1;
	p->proj_w = reg_weight(m, NAME("linear_proj.weight"), c->h, ak, 1, out_std, 0);
	p->proj_b = s->proj_bias ? reg_bias(m, NAME("linear_proj.bias"), c->h, -1, 0) : -1;
	p->qn_w = p->qn_b = p->kn_w = p->kn_b = -1;
	if (s->qk_norm) {
		bool ln = s->norm == LAYER_NORM;
		p->qn_w = reg_head_norm(m, NAME("q_layernorm.weight"), false);
		p->qn_b = ln ? reg_head_norm(m, NAME("q_layernorm.bias"), true) : -1;
		p->kn_w = reg_head_norm(m, NAME("k_layernorm.weight"), false);
		p->kn_b = ln ? reg_head_norm(m, NAME("k_layernorm.bias"), true) : -1;
	}
#undef NAME
}

/* A norm of the model's kind over rows of n channels (a q or k head, or a
 * compressed query or key/value). */
static void chan_norm_fwd(struct gpt_model *m, float *out, float *mean, float *rstd, const float *inp, int w, int b,
			  size_t rows, int n)
{
	const struct gpt_config *c = &m->lc;
	if (c->rmsnorm)
		m->k->rmsnorm_forward(out, rstd, inp, gpt_param(m, w, GPT_VIEW_B), (int)rows, n, c->eps);
	else
		m->k->layernorm_forward(out, mean, rstd, inp, gpt_param(m, w, GPT_VIEW_B), gpt_param(m, b, GPT_VIEW_X),
					(int)rows, n, c->eps);
	round_half(m, out, rows * n);
}

static void chan_norm_bwd(struct gpt_model *m, float *dinp, const float *dout, const float *inp, int w, int b,
			  const float *mean, const float *rstd, size_t rows, int n)
{
	const struct gpt_config *c = &m->lc;
	if (c->rmsnorm)
		m->k->rmsnorm_backward(dinp, gpt_grad(m, w), dout, inp, gpt_param(m, w, GPT_VIEW_B), rstd, (int)rows, n);
	else
		m->k->layernorm_backward(dinp, gpt_grad(m, w), gpt_grad(m, b), dout, inp, gpt_param(m, w, GPT_VIEW_B),
					 mean, rstd, (int)rows, n);
	round_half(m, dinp, rows * n);
}

/* A q or k norm over rows of kv_channels values (rows: heads x tokens). */
static void head_norm_fwd(struct gpt_model *m, float *out, float *mean, float *rstd, const float *inp, int w, int b,
			  size_t rows)
{
	chan_norm_fwd(m, out, mean, rstd, inp, w, b, rows, m->lc.k);
}

static void head_norm_bwd(struct gpt_model *m, float *dinp, const float *dout, const float *inp, int w, int b,
			  const float *mean, const float *rstd, size_t rows)
{
	chan_norm_bwd(m, dinp, dout, inp, w, b, mean, rstd, rows, m->lc.k);
}

/* The fused QKV of B x T rows (qkv, [B*T, (a+2g)*k]) into A's q, kk and v,
 * RoPE'd by the tables cos/sin of T rows; with --qk-layernorm the q and k
 * norms run between the split and RoPE, their inputs and statistics kept
 * in A. qkv is scratch: with the norms and RoPE it holds the normed heads
 * afterwards. */
static void qkv_split(struct gpt_model *m, const struct gpt_layer_params *p, struct gpt_layer_acts *A, float *qkv,
		      const float *cos, const float *sin, int B, int T)
{
	const struct gpt_config *c = &m->lc;
	const struct kops *k = m->k;
	int rot = p->spec.rot;
	if (!p->spec.qk_norm) {
		k->qkv_split_forward(A->q, A->kk, A->v, qkv, cos, sin, B, T, c->a, c->g, c->k, rot,
				     p->spec.rot_interleaved);
		return;
	}
	size_t bt = (size_t)B * T;
	k->qkv_split_forward(A->qn, A->kn, A->v, qkv, NULL, NULL, B, T, c->a, c->g, c->k, 0, false);
	head_norm_fwd(m, A->q, A->qn_mean, A->qn_rstd, A->qn, p->qn_w, p->qn_b, bt * c->a);
	head_norm_fwd(m, A->kk, A->kn_mean, A->kn_rstd, A->kn, p->kn_w, p->kn_b, bt * c->g);
	if (rot) {
		k->qkv_split_backward(qkv, A->q, A->kk, A->v, NULL, NULL, B, T, c->a, c->g, c->k, 0, false);
		k->qkv_split_forward(A->q, A->kk, A->v, qkv, cos, sin, B, T, c->a, c->g, c->k, rot,
				     p->spec.rot_interleaved);
	}
}

/* Layer l's attention-dropout counters, continued past the heads of the lower
 * tensor-parallel ranks so that any TP size draws the one-rank masks. */
static uint64_t attn_offset(const struct gpt_model *m, int l)
{
	return site_offset(3 * l) + (uint64_t)m->par.tp_rank * (uint64_t)m->lc.a * (uint64_t)m->B *
					    (uint64_t)m->c.S * (uint64_t)m->c.S;
}

/* 1/sqrt(k); with multi-latent attention k is qk_head + qk_pos, and
 * Megatron's scale is m^2/sqrt(k) with m = rope_yarn_mscale(--rotary-scaling-
 * factor, --mscale-all-dim), whichever --rope-type (MLASelfAttention) */
static float attn_scale(const struct gpt_model *m)
{
	const struct gpt_config *c = &m->lc;
	if (c->mla) {
		double ms = rope_yarn_mscale(c->yarn_cfg.factor, c->yarn_cfg.mscale_all_dim);
		return (float)(ms * ms / sqrt((double)c->k));
	}
	return 1.0f / sqrtf((float)c->k);
}

/* Core attention of layer l on a training pass (the block op on positions
 * 0..S-1 with S = T draws the dropout masks of attention_forward). */
void core_attention_forward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A, float p)
{
	const struct gpt_config *c = &m->lc;
	const struct gpt_slot *sl = P->sl;
	const int w = m->lp[l].spec.window;
	if (m->par.cp)
		ring_attn_forward(&m->par.ring, A->atty, A->alse, A->q, A->kk, A->v, sl->use_doc ? sl->doc : NULL,
				  attn_scale(m), w, p, sl->drop_seed, attn_offset(m, l));
	else if (m->flash)
		m->k->attention_block_forward(A->atty, A->alse, A->q, A->kk, A->v, m->flash_pos, m->flash_pos,
					      sl->use_doc ? sl->doc : NULL, P->B, P->T, P->T, c->a, c->g, c->k, P->T,
					      attn_scale(m), w, p, sl->drop_seed, attn_offset(m, l), 0);
	else
		m->k->attention_forward(A->atty, A->probs, A->q, A->kk, A->v, sl->use_doc ? sl->doc : NULL, P->B,
					P->T, c->a, c->g, c->k, attn_scale(m), w, p, sl->drop_seed, attn_offset(m, l));
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
				   P->sl->use_doc ? P->sl->doc : NULL, attn_scale(m), m->lp[l].spec.window,
				   c->attention_dropout, seed, attn_offset(m, l));
	} else if (m->flash) {
		/* the block op adds its share into the grads */
		size_t nq = (size_t)P->N * c->a * c->k, nkv = (size_t)P->N * c->g * c->k;
		m->k->zero(s->dq, nq);
		m->k->zero(s->dk, nkv);
		m->k->zero(s->dv, nkv);
		m->k->attention_block_backward(s->dq, s->dk, s->dv, datty, A->atty, A->alse, A->q, A->kk, A->v,
					       m->flash_pos, m->flash_pos, P->sl->use_doc ? P->sl->doc : NULL, P->B, P->T,
					       P->T, c->a, c->g, c->k, P->T, attn_scale(m), m->lp[l].spec.window,
					       c->attention_dropout, seed, attn_offset(m, l));
	} else {
		m->k->attention_backward(s->dq, s->dk, s->dv, datty, A->q, A->kk, A->v, A->probs, P->B, P->T, c->a,
					 c->g, c->k, attn_scale(m), c->attention_dropout, seed, attn_offset(m, l));
	}
}

/* The key (or value) cache of layer l of a request slot: [g][max_seq][k],
 * this rank's query groups (kv->layer[l]: its place among the layers with
 * attention). */
static float *cache_at(const struct gpt_model *m, float *base, int slot, int l)
{
	size_t per = (size_t)m->lc.g * m->kv->max_seq * m->lc.k;
	return base + ((size_t)slot * m->kv->nattn + m->kv->layer[l]) * per;
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
		qkv_split(m, &m->lp[l], A, m->s.qkv + (size_t)r0 * (ak + 2 * gk), cs, sn, 1, n);
		float *K = cache_at(m, kv->k, st->slot[s], l), *V = cache_at(m, kv->v, st->slot[s], l);
		for (int j = 0; j < c->g; j++) {
			size_t to = ((size_t)j * kv->max_seq + pos) * c->k, from = (size_t)j * n * c->k;
			k->copy(K + to, A->kk + from, (size_t)n * c->k * sizeof(float));
			k->copy(V + to, A->v + from, (size_t)n * c->k * sizeof(float));
		}
		k->attention_block_forward(A->atty + (size_t)r0 * ak, A->alse, A->q, K, V, P->sl->positions + r0,
					   kv->kpos, NULL, 1, n, kv->max_seq, c->a, c->g, c->k, kv->max_seq,
					   attn_scale(m), m->lp[l].spec.window, 0, 0, 0, 0);
	}
}

/* ---- multi-latent attention: the projections around core attention ---- */

/* Column blocks of float matrices (ops.h copy_rows, in floats): rows runs
 * of width floats, from src with row pitch sp to dst with row pitch dp. */
static void cols(struct gpt_model *m, float *dst, size_t dp, const float *src, size_t sp, size_t width, size_t rows)
{
	m->k->copy_rows(dst, dp * sizeof(float), src, sp * sizeof(float), width * sizeof(float), rows);
}

/* Megatron's MLA RoPE de-interleave: channel i of the RoPE part after it is
 * channel mla_perm(i) before (the even channels, then the odd ones). */
static int mla_perm(int i, int rot)
{
	return i < rot / 2 ? 2 * i : 2 * (i - rot / 2) + 1;
}

/* The projections' outputs (s.mla_q, s.mla_kv, s.mla_kvc) into the fused
 * layout F ([N][a][q | k | v], k channels each; zeroed first), or, with
 * back, F's gradient into theirs (s.mla_kvc: only its RoPE columns). */
static void mla_pack(struct gpt_model *m, float *F, int N, bool back)
{
	const struct gpt_config *c = &m->lc;
	struct gpt_scratch *s = &m->s;
	size_t a = (size_t)c->a, k = (size_t)c->k, qh = (size_t)c->qk_head, qp = (size_t)c->qk_pos;
	size_t vh = (size_t)c->v_head, kv = qh + vh, dn = (size_t)c->kv_lora + qp, f = 3 * k, rows = (size_t)N * a;
	if (!back) {
		m->k->zero(F, rows * f);
		cols(m, F + qp, f, s->mla_q, k, qh, rows);
		cols(m, F + k + qp, f, s->mla_kv, kv, qh, rows);
		cols(m, F + 2 * k, f, s->mla_kv + qh, kv, vh, rows);
		for (size_t i = 0; i < qp; i++) {
			size_t j = (size_t)mla_perm((int)i, (int)qp);
			cols(m, F + i, f, s->mla_q + qh + j, k, 1, rows);
			cols(m, s->mla_kp + i, qp, s->mla_kvc + c->kv_lora + j, dn, 1, (size_t)N);
		}
		for (size_t h = 0; h < a; h++) /* the one RoPE key into every head */
			cols(m, F + h * f + k, a * f, s->mla_kp, qp, qp, (size_t)N);
		return;
	}
	cols(m, s->mla_q, k, F + qp, f, qh, rows);
	cols(m, s->mla_kv, kv, F + k + qp, f, qh, rows);
	cols(m, s->mla_kv + qh, kv, F + 2 * k, f, vh, rows);
	for (size_t h = 0; h < a; h++) { /* the shared key's gradient: every head's */
		cols(m, h ? s->mla_kt : s->mla_kp, qp, F + h * f + k, a * f, qp, (size_t)N);
		if (h)
			m->k->add(s->mla_kp, s->mla_kp, s->mla_kt, (size_t)N * qp);
	}
	for (size_t i = 0; i < qp; i++) {
		size_t j = (size_t)mla_perm((int)i, (int)qp);
		cols(m, s->mla_q + qh + j, k, F + i, f, 1, rows);
		cols(m, s->mla_kvc + c->kv_lora + j, dn, s->mla_kp + i, qp, 1, (size_t)N);
	}
}

/* The up-projections from A's compressed query (ln1 without --q-lora-rank)
 * and key/value and s.mla_kvc's RoPE key, their norms, and RoPE, into A's q,
 * kk, v (the value zero-padded to k channels); Megatron's
 * qkv_up_proj_and_rope_apply, which --recompute-modules mla_up_proj reruns. */
static void mla_up_forward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A,
			   const float *ln1)
{
	const struct gpt_config *c = &m->lc;
	const struct gpt_layer_params *p = &m->lp[l];
	struct gpt_scratch *s = &m->s;
	int N = P->N, h = c->h, ql = c->q_lora, kvl = c->kv_lora, qk = c->a * c->k;
	if (ql) {
		if (p->spec.mla_norm)
			chan_norm_fwd(m, A->mla_qcn, A->mla_qc_mean, A->mla_qc_rstd, A->mla_qc, p->mqn_w, p->mqn_b,
				      (size_t)N, ql);
		linear_fwd(m, s->mla_q, A->mla_qcn, p->mq_w, -1, N, ql, qk);
	} else {
		linear_fwd(m, s->mla_q, ln1, p->mq_w, -1, N, h, qk);
	}
	if (p->spec.mla_norm)
		chan_norm_fwd(m, A->mla_kvn, A->mla_kv_mean, A->mla_kv_rstd, A->mla_kvx, p->mkvn_w, p->mkvn_b, (size_t)N,
			      kvl);
	linear_fwd(m, s->mla_kv, A->mla_kvn, p->mkvu_w, -1, N, kvl, c->a * (c->qk_head + c->v_head));
	mla_pack(m, s->qkv, N, false);
	if (P->kv) /* serving: cached_attention_forward splits and turns each sequence at its positions */
		return;
	m->k->qkv_split_forward(A->q, A->kk, A->v, s->qkv, m->rope_cos, m->rope_sin, P->B, P->T, c->a, c->a, c->k,
				c->qk_pos, false);
	size_t n = (size_t)N * qk;
	round_half(m, A->q, n);
	round_half(m, A->kk, n);
	round_half(m, A->v, n);
}

/* ln1 (all rows) through the down- and up-projections into A's q, kk, v. */
static void mla_qkv_forward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A,
			    const float *ln1)
{
	const struct gpt_config *c = &m->lc;
	const struct gpt_layer_params *p = &m->lp[l];
	struct gpt_scratch *s = &m->s;
	int N = P->N, h = c->h, ql = c->q_lora, kvl = c->kv_lora, dn = kvl + c->qk_pos;
	if (ql)
		linear_fwd(m, A->mla_qc, ln1, p->mqd_w, -1, N, h, ql);
	linear_fwd(m, s->mla_kvc, ln1, p->mkvd_w, -1, N, h, dn);
	cols(m, A->mla_kvx, (size_t)kvl, s->mla_kvc, (size_t)dn, (size_t)kvl, (size_t)N);
	if (A->mla_kpos) /* kept for the recompute */
		cols(m, A->mla_kpos, (size_t)c->qk_pos, s->mla_kvc + kvl, (size_t)dn, (size_t)c->qk_pos, (size_t)N);
	mla_up_forward(m, P, l, A, ln1);
}

void mla_up_recompute(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A)
{
	const struct gpt_config *c = &m->lc;
	struct gpt_scratch *s = &m->s;
	size_t dn = (size_t)c->kv_lora + c->qk_pos;
	cols(m, s->mla_kvc + c->kv_lora, dn, A->mla_kpos, (size_t)c->qk_pos, (size_t)c->qk_pos, (size_t)P->N);
	mla_up_forward(m, P, l, A, c->q_lora ? NULL : seq_full(m, P, A->ln1));
}

/* The backward of mla_qkv_forward from s.dq, s.dk, s.dv: this rank's share
 * of dL/d(ln1) into s.dln. */
static void mla_qkv_backward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A)
{
	const struct gpt_config *c = &m->lc;
	const struct gpt_layer_params *p = &m->lp[l];
	struct gpt_scratch *s = &m->s;
	int N = P->N, h = c->h, ql = c->q_lora, kvl = c->kv_lora, qk = c->a * c->k, dn = kvl + c->qk_pos;
	m->k->qkv_split_backward(s->qkv, s->dq, s->dk, s->dv, m->rope_cos, m->rope_sin, P->B, P->T, c->a, c->a, c->k,
				 c->qk_pos, false);
	mla_pack(m, s->qkv, N, true);
	const float *ln1 = seq_full(m, P, A->ln1);
	/* key/value: the up-projection, its norm, the down-projection (into s.dtmp) */
	linear_bwd(m, s->mla_dc, s->mla_kv, A->mla_kvn, p->mkvu_w, -1, N, kvl, c->a * (c->qk_head + c->v_head));
	const float *dkvx = s->mla_dc;
	if (p->spec.mla_norm) {
		chan_norm_bwd(m, s->mla_dc2, s->mla_dc, A->mla_kvx, p->mkvn_w, p->mkvn_b, A->mla_kv_mean, A->mla_kv_rstd,
			      (size_t)N, kvl);
		dkvx = s->mla_dc2;
	}
	cols(m, s->mla_kvc, (size_t)dn, dkvx, (size_t)kvl, (size_t)kvl, (size_t)N);
	linear_bwd(m, s->dtmp, s->mla_kvc, ln1, p->mkvd_w, -1, N, h, dn);
	/* query */
	if (ql) {
		linear_bwd(m, s->mla_dc, s->mla_q, A->mla_qcn, p->mq_w, -1, N, ql, qk);
		const float *dqc = s->mla_dc;
		if (p->spec.mla_norm) {
			chan_norm_bwd(m, s->mla_dc2, s->mla_dc, A->mla_qc, p->mqn_w, p->mqn_b, A->mla_qc_mean,
				      A->mla_qc_rstd, (size_t)N, ql);
			dqc = s->mla_dc2;
		}
		linear_bwd(m, s->dln, dqc, ln1, p->mqd_w, -1, N, h, ql);
	} else {
		linear_bwd(m, s->dln, s->mla_q, ln1, p->mq_w, -1, N, h, qk);
	}
	m->k->add(s->dln, s->dln, s->dtmp, (size_t)N * h);
	round_half(m, s->dln, (size_t)N * h);
}

/* Core attention's output [N, a*k] without the value's padding: [N, a*v_head] */
static void mla_out_compact(struct gpt_model *m, float *dst, const float *atty, int N)
{
	const struct gpt_config *c = &m->lc;
	cols(m, dst, (size_t)c->v_head, atty, (size_t)c->k, (size_t)c->v_head, (size_t)N * c->a);
}

const float *attention_forward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A,
			       const float *ln1)
{
	const struct gpt_config *c = &m->lc;
	const struct gpt_layer_params *p = &m->lp[l];
	int qkv = (c->a + 2 * c->g) * c->k, ak = c->a * c->k;
	if (p->spec.mla) {
		mla_qkv_forward(m, P, l, A, ln1);
		if (P->kv) /* serving: each head's key and padded value go into the cache as any head's */
			cached_attention_forward(m, P, l, A);
		else
			core_attention_forward(m, P, l, A, P->train ? c->attention_dropout : 0);
		mla_out_compact(m, m->s.datty, A->atty, P->N);
		return row_parallel(m, P, m->s.datty, p->proj_w, p->proj_b, c->a * c->v_head);
	}
	if (qkv_gathered(m)) { /* fewer query groups than TP ranks: this rank's rows of the global split */
		linear_fwd(m, m->s.qkv_part, ln1, p->qkv_w, p->qkv_b, P->N, c->h,
			   (m->c.a + 2 * m->c.g) * c->k / m->par.tp_size);
		qkv_gather(m, m->s.qkv, P->N);
	} else {
		linear_fwd(m, m->s.qkv, ln1, p->qkv_w, p->qkv_b, P->N, c->h, qkv);
	}
	if (P->kv) {
		cached_attention_forward(m, P, l, A);
	} else {
		qkv_split(m, p, A, m->s.qkv, m->rope_cos, m->rope_sin, P->B, P->T);
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
	if (p->spec.mla) { /* linear_proj on the unpadded output, the padding's gradient 0 */
		int av = c->a * c->v_head;
		mla_out_compact(m, s->dq, A->atty, N);
		linear_bwd(m, s->dk, dattn, s->dq, p->proj_w, p->proj_b, N, av, h);
		m->k->zero(s->datty, (size_t)N * ak);
		cols(m, s->datty, (size_t)c->k, s->dk, (size_t)c->v_head, (size_t)c->v_head, (size_t)N * c->a);
		core_attention_backward(m, P, l, A, s->datty);
		mla_qkv_backward(m, P, l, A);
		return;
	}
	linear_bwd(m, s->datty, dattn, A->atty, p->proj_w, p->proj_b, N, ak, h);
	core_attention_backward(m, P, l, A, s->datty);
	const struct kops *k = m->k;
	int rot = p->spec.rot;
	if (!p->spec.qk_norm) {
		k->qkv_split_backward(s->qkv, s->dq, s->dk, s->dv, m->rope_cos, m->rope_sin, P->B, P->T, c->a, c->g,
				      c->k, rot, p->spec.rot_interleaved);
	} else {
		/* RoPE's backward (through the fused layout), then the norms': dL/dq
		 * before its norm into datty (free since core attention's backward),
		 * dL/dk into dq */
		size_t bt = (size_t)P->B * P->T;
		if (rot) {
			k->qkv_split_backward(s->qkv, s->dq, s->dk, s->dv, m->rope_cos, m->rope_sin, P->B, P->T, c->a,
					      c->g, c->k, rot, p->spec.rot_interleaved);
			k->qkv_split_forward(s->dq, s->dk, s->dv, s->qkv, NULL, NULL, P->B, P->T, c->a, c->g, c->k, 0, false);
		}
		head_norm_bwd(m, s->datty, s->dq, A->qn, p->qn_w, p->qn_b, A->qn_mean, A->qn_rstd, bt * c->a);
		head_norm_bwd(m, s->dq, s->dk, A->kn, p->kn_w, p->kn_b, A->kn_mean, A->kn_rstd, bt * c->g);
		k->qkv_split_backward(s->qkv, s->datty, s->dq, s->dv, NULL, NULL, P->B, P->T, c->a, c->g, c->k, 0, false);
	}
	/* the fused QKV output's space holds its gradient: free by now */
	if (qkv_gathered(m)) {
		qkv_scatter_grad(m, s->qkv, N);
		linear_bwd(m, s->dln, s->qkv_part, seq_full(m, P, A->ln1), p->qkv_w, p->qkv_b, N, h,
			   (m->c.a + 2 * m->c.g) * c->k / m->par.tp_size);
	} else {
		linear_bwd(m, s->dln, s->qkv, seq_full(m, P, A->ln1), p->qkv_w, p->qkv_b, N, h, qkv);
	}
}
