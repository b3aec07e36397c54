/*
 * megatron_mem.h - Megatron's theoretical memory report, as pure arithmetic
 * (Megatron's megatron/training/theoretical_memory_usage.py; docs/report-memory.md).
 *
 * Megatron computes the report in Python floats from its argument
 * namespace; megatron_mem_compute does the same sums in doubles in the same
 * order, so the MB figures agree to far better than the 0.01 MB it prints.
 * Everything describes the most loaded rank (the first pipeline stage).
 * Nothing here reads flags or prints anything but the report lines;
 * memcalc_command.c builds the config from the command line.
 */
#ifndef MEGAC_MEMCALC_MEGATRON_MEM_H
#define MEGAC_MEMCALC_MEGATRON_MEM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

/* Megatron's argument values after validate_args (defaults resolved). */
struct mm_config {
	/* model */
	int64_t L, h, a, k, g, f; /* layers, hidden, heads, kv_channels, query groups, ffn hidden */
	int64_t V;                /* padded vocabulary size */
	bool group_query_attention; /* false: g is taken as a (Megatron's side effect) */
	bool swiglu, rmsnorm, untied, add_bias_linear;
	/* mixture of experts: num_experts 0 = none; moe_pattern[L] (1 = MoE layer) when set */
	int64_t num_experts, topk, moe_ffn, shared_ffn; /* shared_ffn 0 = no shared experts */
	bool shared_gate;                               /* --moe-shared-expert-gate */
	const unsigned char *moe_pattern;
	/* multi-latent attention: q_lora 0 = no query compression */
	bool mla;
	int64_t q_lora, kv_lora, qk_head, qk_pos, v_head;
	int64_t mtp; /* multi-token-prediction layers, 0 = none */
	/* layout and batch */
	int64_t world, t, p, d, ep, etp; /* d = world / (t·p·cp): Megatron's data_parallel_size */
	int64_t vpp;                     /* virtual stages per pipeline rank; 0 = not interleaved */
	bool sp, selective, dist_opt;    /* sequence parallel, recompute_granularity == "selective" */
	int64_t s, b;                    /* seq length, micro-batch size */
	int64_t nmb;                     /* micro-batches per step; -1 = unknown (Megatron's None) */
};

struct mm_report {
	/* parameter counts (compute_weight_and_optimizer_memory) */
	double block, block_active, mtp_block, embedding, total, total_active;
	double shard, other_shards; /* other_shards only when p > 1 */
	double p_tp, p_rep, p_exp;  /* the shard's parts: TP-sharded, replicated, expert */
	double bytes_per_param, bytes_per_expert_param;
	/* activations (compute_activation_memory) */
	bool sp_path;          /* compute_activation_memory (SP + selective) was used */
	double per_layer_MB;   /* as printed: the SP path divides by t, the other does not */
	bool interleaved;
	double penalty;        /* interleaved schedule memory penalty (interleaved only) */
	int64_t in_flight;     /* -1 when Megatron prints no such line (p == 1, not interleaved) */
	/* the report (report_theoretical_memory), MiB */
	double weight_bytes, activation_bytes;
	double weight_MB, activation_MB, total_MB;
};

/* Fill r from c. Returns 0, or -1 after error() for a config the formulas
 * cannot take (a size of zero where it divides). */
int megatron_mem_compute(const struct mm_config *c, struct mm_report *r);

/* Megatron's verbose report lines (report_theoretical_memory(verbose=True)),
 * ending with the "Theoretical memory footprints: ..." line and an empty line. */
void megatron_mem_print(const struct mm_config *c, const struct mm_report *r, FILE *out);

#endif
