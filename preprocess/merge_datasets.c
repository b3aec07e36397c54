/* merge_datasets - concatenate the indexed datasets of a directory. All logic is in lib/data. */
#include "base/args.h"
#include "data/commands.h"

int main(int argc, char **argv)
{
	return prog_main(argc, argv, &merge_prog_info, merge_command);
}
