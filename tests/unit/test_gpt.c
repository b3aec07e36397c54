/*
 * test_gpt.c - the whole GPT model: backward against central finite
 * differences of the forward loss for every parameter tensor, on tiny
 * GPT-2-style and Llama-style configs (with dropout, document masks and
 * position resets too); recomputation (full, and each module of selective)
 * gives bit-identical gradients with less memory; registry names and shapes are Megatron Core's; init follows
 * Megatron's rules; FLOPs match Megatron's formula on a worked example; the flash
 * attention path (no probs) agrees with the probs path. A hybrid Mamba stack
 * (M*M-) passes the same finite differences, and its names, shapes, weight
 * decay and inits are Megatron's.
 */
#include "test.h"

#include <math.h>

#include "base/xalloc.h"
#include "kernels/ops.h"
#include "model/gpt.h"
#include "tensor/mem.h"

static struct gpt_config tiny(bool llama)
{
	struct gpt_config c;
	memset(&c, 0, sizeof(c));
	c.L = 2;
	c.h = 8;
	c.a = 2;
	c.g = llama ? 1 : 2;
	c.k = 4;
	c.f = llama ? 12 : 32;
	c.S = 6;
	c.P = 8;
	c.V = 13;
	c.Vp = 16;
	c.rope = llama;
	c.rot = llama ? 4 : 0;
	c.rotary_base = 10000;
	c.rmsnorm = llama;
	c.eps = 1e-5f;
	c.swiglu = llama;
	c.bias = !llama;
	c.untied = llama;
	c.gelu = llama ? KOPS_GELU_ERF : KOPS_GELU_TANH;
	c.init_std = 0.3f;
	return c;
}

struct fixture {
	int32_t tok[12], lab[12], pos[12], doc[12];
	float w[12];
};

static void make_inputs(struct fixture *f, const struct gpt_config *c, int B)
{
	for (int i = 0; i < B * c->S; i++) {
		f->tok[i] = (i * 7 + 3) % c->V;
		f->lab[i] = (i * 5 + 1) % c->V;
		f->pos[i] = i % c->S < 3 ? i % c->S : i % c->S - 3; /* a reset at t=3 */
		f->doc[i] = i % c->S < 3 ? 0 : 1;
		f->w[i] = 0.1f + 0.05f * (float)(i % 5);
	}
}

/* The objective backward differentiates: the weighted token losses, plus
 * for MoE the attached losses (aux_coeff * aux + z_coeff * mean lse^2 per
 * layer) times moe_aux_scale, as Megatron injects them. */
static double loss_of(struct gpt_model *m, struct fixture *f, bool use_pos, bool use_doc, uint64_t seed)
{
	int N = m->B * m->c.S;
	float losses[12];
	m->moe.aux_sum = m->moe.zsq_sum = 0;
	gpt_forward(m, f->tok, f->lab, use_pos ? f->pos : NULL, use_doc ? f->doc : NULL, seed, true, losses);
	double L = 0;
	for (int i = 0; i < N; i++)
		L += (double)losses[i] * f->w[i];
	if (m->c.E > 0)
		L += m->moe.aux_scale * (m->c.router.aux_coeff * m->moe.aux_sum + m->c.router.z_coeff * m->moe.zsq_sum);
	return L;
}

/* Analytic grads vs central differences for every parameter element. */
static void gradcheck_cfg(const struct kops *k, struct gpt_config c, bool use_pos, bool use_doc, const char *what);

static void gradcheck_with(const struct kops *k, bool llama, float hdrop, float adrop, bool use_pos, bool use_doc,
			   const char *what)
{
	struct gpt_config c = tiny(llama);
	c.hidden_dropout = hdrop;
	c.attention_dropout = adrop;
	gradcheck_cfg(k, c, use_pos, use_doc, what);
}

/* A Mamba layer's init makes dt small (softplus(dt_bias) in [0.001, 0.1]),
 * so that dt_bias and A_log get gradients too small for finite differences
 * in fp32 on a tiny model; steps of order one and decays of order one
 * instead. */
static void strong_scan(struct gpt_model *m)
{
	for (int p = 0; p < m->reg.n; p++) {
		const struct param *pp = &m->reg.p[p];
		bool dt = strstr(pp->name, "mixer.dt_bias") != NULL, A = strstr(pp->name, "mixer.A_log") != NULL;
		for (size_t e = 0; (dt || A) && e < pp->numel; e++)
			m->reg.data[pp->offset + e] = dt ? 0.5f - 0.3f * (float)e : -0.5f + 0.4f * (float)e;
	}
}

static void gradcheck_cfg(const struct kops *k, struct gpt_config c, bool use_pos, bool use_doc, const char *what)
{
	struct mem_pool mp;
	mem_pool_init(&mp, k);
	struct gpt_model m;
	int B = 2;
	CHECK_INT(gpt_init(&m, &c, k, &mp, B, GPT_FP32, NULL, false), 0);
	gpt_init_weights(&m, 42);
	if (c.hybrid)
		strong_scan(&m);
	m.moe.aux_scale = 0.7;
	struct fixture f;
	make_inputs(&f, &c, B);
	uint64_t seed = 777;
	k->zero(m.reg.grad, m.reg.total);
	loss_of(&m, &f, use_pos, use_doc, seed);
	gpt_backward(&m, f.w);
	double worst = 0;
	const char *worst_name = "";
	for (int p = 0; p < m.reg.n; p++) {
		const struct param *pp = &m.reg.p[p];
		double num = 0, den = 0;
		for (size_t e = 0; e < pp->numel; e++) {
			float *x = m.reg.data + pp->offset + e;
			float x0 = *x, eps = 1e-2f;
			*x = x0 + eps;
			double lp = loss_of(&m, &f, use_pos, use_doc, seed);
			*x = x0 - eps;
			double lm = loss_of(&m, &f, use_pos, use_doc, seed);
			*x = x0;
			double fd = (lp - lm) / (2.0 * eps);
			double g = m.reg.grad[pp->offset + e];
			num += (g - fd) * (g - fd);
			den += fd * fd;
		}
		double rel = sqrt(num) / (sqrt(den) + 1e-6);
		if (rel > worst) {
			worst = rel;
			worst_name = pp->name;
		}
		CHECK(den > 0 || !strstr(pp->name, "weight")); /* every weight gets gradient */
	}
	if (worst > 2e-2)
		printf("#   %s: worst relative gradient error %.3g in %s\n", what, worst, worst_name);
	CHECK(worst < 2e-2);
	gpt_free(&m);
	CHECK_INT(mp.cur, 0);
}

static void gradcheck(bool llama, float hdrop, float adrop, bool use_pos, bool use_doc, const char *what)
{
	gradcheck_with(kops_cpu(), llama, hdrop, adrop, use_pos, use_doc, what);
}

static void test_gradcheck_gpt2(void)
{
	gradcheck(false, 0, 0, false, false, "gpt2");
}

static void test_gradcheck_llama(void)
{
	gradcheck(true, 0, 0, false, false, "llama");
}

/* --apply-layernorm-1p: norm weights stored as w - 1. A model whose norm
 * weights are r + 1 and one that stores r with the flag compute the same
 * loss, bit for bit; and the gradients still pass finite differences. */
static void test_norm_1p(void)
{
	for (int llama = 0; llama < 2; llama++) {
		struct gpt_config c = tiny(llama), c1 = c;
		c1.norm_1p = true;
		gradcheck_cfg(kops_cpu(), c1, false, false, llama ? "llama, 1p norms" : "gpt2, 1p norms");
		const struct kops *k = kops_cpu();
		struct mem_pool mp;
		mem_pool_init(&mp, k);
		struct gpt_model a, b;
		CHECK_INT(gpt_init(&a, &c, k, &mp, 2, GPT_FP32, NULL, false), 0);
		CHECK_INT(gpt_init(&b, &c1, k, &mp, 2, GPT_FP32, NULL, false), 0);
		gpt_init_weights(&a, 42);
		gpt_init_weights(&b, 42);
		CHECK_INT(a.reg.n, b.reg.n);
		int norms = 0;
		for (int i = 0; i < a.reg.n; i++) {
			const struct param *pa = &a.reg.p[i];
			bool norm = strstr(pa->name, "norm") && strstr(pa->name, "weight");
			for (size_t e = 0; e < pa->numel; e++) {
				float *x = a.reg.data + pa->offset + e, *y = b.reg.data + b.reg.p[i].offset + e;
				if (norm) {
					CHECK(*y == 0.0f); /* zero-centred init */
					float r = 0.01f * (float)((int)((e * 37 + (size_t)i * 11) % 21) - 10);
					*x = 1.0f + r;
					*y = r;
				} else {
					*y = *x;
				}
			}
			norms += norm;
		}
		CHECK(norms >= 2 * c.L + 1);
		struct fixture f;
		make_inputs(&f, &c, 2);
		double la = loss_of(&a, &f, false, false, 1), lb = loss_of(&b, &f, false, false, 1);
		CHECK(la == lb);
		gpt_free(&a);
		gpt_free(&b);
		CHECK_INT(mp.cur, 0);
	}
}

static void test_gradcheck_dropout(void)
{
	gradcheck(false, 0.2f, 0.3f, false, false, "gpt2+dropout");
	gradcheck(true, 0.2f, 0.3f, false, false, "llama+dropout");
}

static void test_gradcheck_resets(void)
{
	gradcheck(false, 0, 0, true, true, "gpt2+reset position ids+document mask");
	gradcheck(true, 0, 0, false, true, "llama+document mask");
}

/* Recompute: the same losses and bit-identical grads, with fewer bytes held. */
static void run_grads_with(const struct kops *k, struct gpt_config c, bool use_doc, float **grads, size_t *n,
			   size_t *peak, float *losses)
{
	struct mem_pool mp;
	mem_pool_init(&mp, k);
	struct gpt_model m;
	c.L = 4;
	c.S = 6;
	c.hidden_dropout = 0.1f;
	c.attention_dropout = 0.1f;
	CHECK_INT(gpt_init(&m, &c, k, &mp, 2, GPT_FP32, NULL, false), 0);
	gpt_init_weights(&m, 5);
	struct fixture f;
	make_inputs(&f, &c, 2);
	k->zero(m.reg.grad, m.reg.total);
	gpt_forward(&m, f.tok, f.lab, NULL, use_doc ? f.doc : NULL, 99, true, losses);
	gpt_backward(&m, f.w);
	*n = m.reg.total;
	*grads = xmalloc(*n * sizeof(float));
	memcpy(*grads, m.reg.grad, *n * sizeof(float));
	*peak = mp.peak;
	gpt_free(&m);
}

static void run_grads(struct gpt_config c, float **grads, size_t *n, size_t *peak, float *losses)
{
	run_grads_with(kops_cpu(), c, true, grads, n, peak, losses);
}

static void test_recompute_identical(void)
{
	for (int llama = 0; llama < 2; llama++) {
		struct gpt_config base = tiny(llama);
		float *g0, *g1;
		size_t n0, n1, p0, p1;
		float l0[12], l1[12];
		run_grads(base, &g0, &n0, &p0, l0);
		struct gpt_config v[4] = { base, base, base, base };
		v[0].recompute = GPT_RECOMPUTE_SELECTIVE;
		v[1].recompute = GPT_RECOMPUTE_FULL, v[1].recompute_layers = 1;
		v[2].recompute = GPT_RECOMPUTE_FULL, v[2].recompute_block = true, v[2].recompute_layers = 2;
		v[3].recompute = GPT_RECOMPUTE_FULL, v[3].recompute_layers = 2;
		for (int i = 0; i < 4; i++) {
			run_grads(v[i], &g1, &n1, &p1, l1);
			CHECK_INT(n1, n0);
			CHECK(!memcmp(l0, l1, sizeof(l0)));
			if (memcmp(g0, g1, n0 * sizeof(float))) {
				double md = 0;
				for (size_t e = 0; e < n0; e++)
					md = fmax(md, fabs(g0[e] - g1[e]));
				printf("#   %s, recompute variant %d: grads differ by up to %g\n", llama ? "llama" : "gpt2", i, md);
			}
			CHECK(!memcmp(g0, g1, n0 * sizeof(float)));
			if (p1 >= p0)
				printf("#   recompute variant %d: peak %zu bytes, without recompute %zu\n", i, p1, p0);
			CHECK(p1 < p0);
			free(g1);
		}
		free(g0);
	}
}

static struct gpt_config tiny_moe(bool llama);

/* --recompute-modules: each module, and combinations, on a dense model and
 * on one with two MoE layers (a shared expert) and two dense ones: the same
 * losses, bit-identical grads, fewer bytes held. */
static void test_recompute_modules(void)
{
	static const unsigned dense[] = { GPT_RC_LAYERNORM, GPT_RC_MLP,
					  GPT_RC_MLP | GPT_RC_LAYERNORM | GPT_RC_CORE_ATTN };
	static const unsigned moe[] = { GPT_RC_MOE,
					GPT_RC_MOE_ACT,
					GPT_RC_SHARED_EXPERTS,
					GPT_RC_LAYERNORM,
					GPT_RC_MLP,
					GPT_RC_MOE_ACT | GPT_RC_SHARED_EXPERTS | GPT_RC_LAYERNORM,
					GPT_RC_MOE | GPT_RC_MOE_ACT | GPT_RC_LAYERNORM | GPT_RC_MLP | GPT_RC_CORE_ATTN };
	for (int model = 0; model < 3; model++) {
		struct gpt_config base = model < 2 ? tiny(model) : tiny_moe(true);
		if (model == 2)
			base.shared_f = 4; /* layers 0 and 1 MoE; run_grads' layers 2 and 3 dense */
		const unsigned *mods = model < 2 ? dense : moe;
		int nmods = model < 2 ? 3 : 7;
		float *g0, *g1, l0[12], l1[12];
		size_t n0, n1, p0, p1;
		run_grads_with(kops_cpu(), base, false, &g0, &n0, &p0, l0);
		for (int i = 0; i < nmods; i++) {
			struct gpt_config c = base;
			c.recompute = GPT_RECOMPUTE_SELECTIVE;
			c.recompute_modules = mods[i];
			run_grads_with(kops_cpu(), c, false, &g1, &n1, &p1, l1);
			CHECK_INT(n1, n0);
			bool same = n1 == n0 && !memcmp(l0, l1, sizeof(l0)) && !memcmp(g0, g1, n0 * sizeof(float));
			if (!same || p1 >= p0)
				printf("#   model %d, modules %#x: %s, peak %zu bytes, without recompute %zu\n", model,
				       mods[i], same ? "identical" : "losses or grads differ", p1, p0);
			CHECK(same);
			CHECK(p1 < p0);
			free(g1);
		}
		free(g0);
	}
	/* the flash path (no probs to drop): the rest still recomputes bit for bit */
	struct kops flash = *kops_cpu();
	flash.flash = true;
	struct gpt_config c = tiny(true);
	float *g0, *g1, l0[12], l1[12];
	size_t n0, n1, p0, p1;
	run_grads_with(&flash, c, false, &g0, &n0, &p0, l0);
	c.recompute = GPT_RECOMPUTE_SELECTIVE;
	c.recompute_modules = GPT_RC_CORE_ATTN | GPT_RC_LAYERNORM | GPT_RC_MLP;
	run_grads_with(&flash, c, false, &g1, &n1, &p1, l1);
	CHECK(n1 == n0 && !memcmp(l0, l1, sizeof(l0)) && !memcmp(g0, g1, n0 * sizeof(float)));
	CHECK(p1 < p0);
	free(g0);
	free(g1);
}

/* The flash path (kops.flash, the GPU's attention): the model runs the block
 * ops on positions 0..S-1 and keeps each row's log-sum-exp instead of
 * probs. Here on a copy of the CPU table with the hint set: finite
 * differences hold, and losses and grads equal the probs path's within
 * float rounding (the two attention algorithms round differently), with
 * dropout, GQA and selective recompute, in less memory. */
static void test_flash_path(void)
{
	struct kops flash = *kops_cpu();
	flash.flash = true;
	gradcheck_with(&flash, false, 0.2f, 0.3f, false, false, "gpt2+dropout, flash path");
	gradcheck_with(&flash, true, 0.2f, 0.3f, false, false, "llama+dropout, flash path");
	/* rc 2: document masks (no recompute), which the block ops take too */
	for (int llama = 0; llama < 2; llama++)
		for (int rc = 0; rc < 3; rc++) {
			struct gpt_config c = tiny(llama);
			if (rc == 1)
				c.recompute = GPT_RECOMPUTE_SELECTIVE;
			float *g0, *g1, l0[12], l1[12];
			size_t n0, n1, p0, p1;
			run_grads_with(kops_cpu(), c, rc == 2, &g0, &n0, &p0, l0);
			run_grads_with(&flash, c, rc == 2, &g1, &n1, &p1, l1);
			CHECK_INT(n1, n0);
			double dl = 0, dg = 0, gmax = 0;
			for (int i = 0; i < 12; i++)
				dl = fmax(dl, fabs(l0[i] - l1[i]) / fabs(l0[i]));
			for (size_t e = 0; e < n0; e++) {
				dg = fmax(dg, fabs(g0[e] - g1[e]));
				gmax = fmax(gmax, fabs(g0[e]));
			}
			if (dl > 1e-6 || dg > 1e-5 * gmax)
				printf("#   %s rc=%d: losses differ by %.3g relative, grads by %.3g of %.3g\n",
				       llama ? "llama" : "gpt2", rc, dl, dg, gmax);
			CHECK(dl <= 1e-6);
			CHECK(dg <= 1e-5 * gmax);
			CHECK(p1 < p0); /* [B,a,S] log-sum-exps instead of [B,a,S,S] probs */
			free(g0);
			free(g1);
		}
}

/* Mixture of experts: a Mixtral-style model (SwiGLU experts, top-2
 * softmax routing, aux and z losses, a shared expert, every other layer
 * MoE), then sigmoid routing with seq_aux_loss and dropping, and GELU experts:
 * finite differences of the whole objective, router included. */
static struct gpt_config tiny_moe(bool llama)
{
	struct gpt_config c = tiny(llama);
	c.bias = false;
	c.E = 4;
	c.moe_f = 6;
	c.router = (struct moe_router_cfg){ .E = 4, .k = 2, .lb = MOE_LB_AUX, .aux_coeff = 0.1, .z_coeff = 0.01 };
	for (int l = 0; l < c.L; l++)
		c.moe_layer[l] = 1;
	return c;
}

/* The parameter count train prints counts every expert (one rank holds
 * them all here), and the active count k of them per MoE layer. */
static void test_num_params_moe(void)
{
	struct gpt_config c = tiny_moe(true);
	c.shared_f = 4;
	c.moe_layer[1] = 0;
	const struct kops *k = kops_cpu();
	struct mem_pool mp;
	mem_pool_init(&mp, k);
	struct gpt_model m;
	CHECK_INT(gpt_init(&m, &c, k, &mp, 1, GPT_FP32, NULL, false), 0);
	int64_t active, total = gpt_num_params(&c, &active);
	CHECK_INT(m.reg.total, (size_t)total);
	/* layer 0 holds E = 4 experts of (2 x 6 + 6) x h weights; a token uses k = 2 */
	int64_t expert = (2 * 6 + 6) * (int64_t)c.h;
	CHECK_INT(total - active, (4 - 2) * expert);
	gpt_free(&m);
}

static void test_gradcheck_moe(void)
{
	struct gpt_config c = tiny_moe(true);
	c.shared_f = 4;
	c.moe_layer[1] = 0;
	gradcheck_cfg(kops_cpu(), c, false, false, "mixtral-style moe");
	c = tiny_moe(true);
	c.router.sigmoid = true;
	c.router.lb = MOE_LB_SEQ_AUX;
	c.hidden_dropout = 0.2f;
	gradcheck_cfg(kops_cpu(), c, false, false, "sigmoid, seq_aux_loss, dropout");
	c.router.capacity = 1.0;
	c.moe_layer[0] = 0; /* dropping in the last layer only: a weight moved by the differences does
			     * not move which tokens a later layer drops */
	gradcheck_cfg(kops_cpu(), c, false, false, "sigmoid, capacity 1.0");
	c = tiny_moe(false);
	c.router.pre_softmax = true;
	c.router.k = 1;
	gradcheck_cfg(kops_cpu(), c, false, false, "gelu experts, pre-softmax top-1");
	c = tiny_moe(true); /* Qwen2-MoE: the shared expert's output times sigmoid(x . w) */
	c.shared_f = 4;
	c.shared_gate = true;
	c.router.pre_softmax = true;
	gradcheck_cfg(kops_cpu(), c, false, false, "gated shared expert, pre-softmax");
	/* names */
	struct mem_pool mp;
	mem_pool_init(&mp, kops_cpu());
	struct gpt_model m;
	c = tiny_moe(true);
	c.shared_f = 4;
	c.shared_gate = true;
	CHECK_INT(gpt_init(&m, &c, kops_cpu(), &mp, 1, GPT_FP32, NULL, false), 0);
	const char *want[] = { "decoder.layers.1.mlp.shared_experts.gate_weight", "decoder.layers.0.pre_mlp_layernorm.weight", "decoder.layers.0.mlp.router.weight",
			       "decoder.layers.0.mlp.experts.local_experts.3.linear_fc1.weight",
			       "decoder.layers.1.mlp.experts.local_experts.0.linear_fc2.weight",
			       "decoder.layers.1.mlp.shared_experts.linear_fc1.weight" };
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		int found = -1;
		for (int j = 0; j < m.reg.n; j++)
			if (!strcmp(m.reg.p[j].name, want[i]))
				found = j;
		CHECK(found >= 0);
		if (found >= 0 && strstr(want[i], "gate_weight")) {
			CHECK_INT(m.reg.p[found].shape[0], 1);
			CHECK_INT(m.reg.p[found].shape[1], 8);
		}
		if (found >= 0 && strstr(want[i], "local_experts.3.linear_fc1")) {
			CHECK_INT(m.reg.p[found].shape[0], 12);
			CHECK_INT(m.reg.p[found].shape[1], 8);
		}
	}
	gpt_free(&m);
	CHECK_INT(mp.cur, 0);
}

static void test_names_and_init(void)
{
	struct gpt_config c = tiny(true);
	c.g = 1;
	const struct kops *k = kops_cpu();
	struct mem_pool mp;
	mem_pool_init(&mp, k);
	struct gpt_model m;
	CHECK_INT(gpt_init(&m, &c, k, &mp, 1, GPT_FP32, NULL, false), 0);
	gpt_init_weights(&m, 1234);
	/* Llama: no biases, no position table, RMSNorm weights only, untied output */
	CHECK(params_find(&m.reg, "embedding.word_embeddings.weight") == 0);
	CHECK(params_find(&m.reg, "embedding.position_embeddings.weight") < 0);
	CHECK(params_find(&m.reg, "decoder.layers.0.self_attention.linear_qkv.bias") < 0);
	CHECK(params_find(&m.reg, "decoder.layers.1.self_attention.linear_qkv.layer_norm_bias") < 0);
	CHECK(params_find(&m.reg, "output_layer.weight") == m.reg.n - 1);
	int qkv = params_find(&m.reg, "decoder.layers.1.self_attention.linear_qkv.weight");
	CHECK(qkv > 0);
	CHECK_INT(m.reg.p[qkv].shape[0], (2 + 2 * 1) * 4); /* (a + 2g) k */
	CHECK_INT(m.reg.p[qkv].shape[1], 8);
	int fc1 = params_find(&m.reg, "decoder.layers.0.mlp.linear_fc1.weight");
	CHECK_INT(m.reg.p[fc1].shape[0], 24); /* [gate; up] */
	int ln = params_find(&m.reg, "decoder.layers.0.mlp.linear_fc1.layer_norm_weight");
	CHECK(m.reg.p[ln].flags & PARAM_NO_WD);
	CHECK(!(m.reg.p[fc1].flags & PARAM_NO_WD));
	CHECK_INT(m.reg.total, (size_t)gpt_num_params(&c, NULL));
	/* init: unit norms, N(0, std) weights, N(0, std/sqrt(2L)) output projections */
	CHECK(m.reg.data[m.reg.p[ln].offset] == 1.0f);
	int fc2 = params_find(&m.reg, "decoder.layers.0.mlp.linear_fc2.weight");
	double s1 = 0, s2 = 0;
	for (size_t e = 0; e < m.reg.p[fc1].numel; e++)
		s1 += pow(m.reg.data[m.reg.p[fc1].offset + e], 2);
	for (size_t e = 0; e < m.reg.p[fc2].numel; e++)
		s2 += pow(m.reg.data[m.reg.p[fc2].offset + e], 2);
	double std1 = sqrt(s1 / m.reg.p[fc1].numel), std2 = sqrt(s2 / m.reg.p[fc2].numel);
	CHECK(fabs(std1 - 0.3) < 0.06);
	CHECK(fabs(std2 - 0.3 / 2.0) < 0.04);
	gpt_free(&m);
}

/* A hybrid Mamba stack (docs/mamba.md): pattern M*M- (a Mamba layer, an
 * attention-only layer, a Mamba layer, an MLP-only layer), 4 heads of 4
 * channels in 2 groups of state 3, the scan's chunk 4 < S so that the
 * backward recomputes from a saved chunk state. */
static struct gpt_config tiny_hybrid(bool llama)
{
	struct gpt_config c = tiny(llama);
	const char *pat = "M*M-";
	c.L = 4;
	c.hybrid = c.is_hybrid = true;
	for (int l = 0; l < c.L; l++)
		c.layer_kind[l] = pat[l] == 'M' ? GPT_LAYER_MAMBA : pat[l] == '*' ? GPT_LAYER_ATTENTION : GPT_LAYER_MLP;
	c.mamba_N = 3, c.mamba_P = 4, c.mamba_H = 2 * c.h / 4, c.mamba_G = 2, c.mamba_W = 4, c.mamba_chunk = 4;
	return c;
}

static void test_gradcheck_hybrid(void)
{
	gradcheck_cfg(kops_cpu(), tiny_hybrid(true), false, false, "hybrid llama");
	struct gpt_config c = tiny_hybrid(false); /* LayerNorm (in_proj.layer_norm_bias), biases, dropout */
	c.hidden_dropout = 0.2f;
	c.attention_dropout = 0.1f;
	gradcheck_cfg(kops_cpu(), c, false, false, "hybrid gpt2 with dropout");
}

static void test_hybrid_names_and_init(void)
{
	const struct kops *k = kops_cpu();
	struct mem_pool mp;
	mem_pool_init(&mp, k);
	struct gpt_config c = tiny_hybrid(true);
	struct gpt_model m;
	CHECK_INT(gpt_init(&m, &c, k, &mp, 1, GPT_FP32, NULL, false), 0);
	gpt_init_weights(&m, 1234);
	CHECK_INT(m.reg.total, (size_t)gpt_num_params(&c, NULL));
	const char *absent[] = { "decoder.final_layernorm.weight", "decoder.layers.0.self_attention.linear_qkv.weight",
				 "decoder.layers.1.mlp.linear_fc1.weight", "decoder.layers.3.self_attention.linear_qkv.weight",
				 "decoder.layers.0.mixer.in_proj.layer_norm_bias" };
	for (size_t i = 0; i < sizeof(absent) / sizeof(*absent); i++)
		CHECK(params_find(&m.reg, absent[i]) < 0);
	CHECK(params_find(&m.reg, "decoder.final_norm.weight") >= 0);
	CHECK(params_find(&m.reg, "decoder.layers.1.self_attention.linear_proj.weight") >= 0);
	CHECK(params_find(&m.reg, "decoder.layers.3.mlp.linear_fc2.weight") >= 0);
	/* di 16, C = 16 + 2*2*3 = 28, in_proj rows 2*16 + 12 + 4 = 48 */
	struct { const char *name; int64_t r, c; bool wd; } want[] = {
		{ "in_proj.layer_norm_weight", 8, 0, false }, { "in_proj.weight", 48, 8, true },
		{ "conv1d.weight", 28, 4, true }, { "conv1d.bias", 28, 0, false }, { "dt_bias", 4, 0, false },
		{ "A_log", 4, 0, false }, { "D", 4, 0, false }, { "norm.weight", 16, 0, false },
		{ "out_proj.weight", 8, 16, true },
	};
	int first = params_find(&m.reg, "decoder.layers.2.mixer.in_proj.layer_norm_weight");
	for (size_t i = 0; i < sizeof(want) / sizeof(*want); i++) {
		char name[PARAM_NAME_MAX];
		snprintf(name, sizeof(name), "decoder.layers.2.mixer.%s", want[i].name);
		int p = params_find(&m.reg, name);
		CHECK_INT(p, first + (int)i); /* Megatron's registration order */
		if (p < 0)
			continue;
		const struct param *pp = &m.reg.p[p];
		CHECK_INT(pp->ndim, want[i].c ? 2 : 1);
		CHECK_INT(pp->shape[0], want[i].r);
		if (want[i].c)
			CHECK_INT(pp->shape[1], want[i].c);
		CHECK(!(pp->flags & PARAM_NO_WD) == want[i].wd);
	}
	/* the inits: A in [1, 16], softplus(dt_bias) in [0.001, 0.1], D 1,
	 * conv within 1/sqrt(4), out_proj N(0, std/sqrt(L)) */
	const float *w = m.reg.data;
	const struct param *A = &m.reg.p[first + 5], *dt = &m.reg.p[first + 4], *D = &m.reg.p[first + 6];
	const struct param *cw = &m.reg.p[first + 2], *out = &m.reg.p[first + 8];
	for (size_t e = 0; e < A->numel; e++) {
		double a = exp(w[A->offset + e]), d = log1p(exp(w[dt->offset + e]));
		CHECK(a >= 1 && a <= 16.0001);
		CHECK(d >= 0.001 * 0.9999 && d <= 0.1 * 1.0001);
		CHECK(w[D->offset + e] == 1.0f);
	}
	double mx = 0, s2 = 0;
	for (size_t e = 0; e < cw->numel; e++)
		mx = fmax(mx, fabs(w[cw->offset + e]));
	CHECK(mx <= 0.5 && mx > 0.3);
	for (size_t e = 0; e < out->numel; e++)
		s2 += pow(w[out->offset + e], 2);
	CHECK(fabs(sqrt(s2 / out->numel) - 0.3 / 2.0) < 0.04); /* 0.3 / sqrt(L = 4) */
	gpt_free(&m);
	CHECK_INT(mp.cur, 0);
}

/* Tensor parallelism of the mixer: the TP2 model's slices (registered
 * for rank r with the same seed) are the one-rank model's rows of
 * Megatron's split, written out here: in_proj's [z_r; x_r; B_r; C_r; dt_r]
 * (z, x 16 rows each, B, C 6, dt 4), conv1d's [x_r; B_r; C_r], dt_bias,
 * A_log and D by heads, norm.weight by channels, out_proj by columns; and
 * the rank runs on 2 heads in 1 group. */
static void test_hybrid_tp_slices(void)
{
	const struct kops *k = kops_cpu();
	struct mem_pool mp;
	mem_pool_init(&mp, k);
	struct gpt_config c = tiny_hybrid(true);
	struct gpt_model one;
	CHECK_INT(gpt_init(&one, &c, k, &mp, 1, GPT_FP32, NULL, false), 0);
	gpt_init_weights(&one, 99);
	/* global rows of rank r's local ones, per tensor: runs {start of rank 0, length} */
	struct {
		const char *name;
		int nruns, runs[5][2];
	} want[] = {
		{ "in_proj.weight", 5, { { 0, 8 }, { 16, 8 }, { 32, 3 }, { 38, 3 }, { 44, 2 } } },
		{ "conv1d.weight", 3, { { 0, 8 }, { 16, 3 }, { 22, 3 } } },
		{ "conv1d.bias", 3, { { 0, 8 }, { 16, 3 }, { 22, 3 } } },
		{ "dt_bias", 1, { { 0, 2 } } },
		{ "A_log", 1, { { 0, 2 } } },
		{ "D", 1, { { 0, 2 } } },
		{ "norm.weight", 1, { { 0, 8 } } },
		{ "in_proj.layer_norm_weight", 1, { { 0, 8 } } }, /* replicated: every rank all 8 */
	};
	for (int r = 0; r < 2; r++) {
		struct dist_group tp = { .name = "tensor-model-parallel", .size = 2, .rank = r };
		struct gpt_model m;
		CHECK_INT(gpt_init(&m, &c, k, &mp, 1, GPT_FP32, &tp, false), 0);
		gpt_init_weights(&m, 99);
		CHECK_INT(m.lc.mamba_H, 2);
		CHECK_INT(m.lc.mamba_G, 1);
		CHECK_INT(gpt_mamba_proj_dim(&m.lc), 24);
		for (size_t i = 0; i < sizeof(want) / sizeof(*want); i++) {
			char name[PARAM_NAME_MAX];
			snprintf(name, sizeof(name), "decoder.layers.0.mixer.%s", want[i].name);
			int a = params_find(&m.reg, name), b = params_find(&one.reg, name);
			CHECK(a >= 0 && b >= 0);
			if (a < 0 || b < 0)
				continue;
			const struct param *p = &m.reg.p[a], *q = &one.reg.p[b];
			bool split = p->tp_axis == 0;
			CHECK(split == (strcmp(want[i].name, "in_proj.layer_norm_weight") != 0));
			int64_t cols = p->ndim == 2 ? p->shape[1] : 1, lrow = 0;
			for (int j = 0; j < want[i].nruns; j++) {
				int64_t g0 = want[i].runs[j][0] + (split ? r * want[i].runs[j][1] : 0);
				for (int64_t x = 0; x < want[i].runs[j][1]; x++, lrow++)
					for (int64_t y = 0; y < cols; y++)
						CHECK(m.reg.data[p->offset + (size_t)(lrow * cols + y)] ==
						      one.reg.data[q->offset + (size_t)((g0 + x) * cols + y)]);
			}
			CHECK_INT(lrow, p->local_shape[0]);
		}
		/* out_proj [h, d_inner]: columns 8r .. 8r + 7 of every row */
		int a = params_find(&m.reg, "decoder.layers.2.mixer.out_proj.weight");
		int b = params_find(&one.reg, "decoder.layers.2.mixer.out_proj.weight");
		const struct param *p = &m.reg.p[a], *q = &one.reg.p[b];
		CHECK_INT(p->local_shape[1], 8);
		for (int x = 0; x < 8; x++)
			for (int y = 0; y < 8; y++)
				CHECK(m.reg.data[p->offset + (size_t)(x * 8 + y)] ==
				      one.reg.data[q->offset + (size_t)(x * 16 + 8 * r + y)]);
		gpt_free(&m);
	}
	gpt_free(&one);
	CHECK_INT(mp.cur, 0);
}

/* The layouts a hybrid model takes (gpt_config_check_layout): TP dividing
 * the mixer's heads and groups, with or without SP, and pipeline stages
 * splitting the pattern as a GPT's layers; refused, naming the flags: TP
 * past the groups or heads, virtual stages, context parallelism. */
static void test_hybrid_layouts(void)
{
	struct gpt_config c = tiny_hybrid(true); /* H 4, G 2, 4 layers; 2 heads, 1 query group */
	c.a = 4, c.g = 4, c.k = 2;
	const struct gpt_layout one = { .tp = 1, .pp = 1, .vpp = 1, .cp = 1, .ep = 1 };
	struct {
		int tp, pp, vpp, cp, G, H;
		bool sp;
		const char *err; /* NULL: taken */
	} cases[] = {
		{ 2, 1, 1, 1, 2, 4, false, NULL },
		{ 2, 1, 1, 1, 2, 4, true, NULL },
		{ 1, 2, 1, 1, 2, 4, false, NULL },
		{ 1, 4, 1, 1, 2, 4, false, NULL },
		{ 2, 2, 1, 1, 2, 4, true, NULL },
		{ 4, 1, 1, 1, 2, 4, false, "--mamba-num-groups 2 is not divisible by --tensor-model-parallel-size 4" },
		{ 4, 1, 1, 1, 4, 4, false, NULL },
		{ 4, 1, 1, 1, 2, 2, false, "the Mamba mixer's 2 heads (--mamba-num-heads" },
		{ 1, 3, 1, 1, 2, 4, false, "--num-layers 4 is not divisible by --pipeline-model-parallel-size 3" },
		{ 1, 2, 2, 1, 2, 4, false, "over virtual pipeline stages needs the pattern's '|'" },
		{ 1, 1, 1, 2, 2, 4, false, "without --context-parallel-size" },
	};
	for (size_t i = 0; i < sizeof(cases) / sizeof(*cases); i++) {
		struct gpt_layout lay = one;
		lay.tp = cases[i].tp, lay.pp = cases[i].pp, lay.vpp = cases[i].vpp, lay.cp = cases[i].cp;
		lay.sp = cases[i].sp;
		c.mamba_G = cases[i].G, c.mamba_H = cases[i].H;
		struct test_capture cap;
		test_capture_begin(&cap, 2);
		int rc = gpt_config_check_layout(&c, &lay, NULL);
		char *msg = test_capture_end(&cap);
		if (!cases[i].err) {
			CHECK_INT(rc, 0);
		} else {
			CHECK_INT(rc, -1);
			CHECK(msg && strstr(msg, cases[i].err));
		}
		if (rc != (cases[i].err ? -1 : 0))
			printf("#   case %zu: %s\n", i, msg ? msg : "");
		free(msg);
	}
}

static void test_flops(void)
{
	/* Megatron's num_floating_point_operations (megatron/training/training.py):
	 * L=24 h=1024 a=16 f=4096 V=50304 s=1024, batch 512 */
	struct gpt_config c;
	memset(&c, 0, sizeof(c));
	c.L = 24, c.h = 1024, c.a = 16, c.g = 16, c.k = 64, c.f = 4096, c.Vp = 50304, c.S = 1024;
	CHECK(fabs(gpt_flops_per_iteration(&c, 512) / 1.191183409741824e15 - 1) < 1e-12);
	/* Llama-3-8B shape, one sample: 4.21645529382912e14 */
	c.L = 32, c.h = 4096, c.a = 32, c.g = 8, c.k = 128, c.f = 14336, c.swiglu = true, c.Vp = 128256,
	c.S = 8192;
	CHECK(fabs(gpt_flops_per_iteration(&c, 1) / 4.21645529382912e14 - 1) < 1e-12);
	/* a hybrid M-M* (Megatron's hybrid_flops): h 1024, 16 heads in 8 groups, f 4096,
	 * V 50304, s 1024, N 128, P 64, G 8, batch 8 */
	memset(&c, 0, sizeof(c));
	c.L = 4, c.h = 1024, c.a = 16, c.g = 8, c.k = 64, c.f = 4096, c.Vp = 50304, c.S = 1024;
	c.hybrid = true;
	c.layer_kind[0] = c.layer_kind[2] = GPT_LAYER_MAMBA;
	c.layer_kind[1] = GPT_LAYER_MLP;
	c.layer_kind[3] = GPT_LAYER_ATTENTION;
	c.mamba_N = 128, c.mamba_P = 64, c.mamba_G = 8, c.mamba_H = 32;
	CHECK(fabs(gpt_flops_per_iteration(&c, 8) / 4068407771136.0 - 1) < 1e-12);
}

int main(void)
{
	RUN(test_gradcheck_gpt2);
	RUN(test_gradcheck_llama);
	RUN(test_norm_1p);
	RUN(test_gradcheck_dropout);
	RUN(test_gradcheck_resets);
	RUN(test_recompute_identical);
	RUN(test_recompute_modules);
	RUN(test_flash_path);
	RUN(test_num_params_moe);
	RUN(test_gradcheck_moe);
	RUN(test_names_and_init);
	RUN(test_flops);
	RUN(test_hybrid_tp_slices);
	RUN(test_hybrid_layouts);
	RUN(test_gradcheck_hybrid);
	RUN(test_hybrid_names_and_init);
	return test_summary();
}
