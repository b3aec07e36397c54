/*
 * megatron_fsdp.h - Megatron-FSDP's `fsdp_dtensor` checkpoint format
 * (--ckpt-format fsdp_dtensor, which Megatron requires with
 * --use-megatron-fsdp) out of and into megac's, for ckpt_convert and train
 * (lib/convert/megatron_ckpt.c dispatches here by format;
 * docs/megatron-checkpoints.md says what is in it).
 */
#ifndef MEGAC_CONVERT_MEGATRON_FSDP_H
#define MEGAC_CONVERT_MEGATRON_FSDP_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "ckpt/pickle.h"
#include "convert/megatron_ckpt.h"

/* Write e's model (and Adam's state when e->of >= 0) into the empty
 * iteration folder dir as one rank of Megatron-FSDP's save would: a PyTorch
 * Distributed Checkpoint of every tensor whole, without metadata.json.
 * config: the source's model configuration (Megatron's argument names). */
int megatron_fsdp_write(const struct megatron_export *e, const json_t *config, const char *dir);

/* Read the fsdp_dtensor iteration folder dir into d as the torch_dist
 * reader reads its folders: *root a dict like torch_dist's common state
 * ("args", "iteration", and with want_optim and Adam's state there
 * "optimizer": {"state": {"common_step"}, "param_groups": [{"betas", "eps"}]}
 * and "opt_param_scheduler"), *model a dict of the global tensors under
 * Megatron Core's names (the wrappers' "module." prefixes gone, SwiGLU's
 * linear_fc1 halves _w and _v joined) and, with want_optim, Adam's moments as
 * optimizer.state.exp_avg.<name> and optimizer.state.exp_avg_sq.<name>.
 * 0, or -1 after error() naming the folder and the item. */
int megatron_fsdp_read(const char *dir, struct pk_doc *d, struct pk_value **root, struct pk_value **model,
		       bool want_optim);

/* ---- what megatron_ckpt.c shares with megatron_fsdp.c ---- */

struct gpt_model;
struct mem_pool;
struct dist_group;
struct param;

/* the TP1 x PP1 model of c, parameters only (report_memory's counting tables) */
int megatron_plan_tp1(struct gpt_model *m, struct mem_pool *pool, struct dist_group *tpg, const struct gpt_config *c);
/* global tensor `name` of parameter p from e's file f (model.h5 or
 * optim.h5), its vocabulary rows padded for the target, as float32 */
int megatron_read_global(const struct megatron_export *e, int f, const char *name, const struct param *p,
			 float *out);
/* layer l's expert bias (l >= L: a depth's) from e's model.h5 into bias
 * (fp32 [E]), its megac name into name: 1, or 0 when the layer has none */
int megatron_read_expert_bias(const struct megatron_export *e, int l, char *name, size_t n, float *bias);
/* Megatron's args for e's model (ckpt_format as e says) */
struct pk_value *megatron_args(struct pk_doc *d, const struct megatron_export *e, const json_t *config);
/* Into the dict common: "optimizer" ({"state": {"common_step"}, "param_groups":
 * [weight-decayed group, group without weight decay]}, nested under a
 * further "optimizer" for 16-bit runs) and "opt_param_scheduler", from e's
 * optim.h5, as Megatron's non-distributed Adam saves them with torch_dist. */
int megatron_optimizer_common(struct pk_doc *d, struct pk_value *common, const struct megatron_export *e);

#endif
