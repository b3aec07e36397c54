/*
 * sft.h - supervised fine-tuning data (Megatron's --sft): conversations
 * turned into token ids and loss targets by a prompt format, and the
 * conversations of one JSONL line packed into one training sample.
 *
 * The rules (prompt formats, per-turn masking, splitting, packing) are
 * written out atop sft.c and in docs/sft.md.
 *
 * A `struct sft_tokenizer` is immutable once loaded; threads share it and
 * encode through their own tok_session (tok_session_new(sft_tok(st))).
 */
#ifndef MEGAC_DATA_SFT_H
#define MEGAC_DATA_SFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

struct tokenizer;
struct tok_session;

/* Megatron's label of a position that carries no loss (a prompt token). */
#define SFT_IGNORE_INDEX (-100)

struct sft_tokenizer;

/*
 * Load the Hugging Face tokenizer at model (a folder with tokenizer.json or
 * tokenizer.json.xz, tokenizer_config.json and optionally
 * special_tokens_map.json and chat_template.jinja) for prompt format
 * `format`: "nemotron-h-aligned" (Megatron's default), "nemotron-nano-v2",
 * "identity" or "default" (the tokenizer's own chat template). NULL after
 * error() for an unknown format, a pad token the tokenizer lacks, or (for
 * "default") a folder without a chat template.
 */
struct sft_tokenizer *sft_tokenizer_load(const char *model, const char *format);
void sft_tokenizer_free(struct sft_tokenizer *st);

/* The fixed chat template of a prompt format (Megatron's text), NULL for "default" or an unknown name. */
const char *sft_format_template(const char *format);

/* The underlying tokenizer: encodes without the post-processor's special
 * tokens (add_special_tokens=False), as apply_chat_template does. */
const struct tokenizer *sft_tok(const struct sft_tokenizer *st);
/* The pad id (Megatron's tokenizer.pad) and end-of-document id (-1: none). */
int64_t sft_pad(const struct sft_tokenizer *st);
int64_t sft_eod(const struct sft_tokenizer *st);
/* One line for logs: format, pad, bos, assistant prefix length. */
const char *sft_describe(const struct sft_tokenizer *st);

/* Growable arrays of int64_t. */
struct sft_ids {
	int64_t *v;
	size_t n, cap;
};
void sft_ids_free(struct sft_ids *a);

/*
 * One conversation (a JSON array of {"role", "content"} objects) as
 * tokens and targets (cleared first, then the same length): targets are
 * the tokens with SFT_IGNORE_INDEX where no loss is taken. 0, or -1 after
 * error() with `where` (e.g. "data.jsonl:12") leading the message.
 */
int sft_tokenize(const struct sft_tokenizer *st, struct tok_session *s, const json_t *conv, const char *where,
		 struct sft_ids *tokens, struct sft_ids *targets);

/* One training sample of seq_length positions. */
struct sft_sample {
	int64_t seq_length;
	int64_t *tokens;       /* [seq_length] input ids */
	int64_t *labels;       /* [seq_length] the next token, or SFT_IGNORE_INDEX */
	float *loss_mask;      /* [seq_length] 0 where labels is pad or SFT_IGNORE_INDEX, else 1 */
	int64_t *position_ids; /* [seq_length] restarting at each conversation */
	int32_t *cu_seqlens;   /* [n_cu] conversation boundaries, 0 first and seq_length last */
	size_t n_cu;           /* at least 2 */
	int32_t max_seqlen;    /* the longest span between boundaries */
};

/*
 * The sample of one JSONL line's messages (a JSON array) as
 * SFTDataset.__getitem__ builds it for sequence length seq_length (>= 1)
 * and context-parallel size cp (>= 1). 0, or -1 after error() naming
 * `where`. out is overwritten; free it with sft_sample_free. Megatron pads
 * cu_seqlens to seq_length + 1 entries with seq_length for collation; the
 * caller does that when it needs it.
 */
int sft_sample_build(const struct sft_tokenizer *st, struct tok_session *s, const json_t *messages,
		     int64_t seq_length, int cp, const char *where, struct sft_sample *out);
void sft_sample_free(struct sft_sample *smp);

#endif
