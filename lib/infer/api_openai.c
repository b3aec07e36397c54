/*
 * api_openai.c - OpenAI's completions API: POST /v1/completions (prompt, a
 * string or a list of them), POST /v1/chat/completions (messages), GET
 * /v1/models. Fields: max_tokens (16), temperature (1; 0 is greedy),
 * top_p (1: no cut), n (1), stop (a string or up to 4), logprobs (an
 * integer: the chosen tokens' log-probs; alternatives are not listed),
 * echo, seed, stream (server-sent events, `data: [DONE]` last). Responses
 * carry usage and finish_reason ("stop" at the end-of-document token or a
 * stop string, else "length").
 *
 * A chat prompt is the model's chat template rendered as transformers'
 * apply_chat_template(messages, tools=tools, add_generation_prompt=True,
 * **chat_template_kwargs) renders it, then encoded without the tokenizer's
 * post-processor tokens (add_special_tokens=False, as apply_chat_template
 * tokenizes): the template is --chat-template, else the Hugging Face
 * tokenizer folder's own (data/chat_tokenizer.h), with the folder's special
 * tokens as its variables. The messages go to the template as the request
 * has them (name, reasoning_content, tool_call_id, ... included), but each
 * needs a string role and a string content (content parts are refused); a
 * template that raises (roles not alternating, ...) answers 400 with its
 * message. A server without a template (another tokenizer type, a folder
 * with none) keeps the built-in prompt: the messages as "role: content"
 * lines and "assistant:", encoded as a completion's prompt; tools and
 * chat_template_kwargs are refused there. megac's extension
 * "return_token_ids": true (vLLM's name; not with stream) adds the prompt's
 * ids (prompt_token_ids: the response's for a chat, each choice's for a
 * completion) and each choice's generated ids (token_ids).
 *
 * The server's --num-tokens-to-generate, --temperature, --top_p, --top_k
 * and --return-log-probs, when given, are the defaults of max_tokens,
 * temperature, top_p, top-k (which the API has no field for; dropped when
 * the request sets top_p) and logprobs (0, or true for chat). A client that
 * hangs up, streaming or not, cancels its generation.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/xalloc.h"
#include "data/chat_tokenizer.h"
#include "infer/server_int.h"

struct oa_req {
	int nprompt;
	char **prompts;   /* owned */
	int64_t max_tokens, n, logprobs, seed, top_k;
	double temperature, top_p;
	bool echo, stream, chat, has_seed;
	bool plain;       /* encode without the post-processor's tokens (a rendered chat template) */
	bool return_ids;  /* return_token_ids: the prompt's and the answers' ids in the response */
	const char *stop[4];
	int nstop;
	json_t *root;
	char msg[1280];   /* a refusal's message when it is made up (a template's error) */
};

static void oa_free(struct oa_req *q)
{
	for (int i = 0; i < q->nprompt; i++)
		free(q->prompts[i]);
	free(q->prompts);
	json_decref(q->root);
}

static bool number(json_t *v, double *out)
{
	if (!json_is_number(v))
		return false;
	*out = json_number_value(v);
	return true;
}

/* The built-in chat prompt: "role: content" lines, then "assistant:". */
static const char *builtin_chat(json_t *o, struct oa_req *q)
{
	json_t *m = json_object_get(o, "messages");
	if ((json_object_get(o, "tools") && !json_is_null(json_object_get(o, "tools"))) ||
	    (json_object_get(o, "chat_template_kwargs") && !json_is_null(json_object_get(o, "chat_template_kwargs"))))
		return "tools and chat_template_kwargs need a chat template; this server's tokenizer has none "
		       "(its chat prompt is the built-in \"role: content\" lines)";
	struct sbuf sb = SBUF_INIT;
	for (size_t i = 0; i < json_array_size(m); i++) {
		json_t *e = json_array_get(m, i);
		const char *role = json_string_value(json_object_get(e, "role"));
		const char *content = json_string_value(json_object_get(e, "content"));
		if (!role || !content) {
			sbuf_release(&sb);
			return "each message needs a string \"role\" and a string \"content\"";
		}
		sbuf_addf(&sb, "%s: %s\n", role, content);
	}
	sbuf_addstr(&sb, "assistant:");
	q->prompts = xmalloc(sizeof(char *));
	q->prompts[0] = sbuf_detach(&sb, NULL);
	q->nprompt = 1;
	return NULL;
}

/* The prompt of the model's chat template, as transformers'
 * apply_chat_template(messages, tools=..., add_generation_prompt=True,
 * **chat_template_kwargs) renders it; the messages go to the template as
 * they are, but each needs a string role and a string content. */
static const char *template_chat(json_t *o, const struct chat_prompt *chat, struct oa_req *q)
{
	json_t *m = json_object_get(o, "messages"), *tools = json_object_get(o, "tools");
	json_t *kwargs = json_object_get(o, "chat_template_kwargs");
	for (size_t i = 0; i < json_array_size(m); i++) {
		json_t *e = json_array_get(m, i);
		const char *why = NULL;
		if (!json_is_object(e) || !json_is_string(json_object_get(e, "role")))
			why = "needs a string \"role\"";
		else if (!json_is_string(json_object_get(e, "content")))
			why = "needs a string \"content\" (content parts, and messages without content, are not "
			      "supported)";
		if (why) {
			snprintf(q->msg, sizeof(q->msg), "messages[%zu] %s", i, why);
			return q->msg;
		}
	}
	if (json_is_null(tools))
		tools = NULL;
	if (tools && !json_is_array(tools))
		return "tools must be a list of tool schemas";
	for (size_t i = 0; i < json_array_size(tools); i++)
		if (!json_is_object(json_array_get(tools, i)))
			return "tools must be a list of tool schemas (objects)";
	if (json_is_null(kwargs))
		kwargs = NULL;
	if (kwargs && !json_is_object(kwargs))
		return "chat_template_kwargs must be an object (the template's extra variables)";
	char err[1024] = "";
	struct chat_prompt_args a = { .messages = m, .add_generation_prompt = true, .tools = tools, .kwargs = kwargs,
				      .errbuf = err, .errsize = sizeof(err) };
	char *text = chat_prompt_render(chat, &a);
	if (!text) {
		snprintf(q->msg, sizeof(q->msg), "the chat template refuses these messages: %s",
			 *err ? err : "(no message)");
		return q->msg;
	}
	q->prompts = xmalloc(sizeof(char *));
	q->prompts[0] = text;
	q->nprompt = 1;
	q->plain = true;
	return NULL;
}

/* The request's fields, or the message of the first that is wrong. tmpl:
 * the server's chat template, NULL for the built-in chat prompt. */
static const char *oa_parse(json_t *o, bool chat, const struct gen_defaults *d, const struct chat_prompt *tmpl,
			    struct oa_req *q)
{
	json_t *v;
	const char *bad;
	memset(q, 0, sizeof(*q));
	q->chat = chat;
	q->max_tokens = d->has_tokens ? d->tokens : 16;
	q->n = 1;
	q->temperature = d->has_temperature ? d->temperature : 1;
	q->top_p = d->has_top_p && d->top_p > 0 ? d->top_p : 1; /* Megatron's top_p 0: no cut */
	q->top_k = d->has_top_k ? d->top_k : 0;
	q->logprobs = d->logprobs ? 0 : -1;
	if (chat) {
		json_t *m = json_object_get(o, "messages");
		if (!json_is_array(m) || json_array_size(m) == 0)
			return "messages must be a non-empty list of {\"role\", \"content\"} objects";
		if ((bad = tmpl ? template_chat(o, tmpl, q) : builtin_chat(o, q)))
			return bad;
	} else {
		json_t *p = json_object_get(o, "prompt");
		if (json_is_string(p)) {
			q->prompts = xmalloc(sizeof(char *));
			q->prompts[0] = xstrdup(json_string_value(p));
			q->nprompt = 1;
		} else if (json_is_array(p) && json_array_size(p) > 0 && json_array_size(p) <= 128) {
			q->prompts = xcalloc(json_array_size(p), sizeof(char *));
			for (size_t i = 0; i < json_array_size(p); i++) {
				if (!json_is_string(json_array_get(p, i)))
					return "prompt must be a string or a list of 1 to 128 strings";
				q->prompts[q->nprompt++] = xstrdup(json_string_value(json_array_get(p, i)));
			}
		} else {
			return "prompt must be a string or a list of 1 to 128 strings";
		}
	}
	if ((v = json_object_get(o, "max_tokens")) && !json_is_null(v)) {
		if (!json_is_integer(v) || json_integer_value(v) < 0)
			return "max_tokens must be an integer of at least 0";
		q->max_tokens = json_integer_value(v);
	}
	if ((v = json_object_get(o, "temperature")) && !json_is_null(v))
		if (!number(v, &q->temperature) || q->temperature < 0 || q->temperature > 2)
			return "temperature must be a number between 0 and 2";
	if ((v = json_object_get(o, "top_p")) && !json_is_null(v)) {
		if (!number(v, &q->top_p) || !(q->top_p > 0) || q->top_p > 1)
			return "top_p must be a number greater than 0 and at most 1";
		q->top_k = 0; /* the request's top_p replaces the server's top-k */
	}
	if ((v = json_object_get(o, "n")) && !json_is_null(v)) {
		if (!json_is_integer(v) || json_integer_value(v) < 1 || json_integer_value(v) > 16)
			return "n must be an integer between 1 and 16";
		q->n = json_integer_value(v);
	}
	if (q->n * q->nprompt > 128)
		return "n times the number of prompts must be at most 128";
	if ((v = json_object_get(o, "stop")) && !json_is_null(v)) {
		if (json_is_string(v)) {
			q->stop[q->nstop++] = json_string_value(v);
		} else if (json_is_array(v) && json_array_size(v) <= 4) {
			for (size_t i = 0; i < json_array_size(v); i++) {
				if (!json_is_string(json_array_get(v, i)) || !*json_string_value(json_array_get(v, i)))
					return "stop must be a string or a list of up to 4 non-empty strings";
				q->stop[q->nstop++] = json_string_value(json_array_get(v, i));
			}
		} else {
			return "stop must be a string or a list of up to 4 non-empty strings";
		}
		for (int i = 0; i < q->nstop; i++)
			if (!*q->stop[i])
				return "stop must be a string or a list of up to 4 non-empty strings";
	}
	if (chat) {
		if ((v = json_object_get(o, "logprobs")) && !json_is_null(v)) {
			if (!json_is_boolean(v))
				return "logprobs must be true or false";
			q->logprobs = json_is_true(v) ? 0 : -1;
		}
	} else if ((v = json_object_get(o, "logprobs")) && !json_is_null(v)) {
		if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 5)
			return "logprobs must be an integer between 0 and 5";
		q->logprobs = json_integer_value(v);
	}
	if ((v = json_object_get(o, "echo")) && !json_is_null(v)) {
		if (!json_is_boolean(v))
			return "echo must be true or false";
		q->echo = json_is_true(v);
	}
	if ((v = json_object_get(o, "stream")) && !json_is_null(v)) {
		if (!json_is_boolean(v))
			return "stream must be true or false";
		q->stream = json_is_true(v);
	}
	if ((v = json_object_get(o, "seed")) && !json_is_null(v)) {
		if (!json_is_integer(v) || json_integer_value(v) < 0)
			return "seed must be an integer of at least 0";
		q->seed = json_integer_value(v);
		q->has_seed = true;
	}
	if ((v = json_object_get(o, "return_token_ids")) && !json_is_null(v)) {
		if (!json_is_boolean(v))
			return "return_token_ids must be true or false";
		q->return_ids = json_is_true(v);
		if (q->return_ids && q->stream)
			return "return_token_ids is not available with stream";
	}
	return NULL;
}

static json_t *ids_json(const int32_t *ids, int n)
{
	json_t *a = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(a, json_integer(ids[i]));
	return a;
}

/* The first stop string in text: its offset, or -1. */
static long find_stop(const struct oa_req *q, const char *text)
{
	long best = -1;
	for (int i = 0; i < q->nstop; i++) {
		const char *p = strstr(text, q->stop[i]);
		if (p && (best < 0 || p - text < best))
			best = p - text;
	}
	return best;
}

/* The generated text of request r so far (n tokens). */
static char *gen_text(struct server *s, const struct infer_request *r, int n)
{
	return srv_decode(s->tok, r->out, (size_t)n);
}

/* ---- a whole answer ---- */

static json_t *choice(struct server *s, const struct oa_req *q, const struct infer_request *r, int index)
{
	char *text = gen_text(s, r, r->nout);
	long cut = find_stop(q, text);
	bool stopped = r->hit_eod || cut >= 0;
	if (cut >= 0)
		text[cut] = 0;
	json_t *c = json_object();
	struct sbuf out = SBUF_INIT;
	if (q->echo) {
		char *p = srv_decode(s->tok, r->prompt, (size_t)r->nprompt);
		sbuf_addstr(&out, p);
		free(p);
	}
	sbuf_addstr(&out, text);
	if (q->chat) {
		json_t *m = json_object();
		json_object_set_new(m, "role", json_string("assistant"));
		json_object_set_new(m, "content", srv_str(out.buf ? out.buf : ""));
		json_object_set_new(c, "index", json_integer(index));
		json_object_set_new(c, "message", m);
	} else {
		json_object_set_new(c, "text", srv_str(out.buf ? out.buf : ""));
		json_object_set_new(c, "index", json_integer(index));
	}
	if (q->logprobs >= 0) {
		json_t *lp = json_object(), *toks = json_array(), *vals = json_array();
		for (int t = 0; t < r->nout; t++) {
			char *piece = srv_decode(s->tok, r->out + t, 1);
			json_array_append_new(toks, srv_str(piece));
			free(piece);
			json_array_append_new(vals, json_real(r->logprobs[r->nprompt - 1 + t]));
		}
		json_object_set_new(lp, "tokens", toks);
		json_object_set_new(lp, "token_logprobs", vals);
		json_object_set_new(lp, "top_logprobs", json_null());
		json_object_set_new(c, "logprobs", lp);
	} else {
		json_object_set_new(c, "logprobs", json_null());
	}
	json_object_set_new(c, "finish_reason", json_string(stopped ? "stop" : "length"));
	if (q->return_ids) {
		if (!q->chat) /* a chat's one prompt is the response's */
			json_object_set_new(c, "prompt_token_ids", ids_json(r->prompt, r->nprompt));
		json_object_set_new(c, "token_ids", ids_json(r->out, r->nout));
	}
	sbuf_release(&out);
	free(text);
	return c;
}

static json_t *envelope(struct server *s, const struct oa_req *q, const char *object, uint64_t id)
{
	json_t *o = json_object();
	char sid[64];
	snprintf(sid, sizeof(sid), "%s-%llu", q->chat ? "chatcmpl" : "cmpl", (unsigned long long)id);
	json_object_set_new(o, "id", json_string(sid));
	json_object_set_new(o, "object", json_string(object));
	json_object_set_new(o, "created", json_integer((json_int_t)time(NULL)));
	json_object_set_new(o, "model", json_string(s->model_name));
	return o;
}

/* ---- streaming ---- */

struct stream {
	struct server *s;
	const struct body *b; /* its request: outlives the stream (server.c's on_completed) */
	struct MHD_Connection *c;
	struct oa_req q;
	struct job j;
	struct infer_request *req;
	size_t *sent_chars;
	bool *finished;
	uint64_t id, version;
	struct sbuf pending; /* bytes of events not yet handed to libmicrohttpd */
	bool ended;
};

void api_stream_free(void *p)
{
	struct stream *st = p;
	struct server *s = st->s;
	/* the client may have gone: its job is cancelled, and the engine drops
	 * it before its next step */
	pthread_mutex_lock(&s->mu);
	if (!st->j.done) {
		st->j.cancelled = true;
		pthread_cond_signal(&s->work);
	}
	srv_wait_locked(s, &st->j, NULL, true, 0);
	pthread_mutex_unlock(&s->mu);
	for (int i = 0; i < st->j.n; i++) {
		free((void *)st->req[i].prompt);
		infer_request_free(&st->req[i]);
	}
	free(st->req), free(st->j.seen), free(st->sent_chars), free(st->finished);
	sbuf_release(&st->pending);
	oa_free(&st->q);
	free(st);
}

/* The longest prefix of text[0..n) that does not end inside a UTF-8
 * character: an incomplete last character (a lead byte and fewer
 * continuation bytes than it announces) is cut off. */
static size_t whole_chars(const char *text, size_t n)
{
	size_t i = n, cont = 0;
	while (i > 0 && cont < 3 && ((unsigned char)text[i - 1] & 0xC0) == 0x80)
		i--, cont++;
	if (i == 0)
		return n;
	unsigned char lead = (unsigned char)text[i - 1];
	size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
	return need > 1 && cont + 1 < need ? i - 1 : n;
}

/* Events for what the engine published since the last call. */
static void stream_events(struct stream *st, const int *seen, bool done)
{
	struct server *s = st->s;
	int longest_stop = 0;
	for (int i = 0; i < st->q.nstop; i++)
		longest_stop = (int)strlen(st->q.stop[i]) > longest_stop ? (int)strlen(st->q.stop[i]) : longest_stop;
	for (int i = 0; i < st->j.n; i++) {
		if (st->finished[i])
			continue;
		const struct infer_request *r = &st->req[i];
		char *text = gen_text(s, r, seen[i]);
		long cut = find_stop(&st->q, text);
		bool req_done = done && seen[i] == r->nout;
		size_t upto = strlen(text);
		if (cut >= 0)
			upto = (size_t)cut;
		else if (!req_done) /* hold back what could still become a stop string, and a cut character */
			upto = upto > (size_t)(longest_stop ? longest_stop - 1 : 0) ? upto - (longest_stop ? longest_stop - 1 : 0) : 0;
		if (!req_done && cut < 0)
			upto = whole_chars(text, upto); /* a character cut by a token waits for the rest */
		if (upto < st->sent_chars[i])
			upto = st->sent_chars[i];
		bool finish = cut >= 0 || req_done;
		if (upto > st->sent_chars[i] || finish) {
			json_t *o = envelope(s, &st->q, st->q.chat ? "chat.completion.chunk" : "text_completion", st->id);
			json_t *c = json_object(), *choices = json_array();
			char save = text[upto];
			text[upto] = 0;
			json_t *delta = srv_str(text + (upto > st->sent_chars[i] ? st->sent_chars[i] : upto));
			text[upto] = save;
			json_object_set_new(c, "index", json_integer(i));
			if (st->q.chat) {
				json_t *d = json_object();
				json_object_set_new(d, "content", delta);
				json_object_set_new(c, "delta", d);
			} else {
				json_object_set_new(c, "text", delta);
			}
			json_object_set_new(c, "finish_reason",
					    finish ? json_string(cut >= 0 || r->hit_eod ? "stop" : "length") : json_null());
			json_array_append_new(choices, c);
			json_object_set_new(o, "choices", choices);
			char *js = json_dumps(o, JSON_COMPACT);
			json_decref(o);
			sbuf_addf(&st->pending, "data: %s\n\n", js);
			free(js);
			if (upto > st->sent_chars[i])
				st->sent_chars[i] = upto;
			st->finished[i] = finish;
		}
		free(text);
	}
	bool all = true;
	for (int i = 0; i < st->j.n; i++)
		all &= st->finished[i];
	if (all && !st->ended) {
		sbuf_addstr(&st->pending, "data: [DONE]\n\n");
		st->ended = true;
	}
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	(void)pos;
	struct stream *st = cls;
	struct server *s = st->s;
	while (st->pending.len == 0) {
		if (st->ended)
			return MHD_CONTENT_READER_END_OF_STREAM;
		int *seen = xmalloc((size_t)st->j.n * sizeof(int));
		pthread_mutex_lock(&s->mu);
		srv_wait_locked(s, &st->j, st->b, false, st->version);
		if (st->j.cancelled) { /* the client hung up, or the drain cut it off */
			srv_wait_locked(s, &st->j, NULL, true, 0);
			pthread_mutex_unlock(&s->mu);
			free(seen);
			return MHD_CONTENT_READER_END_WITH_ERROR;
		}
		st->version = st->j.version;
		bool done = st->j.done;
		memcpy(seen, st->j.seen, (size_t)st->j.n * sizeof(int));
		pthread_mutex_unlock(&s->mu);
		stream_events(st, seen, done);
		free(seen);
	}
	srv_touch(s, st->c); /* the wait may have been longer than the idle timeout */
	size_t n = st->pending.len < max ? st->pending.len : max;
	memcpy(buf, st->pending.buf, n);
	memmove(st->pending.buf, st->pending.buf + n, st->pending.len - n);
	st->pending.len -= n;
	return (ssize_t)n;
}

/* ---- the endpoints ---- */

enum MHD_Result api_completions(struct server *s, struct MHD_Connection *c, struct body *b, bool chat)
{
	enum MHD_Result bad_body;
	json_t *o = srv_json_body(c, b, &bad_body);
	if (!o)
		return bad_body;
	struct oa_req q;
	const char *bad = oa_parse(o, chat, &s->cfg.defaults, s->chat, &q);
	q.root = o;
	if (bad) {
		enum MHD_Result rc = srv_fail(c, 400, bad);
		oa_free(&q);
		return rc;
	}
	int n = (int)(q.nprompt * q.n);
	struct infer_request *req = xcalloc((size_t)n, sizeof(*req));
	char msg[512] = "";
	uint64_t seed0 = q.has_seed ? (uint64_t)q.seed : srv_seed(s);
	struct infer_sampling samp = { (float)(q.temperature > 0 ? q.temperature : 1),
				       q.temperature > 0 ? (int)q.top_k : 1,
				       q.top_p < 1 && q.temperature > 0 ? (float)q.top_p : 0, 0 };
	int prompt_tokens = 0;
	for (int i = 0; i < n && !*msg; i++) {
		int len = 0;
		int32_t *ids = srv_tokenize(s, q.prompts[i / q.n], false, q.plain, &len, msg, sizeof(msg));
		if (!ids)
			break;
		if (len == 0)
			snprintf(msg, sizeof(msg), "prompt %d is empty", i / (int)q.n);
		else if (q.max_tokens > s->e.max_seq - len)
			snprintf(msg, sizeof(msg),
				 "prompt %d has %d tokens; with max_tokens %lld that is more than "
				 "--inference-max-seq-length %d",
				 i / (int)q.n, len, (long long)q.max_tokens, s->e.max_seq);
		samp.seed = seed0 + (uint64_t)i;
		req[i] = (struct infer_request){ .prompt = ids, .nprompt = len, .max_new = (int)q.max_tokens,
						 .sampling = samp, .eod = (int32_t)s->eod,
						 .want_logprobs = q.logprobs >= 0 };
		if (i % q.n == 0)
			prompt_tokens += len;
		char why[256];
		const char *bad2 = *msg ? NULL : infer_request_check(&s->e, &req[i], why, sizeof(why));
		if (bad2)
			snprintf(msg, sizeof(msg), "prompt %d: %s", i / (int)q.n, bad2);
	}
	if (*msg) {
		enum MHD_Result rc = srv_fail(c, 400, msg);
		for (int i = 0; i < n; i++)
			free((void *)req[i].prompt);
		free(req);
		oa_free(&q);
		return rc;
	}
	uint64_t id = srv_next_id(s);
	if (q.stream) {
		struct stream *st = xcalloc(1, sizeof(*st));
		*st = (struct stream){ .s = s, .b = b, .c = c, .q = q, .req = req, .id = id };
		st->j = (struct job){ .req = req, .n = n };
		st->sent_chars = xcalloc((size_t)n, sizeof(size_t));
		st->finished = xcalloc((size_t)n, sizeof(bool));
		if (srv_submit(s, &st->j) < 0) {
			st->j.done = true; /* nothing to wait for */
			api_stream_free(st);
			return srv_unavailable(c);
		}
		b->stream = st; /* freed when the request completes, whichever way */
		struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, st, NULL);
		MHD_add_response_header(r, "Content-Type", "text/event-stream");
		MHD_add_response_header(r, "Cache-Control", "no-cache");
		enum MHD_Result rc = MHD_queue_response(c, 200, r);
		MHD_destroy_response(r);
		return rc;
	}
	struct job j = { .req = req, .n = n };
	if (srv_submit(s, &j) < 0) {
		for (int i = 0; i < n; i++)
			free((void *)req[i].prompt);
		free(req);
		oa_free(&q);
		return srv_unavailable(c);
	}
	bool answered = srv_wait(s, &j, b);
	if (!answered || j.failed) {
		for (int i = 0; i < n; i++) {
			free((void *)req[i].prompt);
			infer_request_free(&req[i]);
		}
		free(req), free(j.seen);
		oa_free(&q);
		if (!answered) /* the client hung up (or the drain cut it off): no answer */
			return MHD_NO;
		return srv_fail(c, 500, "the engine could not take the request (a bug: see the server's log)");
	}
	json_t *out = envelope(s, &q, chat ? "chat.completion" : "text_completion", id), *choices = json_array();
	int completion_tokens = 0;
	for (int i = 0; i < n; i++) {
		json_array_append_new(choices, choice(s, &q, &req[i], i));
		completion_tokens += req[i].nout;
	}
	if (q.return_ids && chat)
		json_object_set_new(out, "prompt_token_ids", ids_json(req[0].prompt, req[0].nprompt));
	json_object_set_new(out, "choices", choices);
	json_object_set_new(out, "usage", json_pack("{s:i, s:i, s:i}", "prompt_tokens", prompt_tokens,
						     "completion_tokens", completion_tokens, "total_tokens",
						     prompt_tokens + completion_tokens));
	enum MHD_Result rc = srv_reply(c, 200, out);
	for (int i = 0; i < n; i++) {
		free((void *)req[i].prompt);
		infer_request_free(&req[i]);
	}
	free(req);
	free(j.seen);
	oa_free(&q);
	return rc;
}

enum MHD_Result api_models(struct server *s, struct MHD_Connection *c)
{
	return srv_reply(c, 200,
			 json_pack("{s:s, s:[{s:s, s:s, s:I, s:s}]}", "object", "list", "data", "id", s->model_name,
				   "object", "model", "created", (json_int_t)time(NULL), "owned_by", "megac"));
}
