/*
 * gpt_int.h - what the files of the model share, not its users: the pass
 * a layer runs in, the building blocks (linear layers, norms, half
 * rounding), tensor-parallel mappings, and each module's register /
 * forward / backward. Megatron Core's seams, one file each:
 *
 *   gpt.c               GPTModel: set-up, the chunk loop, output layer, serving
 *   embedding.c         LanguageModelEmbedding: vocabulary-parallel words, positions
 *   transformer_layer.c TransformerLayer: norm, attention, residual, norm, MLP or MoE, residual
 *   attention.c         SelfAttention: linear_qkv, RoPE, core attention (one rank, flash,
 *                       ring over CP, or the serving key/value cache), linear_proj
 *   mlp.c               MLP: linear_fc1, activation, linear_fc2
 *   moe/moe_layer.c     MoELayer: router, token dispatcher, experts, shared expert
 *   moe/router.c        TopKRouter (host)
 *   moe/token_dispatcher.c  the all-to-all over expert parallelism
 *   moe/experts.c       the experts' MLPs on their rows
 *   tp_mappings.c       tensor_parallel/mappings: sums, SP gather / reduce-scatter, dropout by row
 *   layers.c            linear layers, norms, parameter registration with declared properties
 *   cross_entropy.c     vocabulary-parallel cross-entropy
 *   mtp.c               MultiTokenPredictionBlock: the depths after the decoder, their losses
 *   mamba_mixer.c       MambaMixer: a hybrid model's Mamba layer (in_proj, conv, scan, gated norm,
 *                       out_proj)
 *
 * No file keeps a "current" micro-batch: every forward and backward takes
 * the pass (struct gpt_pass) it works on.
 */
#ifndef MEGAC_MODEL_GPT_INT_H
#define MEGAC_MODEL_GPT_INT_H

#include "base/error.h"
#include "model/gpt.h"

/* One pass of a chunk's layers: the micro-batch (or serving step) it runs on. */
struct gpt_pass {
	struct gpt_slot *sl;   /* activations and inputs: tokens, positions, documents, dropout seed */
	int l0;                /* the chunk's first layer: layer l's activations are sl->acts[l - l0] */
	int B, T;              /* samples, and positions of each this rank holds */
	int N, Nl;             /* rows B*T, and this rank's rows of the residual stream */
	bool train;            /* dropout on */
	bool stats;            /* count the MoE statistics (a training forward, not a recompute) */
	const struct gpt_kv_step *kv; /* serving: attention against the cache; NULL in training */
};

#define SITE_SHIFT 40 /* 2^40 counters per dropout site: more than B*a*S*S ever reaches */

static inline uint64_t site_offset(int site)
{
	return (uint64_t)site << SITE_SHIFT;
}

/* Whether selective recompute drops module mod (GPT_RC_*) in training. */
static inline bool gpt_rc(const struct gpt_model *m, unsigned mod)
{
	return !m->kv && m->lc.recompute == GPT_RECOMPUTE_SELECTIVE && (m->lc.recompute_modules & mod);
}

/* ---- memory (gpt.c): every buffer noted, so gpt_free gives back what was taken */
void *gpt_take_bytes(struct gpt_model *m, size_t bytes);
float *gpt_take(struct gpt_model *m, size_t n);
/* the overlapped parameter gather's hook: before a parameter's first use */
void gpt_need_param(struct gpt_model *m, int idx);
/* Megatron-FSDP level >= 2: where parameter idx's gradient is while its unit's backward runs */
float *gpt_unit_grad(struct gpt_model *m, int idx);
/* After unit u's backward (tensors [first, end)): its gradients to the
 * shards and the buffer zeroed (nothing below level 2) */
void gpt_flush_unit(struct gpt_model *m, int u, int first, int end);

/* ---- building blocks (layers.c) */
/* Register a tensor with its properties declared here: a weight (NORMAL
 * init), a bias (zero, no weight decay), a norm's weight or bias (no
 * weight decay; summed over TP under SP, since each rank sees a sequence
 * shard). tp_axis: the axis TP splits, -1 replicated; flags: more. */
int reg_weight(struct gpt_model *m, const char *name, int64_t rows, int64_t cols, int tp_axis, float std,
	       unsigned flags);
int reg_bias(struct gpt_model *m, const char *name, int64_t n, int tp_axis, unsigned flags);
/* The same split by rows, which are n pieces of the given lengths that TP
 * splits one by one (params_add_pieces): SwiGLU's fc1 [gate; up], the Mamba
 * mixer's in_proj [z; x; B; C; dt]. */
int reg_weight_pieces(struct gpt_model *m, const char *name, int n, const int64_t *rows, int64_t cols, float std,
		      unsigned flags);
int reg_bias_pieces(struct gpt_model *m, const char *name, int n, const int64_t *len, unsigned flags);
int reg_norm(struct gpt_model *m, const char *name, const struct transformer_layer_spec *s, bool bias);
void round_half(struct gpt_model *m, float *x, size_t n);
void linear_fwd_raw(struct gpt_model *m, float *out, const float *inp, int w, int b, int N, int IC, int OC);
void linear_fwd(struct gpt_model *m, float *out, const float *inp, int w, int b, int N, int IC, int OC);
void linear_bwd(struct gpt_model *m, float *dinp, const float *dout, const float *inp, int w, int b, int N,
		int IC, int OC);
/* FP8 (fp8_linear.c): set-up after the weights, the free, a weight's slot
 * (-1: a bf16 layer), and the linear layer of a weight with a slot */
int gpt_fp8_init(struct gpt_model *m, const struct gpt_fp8_config *cfg);
void gpt_fp8_alloc(struct gpt_model *m);
/* --fp8-param-gather: lay the weight store out (m->soff; false without
 * it), whether tensor idx is kept as FP8 codes there, and a stored
 * weight's initial values (host fp32, rounded to bf16 and kept on the
 * host until gpt_main_values) */
bool gpt_fp8_store_layout(struct gpt_model *m);
bool gpt_fp8_stored(const struct gpt_model *m, int idx);
void gpt_fp8_keep_initial(struct gpt_model *m, int idx, const float *host);
void gpt_fp8_free(struct gpt_model *m);
int gpt_fp8_slot(const struct gpt_model *m, int w);
/* a forward of training (true) or of evaluation, which records no amax */
void gpt_fp8_training(struct gpt_model *m, bool train);
void fp8_linear_fwd(struct gpt_model *m, float *out, const float *inp, int w, int b, int N, int IC, int OC);
void fp8_linear_bwd(struct gpt_model *m, float *dinp, const float *dout, const float *inp, int w, int b, int N,
		    int IC, int OC);
void norm_fwd(struct gpt_model *m, float *out, float *mean, float *rstd, const float *inp, int w, int b, int N);
void norm_bwd(struct gpt_model *m, float *dinp, const float *dout, const float *inp, int w, int b,
	      const float *mean, const float *rstd, int N);
/* activation of fc1 (SwiGLU or GELU) and its backward: [N, f] */
void act_fwd(struct gpt_model *m, const struct transformer_layer_spec *s, float *act, const float *fc1, int N, int f);
void act_bwd(struct gpt_model *m, const struct transformer_layer_spec *s, float *dfc1, const float *dact,
	     const float *fc1, int N, int f);

/* ---- tensor-parallel mappings (tp_mappings.c) */
void tp_sum(struct gpt_model *m, float *x, size_t n);
void sp_gather(struct gpt_model *m, const struct gpt_pass *P, float *full, const float *shard);
void sp_reduce_scatter(struct gpt_model *m, const struct gpt_pass *P, float *shard, const float *full);
void seq_dropout(struct gpt_model *m, const struct gpt_pass *P, float *out, const float *res, const float *x,
		 float p, int site);
const float *seq_full(struct gpt_model *m, const struct gpt_pass *P, const float *ln);
const float *row_parallel(struct gpt_model *m, const struct gpt_pass *P, const float *inp, int w, int b, int IC);
const float *column_input_grad(struct gpt_model *m, const struct gpt_pass *P, float *dln);
const float *row_output_grad(struct gpt_model *m, const struct gpt_pass *P, const float *dres, float p, int site);
/* Fewer query groups than TP ranks (Megatron's get_query_key_value_tensors):
 * linear_qkv is split by rows like any column-parallel linear, so a rank's
 * share of its output is not its heads. qkv_gather gathers the shares
 * (s.qkv_part) of N rows over TP and keeps, per row, this rank's query heads
 * and its group's key and value, as one group [a/t q; k; v] (out); the
 * backward, qkv_scatter_grad, puts that gradient back in place and
 * reduce-scatters it into s.qkv_part, summing the key/value gradients of the
 * ranks that share a group. */
bool qkv_gathered(const struct gpt_model *m);
void qkv_gather(struct gpt_model *m, float *out, int N);
void qkv_scatter_grad(struct gpt_model *m, const float *dout, int N);

/* ---- the modules: register, forward, backward */
/* the embedding of the slot's tokens into out ([Nl, h], this rank's rows);
 * its backward from dres, the gradient of the first layer's input */
void embedding_forward(struct gpt_model *m, const struct gpt_pass *P, float *out);
void embedding_backward(struct gpt_model *m, const struct gpt_pass *P, const float *dres);

void attention_register(struct gpt_model *m, int l);
/* ln1: the input norm's output, all rows; leaves the attention's output
 * before the residual, this rank's rows ([Nl, h]), returned */
const float *attention_forward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A,
			       const float *ln1);
/* core attention alone (selective recompute reruns it) */
void core_attention_forward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A,
			    float p);
/* dattn: the gradient of the attention's output, all rows; leaves this
 * rank's share of dL/d(ln1) in m->s.dln */
void attention_backward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A,
			const float *dattn);

void mlp_register(struct gpt_model *m, int l);
/* ln2: the pre-MLP norm's output, all rows; returns the output where the
 * residual stream lives ([Nl, h], summed over TP) */
const float *mlp_forward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A,
			 const float *ln2);
/* its linear_fc1 and activation alone, into A (--recompute-modules mlp reruns them) */
void mlp_fc1_forward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A,
		     const float *ln2);
/* dout: the gradient of the output, all rows; leaves this rank's share of
 * dL/d(ln2) in m->s.dln */
void mlp_backward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A, const float *ln2,
		  const float *dout);

/* par's expert-tensor-parallel group (NULL: the experts split over TP)
 * and whether the layers dispatch (gpt_parallel) */
void moe_set_parallel(struct gpt_parallel *par, struct dist_group *etp);
void moe_register(struct gpt_model *m, int l);
struct gpt_moe_acts *moe_alloc_acts(struct gpt_model *m);
void moe_alloc_scratch(struct gpt_model *m, bool backward);
void moe_free(struct gpt_model *m);
const float *moe_forward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A,
			 const float *ln2);
void moe_backward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A, const float *ln2,
		  const float *dout);
/* selective recompute before moe_backward: what --recompute-modules moe,
 * moe_act and shared_experts dropped (ln2: the norm's output, all rows) */
void moe_recompute(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A,
		   const float *ln2);
/* room for the experts' activation of cap rows: a layer's own, or the one
 * every layer shares under --recompute-modules moe_act */
float *moe_take_act(struct gpt_model *m, size_t cap);
/* the experts (moe/experts.c) on rows [off[e], off[e+1]) of local expert e */
void moe_experts_forward(struct gpt_model *m, int l, const int32_t *off, const float *xin, float *fc1, float *act,
			 float *y);
void moe_experts_backward(struct gpt_model *m, int l, const int32_t *off, const float *dy, const float *xin,
			  const float *fc1, const float *act, float *dx);
/* the token dispatcher over expert parallelism (moe/token_dispatcher.c) */
size_t moe_rows_most(const struct gpt_model *m);
void moe_reserve(struct gpt_model *m, struct gpt_moe_acts *M, size_t rows);
void moe_plan_exchange(struct gpt_model *m, struct gpt_moe_acts *M, const struct moe_route *r, int T);
void moe_exchange(struct gpt_model *m, const struct gpt_moe_acts *M, float *out, const float *in, bool to_experts);

/* a hybrid model's Mamba layer (mamba_mixer.c): the mixer's parameters
 * (with its pre-norm, ln1), its activations and the scratch every Mamba
 * layer shares; forward from ln1, the norm's output (all rows), returns
 * out_proj's output where the residual stream lives; backward from dout,
 * dL/d(out_proj's output), leaves dL/d(ln1) in m->s.dln */
void mamba_register(struct gpt_model *m, int l);
void mamba_alloc_acts(struct gpt_model *m, struct gpt_layer_acts *A);
void mamba_alloc_scratch(struct gpt_model *m);
const float *mamba_forward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A,
			   const float *ln1);
void mamba_backward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A, const float *ln1,
		    const float *dout);
/* serving: the activations and scratch of a step's rows (A's mb_ fields),
 * and the forward of a serving step (P->kv), each sequence's new rows from
 * its slot's recurrent state in m->kv, which it advances */
void mamba_alloc_serving(struct gpt_model *m, struct gpt_layer_acts *A);
const float *mamba_cached_forward(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A,
				  const float *ln1);

void transformer_layer_register(struct gpt_model *m, int l);
/* a layer's activations; the buffers sh holds (NULL: none) are shared, not taken */
/* 16-bit saved activations (gpt.h, struct gpt_layer_stash): the work set's
 * buffers (the stashable fields, dense: with an MLP's), a layer's stash for
 * the fields of A that point into the work set, and the copy from A to the
 * stash after forward (save) or back before backward. */
void transformer_layer_alloc_work(struct gpt_model *m, struct gpt_layer_acts *W, bool dense);
void transformer_layer_alloc_stash(struct gpt_model *m, const struct gpt_layer_acts *A, const struct gpt_layer_acts *W,
				   struct gpt_layer_stash *S);
void transformer_layer_stash(struct gpt_model *m, struct gpt_layer_acts *A, const struct gpt_layer_stash *S,
			     bool save);
void transformer_layer_alloc_acts(struct gpt_model *m, struct gpt_layer_acts *A, const struct gpt_layer_acts *sh,
				  bool dense, bool moe);
/* x, y: this rank's rows of the residual stream ([Nl, h]) */
void transformer_layer_forward(struct gpt_model *m, const struct gpt_pass *P, int l, const float *x, float *y);
/* --recompute-modules mla_up_proj: MLA's up-projections, their norms and
 * RoPE again, from what the layer kept, into A's q, kk, v */
void mla_up_recompute(struct gpt_model *m, const struct gpt_pass *P, int l, struct gpt_layer_acts *A);
/* selective recompute: what the forward dropped (--recompute-modules), right
 * before the layer's backward; x: its input */
void transformer_layer_recompute(struct gpt_model *m, const struct gpt_pass *P, int l, const float *x);
/* dres: in = dL/d(layer output), out = dL/d(layer input) */
void transformer_layer_backward(struct gpt_model *m, const struct gpt_pass *P, int l, const float *x, float *dres);

/* ---- multi-token prediction (mtp.c), on the chunk with the head */
/* the depths' parameters, after the final norm (Megatron's order) */
void mtp_register(struct gpt_model *m);
/* a slot's depth activations, and the backward scratch every slot shares */
void mtp_alloc_slot(struct gpt_model *m, struct gpt_slot *sl);
void mtp_alloc_scratch(struct gpt_model *m);
/* the micro-batch rolled for each depth at this rank's positions: m->mtp_in
 * when set, else the host arrays as gpt_forward_chunk's (no CP) */
void mtp_load_inputs(struct gpt_model *m, struct gpt_slot *sl, const int32_t *tokens, const int32_t *labels,
		     const int32_t *positions);
/* every depth from the final norm's output (sl->lnf_local): losses, the
 * logged values, and the depths' dL/dloss for backward */
void mtp_forward(struct gpt_model *m, const struct gpt_pass *P);
/* every depth's backward; returns dL/d(the final norm's output) from the
 * depths, this rank's rows [Nl, h] (scratch, valid until the next backward) */
const float *mtp_backward(struct gpt_model *m, const struct gpt_pass *P);

/* ---- vocabulary-parallel cross-entropy (cross_entropy.c) */
void vocab_parallel_xent_forward(struct gpt_model *m, const struct gpt_pass *P, float *losses_host);
void vocab_parallel_xent_backward(struct gpt_model *m, const struct gpt_pass *P, const float *dloss_host);

#endif
