/*
 * server.h - the text_gen_server program: HTTP (libmicrohttpd,
 * a thread per connection) in front of one engine thread that runs the
 * continuous-batching scheduler (generate.h). A request is checked and
 * tokenized on its connection's thread, queued, and answered when the
 * engine thread says its sequences have finished; requests that arrive
 * while others generate join the next step. Megatron's PUT /api with its
 * fields, defaults and messages, but every rejection a 4xx with a JSON
 * {"error": message} body (api_megatron.c); OpenAI's /v1/completions,
 * /v1/chat/completions (streaming too) and /v1/models (api_openai.c); GET
 * /health. Requests are checked at their headers (Host, API key, JSON
 * bodies; server.c) and uploads have a deadline; SIGTERM or SIGINT: no new
 * connections, the requests in flight are answered within a deadline, exit
 * 0 (server_life.c).
 */
#ifndef MEGAC_INFER_SERVER_H
#define MEGAC_INFER_SERVER_H

#include "base/args.h"

extern const struct prog_info server_prog_info;
int server_command(const struct args *a);

#endif
