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

/* This rank's slice of parameter p (its tensor-parallel part; the stored
 * tensor is the global one, float32) from tensor `name` of file into dst
 * in p's local layout, reading only the row blocks it needs. */
int gpt_read_param(struct ckpt_reader *r, int file, const char *name, const struct param *p, float *dst);

/* Read every parameter of the model (this rank's slices) from `file`, by
 * name; then refresh the working copy. The model's memory is host memory
 * (the CPU backend). */
int gpt_load_weights(struct gpt_model *m, struct ckpt_reader *r, int file);

#endif
