/*
 * megatron_ckpt.h - ckpt_convert's Megatron side: Megatron-LM's legacy
 * `torch` checkpoint format (iter_N/mp_rank_TT[_PPP]/model_optim_rng.pt,
 * torch.save's zip of a pickled state dict) out of and into megac's
 * layout-independent HDF5 checkpoint. docs/megatron-checkpoints.md says what
 * is written and read.
 */
#ifndef MEGAC_CONVERT_MEGATRON_CKPT_H
#define MEGAC_CONVERT_MEGATRON_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/args.h"
#include "ckpt/ckpt.h"
#include "model/gpt_config.h"

/* What the export needs of the source (opened by convert_command.c). */
struct megatron_export {
	struct ckpt_reader *r; /* the megac checkpoint */
	int mf;                /* its model.h5 */
	const struct gpt_config *c; /* its model, vocabulary padded for the target (Vp) */
	int src_vp;            /* the rows its vocabulary tensors hold */
	int64_t iteration;
	int tp, pp;            /* the target layout */
	int ep, vpp;           /* legacy: expert-parallel files (mp_rank_..._EEE), model chunks per stage */
	bool grouped;          /* legacy: TEGroupedMLP's expert names (--moe-grouped-gemm), else SequentialMLP's */
	enum ckpt_dtype dtype; /* of the written tensors: CKPT_F32, CKPT_BF16 or CKPT_F16 */
	bool dist;             /* torch_dist (PyTorch Distributed Checkpoint), else legacy torch */
	bool fsdp;             /* with dist: Megatron-FSDP's fsdp_dtensor instead (megatron_fsdp.h) */
	int of;                /* the source's optim.h5, or -1: no optimizer state to write */
	double beta1, beta2, eps; /* Adam's, for Megatron's param_groups (megac's checkpoint does not hold them) */
};

/* The floats a buffer needs for p's global tensor as read_global fills it:
 * the tensor, or the source's vocabulary rows when those are more (the
 * exporters of each format grow their buffers to it) */
struct param;
size_t megatron_global_need(const struct megatron_export *e, const struct param *p);

/* What Megatron wrote in iteration folder dir, from its files: torch_dist's
 * .metadata with metadata.json, fsdp_dtensor's .metadata without it (as
 * Megatron tells them apart), or the legacy mp_rank_00[_000]/model_optim_rng.pt. */
enum megatron_format { MEGATRON_NONE, MEGATRON_TORCH, MEGATRON_TORCH_DIST, MEGATRON_FSDP_DTENSOR };
enum megatron_format megatron_iteration_format(const char *dir);

/* Write --save as Megatron's legacy checkpoint of e's model (all or
 * nothing: a hidden directory renamed into place, the tracker last). */
int megatron_torch_export(const struct args *a, const struct megatron_export *e);

/* Read the Megatron checkpoint at --load (legacy torch: the TP x PP layout
 * its mp_rank folders say; or torch_dist or fsdp_dtensor, with Adam's state
 * when it is there and --no-optim is not given; the model from its args, the
 * vocabulary from the tokenizer flags when given) and write it as a megac
 * checkpoint at --save, the same iteration. Transformer Engine names, or
 * the local layer spec's norms (input_layernorm, pre_mlp_layernorm). */
int megatron_torch_import(const struct args *a);
/* The same; tell: say what was written and how to continue (ckpt_convert),
 * or nothing (train's own import, train_megatron.c). */
int megatron_import(const struct args *a, bool tell);

#endif
