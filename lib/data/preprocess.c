/*
 * preprocess.c - see preprocess.h.
 *
 * Work items are chunks of whole lines; results sit in a ring of `window`
 * slots indexed by chunk number, so the writer can wait for exactly the
 * next one. The reader may run at most `window` chunks ahead of the writer;
 * that bound is what keeps memory independent of the corpus.
 *
 * Errors in a record are found by a worker but reported by the writer, in
 * input order, so the message is the same whatever the thread timing: with
 * --skip-bad-lines every bad line is counted (and the first few shown);
 * without it the first bad line ends the run.
 */
#include "preprocess.h"
#include "base/error.h"
#include "base/sbuf.h"
#include "base/timer.h"
#include "base/xalloc.h"
#include "data/input.h"
#include "data/jsonl_fast.h"

#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#define SHOW_SKIPPED 10

struct key_out {
	struct tok_ids ids;       /* tokens of every document in the chunk */
	int32_t *seqlens;         /* sequence lengths, all documents */
	size_t n_seqlens, cap_seqlens;
	uint32_t *doc_seqs;       /* sequences per document */
	size_t mark_ids, mark_seqs; /* where the current line started, to undo it */
};

struct result {
	uint64_t chunk;           /* chunk number; UINT64_MAX = slot empty */
	uint64_t n_docs;
	uint32_t *doc_bytes;      /* JSONL bytes per document */
	size_t cap_docs;
	struct key_out *keys;
	uint64_t n_bad, n_blank;
	struct sbuf skipped;      /* messages of the first bad lines, each NUL-terminated */
	char *fatal;              /* a record error (no --skip-bad-lines) or a read error */
};

struct job {
	struct input_chunk c;
	uint64_t chunk;
};

struct pipe {
	const struct prep_config *cfg;
	struct input_reader *reader;
	pthread_mutex_t mu;
	pthread_cond_t cv_job, cv_result, cv_space;
	struct job *jobs;          /* FIFO ring of window entries */
	size_t job_head, job_count;
	struct result *results;    /* window slots */
	size_t window;
	uint64_t next_read;        /* chunks handed out by the reader */
	uint64_t next_write;       /* next chunk the writer needs */
	bool reader_done;
	bool stop;
};

static void key_out_reset(struct key_out *k)
{
	k->ids.n = 0;
	k->n_seqlens = 0;
}

static void push_seqlen(struct key_out *k, int32_t len)
{
	xgrow(&k->seqlens, &k->cap_seqlens, k->n_seqlens + 1, sizeof(int32_t));
	k->seqlens[k->n_seqlens++] = len;
}

static const char *json_type_name(const json_t *v)
{
	switch (json_typeof(v)) {
	case JSON_OBJECT:
		return "an object";
	case JSON_ARRAY:
		return "a list";
	case JSON_STRING:
		return "a string";
	case JSON_INTEGER:
	case JSON_REAL:
		return "a number";
	case JSON_TRUE:
	case JSON_FALSE:
		return "a boolean";
	case JSON_NULL:
		return "null";
	}
	return "?";
}

/* Tokenize one sentence into key output k; -1 with *why on failure. */
static int encode_sentence(struct tok_session *s, struct key_out *k, const char *text, size_t text_len, char *why,
			   size_t whylen, const char *key, int elem)
{
	size_t before = k->ids.n;
	if (tok_encode(s, text, text_len, &k->ids) < 0) {
		if (elem >= 0)
			snprintf(why, whylen, "key '%s', sentence %d: %s", key, elem, tok_session_error(s));
		else
			snprintf(why, whylen, "key '%s': %s", key, tok_session_error(s));
		return -1;
	}
	size_t n = k->ids.n - before;
	if (n > INT32_MAX) {
		snprintf(why, whylen, "key '%s': a sentence of %zu tokens does not fit Megatron's int32 lengths",
			 key, n);
		return -1;
	}
	if (n)
		push_seqlen(k, (int32_t)n);
	return 0;
}

/* The end of a key's document: EOD and the sequence count. */
static void end_key(const struct prep_config *cfg, struct result *res, struct key_out *ko, size_t seq_before)
{
	if (cfg->append_eod && ko->n_seqlens > seq_before) {
		tok_ids_push(&ko->ids, (int32_t)tok_eod(cfg->tok));
		ko->seqlens[ko->n_seqlens - 1]++;
	}
	ko->doc_seqs[res->n_docs] = (uint32_t)(ko->n_seqlens - seq_before);
}

/* One JSONL line to one document per key. 0 ok, 1 blank line, -1 bad (why).
 * The common line (an object with a string under each key) takes
 * jsonl_fast; any other, jansson, which also words the errors. */
static int process_line(const struct prep_config *cfg, struct tok_session *s, struct jsonl_fast_value *fv,
			struct result *res, const char *line, size_t len, char *why, size_t whylen)
{
	while (len && (line[len - 1] == '\n' || line[len - 1] == '\r'))
		len--;
	size_t i = 0;
	while (i < len && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r'))
		i++;
	if (i == len)
		return 1;
	if (jsonl_fast_strings(line, len, (const char *const *)cfg->keys, cfg->n_keys, fv)) {
		for (int k = 0; k < cfg->n_keys; k++) {
			struct key_out *ko = &res->keys[k];
			size_t seq_before = ko->n_seqlens;
			if (encode_sentence(s, ko, fv[k].s, fv[k].len, why, whylen, cfg->keys[k], -1) < 0)
				return -1;
			end_key(cfg, res, ko, seq_before);
		}
		return 0;
	}
	json_error_t je;
	json_t *root = json_loadb(line, len, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &je);
	if (!root) {
		if (strstr(je.text, "unable to decode byte"))
			snprintf(why, whylen, "invalid UTF-8 (%s, column %d)", je.text, je.column);
		else
			snprintf(why, whylen, "invalid JSON at column %d: %s", je.column, je.text);
		return -1;
	}
	int ret = 0;
	if (!json_is_object(root)) {
		snprintf(why, whylen, "expected a JSON object, found %s", json_type_name(root));
		ret = -1;
		goto out;
	}
	for (int k = 0; k < cfg->n_keys && !ret; k++) {
		const char *key = cfg->keys[k];
		struct key_out *ko = &res->keys[k];
		json_t *v = json_object_get(root, key);
		size_t seq_before = ko->n_seqlens;
		if (!v) {
			struct sbuf have = SBUF_INIT;
			const char *name;
			json_t *val;
			json_object_foreach(root, name, val) {
				(void)val;
				sbuf_addf(&have, "%s'%s'", have.len ? ", " : "", name);
			}
			snprintf(why, whylen, "no key '%s' (the object has %s)", key, have.len ? have.buf : "no keys");
			sbuf_release(&have);
			ret = -1;
		} else if (json_is_string(v)) {
			ret = encode_sentence(s, ko, json_string_value(v), json_string_length(v), why, whylen, key, -1);
		} else if (json_is_array(v)) {
			size_t idx;
			json_t *e;
			json_array_foreach(v, idx, e) {
				if (!json_is_string(e)) {
					snprintf(why, whylen, "key '%s': sentence %zu is %s, expected a string", key, idx,
						 json_type_name(e));
					ret = -1;
					break;
				}
				if ((ret = encode_sentence(s, ko, json_string_value(e), json_string_length(e), why, whylen,
							   key, (int)idx)) < 0)
					break;
			}
		} else {
			snprintf(why, whylen, "key '%s' is %s, expected a string or a list of strings", key,
				 json_type_name(v));
			ret = -1;
		}
		if (!ret)
			end_key(cfg, res, ko, seq_before);
	}
out:
	json_decref(root);
	return ret;
}

/* A bad line: the run's error (true), or counted and maybe shown with --skip-bad-lines (false). */
static bool bad_line(const struct prep_config *cfg, struct result *res, const char *src, uint64_t lineno,
		     const char *why)
{
	if (!cfg->skip_bad_lines) {
		res->fatal = xasprintf("%s:%llu: %s", src, (unsigned long long)lineno, why);
		return true;
	}
	if (res->n_bad < SHOW_SKIPPED) {
		sbuf_addf(&res->skipped, "%s:%llu: %s", src, (unsigned long long)lineno, why);
		sbuf_addch(&res->skipped, 0);
	}
	res->n_bad++;
	return false;
}

static void process_chunk(struct pipe *p, struct tok_session *s, struct jsonl_fast_value *fv, const struct job *j,
			  struct result *res)
{
	const struct prep_config *cfg = p->cfg;
	res->n_docs = res->n_bad = res->n_blank = 0;
	sbuf_reset(&res->skipped);
	res->fatal = NULL;
	for (int k = 0; k < cfg->n_keys; k++)
		key_out_reset(&res->keys[k]);
	const char *src = j->c.source_name;
	uint64_t lineno = j->c.first_line;
	char why[1024];
	if (j->c.too_long) { /* the reader kept none of it */
		snprintf(why, sizeof(why), "the line is longer than --max-document-bytes %llu",
			 (unsigned long long)cfg->max_document_bytes);
		bad_line(cfg, res, src, lineno, why);
		return;
	}
	for (size_t off = 0; off < j->c.len; lineno += j->c.line_step) {
		const char *line = j->c.data + off;
		const char *nl = memchr(line, '\n', j->c.len - off);
		size_t len = nl ? (size_t)(nl - line) + 1 : j->c.len - off;
		off += len;
		for (int k = 0; k < cfg->n_keys; k++) {
			res->keys[k].mark_ids = res->keys[k].ids.n;
			res->keys[k].mark_seqs = res->keys[k].n_seqlens;
		}
		if (res->n_docs + 1 > res->cap_docs) {
			size_t cap = res->cap_docs ? 2 * res->cap_docs : 256;
			res->doc_bytes = xrealloc(res->doc_bytes, cap * sizeof(uint32_t));
			for (int k = 0; k < cfg->n_keys; k++)
				res->keys[k].doc_seqs = xrealloc(res->keys[k].doc_seqs, cap * sizeof(uint32_t));
			res->cap_docs = cap;
		}
		int r = process_line(cfg, s, fv, res, line, len, why, sizeof(why));
		if (r == 1) {
			res->n_blank++;
			continue;
		}
		if (r < 0) {
			for (int k = 0; k < cfg->n_keys; k++) {
				res->keys[k].ids.n = res->keys[k].mark_ids;
				res->keys[k].n_seqlens = res->keys[k].mark_seqs;
			}
			if (bad_line(cfg, res, src, lineno, why))
				return;
			continue;
		}
		res->doc_bytes[res->n_docs++] = (uint32_t)(len > UINT32_MAX ? UINT32_MAX : len);
	}
}

/* ------------------------------------------------------------ threads */

static void *reader_main(void *arg)
{
	struct pipe *p = arg;
	for (;;) {
		struct input_chunk c;
		int k = input_reader_next(p->reader, &c);
		pthread_mutex_lock(&p->mu);
		if (k <= 0 || p->stop) {
			if (k == 1)
				free(c.data);
			if (k < 0 && !p->stop) {
				/* deliver the read error in order, as the chunk that was not read */
				struct result *res = &p->results[p->next_read % p->window];
				while (!p->stop && p->next_read - p->next_write >= p->window)
					pthread_cond_wait(&p->cv_space, &p->mu);
				if (!p->stop) {
					res->n_docs = res->n_bad = res->n_blank = 0;
					sbuf_reset(&res->skipped);
					res->fatal = xstrdup(input_reader_error(p->reader));
					res->chunk = p->next_read++;
					pthread_cond_broadcast(&p->cv_result);
				}
			}
			p->reader_done = true;
			pthread_cond_broadcast(&p->cv_job);
			pthread_cond_broadcast(&p->cv_result);
			pthread_mutex_unlock(&p->mu);
			return NULL;
		}
		while (!p->stop && p->next_read - p->next_write >= p->window)
			pthread_cond_wait(&p->cv_space, &p->mu);
		if (p->stop) {
			free(c.data);
			p->reader_done = true;
			pthread_cond_broadcast(&p->cv_job);
			pthread_cond_broadcast(&p->cv_result);
			pthread_mutex_unlock(&p->mu);
			return NULL;
		}
		struct job *j = &p->jobs[(p->job_head + p->job_count) % p->window];
		j->c = c;
		j->chunk = p->next_read++;
		p->job_count++;
		pthread_cond_signal(&p->cv_job);
		pthread_mutex_unlock(&p->mu);
	}
}

static void *worker_main(void *arg)
{
	struct pipe *p = arg;
	struct tok_session *s = tok_session_new(p->cfg->tok);
	struct jsonl_fast_value *fv = xcalloc((size_t)p->cfg->n_keys, sizeof(*fv));
	for (;;) {
		pthread_mutex_lock(&p->mu);
		while (!p->stop && !p->job_count && !p->reader_done)
			pthread_cond_wait(&p->cv_job, &p->mu);
		if (p->stop || !p->job_count) {
			pthread_mutex_unlock(&p->mu);
			break;
		}
		struct job j = p->jobs[p->job_head];
		p->job_head = (p->job_head + 1) % p->window;
		p->job_count--;
		struct result *res = &p->results[j.chunk % p->window];
		pthread_mutex_unlock(&p->mu);

		/* the slot is ours: the reader only hands out chunks whose slot the writer has freed */
		process_chunk(p, s, fv, &j, res);
		free(j.c.data);

		pthread_mutex_lock(&p->mu);
		res->chunk = j.chunk;
		pthread_cond_broadcast(&p->cv_result);
		pthread_mutex_unlock(&p->mu);
	}
	tok_session_free(s);
	jsonl_fast_values_free(fv, p->cfg->n_keys);
	return NULL;
}

static void progress_line(const struct prep_stats *st, double elapsed)
{
	info("Processed %llu documents (%.1f docs/s, %.2f MB/s, %.0f tokens/s).",
	     (unsigned long long)st->documents, (double)st->documents / elapsed,
	     (double)st->bytes / elapsed / (1 << 20), (double)st->tokens / elapsed);
}

/* Append one finished chunk to the datasets. 1 = stop (max documents), 0 = go on, -1 = error. */
static int write_result(const struct prep_config *cfg, struct result *res, struct prep_stats *st,
			const struct progress *pr)
{
	size_t *id_off = xcalloc((size_t)cfg->n_keys, sizeof(size_t));
	size_t *seq_off = xcalloc((size_t)cfg->n_keys, sizeof(size_t));
	int ret = 0;
	for (uint64_t d = 0; d < res->n_docs && !ret; d++) {
		for (int k = 0; k < cfg->n_keys; k++) {
			struct key_out *ko = &res->keys[k];
			uint32_t ns = ko->doc_seqs[d];
			size_t ntok = 0;
			for (uint32_t q = 0; q < ns; q++)
				ntok += (size_t)ko->seqlens[seq_off[k] + q];
			if (cfg->writers &&
			    idx_writer_add_document(&cfg->writers[k], ko->ids.v + id_off[k], ntok,
						    ko->seqlens + seq_off[k], ns) < 0) {
				ret = -1;
				break;
			}
			id_off[k] += ntok;
			seq_off[k] += ns;
			st->tokens += ntok;
		}
		if (ret)
			break;
		st->documents++;
		st->bytes += res->doc_bytes[d];
		if (cfg->log_interval > 0 && st->documents % (uint64_t)cfg->log_interval == 0)
			progress_line(st, progress_elapsed(pr));
		if (cfg->max_documents >= 0 && st->documents >= (uint64_t)cfg->max_documents)
			ret = 1;
	}
	free(id_off);
	free(seq_off);
	return ret;
}

int prep_run(const struct prep_config *cfg, struct prep_stats *st)
{
	memset(st, 0, sizeof(*st));
	if (tok_eod(cfg->tok) < 0 && cfg->append_eod)
		BUG("prep_run with --append-eod and no EOD id; the caller checks this first");
	struct pipe p;
	memset(&p, 0, sizeof(p));
	p.cfg = cfg;
	int workers = cfg->workers > 0 ? cfg->workers : 1;
	p.window = 2 * (size_t)workers + 2;
	p.reader = input_reader_new(cfg->files, cfg->n_files, cfg->chunk_size, cfg->stride);
	input_reader_set_max_line(p.reader, cfg->max_document_bytes);
	p.jobs = xcalloc(p.window, sizeof(*p.jobs));
	p.results = xcalloc(p.window, sizeof(*p.results));
	for (size_t i = 0; i < p.window; i++) {
		p.results[i].chunk = UINT64_MAX;
		p.results[i].keys = xcalloc((size_t)cfg->n_keys, sizeof(struct key_out));
	}
	pthread_mutex_init(&p.mu, NULL);
	pthread_cond_init(&p.cv_job, NULL);
	pthread_cond_init(&p.cv_result, NULL);
	pthread_cond_init(&p.cv_space, NULL);

	struct progress pr;
	progress_start(&pr);
	pthread_t reader, *wt = xcalloc((size_t)workers, sizeof(pthread_t));
	int started = 0, ret = 0;
	bool reader_started = pthread_create(&reader, NULL, reader_main, &p) == 0;
	if (!reader_started)
		ret = error("cannot start the reader thread");
	for (; !ret && started < workers; started++)
		if (pthread_create(&wt[started], NULL, worker_main, &p)) {
			ret = error("cannot start worker thread %d of %d (try fewer --workers)", started + 1, workers);
			break;
		}
	if (ret) {
		input_reader_stop(p.reader);
		pthread_mutex_lock(&p.mu);
		p.stop = true;
		pthread_cond_broadcast(&p.cv_job);
		pthread_cond_broadcast(&p.cv_space);
		pthread_mutex_unlock(&p.mu);
	}

	uint64_t shown = 0;
	while (!ret) {
		pthread_mutex_lock(&p.mu);
		struct result *res = &p.results[p.next_write % p.window];
		while (res->chunk != p.next_write && !(p.reader_done && p.next_write == p.next_read))
			pthread_cond_wait(&p.cv_result, &p.mu);
		if (res->chunk != p.next_write) { /* everything read and written */
			pthread_mutex_unlock(&p.mu);
			break;
		}
		pthread_mutex_unlock(&p.mu);

		for (size_t off = 0; off < res->skipped.len; off += strlen(res->skipped.buf + off) + 1)
			if (shown++ < SHOW_SKIPPED)
				warning("skipping %s", res->skipped.buf + off);
		st->bad_lines += res->n_bad;
		st->blank_lines += res->n_blank;
		if (res->fatal) {
			ret = error("%s", res->fatal);
			free(res->fatal);
			res->fatal = NULL;
		} else {
			ret = write_result(cfg, res, st, &pr);
		}

		pthread_mutex_lock(&p.mu);
		res->chunk = UINT64_MAX;
		p.next_write++;
		if (ret) {
			p.stop = true;
			input_reader_stop(p.reader);
		}
		pthread_cond_broadcast(&p.cv_space);
		pthread_cond_broadcast(&p.cv_job);
		pthread_mutex_unlock(&p.mu);
		if (ret)
			break;
	}
	for (int i = 0; i < started; i++)
		pthread_join(wt[i], NULL);
	if (reader_started)
		pthread_join(reader, NULL);
	st->seconds = progress_elapsed(&pr);
	st->sources = input_reader_n_sources(p.reader);

	/* chunks read ahead but never written */
	for (size_t i = 0; i < p.job_count; i++)
		free(p.jobs[(p.job_head + i) % p.window].c.data);
	for (size_t i = 0; i < p.window; i++) {
		struct result *res = &p.results[i];
		for (int k = 0; k < cfg->n_keys; k++) {
			tok_ids_free(&res->keys[k].ids);
			free(res->keys[k].seqlens);
			free(res->keys[k].doc_seqs);
		}
		free(res->keys);
		free(res->doc_bytes);
		free(res->fatal);
		sbuf_release(&res->skipped);
	}
	free(p.jobs);
	free(p.results);
	free(wt);
	input_reader_free(p.reader);
	pthread_mutex_destroy(&p.mu);
	pthread_cond_destroy(&p.cv_job);
	pthread_cond_destroy(&p.cv_result);
	pthread_cond_destroy(&p.cv_space);
	return ret < 0 ? -1 : 0;
}
