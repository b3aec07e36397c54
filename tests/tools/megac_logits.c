/*
 * megac_logits.c - a test tool: the logits megac's own forward pass gives
 * for token ids, from a checkpoint, as the reference side of ckpt_convert's
 * Hugging Face tests (tests/prog/ckpt_convert.sh).
 *
 *   megac_logits CKPT_DIR IDS.npy OUT.npy [MTP.npy]
 *
 * IDS.npy: int32 or int64 [B, T] with T <= the model's seq_length. The
 * model runs on one rank in fp32, without dropout; positions past T are
 * filled with token 0 (causal attention keeps them from the first T).
 * OUT.npy: float32 [B, T, vocab] (the padding rows of the vocabulary left
 * out). MTP.npy (a model with multi-token prediction): each depth's logits
 * float32 [D, B, T, vocab], from a training forward pass (the depths run
 * only in training; dropout stays off), as Megatron's process_mtp_loss
 * computes them: depth k at position t predicts token t + k + 2.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"
#include "ckpt/ckpt.h"
#include "data/npy.h"
#include "kernels/ops.h"
#include "model/gpt.h"
#include "model/gpt_ckpt.h"

int main(int argc, char **argv)
{
	log_init("megac_logits", 0, 1);
	if (argc != 4 && argc != 5)
		die("usage: megac_logits CKPT_DIR IDS.npy OUT.npy [MTP.npy]");
	int64_t iter;
	struct ckpt_reader *r = ckpt_open_latest(argv[1], &iter);
	int mf = r ? ckpt_file_open(r, "model.h5") : -1;
	struct gpt_config c;
	if (mf < 0 || gpt_config_from_ckpt(&c, r, mf) < 0)
		die("cannot read the model of '%s'", argv[1]);
	struct npy_array ids;
	if (npy_load(argv[2], &ids) < 0)
		return DIE_EXIT_CODE;
	if (ids.ndim != 2 || (ids.dtype != NPY_I4 && ids.dtype != NPY_I8) || ids.shape[1] > (uint64_t)c.S)
		die("'%s': expected int32/int64 ids [B, T] with T <= %d", argv[2], c.S);
	/* a model of T positions: the weights do not depend on seq_length (and
	 * an imported model's seq_length is its longest context) */
	c.S = (int)ids.shape[1];
	int B = (int)ids.shape[0], T = c.S, S = c.S;
	c.hidden_dropout = c.attention_dropout = 0;
	const struct kops *k = kops_cpu();
	struct mem_pool pool;
	mem_pool_init(&pool, k);
	struct gpt_model m;
	if (gpt_init(&m, &c, k, &pool, B, GPT_FP32, NULL, false) < 0 || gpt_load_weights(&m, r, mf) < 0)
		return DIE_EXIT_CODE;
	int32_t *tok = xcalloc((size_t)B * S, sizeof(int32_t)), *lab = xcalloc((size_t)B * S, sizeof(int32_t));
	for (int b = 0; b < B; b++)
		for (int t = 0; t < T; t++)
			tok[(size_t)b * S + t] = ids.dtype == NPY_I4 ? ((const int32_t *)ids.data)[(size_t)b * T + t]
								  : (int32_t)((const int64_t *)ids.data)[(size_t)b * T + t];
	float *losses = xmalloc((size_t)B * S * sizeof(float));
	bool mtp = argc == 5;
	if (mtp && !c.mtp)
		die("'%s' has no multi-token prediction depths", argv[1]);
	for (int b = 0; mtp && b < B; b++) /* (the labels only weigh the losses) */
		for (int t = 0; t < T; t++)
			lab[(size_t)b * S + t] = t + 1 < T ? tok[(size_t)b * S + t + 1] : 0;
	gpt_forward(&m, tok, lab, NULL, NULL, 0, mtp, losses);
	float *all = xmalloc((size_t)B * S * c.Vp * sizeof(float));
	k->to_host(all, m.chunks[0].slots[0].logits, (size_t)B * S * c.Vp * sizeof(float));
	float *out = xmalloc((size_t)B * T * c.V * sizeof(float));
	for (int b = 0; b < B; b++)
		for (int t = 0; t < T; t++)
			memcpy(out + ((size_t)b * T + t) * c.V, all + ((size_t)b * S + t) * c.Vp, (size_t)c.V * sizeof(float));
	uint64_t shape[3] = { (uint64_t)B, (uint64_t)T, (uint64_t)c.V };
	int rc = npy_save(argv[3], NPY_F4, 3, shape, out);
	if (rc == 0 && mtp) {
		float *d = xmalloc((size_t)c.mtp * B * T * c.V * sizeof(float));
		for (int depth = 0; depth < c.mtp; depth++) {
			k->to_host(all, m.chunks[0].slots[0].mtp[depth].logits, (size_t)B * S * c.Vp * sizeof(float));
			for (int b = 0; b < B; b++)
				for (int t = 0; t < T; t++)
					memcpy(d + (((size_t)depth * B + b) * T + t) * c.V, all + ((size_t)b * S + t) * c.Vp,
					       (size_t)c.V * sizeof(float));
		}
		uint64_t dshape[4] = { (uint64_t)c.mtp, (uint64_t)B, (uint64_t)T, (uint64_t)c.V };
		rc = npy_save(argv[4], NPY_F4, 4, dshape, d);
		free(d);
	}
	free(out), free(all), free(losses), free(tok), free(lab);
	npy_close(&ids);
	gpt_free(&m);
	ckpt_close(r);
	return rc < 0 ? DIE_EXIT_CODE : 0;
}
