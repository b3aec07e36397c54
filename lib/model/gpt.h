/*
 * gpt.h - the GPT/Llama decoder (Megatron Core's GPTModel with the
 * Transformer Engine layer spec) with explicit forward and backward passes
 * (docs/architecture.md). Parameters live in a param_registry under Megatron
 * Core names; every activation backward needs is kept in buffers allocated
 * once for the micro-batch size; recomputation reruns a layer's forward (or
 * just the modules of --recompute-modules) right before its backward. All arithmetic goes
 * through the op table, so the same code runs on any backend.
 *
 * One micro-batch: gpt_forward() (losses per token), then gpt_backward()
 * with the per-token loss gradients; parameter grads accumulate in
 * reg.grad until the caller zeroes them.
 */
#ifndef MEGAC_MODEL_GPT_H
#define MEGAC_MODEL_GPT_H

#include <stdbool.h>
#include <stdint.h>

#include "dist/dist.h"
#include "kernels/ops.h"
#include "model/gpt_config.h"
#include "model/layer_spec.h"
#include "model/moe/router.h"
#include "model/ring_attn.h"
#include "tensor/mem.h"
#include "tensor/params.h"

/* One transformer layer of this rank: how it is built (its spec) and its
 * parameters' registry indices (-1 when absent). */
struct gpt_layer_params {
	struct transformer_layer_spec spec;
	bool recompute;  /* full recompute: its forward reruns before its backward */
	/* attention: input norm (fused into linear_qkv in the TE spec), QKV, projection */
	int ln1_w, ln1_b, qkv_w, qkv_b, proj_w, proj_b;
	int qn_w, qn_b, kn_w, kn_b; /* --qk-layernorm: q_layernorm, k_layernorm (-1: none) */
	/* multi-latent attention (attention.c; -1: none): linear_q_proj or
	 * linear_q_up_proj (mq_w), linear_q_down_proj, their norm (fused into
	 * linear_q_up_proj), linear_kv_down_proj, linear_kv_up_proj and its norm */
	int mq_w, mqd_w, mqn_w, mqn_b, mkvd_w, mkvu_w, mkvn_w, mkvn_b;
	/* MLP or MoE: pre-MLP norm, then a dense MLP's fc1/fc2 */
	int ln2_w, ln2_b, fc1_w, fc1_b, fc2_w, fc2_b;
	/* a Mamba layer's mixer (mamba_mixer.c; its norm fused into in_proj is
	 * ln1_w, ln1_b): in_proj, conv1d, dt_bias, A_log, D, norm, out_proj */
	int mb_in_w, mb_conv_w, mb_conv_b, mb_dt_bias, mb_A_log, mb_D, mb_norm_w, mb_out_w;
	/* a MoE layer: router, experts, shared expert (-1: none) */
	int router_w, sfc1_w, sfc2_w, sgate_w; /* sgate_w: --moe-shared-expert-gate (-1: none) */
	int *efc1_w, *efc2_w; /* [E] by global expert number; -1 for another expert-parallel rank's */
	int pfirst, pend;     /* the layer's registry indices [pfirst, pend), in registration order */
};

/* What a MoE layer's backward needs (docs/moe-spec.md): the routing plan on
 * the host and on the device, and the experts' activations, row by row in
 * the router's expert-major order (R rows, at most B*T*topk). */
struct gpt_moe_acts {
	struct moe_route route;      /* host */
	float *z_host;               /* [B*T, E] router logits, host */
	float *z;                    /* [B*T, E] */
	int32_t *row_tok;            /* [R] each row's token */
	int32_t *tok_rowptr, *tok_rows; /* a token's rows */
	float *row_w;                /* [R] each row's weight */
	float *xperm;                /* [R, h] the rows' inputs */
	float *fc1, *act, *y;        /* [R, f1], [R, f], [R, h] */
	float *sfc1, *sact;          /* shared expert: [B*T, f1s], [B*T, fs] */
	float *sgate, *sgate_host;   /* --moe-shared-expert-gate: [B*T] its sigmoid, and a host copy (else NULL) */
	/* the experts apart (gpt_parallel.dispatch): this rank sends the rows of
	 * its sequence shard (sel: nsel of the R rows, in their order) to their
	 * experts; its experts run on the rows every rank of the expert-parallel
	 * group sent them, gathered over expert TP, expert-major (fc1 and act
	 * then hold those rows); y holds this rank's shard's rows, back from
	 * their experts, and zeros for the other rows */
	float *xloc;                 /* [Rl, h] (xperm without dispatching) */
	size_t rows_cap;             /* the rows xloc, fc1 and act hold (they grow: gpt_moe_rows_local) */
	int32_t *cnt;                /* host [ep, El]: rows peer p sent for local expert e */
	int32_t *ecnt;               /* host [etp, El]: rows expert-TP peer j got for local expert e */
	int32_t *loff;               /* host [El + 1]: expert e's rows of xloc */
	int32_t *sel_off;            /* host [E + 1]: expert e's rows of this rank's shard, of the nsel */
	int32_t *sel_row, *sel_tok;  /* [R] the shard's rows (indices into the R) and their tokens (device) */
	int32_t *sel_host;           /* host [R] sel_row */
	int nsel;
};

/* What one layer's backward needs, [B*T, ...] row-major. */
struct gpt_layer_acts {
	float *ln1, *ln1_mean, *ln1_rstd; /* input norm: out (this rank's rows with SP), stats */
	float *q, *kk, *v;                /* [B,a,T,k], [B,g,T,k] x2, after RoPE */
	float *qn, *kn;                   /* --qk-layernorm: q and k before their norms, same layouts */
	float *qn_mean, *qn_rstd;         /* and the norms' statistics, a row per head and token */
	float *kn_mean, *kn_rstd;
	/* multi-latent attention: the compressed query [B*T, q_lora] before and
	 * after its norm (the same buffer without one), and the norm's
	 * statistics; likewise the compressed key/value [B*T, kv_lora] */
	float *mla_qc, *mla_qcn, *mla_qc_mean, *mla_qc_rstd;
	float *mla_kvx, *mla_kvn, *mla_kv_mean, *mla_kv_rstd;
	float *mla_kpos; /* --recompute-modules mla_up_proj: the RoPE key before RoPE [B*T, qk_pos] */
	/* a Mamba layer (mamba_mixer.c; ln1 is its norm's output): in_proj's
	 * output [B*T, 2 d_inner + 2 G N + H], the convolution's output
	 * [B*T, d_inner + 2 G N], the scan's output [B*T, d_inner], the gated
	 * norm's output [B*T, d_inner] and its rstd [B*T, G] */
	float *mb_zx, *mb_xbc, *mb_y, *mb_yn, *mb_rstd;
	float *probs;                     /* [B,a,T,T] softmax, pre-dropout (NULL with CP, flash or serving) */
	float *alse;                      /* CP, flash, serving: [B,a,T] the attention rows' log-sum-exp */
	float *atty;                      /* [B*T, a*k] attention output */
	float *res1;                      /* residual after attention */
	float *ln2, *ln2_mean, *ln2_rstd;
	float *fc1;                       /* [B*T, f or 2f] pre-activation */
	float *act;                       /* [B*T, f] */
	struct gpt_moe_acts *moe;         /* a MoE layer's, else NULL */
};

/* A bf16/fp16 model's saved activations of one layer in one slot, as
 * 16-bit words (docs/mixed-precision.md): the fields of gpt_layer_acts that
 * hold 16-bit values, each NULL when this layer does not keep it itself
 * (recomputed, or not there). Between its forward and its backward a layer
 * keeps these 2-byte copies; both run on one fp32 work set every such layer
 * shares (gpt_model.work_acts). */
struct gpt_layer_stash {
	uint16_t *ln1, *q, *kk, *v, *atty, *res1, *ln2, *fc1, *act;
};

enum gpt_precision { GPT_FP32, GPT_BF16, GPT_FP16 };

struct gpt_fp8; /* FP8 training's state (fp8_linear.c) */

/* The fp32 views a bf16/fp16 model widens its 16-bit weights into for a
 * kernel (gpt_param): one tensor per view at a time. W: a weight matrix (a
 * linear layer's, the word embeddings, the router); B: a 1-D tensor (a
 * bias, a norm's weight); X: a second one beside B (a norm's bias), or the
 * position embeddings beside the word embeddings. */
enum gpt_view { GPT_VIEW_W, GPT_VIEW_B, GPT_VIEW_X, GPT_NVIEWS };

/* Multi-token prediction (mtp.c, docs/mtp.md): depth k's activations in
 * one slot. Its inputs are the micro-batch rolled k+1 places to the left
 * (zero-filled at each sample's end), its hidden input the previous depth's
 * output (depth 0: the decoder's final-norm output). */
struct gpt_mtp_acts {
	int32_t *tokens, *targets, *positions; /* [B*T] rolled, tokens and targets as shard-local ids */
	float *emb;                        /* [Nl, h] the rolled tokens' embedding */
	float *en, *en_mean, *en_rstd;     /* enorm of emb */
	float *hn, *hn_mean, *hn_rstd;     /* hnorm of the hidden input */
	float *x, *y;                      /* [Nl, h] eh_proj's output (the layer's input), the layer's output */
	float *out, *out_mean, *out_rstd;  /* [Nl, h] final_layernorm of y: the next depth's hidden input */
	float *outg;                       /* [B*T, h] out on all rows (SP: gathered; else out) */
	float *logits, *losses, *lse;      /* [B*T, Vp], [B*T] x2 */
	float *dloss_host;                 /* host [B*T]: dL/dloss of its tokens, set in forward */
};

/* One depth's parameters (registry indices; -1: absent) and the depth's
 * run of the registry [pfirst, pend). Its transformer layer is lp[L + k]. */
struct gpt_mtp_params {
	int en_w, en_b, hn_w, hn_b, eh_w, fn_w, fn_b;
	int pfirst, pend;
};

/* One micro-batch in flight through one model chunk: what its backward needs. */
struct gpt_slot {
	float *resid;                /* [(nl+1), Nl, h]: the chunk's input, then every layer's output */
	struct gpt_layer_acts *acts; /* [nl]; recomputed layers point at the shared scratch set */
	struct gpt_layer_stash *stash; /* [nl] bf16/fp16 training: the layers' 16-bit saved activations */
	float *lnf, *lnf_mean, *lnf_rstd; /* the chunk with the head: final norm */
	float *logits;               /* [B*T, Vp]; becomes dlogits in backward */
	float *losses, *lse;         /* [B*T] */
	int32_t *tokens, *positions, *targets, *doc; /* tokens and targets as shard-local ids, -1 elsewhere */
	bool use_doc, use_positions;
	uint64_t drop_seed;          /* keys every dropout mask of the micro-batch */
	struct gpt_mtp_acts *mtp;    /* [c.mtp] multi-token prediction (the chunk with the head), else NULL */
	float *lnf_local;            /* the final norm's output, this rank's rows: lnf, or with SP its shard */
};

/* A model chunk: the layers one pipeline stage runs in one pass (one chunk
 * per rank, or vpp with the interleaved schedule: Megatron's model list). */
struct gpt_chunk {
	int l0, nl;     /* transformer layers [l0, l0 + nl), global numbers */
	bool pre;       /* holds the embedding (the first chunk of the first stage) */
	bool post;      /* holds the final norm, the output layer and the loss (the last chunk of the last stage) */
	int nslots;     /* micro-batches it can hold at once */
	struct gpt_slot *slots;
};

/* Serving instead of training (text_gen_server): forward only, no
 * gradients, no dropout; the attention reads and extends a key/value cache
 * of max_req request slots of max_seq positions each; a step runs at most
 * max_tokens rows (the config's S is set to it, B = 1); the output layer
 * runs on at most head_rows rows at a time. */
struct gpt_serving {
	int max_req, max_seq, max_tokens, head_rows;
};

/* Megatron-FSDP's sharded data parallelism (lib/train/fsdp.h): level 2
 * (optim_grads) keeps no whole gradient buffer: each unit's gradients (the
 * embedding, a layer, the final norm and output layer) are reduced into the
 * ranks' shards after its backward, in every micro-batch; level 3
 * (optim_grads_params) keeps only this rank's shard of the weights too and
 * gathers each tensor when a kernel needs it. The trainer does the
 * communication through the hooks. */
enum gpt_unit { GPT_UNIT_EMB, GPT_UNIT_LAYER, GPT_UNIT_HEAD, GPT_NUNITS };

struct gpt_shards {
	int level;              /* 2 or 3 */
	int size, rank;         /* the data-parallel group's: this rank keeps the dist_shard() of the flat
				 * buffers, [lo, hi) (level 3: of the weights) */
	size_t lo, hi;          /* set by gpt_init_pipe */
	/* level 3: all of tensor idx into dst, 16-bit words for a bf16/fp16
	 * model, else fp32, gathered from the shards */
	void (*gather)(void *ctx, int idx, void *dst);
	/* tensors [first, end) (adjacent) have this micro-batch's gradients in g,
	 * fp32 from the first one's offset on: reduce them into the shards (the
	 * model zeroes g after) */
	void (*reduce)(void *ctx, int first, int end, float *g);
	void *ctx;
};

/* How this rank sets the model up: the micro-batch, the precision, its
 * groups and its place in the pipeline, training or serving. A field left
 * zero (designated initializers) means none: one stage, one chunk, no
 * group, training. */
struct gpt_setup {
	int B;                        /* micro-batch size the buffers are sized for */
	enum gpt_precision precision;
	struct dist_group *tp;        /* tensor-parallel group (NULL: none) */
	bool sp;                      /* sequence parallelism (with TP) */
	struct dist_group *cp;        /* context-parallel group (NULL: none) */
	struct dist_group *ep;        /* expert-model-parallel group (NULL: none) */
	struct dist_group *etp;       /* expert-tensor-parallel group (NULL: the experts split over tp) */
	int pp, stage, vpp;           /* pipeline stages (0: 1), this rank's, model chunks per stage (0: 1) */
	const int *nslots;            /* [vpp] micro-batches chunk v holds at once (the schedule's most in
				       * flight); NULL: one each */
	bool doc_masks;               /* micro-batches may carry document ids (--reset-attention-mask) */
	const struct gpt_serving *serve; /* NULL: training */
	const struct gpt_shards *shards; /* Megatron-FSDP's sharded gradients (and weights); NULL: none */
	const struct gpt_fp8_config *fp8; /* FP8 training; NULL: none */
};

/* Where this rank sits: its tensor-, context- and expert-parallel groups. */
struct gpt_parallel {
	struct dist_group *tp;  /* tensor-parallel group, NULL without TP */
	int tp_size, tp_rank;
	int vstart;             /* first vocabulary row of this rank's shard */
	bool sp;                /* sequence parallelism: norms, dropout and residuals on S/t of each sample */
	struct dist_group *cp;  /* context parallelism: this rank holds T = S/cp positions of each sample */
	int cp_size, cp_rank;
	struct ring_attn ring;  /* CP: the attention over the whole sequence */
	struct dist_group *ep;  /* expert parallelism: this rank holds experts [e0, e0 + El) of each MoE layer */
	int ep_size, ep_rank, e0, El;
	/* expert tensor parallelism: each expert's MLP split over etp_size ranks
	 * (the tp group when it is the same size: then etp is tp) */
	struct dist_group *etp;
	int etp_size, etp_rank;
	/* the experts are apart (expert parallelism, or expert TP other than
	 * TP): each TP rank dispatches its sequence shard's rows through the
	 * expert-parallel all-to-all and the expert-TP exchange
	 * (moe/token_dispatcher.c), and the experts' tensors are a part of
	 * their own (expert_lo) */
	bool dispatch;
};

/* Scratch the layers share: forward temporaries and the gradients a
 * layer's backward passes along ([B*T, ...] unless said). */
struct gpt_scratch {
	float *qkv;                 /* [B*T, (a+2g)k] fused QKV output; dqkv in backward */
	float *tmp;                 /* [B*T, h] a row-parallel output before its sum */
	float *dres;                /* [Nl, h] the residual stream's gradient */
	float *dtmp, *dln;          /* [B*T, h] */
	float *datty, *dq;          /* [B*T, a*k] */
	float *dk, *dv;             /* [B*T, g*k] */
	float *dfc1, *dact;         /* [B*T, f1], [B*T, f] */
	float *dloss;               /* [B*T] */
	float *norm_gamma, *norm_ones; /* --apply-layernorm-1p: a norm's w + 1, and h ones */
	float *shard, *perm, *gath; /* SP: a sequence shard [Nl, h], the collectives' reordering space
				     * [B*S, h], a norm output gathered to all rows [B*S, h] */
	/* multi-latent attention: the query projection's output [B*T, a*k],
	 * linear_kv_up_proj's [B*T, a*(qk_head+v_head)], linear_kv_down_proj's
	 * [B*T, kv_lora+qk_pos] (each its gradient in backward), the shared
	 * RoPE key [B*T, qk_pos] and a second one, and two latent gradients
	 * [B*T, max(q_lora, kv_lora)] */
	float *mla_q, *mla_kv, *mla_kvc, *mla_kp, *mla_kt, *mla_dc, *mla_dc2;
	/* the Mamba layers' (mamba_mixer.c): the pieces of in_proj's output
	 * and of the convolution's made contiguous for the ops, and their
	 * gradients [B*T, width]: the convolution's input xBC (width C =
	 * d_inner + 2 G N), z, x (d_inner), dt (H), B and C (G N); dy and dz
	 * (d_inner), the pieces' gradients, dxBC after and before the
	 * convolution (C) and in_proj's output gradient */
	float *mb_xin, *mb_z, *mb_x, *mb_dt, *mb_B, *mb_C;
	float *mb_dy, *mb_dz, *mb_dx, *mb_ddt, *mb_dB, *mb_dC, *mb_dxbc, *mb_dxin, *mb_dzx;
	float *qkv_part, *qkv_all;  /* fewer query groups than TP ranks: this rank's share of the fused
				     * QKV output [B*T, (a+2g)k/t] (its gradient in backward), and all
				     * ranks' shares gathered [t][B*T][(a+2g)k/t] (gpt_int.h, qkv_gather) */
};

/* MoE scratch (any MoE layer) and the logged statistics. */
struct gpt_moe_state {
	float *dy, *dact, *dfc1, *dx, *dw, *dz, *out2; /* rows [R, ...], router [B*T, E] */
	float *dw_host, *dprobs_host, *dz_host;        /* host */
	float *xa, *xb;    /* dispatching: rows in transit [max(R, Rl), h] */
	float *xc;         /* dispatching, backward: the experts' rows' gradients [Rl, h] */
	size_t rows_cap;   /* the rows dact, dfc1, xa, xb and xc hold */
	int32_t *cnt_all;  /* host [ep, E]: every peer's rows per expert */
	/* --moe-shared-expert-gate: the gated output or its gradient [B*T, h],
	 * the logits or their gradient [B*T], 0 .. B*T (moe_combine's index
	 * arrays for one row per token) and the host copy of the gradient */
	float *gout, *glogit, *gd_host;
	int32_t *giota;
	/* selective recompute: the experts' activation (moe_act; act_cap rows)
	 * and the shared expert's fc1 and activation (shared_experts) every
	 * layer shares, NULL without */
	float *act_rc, *sfc1_rc, *sact_rc;
	size_t act_cap;
	/* the gradient weight of the attached losses (Megatron's
	 * MoEAuxLossAutoScaler: loss scale / micro-batches), set by the caller
	 * before a backward; and the logged values, summed over layers and
	 * micro-batches of training forwards until the caller reads them */
	double aux_scale;
	double aux_sum, zsq_sum;
	int calls;
	/* --moe-router-enable-expert-bias: every MoE layer's bias [L][E] (fp32,
	 * host, beside the routing; Megatron's router buffer expert_bias, in
	 * the checkpoint), and the slots each expert kept in this iteration's
	 * training forwards [L][E] (Megatron's local_tokens_per_expert), which
	 * gpt_update_expert_bias sums over data parallelism and clears. NULL
	 * without. */
	float *expert_bias;
	double *tok_count;
	struct gpt_moe_acts **all; /* every MoE layer's activations, to free them */
	size_t nall, cap_all;
};

/* Serving: the cache of every layer of this rank, and the scratch of the
 * output layer. An attention layer's cache is its keys and values, one per
 * position; a Mamba layer's is its recurrent state (docs/mamba.md,
 * "Serving"): the convolution's last W-1 inputs and the scan's state, which
 * stand for every position before and cannot be rewound. layer[l] is layer
 * l's index among the layers of its kind (-1: an MLP-only layer, which
 * caches nothing). */
struct gpt_kv_cache {
	int max_req, max_seq;
	int *layer;                 /* host [L] */
	int nattn, nmamba;          /* the layers with attention, the Mamba layers */
	float *k, *v;               /* [max_req][nattn][g][max_seq][k], this rank's query groups */
	float *conv;                /* [max_req][nmamba][W-1][C] the convolution's inputs before the next step */
	float *ssm;                 /* [max_req][nmamba][H][P][N] the scan's state after the last step */
	float *rope_cos, *rope_sin; /* [max_seq, rot] (NULL without RoPE) */
	int32_t *kpos;              /* [max_seq]: 0 .. max_seq-1 */
	float *x, *y;               /* [max_tokens, h] the residual stream, in and out of a layer */
	float *head_x;              /* [head_rows, h] the rows the output layer runs on */
	float *lrows, *grows;       /* [head_rows, Vp/t] and, with TP, [t, head_rows, Vp/t] */
	float *rows_host;           /* host [head_rows, Vp] */
	int head_rows;
};

/* One serving step: nseq sequences, sequence s in cache slot slot[s],
 * bringing n[s] new tokens at positions pos[s] ... (host arrays); N rows
 * in all, the sequences' rows one after the other. */
struct gpt_kv_step {
	int nseq, N;
	const int *slot, *pos, *n;
};

struct gpt_model {
	struct gpt_config c;    /* the model */
	struct gpt_config lc;   /* this rank's part: heads, groups, ffn and vocabulary divided by TP,
				 * lc.S = T the positions it holds (S / cp) */
	const struct kops *k;
	struct mem_pool *mem;
	enum gpt_precision precision;
	int B;                  /* micro-batch size the buffers are sized for */
	int Nl;                 /* rows this rank holds of the residual stream: B*T, or B*T/t with SP */
	struct gpt_parallel par;
	bool flash;             /* one-rank attention through the op table's flash-style block
				 * ops (kops.flash): rows keep their log-sum-exp (alse), no probs */

	/* The weights (docs/mixed-precision.md). fp32: reg.data, which the
	 * optimizer updates in place. bf16/fp16 (Megatron's mixed precision):
	 * reg.data is NULL; the layers use w16, 2 bytes per parameter, which
	 * the optimizer writes from its fp32 main weights (adam.h) after each
	 * step; a kernel reads a tensor widened into one of the views. The
	 * gradients (reg.grad) are fp32 either way (Megatron's main_grad). */
	struct param_registry reg;
	uint16_t *w16;          /* bf16/fp16: [reg.total] the weights as 16-bit words (Megatron-FSDP
				 * level 3: this rank's shard [shards.lo, shards.hi) only, as reg.data) */
	/* --fp8-param-gather (docs/fp8.md, "FP8 weights"): w16 is a store of
	 * bytes instead, tensor i at byte soff[i] (16-byte aligned), 1 byte a
	 * value for the FP8 layers' weights (their codes), 2 for the others;
	 * soff[reg.n] is the store's size. NULL: tensor i at w16 + offset. */
	size_t *soff;
	struct gpt_shards shards; /* level 0: none */
	uint16_t *gather16;     /* level 3, 16-bit: one tensor's words, gathered */
	/* level >= 2: the gradients of a unit while its backward runs (the
	 * embedding's, one layer's, the head's), instead of reg.grad */
	float *unit_grad[GPT_NUNITS];
	struct gpt_unit_pos { int unit; size_t off; } *unit_pos; /* [reg.n] level >= 2: each tensor's unit
								    * and its offset in the unit's buffer */
	size_t unit_n[GPT_NUNITS];
	float *view[GPT_NVIEWS]; /* bf16/fp16: fp32 copies of one tensor each (enum gpt_view) */
	size_t view_n[GPT_NVIEWS]; /* their sizes, in floats */
	/* bf16/fp16 on a table with w16_direct (ops.h): the weight matrices go to
	 * the *_w16 ops as 16-bit words, so the W view is only gpt_set_param's
	 * staging buffer (GPT_STAGE floats at most) and gpt_param(W) is a BUG */
	bool direct16;
	size_t gather16_n;      /* gather16's words: the largest tensor */
	size_t expert_lo;       /* expert parallelism: the experts' tensors fill [expert_lo, reg.total)
				 * of the buffers (reg.total without it) */
	int wte, wpe, lnf_w, lnf_b, out_w; /* registry indices; -1 when absent on this rank */
	struct gpt_layer_params *lp;       /* [L], filled for this rank's layers */

	int nchunks;
	struct gpt_chunk *chunks;
	struct gpt_layer_acts rc_acts; /* the scratch set recomputed layers (and serving) share; under
					* selective recompute only the dropped modules' buffers */
	struct gpt_layer_acts work_acts; /* bf16/fp16 training: the fp32 set stashed layers run on */
	float *probs_shared;   /* selective recompute: one probs buffer for every layer */
	float *rope_cos, *rope_sin; /* [T, rot] the rows of this rank's positions */
	int32_t *flash_pos;     /* flash: positions 0..S-1, the block ops' qpos and kpos */
	struct gpt_scratch s;
	struct gpt_moe_state moe;
	struct gpt_kv_cache *kv; /* serving; NULL in training */

	/* Multi-token prediction (mtp.c): the depths' parameters, the word
	 * embeddings they look up (the embedding's, or the last stage's copy),
	 * their scratch, and what the caller sets: the next training forward's
	 * whole micro-batch (mtp_in), the gradient weight of
	 * the MTP losses (Megatron's MTPLossAutoScaler: loss scale /
	 * micro-batches) and whether the loss is per token
	 * (--calculate-per-token-loss); and the logged values, each depth's
	 * masked mean loss summed over training micro-batches until the
	 * caller reads them. */
	struct gpt_fp8 *fp8;     /* FP8 training (fp8_linear.c); NULL: none */
	struct gpt_mtp_params *mtp;
	int mtp_emb;
	float *mtp_cat, *mtp_dcat;  /* [B*T, 2h] eh_proj's input [e ; h] on all rows, its gradient */
	float *mtp_part, *mtp_all;  /* TP: eh_proj's output columns of this rank [B*T, h/t], all ranks' [t][B*T][h/t] */
	float *mtp_de, *mtp_dh, *mtp_demb, *mtp_dnext[2]; /* [Nl, h] */
	/* Host [B*S] arrays over every position of the sequence (S = c.S, all
	 * context-parallel ranks' positions): the depths roll them along each
	 * sample before taking this rank's positions. tokens NULL: the chunk's
	 * own inputs (only without context parallelism); positions NULL:
	 * 0..S-1; mask NULL: all ones. */
	struct gpt_mtp_input {
		const int32_t *tokens, *labels, *positions;
		const float *mask;
	} mtp_in;
	double mtp_grad_scale;
	bool mtp_per_token;
	double *mtp_log;           /* [c.mtp] */

	/* Set by the caller around a chunk's last backward of an iteration:
	 * called with each parameter as its gradient becomes final (the
	 * bucketed data-parallel reduction starts on it). */
	void (*grad_ready)(void *ctx, int param);
	void *grad_ctx;
	/* Set around a chunk's first forward of an iteration: called with each
	 * parameter before its first use (the overlapped parameter gather waits
	 * for it). */
	void (*param_needed)(void *ctx, int param);
	void *param_ctx;

	/* every buffer taken from mem, to give back in gpt_free */
	struct { void *p; size_t bytes; } *allocs;
	size_t nallocs, cap_allocs;
};

/* Register parameters, allocate weights, grads and the activation buffers for
 * micro-batches of B samples; with a tensor-parallel group (NULL: none) this
 * rank holds and computes its shard (Megatron's column/row-parallel linears,
 * vocabulary-parallel embedding and cross-entropy). error() and -1 on failure. */
int gpt_init(struct gpt_model *m, const struct gpt_config *c, const struct kops *k, struct mem_pool *mem,
	     int B, enum gpt_precision precision, struct dist_group *tp, bool sp);
/* The same for any place in the layout (struct gpt_setup): only the layers
 * of this rank's chunks (dist_stage_layers), the embedding on the first
 * stage, the final norm and output layer on the last, and the activations
 * of s->nslots micro-batches per chunk; or the model set up for serving.
 * With tied embeddings the last stage holds a copy of the word embeddings
 * (PARAM_SHARED) that the embedding group keeps equal. */
int gpt_init_pipe(struct gpt_model *m, const struct gpt_config *c, const struct kops *k, struct mem_pool *mem,
		  const struct gpt_setup *s);
/* With sequence parallelism the norms' parameter gradients are partial sums
 * over each rank's sequence shard: add them up over TP (once per iteration,
 * after the last micro-batch). No-op otherwise. */
void gpt_sp_sync_grads(struct gpt_model *m);
/* The rows a MoE layer's experts on this rank are first given room for in
 * one micro-batch: all B*T*topk without expert parallelism; with it the
 * most every peer's capacity lets through, or without a capacity factor
 * (dropless) the balanced share, B*T*topk. A micro-batch that routes more
 * rows to this rank grows the buffers (the old ones are kept until
 * gpt_free, so nothing is freed while transfers may be in flight), up to
 * the most that can come: every peer's tokens' slots that can name this
 * rank's experts. */
size_t gpt_moe_rows_local(const struct gpt_model *m);
/* Give back everything gpt_init_pipe took; safe after it failed, and on a
 * zeroed model. */
void gpt_free(struct gpt_model *m);

/* Megatron's init from the seed: N(0, std) weights, N(0, std/sqrt(2L)) for the
 * output projections (linear_proj, linear_fc2), zero biases, unit norms. Each
 * tensor's values depend only on (seed, its name, element index), not on the
 * order of registration or the parallel layout. */
void gpt_init_weights(struct gpt_model *m, uint64_t seed);

/* Set the weights from host fp32 values: tensor idx (p->numel values), or
 * every tensor ([reg.total] in registry order). A bf16/fp16 model keeps
 * them rounded to nearest even (Megatron casts the fp32 initial or loaded
 * weights to the model's type the same way). */
void gpt_set_param(struct gpt_model *m, int idx, const float *host);
void gpt_set_weights(struct gpt_model *m, const float *host);
/* A bf16/fp16 model's format (KOPS_ROUND_BF16 for fp32 models, unused). */
enum kops_round gpt_half_kind(const struct gpt_model *m);

/*
 * Forward one micro-batch. Host arrays of B*T (T = S, or this rank's S/cp
 * positions with context parallelism, gpt_global_pos): tokens, labels,
 * position ids (used for learned position embeddings only; NULL = the
 * positions in the sequence). Document ids for --reset-attention-mask
 * (NULL = plain causal) are B*S of the whole sequence, with context
 * parallelism too (ring attention masks every rank's keys). drop_seed keys every
 * dropout mask of this micro-batch; train=false disables dropout. Per-token
 * losses (unmasked) are copied to losses_host.
 */
void gpt_forward(struct gpt_model *m, const int32_t *tokens, const int32_t *labels,
		 const int32_t *positions, const int32_t *doc, uint64_t drop_seed, bool train,
		 float *losses_host);
/* Backward of the last forward with dL/dloss per token (host, B*S). */
void gpt_backward(struct gpt_model *m, const float *dloss_host);

/*
 * The pipeline's pieces: the forward of chunk v on one micro-batch, kept in
 * slot s until its backward. The inputs are as gpt_forward's (tokens only
 * matter on the chunk with the embedding, labels on the one with the head,
 * doc everywhere). A chunk without the embedding starts from its input
 * hidden state, which the caller writes to gpt_chunk_input() first ([Nl, h],
 * this rank's rows). Returns the chunk's output hidden state (valid until
 * the slot's backward), or NULL on the chunk with the head, which writes the
 * per-token losses to losses_host instead.
 */
float *gpt_chunk_input(struct gpt_model *m, int v, int s);
const float *gpt_forward_chunk(struct gpt_model *m, int v, int s, const int32_t *tokens, const int32_t *labels,
			       const int32_t *positions, const int32_t *doc, uint64_t drop_seed, bool train,
			       float *losses_host);
/* Where the gradient of a chunk's output goes before its backward ([Nl, h]). */
float *gpt_chunk_grad_input(struct gpt_model *m);
/* Backward of slot s of chunk v, from dL/dloss (the chunk with the head) or
 * from the output gradient in gpt_chunk_grad_input(). Returns the gradient
 * of the chunk's input (valid until the next backward), or NULL on the chunk
 * with the embedding. */
const float *gpt_backward_chunk(struct gpt_model *m, int v, int s, const float *dloss_host);

/* The position in the sequence of this rank's local position j: j, or with
 * context parallelism ring_attn's load-balanced chunks. */
int gpt_global_pos(const struct gpt_model *m, int j);

/* The model's layers with their multi-token-prediction ones (L + mtp):
 * layer L + k is depth k's transformer layer. */
static inline int gpt_num_layers_all(const struct gpt_model *m)
{
	return m->c.L + m->c.mtp;
}

/* A layer's parameter name as Megatron Core writes it: names registered as
 * "decoder.layers.N." with N >= L (a multi-token-prediction depth's layer)
 * become "mtp.layers.K.transformer_layer." in place (n: the buffer's size). */
void gpt_mtp_layer_name(const struct gpt_config *c, char *name, size_t n);

/* FP8 (fp8_linear.c). gpt_fp8_update: after an iteration's backward, the
 * delayed recipe's amax reduction (over tensor, context and, given dp,
 * data parallelism) and its history and scale update; nothing for the
 * other recipes. The checkpointed state: gpt_fp8_nstate() slots, each an
 * amax history [3, history] and scales [3] (gpt_fp8_state, host memory,
 * read and written in place) under gpt_fp8_state_name's names. */
void gpt_fp8_update(struct gpt_model *m, struct dist_group *dp);
int gpt_fp8_nstate(const struct gpt_model *m);
void gpt_fp8_state_name(const struct gpt_model *m, int i, bool scale, char *out, size_t n);
float *gpt_fp8_state(struct gpt_model *m, int i, bool scale, int64_t shape[2]);
const char *gpt_fp8_recipe_name(enum gpt_fp8_recipe r);
/* bytes FP8 holds: operand scratch in the pool (*dev) and host state (*host); 0 without FP8 */
/* FP8's configuration (NULL without FP8) and whether layer l's linear
 * layers are FP8 (not one --first-last-layers-bf16 keeps, and on this rank) */
const struct gpt_fp8_config *gpt_fp8_config(const struct gpt_model *m);
bool gpt_fp8_layer(const struct gpt_model *m, int l);
void gpt_fp8_mem(const struct gpt_model *m, size_t *dev, size_t *host);
struct ckpt_reader;
int gpt_fp8_load_state(struct gpt_model *m, struct ckpt_reader *r, int file);
/* --fp8-param-gather (fp8_linear.c, "FP8 weights"): the byte of the
 * store where element e starts (e = reg.total: the store's size);
 * gpt_main_values: every weight's value as the optimizer's main weights
 * start (host [reg.total] fp32: the stored weights' initial or loaded
 * values, the others' words widened); gpt_drop_initial_weights then frees
 * what kept them. gpt_copy_main_to_model: Megatron's copy of the main
 * weights into the model after a step, for one optimizer part: its
 * 16-bit tensors rounded, its FP8 weights cast to codes (a collective
 * over the part's group and TP under the tensorwise recipe). */
size_t gpt_store_at(const struct gpt_model *m, size_t e);
void gpt_main_values(struct gpt_model *m, float *host);
void gpt_drop_initial_weights(struct gpt_model *m);
struct gpt_main_part {
	const float *main;      /* [hi - lo] the fp32 main weights (backend memory) */
	size_t lo, hi;          /* the elements this rank updates */
	size_t base, end;       /* the part's elements (every rank of g goes through the same tensors) */
	struct dist_group *g;   /* the part's data-parallel group */
};
void gpt_copy_main_to_model(struct gpt_model *m, const struct gpt_main_part *pt);
/* the delayed recipe's update of one meta (exposed for its test): h[len]
 * with h[0] the iteration's reduced amax, *scale in and out */
void fp8_update_meta(float *h, int len, float *scale, bool amax_max, float scaled_max);

/* Whether layer l is a mixture-of-experts layer. */
static inline bool gpt_layer_is_moe(const struct gpt_model *m, int l)
{
	return m->lp[l].spec.mlp == LAYER_MLP_MOE;
}

/* Megatron Core's name of expert e's (global number) linear_fc1 or
 * linear_fc2 (fc 1 or 2) weight in MoE layer l. */
void gpt_expert_param_name(char *out, size_t n, int l, int e, int fc);

/* Megatron Core's name of MoE layer l's expert bias (a router buffer). */
void gpt_expert_bias_name(char *out, size_t n, int l);

/* Aux-loss-free load balancing, once per iteration after the backward
 * passes (Megatron's finalize_model_grads): each of this rank's MoE
 * layers' kept-slot counts summed over dp (the ranks that hold the same
 * layers with other tokens; NULL: this rank alone), then each bias moved by
 * the update rate towards balance; the counts cleared. Collective over dp.
 * Nothing without --moe-router-enable-expert-bias. */
struct dist_group;
void gpt_update_expert_bias(struct gpt_model *m, struct dist_group *dp);

/* What a kernel reads for parameter idx (NULL for idx < 0): an fp32
 * model's weights in place; a bf16/fp16 model's widened into view v, valid
 * until the next use of that view. */
const float *gpt_param(struct gpt_model *m, int idx, enum gpt_view v);
/* direct16: a weight's 16-bit words for the *_w16 ops, this rank's own or,
 * at FSDP level 3, gathered (valid until the next gather) */
const uint16_t *gpt_param16(struct gpt_model *m, int idx);
/* A 16-bit model's tensor idx as words in w16 (a BUG for one kept as FP8
 * codes). */
uint16_t *gpt_words(struct gpt_model *m, int idx);
/* The bytes the model's weights take on this rank (its store). */
size_t gpt_weight_bytes(const struct gpt_model *m);
/* The fp32 gradient buffer of parameter idx (NULL for idx < 0 or in serving). */
float *gpt_grad(struct gpt_model *m, int idx);
/* The weight a norm applies: its parameter, or with --apply-layernorm-1p
 * the parameter plus one in a model-owned buffer (valid until the next call). */
const float *gpt_norm_weight(struct gpt_model *m, int w);

/*
 * Serving (a model set up with gpt_setup.serve): one step of new tokens
 * (host ids, step->N of them) through every layer, each sequence's
 * attention reading and extending its cache slot. Returns the final norm's
 * output [N, h] (backend memory, valid until the next step).
 */
const float *gpt_serve_forward(struct gpt_model *m, const struct gpt_kv_step *step, const int32_t *tokens);
/* The output layer on R <= head_rows rows x [R, h] (backend memory):
 * logits over the whole padded vocabulary, gathered over TP, into host
 * memory [R, Vp], returned (valid until the next call). */
const float *gpt_serve_logits(struct gpt_model *m, const float *x, int R);

#endif
