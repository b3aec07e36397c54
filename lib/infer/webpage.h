/*
 * webpage.h - the page text_gen_server serves at GET /: a prompt box whose
 * answer streams in token by token (POST /v1/completions with "stream":
 * true, read with fetch's body reader). Plain HTML and JavaScript, no
 * outside resources, so it works on a cluster node without internet.
 */
#ifndef MEGAC_INFER_WEBPAGE_H
#define MEGAC_INFER_WEBPAGE_H

extern const char infer_webpage[];

#endif
