/* preprocess_data - JSONL corpora to Megatron indexed datasets. All logic is in lib/data. */
#include "base/args.h"
#include "data/commands.h"

int main(int argc, char **argv)
{
	return prog_main(argc, argv, &prep_prog_info, prep_command);
}
