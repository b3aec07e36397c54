/*
 * tok.c - the tokenizer front: tok_load() picks the implementation from
 * Megatron's --tokenizer-type, and every call dispatches on it.
 * GPT2BPETokenizer, HuggingFaceTokenizer and TikTokenizer share one engine
 * (tok_hf.c on top of tok_bpe.c); NullTokenizer is tok_null.c; the three
 * SentencePiece types are tok_spm.c.
 */
#include "tok.h"
#include "base/error.h"
#include "base/sbuf.h"
#include "base/utf8.h"
#include "base/xalloc.h"
#include "tok_bpe.h"
#include "tok_hf.h"
#include "tok_spm.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum tok_kind { TOK_GPT2, TOK_HF, TOK_NULL, TOK_SPM };

struct tokenizer {
	enum tok_kind kind;
	struct tok_hf *hf;
	struct tok_spm *spm;
	bool with_template; /* HF: apply the post-processor */
	int64_t vocab_size, eod;
	int64_t pad; /* -1: none */
	char *describe;
};

struct tok_session {
	const struct tokenizer *t;
	struct tok_hf_session *hf;
	struct tok_spm_session *spm;
	char err[320];
};

/* Every --tokenizer-type value Megatron accepts (the choices of tokenizer_type in
 * megatron/training/config/training_config.py's TokenizerConfig). */
static const char *const megatron_types[] = {
	"BertWordPieceLowerCase", "BertWordPieceCase",	  "GPT2BPETokenizer", "SentencePieceTokenizer",
	"GPTSentencePieceTokenizer", "Llama2Tokenizer",	  "HuggingFaceTokenizer", "TikTokenizer",
	"MultimodalTokenizer",	  "NullTokenizer",	  "NullMultimodalTokenizer", "SFTTokenizer",
};

/* Added tokens are matched bytewise: one that is not UTF-8 could match
 * inside a character and leave invalid UTF-8 pieces on both sides. */
static int check_special_tokens(const struct tok_config *cfg)
{
	for (int i = 0; i < cfg->n_special_tokens; i++) {
		const char *sp = cfg->special_tokens[i];
		size_t bad;
		if (!utf8_valid(sp, strlen(sp), &bad)) {
			char *q = tok_bpe_quote(sp, strlen(sp), 80);
			error("--tokenizer-special-tokens: %s is not valid UTF-8 (at byte %zu)", q, bad);
			free(q);
			return -1;
		}
	}
	return 0;
}

struct tokenizer *tok_load(const struct tok_config *cfg)
{
	const char *type = cfg->type;
	if (!type || !*type) {
		error("--tokenizer-type is required");
		return NULL;
	}
	struct tokenizer *t = xcalloc(1, sizeof(*t));
	t->pad = -1;
	if (!strcmp(type, "GPT2BPETokenizer")) {
		t->kind = TOK_GPT2;
		if (check_special_tokens(cfg))
			goto fail;
		t->hf = tok_gpt2_load(cfg->vocab_file, cfg->merge_file, cfg->special_tokens, cfg->n_special_tokens, &t->eod);
		if (!t->hf)
			goto fail;
		t->vocab_size = t->hf->vocab_size;
		t->describe = xasprintf("GPT2BPETokenizer (vocab %" PRId64 ", eod %" PRId64 ")", t->vocab_size, t->eod);
	} else if (!strcmp(type, "HuggingFaceTokenizer") || !strcmp(type, "SFTTokenizer")) {
		/* SFTTokenizer: Megatron wraps the folder's Hugging Face tokenizer;
		 * its chat formats live in data/sft.c, plain text encodes as here */
		char *path;
		t->kind = TOK_HF;
		if (check_special_tokens(cfg))
			goto fail;
		t->hf = tok_hf_load(cfg->model, cfg->special_tokens, cfg->n_special_tokens, &t->eod, &t->pad, &path);
		if (!t->hf)
			goto fail;
		t->with_template = !cfg->no_include_special;
		t->vocab_size = t->hf->vocab_size;
		t->describe = xasprintf("%s (%s, vocab %" PRId64 ", eod %" PRId64 ")", type, path, t->vocab_size,
					t->eod);
		free(path);
	} else if (!strcmp(type, "SentencePieceTokenizer") || !strcmp(type, "GPTSentencePieceTokenizer") ||
		   !strcmp(type, "Llama2Tokenizer")) {
		/* Megatron builds the same SentencePiece wrapper for all three */
		t->kind = TOK_SPM;
		if (cfg->n_special_tokens > 0) {
			error("%s: --tokenizer-special-tokens is refused, as Megatron refuses it without "
			      "--tokenizer-sentencepiece-legacy (which megac does not have): a SentencePiece model's "
			      "special tokens are given when it is trained",
			      type);
			goto fail;
		}
		if (!cfg->model || !*cfg->model) {
			error("%s needs --tokenizer-model (the SentencePiece .model file)", type);
			goto fail;
		}
		t->spm = tok_spm_load(cfg->model, cfg->sp_keep_extra_spaces);
		if (!t->spm)
			goto fail;
		t->vocab_size = tok_spm_piece_count(t->spm);
		t->eod = tok_spm_eos(t->spm);
		t->pad = tok_spm_pad(t->spm);
		t->describe = xasprintf("%s (%s, SentencePiece %s, vocab %" PRId64 ", eod %" PRId64 ")", type,
					cfg->model, tok_spm_model_type(t->spm), t->vocab_size, t->eod);
	} else if (!strcmp(type, "TikTokenizer")) {
		t->kind = TOK_HF;
		if (check_special_tokens(cfg))
			goto fail;
		t->hf = tok_tiktoken_load(cfg->model, cfg->tiktoken_pattern, cfg->tiktoken_num_special_tokens,
					  cfg->special_tokens, cfg->n_special_tokens, cfg->vocab_size, &t->eod, &t->pad);
		if (!t->hf)
			goto fail;
		t->vocab_size = t->hf->vocab_size;
		t->describe = xasprintf("TikTokenizer (%s, pattern %s, vocab %" PRId64 ", eod %" PRId64 ")", cfg->model,
					cfg->tiktoken_pattern ? cfg->tiktoken_pattern : "v2", t->vocab_size, t->eod);
	} else if (!strcmp(type, "NullTokenizer")) {
		t->kind = TOK_NULL;
		if (cfg->vocab_size == -1) {
			error("NullTokenizer needs --vocab-size");
			goto fail;
		}
		if (cfg->vocab_size < 1 || cfg->vocab_size > INT32_MAX) {
			error("NullTokenizer: --vocab-size %" PRId64 " is out of range (1 to 2^31-1)", cfg->vocab_size);
			goto fail;
		}
		/* the id is written as an int32 token */
		if (cfg->null_eod_id != -1 && (cfg->null_eod_id < 0 || cfg->null_eod_id > INT32_MAX)) {
			error("NullTokenizer: --null-tokenizer-eod-id %" PRId64 " is out of range (0 to 2^31-1, or -1 "
			      "for vocab size - 1)",
			      cfg->null_eod_id);
			goto fail;
		}
		t->vocab_size = cfg->vocab_size;
		t->eod = cfg->null_eod_id == -1 ? cfg->vocab_size - 1 : cfg->null_eod_id;
		t->describe = xasprintf("NullTokenizer (vocab %" PRId64 ", eod %" PRId64 ")", t->vocab_size, t->eod);
	} else {
		bool known = false;
		for (size_t i = 0; i < sizeof(megatron_types) / sizeof(megatron_types[0]); i++)
			known |= !strcmp(type, megatron_types[i]);
		if (known)
			error("tokenizer type %s is not implemented in megac yet (implemented: GPT2BPETokenizer, "
			      "HuggingFaceTokenizer, SFTTokenizer, TikTokenizer, NullTokenizer, SentencePieceTokenizer, "
			      "GPTSentencePieceTokenizer, Llama2Tokenizer)",
			      type);
		else
			error("unknown tokenizer type '%s' (implemented: GPT2BPETokenizer, HuggingFaceTokenizer, "
			      "SFTTokenizer, TikTokenizer, NullTokenizer, SentencePieceTokenizer, GPTSentencePieceTokenizer, "
			      "Llama2Tokenizer)",
			      type);
		goto fail;
	}
	return t;
fail:
	tok_free(t);
	return NULL;
}

void tok_free(struct tokenizer *t)
{
	if (!t)
		return;
	tok_hf_free(t->hf);
	tok_spm_free(t->spm);
	free(t->describe);
	free(t);
}

int64_t tok_vocab_size(const struct tokenizer *t)
{
	return t->vocab_size;
}

int64_t tok_eod(const struct tokenizer *t)
{
	return t->eod;
}

int64_t tok_pad(const struct tokenizer *t)
{
	return t->pad;
}

int64_t tok_token_id(const struct tokenizer *t, const char *s, size_t n)
{
	return t->hf ? tok_hf_token_id(t->hf, s, n) : -1;
}

int tok_spm_specials(const struct tokenizer *t, int64_t ids[4], const char *pieces[4])
{
	if (t->kind != TOK_SPM)
		return -1;
	ids[0] = tok_spm_unk(t->spm);
	ids[1] = tok_spm_bos(t->spm);
	ids[2] = tok_spm_eos(t->spm);
	ids[3] = tok_spm_pad(t->spm);
	for (int i = 0; i < 4; i++)
		pieces[i] = tok_spm_piece(t->spm, ids[i]);
	return 0;
}

char *tok_spm_hf(const struct tokenizer *t, const char **why_not)
{
	if (t->kind != TOK_SPM) {
		*why_not = "it is not a SentencePiece tokenizer";
		return NULL;
	}
	return tok_spm_hf_json(t->spm, why_not);
}

const char *tok_describe(const struct tokenizer *t)
{
	return t->describe;
}

struct tok_session *tok_session_new(const struct tokenizer *t)
{
	struct tok_session *s = xcalloc(1, sizeof(*s));
	s->t = t;
	if (t->hf)
		s->hf = tok_hf_session_new(t->hf);
	if (t->spm)
		s->spm = tok_spm_session_new(t->spm);
	return s;
}

void tok_session_free(struct tok_session *s)
{
	if (!s)
		return;
	tok_hf_session_free(s->hf);
	tok_spm_session_free(s->spm);
	free(s);
}

static int encode(struct tok_session *s, const char *text, size_t len, bool with_template, struct tok_ids *out)
{
	const struct tokenizer *t = s->t;
	s->err[0] = 0;
	if (t->kind == TOK_NULL)
		return tok_null_encode(t->vocab_size, text, len, out, s->err, sizeof(s->err));
	/* the regex engine runs without its own UTF-8 check: make sure here */
	size_t bad;
	if (!utf8_valid(text, len, &bad)) {
		snprintf(s->err, sizeof(s->err), "invalid UTF-8 at byte %zu of the text", bad);
		return -1;
	}
	if (t->kind == TOK_SPM) {
		tok_spm_encode(s->spm, text, len, out);
		return 0;
	}
	size_t start = out->n;
	const char *why;
	if (tok_hf_encode(s->hf, text, len, with_template, out, &why)) {
		snprintf(s->err, sizeof(s->err), "%s", why);
		out->n = start;
		return -1;
	}
	return 0;
}

int tok_encode(struct tok_session *s, const char *text, size_t len, struct tok_ids *out)
{
	return encode(s, text, len, s->t->with_template, out);
}

int tok_encode_plain(struct tok_session *s, const char *text, size_t len, struct tok_ids *out)
{
	return encode(s, text, len, false, out);
}

const char *tok_session_error(const struct tok_session *s)
{
	return s->err;
}

int tok_decode(const struct tokenizer *t, const int32_t *ids, size_t n, struct sbuf *out)
{
	if (t->kind == TOK_NULL) {
		if (tok_null_decode(t->vocab_size, ids, n, out))
			return error("cannot decode: an id is outside the NullTokenizer vocabulary [0, %" PRId64 ")",
				     t->vocab_size);
		return 0;
	}
	if (t->kind == TOK_SPM)
		return tok_spm_decode(t->spm, ids, n, out);
	return tok_hf_decode(t->hf, ids, n, out);
}

void tok_ids_push(struct tok_ids *ids, int32_t id)
{
	if (ids->n == ids->cap)
		xgrow(&ids->v, &ids->cap, ids->n + 1, sizeof(*ids->v));
	ids->v[ids->n++] = id;
}

void tok_ids_free(struct tok_ids *ids)
{
	free(ids->v);
	ids->v = NULL;
	ids->n = ids->cap = 0;
}
