/*
 * cuda_ws.c - see cuda_ws.h. Each helper below is one op of the CUDA
 * backend and requests what its scratch_alloc takes (the file and function
 * named beside it); the model's order of ops is that of
 * lib/model/{gpt,transformer_layer,attention,mlp}.c and moe/.
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
};

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

static void layer_fwd(struct cuda_ws *w, const struct gpt_model *m, const struct shape *s, bool flash, int l)
{
	const struct gpt_config *c = &m->lc;
	const struct transformer_layer_spec *sp = &m->lp[l].spec;
	size_t qkv = (s->a + 2 * s->g) * s->k, ak = s->a * s->k;
	lin_fwd(w, s->half, s->N, s->h, qkv);
	attn_fwd(w, s, flash);
	lin_fwd(w, s->half, s->N, ak, s->h);
	if (sp->mlp == LAYER_MLP_MOE) {
		size_t fm = (size_t)c->moe_f, fs = (size_t)c->shared_f, n = expert_rows(m, s);
		lin_fwd(w, s->half, s->N, s->h, (size_t)c->E); /* the router */
		lin_fwd(w, s->half, n, s->h, sp->swiglu ? 2 * fm : fm);
		lin_fwd(w, s->half, n, fm, s->h);
		if (sp->shared_expert) {
			lin_fwd(w, s->half, s->N, s->h, sp->swiglu ? 2 * fs : fs);
			lin_fwd(w, s->half, s->N, fs, s->h);
		}
	} else {
		size_t f = (size_t)c->f;
		lin_fwd(w, s->half, s->N, s->h, sp->swiglu ? 2 * f : f);
		lin_fwd(w, s->half, s->N, f, s->h);
	}
}

static void layer_bwd(struct cuda_ws *w, const struct gpt_model *m, const struct shape *s, bool flash, int l)
{
	const struct gpt_config *c = &m->lc;
	const struct transformer_layer_spec *sp = &m->lp[l].spec;
	size_t qkv = (s->a + 2 * s->g) * s->k, ak = s->a * s->k;
	bool rms = sp->norm == LAYER_RMSNORM;
	/* a recomputed forward repeats the forward's requests: nothing new */
	if (sp->mlp == LAYER_MLP_MOE) {
		size_t fm = (size_t)c->moe_f, fs = (size_t)c->shared_f, n = expert_rows(m, s);
		if (sp->shared_expert) {
			lin_bwd(w, s->half, s->N, fs, s->h, true, false);
			lin_bwd(w, s->half, s->N, s->h, sp->swiglu ? 2 * fs : fs, true, false);
		}
		lin_bwd(w, s->half, n, fm, s->h, true, false);
		lin_bwd(w, s->half, n, s->h, sp->swiglu ? 2 * fm : fm, true, false);
		/* the router: the input's gradient on tensor-parallel rank 0 */
		lin_bwd(w, s->half, s->N, s->h, (size_t)c->E, true, false);
	} else {
		size_t f = (size_t)c->f;
		lin_bwd(w, s->half, s->N, f, s->h, true, sp->fc_bias);
		lin_bwd(w, s->half, s->N, s->h, sp->swiglu ? 2 * f : f, true, sp->fc_bias);
	}
	norm_bwd(w, rms, s->Nl, s->h);
	lin_bwd(w, s->half, s->N, ak, s->h, true, sp->proj_bias);
	attn_bwd(w, s, flash);
	lin_bwd(w, s->half, s->N, s->h, qkv, true, sp->qkv_bias);
	norm_bwd(w, rms, s->Nl, s->h);
}

void cuda_ws_model(struct cuda_ws *w, const struct gpt_model *m, bool half)
{
	const struct gpt_config *c = &m->lc;
	struct shape s = { .half = half, .B = (size_t)m->B, .T = (size_t)c->S, .Nl = (size_t)m->Nl,
			   .h = (size_t)c->h, .a = (size_t)c->a, .g = (size_t)c->g, .k = (size_t)c->k };
	s.N = s.B * s.T;
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
