/*
 * server.c - see server.h. Threads: libmicrohttpd's (one per connection,
 * plus its listener); main, which runs the engine loop (so that with
 * tensor parallelism the thread talking to MPI is the one that initialised
 * it); and the supervisor (server_life.c: signals, deadlines, the drain).
 * Shared state is under one mutex: the queue of new jobs, the jobs in
 * flight and their progress, `done` and `cancelled` flags; the requests'
 * results are written by the engine loop and read by the connection only
 * after `done` (or, streaming, up to the published counts), both under the
 * mutex.
 *
 * A request goes through three gates. At its headers (gate()): the framing
 * (one Content-Length, not with Transfer-Encoding; a Host on HTTP/1.1), the
 * Host header when the server listens on loopback (DNS rebinding), the
 * route and method, the API key, a JSON content type on bodies, the body's
 * announced size; a request refused here is answered at once and its body
 * is not read. Once its body is in: admission (srv_admit: 413, 429, 503
 * while draining). Then its endpoint. A client that hangs up while its
 * answer is generated cancels its job (srv_wait), which frees its cache
 * slots for the others.
 */
#include "infer/server.h"
#include "infer/server_int.h"
#include "infer/webpage.h"

#include <arpa/inet.h>
#include <jansson.h>
#include <math.h>
#include <microhttpd.h>
#include <poll.h>
#include <pthread.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/sbuf.h"
#include "base/utf8.h"
#include "base/xalloc.h"
#include "ckpt/ckpt.h"
#include "data/chat_tokenizer.h"
#include "data/sft.h"
#include "data/tok.h"
#include "dist/dist.h"
#include "infer/engine.h"
#include "infer/generate.h"
#include "kernels/device.h"

const struct prog_info server_prog_info = {
	"text_gen_server",
	PROG_INFER,
	"Serves text generation over HTTP from a checkpoint: Megatron's PUT /api (prompts, tokens_to_generate,\n"
	"logprobs, temperature, top_k, top_p, ...), OpenAI's POST /v1/completions and /v1/chat/completions\n"
	"(stream too; a chat's prompt is the tokenizer folder's chat template, or --chat-template), GET /v1/models\n"
	"and GET /health. Concurrent requests share forward passes (continuous batching over\n"
	"--inference-max-requests cache slots). The model comes from the checkpoint; the tokenizer flags say how\n"
	"to read prompts. It listens on --host (127.0.0.1: this machine only);\n"
	"bodies must be JSON (Content-Type: application/json). A request's headers and body must arrive within\n"
	"--request-timeout seconds (30). SIGTERM answers the requests in flight (for at most --drain-timeout\n"
	"seconds) and exits 0.",
	"text_gen_server --load ckpt --port 5000 --tokenizer-type GPT2BPETokenizer --vocab-file gpt2-vocab.json "
	"--merge-file gpt2-merges.txt",
	PROG_TRAIN, /* a train command line is accepted: its model flags must agree with the checkpoint */
};

/* Megatron's model flags, when given, against the checkpoint's model: one
 * message listing every disagreement. */
static int check_model_flags(const struct args *a, const struct gpt_config *c)
{
	struct {
		const char *flag;
		long long given, ckpt;
	} ints[] = {
		{ "--num-layers", a->num_layers, c->L },
		{ "--hidden-size", a->hidden_size, c->h },
		{ "--num-attention-heads", a->num_attention_heads, c->a },
		{ "--ffn-hidden-size", a->ffn_hidden_size, c->f },
		{ "--num-query-groups", a->num_query_groups, c->g },
		{ "--kv-channels", a->kv_channels, c->k },
		{ "--max-position-embeddings", a->max_position_embeddings, c->P },
		{ "--swiglu", a->swiglu, c->swiglu },
		{ "--untie-embeddings-and-output-weights", a->untie_embeddings_and_output_weights, c->untied },
		{ "--disable-bias-linear", a->disable_bias_linear, !c->bias },
		{ "--group-query-attention", a->group_query_attention, c->g != c->a },
	};
	struct sbuf why = SBUF_INIT;
	for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
		if (args_given(a, ints[i].flag) && ints[i].given != ints[i].ckpt)
			sbuf_addf(&why, "; %s %lld (the checkpoint has %lld)", ints[i].flag, ints[i].given, ints[i].ckpt);
	if (args_given(a, "--normalization") && strcmp(a->normalization, c->rmsnorm ? "RMSNorm" : "LayerNorm"))
		sbuf_addf(&why, "; --normalization %s (the checkpoint has %s)", a->normalization,
			  c->rmsnorm ? "RMSNorm" : "LayerNorm");
	const char *pet = c->yarn ? "yarn" : c->rope ? "rope" : "learned_absolute";
	if (args_given(a, "--position-embedding-type") && strcmp(a->position_embedding_type, pet))
		sbuf_addf(&why, "; --position-embedding-type %s (the checkpoint has %s)", a->position_embedding_type,
			  pet);
	if (args_given(a, "--rotary-interleaved") && a->rotary_interleaved != (c->rope && c->rope_interleaved))
		sbuf_addf(&why, "; --rotary-interleaved (the checkpoint rotates halves)");
	int rc = 0;
	if (why.len)
		rc = error("the model flags disagree with the checkpoint: %s", why.buf + 2);
	sbuf_release(&why);
	return rc;
}


/* ---- the engine loop ---- */

/* Cancelled jobs leave: those still queued at once, those in the scheduler
 * with their requests (their slots free for the next step). Under s->mu. */
static void drop_cancelled(struct server *s)
{
	bool any = false;
	for (int pass = 0; pass < 2; pass++)
		for (struct job **p = pass ? &s->active : &s->queue; *p;) {
			struct job *j = *p;
			if (!j->cancelled) {
				p = &j->next;
				continue;
			}
			if (pass)
				for (int i = 0; i < j->n; i++)
					if (!j->req[i].finished)
						infer_sched_cancel(&s->sched, &j->req[i]);
			*p = j->next;
			j->done = any = true;
		}
	if (any)
		pthread_cond_broadcast(&s->progress);
}

static void *engine_main(void *arg)
{
	struct server *s = arg;
	pthread_mutex_lock(&s->mu);
	for (;;) {
		drop_cancelled(s);
		while (s->queue) { /* checked on the connection's thread: add cannot fail but for a bug */
			struct job *j = s->queue;
			s->queue = j->next;
			int added = 0;
			for (; added < j->n; added++) /* checked on the connection's thread: cannot fail */
				if (infer_sched_add(&s->sched, &j->req[added]) < 0)
					break;
			if (added < j->n) { /* a bug; the requests added run, unanswered, and the job fails */
				j->failed = j->done = true;
				pthread_cond_broadcast(&s->progress);
				continue;
			}
			j->next = s->active;
			s->active = j;
		}
		if (s->sched.n == 0) {
			if (s->state == SRV_STOPPING)
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
			for (int i = 0; i < j->n; i++) {
				all &= j->req[i].finished;
				j->seen[i] = j->req[i].nout;
			}
			j->version++;
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

/* ---- helpers of the endpoints ---- */

/* A reply with one extra header (NULL: none). */
static enum MHD_Result reply_hdr(struct MHD_Connection *c, unsigned status, json_t *o, const char *hdr,
				 const char *value)
{
	char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(9));
	json_decref(o);
	if (!s)
		return MHD_NO;
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(r, "Content-Type", "application/json");
	if (hdr)
		MHD_add_response_header(r, hdr, value);
	enum MHD_Result rc = MHD_queue_response(c, status, r);
	MHD_destroy_response(r);
	return rc;
}

enum MHD_Result srv_reply(struct MHD_Connection *c, unsigned status, json_t *o)
{
	return reply_hdr(c, status, o, NULL, NULL);
}

static json_t *error_object(const char *msg)
{
	json_t *o = json_object();
	json_object_set_new(o, "error", srv_str(msg));
	return o;
}

enum MHD_Result srv_fail(struct MHD_Connection *c, unsigned status, const char *msg)
{
	return srv_reply(c, status, error_object(msg));
}

/* A JSON string of text whose bytes may not all be UTF-8 (a token can end
 * inside a character): each invalid byte becomes U+FFFD, as Python's
 * decode(errors="replace") does. */
json_t *srv_str(const char *text)
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
char *srv_decode(const struct tokenizer *t, const int32_t *ids, size_t n)
{
	struct sbuf sb = SBUF_INIT;
	tok_decode(t, ids, n, &sb);
	sbuf_addstr(&sb, ""); /* a NUL-terminated empty string for n == 0 */
	return sbuf_detach(&sb, NULL);
}

uint64_t srv_seed(struct server *s)
{
	pthread_mutex_lock(&s->mu);
	uint64_t v = s->seed_counter++ + (uint64_t)time(NULL) * 1000003u;
	pthread_mutex_unlock(&s->mu);
	return v;
}

uint64_t srv_next_id(struct server *s)
{
	pthread_mutex_lock(&s->mu);
	uint64_t v = ++s->id_counter;
	pthread_mutex_unlock(&s->mu);
	return v;
}

int srv_submit(struct server *s, struct job *j)
{
	j->seen = xcalloc((size_t)j->n, sizeof(int));
	pthread_mutex_lock(&s->mu);
	if (s->state == SRV_CUTTING || s->state == SRV_STOPPING) {
		pthread_mutex_unlock(&s->mu);
		free(j->seen);
		j->seen = NULL;
		return -1;
	}
	j->next = NULL;
	struct job **tail = &s->queue; /* first in, first out */
	while (*tail)
		tail = &(*tail)->next;
	*tail = j;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->mu);
	return 0;
}

json_t *srv_json_body(struct MHD_Connection *c, const struct body *b, enum MHD_Result *rc)
{
	json_error_t jerr;
	json_t *o = json_loadb(b->data.buf ? b->data.buf : "", b->data.len, 0, &jerr);
	if (json_is_object(o))
		return o;
	json_decref(o);
	char msg[256];
	snprintf(msg, sizeof(msg), "the request body must be a JSON object (%s)", jerr.text);
	*rc = srv_fail(c, 400, msg);
	return NULL;
}

enum MHD_Result srv_unavailable(struct MHD_Connection *c)
{
	return reply_hdr(c, 503, error_object("the server is stopping"), "Connection", "close");
}

bool srv_client_gone(const struct body *b)
{
	if (!b || !b->conn || b->conn->fd < 0)
		return false;
	/* the client closed its side or reset the connection; data (a pipelined
	 * request) alone is not a hang-up */
	struct pollfd p = { .fd = b->conn->fd, .events = POLLRDHUP };
	return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL));
}

/* How often a waiting connection looks whether its client is still there. */
#define HANGUP_CHECK_S 0.1

void srv_wait_locked(struct server *s, struct job *j, const struct body *b, bool until_done, uint64_t version)
{
	double next_check = 0;
	while (!j->done && (until_done || j->version == version)) {
		double now = srv_now();
		if (b && !j->cancelled && now >= next_check) {
			next_check = now + HANGUP_CHECK_S;
			pthread_mutex_unlock(&s->mu);
			bool gone = srv_client_gone(b);
			pthread_mutex_lock(&s->mu);
			if (gone && !j->done) { /* the engine drops it before its next step */
				j->cancelled = true;
				pthread_cond_signal(&s->work);
			}
			continue;
		}
		struct timespec t;
		clock_gettime(CLOCK_MONOTONIC, &t);
		t.tv_nsec += (long)(HANGUP_CHECK_S * 1e9);
		if (t.tv_nsec >= 1000000000L)
			t.tv_sec++, t.tv_nsec -= 1000000000L;
		pthread_cond_timedwait(&s->progress, &s->mu, &t);
	}
}

bool srv_wait(struct server *s, struct job *j, const struct body *b)
{
	pthread_mutex_lock(&s->mu);
	srv_wait_locked(s, j, b, true, 0);
	bool answered = !j->cancelled;
	pthread_mutex_unlock(&s->mu);
	return answered;
}

void srv_touch(struct server *s, struct MHD_Connection *c)
{
	/* libmicrohttpd restarts the timer when the timeout goes from 0 to
	 * another value (MHD_queue_response restarts it too, which is why
	 * whole answers need none of this) */
	MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
	MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, (unsigned)ceil(s->cfg.request_timeout));
}

int32_t *srv_tokenize(struct server *s, const char *text, bool add_eod, bool plain, int *n, char *msg,
		      size_t msgsize)
{
	struct tok_session *ts = tok_session_new(s->tok);
	struct tok_ids ids = { 0 };
	if (add_eod)
		tok_ids_push(&ids, (int32_t)s->eod);
	int rc = plain ? tok_encode_plain(ts, text, strlen(text), &ids) : tok_encode(ts, text, strlen(text), &ids);
	if (rc < 0)
		snprintf(msg, msgsize, "the prompt cannot be tokenized: %s", tok_session_error(ts));
	tok_session_free(ts);
	if (rc < 0) {
		tok_ids_free(&ids);
		return NULL;
	}
	*n = (int)ids.n;
	if (!ids.v)
		ids.v = xmalloc(sizeof(int32_t));
	return ids.v;
}

/* ---- the gate: a request's headers ---- */

enum route { R_HEALTH, R_API, R_COMPLETIONS, R_CHAT, R_MODELS, R_PAGE };

static const struct {
	const char *url, *method, *allow;
	bool open; /* answered without the API key */
} routes[] = {
	[R_HEALTH] = { "/health", "GET", "GET, HEAD", true },
	[R_API] = { "/api", "PUT", "PUT", false },
	[R_COMPLETIONS] = { "/v1/completions", "POST", "POST", false },
	[R_CHAT] = { "/v1/chat/completions", "POST", "POST", false },
	[R_MODELS] = { "/v1/models", "GET", "GET, HEAD", false },
	[R_PAGE] = { "/", "GET", "GET, HEAD", true },
};

struct header_count {
	int content_length, transfer_encoding, host;
};

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value)
{
	(void)kind, (void)value;
	struct header_count *h = cls;
	if (!strcasecmp(key, "Content-Length"))
		h->content_length++;
	else if (!strcasecmp(key, "Transfer-Encoding"))
		h->transfer_encoding++;
	else if (!strcasecmp(key, "Host"))
		h->host++;
	return MHD_YES;
}

/* Host names a loopback host: localhost, [::1] or an address of
 * 127.0.0.0/8 (127.0.0.1), with or without a port. A page that rebinds a
 * name of its own to 127.0.0.1 still sends that name. */
static bool loopback_host(const char *h)
{
	const char *end;
	size_t n;
	if (h[0] == '[') {
		end = strchr(h, ']');
		if (!end)
			return false;
		n = (size_t)(end - h) + 1;
		end++;
	} else {
		end = h + strcspn(h, ":");
		n = (size_t)(end - h);
	}
	if (*end == ':') { /* a port: 1 to 5 digits */
		size_t d = strspn(end + 1, "0123456789");
		if (d < 1 || d > 5 || end[1 + d])
			return false;
	} else if (*end) {
		return false;
	}
	if ((n == 9 && !strncasecmp(h, "localhost", n)) || (n == 5 && !strncmp(h, "[::1]", n)))
		return true;
	char v4[16];
	struct in_addr a;
	if (n >= sizeof(v4))
		return false;
	memcpy(v4, h, n);
	v4[n] = 0;
	return inet_pton(AF_INET, v4, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

/* "Bearer KEY" against the key, in a time that does not depend on where
 * they differ. */
static bool bearer_ok(const char *auth, const char *key)
{
	if (!auth || strncasecmp(auth, "Bearer ", 7))
		return false;
	const char *got = auth + 7;
	while (*got == ' ')
		got++;
	size_t n = strlen(got), m = strlen(key);
	volatile unsigned char diff = n != m;
	for (size_t i = 0; i < m; i++)
		diff |= (unsigned char)((unsigned char)key[i] ^ (unsigned char)(i < n ? got[i] : 0));
	return diff == 0;
}

/* application/json, with parameters or not (charset=utf-8). */
static bool json_content_type(const char *ct)
{
	if (!ct)
		return false;
	ct += strspn(ct, " \t");
	size_t n = strcspn(ct, ";");
	while (n && (ct[n - 1] == ' ' || ct[n - 1] == '\t'))
		n--;
	return n == 16 && !strncasecmp(ct, "application/json", 16);
}

/* The checks of a request's headers: MHD_YES with nothing queued lets its
 * body in; otherwise the answer is queued and libmicrohttpd closes the
 * connection after it without reading the body. */
static enum MHD_Result gate(struct server *s, struct MHD_Connection *c, struct body *b, const char *url,
			    const char *method, const char *version)
{
	char msg[400];
	struct header_count h = { 0 };
	MHD_get_connection_values(c, MHD_HEADER_KIND, count_header, &h);
	if (h.content_length > 1)
		return srv_fail(c, 400, "more than one Content-Length header");
	if (h.content_length && h.transfer_encoding)
		return srv_fail(c, 400, "both Content-Length and Transfer-Encoding headers");
	if (h.host > 1 || (!h.host && !strcmp(version, "HTTP/1.1")))
		return srv_fail(c, 400, "an HTTP/1.1 request needs one Host header");
	const char *host = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Host");
	if (s->loopback && host && !loopback_host(host)) {
		snprintf(msg, sizeof(msg),
			 "Host '%.64s' is not this server: it listens on loopback (%s) and answers Host localhost, "
			 "127.0.0.1 or [::1] (--host says where it listens)",
			 host, s->where);
		return srv_fail(c, 421, msg);
	}
	int r = -1;
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
		if (!strcmp(url, routes[i].url))
			r = (int)i;
	if (r < 0)
		return srv_fail(c, 404, "no such endpoint (text_gen_server has GET /, PUT /api, POST /v1/completions, "
					"POST /v1/chat/completions, GET /v1/models and GET /health)");
	bool get = !strcmp(routes[r].method, "GET");
	if (strcmp(method, routes[r].method) && !(get && !strcmp(method, "HEAD"))) {
		snprintf(msg, sizeof(msg), "%s takes %s", routes[r].url, routes[r].method);
		return reply_hdr(c, 405, error_object(msg), "Allow", routes[r].allow);
	}
	if (s->cfg.api_key && !routes[r].open &&
	    !bearer_ok(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization"), s->cfg.api_key))
		return reply_hdr(c, 401, error_object("this server needs its API key: send Authorization: Bearer KEY"),
				 "WWW-Authenticate", "Bearer");
	if (!get) {
		if (!json_content_type(MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Type")))
			return srv_fail(c, 415, "send the body as JSON, with Content-Type: application/json");
		const char *len = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
		if (len && strtoull(len, NULL, 10) > (unsigned long long)s->cfg.max_body) {
			snprintf(msg, sizeof(msg), "the request body is larger than --max-body-bytes %lld",
				 (long long)s->cfg.max_body);
			return srv_fail(c, 413, msg);
		}
	}
	b->route = r;
	return MHD_YES;
}

/* ---- requests ---- */

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
				  const char *version, const char *upload, size_t *upload_size, void **con_cls)
{
	struct server *s = cls;
	struct body *b = *con_cls;
	if (!b) { /* the headers */
		b = xcalloc(1, sizeof(*b));
		*con_cls = b;
		b->route = -1;
		const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
		b->conn = ci ? ci->socket_context : NULL;
		return gate(s, c, b, url, method, version);
	}
	if (b->route < 0) /* answered at its headers: libmicrohttpd does not call again */
		return MHD_NO;
	if (*upload_size) {
		if (b->data.len + *upload_size > (size_t)s->cfg.max_body)
			b->too_big = true;
		else
			sbuf_add(&b->data, upload, *upload_size);
		*upload_size = 0;
		return MHD_YES;
	}
	/* the whole request is in */
	char msg[128];
	if (b->too_big) {
		snprintf(msg, sizeof(msg), "the request body is larger than --max-body-bytes %lld",
			 (long long)s->cfg.max_body);
		return srv_fail(c, 413, msg);
	}
	switch (srv_admit(s, b, b->route != R_HEALTH)) {
	case SRV_TOO_MANY:
		snprintf(msg, sizeof(msg), "too many requests at once (--max-concurrent-requests %lld); try again",
			 (long long)s->cfg.max_concurrent);
		return srv_fail(c, 429, msg);
	case SRV_DRAINING_NOW: /* load balancers: send no more here */
		if (b->route == R_HEALTH)
			return reply_hdr(c, 503, json_pack("{s:s}", "status", "draining"), "Connection", "close");
		return srv_unavailable(c);
	case SRV_ADMITTED:
		break;
	}
	switch (b->route) {
	case R_HEALTH:
		return srv_reply(c, 200, json_pack("{s:s}", "status", "ok"));
	case R_API:
		return api_megatron(s, c, b);
	case R_COMPLETIONS:
	case R_CHAT:
		return api_completions(s, c, b, b->route == R_CHAT);
	case R_MODELS:
		return api_models(s, c);
	default: {
		struct MHD_Response *page = MHD_create_response_from_buffer(strlen(infer_webpage), (void *)infer_webpage,
									    MHD_RESPMEM_PERSISTENT);
		MHD_add_response_header(page, "Content-Type", "text/html; charset=utf-8");
		enum MHD_Result rc = MHD_queue_response(c, 200, page);
		MHD_destroy_response(page);
		return rc;
	}
	}
}

/* A request's end, answered or not (its client went away). */
static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode t)
{
	(void)c, (void)t;
	struct server *s = cls;
	struct body *b = *con_cls;
	if (!b)
		return;
	if (b->stream) /* waits for its job to be done or dropped (invariant 2 of server_life.c) */
		api_stream_free(b->stream);
	sbuf_release(&b->data);
	srv_release(s, b);
	free(b);
	*con_cls = NULL;
}

/* ---- start-up ---- */

/* The layout of a serving job: tensor x expert parallelism over every rank. */
static int serving_layout(const struct args *a, struct dist *d)
{
	int64_t tp = a->tensor_model_parallel_size, ep = a->expert_model_parallel_size;
	if (tp < 1 || ep < 1 || tp * ep != d->world)
		return error("text_gen_server on %d rank%s serves tensor- and expert-parallel: give "
			     "--tensor-model-parallel-size %d, or --tensor-model-parallel-size x "
			     "--expert-model-parallel-size = %d (got %lld x %lld; no pipeline, context or data "
			     "parallelism)", d->world, d->world > 1 ? "s" : "", d->world, d->world, (long long)tp,
			     (long long)ep);
	if (d->world == 1)
		return 0;
	struct args la = *a;
	la.pipeline_model_parallel_size = la.context_parallel_size = 1;
	la.num_layers_per_virtual_pipeline_stage = la.num_virtual_stages_per_pipeline_rank = -1;
	la.sequence_parallel = false;
	la.global_batch_size = la.micro_batch_size = -1;
	struct dist_layout l;
	return dist_layout_from_args(&l, &la, d->world) < 0 || dist_setup(d, &l) < 0 ? -1 : 0;
}

/* Where to compute, as train chooses (--device, --local-rank); on a GPU
 * the tensor-parallel collectives take device buffers through NCCL. */
static int choose_device(const struct args *a, struct dist *d, struct device_choice *dev)
{
	if (device_choose(dev, a->device, device_local_rank((int)a->local_rank), DEVICE_FP32) < 0)
		return -1;
	if (dev->cuda_device >= 0 && d->world > 1 && dist_use_device(d) < 0)
		return -1;
	if (d->rank == 0)
		info("computing on %s", dev->what);
	return 0;
}

/* The serving flags, before anything is loaded: error() naming the first
 * that is wrong. */
static int check_flags(const struct args *a)
{
	if (!a->load)
		return error("--load DIR: the checkpoint to serve");
	if (!a->tokenizer_type)
		return error("text_gen_server needs the tokenizer flags (--tokenizer-type ...) to read prompts");
	if (a->port < 0 || a->port > 65535)
		return error("--port %lld: give 0 to 65535", (long long)a->port);
	if (!a->host || !*a->host)
		return error("--host: give an address to listen on (127.0.0.1, 0.0.0.0, ::, ...)");
	if (a->api_key) {
		if (!*a->api_key)
			return error("--api-key: give a key (visible ASCII characters, no spaces)");
		for (const char *p = a->api_key; *p; p++)
			if (*p < 0x21 || *p > 0x7e)
				return error("--api-key: give visible ASCII characters only (no spaces), as a Bearer "
					     "token");
	}
	if (a->inference_max_requests < 1 || a->inference_max_requests > 4096)
		return error("--inference-max-requests %lld: give 1 to 4096", (long long)a->inference_max_requests);
	if (args_given(a, "--inference-max-seq-length") &&
	    (a->inference_max_seq_length < 2 || a->inference_max_seq_length > (1 << 20)))
		return error("--inference-max-seq-length %lld: give 2 to 2^20", (long long)a->inference_max_seq_length);
	if (args_given(a, "--inference-dynamic-batching-max-tokens") &&
	    (a->inference_max_tokens < a->inference_max_requests || a->inference_max_tokens > (1 << 24)))
		return error("--inference-dynamic-batching-max-tokens %lld: give --inference-max-requests (%lld) to 2^24",
			     (long long)a->inference_max_tokens, (long long)a->inference_max_requests);
	if (a->max_body_bytes < 1)
		return error("--max-body-bytes %lld: give at least 1", (long long)a->max_body_bytes);
	if (a->max_concurrent_requests < 1 || a->max_concurrent_requests > (1 << 20))
		return error("--max-concurrent-requests %lld: give 1 to 2^20", (long long)a->max_concurrent_requests);
	if (!(a->request_timeout > 0 && a->request_timeout <= 86400))
		return error("--request-timeout %g: give seconds above 0, at most 86400", a->request_timeout);
	if (!(a->drain_timeout >= 0 && a->drain_timeout <= 86400))
		return error("--drain-timeout %g: give seconds from 0 to 86400", a->drain_timeout);
	if (a->max_connections_per_ip < 0 || a->max_connections_per_ip > 65535)
		return error("--max-connections-per-ip %lld: give 0 (no limit) to 65535",
			     (long long)a->max_connections_per_ip);
	if (args_given(a, "--temperature") && !(a->temperature > 0 && a->temperature <= 100))
		return error("--temperature %g: give a number above 0, at most 100", a->temperature);
	if (args_given(a, "--top_k") && (a->top_k < 0 || a->top_k > 1000))
		return error("--top_k %lld: give 0 to 1000", (long long)a->top_k);
	if (args_given(a, "--top_p") && !(a->top_p >= 0 && a->top_p <= 1))
		return error("--top_p %g: give 0 to 1", a->top_p);
	if (args_given(a, "--top_k") && args_given(a, "--top_p") && a->top_k > 0 && a->top_p > 0)
		return error("--top_k %lld and --top_p %g: give one of them (sampling takes top-k or top-p, not both)",
			     (long long)a->top_k, a->top_p);
	if (args_given(a, "--num-tokens-to-generate") && a->num_tokens_to_generate < 0)
		return error("--num-tokens-to-generate %lld: give at least 0", (long long)a->num_tokens_to_generate);
	return 0;
}

/* The flags against the model loaded. */
static int check_model_limits(const struct args *a, const struct server *s)
{
	if (args_given(a, "--top_k") && a->top_k >= s->e.c.V)
		return error("--top_k %lld: give less than the model's vocabulary of %d", (long long)a->top_k,
			     s->e.c.V);
	if (args_given(a, "--num-tokens-to-generate") && a->num_tokens_to_generate >= s->e.max_seq)
		return error("--num-tokens-to-generate %lld: a request has %d positions (--inference-max-seq-length), "
			     "its prompt at least one",
			     (long long)a->num_tokens_to_generate, s->e.max_seq);
	return 0;
}

static struct srv_config config_from_args(const struct args *a)
{
	struct srv_config k = {
		.max_body = a->max_body_bytes,
		.max_concurrent = a->max_concurrent_requests,
		.request_timeout = a->request_timeout,
		.drain_timeout = a->drain_timeout,
		.api_key = a->api_key,
	};
	struct gen_defaults *d = &k.defaults;
	d->has_tokens = args_given(a, "--num-tokens-to-generate");
	d->tokens = a->num_tokens_to_generate;
	d->has_temperature = args_given(a, "--temperature");
	d->temperature = a->temperature;
	d->has_top_k = args_given(a, "--top_k");
	d->top_k = a->top_k;
	d->has_top_p = args_given(a, "--top_p");
	d->top_p = a->top_p;
	d->logprobs = a->return_log_probs;
	return k;
}

/* The chat prompt of /v1/chat/completions (s->chat): --chat-template, else
 * the chat template of a Hugging Face tokenizer folder, else none (NULL:
 * api_openai.c's built-in "role: content" lines). The special tokens of a
 * Hugging Face folder are the template's variables either way. Said once
 * in the log. A template megac cannot parse stops the server, naming it:
 * its prompts would be wrong. 0, or -1 after error(). */
static int load_chat_prompt(const struct args *a, struct server *s)
{
	bool sft = a->tokenizer_type && !strcmp(a->tokenizer_type, "SFTTokenizer");
	bool hf = a->tokenizer_type && (sft || !strcmp(a->tokenizer_type, "HuggingFaceTokenizer")) && a->tokenizer_model;
	/* SFTTokenizer: its prompt format's template (Megatron's tokenize_conversation
	 * with add_generation_prompt), the tokenizer's own for "default" */
	const char *fmt = sft ? a->sft_tokenizer_prompt_format : NULL;
	const char *fixed = fmt && strcmp(fmt, "default") ? sft_format_template(fmt) : NULL;
	struct chat_tok_cfg c;
	char *text = NULL, *where = NULL;
	int rc = 0;
	if (hf && chat_tok_cfg_load(&c, a->tokenizer_model) < 0)
		return -1;
	if (a->chat_template) {
		s->chat = chat_prompt_new(a->chat_template, "--chat-template", hf ? &c : NULL);
		if (!s->chat)
			rc = error("--chat-template: megac cannot render this template");
		else
			info("chat prompts: the template of --chat-template%s",
			     hf ? ", with the tokenizer folder's special tokens" : "");
	} else if (fixed) {
		s->chat = chat_prompt_new(fixed, fmt, &c);
		if (!s->chat)
			rc = error("--sft-tokenizer-prompt-format %s: megac cannot render its template", fmt);
		else
			info("chat prompts: SFTTokenizer's %s prompt format", fmt);
	} else if (hf) {
		int r = chat_tok_cfg_template(&c, &text, &where);
		if (r < 0) {
			rc = -1;
		} else if (r > 0) {
			s->chat = chat_prompt_new(text, "chat_template", &c);
			if (!s->chat)
				rc = error("%s: megac cannot render this chat template; give --chat-template with one "
					   "it can",
					   where);
			else
				info("chat prompts: the tokenizer's chat template, from %s", where);
		} else {
			info("chat prompts: \"role: content\" lines and \"assistant:\" (%s has no chat template)",
			     c.dir);
		}
	} else {
		info("chat prompts: \"role: content\" lines and \"assistant:\" (a %s has no chat template; "
		     "--chat-template gives one)", a->tokenizer_type);
	}
	free(text);
	free(where);
	if (hf)
		chat_tok_cfg_release(&c);
	return rc;
}

/* The HTTP side on rank 0: listen, serve until the drain ends. */
static int serve(struct server *s, const struct args *a, int64_t iter, int world)
{
	if (srv_listen(s, a->host, a->port) < 0)
		return -1;
	unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG |
			 MHD_USE_ITC;
	s->d = MHD_start_daemon(flags, 0, NULL, NULL, on_request, s, MHD_OPTION_EXTERNAL_LOGGER, srv_mhd_log, s,
				MHD_OPTION_LISTEN_SOCKET, (MHD_socket)s->listen_fd, MHD_OPTION_NOTIFY_COMPLETED,
				on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, srv_on_connection, s,
				MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)ceil(s->cfg.request_timeout),
				MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)a->max_connections_per_ip,
				MHD_OPTION_END);
	if (!s->d) {
		close(s->listen_fd);
		return error("cannot start the HTTP server on %s", s->where);
	}
	if (srv_supervise(s) < 0) {
		MHD_stop_daemon(s->d);
		return -1;
	}
	char par[64] = "";
	if (world > 1)
		snprintf(par, sizeof(par), ", TP %lld x EP %lld", (long long)a->tensor_model_parallel_size,
			 (long long)a->expert_model_parallel_size);
	char moe[64] = "";
	if (s->e.c.E > 0)
		snprintf(moe, sizeof(moe), ", %d experts, top-%d", s->e.c.E, s->e.c.router.k);
	info("serving iteration %lld of '%s' (%d layers, hidden %d, vocabulary %d%s%s) on http://%s (port %d): GET /, "
	     "PUT /api, POST /v1/completions, /v1/chat/completions, GET /v1/models, /health; %d request slots of %d "
	     "positions",
	     (long long)iter, a->load, s->e.c.L, s->e.c.h, s->e.c.V, moe, par, s->where, s->port, s->e.max_req,
	     s->e.max_seq);
	if (!s->loopback && !s->cfg.api_key)
		warning("listening on %s without --api-key: anyone who can reach this port can use the server",
			s->where);
	engine_main(s); /* on this thread: the one that talks to MPI */
	MHD_stop_daemon(s->d);
	srv_supervise_end(s);
	return 0;
}

int server_command(const struct args *a)
{
	struct server s;
	memset(&s, 0, sizeof(s));
	s.listen_fd = s.sigfd = -1;
	if (check_flags(a) < 0)
		return -1;
	/* caught from here on: a SIGTERM while loading stops the server once it
	 * serves; on the other tensor-parallel ranks it is caught and ignored
	 * (they stop when rank 0 says) */
	if (srv_catch_signals(&s) < 0)
		return -1;
	struct dist d;
	if (dist_init(&d, "text_gen_server") < 0)
		return -1;
	if (serving_layout(a, &d) < 0) {
		dist_finalize(&d);
		return -1;
	}
	struct tok_config tc = tok_config_from_args(a);
	s.tok = tok_load(&tc);
	/* rank 0 renders the chat prompts: a template it cannot parse stops it before the model loads */
	bool chat_ok = !s.tok || d.rank != 0 || load_chat_prompt(a, &s) == 0;
	int64_t iter;
	struct ckpt_reader *r = s.tok && chat_ok ? ckpt_open_latest(a->load, &iter) : NULL;
	int mf = r ? ckpt_file_open(r, "model.h5") : -1;
	/* --inference-max-seq-length not given: the model's positions */
	int max_seq = args_given(a, "--inference-max-seq-length") ? (int)a->inference_max_seq_length : 0;
	int max_req = (int)a->inference_max_requests;
	int max_tokens = args_given(a, "--inference-dynamic-batching-max-tokens") ? (int)a->inference_max_tokens : 0;
	/* the device train would use (--device auto|cpu|cuda), every rank its own GPU */
	struct device_choice dev;
	int rc = mf < 0 ? -1 : choose_device(a, &d, &dev);
	if (rc == 0)
		rc = infer_init(&s.e, r, mf, max_seq, max_req, max_tokens, dev.k,
				&(struct infer_groups){ &d.tp, &d.ep, &d.world_g });
	if (r)
		ckpt_close(r);
	if (rc == 0)
		rc = check_model_flags(a, &s.e.c);
	if (rc == 0 && tok_vocab_size(s.tok) > s.e.c.V)
		rc = error("the tokenizer has %lld tokens; the model's vocabulary %d", (long long)tok_vocab_size(s.tok),
			   s.e.c.V);
	if (rc == 0)
		rc = check_model_limits(a, &s);
	if (rc < 0) {
		if (s.tok)
			tok_free(s.tok);
		chat_prompt_free(s.chat);
		die("cannot serve '%s'", a->load); /* every rank: the launcher ends the job */
	}
	if (d.rank != 0) { /* the other tensor-parallel ranks follow rank 0's steps */
		/* SIGTERM is caught and ignored here: a launcher that forwards it
		 * to every rank leaves these to wait for rank 0 to drain and say stop */
		rc = infer_follow(&s.e);
		infer_free(&s.e);
		tok_free(s.tok);
		dist_finalize(&d);
		return rc;
	}
	s.eod = tok_eod(s.tok);
	s.cfg = config_from_args(a);
	const char *slash = strrchr(a->load, '/');
	s.model_name = slash && slash[1] ? slash + 1 : a->load;
	infer_sched_init(&s.sched, &s.e);
	pthread_mutex_init(&s.mu, NULL);
	pthread_mutex_init(&s.log_mu, NULL);
	pthread_cond_init(&s.work, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* srv_wait_locked's timed waits */
	pthread_cond_init(&s.progress, &ca);
	pthread_condattr_destroy(&ca);
	rc = serve(&s, a, iter, d.world);
	infer_stop_followers(&s.e);
	infer_sched_free(&s.sched);
	infer_free(&s.e);
	tok_free(s.tok);
	chat_prompt_free(s.chat);
	pthread_mutex_destroy(&s.mu);
	pthread_mutex_destroy(&s.log_mu);
	pthread_cond_destroy(&s.work);
	pthread_cond_destroy(&s.progress);
	dist_finalize(&d);
	return rc;
}
