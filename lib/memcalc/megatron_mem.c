/*
 * megatron_mem.c - see megatron_mem.h. The arithmetic follows Megatron's
 * megatron/training/theoretical_memory_usage.py term by term, in doubles, as
 * its Python floats do; the comments name the function each part follows.
 */
#include "memcalc/megatron_mem.h"

#include <math.h>

#include "base/error.h"

#define MIB (1024.0 * 1024.0)

int megatron_mem_compute(const struct mm_config *c, struct mm_report *r)
{
	*r = (struct mm_report){ 0 };
	if (c->L < 1 || c->h < 1 || c->a < 1 || c->k < 1 || c->t < 1 || c->p < 1 || c->d < 1 || c->ep < 1 ||
	    c->etp < 1 || c->world < 1 || c->s < 1 || c->b < 1 || c->V < 1)
		return error("memory report: a size is below 1 (layers, hidden, heads, kv channels, parallel "
			     "sizes, seq length, micro-batch, vocabulary must all be positive)");
	const double h = (double)c->h, a = (double)c->a, k = (double)c->k;
	const double g = c->group_query_attention ? (double)c->g : a; /* Megatron overwrites num_query_groups */
	const double L = (double)c->L, V = (double)c->V, t = (double)c->t, p = (double)c->p;
	const double s = (double)c->s, b = (double)c->b;
	const bool moe = c->num_experts > 0;

	/* compute_weight_and_optimizer_memory: per-term parameter counts */
	const double r_q = k * a / h;         /* query projection / hidden */
	const double G = c->swiglu ? 1.5 : 1; /* SwiGLU's wider fc1 */
	const double n = c->rmsnorm ? 1 : 2;  /* norm parameters per channel */
	const double E = moe ? (double)c->num_experts : 1;
	const double fm = moe ? (double)c->moe_ffn : 0;
	const double fs = moe ? (double)c->shared_ffn : 0;
	const double K = moe ? (double)c->topk : 0;

	double attn;
	if (c->mla) {
		double qh = (double)c->qk_head, qp = (double)c->qk_pos, vh = (double)c->v_head;
		double qt = c->q_lora > 0 ? (double)c->q_lora * (h + a * (qh + qp) + n) : h * a * (qh + qp);
		attn = qt + (double)c->kv_lora * (h + a * (qh + vh) + n) + h * qp + a * vh * h;
	} else {
		attn = 2 * h * h * (1 + g / a) * r_q;
	}
	const double mlp = 2 * h * (double)c->f * G;
	const double shared = 2 * h * fs * G;
	const double routed = 2 * h * fm * E * G;
	const double routed_active = 2 * h * fm * K * G;
	const double norms = 2 * h * n;
	/* the router, and the shared expert's gate (replicated over TP, as the router) */
	const double router = moe ? h * E + (c->add_bias_linear ? E : 0) + (fs > 0 && c->shared_gate ? h : 0) : 0;
	const double final_norm = n * h;
	const double emb = h * V;

	/* the MoE layer pattern: Lm MoE layers, Ld dense ones; MTP layers
	 * follow the last entry */
	int64_t lm = 0;
	if (moe)
		for (int64_t i = 0; i < c->L; i++)
			lm += c->moe_pattern[i] ? 1 : 0;
	const double Lm = (double)lm, Ld = L - Lm;
	const bool mtp_moe = moe && c->moe_pattern[c->L - 1];
	const double Lm_mtp = mtp_moe ? (double)c->mtp : 0, Ld_mtp = mtp_moe ? 0 : (double)c->mtp;

	const double dense_layer = attn + mlp + norms;
	const double moe_layer = attn + shared + routed + norms + router;
	const double moe_layer_active = attn + shared + routed_active + norms + router;
	r->block = dense_layer * Ld + moe_layer * Lm + final_norm;
	r->block_active = dense_layer * Ld + moe_layer_active * Lm + final_norm;
	r->mtp_block = dense_layer * Ld_mtp + moe_layer * Lm_mtp;
	r->embedding = c->untied ? 2 * emb : emb;
	r->total = r->block + r->mtp_block + r->embedding;
	/* Megatron counts the whole MTP block as active (checked against its code) */
	r->total_active = r->block_active + r->mtp_block + r->embedding;

	/* compute_weight_and_optimizer_memory: the most loaded shard (first pipeline stage) */
	const double TPs = (attn + mlp) * Ld + (attn + shared) * Lm;
	const double R = norms * Ld + (norms + router) * Lm + final_norm;
	const double X = routed * Lm;
	const double TPs_mtp = (attn + mlp) * Ld_mtp + (attn + shared) * Lm_mtp;
	const double R_mtp = norms * Ld_mtp + (norms + router) * Lm_mtp;
	const double X_mtp = routed * Lm_mtp;
	const double etp = (double)c->etp, ep = (double)c->ep;
	r->p_tp = (TPs / p + TPs_mtp + emb) / t;
	r->p_rep = R / p + R_mtp;
	r->p_exp = (X / p + X_mtp) / (etp * ep);
	if (c->untied && c->p == 1)
		r->p_tp += emb / t;
	r->shard = r->p_tp + r->p_rep + r->p_exp;
	if (c->p > 1)
		r->other_shards = TPs / (p * t) + R / p + X / (p * etp * ep);

	const double edp = (double)c->world / (etp * ep * p);
	r->bytes_per_param = c->dist_opt ? 6 + 12 / (double)c->d : 18;
	r->bytes_per_expert_param = c->dist_opt ? 6 + 12 / edp : 18;
	r->weight_bytes = (r->p_tp + r->p_rep) * r->bytes_per_param + r->p_exp * r->bytes_per_expert_param;

	/* compute_activation_memory (and _without_sp): activations of the first stage */
	r->sp_path = c->sp && c->selective;
	double act = r->sp_path ? s * b * h * (18 + 4 * ((double)c->f / h)) : s * b * h * (10 + 24 / t);
	r->per_layer_MB = r->sp_path ? act / MIB / t : act / MIB;
	act *= L;
	act += 8 * s * b * p;     /* embedding input, p micro-batches in flight */
	act += s * b * h * p;     /* embedding dropout */
	r->in_flight = -1;
	if (c->vpp > 0) {
		r->interleaved = true;
		r->penalty = 1 + (p - 1) / (p * (double)c->vpp);
		r->in_flight = (int64_t)ceil(r->penalty * p);
		act *= r->penalty;
	} else if (c->p > 1) {
		if (c->nmb >= 0) {
			double frac = (double)c->nmb / p;
			act *= frac < 1 ? frac : 1;
			r->in_flight = c->nmb < c->p ? c->nmb : c->p;
		} else {
			r->in_flight = c->p;
		}
	}
	if (r->sp_path) {
		if (c->p == 1)
			act += s * b * h * 4 * (1 + V / h); /* output layer input + cross entropy */
		act /= t;
	} else {
		if (c->p == 1)
			act += 2 * (s * b * V / t + s * b * h); /* logits + final norm output */
		act *= 1.05;
	}
	r->activation_bytes = act;

	r->weight_MB = r->weight_bytes / MIB;
	r->activation_MB = r->activation_bytes / MIB;
	r->total_MB = r->weight_MB + r->activation_MB;
	return 0;
}

void megatron_mem_print(const struct mm_config *c, const struct mm_report *r, FILE *out)
{
	fprintf(out, "Number of parameters in transformer block in billions: % .2f\n", r->block / 1e9);
	fprintf(out, "Number of active parameters in transformer block in billions: % .2f\n", r->block_active / 1e9);
	if (c->mtp > 0)
		fprintf(out, "Number of parameters in mtp block in billions: % .2f\n", r->mtp_block / 1e9);
	fprintf(out, "Number of parameters in embedding layers in billions: %.2f\n", r->embedding / 1e9);
	fprintf(out, "Total number of parameters in billions: %.2f\n", r->total / 1e9);
	fprintf(out, "Total number of active parameters in billions: %.2f\n", r->total_active / 1e9);
	fprintf(out, "Number of parameters in most loaded shard in billions: %.4f\n", r->shard / 1e9);
	if (c->p > 1)
		fprintf(out, "Number of parameters in other shards in billions: %.4f\n", r->other_shards / 1e9);
	if (r->sp_path) {
		fprintf(out, "compute_activation_memory with SP\n");
		fprintf(out, "Activation memory footprint per transformer layer: %.1f MB\n", r->per_layer_MB);
	} else {
		fprintf(out, "compute_activation_memory_without_sp\n");
		fprintf(out, "Activation memory footprint per transformer layer (precise, without SP): %.1f MB\n",
			r->per_layer_MB);
	}
	if (r->interleaved)
		fprintf(out, "Memory penalty from interleaved schedule: %.2f\n", r->penalty);
	if (r->in_flight >= 0)
		fprintf(out, "Number of in-flight microbatches: %lld\n", (long long)r->in_flight);
	fprintf(out, "Theoretical memory footprints: weight and optimizer=%.2f MB, activation=%.2f MB, total=%.2f MB\n\n",
		r->weight_MB, r->activation_MB, r->total_MB);
}
