/*
 * gpt_data.c - see gpt_data.h. The builder follows Megatron's
 * BlendedMegatronDatasetBuilder.build() case by case
 * (megatron/core/datasets/blended_megatron_dataset_builder.py):
 *
 *   one prefix, no weight        -> a GPTDataset per split
 *   several prefixes, weights    -> GPTDatasets with a surplus, a BlendedDataset per split
 *   several prefixes, no weights -> one-epoch GPTDatasets blended by their lengths
 *                                   (exhaustively when the split has no size)
 *   --train/valid/test-data-path -> each split on its own, by the same rules
 *   --mock-data                  -> MockGPTDataset over synthetic sequences
 *
 * Every dataset carries Megatron's "unique identifiers" JSON; its md5 names
 * the cache files, so the caches Megatron wrote are hits here and the other
 * way round.
 */
#include "gpt_data.h"
#include "base/error.h"
#include "base/jsonio.h"
#include "base/md5.h"
#include "base/pyjson.h"
#include "base/sbuf.h"
#include "base/tempfile.h"
#include "base/xalloc.h"
#include "data/batch_schedule.h"
#include "data/np_random.h"
#include "data/npy.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

const char *const gpt_split_names[GPT_NSPLITS] = { "train", "valid", "test" };

#define MOCK_SEQUENCES 100000
#define LEGACY_SPLIT "969, 30, 1"

struct gpt_low {
	char *prefix;             /* NULL: the mock dataset */
	struct idx_reader reader;
	struct gpt_lowlevel low;
};

/* ------------------------------------------------------------ helpers */

/* numpy.sum of a float64 vector: pairwise summation, blocks of 8. */
static double np_sum(const double *a, size_t n)
{
	if (n < 8) {
		double r = 0.;
		for (size_t i = 0; i < n; i++)
			r += a[i];
		return r;
	}
	if (n <= 128) {
		double r[8];
		size_t i;
		for (int j = 0; j < 8; j++)
			r[j] = a[j];
		for (i = 8; i < n - n % 8; i += 8)
			for (int j = 0; j < 8; j++)
				r[j] += a[i + j];
		double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
		for (; i < n; i++)
			res += a[i];
		return res;
	}
	size_t n2 = n / 2;
	n2 -= n2 % 8;
	return np_sum(a, n2) + np_sum(a + n2, n - n2);
}

/* Megatron's utils.normalize(): w / numpy.sum(w). */
static void normalize(const double *w, int n, double *out)
{
	double s = np_sum(w, (size_t)n);
	for (int i = 0; i < n; i++)
		out[i] = w[i] / s;
}

/* "[w] prefix ..." -> prefixes and (maybe) weights, as Megatron's
 * get_blend_from_list (megatron/core/datasets/utils.py). */
struct blend_list {
	int n;
	char **prefixes;
	double *weights; /* NULL: none given */
};

static void blend_parse(char *const *items, int n_items, struct blend_list *b)
{
	memset(b, 0, sizeof(*b));
	bool weighted = n_items % 2 == 0 && n_items > 0;
	for (int i = 0; weighted && i < n_items; i += 2) {
		char *end;
		errno = 0;
		strtod(items[i], &end);
		if (end == items[i] || *end || errno)
			weighted = false;
	}
	b->n = weighted ? n_items / 2 : n_items;
	b->prefixes = xcalloc((size_t)b->n, sizeof(char *));
	if (weighted)
		b->weights = xcalloc((size_t)b->n, sizeof(double));
	for (int i = 0; i < b->n; i++) {
		const char *p = weighted ? items[2 * i + 1] : items[i];
		while (*p == ' ' || *p == '\t' || *p == '\n')
			p++;
		size_t len = strlen(p);
		while (len && (p[len - 1] == ' ' || p[len - 1] == '\t' || p[len - 1] == '\n'))
			len--;
		b->prefixes[i] = xstrndup(p, len);
		if (weighted)
			b->weights[i] = strtod(items[2 * i], NULL);
	}
}

static void blend_free(struct blend_list *b)
{
	for (int i = 0; i < b->n; i++)
		free(b->prefixes[i]);
	free(b->prefixes);
	free(b->weights);
}

/* Python's repr() of a str, for str(list_of_str) in tokenizer identifiers. */
static void py_repr_str(struct sbuf *sb, const char *s)
{
	char q = strchr(s, '\'') && !strchr(s, '"') ? '"' : '\'';
	sbuf_addch(sb, q);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		if (c == '\\' || c == (unsigned char)q)
			sbuf_addf(sb, "\\%c", c);
		else if (c == '\n')
			sbuf_addstr(sb, "\\n");
		else if (c == '\r')
			sbuf_addstr(sb, "\\r");
		else if (c == '\t')
			sbuf_addstr(sb, "\\t");
		else if (c < 0x20 || c == 0x7f)
			sbuf_addf(sb, "\\x%02x", c);
		else
			sbuf_addch(sb, (char)c);
	}
	sbuf_addch(sb, q);
}

static json_t *py_str_list(const struct strlist *l)
{
	struct sbuf sb = SBUF_INIT;
	sbuf_addch(&sb, '[');
	for (int i = 0; i < l->n; i++) {
		if (i)
			sbuf_addstr(&sb, ", ");
		py_repr_str(&sb, l->v[i]);
	}
	sbuf_addch(&sb, ']');
	json_t *j = json_string(sb.buf);
	sbuf_release(&sb);
	return j;
}

static json_t *py_str_or_none(const char *s)
{
	return json_string(s ? s : "None");
}

static json_t *py_bool(bool b)
{
	return json_string(b ? "True" : "False");
}

/*
 * Megatron's MegatronTokenizerText.unique_identifiers: the class, the
 * tokenizer path, then every keyword argument build_tokenizer() passed,
 * in its order, through str().
 */
static json_t *tokenizer_identifiers(const struct args *a)
{
	json_t *t = json_object();
	json_object_set_new(t, "class", json_string("megatron.core.tokenizers.text.text_tokenizer.MegatronTokenizerText"));
	const char *type = a->tokenizer_type ? a->tokenizer_type : "";
	if (!strcmp(type, "NullTokenizer")) {
		json_object_set_new(t, "tokenizer_path", json_null());
		if (a->vocab_size > 0)
			json_object_set_new(t, "vocab_size", json_sprintf("%lld", (long long)a->vocab_size));
		if (a->null_tokenizer_eod_id >= 0)
			json_object_set_new(t, "eod_id", json_sprintf("%lld", (long long)a->null_tokenizer_eod_id));
		json_object_set_new(t, "pad_id", json_sprintf("%lld", (long long)a->null_tokenizer_pad_id));
	} else if (!strcmp(type, "HuggingFaceTokenizer")) {
		json_object_set_new(t, "tokenizer_path", a->tokenizer_model ? json_string(a->tokenizer_model) : json_null());
		json_object_set_new(t, "chat_template", py_str_or_none(NULL));
		json_object_set_new(t, "vocab_file", py_str_or_none(a->vocab_file));
		json_object_set_new(t, "merges_file", py_str_or_none(a->merge_file));
		json_object_set_new(t, "additional_special_tokens", py_str_list(&a->tokenizer_special_tokens));
		json_object_set_new(t, "use_fast", py_bool(!a->tokenizer_hf_no_use_fast));
		json_object_set_new(t, "trust_remote_code", py_bool(a->trust_remote_code));
		json_object_set_new(t, "include_special_tokens", py_bool(!a->tokenizer_hf_no_include_special_tokens));
		json_object_set_new(t, "use_gigatoken", py_bool(a->use_gigatoken));
	} else if (!strcmp(type, "SentencePieceTokenizer") || !strcmp(type, "GPTSentencePieceTokenizer") ||
		   !strcmp(type, "Llama2Tokenizer")) {
		/* Megatron's SP_TOKENIZERS branch; special tokens and legacy are refused, so None and False */
		json_object_set_new(t, "tokenizer_path", a->tokenizer_model ? json_string(a->tokenizer_model) : json_null());
		json_object_set_new(t, "chat_template", py_str_or_none(NULL));
		json_object_set_new(t, "ignore_extra_whitespaces",
				    py_bool(a->tokenizer_sentencepiece_ignore_extra_whitespaces));
		json_object_set_new(t, "legacy", py_bool(false));
		json_object_set_new(t, "special_tokens", py_str_or_none(NULL));
	} else if (!strcmp(type, "TikTokenizer")) {
		json_object_set_new(t, "tokenizer_path", a->tokenizer_model ? json_string(a->tokenizer_model) : json_null());
		json_object_set_new(t, "chat_template", py_str_or_none(NULL));
		if (a->tiktoken_pattern)
			json_object_set_new(t, "pattern", json_string(a->tiktoken_pattern));
		if (a->vocab_size > 0)
			json_object_set_new(t, "vocab_size", json_sprintf("%lld", (long long)a->vocab_size));
		json_object_set_new(t, "num_special_tokens",
				    json_sprintf("%lld", (long long)a->tiktoken_num_special_tokens));
		json_object_set_new(t, "special_tokens", a->tokenizer_special_tokens.n
								 ? py_str_list(&a->tokenizer_special_tokens)
								 : py_str_or_none(NULL));
	} else { /* GPT2BPETokenizer, as Megatron's MEGATRON_TOKENIZERS branch */
		json_object_set_new(t, "tokenizer_path", json_string(type));
		json_object_set_new(t, "additional_special_tokens", py_str_list(&a->tokenizer_special_tokens));
		json_object_set_new(t, "vocab_file", py_str_or_none(a->vocab_file));
		json_object_set_new(t, "merges_file", py_str_or_none(a->merge_file));
		json_object_set_new(t, "use_fast", py_bool(!a->tokenizer_hf_no_use_fast));
		json_object_set_new(t, "trust_remote_code", py_bool(a->trust_remote_code));
		json_object_set_new(t, "include_special_tokens", py_bool(!a->tokenizer_hf_no_include_special_tokens));
		json_object_set_new(t, "use_gigatoken", py_bool(a->use_gigatoken));
	}
	return t;
}

/* Whitespace-separated words of text appended to l (Python's str.split()). */
static void split_words(const char *text, struct strlist *l)
{
	const char *p = text;
	while (*p) {
		while (*p && isspace((unsigned char)*p))
			p++;
		const char *w = p;
		while (*p && !isspace((unsigned char)*p))
			p++;
		if (p > w) {
			l->v = xrealloc(l->v, (size_t)(l->n + 1) * sizeof(*l->v));
			l->v[l->n++] = xstrndup(w, (size_t)(p - w));
		}
	}
}

/* --data-args-path: the --data-path list, read from a file (Megatron: f.read().split()). */
static int read_blend_file(const char *path, struct strlist *out)
{
	struct sbuf sb = SBUF_INIT;
	if (sbuf_read_file(&sb, path) < 0) {
		sbuf_release(&sb);
		return -1;
	}
	sbuf_addch(&sb, 0);
	split_words(sb.buf, out);
	sbuf_release(&sb);
	if (!out->n)
		return error("--data-args-path %s: the file lists no dataset", path);
	return 0;
}

/* --per-split-data-args-path: JSON {"train": ..., "valid": ..., "test": ...},
 * each a list of words or one string of them (Megatron splits strings). */
static int read_per_split_file(const char *path, struct strlist out[GPT_NSPLITS])
{
	json_t *j = jsonio_load_file(path);
	if (!j)
		return -1;
	int ret = 0;
	if (!json_is_object(j))
		ret = error("--per-split-data-args-path %s: expected a JSON object with \"train\", \"valid\" and "
			    "\"test\"", path);
	for (int s = 0; s < GPT_NSPLITS && !ret; s++) {
		json_t *v = json_object_get(j, gpt_split_names[s]);
		if (json_is_string(v)) {
			split_words(json_string_value(v), &out[s]);
		} else if (json_is_array(v)) {
			size_t i;
			json_t *e;
			json_array_foreach(v, i, e) {
				if (!json_is_string(e)) {
					ret = error("%s: \"%s\"[%zu] must be a string", path, gpt_split_names[s], i);
					break;
				}
				split_words(json_string_value(e), &out[s]);
			}
		} else {
			ret = error("%s: \"%s\" must be a list of dataset prefixes (with optional weights) or a "
				    "string of them", path, gpt_split_names[s]);
		}
	}
	json_decref(j);
	return ret;
}

void gpt_data_config_release(struct gpt_data_config *cfg)
{
	json_decref(cfg->tokenizer_ident);
	cfg->tokenizer_ident = NULL;
	for (int i = 0; i <= GPT_NSPLITS; i++)
		strlist_free(&cfg->owned[i]);
}

int gpt_data_config_from_args(const struct args *a, const struct tokenizer *tok, int dp, struct gpt_data_config *c)
{
	memset(c, 0, sizeof(*c));
	if (a->seq_length < 1)
		return error("--seq-length must be at least 1");
	if (a->seed < 0 || a->seed > UINT32_MAX)
		return error("--seed %lld: numpy's RandomState takes 0 to 2^32-1", (long long)a->seed);
	/* Megatron's default global batch: one micro-batch per data-parallel rank */
	int64_t gbs = a->global_batch_size > 0 ? a->global_batch_size : a->micro_batch_size * dp;
	if (gbs < 1)
		return error("--global-batch-size (or --micro-batch-size) is needed to count samples");
	int64_t train_iters = a->train_iters;
	int64_t train_samples;
	struct batch_schedule bss = { 0 };
	if (a->step_batch_size_schedule && batch_schedule_parse(&bss, a->step_batch_size_schedule, a->seq_length) < 0)
		return -1;
	if (a->train_samples >= 0) {
		if (a->train_iters >= 0) {
			batch_schedule_free(&bss);
			return error("--train-iters and --train-samples exclude each other");
		}
		train_samples = a->train_samples;
		train_iters = bss.n ? batch_schedule_iters(&bss, a->train_samples) : a->train_samples / gbs;
	} else if (a->train_iters >= 0) {
		/* with a batch schedule Megatron counts train_iters x micro-batch x DP
		 * samples, fewer than the iterations take; megac counts what they take */
		train_samples = bss.n ? batch_schedule_samples(&bss, a->train_iters) : a->train_iters * gbs;
	} else {
		return error("one of --train-iters and --train-samples is required");
	}
	batch_schedule_free(&bss);
	/* valid and test sizes: Megatron's get_train_valid_test_num_samples (training.py) */
	int64_t eval = a->eval_iters * gbs, valid;
	if (a->full_validation) {
		valid = -1;
	} else if (a->skip_train || eval == 0) {
		valid = eval; /* --eval-iters 0: no validation, so no interval to count it by */
	} else {
		if (a->eval_interval < 1)
			return error("--eval-interval is needed to count validation samples (or use --full-validation)");
		valid = (train_iters / a->eval_interval + 1) * eval;
	}
	c->num_samples[GPT_TRAIN] = train_samples;
	c->num_samples[GPT_VALID] = valid;
	c->num_samples[GPT_TEST] = eval;

	c->blend = a->data_path.v;
	c->n_blend = a->data_path.n;
	c->split_blend[GPT_TRAIN] = a->train_data_path.v;
	c->n_split_blend[GPT_TRAIN] = a->train_data_path.n;
	c->split_blend[GPT_VALID] = a->valid_data_path.v;
	c->n_split_blend[GPT_VALID] = a->valid_data_path.n;
	c->split_blend[GPT_TEST] = a->test_data_path.v;
	c->n_split_blend[GPT_TEST] = a->test_data_path.n;
	bool per_split = a->train_data_path.n || a->valid_data_path.n || a->test_data_path.n;
	if (a->data_args_path) {
		if (a->data_path.n)
			return error("--data-args-path and --data-path are mutually exclusive");
		if (read_blend_file(a->data_args_path, &c->owned[GPT_NSPLITS]) < 0)
			return -1;
		c->blend = c->owned[GPT_NSPLITS].v;
		c->n_blend = c->owned[GPT_NSPLITS].n;
	}
	if (a->per_split_data_args_path) {
		if (per_split)
			return error("--per-split-data-args-path excludes --train-data-path/--valid-data-path/"
				     "--test-data-path");
		if (read_per_split_file(a->per_split_data_args_path, c->owned) < 0)
			return -1;
		for (int s = 0; s < GPT_NSPLITS; s++) {
			c->split_blend[s] = c->owned[s].v;
			c->n_split_blend[s] = c->owned[s].n;
		}
		per_split = true;
	}
	if (per_split && c->n_blend)
		return error("--data-path excludes --train-data-path/--valid-data-path/--test-data-path");
	if (per_split && a->split)
		return error("--split applies to --data-path, not to per-split data paths");
	c->mock = a->mock_data || (!per_split && !c->n_blend);
	if (c->mock && (c->n_blend || per_split))
		return error("--mock-data excludes --data-path and the per-split data paths");
	if (c->mock)
		c->split = "1,1,1";
	else if (!per_split)
		c->split = a->split ? a->split : LEGACY_SPLIT;
	if (!c->mock && !per_split && !a->split)
		warning("--split not given: using Megatron's legacy default \"%s\"", LEGACY_SPLIT);
	c->seq_length = a->seq_length;
	c->seed = (uint32_t)a->seed;
	c->cache_path = a->data_cache_path;
	c->surplus = a->mid_level_dataset_surplus;
	c->vocab_size = tok_vocab_size(tok);
	c->sample.eod = tok_eod(tok);
	c->sample.pad = !strcmp(a->tokenizer_type, "NullTokenizer") ? a->null_tokenizer_pad_id : tok_pad(tok);
	if (c->sample.pad >= 0 && c->sample.pad == c->sample.eod)
		c->sample.pad = -1; /* Megatron: a pad id that is another special id is no pad */
	c->sample.eod_mask_loss = a->eod_mask_loss;
	c->sample.reset_position_ids = a->reset_position_ids;
	c->sample.reset_attention_mask = a->reset_attention_mask;
	c->tokenizer_ident = tokenizer_identifiers(a);
	c->write_cache = true;
	return 0;
}

/* ------------------------------------------------------------ low level */

static struct gpt_low *get_low(struct gpt_data *d, const char *prefix)
{
	for (int i = 0; i < d->n_lows; i++) {
		const char *p = d->lows[i]->prefix;
		if ((!p && !prefix) || (p && prefix && !strcmp(p, prefix)))
			return d->lows[i];
	}
	struct gpt_low *l = xcalloc(1, sizeof(*l));
	if (prefix) {
		if (idx_reader_open(&l->reader, prefix, false) < 0) {
			free(l);
			return NULL;
		}
		l->prefix = xstrdup(prefix);
		gpt_lowlevel_from_reader(&l->low, &l->reader);
	} else {
		int32_t *lengths = xmalloc(MOCK_SEQUENCES * sizeof(int32_t));
		if (np_mock_lengths(lengths, MOCK_SEQUENCES, 0, 1, 4096) < 0)
			BUG("numpy mock lengths failed");
		gpt_lowlevel_mock(&l->low, lengths, MOCK_SEQUENCES, d->cfg.vocab_size, d->cfg.sample.eod);
		free(lengths);
	}
	d->lows = xrealloc(d->lows, (size_t)(d->n_lows + 1) * sizeof(*d->lows));
	d->lows[d->n_lows++] = l;
	return l;
}

/* ------------------------------------------------------------ caches */

static char *describe(json_t *ident, char hash[33])
{
	struct sbuf sb = SBUF_INIT;
	if (pyjson_dumps(ident, 4, &sb) < 0)
		BUG("dataset identifiers that JSON cannot hold");
	md5_hex(sb.buf, sb.len, hash);
	return sbuf_detach(&sb, NULL);
}

static char *cache_file(const char *dir, const char *hash, const char *cls, int split, const char *suffix)
{
	return xasprintf("%s/%s-%s-%s-%s", dir, hash, cls, gpt_split_names[split], suffix);
}

static int write_text(const char *path, const char *text)
{
	struct afile af;
	if (afile_open(&af, path) < 0)
		return -1;
	fputs(text, af.fp);
	if (afile_commit(&af) < 0) {
		afile_abort(&af);
		return -1;
	}
	return 0;
}

/* Load a 1-D (cols == 0) or 2-D (rows x cols) integer .npy into int64s. */
static int64_t *load_ints(const char *path, uint64_t *rows, int cols)
{
	struct npy_array a;
	if (npy_load(path, &a) < 0)
		return NULL;
	if (a.ndim != (cols ? 2 : 1) || (cols && a.shape[1] != (uint64_t)cols)) {
		error("'%s': unexpected array shape for a dataset index cache", path);
		npy_close(&a);
		return NULL;
	}
	*rows = a.shape[0];
	int64_t *out = xmalloc((a.count ? a.count : 1) * sizeof(int64_t));
	for (uint64_t i = 0; i < a.count; i++) {
		switch (a.dtype) {
		case NPY_I2:
			out[i] = ((const int16_t *)a.data)[i];
			break;
		case NPY_I4:
			out[i] = ((const int32_t *)a.data)[i];
			break;
		case NPY_U4:
			out[i] = ((const uint32_t *)a.data)[i];
			break;
		case NPY_I8:
			out[i] = ((const int64_t *)a.data)[i];
			break;
		default:
			error("'%s': dtype %s is not one of Megatron's index dtypes", path, npy_descr(a.dtype));
			free(out);
			npy_close(&a);
			return NULL;
		}
	}
	npy_close(&a);
	return out;
}

static int save_ints(const char *path, const int64_t *v, uint64_t rows, int cols, enum npy_dtype dt)
{
	uint64_t n = rows * (uint64_t)(cols ? cols : 1);
	void *buf = xmalloc((n ? n : 1) * npy_itemsize(dt));
	for (uint64_t i = 0; i < n; i++) {
		switch (dt) {
		case NPY_I2:
			((int16_t *)buf)[i] = (int16_t)v[i];
			break;
		case NPY_I4:
			((int32_t *)buf)[i] = (int32_t)v[i];
			break;
		case NPY_U4:
			((uint32_t *)buf)[i] = (uint32_t)v[i];
			break;
		case NPY_I8:
			((int64_t *)buf)[i] = v[i];
			break;
		default:
			BUG("save_ints with dtype %d", dt);
		}
	}
	uint64_t shape[2] = { rows, (uint64_t)cols };
	int r = npy_save(path, dt, cols ? 2 : 1, shape, buf);
	free(buf);
	return r;
}

static bool all_exist(char *const *paths, int n)
{
	for (int i = 0; i < n; i++)
		if (access(paths[i], F_OK) != 0)
			return false;
	return true;
}

/* ------------------------------------------------------------ GPTDataset */

static struct gpt_ds *ds_create(struct gpt_data *d, const char *prefix, int split, const double *bounds,
				const bool *present, int64_t num_samples)
{
	const struct gpt_data_config *c = &d->cfg;
	struct gpt_low *low = get_low(d, prefix);
	if (!low)
		return NULL;
	struct gpt_ds *ds = xcalloc(1, sizeof(*ds));
	ds->low = low;
	ds->split = split;
	ds->num_samples = num_samples;
	if (bounds)
		gpt_split_range(bounds, split, low->low.n_seqs, &ds->lo, &ds->hi);
	else {
		ds->lo = 0;
		ds->hi = low->low.n_seqs;
	}
	const char *cls = prefix ? "GPTDataset" : "MockGPTDataset";

	json_t *id = json_object();
	json_object_set_new(id, "class", json_string(cls));
	json_object_set_new(id, "dataset_path", prefix ? json_string(prefix) : json_null());
	json_object_set_new(id, "num_samples", num_samples >= 0 ? json_integer(num_samples) : json_null());
	json_object_set_new(id, "index_split", json_string(gpt_split_names[split]));
	json_object_set_new(id, "random_seed", json_integer(c->seed));
	json_object_set_new(id, "sequence_length", json_integer(c->seq_length));
	json_object_set_new(id, "split", bounds ? json_string(c->split) : json_null());
	if (bounds) {
		json_t *m = json_array();
		for (int i = 0; i < GPT_NSPLITS; i++) {
			if (!present[i]) {
				json_array_append_new(m, json_null());
				continue;
			}
			json_t *row = json_array();
			json_array_append_new(row, i == 0 ? json_integer(0) : json_real(bounds[i]));
			json_array_append_new(row, json_real(bounds[i + 1]));
			json_array_append_new(m, row);
		}
		json_object_set_new(id, "split_matrix", m);
	} else {
		json_object_set_new(id, "split_matrix", json_null());
	}
	json_object_set(id, "tokenizer", c->tokenizer_ident);
	ds->ident = id;
	char *desc = describe(id, ds->hash);

	/* Megatron: the cache path, or next to the dataset; mock data only with a path */
	char *dir = c->cache_path ? xstrdup(c->cache_path)
		    : prefix      ? xasprintf("%s/cache/%s_indices", prefix, cls)
				  : NULL;
	char *f[4] = { NULL, NULL, NULL, NULL };
	int ret = 0;
	if (dir) {
		f[0] = cache_file(dir, ds->hash, cls, split, "description.txt");
		f[1] = cache_file(dir, ds->hash, cls, split, "document_index.npy");
		f[2] = cache_file(dir, ds->hash, cls, split, "sample_index.npy");
		f[3] = cache_file(dir, ds->hash, cls, split, "shuffle_index.npy");
	}
	if (dir && all_exist(f, 4)) {
		uint64_t n_doc, rows, n_shuffle;
		ds->ix.doc_idx = load_ints(f[1], &n_doc, 0);
		ds->ix.sample_idx = ds->ix.doc_idx ? load_ints(f[2], &rows, 2) : NULL;
		ds->ix.shuffle_idx = ds->ix.sample_idx ? load_ints(f[3], &n_shuffle, 0) : NULL;
		if (!ds->ix.shuffle_idx) {
			ret = -1;
		} else if (rows < 1 || n_shuffle != rows - 1) {
			ret = error("cache '%s' and '%s' disagree on the number of samples", f[2], f[3]);
		} else {
			ds->ix.n_doc = n_doc;
			ds->ix.n_samples = n_shuffle;
			ds->from_cache = true;
			for (uint64_t i = 0; i < n_doc && !ret; i++)
				if (ds->ix.doc_idx[i] < (int64_t)ds->lo || ds->ix.doc_idx[i] >= (int64_t)ds->hi)
					ret = error("cache '%s' names sequence %lld, outside this split", f[1],
						    (long long)ds->ix.doc_idx[i]);
		}
	} else {
		ret = gpt_index_build(low->low.sizes, ds->lo, ds->hi, num_samples, c->seq_length, c->seed, true,
				      &ds->ix);
		if (ret < 0)
			error("cannot build the %s split of '%s'", gpt_split_names[split], prefix ? prefix : "mock data");
		if (!ret && dir && c->write_cache) {
			bool s64 = gpt_index_sample_idx_is_int64(&ds->ix, low->low.max_size);
			bool h64 = gpt_index_shuffle_idx_is_int64(&ds->ix);
			if (mkdir_p(dir) < 0 || write_text(f[0], desc) < 0 ||
			    save_ints(f[1], ds->ix.doc_idx, ds->ix.n_doc, 0, NPY_I4) < 0 ||
			    save_ints(f[2], ds->ix.sample_idx, ds->ix.n_samples + 1, 2, s64 ? NPY_I8 : NPY_I4) < 0 ||
			    save_ints(f[3], ds->ix.shuffle_idx, ds->ix.n_samples, 0, h64 ? NPY_I8 : NPY_U4) < 0)
				ret = -1;
		}
	}
	if (!ret && num_samples > 0 && (uint64_t)num_samples > ds->ix.n_samples)
		ret = error("the %s split of '%s' holds %llu samples, %lld requested", gpt_split_names[split],
			    prefix ? prefix : "mock data", (unsigned long long)ds->ix.n_samples,
			    (long long)num_samples);
	for (int i = 0; i < 4; i++)
		free(f[i]);
	free(dir);
	free(desc);
	d->ds = xrealloc(d->ds, (size_t)(d->n_ds + 1) * sizeof(*d->ds));
	d->ds[d->n_ds++] = ds; /* owned by d even on failure, freed with it */
	return ret ? NULL : ds;
}

/* ------------------------------------------------------------ BlendedDataset */

/* weights: when size >= 0, the weights the builder passes (BlendedDataset
 * normalises them once more, as Megatron's does); ignored for an
 * exhaustive blend (size < 0), whose weights are the members' lengths. */
static struct gpt_blend *blend_create(struct gpt_data *d, struct gpt_ds **members, int n, const double *raw_weights,
				      int64_t size, int split)
{
	const struct gpt_data_config *c = &d->cfg;
	struct gpt_blend *b = xcalloc(1, sizeof(*b));
	d->blends = xrealloc(d->blends, (size_t)(d->n_blends + 1) * sizeof(*d->blends));
	d->blends[d->n_blends++] = b;
	b->n = n;
	b->ds = xmalloc((size_t)n * sizeof(*b->ds));
	memcpy(b->ds, members, (size_t)n * sizeof(*b->ds));
	b->size = size;
	int64_t *lengths = xmalloc((size_t)n * sizeof(int64_t));
	for (int i = 0; i < n; i++)
		lengths[i] = (int64_t)members[i]->ix.n_samples;
	double *weights = xcalloc((size_t)n, sizeof(double));
	if (size >= 0)
		normalize(raw_weights, n, weights);

	json_t *id = json_object();
	json_object_set_new(id, "class", json_string("BlendedDataset"));
	json_t *arr = json_array();
	for (int i = 0; i < n; i++)
		json_array_append(arr, members[i]->ident);
	json_object_set_new(id, "datasets", arr);
	json_object_set_new(id, "split", json_string(gpt_split_names[split]));
	json_t *w = json_array();
	for (int i = 0; i < n; i++)
		json_array_append_new(w, size >= 0 ? json_real(weights[i]) : json_integer(lengths[i]));
	json_object_set_new(id, "weights", w);
	json_object_set_new(id, "size", size >= 0 ? json_integer(size) : json_null());
	b->ident = id;
	char *desc = describe(id, b->hash);

	b->len = size >= 0 ? (uint64_t)size : 0;
	if (size < 0)
		for (int i = 0; i < n; i++)
			b->len += (uint64_t)lengths[i];
	char *f[3] = { NULL, NULL, NULL };
	int ret = 0;
	if (c->cache_path) { /* Megatron caches blends only with --data-cache-path */
		f[0] = cache_file(c->cache_path, b->hash, "BlendedDataset", split, "description.txt");
		f[1] = cache_file(c->cache_path, b->hash, "BlendedDataset", split, "dataset_index.npy");
		f[2] = cache_file(c->cache_path, b->hash, "BlendedDataset", split, "dataset_sample_index.npy");
	}
	if (c->cache_path && all_exist(f, 3)) {
		uint64_t n1, n2;
		int64_t *di = load_ints(f[1], &n1, 0);
		int64_t *si = di ? load_ints(f[2], &n2, 0) : NULL;
		if (!si) {
			ret = -1;
		} else if (n1 != b->len || n2 != b->len) {
			ret = error("cache '%s' holds %llu entries, the blend has %llu", f[1], (unsigned long long)n1,
				    (unsigned long long)b->len);
		} else {
			b->dataset_index = xmalloc((b->len ? b->len : 1) * sizeof(int16_t));
			for (uint64_t i = 0; i < b->len; i++) {
				if (di[i] < 0 || di[i] >= n)
					ret = error("cache '%s' names dataset %lld of %d", f[1], (long long)di[i], n);
				b->dataset_index[i] = (int16_t)di[i];
			}
			b->dataset_sample_index = si;
			si = NULL;
			b->from_cache = true;
		}
		free(di);
		free(si);
	} else {
		b->dataset_index = xmalloc((b->len ? b->len : 1) * sizeof(int16_t));
		b->dataset_sample_index = xmalloc((b->len ? b->len : 1) * sizeof(int64_t));
		if (size >= 0)
			gpt_blend_build(weights, n, b->len, b->dataset_index, b->dataset_sample_index);
		else
			gpt_blend_build_exhaustive(lengths, n, b->dataset_index, b->dataset_sample_index);
		if (c->cache_path && c->write_cache) {
			int64_t *di = xmalloc((b->len ? b->len : 1) * sizeof(int64_t));
			for (uint64_t i = 0; i < b->len; i++)
				di[i] = b->dataset_index[i];
			if (mkdir_p(c->cache_path) < 0 || write_text(f[0], desc) < 0 ||
			    save_ints(f[1], di, b->len, 0, NPY_I2) < 0 ||
			    save_ints(f[2], b->dataset_sample_index, b->len, 0, NPY_I8) < 0)
				ret = -1;
			free(di);
		}
	}
	/* no member may be asked for more samples than it has (Megatron fails
	 * with "The <split> blend oversamples the contributing datasets") */
	for (uint64_t s = 0; s < b->len && !ret; s++) {
		int m = b->dataset_index[s];
		if (b->dataset_sample_index[s] >= lengths[m])
			ret = error("the %s blend oversamples '%s' (sample %lld of %lld); raise "
				    "--mid-level-dataset-surplus", gpt_split_names[split],
				    members[m]->low->prefix ? members[m]->low->prefix : "mock data",
				    (long long)b->dataset_sample_index[s], (long long)lengths[m]);
	}
	for (int i = 0; i < 3; i++)
		free(f[i]);
	free(desc);
	free(lengths);
	free(weights);
	return ret ? NULL : b;
}

/* ------------------------------------------------------------ the builder */

/*
 * Several prefixes for the splits in `which` (bounds/present: the shared
 * split matrix, or NULL for a per-split blend whose range is everything).
 */
static int build_blended(struct gpt_data *d, const struct blend_list *bl, const double *bounds, const bool *present,
			 const bool *which)
{
	const struct gpt_data_config *c = &d->cfg;
	int n = bl->n;
	double *w = NULL;
	if (bl->weights) {
		for (int i = 0; i < n; i++)
			if (!(bl->weights[i] > 0))
				return error("--data-path weight %g for '%s': every weight must be positive",
					     bl->weights[i], bl->prefixes[i]);
		w = xmalloc((size_t)n * sizeof(double));
		normalize(bl->weights, n, w);
	}
	int ret = 0;
	for (int s = 0; s < GPT_NSPLITS && !ret; s++) {
		if (!which[s])
			continue;
		int64_t size = c->num_samples[s];
		if (w && size < 0) {
			ret = error("a weighted blend needs a sample count for the %s split (drop the weights or "
				    "--full-validation)", gpt_split_names[s]);
			break;
		}
		struct gpt_ds **members = xcalloc((size_t)n, sizeof(*members));
		int64_t total_target = 0;
		for (int i = 0; i < n && !ret; i++) {
			int64_t buffer = -1;
			if (w) {
				int64_t target = (int64_t)ceil((double)size * w[i]);
				total_target += target;
				buffer = (int64_t)ceil((double)target * (1 + c->surplus));
			}
			members[i] = ds_create(d, bl->prefixes[i], s, bounds, present, buffer);
			if (!members[i])
				ret = -1;
		}
		if (!ret) {
			struct gpt_blend *b;
			if (w) {
				b = blend_create(d, members, n, w, total_target, s);
			} else {
				double *lw = xmalloc((size_t)n * sizeof(double));
				int64_t sum = 0;
				for (int i = 0; i < n; i++) {
					lw[i] = (double)members[i]->ix.n_samples;
					sum += (int64_t)members[i]->ix.n_samples;
				}
				if (size >= 0) {
					b = blend_create(d, members, n, lw, size < sum ? size : sum, s);
				} else {
					b = blend_create(d, members, n, NULL, -1, s);
				}
				free(lw);
			}
			if (!b)
				ret = -1;
			else {
				d->splits[s].present = true;
				d->splits[s].blend = b;
				d->splits[s].len = b->len;
			}
		}
		free(members);
	}
	free(w);
	return ret;
}

static int build_single(struct gpt_data *d, const char *prefix, const double *bounds, const bool *present,
			const bool *which)
{
	for (int s = 0; s < GPT_NSPLITS; s++) {
		if (!which[s])
			continue;
		struct gpt_ds *ds = ds_create(d, prefix, s, bounds, present, d->cfg.num_samples[s]);
		if (!ds)
			return -1;
		d->splits[s].present = true;
		d->splits[s].single = ds;
		d->splits[s].len = ds->ix.n_samples;
	}
	return 0;
}

int gpt_data_build(const struct gpt_data_config *cfg, struct gpt_data *d)
{
	memset(d, 0, sizeof(*d));
	d->cfg = *cfg;
	int ret = 0;
	bool per_split = cfg->n_split_blend[0] || cfg->n_split_blend[1] || cfg->n_split_blend[2];
	if (cfg->mock || !per_split) {
		double bounds[4];
		bool present[3];
		if (gpt_split_parse(cfg->split, bounds, present) < 0)
			return -1;
		if (cfg->mock)
			return build_single(d, NULL, bounds, present, present);
		struct blend_list bl;
		blend_parse(cfg->blend, cfg->n_blend, &bl);
		if (bl.n == 1 && !bl.weights)
			ret = build_single(d, bl.prefixes[0], bounds, present, present);
		else
			ret = build_blended(d, &bl, bounds, present, present);
		blend_free(&bl);
		return ret;
	}
	for (int s = 0; s < GPT_NSPLITS && !ret; s++) {
		if (!cfg->n_split_blend[s])
			continue;
		bool which[3] = { false, false, false };
		which[s] = true;
		struct blend_list bl;
		blend_parse(cfg->split_blend[s], cfg->n_split_blend[s], &bl);
		if (bl.n == 1) /* a single prefix: its weight, if any, is ignored (Megatron) */
			ret = build_single(d, bl.prefixes[0], NULL, NULL, which);
		else
			ret = build_blended(d, &bl, NULL, NULL, which);
		blend_free(&bl);
	}
	return ret;
}

void gpt_data_free(struct gpt_data *d)
{
	for (int i = 0; i < d->n_blends; i++) {
		struct gpt_blend *b = d->blends[i];
		free(b->ds);
		free(b->dataset_index);
		free(b->dataset_sample_index);
		json_decref(b->ident);
		free(b);
	}
	for (int i = 0; i < d->n_ds; i++) {
		gpt_index_free(&d->ds[i]->ix);
		json_decref(d->ds[i]->ident);
		free(d->ds[i]);
	}
	for (int i = 0; i < d->n_lows; i++) {
		struct gpt_low *l = d->lows[i];
		gpt_lowlevel_free(&l->low);
		if (l->prefix)
			idx_reader_close(&l->reader);
		free(l->prefix);
		free(l);
	}
	free(d->blends);
	free(d->ds);
	free(d->lows);
	memset(d, 0, sizeof(*d));
}

const char *gpt_ds_prefix(const struct gpt_ds *ds)
{
	return ds->low->prefix ? ds->low->prefix : "mock data";
}

uint64_t gpt_data_text(const struct gpt_data *d, int split, uint64_t k, int64_t *text, int *dataset_id)
{
	const struct gpt_split *s = &d->splits[split];
	if (!s->present || k >= s->len)
		BUG("sample %llu of the %s split (%llu samples)", (unsigned long long)k, gpt_split_names[split],
		    (unsigned long long)s->len);
	const struct gpt_ds *ds = s->single;
	uint64_t kk = k;
	*dataset_id = 0;
	if (s->blend) {
		*dataset_id = s->blend->dataset_index[k];
		ds = s->blend->ds[*dataset_id];
		kk = (uint64_t)s->blend->dataset_sample_index[k];
	}
	return gpt_sample_text(&ds->low->low, &ds->ix, d->cfg.seq_length, kk, text);
}
