/*
 * megatron_distopt.h - Megatron's distributed optimizer's state in a
 * torch_dist checkpoint, read as the non-distributed optimizer's named
 * tensors (megatron_distopt.c says how; docs/megatron-checkpoints.md).
 */
#ifndef MEGAC_CONVERT_MEGATRON_DISTOPT_H
#define MEGAC_CONVERT_MEGATRON_DISTOPT_H

#include <stdbool.h>

#include "ckpt/pickle.h"
#include "model/gpt_config.h"

/* root (the common state) holds the distributed optimizer's state: its
 * optimizer names a param_state_sharding_type */
bool megatron_distopt_state(const struct pk_value *root);

/* Into model (the dict of the checkpoint's global tensors, d's nodes):
 * optimizer.state.{fp32_param,exp_avg,exp_avg_sq}.<megac name> for every
 * parameter of model c; root's optimizer becomes the non-distributed
 * optimizer's {"optimizer": {"state": {"common_step"}, "param_groups"},
 * "grad_scaler"}. dir: the torch_dist iteration folder; where: for
 * messages. 0, or -1 after error() (an unknown layout is refused by name). */
int megatron_distopt_read(const char *dir, const struct gpt_config *c, struct pk_doc *d, struct pk_value *root,
			  struct pk_value *model, const char *where);

#endif
