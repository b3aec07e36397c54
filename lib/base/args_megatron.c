/*
 * args_megatron.c - every flag of Megatron-LM's training parser that megac's
 * own table (args_table.c) does not implement, each with what megac does
 * with it.
 *
 * Megatron's scripts pass hundreds of flags; a Megatron user must be able to
 * run them unchanged and learn, in one message, what megac will not do. So
 * no Megatron flag is unknown to train and report_memory. A flag here is
 * either
 *   MF_NO_EFFECT  accepted and ignored: it only selects one of Megatron's
 *                 kernels, a Python or PyTorch mechanism, a speed path or a
 *                 logging detail, so the numbers megac computes are the ones
 *                 Megatron would (train lists the ones given in one start-up
 *                 line); or a setting of a feature refused below, harmless
 *                 without it;
 *   MF_REFUSED    it changes the model, the data or the optimizer and megac
 *                 does not have it: refused by name, with why and what to
 *                 use instead. All refusals of a command line come in one
 *                 message, grouped by reason.
 * The arity says how many values follow the flag, so that the parser can
 * step over them: 0, 1, N, MF_LIST (one or more) or MF_LIST0 (zero or more).
 *
 * The list is complete against tests/fixtures/megatron_flags.tsv (Megatron's
 * argument parser at the commit of docs/flags.md), which a unit test checks;
 * docs/flags.md is generated from the two tables. Implementing a flag means
 * moving its row to args_table.c.
 */
#include "args.h"

/* reasons, shared by the rows of one feature (an error names them once) */
static const char why_layout_own[] =
	"megac's checkpoints load into any layout: the parallel sizes come from the flags";
static const char why_tensor_parallel[] =
	"this tensor-parallel sharding scheme is not in megac";
static const char why_nccl_communicator[] =
	"NCCL communicator and stream tuning (speed only)";
static const char why_context_parallelism[] =
	"megac's context parallelism is the ring (p2p) form only";
static const char why_skips_random[] =
	"skips random init before a load; megac's load replaces every weight anyway";
static const char why_pytorch_materialises[] =
	"where or how PyTorch materialises tensors; megac's initialisation does not depend on it";
static const char why_computation_deterministic[] =
	"megac's computation is deterministic already";
static const char why_transformer_engine[] =
	"Transformer Engine's overlap of tensor-parallel communication with GEMMs (speed only)";
static const char why_selects_fused[] =
	"selects Megatron's fused cross-entropy kernel; megac's is always fused";
static const char why_communication_computation[] =
	"communication/computation overlap and bucketing (speed only)";
static const char why_multi_token[] =
	"this multi-token prediction variant is not in megac yet (docs/mtp.md)";
static const char why_activation_offload[] =
	"activation offload to the host is not in megac yet; use --recompute-granularity";
static const char why_uneven_pipeline[] =
	"megac splits stages unevenly by --decoder-first-pipeline-num-layers and "
	"--decoder-last-pipeline-num-layers only so far";
static const char why_selects_attention[] =
	"selects Megatron's attention kernel; megac picks its own (same math)";
static const char why_model_variant[] =
	"this model variant is not in megac yet";
static const char why_attention_variant[] =
	"this attention variant (linear / DeepSeek sparse attention) is not in megac";
static const char why_mup_parametrisation[] =
	"muP parametrisation is not in megac";
static const char why_bf16_gemms[] =
	"megac's bf16 GEMMs accumulate in fp32 already";
static const char why_selects_fused2[] =
	"selects a fused kernel in Megatron (same math)";
static const char why_recompute_option[] =
	"this recompute option is not in megac yet (megac has --recompute-granularity full|selective)";
static const char why_fp8_training[] =
	"this FP8 option is not in megac yet (megac trains the linear layers in FP8 with --fp8-format, docs/fp8.md)";
static const char why_fp8_interval[] =
	"deprecated in Transformer Engine, which ignores it: the delayed recipe updates its scales every step";
static const char why_nvidia_kitchen[] =
	"NVIDIA Kitchen quantized kernels are not in megac";
static const char why_fp4_training[] =
	"FP4 training is not in megac; FP8 is (--fp8-format, docs/fp8.md)";
static const char why_grouped_gemm[] =
	"grouped GEMM kernels for the experts (speed only)";
static const char why_moe_option[] =
	"this MoE option is not in megac yet";
static const char why_deepep_hybridep[] =
	"DeepEP/HybridEP all-to-all kernels; megac's dispatcher sends the same rows";
static const char why_cuda_graphs[] =
	"CUDA graphs (speed only)";
static const char why_hyper_connections[] =
	"hyper-connections are not in megac";
static const char why_pytorch_autograd[] =
	"a PyTorch autograd memory detail";
static const char why_dumps_module[] =
	"dumps module configs for debugging";
static const char why_inference_engine[] =
	"Megatron's inference engine settings; megac serves with text_gen_server and its own flags";
static const char why_rope_variant[] =
	"this RoPE variant is not in megac yet (megac has plain rotate-half RoPE)";
static const char why_mamba_hybrid[] =
	"this Mamba option is not in megac yet (docs/mamba.md)";
static const char why_multi_latent[] =
	"caching multi-latent attention's latents is an inference-engine option; megac's server does not "
	"serve multi-latent attention yet";
static const char why_encoder_bert[] =
	"encoder (BERT/T5) models are not in megac; megac trains decoder-only models";
static const char why_removed_from[] =
	"removed from Megatron; use --position-embedding-type rope";
static const char why_weight_decay[] =
	"this weight-decay rule is not in megac yet";
static const char why_optimizer_adam[] =
	"megac's optimizer is Adam (AdamW) only";
static const char why_pytorch_nsys[] =
	"PyTorch/nsys profiling hooks; profile megac with nsys or perf directly";
static const char why_batch_size[] =
	"decreasing the global batch to fit the data-parallel size is not in megac; give a --global-batch-size divisible by micro-batch x data-parallel size";
static const char why_pytorch_caching[] =
	"PyTorch caching-allocator control; megac frees nothing it will need again";
static const char why_health_check[] =
	"a health check megac does not have; megac stops on NaN or Inf and on hangs (--hang-timeout-minutes)";
static const char why_has_exit[] =
	"megac has one --exit-signal-handler for the whole run";
static const char why_python_garbage[] =
	"Python garbage-collector control; megac has no garbage collector";
static const char why_skipping_iterations[] =
	"skipping iterations is not in megac";
static const char why_removed_from2[] =
	"removed from Megatron; use --micro-batch-size";
static const char why_rerun_state[] =
	"Megatron's rerun state machine; megac's computation is deterministic (see --check-for-spiky-loss)";
static const char why_removed_from3[] =
	"removed from Megatron; use --recompute-granularity full --recompute-method uniform";
static const char why_optimizer_offload[] =
	"how Megatron's --optimizer-cpu-offload runs its host step (torch's Adam or its own, copies overlapped or "
	"not); megac's host step is its CPU backend's AdamW, torch's arithmetic";
static const char why_debugging_dump[] =
	"a debugging dump of the optimizer's parameter groups";
static const char why_pinned_host[] =
	"pinned host memory for Megatron-FSDP offload";
static const char why_pytorch_data[] =
	"PyTorch data-loader mechanics; megac reads the same samples in the same order";
static const char why_reinforcement_learning[] =
	"reinforcement learning (GRPO) is not in megac";
static const char why_different_initial[] =
	"different initial weights per data-parallel rank are not in megac";
static const char why_removed_from4[] =
	"removed from Megatron; use --lr-warmup-fraction or --lr-warmup-iters";
static const char why_freezing_layers[] =
	"freezing layers is not in megac yet";
static const char why_tensor_dumps[] =
	"tensor dumps for debugging are not in megac";
static const char why_loading_option[] =
	"this loading option is not in megac yet";
static const char why_non_persistent[] =
	"non-persistent (local) checkpoints are not in megac; use --save-interval (megac's saves are atomic)";
static const char why_checkpoint_formats[] =
	"Megatron's checkpoint formats are not in megac yet; megac reads and writes its HDF5 checkpoint (docs/checkpoint-format.md)";
static const char why_format_detected[] =
	"train --load always finds the checkpoint's format from its files (megac's HDF5, Megatron's torch, torch_dist "
	"and fsdp_dtensor) and saves in --ckpt-format";
static const char why_torch_dist[] =
	"how torch_dist checkpoints are written or read in parallel; megac writes its own HDF5 checkpoint";
static const char why_fsdp_use[] =
	"this Megatron-FSDP setting is not in megac; megac has --use-megatron-fsdp with --data-parallel-sharding-strategy";
static const char why_copy_tokenizer[] =
	"megac always records the tokenizer (its type and small files) in model.h5, so that a moved checkpoint still knows it";
static const char why_old_spelling[] =
	"old spelling of the distributed checkpoint format; megac writes its own HDF5 checkpoint";
static const char why_computes_cross[] =
	"megac computes the cross-entropy in fp32";
static const char why_communicates_over[] =
	"megac communicates over MPI, and NCCL on GPUs";
static const char why_pytorch_fsdp2[] =
	"PyTorch FSDP2 is not in megac; use --use-distributed-optimizer (ZeRO-1)";
static const char why_keeps_timeout[] =
	"megac keeps one timeout, --distributed-timeout-minutes";
static const char why_pytorch_nccl[] =
	"PyTorch's NCCL flight recorder; megac's --hang-timeout-minutes reports where each rank waits";
static const char why_removed_from5[] =
	"removed from Megatron; use --tensor-model-parallel-size";
static const char why_gradient_reduction[] =
	"this gradient-reduction variant changes rounding and is not in megac yet";
static const char why_fsdp_buffer[] =
	"a Megatron-FSDP buffer setting (see --use-megatron-fsdp)";
static const char why_validation_option[] =
	"this validation option is not in megac yet";
static const char why_data_option[] =
	"this data option is not in megac yet";
static const char why_fill_middle[] =
	"fill-in-the-middle data is not in megac";
static const char why_adlr_auto[] =
	"ADLR auto-resume is not in megac; use --exit-signal-handler with a requeuing job script (docs/fault-tolerance.md)";
static const char why_retriever_biencoder[] =
	"retriever (biencoder/ICT) training is not in megac";
static const char why_vision_models[] =
	"vision models are not in megac";
static const char why_heterogeneous_layer[] =
	"heterogeneous layer configurations are not in megac";
static const char why_logging_detail[] =
	"a logging detail megac does not have";
static const char why_routing_trace[] =
	"routing trace dumps for analysis";
static const char why_opentelemetry_tracing[] =
	"OpenTelemetry tracing";
static const char why_logit_distillation[] =
	"logit distillation is not in megac";
static const char why_straggler_detector[] =
	"Megatron's straggler detector; megac's --log-throughput and --timing-log-level show slow ranks";
static const char why_nvidia_workload[] =
	"NVIDIA's workload inspector";
static const char why_switch_experimental[] =
	"Megatron's switch for its experimental code paths; megac has none";
static const char why_model_specs[] =
	"model specs and YAML configs are not in megac; give the model as flags";
static const char why_nvidia_logger[] =
	"NVIDIA's one-logger telemetry";
static const char why_process_restart[] =
	"in-process restart is not in megac; use --exit-signal-handler with a requeuing job script (docs/fault-tolerance.md)";
static const char why_nvidia_fault[] =
	"NVIDIA's fault-tolerance package is not in megac; use --hang-timeout-minutes and --exit-signal-handler (docs/fault-tolerance.md)";
static const char why_nvidia_multi[] =
	"NVIDIA's multi-storage client; megac reads local files";
static const char why_fault_injector[] =
	"Megatron's fault injector (testing only)";

const struct megatron_flag megatron_flags[] = {
	/* ---- transformer configuration ---- */
	{ "--tensor-parallel-num-weight-shards", MF_REFUSED, 1, why_tensor_parallel },
	{ "--pipeline-model-parallel-comm-backend", MF_NO_EFFECT, 1, why_nccl_communicator },
	{ "--hierarchical-context-parallel-sizes", MF_REFUSED, MF_LIST, why_context_parallelism },
	{ "--max-seqlen-per-dp-cp-rank", MF_REFUSED, 1, why_context_parallelism },
	{ "--hybrid-context-parallel", MF_REFUSED, 0, why_context_parallelism },
	{ "--expert-tensor-parallel-num-weight-shards", MF_REFUSED, 1, why_tensor_parallel },
	{ "--no-initialization", MF_NO_EFFECT, 0, why_skips_random },
	{ "--use-cpu-initialization", MF_NO_EFFECT, 0, why_pytorch_materialises },
	{ "--deterministic-mode", MF_NO_EFFECT, 0, why_computation_deterministic },
	{ "--tp-comm-overlap", MF_NO_EFFECT, 0, why_transformer_engine },
	{ "--no-tp-comm-bulk-wgrad", MF_NO_EFFECT, 0, why_transformer_engine },
	{ "--disable-tp-comm-bulk-wgrad", MF_NO_EFFECT, 0, why_transformer_engine },
	{ "--no-tp-comm-bulk-dgrad", MF_NO_EFFECT, 0, why_transformer_engine },
	{ "--disable-tp-comm-bulk-dgrad", MF_NO_EFFECT, 0, why_transformer_engine },
	{ "--no-tp-comm-overlap-ag", MF_NO_EFFECT, 0, why_transformer_engine },
	{ "--disable-tp-comm-overlap-ag", MF_NO_EFFECT, 0, why_transformer_engine },
	{ "--no-tp-comm-overlap-rs", MF_NO_EFFECT, 0, why_transformer_engine },
	{ "--disable-tp-comm-overlap-rs", MF_NO_EFFECT, 0, why_transformer_engine },
	{ "--tp-comm-overlap-rs-dgrad", MF_NO_EFFECT, 0, why_transformer_engine },
	{ "--no-tp-comm-split-ag", MF_NO_EFFECT, 0, why_transformer_engine },
	{ "--disable-tp-comm-split-ag", MF_NO_EFFECT, 0, why_transformer_engine },
	{ "--no-tp-comm-split-rs", MF_NO_EFFECT, 0, why_transformer_engine },
	{ "--disable-tp-comm-split-rs", MF_NO_EFFECT, 0, why_transformer_engine },
	{ "--cross-entropy-loss-fusion", MF_NO_EFFECT, 0, why_selects_fused },
	{ "--cross-entropy-fusion-impl", MF_NO_EFFECT, 1, why_selects_fused },
	{ "--tp-comm-bootstrap-backend", MF_NO_EFFECT, 1, why_transformer_engine },
	{ "--overlap-moe-expert-parallel-comm", MF_NO_EFFECT, 0, why_communication_computation },
	{ "--delay-wgrad-compute", MF_NO_EFFECT, 0, why_communication_computation },
	{ "--overlap-dispatch-backward-with-experts-wgrad", MF_NO_EFFECT, 0, why_communication_computation },
	{ "--ep-overlap-early-attn-memory-release", MF_NO_EFFECT, 0, why_communication_computation },
	{ "--use-ring-exchange-p2p", MF_NO_EFFECT, 0, why_nccl_communicator },
	{ "--defer-embedding-wgrad-compute", MF_NO_EFFECT, 0, why_communication_computation },
	{ "--wgrad-deferral-limit", MF_NO_EFFECT, 1, why_communication_computation },
	{ "--overlap-p2p-communication-warmup-flush", MF_NO_EFFECT, 0, why_communication_computation },
	{ "--mtp-standalone", MF_REFUSED, 0, why_multi_token },
	{ "--cpu-offloading-num-layers", MF_REFUSED, 1, why_activation_offload },
	{ "--cpu-offloading-retain-pinned-cpu-buffers", MF_REFUSED, 0, why_activation_offload },
	{ "--mtp-use-repeated-layer", MF_REFUSED, 0, why_multi_token },
	{ "--mtp-detach-heads", MF_REFUSED, 0, why_multi_token },
	{ "--mtp-hsm", MF_REFUSED, 0, why_multi_token },
	{ "--mtp-hybrid-override-pattern", MF_REFUSED, 1, why_multi_token },
	{ "--account-for-embedding-in-pipeline-split", MF_REFUSED, 0, why_uneven_pipeline },
	{ "--account-for-loss-in-pipeline-split", MF_REFUSED, 0, why_uneven_pipeline },
	{ "--attention-backend", MF_NO_EFFECT, 1, why_selects_attention },
	{ "--flash-attention-version", MF_NO_EFFECT, 1, why_selects_attention },
	{ "--softmax-type", MF_REFUSED, 1, why_model_variant },
	{ "--fp32-residual-connection", MF_REFUSED, 0, why_model_variant },
	{ "--apply-residual-connection-post-layernorm", MF_REFUSED, 0, why_model_variant },
	{ "--glu-linear-offset", MF_REFUSED, 1, why_model_variant },
	{ "--activation-func-clamp-value", MF_REFUSED, 1, why_model_variant },
	{ "--qk-l2-norm", MF_REFUSED, 0, why_model_variant },
	{ "--qk-clip", MF_REFUSED, 0, why_model_variant },
	{ "--qk-clip-alpha", MF_REFUSED, 1, why_model_variant },
	{ "--qk-clip-threshold", MF_REFUSED, 1, why_model_variant },
	{ "--attention-output-gate", MF_REFUSED, 0, why_model_variant },
	{ "--experimental-attention-variant", MF_REFUSED, 1, why_attention_variant },
	{ "--dsa-indexer-n-heads", MF_REFUSED, 1, why_attention_variant },
	{ "--dsa-indexer-head-dim", MF_REFUSED, 1, why_attention_variant },
	{ "--dsa-indexer-topk", MF_REFUSED, 1, why_attention_variant },
	{ "--dsa-indexer-topk-freq", MF_REFUSED, 1, why_attention_variant },
	{ "--dsa-indexer-skip-topk-offset", MF_REFUSED, 1, why_attention_variant },
	{ "--dsa-indexer-loss-coeff", MF_REFUSED, 1, why_attention_variant },
	{ "--dsa-indexer-use-sparse-loss", MF_REFUSED, 0, why_attention_variant },
	{ "--dsa-kernel-backend", MF_REFUSED, 1, why_attention_variant },
	{ "--dsa-indexer-rope-interleaved", MF_REFUSED, 0, why_attention_variant },
	{ "--no-dsa-indexer-rotate-activation", MF_REFUSED, 0, why_attention_variant },
	{ "--disable-dsa-indexer-rotate-activation", MF_REFUSED, 0, why_attention_variant },
	{ "--no-dsa-indexer-scoring-relu", MF_REFUSED, 0, why_attention_variant },
	{ "--disable-dsa-indexer-scoring-relu", MF_REFUSED, 0, why_attention_variant },
	{ "--dsa-indexer-k-norm-epsilon", MF_REFUSED, 1, why_attention_variant },
	{ "--dsa-indexer-k-norm-fp32", MF_REFUSED, 0, why_attention_variant },
	{ "--linear-conv-kernel-dim", MF_REFUSED, 1, why_attention_variant },
	{ "--linear-key-head-dim", MF_REFUSED, 1, why_attention_variant },
	{ "--linear-value-head-dim", MF_REFUSED, 1, why_attention_variant },
	{ "--linear-num-key-heads", MF_REFUSED, 1, why_attention_variant },
	{ "--linear-num-value-heads", MF_REFUSED, 1, why_attention_variant },
	{ "--embedding-init-method-std", MF_REFUSED, 1, why_model_variant },
	{ "--init-model-with-meta-device", MF_NO_EFFECT, 0, why_pytorch_materialises },
	{ "--use-mup", MF_REFUSED, 0, why_mup_parametrisation },
	{ "--mup-width-mult", MF_REFUSED, 1, why_mup_parametrisation },
	{ "--mup-base-hidden-size", MF_REFUSED, 1, why_mup_parametrisation },
	{ "--mup-embedding-mult", MF_REFUSED, 1, why_mup_parametrisation },
	{ "--mup-output-mult", MF_REFUSED, 1, why_mup_parametrisation },
	{ "--mup-base-head-dim", MF_REFUSED, 1, why_mup_parametrisation },
	{ "--mup-attn-scale-power", MF_REFUSED, 1, why_mup_parametrisation },
	{ "--apply-query-key-layer-scaling", MF_REFUSED, 0, why_model_variant },
	{ "--disable-bf16-reduced-precision-matmul", MF_NO_EFFECT, 0, why_bf16_gemms },
	{ "--use-fused-weighted-squared-relu", MF_NO_EFFECT, 0, why_selects_fused2 },
	{ "--fused-residual-rmsnorm", MF_NO_EFFECT, 0, why_selects_fused2 },
	{ "--use-transformer-engine-op-fuser", MF_NO_EFFECT, 0, why_selects_fused2 },
	{ "--distribute-saved-activations", MF_REFUSED, 0, why_recompute_option },
	{ "--fp8-quantizer-factory", MF_REFUSED, 1, why_fp8_training },
	{ "--fp8-interval", MF_NO_EFFECT, 1, why_fp8_interval },
	{ "--fp8-output-proj", MF_REFUSED, 0, why_fp8_training },
	{ "--use-kitchen-attention", MF_REFUSED, 0, why_nvidia_kitchen },
	{ "--kitchen-attention-backend", MF_REFUSED, 1, why_nvidia_kitchen },
	{ "--fp4-format", MF_REFUSED, 1, why_fp4_training },
	{ "--fp4-recipe", MF_REFUSED, 1, why_fp4_training },
	{ "--fp4-quantizer-factory", MF_REFUSED, 1, why_fp4_training },
	{ "--high-priority-a2a-comm-stream", MF_NO_EFFECT, 0, why_nccl_communicator },
	{ "--moe-shared-expert-overlap", MF_NO_EFFECT, 0, why_communication_computation },
	{ "--use-grouped-gemm-for-shared-expert", MF_NO_EFFECT, 0, why_grouped_gemm },
	{ "--moe-shared-expert-glu-interleave-size", MF_REFUSED, 1, why_moe_option },
	{ "--moe-enable-routing-replay", MF_REFUSED, 0, why_moe_option },
	{ "--moe-router-padding-for-quantization", MF_REFUSED, 0, why_fp8_training },
	{ "--moe-router-padding-for-fp8", MF_REFUSED, 0, why_fp8_training },
	{ "--moe-router-quantile-balancing-ema", MF_REFUSED, 1, why_moe_option },
	{ "--moe-router-force-biased", MF_REFUSED, 1, why_moe_option },
	{ "--use-grouped-gemm-for-dense-mlp", MF_NO_EFFECT, 0, why_grouped_gemm },
	{ "--moe-use-grouped-tensor", MF_NO_EFFECT, 0, why_grouped_gemm },
	{ "--moe-single-grouped-weight", MF_NO_EFFECT, 0, why_grouped_gemm },
	{ "--moe-single-grouped-bias", MF_NO_EFFECT, 0, why_grouped_gemm },
	{ "--moe-permute-fusion-into-hybridep", MF_NO_EFFECT, 0, why_deepep_hybridep },
	{ "--moe-hybridep-pad-uneven-dispatch-inputs", MF_NO_EFFECT, 0, why_deepep_hybridep },
	{ "--moe-pad-experts-for-cuda-graph-inference", MF_NO_EFFECT, 0, why_cuda_graphs },
	{ "--moe-layer-recompute", MF_REFUSED, 0, why_moe_option },
	{ "--moe-permute-fusion", MF_NO_EFFECT, 0, why_selects_fused2 },
	{ "--moe-router-fusion", MF_NO_EFFECT, 0, why_selects_fused2 },
	{ "--moe-apply-probs-on-input", MF_REFUSED, 0, why_moe_option },
	{ "--moe-latent-size", MF_REFUSED, 1, why_moe_option },
	{ "--gtp-remat-opt-in-modules", MF_REFUSED, MF_LIST, why_tensor_parallel },
	{ "--moe-flex-dispatcher-num-sms", MF_NO_EFFECT, 1, why_deepep_hybridep },
	{ "--moe-deepep-num-sms", MF_NO_EFFECT, 1, why_deepep_hybridep },
	{ "--moe-hybridep-num-sms", MF_NO_EFFECT, 1, why_deepep_hybridep },
	{ "--moe-hybridep-num-blocks-permute", MF_NO_EFFECT, 1, why_deepep_hybridep },
	{ "--moe-hybridep-num-blocks-unpermute", MF_NO_EFFECT, 1, why_deepep_hybridep },
	{ "--moe-hybridep-num-sms-preprocessing", MF_NO_EFFECT, 1, why_deepep_hybridep },
	{ "--moe-ncclep-zero-copy", MF_NO_EFFECT, 0, why_deepep_hybridep },
	{ "--moe-dispatch-fwd-dtype", MF_REFUSED, 1, why_moe_option },
	{ "--moe-combine-bwd-dtype", MF_REFUSED, 1, why_moe_option },
	{ "--moe-mlp-glu-interleave-size", MF_REFUSED, 1, why_moe_option },
	{ "--moe-expert-rank-capacity-factor", MF_REFUSED, 1, why_moe_option },
	{ "--enable-cuda-graph", MF_NO_EFFECT, 0, why_cuda_graphs },
	{ "--cuda-graph-warmup-steps", MF_NO_EFFECT, 1, why_cuda_graphs },
	{ "--external-cuda-graph", MF_NO_EFFECT, 0, why_cuda_graphs },
	{ "--cuda-graph-impl", MF_NO_EFFECT, 1, why_cuda_graphs },
	{ "--inference-cuda-graph-scope", MF_NO_EFFECT, 1, why_cuda_graphs },
	{ "--enable-mhc-connections", MF_REFUSED, 0, why_hyper_connections },
	{ "--mhc-num-residual-streams", MF_REFUSED, 1, why_hyper_connections },
	{ "--mhc-sinkhorn-iterations", MF_REFUSED, 1, why_hyper_connections },
	{ "--mhc-init-gating-factor", MF_REFUSED, 1, why_hyper_connections },
	{ "--mhc-recompute-layer-num", MF_REFUSED, 1, why_hyper_connections },
	{ "--no-clone-scatter-output-in-embedding", MF_NO_EFFECT, 0, why_pytorch_autograd },
	{ "--disable-clone-scatter-output-in-embedding", MF_NO_EFFECT, 0, why_pytorch_autograd },
	{ "--config-logger-dir", MF_NO_EFFECT, 1, why_dumps_module },
	{ "--flash-decode", MF_NO_EFFECT, 0, why_inference_engine },
	{ "--batch-invariant-mode", MF_NO_EFFECT, 0, why_inference_engine },
	{ "--batch-invariant-backend", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--use-te-activation-func", MF_NO_EFFECT, 0, why_selects_fused2 },
	{ "--symmetric-ar-type", MF_NO_EFFECT, 1, why_nccl_communicator },
	{ "--nccl-all-reduce-for-prefill", MF_NO_EFFECT, 0, why_nccl_communicator },
	{ "--inference-fuse-tp-communication", MF_NO_EFFECT, 0, why_inference_engine },
	{ "--inference-disable-triton-nvls-kernels", MF_NO_EFFECT, 0, why_inference_engine },
	{ "--inference-grouped-gemm-backend", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--inference-moe-disable-fused-quant-kernels", MF_NO_EFFECT, 0, why_inference_engine },
	{ "--inference-moe-token-dispatcher-type", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--mrope-section", MF_REFUSED, MF_LIST, why_rope_variant },
	{ "--gdp-num-householder", MF_REFUSED, 1, why_mamba_hybrid },
	{ "--disable-mamba-mem-eff-path", MF_REFUSED, 0, why_mamba_hybrid },
	{ "--gdp-cutedsl-kernel", MF_REFUSED, 0, why_mamba_hybrid },
	{ "--gdp-num-chunk-states-to-recompute", MF_REFUSED, 1, why_mamba_hybrid },
	{ "--mlp-chunks-for-prefill", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--mlp-chunks-for-training", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--fine-grained-activation-offloading", MF_REFUSED, 0, why_activation_offload },
	{ "--offload-modules", MF_REFUSED, MF_LIST, why_activation_offload },
	{ "--min-offloaded-tensor-size", MF_REFUSED, 1, why_activation_offload },
	{ "--delay-offload-until-cuda-graph", MF_NO_EFFECT, 0, why_cuda_graphs },
	{ "--delta-offload-bytes-across-pp-ranks", MF_REFUSED, 1, why_activation_offload },
	{ "--activation-offload-fraction", MF_REFUSED, 1, why_activation_offload },
	{ "--moe-paged-stash", MF_REFUSED, 0, why_activation_offload },
	{ "--moe-paged-stash-page-size", MF_REFUSED, 1, why_activation_offload },
	{ "--moe-paged-stash-buffer-size-factor-cuda", MF_REFUSED, 1, why_activation_offload },
	{ "--moe-paged-stash-buffer-size-factor-cpu", MF_REFUSED, 1, why_activation_offload },
	{ "--fine-grained-offloading-max-inflight-offloads", MF_REFUSED, 1, why_activation_offload },
	/* ---- network size ---- */
	{ "--encoder-num-layers", MF_REFUSED, 1, why_encoder_bert },
	{ "--decoder-num-layers", MF_REFUSED, 1, why_encoder_bert },
	{ "--relative-attention-num-buckets", MF_REFUSED, 1, why_encoder_bert },
	{ "--relative-attention-max-distance", MF_REFUSED, 1, why_encoder_bert },
	{ "--use-rotary-position-embeddings", MF_REFUSED, 0, why_removed_from },
	{ "--rotary-seq-len-interpolation-factor", MF_REFUSED, 1, why_rope_variant },
	{ "--no-rope-freq", MF_REFUSED, 1, why_rope_variant },
	{ "--quick-geglu", MF_REFUSED, 0, why_model_variant },
	{ "--onnx-safe", MF_REFUSED, 1, why_encoder_bert },
	{ "--bert-no-binary-head", MF_REFUSED, 0, why_encoder_bert },
	/* ---- regularization ---- */
	{ "--apply-wd-to-qk-layernorm", MF_REFUSED, 0, why_weight_decay },
	{ "--sgd-momentum", MF_REFUSED, 1, why_optimizer_adam },
	{ "--muon-momentum", MF_REFUSED, 1, why_optimizer_adam },
	{ "--muon-no-split-qkv", MF_REFUSED, 0, why_optimizer_adam },
	{ "--muon-nesterov", MF_REFUSED, 0, why_optimizer_adam },
	{ "--muon-scale-mode", MF_REFUSED, 1, why_optimizer_adam },
	{ "--muon-fp32-matmul-prec", MF_REFUSED, 1, why_optimizer_adam },
	{ "--muon-coefficient-type", MF_REFUSED, 1, why_optimizer_adam },
	{ "--muon-num-ns-steps", MF_REFUSED, 1, why_optimizer_adam },
	{ "--muon-tp-mode", MF_REFUSED, 1, why_optimizer_adam },
	{ "--muon-use-syrk", MF_REFUSED, 0, why_optimizer_adam },
	{ "--muon-extra-scale-factor", MF_REFUSED, 1, why_optimizer_adam },
	{ "--muon-scalar-optimizer", MF_REFUSED, 1, why_optimizer_adam },
	{ "--lion-beta1", MF_REFUSED, 1, why_optimizer_adam },
	{ "--lion-beta2", MF_REFUSED, 1, why_optimizer_adam },
	{ "--no-weight-decay-cond-type", MF_REFUSED, 1, why_weight_decay },
	/* ---- profiling ---- */
	{ "--profile", MF_NO_EFFECT, 0, why_pytorch_nsys },
	{ "--profile-step-start", MF_NO_EFFECT, 1, why_pytorch_nsys },
	{ "--profile-step-end", MF_NO_EFFECT, 1, why_pytorch_nsys },
	{ "--use-pytorch-profiler", MF_NO_EFFECT, 0, why_pytorch_nsys },
	{ "--pytorch-profiler-collect-shapes", MF_NO_EFFECT, 0, why_pytorch_nsys },
	{ "--pytorch-profiler-collect-callstack", MF_NO_EFFECT, 0, why_pytorch_nsys },
	{ "--pytorch-profiler-collect-chakra", MF_NO_EFFECT, 0, why_pytorch_nsys },
	{ "--profile-ranks", MF_NO_EFFECT, MF_LIST, why_pytorch_nsys },
	{ "--record-memory-history", MF_NO_EFFECT, 0, why_pytorch_nsys },
	{ "--memory-snapshot-path", MF_NO_EFFECT, 1, why_pytorch_nsys },
	{ "--record-shapes", MF_NO_EFFECT, 0, why_pytorch_nsys },
	{ "--nvtx-ranges", MF_NO_EFFECT, 0, why_pytorch_nsys },
	/* ---- training ---- */
	{ "--decrease-batch-size-if-needed", MF_REFUSED, 0, why_batch_size },
	{ "--empty-unused-memory-level", MF_NO_EFFECT, 1, why_pytorch_caching },
	{ "--check-weight-hash-across-dp-replicas-interval", MF_NO_EFFECT, 1, why_health_check },
	{ "--gpu-sniff-test-interval", MF_NO_EFFECT, 1, why_health_check },
	{ "--train-sync-interval", MF_NO_EFFECT, 1, why_health_check },
	{ "--exit-signal-handler-for-dataloader", MF_NO_EFFECT, 0, why_has_exit },
	{ "--exit-signal-handler-for-training", MF_NO_EFFECT, 0, why_has_exit },
	{ "--manual-gc", MF_NO_EFFECT, 0, why_python_garbage },
	{ "--manual-gc-interval", MF_NO_EFFECT, 1, why_python_garbage },
	{ "--no-manual-gc-eval", MF_NO_EFFECT, 0, why_python_garbage },
	{ "--disable-manual-gc-eval", MF_NO_EFFECT, 0, why_python_garbage },
	{ "--iterations-to-skip", MF_REFUSED, MF_LIST, why_skipping_iterations },
	{ "--batch-size", MF_REFUSED, 1, why_removed_from2 },
	{ "--check-for-large-grads", MF_NO_EFFECT, 0, why_rerun_state },
	{ "--result-rejected-tracker-filename", MF_NO_EFFECT, 1, why_rerun_state },
	{ "--tp-comm-overlap-cfg", MF_NO_EFFECT, 1, why_transformer_engine },
	{ "--checkpoint-activations", MF_REFUSED, 0, why_removed_from3 },
	{ "--no-bias-swiglu-fusion", MF_NO_EFFECT, 0, why_selects_fused2 },
	{ "--no-rope-fusion", MF_NO_EFFECT, 0, why_selects_fused2 },
	{ "--optimizer-cuda-graph", MF_NO_EFFECT, 0, why_cuda_graphs },
	{ "--use-torch-optimizer-for-cpu-offload", MF_NO_EFFECT, 0, why_optimizer_offload },
	{ "--overlap-cpu-optimizer-d2h-h2d", MF_NO_EFFECT, 0, why_optimizer_offload },
	{ "--dump-param-to-param-group-map", MF_NO_EFFECT, 1, why_debugging_dump },
	{ "--no-pin-cpu-grads", MF_NO_EFFECT, 0, why_pinned_host },
	{ "--no-pin-cpu-params", MF_NO_EFFECT, 0, why_pinned_host },
	{ "--no-persist-layer-norm", MF_NO_EFFECT, 0, why_selects_fused2 },
	/* ---- rl ---- */
	{ "--perform-rl-step", MF_REFUSED, 0, why_reinforcement_learning },
	{ "--rl-prompts-per-eval", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--grpo-prompts-per-step", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--grpo-group-size", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--rl-generation-lag", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--rl-max-inflight-requests", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--rl-submission-granularity", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--rl-consumption-granularity", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--rl-durable-rollout-bank", MF_REFUSED, 0, why_reinforcement_learning },
	{ "--rl-rollout-bank-dir", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--rl-rollout-bank-max-bytes", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--grpo-iterations", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--grpo-clamp-eps-lower", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--grpo-clamp-eps-upper", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--grpo-kl-beta", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--grpo-entropy-term-weight", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--grpo-filter-groups-with-same-reward", MF_REFUSED, 0, why_reinforcement_learning },
	{ "--langrl-env-config", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--rl-default-temperature", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--rl-default-top-p", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--rl-default-top-k", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--rl-offload-optimizer-during-inference", MF_REFUSED, 0, why_reinforcement_learning },
	{ "--rl-kv-cache-management-mode", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--rl-persist-cuda-graphs", MF_REFUSED, 0, why_reinforcement_learning },
	{ "--no-rl-persist-cuda-graphs", MF_REFUSED, 0, why_reinforcement_learning },
	{ "--rl-partial-rollouts", MF_REFUSED, 0, why_reinforcement_learning },
	{ "--no-rl-partial-rollouts", MF_REFUSED, 0, why_reinforcement_learning },
	{ "--rl-inference-logprobs-is-correction", MF_REFUSED, 0, why_reinforcement_learning },
	{ "--no-rl-inference-logprobs-is-correction", MF_REFUSED, 0, why_reinforcement_learning },
	{ "--rl-importance-sampling-truncation-coef", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--rl-use-sequence-packing", MF_REFUSED, 0, why_reinforcement_learning },
	{ "--no-rl-use-sequence-packing", MF_REFUSED, 0, why_reinforcement_learning },
	{ "--rl-sequence-packing-max-sequences-per-bin", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--rl-sequence-packing-algo", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--rl-training-cuda-graphs", MF_REFUSED, 0, why_reinforcement_learning },
	{ "--no-rl-training-cuda-graphs", MF_REFUSED, 0, why_reinforcement_learning },
	{ "--rl-inference-tensor-model-parallel-size", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--rl-inference-pipeline-model-parallel-size", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--rl-inference-expert-model-parallel-size", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--rl-inference-expert-tensor-model-parallel-size", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--rl-inference-model-unified-memory-level", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--rl-offload-inference-model-weights-when-idle", MF_REFUSED, 0, why_reinforcement_learning },
	{ "--no-rl-offload-inference-model-weights-when-idle", MF_REFUSED, 0, why_reinforcement_learning },
	{ "--refit-method", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--rl-verify-model-weights-swap", MF_REFUSED, 0, why_reinforcement_learning },
	{ "--no-rl-verify-model-weights-swap", MF_REFUSED, 0, why_reinforcement_learning },
	{ "--rl-skip-bos-token", MF_REFUSED, 0, why_reinforcement_learning },
	{ "--no-rl-skip-bos-token", MF_REFUSED, 0, why_reinforcement_learning },
	{ "--rl-profile", MF_REFUSED, 0, why_reinforcement_learning },
	{ "--rl-profile-dir", MF_REFUSED, 1, why_reinforcement_learning },
	{ "--rl-inference-parsers", MF_REFUSED, MF_LIST0, why_reinforcement_learning },
	/* ---- RNG and initialization ---- */
	{ "--te-rng-tracker", MF_NO_EFFECT, 0, why_pytorch_materialises },
	{ "--inference-rng-tracker", MF_NO_EFFECT, 0, why_pytorch_materialises },
	{ "--data-parallel-random-init", MF_REFUSED, 0, why_different_initial },
	{ "--init-method-xavier-uniform", MF_REFUSED, 0, why_model_variant },
	/* ---- learning rate and weight decay ---- */
	{ "--warmup", MF_REFUSED, 1, why_removed_from4 },
	{ "--freeze-all-layers", MF_REFUSED, 0, why_freezing_layers },
	/* ---- checkpointing ---- */
	{ "--save-params-interval", MF_REFUSED, 1, why_tensor_dumps },
	{ "--save-activations-interval", MF_REFUSED, 1, why_tensor_dumps },
	{ "--save-tokens-per-expert-interval", MF_REFUSED, 1, why_tensor_dumps },
	{ "--save-wgrads-interval", MF_REFUSED, 1, why_tensor_dumps },
	{ "--save-dgrads-interval", MF_REFUSED, 1, why_tensor_dumps },
	{ "--save-retain-interval", MF_REFUSED, 1, why_tensor_dumps },
	{ "--load-main-params-from-ckpt", MF_REFUSED, 0, why_loading_option },
	{ "--non-persistent-save-interval", MF_REFUSED, 1, why_non_persistent },
	{ "--non-persistent-ckpt-type", MF_REFUSED, 1, why_non_persistent },
	{ "--non-persistent-global-ckpt-dir", MF_REFUSED, 1, why_non_persistent },
	{ "--non-persistent-local-ckpt-dir", MF_REFUSED, 1, why_non_persistent },
	{ "--non-persistent-local-ckpt-algo", MF_REFUSED, 1, why_non_persistent },
	{ "--pretrained-checkpoint", MF_REFUSED, 1, why_loading_option },
	{ "--use-mp-args-from-checkpoint-args", MF_NO_EFFECT, 0, why_layout_own },
	{ "--auto-detect-ckpt-format", MF_NO_EFFECT, 0, why_format_detected },
	{ "--ckpt-convert-format", MF_REFUSED, 1, why_checkpoint_formats },
	{ "--ckpt-convert-save", MF_REFUSED, 1, why_checkpoint_formats },
	{ "--ckpt-convert-update-legacy-dist-opt-format", MF_REFUSED, 0, why_checkpoint_formats },
	{ "--no-ckpt-fully-parallel-save", MF_NO_EFFECT, 0, why_torch_dist },
	{ "--async-strategy", MF_NO_EFFECT, 1, why_torch_dist },
	{ "--use-persistent-ckpt-worker", MF_NO_EFFECT, 0, why_torch_dist },
	{ "--async-ckpt-cpu-priority", MF_NO_EFFECT, 1, why_torch_dist },
	{ "--async-ckpt-io-priority", MF_NO_EFFECT, 1, why_torch_dist },
	{ "--async-ckpt-use-cpu-shm", MF_NO_EFFECT, 0, why_torch_dist },
	{ "--ckpt-fully-parallel-load", MF_NO_EFFECT, 0, why_torch_dist },
	{ "--ckpt-fully-parallel-load-exchange-algo", MF_NO_EFFECT, 1, why_torch_dist },
	{ "--ckpt-fully-parallel-load-per-rank-objects", MF_NO_EFFECT, 0, why_torch_dist },
	{ "--ckpt-fully-parallel-save-process-group", MF_NO_EFFECT, 1, why_torch_dist },
	{ "--ckpt-fully-parallel-load-process-group", MF_NO_EFFECT, 1, why_torch_dist },
	{ "--ckpt-assume-constant-structure", MF_NO_EFFECT, 0, why_torch_dist },
	{ "--ckpt-pg-tensors-cache-path", MF_NO_EFFECT, 1, why_torch_dist },
	{ "--ckpt-pg-tensors-cache-create", MF_NO_EFFECT, 0, why_torch_dist },
	{ "--no-ckpt-load-validate-sharding-integrity", MF_NO_EFFECT, 0, why_torch_dist },
	{ "--disable-ckpt-load-validate-sharding-integrity", MF_NO_EFFECT, 0, why_torch_dist },
	{ "--no-strict-fsdp-dtensor-load", MF_REFUSED, 0, why_fsdp_use },
	{ "--disable-strict-fsdp-dtensor-load", MF_REFUSED, 0, why_fsdp_use },
	{ "--dist-ckpt-strictness", MF_NO_EFFECT, 1, why_torch_dist },
	{ "--dist-ckpt-save-pre-mcore-014", MF_REFUSED, 0, why_checkpoint_formats },
	{ "--dist-ckpt-optim-fully-reshardable", MF_REFUSED, 0, why_checkpoint_formats },
	{ "--distrib-optim-fully-reshardable-mem-efficient", MF_REFUSED, 0, why_checkpoint_formats },
	{ "--no-save-tokenizer-assets", MF_NO_EFFECT, 0, why_copy_tokenizer },
	{ "--disable-save-tokenizer-assets", MF_NO_EFFECT, 0, why_copy_tokenizer },
	{ "--replication", MF_REFUSED, 0, why_non_persistent },
	{ "--replication-jump", MF_REFUSED, 1, why_non_persistent },
	{ "--replication-factor", MF_REFUSED, 1, why_non_persistent },
	{ "--verify-integrity", MF_REFUSED, 0, why_non_persistent },
	{ "--override-ckpt-iteration", MF_REFUSED, 1, why_loading_option },
	{ "--use-dist-ckpt", MF_NO_EFFECT, 0, why_old_spelling },
	{ "--dist-ckpt-format", MF_REFUSED, 1, why_checkpoint_formats },
	{ "--dist-ckpt-workers", MF_NO_EFFECT, 1, why_torch_dist },
	{ "--ckpt-fully-parallel-save", MF_NO_EFFECT, 0, why_torch_dist },
	{ "--ckpt-drop-redundant-extra-state", MF_NO_EFFECT, 0, why_torch_dist },
	/* ---- mixed precision ---- */
	{ "--fp16-lm-cross-entropy", MF_REFUSED, 0, why_computes_cross },
	{ "--output-logit-dtype", MF_REFUSED, 1, why_computes_cross },
	{ "--reuse-grad-buf-for-mxfp8-param-ag", MF_REFUSED, 0, why_fp8_training },
	{ "--mamba-training-ssm-states-dtype", MF_REFUSED, 1, why_mamba_hybrid },
	/* ---- distributed init ---- */
	{ "--distributed-backend", MF_NO_EFFECT, 1, why_communicates_over },
	{ "--no-align-grad-reduce", MF_NO_EFFECT, 0, why_communication_computation },
	{ "--disable-align-grad-reduce", MF_NO_EFFECT, 0, why_communication_computation },
	{ "--lazy-mpu-init", MF_NO_EFFECT, 0, why_pytorch_materialises },
	{ "--use-torch-fsdp2", MF_REFUSED, 0, why_pytorch_fsdp2 },
	{ "--nccl-communicator-config-path", MF_NO_EFFECT, 1, why_nccl_communicator },
	{ "--use-tp-pp-dp-mapping", MF_NO_EFFECT, 0, why_nccl_communicator },
	{ "--disable-gloo-process-groups", MF_NO_EFFECT, 0, why_nccl_communicator },
	{ "--use-sharp", MF_NO_EFFECT, 0, why_nccl_communicator },
	{ "--sharp-enabled-group", MF_NO_EFFECT, 1, why_nccl_communicator },
	{ "--high-priority-stream-groups", MF_NO_EFFECT, MF_LIST, why_nccl_communicator },
	{ "--distributed-timeout-seconds-after-init", MF_NO_EFFECT, 1, why_keeps_timeout },
	{ "--flight-recorder-dump-path", MF_NO_EFFECT, 1, why_pytorch_nccl },
	{ "--flight-recorder-trace-buffer-size", MF_NO_EFFECT, 1, why_pytorch_nccl },
	{ "--no-flight-recorder-dump-on-timeout", MF_NO_EFFECT, 0, why_pytorch_nccl },
	{ "--disable-flight-recorder-dump-on-timeout", MF_NO_EFFECT, 0, why_pytorch_nccl },
	{ "--flight-recorder-include-stack-trace", MF_NO_EFFECT, 0, why_pytorch_nccl },
	{ "--no-flight-recorder-include-only-active", MF_NO_EFFECT, 0, why_pytorch_nccl },
	{ "--disable-flight-recorder-include-only-active", MF_NO_EFFECT, 0, why_pytorch_nccl },
	{ "--no-flight-recorder-extra-dump-on-exec", MF_NO_EFFECT, 0, why_pytorch_nccl },
	{ "--disable-flight-recorder-extra-dump-on-exec", MF_NO_EFFECT, 0, why_pytorch_nccl },
	{ "--disable-jit-fuser", MF_NO_EFFECT, 0, why_selects_fused2 },
	{ "--pipeline-model-parallel-layout", MF_REFUSED, 1, why_uneven_pipeline },
	{ "--model-parallel-size", MF_REFUSED, 1, why_removed_from5 },
	{ "--no-overlap-p2p-communication", MF_NO_EFFECT, 0, why_communication_computation },
	{ "--ddp-num-buckets", MF_NO_EFFECT, 1, why_communication_computation },
	{ "--ddp-pad-buckets-for-high-nccl-busbw", MF_NO_EFFECT, 0, why_communication_computation },
	{ "--ddp-reduce-scatter-with-fp32-accumulation", MF_REFUSED, 0, why_gradient_reduction },
	{ "--gtp-remat-reduce-scatter-with-fp32-accumulation", MF_REFUSED, 0, why_tensor_parallel },
	{ "--ddp-param-name-patterns-for-fp32-local-accumulation", MF_REFUSED, MF_LIST, why_gradient_reduction },
	{ "--ddp-average-in-collective", MF_REFUSED, 0, why_gradient_reduction },
	{ "--overlap-param-gather-with-optimizer-step", MF_NO_EFFECT, 0, why_communication_computation },
	{ "--no-align-param-gather", MF_NO_EFFECT, 0, why_communication_computation },
	{ "--megatron-fsdp-version", MF_REFUSED, 1, why_fsdp_use },
	{ "--no-use-layer-wise-param-layout", MF_NO_EFFECT, 0, why_communication_computation },
	{ "--use-nccl-ub", MF_NO_EFFECT, 0, why_nccl_communicator },
	{ "--disable-symmetric-registration", MF_NO_EFFECT, 0, why_nccl_communicator },
	{ "--gtp-remat-nccl-ub", MF_NO_EFFECT, 0, why_nccl_communicator },
	{ "--gtp-expert-remat-nccl-ub", MF_NO_EFFECT, 0, why_nccl_communicator },
	{ "--fsdp-manual-registration", MF_NO_EFFECT, 0, why_nccl_communicator },
	{ "--create-all-gather-group", MF_NO_EFFECT, 0, why_nccl_communicator },
	{ "--outer-dp-sharding-strategy", MF_REFUSED, 1, why_fsdp_use },
	{ "--no-gradient-reduce-div-fusion", MF_NO_EFFECT, 0, why_communication_computation },
	{ "--fsdp-double-buffer", MF_NO_EFFECT, 0, why_fsdp_buffer },
	{ "--suggested-communication-unit-size", MF_NO_EFFECT, 1, why_communication_computation },
	{ "--keep-fp8-transpose-cache", MF_NO_EFFECT, 0, why_fsdp_buffer },
	{ "--enable-full-sharding-in-hsdp", MF_REFUSED, 0, why_fsdp_use },
	{ "--num-distributed-optimizer-instances", MF_REFUSED, 1, why_fsdp_use },
	{ "--torch-fsdp2-no-reshard-after-forward", MF_REFUSED, 0, why_pytorch_fsdp2 },
	{ "--cp-comm-type", MF_REFUSED, MF_LIST, why_context_parallelism },
	{ "--fake-process-group", MF_NO_EFFECT, 0, why_nccl_communicator },
	/* ---- validation ---- */
	{ "--start-eval-at-iter", MF_REFUSED, 1, why_validation_option },
	{ "--eval-global-batch-size", MF_REFUSED, 1, why_validation_option },
	{ "--eval-micro-batch-size", MF_REFUSED, 1, why_validation_option },
	{ "--test-mode", MF_REFUSED, 0, why_validation_option },
	{ "--multiple-validation-sets", MF_REFUSED, 0, why_validation_option },
	{ "--validation-set-names", MF_REFUSED, MF_LIST, why_validation_option },
	/* ---- data and dataloader ---- */
	{ "--phase-transition-iterations", MF_REFUSED, 1, why_data_option },
	{ "--per-dataset-sequences-path", MF_REFUSED, 1, why_data_option },
	{ "--dataloader-fast-cache-load", MF_NO_EFFECT, 0, why_pytorch_data },
	{ "--dataloader-defer-npy-index-mmap", MF_NO_EFFECT, 0, why_pytorch_data },
	{ "--no-mmap-bin-files", MF_NO_EFFECT, 0, why_pytorch_data },
	{ "--encoder-seq-length", MF_REFUSED, 1, why_encoder_bert },
	{ "--decoder-seq-length", MF_REFUSED, 1, why_encoder_bert },
	{ "--sample-rate", MF_REFUSED, 1, why_encoder_bert },
	{ "--mask-prob", MF_REFUSED, 1, why_encoder_bert },
	{ "--short-seq-prob", MF_REFUSED, 1, why_encoder_bert },
	{ "--num-workers", MF_NO_EFFECT, 1, why_pytorch_data },
	{ "--dataloader-inter-document-masking", MF_REFUSED, 0, why_data_option },
	{ "--no-create-attention-mask-in-dataloader", MF_NO_EFFECT, 0, why_pytorch_data },
	{ "--num-dataset-builder-threads", MF_NO_EFFECT, 1, why_pytorch_data },
	{ "--object-storage-cache-path", MF_NO_EFFECT, 1, why_pytorch_data },
	{ "--allow-ambiguous-pad-tokens", MF_REFUSED, 0, why_data_option },
	{ "--fim-data", MF_REFUSED, 0, why_fill_middle },
	{ "--fim-rate", MF_REFUSED, 1, why_fill_middle },
	{ "--fim-spm-rate", MF_REFUSED, 1, why_fill_middle },
	{ "--fim-split-sample", MF_REFUSED, 1, why_fill_middle },
	{ "--fim-fragment-rate", MF_REFUSED, 1, why_fill_middle },
	{ "--fim-no-prefix", MF_REFUSED, 1, why_fill_middle },
	{ "--fim-prefix-token", MF_REFUSED, 1, why_fill_middle },
	{ "--fim-middle-token", MF_REFUSED, 1, why_fill_middle },
	{ "--fim-suffix-token", MF_REFUSED, 1, why_fill_middle },
	{ "--fim-pad-token", MF_REFUSED, 1, why_fill_middle },
	{ "--fim-eod-token", MF_REFUSED, 1, why_fill_middle },
	/* ---- tokenizer ---- */
	/* ---- autoresume ---- */
	{ "--adlr-autoresume", MF_REFUSED, 0, why_adlr_auto },
	{ "--adlr-autoresume-interval", MF_REFUSED, 1, why_adlr_auto },
	/* ---- biencoder ---- */
	{ "--ict-head-size", MF_REFUSED, 1, why_retriever_biencoder },
	{ "--biencoder-projection-dim", MF_REFUSED, 1, why_retriever_biencoder },
	{ "--biencoder-shared-query-context-model", MF_REFUSED, 0, why_retriever_biencoder },
	{ "--ict-load", MF_REFUSED, 1, why_retriever_biencoder },
	{ "--bert-load", MF_REFUSED, 1, why_retriever_biencoder },
	{ "--titles-data-path", MF_REFUSED, 1, why_retriever_biencoder },
	{ "--query-in-block-prob", MF_REFUSED, 1, why_retriever_biencoder },
	{ "--use-one-sent-docs", MF_REFUSED, 0, why_retriever_biencoder },
	{ "--evidence-data-path", MF_REFUSED, 1, why_retriever_biencoder },
	{ "--retriever-report-topk-accuracies", MF_REFUSED, MF_LIST, why_retriever_biencoder },
	{ "--retriever-score-scaling", MF_REFUSED, 0, why_retriever_biencoder },
	{ "--block-data-path", MF_REFUSED, 1, why_retriever_biencoder },
	{ "--embedding-path", MF_REFUSED, 1, why_retriever_biencoder },
	{ "--indexer-batch-size", MF_REFUSED, 1, why_retriever_biencoder },
	{ "--indexer-log-interval", MF_REFUSED, 1, why_retriever_biencoder },
	/* ---- vision ---- */
	{ "--num-classes", MF_REFUSED, 1, why_vision_models },
	{ "--img-h", MF_REFUSED, 1, why_vision_models },
	{ "--img-w", MF_REFUSED, 1, why_vision_models },
	{ "--num-channels", MF_REFUSED, 1, why_vision_models },
	{ "--patch-dim", MF_REFUSED, 1, why_vision_models },
	{ "--classes-fraction", MF_REFUSED, 1, why_vision_models },
	{ "--data-per-class-fraction", MF_REFUSED, 1, why_vision_models },
	{ "--no-data-sharding", MF_REFUSED, 0, why_vision_models },
	{ "--head-lr-mult", MF_REFUSED, 1, why_vision_models },
	{ "--vision-pretraining", MF_REFUSED, 0, why_vision_models },
	{ "--vision-pretraining-type", MF_REFUSED, 1, why_vision_models },
	{ "--vision-backbone-type", MF_REFUSED, 1, why_vision_models },
	{ "--swin-backbone-type", MF_REFUSED, 1, why_vision_models },
	{ "--mask-type", MF_REFUSED, 1, why_vision_models },
	{ "--mask-factor", MF_REFUSED, 1, why_vision_models },
	{ "--iter-per-epoch", MF_REFUSED, 1, why_vision_models },
	{ "--dino-local-img-size", MF_REFUSED, 1, why_vision_models },
	{ "--dino-local-crops-number", MF_REFUSED, 1, why_vision_models },
	{ "--dino-head-hidden-size", MF_REFUSED, 1, why_vision_models },
	{ "--dino-bottleneck-size", MF_REFUSED, 1, why_vision_models },
	{ "--dino-freeze-last-layer", MF_REFUSED, 1, why_vision_models },
	{ "--dino-norm-last-layer", MF_REFUSED, 0, why_vision_models },
	{ "--dino-warmup-teacher-temp", MF_REFUSED, 1, why_vision_models },
	{ "--dino-teacher-temp", MF_REFUSED, 1, why_vision_models },
	{ "--dino-warmup-teacher-temp-epochs", MF_REFUSED, 1, why_vision_models },
	/* ---- moe ---- */
	{ "--moe-use-upcycling", MF_REFUSED, 0, why_moe_option },
	{ "--moe-upcycling-granularity", MF_REFUSED, 1, why_moe_option },
	/* ---- mla ---- */
	{ "--cache-mla-latents", MF_REFUSED, 0, why_multi_latent },
	{ "--mla-down-proj-fusion", MF_NO_EFFECT, 0, why_selects_fused2 },
	/* ---- experimental_attention_variant ---- */
	{ "--linear-attention-freq", MF_REFUSED, 1, why_attention_variant },
	/* ---- heterogeneous architecture ---- */
	{ "--heterogeneous-layers-config-path", MF_REFUSED, 1, why_heterogeneous_layer },
	{ "--heterogeneous-layers-config-encoded-json", MF_REFUSED, 1, why_heterogeneous_layer },
	/* ---- logging ---- */
	{ "--log-progress", MF_NO_EFFECT, 0, why_logging_detail },
	{ "--tensorboard-queue-size", MF_NO_EFFECT, 1, why_logging_detail },
	{ "--log-device-memory-used", MF_NO_EFFECT, 0, why_logging_detail },
	{ "--log-max-attention-logit", MF_NO_EFFECT, 0, why_logging_detail },
	{ "--no-barrier-with-level-1-timing", MF_NO_EFFECT, 0, why_logging_detail },
	{ "--log-energy", MF_NO_EFFECT, 0, why_logging_detail },
	{ "--moe-routing-trace-path", MF_NO_EFFECT, 1, why_routing_trace },
	{ "--moe-routing-trace-max-training-iters", MF_NO_EFFECT, 1, why_routing_trace },
	{ "--moe-routing-trace-capture-logits", MF_NO_EFFECT, 0, why_routing_trace },
	{ "--moe-routing-trace-capture-hidden-states", MF_NO_EFFECT, 0, why_routing_trace },
	{ "--moe-routing-trace-dump-weights", MF_NO_EFFECT, 0, why_routing_trace },
	/* ---- opentelemetry ---- */
	{ "--otel-enabled", MF_NO_EFFECT, 0, why_opentelemetry_tracing },
	{ "--otel-service-name", MF_NO_EFFECT, 1, why_opentelemetry_tracing },
	{ "--otel-span-groups", MF_NO_EFFECT, 1, why_opentelemetry_tracing },
	/* ---- Logits Distillation ---- */
	{ "--logits-save-top-k", MF_REFUSED, 1, why_logit_distillation },
	{ "--logits-save-top-p", MF_REFUSED, 1, why_logit_distillation },
	{ "--logits-save-top-p-min-k", MF_REFUSED, 1, why_logit_distillation },
	{ "--logits-save-dir", MF_REFUSED, 1, why_logit_distillation },
	{ "--logits-save-dtype", MF_REFUSED, 1, why_logit_distillation },
	{ "--logits-load-dir", MF_REFUSED, 1, why_logit_distillation },
	{ "--logits-load-decode-threads", MF_REFUSED, 1, why_logit_distillation },
	{ "--logits-load-prefetch-factor", MF_REFUSED, 1, why_logit_distillation },
	{ "--logits-load-msc-prefetch-depth", MF_REFUSED, 1, why_logit_distillation },
	{ "--logits-load-kd-loss-alpha", MF_REFUSED, 1, why_logit_distillation },
	{ "--logits-load-ignore-errors", MF_REFUSED, 0, why_logit_distillation },
	/* ---- straggler ---- */
	{ "--log-straggler", MF_NO_EFFECT, 0, why_straggler_detector },
	{ "--straggler-ctrlr-port", MF_NO_EFFECT, 1, why_straggler_detector },
	{ "--straggler-minmax-count", MF_NO_EFFECT, 1, why_straggler_detector },
	{ "--disable-straggler-on-startup", MF_NO_EFFECT, 0, why_straggler_detector },
	/* ---- workload inspector ---- */
	{ "--run-workload-inspector-server", MF_NO_EFFECT, 0, why_nvidia_workload },
	/* ---- inference ---- */
	{ "--inference-max-requests", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--inference-max-seq-length", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--inference-batch-times-seqlen-threshold", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--max-tokens-to-oom", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--output-bert-embeddings", MF_REFUSED, 0, why_encoder_bert },
	{ "--bert-embedder-type", MF_REFUSED, 1, why_encoder_bert },
	{ "--cuda-graph-scope", MF_NO_EFFECT, MF_LIST, why_cuda_graphs },
	{ "--cuda-graph-modules", MF_NO_EFFECT, MF_LIST, why_cuda_graphs },
	{ "--use-legacy-static-engine", MF_NO_EFFECT, 0, why_inference_engine },
	{ "--inference-dynamic-batching", MF_NO_EFFECT, 0, why_inference_engine },
	{ "--inference-dynamic-batching-buffer-size-gb", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--inference-dynamic-batching-paused-buffer-size-gb", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--inference-dynamic-batching-mamba-memory-ratio", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--inference-dynamic-batching-block-size", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--inference-dynamic-batching-max-requests", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--inference-dynamic-batching-max-tokens", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--inference-dynamic-batching-num-cuda-graphs", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--inference-dynamic-batching-track-paused-request-events", MF_NO_EFFECT, 0, why_inference_engine },
	{ "--inference-dynamic-batching-track-generated-token-events", MF_NO_EFFECT, 0, why_inference_engine },
	{ "--decode-only-cuda-graphs", MF_NO_EFFECT, 0, why_cuda_graphs },
	{ "--inference-cuda-graph-all-prefills", MF_NO_EFFECT, 0, why_cuda_graphs },
	{ "--inference-cuda-graph-max-tokens", MF_NO_EFFECT, 1, why_cuda_graphs },
	{ "--inference-dynamic-batching-unified-memory-level", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--enable-chunked-prefill", MF_NO_EFFECT, 0, why_inference_engine },
	{ "--num-speculative-tokens", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--inference-dynamic-batching-prefix-caching", MF_NO_EFFECT, 0, why_inference_engine },
	{ "--no-inference-dynamic-batching-prefix-caching", MF_NO_EFFECT, 0, why_inference_engine },
	{ "--inference-dynamic-batching-prefix-caching-eviction-policy", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--inference-dynamic-batching-prefix-caching-coordinator-policy", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--inference-dynamic-batching-prefix-caching-routing-alpha", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--inference-dynamic-batching-prefix-caching-mamba-gb", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--inference-dynamic-batching-cuda-graph-mixed-prefill-count", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--inference-dynamic-batching-cuda-graph-sizing-distribution", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--inference-dynamic-batching-sampling-backend", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--use-same-sampling-seed-across-dp-ranks", MF_NO_EFFECT, 0, why_inference_engine },
	{ "--inference-dynamic-batching-async-sched-mode", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--inference-dynamic-batching-logprobs-mode", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--inference-logging-step-interval", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--inference-text-gen-server-logging", MF_NO_EFFECT, 0, why_inference_engine },
	{ "--no-inference-text-gen-server-logging", MF_NO_EFFECT, 0, why_inference_engine },
	{ "--inference-wandb-logging", MF_NO_EFFECT, 0, why_inference_engine },
	{ "--no-inference-wandb-logging", MF_NO_EFFECT, 0, why_inference_engine },
	{ "--inference-coordinator-port", MF_NO_EFFECT, 1, why_inference_engine },
	{ "--mamba-inference-conv-states-dtype", MF_REFUSED, 1, why_mamba_hybrid },
	{ "--mamba-inference-ssm-states-dtype", MF_REFUSED, 1, why_mamba_hybrid },
	{ "--inference-use-synchronous-zmq-collectives", MF_NO_EFFECT, 0, why_inference_engine },
	{ "--no-inference-use-synchronous-zmq-collectives", MF_NO_EFFECT, 0, why_inference_engine },
	{ "--inference-disable-ep-consensus", MF_NO_EFFECT, 0, why_inference_engine },
	{ "--no-inference-disable-ep-consensus", MF_NO_EFFECT, 0, why_inference_engine },
	{ "--inference-shards", MF_NO_EFFECT, 1, why_inference_engine },
	/* ---- Transformer-Engine ---- */
	{ "--fp4-param-gather", MF_REFUSED, 0, why_fp4_training },
	{ "--te-precision-config-file", MF_REFUSED, 1, why_fp8_training },
	/* ---- experimental ---- */
	{ "--enable-experimental", MF_NO_EFFECT, 0, why_switch_experimental },
	{ "--yaml-cfg", MF_REFUSED, 1, why_model_specs },
	{ "--megatron-fsdp-main-params-dtype", MF_REFUSED, 1, why_fsdp_use },
	{ "--megatron-fsdp-enable-fine-grained-param-gather", MF_NO_EFFECT, 0, why_fsdp_buffer },
	{ "--megatron-fsdp-max-pool-double-buffer", MF_NO_EFFECT, 0, why_fsdp_buffer },
	{ "--fsdp-db-use-persist-buf-on-alloc-fail", MF_NO_EFFECT, 0, why_fsdp_buffer },
	/* ---- one logger ---- */
	{ "--no-one-logger", MF_NO_EFFECT, 0, why_nvidia_logger },
	{ "--one-logger-project", MF_NO_EFFECT, 1, why_nvidia_logger },
	{ "--one-logger-run-name", MF_NO_EFFECT, 1, why_nvidia_logger },
	{ "--one-logger-async", MF_NO_EFFECT, 0, why_nvidia_logger },
	{ "--app-tag-run-name", MF_NO_EFFECT, 1, why_nvidia_logger },
	{ "--app-tag-run-version", MF_NO_EFFECT, 1, why_nvidia_logger },
	/* ---- In-process restart ---- */
	{ "--inprocess-restart", MF_REFUSED, 0, why_process_restart },
	{ "--inprocess-max-iterations", MF_REFUSED, 1, why_process_restart },
	{ "--inprocess-monitor-thread-interval", MF_REFUSED, 1, why_process_restart },
	{ "--inprocess-monitor-process-interval", MF_REFUSED, 1, why_process_restart },
	{ "--inprocess-progress-watchdog-interval", MF_REFUSED, 1, why_process_restart },
	{ "--inprocess-heartbeat-interval", MF_REFUSED, 1, why_process_restart },
	{ "--inprocess-soft-timeout", MF_REFUSED, 1, why_process_restart },
	{ "--inprocess-hard-timeout", MF_REFUSED, 1, why_process_restart },
	{ "--inprocess-heartbeat-timeout", MF_REFUSED, 1, why_process_restart },
	{ "--inprocess-barrier-timeout", MF_REFUSED, 1, why_process_restart },
	{ "--inprocess-completion-timeout", MF_REFUSED, 1, why_process_restart },
	{ "--inprocess-last-call-wait", MF_REFUSED, 1, why_process_restart },
	{ "--inprocess-termination-grace-time", MF_REFUSED, 1, why_process_restart },
	{ "--inprocess-granularity", MF_REFUSED, 1, why_process_restart },
	{ "--inprocess-active-world-size", MF_REFUSED, 1, why_process_restart },
	{ "--inprocess-empty-cuda-cache", MF_REFUSED, 0, why_process_restart },
	/* ---- ft_package ---- */
	{ "--enable-ft-package", MF_REFUSED, 0, why_nvidia_fault },
	{ "--calc-ft-timeouts", MF_REFUSED, 0, why_nvidia_fault },
	{ "--ft-num-warmup-iters", MF_REFUSED, 1, why_nvidia_fault },
	/* ---- rerun engine ---- */
	{ "--error-injection-rate", MF_NO_EFFECT, 1, why_rerun_state },
	{ "--error-injection-type", MF_NO_EFFECT, 1, why_rerun_state },
	{ "--rerun-mode", MF_NO_EFFECT, 1, why_rerun_state },
	/* ---- msc ---- */
	{ "--enable-msc", MF_NO_EFFECT, 0, why_nvidia_multi },
	{ "--disable-msc", MF_NO_EFFECT, 0, why_nvidia_multi },
	/* ---- fault injector ---- */
	{ "--fault-injector-ranks", MF_NO_EFFECT, 1, why_fault_injector },
	{ "--fault-injector-num-ranks", MF_NO_EFFECT, 1, why_fault_injector },
	{ "--fault-injector-fault-types", MF_NO_EFFECT, 1, why_fault_injector },
	{ "--fault-injector-fault-probabilities", MF_NO_EFFECT, 1, why_fault_injector },
	{ "--fault-injector-fault-delay", MF_NO_EFFECT, 1, why_fault_injector },
	{ "--fault-injector-delay-start-iteration", MF_NO_EFFECT, 1, why_fault_injector },
	{ "--fault-injector-mtti-seconds", MF_NO_EFFECT, 1, why_fault_injector },
	{ "--fault-injector-offset-seconds", MF_NO_EFFECT, 1, why_fault_injector },
	{ "--fault-injector-seed", MF_NO_EFFECT, 1, why_fault_injector },
};

const size_t megatron_flags_len = sizeof(megatron_flags) / sizeof(megatron_flags[0]);
