/*
 * convert_command.h - the ckpt_convert program (docs/ckpt-convert.md):
 * megac checkpoints rewritten for another pipeline layout, vocabulary
 * padding, dtype or without the optimizer; exported to a Hugging Face
 * folder (--to hf); imported from one (--from hf).
 */
#ifndef MEGAC_CONVERT_CONVERT_COMMAND_H
#define MEGAC_CONVERT_CONVERT_COMMAND_H

#include "base/args.h"

extern const struct prog_info convert_prog_info;
int convert_command(const struct args *a);

#endif
