/*
 * tok.h - tokenizers: UTF-8 text to token ids and back, giving exactly the
 * ids Megatron's tokenizers give (megatron/core/tokenizers/text/).
 *
 *   GPT2BPETokenizer      vocab.json + merges.txt, GPT-2 byte-level BPE
 *                         (as Hugging Face's GPT-2 tokenizer: "<|endoftext|>"
 *                         in the text is the single id 50256)
 *   HuggingFaceTokenizer  a tokenizer.json (or a folder holding one, with
 *                         tokenizer_config.json for eos): normalizer,
 *                         pre-tokenizer, BPE model, added tokens, post-processor
 *   TikTokenizer          Megatron's tiktoken JSON vocabulary (ranks shifted
 *                         by --tiktoken-num-special-tokens), pattern v1/v2
 *   NullTokenizer         text of space-separated integer ids
 *   SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer
 *                         a SentencePiece .model file (BPE or unigram), as
 *                         the sentencepiece library encodes; no BOS/EOS added,
 *                         EOD is the model's </s>
 *
 * A `struct tokenizer` is immutable once loaded and shared by every thread;
 * each thread encodes through its own `struct tok_session` (scratch buffers
 * and a word cache), so encoding needs no locks.
 */
#ifndef MEGAC_DATA_TOK_H
#define MEGAC_DATA_TOK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sbuf;

struct tok_config {
	const char *type;            /* Megatron's --tokenizer-type value */
	const char *vocab_file;      /* --vocab-file */
	const char *merge_file;      /* --merge-file */
	const char *model;           /* --tokenizer-model */
	int64_t vocab_size;          /* --vocab-size, -1 when not given (NullTokenizer: 1..2^31-1) */
	int64_t null_eod_id;         /* --null-tokenizer-eod-id: -1 = vocab_size - 1, else 0..2^31-1 */
	bool no_include_special;     /* --tokenizer-hf-no-include-special-tokens */
	bool sp_keep_extra_spaces;   /* --no-tokenizer-sentencepiece-ignore-extra-whitespaces */
	char *const *special_tokens; /* --tokenizer-special-tokens */
	int n_special_tokens;
	const char *tiktoken_pattern;        /* --tiktoken-pattern: v1, v2 (NULL: v2) */
	int64_t tiktoken_num_special_tokens; /* --tiktoken-num-special-tokens */
};

struct tok_ids {
	int32_t *v;
	size_t n, cap;
};

struct tokenizer;
struct tok_session;

/* Load a tokenizer. On failure: error() naming the file and what is wrong
 * (or the flag that is missing), and NULL. */
struct tokenizer *tok_load(const struct tok_config *cfg);
void tok_free(struct tokenizer *t);

/* Unpadded vocabulary size (HF: len(tokenizer), base vocab plus added
 * tokens); decides the .bin dtype. */
int64_t tok_vocab_size(const struct tokenizer *t);
/* End-of-document id appended by --append-eod; -1 when there is none. */
int64_t tok_eod(const struct tokenizer *t);
/* The pad id Megatron's tokenizer reports: HF pad_token's id, SentencePiece's <pad>; -1 for none (GPT-2, and
 * NullTokenizer, whose pad comes from --null-tokenizer-pad-id in the data config). */
int64_t tok_pad(const struct tokenizer *t);
/* The id of a token string (an added token, then the vocabulary, as Hugging Face's token_to_id looks it up);
 * -1 when it has none or t is not a GPT-2, Hugging Face or TikToken tokenizer. */
int64_t tok_token_id(const struct tokenizer *t, const char *s, size_t n);
/* SentencePiece tokenizers (for a Hugging Face export): the ids of the
 * model's unk, bos, eos and pad pieces (-1: none) and the pieces (NULL:
 * none), in that order; -1 for the other kinds. */
int tok_spm_specials(const struct tokenizer *t, int64_t ids[4], const char *pieces[4]);
/* SentencePiece tokenizers: the model as Hugging Face's tokenizer.json (a
 * malloc'd string), or NULL and *why_not when it does not convert exactly
 * (data/tok_spm.h, tok_spm_hf_json) or t is of another kind. */
char *tok_spm_hf(const struct tokenizer *t, const char **why_not);
/* One line for logs, e.g. "GPT2BPETokenizer (vocab 50257, eod 50256)". */
const char *tok_describe(const struct tokenizer *t);

struct tok_session *tok_session_new(const struct tokenizer *t);
void tok_session_free(struct tok_session *s);

/*
 * Append the ids of text[0..len) to out. The text must be valid UTF-8 (the
 * caller checks; see base/utf8.h) and may contain NUL bytes. Returns 0, or
 * -1 when the text cannot be encoded (NullTokenizer: not an integer list, an
 * id out of range); then tok_session_error(s) says why, without printing:
 * encoding runs in worker threads and the caller reports in input order.
 */
int tok_encode(struct tok_session *s, const char *text, size_t len, struct tok_ids *out);
const char *tok_session_error(const struct tok_session *s);
/* tok_encode without the post-processor's special tokens (a Hugging Face
 * tokenizer's BOS...: add_special_tokens=False, as apply_chat_template
 * encodes a rendered conversation); the same as tok_encode for the other
 * kinds, which add none. */
int tok_encode_plain(struct tok_session *s, const char *text, size_t len, struct tok_ids *out);

/* Append the UTF-8 text of ids to out (byte-level pieces that do not form
 * valid UTF-8 on their own are emitted as raw bytes). -1 and error() for an
 * id outside the vocabulary. */
int tok_decode(const struct tokenizer *t, const int32_t *ids, size_t n, struct sbuf *out);

void tok_ids_push(struct tok_ids *ids, int32_t id);
void tok_ids_free(struct tok_ids *ids);

/* The tokenizer flags of a program's parsed command line (--tokenizer-type,
 * --vocab-file, ...), as tok_load wants them. */
struct args;
struct tok_config tok_config_from_args(const struct args *a);

#endif
