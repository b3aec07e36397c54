/*
 * cuda_ws.c - see cuda_ws.h. Each helper below is one op of the CUDA
 * backend and requests what its scratch_alloc takes (the file and function
 * named beside it); the model's order of ops is that of
 * lib/model/{gpt,transformer_layer,attention,mlp}.c, moe/ and fp8_linear.c.
 * Multi-latent attention's projections are not modelled (its q/k/v widths
 * stand in). A hybrid model's layers request by kind: a Mamba layer its
 * mixer's (ssm.cu, lib/model/mamba_mixer.c), an attention-only or MLP-only
 * layer its half of a transformer layer's.
 */
#include "memcalc/cuda_ws.h"

#include "kernels/device.h"

#include <string.h>

/* gemm.cu, LT_WORKSPACE */
#define LT_WORKSPACE ((size_t)32 << 20)
/* common.cuh, ROWS: rows per block of the column-sum partials */
#define ROWS 32
/* ops.cu, SUM_CHUNK: elements per piece of the whole-model ops */
#define SUM_CHUNK 65536
/* ops.cu, struct seg_piece: a size_t and two unsigned */
#define SEG_PIECE 16

void cuda_ws_init(struct cuda_ws *w)
{
	memset(w, 0, sizeof(*w));
	w->lt_workspace = LT_WORKSPACE;
}

/* ops.cu, scratch_alloc: grow to max(bytes, 2 x capacity), keep the old one */
static void request(struct cuda_ws *w, size_t bytes)
{
	if (bytes > w->largest)
		w->largest = bytes;
	if (bytes <= w->scratch_final)
		return;
	size_t cap = bytes > 2 * w->scratch_final ? bytes : 2 * w->scratch_final;
	w->scratch_final = cap;
	w->scratch_total += cap;
}

static size_t up256(size_t b)
{
	return (b + 255) & ~(size_t)255;
}

/* gemm.cu, half_bytes: a [rows, cols] operand in bf16/fp16, rows padded to 8 */
static size_t half_bytes(size_t rows, size_t cols)
{
	return up256(rows * ((cols + 7) & ~(size_t)7) * 2);
}

static size_t row_blocks(size_t n)
{
	return (n + ROWS - 1) / ROWS;
}

/* gemm.cu, linear_forward on the half table: the model's 16-bit weights
 * go to the GEMM as they are; the input is converted, in pieces of rows
 * when it is larger than device_gemm_piece_bytes() */
static void lin_fwd(struct cuda_ws *w, bool half, size_t N, size_t IC, size_t OC)
{
	if (!half || !N || !IC || !OC)
		return;
	size_t rows = N, piece = device_gemm_piece_bytes();
	if (half_bytes(N, IC) > piece) {
		rows = piece / (((IC + 7) & ~(size_t)7) * 2);
		rows = rows < 1 ? 1 : rows;
	}
	request(w, half_bytes(rows, IC));
}

/* gemm.cu, linear_backward: the input (for dweight) converted whole and a
 * piece of dout's columns, in one request; then colsum_add's partials for
 * dbias */
static void lin_bwd(struct cuda_ws *w, bool half, size_t N, size_t IC, size_t OC, bool dinp, bool bias)
{
	(void)dinp; /* the weight needs no scratch either way */
	if (!N || !OC)
		return;
	if (half && IC) {
		size_t cols = OC, piece = device_gemm_piece_bytes();
		if (half_bytes(N, OC) > piece) {
			cols = (piece / (N * 2)) & ~(size_t)7;
			cols = cols < 8 ? 8 : cols;
		}
		request(w, half_bytes(N, IC) + half_bytes(N, cols));
	}
	if (bias)
		request(w, row_blocks(N) * OC * sizeof(double));
}

/* ops.cu, rmsnorm_backward / layernorm_backward: the weight (and bias)
 * gradients' partial sums */
static void norm_bwd(struct cuda_ws *w, bool rms, size_t rows, size_t C)
{
	if (rows && C)
		request(w, row_blocks(rows) * (rms ? 1 : 2) * C * sizeof(float));
}

struct shape {
	bool half, tc;
	size_t B, T, N, Nl, h, a, g, k;
	const struct gpt_fp8_config *fp8; /* FP8 training, else NULL */
	bool fp8_alone;                   /* no TP or CP rank shares a tensorwise amax */
};

/* ---- FP8 (fp8.cu; the model's calls are lib/model/fp8_linear.c's) ---- */

/* fp8.cu, AMAX_BLOCKS and QUANT_WHOLE_MIN */
#define FP8_AMAX_BLOCKS 1024
#define FP8_WHOLE_MIN 4096

/* amax_into over n values: its partial maxima when it takes more than one block */
static void fp8_amax_req(struct cuda_ws *w, size_t n)
{
	size_t nblk = (n + 255) / 256;
	nblk = nblk > FP8_AMAX_BLOCKS ? FP8_AMAX_BLOCKS : nblk;
	if (nblk > 1)
		request(w, nblk * sizeof(float));
}

/* one operand of n values quantized for the recipe */
static void fp8_quant_req(struct cuda_ws *w, const struct shape *s, size_t n)
{
	switch (s->fp8->recipe) {
	case GPT_FP8_DELAYED: /* GIVEN, raising the slot's amax */
		fp8_amax_req(w, n);
		break;
	case GPT_FP8_TENSORWISE:
		if (!s->fp8_alone) /* fp8_amax, read back, then GIVEN */
			fp8_amax_req(w, n);
		else if (n >= FP8_WHOLE_MIN) /* the whole-tensor block: amax, scale, partials */
			request(w, (2 + FP8_AMAX_BLOCKS) * sizeof(float));
		break;
	default: /* per-block scales inside the kernel */
		break;
	}
}

/* fp8_gemm, out[M, N] from a[M, K] and b[N, K]: nothing on cuBLASLt's FP8
 * matmul (per-tensor scales, K a multiple of 16, N of 4; the buffers are
 * taken to be 16-byte aligned), else both operands dequantized (and the
 * product, when accumulating) */
static void fp8_gemm_req(struct cuda_ws *w, const struct shape *s, size_t M, size_t N, size_t K, bool acc)
{
	bool per_tensor = s->fp8->recipe == GPT_FP8_DELAYED || s->fp8->recipe == GPT_FP8_TENSORWISE;
	if (!M || !N || !K || (per_tensor && K % 16 == 0 && N % 4 == 0))
		return;
	request(w, up256(M * K * sizeof(float)) + up256(N * K * sizeof(float)) + (acc ? M * N * sizeof(float) : 0));
}

static void lin8_fwd(struct cuda_ws *w, const struct shape *s, size_t N, size_t IC, size_t OC)
{
	fp8_quant_req(w, s, N * IC);
	fp8_quant_req(w, s, OC * IC);
	fp8_gemm_req(w, s, N, OC, IC, false);
}

static void lin8_bwd(struct cuda_ws *w, const struct shape *s, size_t N, size_t IC, size_t OC, bool bias)
{
	fp8_quant_req(w, s, N * OC); /* dgrad: dY and W^T */
	fp8_quant_req(w, s, OC * IC);
	fp8_gemm_req(w, s, N, IC, OC, false);
	if (s->fp8->wgrad) { /* wgrad: dY^T and X^T, accumulated */
		fp8_quant_req(w, s, N * OC);
		fp8_quant_req(w, s, N * IC);
		fp8_gemm_req(w, s, OC, IC, N, true);
	} else {
		lin_bwd(w, s->half, N, IC, OC, false, false);
	}
	if (bias) /* the bias gradient: dY^T . ones, a GEMM with IC = 1 */
		lin_bwd(w, s->half, N, 1, OC, false, false);
}

/* a transformer layer's linear layer: FP8 where the model made it so */
static void tl_fwd(struct cuda_ws *w, const struct shape *s, bool fp8, size_t N, size_t IC, size_t OC)
{
	if (fp8)
		lin8_fwd(w, s, N, IC, OC);
	else
		lin_fwd(w, s->half, N, IC, OC);
}

static void tl_bwd(struct cuda_ws *w, const struct shape *s, bool fp8, size_t N, size_t IC, size_t OC, bool bias)
{
	if (fp8)
		lin8_bwd(w, s, N, IC, OC, bias);
	else
		lin_bwd(w, s->half, N, IC, OC, true, bias);
}

/* attn_tc.cu, tc_block_forward: q, k and v in half precision (the fp32
 * block op of attn.cu takes none) */
static void attn_fwd(struct cuda_ws *w, const struct shape *s, bool flash)
{
	if (flash && s->tc)
		request(w, (s->B * s->a * s->T * s->k + 2 * s->B * s->g * s->T * s->k) * sizeof(uint16_t) + 3 * 256);
}

/* attn_tc.cu, tc_bwd_launch: the row sums, q, dO, k and v; attn.cu: the
 * row sums alone */
static void attn_bwd(struct cuda_ws *w, const struct shape *s, bool flash)
{
	size_t nl = s->B * s->a * s->T;
	if (flash && s->tc)
		request(w, up256(nl * sizeof(float)) +
				   (2 * s->B * s->a * s->T * s->k + 2 * s->B * s->g * s->T * s->k) * sizeof(uint16_t) +
				   4 * 256);
	else
		request(w, nl * sizeof(float));
}

/* A routed expert's rows: the balanced share of the rows that reach this
 * rank's experts, B*T*topk (every rank sends its tokens' slots). */
static size_t expert_rows(const struct gpt_model *m, const struct shape *s)
{
	size_t El = m->par.El > 0 ? (size_t)m->par.El : (size_t)m->lc.E;
	return El ? (s->N * (size_t)m->lc.router.k + El - 1) / El : 0;
}

/* ---- the Mamba-2 mixer (ssm.cu; the model's calls are lib/model/mamba_mixer.c's) ---- */

/* ssm.cu: SSM_SMEM and SCAN_WARPS */
#define SSM_SMEM (48 * 1024)
#define SCAN_WARPS 8

static void mamba_fwd(struct cuda_ws *w, const struct gpt_model *m, const struct shape *s)
{
	const struct gpt_config *c = &m->lc;
	size_t H = (size_t)c->mamba_H, P = (size_t)c->mamba_P, N = (size_t)c->mamba_N;
	lin_fwd(w, s->half, s->N, s->h, (size_t)gpt_mamba_proj_dim(c)); /* in_proj */
	/* cuda_ssd_scan_forward: a head's rows of the state in scratch when
	 * SCAN_ROWS (4) rows of N would not fit in shared memory */
	if (4 * N * sizeof(float) > SSM_SMEM)
		request(w, s->B * H * P * N * sizeof(float));
	lin_fwd(w, s->half, s->N, (size_t)gpt_mamba_inner(c), s->h); /* out_proj */
}

static void mamba_bwd(struct cuda_ws *w, const struct gpt_model *m, const struct shape *s, bool rms)
{
	const struct gpt_config *c = &m->lc;
	size_t H = (size_t)c->mamba_H, P = (size_t)c->mamba_P, N = (size_t)c->mamba_N, T = s->T, B = s->B;
	size_t di = (size_t)gpt_mamba_inner(c), C = (size_t)gpt_mamba_conv_dim(c), Wd = (size_t)c->mamba_W;
	lin_bwd(w, s->half, s->N, di, s->h, true, false); /* out_proj */
	/* cuda_gated_rmsnorm_backward: the weight's partial sums */
	request(w, row_blocks(s->N) * di * sizeof(float));
	/* cuda_ssd_scan_backward: the per-(sample, head) partials, the states
	 * at chunk starts and one chunk's states, the per-head dB and dC, and
	 * the shared slots when they do not fit */
	size_t L = (size_t)c->mamba_chunk < T ? (size_t)c->mamba_chunk : T, nck = (T + L - 1) / L;
	size_t nw = P < SCAN_WARPS ? P : SCAN_WARPS, BH = B * H, PN = P * N, BTHN = B * T * H * N;
	size_t sm = (2 * 3 * nw + PN + 2 * nw * N + 3) & ~(size_t)3;
	size_t gsm = sm * sizeof(float) <= SSM_SMEM ? 0 : BH * sm;
	request(w, (BH * 3 * 2 + gsm + BH * nck * PN + BH * L * PN + 2 * BTHN) * sizeof(float));
	/* cuda_ssm_conv_backward: the gradient through SiLU and the weight's
	 * and bias's partial sums */
	request(w, (s->N * C + row_blocks(s->N) * (Wd + 1) * C) * sizeof(float));
	lin_bwd(w, s->half, s->N, s->h, (size_t)gpt_mamba_proj_dim(c), true, false); /* in_proj */
	norm_bwd(w, rms, s->Nl, s->h);
}

static void layer_fwd(struct cuda_ws *w, const struct gpt_model *m, const struct shape *s, bool flash, int l)
{
	const struct gpt_config *c = &m->lc;
	const struct transformer_layer_spec *sp = &m->lp[l].spec;
	size_t qkv = (s->a + 2 * s->g) * s->k, ak = s->a * s->k;
	bool f8 = gpt_fp8_layer(m, l);
	if (sp->kind == GPT_LAYER_MAMBA) {
		mamba_fwd(w, m, s);
		return;
	}
	if (sp->kind != GPT_LAYER_MLP) {
		tl_fwd(w, s, f8, s->N, s->h, qkv);
		attn_fwd(w, s, flash);
		tl_fwd(w, s, f8, s->N, ak, s->h);
	}
	if (sp->kind == GPT_LAYER_ATTENTION)
		return;
	if (sp->mlp == LAYER_MLP_MOE) {
		size_t fm = (size_t)c->moe_f, fs = (size_t)c->shared_f, n = expert_rows(m, s);
		lin_fwd(w, s->half, s->N, s->h, (size_t)c->E); /* the router */
		tl_fwd(w, s, f8, n, s->h, sp->swiglu ? 2 * fm : fm);
		tl_fwd(w, s, f8, n, fm, s->h);
		if (sp->shared_expert) {
			tl_fwd(w, s, f8, s->N, s->h, sp->swiglu ? 2 * fs : fs);
			tl_fwd(w, s, f8, s->N, fs, s->h);
		}
	} else {
		size_t f = (size_t)c->f;
		tl_fwd(w, s, f8, s->N, s->h, sp->swiglu ? 2 * f : f);
		tl_fwd(w, s, f8, s->N, f, s->h);
	}
}

/* the MLP (or MoE) block's backward, its norm last */
static void mlp_bwd(struct cuda_ws *w, const struct gpt_model *m, const struct shape *s, int l)
{
	const struct gpt_config *c = &m->lc;
	const struct transformer_layer_spec *sp = &m->lp[l].spec;
	bool f8 = gpt_fp8_layer(m, l);
	if (sp->mlp == LAYER_MLP_MOE) {
		size_t fm = (size_t)c->moe_f, fs = (size_t)c->shared_f, n = expert_rows(m, s);
		if (sp->shared_expert) {
			tl_bwd(w, s, f8, s->N, fs, s->h, false);
			tl_bwd(w, s, f8, s->N, s->h, sp->swiglu ? 2 * fs : fs, false);
		}
		tl_bwd(w, s, f8, n, fm, s->h, false);
		tl_bwd(w, s, f8, n, s->h, sp->swiglu ? 2 * fm : fm, false);
		/* the router: the input's gradient on tensor-parallel rank 0 */
		lin_bwd(w, s->half, s->N, s->h, (size_t)c->E, true, false);
	} else {
		size_t f = (size_t)c->f;
		tl_bwd(w, s, f8, s->N, f, s->h, sp->fc_bias);
		tl_bwd(w, s, f8, s->N, s->h, sp->swiglu ? 2 * f : f, sp->fc_bias);
	}
	norm_bwd(w, sp->norm == LAYER_RMSNORM, s->Nl, s->h);
}

/* the self-attention block's backward, its norm last */
static void attention_bwd(struct cuda_ws *w, const struct gpt_model *m, const struct shape *s, bool flash, int l)
{
	const struct transformer_layer_spec *sp = &m->lp[l].spec;
	size_t qkv = (s->a + 2 * s->g) * s->k, ak = s->a * s->k;
	bool f8 = gpt_fp8_layer(m, l);
	tl_bwd(w, s, f8, s->N, ak, s->h, sp->proj_bias);
	attn_bwd(w, s, flash);
	tl_bwd(w, s, f8, s->N, s->h, qkv, sp->qkv_bias);
	norm_bwd(w, sp->norm == LAYER_RMSNORM, s->Nl, s->h);
}

/* a recomputed forward repeats the forward's requests: nothing new */
static void layer_bwd(struct cuda_ws *w, const struct gpt_model *m, const struct shape *s, bool flash, int l)
{
	enum gpt_layer_kind kind = m->lp[l].spec.kind;
	if (kind == GPT_LAYER_MAMBA) {
		mamba_bwd(w, m, s, m->lp[l].spec.norm == LAYER_RMSNORM);
		return;
	}
	if (kind != GPT_LAYER_ATTENTION)
		mlp_bwd(w, m, s, l);
	if (kind != GPT_LAYER_MLP)
		attention_bwd(w, m, s, flash, l);
}

void cuda_ws_model(struct cuda_ws *w, const struct gpt_model *m, bool half)
{
	const struct gpt_config *c = &m->lc;
	struct shape s = { .half = half, .B = (size_t)m->B, .T = (size_t)c->S, .Nl = (size_t)m->Nl,
			   .h = (size_t)c->h, .a = (size_t)c->a, .g = (size_t)c->g, .k = (size_t)c->k };
	s.N = s.B * s.T;
	s.fp8 = gpt_fp8_config(m);
	s.fp8_alone = !m->par.tp && !m->par.cp;
	/* attn_tc.cu: the tensor-core kernels at head dims 64 and 128 (on a
	 * GPU whose shared memory holds their tiles: Ampere and later) */
	s.tc = half && (c->k == 64 || c->k == 128);
	/* the block ops run both the flash path and ring attention */
	bool flash = m->flash || m->par.cp;
	for (int v = 0; v < m->nchunks; v++) {
		const struct gpt_chunk *ch = &m->chunks[v];
		for (int l = ch->l0; l < ch->l0 + ch->nl; l++)
			layer_fwd(w, m, &s, flash, l);
		if (ch->post)
			lin_fwd(w, half, s.N, s.h, (size_t)c->Vp); /* the output layer */
	}
	for (int v = m->nchunks - 1; v >= 0; v--) {
		const struct gpt_chunk *ch = &m->chunks[v];
		if (ch->post) {
			lin_bwd(w, half, s.N, s.h, (size_t)c->Vp, true, false);
			norm_bwd(w, c->rmsnorm, s.Nl, s.h);
		}
		for (int l = ch->l0 + ch->nl - 1; l >= ch->l0; l--)
			layer_bwd(w, m, &s, flash, l);
	}
}

void cuda_ws_segs(struct cuda_ws *w, const struct kops_seg *segs, int nsegs, bool sums)
{
	size_t pieces = 0;
	for (int i = 0; i < nsegs; i++)
		pieces += (segs[i].n + SUM_CHUNK - 1) / SUM_CHUNK;
	if (!pieces)
		return;
	size_t front = sums ? (pieces * sizeof(double) + 15) / 16 * 16 : 0;
	request(w, front + pieces * SEG_PIECE);
}
