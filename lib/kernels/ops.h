/*
 * ops.h - the compute op table: every piece of arithmetic the model, the
 * optimizer and the training loop do on tensors goes through one of these
 * function pointers (docs/design.md, "One op table, two backends"). The CPU
 * backend (cpu_*.c, OpenBLAS + OpenMP) is the reference; the CUDA backend
 * (cuda_ops.h) fills the same table with the same semantics, so nothing
 * above lib/kernels knows which device it runs on.
 *
 * Conventions, for every op:
 *   - fp32, row-major, contiguous. "N" is a row count (tokens = B*T), "C" a
 *     row width. Activations are [B, T, ...] (batch-major).
 *   - Forward and backward sit side by side, as in llm.c.
 *   - Gradients of PARAMETERS (dweight, dbias, dwte, ...) ACCUMULATE (+=), so
 *     micro-batches add into the same grad buffer.
 *   - Gradients of INPUTS (dinp, dq, dqkv, ...) are OVERWRITTEN (=). A NULL
 *     input-gradient pointer means "not needed" and skips that work.
 *   - Buffers marked "may alias" may be the same pointer; all others must not
 *     overlap.
 *   - Random ops (dropout) are counter based: the mask is a pure function of
 *     (seed, offset + element index), so backward regenerates it instead of
 *     storing it, results do not depend on thread count, and a resumed run
 *     draws the same masks.
 */
#ifndef MEGAC_KERNELS_OPS_H
#define MEGAC_KERNELS_OPS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum kops_gelu {
	KOPS_GELU_TANH, /* 0.5x(1+tanh(0.79788456 x (1+0.044715 x^2))), Megatron's bias-gelu fusion */
	KOPS_GELU_ERF,  /* 0.5x(1+erf(x/sqrt2)), exact; Megatron with --disable-bias-linear */
};

enum kops_round {
	KOPS_ROUND_BF16, /* round-to-nearest-even to bfloat16 */
	KOPS_ROUND_FP16, /* round-to-nearest-even to IEEE half (overflow -> inf) */
};

/* The storage format of one of the optimizer's states (Megatron's
 * precision-aware optimizer, --main-params-dtype, --exp-avg-dtype,
 * --exp-avg-sq-dtype, as Transformer Engine's FusedAdam keeps them): fp32;
 * bf16, narrow()'s 16 bits; or fp16 with a scale per segment: the stored
 * value times the scale is the state, and after each step the scale
 * becomes the segment's largest magnitude over 65504/2, so the 16 bits
 * hold small values (Adam's second moment) without flushing them to zero. */
enum kops_dtype { KOPS_F32, KOPS_BF16, KOPS_FP16 };

/* A run of elements of the flat parameter buffers, for the whole-model ops
 * (sumsq_segs, adamw_segs): elements [off, off + n). */
struct kops_seg {
	size_t off, n;
	bool decay; /* AdamW: weight decay applies to this run */
};

/* adamw_segs_lp's state: the shard's main weights p and moments m, v at
 * [off - mv_base] as adamw_segs has them, each in its format (fp32: float,
 * 16-bit: uint16_t words); scale: host memory, three floats per segment
 * (p, m, v; 1 to start with), read and updated where the format is fp16;
 * w16: NULL, or the model's 16-bit weights at [off] (indexed like the
 * gradients), each written as narrow(p, w16_kind) of the updated fp32 main
 * weight before that is stored in its own format (Megatron's copy of the
 * main weights into the model, in the same pass). */
struct kops_adamw_lp {
	void *p, *m, *v;
	enum kops_dtype p_type, m_type, v_type;
	float *scale;
	uint16_t *w16;
	enum kops_round w16_kind;
};

/* FP8 (docs/fp8.md). The two formats Transformer Engine trains with:
 * E4M3 (float8_e4m3fn: no infinities, largest 448) and E5M2 (largest
 * 57344, IEEE-like). The casts, the scale rules and their edge cases are
 * lib/kernels/fp8.h's, which both backends compile. */
enum kops_fp8 { KOPS_E4M3, KOPS_E5M2 };

/* How fp8_quantize finds each block's scale (the value x is multiplied by
 * before the cast; the tensor keeps its inverse, the dequantization scale):
 *  GIVEN: one scale for the whole tensor, passed in (the delayed and the
 *         tensorwise recipes; block = the whole tensor);
 *  AMAX:  per block, fp8_scale_from_amax(amax of the block, format's max,
 *         pow2) (Transformer Engine's compute_scale_from_amax; the
 *         blockwise recipe, 1x128 and 128x128 blocks);
 *  MX:    per block, the E8M0 scale of MXFP8: the decoding scale is
 *         2^(fp8_e8m0_from(amax * (1/max)) - 127) (fp8.h);
 *  TENSOR: the tensorwise recipe's scale (TE's current scaling) found by
 *         the op: AMAX without pow2, except that a quotient that overflows
 *         becomes FLT_MAX (TE's value there) rather than bf16's largest
 *         (the blockwise recipe's); one block in the recipes. */
enum kops_fp8_scaling { KOPS_FP8_GIVEN, KOPS_FP8_AMAX, KOPS_FP8_MX, KOPS_FP8_TENSOR };

/* A quantized matrix: codes q[rows, cols] (one byte each, row-major) in
 * blocks of br x bc values (the last block of a row or column may be
 * short), block (i, j) with dequantization scale sinv[i * ceil(cols/bc) +
 * j]; deq(t)[r, c] = fp8_to_f32(q[r, c]) * sinv[r/br][c/bc]. q and sinv
 * are this backend's memory. */
struct kops_fp8_tensor {
	uint8_t *q;
	float *sinv;
	int rows, cols, br, bc;
	enum kops_fp8 fmt;
};

/* fp8_quantize's choices (see enum kops_fp8_scaling) */
struct kops_fp8_quant {
	enum kops_fp8_scaling how;
	float scale; /* GIVEN: the scale (> 0, finite) */
	bool pow2;   /* AMAX: scales rounded down to powers of two */
	bool transpose; /* x is [cols, rows] and t gets x^T (the columnwise copy
			 * a GEMM over the other dimension needs) */
};

struct kops {
	const char *name; /* "cpu", "cuda" */
	bool counts_only; /* report_memory's plan: buffers are counted, none holds data,
			   * so set-up skips filling its tables */
	bool flash;       /* attention_block_* is this backend's fast attention: a model
			   * keeps each row's log-sum-exp instead of probs[B,a,T,T] where
			   * it can (no document masks) */
	bool w16_direct;  /* linear_*_w16 and embedding_forward_w16 multiply and read
			   * the 16-bit words as they are (the CUDA half tables): a
			   * --bf16/--fp16 model hands them its own weights and keeps no
			   * fp32 copy of any; elsewhere the model widens each tensor
			   * into an fp32 view for the fp32 ops (the CPU converts at
			   * its kernels' edges) */

	/* ---- memory (device memory for this backend; host memory on the CPU) ---- */
	void *(*alloc)(size_t bytes);          /* zero-filled; dies on failure */
	void (*free)(void *p);
	void (*to_host)(void *dst, const void *src, size_t bytes);
	void (*to_device)(void *dst, const void *src, size_t bytes);
	void (*zero)(float *x, size_t n);
	/* bytes from one buffer of this backend to another (not overlapping) */
	void (*copy)(void *dst, const void *src, size_t bytes);
	/* rows runs of width bytes, the r-th from src + r * spitch to dst + r *
	 * dpitch (byte pitches, both of this backend, not overlapping): a
	 * column block of a row-major matrix in one call (cudaMemcpy2D on a GPU) */
	void (*copy_rows)(void *dst, size_t dpitch, const void *src, size_t spitch, size_t width, size_t rows);
	/* Host memory for staging transfers to and from this backend (page-locked
	 * on a GPU, so copies run at full speed); zero-filled, dies on failure. */
	void *(*host_alloc)(size_t bytes);
	void (*host_free)(void *p);

	/* ---- linear layer: out[N,OC] = inp[N,IC] . weight[OC,IC]^T (+ bias[OC]) ----
	 * bias may be NULL. Backward: dinp = dout . weight; dweight += dout^T . inp;
	 * dbias += column sums of dout. dinp, dbias may be NULL. */
	void (*linear_forward)(float *out, const float *inp, const float *weight, const float *bias,
			       int N, int IC, int OC);
	void (*linear_backward)(float *dinp, float *dweight, float *dbias, const float *dout,
				const float *inp, const float *weight, int N, int IC, int OC);

	/* ---- the linear layer on 16-bit weights ----
	 * linear_forward and linear_backward with weight[OC,IC] given as
	 * narrow()'s words of kind (a --bf16/--fp16 model's own weights): the
	 * results are those of the fp32 ops on widen(weight). The CPU's versions
	 * compute exactly that, through a widened copy; a table with w16_direct
	 * hands the words to its GEMMs as they are. */
	void (*linear_forward_w16)(float *out, const float *inp, const uint16_t *weight, const float *bias, int N,
				   int IC, int OC, enum kops_round kind);
	void (*linear_backward_w16)(float *dinp, float *dweight, float *dbias, const float *dout, const float *inp,
				    const uint16_t *weight, int N, int IC, int OC, enum kops_round kind);

	/* ---- embedding: out[n] = wte[tokens[n]] (+ wpe[positions[n]]) ----
	 * wpe/positions may be NULL (RoPE models). Token ids are in [0, V), or -1
	 * for a token outside this rank's vocabulary shard (a zero row; no grad).
	 * dwte may be NULL. */
	void (*embedding_forward)(float *out, const int32_t *tokens, const int32_t *positions,
				  const float *wte, const float *wpe, int N, int C);
	void (*embedding_backward)(float *dwte, float *dwpe, const float *dout, const int32_t *tokens,
				   const int32_t *positions, int N, int C);
	/* embedding_forward with wte given as narrow()'s words of kind: each
	 * row widened as it is read, so out equals embedding_forward on
	 * widen(wte) bit for bit (wpe stays fp32) */
	void (*embedding_forward_w16)(float *out, const int32_t *tokens, const int32_t *positions,
				      const uint16_t *wte, const float *wpe, int N, int C, enum kops_round kind);

	/* ---- LayerNorm over the last dim: out = (x-mean)*rstd*w + b ----
	 * mean[N], rstd[N] are saved for backward. b may be NULL (then db ignored). */
	void (*layernorm_forward)(float *out, float *mean, float *rstd, const float *inp,
				  const float *w, const float *b, int N, int C, float eps);
	void (*layernorm_backward)(float *dinp, float *dw, float *db, const float *dout,
				   const float *inp, const float *w, const float *mean,
				   const float *rstd, int N, int C);

	/* ---- RMSNorm: out = x * rstd * w, rstd = 1/sqrt(mean(x^2)+eps) ---- */
	void (*rmsnorm_forward)(float *out, float *rstd, const float *inp, const float *w, int N,
				int C, float eps);
	void (*rmsnorm_backward)(float *dinp, float *dw, const float *dout, const float *inp,
				 const float *w, const float *rstd, int N, int C);

	/* ---- GELU, elementwise over n values. out may alias inp. ---- */
	void (*gelu_forward)(float *out, const float *inp, size_t n, enum kops_gelu kind);
	/* dinp may alias dout. */
	void (*gelu_backward)(float *dinp, const float *dout, const float *inp, size_t n,
			      enum kops_gelu kind);

	/* ---- SwiGLU: inp[N, 2F] = [gate | up] per row; out[N,F] = silu(gate) * up ---- */
	void (*swiglu_forward)(float *out, const float *inp, int N, int F);
	void (*swiglu_backward)(float *dinp, const float *dout, const float *inp, int N, int F);

	/* ---- fused QKV split (+ RoPE) ----
	 * qkv[B,T,(a+2g)*k] holds, per token, g query groups, each [m query heads; key; value]
	 * with m = a/g heads and k channels per head (Megatron's layout). Writes
	 * q[B,a,T,k], kk[B,g,T,k], v[B,g,T,k]. When rot > 0, RoPE is applied to the
	 * first rot channels of every q and k head using cos/sin tables of shape
	 * [T, rot] (rope_table in rope_scaling.h builds them, in the layout asked):
	 * y = x cos + rotate(x) sin. Rotate-half (interleaved false, Megatron's
	 * default) pairs channel i with i + rot/2: rotate(x)[i] = -x[i + rot/2],
	 * rotate(x)[i + rot/2] = x[i] for i < rot/2. Interleaved
	 * (--rotary-interleaved) pairs 2i with 2i + 1: rotate(x)[2i] = -x[2i+1],
	 * rotate(x)[2i+1] = x[2i]. The tables are used as given (a scale such as
	 * YaRN's is in them). Backward is the exact inverse map (the transpose of
	 * the rotation): it writes all of dqkv from dq, dk, dv. */
	void (*qkv_split_forward)(float *q, float *kk, float *v, const float *qkv, const float *cos,
				  const float *sin, int B, int T, int a, int g, int k, int rot, bool interleaved);
	void (*qkv_split_backward)(float *dqkv, const float *dq, const float *dk, const float *dv,
				   const float *cos, const float *sin, int B, int T, int a, int g,
				   int k, int rot, bool interleaved);

	/* ---- causal self-attention with grouped K/V ----
	 * q[B,a,T,k], kk/v[B,g,T,k] -> out[B,T,a*k] (heads major within a token, ready
	 * for linear_proj). Query head h uses K/V group h/(a/g). scores = q.k^T * scale,
	 * causal mask (key position <= query position), and when doc is not NULL also
	 * doc[b,tq] == doc[b,tk] (Megatron's --reset-attention-mask). softmax in fp32;
	 * probs[B,a,T,T] (pre-dropout) are saved for backward. With dropout_p > 0 each
	 * prob is dropped with probability p and the survivors scaled by 1/(1-p), the
	 * mask drawn from (seed, offset + ((h*B+b)*T+tq)*T+tk): head-major, so a rank
	 * holding heads h0.. of a tensor-parallel model passes offset + h0*B*T*T and
	 * draws the masks the whole model would.
	 * Sliding window (Megatron's --window-size, flash attention's
	 * window_size[0]): window >= 0 also hides the keys more than window
	 * positions back, so query tq sees tq - window <= tk <= tq (window + 1
	 * keys at most); window < 0 is no window. The probs outside it are 0, so
	 * attention_backward, which takes them from probs, needs no window. */
	void (*attention_forward)(float *out, float *probs, const float *q, const float *kk,
				  const float *v, const int32_t *doc, int B, int T, int a, int g,
				  int k, float scale, int window, float dropout_p, uint64_t seed,
				  uint64_t offset);
	void (*attention_backward)(float *dq, float *dk, float *dv, const float *dout,
				   const float *q, const float *kk, const float *v,
				   const float *probs, int B, int T, int a, int g, int k, float scale,
				   float dropout_p, uint64_t seed, uint64_t offset);

	/* ---- residual: out = residual + dropout(x), n values ----
	 * Element i is kept with probability 1-p (mask from (seed, offset+i)); kept values
	 * are scaled by 1/(1-p). p == 0 is a plain add. out may alias residual or x. */
	void (*dropout_add_forward)(float *out, const float *residual, const float *x, size_t n,
				    float p, uint64_t seed, uint64_t offset);
	/* dx = dropout mask applied to dout (the residual's grad is dout itself).
	 * dx may alias dout. */
	void (*dropout_backward)(float *dx, const float *dout, size_t n, float p, uint64_t seed,
				 uint64_t offset);

	/* ---- softmax cross-entropy over V classes per row ----
	 * losses[n] = logsumexp(logits[n]) - logits[n][targets[n]]; lse[n] is saved.
	 * Backward: dlogits[n] = (softmax(logits[n]) - onehot(targets[n])) * dloss[n]
	 * with softmax taken against the given lse; dlogits may alias logits.
	 * Vocabulary-parallel use: a target of -1 (in another rank's shard) gives
	 * losses[n] = lse[n] and no one-hot; the caller combines the shards' lse
	 * and passes the global one to backward. */
	void (*xent_forward)(float *losses, float *lse, const float *logits,
			     const int32_t *targets, int N, int V);
	void (*xent_backward)(float *dlogits, const float *logits, const float *lse,
			      const int32_t *targets, const float *dloss, int N, int V);

	/* ---- vector helpers ---- */
	void (*add)(float *out, const float *a, const float *b, size_t n);      /* may alias */
	void (*scale)(float *x, float s, size_t n);                             /* x *= s */
	double (*sumsq)(const float *x, size_t n);        /* sum of squares, in double */
	int (*nonfinite)(const float *x, size_t n);       /* 1 if any inf/NaN */
	/* out = x rounded to bf16/fp16 and back to fp32 (the half-precision model copy). */
	void (*round)(float *out, const float *x, size_t n, enum kops_round kind);
	/* 16-bit storage (the --bf16/--fp16 model weights): narrow writes x
	 * rounded as round() does, as the format's 16 bits (bf16: the top half of
	 * the float; fp16: IEEE binary16); widen reads them back, exactly, so
	 * widen(narrow(x)) == round(x) bit for bit. */
	void (*narrow)(uint16_t *out, const float *x, size_t n, enum kops_round kind);
	void (*widen)(float *out, const uint16_t *x, size_t n, enum kops_round kind);

	/* ---- AdamW (Megatron/torch semantics, decoupled weight decay) ----
	 * For each i: p *= 1 - lr*wd; m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
	 * p -= lr * (m / (1-b1^step)) / (sqrt(v / (1-b2^step)) + eps). step >= 1. */
	void (*adamw)(float *p, const float *g, float *m, float *v, size_t n, float lr, float b1,
		      float b2, float eps, float wd, int step);

	/* ---- mixture of experts: the weighted sum of the experts' rows ----
	 * out[t] = sum over j in [rowptr[t], rowptr[t+1]) of w[rows[j]] * y[rows[j]]
	 * (in that order; out[t] = 0 for a token without rows), y[R, C], out[N, C].
	 * Backward: dy[r] = w[r] * dout[tok[r]] and dw[r] = sum_c dout[tok[r], c] *
	 * y[r, c] (summed in double), both overwritten; tok[r] is row r's token.
	 * The index arrays are this backend's memory. */
	void (*moe_combine_forward)(float *out, const float *y, const float *w, const int32_t *rowptr,
				    const int32_t *rows, int N, int C);
	void (*moe_combine_backward)(float *dy, float *dw, const float *dout, const float *y, const float *w,
				     const int32_t *tok, int R, int C);

	/* ---- the whole model in one call (the optimizer: one launch on a GPU
	 * instead of one per tensor, and one host synchronisation per norm) ----
	 * sumsq_segs: the sum over segments, in order, of sumsq(x + off, n).
	 * adamw_segs: adamw on every segment of g (at g + off), with the
	 * parameters and Adam's state of the shard that starts at mv_base:
	 * p + (off - mv_base), m + (off - mv_base), v + (off - mv_base) (the
	 * optimizer's fp32 main weights and moments), and weight decay wd on the
	 * segments marked decay (0 on the others). */
	double (*sumsq_segs)(const float *x, const struct kops_seg *segs, int nsegs);
	void (*adamw_segs)(float *p, const float *g, float *m, float *v, size_t mv_base,
			   const struct kops_seg *segs, int nsegs, float lr, float b1, float b2, float eps,
			   float wd, int step);
	/* adamw_segs on states kept in their formats (struct kops_adamw_lp):
	 * every element is read (widened, times its segment's scale), updated
	 * in fp32 exactly as adamw does it, and stored rounded to its format
	 * (RNE); an fp16 state of a segment first gets its new scale, the
	 * largest updated magnitude / 32752 (0 when all are 0), and stores
	 * value * (1 / scale) (Transformer Engine's FusedAdam; the update is
	 * computed twice rather than kept in an fp32 copy). With three fp32
	 * states and no w16 it is adamw_segs, bit for bit. */
	void (*adamw_segs_lp)(const struct kops_adamw_lp *s, const float *g, size_t mv_base,
			      const struct kops_seg *segs, int nsegs, float lr, float b1, float b2, float eps,
			      float wd, int step);

	/* ---- FP8 (docs/fp8.md) ----
	 * fp8_amax: *amax = max |x[i]| over n values (NaN when any is NaN;
	 * 0 when n is 0), amax in this backend's memory.
	 * fp8_quantize: t->q and t->sinv from x (fp32, t->rows x t->cols, or
	 * its transpose with how->transpose), each value cast as
	 * fp8_from_f32(x * scale, t->fmt) (round to nearest even, saturating
	 * to the format's largest finite value; NaN stays NaN). amax: NULL,
	 * or this backend's float raised to max |x| over the whole tensor:
	 * *amax = max(|*amax|, max |x|), compared as bit patterns (a NaN
	 * wins), so the delayed recipe's history entry gathers every use of a
	 * tensor without a trip to the host; the caller zeroes it.
	 * fp8_gemm: out[M, N] = sum_k deq(a)[m, k] * deq(b)[n, k] (+ bias[n]),
	 * a [M, K], b [N, K] (both K-contiguous, cuBLASLt's "TN"), with fp32
	 * accumulation; accumulate: out += the product (bias must be NULL).
	 * The CPU dequantizes in fp32 and multiplies; a GPU multiplies the
	 * codes and applies the scales (the order of the sums may differ).
	 * fp8_transpose: dst = src^T, codes and scales: dst->q[c * R + r] =
	 * src->q[r * C + c] for src R x C; dst is C x R with br/bc swapped and
	 * its sinv grid the transpose of src's ([ceil(R/br)][ceil(C/bc)] ->
	 * [ceil(C/bc)][ceil(R/br)]). The caller fills dst's rows, cols, br, bc,
	 * fmt, q, sinv (dst->rows == src->cols etc. are checked: a BUG otherwise).
	 * Exact: dequantizing dst gives the transpose of dequantizing src.
	 * dst and src must not overlap. */
	void (*fp8_amax)(float *amax, const float *x, size_t n);
	void (*fp8_quantize)(const struct kops_fp8_tensor *t, const float *x, const struct kops_fp8_quant *how,
			     float *amax);
	void (*fp8_gemm)(float *out, const struct kops_fp8_tensor *a, const struct kops_fp8_tensor *b,
			 const float *bias, bool accumulate);
	void (*fp8_transpose)(const struct kops_fp8_tensor *dst, const struct kops_fp8_tensor *src);
	/* The blockwise recipe's weights cast shard by shard (--fp8-param-gather
	 * under the distributed optimizer): every rank raises the block amaxes
	 * over its range, the maxima are reduced over the ranks, then every rank
	 * casts its range with the blocks' scales.
	 * fp8_amax_blocks: raise amax[nbr * nbc] (nbr = ceil(t->rows / t->br),
	 * nbc likewise, row-major; backend memory) with the max |x| of each
	 * block over x[0..n), which are the elements [start, start + n) of the
	 * row-major t->rows x t->cols tensor t describes (only rows, cols, br,
	 * bc are read). "Raise" as fp8_quantize's amax output: the max of
	 * the bit patterns of |value| (a NaN wins), so partial maxima combine.
	 * A block none of whose elements is in the range is not written.
	 * fp8_quantize_blocks: from the block amaxes amax[nbr * nbc] (reduced,
	 * the same on every rank), each block's scale and sinv as
	 * fp8_quantize's KOPS_FP8_AMAX finds them (fp8_block_scale with
	 * pow2), every block's sinv into t->sinv, and the codes of x[0..n)
	 * (elements [start, start + n) of t) into t->q[start .. start + n),
	 * code = fp8_from_f32(x * scale of its block, t->fmt). Elements of t
	 * outside the range are not written. With start 0 and n = rows x cols
	 * it gives fp8_quantize KOPS_FP8_AMAX's codes and scales bit for bit.
	 * Both: start + n > rows x cols is a BUG. */
	void (*fp8_amax_blocks)(float *amax, const float *x, size_t n, size_t start, const struct kops_fp8_tensor *t);
	void (*fp8_quantize_blocks)(const struct kops_fp8_tensor *t, const float *x, size_t n, size_t start,
				    const float *amax, bool pow2);

	/* ---- one block of causal attention on global positions (context parallelism) ----
	 * Queries q[B,a,Tq,k] sit at global positions qpos[Tq], keys and values
	 * kk/v[B,g,Tk,k] at kpos[Tk] (int32, this backend's memory; each list
	 * strictly increasing, all below S, the whole sequence's length). Query tq
	 * sees key tk when kpos[tk] <= qpos[tq]; GQA and scale as attention_forward.
	 * window as attention_forward's, on the global positions: query tq sees
	 * key tk when qpos[tq] - window <= kpos[tk] <= qpos[tq] (window < 0: no
	 * lower bound). doc: NULL, or doc[b*S + p] the document id of global
	 * position p of sample b (int32, this backend's memory; the whole
	 * sequence's ids, not this block's); query tq then also needs
	 * doc[b*S + qpos[tq]] == doc[b*S + kpos[tk]] to see key tk (packed
	 * sequences, attention_forward's doc on global positions). A row that sees
	 * no key of the block follows the rules below (out 0, lse -inf).
	 * Blocks of a query range whose keys are all in its future,
	 * or all behind its window, cost no attention work (a backend may still
	 * convert its inputs, as the CUDA half tables do).
	 *
	 * Forward merges this key block into out[B,Tq,a*k] and lse[B,a,Tq] (the
	 * log-sum-exp of each row's scaled scores over the keys merged so far).
	 * accumulate 0: both are overwritten by this block alone (a row that sees
	 * no key gets out 0, lse -inf). accumulate 1: the online-softmax rule
	 *   lse' = log(e^lse + e^lse_blk),  out' = out e^(lse-lse') + out_blk e^(lse_blk-lse'),
	 * so running it over key blocks that partition a row's keys gives the out
	 * attention_forward gives, and the row's full log-sum-exp.
	 * Dropout: prob (h, b, tq, tk) is dropped by the draw at counter
	 *   offset + ((h*B+b)*S + qpos[tq])*S + kpos[tk],
	 * the one attention_forward uses on the whole sequence (T = S).
	 *
	 * Backward takes the finished out and lse of forward and ADDS this block's
	 * share to dq[B,a,Tq,k], dk and dv[B,g,Tk,k] (unlike attention_backward,
	 * which overwrites): the probs are recomputed from q, kk and lse, and
	 * rowsum(P * dP) is taken as rowsum(dout * out) (flash attention), which
	 * needs no other block. A NULL grad skips its work. */
	void (*attention_block_forward)(float *out, float *lse, const float *q, const float *kk,
					const float *v, const int32_t *qpos, const int32_t *kpos,
					const int32_t *doc, int B, int Tq, int Tk, int a, int g, int k, int S,
					float scale, int window, float dropout_p, uint64_t seed, uint64_t offset,
					int accumulate);
	void (*attention_block_backward)(float *dq, float *dk, float *dv, const float *dout,
					 const float *out, const float *lse, const float *q,
					 const float *kk, const float *v, const int32_t *qpos,
					 const int32_t *kpos, const int32_t *doc, int B, int Tq, int Tk,
					 int a, int g, int k, int S, float scale, int window, float dropout_p,
					 uint64_t seed, uint64_t offset);

	/* ---- Mamba-2 (SSD) mixer (docs/mamba.md) ----
	 * OPTIONAL ops: a backend may leave them NULL (kops_check does not ask
	 * for them; kops_op_optional). The CPU has them; a model that needs them
	 * checks the pointers when it is built.
	 *
	 * ssm_conv: the causal depthwise convolution over time, with bias and
	 * SiLU, that the mixer runs on xBC. x[B,T,C] (channels last), w[C,W]
	 * (1 <= W <= 64; tap j of channel c at w[c*W + j]; tap W-1 meets the
	 * current step), bias[C] (may be NULL: none), hist[B,W-1,C] (may be
	 * NULL: zeros) the W-1 inputs before t = 0 (a server's conv state):
	 *   pre[b,t,c] = bias[c] + sum_{j<W} w[c,j] * xe[b, t-(W-1)+j, c]
	 *   out[b,t,c] = silu(pre) = pre * sigmoid(pre)
	 * with xe the sequence hist ++ x. Nothing is saved: backward recomputes
	 * pre. Backward (same hist): dx = (overwritten) d/dx, dw += d/dw,
	 * dbias += d/dbias; dx, dw, dbias may each be NULL (skipped); no
	 * gradient flows to hist. No buffer aliases another. */
	void (*ssm_conv_forward)(float *out, const float *x, const float *hist, const float *w, const float *bias,
				 int B, int T, int C, int W);
	void (*ssm_conv_backward)(float *dx, float *dw, float *dbias, const float *dout, const float *x,
				  const float *hist, const float *w, const float *bias, int B, int T, int C, int W);

	/* ssd_scan: Mamba-2's selective scan (state space duality), H heads of
	 * P channels, G groups (H % G == 0; head h reads the B and C of group
	 * h / (H/G)), state size N:
	 *   x[B,T,H,P], dt[B,T,H] (raw), dt_bias[H], A_log[H], Bm[B,T,G,N],
	 *   Cm[B,T,G,N], D[H] (may be NULL: no skip term),
	 *   state_in[B,H,P,N] (may be NULL: zeros)
	 *   -> y[B,T,H,P], state_out[B,H,P,N] (may be NULL: not wanted).
	 * Per (b, h), with A = -exp(A_log[h]) and s the state [P,N]:
	 *   d_t  = softplus(dt[b,t,h] + dt_bias[h])   (torch's: x > 20 gives x)
	 *   s_t  = exp(d_t A) s_{t-1} + d_t x_t Bm_t^T,   s_{-1} = state_in
	 *   y_t  = s_t Cm_t + D[h] x_t,                   state_out = s_{T-1}
	 * (no clamp of d_t: Megatron's dt limits (0, inf)). chunk (> 0) is the
	 * SSD chunk length (Megatron's mixer chunk_size, 128): a backend may
	 * compute the scan chunk by chunk; results depend on it only through
	 * rounding. The CPU runs the recurrence above and uses chunk only as the
	 * backward's recompute interval. Nothing is saved: backward recomputes
	 * the states from the inputs. state_out may alias state_in (a server's
	 * state advanced in place); no other buffers alias.
	 * Backward: dy[B,T,H,P] and dstate_out[B,H,P,N] (may be NULL: zero) in;
	 * input grads dx, ddt, dBm, dCm, dstate_in OVERWRITTEN; parameter grads
	 * ddt_bias, dA_log, dD ACCUMULATE (dA_log is by A_log, the parameter:
	 * d/dA_log = A d/dA). Any grad may be NULL (skipped; dD is ignored when
	 * D is NULL; dstate_in is the gradient by the initial state also when
	 * state_in is NULL, by its zeros). No buffer aliases another. */
	void (*ssd_scan_forward)(float *y, float *state_out, const float *x, const float *dt, const float *dt_bias,
				 const float *A_log, const float *Bm, const float *Cm, const float *D,
				 const float *state_in, int B, int T, int H, int P, int G, int N, int chunk);
	void (*ssd_scan_backward)(float *dx, float *ddt, float *ddt_bias, float *dA_log, float *dBm, float *dCm,
				  float *dD, float *dstate_in, const float *dy, const float *dstate_out, const float *x,
				  const float *dt, const float *dt_bias, const float *A_log, const float *Bm,
				  const float *Cm, const float *D, const float *state_in, int B, int T, int H, int P,
				  int G, int N, int chunk);

	/* gated_rmsnorm: the mixer's output norm (mamba_ssm's gated RMSNorm,
	 * norm_before_gate False, as Megatron builds it): rows y[N,C] gated by
	 * z[N,C] (may be NULL: no gate), each row cut into ngroups groups of
	 * C/ngroups channels (C % ngroups == 0) normalised separately:
	 *   g = y * silu(z),  rstd[n,k] = 1/sqrt(mean over group k of g^2 + eps),
	 *   out = g * rstd * w    (w[C], eps 1e-5 in Megatron's mixer)
	 * rstd[N*ngroups] is saved for backward. Backward: dy, dz OVERWRITTEN
	 * (NULL: skipped; dz ignored without z), dw ACCUMULATES (may be NULL).
	 * out may alias y (forward); dy may alias dout (backward). */
	void (*gated_rmsnorm_forward)(float *out, float *rstd, const float *y, const float *z, const float *w, int N,
				      int C, int ngroups, float eps);
	void (*gated_rmsnorm_backward)(float *dy, float *dz, float *dw, const float *dout, const float *y,
				       const float *z, const float *w, const float *rstd, int N, int C, int ngroups);
};

/* The CPU backend (always present). */
const struct kops *kops_cpu(void);

/* The name of the first op that k leaves NULL, or NULL when every op is
 * there (optional ops aside); kops_check(k) makes a missing op a BUG
 * naming it and the table.
 * Every table is checked when it is built (the CPU, CUDA and half tables,
 * the profiling wrapper); the counting table of report_memory, which has
 * only the memory ops, is not a table to compute with. kops_count() and
 * kops_op_name(i) list the ops (tests). */
const char *kops_missing(const struct kops *k);
void kops_check(const struct kops *k);
int kops_count(void);
const char *kops_op_name(int i);
/* op i is one a backend may leave NULL (the Mamba-2 section): kops_missing
 * passes over it */
bool kops_op_optional(int i);
/* op i of k as a generic function pointer (NULL when missing): which
 * function a table holds, to compare tables */
typedef void (*kops_fn)(void);
kops_fn kops_op(const struct kops *k, int i);

/* RoPE tables for positions 0..T-1: cos/sin[t, j] for j < rot, with
 * inv_freq[i] = base^(-2i/rot) and the frequencies repeated [f, f] across the
 * rot channels (Megatron's non-interleaved layout). Host memory, fp32. The
 * other layouts and scalings: rope_table (rope_scaling.h). */
void kops_rope_table(float *cos, float *sin, int T, int rot, float base);

/* The counter-based uniform draw in [0,1) that dropout uses: exposed so tests
 * and reference scripts can reproduce masks. */
float kops_uniform(uint64_t seed, uint64_t counter);

/* Normal(0, 1) draw from the same counter-based generator (parameter init). */
float kops_normal(uint64_t seed, uint64_t counter);

#endif
