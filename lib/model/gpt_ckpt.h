/*
 * gpt_ckpt.h - the model's side of a megac checkpoint for tools that run or
 * convert a model outside train (ckpt_convert, the logits tool of the tests,
 * later the inference server): the model configuration from the `config`
 * JSON train writes on model.h5 (docs/checkpoint-format.md), and the whole
 * weights of a one-rank model read by name.
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

/* Read every parameter of a one-rank model (no TP, no PP) from `file`, by
 * name, as float32 at its global shape; then refresh the working copy. */
int gpt_load_weights(struct gpt_model *m, struct ckpt_reader *r, int file);

#endif
