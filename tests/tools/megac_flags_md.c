/* megac_flags_md - print docs/flags.md as the flag tables say it (make docs/flags.md). */
#include "base/args.h"

int main(void)
{
	args_write_flags_md(stdout);
	return ferror(stdout) ? 1 : 0;
}
