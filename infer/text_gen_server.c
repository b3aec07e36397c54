/* text_gen_server - HTTP text generation from a checkpoint. All logic is in lib/infer. */
#include "base/args.h"
#include "infer/serve_ckpt.h"
#include "infer/server.h"

int main(int argc, char **argv)
{
	return prog_main(argc, argv, &server_prog_info, serve_command);
}
