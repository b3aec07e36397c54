/* merge_datasets - concatenate the indexed datasets of a directory. All logic is in lib/data. */
#include "base/args.h"
#include "base/error.h"
#include "data/commands.h"

int main(int argc, char **argv)
{
	struct args a;
	log_init(argv[0], 0, 1);
	int r = args_parse(&a, &merge_prog_info, argc, argv);
	if (r == 0)
		r = merge_command(&a);
	args_free(&a);
	return r < 0 ? DIE_EXIT_CODE : 0;
}
