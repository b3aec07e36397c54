/* report_memory - memory per rank before launch, from train's flags. All logic is in lib/memcalc. */
#include "base/args.h"
#include "memcalc/memcalc_command.h"

int main(int argc, char **argv)
{
	return prog_main(argc, argv, &memcalc_prog_info, memcalc_command);
}
