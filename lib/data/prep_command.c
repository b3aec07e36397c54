/*
 * prep_command.c - preprocess_data: flags to datasets. Checks what the
 * shared parser cannot (ranges, combinations), resolves the inputs, loads
 * the tokenizer, and either writes <prefix>_<key>_document.bin/.idx for
 * every --json-keys value (published one after the other, only once every
 * key's files are complete and synced) or, with --find-optimal-num-workers,
 * times worker counts.
 */
#include "commands.h"
#include "base/error.h"
#include "base/xalloc.h"
#include "data/idx.h"
#include "data/input.h"
#include "data/preprocess.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const struct prog_info prep_prog_info = {
	"preprocess_data",
	PROG_PREPROCESS,
	"Tokenize JSONL corpora into Megatron indexed datasets (PREFIX_<key>_document.bin/.idx),\n"
	"byte-identical to Megatron's tools/preprocess_data.py for the same input and tokenizer.\n"
	"Inputs may be compressed (.gz .zst .xz .bz2), tar/zip archives of JSONL files, directories,\n"
	"globs or - (stdin); several inputs form one dataset, in the order given.",
	"preprocess_data --input corpus.jsonl.zst --output-prefix data/my --tokenizer-type GPT2BPETokenizer "
	"--vocab-file gpt2-vocab.json --merge-file gpt2-merges.txt --append-eod --workers 8",
	0,
};

static int check_flags(const struct args *a)
{
	if (a->workers < 1)
		return error("--workers must be at least 1 (got %lld)", (long long)a->workers);
	if (a->workers > 1024)
		return error("--workers %lld: more than 1024 threads is surely a typo", (long long)a->workers);
	if (a->partitions < 1)
		return error("--partitions must be at least 1 (got %lld)", (long long)a->partitions);
	if (a->max_document_bytes < 0)
		return error("--max-document-bytes must be 0 (no limit) or a byte count (got %lld)",
			     (long long)a->max_document_bytes);
	if (a->log_interval < 0)
		return error("--log-interval must be 0 (no progress lines) or more (got %lld)",
			     (long long)a->log_interval);
	if (a->vocab_extra_ids != 0)
		return error("--vocab-extra-ids %lld: megac has no T5 span-masking tokens; use 0",
			     (long long)a->vocab_extra_ids);
	if (a->json_keys.n < 1)
		return error("--json-keys needs at least one key");
	for (int i = 0; i < a->json_keys.n; i++)
		for (int j = 0; j < i; j++)
			if (!strcmp(a->json_keys.v[i], a->json_keys.v[j]))
				return error("--json-keys lists '%s' twice", a->json_keys.v[i]);
	if (a->find_optimal_num_workers) {
		if (a->workers_to_check.n < 1)
			return error("--workers-to-check needs at least one count");
		for (int i = 0; i < a->workers_to_check.n; i++)
			if (a->workers_to_check.v[i] < 1 || a->workers_to_check.v[i] > 1024)
				return error("--workers-to-check: %lld is not a usable worker count",
					     (long long)a->workers_to_check.v[i]);
		if (a->max_documents < 1)
			return error("--max-documents must be at least 1");
	}
	return 0;
}

static int find_optimal(const struct args *a, struct prep_config *cfg)
{
	int n = a->workers_to_check.n;
	double *rate = xcalloc((size_t)n, sizeof(double));
	cfg->writers = NULL;
	cfg->max_documents = a->max_documents;
	cfg->log_interval = 0;
	for (int i = 0; i < n; i++) {
		struct prep_stats st;
		cfg->workers = (int)a->workers_to_check.v[i];
		info("Processing data with %d workers.", cfg->workers);
		if (prep_run(cfg, &st) < 0) {
			free(rate);
			return -1;
		}
		rate[i] = (double)st.documents / st.seconds;
		info("  %llu documents in %.2f s: %.1f docs/s, %.2f MB/s", (unsigned long long)st.documents,
		     st.seconds, rate[i], (double)st.bytes / st.seconds / (1 << 20));
	}
	printf("\n-----------------------------------\nPerformance results (fastest -> slowest):\n");
	int *order = xcalloc((size_t)n, sizeof(int));
	for (int i = 0; i < n; i++)
		order[i] = i;
	for (int i = 0; i < n; i++)
		for (int j = i + 1; j < n; j++)
			if (rate[order[j]] > rate[order[i]]) {
				int t = order[i];
				order[i] = order[j];
				order[j] = t;
			}
	for (int i = 0; i < n; i++)
		printf("%d. %lld workers -> avg. docs/s: %.4f\n", i + 1, (long long)a->workers_to_check.v[order[i]],
		       rate[order[i]]);
	printf("\n-----------------------------------\nThe most optimal num of workers is %lld with avg. "
	       "preprocessed docs/s: %.4f.\n-----------------------------------\n",
	       (long long)a->workers_to_check.v[order[0]], rate[order[0]]);
	free(order);
	free(rate);
	return 0;
}

int prep_command(const struct args *a)
{
	if (check_flags(a) < 0)
		return -1;
	struct strlist files;
	if (input_expand(&a->input, &files) < 0)
		return -1;
	int ret = -1;
	struct tokenizer *tok = NULL;
	struct idx_writer *w = NULL;
	int opened = 0;
	int stride = a->partitions > 1 && !a->keep_sequential_samples ? (int)a->partitions : 1;
	if (stride > 1 || a->find_optimal_num_workers) {
		/* these read the input more than once: only regular files can be re-read */
		const char *why = stride > 1 ? "--partitions reorders documents as Megatron does, which reads the input "
					       "once per partition"
					     : "--find-optimal-num-workers reads the input once per worker count";
		for (int i = 0; i < files.n; i++) {
			struct stat st;
			if (!strcmp(files.v[i], "-")) {
				error("%s; standard input can be read only once", why);
				goto out;
			}
			if (stat(files.v[i], &st) < 0 || !S_ISREG(st.st_mode)) {
				error("%s; '%s' is not a regular file (a pipe or device can be read only once)", why,
				      files.v[i]);
				goto out;
			}
		}
	}
	const char *chunk_env = getenv("MEGAC_CHUNK_BYTES");
	size_t chunk_size = 0;
	if (chunk_env) {
		char *end;
		errno = 0;
		long long v = strtoll(chunk_env, &end, 10);
		if (!*chunk_env || *end || errno || v < 1 || v > (1LL << 30)) {
			error("MEGAC_CHUNK_BYTES='%s': expected a byte count from 1 to 1073741824", chunk_env);
			goto out;
		}
		chunk_size = (size_t)v;
	}
	struct tok_config tc = tok_config_from_args(a);
	if (!(tok = tok_load(&tc)))
		goto out;
	if (a->append_eod && tok_eod(tok) < 0) { /* before any output file exists */
		error("--append-eod: tokenizer %s has no end-of-document token", tok_describe(tok));
		goto out;
	}
	int dtype = idx_optimal_dtype(tok_vocab_size(tok));
	if (a->append_eod && dtype == IDX_UINT16 && tok_eod(tok) > 0xFFFF) {
		error("--append-eod: the end-of-document id %lld does not fit the uint16 tokens a vocabulary of %lld "
		      "gets%s", (long long)tok_eod(tok), (long long)tok_vocab_size(tok),
		      args_given(a, "--null-tokenizer-eod-id") ? " (check --null-tokenizer-eod-id)" : "");
		goto out;
	}
	info("tokenizer %s; tokens stored as %s", tok_describe(tok), idx_dtype_name(dtype));

	struct prep_config cfg = {
		.files = files.v,
		.n_files = files.n,
		.keys = a->json_keys.v,
		.n_keys = a->json_keys.n,
		.tok = tok,
		.append_eod = a->append_eod,
		.workers = (int)a->workers,
		.stride = stride,
		.log_interval = a->log_interval,
		.max_documents = -1,
		.skip_bad_lines = a->skip_bad_lines,
		.max_document_bytes = (uint64_t)a->max_document_bytes,
		.chunk_size = chunk_size, /* tests shrink it to exercise reordering */
	};
	if (a->find_optimal_num_workers) {
		ret = find_optimal(a, &cfg);
		goto out;
	}
	w = xcalloc((size_t)a->json_keys.n, sizeof(*w));
	for (; opened < a->json_keys.n; opened++) {
		char *prefix = xasprintf("%s_%s_document", a->output_prefix, a->json_keys.v[opened]);
		int r = idx_writer_open(&w[opened], prefix, dtype, false);
		free(prefix);
		if (r < 0)
			goto out;
	}
	cfg.writers = w;
	struct prep_stats st;
	if (prep_run(&cfg, &st) < 0)
		goto out;
	for (int k = 0; k < opened; k++)
		if (idx_writer_finish(&w[k]) < 0)
			goto out;
	for (int k = 0; k < opened; k++) {
		char *prefix = xstrdup(w[k].prefix);
		uint64_t docs = w[k].n_docs, seqs = w[k].n_seqs, toks = w[k].n_tokens;
		if (idx_writer_publish(&w[k]) < 0) {
			free(prefix);
			goto out;
		}
		info("wrote %s.bin/.idx: %llu documents, %llu sequences, %llu tokens (%s)", prefix,
		     (unsigned long long)docs, (unsigned long long)seqs, (unsigned long long)toks,
		     idx_dtype_name(dtype));
		free(prefix);
	}
	info("read %.2f MB from %d file(s)/member(s) in %.2f s: %.2f MB/s, %.0f tokens/s, %.1f docs/s",
	     (double)st.bytes / (1 << 20), st.sources, st.seconds, (double)st.bytes / st.seconds / (1 << 20),
	     (double)st.tokens / st.seconds, (double)st.documents / st.seconds);
	if (st.bad_lines)
		warning("skipped %llu bad line(s) (--skip-bad-lines); the first ones are listed above",
			(unsigned long long)st.bad_lines);
	if (st.blank_lines)
		info("ignored %llu blank line(s)", (unsigned long long)st.blank_lines);
	ret = 0;
out:
	for (int k = 0; k < opened; k++)
		idx_writer_abort(&w[k]);
	free(w);
	tok_free(tok);
	for (int i = 0; i < files.n; i++)
		free(files.v[i]);
	free(files.v);
	return ret;
}
