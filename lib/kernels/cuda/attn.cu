/*
 * attn.cu - the attention ops of the CUDA backend (attention_forward/backward
 * with saved probs, and the flash-style attention_block_forward/backward on
 * global positions), with the semantics of cpu_attn.c and cpu_attn_block.c.
 * Not written yet: the table keeps these NULL.
 */
#include "common.cuh"

void cuda_attn_fill(struct kops *t)
{
	(void)t;
}
