/*
 * megac_sft.c - a test tool: Megatron's SFT samples (lib/data/sft.h) of a
 * JSONL file, for tests/prog/sft_data.sh, which compares them with
 * tests/prog/py/sft_ref.py's.
 *
 *   megac_sft TOKENIZER_DIR FORMAT SEQ_LENGTH CP CONVERSATIONS.jsonl
 *	one output line per input line ({"messages": [...]}): {"tokens",
 *	"labels", "loss_mask", "position_ids", "cu_seqlens" (unpadded),
 *	"max_seqlen"}, or {"error": "the message"} when the line is refused.
 *	Exits 128 when the tokenizer does not load or a line is not a JSON
 *	object.
 *   megac_sft --template FORMAT
 *	prints the format's fixed chat template.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/error.h"
#include "data/sft.h"
#include "data/tok.h"

static void put_i64(const char *key, const int64_t *v, size_t n, int first)
{
	printf("%s\"%s\": [", first ? "" : ", ", key);
	for (size_t i = 0; i < n; i++)
		printf("%s%" PRId64, i ? ", " : "", v[i]);
	putchar(']');
}

static long num(const char *s, const char *what)
{
	char *end;
	long v = strtol(s, &end, 10);
	if (!*s || *end || v < 1)
		die("%s must be a positive integer, not '%s'", what, s);
	return v;
}

int main(int argc, char **argv)
{
	log_init("megac_sft", 0, 1);
	if (argc == 3 && !strcmp(argv[1], "--template")) {
		const char *t = sft_format_template(argv[2]);
		if (!t)
			die("no fixed template for format '%s'", argv[2]);
		fputs(t, stdout);
		return 0;
	}
	if (argc != 6)
		die("usage: megac_sft TOKENIZER_DIR FORMAT SEQ_LENGTH CP CONVERSATIONS.jsonl");
	long seq = num(argv[3], "SEQ_LENGTH"), cp = num(argv[4], "CP");
	struct sft_tokenizer *st = sft_tokenizer_load(argv[1], argv[2]);
	if (!st)
		exit(DIE_EXIT_CODE);
	info("%s", sft_describe(st));
	struct tok_session *s = tok_session_new(sft_tok(st));
	FILE *in = fopen(argv[5], "r");
	if (!in)
		die_errno("cannot open %s", argv[5]);
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int lineno = 0;
	while ((n = getline(&line, &cap, in)) > 0) {
		lineno++;
		json_error_t jerr;
		json_t *obj = json_loadb(line, (size_t)n, 0, &jerr);
		if (!obj || !json_is_object(obj))
			die("%s:%d: not a JSON object: %s", argv[5], lineno, obj ? "" : jerr.text);
		char where[512], msg[2048] = "";
		snprintf(where, sizeof(where), "%s:%d", argv[5], lineno);
		struct sft_sample smp;
		log_capture(msg, sizeof(msg));
		int r = sft_sample_build(st, s, json_object_get(obj, "messages"), seq, (int)cp, where, &smp);
		log_capture(NULL, 0);
		if (r) {
			json_t *e = json_pack("{s:s}", "error", msg);
			char *j = json_dumps(e, JSON_COMPACT);
			puts(j);
			free(j);
			json_decref(e);
		} else {
			int64_t *mask = malloc(sizeof(*mask) * (size_t)seq), *cu = malloc(sizeof(*cu) * smp.n_cu);
			for (long i = 0; i < seq; i++)
				mask[i] = smp.loss_mask[i] != 0.0f;
			for (size_t i = 0; i < smp.n_cu; i++)
				cu[i] = smp.cu_seqlens[i];
			putchar('{');
			put_i64("tokens", smp.tokens, (size_t)seq, 1);
			put_i64("labels", smp.labels, (size_t)seq, 0);
			put_i64("loss_mask", mask, (size_t)seq, 0);
			put_i64("position_ids", smp.position_ids, (size_t)seq, 0);
			put_i64("cu_seqlens", cu, smp.n_cu, 0);
			printf(", \"max_seqlen\": %" PRId32 "}\n", smp.max_seqlen);
			free(mask);
			free(cu);
			sft_sample_free(&smp);
		}
		json_decref(obj);
	}
	free(line);
	fclose(in);
	tok_session_free(s);
	sft_tokenizer_free(st);
	return 0;
}
