/*
 * serve_ckpt.h - what text_gen_server settles about its checkpoint before
 * server.c loads and serves it: the files of the iteration it serves come
 * from one save, and the tokenizer fits the model. Without tokenizer flags
 * the tokenizer the checkpoint records (model/ckpt_tok.h) is used: its
 * files are written to a private temporary folder for the server to load,
 * removed when the program ends. With tokenizer flags, a tokenizer of
 * another type, or whose vocabulary (padded as the checkpoint pads it)
 * is not the model's, is refused: served, it would answer with text
 * decoded through the wrong vocabulary, or none at all.
 */
#ifndef MEGAC_INFER_SERVE_CKPT_H
#define MEGAC_INFER_SERVE_CKPT_H

#include "base/args.h"

/* text_gen_server's command: the checks above, then server_command. */
int serve_command(const struct args *a);

#endif
