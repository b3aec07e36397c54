/*
 * convert_command.c - the ckpt_convert program: see convert_command.h and
 * docs/ckpt-convert.md. Every path streams: one global tensor (and its
 * converted copy) in memory at a time. Output is all or nothing: megac
 * checkpoints through lib/ckpt's transaction (hidden directory, rename,
 * tracker last), Hugging Face folders written in a hidden sibling folder
 * renamed into place at the end.
 */
#include "convert/convert_command.h"

#include <errno.h>
#include <ftw.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/sbuf.h"
#include "base/size.h"
#include "base/tempfile.h"
#include "base/xalloc.h"
#include "ckpt/ckpt.h"
#include "ckpt/dtype.h"
#include "ckpt/safetensors.h"
#include "convert/hf_map.h"
#include "convert/convert_int.h"
#include "convert/megatron_ckpt.h"
#include "data/tok.h"
#include "dist/layout.h"
#include "model/ckpt_tok.h"
#include "model/gpt_ckpt.h"

const struct prog_info convert_prog_info = {
	"ckpt_convert",
	PROG_CONVERT,
	"Rewrites a megac checkpoint: for another pipeline layout or tensor-parallel vocabulary padding\n"
	"(--target-pipeline-parallel-size, --target-tensor-parallel-size), without optimizer state\n"
	"(--no-optim), in another dtype; exports it as a Hugging Face folder (--to hf: GPT2LMHeadModel,\n"
	"LlamaForCausalLM or MixtralForCausalLM, safetensors) or imports one (--from hf) as iteration 0 for\n"
	"train --finetune.\n"
	"Output is written whole or not at all; --verify re-reads every tensor written.",
	"ckpt_convert --load ckpt --save hf-out --to hf --dtype bf16 --vocab-file gpt2-vocab.json "
	"--merge-file gpt2-merges.txt",
	0,
};

/* ---- small helpers ---- */

static enum ckpt_dtype dtype_flag(const char *s, enum ckpt_dtype def)
{
	if (!s)
		return def;
	return !strcmp(s, "bf16") ? CKPT_BF16 : !strcmp(s, "fp16") ? CKPT_F16 : CKPT_F32;
}

static size_t numel(int ndim, const int64_t *shape)
{
	size_t n = 1;
	for (int d = 0; d < ndim; d++)
		n *= (size_t)shape[d];
	return n;
}

static char *path_join(const char *dir, const char *name)
{
	char *p = xmalloc(strlen(dir) + strlen(name) + 2);
	sprintf(p, "%s/%s", dir, name);
	return p;
}

static struct ckpt_reader *open_source(const struct args *a, int64_t *iter)
{
	if (!a->load) {
		error("--load DIR: the checkpoint to convert");
		return NULL;
	}
	if (a->iteration < 0)
		return ckpt_open_latest(a->load, iter);
	*iter = a->iteration;
	return ckpt_open(a->load, *iter);
}

/* Read tensor `name` of file as float32 (any float dtype it is stored in). */
static int get_f32(struct ckpt_reader *r, int file, const char *name, int ndim, const int64_t *shape, float *out)
{
	enum ckpt_dtype dt;
	int nd;
	int64_t sh[CKPT_MAX_NDIM];
	if (ckpt_tensor_info(r, file, name, &dt, &nd, sh) < 0)
		return -1;
	if (dt == CKPT_I64)
		return error("'%s': tensor '%s' is int64, not a float tensor", ckpt_reader_dir(r), name);
	size_t n = numel(ndim, shape);
	if (dt == CKPT_F32)
		return ckpt_get_tensor(r, file, name, dt, ndim, shape, out);
	void *raw = xmalloc(n * ckpt_dtype_size(dt));
	int rc = ckpt_get_tensor(r, file, name, dt, ndim, shape, raw);
	if (rc == 0)
		ckpt_to_f32(dt, raw, n, out);
	free(raw);
	return rc;
}

/* ---- a folder that appears whole or not at all ---- */

/* The highest missing directory on the way to path (NULL when path exists):
 * what a failed conversion removes again, so that it leaves nothing. */
static char *first_missing(const char *path)
{
	struct stat st;
	if (stat(path, &st) == 0)
		return NULL;
	char *cur = xstrdup(path);
	for (;;) {
		char *up = path_dirname(cur);
		if (!strcmp(up, cur) || stat(up, &st) == 0) {
			free(up);
			return cur;
		}
		free(cur);
		cur = up;
	}
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw);

void convert_remove_tree(const char *path)
{
	if (path)
		nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}


struct out_dir {
	char *final, *tmp, *parent;
	char *created; /* the first directory we made for it, removed on failure */
};

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st, (void)flag, (void)ftw;
	return remove(path) < 0 && errno != ENOENT ? -1 : 0;
}

static int out_dir_begin(struct out_dir *d, const char *path)
{
	memset(d, 0, sizeof(*d));
	struct stat st;
	if (stat(path, &st) == 0)
		return error("'%s' exists: ckpt_convert writes a new folder (remove it, or choose another --save)",
			     path);
	d->final = xstrdup(path);
	d->parent = path_dirname(path);
	d->created = first_missing(d->parent);
	if (mkdir_p(d->parent) < 0)
		return -1;
	const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
	d->tmp = xmalloc(strlen(d->parent) + strlen(base) + 64);
	sprintf(d->tmp, "%s/.%s.tmp-%ld", d->parent, base, (long)getpid());
	if (mkdir(d->tmp, 0777) < 0)
		return error_errno("cannot create '%s'", d->tmp);
	return 0;
}

static int out_dir_commit(struct out_dir *d)
{
	if (fsync_dir(d->tmp) < 0)
		return -1;
	if (rename(d->tmp, d->final) < 0)
		return error_errno("cannot rename '%s' to '%s'", d->tmp, d->final);
	return fsync_dir(d->parent);
}

static void out_dir_free(struct out_dir *d, int abort)
{
	if (abort && d->tmp)
		convert_remove_tree(d->tmp);
	if (abort)
		convert_remove_tree(d->created);
	free(d->created);
	free(d->final);
	free(d->tmp);
	free(d->parent);
}

static int write_text(const char *dir, const char *name, const char *text)
{
	char *path = path_join(dir, name);
	struct afile af;
	int rc = afile_open(&af, path);
	if (rc == 0) {
		fputs(text, af.fp);
		fputc('\n', af.fp);
		rc = afile_commit(&af);
		if (rc < 0)
			afile_abort(&af);
	}
	free(path);
	return rc;
}

static int copy_file(const char *from, const char *dir, const char *name)
{
	struct sbuf sb = SBUF_INIT;
	int rc = sbuf_read_file(&sb, from);
	if (rc == 0) {
		char *path = path_join(dir, name);
		struct afile af;
		rc = afile_open(&af, path);
		if (rc == 0) {
			fwrite(sb.buf, 1, sb.len, af.fp);
			rc = afile_commit(&af);
			if (rc < 0)
				afile_abort(&af);
		}
		free(path);
	}
	sbuf_release(&sb);
	return rc;
}

/* The tokenizer files given on the command line, under Hugging Face's names. */
static int copy_tokenizer(const struct args *a, const char *dir)
{
	if (a->vocab_file && copy_file(a->vocab_file, dir, "vocab.json") < 0)
		return -1;
	if (a->merge_file && copy_file(a->merge_file, dir, "merges.txt") < 0)
		return -1;
	const char *type = a->tokenizer_type;
	if (a->tokenizer_model && (!strcmp(type, "SentencePieceTokenizer") || !strcmp(type, "GPTSentencePieceTokenizer") ||
				   !strcmp(type, "Llama2Tokenizer")))
		return copy_file(a->tokenizer_model, dir, "tokenizer.model");
	if (a->tokenizer_model && !strcmp(type, "TikTokenizer"))
		return copy_file(a->tokenizer_model, dir, "tiktoken.json");
	if (a->tokenizer_model) {
		struct stat st;
		if (stat(a->tokenizer_model, &st) == 0 && S_ISDIR(st.st_mode)) {
			static const char *const files[] = { "tokenizer.json", "tokenizer_config.json",
							     "special_tokens_map.json" };
			for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
				char *p = path_join(a->tokenizer_model, files[i]);
				int have = access(p, R_OK) == 0;
				int rc = have ? copy_file(p, dir, files[i]) : 0;
				free(p);
				if (rc < 0)
					return -1;
			}
		} else if (copy_file(a->tokenizer_model, dir, "tokenizer.json") < 0) {
			return -1;
		}
	}
	return 0;
}

/* A tokenizer_config.json for GPT-2 BPE files (vocab.json + merges.txt)
 * naming transformers' class: without it AutoTokenizer picks the class of
 * the model's architecture (LlamaTokenizerFast for a Llama), which cannot
 * read them. */
static int gpt2_tokenizer_config(const char *dir, const struct tokenizer *t, const struct gpt_config *c)
{
	json_t *o = json_object();
	json_object_set_new(o, "tokenizer_class", json_string("GPT2Tokenizer"));
	json_object_set_new(o, "model_max_length", json_integer(c->P));
	json_object_set_new(o, "add_prefix_space", json_false());
	int32_t eod = t ? (int32_t)tok_eod(t) : -1;
	struct sbuf text = SBUF_INIT;
	if (eod >= 0 && tok_decode(t, &eod, 1, &text) == 0 && text.len) {
		static const char *const keys[] = { "bos_token", "eos_token", "unk_token" };
		for (size_t i = 0; i < 3; i++)
			json_object_set_new(o, keys[i], json_stringn(text.buf, text.len));
	}
	sbuf_release(&text);
	char *s = json_dumps(o, JSON_SORT_KEYS | JSON_INDENT(2));
	json_decref(o);
	int rc = write_text(dir, "tokenizer_config.json", s);
	free(s);
	return rc;
}

static void set_token(json_t *o, const char *key, const char *piece)
{
	json_object_set_new(o, key, piece ? json_string(piece) : json_null());
}

/* A SentencePiece model's tokenizer folder beside tokenizer.model: a
 * tokenizer_config.json naming LlamaTokenizer with the model's special
 * pieces (a BOS added, as Llama-2's), and a tokenizer.json converted from
 * the model when it converts exactly, so that LlamaTokenizerFast loads
 * without the sentencepiece package. */
static int spm_tokenizer_files(const char *dir, const struct tokenizer *t, const struct gpt_config *c)
{
	int64_t ids[4];
	const char *pieces[4];
	if (tok_spm_specials(t, ids, pieces) < 0)
		return 0;
	int rc = 0;
	char *tj = path_join(dir, "tokenizer.json");
	if (access(tj, F_OK) != 0) {
		const char *why = NULL;
		char *json = tok_spm_hf(t, &why);
		if (json)
			rc = write_text(dir, "tokenizer.json", json);
		else
			warning("the export gets no tokenizer.json (transformers then needs the sentencepiece package to read "
				"tokenizer.model): the SentencePiece model does not convert to one exactly: %s", why);
		free(json);
	}
	free(tj);
	char *cfg = path_join(dir, "tokenizer_config.json");
	if (rc == 0 && access(cfg, F_OK) != 0) {
		json_t *o = json_object(), *dec = json_object();
		json_object_set_new(o, "tokenizer_class", json_string("LlamaTokenizer"));
		json_object_set_new(o, "model_max_length", json_integer(c->P));
		json_object_set_new(o, "add_bos_token", json_boolean(ids[1] >= 0));
		json_object_set_new(o, "add_eos_token", json_false());
		json_object_set_new(o, "legacy", json_true());
		json_object_set_new(o, "clean_up_tokenization_spaces", json_false());
		json_object_set_new(o, "sp_model_kwargs", json_object());
		static const char *const keys[] = { "unk_token", "bos_token", "eos_token", "pad_token" };
		for (int i = 0; i < 4; i++) {
			set_token(o, keys[i], pieces[i]);
			if (!pieces[i] || json_object_get(dec, pieces[i]))
				continue;
			char id[32];
			snprintf(id, sizeof(id), "%lld", (long long)ids[i]);
			json_object_set_new(dec, id, json_pack("{s:s,s:b,s:b,s:b,s:b,s:b}", "content", pieces[i],
							       "lstrip", 0, "normalized", 0, "rstrip", 0, "single_word", 0,
							       "special", 1));
		}
		json_object_set_new(o, "added_tokens_decoder", dec);
		char *s = json_dumps(o, JSON_SORT_KEYS | JSON_INDENT(2));
		json_decref(o);
		rc = write_text(dir, "tokenizer_config.json", s);
		free(s);
	}
	free(cfg);
	return rc;
}

/* The export's tokenizer: the files the flags give, else the ones the
 * checkpoint records (model/ckpt_tok.h), into dir; its end-of-document id
 * as bos/eos for config.json (-1 without a tokenizer, which is said); and
 * for GPT-2 BPE files without one, a tokenizer_config.json naming the
 * class. */
static int export_tokenizer(const struct args *a, struct ckpt_reader *r, int mf, const struct gpt_config *c,
			    const char *dir, int64_t *bos, int64_t *eos)
{
	*bos = *eos = -1;
	struct ckpt_tok rec;
	memset(&rec, 0, sizeof(rec));
	struct tok_config tc;
	const char *type = a->tokenizer_type;
	if (type) {
		if (copy_tokenizer(a, dir) < 0)
			return -1;
		tc = tok_config_from_args(a);
	} else {
		int k = ckpt_tok_get(&rec, r, mf);
		if (k != 0) {
			if (k > 0)
				warning("no tokenizer flags, and '%s' records no tokenizer: the folder gets no tokenizer files "
					"and config.json no bos/eos token ids (give the tokenizer flags)", ckpt_reader_dir(r));
			return k < 0 ? -1 : 0;
		}
		char where[4200];
		snprintf(where, sizeof(where), "'%s'", ckpt_reader_dir(r));
		if (ckpt_tok_extract(&rec, dir, where, &tc) < 0) {
			ckpt_tok_free(&rec);
			return -1;
		}
		type = rec.type;
		info("the tokenizer '%s' records goes with the export (%s%s)", ckpt_reader_dir(r), rec.type,
		     rec.nfiles ? "" : "; no files: transformers has no such tokenizer");
	}
	struct tokenizer *t = tok_load(&tc);
	int64_t ids[4];
	const char *pieces[4];
	if (t && tok_spm_specials(t, ids, pieces) == 0) {
		*bos = ids[1];
		*eos = ids[2];
	} else if (t) {
		*bos = *eos = tok_eod(t);
	} else {
		warning("config.json gets no bos/eos token ids: the tokenizer did not load");
	}
	char *cfg = path_join(dir, "tokenizer_config.json");
	int rc = 0;
	if (!strcmp(type, "GPT2BPETokenizer") && access(cfg, F_OK) != 0)
		rc = gpt2_tokenizer_config(dir, t, c);
	else if (t && rc == 0)
		rc = spm_tokenizer_files(dir, t, c);
	if (!strcmp(type, "TikTokenizer"))
		warning("the export's tokenizer is TikTokenizer's tiktoken.json, which transformers does not read: convert "
			"it to a tokenizer.json yourself");
	free(cfg);
	if (t)
		tok_free(t);
	ckpt_tok_free(&rec);
	return rc;
}

/* ---- megac -> Hugging Face ---- */

/* The source tensor of t in src_buf, reading it unless it is the one there. */
static int load_src(struct ckpt_reader *r, int mf, const struct gpt_config *c, const struct hf_tensor *t,
		    char *have, float **buf, size_t *cap)
{
	if (!strcmp(have, t->src))
		return 0;
	int nd;
	int64_t sh[2];
	hf_src_shape(c, t, &nd, sh);
	size_t n = numel(nd, sh);
	if (n > *cap) {
		free(*buf);
		*buf = xmalloc(n * sizeof(float));
		*cap = n;
	}
	have[0] = 0;
	if (get_f32(r, mf, t->src, nd, sh, *buf) < 0)
		return -1;
	snprintf(have, HF_NAME_MAX, "%s", t->src);
	return 0;
}

struct shard {
	int first, count;
	char file[64];
};

/* The MoE aux-loss coefficient the checkpoint's configuration records
 * (gpt_config_from_ckpt leaves the training-only router settings out):
 * Mixtral's router_aux_loss_coef, 0 when there is none. */
static double aux_coeff(struct ckpt_reader *r, int mf)
{
	char *s;
	if (ckpt_get_attr_str(r, mf, NULL, "config", &s) < 0)
		return 0;
	json_t *o = json_loads(s, 0, NULL);
	json_t *v = json_object_get(o, "moe_aux_loss_coeff");
	double x = json_is_number(v) ? json_number_value(v) : 0;
	json_decref(o);
	free(s);
	return x;
}

/* convert.py's --true-vocab-size: the tokenizer's vocabulary, which the
 * checkpoint records; a different one is a different model. */
static int check_true_vocab(const struct args *a, const struct gpt_config *c)
{
	if (a->true_vocab_size > 0 && a->true_vocab_size != c->V)
		return error("--true-vocab-size %lld: the checkpoint's vocabulary has %d tokens (padded to %d)",
			     (long long)a->true_vocab_size, c->V, c->Vp);
	return 0;
}

/* Megatron's own formats (--to megatron) do not get a hybrid Mamba model
 * yet: megac does not write the hybrid stack's names and sharded states
 * there (docs/mamba.md). Layout changes and the Hugging Face export are
 * layout-independent and take it. */
static int not_hybrid(const struct gpt_config *c, struct ckpt_reader *r)
{
	if (c->hybrid)
		return error("'%s': a hybrid Mamba model (--hybrid-layer-pattern): --to megatron does not write it yet "
			     "(Megatron's torch and torch_dist formats of the hybrid stack are not mapped; a megac "
			     "checkpoint and --to hf of an all-Mamba pattern are; docs/mamba.md)", ckpt_reader_dir(r));
	return 0;
}

static int to_hf(const struct args *a)
{
	int64_t iter;
	struct ckpt_reader *r = open_source(a, &iter);
	if (!r)
		return -1;
	struct gpt_config c;
	enum hf_arch arch;
	int mf = ckpt_file_open(r, "model.h5");
	if (mf < 0 || ckpt_check_iteration(r) < 0 || gpt_config_from_ckpt(&c, r, mf) < 0 ||
	    check_true_vocab(a, &c) < 0 || hf_arch_for(&c, &arch) < 0) {
		ckpt_close(r);
		return -1;
	}
	if (c.E > 0)
		c.router.aux_coeff = aux_coeff(r, mf);
	double max_shard = 5e9;
	if (a->max_shard_size && size_parse(a->max_shard_size, "--max-shard-size", &max_shard) < 0) {
		ckpt_close(r);
		return -1;
	}
	enum ckpt_dtype dt = dtype_flag(a->dtype, CKPT_F32);
	struct hf_tensor *ts;
	int nt;
	hf_tensors(&c, arch, &ts, &nt);

	/* shards in order, each up to --max-shard-size (one tensor may exceed it) */
	struct shard *sh = xcalloc((size_t)nt, sizeof(*sh));
	int ns = 0;
	double in_shard = 0;
	uint64_t total = 0;
	for (int i = 0; i < nt; i++) {
		double bytes = (double)numel(ts[i].ndim, ts[i].shape) * (double)ckpt_dtype_size(dt);
		total += (uint64_t)bytes;
		if (ns == 0 || (in_shard > 0 && in_shard + bytes > max_shard)) {
			sh[ns++] = (struct shard){ i, 0, "" };
			in_shard = 0;
		}
		sh[ns - 1].count++;
		in_shard += bytes;
	}
	for (int s = 0; s < ns; s++)
		if (ns == 1)
			snprintf(sh[s].file, sizeof(sh[s].file), "%s", ST_SINGLE_FILE);
		else
			snprintf(sh[s].file, sizeof(sh[s].file), "model-%05d-of-%05d.safetensors", s + 1, ns);

	struct out_dir od;
	int rc = out_dir_begin(&od, a->save);
	float *src = NULL, *out = NULL;
	size_t src_cap = 0, out_cap = 0;
	char have[HF_NAME_MAX] = "";
	for (int s = 0; rc == 0 && s < ns; s++) {
		struct st_tensor_decl *decl = xcalloc((size_t)sh[s].count, sizeof(*decl));
		for (int j = 0; j < sh[s].count; j++) {
			const struct hf_tensor *t = &ts[sh[s].first + j];
			decl[j] = (struct st_tensor_decl){ t->name, dt, t->ndim, { t->shape[0], t->shape[1], t->shape[2] } };
		}
		static const char *const mk[] = { "format" }, *const mv[] = { "pt" };
		char *path = path_join(od.tmp, sh[s].file);
		struct st_writer *w = st_create(path, sh[s].count, decl, 1, mk, mv);
		free(decl);
		free(path);
		if (!w) {
			rc = -1;
			break;
		}
		for (int j = 0; rc == 0 && j < sh[s].count; j++) {
			const struct hf_tensor *t = &ts[sh[s].first + j];
			size_t n = numel(t->ndim, t->shape);
			if (n > out_cap) {
				free(out);
				out = xmalloc(n * sizeof(float));
				out_cap = n;
			}
			rc = load_src(r, mf, &c, t, have, &src, &src_cap);
			if (rc == 0) {
				hf_export(&c, t, src, out);
				ckpt_from_f32(dt, out, n, out);
				rc = st_write(w, out, n * ckpt_dtype_size(dt));
			}
		}
		if (rc == 0)
			rc = st_finish(w);
		else
			st_abort(w);
	}
	if (rc == 0 && ns > 1) {
		const char **names = xmalloc((size_t)nt * sizeof(*names)), **files = xmalloc((size_t)nt * sizeof(*files));
		for (int s = 0; s < ns; s++)
			for (int j = 0; j < sh[s].count; j++) {
				names[sh[s].first + j] = ts[sh[s].first + j].name;
				files[sh[s].first + j] = sh[s].file;
			}
		rc = st_write_index(od.tmp, nt, names, files, total);
		free(names);
		free(files);
	}
	if (rc == 0) {
		int64_t bos, eos;
		rc = export_tokenizer(a, r, mf, &c, od.tmp, &bos, &eos);
		char *cfg = hf_config_json(&c, arch, dt, bos, eos), *gen = hf_generation_config_json(bos, eos);
		rc = rc < 0 || write_text(od.tmp, "config.json", cfg) < 0 ||
		     write_text(od.tmp, "generation_config.json", gen) < 0
			     ? -1
			     : 0;
		free(cfg);
		free(gen);
	}
	if (rc == 0 && a->verify) { /* every tensor again, from the written files */
		struct st_folder *f = st_folder_open(od.tmp);
		rc = f ? 0 : -1;
		have[0] = 0;
		for (int i = 0; rc == 0 && i < nt; i++) {
			const struct hf_tensor *t = &ts[i];
			size_t n = numel(t->ndim, t->shape), bytes;
			struct st_file *sf;
			int idx;
			if (st_folder_find(f, t->name, &sf, &idx) < 0) {
				rc = error("--verify: '%s' is missing from the written folder", t->name);
				break;
			}
			rc = load_src(r, mf, &c, t, have, &src, &src_cap);
			if (rc == 0) {
				hf_export(&c, t, src, out);
				ckpt_from_f32(dt, out, n, out);
				const void *data = st_data(sf, idx, &bytes);
				if (bytes != n * ckpt_dtype_size(dt) || memcmp(data, out, bytes))
					rc = error("--verify: '%s' in '%s' differs from the checkpoint's values", t->name,
						   st_path(sf));
				st_release(sf, idx);
			}
		}
		if (f)
			st_folder_close(f);
		if (rc == 0)
			info("verified %d tensors", nt);
	}
	if (rc == 0)
		rc = out_dir_commit(&od);
	if (rc == 0)
		info("wrote %s (%s, %d tensors in %d file%s, %s) from iteration %lld of '%s'", a->save,
		     hf_arch_class(arch), nt, ns, ns > 1 ? "s" : "", ckpt_dtype_name(dt), (long long)iter, a->load);
	out_dir_free(&od, rc < 0);
	free(src);
	free(out);
	free(sh);
	free(ts);
	ckpt_close(r);
	return rc;
}

/* ---- writing a megac checkpoint for a pipeline layout ---- */

/* Tensors go to the file of the pipeline stage that holds them (stage 0:
 * model.h5 / optim.h5 themselves; stage s: model.stage-SSS.h5 linked from
 * model.h5), as train writes them. */
struct stage_writer {
	struct ckpt_writer *w;
	int L, pp, vpp;
	const char *base;   /* "model" or "optim" */
	int *files;         /* per stage; [0] is the main file */
	int64_t iteration;
};

static int stage_writer_init(struct stage_writer *sw, struct ckpt_writer *w, const char *base, int L, int pp, int vpp,
			     int64_t iteration)
{
	*sw = (struct stage_writer){ w, L, pp, vpp, base, xmalloc((size_t)pp * sizeof(int)), iteration };
	for (int s = 0; s < pp; s++)
		sw->files[s] = -1;
	char name[64];
	snprintf(name, sizeof(name), "%s.h5", base);
	sw->files[0] = ckpt_file_create(w, name);
	return sw->files[0] < 0 ? -1 : 0;
}

/* The pipeline stage holding tensor `name` ("exp_avg/..." included). */
static int stage_of(const struct stage_writer *sw, const char *name)
{
	const char *slash = strrchr(name, '/');
	const char *n = slash ? slash + 1 : name;
	if (!strncmp(n, "embedding.", 10))
		return 0;
	int layer;
	if (sscanf(n, "decoder.layers.%d.", &layer) == 1) {
		int per = sw->L / (sw->pp * sw->vpp);
		return (layer / per) % sw->pp;
	}
	return sw->pp - 1; /* the final norm and the output layer */
}

static int stage_put(struct stage_writer *sw, const char *name, enum ckpt_dtype dt, int ndim, const int64_t *shape,
		     const void *data)
{
	int s = stage_of(sw, name);
	char file[64];
	snprintf(file, sizeof(file), "%s.stage-%03d.h5", sw->base, s);
	if (sw->files[s] < 0) {
		sw->files[s] = ckpt_file_create(sw->w, file);
		if (sw->files[s] < 0 || ckpt_put_attr_i64(sw->w, sw->files[s], NULL, "iteration", sw->iteration) < 0 ||
		    ckpt_put_attr_i64(sw->w, sw->files[s], NULL, "pipeline_stage", s) < 0)
			return -1;
	}
	if (ckpt_put_tensor(sw->w, sw->files[s], name, dt, ndim, shape, data) < 0)
		return -1;
	return s == 0 ? 0 : ckpt_put_external_link(sw->w, sw->files[0], name, file, name);
}

static void stage_writer_free(struct stage_writer *sw)
{
	free(sw->files);
}

/* The target layout's checks: what train would refuse for this model
 * (gpt_config_check_layout). */
static int check_layout(const struct gpt_config *c, int tp, int pp, int vpp)
{
	char what[96];
	snprintf(what, sizeof(what), "target layout TP %d x PP %d%s", tp, pp, vpp > 1 ? " (interleaved)" : "");
	struct gpt_layout lay = { .tp = tp, .pp = pp, .vpp = vpp, .cp = 1, .ep = 1 };
	return gpt_config_check_layout(c, &lay, what);
}

static int target_layout(const struct args *a, int *tp, int *pp, int *vpp)
{
	*tp = a->target_tensor_parallel_size > 0 ? (int)a->target_tensor_parallel_size : 1;
	*pp = a->target_pipeline_parallel_size > 0 ? (int)a->target_pipeline_parallel_size : 1;
	*vpp = a->target_num_virtual_stages > 0 ? (int)a->target_num_virtual_stages : 1;
	if (*tp > (1 << 20) || *pp > (1 << 20) || *vpp > (1 << 20))
		return error("target parallel sizes must be at most %d", 1 << 20);
	if (*vpp > 1 && *pp < 2)
		return error("--target-num-virtual-stages-per-pipeline-rank needs --target-pipeline-parallel-size > 1");
	return 0;
}

/* Whether the source holds optimizer state: optim.h5 is there (1) or not
 * (0); -1 when model.h5 records it (optimizer_state_saved 1) but the file
 * is missing; 0 also for a file that model.h5 records as not written. */
static int source_optim(struct ckpt_reader *r, int mf)
{
	char *p = path_join(ckpt_reader_dir(r), "optim.h5");
	bool there = access(p, F_OK) == 0;
	free(p);
	int64_t saved = -1;
	if (ckpt_has_attr(r, mf, NULL, "optimizer_state_saved") != 1 ||
	    ckpt_get_attr_i64(r, mf, NULL, "optimizer_state_saved", &saved) != 0)
		saved = -1;
	if (!there)
		return saved > 0 ? -1 : 0;
	return saved != 0;
}

/* Root attributes of model.h5 for a converted checkpoint. */
int convert_put_model_attrs_counters(struct ckpt_writer *w, int mf, int64_t iteration, const char *config,
				     const struct megac_counters *c)
{
	if (ckpt_put_attr_i64(w, mf, NULL, "iteration", iteration) < 0 ||
	    ckpt_put_attr_f64(w, mf, NULL, "checkpoint_version", 3.0) < 0 ||
	    ckpt_put_attr_str(w, mf, NULL, "config", config) < 0 ||
	    ckpt_put_attr_i64(w, mf, NULL, "consumed_train_samples", c->consumed_train) < 0 ||
	    ckpt_put_attr_i64(w, mf, NULL, "consumed_valid_samples", c->consumed_valid) < 0 ||
	    ckpt_put_attr_i64(w, mf, NULL, "skipped_train_samples", c->skipped_train) < 0)
		return -1;
	return ckpt_put_attr_f64(w, mf, NULL, "num_floating_point_operations_so_far", c->flops);
}

int convert_put_model_attrs(struct ckpt_writer *w, int mf, int64_t iteration, const char *config)
{
	static const struct megac_counters zero;
	return convert_put_model_attrs_counters(w, mf, iteration, config, &zero);
}

/* A megac destination: never the source, never over an existing iteration,
 * never moving a tracker back; *created is what to remove on failure. */
int convert_megac_dest(const struct args *a, int64_t iter, char **created)
{
	*created = NULL;
	if (a->dtype && strcmp(a->dtype, "fp32"))
		return error("--dtype %s: megac checkpoints hold the fp32 master weights train reads; a 16-bit dtype "
			     "is for --to hf", a->dtype);
	char *src = a->load ? realpath(a->load, NULL) : NULL, *dst = realpath(a->save, NULL);
	bool same = src && dst && !strcmp(src, dst);
	free(src);
	free(dst);
	if (same)
		return error("--save '%s' is the --load directory: write the converted checkpoint elsewhere", a->save);
	char *it = ckpt_iter_path(a->save, iter);
	struct stat st;
	bool exists = stat(it, &st) == 0;
	if (exists)
		error("'%s' exists: ckpt_convert does not overwrite a checkpoint", it);
	free(it);
	if (exists)
		return -1;
	int64_t latest;
	int k = ckpt_latest(a->save, &latest);
	if (k < 0)
		return -1;
	if (k == 0 && latest != CKPT_RELEASE && latest > iter)
		return error("'%s' already tracks iteration %lld, later than %lld: its tracker would move back", a->save,
			     (long long)latest, (long long)iter);
	*created = first_missing(a->save);
	return 0;
}

/* ---- Hugging Face -> megac ---- */

static bool ignorable(const char *name, const struct gpt_config *c)
{
	size_t n = strlen(name);
	/* buffers older transformers saved, and a tied head saved anyway */
	static const char *const tails[] = { ".attn.bias", ".attn.masked_bias", ".rotary_emb.inv_freq" };
	for (size_t i = 0; i < sizeof(tails) / sizeof(tails[0]); i++) {
		size_t k = strlen(tails[i]);
		if (n > k && !strcmp(name + n - k, tails[i]))
			return true;
	}
	return !c->untied && !strcmp(name, "lm_head.weight");
}

/* Every expected tensor there with its shape and a float dtype, nothing
 * else: one message listing all that is wrong. */
static int check_hf(struct st_folder *f, const char *dir, const struct gpt_config *c, const struct hf_tensor *ts,
		    int nt)
{
	struct sbuf missing = SBUF_INIT, extra = SBUF_INIT, bad = SBUF_INIT;
	int nmiss = 0, nextra = 0, nbad = 0;
	for (int i = 0; i < nt; i++) {
		struct st_file *sf;
		int idx;
		if (st_folder_find(f, ts[i].name, &sf, &idx) < 0) {
			if (nmiss++ < 8)
				sbuf_addf(&missing, "%s%s", nmiss > 1 ? ", " : "", ts[i].name);
			continue;
		}
		enum ckpt_dtype dt;
		int nd;
		int64_t shape[CKPT_MAX_NDIM];
		st_info(sf, idx, &dt, &nd, shape);
		bool same = nd == ts[i].ndim;
		for (int d = 0; same && d < nd; d++)
			same = shape[d] == ts[i].shape[d];
		if (dt == CKPT_I64 || !same) {
			if (nbad++ < 8) {
				sbuf_addf(&bad, "%s%s is %s [", nbad > 1 ? ", " : "", ts[i].name, ckpt_dtype_name(dt));
				for (int d = 0; d < nd; d++)
					sbuf_addf(&bad, "%s%lld", d ? ", " : "", (long long)shape[d]);
				sbuf_addf(&bad, "], expected a float tensor [%lld", (long long)ts[i].shape[0]);
				for (int d = 1; d < ts[i].ndim; d++)
					sbuf_addf(&bad, ", %lld", (long long)ts[i].shape[d]);
				sbuf_addstr(&bad, "]");
			}
		}
	}
	for (int i = 0; i < st_folder_count(f); i++) {
		const char *name = st_folder_name(f, i);
		bool known = ignorable(name, c);
		for (int j = 0; !known && j < nt; j++)
			known = !strcmp(ts[j].name, name);
		if (!known && nextra++ < 8)
			sbuf_addf(&extra, "%s%s", nextra > 1 ? ", " : "", name);
	}
	int rc = 0;
	if (nmiss || nextra || nbad) {
		rc = error("'%s' does not hold the model its config.json describes:%s%s%s%s%s%s%s%s%s", dir,
			   nmiss ? " missing: " : "", missing.buf ? missing.buf : "", nmiss > 8 ? " ..." : "",
			   nextra ? (nmiss ? "; unexpected: " : " unexpected: ") : "", extra.buf ? extra.buf : "",
			   nextra > 8 ? " ..." : "", nbad ? ((nmiss || nextra) ? "; wrong: " : " wrong: ") : "",
			   bad.buf ? bad.buf : "", nbad > 8 ? " ..." : "");
	}
	sbuf_release(&missing);
	sbuf_release(&extra);
	sbuf_release(&bad);
	return rc;
}

/* DeepSeek-V3's multi-token prediction layers (num_nextn_predict_layers)
 * are stored as the layers after the last one, which transformers' class
 * does not load either: refused by name rather than listed as unexpected. */
static int deepseek_mtp(struct st_folder *f, const char *dir, int L)
{
	char prefix[64];
	snprintf(prefix, sizeof(prefix), "model.layers.%d.", L);
	for (int i = 0; i < st_folder_count(f); i++)
		if (!strncmp(st_folder_name(f, i), prefix, strlen(prefix)))
			return error("'%s' holds %s: DeepSeek-V3's multi-token prediction layers (num_nextn_predict_layers) "
				     "are not imported by megac yet", dir, st_folder_name(f, i));
	return 0;
}

/* A Mamba2ForCausalLM folder: the embedding under its older name
 * (backbone.embedding.weight, which transformers' load hook renames) is
 * taken; an in_proj with more rows than [z; x, B, C; dt] holds mamba_ssm's
 * gated MLP beside the mixer (transformers' d_mlp), which Megatron's mixer
 * lacks: refused by name. */
static int mamba2_folder(struct st_folder *f, const char *dir, const struct gpt_config *c, struct hf_tensor *ts,
			 int nt)
{
	struct st_file *sf;
	int idx;
	if (st_folder_find(f, "backbone.embeddings.weight", &sf, &idx) < 0 &&
	    st_folder_find(f, "backbone.embedding.weight", &sf, &idx) == 0)
		for (int i = 0; i < nt; i++)
			if (!strcmp(ts[i].name, "backbone.embeddings.weight"))
				snprintf(ts[i].name, sizeof(ts[i].name), "backbone.embedding.weight");
	for (int i = 0; i < nt; i++) {
		if (!strstr(ts[i].name, ".mixer.in_proj.weight") || st_folder_find(f, ts[i].name, &sf, &idx) < 0)
			continue;
		enum ckpt_dtype dt;
		int nd;
		int64_t shape[CKPT_MAX_NDIM];
		st_info(sf, idx, &dt, &nd, shape);
		if (nd == 2 && shape[1] == c->h && shape[0] > ts[i].shape[0] && (shape[0] - ts[i].shape[0]) % 2 == 0)
			return error("'%s': %s has %lld rows, %lld more than [z; x, B, C; dt]: a gated MLP of d_mlp = %lld "
				     "beside the mixer (mamba_ssm's d_ssm < d_inner), which Megatron's Mamba mixer (and "
				     "megac's) does not have", dir, ts[i].name, (long long)shape[0],
				     (long long)(shape[0] - ts[i].shape[0]), (long long)(shape[0] - ts[i].shape[0]) / 2);
	}
	return 0;
}

/* The HF tensors [i, *j) that fill one megac tensor (they are listed
 * together), that tensor's shape and element count. */
static size_t src_group(const struct gpt_config *c, const struct hf_tensor *ts, int nt, int i, int *j, int *nd,
			int64_t *shape)
{
	*j = i + 1;
	while (*j < nt && !strcmp(ts[*j].src, ts[i].src))
		(*j)++;
	hf_src_shape(c, &ts[i], nd, shape);
	return numel(*nd, shape);
}

/* One megac tensor from the HF tensors [i, j) that fill it. */
static int import_tensor(struct st_folder *f, const struct gpt_config *c, const struct hf_tensor *ts, int i, int j,
			 float *dst, size_t n, float *tmp)
{
	memset(dst, 0, n * sizeof(float)); /* the vocabulary padding rows stay 0 */
	for (int q = i; q < j; q++) {
		struct st_file *sf;
		int idx;
		size_t bytes;
		if (st_folder_find(f, ts[q].name, &sf, &idx) < 0)
			BUG("'%s' vanished after check_hf", ts[q].name);
		enum ckpt_dtype dt;
		int nd;
		int64_t shape[CKPT_MAX_NDIM];
		st_info(sf, idx, &dt, &nd, shape);
		const void *data = st_data(sf, idx, &bytes);
		ckpt_to_f32(dt, data, numel(nd, shape), tmp);
		st_release(sf, idx);
		hf_import(c, &ts[q], tmp, dst);
	}
	return 0;
}

static int from_hf(const struct args *a)
{
	if (!a->load || !a->save)
		return error("--from hf needs --load HF_FOLDER and --save DIR");
	int tp, pp, vpp;
	if (target_layout(a, &tp, &pp, &vpp) < 0)
		return -1;
	char *cfg_path = path_join(a->load, "config.json");
	struct gpt_config c;
	enum hf_arch arch;
	int rc = hf_config_read(cfg_path, a->make_vocab_size_divisible_by, tp, &c, &arch);
	free(cfg_path);
	if (rc < 0 || check_layout(&c, tp, pp, vpp) < 0)
		return -1;
	struct st_folder *f = st_folder_open(a->load);
	if (!f)
		return -1;
	struct hf_tensor *ts;
	int nt;
	hf_tensors(&c, arch, &ts, &nt);
	/* OpenAI's GPT-2 files name tensors without "transformer." (wte.weight,
	 * h.0.attn.c_attn.weight), and transformers loads them so */
	struct st_file *sf;
	int idx;
	if (arch == HF_GPT2 && st_folder_find(f, "transformer.wte.weight", &sf, &idx) < 0 &&
	    st_folder_find(f, "wte.weight", &sf, &idx) == 0)
		for (int i = 0; i < nt; i++)
			if (!strncmp(ts[i].name, "transformer.", 12))
				memmove(ts[i].name, ts[i].name + 12, strlen(ts[i].name + 12) + 1);
	if (((arch == HF_DEEPSEEK_V3 || arch == HF_DEEPSEEK_V3_HALVES) && deepseek_mtp(f, a->load, c.L) < 0) ||
	    (arch == HF_MAMBA2 && mamba2_folder(f, a->load, &c, ts, nt) < 0)) {
		free(ts);
		st_folder_close(f);
		return -1;
	}
	if (check_hf(f, a->load, &c, ts, nt) < 0) {
		free(ts);
		st_folder_close(f);
		return -1;
	}
	char *created;
	if (convert_megac_dest(a, 0, &created) < 0) {
		free(ts);
		st_folder_close(f);
		return -1;
	}
	/* the folder's tokenizer, when it has one megac reads, goes with the model */
	struct ckpt_tok tok;
	int have_tok = ckpt_tok_from_dir(&tok, a->load, a->make_vocab_size_divisible_by * tp);
	if (have_tok < 0)
		warning("the checkpoint records no tokenizer: give the tokenizer flags to train or serve it");
	struct ckpt_writer *w = ckpt_begin(a->save, 0);
	struct stage_writer sw;
	rc = w ? stage_writer_init(&sw, w, "model", c.L, pp, vpp, 0) : -1;
	char *config = gpt_config_to_json(&c, 1.0);
	if (rc == 0)
		rc = convert_put_model_attrs(w, sw.files[0], 0, config);
	if (rc == 0) /* weights only: train --finetune (or --no-load-optim) */
		rc = ckpt_put_attr_i64(w, sw.files[0], NULL, "optimizer_state_saved", 0);
	if (rc == 0 && have_tok == 0)
		rc = ckpt_tok_put(w, sw.files[0], &tok);
	if (have_tok == 0)
		ckpt_tok_free(&tok);
	free(config);
	float *dst = NULL, *tmp = NULL;
	size_t cap = 0;
	int written = 0;
	for (int i = 0, j; rc == 0 && i < nt; i = j) {
		int nd;
		int64_t shape[2];
		size_t n = src_group(&c, ts, nt, i, &j, &nd, shape);
		if (n > cap) {
			free(dst), free(tmp);
			dst = xmalloc(n * sizeof(float));
			tmp = xmalloc(n * sizeof(float));
			cap = n;
		}
		rc = import_tensor(f, &c, ts, i, j, dst, n, tmp);
		if (rc == 0)
			rc = stage_put(&sw, ts[i].src, CKPT_F32, nd, shape, dst);
		written++;
	}
	if (rc == 0)
		rc = ckpt_commit(w);
	else if (w)
		ckpt_abort(w);
	if (w)
		stage_writer_free(&sw);
	if (rc < 0)
		convert_remove_tree(created);
	free(created);
	if (rc == 0 && a->verify) { /* read every tensor back through the reader train uses */
		struct ckpt_reader *r = ckpt_open(a->save, 0);
		int mf = r ? ckpt_file_open(r, "model.h5") : -1;
		rc = mf < 0 ? -1 : 0;
		for (int i = 0, j; rc == 0 && i < nt; i = j) {
			int nd;
			int64_t shape[2];
			size_t n = src_group(&c, ts, nt, i, &j, &nd, shape);
			import_tensor(f, &c, ts, i, j, dst, n, tmp);
			rc = get_f32(r, mf, ts[i].src, nd, shape, tmp);
			if (rc == 0 && memcmp(dst, tmp, n * sizeof(float)))
				rc = error("--verify: '%s' of '%s' differs from the Hugging Face tensors it came from",
					   ts[i].src, a->save);
		}
		if (r)
			ckpt_close(r);
		if (rc == 0)
			info("verified %d tensors", written);
	}
	if (rc == 0)
		info("wrote iteration 0 of '%s' (%d tensors, TP %d x PP %d layout, vocabulary %d padded to %d) from "
		     "%s '%s'; continue with train --load %s --finetune",
		     a->save, written, tp, pp, c.V, c.Vp, hf_arch_class(arch), a->load, a->save);
	free(dst), free(tmp);
	free(ts);
	st_folder_close(f);
	return rc;
}

/* ---- megac -> megac ---- */

static bool vocab_rows(const char *name)
{
	const char *slash = strrchr(name, '/');
	const char *n = slash ? slash + 1 : name;
	return !strcmp(n, "embedding.word_embeddings.weight") || !strcmp(n, "output_layer.weight");
}

/* Set key to an integer in the JSON object text *v (re-serialised in
 * place); text that is not JSON is left as it is. */
static void json_text_set_int(char **v, const char *key, int64_t val)
{
	json_t *o = json_loads(*v, 0, NULL);
	if (!o)
		return;
	json_object_set_new(o, key, json_integer(val));
	free(*v);
	*v = json_dumps(o, JSON_SORT_KEYS | JSON_INDENT(1));
	json_decref(o);
}

/* Copy the root attributes of file `rf` to `wf` (config rewritten for the
 * new padded vocabulary, and the tokenizer record's padding with it:
 * new_multiple, when it changed). optimizer_state_saved is not copied: the
 * caller writes what it writes. */
static int copy_attrs(struct ckpt_reader *r, int rf, struct ckpt_writer *w, int wf, int new_vp, int64_t new_multiple)
{
	char **names, *kinds;
	size_t n;
	if (ckpt_list_attrs(r, rf, &names, &kinds, &n) < 0)
		return -1;
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		const char *k = names[i];
		if (!strcmp(k, "megac_format_version") || !strcmp(k, "optimizer_state_saved"))
			continue; /* every file gets its own; the truth about the optimizer, from the caller */
		if (kinds[i] == 'i') {
			int64_t v;
			rc = ckpt_get_attr_i64(r, rf, NULL, k, &v) < 0 ? -1 : ckpt_put_attr_i64(w, wf, NULL, k, v);
		} else if (kinds[i] == 'f') {
			double v;
			rc = ckpt_get_attr_f64(r, rf, NULL, k, &v) < 0 ? -1 : ckpt_put_attr_f64(w, wf, NULL, k, v);
		} else if (kinds[i] == 's') {
			char *v;
			rc = ckpt_get_attr_str(r, rf, NULL, k, &v);
			if (rc == 0 && !strcmp(k, "tokenizer") && new_multiple >= 0)
				json_text_set_int(&v, "padding_multiple", new_multiple);
			if (rc == 0 && !strcmp(k, "config"))
				json_text_set_int(&v, "padded_vocab_size", new_vp);
			if (rc == 0)
				rc = ckpt_put_attr_str(w, wf, NULL, k, v);
			free(v);
		} else {
			warning("'%s': root attribute '%s' is not an integer, float or string; not copied",
				ckpt_reader_dir(r), k);
		}
	}
	ckpt_free_names(names, n);
	free(kinds);
	return rc;
}

/* Every tensor of source file `rf` into the stage files of sw, the
 * vocabulary rows re-padded to new_vp and the dtype converted. */
static int copy_tensors(struct ckpt_reader *r, int rf, struct stage_writer *sw, int new_vp, const char *dtype_flag_s,
			int *count)
{
	char **names;
	size_t n;
	if (ckpt_list_tensors(r, rf, &names, &n) < 0)
		return -1;
	int rc = 0;
	float *buf = NULL;
	size_t cap = 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		enum ckpt_dtype dt;
		int nd;
		int64_t shape[CKPT_MAX_NDIM];
		if (ckpt_tensor_info(r, rf, names[i], &dt, &nd, shape) < 0) {
			rc = -1;
			break;
		}
		if (dt == CKPT_I64) {
			rc = error("'%s': tensor '%s' is int64; ckpt_convert converts float tensors", ckpt_reader_dir(r),
				   names[i]);
			break;
		}
		int64_t out_shape[CKPT_MAX_NDIM];
		memcpy(out_shape, shape, sizeof(shape));
		if (vocab_rows(names[i]) && nd == 2)
			out_shape[0] = new_vp;
		size_t nin = numel(nd, shape), nout = numel(nd, out_shape), big = nin > nout ? nin : nout;
		if (big > cap) {
			free(buf);
			buf = xmalloc(big * sizeof(float));
			cap = big;
		}
		rc = get_f32(r, rf, names[i], nd, shape, buf);
		if (rc < 0)
			break;
		if (nout > nin) /* new padding rows: zero */
			memset(buf + nin, 0, (nout - nin) * sizeof(float));
		enum ckpt_dtype odt = dtype_flag(dtype_flag_s, dt);
		ckpt_from_f32(odt, buf, nout, buf);
		rc = stage_put(sw, names[i], odt, nd, out_shape, buf);
		(*count)++;
	}
	free(buf);
	ckpt_free_names(names, n);
	return rc;
}

/* --verify for megac -> megac: every tensor of the new checkpoint equals the
 * source's, rows re-padded and dtype converted as written. */
static int verify_copy(const struct args *a, struct ckpt_reader *src, const char *file, int64_t iter, int new_vp)
{
	struct ckpt_reader *dst = ckpt_open(a->save, iter);
	int sf = ckpt_file_open(src, file), df = dst ? ckpt_file_open(dst, file) : -1;
	char **names;
	size_t n;
	if (sf < 0 || df < 0 || ckpt_list_tensors(src, sf, &names, &n) < 0) {
		if (dst)
			ckpt_close(dst);
		return -1;
	}
	int rc = 0;
	for (size_t i = 0; rc == 0 && i < n; i++) {
		enum ckpt_dtype dt;
		int nd;
		int64_t shape[CKPT_MAX_NDIM], out_shape[CKPT_MAX_NDIM];
		rc = ckpt_tensor_info(src, sf, names[i], &dt, &nd, shape);
		if (rc < 0)
			break;
		memcpy(out_shape, shape, sizeof(shape));
		if (vocab_rows(names[i]) && nd == 2)
			out_shape[0] = new_vp;
		size_t nin = numel(nd, shape), nout = numel(nd, out_shape), big = nin > nout ? nin : nout;
		float *want = xcalloc(big, sizeof(float)), *got = xmalloc(big * sizeof(float));
		void *conv = xmalloc(big * sizeof(float));
		rc = get_f32(src, sf, names[i], nd, shape, want);
		if (rc == 0) {
			if (nout < nin)
				; /* the kept rows come first */
			else
				memset(want + nin, 0, (nout - nin) * sizeof(float));
			enum ckpt_dtype odt = dtype_flag(a->dtype, dt);
			ckpt_from_f32(odt, want, nout, conv);
			ckpt_to_f32(odt, conv, nout, want);
			rc = get_f32(dst, df, names[i], nd, out_shape, got);
		}
		if (rc == 0 && memcmp(want, got, nout * sizeof(float)))
			rc = error("--verify: tensor '%s' of '%s' differs from the source", names[i], file);
		free(want), free(got), free(conv);
	}
	ckpt_free_names(names, n);
	ckpt_close(dst);
	return rc;
}

static int megac_to_megac(const struct args *a)
{
	if (!a->save)
		return error("--save DIR: where the converted checkpoint goes");
	int tp, pp, vpp;
	if (target_layout(a, &tp, &pp, &vpp) < 0)
		return -1;
	int64_t iter;
	struct ckpt_reader *r = open_source(a, &iter);
	if (!r)
		return -1;
	struct gpt_config c;
	int mf = ckpt_file_open(r, "model.h5");
	if (mf < 0 || gpt_config_from_ckpt(&c, r, mf) < 0 || check_true_vocab(a, &c) < 0) {
		ckpt_close(r);
		return -1;
	}
	/* the vocabulary padding train computes for the target TP: with a target
	 * TP (or divisor) given, train's rule; otherwise the source's */
	int new_vp = c.Vp;
	if (args_given(a, "--target-tensor-parallel-size") || args_given(a, "--make-vocab-size-divisible-by"))
	{
		int64_t vp = gpt_padded_vocab(c.V, a->make_vocab_size_divisible_by, tp);
		if (vp < 0) {
			ckpt_close(r);
			return -1;
		}
		new_vp = (int)vp;
	}
	struct gpt_config target = c; /* the model as the target layout holds it */
	target.Vp = new_vp;
	if (check_layout(&target, tp, pp, vpp) < 0) {
		ckpt_close(r);
		return -1;
	}
	if (new_vp != c.Vp)
		warning("the vocabulary is padded to %d rows instead of %d (%s x TP %d); the padding rows take part in "
			"the softmax, so the losses of training on differ slightly from the source's (pass the source's "
			"--make-vocab-size-divisible-by / TP to keep %d)",
			new_vp, c.Vp, args_given(a, "--make-vocab-size-divisible-by") ? "--make-vocab-size-divisible-by"
											: "the default divisor 128",
			tp, c.Vp);
	char *created;
	if (convert_megac_dest(a, iter, &created) < 0) {
		ckpt_close(r);
		return -1;
	}
	int of = -1;
	bool optim = !a->no_optim;
	if (optim) {
		/* a source without optimizer state gives a target without it, said
		 * and recorded; one that says it saved the state but lacks the file
		 * is damaged */
		int there = source_optim(r, mf);
		optim = there > 0;
		if (there < 0) {
			error("'%s/optim.h5' is missing, although model.h5 records optimizer state (optimizer_state_saved "
			      "= 1): the checkpoint is damaged; give --no-optim to convert the weights alone",
			      ckpt_reader_dir(r));
			ckpt_close(r);
			convert_remove_tree(created);
			free(created);
			return -1;
		}
		if (!optim)
			warning("'%s' holds no optimizer state (no optim.h5): the converted checkpoint has none either "
				"(resume it with --no-load-optim, or --finetune)", ckpt_reader_dir(r));
		if (optim && (of = ckpt_file_open(r, "optim.h5")) < 0) {
			ckpt_close(r);
			convert_remove_tree(created);
			free(created);
			return -1;
		}
	}
	if (ckpt_check_iteration(r) < 0) {
		ckpt_close(r);
		convert_remove_tree(created);
		free(created);
		return -1;
	}
	struct ckpt_writer *w = ckpt_begin(a->save, iter);
	if (!w) {
		convert_remove_tree(created);
		free(created);
		ckpt_close(r);
		return -1;
	}
	struct stage_writer ms = { 0 }, os = { 0 };
	int count = 0;
	int rc = stage_writer_init(&ms, w, "model", c.L, pp, vpp, iter);
	int64_t multiple = new_vp == c.Vp ? -1 : a->make_vocab_size_divisible_by * tp;
	if (rc == 0)
		rc = copy_attrs(r, mf, w, ms.files[0], new_vp, multiple);
	if (rc == 0) /* what is written, whatever the source said */
		rc = ckpt_put_attr_i64(w, ms.files[0], NULL, "optimizer_state_saved", optim);
	if (rc == 0)
		rc = copy_tensors(r, mf, &ms, new_vp, a->dtype, &count);
	if (optim) {
		if (rc == 0)
			rc = stage_writer_init(&os, w, "optim", c.L, pp, vpp, iter);
		if (rc == 0)
			rc = copy_attrs(r, of, w, os.files[0], new_vp, multiple);
		if (rc == 0)
			rc = copy_tensors(r, of, &os, new_vp, a->dtype, &count);
	}
	if (rc == 0)
		rc = ckpt_commit(w);
	else
		ckpt_abort(w);
	if (rc < 0)
		convert_remove_tree(created);
	free(created);
	stage_writer_free(&ms);
	if (optim)
		stage_writer_free(&os);
	if (rc == 0 && a->verify) {
		rc = verify_copy(a, r, "model.h5", iter, new_vp);
		if (rc == 0 && optim)
			rc = verify_copy(a, r, "optim.h5", iter, new_vp);
		if (rc == 0)
			info("verified %d tensors", count);
	}
	if (rc == 0)
		info("wrote iteration %lld of '%s' for TP %d x PP %d%s (%d tensors%s, vocabulary padded to %d)",
		     (long long)iter, a->save, tp, pp, vpp > 1 ? " interleaved" : "", count,
		     optim ? " with the optimizer state" : "", new_vp);
	ckpt_close(r);
	return rc;
}

static char *trim_slashes(const char *p)
{
	char *t = xstrdup(p);
	size_t n = strlen(t);
	while (n > 1 && t[n - 1] == '/')
		t[--n] = 0;
	return t;
}

static int convert(const struct args *a);

/* convert.py's --loader/--saver/--model-type, as megac's --from/--to. */
static int convert_py_flags(struct args *a)
{
	static const char *const megatron_names[] = { "megatron", "mcore", "core", "legacy" };
	if (a->model_type && strcmp(a->model_type, "GPT"))
		return error("--model-type %s: megac converts GPT-style models only", a->model_type);
	const struct {
		const char *flag, *value, *megac_flag;
		char **megac;
	} sides[] = { { "--loader", a->loader, "--from", &a->convert_from },
		      { "--saver", a->saver, "--to", &a->convert_to } };
	for (int i = 0; i < 2; i++) {
		const char *v = sides[i].value;
		if (!v)
			continue;
		const char *as = "hf";
		for (size_t k = 0; k < sizeof(megatron_names) / sizeof(megatron_names[0]); k++)
			if (!strcmp(v, megatron_names[k]))
				as = "megac";
		const char *given = args_given(a, sides[i].megac_flag) ? *sides[i].megac : NULL;
		if (given && strcmp(given, as))
			return error("%s %s and %s %s contradict each other: give one of them", sides[i].flag, v,
				     sides[i].megac_flag, given);
		*sides[i].megac = (char *)as;
	}
	return 0;
}

int convert_command(const struct args *a0)
{
	struct args a = *a0;
	if (convert_py_flags(&a) < 0)
		return -1;
	char *save = a0->save ? trim_slashes(a0->save) : NULL, *load = a0->load ? trim_slashes(a0->load) : NULL;
	a.save = save;
	a.load = load;
	int rc = convert(&a);
	free(save);
	free(load);
	return rc;
}

/* megac -> Megatron's legacy torch or torch_dist format, for a target TP/PP layout. */
int convert_to_megatron(const struct args *a)
{
	return convert_to_megatron_ex(a, false);
}

int convert_to_megatron_ex(const struct args *a, bool replace)
{
	const char *fmt = args_given(a, "--ckpt-format") ? a->ckpt_format : "torch";
	if (strcmp(fmt, "torch") && strcmp(fmt, "torch_dist") && strcmp(fmt, "fsdp_dtensor"))
		return error("--to megatron --ckpt-format %s: megac writes Megatron's legacy torch format, torch_dist "
			     "and fsdp_dtensor",
			     fmt);
	int tp, pp, vpp;
	if (target_layout(a, &tp, &pp, &vpp) < 0)
		return -1;
	int64_t iter;
	struct ckpt_reader *r = open_source(a, &iter);
	if (!r)
		return -1;
	struct gpt_config c;
	int mf = ckpt_file_open(r, "model.h5");
	if (mf < 0 || ckpt_check_iteration(r) < 0 || gpt_config_from_ckpt(&c, r, mf) < 0 || not_hybrid(&c, r) < 0 ||
	    check_true_vocab(a, &c) < 0) {
		ckpt_close(r);
		return -1;
	}
	/* Megatron pads the vocabulary for the target TP: --make-vocab-size-divisible-by x TP */
	int64_t vp = gpt_padded_vocab(c.V, a->make_vocab_size_divisible_by, tp);
	struct gpt_config target = c;
	target.Vp = (int)vp;
	if (vp < 0 || check_layout(&target, tp, pp, vpp) < 0) {
		ckpt_close(r);
		return -1;
	}
	enum ckpt_dtype dt = dtype_flag(a->dtype, CKPT_F32);
	char *it = ckpt_iter_path(a->save, iter);
	struct stat st;
	bool exists = !replace && stat(it, &st) == 0;
	if (exists)
		error("'%s' exists: ckpt_convert does not overwrite a checkpoint", it);
	free(it);
	if (exists) {
		ckpt_close(r);
		return -1;
	}
	struct megatron_export e = { .r = r, .mf = mf, .c = &target, .src_vp = c.Vp, .iteration = iter, .tp = tp,
				     .pp = pp, .ep = a->target_expert_parallel_size > 1 ? (int)a->target_expert_parallel_size : 1,
				     .vpp = vpp, .grouped = a->moe_grouped_gemm, .dtype = dt, .dist = strcmp(fmt, "torch") != 0,
				     .fsdp = !strcmp(fmt, "fsdp_dtensor"), .of = -1,
				     .beta1 = a->adam_beta1, .beta2 = a->adam_beta2, .eps = a->adam_eps };
	/* Adam's state goes into torch_dist and fsdp_dtensor (by name) and the
	 * legacy format (by position, in the order of Megatron's
	 * named_parameters(), which megac rebuilds for dense models only) */
	bool has_optim = source_optim(r, mf) > 0;
	bool legacy_order = c.E <= 0 && !c.mtp && !c.mla && !c.hybrid;
	if ((e.dist || legacy_order) && has_optim && !a->no_optim && (e.of = ckpt_file_open(r, "optim.h5")) < 0) {
		ckpt_close(r);
		return -1;
	}
	/* Adam's constants: the checkpoint's (train records them), unless given */
	static const char *const adam[] = { "--adam-beta1", "adam_beta1", "--adam-beta2", "adam_beta2", "--adam-eps",
					    "adam_eps" };
	double *val[] = { &e.beta1, &e.beta2, &e.eps };
	for (int i = 0; i < 3 && e.of >= 0; i++)
		if (!args_given(a, adam[2 * i]) && ckpt_has_attr(r, e.of, NULL, adam[2 * i + 1]) == 1 &&
		    ckpt_get_attr_f64(r, e.of, NULL, adam[2 * i + 1], val[i]) < 0) {
			ckpt_close(r);
			return -1;
		}
	if (!e.dist && !legacy_order && has_optim && !a->no_optim)
		info("the legacy torch format gets the weights only of a model with %s (Megatron's optimizer state is "
		     "written for --ckpt-format torch_dist); load it in Megatron with --no-load-optim, or --finetune",
		     c.E > 0 ? "mixture-of-experts layers" : c.mtp ? "multi-token prediction" :
		     c.mla ? "multi-latent attention" : "Mamba layers");
	int rc = megatron_torch_export(a, &e);
	ckpt_close(r);
	return rc;
}

static int convert(const struct args *a)
{
	const char *to = a->convert_to ? a->convert_to : "megac", *from = a->convert_from ? a->convert_from : "megac";
	if (!strcmp(to, "hf") && !strcmp(from, "hf"))
		return error("--to hf and --from hf: give one of them");
	if (!a->save)
		return error("--save DIR: where the converted checkpoint goes");
	if (!strcmp(to, "hf"))
		return to_hf(a);
	if (!strcmp(to, "megatron")) {
		if (strcmp(from, "megac"))
			return error("--to megatron reads a megac checkpoint (--from megac)");
		return convert_to_megatron(a);
	}
	if (!strcmp(from, "hf"))
		return from_hf(a);
	if (!strcmp(from, "megatron"))
		return megatron_torch_import(a);
	return megac_to_megac(a);
}
