/*
 * train_megatron.c - train --load on a checkpoint Megatron-LM wrote: its
 * torch_dist and fsdp_dtensor folders (weights, and Adam's state by name)
 * and its legacy torch files (weights), found from the files, so a
 * Megatron run continues in megac with one command.
 *
 * Rank 0 converts the iteration with ckpt_convert's importer
 * (lib/convert/megatron_ckpt.c, docs/megatron-checkpoints.md) into a hidden
 * staging folder beside the checkpoints (--save, else --load), every rank
 * then loads that megac checkpoint as usual, and rank 0 removes it. The
 * folder must be visible to every rank, as --save is.
 *
 *   rank 0: detect --> import into <dir>/.megac-import --(bcast rc)--> all load --> barrier --> rank 0 removes it
 *
 * --ckpt-format torch_dist (or fsdp_dtensor, Megatron-FSDP's) saves the
 * other way: train writes its HDF5 checkpoint as always, into
 * <save>/.megac-hdf5, and once a save is
 * committed rank 0 exports that iteration to <save> with ckpt_convert's
 * exporter (weights in the training dtype, Adam's state, the schedule,
 * the counters; the run's TP x PP as Megatron's args) and removes the
 * staging folder. <save> then holds only Megatron's format, whose tracker
 * the export writes last; a later --load of it is the import above.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"
#include "ckpt/ckpt.h"
#include "convert/convert_int.h"
#include "convert/megatron_ckpt.h"
#include "train/trainer.h"

int train_ckpt_load_any(struct trainer *t)
{
	const struct args *a = t->a;
	int64_t v[2] = { 0, 0 }; /* Megatron's?, the import's result */
	char *stage = xasprintf("%s/.megac-import", a->save ? a->save : a->load);
	dist_watchdog_pause(&t->dist, true); /* the others wait while rank 0 alone imports */
	if (t->dist.rank == 0) {
		int64_t it = -1;
		bool found = true;
		if (a->ckpt_step >= 0)
			it = a->ckpt_step;
		else if (ckpt_latest(a->load, &it) != 0)
			found = false;
		if (found) { /* (it may be CKPT_RELEASE: the release folder) */
			char *dir = ckpt_iter_path(a->load, it);
			v[0] = megatron_iteration_format(dir) != MEGATRON_NONE;
			free(dir);
		}
		if (v[0]) {
			info("--load %s: a checkpoint of Megatron-LM; importing iteration %lld through %s", a->load,
			     (long long)it, stage);
			convert_remove_tree(stage); /* a killed run's leftover */
			struct args ia = *a;
			ia.save = stage;
			ia.iteration = it;
			ia.no_optim = a->no_load_optim || a->finetune;
			v[1] = megatron_import(&ia, false);
		}
	}
	dist_bcast(&t->dist.world_g, v, sizeof(v), 0);
	dist_watchdog_pause(&t->dist, false);
	if (!v[0]) {
		free(stage);
		return train_ckpt_load(t);
	}
	int r = -1;
	if (v[1] == 0) {
		struct args la = *a;
		la.load = stage;
		t->a = &la;
		r = train_ckpt_load(t);
		t->a = a;
	} else if (t->dist.rank != 0) {
		error("rank 0 could not import Megatron's checkpoint %s", a->load);
	}
	dist_barrier(&t->dist.world_g);
	if (t->dist.rank == 0)
		convert_remove_tree(stage);
	free(stage);
	return r;
}

int train_torch_dist_args(const struct args *a, struct args *run)
{
	*run = *a;
	if (!a->ckpt_format || (strcmp(a->ckpt_format, "torch_dist") && strcmp(a->ckpt_format, "fsdp_dtensor")))
		return 1;
	if (!strcmp(a->ckpt_format, "fsdp_dtensor") &&
	    (a->num_layers_per_virtual_pipeline_stage > 0 || a->num_virtual_stages_per_pipeline_rank > 1))
		return error("--ckpt-format fsdp_dtensor: virtual pipeline stages in that format are not in megac yet; "
			     "save torch_dist or megac's own (leave --ckpt-format out)");
	if (a->save) {
		char *stage = xasprintf("%s/.megac-hdf5", a->save);
		run->save = stage; /* lives as long as the run */
	}
	run->ckpt_format = "hdf5";
	return 0;
}

int train_torch_dist_export(struct trainer *t, int64_t it)
{
	const struct args *a = t->user_args;
	struct args ea = *a;
	ea.load = t->a->save;
	ea.save = (char *)t->torch_dist_save;
	ea.iteration = it;
	ea.target_tensor_parallel_size = t->dist.tp.size;
	ea.target_pipeline_parallel_size = t->dist.pp.size;
	ea.target_num_virtual_stages = 0;
	ea.dtype = a->bf16 ? "bf16" : a->fp16 ? "fp16" : "fp32";
	ea.no_optim = a->no_save_optim;
	/* train takes --moe-grouped-gemm without effect on the maths; the
	 * experts' names follow it as Megatron's Transformer Engine spec does
	 * (TEGroupedMLP's in fsdp_dtensor; torch_dist's are the same either way) */
	ea.moe_grouped_gemm = args_given(a, "--moe-grouped-gemm");
	int r = convert_to_megatron_ex(&ea, true);
	if (r == 0) {
		convert_remove_tree(t->a->save);
		if (a->keep_last_n_checkpoints > 0 && ckpt_prune(t->torch_dist_save, (int)a->keep_last_n_checkpoints) < 0)
			warning("could not delete all old checkpoints in %s (see above); training goes on",
				t->torch_dist_save);
	}
	return r;
}
