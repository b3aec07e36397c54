/*
 * memcalc_command.c - the report_memory program: see memcalc_command.h.
 * It prints Megatron's theoretical report (megatron_mem.c) and megac's own
 * per-stage prediction (megac_mem.c), or with --advise the layouts that
 * fit (advise.c).
 */
#include "memcalc/memcalc_command.h"
#include "memcalc/advise.h"
#include "memcalc/megac_mem.h"
#include "model/ckpt_args.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/xalloc.h"
#include "data/tok.h"
#include "dist/layout.h"
#include "model/gpt_config.h"

const struct prog_info memcalc_prog_info = {
	"report_memory",
	PROG_MEMCALC,
	"Memory per GPU before launch: takes train's command line plus --world-size and prints\n"
	"Megatron's theoretical memory report (theoretical_memory_usage.py) for it: parameter counts,\n"
	"weight-and-optimizer, activation and total MB on the most loaded rank, with the number of\n"
	"micro-batches from the global batch size, then megac's own per-stage prediction of what train\n"
	"allocates on --device (cuda by default, or cpu). Also takes the MoE, MLA and MTP model flags.\n"
	"With --advise --gpu-memory SIZE: every layout of --world-size ranks that fits, fastest first by\n"
	"the step-time model of docs/report-memory.md, with the train flags for each.",
	"report_memory --world-size 64 --num-layers 80 --hidden-size 8192 --num-attention-heads 64 "
	"--group-query-attention --num-query-groups 8 --ffn-hidden-size 28672 --swiglu --normalization RMSNorm "
	"--untie-embeddings-and-output-weights --disable-bias-linear --position-embedding-type rope "
	"--seq-length 8192 --max-position-embeddings 8192 --micro-batch-size 1 --global-batch-size 256 "
	"--tensor-model-parallel-size 8 --pipeline-model-parallel-size 4 --sequence-parallel "
	"--use-distributed-optimizer --vocab-size 128256",
	0,
};


/* The vocabulary size before padding: the tokenizer's, --vocab-size, or the
 * --padded-vocab-size itself. */
int memcalc_vocab_size(const struct args *a, int64_t *vocab)
{
	if (a->tokenizer_type) {
		struct tok_config tc = tok_config_from_args(a);
		struct tokenizer *t = tok_load(&tc);
		if (!t)
			return -1;
		*vocab = tok_vocab_size(t);
		tok_free(t);
		return 0;
	}
	if (a->vocab_size > 0) {
		*vocab = a->vocab_size;
		return 0;
	}
	if (a->padded_vocab_size > 0) {
		*vocab = a->padded_vocab_size;
		return 0;
	}
	return error("report_memory needs the vocabulary size: give the tokenizer flags train takes "
		     "(--tokenizer-type ...), --vocab-size N (padded as train pads it) or --padded-vocab-size N");
}

int memcalc_config_from_args(struct mm_config *c, const struct args *a, unsigned char **pattern)
{
	memset(c, 0, sizeof(*c));
	*pattern = NULL;
	if (a->world_size < 1 || a->world_size > (1 << 24))
		return error("--world-size %lld: give the number of ranks, 1 to %d", (long long)a->world_size, 1 << 24);

	/* the dense layout and model exactly as train checks them; the expert
	 * axes and the MoE shape below are Megatron's formula's own (it takes
	 * any MoE flags, also those megac cannot train yet); likewise the MLA
	 * shape (below, from a), with RoPE settings megac cannot train yet */
	struct args dense = *a;
	dense.multi_latent_attention = false;
	dense.rope_type = NULL;
	dense.recompute_modules.n = 0; /* the formula models selective recompute whatever the modules (and
					* mla_up_proj needs the MLA taken out here) */
	dense.expert_model_parallel_size = 1;
	dense.expert_tensor_parallel_size = -1;
	dense.num_experts = -1;
	dense.moe_ffn_hidden_size = -1;
	dense.moe_shared_expert_intermediate_size = -1;
	struct dist_layout l;
	if (dist_layout_from_args(&l, &dense, (int)a->world_size) < 0)
		return -1;
	int64_t ep = a->expert_model_parallel_size;
	int64_t etp = a->expert_tensor_parallel_size == -1 ? l.tp : a->expert_tensor_parallel_size;
	if (ep < 1 || ep > (1 << 20))
		return error("--expert-model-parallel-size %lld: a parallel size must be between 1 and %d",
			     (long long)ep, 1 << 20);
	if (etp < 1 || etp > (1 << 20))
		return error("--expert-tensor-parallel-size %lld: a parallel size must be between 1 and %d",
			     (long long)etp, 1 << 20);
	bool moe = a->num_experts != -1;
	if (moe && a->num_experts < 1)
		return error("--num-experts %lld must be at least 1", (long long)a->num_experts);
	if (a->world_size % (etp * ep * l.pp))
		return error("--world-size %lld is not divisible by --expert-tensor-parallel-size %lld * "
			     "--expert-model-parallel-size %lld * --pipeline-model-parallel-size %d = %lld",
			     (long long)a->world_size, (long long)etp, (long long)ep, l.pp, (long long)(etp * ep * l.pp));

	int64_t vocab = 0;
	if (memcalc_vocab_size(a, &vocab) < 0)
		return -1;
	struct gpt_config g;
	if (gpt_config_from_args(&g, &dense, vocab) < 0)
		return -1;
	if (g.hybrid) /* memcalc_run reports hybrids without Megatron's formula */
		BUG("Megatron's memory formula for a hybrid model");
	/* the layout fit, Megatron's rules only (what megac's model needs
	 * beyond them decides megac's own prediction, not the formula) */
	struct gpt_config fit = g;
	fit.E = moe ? (int)a->num_experts : 0;
	struct gpt_layout lay = { .tp = l.tp, .pp = l.pp, .vpp = l.vpp, .cp = l.cp, .ep = (int)ep, .sp = l.sp,
				  .megatron_rules = true };
	if (gpt_config_check_layout(&fit, &lay, NULL) < 0)
		return -1;

	c->L = g.L;
	c->h = g.h;
	c->a = g.a;
	c->k = g.k;
	c->g = g.g;
	c->f = g.f;
	c->V = g.Vp;
	c->group_query_attention = a->group_query_attention;
	c->swiglu = g.swiglu;
	c->rmsnorm = g.rmsnorm;
	c->untied = g.untied;
	c->add_bias_linear = g.bias;
	if (moe) {
		c->num_experts = a->num_experts;
		c->topk = a->moe_router_topk;
		if (c->topk < 1 || c->topk > c->num_experts)
			return error("--moe-router-topk %lld must be between 1 and --num-experts %lld", (long long)c->topk,
				     (long long)c->num_experts);
		c->moe_ffn = a->moe_ffn_hidden_size == -1 ? g.f : a->moe_ffn_hidden_size;
		c->shared_ffn = a->moe_shared_expert_intermediate_size == -1 ? 0 : a->moe_shared_expert_intermediate_size;
		c->shared_gate = a->moe_shared_expert_gate;
		if (c->moe_ffn < 1 || c->shared_ffn < 0)
			return error("--moe-ffn-hidden-size and --moe-shared-expert-intermediate-size must be positive");
		*pattern = xmalloc((size_t)c->L);
		if (gpt_moe_pattern(a->moe_layer_freq, c->L, *pattern) < 0)
			return -1;
		c->moe_pattern = *pattern;
	}
	c->mla = a->multi_latent_attention;
	if (c->mla) {
		c->q_lora = a->q_lora_rank == -1 ? 0 : a->q_lora_rank;
		c->kv_lora = a->kv_lora_rank;
		c->qk_head = a->qk_head_dim;
		c->qk_pos = a->qk_pos_emb_head_dim;
		c->v_head = a->v_head_dim;
		if (c->q_lora < 0 || c->kv_lora < 1 || c->qk_head < 1 || c->qk_pos < 0 || c->v_head < 1)
			return error("multi-latent attention: --q-lora-rank, --kv-lora-rank, --qk-head-dim, "
				     "--qk-pos-emb-head-dim and --v-head-dim must be positive");
	}
	if (a->mtp_num_layers != -1) {
		if (a->mtp_num_layers < 1)
			return error("--mtp-num-layers %lld must be at least 1", (long long)a->mtp_num_layers);
		c->mtp = a->mtp_num_layers;
	}

	c->world = l.world;
	c->t = l.tp;
	c->p = l.pp;
	c->d = l.dp;
	c->ep = ep;
	c->etp = etp;
	c->vpp = l.vpp > 1 ? l.vpp : 0;
	c->sp = l.sp;
	c->selective = g.recompute == GPT_RECOMPUTE_SELECTIVE;
	c->dist_opt = a->use_distributed_optimizer;
	c->s = g.S;
	c->b = a->micro_batch_size;
	if (c->b < 1)
		return error("--micro-batch-size must be at least 1 (got %lld)", (long long)c->b);
	/* train's rule: the global batch defaults to micro-batch x data-parallel size */
	int64_t gbs = a->global_batch_size > 0 ? a->global_batch_size : c->b * c->d;
	c->nmb = gbs / (c->b * c->d);
	return 0;
}

static const char *onoff(bool b)
{
	return b ? "on" : "off";
}

static void print_table(const struct args *a, const struct mm_config *c, const struct mm_report *r)
{
	printf("Megatron's theoretical memory report (theoretical_memory_usage.py, verbose), first pipeline stage:\n\n");
	megatron_mem_print(c, r, stdout);
	printf("parameters: %.0f total, %.0f active, %.0f on the most loaded shard", r->total, r->total_active,
	       r->shard);
	if (c->p > 1)
		printf(", %.0f on the other shards", r->other_shards);
	printf("\n");
	int64_t cp = a->context_parallel_size;
	printf("layout: world %lld = TP %lld x PP %lld x CP %lld x DP %lld", (long long)c->world, (long long)c->t,
	       (long long)c->p, (long long)cp, (long long)c->d);
	if (c->num_experts > 0)
		printf("; experts: ETP %lld x EP %lld x PP %lld x EDP %lld", (long long)c->etp, (long long)c->ep,
		       (long long)c->p, (long long)(c->world / (c->etp * c->ep * c->p)));
	if (c->vpp > 0)
		printf("; %lld virtual stages per pipeline rank", (long long)c->vpp);
	printf("\n");
	printf("sequence parallel %s, recompute %s, distributed optimizer %s (%.4g bytes/parameter)\n", onoff(c->sp),
	       c->selective ? "selective" : (a->recompute_granularity ? a->recompute_granularity : "none"),
	       onoff(c->dist_opt), r->bytes_per_param);
	printf("batch: micro-batch %lld x %lld micro-batches x DP %lld = global batch %lld; seq length %lld; "
	       "padded vocabulary %lld\n",
	       (long long)c->b, (long long)c->nmb, (long long)c->d, (long long)(c->b * c->nmb * c->d), (long long)c->s,
	       (long long)c->V);
	if (!r->sp_path || c->num_experts > 0 || c->mla || c->k * c->a != c->h || c->g != c->a || c->swiglu)
		printf("note: Megatron's activation formula models %s; it ignores GQA, MoE, MLA, SwiGLU's wider fc1 "
		       "and full recompute, and any workspace or buffer\n",
		       r->sp_path ? "sequence parallelism with selective recompute"
				  : "the no-SP case as a 5% overhead on a per-layer estimate");
}

/* megac's own prediction, for what train can run: 1 and *st filled, or 0
 * when train would refuse the configuration (the reason went to stderr;
 * Megatron's part still stands). */
static int megac_part(const struct args *a, const struct mm_config *c, struct megac_stage_mem **st, int *n)
{
	*st = NULL;
	*n = 0;
	int64_t vocab;
	if (memcalc_vocab_size(a, &vocab) < 0 || megac_mem_predict(a, vocab, st, n) < 0) {
		warning("so megac has no prediction of its own for this configuration (train would refuse it)");
		return 0;
	}
	return 1;
}

#define MIB (1024.0 * 1024.0)

static void print_megac(const struct args *a, const struct megac_stage_mem *st, int n)
{
	bool cuda = megac_mem_cuda(a);
	printf("\nmegac's own prediction for --device %s (train's allocations, per rank; every rank of a pipeline "
	       "stage alike):\n", cuda ? "cuda" : "cpu");
	printf("  %-6s %-10s %10s %10s %10s %12s %10s\n", "stage", "from rank", "params", "grads", "optimizer",
	       "activations", "peak MB");
	for (int i = 0; i < n; i++)
		printf("  %-6d %-10d %10.2f %10.2f %10.2f %12.2f %10.2f\n", st[i].pp_stage, st[i].first_rank,
		       st[i].params / MIB, st[i].grads / MIB, st[i].optimizer / MIB, st[i].activations / MIB,
		       st[i].peak / MIB);
	if (cuda) {
		size_t ws = 0;
		for (int i = 0; i < n; i++)
			ws = st[i].backend_ws > ws ? st[i].backend_ws : ws;
		printf("  activations include the CUDA backend's workspace (cuBLASLt's 32 MiB and its scratch buffer, up "
		       "to %.2f MB), which train's \"max allocated\" counts too; attention keeps each row's log-sum-exp "
		       "(flash), not its probabilities\n", ws / MIB);
	}
	size_t f8 = 0, f8h = 0;
	for (int i = 0; i < n; i++) {
		f8 = st[i].fp8_scratch > f8 ? st[i].fp8_scratch : f8;
		f8h = st[i].fp8_host > f8h ? st[i].fp8_host : f8h;
	}
	if (a->fp8_format)
		printf("  activations include the FP8 GEMM operands' codes and scales (up to %.2f MB); the delayed "
		       "recipe's amax histories and scales take %.1f KB of host memory per rank (docs/fp8.md)\n",
		       f8 / MIB, f8h / 1024.0);
}

static json_t *megac_json(const struct megac_stage_mem *st, int n)
{
	json_t *ranks = json_array();
	for (int i = 0; i < n; i++) {
		json_t *e = json_object(), *b = json_object();
		json_object_set_new(e, "rank", json_integer(st[i].first_rank));
		json_object_set_new(e, "pp_stage", json_integer(st[i].pp_stage));
		json_object_set_new(e, "peak_MB", json_real(st[i].peak / MIB));
		json_object_set_new(e, "max_allocated_MB", json_real(st[i].peak / MIB)); /* train counts the backend's too */
		json_object_set_new(b, "parameters_MB", json_real(st[i].params / MIB));
		json_object_set_new(b, "gradients_MB", json_real(st[i].grads / MIB));
		json_object_set_new(b, "optimizer_states_MB", json_real(st[i].optimizer / MIB));
		json_object_set_new(b, "activations_and_workspaces_MB", json_real(st[i].activations / MIB));
		json_object_set_new(b, "backend_workspace_MB", json_real(st[i].backend_ws / MIB));
		json_object_set_new(b, "fp8_operands_MB", json_real(st[i].fp8_scratch / MIB));
		json_object_set_new(b, "fp8_host_KB", json_real(st[i].fp8_host / 1024.0));
		json_object_set_new(e, "breakdown", b);
		json_array_append_new(ranks, e);
	}
	json_t *o = json_object();
	json_object_set_new(o, "ranks", ranks);
	return o;
}

static int print_json(const struct args *a, const struct mm_config *c, const struct mm_report *r)
{
	json_t *m = json_object();
	json_object_set_new(m, "weight_and_optimizer_MB", json_real(r->weight_MB));
	json_object_set_new(m, "activation_MB", json_real(r->activation_MB));
	json_object_set_new(m, "total_MB", json_real(r->total_MB));
	json_object_set_new(m, "num_parameters", json_real(r->total));
	json_object_set_new(m, "num_active_parameters", json_real(r->total_active));
	json_object_set_new(m, "num_parameters_transformer_block", json_real(r->block));
	json_object_set_new(m, "num_parameters_mtp_block", json_real(r->mtp_block));
	json_object_set_new(m, "num_parameters_embedding", json_real(r->embedding));
	json_object_set_new(m, "num_parameters_on_most_loaded_shard", json_real(r->shard));
	json_object_set_new(m, "num_parameters_on_other_shards", c->p > 1 ? json_real(r->other_shards) : json_null());
	json_object_set_new(m, "bytes_per_parameter", json_real(r->bytes_per_param));
	json_object_set_new(m, "bytes_per_expert_parameter", json_real(r->bytes_per_expert_param));
	json_object_set_new(m, "activation_formula", json_string(r->sp_path ? "with_sp" : "without_sp"));
	json_object_set_new(m, "activation_per_layer_MB", json_real(r->per_layer_MB));
	json_object_set_new(m, "interleaved_penalty", r->interleaved ? json_real(r->penalty) : json_null());
	json_object_set_new(m, "in_flight_microbatches", r->in_flight >= 0 ? json_integer(r->in_flight) : json_null());
	json_object_set_new(m, "num_microbatches", json_integer(c->nmb));
	json_t *lay = json_object();
	json_object_set_new(lay, "world_size", json_integer(c->world));
	json_object_set_new(lay, "tp", json_integer(c->t));
	json_object_set_new(lay, "pp", json_integer(c->p));
	json_object_set_new(lay, "cp", json_integer(a->context_parallel_size));
	json_object_set_new(lay, "dp", json_integer(c->d));
	json_object_set_new(lay, "ep", json_integer(c->ep));
	json_object_set_new(lay, "etp", json_integer(c->etp));
	json_object_set_new(lay, "vpp", json_integer(c->vpp > 0 ? c->vpp : 1));
	json_object_set_new(lay, "sequence_parallel", json_boolean(c->sp));
	json_object_set_new(lay, "selective_recompute", json_boolean(c->selective));
	json_object_set_new(lay, "distributed_optimizer", json_boolean(c->dist_opt));
	json_object_set_new(lay, "micro_batch_size", json_integer(c->b));
	json_object_set_new(lay, "seq_length", json_integer(c->s));
	json_object_set_new(lay, "padded_vocab_size", json_integer(c->V));
	json_object_set_new(m, "inputs", lay);
	json_t *o = json_object();
	json_object_set_new(o, "device", json_string(megac_mem_cuda(a) ? "cuda" : "cpu"));
	json_object_set_new(o, "megatron_formula", m);
	struct megac_stage_mem *st;
	int n, have = megac_part(a, c, &st, &n);
	if (have < 0) {
		json_decref(o);
		return -1;
	}
	json_object_set_new(o, "megac", have ? megac_json(st, n) : json_null());
	free(st);
	char *s = json_dumps(o, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
	json_decref(o);
	if (!s)
		return error("report_memory: out of memory writing JSON");
	int rc = printf("%s\n", s) < 0 || fflush(stdout) ? error_errno("writing the report") : 0;
	free(s);
	return rc;
}

static int memcalc_run(struct args *w);

/* Megatron's report_theoretical_memory prints this line for a hybrid
 * model (is_hybrid_model: a layer pattern) and nothing else; megac's own
 * prediction follows it. */
#define MEGATRON_HYBRID_LINE "Theoretical memory footprints not yet supported for hybrid Mamba-Transformer models."

static int hybrid_report(const struct args *a)
{
	struct megac_stage_mem *st;
	int n, have = megac_part(a, NULL, &st, &n);
	int rc = 0;
	if (a->json) {
		json_t *o = json_object();
		json_object_set_new(o, "device", json_string(megac_mem_cuda(a) ? "cuda" : "cpu"));
		json_object_set_new(o, "megatron_formula", json_null());
		json_object_set_new(o, "megatron_message", json_string(MEGATRON_HYBRID_LINE));
		json_object_set_new(o, "megac", have ? megac_json(st, n) : json_null());
		char *s = json_dumps(o, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
		json_decref(o);
		if (!s)
			rc = error("report_memory: out of memory writing JSON");
		else if (printf("%s\n", s) < 0)
			rc = error_errno("writing the report");
		free(s);
	} else {
		printf("Megatron's theoretical memory report (theoretical_memory_usage.py) for a hybrid model:\n\n%s\n",
		       MEGATRON_HYBRID_LINE);
		if (have)
			print_megac(a, st, n);
		else
			printf("\nmegac's own prediction: none (train does not run this configuration: see the message "
			       "above)\n");
	}
	free(st);
	if (fflush(stdout) && !rc)
		rc = error_errno("writing the report");
	return rc;
}

int memcalc_command(const struct args *flags)
{
	struct args w = *flags;
	struct ckpt_args own; /* --use-checkpoint-args: the model's flags from the checkpoint */
	int rc = ckpt_args_apply(&w, &own);
	if (rc == 0)
		rc = memcalc_run(&w);
	ckpt_args_release(&own);
	return rc;
}

static int memcalc_run(struct args *w)
{
	/* Megatron's report_theoretical_memory.py takes the world size from the
	 * launcher (WORLD_SIZE) and defaults to 1; so does report_memory without
	 * --world-size (--advise plans for a size, so it needs the flag) */
	const struct args *a = w;
	if (w->world_size == -1) {
		if (w->advise)
			return error("--advise needs --world-size N: the number of ranks to plan for");
		const char *env = getenv("WORLD_SIZE");
		char *end;
		long long n = env && *env ? strtoll(env, &end, 10) : 1;
		if (env && *env && (*end || n < 1))
			return error("WORLD_SIZE='%s' is not a number of ranks; give --world-size N", env);
		w->world_size = n;
		info("--world-size not given: %lld, %s (as Megatron's report_theoretical_memory.py)", n,
		     env && *env ? "from WORLD_SIZE" : "the default");
	}
	/* Megatron's formula takes full recompute without a method (it models
	 * only selective recompute); megac's own prediction needs the method */
	if (w->recompute_granularity && !strcmp(w->recompute_granularity, "full") && !w->recompute_method &&
	    !w->recompute_activations) {
		warning("--recompute-granularity full without --recompute-method: Megatron's formula below counts no "
			"recompute; megac's own prediction needs --recompute-method uniform|block and "
			"--recompute-num-layers N");
		w->recompute_granularity = NULL;
	}
	if (a->advise) {
		int64_t vocab;
		return memcalc_vocab_size(a, &vocab) < 0 ? -1 : advise_command(a, vocab);
	}
	if (a->hybrid_layer_pattern || a->hybrid_override_pattern)
		return hybrid_report(a);
	struct mm_config c;
	unsigned char *pattern;
	int rc = memcalc_config_from_args(&c, a, &pattern);
	struct mm_report r;
	if (rc == 0)
		rc = megatron_mem_compute(&c, &r);
	if (rc == 0) {
		if (a->json) {
			rc = print_json(a, &c, &r);
		} else {
			print_table(a, &c, &r);
			struct megac_stage_mem *st;
			int n, have = megac_part(a, &c, &st, &n);
			if (have < 0)
				rc = -1;
			else if (have)
				print_megac(a, st, n);
			else
				printf("\nmegac's own prediction: none (train does not run this configuration: MTP is not "
				       "there yet, or see the message above)\n");
			free(st);
			if (fflush(stdout))
				rc = error_errno("writing the report");
		}
	}
	free(pattern);
	return rc;
}
