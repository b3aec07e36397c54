/*
 * megac_chat_template.c - a test tool: renders a chat template
 * (lib/data/chat_template.h) for each conversation of a JSONL file, for
 * tests/prog/chat_template.sh, which compares the texts with jinja2's.
 *
 *   megac_chat_template TEMPLATE.jinja CONVERSATIONS.jsonl
 *	each input line: {"messages": [...], "add_generation_prompt": bool,
 *	"bos_token": str|null, "eos_token": str|null, "tools": [...]|null,
 *	"extra": {...}}; each output line: {"text": "..."} or, when the
 *	render fails, {"error": "the message"}. Exits 128 when the template
 *	does not parse or an input line is not such an object.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "base/error.h"
#include "base/sbuf.h"
#include "data/chat_template.h"

int main(int argc, char **argv)
{
	log_init("megac_chat_template", 0, 1);
	if (argc != 3)
		die("usage: megac_chat_template TEMPLATE.jinja CONVERSATIONS.jsonl");
	struct sbuf text = SBUF_INIT;
	if (sbuf_read_file(&text, argv[1]))
		exit(DIE_EXIT_CODE);
	struct chat_template *t = chat_template_parse(text.buf, argv[1]);
	if (!t)
		exit(DIE_EXIT_CODE);
	FILE *in = fopen(argv[2], "r");
	if (!in)
		die_errno("cannot open %s", argv[2]);
	char *line = NULL;
	size_t cap = 0;
	ssize_t n;
	int lineno = 0;
	while ((n = getline(&line, &cap, in)) > 0) {
		lineno++;
		json_error_t jerr;
		json_t *conv = json_loadb(line, (size_t)n, 0, &jerr);
		if (!conv || !json_is_object(conv))
			die("%s:%d: not a JSON object: %s", argv[2], lineno, conv ? "" : jerr.text);
		json_t *bos = json_object_get(conv, "bos_token"), *eos = json_object_get(conv, "eos_token");
		json_t *tools = json_object_get(conv, "tools");
		struct chat_render_args a = {
			.messages = json_object_get(conv, "messages"),
			.add_generation_prompt = json_is_true(json_object_get(conv, "add_generation_prompt")),
			.bos_token = json_string_value(bos),
			.eos_token = json_string_value(eos),
			.tools = json_is_null(tools) ? NULL : tools,
			.extra = json_object_get(conv, "extra"),
		};
		char msg[1024] = "";
		log_capture(msg, sizeof(msg));
		char *out = chat_template_render(t, &a);
		log_capture(NULL, 0);
		json_t *res = out ? json_pack("{s:s}", "text", out) : json_pack("{s:s}", "error", msg);
		char *s = json_dumps(res, JSON_COMPACT);
		puts(s);
		free(s);
		json_decref(res);
		free(out);
		json_decref(conv);
	}
	free(line);
	fclose(in);
	chat_template_free(t);
	sbuf_release(&text);
	return 0;
}
