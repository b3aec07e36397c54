/*
 * memcalc_command.h - the report_memory program: train's command
 * line plus --world-size in, Megatron's theoretical memory report out (a
 * readable table, or JSON with --json; docs/report-memory.md).
 */
#ifndef MEGAC_MEMCALC_COMMAND_H
#define MEGAC_MEMCALC_COMMAND_H

#include "base/args.h"
#include "memcalc/megatron_mem.h"

extern const struct prog_info memcalc_prog_info;

int memcalc_command(const struct args *a);

/* The report's inputs from the flags: the layout checks train makes (with
 * a->world_size ranks), the model after Megatron's defaults, the vocabulary
 * (tokenizer, --vocab-size or --padded-vocab-size). pattern holds room for
 * --num-layers entries (caller frees *pattern). Returns 0 or -1 after error(). */
int memcalc_config_from_args(struct mm_config *c, const struct args *a, unsigned char **pattern);

/* The vocabulary before padding: the tokenizer's, --vocab-size, or
 * --padded-vocab-size itself. 0 or -1 after error(). */
int memcalc_vocab_size(const struct args *a, int64_t *vocab);

#endif
