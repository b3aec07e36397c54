/*
 * tok_spm.h - internal interface between tok.c and the SentencePiece
 * backend (users include tok.h).
 *
 * struct tok_spm is a SentencePiece `.model` file (a protobuf ModelProto)
 * read natively, encoding as Google's sentencepiece library does:
 *
 *   text -> normalizer (user-defined symbols kept whole, the precompiled
 *           charsmap's longest rule, extra whitespace removed, spaces
 *           escaped to U+2581, the dummy prefix)
 *        -> model: BPE (merges by piece score) or unigram (Viterbi)
 *        -> unknown pieces as <0xNN> byte pieces when byte_fallback is on
 *
 * and decoding ids as its decode does. Megatron's three SentencePiece types
 * (SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer) all
 * encode this way, adding no BOS or EOS; tok.c maps them here.
 */
#ifndef MEGAC_DATA_TOK_SPM_H
#define MEGAC_DATA_TOK_SPM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sbuf;
struct tok_ids;
struct tok_spm;
struct tok_spm_session;

/*
 * Read the model at path. keep_extra_spaces is Megatron's
 * --no-tokenizer-sentencepiece-ignore-extra-whitespaces: when the model
 * drops repeated, leading and trailing spaces, encode them anyway the way
 * Megatron's SentencePieceTokenizer does (a marker after each such space,
 * its last id dropped). NULL and error() naming the file, the byte offset
 * and what was expected, for a file that is not a model megac can use.
 */
struct tok_spm *tok_spm_load(const char *path, bool keep_extra_spaces);
void tok_spm_free(struct tok_spm *m);

int64_t tok_spm_piece_count(const struct tok_spm *m);
/* sentencepiece's bos_id()/eos_id()/pad_id(): the id of "<s>", "</s>",
 * "<pad>" (or the names the trainer spec gives) when that piece is a control
 * piece, else -1. */
int64_t tok_spm_bos(const struct tok_spm *m);
int64_t tok_spm_eos(const struct tok_spm *m);
int64_t tok_spm_pad(const struct tok_spm *m);
int64_t tok_spm_unk(const struct tok_spm *m);
/* The piece of id, NULL outside the vocabulary. */
const char *tok_spm_piece(const struct tok_spm *m, int64_t id);
/* Hugging Face's tokenizer.json of the model, as transformers' LlamaConverter
 * writes it (legacy layout: Prepend + Replace normalizer, BPE with merges
 * from the pieces' scores, byte_fallback, "<s> $A" template); NULL and
 * *why_not when the model is not one that converts exactly (unigram, a
 * character-rule normalizer, not Llama's whitespace handling, user-defined
 * symbols). */
char *tok_spm_hf_json(const struct tok_spm *m, const char **why_not);
/* "BPE" or "unigram" */
const char *tok_spm_model_type(const struct tok_spm *m);

struct tok_spm_session *tok_spm_session_new(const struct tok_spm *m);
void tok_spm_session_free(struct tok_spm_session *s);
/* Append the ids of text[0..len), which must be valid UTF-8 (NUL bytes
 * allowed). Never fails. */
void tok_spm_encode(struct tok_spm_session *s, const char *text, size_t len, struct tok_ids *out);
/* Append sentencepiece's decode of ids; -1 and error() for an id outside
 * the vocabulary. */
int tok_spm_decode(const struct tok_spm *m, const int32_t *ids, size_t n, struct sbuf *out);

#endif
