/*
 * convert_int.h - what convert_command.c shares with the other converters
 * of lib/convert (megatron_ckpt.c).
 */
#ifndef MEGAC_CONVERT_CONVERT_INT_H
#define MEGAC_CONVERT_CONVERT_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "base/args.h"
#include "ckpt/ckpt.h"

/* A megac destination for iteration iter of --save: never the source, never
 * over an existing iteration, never moving a tracker back; *created is what
 * to remove on failure (convert_remove_tree), NULL when nothing new. */
int convert_megac_dest(const struct args *a, int64_t iter, char **created);
/* Remove a directory tree (NULL: nothing). */
void convert_remove_tree(const char *path);
/* model.h5's attributes train reads: iteration, checkpoint_version, the
 * configuration JSON, zero sample counters. */
int convert_put_model_attrs(struct ckpt_writer *w, int mf, int64_t iteration, const char *config);
/* ckpt_convert --to megatron: --load's iteration (--iteration, else the
 * latest) written at --save in --ckpt-format torch, torch_dist or fsdp_dtensor, for
 * --target-tensor/pipeline-parallel-size, --dtype (train's torch_dist saves
 * too, train_megatron.c) */
int convert_to_megatron(const struct args *a);
/* The same; replace: an existing iteration at --save is replaced (atomically,
 * as train's own saves replace one) instead of refused */
int convert_to_megatron_ex(const struct args *a, bool replace);
/* Megatron's counters a resumed run continues from (convert_put_model_attrs: zeros) */
struct megac_counters {
	int64_t consumed_train, consumed_valid, skipped_train;
	double flops;
};
int convert_put_model_attrs_counters(struct ckpt_writer *w, int mf, int64_t iteration, const char *config,
				     const struct megac_counters *c);

/* The models the TP ranks of one pipeline stage hold, from report_memory's
 * counting tables: their registries (names, local shapes, the split)
 * without memory (megatron_ckpt.c). m[t] is TP rank t's; made, how many
 * megatron_stage_plan set up before it failed. */
struct gpt_model;
struct gpt_config;
struct mem_pool;
struct dist_group;
struct megatron_stage {
	struct gpt_model *m;
	struct mem_pool *pool;   /* each model's, as long as it lives */
	struct dist_group *tpg;
	int made;
};
int megatron_stage_plan(struct megatron_stage *st, const struct gpt_config *c, int tp, int pp, int stage, int vpp);
void megatron_stage_free(struct megatron_stage *st);

#endif
