/*
 * merge_command.c - merge_datasets: every .bin/.idx pair of a directory into
 * one dataset, in sorted name order, as Megatron's tools/merge_datasets.py
 * does: a file without its partner, or any
 * other file, is an error; the first dataset's dtype is the output's.
 */
#include "commands.h"
#include "base/error.h"
#include "base/xalloc.h"
#include "data/idx.h"

#include <dirent.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

const struct prog_info merge_prog_info = {
	"merge_datasets",
	PROG_MERGE,
	"Concatenate every indexed dataset (.bin/.idx pair) in a directory into one, in sorted name\n"
	"order, byte-identical to Megatron's tools/merge_datasets.py.",
	"merge_datasets --input shards/ --output-prefix data/all_text_document",
	0,
};

static int cmp_str(const void *x, const void *y)
{
	return strcmp(*(char *const *)x, *(char *const *)y);
}

int merge_command(const struct args *a)
{
	if (a->input.n != 1)
		return error("--input takes one directory (got %d values)", a->input.n);
	const char *dir = a->input.v[0];
	struct stat st;
	if (stat(dir, &st) < 0 || !S_ISDIR(st.st_mode))
		return error("--input '%s' is not a directory or does not exist", dir);
	DIR *d = opendir(dir);
	if (!d)
		return error_errno("cannot read directory '%s'", dir);
	char **prefixes = NULL;
	size_t n = 0, cap = 0;
	int ret = -1;
	struct dirent *e;
	while ((e = readdir(d))) {
		char *path = xasprintf("%s/%s", dir, e->d_name);
		int is_file = stat(path, &st) == 0 && S_ISREG(st.st_mode);
		if (!is_file) {
			free(path);
			continue;
		}
		const char *dot = strrchr(e->d_name, '.');
		size_t stem = dot && dot != e->d_name ? (size_t)(dot - e->d_name) : strlen(e->d_name);
		const char *ext = dot && dot != e->d_name ? dot : "";
		char *prefix = xasprintf("%s/%.*s", dir, (int)stem, e->d_name);
		char *partner = xasprintf("%s%s", prefix, !strcmp(ext, ".idx") ? ".bin" : ".idx");
		free(path);
		if (stat(partner, &st) < 0 || !S_ISREG(st.st_mode)) {
			error("'%s/%s' has no partner '%s' (the directory must hold only .bin/.idx pairs)", dir,
			      e->d_name, partner);
			free(prefix);
			free(partner);
			goto out;
		}
		free(partner);
		int dup = 0;
		for (size_t i = 0; i < n; i++)
			dup |= !strcmp(prefixes[i], prefix);
		if (dup) {
			free(prefix);
			continue;
		}
		xgrow(&prefixes, &cap, n + 1, sizeof(char *));
		prefixes[n++] = prefix;
	}
	if (!n) {
		error("--input '%s' holds no datasets", dir);
		goto out;
	}
	qsort(prefixes, n, sizeof(char *), cmp_str);
	struct idx_reader first;
	if (idx_reader_open(&first, prefixes[0], a->multimodal) < 0)
		goto out;
	int dtype = first.dtype;
	idx_reader_close(&first);
	struct idx_writer w;
	if (idx_writer_open(&w, a->output_prefix, dtype, a->multimodal) < 0)
		goto out;
	for (size_t i = 0; i < n; i++) {
		if (idx_writer_add_dataset(&w, prefixes[i]) < 0) {
			idx_writer_abort(&w);
			goto out;
		}
		info("added %s", prefixes[i]);
	}
	uint64_t docs = w.n_docs, toks = w.n_tokens;
	if (idx_writer_finish(&w) < 0 || idx_writer_publish(&w) < 0) {
		idx_writer_abort(&w);
		goto out;
	}
	info("wrote %s.bin/.idx: %zu datasets, %llu documents, %llu tokens", a->output_prefix, n,
	     (unsigned long long)docs, (unsigned long long)toks);
	ret = 0;
out:
	closedir(d);
	for (size_t i = 0; i < n; i++)
		free(prefixes[i]);
	free(prefixes);
	return ret;
}
