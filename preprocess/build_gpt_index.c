/* build_gpt_index - GPT dataset index caches ahead of training. All logic is in lib/data. */
#include "base/args.h"
#include "data/commands.h"

int main(int argc, char **argv)
{
	return prog_main(argc, argv, &gpt_index_prog_info, gpt_index_command);
}
