/*
 * serve_ckpt.c - see serve_ckpt.h.
 */
#include "infer/serve_ckpt.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"
#include "ckpt/ckpt.h"
#include "data/tok.h"
#include "infer/server.h"
#include "model/ckpt_args.h"
#include "model/ckpt_tok.h"
#include "model/gpt_ckpt.h"

/* The config's "tokenizer_type" (older checkpoints record only that), or
 * NULL; caller frees. */
static char *config_tokenizer_type(struct ckpt_reader *r, int mf)
{
	char *s;
	if (ckpt_get_attr_str(r, mf, NULL, "config", &s) < 0)
		return NULL;
	json_t *o = json_loads(s, 0, NULL);
	free(s);
	const char *t = json_string_value(json_object_get(o, "tokenizer_type"));
	char *type = t && *t ? xstrdup(t) : NULL;
	json_decref(o);
	return type;
}

/* The checks of serve_ckpt.h on the checkpoint a names; *a is completed
 * with the recorded tokenizer when it gives none (its strings then live in
 * rec). */
static int check(struct args *a, struct ckpt_tok *rec)
{
	int64_t iter;
	int k = ckpt_latest(a->load, &iter);
	if (k > 0)
		k = ckpt_newest(a->load, &iter);
	if (k > 0)
		return 1; /* no checkpoint: server.c says so */
	if (k < 0)
		return -1;
	struct ckpt_reader *r = ckpt_open(a->load, iter);
	if (!r)
		return -1;
	char where[4200];
	struct gpt_config c;
	char *type = NULL;
	int rc = -1, mf = ckpt_file_open(r, "model.h5");
	snprintf(where, sizeof(where), "'%s'", ckpt_reader_dir(r));
	if (mf < 0 || ckpt_check_iteration(r) < 0 || gpt_config_from_ckpt(&c, r, mf) < 0)
		goto out;
	int have = ckpt_tok_get(rec, r, mf);
	if (have < 0)
		goto out;
	type = config_tokenizer_type(r, mf);
	if (!a->tokenizer_type) {
		if (have == 1) {
			error("%s records no tokenizer (it was saved before megac kept one): give the tokenizer flags it was "
			      "trained with (--tokenizer-type%s%s ...)", where, type ? " " : "", type ? type : "");
			goto out;
		}
		rc = ckpt_tok_use(a, rec, where);
		goto out;
	}
	struct tok_config tc = tok_config_from_args(a);
	struct tokenizer *tok = tok_load(&tc);
	if (!tok)
		goto out;
	rc = ckpt_tok_check(have == 0 ? rec : NULL, type, &c, a, tok, where);
	tok_free(tok);
	if (rc < 0)
		error("give the tokenizer the model was trained with, or no tokenizer flags to use the one the checkpoint "
		      "records%s", have == 0 && rec->nfiles ? "" : " (this one records none)");
out:
	free(type);
	ckpt_close(r);
	return rc;
}

int serve_command(const struct args *a0)
{
	struct args a = *a0;
	struct ckpt_tok rec;
	memset(&rec, 0, sizeof(rec));
	struct ckpt_args own; /* --use-checkpoint-args: the model's flags, and its tokenizer */
	int rc = ckpt_args_apply(&a, &own);
	if (rc == 0)
		rc = a.load ? check(&a, &rec) : 0;
	if (rc >= 0)
		rc = server_command(&a);
	ckpt_args_release(&own);
	ckpt_tok_release_files();
	ckpt_tok_free(&rec);
	return rc;
}
