/*
 * server.c - see server.h. Threads: libmicrohttpd's (one per connection,
 * plus its listener); main, which runs the engine loop (so that with
 * tensor parallelism the thread talking to MPI is the one that initialised
 * it); and one that waits for SIGTERM or SIGINT. Their handler only writes
 * the signal's number to a pipe that thread reads (whichever thread the
 * kernel picks, OpenBLAS's and MPI's included, which start before main and
 * so cannot all be given a blocked mask). Shared state is under one mutex: the queue of new jobs,
 * the jobs in flight and their progress and `done` flags; the requests'
 * results are written by the engine loop and read by the connection only
 * after `done` (or, streaming, up to the published counts), both under the
 * mutex.
 */
#include "infer/server.h"
#include "infer/server_int.h"
#include "infer/webpage.h"

#include <jansson.h>
#include <math.h>
#include <microhttpd.h>
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/sbuf.h"
#include "base/utf8.h"
#include "base/xalloc.h"
#include "ckpt/ckpt.h"
#include "data/commands.h"
#include "data/tok.h"
#include "dist/dist.h"
#include "infer/engine.h"
#include "infer/generate.h"

const struct prog_info server_prog_info = {
	"text_gen_server",
	PROG_INFER,
	"Serves text generation over HTTP from a checkpoint: Megatron's PUT /api (prompts, tokens_to_generate,\n"
	"logprobs, temperature, top_k, top_p, ...), OpenAI's POST /v1/completions and /v1/chat/completions\n"
	"(stream too), GET /v1/models and GET /health. Concurrent requests share forward passes\n"
	"(continuous batching over --inference-max-requests cache slots). The model comes from the checkpoint;\n"
	"the tokenizer flags say how to read prompts. SIGTERM answers the requests in flight and exits 0.",
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
	if (args_given(a, "--position-embedding-type") &&
	    strcmp(a->position_embedding_type, c->rope ? "rope" : "learned_absolute"))
		sbuf_addf(&why, "; --position-embedding-type %s (the checkpoint has %s)", a->position_embedding_type,
			  c->rope ? "rope" : "learned_absolute");
	int rc = 0;
	if (why.len)
		rc = error("the model flags disagree with the checkpoint: %s", why.buf + 2);
	sbuf_release(&why);
	return rc;
}

/* ---- the engine loop ---- */

static void *engine_main(void *arg)
{
	struct server *s = arg;
	pthread_mutex_lock(&s->mu);
	for (;;) {
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

/* ---- HTTP ---- */

enum MHD_Result srv_reply(struct MHD_Connection *c, unsigned status, json_t *o)
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

enum MHD_Result srv_fail(struct MHD_Connection *c, unsigned status, const char *msg)
{
	json_t *o = json_object();
	json_object_set_new(o, "error", srv_str(msg));
	return srv_reply(c, status, o);
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
	if (s->stopping) {
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
	json_t *o = json_object();
	json_object_set_new(o, "error", json_string("the server is stopping"));
	char *txt = json_dumps(o, JSON_COMPACT);
	json_decref(o);
	struct MHD_Response *r = MHD_create_response_from_buffer(strlen(txt), txt, MHD_RESPMEM_MUST_FREE);
	MHD_add_response_header(r, "Content-Type", "application/json");
	MHD_add_response_header(r, "Connection", "close");
	enum MHD_Result rc = MHD_queue_response(c, 503, r);
	MHD_destroy_response(r);
	return rc;
}

void srv_wait(struct server *s, struct job *j)
{
	pthread_mutex_lock(&s->mu);
	while (!j->done)
		pthread_cond_wait(&s->progress, &s->mu);
	pthread_mutex_unlock(&s->mu);
}

int32_t *srv_tokenize(struct server *s, const char *text, bool add_eod, int *n, char *msg, size_t msgsize)
{
	struct tok_session *ts = tok_session_new(s->tok);
	struct tok_ids ids = { 0 };
	if (add_eod)
		tok_ids_push(&ids, (int32_t)s->eod);
	int rc = tok_encode(ts, text, strlen(text), &ids);
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
		b->over_limit = s->inflight >= s->max_concurrent;
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
	static const struct {
		const char *url, *method;
	} routes[] = { { "/health", "GET" },	     { "/api", "PUT" }, { "/v1/completions", "POST" },
		       { "/v1/chat/completions", "POST" }, { "/v1/models", "GET" }, { "/", "GET" } };
	int r = -1;
	for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
		if (!strcmp(url, routes[i].url))
			r = (int)i;
	if (r < 0)
		return srv_fail(c, 404, "no such endpoint (text_gen_server has GET /, PUT /api, POST /v1/completions, "
					"POST /v1/chat/completions, GET /v1/models and GET /health)");
	if (strcmp(method, routes[r].method)) {
		char msg[128];
		snprintf(msg, sizeof(msg), "%s takes %s", routes[r].url, routes[r].method);
		return srv_fail(c, 405, msg);
	}
	if (b->over_limit && r != 0) {
		char msg[128];
		snprintf(msg, sizeof(msg), "too many requests at once (--max-concurrent-requests %lld); try again",
			 (long long)s->max_concurrent);
		return srv_fail(c, 429, msg);
	}
	if (b->too_big) {
		char msg[128];
		snprintf(msg, sizeof(msg), "the request body is larger than --max-body-bytes %lld", (long long)s->max_body);
		return srv_fail(c, 413, msg);
	}
	pthread_mutex_lock(&s->mu);
	bool draining = s->draining;
	pthread_mutex_unlock(&s->mu);
	if (draining && r != 0)
		return srv_unavailable(c);
	switch (r) {
	case 0:
		return srv_reply(c, 200, json_pack("{s:s}", "status", "ok"));
	case 1:
		return api_megatron(s, c, b);
	case 2:
	case 3:
		return api_completions(s, c, b, r == 3);
	case 4:
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
	if (b) {
		sbuf_release(&b->data);
		if (b->stream)
			api_stream_free(b->stream);
		free(b);
		*con_cls = NULL;
		pthread_mutex_lock(&s->mu);
		s->inflight--;
		pthread_cond_broadcast(&s->progress);
		pthread_mutex_unlock(&s->mu);
	}
}

/* SIGTERM or SIGINT: no new connections; once every request begun has been
 * answered, the engine loop (main's) ends. */
struct sig_ctx {
	struct server *s;
	struct MHD_Daemon *d;
	int fd; /* the read end of the signal pipe */
};

/* The signal pipe: the one piece of process-wide state here, because a
 * signal handler can reach nothing else. */
static int stop_pipe[2] = { -1, -1 };

static void on_stop_signal(int sig)
{
	int saved = errno;
	unsigned char b = (unsigned char)sig;
	ssize_t w = write(stop_pipe[1], &b, 1);
	(void)w;
	errno = saved;
}

static int catch_stop_signals(void)
{
	if (stop_pipe[0] < 0 && pipe2(stop_pipe, O_CLOEXEC) < 0)
		return error_errno("cannot make the signal pipe");
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_stop_signal;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGTERM, &sa, NULL) < 0 || sigaction(SIGINT, &sa, NULL) < 0)
		return error_errno("cannot catch SIGTERM");
	return 0;
}

/* Byte 0 on the pipe: main says the engine loop has ended (no drain). */
static void *signal_main(void *arg)
{
	struct sig_ctx *x = arg;
	struct server *s = x->s;
	unsigned char sig = 0;
	for (;;) {
		ssize_t n = read(x->fd, &sig, 1);
		if (n == 1 || (n < 0 && errno != EINTR))
			break;
	}
	if (sig == 0)
		return NULL;
	info("%s: answering the requests in flight, then stopping", sig == SIGTERM ? "SIGTERM" : "SIGINT");
	MHD_quiesce_daemon(x->d);
	pthread_mutex_lock(&s->mu);
	s->draining = true; /* keep-alive connections get 503 and are closed */
	while (s->inflight > 0)
		pthread_cond_wait(&s->progress, &s->mu);
	s->stopping = true;
	pthread_cond_signal(&s->work);
	pthread_mutex_unlock(&s->mu);
	return NULL;
}

/* The layout of a serving job: tensor parallelism over every rank. */
static int serving_layout(const struct args *a, struct dist *d)
{
	if (d->world == 1)
		return 0;
	if (a->tensor_model_parallel_size != d->world)
		return error("text_gen_server on %d ranks serves tensor-parallel: give --tensor-model-parallel-size %d "
			     "(no pipeline, context or data parallelism)",
			     d->world, d->world);
	struct args la = *a;
	la.pipeline_model_parallel_size = la.context_parallel_size = la.expert_model_parallel_size = 1;
	la.num_layers_per_virtual_pipeline_stage = la.num_virtual_stages_per_pipeline_rank = -1;
	la.sequence_parallel = false;
	la.global_batch_size = la.micro_batch_size = -1;
	struct dist_layout l;
	return dist_layout_from_args(&l, &la, d->world) < 0 || dist_setup(d, &l) < 0 ? -1 : 0;
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
	    a->inference_max_seq_length > (1 << 20) || a->max_body_bytes < 1 || a->max_concurrent_requests < 1)
		return error("--inference-max-requests (1 to 4096), --inference-max-seq-length (2 to 2^20) and "
			     "--max-body-bytes and --max-concurrent-requests must be positive");
	/* caught from here on: a SIGTERM while loading stops the server once it
	 * serves; on the other tensor-parallel ranks it is caught and ignored
	 * (they stop when rank 0 says) */
	if (catch_stop_signals() < 0)
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
	int64_t iter;
	struct ckpt_reader *r = s.tok ? ckpt_open_latest(a->load, &iter) : NULL;
	int mf = r ? ckpt_file_open(r, "model.h5") : -1;
	int max_seq = (int)a->inference_max_seq_length, max_req = (int)a->inference_max_requests;
	int rc = mf < 0 || infer_init(&s.e, r, mf, max_seq, max_req, max_seq + max_req, d.world > 1 ? &d.tp : NULL) < 0
			 ? -1
			 : 0;
	if (r)
		ckpt_close(r);
	if (rc == 0)
		rc = check_model_flags(a, &s.e.c);
	if (rc == 0 && tok_vocab_size(s.tok) > s.e.c.V)
		rc = error("the tokenizer has %lld tokens; the model's vocabulary %d", (long long)tok_vocab_size(s.tok),
			   s.e.c.V);
	if (rc < 0) {
		if (s.tok)
			tok_free(s.tok);
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
	s.max_body = a->max_body_bytes;
	s.max_concurrent = a->max_concurrent_requests;
	const char *slash = strrchr(a->load, '/');
	s.model_name = slash && slash[1] ? slash + 1 : a->load;
	infer_sched_init(&s.sched, &s.e);
	pthread_mutex_init(&s.mu, NULL);
	pthread_cond_init(&s.work, NULL);
	pthread_cond_init(&s.progress, NULL);

	struct sig_ctx x = { .s = &s, .fd = stop_pipe[0] };
	x.d = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG,
			       (uint16_t)a->port, NULL, NULL, on_request, &s, MHD_OPTION_NOTIFY_COMPLETED, on_completed,
			       &s, MHD_OPTION_CONNECTION_TIMEOUT, 120u, MHD_OPTION_END);
	if (!x.d) {
		rc = error("cannot listen on port %lld (in use?)", (long long)a->port);
	} else {
		info("serving iteration %lld of '%s' (%d layers, hidden %d, vocabulary %d%s) on port %lld: GET /, PUT "
		     "/api, POST /v1/completions, /v1/chat/completions, GET /v1/models, /health; %d request slots of "
		     "%d positions",
		     (long long)iter, a->load, s.e.c.L, s.e.c.h, s.e.c.V, d.world > 1 ? ", tensor-parallel" : "",
		     (long long)a->port, max_req, max_seq);
		pthread_t sig;
		pthread_create(&sig, NULL, signal_main, &x);
		engine_main(&s); /* on this thread: the one that talks to MPI */
		MHD_stop_daemon(x.d);
		unsigned char zero = 0; /* wakes the signal thread if no signal came */
		ssize_t w = write(stop_pipe[1], &zero, 1);
		(void)w;
		pthread_join(sig, NULL);
	}
	infer_stop_followers(&s.e);
	infer_sched_free(&s.sched);
	infer_free(&s.e);
	tok_free(s.tok);
	pthread_mutex_destroy(&s.mu);
	pthread_cond_destroy(&s.work);
	pthread_cond_destroy(&s.progress);
	dist_finalize(&d);
	return rc;
}
