/*
 * megatron_ckpt.c - Megatron-LM's legacy `torch` checkpoint format out of
 * megac's HDF5 checkpoint (see megatron_ckpt.h).
 *
 * What Megatron's save_checkpoint writes with --ckpt-format torch, one file
 * per tensor- and pipeline-parallel rank:
 *
 *   <save>/latest_checkpointed_iteration.txt
 *   <save>/iter_0000500/mp_rank_00/model_optim_rng.pt          (PP 1)
 *   <save>/iter_0000500/mp_rank_01_002/model_optim_rng.pt      (TP rank 1, PP stage 2)
 *
 * each a torch.save of {"args": argparse.Namespace, "checkpoint_version":
 * 3.0, "iteration": N, "model": OrderedDict of the rank's tensors}. The
 * tensors are the rank's shards under Megatron Core's names with the
 * Transformer Engine layer spec (megac's own names), the layers numbered
 * from 0 within each stage, as Megatron numbers a stage's local layers. A
 * shard is cut from the global tensor by the rank's parameter registry
 * (params_global_pos_rank: TP's rows or columns, SwiGLU's [gate; up] halves
 * per rank), so the split is the one train itself uses. On the last stage of
 * a pipeline with tied embeddings, the copy of the word embeddings is
 * Megatron's output_layer.weight. Every Transformer Engine module carries
 * an empty `_extra_state` (uint8, 0 elements: TE's state without FP8), as
 * TE's get_extra_state returns it, so that a strict load finds every key.
 *
 * Not written: optimizer state, scheduler and RNG state (load them with
 * --no-load-optim --no-load-rng, or --finetune), mixture-of-experts layers,
 * multi-token prediction and virtual pipeline stages (refused).
 */
#include "convert/megatron_ckpt.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/error.h"
#include "base/xalloc.h"
#include "ckpt/dtype.h"
#include "ckpt/pickle.h"
#include "ckpt/torch_zip.h"
#include "dist/dist.h"
#include "memcalc/megac_mem.h"
#include "model/gpt.h"
#include "tensor/mem.h"
#include "tensor/params.h"

/* The tensors of one rank's file: their bytes live until the file is written. */
struct rank_file {
	void **bufs;
	size_t n, cap;
};

static void *keep(struct rank_file *rf, size_t bytes)
{
	if (rf->n == rf->cap) {
		rf->cap = rf->cap ? 2 * rf->cap : 64;
		rf->bufs = xrealloc(rf->bufs, rf->cap * sizeof(*rf->bufs));
	}
	return rf->bufs[rf->n++] = xcalloc(bytes ? bytes : 1, 1);
}

static void rank_file_free(struct rank_file *rf)
{
	for (size_t i = 0; i < rf->n; i++)
		free(rf->bufs[i]);
	free(rf->bufs);
	memset(rf, 0, sizeof(*rf));
}

static enum pk_dtype pk_of(enum ckpt_dtype dt)
{
	return dt == CKPT_BF16 ? PK_DT_BF16 : dt == CKPT_F16 ? PK_DT_F16 : PK_DT_F32;
}

/* The name of global tensor `name` on stage whose first layer is l0:
 * decoder.layers.<l> becomes decoder.layers.<l - l0>. */
static char *local_name(const char *name, int l0)
{
	static const char pre[] = "decoder.layers.";
	if (strncmp(name, pre, sizeof(pre) - 1))
		return xstrdup(name);
	char *end;
	long l = strtol(name + sizeof(pre) - 1, &end, 10);
	return xasprintf("%s%ld%s", pre, l - l0, end);
}

/* An empty uint8 tensor: TE's _extra_state without FP8 state. */
static struct pk_value *empty_u8(struct pk_doc *d)
{
	static const uint8_t none[1];
	int64_t size[1] = { 0 };
	return pk_tensor(d, pk_storage(d, PK_DT_U8, none, 0), 0, 1, size, NULL);
}

/* `module._extra_state` after the weight of each Transformer Engine module
 * (linear_qkv, linear_proj, linear_fc1, linear_fc2) and core_attention's
 * beside linear_qkv. */
static void te_extra_state(struct pk_doc *d, struct pk_value *model, const char *lname)
{
	static const char *const mods[] = { "self_attention.linear_qkv.weight", "self_attention.linear_proj.weight",
					    "mlp.linear_fc1.weight", "mlp.linear_fc2.weight" };
	size_t n = strlen(lname);
	for (size_t i = 0; i < sizeof(mods) / sizeof(mods[0]); i++) {
		size_t m = strlen(mods[i]);
		if (n < m || strcmp(lname + n - m, mods[i]))
			continue;
		char *key = xasprintf("%.*s_extra_state", (int)(n - strlen("weight")), lname);
		pk_set_str(d, model, key, empty_u8(d));
		free(key);
		if (i == 0) {
			key = xasprintf("%.*score_attention._extra_state", (int)(n - strlen("linear_qkv.weight")), lname);
			pk_set_str(d, model, key, empty_u8(d));
			free(key);
		}
	}
}

/* Megatron's args, as much as its loader and tools read of a model. */
static struct pk_value *args_namespace(struct pk_doc *d, const struct megatron_export *e)
{
	const struct gpt_config *c = e->c;
	struct pk_value *ns = pk_namespace(d), *st = ns->obj.state;
	struct {
		const char *k;
		int64_t v;
	} ints[] = {
		{ "num_layers", c->L },
		{ "hidden_size", c->h },
		{ "ffn_hidden_size", c->f },
		{ "num_attention_heads", c->a },
		{ "num_query_groups", c->g },
		{ "kv_channels", c->k },
		{ "seq_length", c->S },
		{ "max_position_embeddings", c->P },
		{ "padded_vocab_size", c->Vp },
		{ "tensor_model_parallel_size", e->tp },
		{ "pipeline_model_parallel_size", e->pp },
		{ "iteration", e->iteration < 0 ? 0 : e->iteration },
		{ "consumed_train_samples", 0 },
		{ "consumed_valid_samples", 0 },
	};
	for (size_t i = 0; i < sizeof(ints) / sizeof(ints[0]); i++)
		pk_set_str(d, st, ints[i].k, pk_int(d, ints[i].v));
	struct {
		const char *k;
		bool v;
	} bools[] = {
		{ "group_query_attention", c->g != c->a },
		{ "add_position_embedding", !c->rope },
		{ "swiglu", c->swiglu },
		{ "add_bias_linear", c->bias },
		{ "add_qkv_bias", c->qkv_bias },
		{ "qk_layernorm", c->qk_norm },
		{ "untie_embeddings_and_output_weights", c->untied },
		{ "apply_layernorm_1p", c->norm_1p },
		{ "bf16", e->dtype == CKPT_BF16 },
		{ "fp16", e->dtype == CKPT_F16 },
	};
	for (size_t i = 0; i < sizeof(bools) / sizeof(bools[0]); i++)
		pk_set_str(d, st, bools[i].k, pk_bool(d, bools[i].v));
	pk_set_str(d, st, "position_embedding_type", pk_str(d, c->yarn ? "yarn" : c->rope ? "rope" : "learned_absolute"));
	pk_set_str(d, st, "normalization", pk_str(d, c->rmsnorm ? "RMSNorm" : "LayerNorm"));
	char eps[32]; /* the flag's decimal, not the float's binary value */
	snprintf(eps, sizeof(eps), "%.7g", (double)c->eps);
	pk_set_str(d, st, "norm_epsilon", pk_float(d, strtod(eps, NULL)));
	pk_set_str(d, st, "virtual_pipeline_model_parallel_size", pk_none(d));
	pk_set_str(d, st, "ckpt_format", pk_str(d, "torch"));
	pk_set_str(d, st, "params_dtype", pk_global(d, e->dtype == CKPT_BF16 ? "torch.bfloat16" :
						 e->dtype == CKPT_F16 ? "torch.float16" : "torch.float32"));
	return ns;
}

/* Read global tensor p (its vocabulary rows padded or cut to the target's)
 * as float32. */
static int read_global(const struct megatron_export *e, const struct param *p, float *out)
{
	int64_t shape[2] = { p->shape[0], p->ndim == 2 ? p->shape[1] : 1 };
	bool vocab = (p->flags & PARAM_EMB_OR_OUT) && p->ndim == 2 && p->shape[0] == e->c->Vp;
	int64_t rows = vocab ? e->src_vp : shape[0];
	int64_t src[2] = { rows, shape[1] };
	size_t n = (size_t)(rows < shape[0] ? shape[0] : rows) * (size_t)shape[1];
	enum ckpt_dtype dt;
	int nd;
	int64_t have[CKPT_MAX_NDIM];
	if (ckpt_tensor_info(e->r, e->mf, p->name, &dt, &nd, have) < 0)
		return -1;
	if (nd != p->ndim || have[0] != src[0] || (nd == 2 && have[1] != src[1]))
		return error("'%s': tensor '%s' has another shape than the model's", ckpt_reader_dir(e->r), p->name);
	void *raw = xmalloc(n * ckpt_dtype_size(dt));
	int rc = ckpt_get_tensor(e->r, e->mf, p->name, dt, nd, have, raw);
	if (rc == 0) {
		ckpt_to_f32(dt, raw, (size_t)src[0] * (size_t)src[1], out);
		if (rows < shape[0]) /* new padding rows: zero */
			memset(out + (size_t)rows * shape[1], 0, (size_t)(shape[0] - rows) * shape[1] * sizeof(float));
	}
	free(raw);
	return rc;
}

/* One rank's state dict: its shards of every tensor of model m. */
static int rank_model(struct pk_doc *d, struct pk_value *model, struct rank_file *rf, const struct megatron_export *e,
		      const struct gpt_model *m, int rank, int l0, bool last_stage_copy_is_output)
{
	float *global = NULL, *local = NULL;
	size_t cap = 0;
	int rc = 0;
	for (int i = 0; rc == 0 && i < m->reg.n; i++) {
		const struct param *p = &m->reg.p[i];
		size_t gn = (size_t)p->shape[0] * (p->ndim == 2 ? (size_t)p->shape[1] : 1);
		size_t need = gn > (size_t)e->src_vp * (size_t)e->c->h ? gn : (size_t)e->src_vp * (size_t)e->c->h;
		if (need > cap) {
			free(global);
			free(local);
			global = xmalloc(need * sizeof(float));
			local = xmalloc(need * sizeof(float));
			cap = need;
		}
		if ((rc = read_global(e, p, global)) < 0)
			break;
		int64_t gcols = p->ndim == 2 ? p->shape[1] : 1;
		for (size_t x = 0; x < p->numel; x++) {
			int64_t row, col;
			params_global_pos_rank(p, rank, x, &row, &col);
			local[x] = global[(size_t)row * (size_t)gcols + (size_t)col];
		}
		void *bytes = keep(rf, p->numel * ckpt_dtype_size(e->dtype));
		ckpt_from_f32(e->dtype, local, p->numel, bytes);
		int64_t size[2] = { p->local_shape[0], p->ndim == 2 ? p->local_shape[1] : 1 };
		struct pk_value *t = pk_tensor(d, pk_storage(d, pk_of(e->dtype), bytes, (int64_t)p->numel), 0, p->ndim,
					       size, NULL);
		bool copy = (p->flags & PARAM_SHARED) && last_stage_copy_is_output;
		char *name = copy ? xstrdup("output_layer.weight") : local_name(p->name, l0);
		if (!t) {
			rc = -1;
		} else {
			pk_set_str(d, model, name, t);
			te_extra_state(d, model, name);
		}
		free(name);
	}
	free(global);
	free(local);
	return rc;
}

static int fsync_dir(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY);
	if (fd < 0)
		return error_errno("open '%s'", dir);
	int rc = fsync(fd) < 0 ? error_errno("fsync '%s'", dir) : 0;
	close(fd);
	return rc;
}

static int write_rank(const struct megatron_export *e, const char *tmp, int stage, int rank)
{
	const struct gpt_config *c = e->c;
	struct dist_group tpg = { .name = "tensor-model-parallel", .rank = rank, .size = e->tp };
	struct gpt_setup pipe = { .B = 1, .precision = GPT_FP32, .tp = &tpg, .pp = e->pp, .stage = stage, .vpp = 1 };
	struct mem_pool pool;
	mem_pool_init(&pool, megac_mem_plan_ops(false));
	struct gpt_model m;
	if (gpt_init_pipe(&m, c, megac_mem_plan_ops(false), &pool, &pipe) < 0)
		return -1;
	int l0 = m.chunks[0].l0;
	struct pk_doc *d = pk_doc_new();
	struct pk_value *root = pk_dict(d), *model = pk_odict(d);
	pk_set_str(d, root, "args", args_namespace(d, e));
	pk_set_str(d, root, "checkpoint_version", pk_float(d, 3.0));
	pk_set_str(d, root, "iteration", pk_int(d, e->iteration < 0 ? 0 : e->iteration));
	pk_set_str(d, root, "model", model);
	struct rank_file rf = { 0 };
	int rc = rank_model(d, model, &rf, e, &m, rank, l0, e->pp > 1 && stage == e->pp - 1 && !c->untied);
	char *dir = e->pp > 1 ? xasprintf("%s/mp_rank_%02d_%03d", tmp, rank, stage) : xasprintf("%s/mp_rank_%02d", tmp, rank);
	if (rc == 0 && mkdir(dir, 0777) < 0)
		rc = error_errno("mkdir '%s'", dir);
	char *file = xasprintf("%s/model_optim_rng.pt", dir);
	if (rc == 0)
		rc = torch_save(file, root);
	if (rc == 0)
		rc = fsync_dir(dir);
	free(file);
	free(dir);
	pk_doc_free(d);
	rank_file_free(&rf);
	gpt_free(&m);
	return rc;
}

int megatron_torch_export(const struct args *a, const struct megatron_export *e)
{
	const struct gpt_config *c = e->c;
	if (c->E > 0)
		return error("--to megatron: mixture-of-experts layers are not written in Megatron's format yet");
	if (c->mtp)
		return error("--to megatron: multi-token prediction layers are not written in Megatron's format yet");
	struct ckpt_writer *w = ckpt_begin(a->save, e->iteration);
	if (!w)
		return -1;
	int rc = 0;
	for (int s = 0; rc == 0 && s < e->pp; s++)
		for (int t = 0; rc == 0 && t < e->tp; t++)
			rc = write_rank(e, ckpt_tmp_dir(w), s, t);
	if (rc < 0) {
		ckpt_abort(w);
		return -1;
	}
	return ckpt_commit(w);
}
