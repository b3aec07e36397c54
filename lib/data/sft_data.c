/*
 * sft_data.c - the SFT datasets of training (see sft_data.h).
 *
 * Megatron's builder gives SFTDataset, for each split, the line indices
 * [round(b0*n), round(b1*n)) of --split's bounds over the file's n lines
 * (all of a per-split file), and a sample count: train iterations times the
 * global batch for train, Megatron's evaluation counts for valid and test.
 * SFTDataset's sample k is line indices[k % len(indices)]: no shuffling, the
 * file's order, wrapping around. A split without a count (--full-validation)
 * is one pass over its lines here (Megatron's SFTDataset cannot take that).
 *
 * The file is read whole and every line parsed once when the datasets are
 * built, so that a line which is not {"messages": [...]} stops the run
 * before training starts, naming file:line. Lines holding only white space
 * are skipped, as Hugging Face's JSON reader skips blank lines; the line
 * numbers in messages are the file's own.
 *
 * Several files blended by weights are refused: Megatron's blend of
 * SFTDatasets is its BlendedDataset over them, which megac does not build
 * for SFT yet. A single file with a weight is that file.
 */
#include "data/sft_data.h"

#include <ctype.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/sbuf.h"
#include "base/xalloc.h"

struct sft_file {
	char *path;
	char *text;       /* the whole file, NUL-terminated */
	size_t size;
	uint64_t n;       /* lines that are not blank */
	size_t *off, *len; /* [n] each line's bytes */
	uint64_t *lineno; /* [n] 1-based line numbers in the file */
};

static void file_free(struct sft_file *f)
{
	if (!f)
		return;
	free(f->path);
	free(f->text);
	free(f->off);
	free(f->len);
	free(f->lineno);
	free(f);
}

static bool blank(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!isspace((unsigned char)p[i]))
			return false;
	return true;
}

/* The "messages" list of one line, parsed; NULL after error() naming file:line. */
static json_t *line_messages(const struct sft_file *f, uint64_t i, json_t **root)
{
	json_error_t je;
	*root = json_loadb(f->text + f->off[i], f->len[i], JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
	if (!*root) {
		error("%s:%" PRIu64 ": not JSON (%s, column %d)", f->path, f->lineno[i], je.text, je.column);
		return NULL;
	}
	json_t *m = json_is_object(*root) ? json_object_get(*root, "messages") : NULL;
	if (!json_is_array(m)) {
		error("%s:%" PRIu64 ": an SFT line is an object with a \"messages\" list of {\"role\", \"content\"} "
		      "objects",
		      f->path, f->lineno[i]);
		json_decref(*root);
		*root = NULL;
		return NULL;
	}
	return m;
}

static struct sft_file *file_load(const char *path)
{
	struct sbuf sb = SBUF_INIT;
	if (sbuf_read_file(&sb, path) < 0) {
		sbuf_release(&sb);
		return NULL;
	}
	struct sft_file *f = xcalloc(1, sizeof(*f));
	f->path = xstrdup(path);
	f->text = sbuf_detach(&sb, &f->size);
	size_t cap = 0;
	uint64_t lineno = 0;
	for (size_t p = 0; p < f->size;) {
		const char *nl = memchr(f->text + p, '\n', f->size - p);
		size_t e = nl ? (size_t)(nl - f->text) : f->size;
		lineno++;
		if (!blank(f->text + p, e - p)) {
			if (f->n == cap) {
				cap = cap ? 2 * cap : 1024;
				f->off = xrealloc(f->off, cap * sizeof(*f->off));
				f->len = xrealloc(f->len, cap * sizeof(*f->len));
				f->lineno = xrealloc(f->lineno, cap * sizeof(*f->lineno));
			}
			f->off[f->n] = p;
			f->len[f->n] = e - p;
			f->lineno[f->n] = lineno;
			f->n++;
		}
		p = e + 1;
	}
	for (uint64_t i = 0; i < f->n; i++) {
		json_t *root;
		if (!line_messages(f, i, &root)) {
			file_free(f);
			return NULL;
		}
		json_decref(root);
	}
	if (f->n == 0) {
		error("%s: the SFT file has no lines", path);
		file_free(f);
		return NULL;
	}
	return f;
}

/* The one file of a --data-path style list: "PATH" or "WEIGHT PATH". */
static const char *single_path(char *const *items, int n, const char *flag)
{
	if (n == 1)
		return items[0];
	char *end;
	if (n == 2) {
		strtod(items[0], &end);
		if (end != items[0] && !*end)
			return items[1];
	}
	error("%s with --sft: give one JSONL file (blending several SFT files by weights is not in megac yet)", flag);
	return NULL;
}

int sft_data_build(const struct gpt_data_config *cfg, const struct sft_tokenizer *st, int cp, struct sft_data *d)
{
	static const char *const split_flags[GPT_NSPLITS] = { "--train-data-path", "--valid-data-path",
							      "--test-data-path" };
	memset(d, 0, sizeof(*d));
	d->st = st;
	d->seq_length = cfg->seq_length;
	d->cp = cp;
	if (cfg->mock)
		return error("--sft reads conversations from a JSONL file: give it with --data-path (or the per-split "
			     "data paths); there is no mock SFT data");
	if (cfg->n_blend) {
		double bounds[4];
		bool present[3];
		const char *path = single_path(cfg->blend, cfg->n_blend, "--data-path");
		if (!path || gpt_split_parse(cfg->split, bounds, present) < 0)
			return -1;
		struct sft_file *f = file_load(path);
		if (!f)
			return -1;
		d->files[0] = f;
		for (int s = 0; s < GPT_NSPLITS; s++) {
			if (!present[s])
				continue;
			d->splits[s].present = true;
			d->splits[s].f = f;
			gpt_split_range(bounds, s, f->n, &d->splits[s].lo, &d->splits[s].hi);
		}
	} else {
		for (int s = 0; s < GPT_NSPLITS; s++) {
			if (!cfg->n_split_blend[s])
				continue;
			const char *path = single_path(cfg->split_blend[s], cfg->n_split_blend[s], split_flags[s]);
			struct sft_file *f = path ? file_load(path) : NULL;
			if (!f) {
				sft_data_free(d);
				return -1;
			}
			d->files[s] = f;
			d->splits[s] = (struct sft_split){ .present = true, .f = f, .lo = 0, .hi = f->n };
		}
	}
	for (int s = 0; s < GPT_NSPLITS; s++) {
		struct sft_split *sp = &d->splits[s];
		if (!sp->present)
			continue;
		int64_t want = cfg->num_samples[s];
		sp->len = want >= 0 ? (uint64_t)want : sp->hi - sp->lo;
		if (sp->len > 0 && sp->hi == sp->lo) {
			error("the %s split of %s has no lines (%" PRIu64 " lines, --split %s) but %" PRIu64
			      " samples are needed",
			      gpt_split_names[s], sp->f->path, sp->f->n, cfg->split ? cfg->split : "(per-split files)",
			      sp->len);
			sft_data_free(d);
			return -1;
		}
	}
	return 0;
}

void sft_data_free(struct sft_data *d)
{
	for (int s = 0; s < GPT_NSPLITS; s++)
		file_free(d->files[s]);
	memset(d, 0, sizeof(*d));
}

const char *sft_data_where(const struct sft_data *d, int split, uint64_t k, uint64_t *line)
{
	const struct sft_split *sp = &d->splits[split];
	uint64_t i = sp->lo + k % (sp->hi - sp->lo);
	*line = sp->f->lineno[i];
	return sp->f->path;
}

int sft_data_sample(const struct sft_data *d, struct tok_session *s, int split, uint64_t k, struct sft_sample *out)
{
	const struct sft_split *sp = &d->splits[split];
	if (!sp->present || k >= sp->len)
		BUG("SFT sample %" PRIu64 " of the %s split (%" PRIu64 " samples)", k, gpt_split_names[split],
		    sp->len);
	const struct sft_file *f = sp->f;
	uint64_t i = sp->lo + k % (sp->hi - sp->lo);
	json_t *root;
	json_t *m = line_messages(f, i, &root);
	if (!m)
		return -1;
	char where[64 + 4096];
	snprintf(where, sizeof(where), "%.4096s:%" PRIu64, f->path, f->lineno[i]);
	int rc = sft_sample_build(d->st, s, m, d->seq_length, d->cp, where, out);
	json_decref(root);
	return rc;
}
