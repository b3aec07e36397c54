/*
 * megatron_moe.h - where Megatron-LM's checkpoint formats put the tensors of
 * mixture-of-experts layers, multi-token prediction depths and virtual
 * pipeline stages, against megac's global names (megatron_moe.c; used by
 * megatron_ckpt.c; docs/megatron-checkpoints.md).
 *
 * megac names every tensor globally: decoder.layers.<l>.*, the experts
 * decoder.layers.<l>.mlp.experts.local_experts.<e>.linear_fc<n>.weight with
 * their global number e, a depth's layer mtp.layers.<k>.transformer_layer.*,
 * the router's expert bias decoder.layers.<l>.mlp.router.expert_bias (no
 * parameter: a buffer beside them in model.h5).
 */
#ifndef MEGAC_CONVERT_MEGATRON_MOE_H
#define MEGAC_CONVERT_MEGATRON_MOE_H

#include <stdbool.h>
#include <stdint.h>

#include "ckpt/pickle.h"
#include "model/gpt_config.h"

/* ---- legacy torch: one file per TP x PP x EP rank ---- */

/* The name in a legacy rank file of megac's tensor `name`, on the model
 * chunk whose first layer is l0, of the expert-parallel rank whose first
 * expert is e0: layers numbered from 0 in the chunk, experts from 0 on the
 * rank (SequentialMLP's local_experts.<i>.linear_fc<n>.weight, or with
 * grouped TEGroupedMLP's experts.linear_fc<n>.weight<i>), a depth's layer
 * mtp.layers.<k>.mtp_model_layer.* (the module's own name there). */
char *megatron_legacy_name(const char *name, int l0, int e0, bool grouped);

/* Tensor `name` (megac's) in a legacy rank file's model dict, under any of
 * the names Megatron uses for it: SequentialMLP's or TEGroupedMLP's
 * experts, mtp_model_layer or transformer_layer, the Transformer Engine
 * spec's fused norms or the local spec's (input_layernorm,
 * pre_mlp_layernorm). NULL when none is there. */
const struct pk_value *megatron_legacy_find(const struct pk_value *model, const char *name, int l0, int e0);

/* Add to a legacy model dict the _extra_state entries (empty uint8 tensors)
 * Megatron's Transformer Engine modules carry beside weight `lname` (a
 * legacy name): the linear layers, eh_proj, core_attention beside
 * linear_qkv; a grouped expert linear layer has one, beside weight0. */
void megatron_legacy_extra_state(struct pk_doc *d, struct pk_value *model, const char *lname);

/* Which model chunk of a stage (chunks[i] holding layers [l0[i], l0[i] +
 * nl[i]), the first holding the embedding, the last the head and the depths)
 * holds megac's tensor `name`. */
int megatron_chunk_of(const char *name, int nchunks, const int *l0, const int *nl, int L);

/* ---- torch_dist: global tensors, layers stacked ---- */

/* Whether Megatron stacks the decoder layers on one leading axis: unless
 * its layers differ (dense and MoE ones, --moe-layer-freq other than 1),
 * when each layer keeps decoder.layers.<l>.* of its own. */
bool megatron_dist_stacked(const struct gpt_config *c);

/* Where torch_dist puts megac's tensor `name`: under key, with up to two
 * leading axes before the tensor's own (the layer of a stacked decoder, then
 * the expert): off[i] of size[i]. */
struct megatron_place {
	char *key;
	int nlead;
	int64_t off[2], size[2];
};
void megatron_dist_place(const struct gpt_config *c, bool stacked, const char *name, struct megatron_place *pl);

/* The sharded-object key of module `module`'s _extra_state at place pl
 * (<module>._extra_state/shard_<offsets>_<sizes>, Megatron's unique key of
 * a ShardedObject: shard_0_1 without leading axes); NULL when Megatron has
 * no _extra_state for weight `key`. attention: the TE attention module
 * beside linear_qkv instead. */
char *megatron_dist_extra_state(const struct megatron_place *pl, bool attention);

/* A torch_dist model dict as read (tensors of their own and the layers
 * unstacked, megatron_ckpt.c's read_dist): split each experts.experts.*
 * tensor [E, ...] into the experts' local_experts.<e>.* views, which are
 * megac's names. */
int megatron_dist_split_experts(struct pk_doc *d, struct pk_value *model, const char *where);

/* ---- both ---- */

/* Whether layer l (l >= L: multi-token-prediction depth l - L) is a MoE layer. */
bool megatron_layer_is_moe(const struct gpt_config *c, int l);

/* megac's name of the expert bias of layer l (a depth's for l >= L). */
void megatron_expert_bias_name(const struct gpt_config *c, int l, char *out, size_t n);

#endif
