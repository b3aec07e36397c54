/*
 * advise.c - see advise.h. Enumeration is exhaustive over divisors (some
 * 90,000 layouts for a 70B model on 1024 ranks); each costs one run of
 * train's set-up against the byte-counting op table, about 0.1 ms, so
 * seconds in all. Refusals are collected with log_capture() so that the
 * user sees counts, not thousands of messages.
 */
#include "memcalc/advise.h"

#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/error.h"
#include "base/size.h"
#include "base/xalloc.h"
#include "memcalc/megac_mem.h"
#include "train/train_command.h"

#define MIB (1024.0 * 1024.0)

int advise_opts_from_args(struct advise_opts *o, const struct args *a)
{
	memset(o, 0, sizeof(*o));
	if (!a->gpu_memory)
		return error("--advise needs --gpu-memory SIZE, the memory of one GPU (such as 80GiB)");
	if (size_parse(a->gpu_memory, "--gpu-memory", &o->gpu_bytes) < 0)
		return -1;
	if (a->gpus_per_node < 1 || a->gpus_per_node > (1 << 24))
		return error("--gpus-per-node %lld: give 1 to %d", (long long)a->gpus_per_node, 1 << 24);
	struct {
		const char *flag;
		double v;
	} pos[] = { { "--gpu-tflops", a->gpu_tflops },
		    { "--intra-node-bandwidth", a->intra_node_bandwidth },
		    { "--inter-node-bandwidth", a->inter_node_bandwidth } };
	for (size_t i = 0; i < sizeof(pos) / sizeof(pos[0]); i++)
		if (!(pos[i].v > 0) || !isfinite(pos[i].v))
			return error("%s %g must be a positive number", pos[i].flag, pos[i].v);
	if (!(a->link_latency_us >= 0) || !isfinite(a->link_latency_us))
		return error("--link-latency-us %g must not be negative", a->link_latency_us);
	if (a->advise_top < 0)
		return error("--advise-top %lld must not be negative (0 prints every layout that fits)",
			     (long long)a->advise_top);
	o->rates = (struct step_rates){ a->gpu_tflops, a->intra_node_bandwidth, a->inter_node_bandwidth,
					a->link_latency_us, (int)a->gpus_per_node };
	o->top = a->advise_top;
	return 0;
}

static const char *recompute_name(enum gpt_recompute r)
{
	return r == GPT_RECOMPUTE_FULL ? "full" : r == GPT_RECOMPUTE_SELECTIVE ? "selective" : "none";
}

void advise_layout_args(const struct args *base, const struct advise_layout *l, struct args *out)
{
	*out = *base;
	out->tensor_model_parallel_size = l->tp;
	out->pipeline_model_parallel_size = l->pp;
	out->context_parallel_size = l->cp;
	out->num_layers_per_virtual_pipeline_stage = -1;
	out->num_virtual_stages_per_pipeline_rank = l->vpp > 1 ? l->vpp : -1;
	out->expert_model_parallel_size = l->ep > 0 ? l->ep : 1;
	out->expert_tensor_parallel_size = -1; /* megac's experts split like the dense layers */
	out->micro_batch_size = l->mbs;
	out->sequence_parallel = l->sp;
	out->use_distributed_optimizer = l->dist_opt;
	out->recompute_activations = false;
	out->recompute_granularity = l->recompute == GPT_RECOMPUTE_NONE ? NULL : (char *)recompute_name(l->recompute);
	out->recompute_method = l->recompute == GPT_RECOMPUTE_FULL ? (char *)"uniform" : NULL;
	out->recompute_num_layers = l->recompute == GPT_RECOMPUTE_FULL ? 1 : -1;
}

void advise_layout_flags(const struct advise_layout *l, struct sbuf *out)
{
	sbuf_addf(out, "--tensor-model-parallel-size %d --pipeline-model-parallel-size %d", l->tp, l->pp);
	if (l->vpp > 1)
		sbuf_addf(out, " --num-virtual-stages-per-pipeline-rank %d", l->vpp);
	if (l->vpp > 1 && l->mb_group > 0) /* the command line's, kept: it shapes the schedule */
		sbuf_addf(out, " --microbatch-group-size-per-virtual-pipeline-stage %lld", (long long)l->mb_group);
	sbuf_addf(out, " --context-parallel-size %d", l->cp);
	if (l->ep > 0)
		sbuf_addf(out, " --expert-model-parallel-size %d", l->ep);
	sbuf_addf(out, " --micro-batch-size %lld", (long long)l->mbs);
	if (l->sp)
		sbuf_addstr(out, " --sequence-parallel");
	if (l->recompute == GPT_RECOMPUTE_SELECTIVE)
		sbuf_addstr(out, " --recompute-granularity selective");
	else if (l->recompute == GPT_RECOMPUTE_FULL)
		sbuf_addstr(out, " --recompute-granularity full --recompute-method uniform --recompute-num-layers 1");
	if (l->dist_opt)
		sbuf_addstr(out, " --use-distributed-optimizer");
}

/* Divisors of n in increasing order (*out is malloc'd): the small ones up
 * to sqrt(n), then their partners n / d in reverse. */
static int divisors(int64_t n, int **out)
{
	int k = 0, cap = 16;
	int *d = xmalloc((size_t)cap * sizeof(*d));
	for (int64_t i = 1; i * i <= n; i++) {
		if (n % i)
			continue;
		if (k == cap)
			d = xrealloc(d, (size_t)(cap *= 2) * sizeof(*d));
		d[k++] = (int)i;
	}
	for (int small = k - 1; small >= 0; small--) {
		int64_t q = n / d[small];
		if (q == d[small])
			continue;
		if (k == cap)
			d = xrealloc(d, (size_t)(cap *= 2) * sizeof(*d));
		d[k++] = (int)q;
	}
	*out = d;
	return k;
}

/* One layout through train's checks and the memory prediction: 1 fits,
 * 0 too big, -1 refused (the reason in r->refusal when it is the first). */
static int try_layout(const struct args *base, int64_t vocab, const struct advise_opts *o, struct advise_layout *l,
		      struct advise_result *r)
{
	struct args a;
	advise_layout_args(base, l, &a);
	char why[512];
	log_capture(why, sizeof(why));
	struct gpt_config cfg;
	struct megac_stage_mem *st = NULL;
	int n = 0;
	int rc = gpt_config_from_args(&cfg, &a, vocab);
	if (rc == 0)
		rc = megac_mem_predict(&a, vocab, &st, &n);
	log_capture(NULL, 0);
	r->considered++;
	if (rc < 0) {
		if (!r->refused++)
			snprintf(r->refusal, sizeof(r->refusal), "%s", why);
		return -1;
	}
	l->peak = 0;
	for (int i = 0; i < n; i++)
		if ((double)st[i].peak > l->peak) {
			l->peak = (double)st[i].peak;
			l->peak_stage = st[i].pp_stage;
		}
	struct step_layout sl = { .tp = l->tp, .pp = l->pp, .vpp = l->vpp, .cp = l->cp, .dp = l->dp,
				  .ep = l->ep > 0 ? l->ep : 1, .mbs = l->mbs, .gbs = base->global_batch_size, .sp = l->sp,
				  .dist_opt = l->dist_opt, .rank0_params = (int64_t)(st[0].params / sizeof(float)),
				  .rank0_expert_params = (int64_t)(st[0].expert_params / sizeof(float)) };
	free(st);
	step_estimate(&cfg, &sl, &o->rates, &l->est);
	if (l->peak > o->gpu_bytes) {
		if (!r->too_big++ || l->peak < r->smallest.peak)
			r->smallest = *l;
		return 0;
	}
	return 1;
}

/* Fastest first, on a grid of a millionth of the fastest layout's time:
 * times in one step of it are one time (differences of a few bytes), and
 * then the smaller peak goes first. */
static int by_time(const void *pa, const void *pb)
{
	const struct advise_layout *a = pa, *b = pb;
	if (a->order != b->order)
		return a->order < b->order ? -1 : 1;
	if (a->peak != b->peak)
		return a->peak < b->peak ? -1 : 1;
	return a->seq < b->seq ? -1 : a->seq > b->seq; /* the enumeration's order: stable output */
}

static void sort_fits(struct advise_result *r)
{
	if (!r->nfit)
		return;
	double best = INFINITY;
	for (size_t i = 0; i < r->nfit; i++)
		best = fmin(best, r->fit[i].est.total_s);
	double quantum = best > 0 ? best * 1e-6 : 1e-12;
	for (size_t i = 0; i < r->nfit; i++)
		r->fit[i].order = llround(r->fit[i].est.total_s / quantum);
	qsort(r->fit, r->nfit, sizeof(*r->fit), by_time);
}

/* Every micro-batch size, sequence parallelism, recompute and optimizer
 * choice of one TP x CP x PP x VPP. */
static void try_variants(const struct args *a, int64_t vocab, const struct advise_opts *o, struct advise_layout l,
			 struct advise_result *r, size_t *cap)
{
	static const enum gpt_recompute recs[] = { GPT_RECOMPUTE_NONE, GPT_RECOMPUTE_SELECTIVE, GPT_RECOMPUTE_FULL };
	int64_t per_replica = a->global_batch_size / l.dp;
	for (l.mbs = 1; l.mbs <= per_replica && per_replica % l.mbs == 0; l.mbs *= 2)
		for (int sp = 0; sp <= (l.tp > 1); sp++)
			for (int rc = 0; rc < 3; rc++)
				for (int d = 0; d <= ((int64_t)l.dp * l.cp > 1); d++) {
					l.sp = sp;
					l.recompute = recs[rc];
					l.dist_opt = d;
					l.seq = (int64_t)r->considered;
					if (try_layout(a, vocab, o, &l, r) <= 0)
						continue;
					if (r->nfit == *cap) {
						*cap = *cap ? 2 * *cap : 64;
						r->fit = xrealloc(r->fit, *cap * sizeof(*r->fit));
					}
					r->fit[r->nfit++] = l;
				}
}

int advise_run(const struct args *a, int64_t vocab, const struct advise_opts *o, struct advise_result *r)
{
	memset(r, 0, sizeof(*r));
	if (a->multi_latent_attention || a->mtp_num_layers != -1)
		return error("--advise does not plan multi-latent attention or multi-token prediction yet: use "
			     "report_memory without --advise for Megatron's formula and megac's prediction");
	if (a->world_size < 1 || a->world_size > (1 << 24))
		return error("--world-size %lld: give the number of ranks, 1 to %d", (long long)a->world_size, 1 << 24);
	if (a->global_batch_size <= 0)
		return error("--advise needs --global-batch-size: the batch stays the same while the layout changes");
	/* what train refuses whatever the layout: said once, not per layout */
	if (train_check_flags(a) < 0)
		return -1;
	int64_t world = a->world_size;
	size_t cap = 0;
	int *tps, *cps, *pps, *vs, *eps = NULL;
	/* mixture of experts: the expert-parallel sizes that divide the experts */
	int nep = a->num_experts > 0 ? divisors(a->num_experts, &eps) : 0;
	int ntp = divisors(world, &tps);
	for (int i = 0; i < ntp; i++) {
		int ncp = divisors(world / tps[i], &cps);
		for (int j = 0; j < ncp; j++) {
			int npp = divisors(world / tps[i] / cps[j], &pps);
			for (int q = 0; q < npp; q++) {
				struct advise_layout l = { .tp = tps[i], .cp = cps[j], .pp = pps[q] };
				l.dp = (int)(world / ((int64_t)l.tp * l.cp * l.pp));
				l.mb_group = a->microbatch_group_size_per_vp_stage;
				if (a->global_batch_size % l.dp)
					continue; /* no micro-batch size gives this global batch */
				int nv = 1;
				if (l.pp > 1 && a->num_layers > 0 && a->num_layers % l.pp == 0) {
					nv = divisors(a->num_layers / l.pp, &vs);
				} else {
					vs = xmalloc(sizeof(*vs));
					vs[0] = 1;
				}
				for (int w = 0; w < nv; w++) {
					l.vpp = vs[w];
					if (!nep) {
						try_variants(a, vocab, o, l, r, &cap);
						continue;
					}
					/* the expert generator: ETP (= TP) x EP x PP divides the world */
					for (int e = 0; e < nep; e++) {
						l.ep = eps[e];
						if (world % ((int64_t)l.tp * l.ep * l.pp) == 0)
							try_variants(a, vocab, o, l, r, &cap);
					}
				}
				free(vs);
			}
			free(pps);
		}
		free(cps);
	}
	free(tps);
	free(eps);
	sort_fits(r);
	return 0;
}

void advise_result_free(struct advise_result *r)
{
	free(r->fit);
	r->fit = NULL;
}

static void print_table(const struct args *a, const struct advise_opts *o, const struct advise_result *r, size_t n)
{
	const struct step_rates *q = &o->rates;
	bool moe = a->num_experts > 0;
	printf("report_memory --advise: %lld ranks, %.2f MiB (%.2f GiB) per GPU; %zu of %zu layouts fit "
	       "(%zu refused by train's checks, %zu predicted too large); memory for --device %s\n",
	       (long long)a->world_size, o->gpu_bytes / MIB, o->gpu_bytes / (MIB * 1024), r->nfit, r->considered,
	       r->refused, r->too_big, megac_mem_cuda(a) ? "cuda" : "cpu");
	printf("step-time model (docs/report-memory.md): %g TFLOP/s per GPU, %g GB/s within a node of %d GPUs, %g GB/s "
	       "across nodes, %g us per message, no overlap\n\n",
	       q->tflops, q->intra_GBs, q->gpus_per_node, q->inter_GBs, q->latency_us);
	printf("  %3s %4s %4s %4s %4s %5s", "#", "TP", "PP", "VPP", "CP", "DP");
	if (moe)
		printf(" %4s", "EP");
	printf(" %5s %3s %-10s %-8s %12s %11s %11s %11s %11s\n", "mbs", "SP", "recompute", "dist-opt", "peak MB",
	       "step s", "compute s", "bubble s", "comm s");
	for (size_t i = 0; i < n; i++) {
		const struct advise_layout *l = &r->fit[i];
		printf("  %3zu %4d %4d %4d %4d %5d", i + 1, l->tp, l->pp, l->vpp, l->cp, l->dp);
		if (moe)
			printf(" %4d", l->ep);
		printf(" %5lld %3s %-10s %-8s %12.2f %11.4g %11.4g %11.4g %11.4g\n", (long long)l->mbs,
		       l->sp ? "on" : "off", recompute_name(l->recompute), l->dist_opt ? "on" : "off", l->peak / MIB,
		       l->est.total_s, l->est.compute_s, l->est.bubble_s, l->est.comm_s);
	}
	printf("\ntrain's flags for each (in place of the layout flags of the command line):\n");
	for (size_t i = 0; i < n; i++) {
		struct sbuf sb = SBUF_INIT;
		advise_layout_flags(&r->fit[i], &sb);
		printf("  %3zu  %s\n", i + 1, sb.buf);
		sbuf_release(&sb);
	}
}

static json_t *layout_json(const struct advise_layout *l, int64_t gbs)
{
	json_t *e = json_object(), *bytes = json_object(), *msgs = json_object(), *inter = json_object();
	json_object_set_new(e, "tp", json_integer(l->tp));
	json_object_set_new(e, "pp", json_integer(l->pp));
	json_object_set_new(e, "vpp", json_integer(l->vpp));
	json_object_set_new(e, "cp", json_integer(l->cp));
	json_object_set_new(e, "dp", json_integer(l->dp));
	if (l->ep > 0)
		json_object_set_new(e, "ep", json_integer(l->ep));
	json_object_set_new(e, "micro_batch_size", json_integer(l->mbs));
	json_object_set_new(e, "num_microbatches", json_integer(gbs / (l->mbs * l->dp)));
	json_object_set_new(e, "sequence_parallel", json_boolean(l->sp));
	json_object_set_new(e, "recompute", json_string(recompute_name(l->recompute)));
	json_object_set_new(e, "distributed_optimizer", json_boolean(l->dist_opt));
	json_object_set_new(e, "peak_MB", json_real(l->peak / MIB));
	json_object_set_new(e, "peak_pp_stage", json_integer(l->peak_stage));
	json_object_set_new(e, "step_time_s", json_real(l->est.total_s));
	json_object_set_new(e, "compute_s", json_real(l->est.compute_s));
	json_object_set_new(e, "bubble_s", json_real(l->est.bubble_s));
	json_object_set_new(e, "comm_s", json_real(l->est.comm_s));
	json_object_set_new(e, "flops_per_rank", json_real(l->est.flops));
	for (int g = 0; g < SM_NGROUPS; g++) {
		if (!l->est.bytes[g])
			continue;
		const char *name = step_group_name(g, l->cp);
		json_object_set_new(bytes, name, json_integer(l->est.bytes[g]));
		json_object_set_new(msgs, name, json_real(l->est.messages[g]));
		json_object_set_new(inter, name, json_boolean(l->est.inter_node[g]));
	}
	json_object_set_new(e, "comm_bytes", bytes);
	json_object_set_new(e, "comm_messages", msgs);
	json_object_set_new(e, "comm_inter_node", inter);
	struct sbuf sb = SBUF_INIT;
	advise_layout_flags(l, &sb);
	json_object_set_new(e, "flags", json_string(sb.buf));
	sbuf_release(&sb);
	return e;
}

static int print_json(const struct args *a, const struct advise_opts *o, const struct advise_result *r, size_t n)
{
	const struct step_rates *q = &o->rates;
	json_t *adv = json_object(), *as = json_object(), *list = json_array();
	json_object_set_new(adv, "device", json_string(megac_mem_cuda(a) ? "cuda" : "cpu"));
	json_object_set_new(adv, "world_size", json_integer(a->world_size));
	json_object_set_new(adv, "gpu_memory_bytes", json_real(o->gpu_bytes));
	json_object_set_new(as, "gpu_tflops", json_real(q->tflops));
	json_object_set_new(as, "intra_node_GBs", json_real(q->intra_GBs));
	json_object_set_new(as, "inter_node_GBs", json_real(q->inter_GBs));
	json_object_set_new(as, "link_latency_us", json_real(q->latency_us));
	json_object_set_new(as, "gpus_per_node", json_integer(q->gpus_per_node));
	json_object_set_new(adv, "assumptions", as);
	json_object_set_new(adv, "layouts_considered", json_integer((json_int_t)r->considered));
	json_object_set_new(adv, "layouts_refused", json_integer((json_int_t)r->refused));
	json_object_set_new(adv, "layouts_too_large", json_integer((json_int_t)r->too_big));
	json_object_set_new(adv, "layouts_fitting", json_integer((json_int_t)r->nfit));
	for (size_t i = 0; i < n; i++)
		json_array_append_new(list, layout_json(&r->fit[i], a->global_batch_size));
	json_object_set_new(adv, "layouts", list);
	json_t *o2 = json_object();
	json_object_set_new(o2, "advise", adv);
	char *s = json_dumps(o2, JSON_INDENT(1) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
	json_decref(o2);
	if (!s)
		return error("report_memory: out of memory writing JSON");
	printf("%s\n", s);
	free(s);
	return 0;
}

int advise_command(const struct args *a, int64_t vocab)
{
	struct advise_opts o;
	struct advise_result r;
	if (advise_opts_from_args(&o, a) < 0 || advise_run(a, vocab, &o, &r) < 0)
		return -1;
	int rc = 0;
	if (!r.nfit) {
		if (r.too_big) {
			struct sbuf sb = SBUF_INIT;
			advise_layout_flags(&r.smallest, &sb);
			rc = error("no layout of %lld ranks fits in %.2f MiB per GPU: the smallest predicted peak is "
				   "%.2f MiB (stage %d), with %s",
				   (long long)a->world_size, o.gpu_bytes / MIB, r.smallest.peak / MIB, r.smallest.peak_stage,
				   sb.buf);
			sbuf_release(&sb);
		} else {
			rc = error("train refuses every layout of %lld ranks for this model; one reason: %s",
				   (long long)a->world_size, r.refusal);
		}
	} else {
		size_t n = o.top > 0 && (size_t)o.top < r.nfit ? (size_t)o.top : r.nfit;
		if (a->json)
			rc = print_json(a, &o, &r, n);
		else
			print_table(a, &o, &r, n);
		if (fflush(stdout))
			rc = error_errno("writing the report");
	}
	advise_result_free(&r);
	return rc;
}
