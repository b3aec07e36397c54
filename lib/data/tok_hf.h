/*
 * tok_hf.h - internal interface between tok.c and its backends (users
 * include tok.h).
 *
 * struct tok_hf is Hugging Face's `tokenizers` pipeline for a byte-level BPE
 * model, reduced to what produces ids:
 *
 *   text -> added tokens with normalized=false cut out of the raw text
 *        -> each remaining piece: normalizers (NFC, Lowercase, ...)
 *        -> added tokens with normalized=true cut out of the normalized piece
 *        -> pre-tokenizer stages (Split, Digits, ByteLevel), each cutting
 *           every piece of the previous stage
 *        -> BPE on each final piece (tok_bpe.h; byte-level, or text mode
 *           with byte_fallback for SentencePiece-converted vocabularies)
 *        -> post-processor template (e.g. "<|begin_of_text|> $A")
 *
 * GPT2BPETokenizer (tok_gpt2.c) builds the same pipeline from vocab.json and
 * merges.txt; HuggingFaceTokenizer (tok_hf_load.c) from tokenizer.json, both
 * through tok_hf_build.c. The encoder (tok_hf.c) walks the stages recursively, so pieces are slices of
 * the text or of one per-stage session buffer and never lists.
 *
 * NullTokenizer's two functions are declared at the end.
 */
#ifndef MEGAC_DATA_TOK_HF_H
#define MEGAC_DATA_TOK_HF_H

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sbuf;
struct tok_ids;
struct tok_bpe;

enum tok_hf_norm {
	TOK_HF_NFC,
	TOK_HF_NFD,
	TOK_HF_NFKC,
	TOK_HF_NFKD,
	TOK_HF_LOWERCASE,
	TOK_HF_PREPEND, /* a: the prefix, added to non-empty text */
	TOK_HF_REPLACE, /* every occurrence of the string a becomes b */
	TOK_HF_STRIP,   /* White_Space off the left and/or right end */
};

struct tok_hf_normop {
	enum tok_hf_norm kind;
	char *a, *b;
	size_t alen, blen;
	bool left, right;
};

/* Decoders of text-mode (SentencePiece-style) vocabularies. */
enum tok_hf_dec_kind {
	TOK_HF_DEC_REPLACE,	 /* a -> b in each token */
	TOK_HF_DEC_BYTE_FALLBACK, /* runs of <0xNN> tokens -> their text (U+FFFD per byte if not UTF-8) */
	TOK_HF_DEC_FUSE,	 /* all tokens -> one */
	TOK_HF_DEC_STRIP,	 /* up to start / stop characters a off each token's ends */
	TOK_HF_DEC_METASPACE,	 /* replacement a -> ' ', none in the first token unless prepend never */
};

struct tok_hf_dec {
	enum tok_hf_dec_kind kind;
	char *a, *b;
	size_t alen, blen;
	int64_t start, stop;
	bool never; /* Metaspace prepend_scheme never */
};

/* SplitDelimiterBehavior */
enum tok_hf_behavior {
	TOK_HF_REMOVED,
	TOK_HF_ISOLATED,
	TOK_HF_MERGED_WITH_PREVIOUS,
	TOK_HF_MERGED_WITH_NEXT,
	TOK_HF_CONTIGUOUS,
};

enum tok_hf_stage_kind {
	TOK_HF_STAGE_REGEX,  /* Split with a pattern */
	TOK_HF_STAGE_GPT2,   /* the GPT-2 pattern, Isolated: tok_bpe_gpt2_split */
	TOK_HF_STAGE_DIGITS, /* Digits */
	TOK_HF_STAGE_PREFIX, /* ByteLevel add_prefix_space */
	TOK_HF_STAGE_METASPACE, /* ' ' -> replacement, prepend, optional split */
};

enum tok_hf_prepend { TOK_HF_PREPEND_NEVER, TOK_HF_PREPEND_FIRST, TOK_HF_PREPEND_ALWAYS };

struct tok_hf_stage {
	enum tok_hf_stage_kind kind;
	enum tok_hf_behavior behavior;
	bool invert;
	pcre2_code *re;
	bool jit; /* re is JIT-compiled: matched with pcre2_jit_match */
	/* Metaspace */
	char rep[8];
	size_t replen;
	enum tok_hf_prepend prepend;
	bool split;
};

struct tok_hf_added {
	char *content;
	size_t len;
	char *match; /* searched for: content, or its normalized form */
	size_t mlen;
	int32_t id;
	bool special, normalized, lstrip, rstrip, single_word;
};

/* Leftmost-longest search over a set of added tokens. */
struct tok_hf_matcher {
	uint32_t *order; /* added-token indices by first byte, longest first */
	uint32_t start[257];
	size_t n;
	int only_first; /* the one first byte of every token, or -1 */
};

struct tok_hf {
	struct tok_bpe *bpe;
	struct tok_hf_added *added;
	size_t n_added, cap_added;
	uint32_t *added_ht; /* content -> index + 1 (0: empty), open addressing */
	size_t added_ht_mask;
	int32_t max_added_id; /* -1 while there is none */
	struct tok_hf_matcher raw, norm;
	uint32_t *added_by_id; /* indices sorted by id, for decoding */
	struct tok_hf_normop *norms;
	size_t n_norms;
	struct tok_hf_dec *decs; /* text mode: the decoder chain */
	size_t n_decs;
	bool has_decoder; /* text mode without one: tokens joined by spaces */
	struct tok_hf_stage *stages;
	size_t n_stages;
	int32_t *tmpl; /* post-processor single template; -1 = the sequence */
	size_t n_tmpl;
	bool has_tmpl;
	int64_t vocab_size;
};

struct tok_hf *tok_hf_new(struct tok_bpe *bpe);
void tok_hf_free(struct tok_hf *h);

/* AddedVocabulary::add_tokens for one token: an existing added token or
 * model token keeps its id, a new one gets the next id. Returns the id;
 * empty content is ignored (-1). */
int32_t tok_hf_add_token(struct tok_hf *h, const char *content, size_t len, bool special, bool normalized,
			 bool lstrip, bool rstrip, bool single_word);
/* A special, unnormalized added token with a given id (TikTokenizer's
 * special tokens); content must be new and non-empty. */
void tok_hf_add_token_id(struct tok_hf *h, const char *content, size_t len, int32_t id);
void tok_hf_add_norm(struct tok_hf *h, enum tok_hf_norm n);
/* A normalizer with parameters (strings are copied). */
void tok_hf_add_normop(struct tok_hf *h, const struct tok_hf_normop *op);
/* A decoder step (strings are copied). */
void tok_hf_add_dec(struct tok_hf *h, const struct tok_hf_dec *d);
/* A Split stage; pattern is Oniguruma syntax as in tokenizer.json (literal
 * when is_regex is false). error() naming `where` and the pattern when it
 * does not compile; \C (one byte, which would cut UTF-8 characters) is
 * refused. */
int tok_hf_add_split(struct tok_hf *h, const char *pattern, bool is_regex, enum tok_hf_behavior b, bool invert,
		     const char *where);
void tok_hf_add_stage(struct tok_hf *h, enum tok_hf_stage_kind kind, enum tok_hf_behavior b);
void tok_hf_add_template_id(struct tok_hf *h, int32_t id); /* -1: the sequence */
/* After the last add: normalizes added-token patterns, builds matchers,
 * computes the vocabulary size. -1 after error(). */
int tok_hf_finish(struct tok_hf *h);

/* Apply one normalizer to p[0..n) into dst. Returns 0 when the text is
 * unchanged (dst not written), 1 when dst holds the result, -1 on a
 * utf8proc error. */
int tok_hf_normalize(const struct tok_hf_normop *op, const char *p, size_t n, struct sbuf *dst);

/* Id of a token string: added tokens first, then the model; -1. */
int32_t tok_hf_token_id(const struct tok_hf *h, const char *s, size_t n);
const struct tok_hf_added *tok_hf_find_added(const struct tok_hf *h, const char *s, size_t n);
/* True when id decodes to something (an added token or a model token). */
bool tok_hf_id_known(const struct tok_hf *h, int32_t id);

/* Oniguruma pattern -> PCRE2 pattern with the same meaning (\s is Unicode
 * White_Space there, which PCRE2's \s lacks U+0085 of). Caller frees. */
char *tok_hf_onig_to_pcre2(const char *pattern);

struct tok_hf_session;
struct tok_hf_session *tok_hf_session_new(const struct tok_hf *h);
void tok_hf_session_free(struct tok_hf_session *s);
/* Encode (text valid UTF-8). -1 with *err (session-owned) on a regex engine
 * failure. */
int tok_hf_encode(struct tok_hf_session *s, const char *text, size_t len, bool with_template, struct tok_ids *out,
		  const char **err);
int tok_hf_decode(const struct tok_hf *h, const int32_t *ids, size_t n, struct sbuf *out);

/* Fill m from a JSON object token -> id; error() naming `where`. */
struct json_t;
int tok_hf_vocab_from_json(struct tok_bpe *m, const struct json_t *vocab, const char *where);

/* Loaders. Both return NULL after error(); *eod gets the end-of-document
 * id (-1 if none), *path the tokenizer.json read (caller frees). special
 * lists --tokenizer-special-tokens, added as transformers'
 * add_special_tokens does: a token already known becomes a special added
 * token with its id, a new one gets the next id. */
struct tok_hf *tok_gpt2_load(const char *vocab_file, const char *merge_file, char *const *special, int n_special,
			     int64_t *eod);
/* *pad: the id of tokenizer_config's pad_token, -1 without one. */
struct tok_hf *tok_hf_load(const char *model, char *const *special, int n_special, int64_t *eod, int64_t *pad,
			   char **path);

/* TikTokenizer (tok_tiktoken.c): Megatron's tiktoken JSON vocabulary at
 * model, pattern "v1"/"v2" (NULL: v2), num_special special-token ids
 * before the shifted ranks, the special tokens (none: Megatron's seven),
 * vocab_size (-1: Megatron's 131072). NULL after error(); *eod is "</s>",
 * *pad "<pad>". The returned pipeline's vocab_size is vocab_size. */
struct tok_hf *tok_tiktoken_load(const char *model, const char *pattern, int64_t num_special, char *const *special,
				 int n_special, int64_t vocab_size, int64_t *eod, int64_t *pad);

/* NullTokenizer (tok_null.c). err gets a message on -1. */
int tok_null_encode(int64_t vocab_size, const char *text, size_t len, struct tok_ids *out, char *err,
		    size_t errlen);
int tok_null_decode(int64_t vocab_size, const int32_t *ids, size_t n, struct sbuf *out);

#endif
