/*
 * ckpt_tok.h - the tokenizer a checkpoint records (docs/checkpoint-format.md,
 * "The tokenizer"): its type, its size, the options that change its ids,
 * and a copy of its files (vocab.json + merges.txt, tokenizer.json +
 * tokenizer_config.json + special_tokens_map.json, a SentencePiece
 * tokenizer.model, or TikTokenizer's tiktoken.json), as root attributes of
 * model.h5, so that a checkpoint moved elsewhere still knows how to read
 * and write its token ids. train writes it, ckpt_convert carries it over
 * (and puts its files in a Hugging Face export), text_gen_server checks
 * the tokenizer it is given against it, or uses it when given none.
 */
#ifndef MEGAC_MODEL_CKPT_TOK_H
#define MEGAC_MODEL_CKPT_TOK_H

#include <stdbool.h>
#include <stdint.h>

#include "base/args.h"
#include "ckpt/ckpt.h"
#include "data/tok.h"
#include "model/gpt_config.h"

#define CKPT_TOK_MAX_FILES 3

struct ckpt_tok_file {
	char *name;   /* "vocab.json": a plain file name, Hugging Face's */
	char *data;   /* its bytes, NUL-terminated (a text file has no NUL inside) */
	size_t len;
	bool binary;  /* kept base64-encoded (tokenizer.model) */
	uint32_t crc32;
};

struct ckpt_tok {
	char *type;                /* --tokenizer-type */
	int64_t vocab_size;        /* the tokenizer's tokens (unpadded) */
	int64_t eod;               /* its end-of-document id, -1 for none */
	int64_t padding_multiple;  /* --make-vocab-size-divisible-by x TP; 0: padded by --padded-vocab-size */
	int64_t null_vocab_size;   /* NullTokenizer's (or TikTokenizer's) --vocab-size, -1 */
	int64_t null_eod_id;       /* --null-tokenizer-eod-id */
	bool no_include_special;   /* --tokenizer-hf-no-include-special-tokens */
	bool sp_ignore_extra_ws;   /* --tokenizer-sentencepiece-ignore-extra-whitespaces (default on) */
	char *tiktoken_pattern;    /* --tiktoken-pattern, NULL: not given */
	int64_t tiktoken_num_special; /* --tiktoken-num-special-tokens */
	char **special;            /* --tokenizer-special-tokens */
	int nspecial;
	struct ckpt_tok_file files[CKPT_TOK_MAX_FILES];
	int nfiles;
	char *dir;                 /* where ckpt_tok_extract put the files, NULL before */
	char *paths[CKPT_TOK_MAX_FILES];
};

/* The record of the tokenizer the flags load (tok, already loaded from
 * them; the vocabulary padding from the flags too): the files are read
 * from the paths the flags give. Files over 64 MB, and text files holding
 * NUL bytes, are left out with a warning; a SentencePiece .model is kept
 * base64-encoded. error() and -1 when a file
 * cannot be read. */
int ckpt_tok_from_args(struct ckpt_tok *rec, const struct args *a, const struct tokenizer *tok);

/* The same from a folder of tokenizer files (a Hugging Face model folder):
 * tokenizer.json (+ tokenizer_config.json, special_tokens_map.json) as a
 * HuggingFaceTokenizer, else vocab.json + merges.txt as a GPT2BPETokenizer;
 * padding_multiple is how the model's vocabulary was padded. 1 when the
 * folder has neither (no record), 0, or -1 after error() when they do not
 * load. */
int ckpt_tok_from_dir(struct ckpt_tok *rec, const char *dir, int64_t padding_multiple);

/* Write rec as root attributes of `file` (model.h5): "tokenizer" (JSON)
 * and one "tokenizer_file.<name>" string per file. */
int ckpt_tok_put(struct ckpt_writer *w, int file, const struct ckpt_tok *rec);

/* Read the record of `file`: 0, 1 when the checkpoint has none (written
 * before megac recorded tokenizers), -1 after error() naming the file when
 * it is damaged (a file whose crc32 does not match). */
int ckpt_tok_get(struct ckpt_tok *rec, struct ckpt_reader *r, int file);

/* Write the recorded files into the existing folder dir (Hugging Face's
 * names) and fill *tc to load the tokenizer from there; tc's strings point
 * into rec, valid until ckpt_tok_free. A record of a tokenizer that needs
 * files which were not stored is an error naming the checkpoint (where). */
int ckpt_tok_extract(struct ckpt_tok *rec, const char *dir, const char *where, struct tok_config *tc);

/* Does the tokenizer the flags a load (tok) fit a model recorded with rec
 * (NULL: an older checkpoint, then only c's vocabulary and the config's
 * tokenizer_type, ckpt_type, are known)? Refused (error() naming the
 * checkpoint, where, and both sides, -1): another tokenizer type, or
 * another vocabulary (its size, and padded as the checkpoint pads it). A
 * warning when the files given differ from the recorded ones (crc32) but
 * the rest agrees. */
int ckpt_tok_check(const struct ckpt_tok *rec, const char *ckpt_type, const struct gpt_config *c,
		   const struct args *a, const struct tokenizer *tok, const char *where);

void ckpt_tok_free(struct ckpt_tok *rec);

/* Use the recorded tokenizer: its files go to a temporary folder (removed
 * at exit, or by ckpt_tok_release_files) and a's tokenizer fields point at
 * them and at rec's strings, so rec must outlive a's use. */
int ckpt_tok_use(struct args *a, struct ckpt_tok *rec, const char *where);
void ckpt_tok_release_files(void);

#endif
