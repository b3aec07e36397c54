/*
 * gpt.c - see gpt.h. The layer is Megatron Core's TransformerLayer with the
 * TE spec: the input norm is fused into linear_qkv and the pre-MLP norm into
 * linear_fc1 (hence their parameter names), pre-norm residuals, bias-dropout-
 * add after linear_proj and linear_fc2. Activations are batch-major
 * [B, S, h]; Megatron's [S, B, h] only changes the order of independent rows.
 *
 * Dropout masks are a pure function of (micro-batch seed, site, element):
 * site 3l is layer l's attention probabilities, 3l+1 its attention output,
 * 3l+2 its MLP output, 3L the embedding. So recomputation and resumed runs
 * draw the same masks without storing them.
 */
#include "model/gpt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"

#define SITE_SHIFT 40 /* 2^40 counters per dropout site: more than B*a*S*S ever reaches */

static uint64_t site_offset(int site)
{
	return (uint64_t)site << SITE_SHIFT;
}

/* Layer l's attention-dropout counters, continued past the heads of the lower
 * tensor-parallel ranks so that any TP size draws the one-rank masks. */
static uint64_t attn_offset(const struct gpt_model *m, int l)
{
	return site_offset(3 * l) + (uint64_t)m->tp_rank * (uint64_t)m->lc.a * (uint64_t)m->B *
					    (uint64_t)m->c.S * (uint64_t)m->c.S;
}

int gpt_global_pos(const struct gpt_model *m, int j)
{
	return m->cp ? ring_attn_global_pos(&m->ring, j) : j;
}

float *gpt_param(struct gpt_model *m, int idx)
{
	return idx < 0 ? NULL : m->work + m->reg.p[idx].offset;
}

float *gpt_grad(struct gpt_model *m, int idx)
{
	return idx < 0 ? NULL : m->reg.grad + m->reg.p[idx].offset;
}

/* ---- registration ---- */

static int reg1(struct gpt_model *m, const char *name, int64_t n, int tp_axis, enum param_init init, float std)
{
	int64_t shape[1] = { n };
	return params_add(&m->reg, name, 1, shape, tp_axis, m->tp_size, m->tp_rank, 0, init, std);
}

static int reg2(struct gpt_model *m, const char *name, int64_t r, int64_t c, int tp_axis, float std)
{
	int64_t shape[2] = { r, c };
	return params_add(&m->reg, name, 2, shape, tp_axis, m->tp_size, m->tp_rank, 0, PARAM_INIT_NORMAL, std);
}

/* A MoE layer's MLP (docs/moe-spec.md section 5): its own pre-MLP norm,
 * the router, E experts and an optional shared expert; the attention part
 * is register_layer's. Experts split over TP as the dense MLP does; with
 * expert parallelism this rank registers only its own experts, under their
 * global numbers, so checkpoints do not depend on the split. */
/* Norm weights start at 1, or at 0 when stored zero-centred (--apply-layernorm-1p) */
#define NORM_INIT(c) ((c)->norm_1p ? PARAM_INIT_ZERO : PARAM_INIT_ONE)

static void register_moe(struct gpt_model *m, int l)
{
	const struct gpt_config *c = &m->c;
	char name[PARAM_NAME_MAX];
	float std = c->init_std, out_std = c->init_std / sqrtf(2.0f * (float)c->L);
	int64_t f1 = c->swiglu ? 2 * (int64_t)c->moe_f : c->moe_f;
	int64_t s1 = c->swiglu ? 2 * (int64_t)c->shared_f : c->shared_f;
	struct gpt_layer_params *p = &m->lp[l];
#define NAME(...) (snprintf(name, sizeof(name), __VA_ARGS__), name)
	p->moe = true;
	p->fc1_w = p->fc1_b = p->fc2_w = p->fc2_b = -1;
	p->ln2_w = reg1(m, NAME("decoder.layers.%d.pre_mlp_layernorm.weight", l), c->h, -1, NORM_INIT(c), 0);
	p->ln2_b = c->rmsnorm ? -1 :
		reg1(m, NAME("decoder.layers.%d.pre_mlp_layernorm.bias", l), c->h, -1, PARAM_INIT_ZERO, 0);
	p->router_w = reg2(m, NAME("decoder.layers.%d.mlp.router.weight", l), c->E, c->h, -1, std);
	p->efc1_w = xcalloc((size_t)c->E, sizeof(int));
	p->efc2_w = xcalloc((size_t)c->E, sizeof(int));
	for (int e = 0; e < c->E; e++) {
		p->efc1_w[e] = p->efc2_w[e] = -1;
		if (e < m->e0 || e >= m->e0 + m->El)
			continue;
		p->efc1_w[e] = reg2(m, NAME("decoder.layers.%d.mlp.experts.local_experts.%d.linear_fc1.weight", l, e), f1,
				    c->h, 0, std);
		m->reg.p[p->efc1_w[e]].flags |= PARAM_EXPERT | (c->swiglu ? PARAM_GLU : 0);
		p->efc2_w[e] = reg2(m, NAME("decoder.layers.%d.mlp.experts.local_experts.%d.linear_fc2.weight", l, e),
				    c->h, c->moe_f, 1, out_std);
		m->reg.p[p->efc2_w[e]].flags |= PARAM_EXPERT;
	}
	p->sfc1_w = p->sfc2_w = -1;
	if (c->shared_f > 0) {
		p->sfc1_w = reg2(m, NAME("decoder.layers.%d.mlp.shared_experts.linear_fc1.weight", l), s1, c->h, 0, std);
		if (c->swiglu)
			m->reg.p[p->sfc1_w].flags |= PARAM_GLU;
		p->sfc2_w = reg2(m, NAME("decoder.layers.%d.mlp.shared_experts.linear_fc2.weight", l), c->h, c->shared_f,
				 1, out_std);
	}
#undef NAME
}

static void register_layer(struct gpt_model *m, int l)
{
	const struct gpt_config *c = &m->c; /* global shapes; the registry derives each rank's slice */
	char name[PARAM_NAME_MAX];
	float std = c->init_std, out_std = c->init_std / sqrtf(2.0f * (float)c->L);
	int64_t qkv = (int64_t)(c->a + 2 * c->g) * c->k, ak = (int64_t)c->a * c->k;
	int64_t f1 = c->swiglu ? 2 * (int64_t)c->f : c->f;
	struct gpt_layer_params *p = &m->lp[l];
	p->pfirst = m->reg.n;
#define NAME(fmt) (snprintf(name, sizeof(name), "decoder.layers.%d." fmt, l), name)
	p->ln1_w = reg1(m, NAME("self_attention.linear_qkv.layer_norm_weight"), c->h, -1, NORM_INIT(c), 0);
	p->ln1_b = c->rmsnorm ? -1 :
		reg1(m, NAME("self_attention.linear_qkv.layer_norm_bias"), c->h, -1, PARAM_INIT_ZERO, 0);
	p->qkv_w = reg2(m, NAME("self_attention.linear_qkv.weight"), qkv, c->h, 0, std);
	p->qkv_b = c->bias ? reg1(m, NAME("self_attention.linear_qkv.bias"), qkv, 0, PARAM_INIT_ZERO, 0) : -1;
	p->proj_w = reg2(m, NAME("self_attention.linear_proj.weight"), c->h, ak, 1, out_std);
	p->proj_b = c->bias ? reg1(m, NAME("self_attention.linear_proj.bias"), c->h, -1, PARAM_INIT_ZERO, 0) : -1;
	if (c->E > 0 && c->moe_layer[l]) {
		register_moe(m, l);
		p->pend = m->reg.n;
		return;
	}
	p->ln2_w = reg1(m, NAME("mlp.linear_fc1.layer_norm_weight"), c->h, -1, NORM_INIT(c), 0);
	p->ln2_b = c->rmsnorm ? -1 : reg1(m, NAME("mlp.linear_fc1.layer_norm_bias"), c->h, -1, PARAM_INIT_ZERO, 0);
	p->fc1_w = reg2(m, NAME("mlp.linear_fc1.weight"), f1, c->h, 0, std);
	p->fc1_b = c->bias ? reg1(m, NAME("mlp.linear_fc1.bias"), f1, 0, PARAM_INIT_ZERO, 0) : -1;
	if (c->swiglu) { /* each rank holds [gate_r; up_r] of the global [W_gate; W_up] */
		m->reg.p[p->fc1_w].flags |= PARAM_GLU;
		if (p->fc1_b >= 0)
			m->reg.p[p->fc1_b].flags |= PARAM_GLU;
	}
	p->fc2_w = reg2(m, NAME("mlp.linear_fc2.weight"), c->h, c->f, 1, out_std);
	p->fc2_b = c->bias ? reg1(m, NAME("mlp.linear_fc2.bias"), c->h, -1, PARAM_INIT_ZERO, 0) : -1;
	p->pend = m->reg.n;
#undef NAME
}

/* In Megatron's order, chunk by chunk: embedding, layers, final norm and
 * output layer, each where its chunk has it. */
static void register_params(struct gpt_model *m)
{
	const struct gpt_config *c = &m->c;
	m->wte = m->wpe = m->lnf_w = m->lnf_b = m->out_w = -1;
	for (int v = 0; v < m->nchunks; v++) {
		const struct gpt_chunk *ch = &m->chunks[v];
		if (ch->pre) {
			m->wte = reg2(m, "embedding.word_embeddings.weight", c->Vp, c->h, 0, c->init_std);
			if (!c->untied) /* the output layer too, here or as the last stage's copy */
				m->reg.p[m->wte].flags |= PARAM_TIED;
			m->wpe = c->rope ? -1 : reg2(m, "embedding.position_embeddings.weight", c->P, c->h, -1, c->init_std);
		}
		for (int l = ch->l0; l < ch->l0 + ch->nl; l++)
			register_layer(m, l);
		if (!ch->post)
			continue;
		m->lnf_w = reg1(m, "decoder.final_layernorm.weight", c->h, -1, NORM_INIT(c), 0);
		m->lnf_b = c->rmsnorm ? -1 : reg1(m, "decoder.final_layernorm.bias", c->h, -1, PARAM_INIT_ZERO, 0);
		if (c->untied) {
			m->out_w = reg2(m, "output_layer.weight", c->Vp, c->h, 0, c->init_std);
		} else if (m->wte >= 0) {
			m->out_w = m->wte;
		} else {
			/* the last stage's copy of the first stage's word embeddings: same
			 * name, so it initialises and loads to the same values */
			m->out_w = reg2(m, "embedding.word_embeddings.weight", c->Vp, c->h, 0, c->init_std);
			m->reg.p[m->out_w].flags |= PARAM_TIED | PARAM_SHARED;
		}
	}
	if (m->wte >= 0)
		m->reg.p[m->wte].flags |= PARAM_EMB_OR_OUT;
	if (m->out_w >= 0)
		m->reg.p[m->out_w].flags |= PARAM_EMB_OR_OUT;
	/* Under SP the norms see only this rank's positions: their gradients are
	 * summed over TP (Megatron's sequence_parallel parameters). */
	for (int i = 0; m->sp && i < m->reg.n; i++)
		if (strstr(m->reg.p[i].name, "layer_norm_") || strstr(m->reg.p[i].name, "final_layernorm") ||
		    strstr(m->reg.p[i].name, "pre_mlp_layernorm"))
			m->reg.p[i].flags |= PARAM_SP;
	/* expert parallelism: the experts after everything else, the part of
	 * the buffers reduced over its own data-parallel group (without it the
	 * registration order stays the buffers' order, one run of buckets) */
	m->expert_lo = c->E > 0 && m->ep ? params_move_last(&m->reg, PARAM_EXPERT) : m->reg.total;
}

/* ---- buffers ---- */

/* Every buffer is noted, so gpt_free gives back exactly what was taken. */
static void *take_bytes(struct gpt_model *m, size_t bytes)
{
	void *p = mem_alloc(m->mem, bytes);
	if (!p)
		return NULL;
	if (m->nallocs == m->cap_allocs)
		xgrow(&m->allocs, &m->cap_allocs, m->nallocs + 1, sizeof(*m->allocs));
	m->allocs[m->nallocs].p = p;
	m->allocs[m->nallocs].bytes = bytes;
	m->nallocs++;
	return p;
}

static float *take(struct gpt_model *m, size_t n)
{
	return take_bytes(m, n * sizeof(float));
}

/* A MoE layer's activations (its routing plan's host memory comes later,
 * from the router) */
static struct gpt_moe_acts *alloc_moe_acts(struct gpt_model *m)
{
	const struct gpt_config *c = &m->lc;
	size_t BT = (size_t)m->B * c->S, h = c->h, R = BT * (size_t)c->router.k, Rl = gpt_moe_rows_local(m);
	size_t f1 = c->swiglu ? 2 * (size_t)c->moe_f : (size_t)c->moe_f;
	size_t s1 = c->swiglu ? 2 * (size_t)c->shared_f : (size_t)c->shared_f;
	struct gpt_moe_acts *M = xcalloc(1, sizeof(*M));
	if (m->nmoe == m->cap_moe)
		xgrow(&m->moe_all, &m->cap_moe, m->nmoe + 1, sizeof(*m->moe_all));
	m->moe_all[m->nmoe++] = M;
	M->z_host = xmalloc(BT * (size_t)c->E * sizeof(float) + 1);
	M->z = take(m, BT * c->E);
	M->row_tok = take_bytes(m, R * sizeof(int32_t));
	M->tok_rowptr = take_bytes(m, (BT + 1) * sizeof(int32_t));
	M->tok_rows = take_bytes(m, R * sizeof(int32_t));
	M->row_w = take(m, R);
	M->xperm = take(m, R * h);
	M->xloc = m->ep ? take(m, Rl * h) : M->xperm;
	M->fc1 = take(m, Rl * f1);
	M->act = take(m, Rl * (size_t)c->moe_f);
	M->rows_cap = Rl;
	M->y = take(m, R * h);
	M->cnt = xcalloc((size_t)m->ep_size * (size_t)m->El, sizeof(int32_t));
	M->loff = xcalloc((size_t)m->El + 1, sizeof(int32_t));
	if (c->shared_f > 0) {
		M->sfc1 = take(m, BT * s1);
		M->sact = take(m, BT * (size_t)c->shared_f);
	}
	return M;
}

static void alloc_layer_acts(struct gpt_model *m, struct gpt_layer_acts *A, bool probs, bool dense, bool moe)
{
	const struct gpt_config *c = &m->lc;
	size_t BT = (size_t)m->B * c->S, h = c->h;
	size_t f1 = c->swiglu ? 2 * (size_t)c->f : (size_t)c->f;
	size_t BTl = (size_t)m->Nl; /* rows of this rank's sequence shard (all rows without SP) */
	A->ln1 = take(m, BTl * h); /* with SP the shard; backward gathers it again, as Megatron */
	A->ln1_mean = take(m, BTl);
	A->ln1_rstd = take(m, BTl);
	A->q = take(m, BT * c->a * c->k);
	A->kk = take(m, BT * c->g * c->k);
	A->v = take(m, BT * c->g * c->k);
	A->probs = probs && !m->cp && !m->flash ? take(m, (size_t)m->B * c->a * c->S * c->S) : NULL;
	A->alse = m->cp || m->flash ? take(m, (size_t)m->B * c->a * c->S) : NULL;
	A->atty = take(m, BT * c->a * c->k);
	A->res1 = take(m, BTl * h);
	A->ln2 = take(m, BTl * h);
	A->ln2_mean = take(m, BTl);
	A->ln2_rstd = take(m, BTl);
	A->fc1 = dense ? take(m, BT * f1) : NULL;
	A->act = dense ? take(m, BT * c->f) : NULL;
	A->moe = moe ? alloc_moe_acts(m) : NULL;
}

/* Which layers are recomputed whole: uniform = all (Megatron recomputes every
 * chunk of N layers from its input), block = the first N of each model chunk
 * (Megatron counts them per pipeline stage and virtual stage). li: the
 * layer's index in its chunk. */
static bool layer_recomputed(const struct gpt_config *c, int li)
{
	if (c->recompute != GPT_RECOMPUTE_FULL)
		return false;
	return c->recompute_block ? li < c->recompute_layers : true;
}

/* One micro-batch's activations for chunk ch. */
static void alloc_slot(struct gpt_model *m, const struct gpt_chunk *ch, struct gpt_slot *sl)
{
	const struct gpt_config *c = &m->lc;
	size_t BT = (size_t)m->B * c->S, BTl = (size_t)m->Nl, h = c->h;
	bool probs_own = c->recompute != GPT_RECOMPUTE_SELECTIVE;
	sl->resid = take(m, (size_t)(ch->nl + 1) * BTl * h);
	sl->acts = xcalloc((size_t)ch->nl + 1, sizeof(*sl->acts));
	for (int li = 0; li < ch->nl; li++) {
		if (m->recomputed[ch->l0 + li]) {
			sl->acts[li] = m->rc_acts;
			continue;
		}
		bool moe = c->E > 0 && c->moe_layer[ch->l0 + li];
		alloc_layer_acts(m, &sl->acts[li], probs_own, !moe, moe);
		if (!probs_own)
			sl->acts[li].probs = m->probs_shared;
	}
	if (ch->post) {
		sl->lnf = take(m, BT * h);
		sl->lnf_mean = take(m, BTl);
		sl->lnf_rstd = take(m, BTl);
		sl->logits = take(m, BT * (size_t)c->Vp);
		sl->losses = take(m, BT);
		sl->lse = take(m, BT);
	}
	sl->tokens = take_bytes(m, BT * sizeof(int32_t));
	sl->targets = take_bytes(m, BT * sizeof(int32_t));
	sl->positions = take_bytes(m, BT * sizeof(int32_t));
	sl->doc = take_bytes(m, BT * sizeof(int32_t));
}

/* Point the model's working pointers at slot s of chunk v. */
static void bind(struct gpt_model *m, int v, int s)
{
	if (v < 0 || v >= m->nchunks || s < 0 || s >= m->chunks[v].nslots)
		BUG("chunk %d slot %d of %d chunks", v, s, m->nchunks);
	const struct gpt_chunk *ch = &m->chunks[v];
	struct gpt_slot *sl = &ch->slots[s];
	m->l0 = ch->l0;
	m->resid = sl->resid;
	m->acts = sl->acts;
	m->lnf = sl->lnf;
	m->lnf_mean = sl->lnf_mean;
	m->lnf_rstd = sl->lnf_rstd;
	m->logits = sl->logits;
	m->losses = sl->losses;
	m->lse = sl->lse;
	m->tokens = sl->tokens;
	m->targets = sl->targets;
	m->positions = sl->positions;
	m->doc = sl->doc;
	m->use_doc = sl->use_doc;
	m->use_positions = sl->use_positions;
	m->drop_seed = sl->drop_seed;
}

int gpt_init(struct gpt_model *m, const struct gpt_config *c, const struct kops *k, struct mem_pool *mem,
	     int B, enum gpt_precision precision, struct dist_group *tp, bool sp)
{
	struct gpt_pipe one = { 1, 0, 1, NULL, NULL, false, NULL };
	return gpt_init_pipe(m, c, k, mem, B, precision, tp, sp, &one);
}

int gpt_init_pipe(struct gpt_model *m, const struct gpt_config *c, const struct kops *k, struct mem_pool *mem,
		  int B, enum gpt_precision precision, struct dist_group *tp, bool sp, const struct gpt_pipe *pipe)
{
	memset(m, 0, sizeof(*m));
	m->c = *c;
	m->k = k;
	m->mem = mem;
	m->B = B;
	m->precision = precision;
	m->moe_aux_scale = 1.0; /* Megatron's initial MoEAuxLossAutoScaler scale */
	m->tp = tp && tp->size > 1 ? tp : NULL;
	m->tp_size = m->tp ? tp->size : 1;
	m->tp_rank = m->tp ? tp->rank : 0;
	int t = m->tp_size;
	if (c->E > 0 && (c->moe_f % t || c->shared_f % t))
		return error("tensor parallelism %d needs --moe-ffn-hidden-size (%d) and the shared expert size (%d) "
			     "divisible by it", t, c->moe_f, c->shared_f);
	if (c->g % t || c->f % t || c->Vp % t)
		return error("tensor parallelism %d needs query groups (%d), ffn size (%d) and padded vocabulary (%d) "
			     "divisible by it%s", t, c->g, c->f, c->Vp,
			     c->g % t ? " (fewer query groups than TP ranks is not implemented yet)" : "");
	if (pipe->pp < 1 || pipe->vpp < 1 || c->L % (pipe->pp * pipe->vpp))
		return error("%d layers do not split into %d pipeline stages x %d model chunks", c->L, pipe->pp,
			     pipe->vpp);
	/* what this rank computes: its heads, groups, ffn columns and vocabulary rows */
	m->lc = *c;
	m->lc.a /= t;
	m->lc.g /= t;
	m->lc.f /= t;
	m->lc.moe_f /= t; /* experts split over TP as the dense MLP (expert TP = TP) */
	m->lc.shared_f /= t;
	/* Megatron's router sees one TP rank's sequence shard (SP is required
	 * with TP): the capacity applies to each shard */
	m->lc.router.shards = sp && m->tp ? t : 1;
	m->lc.Vp /= t;
	m->vstart = m->tp_rank * m->lc.Vp;
	m->sp = sp && m->tp;
	m->cp = pipe->cp && pipe->cp->size > 1 ? pipe->cp : NULL;
	m->cp_size = m->cp ? m->cp->size : 1;
	m->cp_rank = m->cp ? m->cp->rank : 0;
	if (m->cp) {
		if (c->S % (2 * m->cp_size))
			return error("--context-parallel-size %d needs --seq-length %d divisible by 2 x %d (two chunks "
				     "per rank)", m->cp_size, c->S, m->cp_size);
		if (ring_attn_init(&m->ring, mem, m->cp, B, c->S, m->lc.a, m->lc.g, c->k) < 0)
			return -1;
		m->lc.S = c->S / m->cp_size;
	}
	/* a GPU's flash-style attention, where the op table has one; its block
	 * ops know no document masks, so those keep the probs path */
	m->flash = k->flash && k->attention_block_forward && k->attention_block_backward && !m->cp &&
		   !pipe->doc_masks;
	if (c->E > 0 && m->cp)
		return error("mixture of experts with context parallelism is not implemented yet");
	m->ep = pipe->ep && pipe->ep->size > 1 ? pipe->ep : NULL;
	m->ep_size = m->ep ? m->ep->size : 1;
	m->ep_rank = m->ep ? m->ep->rank : 0;
	if (c->E > 0 && c->E % m->ep_size)
		return error("--num-experts %d is not divisible by --expert-model-parallel-size %d", c->E, m->ep_size);
	if (m->ep && c->E <= 0)
		return error("--expert-model-parallel-size %d needs mixture-of-experts layers", m->ep_size);
	m->El = c->E / m->ep_size;
	m->e0 = m->ep_rank * m->El;
	if (m->sp && m->lc.S % t)
		return error("--sequence-parallel needs --seq-length %d%s divisible by --tensor-model-parallel-size %d",
			     c->S, m->cp ? " / --context-parallel-size" : "", t);
	m->Nl = B * (m->sp ? m->lc.S / t : m->lc.S);
	/* every dropout site numbers its elements below 2^SITE_SHIFT */
	uint64_t attn_counters = (uint64_t)c->a * (uint64_t)B * (uint64_t)c->S * (uint64_t)c->S;
	uint64_t hidden_counters = (uint64_t)B * (uint64_t)c->S * (uint64_t)c->h;
	if ((c->attention_dropout > 0 && attn_counters >> SITE_SHIFT) || (c->hidden_dropout > 0 && hidden_counters >> SITE_SHIFT))
		return error("dropout on %d heads x micro-batch %d x sequence %d^2 needs more than 2^%d mask counters per "
			     "layer; use --attention-dropout 0 (usual for long sequences) or a smaller micro-batch",
			     c->a, B, c->S, SITE_SHIFT);
	m->nchunks = pipe->vpp;
	m->chunks = xcalloc((size_t)m->nchunks, sizeof(*m->chunks));
	m->lp = xcalloc((size_t)c->L, sizeof(*m->lp));
	m->recomputed = xcalloc((size_t)c->L, sizeof(*m->recomputed));
	bool any_rc = false;
	for (int v = 0; v < m->nchunks; v++) {
		struct gpt_chunk *ch = &m->chunks[v];
		dist_stage_layers(c->L, pipe->pp, pipe->vpp, pipe->stage, v, &ch->l0, &ch->nl);
		ch->pre = pipe->stage == 0 && v == 0;
		ch->post = pipe->stage == pipe->pp - 1 && v == pipe->vpp - 1;
		ch->nslots = pipe->nslots ? pipe->nslots[v] : 1;
		if (ch->nslots < 1)
			BUG("chunk %d with %d slots", v, ch->nslots);
		for (int li = 0; li < ch->nl; li++) {
			m->recomputed[ch->l0 + li] = layer_recomputed(c, li);
			any_rc |= m->recomputed[ch->l0 + li];
		}
	}
	register_params(m);
	c = &m->lc;
	m->reg.data = take(m, m->reg.total);
	m->reg.grad = take(m, m->reg.total);
	m->work = precision == GPT_FP32 ? m->reg.data : take(m, m->reg.total);

	size_t BT = (size_t)B * c->S, h = c->h;
	size_t qkv = (size_t)(c->a + 2 * c->g) * c->k, ak = (size_t)c->a * c->k;
	size_t f1 = c->swiglu ? 2 * (size_t)c->f : (size_t)c->f;
	size_t BTl = (size_t)m->Nl;
	/* the scratch set recomputed layers share, and the probs every layer
	 * shares under selective recompute */
	if (any_rc) {
		bool rc_dense = false, rc_moe = false;
		for (int l = 0; l < c->L; l++)
			if (m->recomputed[l] && c->E > 0 && c->moe_layer[l])
				rc_moe = true;
			else if (m->recomputed[l])
				rc_dense = true;
		alloc_layer_acts(m, &m->rc_acts, true, rc_dense, rc_moe);
	}
	if (c->recompute == GPT_RECOMPUTE_SELECTIVE && !m->cp && !m->flash)
		m->probs_shared = take(m, (size_t)B * c->a * c->S * c->S);
	for (int v = 0; v < m->nchunks; v++) {
		struct gpt_chunk *ch = &m->chunks[v];
		ch->slots = xcalloc((size_t)ch->nslots, sizeof(*ch->slots));
		for (int s = 0; s < ch->nslots; s++)
			alloc_slot(m, ch, &ch->slots[s]);
	}
	m->dloss = take(m, BT);
	if (c->rope) {
		/* the table rows of this rank's positions (all of them without CP) */
		int S = m->c.S, T = c->S, rot = c->rot;
		m->rope_cos = take(m, (size_t)T * rot);
		m->rope_sin = take(m, (size_t)T * rot);
		if (!k->counts_only) {
			float *hc = xmalloc((size_t)S * rot * sizeof(float));
			float *hs = xmalloc((size_t)S * rot * sizeof(float));
			kops_rope_table(hc, hs, S, rot, c->rotary_base);
			for (int j = 0; j < T; j++) {
				size_t g = (size_t)gpt_global_pos(m, j) * rot;
				k->to_device(m->rope_cos + (size_t)j * rot, hc + g, (size_t)rot * sizeof(float));
				k->to_device(m->rope_sin + (size_t)j * rot, hs + g, (size_t)rot * sizeof(float));
			}
			free(hc);
			free(hs);
		}
	}
	if (m->flash) {
		m->flash_pos = take_bytes(m, (size_t)c->S * sizeof(int32_t));
		if (!k->counts_only) {
			int32_t *pos = xmalloc((size_t)c->S * sizeof(int32_t));
			for (int j = 0; j < c->S; j++)
				pos[j] = j;
			k->to_device(m->flash_pos, pos, (size_t)c->S * sizeof(int32_t));
			free(pos);
		}
	}
	m->qkv = take(m, BT * qkv);
	m->tmp = take(m, BT * h);
	m->dres = take(m, BTl * h);
	if (m->sp) {
		m->shard = take(m, BTl * h);
		m->perm = take(m, BT * h);
		m->gath = take(m, BT * h);
	}
	m->dtmp = take(m, BT * h);
	if (c->norm_1p) { /* the norms' w + 1 (--apply-layernorm-1p) */
		m->norm_gamma = take(m, h);
		m->norm_ones = take(m, h);
		float *ones = xmalloc(h * sizeof(float));
		for (size_t i = 0; i < h; i++)
			ones[i] = 1.0f;
		m->k->to_device(m->norm_ones, ones, h * sizeof(float));
		free(ones);
	}
	m->dln = take(m, BT * h);
	m->datty = take(m, BT * ak);
	m->dq = take(m, BT * ak);
	m->dk = take(m, BT * c->g * c->k);
	m->dv = take(m, BT * c->g * c->k);
	m->dqkv = m->qkv; /* forward scratch, free by the time a layer's backward needs it */
	m->dfc1 = take(m, BT * f1);
	m->dact = take(m, BT * c->f);
	if (c->E > 0) {
		size_t R = BT * (size_t)c->router.k, fm = (size_t)c->moe_f, fs = (size_t)c->shared_f;
		size_t f1m = c->swiglu ? 2 * fm : fm, f1s = c->swiglu ? 2 * fs : fs, Rl = gpt_moe_rows_local(m);
		m->moe_dy = take(m, R * h);
		m->moe_dx = take(m, R * h);
		m->moe_dact = take(m, Rl * fm > BT * fs ? Rl * fm : BT * fs);
		m->moe_dfc1 = take(m, Rl * f1m > BT * f1s ? Rl * f1m : BT * f1s);
		m->moe_rows_cap = Rl;
		if (m->ep) {
			size_t rows = Rl > R ? Rl : R;
			m->moe_xa = take(m, rows * h);
			m->moe_xb = take(m, rows * h);
			m->moe_cnt_all = xcalloc((size_t)m->ep_size * (size_t)c->E, sizeof(int32_t));
		}
		m->moe_dw = take(m, R);
		m->moe_dz = take(m, BT * c->E);
		if (fs > 0)
			m->moe_out2 = take(m, BT * h);
		m->moe_dw_host = xmalloc(R * sizeof(float) + 1);
		m->moe_dprobs_host = xmalloc(R * sizeof(float) + 1);
		m->moe_dz_host = xmalloc(BT * (size_t)c->E * sizeof(float) + 1);
	}
	bind(m, 0, 0);
	return 0;
}

void gpt_free(struct gpt_model *m)
{
	if (!m->chunks)
		return;
	for (size_t i = m->nallocs; i-- > 0;)
		mem_free(m->mem, m->allocs[i].p, m->allocs[i].bytes);
	free(m->allocs);
	if (m->cp)
		ring_attn_free(&m->ring);
	for (int v = 0; v < m->nchunks; v++) {
		for (int s = 0; s < m->chunks[v].nslots; s++)
			free(m->chunks[v].slots[s].acts);
		free(m->chunks[v].slots);
	}
	free(m->chunks);
	for (size_t i = 0; i < m->nmoe; i++) {
		moe_route_free(&m->moe_all[i]->route);
		free(m->moe_all[i]->z_host);
		free(m->moe_all[i]->cnt);
		free(m->moe_all[i]->loff);
		free(m->moe_all[i]);
	}
	free(m->moe_all);
	free(m->moe_dw_host);
	free(m->moe_dprobs_host);
	free(m->moe_dz_host);
	free(m->moe_cnt_all);
	for (int l = 0; l < m->c.L; l++) {
		free(m->lp[l].efc1_w);
		free(m->lp[l].efc2_w);
	}
	params_free(&m->reg);
	free(m->lp);
	free(m->recomputed);
	memset(m, 0, sizeof(*m));
}

/* ---- init ---- */

static uint64_t name_seed(uint64_t seed, const char *name)
{
	uint64_t hsh = 1469598103934665603ULL; /* FNV-1a */
	for (const unsigned char *s = (const unsigned char *)name; *s; s++)
		hsh = (hsh ^ *s) * 1099511628211ULL;
	return hsh ^ (seed * 0x9E3779B97F4A7C15ULL);
}

void gpt_init_weights(struct gpt_model *m, uint64_t seed)
{
	for (int i = 0; i < m->reg.n; i++) {
		const struct param *p = &m->reg.p[i];
		float *host = xmalloc(p->numel * sizeof(float));
		uint64_t s = name_seed(seed, p->name);
		/* Counter = global element index, so a TP shard draws its slice of the
		 * same global tensor. */
		int64_t cols = p->ndim == 2 ? p->shape[1] : 1;
		for (size_t e = 0; e < p->numel; e++) {
			int64_t r, col;
			params_global_pos(p, e, &r, &col);
			uint64_t gidx = (uint64_t)(r * cols + col);
			switch (p->init) {
			case PARAM_INIT_NORMAL:
				host[e] = p->init_std * kops_normal(s, gidx);
				break;
			case PARAM_INIT_ZERO:
				host[e] = 0.0f;
				break;
			case PARAM_INIT_ONE:
				host[e] = 1.0f;
				break;
			}
		}
		m->k->to_device(m->reg.data + p->offset, host, p->numel * sizeof(float));
		free(host);
	}
	gpt_sync_work(m);
}

void gpt_sync_work_range(struct gpt_model *m, size_t lo, size_t hi)
{
	if (m->precision == GPT_FP32 || lo >= hi)
		return;
	m->k->round(m->work + lo, m->reg.data + lo, hi - lo,
		    m->precision == GPT_BF16 ? KOPS_ROUND_BF16 : KOPS_ROUND_FP16);
}

void gpt_sync_work(struct gpt_model *m)
{
	gpt_sync_work_range(m, 0, m->reg.total);
}

/* The overlapped parameter gather's hook (gpt.h): a layer's parameters, or
 * single ones (-1: none). */
static void need_param(struct gpt_model *m, int idx)
{
	if (m->param_needed && idx >= 0)
		m->param_needed(m->param_ctx, idx);
}

static void need_layer(struct gpt_model *m, int l)
{
	const struct gpt_layer_params *p = &m->lp[l];
	for (int i = p->pfirst; m->param_needed && i < p->pend; i++)
		need_param(m, i);
}

/* ---- building blocks ---- */

/* Half precision: what a bf16/fp16 GEMM hands the next op is rounded. */
static void round_half(struct gpt_model *m, float *x, size_t n)
{
	if (m->precision != GPT_FP32)
		m->k->round(x, x, n, m->precision == GPT_BF16 ? KOPS_ROUND_BF16 : KOPS_ROUND_FP16);
}

static void linear_fwd(struct gpt_model *m, float *out, const float *inp, int w, int b, int N, int IC, int OC)
{
	m->k->linear_forward(out, inp, gpt_param(m, w), gpt_param(m, b), N, IC, OC);
	round_half(m, out, (size_t)N * OC);
}

static void linear_bwd(struct gpt_model *m, float *dinp, const float *dout, const float *inp, int w, int b,
		       int N, int IC, int OC)
{
	m->k->linear_backward(dinp, gpt_grad(m, w), gpt_grad(m, b), dout, inp, gpt_param(m, w), N, IC, OC);
	if (dinp)
		round_half(m, dinp, (size_t)N * IC);
}

/* Tensor parallelism's conjugate pair (Megatron's reduce_from / copy_to
 * tensor-parallel region): the sum over TP ranks of a row-parallel output in
 * forward, or of a column-parallel input gradient in backward. */
static void tp_sum(struct gpt_model *m, float *x, size_t n)
{
	if (m->tp) {
		dist_allreduce_sum_f32(m->tp, x, n);
		round_half(m, x, n);
	}
}

/* ---- sequence parallelism ----
 * Rank r holds positions [r*S/t, (r+1)*S/t) of every sample: the rows
 * b*S + r*S/t ... of the [B*S, h] activations, stored as [B, S/t, h]. An
 * all-gather rebuilds [B, S, h] before the column-parallel linears; a
 * reduce-scatter sums the row-parallel outputs and keeps this rank's rows
 * (Megatron's gather/reduce-scatter to the sequence-parallel region). MPI
 * moves rank-major blocks, [t][B][S/t][h]; perm is where they are reordered. */
static void sp_gather(struct gpt_model *m, float *full, const float *shard)
{
	int t = m->tp_size, B = m->B;
	size_t blk = (size_t)(m->lc.S / t) * m->c.h;
	dist_allgather_equal_f32(m->tp, shard, (size_t)B * blk, m->perm);
	for (int r = 0; r < t; r++)
		for (int b = 0; b < B; b++)
			m->k->copy(full + ((size_t)b * t + r) * blk, m->perm + ((size_t)r * B + b) * blk, blk * sizeof(float));
}

static void sp_reduce_scatter(struct gpt_model *m, float *shard, const float *full)
{
	int t = m->tp_size, B = m->B;
	size_t blk = (size_t)(m->lc.S / t) * m->c.h;
	for (int r = 0; r < t; r++)
		for (int b = 0; b < B; b++)
			m->k->copy(m->perm + ((size_t)r * B + b) * blk, full + ((size_t)b * t + r) * blk, blk * sizeof(float));
	dist_reduce_scatter_equal_f32(m->tp, m->perm, (size_t)B * blk, shard);
	round_half(m, shard, (size_t)B * blk);
}

/* The dropout counters of this rank's rows: element (row, c) of the whole
 * [B*S, h] tensor is counter row*h + c, so every layout draws the same mask.
 * This rank holds, of each sample, local positions [j0, j1) (all T, or its
 * T/t with SP), stored sample after sample; each run of them that is
 * contiguous in the sequence (CP's two chunks are not) is one call. Without
 * SP or CP that is one call over all rows. res NULL: the mask alone
 * (dropout_backward). */
static void seq_dropout(struct gpt_model *m, float *out, const float *res, const float *x, float p, int site)
{
	size_t h = (size_t)m->c.h;
	int T = m->lc.S, rows = m->sp ? T / m->tp_size : T;
	int j0 = m->sp ? m->tp_rank * rows : 0, j1 = j0 + rows;
	if (!m->sp && !m->cp) { /* everything is one run */
		if (res)
			m->k->dropout_add_forward(out, res, x, (size_t)m->Nl * h, p, m->drop_seed, site_offset(site));
		else
			m->k->dropout_backward(out, x, (size_t)m->Nl * h, p, m->drop_seed, site_offset(site));
		return;
	}
	for (int b = 0; b < m->B; b++)
		for (int j = j0; j < j1;) {
			int g = gpt_global_pos(m, j), e = j + 1;
			while (e < j1 && gpt_global_pos(m, e) == g + (e - j))
				e++;
			uint64_t first = ((uint64_t)b * (uint64_t)m->c.S + (uint64_t)g) * h;
			size_t o = ((size_t)b * rows + (size_t)(j - j0)) * h, n = (size_t)(e - j) * h;
			if (res)
				m->k->dropout_add_forward(out + o, res + o, x + o, n, p, m->drop_seed,
							  site_offset(site) + first);
			else
				m->k->dropout_backward(out + o, x + o, n, p, m->drop_seed, site_offset(site) + first);
			j = e;
		}
}

/* Core attention of layer l: the one-rank op, ring attention over the
 * context-parallel group, or the flash-style block op over the whole
 * sequence (the last two keep the rows' log-sum-exp, not probs). The block
 * op on positions 0..S-1 with S = T draws the dropout masks of
 * attention_forward. */
static void attn_fwd(struct gpt_model *m, struct gpt_layer_acts *A, int l, float p)
{
	const struct gpt_config *c = &m->lc;
	float scale = 1.0f / sqrtf((float)c->k);
	if (m->cp)
		ring_attn_forward(&m->ring, A->atty, A->alse, A->q, A->kk, A->v, scale, p, m->drop_seed,
				  attn_offset(m, l));
	else if (m->flash)
		m->k->attention_block_forward(A->atty, A->alse, A->q, A->kk, A->v, m->flash_pos, m->flash_pos, m->B,
					      c->S, c->S, c->a, c->g, c->k, c->S, scale, p, m->drop_seed,
					      attn_offset(m, l), 0);
	else
		m->k->attention_forward(A->atty, A->probs, A->q, A->kk, A->v, m->use_doc ? m->doc : NULL, m->B, c->S,
					c->a, c->g, c->k, scale, p, m->drop_seed, attn_offset(m, l));
	round_half(m, A->atty, (size_t)m->B * c->S * c->a * c->k);
}

static void attn_bwd(struct gpt_model *m, struct gpt_layer_acts *A, int l, const float *datty)
{
	const struct gpt_config *c = &m->lc;
	float scale = 1.0f / sqrtf((float)c->k);
	if (m->cp)
		ring_attn_backward(&m->ring, m->dq, m->dk, m->dv, datty, A->atty, A->alse, A->q, A->kk, A->v, scale,
				   c->attention_dropout, m->drop_seed, attn_offset(m, l));
	else if (m->flash) {
		/* the block op adds its share into the grads */
		size_t nq = (size_t)m->B * c->a * c->S * c->k, nkv = (size_t)m->B * c->g * c->S * c->k;
		m->k->zero(m->dq, nq);
		m->k->zero(m->dk, nkv);
		m->k->zero(m->dv, nkv);
		m->k->attention_block_backward(m->dq, m->dk, m->dv, datty, A->atty, A->alse, A->q, A->kk, A->v,
					       m->flash_pos, m->flash_pos, m->B, c->S, c->S, c->a, c->g, c->k, c->S,
					       scale, c->attention_dropout, m->drop_seed, attn_offset(m, l));
	} else
		m->k->attention_backward(m->dq, m->dk, m->dv, datty, A->q, A->kk, A->v, A->probs, m->B, c->S, c->a,
					 c->g, c->k, scale, c->attention_dropout, m->drop_seed, attn_offset(m, l));
}

/* All rows of a norm output kept per sequence shard: gathered into m->gath
 * under SP (forward, and again in backward for the weight gradient). */
static const float *seq_full(struct gpt_model *m, const float *ln)
{
	if (!m->sp)
		return ln;
	sp_gather(m, m->gath, ln);
	return m->gath;
}

/* A row-parallel linear's output where the residual stream lives: summed
 * over TP (all rows), or reduce-scattered onto this rank's rows with SP.
 * Returns the [Nl, h] result. */
static const float *row_parallel(struct gpt_model *m, const float *inp, int w, int b, int N, int IC)
{
	int h = m->c.h;
	linear_fwd(m, m->tmp, inp, w, m->tp_rank == 0 ? b : -1, N, IC, h); /* replicated bias counted once */
	if (!m->sp) {
		tp_sum(m, m->tmp, (size_t)N * h);
		return m->tmp;
	}
	sp_reduce_scatter(m, m->shard, m->tmp);
	return m->shard;
}

/* The input gradient of a column-parallel linear (dln: all rows, this rank's
 * share): summed over TP, or reduce-scattered onto this rank's rows. */
static const float *column_input_grad(struct gpt_model *m, float *dln, int N)
{
	if (!m->sp) {
		tp_sum(m, dln, (size_t)N * m->c.h);
		return dln;
	}
	sp_reduce_scatter(m, m->shard, dln);
	return m->shard;
}

void gpt_sp_sync_grads(struct gpt_model *m)
{
	if (!m->sp)
		return;
	for (int i = 0; i < m->reg.n; i++)
		if (m->reg.p[i].flags & PARAM_SP)
			dist_allreduce_sum_f32(m->tp, gpt_grad(m, i), m->reg.p[i].numel);
}

const float *gpt_norm_weight(struct gpt_model *m, int w)
{
	if (!m->c.norm_1p)
		return gpt_param(m, w);
	m->k->add(m->norm_gamma, gpt_param(m, w), m->norm_ones, (size_t)m->c.h);
	return m->norm_gamma;
}

static void norm_fwd(struct gpt_model *m, float *out, float *mean, float *rstd, const float *inp, int w, int b,
		     int N)
{
	if (m->c.rmsnorm)
		m->k->rmsnorm_forward(out, rstd, inp, gpt_norm_weight(m, w), N, m->c.h, m->c.eps);
	else
		m->k->layernorm_forward(out, mean, rstd, inp, gpt_norm_weight(m, w), gpt_param(m, b), N, m->c.h,
					m->c.eps);
	round_half(m, out, (size_t)N * m->c.h);
}

static void norm_bwd(struct gpt_model *m, float *dinp, const float *dout, const float *inp, int w, int b,
		     const float *mean, const float *rstd, int N)
{
	if (m->c.rmsnorm)
		m->k->rmsnorm_backward(dinp, gpt_grad(m, w), dout, inp, gpt_norm_weight(m, w), rstd, N, m->c.h);
	else
		m->k->layernorm_backward(dinp, gpt_grad(m, w), gpt_grad(m, b), dout, inp, gpt_norm_weight(m, w), mean,
					 rstd, N, m->c.h);
	round_half(m, dinp, (size_t)N * m->c.h);
}

/* ---- mixture of experts (docs/moe-spec.md) ----
 * The router's logits go to the host, where moe_router.c picks each
 * token's experts and orders the rows; the plan comes back as index
 * arrays. Rows are gathered with the embedding op (out[r] = x[row_tok[r]];
 * its backward adds them back), each expert runs its MLP on its rows, and
 * the weighted sum per token is moe_combine.
 *
 * Expert parallelism (Megatron's all-to-all token dispatcher): every rank
 * routes its own tokens, sends each expert-parallel peer the rows routed to
 * the peer's experts, runs its own experts on the rows it receives, and
 * sends the outputs back; the combine and the router's backward then see
 * exactly the rows of one rank. Rows arrive peer-major (each peer's rows in
 * its expert-major order) and the experts want them expert-major: the two
 * reorders are copies of whole (peer, expert) blocks. */

/* The most rows this rank's experts can get: a token's k slots name k
 * different experts, so at most min(k, El) of them are here, from each
 * peer's B*T tokens, and at most each peer's capacity per expert. */
static size_t moe_rows_most(const struct gpt_model *m)
{
	const struct gpt_config *c = &m->lc;
	size_t BT = (size_t)m->B * c->S, k = (size_t)c->router.k;
	size_t per = k < (size_t)m->El ? k : (size_t)m->El;
	size_t most = (size_t)m->ep_size * BT * per;
	size_t cap = (size_t)m->ep_size * (size_t)m->El * (size_t)moe_route_capacity_total(&c->router, (int)BT);
	return cap < most ? cap : most;
}

size_t gpt_moe_rows_local(const struct gpt_model *m)
{
	const struct gpt_config *c = &m->lc;
	size_t R = (size_t)m->B * c->S * (size_t)c->router.k, most = m->ep ? moe_rows_most(m) : R;
	return c->router.capacity > 0 || most < R ? most : R;
}

/* Room for `rows` rows of this rank's experts in a layer's buffers and the
 * shared scratch: a larger set when they are too small, 1.5 times what was
 * there (geometric, so few regrowths), at most moe_rows_most. The old
 * buffers stay taken (gpt_free gives them back): freeing device memory now
 * could wait for transfers in flight. */
static void moe_reserve(struct gpt_model *m, struct gpt_moe_acts *M, size_t rows)
{
	const struct gpt_config *c = &m->lc;
	size_t h = (size_t)c->h, fm = (size_t)c->moe_f, f1 = c->swiglu ? 2 * fm : fm;
	if (rows <= M->rows_cap && rows <= m->moe_rows_cap)
		return;
	size_t most = moe_rows_most(m);
	if (rows > most)
		BUG("%zu rows for this rank's experts, more than the %zu that can come", rows, most);
	if (rows > M->rows_cap) {
		size_t cap = M->rows_cap + M->rows_cap / 2 > rows ? M->rows_cap + M->rows_cap / 2 : rows;
		cap = cap < most ? cap : most;
		M->xloc = take(m, cap * h);
		M->fc1 = take(m, cap * f1);
		M->act = take(m, cap * fm);
		M->rows_cap = cap;
	}
	if (rows > m->moe_rows_cap) {
		size_t BT = (size_t)m->B * c->S, fs = (size_t)c->shared_f, f1s = c->swiglu ? 2 * fs : fs;
		size_t R = BT * (size_t)c->router.k;
		size_t cap = m->moe_rows_cap + m->moe_rows_cap / 2 > rows ? m->moe_rows_cap + m->moe_rows_cap / 2 : rows;
		cap = cap < most ? cap : most;
		m->moe_dact = take(m, cap * fm > BT * fs ? cap * fm : BT * fs);
		m->moe_dfc1 = take(m, cap * f1 > BT * f1s ? cap * f1 : BT * f1s);
		m->moe_xa = take(m, (cap > R ? cap : R) * h);
		m->moe_xb = take(m, (cap > R ? cap : R) * h);
		m->moe_rows_cap = cap;
	}
}

/* The rows per (peer, local expert) of this layer's exchange, from every
 * peer's rows per expert (host), and the experts' offsets in xloc. */
static void moe_plan_exchange(struct gpt_model *m, struct gpt_moe_acts *M, const struct moe_route *r)
{
	int E = m->lc.E, El = m->El, ep = m->ep_size;
	int32_t *off = M->loff;
	int32_t *mine = xmalloc((size_t)E * sizeof(int32_t));
	for (int e = 0; e < E; e++)
		mine[e] = r->exp_off[e + 1] - r->exp_off[e];
	dist_allgather_i32(m->ep, mine, (size_t)E, m->moe_cnt_all);
	free(mine);
	for (int p = 0; p < ep; p++)
		for (int e = 0; e < El; e++)
			M->cnt[p * El + e] = m->moe_cnt_all[(size_t)p * E + m->e0 + e];
	off[0] = 0;
	for (int e = 0; e < El; e++) {
		off[e + 1] = off[e];
		for (int p = 0; p < ep; p++)
			off[e + 1] += M->cnt[p * El + e];
	}
}

/* Reorder blocks of w floats per row between the peer-major order of the
 * exchange and the expert-major order of xloc. */
static void moe_reorder(struct gpt_model *m, const struct gpt_moe_acts *M, float *dst, const float *src, size_t w,
			bool to_expert_major)
{
	int El = m->El, ep = m->ep_size;
	size_t pm = 0; /* the block's first row, peer-major */
	for (int p = 0; p < ep; p++)
		for (int e = 0; e < El; e++) {
			size_t n = (size_t)M->cnt[p * El + e], em = (size_t)M->loff[e];
			for (int q = 0; q < p; q++)
				em += (size_t)M->cnt[q * El + e];
			if (n) {
				float *d = dst + (to_expert_major ? em : pm) * w;
				const float *s = src + (to_expert_major ? pm : em) * w;
				m->k->copy(d, s, n * w * sizeof(float));
			}
			pm += n;
		}
}

/* The floats per peer that this rank's rows send (own experts' order) and
 * the ones it receives, w per row. */
static void moe_counts(const struct gpt_model *m, const struct gpt_moe_acts *M, size_t w, size_t *own, size_t *recv)
{
	const struct moe_route *r = &M->route;
	for (int p = 0; p < m->ep_size; p++) {
		own[p] = (size_t)(r->exp_off[(p + 1) * m->El] - r->exp_off[p * m->El]) * w;
		recv[p] = 0;
		for (int e = 0; e < m->El; e++)
			recv[p] += (size_t)M->cnt[p * m->El + e] * w;
	}
}

/* Rows in this rank's routing order (in: [R, h]) to the experts' ranks,
 * landing expert-major in out ([Rl, h]); or back (in: [Rl, h] expert-major,
 * out: [R, h]). */
static void moe_exchange(struct gpt_model *m, const struct gpt_moe_acts *M, float *out, const float *in, bool to_experts)
{
	size_t h = (size_t)m->lc.h, *own = xmalloc(2 * (size_t)m->ep_size * sizeof(size_t)), *recv = own + m->ep_size;
	moe_counts(m, M, h, own, recv);
	if (to_experts) {
		dist_alltoallv_f32(m->ep, in, own, m->moe_xa, recv);
		moe_reorder(m, M, out, m->moe_xa, h, true);
	} else {
		moe_reorder(m, M, m->moe_xa, in, h, false);
		dist_alltoallv_f32(m->ep, m->moe_xa, recv, out, own);
	}
	free(own);
}

/* This rank's experts on their rows: expert e0 + e owns rows [off[e], off[e+1]). */
static void moe_experts_forward(struct gpt_model *m, const struct gpt_layer_params *p, const int32_t *off,
				const float *xin, float *fc1, float *act, float *y)
{
	const struct gpt_config *c = &m->lc;
	int h = c->h, fm = c->moe_f, f1 = c->swiglu ? 2 * fm : fm, R = off[m->El];
	for (int e = 0; e < m->El; e++) {
		int r0 = off[e], n = off[e + 1] - r0;
		if (n > 0)
			linear_fwd(m, fc1 + (size_t)r0 * f1, xin + (size_t)r0 * h, p->efc1_w[m->e0 + e], -1, n, h, f1);
	}
	if (c->swiglu)
		m->k->swiglu_forward(act, fc1, R, fm);
	else
		m->k->gelu_forward(act, fc1, (size_t)R * fm, c->gelu);
	round_half(m, act, (size_t)R * fm);
	for (int e = 0; e < m->El; e++) {
		int r0 = off[e], n = off[e + 1] - r0;
		if (n > 0)
			linear_fwd(m, y + (size_t)r0 * h, act + (size_t)r0 * fm, p->efc2_w[m->e0 + e], -1, n, fm, h);
	}
}

/* dy: [rows, h] the gradient of the experts' outputs; leaves the rows'
 * input gradient in dx and adds the weight gradients. */
static void moe_experts_backward(struct gpt_model *m, const struct gpt_layer_params *p, const int32_t *off,
				 const float *dy, const float *xin, const float *fc1, const float *act, float *dx)
{
	const struct gpt_config *c = &m->lc;
	int h = c->h, fm = c->moe_f, f1 = c->swiglu ? 2 * fm : fm, R = off[m->El];
	for (int e = 0; e < m->El; e++) {
		int r0 = off[e], n = off[e + 1] - r0;
		if (n > 0)
			linear_bwd(m, m->moe_dact + (size_t)r0 * fm, dy + (size_t)r0 * h, act + (size_t)r0 * fm,
				   p->efc2_w[m->e0 + e], -1, n, fm, h);
	}
	if (c->swiglu)
		m->k->swiglu_backward(m->moe_dfc1, m->moe_dact, fc1, R, fm);
	else
		m->k->gelu_backward(m->moe_dfc1, m->moe_dact, fc1, (size_t)R * fm, c->gelu);
	for (int e = 0; e < m->El; e++) {
		int r0 = off[e], n = off[e + 1] - r0;
		if (n > 0)
			linear_bwd(m, dx + (size_t)r0 * h, m->moe_dfc1 + (size_t)r0 * f1, xin + (size_t)r0 * h,
				   p->efc1_w[m->e0 + e], -1, n, h, f1);
	}
}

static void moe_mlp_forward(struct gpt_model *m, int l, struct gpt_layer_acts *A, float *out, bool train)
{
	const struct gpt_config *c = &m->lc;
	const struct kops *k = m->k;
	const struct gpt_layer_params *p = &m->lp[l];
	struct gpt_moe_acts *M = A->moe;
	int N = m->B * c->S, h = c->h, E = c->E;
	const float *x = seq_full(m, A->ln2); /* every row, on every TP rank: they all route alike */

	if (c->router_fp32) /* --moe-router-dtype: not rounded to the half type */
		k->linear_forward(M->z, x, gpt_param(m, p->router_w), NULL, N, h, E);
	else
		linear_fwd(m, M->z, x, p->router_w, -1, N, h, E);
	k->to_host(M->z_host, M->z, (size_t)N * E * sizeof(float));
	struct moe_route *r = &M->route;
	moe_route_forward(r, &c->router, M->z_host, N, c->S);
	if (train && !m->moe_no_stats) {
		m->moe_aux_sum += r->aux;
		m->moe_zsq_sum += r->zsq;
		m->moe_calls++;
	}
	int R = r->R;
	k->to_device(M->row_tok, r->row_tok, (size_t)R * sizeof(int32_t));
	k->to_device(M->tok_rowptr, r->tok_rowptr, ((size_t)N + 1) * sizeof(int32_t));
	k->to_device(M->tok_rows, r->tok_rows, (size_t)R * sizeof(int32_t));
	k->to_device(M->row_w, r->row_w, (size_t)R * sizeof(float));
	if (R > 0)
		k->embedding_forward(M->xperm, M->row_tok, NULL, x, NULL, R, h);
	if (m->ep) {
		moe_plan_exchange(m, M, r);
		moe_reserve(m, M, (size_t)M->loff[m->El]);
		moe_exchange(m, M, M->xloc, M->xperm, true);
		moe_experts_forward(m, p, M->loff, M->xloc, M->fc1, M->act, m->moe_xb);
		moe_exchange(m, M, M->y, m->moe_xb, false);
	} else {
		moe_experts_forward(m, p, r->exp_off, M->xperm, M->fc1, M->act, M->y);
	}
	k->moe_combine_forward(out, M->y, M->row_w, M->tok_rowptr, M->tok_rows, N, h);
	if (p->sfc1_w >= 0) {
		int fs = c->shared_f, s1 = c->swiglu ? 2 * fs : fs;
		linear_fwd(m, M->sfc1, x, p->sfc1_w, -1, N, h, s1);
		if (c->swiglu)
			k->swiglu_forward(M->sact, M->sfc1, N, fs);
		else
			k->gelu_forward(M->sact, M->sfc1, (size_t)N * fs, c->gelu);
		round_half(m, M->sact, (size_t)N * fs);
		linear_fwd(m, m->moe_out2, M->sact, p->sfc2_w, -1, N, fs, h);
		k->add(out, out, m->moe_out2, (size_t)N * h);
	}
	round_half(m, out, (size_t)N * h);
}

/* dout: dL/d(the MoE output), every row; leaves this rank's share of
 * dL/d(its input, the norm's output) in m->dln, for column_input_grad */
static void moe_mlp_backward(struct gpt_model *m, int l, struct gpt_layer_acts *A, const float *dout)
{
	const struct gpt_config *c = &m->lc;
	const struct kops *k = m->k;
	const struct gpt_layer_params *p = &m->lp[l];
	struct gpt_moe_acts *M = A->moe;
	const struct moe_route *r = &M->route;
	int N = m->B * c->S, h = c->h, E = c->E, R = r->R;
	const float *x = seq_full(m, A->ln2);

	if (p->sfc1_w >= 0) {
		int fs = c->shared_f, s1 = c->swiglu ? 2 * fs : fs;
		linear_bwd(m, m->moe_dact, dout, M->sact, p->sfc2_w, -1, N, fs, h);
		if (c->swiglu)
			k->swiglu_backward(m->moe_dfc1, m->moe_dact, M->sfc1, N, fs);
		else
			k->gelu_backward(m->moe_dfc1, m->moe_dact, M->sfc1, (size_t)N * fs, c->gelu);
		linear_bwd(m, m->dln, m->moe_dfc1, x, p->sfc1_w, -1, N, h, s1);
	} else {
		k->zero(m->dln, (size_t)N * h);
	}
	k->moe_combine_backward(m->moe_dy, m->moe_dw, dout, M->y, M->row_w, M->row_tok, R, h);
	if (m->ep) { /* the rows' gradients to their experts' ranks and back */
		moe_exchange(m, M, m->moe_xb, m->moe_dy, true);
		/* dx over dy: the experts read all of dy before they write dx */
		moe_experts_backward(m, p, M->loff, m->moe_xb, M->xloc, M->fc1, M->act, m->moe_xb);
		moe_exchange(m, M, m->moe_dx, m->moe_xb, false);
	} else {
		moe_experts_backward(m, p, r->exp_off, m->moe_dy, M->xperm, M->fc1, M->act, m->moe_dx);
	}
	if (R > 0) /* the gather's backward adds each row back to its token */
		k->embedding_backward(m->dln, NULL, m->moe_dx, M->row_tok, NULL, R, h);
	/* the router: each kept slot's weight gradient, plus the attached losses */
	k->to_host(m->moe_dw_host, m->moe_dw, (size_t)R * sizeof(float));
	if (m->tp) /* y, hence each row's dot product, is this rank's share of the expert's output */
		dist_allreduce_sum_f32(m->tp, m->moe_dw_host, (size_t)R);
	memset(m->moe_dprobs_host, 0, (size_t)N * c->router.k * sizeof(float));
	for (int i = 0; i < R; i++)
		m->moe_dprobs_host[(size_t)r->row_tok[i] * c->router.k + r->row_slot[i]] = m->moe_dw_host[i];
	moe_route_backward(r, &c->router, M->z_host, m->moe_dprobs_host, c->S, m->moe_aux_scale, m->moe_dz_host);
	k->to_device(m->moe_dz, m->moe_dz_host, (size_t)N * E * sizeof(float));
	/* every TP rank computed the whole router gradient; the input's share
	 * counts once in the sum over TP that follows */
	linear_bwd(m, m->tp_rank == 0 ? m->moe_dx : NULL, m->moe_dz, x, p->router_w, -1, N, h, E);
	if (m->tp_rank == 0)
		k->add(m->dln, m->dln, m->moe_dx, (size_t)N * h);
	round_half(m, m->dln, (size_t)N * h);
}

/* ---- one layer ---- */

/* x, y: this rank's rows of the residual stream ([Nl, h]). */
static void layer_forward(struct gpt_model *m, int l, const float *x, float *y, bool train)
{
	const struct gpt_config *c = &m->lc;
	const struct kops *k = m->k;
	const struct gpt_layer_params *p = &m->lp[l];
	struct gpt_layer_acts *A = &m->acts[l - m->l0];
	int B = m->B, S = c->S, N = B * S, h = c->h, Nl = m->Nl;
	int qkv = (c->a + 2 * c->g) * c->k, ak = c->a * c->k, f1 = c->swiglu ? 2 * c->f : c->f;
	float pa = train ? c->attention_dropout : 0, ph = train ? c->hidden_dropout : 0;

	norm_fwd(m, A->ln1, A->ln1_mean, A->ln1_rstd, x, p->ln1_w, p->ln1_b, Nl);
	linear_fwd(m, m->qkv, seq_full(m, A->ln1), p->qkv_w, p->qkv_b, N, h, qkv);
	k->qkv_split_forward(A->q, A->kk, A->v, m->qkv, m->rope_cos, m->rope_sin, B, S, c->a, c->g, c->k, c->rot);
	attn_fwd(m, A, l, pa);
	const float *proj = row_parallel(m, A->atty, p->proj_w, p->proj_b, N, ak);
	seq_dropout(m, A->res1, x, proj, ph, 3 * l + 1);
	round_half(m, A->res1, (size_t)Nl * h); /* the residual stream is half precision too */
	norm_fwd(m, A->ln2, A->ln2_mean, A->ln2_rstd, A->res1, p->ln2_w, p->ln2_b, Nl);
	if (p->moe) {
		moe_mlp_forward(m, l, A, m->tmp, train);
		/* each TP rank holds a slice of every expert's MLP, as of the dense
		 * one: the output is summed over TP, or reduce-scattered with SP */
		seq_dropout(m, y, A->res1, column_input_grad(m, m->tmp, N), ph, 3 * l + 2);
		round_half(m, y, (size_t)Nl * h);
		return;
	}
	linear_fwd(m, A->fc1, seq_full(m, A->ln2), p->fc1_w, p->fc1_b, N, h, f1);
	if (c->swiglu)
		k->swiglu_forward(A->act, A->fc1, N, c->f);
	else
		k->gelu_forward(A->act, A->fc1, (size_t)N * c->f, c->gelu);
	round_half(m, A->act, (size_t)N * c->f);
	const float *fc2 = row_parallel(m, A->act, p->fc2_w, p->fc2_b, N, c->f);
	seq_dropout(m, y, A->res1, fc2, ph, 3 * l + 2);
	round_half(m, y, (size_t)Nl * h);
}

/* The gradient of a row-parallel output for its linear's backward: this
 * rank's rows of dres through the dropout mask, gathered to all rows with SP. */
static const float *row_output_grad(struct gpt_model *m, const float *dres, float p, int site)
{
	float *d = m->sp ? m->shard : m->dtmp;
	const float *src = dres;
	if (p > 0) {
		seq_dropout(m, d, NULL, dres, p, site);
		src = d;
	}
	if (!m->sp)
		return src;
	sp_gather(m, m->dtmp, src);
	return m->dtmp;
}

/* dres: in = dL/d(layer output), out = dL/d(layer input); this rank's rows. */
static void layer_backward(struct gpt_model *m, int l, const float *x, float *dres)
{
	const struct gpt_config *c = &m->lc;
	const struct kops *k = m->k;
	const struct gpt_layer_params *p = &m->lp[l];
	struct gpt_layer_acts *A = &m->acts[l - m->l0];
	int B = m->B, S = c->S, N = B * S, h = c->h, Nl = m->Nl;
	int qkv = (c->a + 2 * c->g) * c->k, ak = c->a * c->k, f1 = c->swiglu ? 2 * c->f : c->f;
	float ph = c->hidden_dropout;
	size_t nhl = (size_t)Nl * h;

	/* MLP: y = res1 + dropout(fc2(act(fc1(norm2(res1))))) */
	const float *dmlp = row_output_grad(m, dres, ph, 3 * l + 2);
	if (p->moe) {
		moe_mlp_backward(m, l, A, dmlp);
	} else {
		linear_bwd(m, m->dact, dmlp, A->act, p->fc2_w, p->fc2_b, N, c->f, h);
		if (c->swiglu)
			k->swiglu_backward(m->dfc1, m->dact, A->fc1, N, c->f);
		else
			k->gelu_backward(m->dfc1, m->dact, A->fc1, (size_t)N * c->f, c->gelu);
		linear_bwd(m, m->dln, m->dfc1, seq_full(m, A->ln2), p->fc1_w, p->fc1_b, N, h, f1);
	}
	const float *dn2 = column_input_grad(m, m->dln, N); /* every rank's share of dL/d norm2 */
	norm_bwd(m, m->dtmp, dn2, A->res1, p->ln2_w, p->ln2_b, A->ln2_mean, A->ln2_rstd, Nl);
	k->add(dres, dres, m->dtmp, nhl); /* dres = dL/d res1 */
	round_half(m, dres, nhl);

	/* attention: res1 = x + dropout(proj(attn(qkv(norm1(x))))) */
	const float *dattn = row_output_grad(m, dres, ph, 3 * l + 1);
	linear_bwd(m, m->datty, dattn, A->atty, p->proj_w, p->proj_b, N, ak, h);
	attn_bwd(m, A, l, m->datty);
	k->qkv_split_backward(m->dqkv, m->dq, m->dk, m->dv, m->rope_cos, m->rope_sin, B, S, c->a, c->g, c->k,
			      c->rot);
	linear_bwd(m, m->dln, m->dqkv, seq_full(m, A->ln1), p->qkv_w, p->qkv_b, N, h, qkv);
	const float *dn1 = column_input_grad(m, m->dln, N);
	norm_bwd(m, m->dtmp, dn1, x, p->ln1_w, p->ln1_b, A->ln1_mean, A->ln1_rstd, Nl);
	k->add(dres, dres, m->dtmp, nhl); /* dres = dL/dx */
	round_half(m, dres, nhl);
}

/* ---- the model ---- */

/* Vocabulary-parallel cross-entropy (Megatron's vocab_parallel_cross_entropy):
 * each rank has the log-sum-exp of its logits and, where the target is in
 * its shard, lse - target logit. The global lse is m + log sum exp(lse_r - m)
 * with m the max over ranks, the target logit the sum of the owners' values;
 * the global lse goes back to the device for backward's softmax. Row sums
 * of a few floats per token: done on the host. */
static void xent_combine(struct gpt_model *m, float *losses, int N)
{
	float *lse = xmalloc((size_t)N * 3 * sizeof(float)), *mx = lse + N, *xt = lse + 2 * N;
	m->k->to_host(lse, m->lse, (size_t)N * sizeof(float));
	for (int i = 0; i < N; i++) {
		mx[i] = lse[i];
		xt[i] = lse[i] - losses[i]; /* the target logit here, 0 where the target is elsewhere */
	}
	dist_allreduce_max_f32(m->tp, mx, (size_t)N);
	dist_allreduce_sum_f32(m->tp, xt, (size_t)N);
	for (int i = 0; i < N; i++)
		lse[i] = expf(lse[i] - mx[i]);
	dist_allreduce_sum_f32(m->tp, lse, (size_t)N);
	for (int i = 0; i < N; i++) {
		lse[i] = mx[i] + logf(lse[i]);
		losses[i] = lse[i] - xt[i];
	}
	m->k->to_device(m->lse, lse, (size_t)N * sizeof(float));
	free(lse);
}

/* The micro-batch's inputs into the bound slot: ids local to this rank's
 * vocabulary shard (-1 for the other shards'), positions, documents. */
static void load_inputs(struct gpt_model *m, struct gpt_slot *sl, const int32_t *tokens, const int32_t *labels,
			const int32_t *positions, const int32_t *doc, uint64_t drop_seed)
{
	const struct gpt_config *c = &m->lc;
	const struct kops *k = m->k;
	int S = c->S, N = m->B * S;
	int32_t *local = xmalloc((size_t)N * 2 * sizeof(int32_t));
	for (int i = 0; i < N; i++) {
		if (tokens[i] < 0 || tokens[i] >= m->c.Vp || labels[i] < 0 || labels[i] >= m->c.Vp)
			BUG("token id %d / label %d outside the vocabulary of %d", tokens[i], labels[i], m->c.Vp);
		int32_t tl = tokens[i] - m->vstart, ll = labels[i] - m->vstart;
		local[i] = tl >= 0 && tl < c->Vp ? tl : -1;
		local[N + i] = ll >= 0 && ll < c->Vp ? ll : -1;
	}
	k->to_device(sl->tokens, local, (size_t)N * 4);
	k->to_device(sl->targets, local + N, (size_t)N * 4);
	free(local);
	sl->use_positions = !c->rope;
	if (sl->use_positions) {
		if (positions) {
			k->to_device(sl->positions, positions, (size_t)N * 4);
		} else {
			int32_t *pos = xmalloc((size_t)N * 4);
			for (int i = 0; i < N; i++)
				pos[i] = gpt_global_pos(m, i % S);
			k->to_device(sl->positions, pos, (size_t)N * 4);
			free(pos);
		}
	}
	sl->use_doc = doc != NULL;
	if (doc && m->flash)
		BUG("document ids for a model set up without document masks (gpt_pipe.doc_masks)");
	if (doc)
		k->to_device(sl->doc, doc, (size_t)N * 4);
	sl->drop_seed = drop_seed;
}

float *gpt_chunk_input(struct gpt_model *m, int v, int s)
{
	if (v < 0 || v >= m->nchunks || s < 0 || s >= m->chunks[v].nslots)
		BUG("chunk %d slot %d of %d chunks", v, s, m->nchunks);
	return m->chunks[v].slots[s].resid;
}

float *gpt_chunk_grad_input(struct gpt_model *m)
{
	return m->dres;
}

const float *gpt_forward_chunk(struct gpt_model *m, int v, int s, const int32_t *tokens, const int32_t *labels,
			       const int32_t *positions, const int32_t *doc, uint64_t drop_seed, bool train,
			       float *losses_host)
{
	const struct gpt_config *c = &m->lc;
	const struct kops *k = m->k;
	const struct gpt_chunk *ch = &m->chunks[v];
	int B = m->B, S = c->S, N = B * S, h = c->h;
	size_t nh = (size_t)N * h, nhl = (size_t)m->Nl * h;

	load_inputs(m, &ch->slots[s], tokens, labels, positions, doc, drop_seed);
	bind(m, v, s);
	if (ch->pre) {
		need_param(m, m->wte);
		need_param(m, m->wpe);
		/* vocabulary-parallel embedding: each rank looks up its rows, the sum
		 * over TP ranks is the embedding (reduce-scattered onto the sequence
		 * shards with SP); the (replicated) positions are added once */
		k->embedding_forward(m->sp ? m->tmp : m->resid, m->tokens, m->use_positions ? m->positions : NULL,
				     gpt_param(m, m->wte), m->tp_rank == 0 ? gpt_param(m, m->wpe) : NULL, N, h);
		if (m->sp)
			sp_reduce_scatter(m, m->resid, m->tmp);
		else
			tp_sum(m, m->resid, nh);
		if (train && c->hidden_dropout > 0) /* the embedding dropout; backward's mask op is the same map */
			seq_dropout(m, m->resid, NULL, m->resid, c->hidden_dropout, 3 * c->L);
		round_half(m, m->resid, nhl);
	}
	for (int l = ch->l0; l < ch->l0 + ch->nl; l++) {
		need_layer(m, l);
		layer_forward(m, l, m->resid + (size_t)(l - ch->l0) * nhl, m->resid + (size_t)(l - ch->l0 + 1) * nhl,
			      train);
	}
	if (!ch->post)
		return m->resid + (size_t)ch->nl * nhl;
	need_param(m, m->lnf_w);
	need_param(m, m->lnf_b);
	need_param(m, m->out_w);
	norm_fwd(m, m->sp ? m->shard : m->lnf, m->lnf_mean, m->lnf_rstd, m->resid + (size_t)ch->nl * nhl,
		 m->lnf_w, m->lnf_b, m->Nl);
	if (m->sp)
		sp_gather(m, m->lnf, m->shard);
	/* Logits over the whole padded vocabulary, as Megatron (the pad rows are real parameters). */
	linear_fwd(m, m->logits, m->lnf, m->out_w, -1, N, h, c->Vp);
	k->xent_forward(m->losses, m->lse, m->logits, m->targets, N, c->Vp);
	k->to_host(losses_host, m->losses, (size_t)N * 4);
	if (m->tp)
		xent_combine(m, losses_host, N);
	return NULL;
}

const float *gpt_backward_chunk(struct gpt_model *m, int v, int s, const float *dloss_host)
{
	const struct gpt_config *c = &m->lc;
	const struct kops *k = m->k;
	const struct gpt_chunk *ch = &m->chunks[v];
	int B = m->B, S = c->S, N = B * S, h = c->h;
	size_t nhl = (size_t)m->Nl * h;
	bool train = true;

	bind(m, v, s);
	if (ch->post) {
		k->to_device(m->dloss, dloss_host, (size_t)N * 4);
		k->xent_backward(m->logits, m->logits, m->lse, m->targets, m->dloss, N, c->Vp);
		linear_bwd(m, m->dln, m->logits, m->lnf, m->out_w, -1, N, h, c->Vp);
		/* the output layer is column-parallel over the vocabulary */
		const float *dlnf = column_input_grad(m, m->dln, N);
		norm_bwd(m, m->dres, dlnf, m->resid + (size_t)ch->nl * nhl, m->lnf_w, m->lnf_b, m->lnf_mean,
			 m->lnf_rstd, m->Nl);
		if (m->grad_ready) { /* a tied output layer is the embedding: final only after it */
			m->grad_ready(m->grad_ctx, m->lnf_w);
			if (m->lnf_b >= 0)
				m->grad_ready(m->grad_ctx, m->lnf_b);
			if (m->out_w != m->wte)
				m->grad_ready(m->grad_ctx, m->out_w);
		}
	}
	for (int l = ch->l0 + ch->nl - 1; l >= ch->l0; l--) {
		const float *x = m->resid + (size_t)(l - ch->l0) * nhl;
		if (m->recomputed[l]) {
			m->moe_no_stats = true; /* counted in the forward pass */
			layer_forward(m, l, x, m->resid + (size_t)(l - ch->l0 + 1) * nhl, train);
			m->moe_no_stats = false;
		} else if (c->recompute == GPT_RECOMPUTE_SELECTIVE) {
			attn_fwd(m, &m->acts[l - ch->l0], l, c->attention_dropout);
		}
		layer_backward(m, l, x, m->dres);
		const struct gpt_layer_params *p = &m->lp[l];
		for (int i = p->pfirst; m->grad_ready && i < p->pend; i++)
			m->grad_ready(m->grad_ctx, i);
	}
	if (!ch->pre)
		return m->dres;
	const float *demb = row_output_grad(m, m->dres, c->hidden_dropout, 3 * c->L);
	k->embedding_backward(gpt_grad(m, m->wte), gpt_grad(m, m->wpe), demb, m->tokens,
			      m->use_positions ? m->positions : NULL, N, h);
	if (m->grad_ready) {
		m->grad_ready(m->grad_ctx, m->wte);
		if (m->wpe >= 0)
			m->grad_ready(m->grad_ctx, m->wpe);
	}
	return NULL;
}

void gpt_forward(struct gpt_model *m, const int32_t *tokens, const int32_t *labels, const int32_t *positions,
		 const int32_t *doc, uint64_t drop_seed, bool train, float *losses_host)
{
	if (m->nchunks != 1 || !m->chunks[0].pre || !m->chunks[0].post)
		BUG("gpt_forward on a pipeline stage; use gpt_forward_chunk");
	gpt_forward_chunk(m, 0, 0, tokens, labels, positions, doc, drop_seed, train, losses_host);
}

void gpt_backward(struct gpt_model *m, const float *dloss_host)
{
	gpt_backward_chunk(m, 0, 0, dloss_host);
}
