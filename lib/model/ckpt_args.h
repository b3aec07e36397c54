/*
 * ckpt_args.h - Megatron's --use-checkpoint-args: the model's flags taken
 * from the configuration a checkpoint records (docs/checkpoint-format.md),
 * by the rules of Megatron's load_args_from_checkpoint:
 *   - the sizes (--num-layers, --hidden-size, --ffn-hidden-size,
 *     --seq-length, --num-attention-heads, --kv-channels,
 *     --max-position-embeddings) fill only flags not given;
 *   - everything else that shapes the model (query groups, positions and
 *     RoPE, norm, activation, biases, tied embeddings, 1p norms, dropouts,
 *     the MoE settings) is the checkpoint's, a different flag on the command
 *     line being replaced with a warning;
 *   - megac also takes the norm epsilon and the GELU form, which Megatron
 *     leaves to the flags although they change the math;
 *   - with no tokenizer flags (and no --no-use-tokenizer-model-from-
 *     checkpoint-args) the tokenizer the checkpoint records is used.
 * The layout stays the flags': megac's checkpoints load into any.
 */
#ifndef MEGAC_MODEL_CKPT_ARGS_H
#define MEGAC_MODEL_CKPT_ARGS_H

#include "base/args.h"
#include "model/ckpt_tok.h"

/* What ckpt_args_apply allocated for the fields it set; freed by
 * ckpt_args_release after the program is done with the args. */
struct ckpt_args {
	char *owned[16];
	int nowned;
	struct ckpt_tok tok; /* the recorded tokenizer, when it is used */
};

/* Complete *a (a copy of the program's args) from the checkpoint a->load
 * holds (the iteration --ckpt-step names, else the latest); info() says
 * what came from where. error() and -1 when there is no checkpoint or it
 * records no configuration; nothing is done without --use-checkpoint-args. */
int ckpt_args_apply(struct args *a, struct ckpt_args *own);
void ckpt_args_release(struct ckpt_args *own);

#endif
