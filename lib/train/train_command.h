/*
 * train_command.h - the train program's entry points (see train_command.c).
 */
#ifndef MEGAC_TRAIN_TRAIN_COMMAND_H
#define MEGAC_TRAIN_TRAIN_COMMAND_H

#include "base/args.h"

extern const struct prog_info train_prog_info;
int train_command(const struct args *a);

#endif
