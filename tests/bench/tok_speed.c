/*
 * tok_speed.c - single-thread tok_encode throughput on the example corpora
 * (the texts of examples/data/{kjv,fortunes}.jsonl.gz, JSON already decoded,
 * so this is the tokenizer alone). Not part of `make test`; build it
 * from the repository root:
 *
 *   make build/bench/tok_speed     (or `make bench`, which runs it)
 *
 *   build/bench/tok_speed gpt2            # GPT2BPETokenizer, examples/tokenizers/gpt2
 *   build/bench/tok_speed hf DIR          # HuggingFaceTokenizer on DIR/tokenizer.json
 *
 * Prints MB/s (10^6 bytes of UTF-8 text per second) for a cold first pass
 * (empty word cache) and the best of three warm passes.
 */
#include "base/sbuf.h"
#include "data/tok.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void add_corpus(const char *name, json_t *texts)
{
	char cmd[256];
	snprintf(cmd, sizeof(cmd), "gzip -dc examples/data/%s", name);
	FILE *f = popen(cmd, "r");
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	while (f && (n = getline(&line, &cap, f)) > 0) {
		json_t *j = json_loadb(line, (size_t)n, 0, NULL);
		if (j)
			json_array_append(texts, json_object_get(j, "text"));
		json_decref(j);
	}
	free(line);
	if (f)
		pclose(f);
}

int main(int argc, char **argv)
{
	struct tok_config c = { 0 };
	c.vocab_size = -1;
	c.null_eod_id = -1;
	if (argc >= 2 && !strcmp(argv[1], "gpt2")) {
		c.type = "GPT2BPETokenizer";
		c.vocab_file = "examples/tokenizers/gpt2/gpt2-vocab.json";
		c.merge_file = "examples/tokenizers/gpt2/gpt2-merges.txt";
	} else if (argc >= 3 && !strcmp(argv[1], "hf")) {
		c.type = "HuggingFaceTokenizer";
		c.model = argv[2];
	} else {
		fprintf(stderr, "usage: %s gpt2 | hf DIR\n", argv[0]);
		return 2;
	}
	double t0 = now();
	struct tokenizer *t = tok_load(&c);
	if (!t)
		return 1;
	printf("%s loaded in %.2f s\n", tok_describe(t), now() - t0);
	json_t *texts = json_array();
	add_corpus("kjv.jsonl.gz", texts);
	add_corpus("fortunes.jsonl.gz", texts);
	size_t bytes = 0, i;
	json_t *v;
	json_array_foreach(texts, i, v) bytes += json_string_length(v);
	struct tok_session *s = tok_session_new(t);
	struct tok_ids ids = { 0 };
	double best = 0;
	size_t ntok = 0;
	for (int pass = 0; pass < 4; pass++) {
		double a = now();
		ntok = 0;
		json_array_foreach(texts, i, v) {
			ids.n = 0;
			if (tok_encode(s, json_string_value(v), json_string_length(v), &ids)) {
				fprintf(stderr, "encode failed: %s\n", tok_session_error(s));
				return 1;
			}
			ntok += ids.n;
		}
		double mbs = bytes / (now() - a) / 1e6;
		if (pass == 0)
			printf("cold pass: %.1f MB/s\n", mbs);
		else if (mbs > best)
			best = mbs;
	}
	printf("warm (best of 3): %.1f MB/s  (%zu documents, %.2f MB, %zu tokens)\n", best, json_array_size(texts),
	       bytes / 1e6, ntok);
	tok_ids_free(&ids);
	tok_session_free(s);
	tok_free(t);
	json_decref(texts);
	return 0;
}
