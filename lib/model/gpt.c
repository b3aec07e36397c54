/*
 * gpt.c - see gpt.h. Megatron Core's GPTModel: set-up (which layers this
 * rank holds, their parameters and activation buffers), the embedding, the
 * chunk loop over transformer layers (transformer_layer.c), the final norm
 * and output layer with the vocabulary-parallel loss (cross_entropy.c), and
 * the serving step. The layer is Megatron Core's TransformerLayer with the
 * TE spec: the input norm is fused into linear_qkv and the pre-MLP norm into
 * linear_fc1 (hence their parameter names), pre-norm residuals, bias-
 * dropout-add after linear_proj and linear_fc2. Activations are batch-major
 * [B, S, h]; Megatron's [S, B, h] only changes the order of independent rows.
 *
 * Dropout masks are a pure function of (micro-batch seed, site, element):
 * site 3l is layer l's attention probabilities, 3l+1 its attention output,
 * 3l+2 its MLP output, 3L the embedding. So recomputation and resumed runs
 * draw the same masks without storing them.
 */
#include "model/gpt_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"
#include "kernels/rope_scaling.h"

int gpt_global_pos(const struct gpt_model *m, int j)
{
	return m->par.cp ? ring_attn_global_pos(&m->par.ring, j) : j;
}

/* ---- buffers ---- */

void *gpt_take_bytes(struct gpt_model *m, size_t bytes)
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

float *gpt_take(struct gpt_model *m, size_t n)
{
	return gpt_take_bytes(m, n * sizeof(float));
}

/* ---- registration ---- */

/* In Megatron's order, chunk by chunk: embedding, layers, final norm and
 * output layer, each where its chunk has it. */
static void register_params(struct gpt_model *m)
{
	const struct gpt_config *c = &m->c;
	struct transformer_layer_spec fs; /* the final norm is the layers' kind of norm */
	gpt_layer_spec(c, 0, &fs);
	m->wte = m->wpe = m->lnf_w = m->lnf_b = m->out_w = m->mtp_emb = -1;
	for (int v = 0; v < m->nchunks; v++) {
		const struct gpt_chunk *ch = &m->chunks[v];
		if (ch->pre) {
			/* tied: the output layer too, here or as the last stage's copy */
			m->wte = reg_weight(m, "embedding.word_embeddings.weight", c->Vp, c->h, 0, c->init_std,
					    PARAM_EMB_OR_OUT | (c->untied && !c->mtp ? 0 : PARAM_TIED));
			m->wpe = c->rope || c->nopos ? -1 :
				reg_weight(m, "embedding.position_embeddings.weight", c->P, c->h, -1, c->init_std, 0);
		}
		for (int l = ch->l0; l < ch->l0 + ch->nl; l++)
			transformer_layer_register(m, l);
		if (!ch->post)
			continue;
		/* HybridStack names its final norm final_norm, TransformerBlock final_layernorm */
		const char *fw = c->hybrid ? "decoder.final_norm.weight" : "decoder.final_layernorm.weight";
		const char *fb = c->hybrid ? "decoder.final_norm.bias" : "decoder.final_layernorm.bias";
		m->lnf_w = reg_norm(m, fw, &fs, false);
		m->lnf_b = fs.norm == LAYER_RMSNORM ? -1 : reg_norm(m, fb, &fs, true);
		if (c->mtp) { /* the depths look up the word embeddings: the first stage's, or a copy */
			m->mtp_emb = m->wte;
			if (m->wte < 0 && c->untied)
				m->mtp_emb = reg_weight(m, "embedding.word_embeddings.weight", c->Vp, c->h, 0, c->init_std,
							PARAM_TIED | PARAM_SHARED | PARAM_EMB_OR_OUT);
			mtp_register(m);
		}
		if (c->untied)
			m->out_w = reg_weight(m, "output_layer.weight", c->Vp, c->h, 0, c->init_std, PARAM_EMB_OR_OUT);
		else if (m->wte >= 0)
			m->out_w = m->wte;
		else /* the last stage's copy of the first stage's word embeddings: same
		      * name, so it initialises and loads to the same values */
			m->out_w = reg_weight(m, "embedding.word_embeddings.weight", c->Vp, c->h, 0, c->init_std,
					      PARAM_TIED | PARAM_SHARED | PARAM_EMB_OR_OUT);
		if (c->mtp && m->mtp_emb < 0)
			m->mtp_emb = m->out_w;
	}
	/* the experts apart (expert parallelism, or expert TP other than TP):
	 * the experts after everything else, the part of the buffers reduced
	 * over its own data-parallel group (otherwise the registration order
	 * stays the buffers' order, one run of buckets) */
	m->expert_lo = c->E > 0 && m->par.dispatch ? params_move_last(&m->reg, PARAM_EXPERT) : m->reg.total;
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
	sl->resid = gpt_take(m, (size_t)(ch->nl + 1) * BTl * h);
	int nl = ch->nl + (ch->post ? m->c.mtp : 0); /* the depths' layers follow the head's chunk */
	sl->acts = xcalloc((size_t)nl + 1, sizeof(*sl->acts));
	sl->stash = m->work_acts.ln1 ? xcalloc((size_t)nl + 1, sizeof(*sl->stash)) : NULL;
	for (int li = 0; li < nl; li++) {
		const struct gpt_layer_params *p = &m->lp[ch->l0 + li];
		if (p->recompute) {
			sl->acts[li] = m->rc_acts;
			continue;
		}
		if (p->spec.kind == GPT_LAYER_MAMBA) {
			mamba_alloc_acts(m, &sl->acts[li]);
			continue;
		}
		bool moe = p->spec.mlp == LAYER_MLP_MOE;
		/* selective recompute: the dropped modules' buffers are shared;
		 * 16-bit: the fields the layer keeps run on the work set, their
		 * 2-byte copies are the layer's (gpt_layer_stash) */
		struct gpt_layer_acts sh = { 0 };
		if (c->recompute == GPT_RECOMPUTE_SELECTIVE)
			sh = m->rc_acts;
		if (sl->stash) {
			const struct gpt_layer_acts *W = &m->work_acts;
#define WORK(f) sh.f = sh.f ? sh.f : W->f;
			WORK(ln1) WORK(q) WORK(kk) WORK(v) WORK(atty) WORK(res1) WORK(ln2) WORK(fc1) WORK(act)
#undef WORK
		}
		bool attn_only = p->spec.kind == GPT_LAYER_ATTENTION;
		transformer_layer_alloc_acts(m, &sl->acts[li], &sh, !moe && !attn_only, moe && !attn_only);
		if (sl->stash)
			transformer_layer_alloc_stash(m, &sl->acts[li], &m->work_acts, &sl->stash[li]);
	}
	if (ch->post) {
		sl->lnf = gpt_take(m, BT * h);
		sl->lnf_mean = gpt_take(m, BTl);
		sl->lnf_rstd = gpt_take(m, BTl);
		sl->logits = gpt_take(m, BT * (size_t)c->Vp);
		sl->losses = gpt_take(m, BT);
		sl->lse = gpt_take(m, BT);
		if (m->c.mtp)
			mtp_alloc_slot(m, sl);
	}
	sl->tokens = gpt_take_bytes(m, BT * sizeof(int32_t));
	sl->targets = gpt_take_bytes(m, BT * sizeof(int32_t));
	sl->positions = gpt_take_bytes(m, BT * sizeof(int32_t));
	/* the whole sequence's document ids: ring attention reads every rank's */
	sl->doc = gpt_take_bytes(m, (size_t)m->B * m->c.S * sizeof(int32_t));
}

/* A rope table of T rows for positions 0..S-1: row j holds this rank's
 * local position j (gpt_global_pos: all of them in order without CP). */
static void build_rope(struct gpt_model *m, float **cos, float **sin, int S, int T)
{
	const struct gpt_config *c = &m->lc;
	int rot = c->rot;
	*cos = gpt_take(m, (size_t)T * rot);
	*sin = gpt_take(m, (size_t)T * rot);
	if (m->k->counts_only)
		return;
	float *hc = xmalloc((size_t)S * rot * sizeof(float));
	float *hs = xmalloc((size_t)S * rot * sizeof(float));
	struct rope_scaling sc = rope_scaling_llama3(c->rope_scaling_factor); /* --use-rope-scaling */
	const struct rope_yarn *yarn = c->yarn || c->mla_yarn ? &c->yarn_cfg : NULL; /* MLA's own too */
	struct rope_spec sp = { rot, c->rotary_base, c->rope_scaling ? &sc : NULL, yarn, c->rope_interleaved };
	rope_table(hc, hs, S, &sp);
	if (!m->par.cp) { /* rows in order: one copy */
		m->k->to_device(*cos, hc, (size_t)T * rot * sizeof(float));
		m->k->to_device(*sin, hs, (size_t)T * rot * sizeof(float));
	}
	for (int j = 0; m->par.cp && j < T; j++) {
		size_t g = (size_t)gpt_global_pos(m, j) * rot;
		m->k->to_device(*cos + (size_t)j * rot, hc + g, (size_t)rot * sizeof(float));
		m->k->to_device(*sin + (size_t)j * rot, hs + g, (size_t)rot * sizeof(float));
	}
	free(hc);
	free(hs);
}

static int32_t *device_iota(struct gpt_model *m, int n)
{
	int32_t *d = gpt_take_bytes(m, (size_t)n * sizeof(int32_t));
	if (m->k->counts_only)
		return d;
	int32_t *pos = xmalloc((size_t)n * sizeof(int32_t));
	for (int j = 0; j < n; j++)
		pos[j] = j;
	m->k->to_device(d, pos, (size_t)n * sizeof(int32_t));
	free(pos);
	return d;
}

/* Fewer query groups than TP ranks: the fused QKV output's share of this
 * rank and all ranks' shares (qkv_gather), for rows rows. */
static void alloc_qkv_gather(struct gpt_model *m, size_t rows)
{
	if (!qkv_gathered(m))
		return;
	size_t all = (size_t)(m->c.a + 2 * m->c.g) * m->c.k;
	m->s.qkv_part = gpt_take(m, rows * (all / (size_t)m->par.tp_size));
	m->s.qkv_all = gpt_take(m, rows * all);
}

/* Serving: the key/value cache, the rope table of every cache position,
 * and the step's buffers (no gradients, no backward scratch). */
static void alloc_serving(struct gpt_model *m, const struct gpt_serving *sv)
{
	const struct gpt_config *c = &m->lc;
	size_t T = (size_t)sv->max_tokens, h = c->h, H = (size_t)sv->head_rows;
	struct gpt_kv_cache *kv = xcalloc(1, sizeof(*kv));
	m->kv = kv;
	kv->max_req = sv->max_req;
	kv->max_seq = sv->max_seq;
	kv->head_rows = sv->head_rows;
	/* each layer's place in the cache of its kind */
	kv->layer = xmalloc((size_t)c->L * sizeof(int));
	for (int l = 0; l < c->L; l++) {
		enum gpt_layer_kind kind = m->lp[l].spec.kind;
		kv->layer[l] = kind == GPT_LAYER_MAMBA ? kv->nmamba++ : kind == GPT_LAYER_MLP ? -1 : kv->nattn++;
	}
	size_t cache = (size_t)sv->max_req * kv->nattn * c->g * (size_t)sv->max_seq * c->k;
	kv->k = cache ? gpt_take(m, cache) : NULL;
	kv->v = cache ? gpt_take(m, cache) : NULL;
	if (cache && !m->k->counts_only) {
		m->k->zero(kv->k, cache);
		m->k->zero(kv->v, cache);
	}
	if (kv->nmamba) { /* a slot's state is set by its first step (position 0), never read before */
		size_t R = (size_t)sv->max_req * kv->nmamba;
		kv->conv = gpt_take(m, R * (size_t)(c->mamba_W - 1) * gpt_mamba_conv_dim(c));
		kv->ssm = gpt_take(m, R * (size_t)c->mamba_H * c->mamba_P * c->mamba_N);
	}
	if (c->rope || c->mla) /* every position a cache slot holds (MLA: its own RoPE) */
		build_rope(m, &kv->rope_cos, &kv->rope_sin, sv->max_seq, sv->max_seq);
	kv->kpos = device_iota(m, sv->max_seq);
	kv->x = gpt_take(m, T * h);
	kv->y = gpt_take(m, T * h);
	kv->head_x = gpt_take(m, H * h);
	kv->lrows = gpt_take(m, H * (size_t)c->Vp);
	kv->grows = m->par.tp ? xmalloc(H * (size_t)m->c.Vp * sizeof(float)) : NULL;
	kv->rows_host = xmalloc(H * (size_t)m->c.Vp * sizeof(float));
	/* one set of activations every layer shares, and the step's inputs */
	bool dense = false, moe = false;
	for (int l = 0; l < c->L; l++)
		if (m->lp[l].spec.mlp == LAYER_MLP_MOE)
			moe = true;
		else
			dense = true;
	transformer_layer_alloc_acts(m, &m->rc_acts, NULL, dense, moe);
	if (kv->nmamba)
		mamba_alloc_serving(m, &m->rc_acts);
	struct gpt_slot *sl = &m->chunks[0].slots[0];
	sl->acts = xcalloc((size_t)c->L, sizeof(*sl->acts));
	for (int l = 0; l < c->L; l++)
		sl->acts[l] = m->rc_acts;
	sl->lnf = gpt_take(m, T * h);
	sl->lnf_mean = gpt_take(m, T);
	sl->lnf_rstd = gpt_take(m, T);
	sl->tokens = gpt_take_bytes(m, T * sizeof(int32_t));
	sl->positions = gpt_take_bytes(m, T * sizeof(int32_t));
	m->s.qkv = gpt_take(m, T * (size_t)(c->a + 2 * c->g) * c->k);
	alloc_qkv_gather(m, T);
	m->s.tmp = gpt_take(m, T * h);
	if (c->mla) { /* the projections' outputs, and core attention's output without the value's padding */
		m->s.mla_q = gpt_take(m, T * (size_t)c->a * c->k);
		m->s.mla_kv = gpt_take(m, T * (size_t)c->a * (c->qk_head + c->v_head));
		m->s.mla_kvc = gpt_take(m, T * (size_t)(c->kv_lora + c->qk_pos));
		m->s.mla_kp = gpt_take(m, T * (size_t)c->qk_pos);
		m->s.datty = gpt_take(m, T * (size_t)c->a * c->v_head);
	}
	if (c->E > 0)
		moe_alloc_scratch(m, false);
}

int gpt_init(struct gpt_model *m, const struct gpt_config *c, const struct kops *k, struct mem_pool *mem,
	     int B, enum gpt_precision precision, struct dist_group *tp, bool sp)
{
	struct gpt_setup one = { .B = B, .precision = precision, .tp = tp, .sp = sp };
	return gpt_init_pipe(m, c, k, mem, &one);
}

/* Where this rank sits, from the groups. */
static void set_parallel(struct gpt_model *m, const struct gpt_setup *pipe)
{
	struct gpt_parallel *par = &m->par;
	struct dist_group *tp = pipe->tp;
	par->tp = tp && tp->size > 1 ? tp : NULL;
	par->tp_size = par->tp ? tp->size : 1;
	par->tp_rank = par->tp ? tp->rank : 0;
	par->sp = pipe->sp && par->tp;
	par->cp = pipe->cp && pipe->cp->size > 1 ? pipe->cp : NULL;
	par->cp_size = par->cp ? par->cp->size : 1;
	par->cp_rank = par->cp ? par->cp->rank : 0;
	par->ep = pipe->ep && pipe->ep->size > 1 ? pipe->ep : NULL;
	par->ep_size = par->ep ? par->ep->size : 1;
	par->ep_rank = par->ep ? par->ep->rank : 0;
	par->El = m->c.E / par->ep_size;
	par->e0 = par->ep_rank * par->El;
	moe_set_parallel(par, pipe->etp);
}

/* Selective recompute: the buffers of the modules --recompute-modules drops,
 * in m->rc_acts, which every layer of every slot shares (one layer's at a
 * time: its backward recomputes them first). The experts' activation and
 * the shared expert's are moe_alloc_acts'. */
static void alloc_selective(struct gpt_model *m)
{
	const struct gpt_config *c = &m->lc;
	struct gpt_layer_acts *R = &m->rc_acts;
	size_t BT = (size_t)m->B * c->S, BTl = (size_t)m->Nl, h = c->h;
	size_t f1 = c->swiglu ? 2 * (size_t)c->f : (size_t)c->f;
	bool dense = false, moe = false;
	for (int v = 0; v < m->nchunks; v++)
		for (int l = m->chunks[v].l0; l < m->chunks[v].l0 + m->chunks[v].nl; l++)
			if (m->lp[l].spec.mlp == LAYER_MLP_MOE)
				moe = true;
			else
				dense = true;
	if (gpt_rc(m, GPT_RC_CORE_ATTN) && !m->par.cp && !m->flash)
		R->probs = m->probs_shared = gpt_take(m, (size_t)m->B * c->a * c->S * c->S);
	if (gpt_rc(m, GPT_RC_LAYERNORM)) {
		R->ln1 = gpt_take(m, BTl * h);
		R->ln1_mean = gpt_take(m, BTl);
		R->ln1_rstd = gpt_take(m, BTl);
		R->ln2 = gpt_take(m, BTl * h);
		R->ln2_mean = gpt_take(m, BTl);
		R->ln2_rstd = gpt_take(m, BTl);
	}
	if (gpt_rc(m, GPT_RC_MLP) && dense) {
		R->fc1 = gpt_take(m, BT * f1);
		R->act = gpt_take(m, BT * c->f);
	}
	if (gpt_rc(m, GPT_RC_MOE) && moe)
		R->moe = moe_alloc_acts(m);
	if (gpt_rc(m, GPT_RC_MLA_UP_PROJ) && c->mla) { /* q, k, v after RoPE and the up-projections' norms */
		bool ln = !c->rmsnorm;
		R->q = gpt_take(m, BT * c->a * c->k);
		R->kk = gpt_take(m, BT * c->g * c->k);
		R->v = gpt_take(m, BT * c->g * c->k);
		if (c->qk_norm && c->q_lora) {
			R->mla_qcn = gpt_take(m, BT * c->q_lora);
			R->mla_qc_rstd = gpt_take(m, BT);
			R->mla_qc_mean = ln ? gpt_take(m, BT) : NULL;
		}
		if (c->qk_norm) {
			R->mla_kvn = gpt_take(m, BT * c->kv_lora);
			R->mla_kv_rstd = gpt_take(m, BT);
			R->mla_kv_mean = ln ? gpt_take(m, BT) : NULL;
		}
	}
}

/* Every buffer of training (forward and backward scratch). */
static void alloc_training(struct gpt_model *m, bool any_rc)
{
	const struct gpt_config *c = &m->lc;
	struct gpt_scratch *s = &m->s;
	size_t BT = (size_t)m->B * c->S, h = c->h, BTl = (size_t)m->Nl;
	size_t qkv = (size_t)(c->a + 2 * c->g) * c->k, ak = (size_t)c->a * c->k;
	size_t f1 = c->swiglu ? 2 * (size_t)c->f : (size_t)c->f;
	/* the scratch set recomputed layers share, and the probs every layer
	 * shares under selective recompute */
	if (any_rc) {
		bool rc_dense = false, rc_moe = false;
		for (int l = 0; l < c->L; l++)
			if (m->lp[l].recompute && m->lp[l].spec.mlp == LAYER_MLP_MOE)
				rc_moe = true;
			else if (m->lp[l].recompute)
				rc_dense = true;
		transformer_layer_alloc_acts(m, &m->rc_acts, NULL, rc_dense, rc_moe);
	}
	if (c->recompute == GPT_RECOMPUTE_SELECTIVE)
		alloc_selective(m);
	/* 16-bit: the layers that keep their activations keep them in 2 bytes
	 * (gpt_layer_stash) and run on one fp32 work set */
	bool stash_dense = false, stash_any = false;
	for (int l = 0; m->precision != GPT_FP32 && l < gpt_num_layers_all(m); l++)
		if (!m->lp[l].recompute && m->lp[l].pend > 0) {
			stash_any = true;
			stash_dense |= m->lp[l].spec.mlp != LAYER_MLP_MOE;
		}
	if (stash_any)
		transformer_layer_alloc_work(m, &m->work_acts, stash_dense);
	for (int v = 0; v < m->nchunks; v++) {
		struct gpt_chunk *ch = &m->chunks[v];
		for (int i = 0; i < ch->nslots; i++)
			alloc_slot(m, ch, &ch->slots[i]);
	}
	s->dloss = gpt_take(m, BT);
	if (m->c.mtp)
		mtp_alloc_scratch(m);
	bool mamba = false; /* this stage's layers */
	for (int v = 0; v < m->nchunks; v++)
		for (int l = m->chunks[v].l0; l < m->chunks[v].l0 + m->chunks[v].nl; l++)
			mamba |= m->lp[l].spec.kind == GPT_LAYER_MAMBA;
	if (mamba)
		mamba_alloc_scratch(m);
	if (c->rope || c->mla) /* multi-latent attention: its own RoPE on qk_pos channels, whatever the embedding */
		build_rope(m, &m->rope_cos, &m->rope_sin, m->c.S, c->S);
	if (m->flash)
		m->flash_pos = device_iota(m, c->S);
	s->qkv = gpt_take(m, BT * qkv);
	alloc_qkv_gather(m, BT);
	s->tmp = gpt_take(m, BT * h);
	s->dres = gpt_take(m, BTl * h);
	if (m->par.sp) {
		s->shard = gpt_take(m, BTl * h);
		s->perm = gpt_take(m, BT * h);
		s->gath = gpt_take(m, BT * h);
	}
	s->dtmp = gpt_take(m, BT * h);
	s->dln = gpt_take(m, BT * h);
	s->datty = gpt_take(m, BT * ak);
	s->dq = gpt_take(m, BT * ak);
	s->dk = gpt_take(m, BT * c->g * c->k);
	s->dv = gpt_take(m, BT * c->g * c->k);
	s->dfc1 = gpt_take(m, BT * f1);
	s->dact = gpt_take(m, BT * c->f);
	if (c->mla) {
		size_t lat = (size_t)(c->q_lora > c->kv_lora ? c->q_lora : c->kv_lora);
		s->mla_q = gpt_take(m, BT * ak);
		s->mla_kv = gpt_take(m, BT * c->a * (c->qk_head + c->v_head));
		s->mla_kvc = gpt_take(m, BT * (c->kv_lora + c->qk_pos));
		s->mla_kp = gpt_take(m, BT * c->qk_pos);
		s->mla_kt = gpt_take(m, BT * c->qk_pos);
		s->mla_dc = gpt_take(m, BT * lat);
		s->mla_dc2 = gpt_take(m, BT * lat);
	}
	if (c->E > 0)
		moe_alloc_scratch(m, true);
}

/* Megatron-FSDP's units (gpt.h, struct gpt_shards): the embedding, each
 * layer and the head have their gradients in a unit buffer while their
 * backward runs; how large each buffer must be. One pipeline stage (the
 * trainer refuses the rest): the units are runs of adjacent tensors. */
/* One past the head unit's last tensor: the final norm's, then an untied
 * output layer (a tied one is the embedding's). */
static int head_unit_end(const struct gpt_model *m)
{
	return (m->out_w != m->wte ? m->out_w : m->lnf_b >= 0 ? m->lnf_b : m->lnf_w) + 1;
}

static void setup_shards(struct gpt_model *m, const struct gpt_shards *sh)
{
	if (sh->level < 2 || sh->level > 3 || m->nchunks != 1 || !m->chunks[0].pre || !m->chunks[0].post)
		BUG("gpt_shards level %d on %d chunks", sh->level, m->nchunks);
	m->shards = *sh;
	dist_shard(m->reg.total, sh->size, sh->rank, &m->shards.lo, &m->shards.hi);
	const struct param *p = m->reg.p;
	m->unit_n[GPT_UNIT_EMB] = p[m->wte].numel + (m->wpe >= 0 ? p[m->wpe].numel : 0);
	int head_end = head_unit_end(m);
	m->unit_n[GPT_UNIT_HEAD] = p[head_end - 1].offset + p[head_end - 1].numel - p[m->lnf_w].offset;
	for (int l = 0; l < m->c.L; l++) {
		const struct gpt_layer_params *lp = &m->lp[l];
		size_t n = p[lp->pend - 1].offset + p[lp->pend - 1].numel - p[lp->pfirst].offset;
		if (n > m->unit_n[GPT_UNIT_LAYER])
			m->unit_n[GPT_UNIT_LAYER] = n;
	}
	/* a multi-token-prediction depth (its norms, eh_proj and layer) is a
	 * layer unit of its own, flushed after its backward (mtp.c) */
	for (int k = 0; k < m->c.mtp; k++) {
		const struct gpt_mtp_params *q = &m->mtp[k];
		size_t n = p[q->pend - 1].offset + p[q->pend - 1].numel - p[q->pfirst].offset;
		if (n > m->unit_n[GPT_UNIT_LAYER])
			m->unit_n[GPT_UNIT_LAYER] = n;
	}
	/* each tensor's place, for gpt_unit_grad: the unit that holds it
	 * and its offset from the unit's first tensor */
	m->unit_pos = xcalloc((size_t)m->reg.n, sizeof(*m->unit_pos));
	for (int i = 0; i < m->reg.n; i++) {
		int u = GPT_UNIT_LAYER, first = i;
		if (i == m->wte || i == m->wpe) {
			u = GPT_UNIT_EMB;
			first = m->wte;
		} else if (i == m->lnf_w || i == m->lnf_b || i == m->out_w) {
			u = GPT_UNIT_HEAD;
			first = m->lnf_w;
		} else {
			for (int l = 0; l < m->c.L; l++)
				if (i >= m->lp[l].pfirst && i < m->lp[l].pend)
					first = m->lp[l].pfirst;
			for (int k = 0; k < m->c.mtp; k++)
				if (i >= m->mtp[k].pfirst && i < m->mtp[k].pend)
					first = m->mtp[k].pfirst;
		}
		m->unit_pos[i].unit = u;
		m->unit_pos[i].off = p[i].offset - p[first].offset;
	}
}

/* The unit buffer parameter idx's gradient is in (level >= 2), and where. */
float *gpt_unit_grad(struct gpt_model *m, int idx)
{
	return m->unit_grad[m->unit_pos[idx].unit] + m->unit_pos[idx].off;
}

/* After unit u's backward (tensors [first, end)): its gradients to the
 * shards, and the buffer zeroed for the next micro-batch. */
void gpt_flush_unit(struct gpt_model *m, int u, int first, int end)
{
	if (m->shards.level < 2)
		return;
	const struct param *p = m->reg.p;
	m->shards.reduce(m->shards.ctx, first, end, m->unit_grad[u]);
	m->k->zero(m->unit_grad[u], p[end - 1].offset + p[end - 1].numel - p[first].offset);
}

/* A 16-bit model's fp32 views (enum gpt_view), each as large as the
 * largest tensor it ever holds; with direct16 the W view is a staging
 * buffer of at most GPT_STAGE floats (gpt_set_param). */
#define GPT_STAGE ((size_t)1 << 20)
static void alloc_views(struct gpt_model *m)
{
	size_t *n = m->view_n;
	for (int i = 0; i < m->reg.n; i++) {
		const struct param *p = &m->reg.p[i];
		size_t *fit = p->ndim == 1 ? &n[GPT_VIEW_B] : i == m->wpe ? &n[GPT_VIEW_X] : &n[GPT_VIEW_W];
		if (p->numel > *fit)
			*fit = p->numel;
		if (p->numel > m->gather16_n)
			m->gather16_n = p->numel;
	}
	if (n[GPT_VIEW_B] > n[GPT_VIEW_X]) /* a norm's bias beside its weight */
		n[GPT_VIEW_X] = n[GPT_VIEW_B];
	if (m->direct16 && n[GPT_VIEW_W] > GPT_STAGE)
		n[GPT_VIEW_W] = GPT_STAGE;
	for (int v = 0; v < GPT_NVIEWS; v++)
		m->view[v] = gpt_take(m, n[v]);
}

int gpt_init_pipe(struct gpt_model *m, const struct gpt_config *c, const struct kops *k, struct mem_pool *mem,
		  const struct gpt_setup *setup)
{
	struct gpt_setup one = *setup; /* zero: one stage, one chunk */
	one.pp = one.pp > 0 ? one.pp : 1;
	one.vpp = one.vpp > 0 ? one.vpp : 1;
	const struct gpt_setup *pipe = &one;
	int B = pipe->B;
	enum gpt_precision precision = pipe->precision;
	bool sp = pipe->sp;
	memset(m, 0, sizeof(*m));
	m->c = *c;
	m->k = k;
	m->mem = mem;
	m->B = B;
	m->precision = precision;
	m->moe.aux_scale = 1.0; /* Megatron's initial MoEAuxLossAutoScaler scale */
	m->mtp_grad_scale = 1.0; /* and MTPLossAutoScaler's */
	if (B < 1 || pipe->stage < 0 || pipe->stage >= pipe->pp)
		BUG("micro-batch %d, stage %d of %d", B, pipe->stage, pipe->pp);
	set_parallel(m, pipe);
	struct gpt_parallel *par = &m->par;
	int t = par->tp_size;
	struct gpt_layout lay = { .tp = t, .pp = pipe->pp, .vpp = pipe->vpp, .cp = par->cp_size,
				  .ep = par->ep_size, .etp = par->etp_size, .sp = par->sp };
	if (gpt_config_check_layout(c, &lay, NULL) < 0)
		return -1;
	if (c->E > 0 && par->cp && par->ep)
		return error("--expert-model-parallel-size %d with --context-parallel-size %d is not in megac yet (it "
			     "needs Megatron's expert rank generator with context parallelism)", par->ep_size, par->cp_size);
	if (c->mtp && !pipe->serve) {
		if (c->h % t)
			return error("--mtp-num-layers: --hidden-size %d is not divisible by --tensor-model-parallel-size %d "
				     "(eh_proj is split by its output rows)", c->h, t);
		if (pipe->pp > 1 && !c->rope && !c->mla)
			return error("--mtp-num-layers with learned position embeddings over pipeline stages is not in "
				     "megac yet");
	}
	if (c->hybrid) { /* docs/mamba.md: what the Mamba layers do not do yet */
		const char *no = NULL;
		if (precision != GPT_FP32)
			no = "--bf16 and --fp16";
		else if (c->recompute != GPT_RECOMPUTE_NONE)
			no = "--recompute-granularity";
		else if (pipe->fp8 && pipe->fp8->on)
			no = "--fp8-format";
		else if (pipe->shards)
			no = "--use-megatron-fsdp";
		if (no)
			return error("%s with a hybrid Mamba model (--hybrid-layer-pattern): not in megac yet (docs/mamba.md)",
				     no);
		bool ops = k->ssm_conv_forward && k->ssm_conv_backward && k->ssd_scan_forward && k->ssd_scan_backward &&
			   k->gated_rmsnorm_forward && k->gated_rmsnorm_backward;
		if (!k->counts_only && !ops)
			return error("the %s backend has no Mamba-2 ops (ssm_conv, ssd_scan, gated_rmsnorm) yet: a "
				     "hybrid model (--hybrid-layer-pattern) trains on the CPU for now", k->name);
	}
	if (pipe->serve) /* Megatron serves without the MTP depths */
		m->c.mtp = 0;
	const struct gpt_serving *sv = pipe->serve;
	if (sv && (B != 1 || pipe->pp != 1 || par->cp || sv->max_tokens != c->S || sv->head_rows < 1 ||
		   (sv->max_seq > c->P && !c->rope && !c->nopos)))
		BUG("serving on B %d, PP %d, CP %d, S %d for %d tokens", B, pipe->pp, par->cp_size, c->S, sv->max_tokens);
	/* every dropout site numbers its elements below 2^SITE_SHIFT */
	uint64_t attn_counters = (uint64_t)c->a * (uint64_t)B * (uint64_t)c->S * (uint64_t)c->S;
	uint64_t hidden_counters = (uint64_t)B * (uint64_t)c->S * (uint64_t)c->h;
	if ((c->attention_dropout > 0 && attn_counters >> SITE_SHIFT) ||
	    (c->hidden_dropout > 0 && hidden_counters >> SITE_SHIFT))
		return error("dropout on %d heads x micro-batch %d x sequence %d^2 needs more than 2^%d mask counters per "
			     "layer; use --attention-dropout 0 (usual for long sequences) or a smaller micro-batch",
			     c->a, B, c->S, SITE_SHIFT);
	/* what this rank computes: its heads, groups, ffn columns and vocabulary rows */
	m->lc = *c;
	m->lc.mtp = m->c.mtp; /* none when serving */
	if (c->recompute == GPT_RECOMPUTE_SELECTIVE && !c->recompute_modules)
		m->lc.recompute_modules = GPT_RC_CORE_ATTN; /* Megatron's default */
	m->lc.a /= t;
	m->lc.g = c->g < t ? 1 : c->g / t; /* fewer groups than ranks: each rank's heads share one group */
	m->lc.f /= t;
	m->lc.moe_f /= par->etp_size; /* experts split over expert TP (moe/moe_layer.c) */
	m->lc.shared_f /= t;
	m->lc.mamba_H /= t; /* the Mamba mixer's heads and groups (mamba_mixer.c) */
	m->lc.mamba_G /= t;
	/* Megatron's router sees one TP rank's sequence shard (SP is required
	 * with TP): the capacity applies to each shard */
	m->lc.router.shards = sp && par->tp ? t : 1;
	m->lc.router.cp = par->cp_size; /* and each CP rank's own share (moe_route_cp) */
	m->lc.Vp /= t;
	par->vstart = par->tp_rank * m->lc.Vp;
	if (par->cp) {
		if (ring_attn_init(&par->ring, mem, par->cp, B, c->S, m->lc.a, m->lc.g, c->k) < 0)
			return -1;
		m->lc.S = c->S / par->cp_size;
	}
	/* a GPU's flash-style attention, where the op table has one (document
	 * masks too: the block ops take them on global positions) */
	m->flash = !sv && k->flash && k->attention_block_forward && k->attention_block_backward && !par->cp;
	m->Nl = B * (par->sp ? m->lc.S / t : m->lc.S);
	m->nchunks = pipe->vpp;
	m->chunks = xcalloc((size_t)m->nchunks, sizeof(*m->chunks));
	m->lp = xcalloc((size_t)gpt_num_layers_all(m), sizeof(*m->lp));
	bool any_rc = false;
	for (int v = 0; v < m->nchunks; v++) {
		struct gpt_chunk *ch = &m->chunks[v];
		dist_stage_layers(&(struct dist_split){ .L = c->L, .pp = pipe->pp, .vpp = pipe->vpp, .first = c->pp_first,
							.last = c->pp_last },
				  pipe->stage, v, &ch->l0, &ch->nl);
		ch->pre = pipe->stage == 0 && v == 0;
		ch->post = pipe->stage == pipe->pp - 1 && v == pipe->vpp - 1;
		ch->nslots = sv ? 1 : pipe->nslots ? pipe->nslots[v] : 1;
		if (ch->nslots < 1)
			BUG("chunk %d with %d slots", v, ch->nslots);
		ch->slots = xcalloc((size_t)ch->nslots, sizeof(*ch->slots));
		for (int li = 0; li < ch->nl; li++) {
			struct gpt_layer_params *p = &m->lp[ch->l0 + li];
			gpt_layer_spec(c, ch->l0 + li, &p->spec);
			p->recompute = !sv && layer_recomputed(c, li);
			any_rc |= p->recompute;
		}
		for (int d = 0; ch->post && d < m->c.mtp; d++) /* the depths: the last layer's kind, kept whole */
			gpt_layer_spec(c, c->L - 1, &m->lp[c->L + d].spec);
	}
	register_params(m);
	if (c->E > 0 && c->router.expert_bias) { /* host state beside the routing, not parameters */
		m->moe.expert_bias = xcalloc((size_t)gpt_num_layers_all(m) * c->E, sizeof(float));
		m->moe.tok_count = xcalloc((size_t)gpt_num_layers_all(m) * c->E, sizeof(double));
	}
	if (pipe->shards && !sv)
		setup_shards(m, pipe->shards);
	if (!sv && gpt_fp8_init(m, pipe->fp8) < 0) /* which weights are FP8 decides the store's layout */
		return -1;
	/* the weights this rank keeps: all, or its shard at FSDP level 3 */
	size_t kept = m->shards.level == 3 ? m->shards.hi - m->shards.lo : m->reg.total;
	if (precision == GPT_FP32)
		m->reg.data = gpt_take(m, kept);
	else if (gpt_fp8_store_layout(m))
		m->w16 = gpt_take_bytes(m, m->soff[m->reg.n]);
	else
		m->w16 = gpt_take_bytes(m, kept * sizeof(uint16_t));
	m->direct16 = m->w16 && k->w16_direct;
	if (m->w16 || m->shards.level == 3)
		alloc_views(m);
	if (m->shards.level == 3 && m->w16)
		m->gather16 = gpt_take_bytes(m, m->gather16_n * sizeof(uint16_t));
	m->reg.grad = sv || m->shards.level >= 2 ? NULL : gpt_take(m, m->reg.total);
	for (int u = 0; u < 3; u++)
		m->unit_grad[u] = m->unit_n[u] ? gpt_take(m, m->unit_n[u]) : NULL;
	if (sv)
		alloc_serving(m, sv);
	else
		alloc_training(m, any_rc);
	if (c->norm_1p) { /* the norms' w + 1 (--apply-layernorm-1p) */
		m->s.norm_gamma = gpt_take(m, c->h);
		m->s.norm_ones = gpt_take(m, c->h);
	}
	if (!sv)
		gpt_fp8_alloc(m);
	if (m->s.norm_ones && !k->counts_only) {
		float *ones = xmalloc((size_t)c->h * sizeof(float));
		for (int i = 0; i < c->h; i++)
			ones[i] = 1.0f;
		k->to_device(m->s.norm_ones, ones, (size_t)c->h * sizeof(float));
		free(ones);
	}
	return 0;
}

void gpt_free(struct gpt_model *m)
{
	gpt_fp8_free(m); /* its scratch, which grows, is outside the allocs list */
	free(m->soff);
	for (size_t i = m->nallocs; i-- > 0;)
		mem_free(m->mem, m->allocs[i].p, m->allocs[i].bytes);
	free(m->allocs);
	free(m->unit_pos);
	ring_attn_free(&m->par.ring); /* a no-op when it was never set up */
	for (int v = 0; v < m->nchunks && m->chunks; v++) {
		for (int s = 0; s < m->chunks[v].nslots; s++) {
			for (int k = 0; m->chunks[v].slots[s].mtp && k < m->c.mtp; k++)
				free(m->chunks[v].slots[s].mtp[k].dloss_host);
			free(m->chunks[v].slots[s].mtp);
			free(m->chunks[v].slots[s].acts);
			free(m->chunks[v].slots[s].stash);
		}
		free(m->chunks[v].slots);
	}
	free(m->chunks);
	moe_free(m);
	for (int l = 0; m->lp && l < gpt_num_layers_all(m); l++) {
		free(m->lp[l].efc1_w);
		free(m->lp[l].efc2_w);
	}
	if (m->kv) {
		free(m->kv->layer);
		free(m->kv->grows);
		free(m->kv->rows_host);
		free(m->kv);
	}
	params_free(&m->reg);
	free(m->lp);
	free(m->mtp);
	free(m->mtp_log);
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
			case PARAM_INIT_UNIFORM:
				host[e] = p->init_std * (2.0f * kops_uniform(s, gidx) - 1.0f);
				break;
			case PARAM_INIT_A_LOG:
				host[e] = logf(1.0f + 15.0f * kops_uniform(s, gidx));
				break;
			case PARAM_INIT_DT_BIAS: {
				double lo = log(0.001), hi = log(0.1);
				double dt = exp(lo + (hi - lo) * kops_uniform(s, gidx));
				dt = dt < 1e-4 ? 1e-4 : dt;
				host[e] = (float)(dt + log(-expm1(-dt))); /* the inverse of softplus */
				break;
			}
			}
		}
		gpt_set_param(m, i, host);
		free(host);
	}
}

enum kops_round gpt_half_kind(const struct gpt_model *m)
{
	return m->precision == GPT_FP16 ? KOPS_ROUND_FP16 : KOPS_ROUND_BF16;
}

void gpt_set_param(struct gpt_model *m, int idx, const float *host)
{
	const struct param *p = &m->reg.p[idx];
	/* the elements [a, b) this rank keeps: all, or at FSDP level 3 its shard's */
	size_t a = p->offset, b = p->offset + p->numel, base = 0;
	if (m->shards.level == 3) {
		a = a > m->shards.lo ? a : m->shards.lo;
		b = b < m->shards.hi ? b : m->shards.hi;
		base = m->shards.lo;
		if (a >= b)
			return;
	}
	const float *src = host + (a - p->offset);
	if (!m->w16) {
		m->k->to_device(m->reg.data + (a - base), src, (b - a) * sizeof(float));
		return;
	}
	if (gpt_fp8_stored(m, idx)) { /* codes come from the main weights (gpt_copy_main_to_model) */
		gpt_fp8_keep_initial(m, idx, src);
		return;
	}
	/* through the W view (as large as any tensor, or the staging buffer),
	 * narrowed on the device, a view's worth at a time */
	uint16_t *dst = m->soff ? gpt_words(m, idx) : m->w16 + (a - base); /* element a */
	for (size_t i = a; i < b;) {
		size_t n = b - i < m->view_n[GPT_VIEW_W] ? b - i : m->view_n[GPT_VIEW_W];
		m->k->to_device(m->view[GPT_VIEW_W], src + (i - a), n * sizeof(float));
		m->k->narrow(dst + (i - a), m->view[GPT_VIEW_W], n, gpt_half_kind(m));
		i += n;
	}
}

size_t gpt_weight_bytes(const struct gpt_model *m)
{
	size_t kept = m->shards.level == 3 ? m->shards.hi - m->shards.lo : m->reg.total;
	if (m->soff)
		return m->soff[m->reg.n];
	return kept * (m->w16 ? sizeof(uint16_t) : sizeof(float));
}

void gpt_set_weights(struct gpt_model *m, const float *host)
{
	for (int i = 0; i < m->reg.n; i++)
		gpt_set_param(m, i, host + m->reg.p[i].offset);
}


/* The overlapped parameter gather's hook (gpt.h): a layer's parameters, or
 * single ones (-1: none). */
void gpt_need_param(struct gpt_model *m, int idx)
{
	if (m->param_needed && idx >= 0)
		m->param_needed(m->param_ctx, idx);
}

static void need_layer(struct gpt_model *m, int l)
{
	const struct gpt_layer_params *p = &m->lp[l];
	for (int i = p->pfirst; m->param_needed && i < p->pend; i++)
		gpt_need_param(m, i);
}

/* ---- the chunk loop ---- */

/* The micro-batch's inputs into its slot: ids local to this rank's
 * vocabulary shard (-1 for the other shards'), positions, documents. */
static void load_inputs(struct gpt_model *m, struct gpt_slot *sl, const int32_t *tokens, const int32_t *labels,
			const int32_t *positions, const int32_t *doc, uint64_t drop_seed)
{
	const struct gpt_config *c = &m->lc;
	const struct kops *k = m->k;
	int S = c->S, N = m->B * S, vstart = m->par.vstart;
	int32_t *local = xmalloc((size_t)N * 2 * sizeof(int32_t));
	for (int i = 0; i < N; i++) {
		if (tokens[i] < 0 || tokens[i] >= m->c.Vp || labels[i] < 0 || labels[i] >= m->c.Vp)
			BUG("token id %d / label %d outside the vocabulary of %d", tokens[i], labels[i], m->c.Vp);
		int32_t tl = tokens[i] - vstart, ll = labels[i] - vstart;
		local[i] = tl >= 0 && tl < c->Vp ? tl : -1;
		local[N + i] = ll >= 0 && ll < c->Vp ? ll : -1;
	}
	k->to_device(sl->tokens, local, (size_t)N * 4);
	k->to_device(sl->targets, local + N, (size_t)N * 4);
	free(local);
	sl->use_positions = !c->rope && !c->nopos;
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
	if (doc) /* [B, S] of the whole sequence, with or without CP */
		k->to_device(sl->doc, doc, (size_t)m->B * m->c.S * 4);
	sl->drop_seed = drop_seed;
}

/* The pass over slot s of chunk v (a training micro-batch). */
static struct gpt_pass chunk_pass(struct gpt_model *m, int v, int s, bool train)
{
	if (v < 0 || v >= m->nchunks || s < 0 || s >= m->chunks[v].nslots)
		BUG("chunk %d slot %d of %d chunks", v, s, m->nchunks);
	struct gpt_pass P = { &m->chunks[v].slots[s], m->chunks[v].l0, m->B, m->lc.S, m->B * m->lc.S, m->Nl, train,
			      train, NULL };
	return P;
}

/* The final norm and the output layer (column-parallel over the
 * vocabulary: logits over the whole padded vocabulary, as Megatron; the pad
 * rows are real parameters), then the loss. */
static void head_forward(struct gpt_model *m, const struct gpt_pass *P, const float *x, float *losses_host)
{
	struct gpt_slot *sl = P->sl;
	gpt_need_param(m, m->lnf_w);
	gpt_need_param(m, m->lnf_b);
	gpt_need_param(m, m->out_w);
	norm_fwd(m, m->par.sp ? m->s.shard : sl->lnf, sl->lnf_mean, sl->lnf_rstd, x, m->lnf_w, m->lnf_b, P->Nl);
	if (m->par.sp && sl->mtp) /* the depths' hidden input: this rank's rows */
		m->k->copy(sl->lnf_local, m->s.shard, (size_t)P->Nl * m->c.h * sizeof(float));
	if (m->par.sp)
		sp_gather(m, P, sl->lnf, m->s.shard);
	linear_fwd(m, sl->logits, sl->lnf, m->out_w, -1, P->N, m->c.h, m->lc.Vp);
	vocab_parallel_xent_forward(m, P, losses_host);
}

/* From dL/dloss to dL/d(the last layer's output) in s.dres; dmtp: the
 * multi-token-prediction depths' share of dL/d(the final norm's output)
 * (this rank's rows; NULL: none). */
static void head_backward(struct gpt_model *m, const struct gpt_pass *P, const float *x, const float *dloss_host,
			  const float *dmtp)
{
	struct gpt_slot *sl = P->sl;
	vocab_parallel_xent_backward(m, P, dloss_host);
	linear_bwd(m, m->s.dln, sl->logits, sl->lnf, m->out_w, -1, P->N, m->c.h, m->lc.Vp);
	float *dlnf = (float *)column_input_grad(m, P, m->s.dln);
	if (dmtp)
		m->k->add(dlnf, dlnf, dmtp, (size_t)P->Nl * m->c.h);
	norm_bwd(m, m->s.dres, dlnf, x, m->lnf_w, m->lnf_b, sl->lnf_mean, sl->lnf_rstd, P->Nl);
	if (m->grad_ready) { /* a tied output layer is the embedding: final only after it */
		m->grad_ready(m->grad_ctx, m->lnf_w);
		if (m->lnf_b >= 0)
			m->grad_ready(m->grad_ctx, m->lnf_b);
		if (m->out_w != m->wte)
			m->grad_ready(m->grad_ctx, m->out_w);
	}
	/* a tied output layer is in the embedding's unit */
	gpt_flush_unit(m, GPT_UNIT_HEAD, m->lnf_w, head_unit_end(m));
}

float *gpt_chunk_input(struct gpt_model *m, int v, int s)
{
	if (v < 0 || v >= m->nchunks || s < 0 || s >= m->chunks[v].nslots)
		BUG("chunk %d slot %d of %d chunks", v, s, m->nchunks);
	return m->chunks[v].slots[s].resid;
}

float *gpt_chunk_grad_input(struct gpt_model *m)
{
	return m->s.dres;
}

const float *gpt_forward_chunk(struct gpt_model *m, int v, int s, const int32_t *tokens, const int32_t *labels,
			       const int32_t *positions, const int32_t *doc, uint64_t drop_seed, bool train,
			       float *losses_host)
{
	const struct gpt_chunk *ch = &m->chunks[v];
	struct gpt_pass P = chunk_pass(m, v, s, train);
	float *resid = P.sl->resid;
	gpt_fp8_training(m, train); /* and so for the backward (and recompute) that follows */
	size_t nhl = (size_t)P.Nl * m->c.h;

	load_inputs(m, P.sl, tokens, labels, positions, doc, drop_seed);
	if (ch->post && m->c.mtp && train)
		mtp_load_inputs(m, P.sl, tokens, labels, positions);
	if (ch->pre)
		embedding_forward(m, &P, resid);
	for (int l = ch->l0; l < ch->l0 + ch->nl; l++) {
		need_layer(m, l);
		transformer_layer_forward(m, &P, l, resid + (size_t)(l - ch->l0) * nhl,
					  resid + (size_t)(l - ch->l0 + 1) * nhl);
		if (train && P.sl->stash) /* what backward reads, in 2 bytes */
			transformer_layer_stash(m, &P.sl->acts[l - ch->l0], &P.sl->stash[l - ch->l0], true);
	}
	if (!ch->post)
		return resid + (size_t)ch->nl * nhl;
	head_forward(m, &P, resid + (size_t)ch->nl * nhl, losses_host);
	if (m->c.mtp && train)
		mtp_forward(m, &P);
	return NULL;
}

const float *gpt_backward_chunk(struct gpt_model *m, int v, int s, const float *dloss_host)
{
	const struct gpt_config *c = &m->lc;
	const struct gpt_chunk *ch = &m->chunks[v];
	struct gpt_pass P = chunk_pass(m, v, s, true);
	float *resid = P.sl->resid;
	size_t nhl = (size_t)P.Nl * c->h;

	if (ch->post)
		head_backward(m, &P, resid + (size_t)ch->nl * nhl, dloss_host, m->c.mtp ? mtp_backward(m, &P) : NULL);
	for (int l = ch->l0 + ch->nl - 1; l >= ch->l0; l--) {
		const float *x = resid + (size_t)(l - ch->l0) * nhl;
		const struct gpt_layer_params *p = &m->lp[l];
		if (P.sl->stash) /* the saved activations back into the work set */
			transformer_layer_stash(m, &P.sl->acts[l - ch->l0], &P.sl->stash[l - ch->l0], false);
		if (p->recompute) {
			struct gpt_pass R = P;
			R.stats = false; /* counted in the forward pass */
			transformer_layer_forward(m, &R, l, x, resid + (size_t)(l - ch->l0 + 1) * nhl);
		} else if (c->recompute == GPT_RECOMPUTE_SELECTIVE) {
			transformer_layer_recompute(m, &P, l, x);
		}
		transformer_layer_backward(m, &P, l, x, m->s.dres);
		for (int i = p->pfirst; m->grad_ready && i < p->pend; i++)
			m->grad_ready(m->grad_ctx, i);
		gpt_flush_unit(m, GPT_UNIT_LAYER, p->pfirst, p->pend);
	}
	if (!ch->pre)
		return m->s.dres;
	embedding_backward(m, &P, m->s.dres);
	gpt_flush_unit(m, GPT_UNIT_EMB, m->wte, m->wpe >= 0 ? m->wpe + 1 : m->wte + 1);
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

/* ---- serving ---- */

const float *gpt_serve_forward(struct gpt_model *m, const struct gpt_kv_step *step, const int32_t *tokens)
{
	struct gpt_kv_cache *kv = m->kv;
	const struct gpt_config *c = &m->lc;
	int N = step->N;
	if (!kv || N < 1 || N > m->lc.S)
		BUG("a serving step of %d rows on a model set up for %d", N, kv ? m->lc.S : 0);
	struct gpt_slot *sl = &m->chunks[0].slots[0];
	struct gpt_pass P = { sl, 0, 1, N, N, N, false, false, step };
	/* the step's inputs: ids local to this rank's vocabulary shard, each row's position */
	int32_t *host = xmalloc((size_t)N * 2 * sizeof(int32_t)), *pos = host + N;
	for (int s = 0, r = 0; s < step->nseq; s++)
		for (int t = 0; t < step->n[s]; t++, r++)
			pos[r] = step->pos[s] + t;
	for (int i = 0; i < N; i++) {
		int32_t t = tokens[i] - m->par.vstart;
		host[i] = t >= 0 && t < c->Vp ? t : -1;
	}
	m->k->to_device(sl->tokens, host, (size_t)N * sizeof(int32_t));
	m->k->to_device(sl->positions, pos, (size_t)N * sizeof(int32_t));
	free(host);
	sl->use_positions = !c->rope && !c->nopos;
	sl->use_doc = false;
	sl->drop_seed = 0;
	float *x = kv->x, *y = kv->y;
	embedding_forward(m, &P, x);
	for (int l = 0; l < c->L; l++) {
		transformer_layer_forward(m, &P, l, x, y);
		float *t = x;
		x = y, y = t;
	}
	norm_fwd(m, sl->lnf, sl->lnf_mean, sl->lnf_rstd, x, m->lnf_w, m->lnf_b, N);
	return sl->lnf;
}

const float *gpt_serve_logits(struct gpt_model *m, const float *x, int R)
{
	struct gpt_kv_cache *kv = m->kv;
	size_t lv = (size_t)m->lc.Vp, Vp = (size_t)m->c.Vp;
	if (!kv || R < 1 || R > kv->head_rows)
		BUG("%d rows for the output layer of %d", R, kv ? kv->head_rows : 0);
	linear_fwd_raw(m, kv->lrows, x, m->out_w, -1, R, m->c.h, (int)lv);
	if (!m->par.tp) {
		m->k->to_host(kv->rows_host, kv->lrows, (size_t)R * lv * sizeof(float));
		return kv->rows_host;
	}
	/* each rank's vocabulary columns, gathered on the host: [rank][R][Vp/t] */
	int t = m->par.tp_size;
	float *mine = kv->rows_host; /* free until the reorder below */
	m->k->to_host(mine, kv->lrows, (size_t)R * lv * sizeof(float));
	dist_allgather_equal_f32(m->par.tp, mine, (size_t)R * lv, kv->grows);
	for (int q = 0; q < t; q++)
		for (int i = 0; i < R; i++)
			memcpy(kv->rows_host + (size_t)i * Vp + (size_t)q * lv, kv->grows + ((size_t)q * R + i) * lv,
			       lv * sizeof(float));
	return kv->rows_host;
}
