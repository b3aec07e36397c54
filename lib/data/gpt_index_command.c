/*
 * gpt_index_command.c - build_gpt_index: the train/valid/test index caches
 * of GPT pretraining, from the same command line as train, before any GPU
 * is allocated. Megatron builds them on rank 0 at startup while every
 * other rank waits; with this tool a batch script builds them on a CPU
 * node first, and train (or Megatron itself: same names, same bytes) finds
 * them ready. --show-samples prints what the model will be fed.
 */
#include "commands.h"
#include "base/error.h"
#include "base/sbuf.h"
#include "base/timer.h"
#include "base/xalloc.h"
#include "data/gpt_data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const struct prog_info gpt_index_prog_info = {
	"build_gpt_index",
	PROG_GPTINDEX,
	"Build (or check) the GPT dataset index caches that train and Megatron's pretrain_gpt.py use:\n"
	"document, sample and shuffle indices per split and dataset, and blending indices, as .npy\n"
	"files named by the md5 of Megatron's dataset description. Takes a whole train command line;\n"
	"flags that do not shape the data (model, optimizer) are accepted and ignored.",
	"build_gpt_index --data-path 0.3 data/a_text_document 0.7 data/b_text_document --split 98,2,0 "
	"--seq-length 2048 --train-iters 10000 --global-batch-size 512 --eval-interval 1000 "
	"--eval-iters 10 --tokenizer-type GPT2BPETokenizer --vocab-file gpt2-vocab.json "
	"--merge-file gpt2-merges.txt --data-cache-path cache/",
	PROG_TRAIN,
};

static void print_ds(const struct gpt_ds *ds, const char *indent)
{
	info("%s%s %s, sequences [%llu, %llu), %lld requested, %llu samples, %d epoch(s)%s, %s (%s)", indent,
	     strcmp(gpt_ds_prefix(ds), "mock data") ? "GPTDataset" : "MockGPTDataset", gpt_ds_prefix(ds), (unsigned long long)ds->lo, (unsigned long long)ds->hi,
	     (long long)ds->num_samples, (unsigned long long)ds->ix.n_samples, ds->ix.epochs,
	     ds->ix.separate_final_epoch ? " (last one shuffled apart)" : "",
	     ds->from_cache ? "loaded from cache" : "built", ds->hash);
}

static void show_sample(const struct gpt_data *d, int split, uint64_t k)
{
	int64_t S = d->cfg.seq_length;
	int64_t *text = xmalloc((size_t)(S + 1) * sizeof(int64_t));
	int64_t *tokens = xmalloc((size_t)S * sizeof(int64_t)), *labels = xmalloc((size_t)S * sizeof(int64_t));
	int64_t *pos = xmalloc((size_t)S * sizeof(int64_t));
	float *mask = xmalloc((size_t)S * sizeof(float));
	bool want_attn = d->cfg.sample.reset_attention_mask;
	uint8_t *attn = want_attn ? xmalloc((size_t)(S * S)) : NULL;
	int dataset_id;
	uint64_t n = gpt_data_text(d, split, k, text, &dataset_id);
	gpt_sample_build(text, n, S, &d->cfg.sample, tokens, labels, mask, pos, attn);
	struct sbuf sb = SBUF_INIT;
	sbuf_addf(&sb, "{\"split\": \"%s\", \"len\": %llu, \"index\": %llu, \"dataset_id\": %d, \"tokens\": [",
		  gpt_split_names[split], (unsigned long long)d->splits[split].len, (unsigned long long)k, dataset_id);
	for (int64_t i = 0; i < S; i++)
		sbuf_addf(&sb, "%s%lld", i ? ", " : "", (long long)tokens[i]);
	sbuf_addstr(&sb, "], \"labels\": [");
	for (int64_t i = 0; i < S; i++)
		sbuf_addf(&sb, "%s%lld", i ? ", " : "", (long long)labels[i]);
	sbuf_addstr(&sb, "], \"loss_mask\": [");
	for (int64_t i = 0; i < S; i++)
		sbuf_addf(&sb, "%s%.1f", i ? ", " : "", (double)mask[i]);
	sbuf_addstr(&sb, "], \"position_ids\": [");
	for (int64_t i = 0; i < S; i++)
		sbuf_addf(&sb, "%s%lld", i ? ", " : "", (long long)pos[i]);
	sbuf_addch(&sb, ']');
	if (attn) {
		sbuf_addstr(&sb, ", \"attention_mask\": [");
		for (int64_t q = 0; q < S; q++) {
			sbuf_addstr(&sb, q ? ", [" : "[");
			for (int64_t c = 0; c < S; c++)
				sbuf_addf(&sb, "%s%d", c ? ", " : "", attn[q * S + c]);
			sbuf_addch(&sb, ']');
		}
		sbuf_addch(&sb, ']');
	}
	sbuf_addstr(&sb, "}\n");
	fputs(sb.buf, stdout);
	sbuf_release(&sb);
	free(text);
	free(tokens);
	free(labels);
	free(pos);
	free(mask);
	free(attn);
}

int gpt_index_command(const struct args *a)
{
	char *ignored = args_ignored(a);
	if (ignored)
		info("ignoring flags that do not shape the data: %s", ignored);
	free(ignored);
	struct tok_config tc = tok_config_from_args(a);
	struct tokenizer *tok = tok_load(&tc);
	if (!tok)
		return -1;
	struct gpt_data_config cfg;
	struct gpt_data d;
	int ret = -1;
	memset(&d, 0, sizeof(d));
	if (gpt_data_config_from_args(a, tok, 1, &cfg) < 0)
		goto out_tok;
	struct progress pr;
	progress_start(&pr);
	if (gpt_data_build(&cfg, &d) < 0)
		goto out;
	for (int s = 0; s < GPT_NSPLITS; s++) {
		const struct gpt_split *sp = &d.splits[s];
		if (!sp->present) {
			info("%s: none", gpt_split_names[s]);
			continue;
		}
		if (sp->blend) {
			const struct gpt_blend *b = sp->blend;
			info("%s: BlendedDataset of %d, %llu samples%s, %s (%s)", gpt_split_names[s], b->n,
			     (unsigned long long)b->len, b->size < 0 ? " (exhaustive)" : "",
			     b->from_cache ? "loaded from cache" : cfg.cache_path ? "built" : "built, not cached",
			     b->hash);
			for (int i = 0; i < b->n; i++)
				print_ds(b->ds[i], "    ");
		} else {
			info("%s:", gpt_split_names[s]);
			print_ds(sp->single, "    ");
		}
	}
	info("indices ready in %.2f s", progress_elapsed(&pr));
	for (int s = 0; s < GPT_NSPLITS; s++) {
		if (!d.splits[s].present)
			continue;
		for (int i = 0; i < a->show_samples.n; i++) {
			int64_t k = a->show_samples.v[i];
			int64_t len = (int64_t)d.splits[s].len;
			if (k < 0)
				k += len;
			if (k < 0 || k >= len) {
				info("--show-samples %lld: skipped, the %s split has %lld samples",
				     (long long)a->show_samples.v[i], gpt_split_names[s], (long long)len);
				continue;
			}
			show_sample(&d, s, (uint64_t)k);
		}
	}
	ret = 0;
out:
	gpt_data_free(&d);
	gpt_data_config_release(&cfg);
out_tok:
	tok_free(tok);
	return ret;
}
