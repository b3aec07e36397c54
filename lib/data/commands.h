/*
 * commands.h - the drivers of the dataset programs, called by their thin
 * main()s: preprocess_data (prep_command) and merge_datasets
 * (merge_command). Each checks the flags that only matter to it, runs, and
 * returns 0, or -1 after error() with every output file removed. dataset_info
 * (info_command) prints what a dataset holds; build_gpt_index
 * (gpt_index_command) builds the GPT training index caches ahead of training.
 */
#ifndef MEGAC_DATA_COMMANDS_H
#define MEGAC_DATA_COMMANDS_H

#include "base/args.h"
#include "data/tok.h"

extern const struct prog_info prep_prog_info;
extern const struct prog_info merge_prog_info;
extern const struct prog_info info_prog_info;
extern const struct prog_info gpt_index_prog_info;

int prep_command(const struct args *a);
int merge_command(const struct args *a);
int info_command(const struct args *a);
int gpt_index_command(const struct args *a);

#endif
