/*
 * megatron_distopt.h - Megatron's distributed optimizer's state in a
 * torch_dist checkpoint, read as the non-distributed optimizer's named
 * tensors (megatron_distopt.c says how; docs/megatron-checkpoints.md).
 */
#ifndef MEGAC_CONVERT_MEGATRON_DISTOPT_H
#define MEGAC_CONVERT_MEGATRON_DISTOPT_H

#include <stdbool.h>

#include "ckpt/pickle.h"
#include "model/gpt.h"
#include "model/gpt_config.h"

/* The rank's parameters (indices into m's registry, all of them) in
 * Megatron's named_parameters() order, which its optimizers follow (the
 * distributed optimizer's buffers backwards, the legacy format's Adam
 * state indices forwards): GPTModel's embedding, decoder (its layers,
 * then final_layernorm), output_layer; local: the local layer spec's
 * module order (its norms are modules of their own), else Transformer
 * Engine's. Returns their number, or -1 after error() naming a parameter
 * whose place it does not know (MoE, MTP, MLA). where: for messages. */
int megatron_param_order(const struct gpt_model *m, bool local, int *order, const char *where);

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
