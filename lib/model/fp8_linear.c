/*
 * fp8_linear.c - the transformer layers' linear layers in FP8 (Megatron's
 * fp8_utils with Transformer Engine's recipes; docs/fp8.md is the spec).
 *
 * A linear layer with an FP8 slot multiplies FP8 codes instead of bf16
 * words in its three GEMMs:
 *   forward  out[N,OC]  = X[N,IC] . W[OC,IC]^T     A = q(X),      B = q(W)
 *   dgrad    dX[N,IC]   = dY[N,OC] . W             A = q(dY),     B = q(W^T)
 *   wgrad    dW[OC,IC] += dY^T . X                 A = q(dY^T),   B = q(X^T)
 * Each operand is quantized from the bf16-valued tensor in the orientation
 * its GEMM reads (the K dimension contiguous), so the blockwise and MXFP8
 * recipes' columnwise copies come from high precision, as in Transformer
 * Engine. Three roles carry a scale each: the input X, the weight W and
 * the output gradient dY (E5M2 under --fp8-format hybrid, else E4M3).
 * Outputs are rounded to bf16 as every GEMM output of a --bf16 model is;
 * the bias gradient is taken from the bf16 dY.
 *
 * Scales, per recipe:
 *   delayed     one scale per meta and role, from its amax history; the
 *               tensors raise their entry of a device array as they are
 *               quantized (no trip to the host), and
 *               gpt_fp8_update() reduces them over the amax group and rolls
 *               the histories once per iteration (Transformer Engine's
 *               amax_and_scale_update, transcribed in fp8_update_meta);
 *   tensorwise  each tensor's own amax (found by the quantize op, or under
 *               tensor and context parallelism reduced over them on the
 *               host, so every layout quantizes as one rank does);
 *   blockwise   1x128 blocks (X, dY) and 128x128 blocks (W), power-of-two
 *               scales, found by the quantize op itself;
 *   mxfp8       1x32 blocks with E8M0 scales, likewise.
 *
 * Invariants:
 *   1. A slot's delayed scales change only in gpt_fp8_update(), so every
 *      micro-batch of an iteration, a recomputed forward and the backward
 *      quantize with the same scales (the history holds the max of what
 *      they recorded).
 *   2. Every rank of the amax group holds the same histories and scales
 *      after an update; a checkpoint stores one copy (with
 *      --tp-only-amax-red the data-parallel replicas differ, and a resume
 *      gives them all the first one's).
 *   3. A slot exists for every FP8 linear weight this rank holds and only
 *      for those: m->fp8->slot[param] >= 0. Under the delayed recipe each
 *      slot has a meta, and every rank of a pipeline stage lists the same
 *      metas in the same order (the experts of other ranks too).
 *   4. Evaluation quantizes with the current scales and records nothing,
 *      so between updates the device's amax entries hold training's only.
 *
 * The tensorwise amax of a routed expert goes over its expert-TP group
 * only (reduce_amax): ranks that route other tokens skip experts without
 * rows and would not meet in the collective.
 */
#include "model/gpt_int.h"

#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"
#include "ckpt/ckpt.h"
#include "kernels/fp8.h"

enum { ROLE_X, ROLE_W, ROLE_DY, NROLES };
enum { CAST_CHUNK = 1 << 20 }; /* --fp8-param-gather: values a cast rounds at a time (rounded()) */

struct gpt_fp8 {
	struct gpt_fp8_config cfg;
	int nslots;
	int *slot;        /* [reg.n] a weight's slot, -1: not FP8 */
	int *param;       /* [nslots] the slot's weight */
	/* delayed: the metas, in one order every rank of the pipeline stage
	 * knows (list_metas), so that the amax reductions line up: each
	 * slot's, and the experts of other expert-parallel ranks by global
	 * number, which this rank never fills */
	int nmeta;
	int *meta;        /* [nslots] a slot's meta */
	char (*mname)[PARAM_NAME_MAX]; /* [nmeta] the meta's weight, by its checkpoint name */
	float *hist;      /* delayed: [nslots][NROLES][history]; [0] the last update's reduced amax, 0 after it */
	float *scale;     /* delayed: [nslots][NROLES] */
	float *rec;       /* delayed, backend: [nslots][NROLES] this iteration's amaxes, raised by the
			   * quantize op at every use and read once per iteration */
	float *dev_amax;  /* backend: one float fp8_amax writes into (tensorwise) */
	/* --fp8-param-gather: each slot's weight kept as codes in the store
	 * (m->soff) with one scale, its inverse here; the initial (or loaded)
	 * values of those weights as bf16 words on the host until the
	 * optimizer has taken them as its main weights */
	float *wsinv;     /* backend: each slot's scale inverses, slot s's grid at wsoff[s] (one, or the
			   * blockwise recipe's 128x128 blocks row-major) */
	float *wsinv_h;   /* per-tensor recipes: [nslots] the same, on the host */
	size_t *wsoff;    /* [nslots + 1] */
	float *wamax;     /* blockwise, tensorwise: backend [wsoff[nslots]] the amaxes a cast finds (the
			   * blocks', or one a weight) */
	uint16_t *init16; /* host [reg.total] (only the stored weights' elements), NULL once dropped */
	int *byoff;       /* [reg.n] the tensors in the order of their elements (and of the store) */
	bool init_dropped; /* gpt_drop_initial_weights was called */
	bool recording;   /* a training pass: the delayed recipe records its amaxes (not in evaluation) */
	/* backend scratch, grown on demand: two operands' codes and scales, a
	 * weight widened from 16-bit words, ones for the bias gradient */
	uint8_t *qa, *qb;
	float *sa, *sb, *wf, *ones;
	size_t qa_n, qb_n, sa_n, sb_n, wf_n, ones_n;
};

const char *gpt_fp8_recipe_name(enum gpt_fp8_recipe r)
{
	static const char *names[] = { "delayed", "tensorwise", "blockwise", "mxfp8" };
	return names[r];
}

static void reserve(struct gpt_model *m, struct gpt_fp8 *f);
static void list_metas(struct gpt_model *m, struct gpt_fp8 *f);

/* ---- slots ---- */

static bool layer_in_bf16(const struct gpt_fp8_config *c, int L, int l)
{
	return l < c->bf16_start || l >= L - c->bf16_end;
}

/* Weight w of layer l (l >= L: a multi-token-prediction depth's layer,
 * registered under MTP's names), or with l < 0 of a depth itself (fields
 * of a layer's kind it does not have, and of layers on other ranks, hold
 * other indices: only a 2-D tensor named after its module counts). */
static void add_slot(struct gpt_model *m, struct gpt_fp8 *f, int l, int w)
{
	char prefix[48];
	if (w < 0 || w >= m->reg.n || f->slot[w] >= 0)
		return;
	const struct param *p = &m->reg.p[w];
	int n = l < 0	      ? snprintf(prefix, sizeof(prefix), "mtp.layers.")
		: l >= m->c.L ? snprintf(prefix, sizeof(prefix), "mtp.layers.%d.transformer_layer.", l - m->c.L)
			      : snprintf(prefix, sizeof(prefix), "decoder.layers.%d.", l);
	if (p->ndim != 2 || strncmp(p->name, prefix, (size_t)n))
		return;
	f->slot[w] = f->nslots;
	f->param = xrealloc(f->param, (size_t)(f->nslots + 1) * sizeof(*f->param));
	f->param[f->nslots++] = w;
}

static bool has_slot(const struct gpt_model *m, const struct gpt_fp8 *f, int w)
{
	return w >= 0 && w < m->reg.n && f->slot[w] >= 0;
}

static void add_meta(struct gpt_model *m, struct gpt_fp8 *f, const char *name, int w)
{
	f->mname = xrealloc(f->mname, (size_t)(f->nmeta + 1) * sizeof(*f->mname));
	snprintf(f->mname[f->nmeta], sizeof(f->mname[0]), "%s", name);
	gpt_mtp_layer_name(&m->c, f->mname[f->nmeta], sizeof(f->mname[0]));
	if (has_slot(m, f, w))
		f->meta[f->slot[w]] = f->nmeta;
	f->nmeta++;
}

/* The delayed recipe's metas: every FP8 weight of the stage's layers in
 * layer order, a MoE layer's experts by global number whether this rank
 * holds them or not, then the MTP depths' eh_proj; every slot gets its
 * meta. */
static void list_metas(struct gpt_model *m, struct gpt_fp8 *f)
{
	f->meta = xmalloc((size_t)(f->nslots + 1) * sizeof(*f->meta));
	for (int s = 0; s < f->nslots; s++)
		f->meta[s] = -1;
	for (int l = 0; l < gpt_num_layers_all(m); l++) {
		const struct gpt_layer_params *p = &m->lp[l];
		int ws[] = { p->qkv_w, p->proj_w, p->mq_w, p->mqd_w, p->mkvd_w, p->mkvu_w, p->fc1_w, p->fc2_w,
			     p->sfc1_w, p->sfc2_w };
		for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++)
			if (has_slot(m, f, ws[i]) && f->meta[f->slot[ws[i]]] < 0)
				add_meta(m, f, m->reg.p[ws[i]].name, ws[i]);
		bool fp8 = false; /* the layer is FP8 where any of its dense weights is */
		for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++)
			fp8 |= has_slot(m, f, ws[i]);
		for (int e = 0; fp8 && p->efc1_w && e < m->c.E; e++)
			for (int fc = 1; fc <= 2; fc++) {
				char name[PARAM_NAME_MAX];
				gpt_expert_param_name(name, sizeof(name), l, e, fc);
				add_meta(m, f, name, fc == 1 ? p->efc1_w[e] : p->efc2_w[e]);
			}
	}
	for (int k = 0; m->mtp && k < m->c.mtp; k++)
		if (has_slot(m, f, m->mtp[k].eh_w))
			add_meta(m, f, m->reg.p[m->mtp[k].eh_w].name, m->mtp[k].eh_w);
	for (int s = 0; s < f->nslots; s++)
		if (f->meta[s] < 0)
			BUG("FP8 slot %d ('%s') has no meta", s, m->reg.p[f->param[s]].name);
}

int gpt_fp8_init(struct gpt_model *m, const struct gpt_fp8_config *cfg)
{
	if (!cfg || !cfg->on)
		return 0;
	if (m->precision != GPT_BF16)
		return error("--fp8-format needs --bf16: FP8 GEMMs give bf16 outputs to a bf16 model");
	struct gpt_fp8 *f = xcalloc(1, sizeof(*f));
	f->cfg = *cfg;
	f->slot = xmalloc((size_t)(m->reg.n ? m->reg.n : 1) * sizeof(*f->slot));
	for (int i = 0; i < m->reg.n; i++)
		f->slot[i] = -1;
	int L = m->c.L;
	for (int l = 0; l < gpt_num_layers_all(m); l++) {
		const struct gpt_layer_params *p = &m->lp[l];
		/* the multi-token-prediction depths' layers run in Megatron's
		 * global FP8 context: --first-last-layers-bf16 does not reach them */
		if (l < L && layer_in_bf16(cfg, L, l))
			continue;
		int ws[] = { p->qkv_w, p->proj_w, p->mq_w, p->mqd_w, p->mkvd_w, p->mkvu_w, p->fc1_w, p->fc2_w,
			     p->sfc1_w, p->sfc2_w };
		for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++)
			add_slot(m, f, l, ws[i]);
		for (int e = 0; p->efc1_w && e < m->c.E; e++) {
			add_slot(m, f, l, p->efc1_w[e]);
			add_slot(m, f, l, p->efc2_w[e]);
		}
	}
	for (int k = 0; m->mtp && k < m->c.mtp; k++) /* eh_proj: a TE linear in that context too */
		add_slot(m, f, -1, m->mtp[k].eh_w);
	if (cfg->recipe == GPT_FP8_DELAYED) {
		list_metas(m, f);
		size_t n = (size_t)f->nmeta * NROLES;
		f->hist = xcalloc(n * (size_t)cfg->history + 1, sizeof(float));
		f->scale = xmalloc((n + 1) * sizeof(float));
		for (size_t i = 0; i < n; i++)
			f->scale[i] = 1.0f; /* Transformer Engine's initial scale */
	}
	m->fp8 = f;
	return 0;
}

/* blocks of t's scale grid */
static size_t fp8_grid(const struct kops_fp8_tensor *t)
{
	return (size_t)((t->rows + t->br - 1) / t->br) * (size_t)((t->cols + t->bc - 1) / t->bc);
}

/* --fp8-param-gather: slot s's weight w [OC, IC] as stored: its codes in
 * the store, its scale inverses (one, or 128x128 blocks under the
 * blockwise recipe) at wsinv + wsoff[s] (wsinv NULL: sinv NULL) */
static void stored_weight(struct gpt_model *m, struct kops_fp8_tensor *W, int w, int s)
{
	struct gpt_fp8 *f = m->fp8;
	const struct param *p = &m->reg.p[w];
	bool blocks = f->cfg.recipe == GPT_FP8_BLOCKWISE;
	*W = (struct kops_fp8_tensor){ .q = (uint8_t *)m->w16 + m->soff[w],
				       .sinv = f->wsinv ? f->wsinv + f->wsoff[s] : NULL,
				       .rows = (int)p->local_shape[0], .cols = (int)p->local_shape[1],
				       .fmt = KOPS_E4M3 };
	W->br = blocks ? 128 : W->rows;
	W->bc = blocks ? 128 : W->cols;
}

void gpt_fp8_alloc(struct gpt_model *m)
{
	struct gpt_fp8 *f = m->fp8;
	if (!f)
		return;
	if (f->cfg.recipe == GPT_FP8_DELAYED)
		f->rec = gpt_take(m, (size_t)f->nmeta * NROLES + 1); /* zero-filled */
	f->dev_amax = gpt_take(m, 2);
	if (m->soff) {
		f->wsoff = xmalloc(((size_t)f->nslots + 1) * sizeof(size_t));
		f->wsoff[0] = 0;
		for (int s = 0; s < f->nslots; s++) {
			struct kops_fp8_tensor W;
			stored_weight(m, &W, f->param[s], s);
			f->wsoff[s + 1] = f->wsoff[s] + fp8_grid(&W);
		}
		f->wsinv = gpt_take(m, f->wsoff[f->nslots] + 1);
		f->wsinv_h = xcalloc((size_t)f->nslots + 1, sizeof(float));
		/* the amaxes a cast finds: blockwise each slot's blocks, tensorwise one a slot */
		if (f->cfg.recipe == GPT_FP8_BLOCKWISE || f->cfg.recipe == GPT_FP8_TENSORWISE)
			f->wamax = gpt_take(m, f->wsoff[f->nslots] + 1);
	}
	reserve(m, f);
}

void gpt_fp8_free(struct gpt_model *m)
{
	struct gpt_fp8 *f = m->fp8;
	if (!f)
		return;
	mem_free(m->mem, f->qa, f->qa_n);
	mem_free(m->mem, f->qb, f->qb_n);
	mem_free(m->mem, f->sa, f->sa_n * sizeof(float));
	mem_free(m->mem, f->sb, f->sb_n * sizeof(float));
	mem_free(m->mem, f->wf, f->wf_n * sizeof(float));
	mem_free(m->mem, f->ones, f->ones_n * sizeof(float));
	free(f->slot);
	free(f->param);
	free(f->wsinv_h);
	free(f->wsoff);
	free(f->init16);
	free(f->byoff);
	free(f->hist);
	free(f->scale);
	free(f->meta);
	free(f->mname);
	free(f);
	m->fp8 = NULL;
}

void gpt_fp8_mem(const struct gpt_model *m, size_t *dev, size_t *host)
{
	const struct gpt_fp8 *f = m->fp8;
	*dev = *host = 0;
	if (!f)
		return;
	*dev = f->qa_n + f->qb_n + (f->sa_n + f->sb_n + f->wf_n + f->ones_n + 1) * sizeof(float);
	if (f->cfg.recipe == GPT_FP8_DELAYED)
		*host = (size_t)f->nmeta * NROLES * ((size_t)f->cfg.history + 1) * sizeof(float);
}

const struct gpt_fp8_config *gpt_fp8_config(const struct gpt_model *m)
{
	return m->fp8 ? &m->fp8->cfg : NULL;
}

bool gpt_fp8_layer(const struct gpt_model *m, int l)
{
	const struct gpt_layer_params *p = &m->lp[l];
	int ws[] = { p->qkv_w, p->proj_w, p->mq_w, p->fc1_w, p->sfc1_w };
	for (size_t i = 0; i < sizeof(ws) / sizeof(ws[0]); i++)
		if (gpt_fp8_slot(m, ws[i]) >= 0)
			return true;
	return false;
}

void gpt_fp8_training(struct gpt_model *m, bool train)
{
	if (m->fp8)
		m->fp8->recording = train;
}

int gpt_fp8_slot(const struct gpt_model *m, int w)
{
	return m->fp8 && w >= 0 ? m->fp8->slot[w] : -1;
}

/* backend scratch of at least n elements of size es, from the model's pool
 * (so train's memory lines and report_memory's plan count it) */
static void *grow(struct gpt_model *m, void **buf, size_t *have, size_t n, size_t es)
{
	if (n > *have) {
		if (*buf)
			mem_free(m->mem, *buf, *have * es);
		*have = n;
		*buf = mem_alloc(m->mem, n * es);
	}
	return *buf;
}

/* The scratch a dense micro-batch needs, taken at set-up: the A operand
 * (X, dY or dY^T: N rows of the widest side), the B operand (W, W^T or X^T),
 * their scales (at most one per value / 32 plus one per row), and a
 * widened weight on a table that hands the model 16-bit words. Expert
 * layers with more rows than a dense micro-batch grow it at their first
 * use. */
static void reserve(struct gpt_model *m, struct gpt_fp8 *f)
{
	size_t N = (size_t)m->B * (size_t)m->lc.S, side = 0, inw = 0, most = 0;
	for (int i = 0; i < f->nslots; i++) {
		const struct param *p = &m->reg.p[f->param[i]];
		size_t oc = (size_t)p->local_shape[0], ic = (size_t)p->local_shape[1];
		side = oc > side ? oc : side;
		side = ic > side ? ic : side;
		inw = ic > inw ? ic : inw;
		most = p->numel > most ? p->numel : most;
	}
	if (!f->nslots)
		return;
	size_t qa = N * side, qb = most > N * inw ? most : N * inw;
	grow(m, (void **)&f->qa, &f->qa_n, qa, 1);
	grow(m, (void **)&f->qb, &f->qb_n, qb, 1);
	grow(m, (void **)&f->sa, &f->sa_n, qa / 32 + N + side, sizeof(float));
	grow(m, (void **)&f->sb, &f->sb_n, qb / 32 + N + side, sizeof(float));
	if (m->soff) /* the cast's bf16-rounded chunks (the layers read codes, never a widened weight) */
		grow(m, (void **)&f->wf, &f->wf_n, most < CAST_CHUNK ? most : CAST_CHUNK, sizeof(float));
	else if (m->direct16)
		grow(m, (void **)&f->wf, &f->wf_n, most, sizeof(float));
}

/* ---- scales ---- */

static enum kops_fp8 role_fmt(const struct gpt_fp8 *f, int role)
{
	return role == ROLE_DY && f->cfg.hybrid ? KOPS_E5M2 : KOPS_E4M3;
}

/* max over the groups a tensorwise amax is reduced over: tensor and
 * context parallelism (the ranks that hold parts of what one rank holds).
 * A routed expert's goes over its expert-tensor-parallel group alone
 * (the ranks holding its shards, which run the same gathered rows): the
 * CP and EP ranks route other tokens, an expert without rows is skipped,
 * and those ranks would not meet in the same collectives. */
static float reduce_amax(struct gpt_model *m, float amax, bool expert)
{
	struct dist_group *tp = expert ? m->par.etp : m->par.tp;
	if (tp)
		dist_allreduce_max_f32(tp, &amax, 1);
	if (m->par.cp && !expert)
		dist_allreduce_max_f32(m->par.cp, &amax, 1);
	return amax;
}

/* Quantize x (rows x cols as the GEMM reads it; transpose: x is cols x
 * rows) for slot s in role `role` into t, with the buffers of side b (0: A,
 * 1: B). seen: NULL, or a tensor quantized twice (dY in the backward):
 * its tensorwise scale under TP/CP, 0 until found, so the amax and its
 * reduction over the ranks are done once. */
static void quantize(struct gpt_model *m, struct kops_fp8_tensor *t, int side, const float *x, int rows, int cols,
		     bool transpose, int s, int role, float *seen)
{
	struct gpt_fp8 *f = m->fp8;
	const struct kops *k = m->k;
	size_t n = (size_t)rows * cols;
	struct kops_fp8_quant how = { .transpose = transpose };
	t->rows = rows;
	t->cols = cols;
	t->fmt = role_fmt(f, role);
	switch (f->cfg.recipe) {
	case GPT_FP8_DELAYED:
		t->br = rows;
		t->bc = cols;
		how.how = KOPS_FP8_GIVEN;
		break;
	case GPT_FP8_TENSORWISE:
		t->br = rows;
		t->bc = cols;
		/* alone, the op finds the scale on the device (the TENSOR rule);
		 * with ranks to agree with, the amax goes through the host for
		 * their max and the same rule */
		how.how = m->par.tp || m->par.cp || (m->par.etp && (m->reg.p[f->param[s]].flags & PARAM_EXPERT))
				  ? KOPS_FP8_GIVEN
				  : KOPS_FP8_TENSOR;
		break;
	case GPT_FP8_BLOCKWISE:
		t->br = role == ROLE_W ? 128 : 1;
		t->bc = 128;
		how.how = KOPS_FP8_AMAX;
		how.pow2 = true;
		break;
	case GPT_FP8_MXFP8:
		t->br = 1;
		t->bc = 32;
		how.how = KOPS_FP8_MX;
		break;
	}
	size_t nb = (size_t)((rows + t->br - 1) / t->br) * (size_t)((cols + t->bc - 1) / t->bc);
	if (side == 0) {
		t->q = grow(m, (void **)&f->qa, &f->qa_n, n, 1);
		t->sinv = grow(m, (void **)&f->sa, &f->sa_n, nb, sizeof(float));
	} else {
		t->q = grow(m, (void **)&f->qb, &f->qb_n, n, 1);
		t->sinv = grow(m, (void **)&f->sb, &f->sb_n, nb, sizeof(float));
	}
	float *rec = NULL;
	if (f->cfg.recipe == GPT_FP8_DELAYED) {
		size_t mi = (size_t)f->meta[s] * NROLES + (size_t)role;
		how.scale = f->scale[mi];
		rec = f->recording ? f->rec + mi : NULL;
	} else if (how.how == KOPS_FP8_GIVEN && seen && *seen > 0) { /* tensorwise: found already */
		how.scale = *seen;
	} else if (how.how == KOPS_FP8_GIVEN) { /* tensorwise over TP or CP */
		float amax;
		k->fp8_amax(f->dev_amax, x, n);
		k->to_host(&amax, f->dev_amax, sizeof(amax));
		amax = reduce_amax(m, amax, m->reg.p[f->param[s]].flags & PARAM_EXPERT);
		how.scale = fp8_scale_from_amax(amax, fp8_max(t->fmt), false, FP8_F32_MAX); /* as KOPS_FP8_TENSOR */
		if (seen)
			*seen = how.scale;
	}
	k->fp8_quantize(t, x, &how, rec);
}

static const float *weight_f32(struct gpt_model *m, int w);

/* The weight of slot s as the GEMM's B operand, W [OC, IC] or with
 * transpose W^T [IC, OC] (the dgrad's): quantized from its bf16 values
 * now, or with --fp8-param-gather its stored codes (transposed into the B
 * scratch: per-tensor codes transpose exactly). */
static void weight_operand(struct gpt_model *m, struct kops_fp8_tensor *B, int w, int s, int IC, int OC,
			   bool transpose)
{
	struct gpt_fp8 *f = m->fp8;
	if (!m->soff) {
		quantize(m, B, 1, weight_f32(m, w), transpose ? IC : OC, transpose ? OC : IC, transpose, s, ROLE_W,
			 NULL);
		return;
	}
	struct kops_fp8_tensor W;
	stored_weight(m, &W, w, s);
	if (W.rows != OC || W.cols != IC)
		BUG("'%s' stored as %d x %d, used as %d x %d", m->reg.p[w].name, W.rows, W.cols, OC, IC);
	if (!transpose) {
		*B = W;
		return;
	}
	*B = (struct kops_fp8_tensor){ .q = grow(m, (void **)&f->qb, &f->qb_n, (size_t)OC * IC, 1),
				       .sinv = grow(m, (void **)&f->sb, &f->sb_n, fp8_grid(&W), sizeof(float)),
				       .rows = IC, .cols = OC, .br = W.bc, .bc = W.br, .fmt = KOPS_E4M3 };
	m->k->fp8_transpose(B, &W);
}

/* the weight as fp32 values (the W view, or widened from the words) */
static const float *weight_f32(struct gpt_model *m, int w)
{
	if (!m->direct16)
		return gpt_param(m, w, GPT_VIEW_W);
	struct gpt_fp8 *f = m->fp8;
	size_t n = m->reg.p[w].numel;
	float *wf = grow(m, (void **)&f->wf, &f->wf_n, n, sizeof(float));
	m->k->widen(wf, gpt_param16(m, w), n, gpt_half_kind(m));
	return wf;
}

void fp8_linear_fwd(struct gpt_model *m, float *out, const float *inp, int w, int b, int N, int IC, int OC)
{
	int s = m->fp8->slot[w];
	struct kops_fp8_tensor A, B;
	const float *bias = gpt_param(m, b, GPT_VIEW_B);
	quantize(m, &A, 0, inp, N, IC, false, s, ROLE_X, NULL);
	weight_operand(m, &B, w, s, IC, OC, false);
	m->k->fp8_gemm(out, &A, &B, bias, false);
	round_half(m, out, (size_t)N * OC);
}

void fp8_linear_bwd(struct gpt_model *m, float *dinp, const float *dout, const float *inp, int w, int b, int N,
		    int IC, int OC)
{
	struct gpt_fp8 *f = m->fp8;
	const struct kops *k = m->k;
	int s = f->slot[w];
	struct kops_fp8_tensor A, B;
	float *dw = gpt_grad(m, w), *db = gpt_grad(m, b);
	float dy_scale = 0; /* dY's tensorwise scale, for both of its quantizations */
	if (dinp) {
		quantize(m, &A, 0, dout, N, OC, false, s, ROLE_DY, &dy_scale);
		weight_operand(m, &B, w, s, IC, OC, true);
		k->fp8_gemm(dinp, &A, &B, NULL, false);
		round_half(m, dinp, (size_t)N * IC);
	}
	if (dw && f->cfg.wgrad) {
		quantize(m, &A, 0, dout, OC, N, true, s, ROLE_DY, &dy_scale);
		quantize(m, &B, 1, inp, IC, N, true, s, ROLE_X, NULL);
		k->fp8_gemm(dw, &A, &B, NULL, true);
	} else if (dw) { /* --no-fp8-wgrad: the bf16 weight gradient (no input gradient: the weight is not
			  * read, and with --fp8-param-gather there are no 16-bit words of it) */
		if (m->direct16)
			k->linear_backward_w16(NULL, dw, NULL, dout, inp, m->soff ? NULL : gpt_param16(m, w), N, IC,
					       OC, gpt_half_kind(m));
		else
			k->linear_backward(NULL, dw, NULL, dout, inp, m->soff ? NULL : gpt_param(m, w, GPT_VIEW_W), N,
					   IC, OC);
	}
	if (db) { /* column sums of dY: dbias[OC, 1] += dY^T . ones[N, 1] (a GEMM with IC = 1; the
		   * weight argument is never read, since no input gradient is asked) */
		if ((size_t)N > f->ones_n) {
			float *ones = xmalloc((size_t)N * sizeof(float));
			for (int i = 0; i < N; i++)
				ones[i] = 1.0f;
			grow(m, (void **)&f->ones, &f->ones_n, (size_t)N, sizeof(float));
			k->to_device(f->ones, ones, (size_t)N * sizeof(float));
			free(ones);
		}
		k->linear_backward(NULL, db, NULL, dout, f->ones, f->ones, N, 1, OC);
	}
}

/* ---- FP8 weights (--fp8-param-gather; docs/fp8.md, "FP8 weights") ----
 * Megatron's FP8 parameters: an FP8 slot's weight is kept only as E4M3
 * codes with one scale (1 byte a value in the model's store, m->soff),
 * cast from the distributed optimizer's fp32 main weights shard by shard
 * after each step (Transformer Engine's cast_master_weights_to_fp8) and
 * all-gathered as bytes. The other tensors stay 16-bit words.
 *
 * Invariants:
 *   5. Every rank holding a piece of a stored weight casts its piece with
 *      the same scales: delayed, the meta's (identical on every rank of
 *      the amax group, so --tp-only-amax-red is refused); tensorwise, from
 *      the amax of the whole weight, the shards' amaxes reduced over the
 *      optimizer's group and then over TP (expert TP for routed experts);
 *      blockwise, each block's from its amax, the shards' partial block
 *      amaxes reduced over the optimizer's group (cast_blocks).
 *   6. The delayed recipe records the weight's amax when it casts it (the
 *      layers no longer quantize W), into the iteration's entries the next
 *      gpt_fp8_update() folds in.
 *   7. Until the optimizer has taken its main weights (gpt_main_values),
 *      the stored weights' values wait on the host as bf16 words
 *      (init16): the initial or loaded ones, as Transformer Engine's
 *      preserve_high_precision_init_val keeps them. */

static size_t align16(size_t n)
{
	return (n + 15) & ~(size_t)15;
}

struct by_offset {
	size_t offset, numel;
	int idx;
};

static int cmp_offset(const void *a, const void *b)
{
	const struct by_offset *x = a, *y = b;
	if (x->offset != y->offset)
		return x->offset < y->offset ? -1 : 1;
	if (!x->numel != !y->numel) /* an empty tensor before the one starting where it sits */
		return x->numel ? 1 : -1;
	return x->idx - y->idx;
}

/* The store holds the tensors in the order of their elements (the
 * experts' tensors, registered with their layers, sit at the end when
 * they are apart), so that a range of elements is a range of bytes. */
bool gpt_fp8_store_layout(struct gpt_model *m)
{
	struct gpt_fp8 *f = m->fp8;
	if (!f || !f->cfg.param_gather)
		return false;
	if (m->shards.level >= 2)
		BUG("FP8 weights with Megatron-FSDP level %d", m->shards.level);
	const struct param *p = m->reg.p;
	int n = m->reg.n;
	struct by_offset *o = xmalloc((size_t)(n + 1) * sizeof(*o));
	for (int i = 0; i < n; i++)
		o[i] = (struct by_offset){ p[i].offset, p[i].numel, i };
	for (int i = 0; i < n; i++)
		if (f->slot[i] >= 0 && (p[i].local_shape[0] > INT_MAX || p[i].local_shape[1] > INT_MAX ||
					p[i].numel > INT_MAX))
			BUG("'%s': %zu values, more than an FP8 op's int sizes", p[i].name, p[i].numel);
	qsort(o, (size_t)n, sizeof(*o), cmp_offset);
	m->soff = xmalloc((size_t)(n + 1) * sizeof(size_t));
	f->byoff = xmalloc((size_t)(n + 1) * sizeof(int));
	size_t at = 0, next = 0;
	for (int j = 0; j < n; j++) {
		int i = o[j].idx;
		if (p[i].offset != next)
			BUG("'%s' at element %zu, expected %zu: the registry has a gap", p[i].name, p[i].offset, next);
		next = p[i].offset + p[i].numel;
		f->byoff[j] = i;
		m->soff[i] = at = align16(at);
		at += p[i].numel * (f->slot[i] >= 0 ? 1 : sizeof(uint16_t));
	}
	m->soff[n] = align16(at ? at : 1);
	free(o);
	return true;
}

bool gpt_fp8_stored(const struct gpt_model *m, int idx)
{
	return m->soff && idx >= 0 && m->fp8->slot[idx] >= 0;
}

size_t gpt_store_at(const struct gpt_model *m, size_t e)
{
	const struct param *p = m->reg.p;
	const int *by = m->fp8 ? m->fp8->byoff : NULL, n = m->reg.n;
	int lo = 0, hi = n; /* the last tensor starting at or before e, in element order: in [lo, hi) */
	if (!m->soff)
		return e * (m->w16 ? sizeof(uint16_t) : sizeof(float));
	if (e >= m->reg.total)
		return m->soff[n];
	while (hi - lo > 1) {
		int mid = lo + (hi - lo) / 2;
		if (p[by[mid]].offset <= e)
			lo = mid;
		else
			hi = mid;
	}
	int i = by[lo];
	if (e >= p[i].offset + p[i].numel) /* past an empty tensor: the next one's start */
		return lo + 1 < n ? m->soff[by[lo + 1]] : m->soff[n];
	return m->soff[i] + (e - p[i].offset) * (m->fp8->slot[i] >= 0 ? 1 : sizeof(uint16_t));
}

void gpt_fp8_keep_initial(struct gpt_model *m, int idx, const float *host)
{
	struct gpt_fp8 *f = m->fp8;
	const struct param *p = &m->reg.p[idx];
	if (f->init_dropped) /* invariant 7: nothing would read them */
		BUG("'%s' set after the optimizer took its main weights", p->name);
	if (!f->init16)
		f->init16 = xcalloc(m->reg.total ? m->reg.total : 1, sizeof(uint16_t));
	kops_cpu()->narrow(f->init16 + p->offset, host, p->numel, gpt_half_kind(m));
}

void gpt_main_values(struct gpt_model *m, float *host)
{
	struct gpt_fp8 *f = m->fp8;
	if (!m->soff)
		BUG("gpt_main_values without a weight store");
	const struct kops *cpu = kops_cpu();
	uint16_t *words = xmalloc((m->reg.total ? m->reg.total : 1) * sizeof(uint16_t));
	for (int i = 0; i < m->reg.n; i++) {
		const struct param *p = &m->reg.p[i];
		if (gpt_fp8_stored(m, i) && !f->init16)
			BUG("'%s': no initial values kept for the main weights", p->name);
		if (gpt_fp8_stored(m, i))
			memcpy(words + p->offset, f->init16 + p->offset, p->numel * sizeof(uint16_t));
		else
			m->k->to_host(words + p->offset, gpt_words(m, i), p->numel * sizeof(uint16_t));
	}
	cpu->widen(host, words, m->reg.total, gpt_half_kind(m));
	free(words);
}

void gpt_drop_initial_weights(struct gpt_model *m)
{
	if (m->fp8) {
		free(m->fp8->init16);
		m->fp8->init16 = NULL;
		m->fp8->init_dropped = true;
	}
}

/* The elements [x, y) of tensor p in this rank's shard [lo, hi) (empty:
 * y <= x). */
static void shard_range(const struct param *p, const struct gpt_main_part *pt, size_t *x, size_t *y)
{
	size_t end = p->offset + p->numel;
	*x = p->offset > pt->lo ? p->offset : pt->lo;
	*y = end < pt->hi ? end : pt->hi;
}

/* The cast reads the main weights rounded to bf16, as Transformer Engine
 * casts master_weight.to(model dtype) (so the codes are those a bf16
 * weight quantized in the layer would have): a chunk of at most
 * CAST_CHUNK values at a time through the wf scratch. */

/* Tensor i's part of the shard, rounded, from element `done` of it: at
 * most CAST_CHUNK values into *len (0 when done is past its end). */
static const float *rounded(struct gpt_model *m, const struct gpt_main_part *pt, int i, size_t done, size_t *len)
{
	struct gpt_fp8 *f = m->fp8;
	const struct param *p = &m->reg.p[i];
	size_t x, y;
	shard_range(p, pt, &x, &y);
	size_t n = y > x ? y - x : 0;
	*len = done < n ? (n - done < CAST_CHUNK ? n - done : CAST_CHUNK) : 0;
	if (!*len)
		return NULL;
	float *wf = grow(m, (void **)&f->wf, &f->wf_n, *len, sizeof(float));
	m->k->round(wf, pt->main + (x - pt->lo) + done, *len, gpt_half_kind(m));
	return wf;
}

/* The first element of this rank's part of tensor i, counted in the tensor */
static size_t part_start(const struct gpt_main_part *pt, const struct param *p)
{
	return pt->lo > p->offset ? pt->lo - p->offset : 0;
}

/* The amaxes the cast reduces (tensorwise: one a weight; blockwise: the
 * blocks of each) in wamax[a, b): read back, the max over the part's group
 * and (tensorwise) of each weight over the ranks holding its other
 * slices, written back. */
static void reduce_cast_amax(struct gpt_model *m, const struct gpt_main_part *pt, const int *list, int nl, size_t a,
			     size_t b)
{
	struct gpt_fp8 *f = m->fp8;
	const struct kops *k = m->k;
	float *host = xmalloc((b - a + 1) * sizeof(float)), *part = xmalloc((b - a + 1) * sizeof(float));
	k->to_host(host, f->wamax + a, (b - a) * sizeof(float));
	if (pt->g && pt->g->size > 1)
		dist_allreduce_max_f32(pt->g, host, b - a);
	/* invariant 5: dense weights over TP, routed experts over expert TP
	 * (NULL without it: their TP peers hold other experts); every rank of
	 * either group lists the same weights in the same order */
	for (int expert = 0; f->cfg.recipe == GPT_FP8_TENSORWISE && expert < 2; expert++) {
		struct dist_group *g = expert ? m->par.etp : m->par.tp;
		size_t np = 0;
		for (int j = 0; j < nl; j++)
			if (!(m->reg.p[list[j]].flags & PARAM_EXPERT) == !expert)
				part[np++] = host[j];
		if (!g || g->size < 2 || !np)
			continue;
		dist_allreduce_max_f32(g, part, np);
		np = 0;
		for (int j = 0; j < nl; j++)
			if (!(m->reg.p[list[j]].flags & PARAM_EXPERT) == !expert)
				host[j] = part[np++];
	}
	k->to_device(f->wamax + a, host, (b - a) * sizeof(float));
	free(host);
	free(part);
}

/* The blockwise recipe's cast of the part's stored weights list[nl]:
 * each 128x128 block's amax over the whole (local) weight, the ranks'
 * partial ones raised on the device, then their max over the part's group
 * (each TP rank's weight is a tensor of its own, with blocks of its own,
 * as without --fp8-param-gather), then every block's scale and this
 * rank's codes (Transformer Engine's partial amax and partial cast). The
 * part's blocks are wamax[a, b), those of its first and last weight's
 * slots and the slots between. */
static void cast_blocks(struct gpt_model *m, const struct gpt_main_part *pt, const int *list, int nl)
{
	struct gpt_fp8 *f = m->fp8;
	const struct kops *k = m->k;
	size_t a = SIZE_MAX, b = 0;
	for (int j = 0; j < nl; j++) {
		int s = f->slot[list[j]];
		a = f->wsoff[s] < a ? f->wsoff[s] : a;
		b = f->wsoff[s + 1] > b ? f->wsoff[s + 1] : b;
	}
	if (!nl)
		return;
	k->zero(f->wamax + a, b - a);
	for (int pass = 0; pass < 2; pass++) { /* 0: the partial amaxes; 1: scales and codes */
		if (pass == 1)
			reduce_cast_amax(m, pt, list, nl, a, b);
		for (int j = 0; j < nl; j++) {
			int i = list[j], s = f->slot[i];
			const struct param *p = &m->reg.p[i];
			struct kops_fp8_tensor W;
			stored_weight(m, &W, i, s);
			size_t len, at = part_start(pt, p);
			const float *src = rounded(m, pt, i, 0, &len);
			if (pass == 1 && !len) /* nothing of the weight here: still every block's scale */
				k->fp8_quantize_blocks(&W, pt->main, 0, 0, f->wamax + f->wsoff[s], true);
			for (size_t done = 0; len; done += len, src = rounded(m, pt, i, done, &len)) {
				if (pass == 0)
					k->fp8_amax_blocks(f->wamax + f->wsoff[s], src, len, at + done, &W);
				else
					k->fp8_quantize_blocks(&W, src, len, at + done, f->wamax + f->wsoff[s], true);
			}
		}
	}
}

void gpt_copy_main_to_model(struct gpt_model *m, const struct gpt_main_part *pt)
{
	struct gpt_fp8 *f = m->fp8;
	const struct kops *k = m->k;
	if (!m->soff)
		BUG("gpt_copy_main_to_model without FP8 weights");
	int nl = 0, *list = xmalloc((size_t)(m->reg.n + 1) * sizeof(int));
	for (int i = 0; i < m->reg.n; i++) {
		const struct param *p = &m->reg.p[i];
		if (p->offset < pt->base || p->offset >= pt->end)
			continue;
		size_t x, y;
		shard_range(p, pt, &x, &y);
		if (gpt_fp8_stored(m, i))
			list[nl++] = i;
		else if (y > x) /* Megatron's copy: rounded to the model's words */
			k->narrow(gpt_words(m, i) + (x - p->offset), pt->main + (x - pt->lo), y - x, gpt_half_kind(m));
	}
	if (f->cfg.recipe == GPT_FP8_BLOCKWISE) {
		cast_blocks(m, pt, list, nl);
		free(list);
		return;
	}
	float *amax = xcalloc((size_t)nl + 1, sizeof(float));
	if (f->cfg.recipe == GPT_FP8_TENSORWISE && nl) { /* each weight's as a one-block tensor, raised */
		k->zero(f->wamax, (size_t)nl);
		for (int j = 0; j < nl; j++) {
			const struct param *p = &m->reg.p[list[j]];
			struct kops_fp8_tensor one = { .rows = 1, .cols = (int)p->numel, .br = 1, .bc = (int)p->numel };
			size_t len, at = part_start(pt, p);
			for (const float *src = rounded(m, pt, list[j], 0, &len); len;
			     at += len, src = rounded(m, pt, list[j], at - part_start(pt, p), &len))
				k->fp8_amax_blocks(f->wamax + j, src, len, at, &one);
		}
		reduce_cast_amax(m, pt, list, nl, 0, (size_t)nl);
		k->to_host(amax, f->wamax, (size_t)nl * sizeof(float));
	}
	for (int j = 0; j < nl; j++) {
		int i = list[j], s = f->slot[i];
		const struct param *p = &m->reg.p[i];
		struct kops_fp8_quant how = { .how = KOPS_FP8_GIVEN };
		float *rec = NULL;
		if (f->cfg.recipe == GPT_FP8_DELAYED) { /* invariant 6 */
			size_t mi = (size_t)f->meta[s] * NROLES + ROLE_W;
			how.scale = f->scale[mi];
			rec = f->rec + mi;
		} else {
			how.scale = fp8_scale_from_amax(amax[j], fp8_max(KOPS_E4M3), false, FP8_F32_MAX);
		}
		f->wsinv_h[s] = fp8_div(1.0f, how.scale);
		size_t len, done = 0, at = part_start(pt, p);
		for (const float *src = rounded(m, pt, i, 0, &len); len; done += len, src = rounded(m, pt, i, done, &len)) {
			struct kops_fp8_tensor t = { .q = (uint8_t *)m->w16 + m->soff[i] + at + done,
						     .sinv = f->dev_amax + 1, .rows = 1, .cols = (int)len, .br = 1,
						     .bc = (int)len, .fmt = KOPS_E4M3 };
			k->fp8_quantize(&t, src, &how, rec);
		}
	}
	if (f->nslots) /* every slot's: the other part's as its last cast left them */
		k->to_device(f->wsinv, f->wsinv_h, (size_t)f->nslots * sizeof(float));
	free(list);
	free(amax);
}

/* ---- the delayed recipe's update (Transformer Engine's
 * amax_and_scale_update, after the amax reduction) ---- */

/* One meta: h[len] with h[0] the reduced amax of the iteration; scale in
 * and out. */
void fp8_update_meta(float *h, int len, float *scale, bool amax_max, float scaled_max)
{
	float last = h[0], amax = 0;
	if (last != 0.0f) { /* a tensor unused since the last update keeps its history and scale */
		for (int i = 0; i < len; i++) {
			float a = i < len - 1 ? h[i + 1] : last;
			amax = fmaxf(amax, a);
			h[i] = i > 0 ? a : 0.0f;
		}
	}
	if (!amax_max)
		amax = last;
	float sc = isfinite(amax) && amax > 0 ? scaled_max / amax : *scale;
	if (isinf(sc))
		sc = FLT_MAX;
	*scale = sc;
}

void gpt_fp8_update(struct gpt_model *m, struct dist_group *dp)
{
	struct gpt_fp8 *f = m->fp8;
	if (!f || f->cfg.recipe != GPT_FP8_DELAYED)
		return;
	size_t n = (size_t)f->nmeta * NROLES, len = (size_t)f->cfg.history;
	float *cur = xmalloc((n + 1) * sizeof(float));
	/* the iteration's amaxes: one read, then the device's entries start over */
	m->k->to_host(cur, f->rec, n * sizeof(float));
	m->k->zero(f->rec, n);
	/* Megatron's amax reduction group: tensor, context and (without
	 * --tp-only-amax-red) data parallelism */
	struct dist_group *groups[3] = { m->par.tp, m->par.cp, f->cfg.tp_only_red ? NULL : dp };
	for (int g = 0; g < 3; g++)
		if (groups[g] && groups[g]->size > 1 && n)
			dist_allreduce_max_f32(groups[g], cur, n);
	for (size_t i = 0; i < n; i++) {
		int role = (int)(i % NROLES);
		float scaled_max = ldexpf(fp8_max(role_fmt(f, role)), -f->cfg.margin);
		f->hist[i * len] = cur[i];
		fp8_update_meta(f->hist + i * len, (int)len, &f->scale[i], f->cfg.amax_max, scaled_max);
	}
	free(cur);
}

/* ---- checkpoints: each slot's histories [NROLES, len] and scales [NROLES]
 * as "<module>._extra_state.fp8_amax_history" and ".fp8_scale" ---- */

int gpt_fp8_nstate(const struct gpt_model *m)
{
	return m->fp8 && m->fp8->cfg.recipe == GPT_FP8_DELAYED ? m->fp8->nmeta : 0;
}

void gpt_fp8_state_name(const struct gpt_model *m, int i, bool scale, char *out, size_t n)
{
	const char *w = m->fp8->mname[i]; /* already under its checkpoint name */
	size_t base = strlen(w);
	if (base > 7 && !strcmp(w + base - 7, ".weight"))
		base -= 7;
	snprintf(out, n, "%.*s._extra_state.%s", (int)base, w, scale ? "fp8_scale" : "fp8_amax_history");
}

float *gpt_fp8_state(struct gpt_model *m, int i, bool scale, int64_t shape[2])
{
	struct gpt_fp8 *f = m->fp8;
	shape[0] = NROLES;
	shape[1] = f->cfg.history;
	return scale ? f->scale + (size_t)i * NROLES : f->hist + (size_t)i * NROLES * (size_t)f->cfg.history;
}

/* The delayed recipe's state from a checkpoint: each slot's history and
 * scales where the checkpoint has them (a checkpoint of another history
 * length gives its newest entries; one without FP8 state, a bf16 run's or
 * another recipe's, leaves the fresh state: scales 1, histories 0). */
int gpt_fp8_load_state(struct gpt_model *m, struct ckpt_reader *r, int file)
{
	struct gpt_fp8 *f = m->fp8;
	int missing = 0;
	for (int i = 0; i < gpt_fp8_nstate(m); i++) {
		char hname[PARAM_NAME_MAX + 40], sname[PARAM_NAME_MAX + 40];
		gpt_fp8_state_name(m, i, false, hname, sizeof(hname));
		gpt_fp8_state_name(m, i, true, sname, sizeof(sname));
		int has = ckpt_has_tensor(r, file, hname);
		if (has < 0)
			return -1;
		if (!has) {
			missing++;
			continue;
		}
		enum ckpt_dtype dt;
		int nd;
		int64_t shape[CKPT_MAX_NDIM], want[2];
		float *h = gpt_fp8_state(m, i, false, want);
		if (ckpt_tensor_info(r, file, hname, &dt, &nd, shape) < 0)
			return -1;
		if (nd != 2 || shape[0] != NROLES || shape[1] < 1)
			return error("%s: %s has shape %dD, expected [%d, history]", ckpt_reader_dir(r), hname, nd,
				     NROLES);
		int64_t len = shape[1], mine = want[1];
		float *old = xmalloc((size_t)(NROLES * len) * sizeof(float));
		int64_t sshape[1] = { NROLES };
		if (ckpt_get_tensor(r, file, hname, CKPT_F32, 2, shape, old) < 0 ||
		    ckpt_get_tensor(r, file, sname, CKPT_F32, 1, sshape, f->scale + (size_t)i * NROLES) < 0) {
			free(old);
			return -1;
		}
		for (int role = 0; role < NROLES; role++) {
			float *dst = h + (size_t)role * (size_t)mine, *src = old + (size_t)role * (size_t)len;
			memset(dst, 0, (size_t)mine * sizeof(float));
			/* [0] accumulates, [len-1] is the newest: align the ends */
			for (int64_t j = 1; j < mine && j < len; j++)
				dst[mine - j] = src[len - j];
		}
		free(old);
	}
	if (missing && missing < gpt_fp8_nstate(m))
		return error("%s has the FP8 state of some layers and not of %d others", ckpt_reader_dir(r), missing);
	if (missing)
		info("%s has no delayed-scaling FP8 state: the FP8 scales start at 1", ckpt_reader_dir(r));
	return 0;
}
