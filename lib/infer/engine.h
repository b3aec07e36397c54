/*
 * engine.h - the inference side of text_gen_server: a model from a
 * checkpoint set up for serving (gpt.h's gpt_setup.serve: the training
 * model's own layers, forward only, with a key/value cache of
 * --inference-max-requests slots of --inference-max-seq-length positions;
 * a hybrid model's Mamba layers keep their recurrent state per slot
 * instead), and steps that take new tokens of several sequences at once.
 * The engine holds no model arithmetic: it checks and describes steps,
 * keeps the tensor-parallel ranks in step, and picks the rows the output
 * layer runs on. Prefill is a step whose sequences bring their prompt (or
 * a chunk of it); decode brings one token.
 */
#ifndef MEGAC_INFER_ENGINE_H
#define MEGAC_INFER_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "ckpt/ckpt.h"
#include "model/gpt.h"

/* The ranks of a serving job: tensor parallelism splits every layer, expert
 * parallelism a MoE layer's experts (each expert-parallel rank runs the
 * step's rows too and sends them to their experts' ranks); all: every rank,
 * which rank 0 tells each step. NULL: none. */
struct infer_groups {
	struct dist_group *tp, *ep, *all;
};

struct infer_engine {
	struct gpt_model m;      /* the model, set up for serving */
	struct dist_group *tp;   /* tensor parallelism: NULL or one rank without */
	struct dist_group *all;  /* every rank of the job: NULL on one rank */
	struct mem_pool pool;
	const struct kops *k;    /* the op table it computes with (the CPU's, or a GPU's) */
	struct gpt_config c;     /* the model's config (c.S: the most tokens in one step) */
	int max_seq, max_req, max_tokens;
	bool recurrent;          /* the model has Mamba layers: their cache is a state, not positions */
	int *held;               /* [max_req] the positions each slot's state stands after */
	bool *seen;              /* [max_req] scratch of check_step */
	int *hrow;               /* the step rows the head runs on */
	int *hdr;                /* a step's description as rank 0 broadcasts it */
	int32_t *btok;
};

/* Load the model of checkpoint file mf (model.h5) and size the cache;
 * max_seq 0: the model's --max-position-embeddings; max_tokens: the most
 * tokens one step takes (prompts of a prefill together; 0: max_seq plus
 * max_req). k: the op table (NULL: the CPU's). With a tensor-parallel group
 * this rank holds its slices of the weights and its heads' cache, as in
 * training (Megatron's column- and row-parallel linears, vocabulary-parallel
 * embedding and head); with an expert-parallel group its share of each MoE
 * layer's experts. Rank 0 of g->all drives the steps (infer_step) and the
 * others follow them (infer_follow). g NULL: one rank. The model must fit
 * the layout (gpt_config_check_layout). error() and -1. */
int infer_init(struct infer_engine *e, struct ckpt_reader *r, int mf, int max_seq, int max_req, int max_tokens,
	       const struct kops *k, const struct infer_groups *g);
void infer_free(struct infer_engine *e);

/* One step over nseq sequences: sequence s lives in cache slot slot[s]
 * (one sequence a slot), already holds pos[s] positions there, and brings
 * n[s] new tokens (all the step's tokens concatenated in tokens). An
 * attention layer's cache is positional: a sequence may start again at any
 * position it holds, overwriting what follows. A Mamba layer's is a
 * recurrent state (docs/mamba.md, "Serving"): with one, pos[s] must be 0
 * (the slot starts afresh) or the positions of the slot's last step, and
 * anything else is refused. A prompt may come in several steps (chunks). Writes to last the raw logits over
 * the unpadded vocabulary of each sequence's last new token, [nseq, V];
 * with prompt_lp (NULL: not wanted), for every new token i that is not its
 * sequence's last, the log-probability of token i + 1 after it. The head
 * runs on INFER_HEAD_ROWS rows at a time, so no step holds logits for all
 * of its tokens. error() and -1 when a sequence would pass max_seq or the
 * step max_tokens. */
#define INFER_HEAD_ROWS 64
int infer_step(struct infer_engine *e, int nseq, const int *slot, const int *pos, const int *n,
	       const int32_t *tokens, float *last, float *prompt_lp);

/* The other ranks: run the steps rank 0 broadcasts, until
 * it calls infer_stop_followers. 0, or -1 after error(). */
int infer_follow(struct infer_engine *e);
void infer_stop_followers(struct infer_engine *e);

#endif
