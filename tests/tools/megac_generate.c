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
 *
 *   megac_generate CKPT_DIR --steps STEPS.json OUT.json
 *
 * infer_step directly, on an engine of 2 slots of 32 positions: STEPS.json
 * is a list of steps, each a list of sequences [slot, pos, [id, ...]].
 * OUT.json: per step, null when the engine refused it (its message on
 * stderr), else per sequence [argmax, max, log-sum-exp] of its last
 * logits. For the engine's own checks (what a recurrent state refuses, a
 * slot that starts again).
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"
#include "infer/generate.h"

static json_t *last_summary(const float *lg, int V)
{
	int best = 0;
	for (int i = 1; i < V; i++)
		best = lg[i] > lg[best] ? i : best;
	double se = 0;
	for (int i = 0; i < V; i++)
		se += exp((double)lg[i] - lg[best]);
	json_t *o = json_array();
	json_array_append_new(o, json_integer(best));
	json_array_append_new(o, json_real(lg[best]));
	json_array_append_new(o, json_real(lg[best] + log(se)));
	return o;
}

static int run_steps(const char *dir, const char *steps_path, const char *out_path)
{
	json_error_t jerr;
	json_t *steps = json_load_file(steps_path, 0, &jerr);
	if (!json_is_array(steps))
		die("'%s': expected a list of steps", steps_path);
	int64_t iter;
	struct ckpt_reader *r = ckpt_open_latest(dir, &iter);
	int mf = r ? ckpt_file_open(r, "model.h5") : -1;
	struct infer_engine e;
	if (mf < 0 || infer_init(&e, r, mf, 32, 2, 64, NULL, NULL) < 0)
		return DIE_EXIT_CODE;
	json_t *out = json_array();
	int slot[64], pos[64], n[64];
	int32_t tok[64];
	float *last = xmalloc((size_t)64 * e.c.V * sizeof(float));
	for (size_t k = 0; k < json_array_size(steps); k++) {
		json_t *st = json_array_get(steps, k);
		int nseq = (int)json_array_size(st), N = 0;
		for (int q = 0; q < nseq && q < 64; q++) {
			json_t *sq = json_array_get(st, (size_t)q), *ids = json_array_get(sq, 2);
			slot[q] = (int)json_integer_value(json_array_get(sq, 0));
			pos[q] = (int)json_integer_value(json_array_get(sq, 1));
			n[q] = (int)json_array_size(ids);
			for (int t = 0; t < n[q] && N < 64; t++)
				tok[N++] = (int32_t)json_integer_value(json_array_get(ids, (size_t)t));
		}
		if (infer_step(&e, nseq, slot, pos, n, tok, last, NULL) < 0) {
			json_array_append_new(out, json_null());
			continue;
		}
		json_t *o = json_array();
		for (int q = 0; q < nseq; q++)
			json_array_append_new(o, last_summary(last + (size_t)q * e.c.V, e.c.V));
		json_array_append_new(out, o);
	}
	int rc = json_dump_file(out, out_path, JSON_REAL_PRECISION(9));
	json_decref(out);
	json_decref(steps);
	free(last);
	infer_free(&e);
	ckpt_close(r);
	return rc ? DIE_EXIT_CODE : 0;
}

int main(int argc, char **argv)
{
	log_init("megac_generate", 0, 1);
	if (argc == 5 && !strcmp(argv[2], "--steps"))
		return run_steps(argv[1], argv[3], argv[4]);
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
