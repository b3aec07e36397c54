/*
 * server_int.h - what the parts of text_gen_server share (server.c: the
 * program, the engine thread, routing and the checks on a request's
 * headers; server_life.c: the listening socket, the connections and their
 * deadlines, signals and the drain; api_megatron.c: PUT /api;
 * api_openai.c: the OpenAI endpoints). Not for other modules.
 */
#ifndef MEGAC_INFER_SERVER_INT_H
#define MEGAC_INFER_SERVER_INT_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/sbuf.h"
#include "data/tok.h"
#include "infer/engine.h"
#include "infer/generate.h"

/* One HTTP request's sequences, generated together. After each step the
 * engine thread publishes (under the mutex) how many tokens each request
 * has (seen) and bumps version; done when all have finished, or once the
 * engine has dropped a cancelled job (its client hung up, or the drain's
 * deadline passed). */
struct job {
	struct infer_request *req;
	int n;
	int *seen;
	uint64_t version;
	bool done, failed;
	bool cancelled; /* set by the connection or the drain; the engine drops the job */
	struct job *next;
};

/* The defaults of a request's sampling fields: the API's own, or
 * Megatron's --temperature, --top_k, --top_p, --num-tokens-to-generate and
 * --return-log-probs when given. top_k and top_p go together: a request
 * that sets either takes neither default. */
struct gen_defaults {
	bool has_tokens, has_temperature, has_top_k, has_top_p, logprobs;
	int64_t tokens, top_k;
	double temperature, top_p;
};

/* What the command line says about serving, checked. */
struct srv_config {
	int64_t max_body, max_concurrent;
	double request_timeout, drain_timeout; /* seconds */
	const char *api_key;                   /* NULL: none */
	struct gen_defaults defaults;
};

/* The drain's states (server_life.c says what each allows). */
enum srv_state {
	SRV_SERVING,
	SRV_DRAINING,
	SRV_CUTTING,
	SRV_STOPPING,
};

/* A client connection, from accept to close (server_life.c). */
struct conn {
	int fd;
	double deadline; /* monotonic seconds: its request must be in by then */
	bool busy;       /* a request of it is being answered: no deadline */
	bool shut;       /* shut down by the server */
	struct conn *prev, *next;
};

struct chat_prompt;

struct server {
	struct infer_engine e;
	struct infer_sched sched;
	struct tokenizer *tok;
	int64_t eod;
	struct chat_prompt *chat; /* the chat template of /v1/chat/completions; NULL: the built-in prompt */
	struct srv_config cfg;
	const char *model_name;
	/* the listening socket: libmicrohttpd's from its start until the drain
	 * begins, then closed */
	int listen_fd, port;
	bool loopback; /* bound to a loopback address: the Host header is checked */
	char where[80]; /* "127.0.0.1:5000", for messages */
	struct MHD_Daemon *d;
	pthread_mutex_t mu;
	pthread_cond_t work, progress;
	struct job *queue, *active; /* new jobs (first in first out); jobs whose requests are in the scheduler */
	enum srv_state state;
	double drain_end;  /* SRV_DRAINING: when the requests still in flight are cut off */
	int inflight;      /* requests admitted (srv_admit) and not yet completed */
	struct conn *conns; /* every open connection */
	int sigfd;         /* the read end of the signal pipe */
	pthread_t supervisor;
	pthread_mutex_t log_mu; /* libmicrohttpd's log lines: a few a minute */
	double log_start;
	int log_shown, log_dropped;
	uint64_t seed_counter, id_counter;
};

/* One request on its connection: from its headers to its completion. */
struct body {
	struct sbuf data;
	int route;         /* index into server.c's routes */
	bool too_big;
	bool admitted;     /* counted in inflight (srv_admit) */
	struct conn *conn;
	void *stream;      /* a streaming response's state (api_openai.c) */
};

enum MHD_Result srv_reply(struct MHD_Connection *c, unsigned status, json_t *o);
/* The request body as a JSON object; NULL after answering 400 (*rc). */
json_t *srv_json_body(struct MHD_Connection *c, const struct body *b, enum MHD_Result *rc);
enum MHD_Result srv_fail(struct MHD_Connection *c, unsigned status, const char *msg);
/* A JSON string of text whose bytes may not all be UTF-8 (U+FFFD for each bad byte). */
json_t *srv_str(const char *text);
/* The decoded text of ids (caller frees). */
char *srv_decode(const struct tokenizer *t, const int32_t *ids, size_t n);
/* A seed for a request without one; a fresh id number. */
uint64_t srv_seed(struct server *s);
uint64_t srv_next_id(struct server *s);
/* Queue a job (its requests checked with infer_request_check beforehand);
 * -1 when the server is stopping or cutting requests off (answer
 * srv_unavailable). */
int srv_submit(struct server *s, struct job *j);
/* 503 with Connection: close: the server is draining for SIGTERM. */
enum MHD_Result srv_unavailable(struct MHD_Connection *c);
/* Wait until the job is done. While waiting, a client of b that hangs up
 * cancels it (b NULL: not watched). False when the job was cancelled: its
 * client is gone or the drain cut it off, and no answer is to be sent. */
bool srv_wait(struct server *s, struct job *j, const struct body *b);
/* The same with s->mu held; until_done false: until the job is done or has
 * published a step after `version` (a stream's next event). */
void srv_wait_locked(struct server *s, struct job *j, const struct body *b, bool until_done, uint64_t version);
/* True when the peer of the connection has closed or reset it. */
bool srv_client_gone(const struct body *b);
/* Restart libmicrohttpd's idle timer of c: a stream's event that took long
 * to come (the request waited for a slot) must not find its connection
 * timed out before it is sent (libmicrohttpd checks the timer after the
 * content reader returns, before it writes). */
void srv_touch(struct server *s, struct MHD_Connection *c);
/* A prompt's ids (add_eod: the end-of-document id first; plain: without
 * the post-processor's special tokens, tok_encode_plain); NULL and msg set
 * when it cannot be tokenized. */
int32_t *srv_tokenize(struct server *s, const char *text, bool add_eod, bool plain, int *n, char *msg,
		      size_t msgsize);

enum MHD_Result api_megatron(struct server *s, struct MHD_Connection *c, const struct body *b);
enum MHD_Result api_completions(struct server *s, struct MHD_Connection *c, struct body *b, bool chat);
enum MHD_Result api_models(struct server *s, struct MHD_Connection *c);
void api_stream_free(void *stream);

/* ---- server_life.c ---- */

/* Resolve host and bind the listening socket (s->listen_fd, s->port,
 * s->loopback, s->where). error() and -1. */
int srv_listen(struct server *s, const char *host, int64_t port);
/* SIGTERM and SIGINT write their number to a pipe (s->sigfd reads it). */
int srv_catch_signals(struct server *s);
/* libmicrohttpd's connection notifications: the registry of connections. */
void srv_on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
		       enum MHD_ConnectionNotificationCode code);
/* libmicrohttpd's log lines, at most a few a minute. */
void srv_mhd_log(void *cls, const char *fmt, va_list ap);
/* The supervisor thread (signals, deadlines, the drain) and its end, once
 * the engine loop has ended. */
int srv_supervise(struct server *s);
void srv_supervise_end(struct server *s);
/* A request whose body is in: counted (0), or refused because
 * --max-concurrent-requests are being answered (limited requests only: 429)
 * or the server is draining (503). */
enum srv_admit { SRV_ADMITTED, SRV_TOO_MANY, SRV_DRAINING_NOW };
enum srv_admit srv_admit(struct server *s, struct body *b, bool limited);
/* A request's end (answered, or its connection closed). */
void srv_release(struct server *s, struct body *b);
/* Seconds on the monotonic clock. */
double srv_now(void);

#endif
