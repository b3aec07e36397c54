/*
 * tok_bpe.h - the byte-level BPE core shared by GPT2BPETokenizer and
 * HuggingFaceTokenizer (internal to lib/data/tok*.c; users include tok.h).
 *
 * Vocabulary strings in vocab.json / tokenizer.json are written in GPT-2's
 * byte-to-unicode alphabet (byte 0x20 is "Ġ", ...). The core undoes that
 * mapping once at load, so encoding works on the raw UTF-8 bytes of a
 * pre-token and never builds the mapped string. Merges are kept as a hash
 * from a pair of ids to (rank, merged id), as Hugging Face's BPE model does,
 * and a word is merged lowest rank first, leftmost first on ties (HF's
 * priority-queue order, which equals GPT-2's "merge every occurrence of the
 * best pair" loop).
 *
 * The model is immutable after tok_bpe_finish() and shared by all threads;
 * a struct tok_bpe_cache belongs to one session (one thread) and remembers
 * the ids of recently seen words, which is where most of the speed comes from.
 */
#ifndef MEGAC_DATA_TOK_BPE_H
#define MEGAC_DATA_TOK_BPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sbuf;
struct tok_ids;

/* GPT-2's byte <-> code point table (openai/gpt-2 encoder.py bytes_to_unicode). */
uint32_t tok_bpe_byte_cp(uint8_t b);
int tok_bpe_cp_byte(uint32_t cp); /* -1 when cp is not in the table */

/* Decode one UTF-8 sequence at s[0..n) (n > 0): its code point, *len its
 * length; malformed input gives U+FFFD with *len = 1. */
uint32_t tok_bpe_utf8_next(const char *s, size_t n, size_t *len);
/* Encode cp as UTF-8 into out[4]; returns the length. */
size_t tok_bpe_utf8_put(uint32_t cp, char *out);

/* s[0..n) quoted for a one-line message: "'...'" with control characters
 * escaped (\n, \r, \t, other C0/DEL/C1 controls as \xNN / \u00NN),
 * bytes that are not valid UTF-8 as \xNN, and, when s is longer than max
 * bytes, cut at a character boundary with "..." after the closing quote.
 * Caller frees. */
char *tok_bpe_quote(const char *s, size_t n, size_t max);

/* A 64-bit hash of s[0..n) (the one the vocabulary uses). */
uint64_t tok_bpe_hash(const char *s, size_t n);

/* Append the raw bytes of a byte-level string; false (out unchanged) when a
 * character is outside the table. */
bool tok_bpe_unmap(const char *s, size_t n, struct sbuf *out);

/*
 * Pre-tokenizer for GPT-2's pattern
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * written out by hand (\s = Unicode White_Space, as in Oniguruma and Rust's
 * regex). The pattern matches at every position, so the pieces tile the
 * text: returns the end of the piece that starts at i < n.
 */
size_t tok_bpe_gpt2_split(const char *s, size_t n, size_t i);
/* \s of that pattern: Unicode White_Space. */
bool tok_bpe_is_space(uint32_t cp);
extern const char tok_bpe_gpt2_pattern[];

struct tok_bpe;

struct tok_bpe *tok_bpe_new(void);
void tok_bpe_free(struct tok_bpe *m);

/* Add a vocabulary entry (a byte-level string as in vocab.json). A later
 * entry with the same string replaces the earlier one (as serde and jansson
 * do for duplicate JSON keys). */
void tok_bpe_add_token(struct tok_bpe *m, const char *tok, size_t len, int32_t id);
/* Id of a vocabulary string, -1 when absent. */
int32_t tok_bpe_token_id(const struct tok_bpe *m, const char *tok, size_t len);
/* Add merge (a, b) with the given rank. -1 with *why set (a static string)
 * when a, b or their concatenation is not in the vocabulary, which Hugging
 * Face refuses too (MergeTokenOutOfVocabulary). A later merge of the same
 * pair replaces the earlier one, as in HF's merge map. */
int tok_bpe_add_merge(struct tok_bpe *m, const char *a, size_t alen, const char *b, size_t blen,
		      uint32_t rank, const char **why);
/* Raw-byte forms for vocabularies that are not written in the byte
 * alphabet (tiktoken's ranks): the id of the token whose bytes are
 * raw[0..n) (-1 when absent), adding one, and a merge given by ids, which
 * must be known tokens. */
int32_t tok_bpe_bytes_id(const struct tok_bpe *m, const char *raw, size_t n);
void tok_bpe_add_bytes(struct tok_bpe *m, const char *raw, size_t n, int32_t id);
void tok_bpe_add_merge_ids(struct tok_bpe *m, int32_t a, int32_t b, int32_t merged, uint32_t rank);
/* Text mode, for vocabularies of plain UTF-8 strings (SentencePiece
 * models converted to tokenizer.json): call before adding tokens. Strings
 * are then kept as they are (no byte-alphabet unmapping), a word starts as
 * one symbol per character, and tok_bpe_id_bytes gives the token's text. */
void tok_bpe_set_text_mode(struct tok_bpe *m);
bool tok_bpe_text_mode(const struct tok_bpe *m);
/* HF BPE byte_fallback (text mode): a character missing from the
 * vocabulary becomes the tokens "<0xNN>" of its bytes when all of them
 * exist. Call after the vocabulary is complete. */
void tok_bpe_set_byte_fallback(struct tok_bpe *m);
/* HF BPE options: ignore_merges (a pre-token found whole in the vocabulary
 * is one token), unk_id (-1: bytes missing from the vocabulary are dropped,
 * as HF does without unk_token), fuse_unk. */
void tok_bpe_set_options(struct tok_bpe *m, bool ignore_merges, int32_t unk_id, bool fuse_unk);
/* Text mode, after the vocabulary, merges and options: let words longer
 * than the cache's keys be encoded in parts cut before each sym (U+2581 for
 * SentencePiece-style vocabularies) that follows another character, so
 * the parts hit the word cache. Done only when the result cannot change:
 * sym is a token, no merge makes a token holding sym after a character
 * that is not sym, no merge involves a byte-fallback or the unk token,
 * and ignore_merges is off. Returns whether splitting is on. */
bool tok_bpe_set_split(struct tok_bpe *m, const char *sym, size_t len);
/* Number of vocabulary strings (HF's model.get_vocab_size()). */
size_t tok_bpe_vocab_count(const struct tok_bpe *m);
/* The bytes an id decodes to (HF ByteLevel decoder: the raw bytes of a
 * byte-level token, the UTF-8 text of any other); false for an unknown id. */
bool tok_bpe_id_bytes(const struct tok_bpe *m, int32_t id, const char **p, size_t *n);

/* Per-session word cache (bounded; cleared when full). */
struct tok_bpe_cache;
struct tok_bpe_cache *tok_bpe_cache_new(void);
void tok_bpe_cache_free(struct tok_bpe_cache *c);

/* The cache on its own (tok_spm.c's SentencePiece models): append the ids
 * remembered for w[0..n) to out (false: none), and remember ids for it.
 * Words longer than TOK_BPE_CACHE_MAX_KEY bytes are never remembered. */
#define TOK_BPE_CACHE_MAX_KEY 64
bool tok_bpe_cache_get(struct tok_bpe_cache *c, const char *w, size_t n, struct tok_ids *out);
/* The ids remembered for w[0..n) in place (*k of them), NULL when none;
 * valid until the next put. */
const int32_t *tok_bpe_cache_find(struct tok_bpe_cache *c, const char *w, size_t n, size_t *k);
void tok_bpe_cache_put(struct tok_bpe_cache *c, const char *w, size_t n, const int32_t *ids, size_t k);

/* Append the ids of one pre-token (raw bytes) to out. */
void tok_bpe_encode_word(const struct tok_bpe *m, struct tok_bpe_cache *c, const char *w, size_t n,
			 struct tok_ids *out);

/* The merge loop on its own, for tests: merges ids[0..n) in place and
 * returns the new count. heap selects the priority-queue loop used for long
 * words instead of the array scan used for short ones; both must agree. */
size_t tok_bpe_merge_ids(const struct tok_bpe *m, struct tok_bpe_cache *c, int32_t *ids, size_t n, bool heap);

#endif
