/*
 * sft.c - Megatron's SFT tokenizer and sample packing (its SFTTokenizer and
 * SFTDataset), rebuilt from their behaviour.
 *
 * Prompt formats. Each names a chat template, a pad token, whether the
 * tokenizer puts a BOS before every rendered text (has_bos) and how many
 * tokens of an assistant turn are its prefix (masked like the prompt):
 *
 *   nemotron-h-aligned  Megatron's own template: "<SPECIAL_10>System\n" +
 *                       stripped content + "\n" for a system turn,
 *                       "<SPECIAL_11>User\n" + content + "\n<SPECIAL_11>
 *                       Assistant\n" for a user turn (the assistant header
 *                       belongs to the user turn), the stripped content +
 *                       "\n" for an assistant turn; pad <SPECIAL_233>,
 *                       prefix 0
 *   nemotron-nano-v2    "/think" and "/no_think" removed from system and
 *                       user contents; the assistant turn carries its own
 *                       "<SPECIAL_11>Assistant\n" header (3 tokens, masked)
 *                       and ends "\n<SPECIAL_12>\n"; pad <unk>
 *   identity            the contents concatenated; pad <unk>
 *   default             the tokenizer's chat template, found as
 *                       chat_tokenizer.h says (chat_template.jinja, else
 *                       tokenizer_config.json's chat_template, or its
 *                       "default" entry when that is a list of named
 *                       templates); pad: pad_token, else eos_token;
 *                       has_bos when the tokenizer has a BOS token
 *
 * A pad token is looked up as transformers' convert_tokens_to_ids does: the
 * token's id, else the id of the configured unk_token; neither is an error
 * (Megatron would go on with None and fail later). The three fixed
 * templates are Megatron's text exactly (their "\n" are newline characters
 * inside Jinja string literals). No format drops system turns.
 *
 * Tokenizing a conversation: the template renders the whole conversation
 * (add_generation_prompt false; bos_token, eos_token and the other special
 * tokens of the configs as template variables, special_tokens_map.json
 * overriding tokenizer_config.json as in transformers: chat_tokenizer.h)
 * and the text is encoded without the post-processor's special tokens, as
 * apply_chat_template(tokenize=True) does. For "default" the targets are
 * the tokens. For the others each turn is rendered and encoded alone, in
 * order; with has_bos the first token of every turn but the first is
 * dropped; the turn's tokens must equal the conversation's at that place
 * (a tokenizer merging across turn boundaries fails here, as in Megatron),
 * and together the turns must cover the conversation exactly. System, user
 * and tool turns are masked (SFT_IGNORE_INDEX) whole, assistant turns only
 * on their first assistant_prefix_len tokens; any other role is an error,
 * as are an assistant turn with empty content and an assistant turn whose
 * previous turn is not a user or tool turn (for the first turn, "previous"
 * is the last one: Python's index -1, kept as Megatron has it). Roles are
 * compared in lower case here (ASCII).
 *
 * Packing one line into a sample of S positions: the messages are cut into
 * conversations at every system message (exact role "system"; messages
 * before the first one form a conversation of their own). Conversations are
 * appended in turn: tokens, targets and positions 0..n-1; with CP size
 * cp > 1 the pack is padded to a multiple of 2*cp (pad tokens and pad
 * targets, positions counting on); the pack's length is the next boundary.
 * Once the pack holds S+1 or more tokens it is cut to S and one pad is
 * appended (positions cut to S+1), the last boundary becomes S, and no
 * further conversation is read. Otherwise it is padded to S+1 at the end
 * and the last boundary moved to S (the end padding joins the last
 * conversation). Then tokens = pack[0..S), labels = targets[1..S+1),
 * positions = positions[0..S), loss_mask 0 where the label is SFT_IGNORE_INDEX or
 * equals the pad id (also a real token equal to pad, e.g. an EOS used as
 * pad), else 1; max_seqlen is the largest boundary difference.
 */
#include "data/sft.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/jsonio.h"
#include "base/xalloc.h"
#include "data/chat_tokenizer.h"
#include "data/tok.h"

static const char tmpl_h_aligned[] =
	"{% for message in messages %}{% if message['role'] == 'system' %}"
	"{{ '<SPECIAL_10>System\n' + message['content'].strip() + '\n' }}"
	"{% elif message['role'] == 'user' %}"
	"{{ '<SPECIAL_11>User\n' + message['content'].strip() + '\n' + '<SPECIAL_11>Assistant\n' }}"
	"{% elif message['role'] == 'assistant' %}{{ message['content'].strip() + '\n' }}"
	"{% endif %}{% endfor %}";
static const char tmpl_nano_v2[] =
	"{% for message in messages %}{% set content = message['content'] %}"
	"{% if message['role'] == 'system' %}"
	"{{ '<SPECIAL_10>System\n' + content.replace('/think', '').replace('/no_think', '').strip() + '\n' }}"
	"{% elif message['role'] == 'user' %}"
	"{{ '<SPECIAL_11>User\n' + content.replace('/think', '').replace('/no_think', '').strip() + '\n' }}"
	"{% elif message['role'] == 'assistant' %}"
	"{{ '<SPECIAL_11>Assistant\n' + content.strip() + '\n<SPECIAL_12>\n' }}"
	"{% endif %}{% endfor %}";
static const char tmpl_identity[] = "{% for message in messages %}{{ message['content'] }}{% endfor %}";

enum sft_format { SFT_H_ALIGNED, SFT_NANO_V2, SFT_IDENTITY, SFT_DEFAULT };

static const struct {
	const char *name;
	const char *tmpl;    /* NULL: the tokenizer's own */
	const char *pad;     /* the pad token's string; NULL: pad_token, else eos_token */
	int prefix_len;
} formats[] = {
	[SFT_H_ALIGNED] = { "nemotron-h-aligned", tmpl_h_aligned, "<SPECIAL_233>", 0 },
	[SFT_NANO_V2] = { "nemotron-nano-v2", tmpl_nano_v2, "<unk>", 3 },
	[SFT_IDENTITY] = { "identity", tmpl_identity, "<unk>", 0 },
	[SFT_DEFAULT] = { "default", NULL, NULL, 0 },
};

struct sft_tokenizer {
	struct tokenizer *tok;
	enum sft_format format;
	struct chat_prompt *prompt; /* the format's template, the special tokens its variables */
	int64_t pad, eod;
	bool has_bos;
	int prefix_len;
	char *describe;
};

const char *sft_format_template(const char *format)
{
	for (size_t i = 0; i < sizeof(formats) / sizeof(formats[0]); i++)
		if (!strcmp(formats[i].name, format))
			return formats[i].tmpl;
	return NULL;
}

/* ---- the tokenizer's configuration ------------------------------------ */

/* convert_tokens_to_ids: the token's id, else unk_token's, else -1. */
static int64_t token_id(const struct tokenizer *t, const struct chat_tok_cfg *c, const char *s)
{
	int64_t id = tok_token_id(t, s, strlen(s));
	if (id >= 0)
		return id;
	const char *unk = chat_tok_cfg_token(c, "unk_token");
	return unk ? tok_token_id(t, unk, strlen(unk)) : -1;
}

struct sft_tokenizer *sft_tokenizer_load(const char *model, const char *format)
{
	int f = -1;
	for (size_t i = 0; format && i < sizeof(formats) / sizeof(formats[0]); i++)
		if (!strcmp(formats[i].name, format))
			f = (int)i;
	if (f < 0) {
		error("unknown SFT prompt format '%s' (nemotron-h-aligned, nemotron-nano-v2, identity or default)",
		      format ? format : "");
		return NULL;
	}
	struct tok_config tc = { .type = "HuggingFaceTokenizer", .model = model, .vocab_size = -1,
				 .null_eod_id = -1, .no_include_special = true };
	struct tokenizer *t = tok_load(&tc);
	if (!t)
		return NULL;
	struct sft_tokenizer *st = xcalloc(1, sizeof(*st));
	struct chat_tok_cfg c;
	char *own = NULL, *own_where = NULL;
	st->tok = t;
	st->format = (enum sft_format)f;
	st->prefix_len = formats[f].prefix_len;
	st->eod = tok_eod(t);
	if (chat_tok_cfg_load(&c, model)) {
		sft_tokenizer_free(st);
		return NULL;
	}
	const char *bos = chat_tok_cfg_token(&c, "bos_token"), *eos = chat_tok_cfg_token(&c, "eos_token");
	int64_t bos_id = bos ? token_id(t, &c, bos) : -1;
	const char *tmpl = formats[f].tmpl;
	if (formats[f].pad) {
		st->pad = token_id(t, &c, formats[f].pad);
		if (st->pad < 0) {
			error("%s: SFT prompt format %s pads with %s, which the tokenizer does not have (and it has no "
			      "unk_token to stand in)",
			      model, formats[f].name, formats[f].pad);
			goto fail;
		}
	} else {
		const char *pad = chat_tok_cfg_token(&c, "pad_token");
		int64_t pad_id = pad ? token_id(t, &c, pad) : -1;
		st->pad = pad_id >= 0 ? pad_id : eos ? token_id(t, &c, eos) : -1;
		if (st->pad < 0) {
			error("%s: SFT prompt format default pads with the tokenizer's pad_token, else its eos_token, "
			      "and it has neither",
			      model);
			goto fail;
		}
		st->has_bos = bos_id >= 0;
		int r = chat_tok_cfg_template(&c, &own, &own_where);
		if (r == 0)
			error("%s: the SFT prompt format \"default\" uses the tokenizer's chat template, and it has "
			      "none (no chat_template.jinja, no chat_template in tokenizer_config.json)",
			      c.dir);
		if (r <= 0)
			goto fail;
		tmpl = own;
	}
	char *origin = xasprintf("%s chat template", formats[f].name);
	st->prompt = chat_prompt_new(tmpl, origin, &c);
	free(origin);
	if (!st->prompt)
		goto fail;
	st->describe = xasprintf("SFT prompt format %s (pad %" PRId64 ", bos %" PRId64 "%s, assistant prefix %d)",
				  formats[f].name, st->pad, bos_id, st->has_bos ? " added" : "", st->prefix_len);
	free(own);
	free(own_where);
	chat_tok_cfg_release(&c);
	return st;
fail:
	free(own);
	free(own_where);
	chat_tok_cfg_release(&c);
	sft_tokenizer_free(st);
	return NULL;
}

void sft_tokenizer_free(struct sft_tokenizer *st)
{
	if (!st)
		return;
	tok_free(st->tok);
	chat_prompt_free(st->prompt);
	free(st->describe);
	free(st);
}

const struct tokenizer *sft_tok(const struct sft_tokenizer *st)
{
	return st->tok;
}

int64_t sft_pad(const struct sft_tokenizer *st)
{
	return st->pad;
}

int64_t sft_eod(const struct sft_tokenizer *st)
{
	return st->eod;
}

const char *sft_describe(const struct sft_tokenizer *st)
{
	return st->describe;
}

/* ---- one conversation ---------------------------------------------------- */

static void ids_push(struct sft_ids *a, int64_t v)
{
	if (a->n == a->cap) {
		a->cap = a->cap ? 2 * a->cap : 256;
		a->v = xrealloc(a->v, a->cap * sizeof(*a->v));
	}
	a->v[a->n++] = v;
}

void sft_ids_free(struct sft_ids *a)
{
	free(a->v);
	a->v = NULL;
	a->n = a->cap = 0;
}

/* Render msgs and append their ids to out (cleared first). */
static int render_ids(const struct sft_tokenizer *st, struct tok_session *s, const json_t *msgs, const char *where,
		      struct sft_ids *out)
{
	struct chat_prompt_args a = { .messages = msgs };
	out->n = 0;
	char *text = chat_prompt_render(st->prompt, &a);
	if (!text)
		return error("%s: the chat template failed on this conversation", where);
	struct tok_ids ids = { 0 };
	int r = tok_encode(s, text, strlen(text), &ids);
	if (r)
		error("%s: cannot encode the rendered conversation: %s", where, tok_session_error(s));
	for (size_t i = 0; !r && i < ids.n; i++)
		ids_push(out, ids.v[i]);
	tok_ids_free(&ids);
	free(text);
	return r ? -1 : 0;
}

static bool role_is(const char *role, const char *what)
{
	size_t n = strlen(what);
	for (size_t i = 0; i < n; i++)
		if (!role[i] || (role[i] >= 'A' && role[i] <= 'Z' ? role[i] + 32 : role[i]) != what[i])
			return false;
	return !role[n];
}

static const char *msg_role(const json_t *m)
{
	return jsonio_get_str(m, "role");
}

int sft_tokenize(const struct sft_tokenizer *st, struct tok_session *s, const json_t *conv, const char *where,
		 struct sft_ids *tokens, struct sft_ids *targets)
{
	size_t n = json_array_size(conv);
	if (!json_is_array(conv) || n == 0)
		return error("%s: a conversation must be a non-empty array of messages", where);
	for (size_t k = 0; k < n; k++)
		if (!msg_role(json_array_get(conv, k)))
			return error("%s: turn %zu of the conversation has no string \"role\"", where, k + 1);
	if (render_ids(st, s, conv, where, tokens))
		return -1;
	targets->n = 0;
	for (size_t i = 0; i < tokens->n; i++)
		ids_push(targets, tokens->v[i]);
	if (st->format == SFT_DEFAULT)
		return 0;

	struct sft_ids part = { 0 };
	json_t *one = json_array();
	size_t at = 0;
	int r = 0;
	for (size_t k = 0; k < n && !r; k++) {
		json_t *turn = json_array_get(conv, k);
		const char *role = msg_role(turn);
		bool assistant = role_is(role, "assistant");
		if (assistant) {
			const json_t *c = json_object_get(turn, "content");
			if (!json_is_string(c)) {
				r = error("%s: turn %zu is an assistant turn without string content", where, k + 1);
				break;
			}
			if (json_string_length(c) == 0) {
				r = error("%s: turn %zu is an empty assistant turn", where, k + 1);
				break;
			}
			const char *prev = msg_role(json_array_get(conv, (k + n - 1) % n));
			if (!role_is(prev, "user") && !role_is(prev, "tool")) {
				r = error("%s: turn %zu is an assistant turn that does not follow a user or tool turn",
					  where, k + 1);
				break;
			}
		}
		json_array_clear(one);
		json_array_append(one, turn);
		if (render_ids(st, s, one, where, &part)) {
			r = -1;
			break;
		}
		const int64_t *p = part.v;
		size_t len = part.n;
		if (st->has_bos && k > 0 && len > 0) {
			p++;
			len--;
		}
		size_t mask_end;
		if (role_is(role, "system") || role_is(role, "user") || role_is(role, "tool")) {
			mask_end = at + len;
		} else if (assistant) {
			mask_end = at + (size_t)st->prefix_len;
		} else {
			r = error("%s: turn %zu has role '%s' (system, user, tool or assistant)", where, k + 1, role);
			break;
		}
		for (size_t i = at; i < mask_end && i < targets->n; i++)
			targets->v[i] = SFT_IGNORE_INDEX;
		if (at + len > tokens->n || (len && memcmp(tokens->v + at, p, len * sizeof(*p)))) {
			r = error("%s: the tokens of turn %zu rendered alone differ from the conversation's there "
				  "(the tokenizer merges across the turn boundary)",
				  where, k + 1);
			break;
		}
		at += len;
	}
	if (!r && at != tokens->n)
		r = error("%s: the turns rendered one by one make %zu tokens, the conversation %zu", where, at,
			  tokens->n);
	json_decref(one);
	sft_ids_free(&part);
	return r;
}

/* ---- packing ------------------------------------------------------------- */

struct pack {
	struct sft_ids tok, tgt, pos;
};

static void pad_by(struct pack *p, int64_t pad, size_t n)
{
	int64_t next = p->pos.v[p->pos.n - 1] + 1;
	for (size_t i = 0; i < n; i++) {
		ids_push(&p->tok, pad);
		ids_push(&p->tgt, pad);
		ids_push(&p->pos, next + (int64_t)i);
	}
}

int sft_sample_build(const struct sft_tokenizer *st, struct tok_session *s, const json_t *messages,
		     int64_t seq_length, int cp, const char *where, struct sft_sample *out)
{
	memset(out, 0, sizeof(*out));
	if (seq_length < 1 || seq_length > INT32_MAX - 1 || cp < 1)
		return error("%s: bad sequence length %" PRId64 " or context-parallel size %d", where, seq_length, cp);
	if (!json_is_array(messages) || json_array_size(messages) == 0)
		return error("%s: \"messages\" must be a non-empty array", where);
	size_t n = json_array_size(messages);
	for (size_t k = 0; k < n; k++)
		if (!msg_role(json_array_get(messages, k)))
			return error("%s: message %zu has no string \"role\"", where, k + 1);

	const size_t S = (size_t)seq_length;
	const int64_t pad = st->pad;
	struct pack p = { 0 };
	struct sft_ids tokens = { 0 }, targets = { 0 };
	int32_t *cu = xmalloc(sizeof(*cu) * (n + 2));
	size_t n_cu = 1;
	cu[0] = 0;
	json_t *conv = json_array();
	char *cwhere = NULL;
	int r = 0;
	size_t k = 0, idx = 0;
	while (k < n) {
		/* one conversation: messages k..e, a new one at every system message */
		size_t e = k + 1;
		while (e < n && strcmp(msg_role(json_array_get(messages, e)), "system"))
			e++;
		json_array_clear(conv);
		for (size_t i = k; i < e; i++)
			json_array_append(conv, json_array_get(messages, i));
		free(cwhere);
		cwhere = xasprintf("%s: conversation %zu (messages %zu-%zu)", where, ++idx, k + 1, e);
		k = e;
		if (sft_tokenize(st, s, conv, cwhere, &tokens, &targets)) {
			r = -1;
			break;
		}
		for (size_t i = 0; i < tokens.n; i++) {
			ids_push(&p.tok, tokens.v[i]);
			ids_push(&p.tgt, targets.v[i]);
			ids_push(&p.pos, (int64_t)i);
		}
		if (cp > 1 && p.tok.n % (size_t)(2 * cp))
			pad_by(&p, pad, (size_t)(2 * cp) - p.tok.n % (size_t)(2 * cp));
		if (p.tok.n >= S + 1) {
			p.tok.n = p.tgt.n = S;
			p.pos.n = S + 1;
			ids_push(&p.tok, pad);
			ids_push(&p.tgt, pad);
			cu[n_cu++] = (int32_t)S;
			break;
		}
		cu[n_cu++] = (int32_t)p.tok.n;
	}
	if (!r && p.tok.n < S + 1) {
		if (p.pos.n == 0) {
			r = error("%s: the messages render to no tokens", where);
		} else {
			pad_by(&p, pad, S + 1 - p.tok.n);
			cu[n_cu - 1] = (int32_t)S;
		}
	}
	if (!r) {
		if (p.tok.n != S + 1 || p.tgt.n != S + 1 || p.pos.n != S + 1 || n_cu < 2)
			BUG("SFT pack of %zu/%zu/%zu positions, %zu boundaries", p.tok.n, p.tgt.n, p.pos.n, n_cu);
		out->seq_length = seq_length;
		out->tokens = xmalloc(S * sizeof(int64_t));
		out->labels = xmalloc(S * sizeof(int64_t));
		out->position_ids = xmalloc(S * sizeof(int64_t));
		out->loss_mask = xmalloc(S * sizeof(float));
		for (size_t i = 0; i < S; i++) {
			out->tokens[i] = p.tok.v[i];
			out->labels[i] = p.tgt.v[i + 1];
			out->position_ids[i] = p.pos.v[i];
			out->loss_mask[i] = out->labels[i] == pad || out->labels[i] == SFT_IGNORE_INDEX ? 0.0f : 1.0f;
		}
		out->cu_seqlens = cu;
		out->n_cu = n_cu;
		cu = NULL;
		for (size_t i = 1; i < out->n_cu; i++)
			if (out->cu_seqlens[i] - out->cu_seqlens[i - 1] > out->max_seqlen)
				out->max_seqlen = out->cu_seqlens[i] - out->cu_seqlens[i - 1];
	}
	free(cu);
	free(cwhere);
	json_decref(conv);
	sft_ids_free(&tokens);
	sft_ids_free(&targets);
	sft_ids_free(&p.tok);
	sft_ids_free(&p.tgt);
	sft_ids_free(&p.pos);
	return r;
}

void sft_sample_free(struct sft_sample *smp)
{
	free(smp->tokens);
	free(smp->labels);
	free(smp->loss_mask);
	free(smp->position_ids);
	free(smp->cu_seqlens);
	memset(smp, 0, sizeof(*smp));
}
