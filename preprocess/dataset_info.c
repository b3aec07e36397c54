/* dataset_info - look inside an indexed dataset. All logic is in lib/data. */
#include "base/args.h"
#include "data/commands.h"

int main(int argc, char **argv)
{
	return prog_main(argc, argv, &info_prog_info, info_command);
}
