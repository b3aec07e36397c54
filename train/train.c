/* train - GPT/Llama pretraining with Megatron-LM's flags. All logic is in lib/train. */
#include "base/args.h"
#include "train/train_command.h"

int main(int argc, char **argv)
{
	return prog_main(argc, argv, &train_prog_info, train_command);
}
