/* ckpt_convert - checkpoints between layouts, and to/from Hugging Face. All logic is in lib/convert. */
#include "base/args.h"
#include "convert/convert_command.h"

int main(int argc, char **argv)
{
	return prog_main(argc, argv, &convert_prog_info, convert_command);
}
