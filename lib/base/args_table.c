/*
 * args_table.c - the one flag table (see args.h). Rows are grouped as in
 * Megatron's argument groups; names, defaults and meanings are Megatron's.
 * megac extensions are marked "(megac)" in their help.
 */
#include "args.h"

#include <stddef.h>

/* no_effect, the rows' last member, is given only where it is true */
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"

#define F(field) offsetof(struct args, field)
#define TOKPROGS (PROG_PREPROCESS | PROG_TRAIN | PROG_CONVERT | PROG_INFER | PROG_DATAINFO | PROG_GPTINDEX | PROG_MEMCALC)
/* report_memory (PROG_MEMCALC) takes train's whole command line */
#define TR (PROG_TRAIN | PROG_MEMCALC)
#define DATA (PROG_TRAIN | PROG_GPTINDEX | PROG_MEMCALC)
#define MEM PROG_MEMCALC
#define PP PROG_PREPROCESS
#define MG PROG_MERGE

static const char tokenizer_types[] =
	"BertWordPieceLowerCase|BertWordPieceCase|GPT2BPETokenizer|SentencePieceTokenizer|"
	"GPTSentencePieceTokenizer|HuggingFaceTokenizer|Llama2Tokenizer|TikTokenizer|"
	"MultimodalTokenizer|NullTokenizer|NullMultimodalTokenizer|SFTTokenizer";

const struct flag_def args_table[] = {
	/* ---- tokenizer ---- */
	{ "--tokenizer-type", FK_STR, F(tokenizer_type), TOKPROGS, PP | PROG_GPTINDEX, "tokenizer", NULL,
	  tokenizer_types, "TYPE",
	  "tokenizer; megac implements GPT2BPETokenizer, HuggingFaceTokenizer, SFTTokenizer (a Hugging Face folder "
	  "with --sft's chat formats), TikTokenizer, NullTokenizer and the SentencePiece types "
	  "(SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer)" },
	{ "--vocab-file", FK_STR, F(vocab_file), TOKPROGS, 0, "tokenizer", NULL, NULL, "PATH",
	  "GPT-2 vocab.json (GPT2BPETokenizer)" },
	{ "--merge-file", FK_STR, F(merge_file), TOKPROGS, 0, "tokenizer", NULL, NULL, "PATH",
	  "GPT-2 merges.txt (GPT2BPETokenizer)" },
	{ "--tokenizer-model", FK_STR, F(tokenizer_model), TOKPROGS, 0, "tokenizer", NULL, NULL, "PATH",
	  "HuggingFaceTokenizer: a tokenizer.json, or a folder holding one (and tokenizer_config.json); "
	  "SentencePiece types: the SentencePiece .model file (e.g. Llama-2's tokenizer.model); TikTokenizer: the "
	  "tiktoken vocabulary .json" },
	{ "--vocab-size", FK_INT, F(vocab_size), TOKPROGS, 0, "tokenizer", "-1", NULL, "N",
	  "vocabulary size for NullTokenizer (required there) and TikTokenizer (default 131072)" },
	{ "--padded-vocab-size", FK_INT, F(padded_vocab_size), TOKPROGS, 0, "tokenizer", "-1", NULL, "N",
	  "vocabulary size of the model (training only)" },
	{ "--no-pad-vocab-size", FK_BOOL_NEG, F(pad_vocab_size), TOKPROGS, 0, "tokenizer", "true", NULL, NULL,
	  "do not pad the vocabulary size (training only)" },
	{ "--disable-pad-vocab-size", FK_BOOL_NEG, F(pad_vocab_size), TOKPROGS, 0, "tokenizer", "true", NULL, NULL,
	  "same as --no-pad-vocab-size" },
	{ "--vocab-extra-ids", FK_INT, F(vocab_extra_ids), TOKPROGS, 0, "tokenizer", "0", NULL, "N",
	  "extra vocabulary ids for T5 span masking (must be 0: megac has no T5)" },
	{ "--make-vocab-size-divisible-by", FK_INT, F(make_vocab_size_divisible_by), TOKPROGS, 0, "tokenizer",
	  "128", NULL, "N", "pad the vocabulary to a multiple of this (training only)" },
	{ "--tokenizer-special-tokens", FK_STRS, F(tokenizer_special_tokens), TOKPROGS, 0, "tokenizer", NULL,
	  NULL, "TOKEN",
	  "extra special tokens added to a HuggingFaceTokenizer (recognised in text); TikTokenizer: its "
	  "special tokens (ids 0, 1, ...; must include <unk> <s> </s> <mask> <pad> <cls> <sep>)" },
	{ "--tokenizer-metadata", FK_UNSUPPORTED, 0, TOKPROGS, 0, "tokenizer", NULL, NULL, "PATH",
	  "tokenizer library overrides by metadata file are not supported; use --tokenizer-type" },
	{ "--tiktoken-pattern", FK_STR, F(tiktoken_pattern), TOKPROGS, 0, "tokenizer", NULL, "v1|v2", "V",
	  "TikTokenizer split pattern (default v2)" },
	{ "--tiktoken-num-special-tokens", FK_INT, F(tiktoken_num_special_tokens), TOKPROGS, 0, "tokenizer",
	  "1000", NULL, "N",
	  "TikTokenizer: ids below this are special tokens; the vocabulary's ranks are shifted by it" },
	{ "--tokenizer-sentencepiece-legacy", FK_UNSUPPORTED, 0, TOKPROGS, 0, "tokenizer", NULL, NULL, NULL,
	  "the legacy SentencePiece wrapper (special tokens added outside the model) is not in megac; Megatron's "
	  "own legacy wrapper has no EOD id when special tokens come from the command line" },
	{ "--no-tokenizer-sentencepiece-ignore-extra-whitespaces", FK_BOOL_NEG,
	  F(tokenizer_sentencepiece_ignore_extra_whitespaces), TOKPROGS, 0, "tokenizer", "true", NULL, NULL,
	  "SentencePiece tokenizers: keep repeated, leading and trailing spaces that the model drops (Megatron's "
	  "marker trick: each such space is encoded, as the model would encode it before a character)" },
	{ "--disable-tokenizer-sentencepiece-ignore-extra-whitespaces", FK_BOOL_NEG,
	  F(tokenizer_sentencepiece_ignore_extra_whitespaces), TOKPROGS, 0, "tokenizer", "true", NULL, NULL,
	  "same as --no-tokenizer-sentencepiece-ignore-extra-whitespaces" },
	{ "--tokenizer-hf-no-use-fast", FK_BOOL, F(tokenizer_hf_no_use_fast), TOKPROGS, 0, "tokenizer", NULL,
	  NULL, NULL, "accepted for compatibility: slow and fast HF tokenizers give the same ids", true },
	{ "--tokenizer-hf-no-include-special-tokens", FK_BOOL, F(tokenizer_hf_no_include_special_tokens),
	  TOKPROGS, 0, "tokenizer", NULL, NULL, NULL,
	  "HuggingFaceTokenizer: do not add the post-processor's tokens (BOS...) when encoding" },
	{ "--trust-remote-code", FK_BOOL, F(trust_remote_code), TOKPROGS, 0, "tokenizer", NULL, NULL, NULL,
	  "accepted for compatibility: megac never runs code from a tokenizer folder", true },
	{ "--null-tokenizer-eod-id", FK_INT, F(null_tokenizer_eod_id), TOKPROGS, 0, "tokenizer", "-1", NULL,
	  "ID", "NullTokenizer end-of-document id (default vocab_size - 1)" },
	{ "--null-tokenizer-pad-id", FK_INT, F(null_tokenizer_pad_id), TOKPROGS, 0, "tokenizer", "-1", NULL,
	  "ID", "NullTokenizer pad id (-1 = none)" },
	/* the server's row first: a program takes the first row of a name that lists it */
	{ "--chat-template", FK_STR, F(chat_template), PROG_INFER, 0, "tokenizer", NULL, NULL, "STR",
	  "the chat template (Jinja text, as a Hugging Face tokenizer_config.json holds it) that turns "
	  "/v1/chat/completions messages into the prompt, instead of the tokenizer folder's own" },
	{ "--chat-template", FK_UNSUPPORTED, 0, TOKPROGS & ~PROG_INFER, 0, "tokenizer", NULL, NULL, "STR",
	  "only text_gen_server takes a chat template (for the prompts of its /v1/chat/completions)" },
	{ "--use-gigatoken", FK_BOOL, F(use_gigatoken), TOKPROGS, 0, "tokenizer", NULL, NULL, NULL,
	  "accepted for compatibility: megac's tokenizers are native C, same ids", true },

	/* ---- preprocess_data ---- */
	{ "--input", FK_STRS, F(input), PP, PP, "input data", NULL, NULL, "PATH",
	  "JSONL inputs: files (.jsonl, .gz, .zst, .xz, .bz2, tar archives of those), globs, "
	  "directories, or - for standard input; read in the order given (megac: several allowed)" },
	{ "--json-keys", FK_STRS, F(json_keys), PP, 0, "input data", "text", NULL, "KEY",
	  "JSON keys to extract; one output dataset per key" },
	{ "--split-sentences", FK_UNSUPPORTED, 0, PP, 0, "input data", NULL, NULL, NULL,
	  "NLTK Punkt sentence splitting is not implemented; give documents as JSON lists of "
	  "sentences instead (each list element becomes one sequence)" },
	{ "--keep-newlines", FK_BOOL, F(keep_newlines), PP, 0, "input data", NULL, NULL, NULL,
	  "only affects --split-sentences (accepted for compatibility)", true },
	{ "--lang", FK_STR, F(lang), PP, 0, "input data", "english", NULL, "LANG",
	  "only affects --split-sentences (accepted for compatibility)", true },
	{ "--append-eod", FK_BOOL, F(append_eod), PP, 0, "tokenization process", NULL, NULL, NULL,
	  "append the tokenizer's end-of-document id to every non-empty document" },
	{ "--output-prefix", FK_STR, F(output_prefix), PP | MG, PP | MG, "output data", NULL, NULL, "PREFIX",
	  "output path prefix; preprocess_data writes PREFIX_<key>_document.bin/.idx" },
	{ "--workers", FK_INT, F(workers), PP, 0, "runtime", "1", NULL, "N",
	  "tokenizer threads; the output does not depend on it" },
	{ "--partitions", FK_INT, F(partitions), PP, 0, "runtime", "1", NULL, "N",
	  "emulate Megatron's input partitions: with N > 1 documents come out in Megatron's "
	  "round-robin order (line i to partition i mod N) unless --keep-sequential-samples" },
	{ "--keep-sequential-samples", FK_BOOL, F(keep_sequential_samples), PP, 0, "runtime", NULL, NULL,
	  NULL, "with --partitions: keep input order (Megatron's contiguous partitions)" },
	{ "--log-interval", FK_INT, F(log_interval), PP, 0, "runtime", "1000", NULL, "N",
	  "progress line every N documents" },
	{ "--find-optimal-num-workers", FK_BOOL, F(find_optimal_num_workers), PP, 0, "runtime", NULL, NULL,
	  NULL, "benchmark mode: time each --workers-to-check value on --max-documents documents, "
	  "write nothing, print a ranking" },
	{ "--workers-to-check", FK_INTS, F(workers_to_check), PP, 0, "runtime", "16 32 64", NULL, "N",
	  "worker counts tried by --find-optimal-num-workers" },
	{ "--max-documents", FK_INT, F(max_documents), PP, 0, "runtime", "100000", NULL, "N",
	  "documents per --find-optimal-num-workers run" },
	{ "--skip-bad-lines", FK_BOOL, F(skip_bad_lines), PP, 0, "runtime", NULL, NULL, NULL,
	  "(megac) skip lines that are not valid JSON objects with string values for the keys, "
	  "count and report them, instead of stopping" },
	{ "--max-document-bytes", FK_INT, F(max_document_bytes), PP, 0, "runtime", "0", NULL, "N",
	  "(megac) a JSONL line longer than N bytes is an error (with --skip-bad-lines: skipped and counted); "
	  "it caps memory, which otherwise grows with the longest line (0 = no limit)" },

	/* ---- merge_datasets ---- */
	{ "--input", FK_STRS, F(input), MG, MG, "input data", NULL, NULL, "DIR",
	  "directory holding the .bin/.idx pairs to merge (merged in sorted name order)" },
	{ "--multimodal", FK_BOOL, F(multimodal), MG | PROG_DATAINFO, 0, "input data", NULL, NULL, NULL,
	  "datasets carry the per-sequence modes array" },

	/* ---- model (train) ---- */
	{ "--num-layers", FK_INT, F(num_layers), TR, TR, "model", "-1", NULL, "L",
	  "transformer layers (a hybrid model's --hybrid-layer-pattern gives them: then optional, and overridden)" },
	{ "--hidden-size", FK_INT, F(hidden_size), TR, TR, "model", "-1", NULL, "H", "hidden size" },
	{ "--ffn-hidden-size", FK_INT, F(ffn_hidden_size), TR, 0, "model", "-1", NULL, "F",
	  "MLP inner size (default 4H; with --swiglu int(8H/3/64)*64)" },
	{ "--num-attention-heads", FK_INT, F(num_attention_heads), TR, TR, "model", "-1", NULL, "A",
	  "attention heads" },
	{ "--kv-channels", FK_INT, F(kv_channels), TR, 0, "model", "-1", NULL, "D", "head dimension (default H/A)" },
	{ "--group-query-attention", FK_BOOL, F(group_query_attention), TR, 0, "model", NULL, NULL, NULL,
	  "grouped-query attention (with --num-query-groups)" },
	{ "--num-query-groups", FK_INT, F(num_query_groups), TR, 0, "model", "1", NULL, "G", "key/value groups" },
	{ "--max-position-embeddings", FK_INT, F(max_position_embeddings), TR, TR, "model", "-1", NULL, "N",
	  "size of the learned position table (>= --seq-length)" },
	{ "--no-position-embedding", FK_BOOL_NEG, F(add_position_embedding), TR, 0, "model", "true", NULL, NULL,
	  "no learned position table: allowed only with --position-embedding-type rope, where it changes "
	  "nothing (Megatron's deprecated spelling)" },
	{ "--position-embedding-type", FK_STR, F(position_embedding_type), TR, 0, "model", "learned_absolute",
	  "learned_absolute|rope|yarn|mrope|relative|none", "TYPE",
	  "position embedding: learned_absolute, rope, or yarn (RoPE with YaRN's frequency scaling); none in a "
	  "hybrid Mamba model (docs/mamba.md); Megatron's other types are refused" },
	{ "--rotary-base", FK_INT, F(rotary_base), TR, 0, "model", "10000", NULL, "N", "RoPE theta" },
	{ "--rotary-percent", FK_FLOAT, F(rotary_percent), TR, 0, "model", "1.0", NULL, "P",
	  "fraction of the head dimension rotated" },
	{ "--normalization", FK_STR, F(normalization), TR, 0, "model", "LayerNorm", "LayerNorm|RMSNorm", "NORM",
	  "normalization" },
	{ "--norm-epsilon", FK_FLOAT, F(norm_epsilon), TR, 0, "model", "1e-05", NULL, "EPS", "norm epsilon" },
	{ "--swiglu", FK_BOOL, F(swiglu), TR, 0, "model", NULL, NULL, NULL, "SwiGLU MLP ([gate; up] in fc1)" },
	{ "--disable-bias-linear", FK_BOOL, F(disable_bias_linear), TR, 0, "model", NULL, NULL, NULL,
	  "no biases in the linear layers" },
	{ "--untie-embeddings-and-output-weights", FK_BOOL, F(untie_embeddings_and_output_weights), TR, 0, "model",
	  NULL, NULL, NULL, "a separate output layer" },
	{ "--init-method-std", FK_FLOAT, F(init_method_std), TR, 0, "model", "0.02", NULL, "STD",
	  "weight init standard deviation" },
	{ "--hidden-dropout", FK_FLOAT, F(hidden_dropout), TR, 0, "model", "0.1", NULL, "P", "hidden dropout" },
	{ "--attention-dropout", FK_FLOAT, F(attention_dropout), TR, 0, "model", "0.1", NULL, "P",
	  "attention dropout" },

	{ "--no-bias-gelu-fusion", FK_BOOL_NEG, F(bias_gelu_fusion), TR, 0, "model", "true", NULL, NULL,
	  "exact erf GELU instead of the tanh approximation of the fused bias-GELU (which "
	  "--disable-bias-linear also turns off, as in Megatron)" },
	{ "--openai-gelu", FK_BOOL, F(openai_gelu), TR, 0, "model", NULL, NULL, NULL,
	  "accepted and, as in Megatron, without effect", true },
	{ "--attention-softmax-in-fp32", FK_BOOL, F(attention_softmax_in_fp32), TR, 0, "model", NULL, NULL, NULL,
	  "accepted; megac always computes the softmax in fp32", true },
	{ "--transformer-impl", FK_STR, F(transformer_impl), TR, 0, "model", "transformer_engine",
	  "transformer_engine|local|inference_optimized", "IMPL",
	  "accepted; checkpoints always use the Transformer Engine names", true },
	{ "--apply-layernorm-1p", FK_BOOL, F(apply_layernorm_1p), TR, 0, "model", NULL, NULL, NULL,
	  "zero-centred norm weights: stored as w - 1 (initialised to 0) and applied as w + 1, as Megatron's "
	  "LayerNorm1P and Transformer Engine's zero_centered_gamma" },
	{ "--qk-layernorm", FK_BOOL, F(qk_layernorm), TR, 0, "model", NULL, NULL, NULL,
	  "normalize each query and key head over its channels before RoPE (--normalization's norm, one weight "
	  "of --kv-channels values shared by the heads: q_layernorm, k_layernorm)" },
	{ "--add-qkv-bias", FK_BOOL, F(add_qkv_bias), TR, 0, "model", NULL, NULL, NULL,
	  "a bias on linear_qkv even with --disable-bias-linear (Qwen2)" },
	{ "--rotary-interleaved", FK_BOOL, F(rotary_interleaved), TR, 0, "model", NULL, NULL, NULL,
	  "RoPE rotates channel pairs (2i, 2i+1) instead of (i, i + rot/2) (rope or yarn)" },
	{ "--rotary-scaling-factor", FK_FLOAT, F(rotary_scaling_factor), TR, 0, "model", "1.0", NULL, "F",
	  "YaRN: the context extension factor (position embedding type yarn, or multi-latent attention, where it also "
	  "sets the softmax scale; no effect otherwise)" },
	{ "--yarn-original-max-position-embeddings", FK_INT, F(yarn_original_max_position_embeddings), TR, 0,
	  "model", "4096", NULL, "N",
	  "YaRN: the context the model was first trained for, which sets the correction range (Megatron's "
	  "default None means 4096)" },
	{ "--yarn-beta-fast", FK_FLOAT, F(yarn_beta_fast), TR, 0, "model", "32.0", NULL, "B",
	  "YaRN: channel pairs turning more than B times over the original context keep their frequency (the "
	  "correction range's low end; None means 32)" },
	{ "--yarn-beta-slow", FK_FLOAT, F(yarn_beta_slow), TR, 0, "model", "1.0", NULL, "B",
	  "YaRN: pairs turning fewer than B times take their frequency divided by the factor (the correction "
	  "range's high end; None means 1)" },
	{ "--mscale", FK_FLOAT, F(mscale), TR, 0, "model", "1.0", NULL, "M",
	  "YaRN: cos and sin are multiplied by (0.1 M ln F + 1) / (0.1 A ln F + 1), F the scaling factor and A "
	  "--mscale-all-dim (1 when F <= 1)" },
	{ "--mscale-all-dim", FK_FLOAT, F(mscale_all_dim), TR, 0, "model", "0.0", NULL, "A",
	  "YaRN: the divisor's coefficient in --mscale's factor; with multi-latent attention the softmax scale is "
	  "(0.1 A ln F + 1)^2 / sqrt(q head size)" },
	{ "--yarn-correction-range-round-to-int", FK_BOOL, F(yarn_correction_range_round_to_int), TR, 0, "model",
	  "true", NULL, NULL, "YaRN: round the correction range outwards to whole channel pairs (the default)" },
	{ "--no-yarn-correction-range-round-to-int", FK_BOOL_NEG, F(yarn_correction_range_round_to_int), TR, 0,
	  "model", "true", NULL, NULL, "YaRN: keep the correction range's ends fractional" },
	{ "--use-rope-scaling", FK_BOOL, F(use_rope_scaling), TR, 0, "model", NULL, NULL, NULL,
	  "Llama 3.x RoPE frequency scaling (low/high frequency factors 1 and 4, original context 8192)" },
	{ "--rope-scaling-factor", FK_FLOAT, F(rope_scaling_factor), TR, 0, "model", "8.0", NULL, "F",
	  "the factor of --use-rope-scaling" },
	{ "--window-size", FK_STR, F(window_size), TR, 0, "model", NULL, NULL, "L,R",
	  "sliding-window attention (Mistral): a query at position i sees the keys at i-L .. i (L + 1 keys; -1: "
	  "no limit); R, the keys after i, is moot under the causal mask (give 0 or -1)" },
	{ "--window-attn-skip-freq", FK_STR, F(window_attn_skip_freq), TR, 0, "model", NULL, NULL, "N",
	  "full attention in some layers: every N-th layer (N, 2N... counting from 1), or a list such as "
	  "[1,1,1,0] of --num-layers entries (1 = window, 0 = full); needs --window-size" },
	{ "--squared-relu", FK_UNSUPPORTED, 0, TR, 0, "model", NULL, NULL, NULL, "squared ReLU is not implemented yet" },

	/* ---- parallelism ---- */
	{ "--tensor-model-parallel-size", FK_INT, F(tensor_model_parallel_size), TR | PROG_INFER, 0, "distributed", "1", NULL,
	  "T", "tensor-parallel size" },
	{ "--pipeline-model-parallel-size", FK_INT, F(pipeline_model_parallel_size), TR, 0, "distributed", "1",
	  NULL, "P", "pipeline-parallel size (the 1F1B schedule)" },
	{ "--context-parallel-size", FK_INT, F(context_parallel_size), TR, 0, "distributed", "1", NULL, "C",
	  "context-parallel size (ring attention over load-balanced sequence chunks)" },
	{ "--expert-model-parallel-size", FK_INT, F(expert_model_parallel_size), TR | PROG_INFER, 0, "distributed", "1", NULL,
	  "E", "expert-parallel size: the ranks that split each MoE layer's experts between them" },
	{ "--sequence-parallel", FK_BOOL, F(sequence_parallel), TR, 0, "distributed", NULL, NULL, NULL,
	  "sequence parallelism (needs tensor parallelism)" },
	{ "--num-layers-per-virtual-pipeline-stage", FK_INT, F(num_layers_per_virtual_pipeline_stage), TR, 0,
	  "distributed", "-1", NULL, "N", "the interleaved 1F1B schedule: each pipeline rank holds model chunks of N "
	  "layers, dealt out round-robin over the stages" },
	{ "--num-virtual-stages-per-pipeline-rank", FK_INT, F(num_virtual_stages_per_pipeline_rank), TR, 0,
	  "distributed", "-1", NULL, "V", "the interleaved 1F1B schedule with V model chunks per pipeline rank" },
	{ "--virtual-pipeline-model-parallel-size", FK_INT, F(num_virtual_stages_per_pipeline_rank), TR, 0,
	  "distributed", "-1", NULL, "V", "older Megatron's name for --num-virtual-stages-per-pipeline-rank" },
	{ "--microbatch-group-size-per-virtual-pipeline-stage", FK_INT, F(microbatch_group_size_per_vp_stage), TR,
	  0, "distributed", "-1", NULL, "N", "interleaved schedule: micro-batches run back to back on one model "
	  "chunk (default: the pipeline size)" },
	{ "--decoder-first-pipeline-num-layers", FK_INT, F(decoder_first_pipeline_num_layers), TR, 0, "distributed",
	  "-1", NULL, "N", "uneven pipeline stages: the first stage holds N layers, the stages between the first "
	  "and last share the rest evenly (default: every stage the same)" },
	{ "--decoder-last-pipeline-num-layers", FK_INT, F(decoder_last_pipeline_num_layers), TR, 0, "distributed",
	  "-1", NULL, "N", "uneven pipeline stages: the last stage holds N layers" },
	{ "--distributed-timeout-minutes", FK_FLOAT, F(distributed_timeout_minutes), TR, 0, "distributed", "10",
	  NULL, "M", "a collective waiting longer than this ends the job with a message naming the rank" },
	{ "--use-distributed-optimizer", FK_BOOL, F(use_distributed_optimizer), TR, 0, "distributed", NULL, NULL,
	  NULL, "shard Adam's state over the data-parallel ranks (ZeRO-1): reduce-scatter the gradients, "
	  "all-gather the parameters" },
	{ "--use-megatron-fsdp", FK_BOOL, F(use_megatron_fsdp), TR, 0, "distributed", NULL, NULL, NULL,
	  "Megatron-FSDP: shard over the data-parallel ranks what --data-parallel-sharding-strategy says "
	  "(checkpoints stay megac's own format)" },
	{ "--data-parallel-sharding-strategy", FK_STR, F(data_parallel_sharding_strategy), TR, 0, "distributed",
	  NULL, "no_shard|optim|optim_grads|optim_grads_params", "S",
	  "with --use-megatron-fsdp: nothing, the optimizer state (ZeRO-1), and the gradients (ZeRO-2), and the "
	  "weights (ZeRO-3, gathered per tensor when used; the default)" },
	{ "--megatron-fsdp-grad-comm-dtype", FK_STR, F(megatron_fsdp_grad_comm_dtype), TR, 0, "distributed", "auto",
	  "fp32|bf16|fp16|auto", "T", "Megatron-FSDP's gradient reduction type (optim_grads and optim_grads_params): "
	  "bf16/fp16 round each micro-batch's gradients to it before the reduce-scatter and the sum after (auto, fp32: "
	  "fp32)" },
	{ "--megatron-fsdp-main-grads-dtype", FK_STR, F(megatron_fsdp_main_grads_dtype), TR, 0, "distributed", "auto",
	  "fp32|bf16|fp16|auto", "T", "Megatron-FSDP's main gradients (optim_grads and optim_grads_params): bf16/fp16 "
	  "round the gradient shard to it after each micro-batch's sum (auto, fp32: fp32)" },

	/* ---- mixed precision ---- */
	{ "--fp16", FK_BOOL, F(fp16), TR, 0, "mixed precision", NULL, NULL, NULL,
	  "fp16 model with fp32 master weights and loss scaling" },
	{ "--bf16", FK_BOOL, F(bf16), TR, 0, "mixed precision", NULL, NULL, NULL,
	  "bf16 model with fp32 master weights" },
	{ "--loss-scale", FK_FLOAT, F(loss_scale), TR, 0, "mixed precision", "-1", NULL, "S",
	  "constant fp16 loss scale (default: dynamic)" },
	{ "--initial-loss-scale", FK_FLOAT, F(initial_loss_scale), TR, 0, "mixed precision", "4294967296", NULL,
	  "S", "starting dynamic loss scale" },
	{ "--min-loss-scale", FK_FLOAT, F(min_loss_scale), TR, 0, "mixed precision", "1.0", NULL, "S",
	  "smallest dynamic loss scale" },
	{ "--loss-scale-window", FK_FLOAT, F(loss_scale_window), TR, 0, "mixed precision", "1000", NULL, "N",
	  "iterations without overflow before the scale doubles" },
	{ "--hysteresis", FK_INT, F(hysteresis), TR, 0, "mixed precision", "2", NULL, "N",
	  "overflows tolerated before the scale halves" },
	{ "--accumulate-allreduce-grads-in-fp32", FK_BOOL, F(accumulate_allreduce_grads_in_fp32), TR, 0,
	  "mixed precision", NULL, NULL, NULL, "accepted; megac always accumulates gradients in fp32", true },
	{ "--grad-reduce-in-bf16", FK_BOOL, F(grad_reduce_in_bf16), TR, 0, "mixed precision", NULL, NULL, NULL,
	  "with --bf16, reduce the gradients in bf16: megac rounds each rank's gradient to bf16 before the "
	  "data-parallel reduction and the sum after it, in its fp32 buffer (docs/mixed-precision.md)" },

	/* ---- FP8 (Megatron's transformer configuration; docs/fp8.md) ---- */
	{ "--fp8-format", FK_STR, F(fp8_format), TR, 0, "fp8", NULL, "e4m3|hybrid", "FMT",
	  "train the transformer layers' linear layers in FP8 (needs --bf16): e4m3 everywhere, or hybrid (E4M3 "
	  "forward, E5M2 output gradients)" },
	{ "--fp8-recipe", FK_STR, F(fp8_recipe), TR, 0, "fp8", "delayed", "tensorwise|delayed|mxfp8|blockwise|custom",
	  "R",
	  "how the FP8 scales are found: delayed (from an amax history), tensorwise (each tensor's current amax), "
	  "blockwise (1x128 and 128x128 blocks), mxfp8 (32-value blocks, power-of-two scales)" },
	{ "--fp8-margin", FK_INT, F(fp8_margin), TR, 0, "fp8", "0", NULL, "M",
	  "delayed recipe: scale = (FP8 max / amax) / 2^margin" },
	{ "--fp8-amax-history-len", FK_INT, F(fp8_amax_history_len), TR, 0, "fp8", "1", NULL, "N",
	  "delayed recipe: the amaxes kept per tensor" },
	{ "--fp8-amax-compute-algo", FK_STR, F(fp8_amax_compute_algo), TR, 0, "fp8", "most_recent", "most_recent|max",
	  "A", "delayed recipe: the amax a scale comes from, the newest or the largest of the history" },
	{ "--no-fp8-wgrad", FK_BOOL_NEG, F(fp8_wgrad), TR, 0, "fp8", "true", NULL, NULL,
	  "compute the weight gradients in bf16 rather than FP8" },
	{ "--disable-fp8-wgrad", FK_BOOL_NEG, F(fp8_wgrad), TR, 0, "fp8", "true", NULL, NULL,
	  "same as --no-fp8-wgrad" },
	{ "--tp-only-amax-red", FK_BOOL, F(tp_only_amax_red), TR, 0, "fp8", NULL, NULL, NULL,
	  "delayed recipe: reduce the amaxes over tensor (and context) parallelism only, not data parallelism" },
	{ "--fp8-param-gather", FK_BOOL, F(fp8_param_gather), TR, 0, "fp8", NULL, NULL, NULL,
	  "keep the FP8 layers' weights as FP8 codes (1 byte per parameter), cast from the distributed optimizer's "
	  "fp32 main weights and all-gathered as FP8 (delayed, tensorwise and blockwise recipes)" },
	{ "--first-last-layers-bf16", FK_BOOL, F(first_last_layers_bf16), TR, 0, "fp8", NULL, NULL, NULL,
	  "keep the first and last transformer layers in bf16 (not with the delayed recipe)" },
	{ "--num-layers-at-start-in-bf16", FK_INT, F(num_layers_at_start_in_bf16), TR, 0, "fp8", "1", NULL, "N",
	  "with --first-last-layers-bf16: the layers kept in bf16 at the start" },
	{ "--num-layers-at-end-in-bf16", FK_INT, F(num_layers_at_end_in_bf16), TR, 0, "fp8", "1", NULL, "N",
	  "with --first-last-layers-bf16: the layers kept in bf16 at the end" },

	/* ---- the precision-aware optimizer and optimizer offload (Megatron's experimental group) ---- */
	{ "--use-precision-aware-optimizer", FK_BOOL, F(use_precision_aware_optimizer), TR, 0, "optimizer", NULL,
	  NULL, NULL, "let the optimizer store its states in the dtypes below (needs --use-distributed-optimizer)" },
	{ "--main-grads-dtype", FK_STR, F(main_grads_dtype), TR, 0, "optimizer", "fp32", "fp32|bf16", "T",
	  "the gradients' dtype with --use-precision-aware-optimizer and --bf16: bf16 reduces them as "
	  "--grad-reduce-in-bf16 does" },
	{ "--main-params-dtype", FK_STR, F(main_params_dtype), TR, 0, "optimizer", "fp32", "fp32|fp16", "T",
	  "the main weights' dtype of a --bf16/--fp16 model with --use-precision-aware-optimizer (fp16: "
	  "scaled per tensor)" },
	{ "--exp-avg-dtype", FK_STR, F(exp_avg_dtype), TR, 0, "optimizer", "fp32", "fp32|fp16|bf16|fp8", "T",
	  "how Adam's first moment is stored with --use-precision-aware-optimizer (fp16: scaled per tensor); "
	  "the step computes in fp32" },
	{ "--exp-avg-sq-dtype", FK_STR, F(exp_avg_sq_dtype), TR, 0, "optimizer", "fp32", "fp32|fp16|bf16|fp8", "T",
	  "the same for Adam's second moment" },
	{ "--optimizer-cpu-offload", FK_BOOL, F(optimizer_cpu_offload), TR, 0, "optimizer", NULL, NULL, NULL,
	  "on a GPU, keep the optimizer's states and main weights in host memory and step them there (needs "
	  "--use-precision-aware-optimizer); nothing to do on the CPU backend" },
	{ "--optimizer-offload-fraction", FK_FLOAT, F(optimizer_offload_fraction), TR, 0, "optimizer", "1.0", NULL,
	  "F", "with --optimizer-cpu-offload, the share of each optimizer shard offloaded: whole tensors, in "
	  "order, until it is reached" },

	/* ---- activation recomputation ---- */
	{ "--recompute-granularity", FK_STR, F(recompute_granularity), TR, 0, "recompute", NULL, "full|selective",
	  "G", "recompute whole layers (full) or the modules of --recompute-modules (selective) in backward" },
	{ "--recompute-method", FK_STR, F(recompute_method), TR, 0, "recompute", NULL, "uniform|block", "M",
	  "full recompute: chunks of --recompute-num-layers (uniform) or only the first N layers (block)" },
	{ "--recompute-num-layers", FK_INT, F(recompute_num_layers), TR, 0, "recompute", "-1", NULL, "N",
	  "layers per recompute chunk (uniform) or recomputed layers (block)" },
	{ "--recompute-activations", FK_BOOL, F(recompute_activations), TR, 0, "recompute", NULL, NULL, NULL,
	  "same as --recompute-granularity selective" },
	{ "--recompute-modules", FK_STRS, F(recompute_modules), TR, 0, "recompute", NULL,
	  "core_attn|moe_act|layernorm|mla_up_proj|mlp|moe|shared_experts|gdn_norm_out|gdp_in_proj|gdp_qkv|mhc", "M",
	  "selective recompute: the modules whose activations are dropped in forward and recomputed in backward "
	  "(default core_attn): core_attn (attention probabilities), layernorm (both norms' outputs), mla_up_proj "
	  "(multi-latent attention's q, k, v after its up-projections and RoPE), mlp (a dense "
	  "MLP's fc1 and activation), moe (a MoE layer's every activation), moe_act (the experts' activation, with "
	  "--moe-grouped-gemm), shared_experts (the shared expert's fc1 and activation)" },

	/* ---- optimizer and learning rate ---- */
	{ "--optimizer", FK_STR, F(optimizer), TR, 0, "optimizer", "adam",
	  "adam|sgd|muon|dist_muon|lion|soap|adaptive_muon", "OPT",
	  "Adam with decoupled weight decay (AdamW), as Megatron's 'adam' (Megatron's other optimizers are "
	  "refused)" },
	{ "--lr", FK_FLOAT, F(lr), TR, 0, "optimizer", "-1", NULL, "LR", "peak learning rate" },
	{ "--min-lr", FK_FLOAT, F(min_lr), TR, 0, "optimizer", "0.0", NULL, "LR", "learning-rate floor" },
	{ "--decoupled-lr", FK_FLOAT, F(decoupled_lr), TR, 0, "optimizer", "-1", NULL, "LR",
	  "peak learning rate of the word embeddings and the output layer (the same warmup and decay)" },
	{ "--decoupled-min-lr", FK_FLOAT, F(decoupled_min_lr), TR, 0, "optimizer", "-1", NULL, "LR",
	  "their floor with --decoupled-lr (default --min-lr)" },
	{ "--adam-beta1", FK_FLOAT, F(adam_beta1), TR | PROG_CONVERT, 0, "optimizer", "0.9", NULL, "B", "Adam beta1" },
	{ "--adam-beta2", FK_FLOAT, F(adam_beta2), TR | PROG_CONVERT, 0, "optimizer", "0.999", NULL, "B", "Adam beta2" },
	{ "--adam-eps", FK_FLOAT, F(adam_eps), TR | PROG_CONVERT, 0, "optimizer", "1e-08", NULL, "EPS", "Adam epsilon" },
	{ "--weight-decay", FK_FLOAT, F(weight_decay), TR, 0, "optimizer", "0.01", NULL, "WD",
	  "weight decay (not on biases and 1-D tensors)" },
	{ "--start-weight-decay", FK_FLOAT, F(start_weight_decay), TR, 0, "optimizer", "-1", NULL, "WD",
	  "weight decay at the start of a linear/cosine ramp" },
	{ "--end-weight-decay", FK_FLOAT, F(end_weight_decay), TR, 0, "optimizer", "-1", NULL, "WD",
	  "weight decay at the end of a linear/cosine ramp" },
	{ "--weight-decay-incr-style", FK_STR, F(weight_decay_incr_style), TR, 0, "optimizer", "constant",
	  "constant|linear|cosine", "STYLE", "weight-decay ramp over training" },
	{ "--clip-grad", FK_FLOAT, F(clip_grad), TR, 0, "optimizer", "1.0", NULL, "C",
	  "clip the global gradient L2 norm to C (0 disables)" },
	{ "--lr-decay-style", FK_STR, F(lr_decay_style), TR, 0, "learning rate", "linear",
	  "constant|linear|cosine|inverse-square-root|WSD", "STYLE", "decay after warmup" },
	{ "--lr-decay-iters", FK_INT, F(lr_decay_iters), TR, 0, "learning rate", "-1", NULL, "N",
	  "iterations to decay over (default --train-iters)" },
	{ "--lr-decay-samples", FK_INT, F(lr_decay_samples), TR, 0, "learning rate", "-1", NULL, "N",
	  "samples to decay over (sample-based training)" },
	{ "--lr-warmup-iters", FK_INT, F(lr_warmup_iters), TR, 0, "learning rate", "0", NULL, "N",
	  "linear warmup iterations" },
	{ "--lr-warmup-samples", FK_INT, F(lr_warmup_samples), TR, 0, "learning rate", "0", NULL, "N",
	  "linear warmup samples (sample-based training)" },
	{ "--lr-warmup-fraction", FK_FLOAT, F(lr_warmup_fraction), TR, 0, "learning rate", "-1", NULL, "F",
	  "warmup as a fraction of the decay steps" },
	{ "--lr-warmup-init", FK_FLOAT, F(lr_warmup_init), TR, 0, "learning rate", "0.0", NULL, "LR",
	  "learning rate at the start of warmup" },
	{ "--lr-wsd-decay-style", FK_STR, F(lr_wsd_decay_style), TR, 0, "learning rate", "exponential",
	  "exponential|linear|cosine|minus_sqrt", "STYLE", "WSD annealing shape" },
	{ "--lr-wsd-decay-iters", FK_INT, F(lr_wsd_decay_iters), TR, 0, "learning rate", "-1", NULL, "N",
	  "WSD annealing iterations" },
	{ "--lr-wsd-decay-samples", FK_INT, F(lr_wsd_decay_samples), TR, 0, "learning rate", "-1", NULL, "N",
	  "WSD annealing samples" },
	{ "--override-opt-param-scheduler", FK_BOOL, F(override_opt_param_scheduler), TR, 0, "learning rate",
	  NULL, NULL, NULL, "on resume, take the schedule from the flags, not the checkpoint" },
	{ "--override-opt_param-scheduler", FK_BOOL, F(override_opt_param_scheduler), TR, 0, "learning rate",
	  NULL, NULL, NULL, "Megatron's older spelling of --override-opt-param-scheduler" },
	{ "--use-checkpoint-opt-param-scheduler", FK_BOOL, F(use_checkpoint_opt_param_scheduler), TR, 0,
	  "learning rate", NULL, NULL, NULL, "on resume, take the schedule from the checkpoint" },
	{ "--use-checkpoint-opt_param-scheduler", FK_BOOL, F(use_checkpoint_opt_param_scheduler), TR, 0,
	  "learning rate", NULL, NULL, NULL, "Megatron's older spelling of --use-checkpoint-opt-param-scheduler" },

	/* ---- checkpointing ---- */
	{ "--save", FK_STR, F(save), TR | PROG_CONVERT, PROG_CONVERT, "checkpointing", NULL, NULL, "DIR",
	  "save checkpoints here (ckpt_convert: the new checkpoint or Hugging Face folder)" },
	{ "--save-interval", FK_INT, F(save_interval), TR, 0, "checkpointing", "-1", NULL, "N",
	  "save every N iterations (and at the end)" },
	{ "--persistent-save-interval", FK_INT, F(save_interval), TR, 0, "checkpointing", "-1", NULL, "N",
	  "same as --save-interval" },
	{ "--load", FK_STR, F(load), TR | PROG_CONVERT | PROG_INFER, PROG_CONVERT | PROG_INFER, "checkpointing", NULL, NULL,
	  "DIR",
	  "resume from the latest checkpoint here (ckpt_convert: the checkpoint or Hugging Face folder to convert)" },
	{ "--use-checkpoint-args", FK_BOOL, F(use_checkpoint_args), TR | PROG_INFER | PROG_CONVERT, 0,
	  "checkpointing", NULL, NULL, NULL,
	  "take the model's flags from the --load checkpoint (Megatron's rules: the sizes fill flags not given, "
	  "the rest replaces them), and its tokenizer when none is given; the model flags are then not required "
	  "(ckpt_convert always takes the model from the checkpoint)" },
	{ "--no-use-tokenizer-model-from-checkpoint-args", FK_BOOL_NEG, F(use_tokenizer_model_from_checkpoint_args),
	  TR | PROG_INFER, 0, "checkpointing", "true", NULL, NULL,
	  "with --use-checkpoint-args: do not take the tokenizer from the checkpoint" },
	{ "--disable-use-tokenizer-model-from-checkpoint-args", FK_BOOL_NEG,
	  F(use_tokenizer_model_from_checkpoint_args), TR | PROG_INFER, 0, "checkpointing", "true", NULL, NULL,
	  "same as --no-use-tokenizer-model-from-checkpoint-args" },
	{ "--finetune", FK_BOOL, F(finetune), TR, 0, "checkpointing", NULL, NULL, NULL,
	  "load only the weights; start at iteration 0" },
	{ "--no-load-optim", FK_BOOL, F(no_load_optim), TR, 0, "checkpointing", NULL, NULL, NULL,
	  "do not load optimizer and scheduler state" },
	{ "--no-load-rng", FK_BOOL, F(no_load_rng), TR, 0, "checkpointing", NULL, NULL, NULL, "do not load RNG state" },
	{ "--no-save-optim", FK_BOOL, F(no_save_optim), TR, 0, "checkpointing", NULL, NULL, NULL,
	  "do not save optimizer and scheduler state" },
	{ "--no-save-rng", FK_BOOL, F(no_save_rng), TR, 0, "checkpointing", NULL, NULL, NULL, "do not save RNG state" },
	{ "--ckpt-step", FK_INT, F(ckpt_step), TR, 0, "checkpointing", "-1", NULL, "N",
	  "load iteration N instead of the latest" },
	{ "--exit-on-missing-checkpoint", FK_BOOL, F(exit_on_missing_checkpoint), TR, 0, "checkpointing", NULL,
	  NULL, NULL, "fail when --load has no checkpoint (default: start from scratch with a warning)" },
	{ "--ckpt-format", FK_STR, F(ckpt_format), TR | PROG_CONVERT, 0, "checkpointing", "hdf5",
	  "torch|torch_dist|torch_dcp|fsdp_dtensor|hdf5", "FMT",
	  "train saves megac's HDF5 checkpoint (docs/checkpoint-format.md) when the flag is not given "
	  "(Megatron's default is torch_dist), or with torch_dist or fsdp_dtensor Megatron's format (exported from "
	  "HDF5 at each save); --load reads any of them, and Megatron's legacy torch, found from the files; "
	  "ckpt_convert --to megatron writes torch, torch_dist or fsdp_dtensor (docs/megatron-checkpoints.md); "
	  "torch_dcp is refused until megac has it" },
	{ "--exit-on-failed-save", FK_BOOL, F(exit_on_failed_save), TR, 0, "checkpointing", NULL, NULL, NULL,
	  "(megac) stop when a save fails (default: log the error and train on; the last good checkpoint "
	  "stays the latest)" },
	{ "--async-save", FK_BOOL, F(async_save), TR, 0, "checkpointing", NULL, NULL, NULL,
	  "write checkpoints from a background thread while training goes on (the state is copied to host "
	  "memory first; the tracker moves once every rank's files are complete)" },
	{ "--keep-last-n-checkpoints", FK_INT, F(keep_last_n_checkpoints), TR, 0, "checkpointing", "-1", NULL, "N",
	  "(megac) after each save, delete all but the newest N iterations under --save (never the one "
	  "being written, never the latest)" },

	/* ---- logging ---- */
	{ "--log-interval", FK_INT, F(train_log_interval), TR, 0, "logging", "100", NULL, "N",
	  "print the iteration line every N iterations" },
	{ "--log-throughput", FK_BOOL, F(log_throughput), TR, 0, "logging", NULL, NULL, NULL,
	  "add TFLOP/s per device to the iteration line" },
	{ "--log-params-norm", FK_BOOL, F(log_params_norm), TR, 0, "logging", NULL, NULL, NULL,
	  "add the parameter L2 norm to the iteration line" },
	{ "--log-memory-interval", FK_INT, F(log_memory_interval), TR, 0, "logging", "-1", NULL, "N",
	  "print tensor memory every N iterations (a multiple of --log-interval)" },
	{ "--tensorboard-dir", FK_STR, F(tensorboard_dir), TR, 0, "logging", NULL, NULL, "DIR",
	  "write TensorBoard event files here" },
	{ "--tensorboard-log-interval", FK_INT, F(tensorboard_log_interval), TR, 0, "logging", "1", NULL, "N",
	  "TensorBoard scalars every N iterations" },
	{ "--log-validation-ppl-to-tensorboard", FK_BOOL, F(log_validation_ppl_to_tensorboard), TR, 0, "logging",
	  NULL, NULL, NULL, "also write validation perplexity" },
	{ "--log-timers-to-tensorboard", FK_BOOL, F(log_timers_to_tensorboard), TR, 0, "logging", NULL, NULL, NULL,
	  "also write iteration-time, throughput (with --log-throughput) and each timer of --timing-log-level as "
	  "NAME-time, the max over ranks in seconds per iteration" },
	{ "--log-memory-to-tensorboard", FK_BOOL, F(log_memory_to_tensorboard), TR, 0, "logging", NULL, NULL, NULL,
	  "also write mem-reserved-bytes, mem-allocated-bytes, mem-max-allocated-bytes and mem-allocated-count "
	  "(megac's memory pool: what it holds is what it reserved)" },
	{ "--log-world-size-to-tensorboard", FK_BOOL, F(log_world_size_to_tensorboard), TR, 0, "logging", NULL,
	  NULL, NULL, "also write world-size" },
	{ "--no-log-loss-scale-to-tensorboard", FK_BOOL_NEG, F(log_loss_scale_to_tensorboard), TR, 0, "logging",
	  "true", NULL, NULL, "do not write loss-scale" },
	{ "--disable-log-loss-scale-to-tensorboard", FK_BOOL_NEG, F(log_loss_scale_to_tensorboard), TR, 0,
	  "logging", "true", NULL, NULL, "same as --no-log-loss-scale-to-tensorboard" },
	{ "--wandb-project", FK_STR, F(wandb_project), TR, 0, "logging", NULL, NULL, "NAME",
	  "Weights & Biases project: the run's scalars go as TensorBoard event files to "
	  "WANDB_SAVE_DIR/tensorboard/EXP_NAME and train prints the 'wandb sync --sync-tensorboard' line that "
	  "uploads them (no Python at run time)" },
	{ "--wandb-exp-name", FK_STR, F(wandb_exp_name), TR, 0, "logging", NULL, NULL, "NAME",
	  "the W&B run's name (needed with --wandb-project)" },
	{ "--wandb-save-dir", FK_STR, F(wandb_save_dir), TR, 0, "logging", NULL, NULL, "DIR",
	  "the W&B folder (default: SAVE/wandb)" },
	{ "--wandb-entity", FK_STR, F(wandb_entity), TR, 0, "logging", NULL, NULL, "NAME",
	  "the W&B team or user the sync line names" },
	{ "--logging-level", FK_INT, F(logging_level), TR, 0, "logging", "-1", NULL, "L",
	  "Python's logging levels: above 20 (INFO) megac's progress messages on stderr are not printed, above "
	  "30 (WARNING) nor its warnings; errors and the training log lines on stdout always are" },
	{ "--log-num-zeros-in-grad", FK_BOOL, F(log_num_zeros_in_grad), TR, 0, "logging", NULL, NULL, NULL,
	  "count the zeros of the clipped gradient (every tensor once) and print 'num zeros: N' after the grad "
	  "norm; also num-zeros in TensorBoard" },
	{ "--metrics-file", FK_STR, F(metrics_file), TR, 0, "logging", NULL, NULL, "PATH",
	  "(megac) append one JSON object per logged iteration and evaluation to PATH" },
	{ "--timing-log-level", FK_INT, F(timing_log_level), TR, 0, "logging", "0", "0|1|2", "L",
	  "Megatron's timers with the iteration line: 1 forward-backward, gradient syncs and optimizer; 2 also "
	  "the pipeline's compute, sends and receives" },
	{ "--timing-log-option", FK_STR, F(timing_log_option), TR, 0, "logging", "minmax", "max|minmax|all",
	  "OPT", "how timers are reported across ranks" },
	{ "--log-comm", FK_BOOL, F(log_comm), TR, 0, "logging", NULL, NULL, NULL,
	  "(megac) with each iteration line, the bytes each process group sent per iteration "
	  "(docs/parallel.md has the expected volumes)" },

	/* ---- exit ---- */
	{ "--exit-interval", FK_INT, F(exit_interval), TR, 0, "exit", "-1", NULL, "N",
	  "save (if --save) and exit after an iteration that is a multiple of N" },
	{ "--exit-duration-in-mins", FK_FLOAT, F(exit_duration_in_mins), TR, 0, "exit", "-1", NULL, "M",
	  "save (if --save) and exit once training has run M minutes" },
	{ "--exit-signal-handler", FK_BOOL, F(exit_signal_handler), TR, 0, "exit", NULL, NULL, NULL,
	  "on --exit-signal (SIGTERM) to any rank, every rank saves (if --save) at the end of the current "
	  "iteration and exits 0" },
	{ "--exit-signal", FK_STR, F(exit_signal), TR, 0, "exit", "SIGTERM",
	  "SIGTERM|SIGINT|SIGUSR1|SIGUSR2|SIGHUP|SIGQUIT", "SIG", "the signal --exit-signal-handler acts on" },
	{ "--hang-timeout-minutes", FK_FLOAT, F(hang_timeout_minutes), TR, 0, "exit", "-1", NULL, "M",
	  "(megac) when no training iteration, evaluation or save completes for M minutes, every rank prints "
	  "where it is (its phase and the collective it waits in) and the job ends (exit 128)" },
	{ "--no-check-for-nan-in-loss-and-grad", FK_BOOL_NEG, F(check_for_nan_in_loss_and_grad), TR, 0, "exit",
	  "true", NULL, NULL, "do not stop on a NaN or Inf in a rank's local loss or gradients (checked before "
	  "the data-parallel reduction, naming the rank and iteration; off while the loss is scaled, fp16, "
	  "whose scaler skips such steps)" },
	{ "--check-for-nan-in-loss-and-grad", FK_BOOL, F(check_for_nan_in_loss_and_grad), TR, 0, "exit", "true",
	  NULL, NULL, "the NaN check, on by default (accepted for scripts that spell it out)" },
	{ "--check-for-spiky-loss", FK_BOOL, F(check_for_spiky_loss), TR, 0, "exit", NULL, NULL, NULL,
	  "warn when a micro-batch's loss is 10 times the largest of the first 100 (Megatron's rerun check; "
	  "megac's computation is deterministic, so the rerun's verdict is always \"reproducible\")" },

	/* ---- speed-only Megatron options: accepted, results unchanged ---- */
	{ "--use-flash-attn", FK_BOOL, F(perf_flag), TR, 0, "speed options (accepted)", NULL, NULL, NULL,
	  "accepted; megac picks its own attention kernel", true },
	{ "--no-masked-softmax-fusion", FK_BOOL, F(perf_flag), TR, 0, "speed options (accepted)", NULL, NULL, NULL,
	  "accepted; no effect", true },
	{ "--no-bias-dropout-fusion", FK_BOOL, F(perf_flag), TR, 0, "speed options (accepted)", NULL, NULL, NULL,
	  "accepted; no effect", true },
	{ "--no-gradient-accumulation-fusion", FK_BOOL, F(perf_flag), TR, 0, "speed options (accepted)", NULL,
	  NULL, NULL, "accepted; no effect", true },
	{ "--use-mcore-models", FK_BOOL, F(perf_flag), TR, 0, "speed options (accepted)", NULL, NULL, NULL,
	  "accepted; megac's model is Megatron Core's", true },
	{ "--local-rank", FK_INT, F(local_rank), TR | PROG_INFER, 0, "distributed", "-1", NULL, "N",
	  "this process's rank on its node, which picks its GPU (local rank mod visible GPUs); default: the "
	  "launcher's LOCAL_RANK, OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID or MPI_LOCALRANKID, else 0" },
	{ "--device", FK_STR, F(device), PROG_TRAIN | PROG_INFER, 0, "distributed", "auto", "auto|cpu|cuda", "D",
	  "(megac) where to compute: a GPU when one is usable (auto), the CPU, or a GPU or nothing (cuda)" },
	{ "--overlap-grad-reduce", FK_BOOL, F(overlap_grad_reduce), TR, 0, "distributed", NULL, NULL, NULL,
	  "reduce gradients in buckets while backward runs (non-blocking collectives)" },
	{ "--ddp-bucket-size", FK_INT, F(ddp_bucket_size), TR, 0, "distributed", "-1", NULL, "N",
	  "parameters per gradient bucket with --overlap-grad-reduce (Megatron: max(4e7, 1e6 x DP))" },
	{ "--overlap-param-gather", FK_BOOL, F(overlap_param_gather), TR, 0, "distributed", NULL, NULL, NULL,
	  "with the distributed optimizer: gather the updated parameters in buckets behind the next forward" },


	/* ---- batch and iterations ---- */
	{ "--micro-batch-size", FK_INT, F(micro_batch_size), DATA, TR, "training", "-1", NULL, "N",
	  "samples per forward/backward" },
	{ "--rampup-batch-size", FK_INTS, F(rampup_batch_size), DATA, 0, "training", NULL, NULL,
	  "START INCR SAMPLES", "deprecated in Megatron, whose batch-size calculator ignores it with a warning; "
	  "so does megac (use --step-batch-size-schedule)" },
	{ "--dataloader-type", FK_STR, F(dataloader_type), DATA, 0, "training", "single", "single|cyclic|external",
	  "T", "the order samples are read in: Megatron's 'single' (megac's); its cyclic and external loaders are "
	  "refused" },
	{ "--step-batch-size-schedule", FK_STR, F(step_batch_size_schedule), DATA, 0, "training", NULL, NULL,
	  "\"T:BS ...\"", "a global batch size that steps up with training: BS from T tokens on (suffixes K, M, "
	  "B, T; thresholds divided by --seq-length into samples; the first T is 0); not with "
	  "--global-batch-size. As in Megatron the learning-rate schedule of --train-iters and the evaluation "
	  "count micro-batch x data-parallel size samples per iteration (give --train-samples and "
	  "--lr-decay-samples); with --train-iters the datasets hold the samples the iterations take" },
	{ "--global-batch-size", FK_INT, F(global_batch_size), DATA, 0, "training", "-1", NULL, "N",
	  "samples per iteration (default micro-batch x data-parallel size)" },
	{ "--train-iters", FK_INT, F(train_iters), DATA, 0, "training", "-1", NULL, "N", "training iterations" },
	{ "--train-samples", FK_INT, F(train_samples), DATA, 0, "training", "-1", NULL, "N",
	  "training samples (instead of --train-iters)" },
	{ "--eval-iters", FK_INT, F(eval_iters), DATA, 0, "validation", "100", NULL, "N",
	  "batches per evaluation (0 disables)" },
	{ "--eval-interval", FK_INT, F(eval_interval), DATA, 0, "validation", "-1", NULL, "N",
	  "evaluate every N iterations" },
	{ "--full-validation", FK_BOOL, F(full_validation), DATA, 0, "validation", NULL, NULL, NULL,
	  "one full pass over the validation set each time" },
	{ "--skip-train", FK_BOOL, F(skip_train), DATA, 0, "validation", NULL, NULL, NULL, "only evaluate" },

	/* ---- data and dataloader ---- */
	{ "--data-path", FK_STRS, F(data_path), DATA, 0, "data and dataloader", NULL, NULL, "[W] PREFIX",
	  "dataset prefixes, optionally weighted: 0.3 A 0.7 B" },
	{ "--split", FK_STR, F(split), DATA, 0, "data and dataloader", NULL, NULL, "T,V,T",
	  "train/valid/test proportions of --data-path (default 969, 30, 1)" },
	{ "--train-data-path", FK_STRS, F(train_data_path), DATA, 0, "data and dataloader", NULL, NULL,
	  "[W] PREFIX", "an independent training blend" },
	{ "--valid-data-path", FK_STRS, F(valid_data_path), DATA, 0, "data and dataloader", NULL, NULL,
	  "[W] PREFIX", "an independent validation blend" },
	{ "--test-data-path", FK_STRS, F(test_data_path), DATA, 0, "data and dataloader", NULL, NULL,
	  "[W] PREFIX", "an independent test blend" },
	{ "--data-cache-path", FK_STR, F(data_cache_path), DATA, 0, "data and dataloader", NULL, NULL, "DIR",
	  "where index caches go (default: PREFIX/cache/GPTDataset_indices for each dataset)" },
	{ "--mock-data", FK_BOOL, F(mock_data), DATA, 0, "data and dataloader", NULL, NULL, NULL,
	  "Megatron's synthetic dataset" },
	{ "--seed", FK_INT, F(seed), DATA, 0, "data and dataloader", "1234", NULL, "N", "random seed" },
	{ "--seq-length", FK_INT, F(seq_length), DATA, DATA, "data and dataloader", "-1", NULL, "S",
	  "tokens per sample" },
	{ "--calculate-per-token-loss", FK_BOOL, F(calculate_per_token_loss), TR, 0, "training", NULL, NULL, NULL,
	  "the gradient is the iteration's loss sum over its unmasked tokens divided by their count over the "
	  "whole batch (data- and context-parallel ranks too), not the mean of the micro-batches' means; the "
	  "logged loss is the same" },
	{ "--eod-mask-loss", FK_BOOL, F(eod_mask_loss), DATA, 0, "data and dataloader", NULL, NULL, NULL,
	  "no loss where the input token is EOD" },
	{ "--reset-position-ids", FK_BOOL, F(reset_position_ids), DATA, 0, "data and dataloader", NULL, NULL,
	  NULL, "restart position ids after each EOD" },
	{ "--reset-attention-mask", FK_BOOL, F(reset_attention_mask), DATA, 0, "data and dataloader", NULL, NULL,
	  NULL, "no attention across EOD" },
	{ "--sft", FK_BOOL, F(sft), TR, 0, "sft", NULL, NULL, NULL,
	  "supervised fine-tuning: --data-path names a JSONL file of {\"messages\": [...]} lines, tokenized at "
	  "training time by --tokenizer-type SFTTokenizer and packed one line per sample, the loss on assistant "
	  "tokens only (docs/sft.md)" },
	{ "--sft-tokenizer-prompt-format", FK_STR, F(sft_tokenizer_prompt_format), TR | PROG_INFER, 0, "sft",
	  "nemotron-h-aligned", "nemotron-h-aligned|nemotron-nano-v2|identity|default", "FORMAT",
	  "SFTTokenizer's chat format (--sft's samples; the server's chat prompts): Megatron's fixed templates, or "
	  "default (the tokenizer's own chat template)" },
	{ "--mid-level-dataset-surplus", FK_FLOAT, F(mid_level_dataset_surplus), DATA, 0, "data and dataloader",
	  "0.005", NULL, "F", "extra samples built per blended dataset" },
	{ "--data-args-path", FK_STR, F(data_args_path), DATA, 0, "data and dataloader", NULL, NULL, "PATH",
	  "a file holding the --data-path list (whitespace-separated; for long blends)" },
	{ "--per-split-data-args-path", FK_STR, F(per_split_data_args_path), DATA, 0, "data and dataloader", NULL,
	  NULL, "PATH", "a JSON file {\"train\": [...], \"valid\": [...], \"test\": [...]} of per-split blends" },
	{ "--show-samples", FK_INTS, F(show_samples), PROG_GPTINDEX, 0, "output", NULL, NULL, "I",
	  "(megac) print these samples of each split (negative: from the end) as JSON lines" },

	/* ---- dataset_info (megac) ---- */
	{ "--input", FK_STRS, F(input), PROG_DATAINFO, PROG_DATAINFO, "input data", NULL, NULL, "PREFIX",
	  "dataset path prefix (PREFIX.bin + PREFIX.idx)" },
	{ "--document", FK_INT, F(document), PROG_DATAINFO, 0, "output", "-1", NULL, "N",
	  "print document N (its ids, and its text when tokenizer flags are given)" },
	{ "--max-tokens", FK_INT, F(max_tokens), PROG_DATAINFO, 0, "output", "200", NULL, "N",
	  "print at most N tokens of the document" },

	/* ---- text_gen_server ---- */
	{ "--port", FK_INT, F(port), PROG_INFER, 0, "inference", "5000", NULL, "P",
	  "HTTP port; 0: one the system picks (the start-up line says which)" },
	{ "--host", FK_STR, F(host), PROG_INFER, 0, "inference", "127.0.0.1", NULL, "ADDR",
	  "(megac) the address to listen on: 0.0.0.0 (or ::) for every one; on a loopback address the Host header "
	  "must name a loopback host (421 otherwise)" },
	{ "--api-key", FK_STR, F(api_key), PROG_INFER, 0, "inference", NULL, NULL, "KEY",
	  "(megac) clients must send 'Authorization: Bearer KEY' (401 otherwise; GET / and /health are open)" },
	{ "--inference-max-requests", FK_INT, F(inference_max_requests), PROG_INFER, 0, "inference", "8", NULL, "N",
	  "requests generating at once (the key/value cache's slots); more wait" },
	{ "--inference-max-batch-size", FK_INT, F(inference_max_requests), PROG_INFER, 0, "inference", "8", NULL, "N",
	  "same as --inference-max-requests" },
	{ "--max-batch-size", FK_INT, F(inference_max_requests), PROG_INFER, 0, "inference", "8", NULL, "N",
	  "same as --inference-max-requests (Megatron's deprecated name)" },
	{ "--inference-max-seq-length", FK_INT, F(inference_max_seq_length), PROG_INFER, 0, "inference", "-1", NULL,
	  "N", "prompt plus generated tokens of one request (default: the model's --max-position-embeddings)" },
	{ "--inference-dynamic-batching-max-tokens", FK_INT, F(inference_max_tokens), PROG_INFER, 0, "inference", "-1",
	  NULL, "N",
	  "the most tokens one forward step takes; a prompt longer than a step has room for is prefilled in chunks "
	  "over several steps (default: --inference-max-seq-length plus --inference-max-requests)" },
	{ "--max-body-bytes", FK_INT, F(max_body_bytes), PROG_INFER, 0, "inference", "1048576", NULL, "B",
	  "(megac) the largest request body accepted (413 above)" },
	{ "--max-concurrent-requests", FK_INT, F(max_concurrent_requests), PROG_INFER, 0, "inference", "256", NULL, "N",
	  "(megac) requests answered at once, those waiting for a slot included (429 above); counted once their body "
	  "is in" },
	{ "--request-timeout", FK_FLOAT, F(request_timeout), PROG_INFER, 0, "inference", "30", NULL, "S",
	  "(megac) seconds a client has to send a request's headers and body, from connecting or from the previous "
	  "answer on a kept-alive connection; the connection is closed after" },
	{ "--drain-timeout", FK_FLOAT, F(drain_timeout), PROG_INFER, 0, "inference", "25", NULL, "S",
	  "(megac) after SIGTERM or SIGINT, seconds the requests in flight have to finish before they are cut off "
	  "(a second signal cuts them at once)" },
	{ "--max-connections-per-ip", FK_INT, F(max_connections_per_ip), PROG_INFER, 0, "inference", "128", NULL, "N",
	  "(megac) connections one client address may hold open; more are closed at once (0: no limit)" },
	{ "--temperature", FK_FLOAT, F(temperature), PROG_INFER, 0, "inference", NULL, NULL, "T",
	  "when given: the temperature of requests that set none (0 < T <= 100)" },
	{ "--top_k", FK_INT, F(top_k), PROG_INFER, 0, "inference", NULL, NULL, "K",
	  "when given: top-k of requests that set neither top_k nor top_p (1: greedy)" },
	{ "--top_p", FK_FLOAT, F(top_p), PROG_INFER, 0, "inference", NULL, NULL, "P",
	  "when given: top-p of requests that set neither top_k nor top_p" },
	{ "--num-tokens-to-generate", FK_INT, F(num_tokens_to_generate), PROG_INFER, 0, "inference", NULL, NULL, "N",
	  "when given: tokens_to_generate (PUT /api) and max_tokens (OpenAI) of requests that set none" },
	{ "--return-log-probs", FK_BOOL, F(return_log_probs), PROG_INFER, 0, "inference", NULL, NULL, NULL,
	  "requests that do not say return log-probs" },

	/* ---- ckpt_convert (megac) ---- */
	{ "--to", FK_STR, F(convert_to), PROG_CONVERT, 0, "conversion", "megac", "megac|hf|megatron", "FORMAT",
	  "(megac) hf: write a Hugging Face folder (config.json, safetensors); megatron: Megatron-LM's own "
	  "checkpoint (--ckpt-format torch, the legacy format) for the target TP/PP layout" },
	{ "--from", FK_STR, F(convert_from), PROG_CONVERT, 0, "conversion", "megac", "megac|hf|megatron", "FORMAT",
	  "(megac) hf: --load is a Hugging Face folder (GPT2LMHeadModel, LlamaForCausalLM); megatron: Megatron-LM's "
	  "legacy torch checkpoint (its weights)" },
	{ "--target-tensor-parallel-size", FK_INT, F(target_tensor_parallel_size), PROG_CONVERT, 0, "conversion", "1",
	  NULL, "T", "the layout the checkpoint is for: checked against the model, vocabulary padded for it" },
	{ "--target-pipeline-parallel-size", FK_INT, F(target_pipeline_parallel_size), PROG_CONVERT, 0, "conversion",
	  "1", NULL, "P", "one file per pipeline stage, as train writes them" },
	{ "--target-num-virtual-stages-per-pipeline-rank", FK_INT, F(target_num_virtual_stages), PROG_CONVERT, 0,
	  "conversion", "1", NULL, "V", "interleaved stages: which stage holds which layers" },
	{ "--iteration", FK_INT, F(iteration), PROG_CONVERT, 0, "conversion", "-1", NULL, "N",
	  "(megac) convert iteration N instead of the latest" },
	{ "--no-optim", FK_BOOL, F(no_optim), PROG_CONVERT, 0, "conversion", NULL, NULL, NULL,
	  "(megac) leave the optimizer state out" },
	{ "--dtype", FK_STR, F(dtype), PROG_CONVERT, 0, "conversion", NULL, "fp32|bf16|fp16", "T",
	  "(megac) element type written (default: the source's; fp32 for Hugging Face output)" },
	{ "--max-shard-size", FK_STR, F(max_shard_size), PROG_CONVERT, 0, "conversion", "5GB", NULL, "SIZE",
	  "(megac) --to hf: safetensors shards up to SIZE, with model.safetensors.index.json" },
	{ "--verify", FK_BOOL, F(verify), PROG_CONVERT, 0, "conversion", NULL, NULL, NULL,
	  "(megac) re-read every tensor written and compare it with its source" },
	/* Megatron's tools/checkpoint/convert.py, whose command lines ckpt_convert takes */
	{ "--load-dir", FK_STR, F(load), PROG_CONVERT, 0, "conversion", NULL, NULL, "DIR",
	  "convert.py's name for --load" },
	{ "--save-dir", FK_STR, F(save), PROG_CONVERT, 0, "conversion", NULL, NULL, "DIR",
	  "convert.py's name for --save" },
	{ "--model-type", FK_STR, F(model_type), PROG_CONVERT, 0, "conversion", NULL, "GPT|BERT", "TYPE",
	  "convert.py's model type: GPT (BERT is refused)" },
	{ "--loader", FK_STR, F(loader), PROG_CONVERT, 0, "conversion", NULL,
	  "megatron|mcore|core|legacy|llama_mistral|mixtral_hf|hf", "NAME",
	  "convert.py's reader: megatron, mcore, core or legacy read a checkpoint of train's (megac's "
	  "format; Megatron's own formats are not readable yet), llama_mistral, mixtral_hf or hf a Hugging Face "
	  "folder (as --from hf)" },
	{ "--saver", FK_STR, F(saver), PROG_CONVERT, 0, "conversion", NULL, "megatron|mcore|core|legacy|hf", "NAME",
	  "convert.py's writer: megatron, mcore, core or legacy write a checkpoint train loads (megac's "
	  "format), hf a Hugging Face folder (as --to hf)" },
	{ "--target-expert-parallel-size", FK_INT, F(target_expert_parallel_size), PROG_CONVERT, 0, "conversion",
	  "1", NULL, "E", "--to megatron --ckpt-format torch: one file per expert-parallel rank "
	  "(mp_rank_TT[_PPP]_EEE), each with its E/EP experts; megac's own checkpoints and torch_dist hold "
	  "every expert whatever the expert-parallel size" },
	{ "--moe-grouped-gemm", FK_BOOL, F(moe_grouped_gemm), PROG_CONVERT, 0, "conversion", NULL, NULL, NULL,
	  "--to megatron --ckpt-format torch: the experts under TEGroupedMLP's names "
	  "(mlp.experts.linear_fc1.weight<i>), as Megatron's Transformer Engine spec with --moe-grouped-gemm "
	  "saves them, instead of SequentialMLP's (mlp.experts.local_experts.<i>.linear_fc1.weight)" },
	{ "--true-vocab-size", FK_INT, F(true_vocab_size), PROG_CONVERT, 0, "conversion", "-1", NULL, "N",
	  "convert.py's vocabulary size without padding: checked against the checkpoint's" },
	{ "--max-queue-size", FK_INT, F(perf_flag_int), PROG_CONVERT, 0, "conversion", "50", NULL, "N",
	  "convert.py's queue between its reader and writer processes (megac converts in one)", true },
	{ "--no-checking", FK_BOOL, F(perf_flag), PROG_CONVERT, 0, "conversion", NULL, NULL, NULL,
	  "convert.py's switch for its name and order checks; megac always checks", true },
	{ "--megatron-path", FK_STR, F(megatron_path), PROG_CONVERT, 0, "conversion", NULL, NULL, "DIR",
	  "convert.py's path to Megatron's Python sources; megac needs none", true },
	{ "--loader-transformer-impl", FK_STR, F(megatron_path), PROG_CONVERT, 0, "conversion", NULL,
	  "transformer_engine|local", "IMPL", "convert.py's tensor names of the source; megac's checkpoints "
	  "always use the Transformer Engine names", true },
	{ "--saver-transformer-impl", FK_STR, F(megatron_path), PROG_CONVERT, 0, "conversion", NULL,
	  "transformer_engine|local", "IMPL", "convert.py's tensor names of the output; megac's checkpoints "
	  "always use the Transformer Engine names", true },

	/* ---- report_memory (megac): the world it plans for, its output, and the
	 * MoE / MLA / MTP model flags train refuses (rows for train above) ---- */
	{ "--world-size", FK_INT, F(world_size), MEM, 0, "report_memory", "-1", NULL, "N",
	  "(megac) the number of ranks (GPUs) of the planned job, as mpirun -np / srun -n (default: the "
	  "WORLD_SIZE environment variable, else 1, as Megatron's report_theoretical_memory.py; --advise needs "
	  "it)" },
	{ "--device", FK_STR, F(device), MEM, 0, "report_memory", "cuda", "auto|cpu|cuda", "D",
	  "(megac) the backend whose memory megac's own prediction counts, as train --device picks it: cuda "
	  "(flash attention keeps each row's log-sum-exp instead of the probabilities, plus the CUDA backend's "
	  "workspace; auto plans for cuda too) or cpu; no GPU is opened (docs/report-memory.md)" },
	{ "--json", FK_BOOL, F(json), MEM, 0, "report_memory", NULL, NULL, NULL,
	  "(megac) print the report as one JSON object (docs/report-memory.md)" },
	{ "--advise", FK_BOOL, F(advise), MEM, 0, "report_memory", NULL, NULL, NULL,
	  "(megac) list the layouts (TP, PP, virtual stages, CP, DP, with experts EP, micro-batch, sequence "
	  "parallel, recompute, distributed optimizer) of --world-size ranks whose predicted peak on --device fits "
	  "in --gpu-memory, fastest first by the step-time model of docs/report-memory.md; the layout flags given "
	  "are ignored" },
	{ "--gpu-memory", FK_STR, F(gpu_memory), MEM, 0, "report_memory", NULL, NULL, "SIZE",
	  "(megac) --advise: memory per GPU, such as 80GiB, 141GB, 512MiB or bytes" },
	{ "--gpus-per-node", FK_INT, F(gpus_per_node), MEM, 0, "report_memory", "8", NULL, "N",
	  "(megac) --advise: GPUs per node; groups within a node use --intra-node-bandwidth" },
	{ "--gpu-tflops", FK_FLOAT, F(gpu_tflops), MEM, 0, "report_memory", "400", NULL, "R",
	  "(megac) --advise: sustained dense TFLOP/s per GPU of the step-time model" },
	{ "--intra-node-bandwidth", FK_FLOAT, F(intra_node_bandwidth), MEM, 0, "report_memory", "300", NULL, "GB/s",
	  "(megac) --advise: GB/s one GPU sends to another of its node (NVLink)" },
	{ "--inter-node-bandwidth", FK_FLOAT, F(inter_node_bandwidth), MEM, 0, "report_memory", "40", NULL, "GB/s",
	  "(megac) --advise: GB/s one GPU sends to another node (its network adapter)" },
	{ "--link-latency-us", FK_FLOAT, F(link_latency_us), MEM, 0, "report_memory", "10", NULL, "US",
	  "(megac) --advise: latency of one message (a ring step, a send) in microseconds" },
	{ "--advise-top", FK_INT, F(advise_top), MEM, 0, "report_memory", "10", NULL, "N",
	  "(megac) --advise: print the N fastest layouts that fit (0: all of them)" },
	{ "--num-experts", FK_INT, F(num_experts), TR, 0, "mixture of experts", "-1", NULL, "E",
	  "routed experts per MoE layer (mixture of experts)" },
	{ "--moe-router-topk", FK_INT, F(moe_router_topk), TR, 0, "mixture of experts", "2", NULL, "K",
	  "experts each token is routed to" },
	{ "--moe-ffn-hidden-size", FK_INT, F(moe_ffn_hidden_size), TR, 0, "mixture of experts", "-1", NULL, "F",
	  "MLP inner size of one expert (default --ffn-hidden-size)" },
	{ "--moe-shared-expert-intermediate-size", FK_INT, F(moe_shared_expert_intermediate_size), TR, 0,
	  "mixture of experts", "-1", NULL, "F", "MLP inner size of the shared experts (all of them together)" },
	{ "--moe-layer-freq", FK_STR, F(moe_layer_freq), TR, 0, "mixture of experts", "1", NULL, "Q",
	  "MoE layer pattern: every Q-th layer (0, Q, 2Q...), or a list such as [1,0,1,0] (1 = MoE)" },
	{ "--moe-router-score-function", FK_STR, F(moe_router_score_function), TR, 0, "mixture of experts",
	  "softmax", "softmax|sigmoid|sqrtsoftplus", "F", "router scores: softmax over the top-k (or over all with "
	  "--moe-router-pre-softmax), or sigmoid normalised over the top-k" },
	{ "--moe-router-pre-softmax", FK_BOOL, F(moe_router_pre_softmax), TR, 0, "mixture of experts", NULL, NULL,
	  NULL, "softmax over all experts before the top-k" },
	{ "--moe-router-load-balancing-type", FK_STR, F(moe_router_load_balancing_type), TR, 0,
	  "mixture of experts", "aux_loss", "aux_loss|seq_aux_loss|global_aux_loss|sinkhorn|quantile_balancing|none", "T",
	  "aux_loss (over the micro-batch), seq_aux_loss (per sequence) or none" },
	{ "--moe-aux-loss-coeff", FK_FLOAT, F(moe_aux_loss_coeff), TR, 0, "mixture of experts", "0", NULL, "C",
	  "weight of the load-balancing loss (0: none)" },
	{ "--moe-z-loss-coeff", FK_FLOAT, F(moe_z_loss_coeff), TR, 0, "mixture of experts", "-1", NULL, "C",
	  "weight of the router z-loss (default: none)" },
	{ "--moe-expert-capacity-factor", FK_FLOAT, F(moe_expert_capacity_factor), TR, 0, "mixture of experts",
	  "-1", NULL, "CF", "tokens an expert takes: ceil(tokens x topk / experts x CF); the rest are dropped "
	  "(default: none dropped)" },
	{ "--moe-token-drop-policy", FK_STR, F(moe_token_drop_policy), TR, 0, "mixture of experts", "probs",
	  "probs|position", "P", "which tokens an expert over capacity keeps: the highest weights, or the earliest" },
	{ "--moe-pad-expert-input-to-capacity", FK_BOOL, F(moe_pad_expert_input_to_capacity), TR, 0,
	  "mixture of experts", NULL, NULL, NULL, "Megatron pads each expert's input to the capacity with "
	  "zero-weight tokens; megac runs the same numbers without the padding rows" },
	{ "--moe-token-dispatcher-type", FK_STR, F(moe_token_dispatcher_type), TR, 0, "mixture of experts",
	  "allgather", "allgather|alltoall|flex", "T", "how tokens reach the experts of other expert-parallel ranks (megac "
	  "sends each rank only the rows routed to its experts, all-to-all, for all three: the same numbers)" },
	{ "--moe-grouped-gemm", FK_BOOL, F(perf_flag), TR, 0, "mixture of experts", NULL, NULL, NULL,
	  "accepted: megac runs the experts one GEMM each", true },
	{ "--moe-router-dtype", FK_STR, F(moe_router_dtype), TR, 0, "mixture of experts", NULL, "fp32|fp64", "D",
	  "keep the router's logits in fp32 under --bf16/--fp16 (megac computes them in fp32 and routes in double "
	  "for both values; fp64 logits are not computed in fp64)" },
	{ "--moe-router-topk-scaling-factor", FK_FLOAT, F(moe_router_topk_scaling_factor), TR, 0,
	  "mixture of experts", NULL, NULL, "F", "multiply the top-k weights by F, after any normalisation "
	  "(default: none)" },
	{ "--moe-router-num-groups", FK_INT, F(moe_router_num_groups), TR, 0, "mixture of experts", "-1", NULL, "G",
	  "group-limited routing: the experts form G equal groups (with --moe-router-group-topk)" },
	{ "--moe-router-group-topk", FK_INT, F(moe_router_group_topk), TR, 0, "mixture of experts", "-1", NULL, "G",
	  "group-limited routing: each token's experts come from the G groups whose top topk/G scores sum highest" },
	{ "--moe-router-enable-expert-bias", FK_BOOL, F(moe_router_enable_expert_bias), TR, 0, "mixture of experts",
	  NULL, NULL, NULL, "aux-loss-free load balancing (sigmoid scores): a per-expert bias, added to the scores "
	  "only to choose the experts, moves towards balance once per iteration" },
	{ "--moe-router-bias-update-rate", FK_FLOAT, F(moe_router_bias_update_rate), TR, 0, "mixture of experts",
	  "1e-3", NULL, "R", "the expert bias's step per iteration: +R for experts below the mean count of the "
	  "global batch, -R above it" },
	{ "--moe-router-force-load-balancing", FK_BOOL, F(moe_router_force_load_balancing), TR, 0,
	  "mixture of experts", NULL, NULL, NULL, "benchmarking: route by random N(0,1) logits (the router's "
	  "gradient passes straight through), as Megatron" },
	{ "--moe-enable-deepep", FK_BOOL, F(moe_enable_deepep), TR, 0, "mixture of experts", NULL, NULL, NULL,
	  "Megatron's deprecated DeepEP switch (needs --moe-token-dispatcher-type flex); megac's all-to-all "
	  "exchange, the same numbers" },
	{ "--moe-flex-dispatcher-backend", FK_STR, F(moe_flex_dispatcher_backend), TR, 0, "mixture of experts",
	  "deepep", "deepep|hybridep|ncclep", "B", "the flex dispatcher's kernels in Megatron; megac's all-to-all "
	  "exchange, the same numbers" },
	{ "--moe-shared-expert-gate", FK_BOOL, F(moe_shared_expert_gate), TR, 0, "mixture of experts", NULL, NULL,
	  NULL, "scale the shared expert's output by a sigmoid gate, sigmoid(x . w) per token (Qwen2-MoE)" },
	{ "--moe-input-jitter-eps", FK_UNSUPPORTED, 0, TR, 0, "mixture of experts", NULL, NULL, "E",
	  "router input jitter is not implemented yet" },
	{ "--moe-per-layer-logging", FK_UNSUPPORTED, 0, TR, 0, "mixture of experts", NULL, NULL, NULL,
	  "per-layer MoE logging is not implemented yet" },
	{ "--expert-tensor-parallel-size", FK_INT, F(expert_tensor_parallel_size), TR, 0, "distributed", "-1",
	  NULL, "N", "tensor-parallel size of the experts (default --tensor-model-parallel-size)" },
	{ "--multi-latent-attention", FK_BOOL, F(multi_latent_attention), TR, 0, "model", NULL, NULL, NULL,
	  "multi-latent attention (DeepSeek's MLA)" },
	{ "--q-lora-rank", FK_INT, F(q_lora_rank), TR, 0, "model", "-1", NULL, "R",
	  "MLA query low-rank size (default: no query compression)" },
	{ "--kv-lora-rank", FK_INT, F(kv_lora_rank), TR, 0, "model", "32", NULL, "R", "MLA key/value low-rank size" },
	{ "--qk-head-dim", FK_INT, F(qk_head_dim), TR, 0, "model", "128", NULL, "D",
	  "MLA query/key head size (without the position part)" },
	{ "--qk-pos-emb-head-dim", FK_INT, F(qk_pos_emb_head_dim), TR, 0, "model", "64", NULL, "D",
	  "MLA query/key position-embedding head size" },
	{ "--v-head-dim", FK_INT, F(v_head_dim), TR, 0, "model", "128", NULL, "D", "MLA value head size" },
	{ "--rope-type", FK_STR, F(rope_type), TR, 0, "model", NULL, "rope|yarn", "TYPE",
	  "the RoPE of multi-latent attention: rope, or yarn (Megatron's default there; --rotary-scaling-factor, "
	  "--mscale and --mscale-all-dim, with original max positions 4096 and betas 32 and 1)" },
	{ "--mtp-num-layers", FK_INT, F(mtp_num_layers), TR, 0, "model", "-1", NULL, "D",
	  "multi-token prediction: D depths on the last pipeline stage, each predicting one more token ahead "
	  "(docs/mtp.md)" },
	{ "--mtp-loss-scaling-factor", FK_FLOAT, F(mtp_loss_scaling_factor), TR, 0, "model", "0.1", NULL, "F",
	  "weight of the multi-token-prediction losses (their mean over the depths) in the loss" },
	{ "--hybrid-layer-pattern", FK_STR, F(hybrid_layer_pattern), TR, 0, "model", NULL, NULL, "PATTERN",
	  "a hybrid Mamba model, one character a layer: M a Mamba-2 layer, * an attention layer, - an MLP layer "
	  "(docs/mamba.md); it sets the number of layers. megac refuses E, G, D, + and the | and / separators "
	  "for now" },
	{ "--hybrid-override-pattern", FK_STR, F(hybrid_override_pattern), TR, 0, "model", NULL, NULL, "PATTERN",
	  "deprecated spelling of --hybrid-layer-pattern" },
	{ "--spec", FK_STRS, F(spec), TR, 0, "model", NULL, NULL, "MODULE",
	  "Megatron's model spec: megac takes only the hybrid stack's (megatron.core.models.hybrid.hybrid_layer_specs "
	  "hybrid_stack_spec, or the older megatron.core.models.mamba.mamba_layer_specs mamba_stack_spec), with "
	  "--hybrid-layer-pattern, and builds that model from the pattern anyway" },
	{ "--is-hybrid-model", FK_BOOL, F(is_hybrid_model), TR, 0, "model", NULL, NULL, NULL,
	  "the output-layer init of a hybrid model (init std / sqrt(L) instead of / sqrt(2L)); implied by "
	  "--hybrid-layer-pattern" },
	{ "--mamba-state-dim", FK_INT, F(mamba_state_dim), TR, 0, "model", "128", NULL, "N",
	  "Mamba-2 mixer: state size N" },
	{ "--mamba-head-dim", FK_INT, F(mamba_head_dim), TR, 0, "model", "64", NULL, "P",
	  "Mamba-2 mixer: channels per head" },
	{ "--mamba-num-groups", FK_INT, F(mamba_num_groups), TR, 0, "model", "8", NULL, "G",
	  "Mamba-2 mixer: groups of B and C (and of the output norm); must divide the heads" },
	{ "--mamba-num-heads", FK_INT, F(mamba_num_heads), TR, 0, "model", "-1", NULL, "H",
	  "Mamba-2 mixer: heads (default 2 x hidden size / --mamba-head-dim); d_inner = H x --mamba-head-dim" },
};

const size_t args_table_len = sizeof(args_table) / sizeof(args_table[0]);

const char *const args_checkpoint_sizes[] = { "--num-layers", "--hidden-size", "--num-attention-heads",
					      "--max-position-embeddings", "--seq-length", NULL };

/* Values of Megatron's that megac's rows accept as choices but do not
 * implement: refused by name with the reason, like the flags of
 * args_megatron.c. */
const struct refused_value args_refused_values[] = {
	{ "--ckpt-format", "hdf5|torch|torch_dist|fsdp_dtensor",
	  "megac writes its own HDF5 checkpoint (docs/checkpoint-format.md) or Megatron's torch_dist or "
	  "fsdp_dtensor, and ckpt_convert --to megatron also Megatron's legacy torch; torch_dcp is not in megac "
	  "yet" },
	{ "--tokenizer-type",
	  "GPT2BPETokenizer|HuggingFaceTokenizer|TikTokenizer|NullTokenizer|SentencePieceTokenizer|"
	  "GPTSentencePieceTokenizer|Llama2Tokenizer|SFTTokenizer",
	  "megac's tokenizers are GPT2BPETokenizer, HuggingFaceTokenizer, SFTTokenizer, TikTokenizer, NullTokenizer "
	  "and the SentencePiece types (SentencePieceTokenizer, GPTSentencePieceTokenizer, Llama2Tokenizer); BERT "
	  "and multimodal tokenizers are not in megac yet (the model's Hugging Face tokenizer.json works with "
	  "HuggingFaceTokenizer)" },
	{ "--position-embedding-type", "learned_absolute|rope|yarn|none",
	  "megac has learned absolute positions, RoPE and YaRN (and none in hybrid Mamba models); mRoPE and "
	  "relative position embeddings are not in megac yet" },
	{ "--optimizer", "adam", "megac's optimizer is Adam (AdamW) only" },
	{ "--fp8-recipe", "tensorwise|delayed|mxfp8|blockwise",
	  "custom quantizer factories run Python; megac has the four built-in recipes" },
	{ "--exp-avg-dtype", "fp32|fp16|bf16", "FP8 optimizer states are not in megac; use bf16 or fp16" },
	{ "--exp-avg-sq-dtype", "fp32|fp16|bf16", "FP8 optimizer states are not in megac; use bf16 or fp16" },
	{ "--dataloader-type", "single",
	  "megac reads samples in the order of Megatron's 'single' loader; the cyclic (a random sampler per epoch) "
	  "and external loaders are not in megac" },
	{ "--moe-router-load-balancing-type", "aux_loss|seq_aux_loss|none",
	  "global_aux_loss, sinkhorn and quantile balancing are not in megac yet" },
	{ "--moe-router-score-function", "softmax|sigmoid", "the sqrtsoftplus router score is not in megac yet" },
	{ "--recompute-modules", "core_attn|moe_act|layernorm|mla_up_proj|mlp|moe|shared_experts",
	  "megac has no GatedDeltaNet or GatedDeltaProduct layers (gdn_norm_out, gdp_in_proj, gdp_qkv) nor "
	  "hyper-connections (mhc) to recompute" },
};

const size_t args_refused_values_len = sizeof(args_refused_values) / sizeof(args_refused_values[0]);
