/*
 * tok_args.c - the tokenizer flags of struct args, as tok_load wants them:
 * one place for every program that loads a tokenizer.
 */
#include "data/tok.h"

#include <string.h>

#include "base/args.h"

struct tok_config tok_config_from_args(const struct args *a)
{
	struct tok_config c;
	memset(&c, 0, sizeof(c));
	c.type = a->tokenizer_type;
	c.vocab_file = a->vocab_file;
	c.merge_file = a->merge_file;
	c.model = a->tokenizer_model;
	c.vocab_size = a->vocab_size;
	c.null_eod_id = a->null_tokenizer_eod_id;
	c.no_include_special = a->tokenizer_hf_no_include_special_tokens;
	c.sp_keep_extra_spaces = !a->tokenizer_sentencepiece_ignore_extra_whitespaces;
	c.special_tokens = a->tokenizer_special_tokens.v;
	c.n_special_tokens = a->tokenizer_special_tokens.n;
	c.tiktoken_pattern = a->tiktoken_pattern;
	c.tiktoken_num_special_tokens = a->tiktoken_num_special_tokens;
	return c;
}
