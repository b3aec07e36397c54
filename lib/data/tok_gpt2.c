/*
 * tok_gpt2.c - GPT2BPETokenizer: the original OpenAI vocab.json and
 * merges.txt, tokenized as Hugging Face's GPT-2 fast tokenizer does (which
 * is what Megatron delegates to): ByteLevel pre-tokenizer with the GPT-2
 * regex, no prefix space, and "<|endoftext|>" as a special added token, so
 * that string in the text is the single id 50256.
 */
#include "base/error.h"
#include "base/jsonio.h"
#include "base/xalloc.h"
#include "tok_bpe.h"
#include "tok_hf.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GPT2_EOD "<|endoftext|>"
#define TOK_MAX_ID (1 << 24)

int tok_hf_vocab_from_json(struct tok_bpe *m, const struct json_t *vocab, const char *where)
{
	if (!json_is_object(vocab))
		return error("%s: the vocabulary is not a JSON object of token -> id", where);
	const char *key;
	json_t *val;
	void *iter = json_object_iter((json_t *)vocab);
	while (iter) {
		key = json_object_iter_key(iter);
		val = json_object_iter_value(iter);
		size_t klen = json_object_iter_key_len(iter);
		/* ids index flat tables: keep them to real vocabulary sizes */
		if (!json_is_integer(val) || json_integer_value(val) < 0 || json_integer_value(val) >= TOK_MAX_ID) {
			char *q = tok_bpe_quote(key, klen, 80);
			error("%s: token %s has no valid id (expected an integer in [0, %d))", where, q, TOK_MAX_ID);
			free(q);
			return -1;
		}
		tok_bpe_add_token(m, key, klen, (int32_t)json_integer_value(val));
		iter = json_object_iter_next((json_t *)vocab, iter);
	}
	if (!tok_bpe_vocab_count(m))
		return error("%s: the vocabulary is empty", where);
	return 0;
}

/* merges.txt: "#version" lines skipped, empty lines ignored, every other
 * line "a b" (split on single spaces, as HF does) with rank = its index. */
static int load_merges(struct tok_bpe *m, const char *path)
{
	FILE *f = fopen(path, "rb");
	if (!f)
		return error_errno("cannot open merges file '%s' (--merge-file)", path);
	char *line = NULL;
	size_t cap = 0, lineno = 0;
	uint32_t rank = 0;
	ssize_t len;
	int ret = 0;
	while ((len = getline(&line, &cap, f)) >= 0) {
		lineno++;
		size_t n = (size_t)len;
		if (n && line[n - 1] == '\n')
			n--;
		if (n && line[n - 1] == '\r')
			n--;
		if (!n || (n >= 8 && !memcmp(line, "#version", 8)))
			continue;
		if (memchr(line, 0, n)) {
			ret = error("%s:%zu: NUL byte in a merge line", path, lineno);
			break;
		}
		char *sp = memchr(line, ' ', n);
		const char *why = NULL;
		if (!sp || memchr(sp + 1, ' ', n - (size_t)(sp + 1 - line)) ||
		    tok_bpe_add_merge(m, line, (size_t)(sp - line), sp + 1, n - (size_t)(sp + 1 - line), rank, &why)) {
			char *q = tok_bpe_quote(line, n, 80);
			if (why)
				ret = error("%s:%zu: merge %s: %s", path, lineno, q, why);
			else
				ret = error("%s:%zu: a merge line must be two tokens separated by one space, got %s",
					    path, lineno, q);
			free(q);
			break;
		}
		rank++;
	}
	if (!ret && ferror(f))
		ret = error_errno("cannot read merges file '%s'", path);
	free(line);
	fclose(f);
	if (!ret && !rank)
		ret = error("%s: no merges in the file (is it a GPT-2 merges.txt?)", path);
	return ret;
}

struct tok_hf *tok_gpt2_load(const char *vocab_file, const char *merge_file, char *const *special, int n_special,
			     int64_t *eod)
{
	if (!vocab_file || !*vocab_file) {
		error("GPT2BPETokenizer needs --vocab-file (the GPT-2 vocab.json)");
		return NULL;
	}
	if (!merge_file || !*merge_file) {
		error("GPT2BPETokenizer needs --merge-file (the GPT-2 merges.txt)");
		return NULL;
	}
	json_t *vocab = jsonio_load_file(vocab_file);
	if (!vocab) {
		error("cannot load --vocab-file '%s'", vocab_file);
		return NULL;
	}
	struct tok_bpe *m = tok_bpe_new();
	int r = tok_hf_vocab_from_json(m, vocab, vocab_file);
	json_decref(vocab);
	if (r || load_merges(m, merge_file)) {
		tok_bpe_free(m);
		return NULL;
	}
	struct tok_hf *h = tok_hf_new(m);
	tok_hf_add_stage(h, TOK_HF_STAGE_GPT2, TOK_HF_ISOLATED);
	/* transformers adds it (as eos, bos and unk) with the next id if the
	 * vocabulary lacks it */
	*eod = tok_hf_add_token(h, GPT2_EOD, strlen(GPT2_EOD), true, false, false, false, false);
	/* --tokenizer-special-tokens: transformers' add_special_tokens */
	for (int i = 0; i < n_special; i++)
		tok_hf_add_token(h, special[i], strlen(special[i]), true, false, false, false, false);
	if (tok_hf_finish(h)) {
		tok_hf_free(h);
		return NULL;
	}
	return h;
}
