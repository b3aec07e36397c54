/*
 * train_command.h - the train program's entry points (see train_command.c).
 */
#ifndef MEGAC_TRAIN_TRAIN_COMMAND_H
#define MEGAC_TRAIN_TRAIN_COMMAND_H

#include "base/args.h"

struct dist_layout;

extern const struct prog_info train_prog_info;
int train_command(const struct args *a);

/* train's refusals that do not depend on the ranks of the job, and those
 * that depend on its layout only; report_memory's prediction and --advise
 * run them too, so that what they plan is what train accepts. error() and
 * -1 naming the flags. */
int train_check_flags(const struct args *a);
int train_check_layout(const struct args *a, const struct dist_layout *l);

#endif
