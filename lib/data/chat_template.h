/*
 * chat_template.h - Hugging Face chat templates: the subset of Jinja2 that
 * models' tokenizer_config.json "chat_template" texts use, rendered the way
 * transformers' apply_chat_template renders them (trim_blocks, lstrip_blocks,
 * loop controls, its own tojson, raise_exception and strftime_now).
 *
 * chat_template_parse() reads the whole template once and refuses, naming
 * origin:line:column, any construct outside the subset (macros, includes,
 * unknown filters and tests, ...). chat_template_render() then runs it on one
 * conversation; a parsed template is read-only and may be rendered by several
 * threads at once. The grammar, value model and error rules are described
 * atop chat_template.c.
 */
#ifndef MEGAC_DATA_CHAT_TEMPLATE_H
#define MEGAC_DATA_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

struct chat_template;

struct chat_render_args {
	/* the conversation: a JSON array of objects ({"role": ..., "content": ...,
	 * and whatever else a template reads: tool_calls, reasoning_content, ...) */
	const json_t *messages;
	bool add_generation_prompt;
	/* NULL: the variable is undefined, as when the tokenizer has no such token */
	const char *bos_token;
	const char *eos_token;
	/* the tool schemas (a JSON array), or NULL: then `tools` is none */
	const json_t *tools;
	/* more variables (a JSON object: enable_thinking, date_string, ...), or NULL */
	const json_t *extra;
	/* NULL: a failure goes to error(); else its message (the same text) is
	 * written here instead, as on a server's thread answering a request */
	char *errbuf;
	size_t errsize;
};

/* NULL and error() naming origin:line:column on a syntax error or an
 * unsupported construct. origin names the template in messages. */
struct chat_template *chat_template_parse(const char *text, const char *origin);
/* The rendered text (malloc'd, NUL-terminated UTF-8), or NULL and error()
 * (or a->errbuf): the template's raise_exception() message, an undefined
 * method, a type error (a string plus none, ...), each with its line and
 * column. */
char *chat_template_render(const struct chat_template *t, const struct chat_render_args *a);
void chat_template_free(struct chat_template *t);

#endif
