/*
 * embedding.c - the input embedding (Megatron Core's
 * LanguageModelEmbedding): word embeddings split over tensor-parallel ranks
 * by vocabulary rows (VocabParallelEmbedding), learned position embeddings
 * when the model has no RoPE, and the embedding dropout (site 3L). Forward
 * and backward side by side.
 */
#include "model/gpt_int.h"

/* Vocabulary-parallel embedding: each rank looks up its rows, the sum over
 * TP ranks is the embedding (reduce-scattered onto the sequence shards with
 * SP); the (replicated) positions are added once. */
void embedding_forward(struct gpt_model *m, const struct gpt_pass *P, float *out)
{
	struct gpt_slot *sl = P->sl;
	size_t nh = (size_t)P->N * m->c.h;
	gpt_need_param(m, m->wte);
	gpt_need_param(m, m->wpe);
	/* the position table first: at FSDP level 3 both go through one gather buffer */
	const float *wpe = m->par.tp_rank == 0 ? gpt_param(m, m->wpe, GPT_VIEW_X) : NULL;
	float *dst = m->par.sp ? m->s.tmp : out;
	const int32_t *pos = sl->use_positions ? sl->positions : NULL;
	if (m->direct16)
		m->k->embedding_forward_w16(dst, sl->tokens, pos, gpt_param16(m, m->wte), wpe, P->N, m->c.h,
					    gpt_half_kind(m));
	else
		m->k->embedding_forward(dst, sl->tokens, pos, gpt_param(m, m->wte, GPT_VIEW_W), wpe, P->N, m->c.h);
	if (m->par.sp)
		sp_reduce_scatter(m, P, out, m->s.tmp);
	else
		tp_sum(m, out, nh);
	if (P->train && m->c.hidden_dropout > 0) /* the embedding dropout; backward's mask op is the same map */
		seq_dropout(m, P, out, NULL, out, m->c.hidden_dropout, 3 * m->c.L);
	round_half(m, out, (size_t)P->Nl * m->c.h);
}

void embedding_backward(struct gpt_model *m, const struct gpt_pass *P, const float *dres)
{
	struct gpt_slot *sl = P->sl;
	const float *demb = row_output_grad(m, P, dres, m->c.hidden_dropout, 3 * m->c.L);
	m->k->embedding_backward(gpt_grad(m, m->wte), gpt_grad(m, m->wpe), demb, sl->tokens,
				 sl->use_positions ? sl->positions : NULL, P->N, m->c.h);
	if (m->grad_ready) {
		m->grad_ready(m->grad_ctx, m->wte);
		if (m->wpe >= 0)
			m->grad_ready(m->grad_ctx, m->wpe);
	}
}
