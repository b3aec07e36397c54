/*
 * hf_map.h - megac's tensors and Hugging Face's for GPT-2-style
 * (GPT2LMHeadModel), Llama-style (LlamaForCausalLM) and Mixtral-style
 * mixture-of-experts (MixtralForCausalLM, docs/moe-spec.md section 7) models,
 * and Llama's kin: Qwen2ForCausalLM (a bias on q, k and v: --add-qkv-bias)
 * and Qwen3ForCausalLM (q_norm, k_norm: --qk-layernorm), Qwen2MoeForCausalLM
 * (Qwen2's attention, experts with a gated shared expert, dense layers where
 * --moe-layer-freq has them) and Qwen3MoeForCausalLM (Qwen3's attention,
 * Qwen2-MoE's experts without the shared one), and DeepseekV3ForCausalLM
 * (multi-latent attention, dense first layers, then sigmoid-routed experts
 * with the expert bias, group-limited top-k and a shared expert), and
 * Mamba2ForCausalLM (a hybrid model whose every layer is a Mamba-2 mixer,
 * docs/mamba.md)
 * (as Megatron's tools/checkpoint/schema_hf.py names them; docs/ckpt-convert.md): which HF tensors a
 * model has, which megac tensor each one's values come from and how
 * (vocabulary rows without the padding, transposes for GPT-2's Conv1D,
 * the fused QKV per query group unfused, SwiGLU's [gate; up] split, the
 * Mamba convolution's unit axis, the
 * query and key rows of an interleaved-RoPE model regrouped into
 * rotate-half order), the conversions both ways, and config.json with its
 * RoPE scaling (Llama 3.x's and YaRN's).
 */
#ifndef MEGAC_CONVERT_HF_MAP_H
#define MEGAC_CONVERT_HF_MAP_H

#include <stdbool.h>
#include <stdint.h>

#include "ckpt/ckpt.h"
#include "model/gpt_config.h"

/* HF_DEEPSEEK_V3_HALVES: a DeepseekV3ForCausalLM whose config.json has
 * rope_interleave false (its RoPE rows rotated by halves as stored; read
 * only: megac writes rope_interleave true, which needs no regrouping) */
enum hf_arch { HF_GPT2, HF_LLAMA, HF_MIXTRAL, HF_QWEN2, HF_QWEN3, HF_MISTRAL, HF_QWEN2_MOE, HF_QWEN3_MOE,
	       HF_DEEPSEEK_V3, HF_DEEPSEEK_V3_HALVES, HF_MAMBA2 };

enum hf_xform {
	HF_COPY,      /* same shape */
	HF_VOCAB,     /* rows [0, V) of the padded [Vp, h] */
	HF_ROWS,      /* rows [r0, r0 + shape[0]) of [2 shape[0], cols] (SwiGLU's gate and up) */
	HF_TRANSPOSE, /* GPT-2's Conv1D keeps [in, out] */
	HF_QKV_Q,     /* the query rows of every query group of the fused QKV */
	HF_QKV_K,
	HF_QKV_V,
	HF_C_ATTN,    /* GPT-2: [Q; K; V] of all heads, transposed for a weight */
	HF_UNSQUEEZE, /* Mamba's conv1d.weight: megac's [C, W] is Hugging Face's [C, 1, W], the same values */
};

#define HF_NAME_MAX 160

/* The seq_length and max_position_embeddings an imported Mamba2ForCausalLM
 * records: a state-space model has no positions, nor a longest context. */
#define HF_MAMBA2_POSITIONS 4096

struct hf_tensor {
	char name[HF_NAME_MAX]; /* Hugging Face's */
	char src[HF_NAME_MAX];  /* megac's (Megatron Core's) */
	enum hf_xform x;
	int ndim;
	int64_t shape[3];       /* Hugging Face's shape (3-D: HF_UNSQUEEZE only) */
	int64_t r0;             /* HF_ROWS */
	bool rope_pairs;        /* rows are heads of kv-channels each, rotated in interleaved pairs (2i, 2i+1)
				 * by megac (--rotary-interleaved) and in halves (i, i + k/2) by Hugging Face:
				 * each head's rows are regrouped on the way (Meta's Llama-to-HF permutation) */
	/* DeepSeek-V3 with rope_interleave false: in every block of mla_block rows, the
	 * mla_rope rows from mla_off are a RoPE part that Hugging Face rotates by halves
	 * as stored and megac (Megatron's MLA) after taking the even channels, then the
	 * odd ones: regrouped as rope_pairs are (0: none) */
	int64_t mla_block, mla_off;
	int mla_rope;
};

const char *hf_arch_class(enum hf_arch arch); /* "GPT2LMHeadModel" */

/* The class that can hold c, or error() naming what none can (biases
 * with Llama, RoPE with GPT-2, a shared expert or sigmoid routing with
 * Mixtral, ...). */
int hf_arch_for(const struct gpt_config *c, enum hf_arch *arch);

/* Every tensor of the Hugging Face model, in the order save_pretrained
 * writes a state dict; *out is malloc'd. */
void hf_tensors(const struct gpt_config *c, enum hf_arch arch, struct hf_tensor **out, int *n);

/* The elements of HF tensor t. */
size_t hf_numel(const struct hf_tensor *t);

/* The megac tensor's global shape (src of t) from the configuration. */
void hf_src_shape(const struct gpt_config *c, const struct hf_tensor *t, int *ndim, int64_t *shape);

/* HF tensor t's values (prod(t->shape) floats) from its megac tensor src. */
void hf_export(const struct gpt_config *c, const struct hf_tensor *t, const float *src, float *out);
/* The reverse: put HF tensor t's values where they belong in the megac
 * tensor dst (which other HF tensors fill the rest of). */
void hf_import(const struct gpt_config *c, const struct hf_tensor *t, const float *in, float *dst);

/* config.json for c (torch_dtype from dt; bos/eos ids: -1 leaves them out).
 * Caller frees. */
char *hf_config_json(const struct gpt_config *c, enum hf_arch arch, enum ckpt_dtype dt, int64_t bos, int64_t eos);
char *hf_generation_config_json(int64_t bos, int64_t eos);

/* Read a config.json: the architecture and the model, the vocabulary padded
 * to a multiple of divisible_by x tp as train pads it, seq_length the
 * maximum positions (HF_MAMBA2_POSITIONS for Mamba2ForCausalLM, which has
 * none). error() naming the file and the key. Python's Infinity, -Infinity
 * and NaN (which json.dump writes, and Mamba2Config's time_step_limit
 * holds) are read as the strings "Infinity", "-Infinity" and "NaN". */
int hf_config_read(const char *path, int64_t divisible_by, int64_t tp, struct gpt_config *c, enum hf_arch *arch);

#endif
