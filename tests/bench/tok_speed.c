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
 *   build/bench/tok_speed spm MODEL       # Llama2Tokenizer on a SentencePiece .model
 *   build/bench/tok_speed tiktoken VOCAB [VOCAB_SIZE [NUM_SPECIAL]]
 *                                         # TikTokenizer on a tiktoken .json vocabulary
 *
 * A trailing --corpus FILE (JSONL with a "text" field, gzip or plain) times
 * that corpus instead of the example ones.
 *
 * Prints MB/s (10^6 bytes of UTF-8 text per second) for a cold first pass
 * (empty word cache) and the best of three warm passes, by the wall clock
 * and by the thread's CPU time (the figure that holds on a busy machine).
 */
#include "base/sbuf.h"
#include "data/tok.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double clock_s(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double now(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

/* this thread's CPU time: on a shared machine, what one worker gets done
 * per second of its own CPU, whatever else runs */
static double cpu_now(void)
{
	return clock_s(CLOCK_THREAD_CPUTIME_ID);
}

static void add_corpus(const char *name, json_t *texts)
{
	char cmd[1024];
	snprintf(cmd, sizeof(cmd), "gzip -dcf '%s'", name);
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
	const char *corpus = NULL;
	if (argc >= 3 && !strcmp(argv[argc - 2], "--corpus")) {
		corpus = argv[argc - 1];
		argc -= 2;
	}
	if (argc >= 2 && !strcmp(argv[1], "gpt2")) {
		c.type = "GPT2BPETokenizer";
		c.vocab_file = "examples/tokenizers/gpt2/gpt2-vocab.json";
		c.merge_file = "examples/tokenizers/gpt2/gpt2-merges.txt";
	} else if (argc >= 3 && !strcmp(argv[1], "hf")) {
		c.type = "HuggingFaceTokenizer";
		c.model = argv[2];
	} else if (argc >= 3 && !strcmp(argv[1], "spm")) {
		c.type = "Llama2Tokenizer";
		c.model = argv[2];
	} else if (argc >= 3 && !strcmp(argv[1], "tiktoken")) {
		c.type = "TikTokenizer";
		c.model = argv[2];
		c.vocab_size = argc >= 4 ? strtoll(argv[3], NULL, 10) : -1;
		c.tiktoken_num_special_tokens = argc >= 5 ? strtoll(argv[4], NULL, 10) : 1000;
	} else {
		fprintf(stderr, "usage: %s gpt2 | hf DIR | spm MODEL | tiktoken VOCAB [VOCAB_SIZE [NUM_SPECIAL]] "
				"[--corpus FILE]\n",
			argv[0]);
		return 2;
	}
	double t0 = now();
	struct tokenizer *t = tok_load(&c);
	if (!t)
		return 1;
	printf("%s loaded in %.2f s\n", tok_describe(t), now() - t0);
	json_t *texts = json_array();
	if (corpus) {
		add_corpus(corpus, texts);
	} else {
		add_corpus("examples/data/kjv.jsonl.gz", texts);
		add_corpus("examples/data/fortunes.jsonl.gz", texts);
	}
	size_t bytes = 0, i;
	json_t *v;
	json_array_foreach(texts, i, v) bytes += json_string_length(v);
	struct tok_session *s = tok_session_new(t);
	struct tok_ids ids = { 0 };
	double best = 0, best_cpu = 0;
	size_t ntok = 0;
	for (int pass = 0; pass < 4; pass++) {
		double a = now(), ca = cpu_now();
		ntok = 0;
		json_array_foreach(texts, i, v) {
			ids.n = 0;
			if (tok_encode(s, json_string_value(v), json_string_length(v), &ids)) {
				fprintf(stderr, "encode failed: %s\n", tok_session_error(s));
				return 1;
			}
			ntok += ids.n;
		}
		double mbs = bytes / (now() - a) / 1e6, cmbs = bytes / (cpu_now() - ca) / 1e6;
		if (pass == 0) {
			printf("cold pass: %.1f MB/s (CPU time: %.1f MB/s)\n", mbs, cmbs);
		} else {
			best = mbs > best ? mbs : best;
			best_cpu = cmbs > best_cpu ? cmbs : best_cpu;
		}
	}
	printf("warm (best of 3): %.1f MB/s (CPU time: %.1f MB/s)  (%zu documents, %.2f MB, %zu tokens)\n", best,
	       best_cpu, json_array_size(texts), bytes / 1e6, ntok);
	tok_ids_free(&ids);
	tok_session_free(s);
	tok_free(t);
	json_decref(texts);
	return 0;
}
