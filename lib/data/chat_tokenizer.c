/*
 * chat_tokenizer.c - see chat_tokenizer.h. The configs are read with
 * integers as reals: only strings are wanted from them, and a
 * model_max_length past 64 bits (Llama-3's 1e30) must still parse.
 *
 * Rendering passes the special tokens as transformers' apply_chat_template
 * does (template variables from special_tokens_map, then the caller's
 * keyword arguments over them): bos_token and eos_token go to the renderer
 * as such, the others as extra variables; a keyword argument of the same
 * name replaces either. messages, tools and add_generation_prompt are set
 * last, so no keyword argument hides them (transformers takes them as named
 * parameters, which keywords cannot repeat).
 */
#include "data/chat_tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/error.h"
#include "base/jsonio.h"
#include "base/sbuf.h"
#include "base/xalloc.h"
#include "data/chat_template.h"

struct chat_prompt {
	struct chat_template *tmpl;
	char *bos_token, *eos_token; /* NULL: undefined in the template */
	json_t *extra;               /* the other special tokens */
};

/* ---- the folder's configs ------------------------------------------------ */

static int load_optional(const char *dir, const char *name, json_t **out)
{
	char *p = xasprintf("%s/%s", dir, name);
	struct stat st;
	int r = 0;
	*out = NULL;
	if (stat(p, &st) == 0) {
		*out = jsonio_load_file_flags(p, JSON_DECODE_INT_AS_REAL);
		if (!*out)
			r = -1;
		else if (!json_is_object(*out))
			r = error("%s: not a JSON object", p);
	}
	free(p);
	return r;
}

int chat_tok_cfg_load(struct chat_tok_cfg *c, const char *model)
{
	struct stat st;
	memset(c, 0, sizeof(*c));
	if (stat(model, &st) == 0 && S_ISDIR(st.st_mode)) {
		c->dir = xstrdup(model);
	} else {
		const char *slash = strrchr(model, '/');
		c->dir = slash ? xasprintf("%.*s", (int)(slash - model + (slash == model)), model) : xstrdup(".");
	}
	if (load_optional(c->dir, "tokenizer_config.json", &c->config) ||
	    load_optional(c->dir, "special_tokens_map.json", &c->map)) {
		chat_tok_cfg_release(c);
		return -1;
	}
	return 0;
}

void chat_tok_cfg_release(struct chat_tok_cfg *c)
{
	free(c->dir);
	json_decref(c->config);
	json_decref(c->map);
	memset(c, 0, sizeof(*c));
}

const char *chat_tok_cfg_token(const struct chat_tok_cfg *c, const char *key)
{
	const json_t *v = c->map ? json_object_get(c->map, key) : NULL;
	if (!v || json_is_null(v))
		v = c->config ? json_object_get(c->config, key) : NULL;
	if (json_is_object(v))
		v = json_object_get(v, "content");
	return json_string_value(v);
}

int chat_tok_cfg_template(const struct chat_tok_cfg *c, char **text, char **where)
{
	char *p = xasprintf("%s/chat_template.jinja", c->dir);
	struct stat st;
	*text = *where = NULL;
	if (stat(p, &st) == 0) {
		struct sbuf sb = SBUF_INIT;
		if (sbuf_read_file(&sb, p)) {
			sbuf_release(&sb);
			free(p);
			return -1;
		}
		*text = sbuf_detach(&sb, NULL);
		*where = p;
		return 1;
	}
	free(p);
	const json_t *v = c->config ? json_object_get(c->config, "chat_template") : NULL;
	if (json_is_string(v)) {
		*text = xstrdup(json_string_value(v));
		*where = xasprintf("%s/tokenizer_config.json (chat_template)", c->dir);
		return 1;
	}
	if (json_is_array(v)) {
		for (size_t i = 0; i < json_array_size(v); i++) {
			const json_t *e = json_array_get(v, i);
			const char *name = jsonio_get_str(e, "name"), *t = jsonio_get_str(e, "template");
			if (name && t && !strcmp(name, "default")) {
				*text = xstrdup(t);
				*where = xasprintf("%s/tokenizer_config.json (chat_template \"default\")", c->dir);
				return 1;
			}
		}
		return error("%s/tokenizer_config.json: chat_template lists named templates but none named \"default\"",
			     c->dir);
	}
	if (v && !json_is_null(v))
		return error("%s/tokenizer_config.json: chat_template is neither a string nor a list of named "
			     "templates", c->dir);
	return 0;
}

/* ---- a template and its variables ---------------------------------------- */

/* The template variables transformers adds from special_tokens_map besides bos_token and eos_token. */
static json_t *special_vars(const struct chat_tok_cfg *c)
{
	static const char *const keys[] = { "unk_token", "sep_token", "pad_token", "cls_token", "mask_token" };
	json_t *o = json_object();
	if (!c)
		return o;
	for (size_t k = 0; k < sizeof(keys) / sizeof(keys[0]); k++) {
		const char *s = chat_tok_cfg_token(c, keys[k]);
		if (s)
			json_object_set_new(o, keys[k], json_string(s));
	}
	const json_t *add = c->map ? json_object_get(c->map, "additional_special_tokens") : NULL;
	if (!json_is_array(add))
		add = c->config ? json_object_get(c->config, "additional_special_tokens") : NULL;
	if (json_is_array(add) && json_array_size(add) > 0) {
		json_t *l = json_array();
		for (size_t i = 0; i < json_array_size(add); i++) {
			const json_t *e = json_array_get(add, i);
			const char *s = json_string_value(json_is_object(e) ? json_object_get(e, "content") : e);
			if (s)
				json_array_append_new(l, json_string(s));
		}
		json_object_set_new(o, "additional_special_tokens", l);
	}
	return o;
}

struct chat_prompt *chat_prompt_new(const char *text, const char *origin, const struct chat_tok_cfg *c)
{
	struct chat_template *t = chat_template_parse(text, origin);
	if (!t)
		return NULL;
	struct chat_prompt *p = xcalloc(1, sizeof(*p));
	p->tmpl = t;
	const char *bos = c ? chat_tok_cfg_token(c, "bos_token") : NULL;
	const char *eos = c ? chat_tok_cfg_token(c, "eos_token") : NULL;
	p->bos_token = bos ? xstrdup(bos) : NULL;
	p->eos_token = eos ? xstrdup(eos) : NULL;
	p->extra = special_vars(c);
	return p;
}

void chat_prompt_free(struct chat_prompt *p)
{
	if (!p)
		return;
	chat_template_free(p->tmpl);
	free(p->bos_token);
	free(p->eos_token);
	json_decref(p->extra);
	free(p);
}

char *chat_prompt_render(const struct chat_prompt *p, const struct chat_prompt_args *a)
{
	struct chat_render_args r = {
		.messages = a->messages,
		.add_generation_prompt = a->add_generation_prompt,
		.bos_token = p->bos_token,
		.eos_token = p->eos_token,
		.tools = a->tools,
		.extra = p->extra,
		.errbuf = a->errbuf,
		.errsize = a->errbuf ? a->errsize : 0,
	};
	json_t *vars = NULL;
	if (a->kwargs && json_object_size(a->kwargs) > 0) {
		/* a deep copy: p->extra is shared by the threads rendering, and a
		 * shallow copy would touch its members' reference counts */
		vars = json_deep_copy(p->extra);
		json_object_update(vars, (json_t *)a->kwargs);
		if (json_object_get(a->kwargs, "bos_token"))
			r.bos_token = NULL;
		if (json_object_get(a->kwargs, "eos_token"))
			r.eos_token = NULL;
		r.extra = vars;
	}
	char *out = chat_template_render(p->tmpl, &r);
	json_decref(vars);
	return out;
}
