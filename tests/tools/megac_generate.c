/*
 * megac_generate.c - a test tool: generation by lib/infer (the engine of
 * text_gen_server) from a checkpoint, for the tests' comparisons with
 * transformers (tests/prog/infer.sh).
 *
 *   megac_generate CKPT_DIR PROMPTS.json MAX_NEW OUT.json [TOP_K [TEMPERATURE [SEED [MAX_REQ [MAX_TOKENS]]]]]
 *
 * PROMPTS.json: [[id, ...], ...]. All prompts go to one infer_generate call
 * with MAX_REQ cache slots (default: one per prompt) and steps of at most
 * MAX_TOKENS tokens (default: every prompt at once; fewer prefill the
 * prompts in chunks), greedy unless TOP_K is
 * given (0 = plain sampling), no stop token. OUT.json: [{"tokens": [...],
 * "logprobs": [...]}, ...] with the prompt's log-probs (from its second
 * token) then the generated tokens'.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/error.h"
#include "base/xalloc.h"
#include "infer/generate.h"

int main(int argc, char **argv)
{
	log_init("megac_generate", 0, 1);
	if (argc < 5)
		die("usage: megac_generate CKPT_DIR PROMPTS.json MAX_NEW OUT.json [TOP_K [TEMPERATURE [SEED [MAX_REQ "
		    "[MAX_TOKENS]]]]]");
	json_error_t jerr;
	json_t *ps = json_load_file(argv[2], 0, &jerr);
	if (!json_is_array(ps) || json_array_size(ps) == 0)
		die("'%s': expected a list of prompts (lists of token ids)", argv[2]);
	int n = (int)json_array_size(ps), max_new = atoi(argv[3]);
	int top_k = argc > 5 ? atoi(argv[5]) : 1;
	float temp = argc > 6 ? (float)atof(argv[6]) : 1.0f;
	uint64_t seed = argc > 7 ? strtoull(argv[7], NULL, 10) : 1;
	int max_req = argc > 8 ? atoi(argv[8]) : n;
	int max_tokens = argc > 9 ? atoi(argv[9]) : 0;
	struct infer_request *rq = xcalloc((size_t)n, sizeof(*rq));
	int longest = 0, total = 0;
	for (int i = 0; i < n; i++) {
		json_t *p = json_array_get(ps, (size_t)i);
		int len = (int)json_array_size(p);
		int32_t *ids = xmalloc((size_t)(len ? len : 1) * sizeof(int32_t));
		for (int t = 0; t < len; t++)
			ids[t] = (int32_t)json_integer_value(json_array_get(p, (size_t)t));
		rq[i] = (struct infer_request){ .prompt = ids, .nprompt = len, .max_new = max_new,
						.sampling = { temp, top_k, 0, seed + (uint64_t)i }, .eod = -1,
						.want_logprobs = true };
		longest = len + max_new > longest ? len + max_new : longest;
		total += len;
	}
	int64_t iter;
	struct ckpt_reader *r = ckpt_open_latest(argv[1], &iter);
	int mf = r ? ckpt_file_open(r, "model.h5") : -1;
	struct infer_engine e;
	if (mf < 0 || infer_init(&e, r, mf, longest, max_req, max_tokens ? max_tokens : total + n, NULL, NULL) < 0 || infer_generate(&e, rq, n) < 0)
		return DIE_EXIT_CODE;
	json_t *out = json_array();
	for (int i = 0; i < n; i++) {
		json_t *o = json_object(), *tk = json_array(), *lp = json_array();
		for (int t = 0; t < rq[i].nout; t++)
			json_array_append_new(tk, json_integer(rq[i].out[t]));
		for (int t = 0; t < rq[i].nprompt - 1 + rq[i].nout; t++)
			json_array_append_new(lp, json_real(rq[i].logprobs[t]));
		json_object_set_new(o, "tokens", tk);
		json_object_set_new(o, "logprobs", lp);
		json_array_append_new(out, o);
		free((void *)rq[i].prompt);
		infer_request_free(&rq[i]);
	}
	int rc = json_dump_file(out, argv[4], JSON_REAL_PRECISION(9));
	json_decref(out);
	json_decref(ps);
	free(rq);
	infer_free(&e);
	ckpt_close(r);
	return rc ? DIE_EXIT_CODE : 0;
}
