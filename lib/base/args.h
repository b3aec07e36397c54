/*
 * args.h - every flag of every megac program, in one struct and one table.
 *
 * Megatron keeps its arguments in one namespace built by one parser; so do
 * we. `struct args` is that namespace: one field per flag, named after the
 * flag (dashes become underscores). The table in args_table.c says, for each
 * flag, its kind, default, which programs take it, and its help line; the
 * parser (flags.c) fills the struct from argv by walking the table, and
 * --help prints it. Programs read fields directly.
 *
 * Adding a flag: a field here, a row in args_table.c. Every other flag of
 * Megatron's training parser has a row in args_megatron.c: accepted with no
 * effect (it only picks one of Megatron's kernels or speed paths) or refused
 * by name with the reason, so that a user's command line is never
 * half-obeyed and never fails on an "unknown" Megatron flag. A row of kind
 * FK_UNSUPPORTED here refuses a flag of another Megatron tool the same way.
 *
 * The parser reports every problem of a command line in one message.
 */
#ifndef MEGAC_BASE_ARGS_H
#define MEGAC_BASE_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* Programs, as bits: a flag row lists the programs that accept it. */
enum prog_id {
	PROG_PREPROCESS = 1u << 0,
	PROG_MERGE = 1u << 1,
	PROG_TRAIN = 1u << 2,
	PROG_CONVERT = 1u << 3,
	PROG_MEMCALC = 1u << 4,
	PROG_INFER = 1u << 5,
	PROG_DATAINFO = 1u << 6,
	PROG_GPTINDEX = 1u << 7,
};

struct strlist {
	char **v;
	int n;
};

struct intlist {
	int64_t *v;
	int n;
};

struct args {
	/* tokenizer (Megatron's TokenizerConfig) */
	char *tokenizer_type;
	char *vocab_file;
	char *merge_file;
	char *tokenizer_model;
	int64_t vocab_size;            /* -1 = not given */
	int64_t padded_vocab_size;     /* -1 = not given */
	bool pad_vocab_size;
	int64_t vocab_extra_ids;
	struct strlist tokenizer_special_tokens;
	char *tiktoken_pattern;
	int64_t tiktoken_num_special_tokens;
	char *chat_template;           /* text_gen_server: NULL = the tokenizer's own */
	bool tokenizer_hf_no_use_fast;
	bool tokenizer_hf_no_include_special_tokens;
	bool tokenizer_sentencepiece_ignore_extra_whitespaces;
	bool trust_remote_code;
	int64_t null_tokenizer_eod_id; /* -1 = vocab_size - 1 */
	int64_t null_tokenizer_pad_id;
	bool use_gigatoken;
	int64_t make_vocab_size_divisible_by;

	/* preprocess_data / merge_datasets */
	struct strlist input;
	struct strlist json_keys;
	char *output_prefix;
	bool append_eod;
	bool keep_newlines;
	char *lang;
	int64_t workers;
	int64_t partitions;
	bool keep_sequential_samples;
	int64_t log_interval;
	bool find_optimal_num_workers;
	struct intlist workers_to_check;
	int64_t max_documents;
	bool skip_bad_lines;
	int64_t max_document_bytes;  /* 0 = no limit */
	bool multimodal;
	int64_t document;
	int64_t max_tokens;

	/* model (train) */
	int64_t num_layers;
	int64_t hidden_size;
	int64_t ffn_hidden_size;
	int64_t num_attention_heads;
	int64_t kv_channels;
	bool group_query_attention;
	int64_t num_query_groups;
	int64_t max_position_embeddings;
	bool add_position_embedding;   /* false: --no-position-embedding (rope only) */
	char *position_embedding_type;
	int64_t rotary_base;
	double rotary_percent;
	char *normalization;
	double norm_epsilon;
	bool swiglu;
	bool apply_layernorm_1p;
	bool add_qkv_bias;
	bool qk_layernorm;
	bool use_rope_scaling;
	double rope_scaling_factor;
	bool rotary_interleaved;
	double rotary_scaling_factor;  /* YaRN (--position-embedding-type yarn) */
	int64_t yarn_original_max_position_embeddings;
	double yarn_beta_fast, yarn_beta_slow;
	double mscale, mscale_all_dim;
	bool yarn_correction_range_round_to_int;
	char *window_size;           /* --window-size "L,R" (NULL: none) */
	char *window_attn_skip_freq; /* --window-attn-skip-freq (NULL: every layer windowed) */
	bool disable_bias_linear;
	bool untie_embeddings_and_output_weights;
	double init_method_std;
	double hidden_dropout;
	double attention_dropout;

	bool bias_gelu_fusion;
	bool openai_gelu;
	bool attention_softmax_in_fp32;

	/* parallelism */
	int64_t tensor_model_parallel_size;
	int64_t pipeline_model_parallel_size;
	int64_t context_parallel_size;
	int64_t expert_model_parallel_size;
	int64_t num_layers_per_virtual_pipeline_stage;  /* -1: not given */
	int64_t num_virtual_stages_per_pipeline_rank;   /* -1: not given */
	int64_t decoder_first_pipeline_num_layers;      /* -1: not given (the even split) */
	int64_t decoder_last_pipeline_num_layers;       /* -1: not given */
	int64_t microbatch_group_size_per_vp_stage;     /* -1: the pipeline size */
	bool sequence_parallel;
	bool use_distributed_optimizer;
	bool use_megatron_fsdp;                 /* Megatron-FSDP (train/fsdp.h) */
	const char *data_parallel_sharding_strategy;
	const char *megatron_fsdp_grad_comm_dtype, *megatron_fsdp_main_grads_dtype;
	bool overlap_grad_reduce;
	int64_t local_rank;
	char *device;
	bool overlap_param_gather;
	int64_t ddp_bucket_size;
	double distributed_timeout_minutes;

	/* mixed precision */
	bool fp16;
	bool bf16;
	double loss_scale;             /* -1: dynamic */
	double initial_loss_scale;
	double min_loss_scale;
	double loss_scale_window;
	int64_t hysteresis;
	bool accumulate_allreduce_grads_in_fp32;
	bool grad_reduce_in_bf16;

	/* FP8 training (docs/fp8.md) */
	char *fp8_format;              /* NULL (off) | "e4m3" | "hybrid" */
	char *fp8_recipe;              /* "delayed" | "tensorwise" | "blockwise" | "mxfp8" */
	int64_t fp8_margin;
	int64_t fp8_amax_history_len;
	char *fp8_amax_compute_algo;   /* "most_recent" | "max" */
	bool fp8_wgrad;
	bool tp_only_amax_red;
	bool fp8_param_gather;         /* FP8 weight copies, gathered as FP8 (docs/fp8.md) */
	bool first_last_layers_bf16;
	int64_t num_layers_at_start_in_bf16;
	int64_t num_layers_at_end_in_bf16;

	/* the precision-aware optimizer and optimizer offload */
	bool use_precision_aware_optimizer;
	char *main_grads_dtype;        /* "fp32" | "bf16" */
	char *main_params_dtype;       /* "fp32" | "fp16" */
	char *exp_avg_dtype;           /* "fp32" | "fp16" | "bf16" | "fp8" (refused) */
	char *exp_avg_sq_dtype;
	bool optimizer_cpu_offload;
	double optimizer_offload_fraction;

	/* activation recomputation */
	char *recompute_granularity;
	char *recompute_method;
	int64_t recompute_num_layers;
	bool recompute_activations;
	struct strlist recompute_modules; /* empty: Megatron's default, core_attn */

	/* optimizer and learning-rate schedule */
	char *optimizer;
	double lr;                     /* -1: not given */
	double min_lr;
	double decoupled_lr, decoupled_min_lr; /* -1: not given */
	double adam_beta1;
	double adam_beta2;
	double adam_eps;
	double weight_decay;
	double start_weight_decay;     /* -1: not given */
	double end_weight_decay;       /* -1: not given */
	char *weight_decay_incr_style;
	double clip_grad;
	char *lr_decay_style;
	int64_t lr_decay_iters;        /* -1: not given */
	int64_t lr_decay_samples;
	int64_t lr_warmup_iters;
	int64_t lr_warmup_samples;
	double lr_warmup_fraction;     /* -1: not given */
	double lr_warmup_init;
	char *lr_wsd_decay_style;
	int64_t lr_wsd_decay_iters;
	int64_t lr_wsd_decay_samples;
	bool override_opt_param_scheduler;
	bool use_checkpoint_opt_param_scheduler;

	/* checkpointing */
	char *save;
	int64_t save_interval;
	char *load;
	bool finetune;
	bool no_load_optim;
	bool no_load_rng;
	bool no_save_optim;
	bool no_save_rng;
	int64_t ckpt_step;
	bool exit_on_missing_checkpoint;
	char *ckpt_format;
	bool exit_on_failed_save;
	bool async_save;
	int64_t keep_last_n_checkpoints;
	bool use_checkpoint_args;
	bool use_tokenizer_model_from_checkpoint_args;

	/* logging */
	int64_t train_log_interval;
	bool log_throughput;
	bool log_params_norm;
	int64_t log_memory_interval;
	char *tensorboard_dir;
	int64_t tensorboard_log_interval;
	bool log_validation_ppl_to_tensorboard;
	char *metrics_file;
	bool log_comm;
	bool log_num_zeros_in_grad;
	bool log_timers_to_tensorboard, log_memory_to_tensorboard, log_world_size_to_tensorboard;
	bool log_loss_scale_to_tensorboard;
	char *wandb_project, *wandb_exp_name, *wandb_save_dir, *wandb_entity;
	int64_t logging_level;         /* -1: not given */
	struct intlist rampup_batch_size;
	char *step_batch_size_schedule;
	char *dataloader_type;
	int64_t timing_log_level;
	char *timing_log_option;

	/* exit */
	int64_t exit_interval;
	double exit_duration_in_mins;
	bool exit_signal_handler;
	char *exit_signal;
	double hang_timeout_minutes;
	bool check_for_nan_in_loss_and_grad;
	bool check_for_spiky_loss;

	/* options Megatron has only for speed; results do not change, megac accepts them */
	bool perf_flag;
	char *transformer_impl;
	bool moe_grouped_gemm; /* ckpt_convert --to megatron: TEGroupedMLP's expert names in legacy files */

	/* batch, iterations, evaluation */
	int64_t micro_batch_size;
	int64_t global_batch_size;
	int64_t train_iters;
	int64_t train_samples;
	int64_t eval_iters;
	int64_t eval_interval;
	bool full_validation;
	bool skip_train;

	/* data (Megatron's "data and dataloader" group) */
	struct strlist data_path;
	char *data_args_path;
	char *per_split_data_args_path;
	char *split;
	struct strlist train_data_path;
	struct strlist valid_data_path;
	struct strlist test_data_path;
	char *data_cache_path;
	bool mock_data;
	int64_t seed;
	int64_t seq_length;
	bool eod_mask_loss;
	bool calculate_per_token_loss;
	bool reset_position_ids;
	bool reset_attention_mask;
	bool sft;                          /* --sft: conversations from JSONL (data/sft_data.h) */
	char *sft_tokenizer_prompt_format; /* nemotron-h-aligned, nemotron-nano-v2, identity, default */
	double mid_level_dataset_surplus;
	struct intlist show_samples;

	/* text_gen_server */
	int64_t port, inference_max_requests, inference_max_seq_length, max_body_bytes, max_concurrent_requests;
	int64_t inference_max_tokens;          /* the most tokens of one forward step; -1: the default */
	char *host, *api_key;
	double request_timeout, drain_timeout; /* seconds */
	int64_t max_connections_per_ip;        /* 0: no limit */
	/* Megatron's run_text_generation_server.py: the requests' defaults, when given */
	double temperature, top_p;
	int64_t top_k, num_tokens_to_generate;
	bool return_log_probs;

	/* ckpt_convert (megac) */
	char *convert_to, *convert_from;
	int64_t target_tensor_parallel_size, target_pipeline_parallel_size, target_num_virtual_stages;
	int64_t iteration;
	bool no_optim, verify;
	char *dtype, *max_shard_size;
	/* Megatron's tools/checkpoint/convert.py */
	char *model_type, *loader, *saver, *megatron_path;
	int64_t target_expert_parallel_size, true_vocab_size, perf_flag_int;

	/* report_memory (megac) and the MoE / MLA / MTP model flags it takes */
	int64_t world_size;            /* -1: not given */
	bool json;
	bool advise;
	char *gpu_memory;              /* "80GiB" */
	int64_t gpus_per_node;
	double gpu_tflops;
	double intra_node_bandwidth;   /* GB/s */
	double inter_node_bandwidth;   /* GB/s */
	double link_latency_us;
	int64_t advise_top;
	int64_t num_experts;           /* -1: no MoE */
	int64_t moe_router_topk;
	int64_t moe_ffn_hidden_size;   /* -1: --ffn-hidden-size */
	int64_t moe_shared_expert_intermediate_size; /* -1: none */
	char *moe_layer_freq;
	char *moe_router_score_function;
	bool moe_router_pre_softmax;
	bool moe_shared_expert_gate;
	char *moe_router_load_balancing_type;
	double moe_aux_loss_coeff;
	double moe_z_loss_coeff;          /* -1: none */
	double moe_expert_capacity_factor; /* -1: dropless */
	char *moe_token_drop_policy;
	bool moe_pad_expert_input_to_capacity;
	char *moe_token_dispatcher_type;
	char *moe_router_dtype;
	double moe_router_topk_scaling_factor; /* 0: none */
	int64_t moe_router_num_groups;     /* -1: none */
	int64_t moe_router_group_topk;     /* -1: none */
	bool moe_router_enable_expert_bias;
	double moe_router_bias_update_rate;
	bool moe_router_force_load_balancing;
	bool moe_enable_deepep;
	char *moe_flex_dispatcher_backend;
	int64_t expert_tensor_parallel_size; /* -1: the tensor-parallel size */
	bool multi_latent_attention;
	int64_t q_lora_rank;           /* -1: none */
	int64_t kv_lora_rank;
	int64_t qk_head_dim;
	int64_t qk_pos_emb_head_dim;
	int64_t v_head_dim;
	char *rope_type;                /* --rope-type: NULL (Megatron's default: yarn with MLA), rope, yarn */
	int64_t mtp_num_layers;        /* -1: none */
	double mtp_loss_scaling_factor;
	/* hybrid Mamba/attention models (docs/mamba.md) */
	char *hybrid_layer_pattern;    /* NULL: a GPT model */
	char *hybrid_override_pattern; /* its deprecated spelling */
	struct strlist spec;           /* --spec: only the hybrid stack's (gpt_config.c) */
	bool is_hybrid_model;
	int64_t mamba_state_dim;
	int64_t mamba_head_dim;
	int64_t mamba_num_groups;
	int64_t mamba_num_heads;       /* -1: d_inner / mamba_head_dim */

	/* bookkeeping: which table rows were given on the command line */
	unsigned char given[512];
	unsigned char ignored[512]; /* given, but for a program in prog_info.ignore */
	unsigned char given_megatron[1024]; /* rows of megatron_flags[] given (accepted, no effect) */
};

enum flag_kind {
	FK_BOOL,        /* --x sets true (store_true) */
	FK_BOOL_NEG,    /* --no-x / --disable-x sets false (store_false) */
	FK_INT,
	FK_FLOAT,
	FK_STR,
	FK_STRS,        /* nargs='+' strings */
	FK_INTS,        /* nargs='+' integers */
	FK_UNSUPPORTED, /* a Megatron flag megac refuses; help says why */
};

struct flag_def {
	const char *name;     /* "--workers" */
	enum flag_kind kind;
	size_t off;           /* offsetof(struct args, field) */
	unsigned progs;       /* PROG_* accepting it */
	unsigned required;    /* PROG_* for which it must be given */
	const char *group;    /* --help section */
	const char *def;      /* default, as command-line text; NULL = none */
	const char *choices;  /* "a|b|c" or NULL */
	const char *metavar;  /* shown in --help */
	const char *help;
	bool no_effect;       /* a Megatron flag accepted without effect (it picks a
			       * kernel or speed path; the numbers are the same) */
};

extern const struct flag_def args_table[];
extern const size_t args_table_len;

/* The model sizes train requires unless --use-checkpoint-args takes them
 * from the checkpoint (NULL-terminated). */
extern const char *const args_checkpoint_sizes[];

/* A row whose choices hold Megatron's values, some of which megac refuses. */
struct refused_value {
	const char *flag;
	const char *megac;    /* the values megac implements, "a|b" */
	const char *why;
};

extern const struct refused_value args_refused_values[];
extern const size_t args_refused_values_len;

/* A flag of Megatron's training parser that args_table does not implement
 * (args_megatron.c says what each status means). */
enum megatron_flag_status {
	MF_NO_EFFECT,
	MF_REFUSED,
};

#define MF_LIST (-1)  /* nargs='+' */
#define MF_LIST0 (-2) /* nargs='*' */

struct megatron_flag {
	const char *name;
	enum megatron_flag_status status;
	int arity;            /* values after the flag: 0, 1, N, MF_LIST, MF_LIST0 */
	const char *why;      /* the reason; rows of one feature share the pointer */
};

extern const struct megatron_flag megatron_flags[];
extern const size_t megatron_flags_len;

struct prog_info {
	const char *name;     /* "preprocess_data" */
	unsigned id;          /* PROG_* */
	const char *summary;  /* one paragraph for --help */
	const char *example;  /* one example command line */
	unsigned ignore;      /* PROG_* whose flags are accepted and ignored (e.g.
			       * build_gpt_index takes a whole train command line) */
};

/*
 * Parse argv for program p. Returns 0 on success, 1 when --help was printed
 * (the caller exits 0), -1 after one error() listing every problem of the
 * command line (unknown flag with the closest suggestion when it is not
 * Megatron's, bad or out-of-range value, Megatron flags megac refuses grouped
 * by reason, missing required flags).
 */
int args_parse(struct args *a, const struct prog_info *p, int argc, char **argv);
void args_help(const struct prog_info *p, FILE *out);
void args_free(struct args *a);
void strlist_free(struct strlist *l);
/* Was the flag named `name` given on the command line? (A Megatron flag
 * accepted without effect counts.) */
bool args_given(const struct args *a, const char *name);
/* "--num-layers --hidden-size": the given flags this program ignores; NULL if none. */
char *args_ignored(const struct args *a);
/* "--attention-backend --manual-gc": the given Megatron flags accepted with no
 * effect in megac; NULL if none. prog_main says them in one start-up line. */
char *args_no_effect(const struct args *a);

/*
 * The whole main() of a program: log prefix, flags, then cmd. Returns the
 * exit status: 0, or 128 (DIE_EXIT_CODE) when the flags or cmd failed.
 */
int prog_main(int argc, char **argv, const struct prog_info *p, int (*cmd)(const struct args *a));

/* docs/flags.md, from the tables (flags_doc.c). */
void args_write_flags_md(FILE *out);

/* Levenshtein distance, exported for tests and for other suggestion lists. */
size_t edit_distance(const char *a, const char *b);

#endif
