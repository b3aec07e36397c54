/*
 * server_int.h - what the parts of text_gen_server share (server.c: HTTP
 * plumbing, the engine thread, shutdown; api_megatron.c: PUT /api;
 * api_openai.c: the OpenAI endpoints). Not for other modules.
 */
#ifndef MEGAC_INFER_SERVER_INT_H
#define MEGAC_INFER_SERVER_INT_H

#include <jansson.h>
#include <microhttpd.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "base/sbuf.h"
#include "data/tok.h"
#include "infer/engine.h"
#include "infer/generate.h"

/* One HTTP request's sequences, generated together. After each step the
 * engine thread publishes (under the mutex) how many tokens each request
 * has (seen) and bumps version; done when all have finished. */
struct job {
	struct infer_request *req;
	int n;
	int *seen;
	uint64_t version;
	bool done, failed;
	struct job *next;
};

struct server {
	struct infer_engine e;
	struct infer_sched sched;
	struct tokenizer *tok;
	int64_t eod, max_body, max_concurrent;
	const char *model_name;
	pthread_mutex_t mu;
	pthread_cond_t work, progress;
	struct job *queue, *active; /* new jobs (first in first out); jobs whose requests are in the scheduler */
	bool draining, stopping;    /* SIGTERM taken; every request begun is answered */
	int inflight;               /* requests begun and not yet completed */
	uint64_t seed_counter, id_counter;
};

struct body {
	struct sbuf data;
	bool too_big;
	bool over_limit;            /* came when --max-concurrent-requests were being handled */
	void *stream;               /* a streaming response's state (api_openai.c) */
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
 * -1 when the server is stopping (answer srv_unavailable). */
int srv_submit(struct server *s, struct job *j);
/* 503 with Connection: close: the server is draining for SIGTERM. */
enum MHD_Result srv_unavailable(struct MHD_Connection *c);
/* Wait until the job is done. */
void srv_wait(struct server *s, struct job *j);
/* A prompt's ids (add_eod: the end-of-document id first); NULL and msg set
 * when it cannot be tokenized. */
int32_t *srv_tokenize(struct server *s, const char *text, bool add_eod, int *n, char *msg, size_t msgsize);

enum MHD_Result api_megatron(struct server *s, struct MHD_Connection *c, const struct body *b);
enum MHD_Result api_completions(struct server *s, struct MHD_Connection *c, struct body *b, bool chat);
enum MHD_Result api_models(struct server *s, struct MHD_Connection *c);
void api_stream_free(void *stream);

#endif
