/*
 * transformer_layer.c - one decoder layer (Megatron Core's
 * TransformerLayer): pre-norm residual blocks, bias-dropout-add after the
 * attention's linear_proj and after the MLP:
 *
 *   res1 = x    + dropout(attention(norm1(x)))       site 3l+1
 *   y    = res1 + dropout(mlp_or_moe(norm2(res1)))   site 3l+2
 *
 * (site 3l is the attention probabilities' dropout.) The layer is built
 * from its spec (layer_spec.h); the norms' outputs are kept per sequence
 * shard under SP and gathered to all rows for the column-parallel linears.
 * Forward and backward side by side; serving runs the same forward, with
 * the pass's key/value step. Selective recompute drops the activations of
 * the modules of --recompute-modules (the layers share their buffers) and
 * transformer_layer_recompute rebuilds them right before the backward.
 * A hybrid model's layers (layer_spec.h's kind: a Mamba layer, attention
 * only, MLP or MoE only) are one such block each: hybrid_layer_forward below.
 */
#include "model/gpt_int.h"

#include <stdlib.h>
#include <string.h>

void gpt_layer_spec(const struct gpt_config *c, int l, struct transformer_layer_spec *s)
{
	s->kind = c->hybrid ? (enum gpt_layer_kind)c->layer_kind[l] : GPT_LAYER_TRANSFORMER;
	s->norm = c->rmsnorm ? LAYER_RMSNORM : LAYER_NORM;
	s->norm_1p = c->norm_1p;
	s->qkv_bias = c->qkv_bias;
	s->qk_norm = c->qk_norm && !c->mla;
	s->mla = c->mla;
	s->mla_norm = c->mla && c->qk_norm;
	s->proj_bias = c->bias;
	s->rot = c->mla ? c->qk_pos : c->rope ? c->rot : 0;
	s->rot_interleaved = !c->mla && c->rope && c->rope_interleaved;
	s->window = gpt_layer_window(c, l);
	s->mlp = c->E > 0 && c->moe_layer[l] ? LAYER_MLP_MOE : LAYER_MLP_DENSE;
	s->swiglu = c->swiglu;
	s->gelu = c->gelu;
	s->fc_bias = c->bias;
	s->shared_expert = s->mlp == LAYER_MLP_MOE && c->shared_f > 0;
}

void transformer_layer_register(struct gpt_model *m, int l)
{
	struct gpt_layer_params *p = &m->lp[l];
	p->pfirst = m->reg.n;
	if (p->spec.kind == GPT_LAYER_MAMBA)
		mamba_register(m, l);
	if (p->spec.kind == GPT_LAYER_TRANSFORMER || p->spec.kind == GPT_LAYER_ATTENTION)
		attention_register(m, l);
	if ((p->spec.kind == GPT_LAYER_TRANSFORMER || p->spec.kind == GPT_LAYER_MLP) && p->spec.mlp == LAYER_MLP_MOE)
		moe_register(m, l);
	else if (p->spec.kind == GPT_LAYER_TRANSFORMER || p->spec.kind == GPT_LAYER_MLP)
		mlp_register(m, l);
	p->pend = m->reg.n;
}

/* sh's buffer when it has one (selective recompute shares it), else n new floats */
static float *take_or_share(struct gpt_model *m, float *shared, size_t n)
{
	return shared ? shared : gpt_take(m, n);
}

void transformer_layer_alloc_acts(struct gpt_model *m, struct gpt_layer_acts *A, const struct gpt_layer_acts *sh,
				  bool dense, bool moe)
{
	const struct gpt_config *c = &m->lc;
	const struct gpt_layer_acts none = { 0 };
	size_t BT = (size_t)m->B * c->S, h = c->h;
	size_t f1 = c->swiglu ? 2 * (size_t)c->f : (size_t)c->f;
	size_t BTl = (size_t)m->Nl; /* rows of this rank's sequence shard (all rows without SP) */
	bool lse = m->par.cp || m->flash || m->kv;
	sh = sh ? sh : &none;
	A->ln1 = take_or_share(m, sh->ln1, BTl * h); /* with SP the shard; backward gathers it again, as Megatron */
	A->ln1_mean = take_or_share(m, sh->ln1_mean, BTl);
	A->ln1_rstd = take_or_share(m, sh->ln1_rstd, BTl);
	A->q = take_or_share(m, sh->q, BT * c->a * c->k);
	A->kk = take_or_share(m, sh->kk, BT * c->g * c->k);
	A->v = take_or_share(m, sh->v, BT * c->g * c->k);
	if (c->mla) { /* the compressed query and key/value, before and after their norms */
		size_t ql = (size_t)c->q_lora, kvl = (size_t)c->kv_lora;
		bool ln = !c->rmsnorm;
		A->mla_qc = ql ? take_or_share(m, sh->mla_qc, BT * ql) : NULL;
		A->mla_qcn = ql && c->qk_norm ? take_or_share(m, sh->mla_qcn, BT * ql) : A->mla_qc;
		A->mla_qc_rstd = ql && c->qk_norm ? take_or_share(m, sh->mla_qc_rstd, BT) : NULL;
		A->mla_qc_mean = ql && c->qk_norm && ln ? take_or_share(m, sh->mla_qc_mean, BT) : NULL;
		A->mla_kvx = take_or_share(m, sh->mla_kvx, BT * kvl);
		A->mla_kvn = c->qk_norm ? take_or_share(m, sh->mla_kvn, BT * kvl) : A->mla_kvx;
		A->mla_kv_rstd = c->qk_norm ? take_or_share(m, sh->mla_kv_rstd, BT) : NULL;
		A->mla_kv_mean = c->qk_norm && ln ? take_or_share(m, sh->mla_kv_mean, BT) : NULL;
		/* the layer's own: what the up-projections are recomputed from */
		A->mla_kpos = gpt_rc(m, GPT_RC_MLA_UP_PROJ) ? gpt_take(m, BT * c->qk_pos) : NULL;
	}
	if (c->qk_norm && !c->mla) { /* the q/k norms' inputs and statistics: the layer's own, in fp32 */
		bool ln = !c->rmsnorm;
		A->qn = take_or_share(m, sh->qn, BT * c->a * c->k);
		A->kn = take_or_share(m, sh->kn, BT * c->g * c->k);
		A->qn_rstd = take_or_share(m, sh->qn_rstd, BT * c->a);
		A->kn_rstd = take_or_share(m, sh->kn_rstd, BT * c->g);
		A->qn_mean = ln ? take_or_share(m, sh->qn_mean, BT * c->a) : NULL;
		A->kn_mean = ln ? take_or_share(m, sh->kn_mean, BT * c->g) : NULL;
	}
	A->probs = lse ? NULL : take_or_share(m, sh->probs, (size_t)m->B * c->a * c->S * c->S);
	A->alse = lse ? gpt_take(m, (size_t)m->B * c->a * c->S) : NULL;
	A->atty = take_or_share(m, sh->atty, BT * c->a * c->k);
	A->res1 = take_or_share(m, sh->res1, BTl * h);
	A->ln2 = take_or_share(m, sh->ln2, BTl * h);
	A->ln2_mean = take_or_share(m, sh->ln2_mean, BTl);
	A->ln2_rstd = take_or_share(m, sh->ln2_rstd, BTl);
	A->fc1 = dense ? take_or_share(m, sh->fc1, BT * f1) : NULL;
	A->act = dense ? take_or_share(m, sh->act, BT * c->f) : NULL;
	A->moe = !moe ? NULL : sh->moe ? sh->moe : moe_alloc_acts(m);
}

/* The fields a stash may hold, with their sizes in values. */
#define STASH_FIELDS(X)                                                       \
	X(ln1, BTl * h)                                                       \
	X(q, BT * c->a * c->k) X(kk, BT * c->g * c->k) X(v, BT * c->g * c->k) \
	X(atty, BT * c->a * c->k) X(res1, BTl * h) X(ln2, BTl * h)            \
	X(fc1, BT * f1) X(act, BT * c->f)

void transformer_layer_alloc_work(struct gpt_model *m, struct gpt_layer_acts *W, bool dense)
{
	const struct gpt_config *c = &m->lc;
	size_t BT = (size_t)m->B * c->S, h = c->h, BTl = (size_t)m->Nl;
	size_t f1 = dense ? (c->swiglu ? 2 * (size_t)c->f : (size_t)c->f) : 0; /* a MoE layer's rows are its own */
	size_t f = dense ? (size_t)c->f : 0;
#define TAKE(fld, n) W->fld = gpt_take(m, n);
	STASH_FIELDS(TAKE)
#undef TAKE
	(void)f;
}

void transformer_layer_alloc_stash(struct gpt_model *m, const struct gpt_layer_acts *A, const struct gpt_layer_acts *W,
				   struct gpt_layer_stash *S)
{
	const struct gpt_config *c = &m->lc;
	size_t BT = (size_t)m->B * c->S, h = c->h, BTl = (size_t)m->Nl;
	size_t f1 = c->swiglu ? 2 * (size_t)c->f : (size_t)c->f;
	memset(S, 0, sizeof(*S));
#define TAKE(fld, n) S->fld = A->fld && A->fld == W->fld ? gpt_take_bytes(m, (n) * sizeof(uint16_t)) : NULL;
	STASH_FIELDS(TAKE)
#undef TAKE
}

void transformer_layer_stash(struct gpt_model *m, struct gpt_layer_acts *A, const struct gpt_layer_stash *S, bool save)
{
	const struct gpt_config *c = &m->lc;
	size_t BT = (size_t)m->B * c->S, h = c->h, BTl = (size_t)m->Nl;
	size_t f1 = c->swiglu ? 2 * (size_t)c->f : (size_t)c->f;
	enum kops_round kind = gpt_half_kind(m);
#define COPY(fld, n)                                      \
	if (S->fld && save)                               \
		m->k->narrow(S->fld, A->fld, n, kind);    \
	else if (S->fld)                                  \
		m->k->widen(A->fld, S->fld, n, kind);
	STASH_FIELDS(COPY)
#undef COPY
}

static struct gpt_layer_acts *layer_acts(const struct gpt_pass *P, int l)
{
	return &P->sl->acts[l - P->l0];
}

/*
 * A hybrid stack's other layers (Megatron's MambaLayer, and TransformerLayer
 * with only self-attention or only an MLP, dense or MoE): one pre-norm
 * residual block,
 *
 *   y = x + dropout(block(norm(x)))
 *
 * the Mamba mixer and attention on ln1 (dropout site 3l+1), the MLP on ln2
 * (site 3l+2), as in a transformer layer's halves.
 */
static void hybrid_layer_forward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A,
				 const float *x, float *y)
{
	const struct gpt_layer_params *p = &m->lp[l];
	float ph = P->train ? m->lc.hidden_dropout : 0;
	const float *out;
	if (p->spec.kind == GPT_LAYER_MLP) {
		norm_fwd(m, A->ln2, A->ln2_mean, A->ln2_rstd, x, p->ln2_w, p->ln2_b, P->Nl);
		const float *ln2 = seq_full(m, P, A->ln2);
		out = p->spec.mlp == LAYER_MLP_MOE ? moe_forward(m, P, l, A, ln2) : mlp_forward(m, P, l, A, ln2);
	} else {
		norm_fwd(m, A->ln1, A->ln1_mean, A->ln1_rstd, x, p->ln1_w, p->ln1_b, P->Nl);
		const float *ln1 = seq_full(m, P, A->ln1);
		if (p->spec.kind != GPT_LAYER_MAMBA)
			out = attention_forward(m, P, l, A, ln1);
		else /* serving: from each slot's recurrent state */
			out = P->kv ? mamba_cached_forward(m, P, l, A, ln1) : mamba_forward(m, P, l, A, ln1);
	}
	seq_dropout(m, P, y, x, out, ph, 3 * l + (p->spec.kind == GPT_LAYER_MLP ? 2 : 1));
	round_half(m, y, (size_t)P->Nl * m->lc.h);
}

static void hybrid_layer_backward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A,
				  const float *x, float *dres)
{
	const struct gpt_layer_params *p = &m->lp[l];
	size_t nhl = (size_t)P->Nl * m->lc.h;
	bool mlp = p->spec.kind == GPT_LAYER_MLP;
	const float *dout = row_output_grad(m, P, dres, m->lc.hidden_dropout, 3 * l + (mlp ? 2 : 1));
	if (mlp && p->spec.mlp == LAYER_MLP_MOE)
		moe_backward(m, P, l, A, seq_full(m, P, A->ln2), dout);
	else if (mlp)
		mlp_backward(m, P, l, A, seq_full(m, P, A->ln2), dout);
	else if (p->spec.kind == GPT_LAYER_MAMBA)
		mamba_backward(m, P, l, A, seq_full(m, P, A->ln1), dout);
	else
		attention_backward(m, P, l, A, dout);
	const float *dn = column_input_grad(m, P, m->s.dln);
	if (mlp)
		norm_bwd(m, m->s.dtmp, dn, x, p->ln2_w, p->ln2_b, A->ln2_mean, A->ln2_rstd, P->Nl);
	else
		norm_bwd(m, m->s.dtmp, dn, x, p->ln1_w, p->ln1_b, A->ln1_mean, A->ln1_rstd, P->Nl);
	m->k->add(dres, dres, m->s.dtmp, nhl);
	round_half(m, dres, nhl);
}

void transformer_layer_forward(struct gpt_model *m, const struct gpt_pass *P, int l, const float *x, float *y)
{
	const struct gpt_config *c = &m->lc;
	const struct gpt_layer_params *p = &m->lp[l];
	struct gpt_layer_acts *A = layer_acts(P, l);
	size_t nhl = (size_t)P->Nl * c->h;
	float ph = P->train ? c->hidden_dropout : 0;

	if (p->spec.kind != GPT_LAYER_TRANSFORMER) {
		hybrid_layer_forward(m, P, l, A, x, y);
		return;
	}
	norm_fwd(m, A->ln1, A->ln1_mean, A->ln1_rstd, x, p->ln1_w, p->ln1_b, P->Nl);
	const float *attn = attention_forward(m, P, l, A, seq_full(m, P, A->ln1));
	seq_dropout(m, P, A->res1, x, attn, ph, 3 * l + 1);
	round_half(m, A->res1, nhl); /* the residual stream is half precision too */
	norm_fwd(m, A->ln2, A->ln2_mean, A->ln2_rstd, A->res1, p->ln2_w, p->ln2_b, P->Nl);
	const float *ln2 = seq_full(m, P, A->ln2);
	const float *mlp = p->spec.mlp == LAYER_MLP_MOE ? moe_forward(m, P, l, A, ln2) : mlp_forward(m, P, l, A, ln2);
	seq_dropout(m, P, y, A->res1, mlp, ph, 3 * l + 2);
	round_half(m, y, nhl);
}

void transformer_layer_recompute(struct gpt_model *m, const struct gpt_pass *P, int l, const float *x)
{
	const struct gpt_config *c = &m->lc;
	const struct gpt_layer_params *p = &m->lp[l];
	struct gpt_layer_acts *A = layer_acts(P, l);
	unsigned rc = c->recompute == GPT_RECOMPUTE_SELECTIVE ? c->recompute_modules : 0;
	/* only s.dres, the gradient coming in, is live: nothing here touches it */
	if (rc & GPT_RC_LAYERNORM) {
		norm_fwd(m, A->ln1, A->ln1_mean, A->ln1_rstd, x, p->ln1_w, p->ln1_b, P->Nl);
		norm_fwd(m, A->ln2, A->ln2_mean, A->ln2_rstd, A->res1, p->ln2_w, p->ln2_b, P->Nl);
	}
	if ((rc & GPT_RC_MLA_UP_PROJ) && p->spec.mla) /* core attention's q, k and v */
		mla_up_recompute(m, P, l, A);
	if (rc & GPT_RC_CORE_ATTN)
		core_attention_forward(m, P, l, A, c->attention_dropout);
	if (p->spec.mlp == LAYER_MLP_MOE && (rc & (GPT_RC_MOE | GPT_RC_MOE_ACT | GPT_RC_SHARED_EXPERTS))) {
		struct gpt_pass R = *P;
		R.stats = false; /* counted in the forward pass */
		moe_recompute(m, &R, l, A, seq_full(m, P, A->ln2));
	} else if (p->spec.mlp == LAYER_MLP_DENSE && (rc & GPT_RC_MLP)) {
		mlp_fc1_forward(m, P, l, A, seq_full(m, P, A->ln2));
	}
}

void transformer_layer_backward(struct gpt_model *m, const struct gpt_pass *P, int l, const float *x, float *dres)
{
	const struct gpt_config *c = &m->lc;
	const struct kops *k = m->k;
	const struct gpt_layer_params *p = &m->lp[l];
	struct gpt_layer_acts *A = layer_acts(P, l);
	float ph = c->hidden_dropout;
	size_t nhl = (size_t)P->Nl * c->h;

	if (p->spec.kind != GPT_LAYER_TRANSFORMER) {
		hybrid_layer_backward(m, P, l, A, x, dres);
		return;
	}
	/* MLP: y = res1 + dropout(mlp(norm2(res1))) */
	const float *dmlp = row_output_grad(m, P, dres, ph, 3 * l + 2);
	const float *ln2 = seq_full(m, P, A->ln2);
	if (p->spec.mlp == LAYER_MLP_MOE)
		moe_backward(m, P, l, A, ln2, dmlp);
	else
		mlp_backward(m, P, l, A, ln2, dmlp);
	const float *dn2 = column_input_grad(m, P, m->s.dln); /* every rank's share of dL/d norm2 */
	norm_bwd(m, m->s.dtmp, dn2, A->res1, p->ln2_w, p->ln2_b, A->ln2_mean, A->ln2_rstd, P->Nl);
	k->add(dres, dres, m->s.dtmp, nhl); /* dres = dL/d res1 */
	round_half(m, dres, nhl);

	/* attention: res1 = x + dropout(attention(norm1(x))) */
	const float *dattn = row_output_grad(m, P, dres, ph, 3 * l + 1);
	attention_backward(m, P, l, A, dattn);
	const float *dn1 = column_input_grad(m, P, m->s.dln);
	norm_bwd(m, m->s.dtmp, dn1, x, p->ln1_w, p->ln1_b, A->ln1_mean, A->ln1_rstd, P->Nl);
	k->add(dres, dres, m->s.dtmp, nhl); /* dres = dL/dx */
	round_half(m, dres, nhl);
}
