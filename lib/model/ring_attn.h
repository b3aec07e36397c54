/*
 * ring_attn.h - context-parallel causal attention (Megatron's
 * --context-parallel-size): the sequence is split over the ranks of the
 * context-parallel group, and K/V blocks travel around the group as a ring
 * while each rank attends its own queries to them (ring attention, with
 * Megatron's load-balanced chunking).
 *
 * Chunking: the S positions of a sequence are cut into 2·cp chunks of
 * c = S/(2·cp); CP rank r holds chunk r followed by chunk 2·cp-1-r, T = 2c
 * local positions: local j is global r·c + j for j < c and
 * (2·cp-1-r)·c + (j-c) for j >= c. Pairing an early chunk with a late one
 * gives every rank the same causal work. q[B,a,T,k], kk/v[B,g,T,k] and
 * out[B,T,a*k] are attention_forward's layouts over the local positions;
 * attention is causal over global positions and, with document ids
 * doc[B, S] of the whole sequence (every rank holds all of them), within
 * each document (--reset-attention-mask on packed sequences).
 *
 * Forward: cp steps; at step i rank r attends to the K/V of rank (r-i) mod
 * cp with attention_block_forward, merging into out and lse by the
 * online-softmax rule, while that block already travels on to rank r+1 and
 * the next arrives from r-1 (non-blocking sends overlapped with compute).
 * For i > 0 exactly half of the (query chunk, key chunk) pairs are causal
 * and the block op skips the others. Backward circulates K/V once more and,
 * with them, a dK/dV accumulator per block: it starts (zero) at rank s+1 for
 * block s, collects each rank's share, and after step cp-1 reaches s, which
 * adds it to its own block's gradient.
 *
 * Dropout draws the masks of the one-rank model: counter
 * offset + ((h*B+b)*S + tq)*S + tk on global positions and the global S, with
 * the offset the caller would pass to attention_forward with T = S.
 *
 * Communication per rank per layer (bytes on the cp group's counter, fp32,
 * n = B·g·(S/cp)·k floats in one rank's K, and as many in its V):
 *   forward   (cp-1) · 2n · 4 = 8·(cp-1)·B·g·k·S/cp
 *   backward  (cp-1) · 2n · 4 for K/V  +  (cp-1) · 2n · 4 for dK/dV
 *           = 16·(cp-1)·B·g·k·S/cp
 * and nothing with cp = 1. (A recomputed layer's forward sends its share
 * again.) Memory: with cp > 1, four ring buffers of 2n floats each.
 */
#ifndef MEGAC_MODEL_RING_ATTN_H
#define MEGAC_MODEL_RING_ATTN_H

#include <stdint.h>

#include "dist/dist.h"
#include "kernels/ops.h"
#include "tensor/mem.h"

struct ring_attn {
	struct dist_group *cp;
	struct mem_pool *mem;      /* the buffers' pool; mem->k is the op table used */
	int B, S, T, a, g, k;      /* T = S / cp local positions */
	int c;                     /* chunk length S / (2 cp) */
	int32_t *pos;              /* [cp][T] every rank's global positions (backend memory) */
	float *kv_buf[2];          /* K/V blocks in flight, [K | V] of 2·B·g·T·k floats (cp > 1) */
	float *dkv_buf[2];         /* travelling dK/dV accumulators, same shape (cp > 1) */
};

/* Set up for the group cp and sequences of S positions; buffers come from
 * mem. error() and -1 when S is not a multiple of 2·cp or the heads do not
 * split into g groups. */
int ring_attn_init(struct ring_attn *r, struct mem_pool *mem, struct dist_group *cp, int B, int S,
		   int a, int g, int k);
void ring_attn_free(struct ring_attn *r);

/* The global position of this rank's local position j (0 <= j < T). */
int ring_attn_global_pos(const struct ring_attn *r, int j);

/*
 * out[B,T,a*k] and lse[B,a,T] (kept for backward) from this rank's q, kk, v;
 * a collective over the cp group. doc (NULL: none), scale, window (sliding
 * window on global positions), dropout and offset as attention_forward on
 * the whole sequence; doc[B, S] in the backend's memory.
 */
void ring_attn_forward(struct ring_attn *r, float *out, float *lse, const float *q,
		       const float *kk, const float *v, const int32_t *doc, float scale, int window, float dropout_p,
		       uint64_t seed, uint64_t offset);
/*
 * dq, dk, dv (overwritten, like attention_backward; none may be NULL) of this
 * rank's positions from dout and what forward used and gave (out, lse).
 */
void ring_attn_backward(struct ring_attn *r, float *dq, float *dk, float *dv, const float *dout,
			const float *out, const float *lse, const float *q, const float *kk,
			const float *v, const int32_t *doc, float scale, int window, float dropout_p, uint64_t seed,
			uint64_t offset);

#endif
