/*
 * api_megatron.c - PUT /api, Megatron's native endpoint (megatron/core/inference/
 * text_generation_server/text_generation_server.py): its checks in its order and with its
 * messages, but each rejection an HTTP 400 with {"error": message}. The
 * defaults of tokens_to_generate, logprobs, temperature, top_k and top_p
 * are the server's --num-tokens-to-generate, --return-log-probs,
 * --temperature, --top_k and --top_p when given (server_int.h).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/xalloc.h"
#include "infer/server_int.h"

/* Megatron's checks of PUT /api in its order: NULL when
 * the request is good, else the message. */
struct api_req {
	json_t *prompts;
	int64_t tokens_to_generate, top_k, random_seed, stop_token;
	bool logprobs, add_bos;
	double temperature, top_p;
};

static bool is_bool(json_t *v)
{
	return json_is_boolean(v);
}

/* Python's isinstance(x, int) takes booleans too */
static bool is_int(json_t *v)
{
	return json_is_integer(v) || json_is_boolean(v);
}

static int64_t int_of(json_t *v)
{
	return json_is_boolean(v) ? json_is_true(v) : json_integer_value(v);
}

static const char *check_api(json_t *o, const struct gen_defaults *d, struct api_req *q)
{
	json_t *v;
	/* the server's defaults of top_k and top_p go together: a request that
	 * sets either takes neither */
	bool own_k_or_p = json_object_get(o, "top_k") || json_object_get(o, "top_p");
	q->prompts = json_object_get(o, "prompts");
	if (!q->prompts)
		return "prompts argument required";
	if (json_object_get(o, "max_len"))
		return "max_len is no longer used.  Replace with tokens_to_generate";
	if (json_object_get(o, "sentences"))
		return "sentences is no longer used.  Replace with prompts";
	if (json_object_get(o, "beam_width"))
		return "Beam search is no longer supported.";
	if (!json_is_array(q->prompts))
		return "prompts is not a list of strings";
	for (size_t i = 0; i < json_array_size(q->prompts); i++)
		if (!json_is_string(json_array_get(q->prompts, i)))
			return "prompts is not a list of strings";
	if (json_array_size(q->prompts) == 0)
		return "prompts is empty";
	if (json_array_size(q->prompts) > 128)
		return "Maximum number of prompts is 128";
	q->tokens_to_generate = d->has_tokens ? d->tokens : 64;
	if ((v = json_object_get(o, "tokens_to_generate"))) {
		if (!is_int(v))
			return "tokens_to_generate must be an integer greater than 0";
		if (int_of(v) < 0)
			return "tokens_to_generate must be an integer greater than or equal to 0";
		q->tokens_to_generate = int_of(v);
	}
	q->logprobs = d->logprobs;
	if ((v = json_object_get(o, "logprobs"))) {
		if (!is_bool(v))
			return "logprobs must be a boolean value";
		q->logprobs = json_is_true(v);
	}
	if (q->tokens_to_generate == 0 && !q->logprobs)
		return "tokens_to_generate=0 implies logprobs should be True";
	q->temperature = d->has_temperature ? d->temperature : 1.0;
	if ((v = json_object_get(o, "temperature"))) {
		if (!json_is_number(v) && !json_is_boolean(v))
			return "temperature must be a positive number less than or equal to 100.0";
		q->temperature = json_is_boolean(v) ? (double)json_is_true(v) : json_number_value(v);
		if (!(q->temperature > 0 && q->temperature <= 100))
			return "temperature must be a positive number less than or equal to 100.0";
	}
	q->top_k = d->has_top_k && !own_k_or_p ? d->top_k : 0;
	if ((v = json_object_get(o, "top_k"))) {
		if (!is_int(v))
			return "top_k must be an integer equal to or greater than 0 and less than or equal to 1000";
		q->top_k = int_of(v);
		if (q->top_k < 0 || q->top_k > 1000)
			return "top_k must be equal to or greater than 0 and less than or equal to 1000";
	}
	q->top_p = d->has_top_p && !own_k_or_p ? d->top_p : 0;
	if ((v = json_object_get(o, "top_p"))) {
		if (!json_is_real(v))
			return "top_p must be a positive float less than or equal to 1.0";
		q->top_p = json_real_value(v);
		if (q->top_p < 0)
			return "top_p must be a positive float less than or equal to 1.0";
		if (q->top_p > 0 && q->top_k > 0)
			return "cannot set both top-k and top-p samplings.";
		if (q->top_p > 1)
			return "top_p must be less than or equal to 1.0";
	}
	double decay = 0, bound = 0;
	if ((v = json_object_get(o, "top_p_decay"))) {
		if (!json_is_real(v) || json_real_value(v) < 0)
			return "top_p_decay must be a positive float less than or equal to 1.0";
		decay = json_real_value(v);
		if (decay > 0 && q->top_p == 0)
			return "top_p_decay cannot be set without top_p";
		if (decay > 1)
			return "top_p_decay must be less than or equal to 1.0";
	}
	if ((v = json_object_get(o, "top_p_bound"))) {
		if (!json_is_real(v) || json_real_value(v) < 0)
			return "top_p_bound must be a positive float less than or equal to top_p";
		bound = json_real_value(v);
		if (bound > 0 && q->top_p == 0)
			return "top_p_bound cannot be set without top_p";
		if (bound > 0 && bound > q->top_p)
			return "top_p_bound must be greater than 0 and less than top_p";
	}
	q->add_bos = false;
	if ((v = json_object_get(o, "add_BOS"))) {
		if (!is_bool(v))
			return "add_BOS must be a boolean value";
		q->add_bos = json_is_true(v);
	}
	for (size_t i = 0; i < json_array_size(q->prompts); i++)
		if (!*json_string_value(json_array_get(q->prompts, i)) && !q->add_bos)
			return "Empty prompts require add_BOS=true";
	static const char *const bools[] = { "stop_on_double_eol", "stop_on_eol", "prevent_newline_after_colon" };
	for (size_t i = 0; i < sizeof(bools) / sizeof(bools[0]); i++)
		if ((v = json_object_get(o, bools[i])) && !is_bool(v)) {
			if (i == 0)
				return "stop_on_double_eol must be a boolean value";
			return i == 1 ? "stop_on_eol must be a boolean value" : "prevent_newline_after_colon must be a boolean value";
		}
	q->random_seed = -1;
	if ((v = json_object_get(o, "random_seed"))) {
		if (!is_int(v))
			return "random_seed must be integer";
		if (int_of(v) < 0)
			return "random_seed must be a positive integer";
		q->random_seed = int_of(v);
	}
	q->stop_token = -1;
	if ((v = json_object_get(o, "stop_token"))) {
		if (!is_int(v))
			return "stop_token must be an integer";
		q->stop_token = int_of(v);
	}
	if ((v = json_object_get(o, "length_penalty")) && !json_is_real(v))
		return "length_penalty must be a float";
	return NULL;
}

enum MHD_Result api_megatron(struct server *s, struct MHD_Connection *c, const struct body *b)
{
	enum MHD_Result bad_body;
	json_t *o = srv_json_body(c, b, &bad_body);
	if (!o)
		return bad_body;
	struct api_req q;
	const char *bad = check_api(o, &s->cfg.defaults, &q);
	if (bad) {
		enum MHD_Result rc = srv_fail(c, 400, bad);
		json_decref(o);
		return rc;
	}
	int n = (int)json_array_size(q.prompts);
	struct infer_request *req = xcalloc((size_t)n, sizeof(*req));
	char msg[512] = "";
	uint64_t seed0 = q.random_seed >= 0 ? (uint64_t)q.random_seed : srv_seed(s);
	for (int i = 0; i < n && !*msg; i++) {
		const char *text = json_string_value(json_array_get(q.prompts, (size_t)i));
		int len = 0;
		int32_t *ids = srv_tokenize(s, text, q.add_bos, false, &len, msg, sizeof(msg));
		if (!ids)
			break;
		if (q.tokens_to_generate > s->e.max_seq - len)
			snprintf(msg, sizeof(msg),
				 "prompt %d has %d tokens; with tokens_to_generate %lld that is more than "
				 "--inference-max-seq-length %d",
				 i, len, (long long)q.tokens_to_generate, s->e.max_seq);
		else if (q.top_k >= s->e.c.V)
			snprintf(msg, sizeof(msg), "top_k must be less than the vocabulary size %d", s->e.c.V);
		req[i] = (struct infer_request){ .prompt = ids, .nprompt = len, .max_new = (int)q.tokens_to_generate,
						 .sampling = { (float)q.temperature, (int)q.top_k, (float)q.top_p,
							       seed0 + (uint64_t)i },
						 .eod = (int32_t)s->eod, .want_logprobs = q.logprobs,
						 .has_stop_token = q.stop_token >= 0 && q.stop_token < s->e.c.V,
						 .stop_token = (int32_t)q.stop_token };
		char why[256];
		const char *refused = *msg ? NULL : infer_request_check(&s->e, &req[i], why, sizeof(why));
		if (refused)
			snprintf(msg, sizeof(msg), "prompt %d: %s", i, refused);
	}
	enum MHD_Result rc;
	if (*msg) {
		rc = srv_fail(c, 400, msg);
	} else {
		struct job j = { .req = req, .n = n };
		if (srv_submit(s, &j) < 0) {
			rc = srv_unavailable(c);
			goto out;
		}
		bool answered = srv_wait(s, &j, b);
		free(j.seen);
		if (!answered) { /* the client hung up (or the drain cut it off): no answer */
			rc = MHD_NO;
			goto out;
		}
		if (j.failed) {
			rc = srv_fail(c, 500, "the engine could not take the request (a bug: see the server's log)");
			goto out;
		}
		json_t *text = json_array(), *tokens = json_array(), *lps = json_array(), *segs = json_array();
		for (int i = 0; i < n; i++) {
			struct infer_request *r = &req[i];
			int total = r->nprompt + r->nout;
			int32_t *all = xmalloc((size_t)total * sizeof(int32_t));
			memcpy(all, r->prompt, (size_t)r->nprompt * sizeof(int32_t));
			memcpy(all + r->nprompt, r->out, (size_t)r->nout * sizeof(int32_t));
			char *full = srv_decode(s->tok, all, (size_t)total), *pre = srv_decode(s->tok, r->prompt, (size_t)r->nprompt);
			const char *prompt = json_string_value(json_array_get(q.prompts, (size_t)i));
			size_t lp = strlen(pre);
			struct sbuf t = SBUF_INIT;
			sbuf_addstr(&t, prompt);
			sbuf_addstr(&t, strncmp(full, pre, lp) ? full : full + lp);
			json_array_append_new(text, srv_str(t.buf));
			sbuf_release(&t);
			free(full), free(pre);
			json_t *tk = json_array(), *sg = json_array(), *lq = json_array();
			for (int k = 0; k < total; k++) {
				json_array_append_new(tk, json_integer(all[k]));
				char *piece = srv_decode(s->tok, all + k, 1);
				json_array_append_new(sg, srv_str(piece));
				free(piece);
			}
			if (q.logprobs)
				for (int k = 0; k < total - 1; k++)
					json_array_append_new(lq, json_real(r->logprobs[k]));
			json_array_append_new(tokens, tk);
			json_array_append_new(segs, sg);
			json_array_append_new(lps, lq);
			free(all);
		}
		json_t *out = json_object();
		json_object_set_new(out, "text", text);
		json_object_set_new(out, "tokens", tokens);
		json_object_set_new(out, "logprobs", q.logprobs ? lps : json_null());
		if (!q.logprobs)
			json_decref(lps);
		json_object_set_new(out, "segments", segs);
		rc = srv_reply(c, 200, out);
	}
out:
	for (int i = 0; i < n; i++) {
		free((void *)req[i].prompt);
		infer_request_free(&req[i]);
	}
	free(req);
	json_decref(o);
	return rc;
}

