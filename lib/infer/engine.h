/*
 * engine.h - the inference forward pass of text_gen_server (issue 7): a
 * model from a checkpoint on one rank, a key/value cache of
 * --inference-max-requests slots of --inference-max-seq-length positions,
 * and steps that take new tokens of several sequences at once. The
 * token-wise work (norms, every linear layer, the MLP) runs on all the
 * step's tokens together, which is what batching buys; attention runs per
 * sequence against its slot's cache (attention_block_forward, the kernel
 * ring attention uses, with the cached keys at their positions). Prefill is
 * a step whose sequences bring their whole prompt; decode brings one token.
 */
#ifndef MEGAC_INFER_ENGINE_H
#define MEGAC_INFER_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "ckpt/ckpt.h"
#include "model/gpt.h"

struct infer_engine {
	struct gpt_model m;      /* the weights (and gpt's buffers, unused here) */
	struct dist_group *tp;   /* tensor parallelism: NULL or one rank without */
	struct mem_pool pool;
	const struct kops *k;
	struct gpt_config c;
	int max_seq, max_req, max_tokens;
	float *kcache, *vcache;  /* [max_req][L][g][max_seq][k] */
	float *rope_cos, *rope_sin; /* [max_seq, rot] */
	int32_t *kpos, *qpos;    /* 0 .. max_seq-1; a step's query positions */
	/* scratch for max_tokens tokens */
	float *x, *ln, *mean, *rstd, *qkv, *q, *kn, *vn, *att, *lse, *y, *fc1, *act, *rows, *lrows, *grows;
	int32_t *pos, *ltok;
	int *hrow;               /* the step rows the head runs on */
	int *hdr;                /* a step's description as rank 0 broadcasts it */
	int32_t *btok;
};

/* Load the model of checkpoint file mf (model.h5) and size the cache;
 * max_seq 0: the model's --max-position-embeddings; max_tokens: the most
 * tokens one step takes (prompts of a prefill together; 0: max_seq plus
 * max_req). With a tensor-parallel group (NULL: none) this rank holds its
 * slices of the weights and its heads' cache, as in training (Megatron's
 * column- and row-parallel linears, vocabulary-parallel embedding and
 * head); rank 0 of the group drives the steps (infer_step) and the others
 * follow them (infer_follow). error() and -1. */
int infer_init(struct infer_engine *e, struct ckpt_reader *r, int mf, int max_seq, int max_req, int max_tokens,
	       struct dist_group *tp);
void infer_free(struct infer_engine *e);

/* One step over nseq sequences: sequence s lives in cache slot slot[s],
 * already holds pos[s] positions there, and brings n[s] new tokens (all the
 * step's tokens concatenated in tokens). Writes to last the raw logits over
 * the unpadded vocabulary of each sequence's last new token, [nseq, V];
 * with prompt_lp (NULL: not wanted), for every new token i that is not its
 * sequence's last, the log-probability of token i + 1 after it. The head
 * runs on INFER_HEAD_ROWS rows at a time, so no step holds logits for all
 * of its tokens. error() and -1 when a sequence would pass max_seq or the
 * step max_tokens. */
#define INFER_HEAD_ROWS 64
int infer_step(struct infer_engine *e, int nseq, const int *slot, const int *pos, const int *n,
	       const int32_t *tokens, float *last, float *prompt_lp);

/* The other tensor-parallel ranks: run the steps rank 0 broadcasts, until
 * it calls infer_stop_followers. 0, or -1 after error(). */
int infer_follow(struct infer_engine *e);
void infer_stop_followers(struct infer_engine *e);

#endif
