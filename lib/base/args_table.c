/*
 * args_table.c - the one flag table (see args.h). Rows are grouped as in
 * Megatron's argument groups; names, defaults and meanings are Megatron's.
 * megac extensions are marked "(megac)" in their help.
 */
#include "args.h"

#include <stddef.h>

#define F(field) offsetof(struct args, field)
#define TOKPROGS (PROG_PREPROCESS | PROG_TRAIN | PROG_CONVERT | PROG_INFER | PROG_DATAINFO | PROG_GPTINDEX)
#define TR PROG_TRAIN
#define DATA (PROG_TRAIN | PROG_GPTINDEX)
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
	  "tokenizer; megac implements GPT2BPETokenizer, HuggingFaceTokenizer and NullTokenizer" },
	{ "--vocab-file", FK_STR, F(vocab_file), TOKPROGS, 0, "tokenizer", NULL, NULL, "PATH",
	  "GPT-2 vocab.json (GPT2BPETokenizer)" },
	{ "--merge-file", FK_STR, F(merge_file), TOKPROGS, 0, "tokenizer", NULL, NULL, "PATH",
	  "GPT-2 merges.txt (GPT2BPETokenizer)" },
	{ "--tokenizer-model", FK_STR, F(tokenizer_model), TOKPROGS, 0, "tokenizer", NULL, NULL, "PATH",
	  "HuggingFaceTokenizer: a tokenizer.json, or a folder holding one (and tokenizer_config.json)" },
	{ "--vocab-size", FK_INT, F(vocab_size), TOKPROGS, 0, "tokenizer", "-1", NULL, "N",
	  "vocabulary size for NullTokenizer (required there)" },
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
	  NULL, "TOKEN", "extra special tokens added to a HuggingFaceTokenizer (recognised in text)" },
	{ "--tokenizer-metadata", FK_UNSUPPORTED, 0, TOKPROGS, 0, "tokenizer", NULL, NULL, "PATH",
	  "tokenizer library overrides by metadata file are not supported; use --tokenizer-type" },
	{ "--tiktoken-pattern", FK_STR, F(tiktoken_pattern), TOKPROGS, 0, "tokenizer", NULL, "v1|v2", "V",
	  "TikTokenizer pattern (TikTokenizer is not implemented yet)" },
	{ "--tiktoken-num-special-tokens", FK_INT, F(tiktoken_num_special_tokens), TOKPROGS, 0, "tokenizer",
	  "1000", NULL, "N", "TikTokenizer special token count (TikTokenizer is not implemented yet)" },
	{ "--tokenizer-sentencepiece-legacy", FK_UNSUPPORTED, 0, TOKPROGS, 0, "tokenizer", NULL, NULL, NULL,
	  "SentencePiece tokenizers are not implemented yet" },
	{ "--no-tokenizer-sentencepiece-ignore-extra-whitespaces", FK_UNSUPPORTED, 0, TOKPROGS, 0, "tokenizer",
	  NULL, NULL, NULL, "SentencePiece tokenizers are not implemented yet" },
	{ "--tokenizer-hf-no-use-fast", FK_BOOL, F(tokenizer_hf_no_use_fast), TOKPROGS, 0, "tokenizer", NULL,
	  NULL, NULL, "accepted for compatibility: slow and fast HF tokenizers give the same ids" },
	{ "--tokenizer-hf-no-include-special-tokens", FK_BOOL, F(tokenizer_hf_no_include_special_tokens),
	  TOKPROGS, 0, "tokenizer", NULL, NULL, NULL,
	  "HuggingFaceTokenizer: do not add the post-processor's tokens (BOS...) when encoding" },
	{ "--trust-remote-code", FK_BOOL, F(trust_remote_code), TOKPROGS, 0, "tokenizer", NULL, NULL, NULL,
	  "accepted for compatibility: megac never runs code from a tokenizer folder" },
	{ "--null-tokenizer-eod-id", FK_INT, F(null_tokenizer_eod_id), TOKPROGS, 0, "tokenizer", "-1", NULL,
	  "ID", "NullTokenizer end-of-document id (default vocab_size - 1)" },
	{ "--null-tokenizer-pad-id", FK_INT, F(null_tokenizer_pad_id), TOKPROGS, 0, "tokenizer", "-1", NULL,
	  "ID", "NullTokenizer pad id (-1 = none)" },
	{ "--chat-template", FK_UNSUPPORTED, 0, TOKPROGS, 0, "tokenizer", NULL, NULL, "STR",
	  "chat templates are not implemented yet" },
	{ "--use-gigatoken", FK_BOOL, F(use_gigatoken), TOKPROGS, 0, "tokenizer", NULL, NULL, NULL,
	  "accepted for compatibility: megac's tokenizers are native C, same ids" },

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
	  "only affects --split-sentences (accepted for compatibility)" },
	{ "--lang", FK_STR, F(lang), PP, 0, "input data", "english", NULL, "LANG",
	  "only affects --split-sentences (accepted for compatibility)" },
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

	/* ---- merge_datasets ---- */
	{ "--input", FK_STRS, F(input), MG, MG, "input data", NULL, NULL, "DIR",
	  "directory holding the .bin/.idx pairs to merge (merged in sorted name order)" },
	{ "--multimodal", FK_BOOL, F(multimodal), MG | PROG_DATAINFO, 0, "input data", NULL, NULL, NULL,
	  "datasets carry the per-sequence modes array" },

	/* ---- model (train) ---- */
	{ "--num-layers", FK_INT, F(num_layers), TR, TR, "model", "-1", NULL, "L", "transformer layers" },
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
	{ "--position-embedding-type", FK_STR, F(position_embedding_type), TR, 0, "model", "learned_absolute",
	  "learned_absolute|rope", "TYPE", "position embedding" },
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

	/* ---- batch and iterations ---- */
	{ "--micro-batch-size", FK_INT, F(micro_batch_size), DATA, TR, "training", "-1", NULL, "N",
	  "samples per forward/backward" },
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
	{ "--eod-mask-loss", FK_BOOL, F(eod_mask_loss), DATA, 0, "data and dataloader", NULL, NULL, NULL,
	  "no loss where the input token is EOD" },
	{ "--reset-position-ids", FK_BOOL, F(reset_position_ids), DATA, 0, "data and dataloader", NULL, NULL,
	  NULL, "restart position ids after each EOD" },
	{ "--reset-attention-mask", FK_BOOL, F(reset_attention_mask), DATA, 0, "data and dataloader", NULL, NULL,
	  NULL, "no attention across EOD" },
	{ "--mid-level-dataset-surplus", FK_FLOAT, F(mid_level_dataset_surplus), DATA, 0, "data and dataloader",
	  "0.005", NULL, "F", "extra samples built per blended dataset" },
	{ "--data-args-path", FK_UNSUPPORTED, 0, DATA, 0, "data and dataloader", NULL, NULL, "PATH",
	  "reading --data-path from a file is not implemented yet; pass the list on the command line" },
	{ "--per-split-data-args-path", FK_UNSUPPORTED, 0, DATA, 0, "data and dataloader", NULL, NULL, "PATH",
	  "reading per-split data paths from a file is not implemented yet" },
	{ "--show-samples", FK_INTS, F(show_samples), PROG_GPTINDEX, 0, "output", NULL, NULL, "I",
	  "(megac) print these samples of each split (negative: from the end) as JSON lines" },

	/* ---- dataset_info (megac) ---- */
	{ "--input", FK_STRS, F(input), PROG_DATAINFO, PROG_DATAINFO, "input data", NULL, NULL, "PREFIX",
	  "dataset path prefix (PREFIX.bin + PREFIX.idx)" },
	{ "--document", FK_INT, F(document), PROG_DATAINFO, 0, "output", "-1", NULL, "N",
	  "print document N (its ids, and its text when tokenizer flags are given)" },
	{ "--max-tokens", FK_INT, F(max_tokens), PROG_DATAINFO, 0, "output", "200", NULL, "N",
	  "print at most N tokens of the document" },
};

const size_t args_table_len = sizeof(args_table) / sizeof(args_table[0]);
