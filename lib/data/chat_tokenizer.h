/*
 * chat_tokenizer.h - what a Hugging Face tokenizer folder says about chat
 * prompts, read one way for every user (SFT's "default" format in sft.c,
 * text_gen_server's /v1/chat/completions):
 *
 *   - its chat template: chat_template.jinja when the folder has one, else
 *     tokenizer_config.json's "chat_template", a string or a list of
 *     {"name", "template"} objects of which the one named "default" is taken;
 *   - the special tokens a template reads as variables, as transformers
 *     passes them: bos_token and eos_token, and unk_token, sep_token,
 *     pad_token, cls_token, mask_token, additional_special_tokens, each a
 *     string or an {"content": ...} object, special_tokens_map.json
 *     overriding tokenizer_config.json.
 *
 * A `struct chat_prompt` is a parsed template with those variables; it is
 * read-only once made and may be rendered by several threads at once.
 */
#ifndef MEGAC_DATA_CHAT_TOKENIZER_H
#define MEGAC_DATA_CHAT_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

struct chat_tok_cfg {
	char *dir;            /* the folder */
	json_t *config, *map; /* tokenizer_config.json, special_tokens_map.json; NULL when absent */
};

/* Read the configs of the folder model names: the folder itself, or a file
 * in it (its tokenizer.json). Files that are absent are no error; 0, or -1
 * after error() for one that is not a JSON object. */
int chat_tok_cfg_load(struct chat_tok_cfg *c, const char *model);
void chat_tok_cfg_release(struct chat_tok_cfg *c);

/* A special token's string (key "bos_token", ...), NULL when it has none. */
const char *chat_tok_cfg_token(const struct chat_tok_cfg *c, const char *key);

/* The folder's own template: 1 with *text (malloc'd) and *where (malloc'd:
 * the file, and the key within it, e.g. "DIR/tokenizer_config.json
 * (chat_template)"), 0 when it has none, -1 after error(). */
int chat_tok_cfg_template(const struct chat_tok_cfg *c, char **text, char **where);

struct chat_prompt;

/* Parse template text (origin names it in messages) and take the special
 * tokens of c as its variables (c NULL: none, as for a tokenizer that is
 * not a Hugging Face folder). NULL after error(). */
struct chat_prompt *chat_prompt_new(const char *text, const char *origin, const struct chat_tok_cfg *c);
void chat_prompt_free(struct chat_prompt *p);

struct chat_prompt_args {
	const json_t *messages; /* a JSON array of message objects, passed as they are */
	bool add_generation_prompt;
	const json_t *tools;    /* a JSON array of tool schemas, or NULL */
	const json_t *kwargs;   /* more variables (a JSON object), or NULL; they override the special tokens */
	char *errbuf;           /* NULL: a failure goes to error(); else its message goes here */
	size_t errsize;
};

/* The rendered text (malloc'd), or NULL after error() (or with the
 * message in a->errbuf). */
char *chat_prompt_render(const struct chat_prompt *p, const struct chat_prompt_args *a);

#endif
