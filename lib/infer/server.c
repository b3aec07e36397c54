/*
 * server.c - see server.h. Threads: libmicrohttpd's (one per connection,
 * plus its listener), the engine thread, and main, which waits for SIGTERM
 * or SIGINT (blocked in every thread, taken with sigwait). Shared state is
 * under one mutex: the queue of new jobs, the jobs in flight and their
 * `done` flags; the requests' results are written by the engine thread and
 * read by the connection only after `done` (both under the mutex).
 */
#include "infer/server.h"

#include <jansson.h>
#include <math.h>
#include <microhttpd.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/error.h"
#include "base/sbuf.h"
#include "base/utf8.h"
#include "base/xalloc.h"
#include "ckpt/ckpt.h"
#include "data/commands.h"
#include "data/tok.h"
#include "infer/engine.h"
#include "infer/generate.h"

const struct prog_info server_prog_info = {
	"text_gen_server",
	PROG_INFER,
	"Serves text generation over HTTP from a checkpoint: Megatron's PUT /api (prompts, tokens_to_generate,\n"
	"logprobs, temperature, top_k, top_p, ...) and GET /health. Concurrent requests share forward passes\n"
	"(continuous batching over --inference-max-requests cache slots). The model comes from the checkpoint;\n"
	"the tokenizer flags say how to read prompts. SIGTERM answers the requests in flight and exits 0.",
	"text_gen_server --load ckpt --port 5000 --tokenizer-type GPT2BPETokenizer --vocab-file gpt2-vocab.json "
	"--merge-file gpt2-merges.txt",
	0,
};

struct job {
	struct infer_request *req;
	int n;
	bool done;
	struct job *next;
};

struct server {
	struct infer_engine e;
	struct infer_sched sched;
	struct tokenizer *tok;
	int64_t eod, max_body;
	pthread_mutex_t mu;
	pthread_cond_t work, progress;
	struct job *queue, *active; /* new jobs; jobs whose requests are in the scheduler */
	bool stopping;
	int inflight;               /* requests being handled by connections */
	uint64_t seed_counter;
};

/* ---- the engine thread ---- */

static void *engine_main(void *arg)
{
	struct server *s = arg;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		while (s->queue) { /* checked on the connection's thread: add cannot fail but for a bug */
			struct job *j = s->queue;
			s->queue = j->next;
			for (int i = 0; i < j->n; i++)
				if (infer_sched_add(&s->sched, &j->req[i]) < 0)
					BUG("a request checked by its connection was refused");
			j->next = s->active;
			s->active = j;
		}
		if (s->sched.n == 0) {
			if (s->stopping)
				break;
			pthread_cond_wait(&s->work, &s->mu);
			continue;
		}
		pthread_mutex_unlock(&s->mu);
		int rc = infer_sched_step(&s->sched);
		pthread_mutex_lock(&s->mu);
		if (rc < 0)
			die("the engine failed; stopping");
		for (struct job **p = &s->active; *p;) {
			struct job *j = *p;
			bool all = true;
			for (int i = 0; i < j->n; i++)
				all &= j->req[i].finished;
			if (all) {
				j->done = true;
				*p = j->next;
			} else {
				p = &j->next;
			}
		}
		pthread_cond_broadcast(&s->progress);
	}
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* ---- HTTP ---- */

struct body {
	struct sbuf data;
	bool too_big;
};

static enum MHD_Result reply(struct MHD_Connection *c, unsigned status, json_t *o)
{
	char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
	json_decref(o);
	if (!s)
		return MHD_NO;
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(r, "Content-Type", "application/json");
	enum MHD_Result rc = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return rc;
}

static enum MHD_Result fail(struct MHD_Connection *c, unsigned status, const char *msg)
{
	json_t *o = json_object();
	json_object_set_new(o, "error", json_string(msg));
	return reply(c, status, o);
}

/* Megatron's checks of PUT /api in its order (spec section 2): NULL when
 * the request is good, else the message. */
struct api_req {
	json_t *prompts;
	int64_t tokens_to_generate, top_k, random_seed;
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

static const char *check_api(json_t *o, struct api_req *q)
{
	json_t *v;
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
	q->tokens_to_generate = 64;
	if ((v = json_object_get(o, "tokens_to_generate"))) {
		if (!is_int(v))
			return "tokens_to_generate must be an integer greater than 0";
		if (int_of(v) < 0)
			return "tokens_to_generate must be an integer greater than or equal to 0";
		q->tokens_to_generate = int_of(v);
	}
	q->logprobs = false;
	if ((v = json_object_get(o, "logprobs"))) {
		if (!is_bool(v))
			return "logprobs must be a boolean value";
		q->logprobs = json_is_true(v);
	}
	if (q->tokens_to_generate == 0 && !q->logprobs)
		return "tokens_to_generate=0 implies logprobs should be True";
	q->temperature = 1.0;
	if ((v = json_object_get(o, "temperature"))) {
		if (!json_is_number(v) && !json_is_boolean(v))
			return "temperature must be a positive number less than or equal to 100.0";
		q->temperature = json_is_boolean(v) ? (double)json_is_true(v) : json_number_value(v);
		if (!(q->temperature > 0 && q->temperature <= 100))
			return "temperature must be a positive number less than or equal to 100.0";
	}
	q->top_k = 0;
	if ((v = json_object_get(o, "top_k"))) {
		if (!is_int(v))
			return "top_k must be an integer equal to or greater than 0 and less than or equal to 1000";
		q->top_k = int_of(v);
		if (q->top_k < 0 || q->top_k > 1000)
			return "top_k must be equal to or greater than 0 and less than or equal to 1000";
	}
	q->top_p = 0;
	if ((v = json_object_get(o, "top_p"))) {
		if (!json_is_real(v))
			return "top_p must be a positive float less than or equal to 1.0";
		q->top_p = json_real_value(v);
		if (q->top_p > 0 && q->top_k > 0)
			return "cannot set both top-k and top-p samplings.";
		if (q->top_p > 1)
			return "top_p must be less than or equal to 1.0";
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
	if ((v = json_object_get(o, "stop_token")) && !is_int(v))
		return "stop_token must be an integer";
	if ((v = json_object_get(o, "length_penalty")) && !json_is_number(v))
		return "length_penalty must be a float";
	return NULL;
}

/* A JSON string of text whose bytes may not all be UTF-8 (a token can end
 * inside a character): each invalid byte becomes U+FFFD, as Python's
 * decode(errors="replace") does. */
static json_t *jstr(const char *text)
{
	size_t n = strlen(text), bad;
	if (utf8_valid(text, n, &bad))
		return json_string(text);
	struct sbuf sb = SBUF_INIT;
	while (n) {
		if (utf8_valid(text, n, &bad)) {
			sbuf_add(&sb, text, n);
			break;
		}
		sbuf_add(&sb, text, bad);
		sbuf_addstr(&sb, "\xef\xbf\xbd");
		text += bad + 1;
		n -= bad + 1;
	}
	json_t *j = json_string(sb.buf ? sb.buf : "");
	sbuf_release(&sb);
	return j;
}

/* Decoded text of ids (invalid byte sequences as the tokenizer leaves them). */
static char *decode(const struct tokenizer *t, const int32_t *ids, size_t n)
{
	struct sbuf sb = SBUF_INIT;
	tok_decode(t, ids, n, &sb);
	sbuf_addstr(&sb, ""); /* a NUL-terminated empty string for n == 0 */
	return sbuf_detach(&sb, NULL);
}

static enum MHD_Result handle_api(struct server *s, struct MHD_Connection *c, const struct body *b)
{
	json_error_t jerr;
	json_t *o = json_loadb(b->data.buf ? b->data.buf : "", b->data.len, 0, &jerr);
	if (!json_is_object(o)) {
		json_decref(o);
		char msg[256];
		snprintf(msg, sizeof(msg), "the request body must be a JSON object (%s)", jerr.text);
		return fail(c, 400, msg);
	}
	struct api_req q;
	const char *bad = check_api(o, &q);
	if (bad) {
		enum MHD_Result rc = fail(c, 400, bad);
		json_decref(o);
		return rc;
	}
	int n = (int)json_array_size(q.prompts);
	struct infer_request *req = xcalloc((size_t)n, sizeof(*req));
	struct tok_session *ts = tok_session_new(s->tok);
	char msg[512] = "";
	pthread_mutex_lock(&s->mu);
	uint64_t seed0 = q.random_seed >= 0 ? (uint64_t)q.random_seed : s->seed_counter++ + (uint64_t)time(NULL);
	pthread_mutex_unlock(&s->mu);
	for (int i = 0; i < n && !*msg; i++) {
		const char *text = json_string_value(json_array_get(q.prompts, (size_t)i));
		struct tok_ids ids = { 0 };
		if (q.add_bos)
			tok_ids_push(&ids, (int32_t)s->eod);
		if (tok_encode(ts, text, strlen(text), &ids) < 0)
			snprintf(msg, sizeof(msg), "prompt %d cannot be tokenized: %s", i, tok_session_error(ts));
		else if ((int64_t)ids.n + q.tokens_to_generate > s->e.max_seq)
			snprintf(msg, sizeof(msg),
				 "prompt %d has %zu tokens; with tokens_to_generate %lld that is more than "
				 "--inference-max-seq-length %d",
				 i, ids.n, (long long)q.tokens_to_generate, s->e.max_seq);
		else if (q.top_k >= s->e.c.V)
			snprintf(msg, sizeof(msg), "top_k must be less than the vocabulary size %d", s->e.c.V);
		req[i] = (struct infer_request){ .prompt = ids.v, .nprompt = (int)ids.n,
						 .max_new = (int)q.tokens_to_generate,
						 .sampling = { (float)q.temperature, (int)q.top_k, (float)q.top_p,
							       seed0 + (uint64_t)i },
						 .eod = (int32_t)s->eod, .want_logprobs = q.logprobs };
	}
	tok_session_free(ts);
	enum MHD_Result rc;
	if (*msg) {
		rc = fail(c, 400, msg);
	} else {
		struct job j = { req, n, false, NULL };
		pthread_mutex_lock(&s->mu);
		j.next = s->queue;
		s->queue = &j;
		pthread_cond_signal(&s->work);
		while (!j.done)
			pthread_cond_wait(&s->progress, &s->mu);
		pthread_mutex_unlock(&s->mu);
		json_t *text = json_array(), *tokens = json_array(), *lps = json_array(), *segs = json_array();
		for (int i = 0; i < n; i++) {
			struct infer_request *r = &req[i];
			int total = r->nprompt + r->nout;
			int32_t *all = xmalloc((size_t)total * sizeof(int32_t));
			memcpy(all, r->prompt, (size_t)r->nprompt * sizeof(int32_t));
			memcpy(all + r->nprompt, r->out, (size_t)r->nout * sizeof(int32_t));
			char *full = decode(s->tok, all, (size_t)total), *pre = decode(s->tok, r->prompt, (size_t)r->nprompt);
			const char *prompt = json_string_value(json_array_get(q.prompts, (size_t)i));
			size_t lp = strlen(pre);
			struct sbuf t = SBUF_INIT;
			sbuf_addstr(&t, prompt);
			sbuf_addstr(&t, strncmp(full, pre, lp) ? full : full + lp);
			json_array_append_new(text, jstr(t.buf));
			sbuf_release(&t);
			free(full), free(pre);
			json_t *tk = json_array(), *sg = json_array(), *lq = json_array();
			for (int k = 0; k < total; k++) {
				json_array_append_new(tk, json_integer(all[k]));
				char *piece = decode(s->tok, all + k, 1);
				json_array_append_new(sg, jstr(piece));
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
		rc = reply(c, 200, out);
	}
	for (int i = 0; i < n; i++) {
		free((void *)req[i].prompt);
		infer_request_free(&req[i]);
	}
	free(req);
	json_decref(o);
	return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
				  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
	(void)version;
	struct server *s = cls;
	struct body *b = *con_cls;
	if (!b) { /* the headers: a body to fill, and a request SIGTERM waits for */
		b = xcalloc(1, sizeof(*b));
		*con_cls = b;
		pthread_mutex_lock(&s->mu);
		s->inflight++;
		pthread_mutex_unlock(&s->mu);
		return MHD_YES;
	}
	if (*upload_size) {
		if (b->data.len + *upload_size > (size_t)s->max_body)
			b->too_big = true;
		else
			sbuf_add(&b->data, upload, *upload_size);
		*upload_size = 0;
		return MHD_YES;
	}
	if (!strcmp(url, "/health"))
		return !strcmp(method, "GET") ? reply(c, 200, json_pack("{s:s}", "status", "ok"))
					     : fail(c, 405, "/health takes GET");
	if (!strcmp(url, "/api")) {
		if (strcmp(method, "PUT"))
			return fail(c, 405, "/api takes PUT with a JSON body");
		if (b->too_big) {
			char msg[128];
			snprintf(msg, sizeof(msg), "the request body is larger than --max-body-bytes %lld",
				 (long long)s->max_body);
			return fail(c, 413, msg);
		}
		return handle_api(s, c, b);
	}
	return fail(c, 404, "no such endpoint (text_gen_server has PUT /api and GET /health)");
}

/* A request's end, answered or not (its client went away). */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t)
{
	(void)c, (void)t;
	struct server *s = cls;
	struct body *b = *con_cls;
	if (b) {
		sbuf_release(&b->data);
		free(b);
		*con_cls = NULL;
		pthread_mutex_lock(&s->mu);
		s->inflight--;
		pthread_cond_broadcast(&s->progress);
		pthread_mutex_unlock(&s->mu);
	}
}

int server_command(const struct args *a)
{
	struct server s;
	memset(&s, 0, sizeof(s));
	if (!a->load)
		return error("--load DIR: the checkpoint to serve");
	if (!a->tokenizer_type)
		return error("text_gen_server needs the tokenizer flags (--tokenizer-type ...) to read prompts");
	if (a->port < 0 || a->port > 65535)
		return error("--port %lld: give 0 to 65535", (long long)a->port);
	if (a->inference_max_requests < 1 || a->inference_max_requests > 4096 || a->inference_max_seq_length < 2 ||
	    a->inference_max_seq_length > (1 << 20) || a->max_body_bytes < 1)
		return error("--inference-max-requests (1 to 4096), --inference-max-seq-length (2 to 2^20) and "
			     "--max-body-bytes must be positive");
	struct tok_config tc = tok_config_from_args(a);
	s.tok = tok_load(&tc);
	if (!s.tok)
		return -1;
	s.eod = tok_eod(s.tok);
	int64_t iter;
	int k = ckpt_latest(a->load, &iter);
	if (k != 0) {
		tok_free(s.tok);
		return k > 0 ? error("'%s' has no latest_checkpointed_iteration.txt", a->load) : -1;
	}
	struct ckpt_reader *r = ckpt_open(a->load, iter);
	int mf = r ? ckpt_file_open(r, "model.h5") : -1;
	int max_seq = (int)a->inference_max_seq_length, max_req = (int)a->inference_max_requests;
	if (mf < 0 || infer_init(&s.e, r, mf, max_seq, max_req, max_seq + max_req) < 0) {
		if (r)
			ckpt_close(r);
		tok_free(s.tok);
		return -1;
	}
	ckpt_close(r);
	if (tok_vocab_size(s.tok) > s.e.c.V) {
		infer_free(&s.e);
		tok_free(s.tok);
		return error("the tokenizer has %lld tokens; the model's vocabulary %d", (long long)tok_vocab_size(s.tok),
			     s.e.c.V);
	}
	s.max_body = a->max_body_bytes;
	infer_sched_init(&s.sched, &s.e);
	pthread_mutex_init(&s.mu, NULL);
	pthread_cond_init(&s.work, NULL);
	pthread_cond_init(&s.progress, NULL);

	/* every thread started from here on has SIGTERM and SIGINT blocked */
	sigset_t sigs;
	sigemptyset(&sigs);
	sigaddset(&sigs, SIGTERM);
	sigaddset(&sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &sigs, NULL);
	pthread_t engine;
	pthread_create(&engine, NULL, engine_main, &s);
	struct MHD_Daemon *d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
							MHD_USE_ERROR_LOG,
						(uint16_t)a->port, NULL, NULL, on_request, &s, MHD_OPTION_NOTIFY_COMPLETED,
						on_completed, &s, MHD_OPTION_CONNECTION_TIMEOUT, 600u, MHD_OPTION_END);
	int rc = 0;
	if (!d) {
		rc = error("cannot listen on port %lld (in use?)", (long long)a->port);
	} else {
		info("serving iteration %lld of '%s' (%d layers, hidden %d, vocabulary %d) on port %lld: PUT /api, GET "
		     "/health; %d request slots of %d positions",
		     (long long)iter, a->load, s.e.c.L, s.e.c.h, s.e.c.V, (long long)a->port, max_req, max_seq);
		int sig;
		sigwait(&sigs, &sig);
		info("%s: answering the requests in flight, then stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
		MHD_quiesce_daemon(d); /* no new connections */
		pthread_mutex_lock(&s.mu);
		while (s.inflight > 0)
			pthread_cond_wait(&s.progress, &s.mu);
		pthread_mutex_unlock(&s.mu);
		MHD_stop_daemon(d);
	}
	pthread_mutex_lock(&s.mu);
	s.stopping = true;
	pthread_cond_signal(&s.work);
	pthread_mutex_unlock(&s.mu);
	pthread_join(engine, NULL);
	infer_sched_free(&s.sched);
	infer_free(&s.e);
	tok_free(s.tok);
	pthread_mutex_destroy(&s.mu);
	pthread_cond_destroy(&s.work);
	pthread_cond_destroy(&s.progress);
	return rc;
}
