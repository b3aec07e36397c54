/*
 * gpt_ckpt.h - the model's side of a megac checkpoint for tools that run or
 * convert a model outside train (ckpt_convert, the logits tool of the tests,
 * later the inference server): the model configuration from the `config`
 * JSON train writes on model.h5 (docs/checkpoint-format.md), and a rank's
 * slices of the weights read by name.
 */
#ifndef MEGAC_MODEL_GPT_CKPT_H
#define MEGAC_MODEL_GPT_CKPT_H

#include "ckpt/ckpt.h"
#include "model/gpt.h"
#include "model/gpt_config.h"

/* The configuration from the JSON text of a `config` attribute (`where`
 * names it in messages). Dropouts are kept; recompute is off. error() and
 * -1 naming the missing or bad key. */
int gpt_config_from_json(struct gpt_config *c, const char *json, const char *where);

/* The same from file `file` (model.h5) of an open checkpoint. */
int gpt_config_from_ckpt(struct gpt_config *c, struct ckpt_reader *r, int file);

/* The JSON train writes for c (the model-shaping keys; tools add theirs).
 * Caller frees. */
char *gpt_config_to_json(const struct gpt_config *c, double rotary_percent);

/* Compare the configuration a checkpoint records (ckpt_json, its `config`
 * attribute) with the one the flags give (flags_json, as gpt_config_to_json
 * and train write it), key by key: each difference that changes what the
 * model computes (shape, positions, RoPE base and share, norm and its
 * epsilon, activation, biases, tied embeddings, tokenizer type, every MoE
 * setting of the forward pass) is appended to math as "--flag: X in the
 * checkpoint, Y from the flags" ("; "-separated); those that only change
 * training (dropouts, precision, auxiliary loss coefficients) to other.
 * Keys an older checkpoint does not record are not compared, nor are
 * vocab_size and padded_vocab_size (the caller's, with advice) and what
 * does not shape the model (batch sizes, seed, seq_length). Returns the
 * number of differences in math, or -1 after error() when a text is not
 * a JSON object. */
struct sbuf;
int gpt_config_diff(const char *ckpt_json, const char *flags_json, const char *where, struct sbuf *math,
		    struct sbuf *other);

/* This rank's slice of parameter p (its tensor-parallel part; the stored
 * tensor is the global one, float32) from tensor `name` of file into dst
 * in p's local layout, reading only the row blocks it needs. */
int gpt_read_param(struct ckpt_reader *r, int file, const char *name, const struct param *p, float *dst);

/* Read every parameter of the model (this rank's slices) from `file`, by
 * name; then refresh the working copy. The model's memory is host memory
 * (the CPU backend). */
int gpt_load_weights(struct gpt_model *m, struct ckpt_reader *r, int file);
/* Each of m's MoE layers' expert bias (--moe-router-enable-expert-bias),
 * which is no parameter; error() naming a missing one. 0 without. */
int gpt_load_expert_bias(struct gpt_model *m, struct ckpt_reader *r, int file);

#endif
