/* flags.c: Megatron-LM's command-line flags, bound to mc_config.
 *
 * Names and meanings follow Megatron-LM (megatron/training/arguments.py, core_v0.15), plus
 * the spellings used in NVIDIA's and AMD's Megatron guides as aliases. Flags that mean
 * nothing here are accepted with a one-line note; flags whose feature this version lacks
 * fail with a clear message instead of being silently ignored. */
#include <float.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "base/args.h"
#include "base/log.h"
#include "megatron.h"
#include "train/flags.h"

#define F(member) offsetof(mc_config, member)
#define RANGE(lo, hi) .min = (lo), .max = (hi)

static const mc_arg_choice k_norms[] = {{"LayerNorm", MC_NORM_LAYERNORM}, {"RMSNorm", MC_NORM_RMSNORM}, {NULL, 0}};
static const mc_arg_choice k_pos[] = {{"learned_absolute", MC_POS_LEARNED_ABSOLUTE},
                                      {"rope", MC_POS_ROPE},
                                      {"none", MC_POS_NONE},
                                      {NULL, 0}};
static const mc_arg_choice k_decay[] = {{"constant", MC_LR_CONSTANT},
                                        {"linear", MC_LR_LINEAR},
                                        {"cosine", MC_LR_COSINE},
                                        {"inverse-square-root", MC_LR_INVERSE_SQRT},
                                        {"WSD", MC_LR_WSD},
                                        {NULL, 0}};
static const mc_arg_choice k_wsd[] = {{"linear", MC_WSD_LINEAR},
                                      {"cosine", MC_WSD_COSINE},
                                      {"exponential", MC_WSD_EXPONENTIAL},
                                      {"minus_sqrt", MC_WSD_MINUS_SQRT},
                                      {NULL, 0}};
static const mc_arg_choice k_wd_incr[] = {{"constant", 0}, {"linear", 1}, {"cosine", 2}, {NULL, 0}};
static const mc_arg_choice k_dist[] = {{"nccl", MC_DIST_NCCL}, {"mpi", MC_DIST_MPI}, {"gloo", MC_DIST_MPI}, {NULL, 0}};
static const mc_arg_choice k_device[] = {
    {"auto", MC_DEVICE_AUTO}, {"cpu", MC_DEVICE_CPU_ONLY}, {"cuda", MC_DEVICE_CUDA_ONLY}, {NULL, 0}};
static const mc_arg_choice k_tokenizers[] = {{"NullTokenizer", MC_TOKENIZER_NULL},
                                             {"ByteLevelTokenizer", MC_TOKENIZER_BYTE},
                                             {"GPT2BPETokenizer", MC_TOKENIZER_GPT2BPE},
                                             {"HuggingFaceTokenizer", MC_TOKENIZER_HF},
                                             {"SentencePieceTokenizer", MC_TOKENIZER_SENTENCEPIECE},
                                             {"GPTSentencePieceTokenizer", MC_TOKENIZER_SENTENCEPIECE},
                                             {"Llama2Tokenizer", MC_TOKENIZER_SENTENCEPIECE},
                                             {NULL, 0}};
static const mc_arg_choice k_optimizers[] = {{"adam", 0}, {NULL, 0}};
/* The CHOICE binds an int; "full" (whole-layer recompute) is rejected in config.c. */
static const mc_arg_choice k_recompute[] = {{"selective", 1}, {"full", 2}, {NULL, 0}};
static const mc_arg_choice k_signals[] = {
    {"SIGTERM", SIGTERM}, {"SIGINT", SIGINT}, {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}, {NULL, 0}};
static const mc_arg_choice k_dataloader[] = {{"single", 0}, {"cyclic", 1}, {NULL, 0}};

#define NOT_DIST "multi-rank training arrives with the MPI/NCCL transport (Distributed training I)"
#define NOT_FP8 "fp8 training is not in this version yet"
#define NOT_MOE "mixture-of-experts layers are not in this version yet"
#define NOT_PP "pipeline parallelism is not in this version yet"

static const mc_arg_spec k_flags[] = {
    /* ---- model ---- */
    {"--num-layers", MC_ARG_INT, F(model.num_layers), "transformer layers", RANGE(1, 1e6)},
    {"--hidden-size", MC_ARG_INT, F(model.hidden_size), "hidden size", RANGE(1, 1e7)},
    {"--ffn-hidden-size", MC_ARG_INT, F(model.ffn_hidden_size), "MLP hidden size (default 4h; 8h/3 rounded to 64 with --swiglu)", RANGE(1, 1e8)},
    {"--num-attention-heads", MC_ARG_INT, F(model.num_attention_heads), "attention heads", RANGE(1, 1e5)},
    {"--group-query-attention", MC_ARG_TRUE, F(model.group_query_attention), "grouped-query attention"},
    {"--num-query-groups", MC_ARG_INT, F(model.num_query_groups), "key/value groups with --group-query-attention", RANGE(1, 1e5)},
    {"--kv-channels", MC_ARG_INT, F(model.kv_channels), "head dim (default hidden/heads)", RANGE(1, 1e5)},
    {"--seq-length", MC_ARG_INT, F(model.seq_length), "sequence length", RANGE(1, 1e8)},
    {"--max-position-embeddings", MC_ARG_INT, F(model.max_position_embeddings), "positions (default seq length)", RANGE(1, 1e8)},
    {"--normalization", MC_ARG_CHOICE, F(model.normalization), "normalization", .choices = k_norms},
    {"--norm-epsilon", MC_ARG_FLOAT, F(model.norm_epsilon), "norm epsilon", RANGE(0, 1)},
    {"--layernorm-epsilon", MC_ARG_FLOAT, F(model.norm_epsilon), "legacy name of --norm-epsilon", RANGE(0, 1)},
    {"--position-embedding-type", MC_ARG_CHOICE, F(model.position_embedding_type), "positions", .choices = k_pos},
    {"--rotary-base", MC_ARG_FLOAT, F(model.rotary_base), "RoPE theta", RANGE(1, 1e12)},
    {"--rotary-percent", MC_ARG_FLOAT, F(model.rotary_percent), "fraction of head dims rotated", RANGE(1e-6, 1)},
    {"--use-rope-scaling", MC_ARG_TRUE, F(model.use_rope_scaling), "Llama 3.1 RoPE frequency scaling"},
    {"--rope-scaling-factor", MC_ARG_FLOAT, F(model.rope_scaling_factor), "Llama 3.1 scaling factor", RANGE(1, 1e6)},
    {"--swiglu", MC_ARG_TRUE, F(model.swiglu), "SwiGLU MLP (fc1 outputs 2 x ffn)"},
    {"--openai-gelu", MC_ARG_TRUE, F(model.openai_gelu), "tanh-approximated GELU (GPT-2's); default is the exact erf GELU"},
    {"--untie-embeddings-and-output-weights", MC_ARG_TRUE, F(model.untie_embeddings_and_output_weights), "separate LM head"},
    {"--disable-bias-linear", MC_ARG_FALSE, F(model.add_bias_linear), "no biases in linear layers"},
    {"--add-bias-linear", MC_ARG_TRUE, F(model.add_bias_linear), "biases in linear layers (default)"},
    {"--init-method-std", MC_ARG_FLOAT, F(model.init_method_std), "std of the normal init", RANGE(0, 10)},
    {"--attention-dropout", MC_ARG_FLOAT, F(model.attention_dropout), "dropout on attention probabilities", RANGE(0, 0.999)},
    {"--hidden-dropout", MC_ARG_FLOAT, F(model.hidden_dropout), "dropout on the residual branches", RANGE(0, 0.999)},
    {"--make-vocab-size-divisible-by", MC_ARG_INT, F(model.make_vocab_size_divisible_by), "vocab padding multiple (x TP)", RANGE(1, 1e6)},
    {"--vocab-size", MC_ARG_INT, F(model.vocab_size), "vocabulary (NullTokenizer)", RANGE(2, 1e9)},
    {"--no-position-embedding", MC_ARG_NOTE, 0, NULL, .nvalues = 0,
     .note = "legacy flag; use --position-embedding-type rope|none (ignored)"},
    {"--apply-query-key-layer-scaling", MC_ARG_NOTE, 0, NULL, .nvalues = 0,
     .note = "softmax is computed in fp32 with scale 1/sqrt(d); the scaling changes nothing (ignored)"},
    {"--attention-softmax-in-fp32", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "attention softmax is always fp32"},
    {"--qk-layernorm", MC_ARG_NOT_YET, 0, NULL, .nvalues = 0, .note = "query/key layernorm is not in this version yet"},
    {"--apply-layernorm-1p", MC_ARG_NOT_YET, 0, NULL, .nvalues = 0, .note = "layernorm-1p is not in this version yet"},
    {"--num-experts", MC_ARG_NOT_YET, 0, NULL, .nvalues = 1, .note = NOT_MOE},
    {"--moe-router-topk", MC_ARG_NOT_YET, 0, NULL, .nvalues = 1, .note = NOT_MOE},
    {"--moe-grouped-gemm", MC_ARG_NOT_YET, 0, NULL, .nvalues = 0, .note = NOT_MOE},
    {"--moe-aux-loss-coeff", MC_ARG_NOT_YET, 0, NULL, .nvalues = 1, .note = NOT_MOE},
    {"--moe-token-dispatcher-type", MC_ARG_NOT_YET, 0, NULL, .nvalues = 1, .note = NOT_MOE},
    {"--moe-router-load-balancing-type", MC_ARG_NOT_YET, 0, NULL, .nvalues = 1, .note = NOT_MOE},

    /* ---- fusions and implementation choices: ours are fixed, so these are notes ---- */
    {"--use-mcore-models", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "Megatron-C has one model implementation (ignored)"},
    {"--transformer-impl", MC_ARG_NOTE, 0, NULL, .nvalues = 1, .note = "Megatron-C has one transformer implementation (ignored)"},
    {"--attention-backend", MC_ARG_NOTE, 0, NULL, .nvalues = 1, .note = "attention is always flash-style (ignored)"},
    {"--use-flash-attn", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "attention is always flash-style (ignored)"},
    {"--no-masked-softmax-fusion", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "fusions are chosen by the backend (ignored)"},
    {"--no-bias-gelu-fusion", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "fusions are chosen by the backend (ignored)"},
    {"--no-bias-swiglu-fusion", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "fusions are chosen by the backend (ignored)"},
    {"--no-bias-dropout-fusion", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "fusions are chosen by the backend (ignored)"},
    {"--no-rope-fusion", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "fusions are chosen by the backend (ignored)"},
    {"--no-gradient-accumulation-fusion", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "gradients always accumulate in fp32 in place (ignored)"},
    {"--no-persist-layer-norm", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "fusions are chosen by the backend (ignored)"},
    {"--cross-entropy-loss-fusion", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "the cross-entropy is always fused (ignored)"},
    {"--masked-softmax-fusion", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "fusions are chosen by the backend (ignored)"},
    {"--no-check-for-nan-in-loss-and-grad", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "NaN losses and gradients are always checked (with --fp16: the step is skipped) (ignored)"},
    {"--check-for-nan-in-loss-and-grad", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "NaN losses and gradients are always checked (with --fp16: the step is skipped)"},
    {"--manual-gc", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "there is no garbage collector (ignored)"},
    {"--empty-unused-memory-level", MC_ARG_NOTE, 0, NULL, .nvalues = 1, .note = "memory is planned up front (ignored)"},
    {"--distributed-backend", MC_ARG_CHOICE, F(parallel.distributed_backend), "what carries GPU memory between ranks: nccl, or mpi (gloo: the same) through host memory, so that several ranks can share one GPU; host memory always goes over MPI", .choices = k_dist},
    {"--use-cpu-initialization", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "weights are always initialized on the host, identically for every layout"},
    {"--num-workers", MC_ARG_NOTE, 0, NULL, .nvalues = 1, .note = "one loader thread prefetches batches (ignored)"},
    {"--no-create-attention-mask-in-dataloader", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "causal masks are never materialized (ignored)"},
    {"--bf16", MC_ARG_TRUE, F(precision.bf16), "bf16 mixed precision (CUDA backend; the CPU trains in fp32)"},
    {"--fp16", MC_ARG_TRUE, F(precision.fp16), "fp16 mixed precision with loss scaling (CUDA backend; the CPU computes in fp32 and still scales)"},
    {"--fp8-format", MC_ARG_NOT_YET, 0, NULL, .nvalues = 1, .note = NOT_FP8},
    {"--fp8-hybrid", MC_ARG_NOT_YET, 0, NULL, .nvalues = 0, .note = NOT_FP8 " (alias of --fp8-format hybrid)"},
    {"--fp8-recipe", MC_ARG_NOT_YET, 0, NULL, .nvalues = 1, .note = NOT_FP8},
    {"--fp8-amax-history-len", MC_ARG_NOT_YET, 0, NULL, .nvalues = 1, .note = NOT_FP8},
    {"--fp8-amax-compute-algo", MC_ARG_NOT_YET, 0, NULL, .nvalues = 1, .note = NOT_FP8},
    {"--fp8-param-gather", MC_ARG_NOT_YET, 0, NULL, .nvalues = 0, .note = NOT_FP8},
    {"--recompute-granularity", MC_ARG_CHOICE, F(train.recompute_granularity), "selective: also recompute GELU's activation in backward (norm outputs and SwiGLU's activation always are, at no cost)", .choices = k_recompute},
    {"--recompute-activations", MC_ARG_TRUE, F(train.recompute_activations), "legacy name of --recompute-granularity selective"},
    {"--recompute-modules", MC_ARG_NOTE, 0, NULL, .nvalues = -1, .note = "norm outputs and SwiGLU's activation are always recomputed, GELU's with selective (attention is flash-style and stores no probabilities)"},
    {"--recompute-method", MC_ARG_NOT_YET, 0, NULL, .nvalues = 1, .note = "full-layer recomputation is not in this version yet"},
    {"--recompute-num-layers", MC_ARG_NOT_YET, 0, NULL, .nvalues = 1, .note = "full-layer recomputation is not in this version yet"},

    /* ---- training ---- */
    {"--micro-batch-size", MC_ARG_INT, F(train.micro_batch_size), "samples per micro-batch per DP rank", RANGE(1, 1e7)},
    {"--batch-size", MC_ARG_INT, F(train.micro_batch_size), "legacy name of --micro-batch-size", RANGE(1, 1e7)},
    {"--global-batch-size", MC_ARG_INT, F(train.global_batch_size), "samples per iteration (default mbs x DP)", RANGE(1, 1e9)},
    {"--rampup-batch-size", MC_ARG_NOT_YET, 0, NULL, .nvalues = 3, .note = "batch-size ramp-up is not in this version yet"},
    {"--train-iters", MC_ARG_INT64, F(train.train_iters), "iterations to train", RANGE(0, 1e15)},
    {"--train-samples", MC_ARG_INT64, F(train.train_samples), "samples to train (instead of --train-iters)", RANGE(0, 1e15)},
    {"--seed", MC_ARG_INT64, F(train.seed), "random seed (init, dropout, data order)", RANGE(0, 4294967295.0)},
    {"--eval-interval", MC_ARG_INT64, F(train.eval_interval), "iterations between validations", RANGE(1, 1e15)},
    {"--eval-iters", MC_ARG_INT64, F(train.eval_iters), "global batches per validation", RANGE(0, 1e15)},
    {"--log-interval", MC_ARG_INT64, F(train.log_interval), "iterations between log lines", RANGE(1, 1e15)},
    {"--exit-interval", MC_ARG_INT64, F(train.exit_interval), "stop after an iteration divisible by this", RANGE(1, 1e15)},
    {"--device", MC_ARG_CHOICE, F(train.device), "where to train (default: cuda when a GPU is present)", .choices = k_device},
    {"--deterministic-mode", MC_ARG_TRUE, F(train.deterministic_mode), "bitwise-reproducible runs"},

    /* ---- optimizer and schedules ---- */
    {"--optimizer", MC_ARG_CHOICE, F(optim.optimizer), "optimizer (adam = AdamW)", .choices = k_optimizers},
    {"--lr", MC_ARG_DOUBLE, F(optim.lr), "peak learning rate", RANGE(0, 1e6)},
    {"--min-lr", MC_ARG_DOUBLE, F(optim.min_lr), "final learning rate", RANGE(0, 1e6)},
    {"--lr-decay-style", MC_ARG_CHOICE, F(optim.lr_decay_style), "LR decay", .choices = k_decay},
    {"--lr-decay-iters", MC_ARG_INT64, F(optim.lr_decay_iters), "decay horizon in iterations", RANGE(1, 1e15)},
    {"--lr-decay-samples", MC_ARG_INT64, F(optim.lr_decay_samples), "decay horizon in samples", RANGE(1, 1e15)},
    {"--lr-warmup-iters", MC_ARG_INT64, F(optim.lr_warmup_iters), "linear warmup iterations", RANGE(0, 1e15)},
    {"--lr-warmup-samples", MC_ARG_INT64, F(optim.lr_warmup_samples), "linear warmup samples", RANGE(0, 1e15)},
    {"--lr-warmup-fraction", MC_ARG_DOUBLE, F(optim.lr_warmup_fraction), "warmup as a fraction of the decay", RANGE(0, 1)},
    {"--lr-warmup-init", MC_ARG_DOUBLE, F(optim.lr_warmup_init), "learning rate at the start of warmup", RANGE(0, 1e6)},
    {"--lr-wsd-decay-style", MC_ARG_CHOICE, F(optim.lr_wsd_decay_style), "WSD anneal shape", .choices = k_wsd},
    {"--lr-wsd-decay-iters", MC_ARG_INT64, F(optim.lr_wsd_decay_iters), "WSD anneal iterations", RANGE(1, 1e15)},
    {"--lr-wsd-decay-samples", MC_ARG_INT64, F(optim.lr_wsd_decay_samples), "WSD anneal samples", RANGE(1, 1e15)},
    {"--weight-decay", MC_ARG_FLOAT, F(optim.weight_decay), "decoupled weight decay (not on norms, biases)", RANGE(0, 1e3)},
    {"--start-weight-decay", MC_ARG_FLOAT, F(optim.start_weight_decay), "weight decay at the start", RANGE(0, 1e3)},
    {"--end-weight-decay", MC_ARG_FLOAT, F(optim.end_weight_decay), "weight decay at the end", RANGE(0, 1e3)},
    {"--weight-decay-incr-style", MC_ARG_CHOICE, F(optim.weight_decay_incr_style), "weight decay schedule", .choices = k_wd_incr},
    {"--adam-beta1", MC_ARG_FLOAT, F(optim.adam_beta1), "Adam beta1", RANGE(0, 0.999999)},
    {"--adam-beta2", MC_ARG_FLOAT, F(optim.adam_beta2), "Adam beta2", RANGE(0, 0.999999999)},
    {"--adam-eps", MC_ARG_FLOAT, F(optim.adam_eps), "Adam epsilon", RANGE(0, 1)},
    {"--clip-grad", MC_ARG_FLOAT, F(optim.clip_grad), "global gradient-norm clip (0: off)", RANGE(0, 1e12)},
    {"--no-store-param-remainders", MC_ARG_FALSE, F(optim.store_param_remainders),
     "with --bf16, a separate fp32 master copy (4 B/param) instead of the bf16 params' 16-bit remainders (2 B/param, "
     "the same values; Megatron-Core's store_param_remainders)"},
    {"--cpu-optimizer", MC_ARG_NOT_YET, 0, NULL, .nvalues = 0, .note = "optimizer offload arrives with the memory work (alias of --optimizer-cpu-offload)"},
    {"--optimizer-cpu-offload", MC_ARG_NOT_YET, 0, NULL, .nvalues = 0, .note = "optimizer offload arrives with the memory work"},
    {"--cpu-optimizer-type", MC_ARG_NOT_YET, 0, NULL, .nvalues = 1, .note = "optimizer offload arrives with the memory work"},
    {"--use-precision-aware-optimizer", MC_ARG_NOT_YET, 0, NULL, .nvalues = 0, .note = "the precision-aware optimizer is not in this version yet"},
    /* Scales are fp32 in Megatron: positive normal floats. */
    {"--loss-scale", MC_ARG_DOUBLE, F(precision.loss_scale), "--fp16: constant loss scale (default: dynamic)", RANGE(FLT_MIN, FLT_MAX)},
    {"--initial-loss-scale", MC_ARG_DOUBLE, F(precision.initial_loss_scale), "--fp16: first dynamic loss scale (2^32)", RANGE(FLT_MIN, FLT_MAX)},
    {"--min-loss-scale", MC_ARG_DOUBLE, F(precision.min_loss_scale), "--fp16: smallest dynamic loss scale", RANGE(FLT_MIN, FLT_MAX)},
    {"--loss-scale-window", MC_ARG_INT64, F(precision.loss_scale_window), "--fp16: clean steps before the dynamic scale doubles", RANGE(1, 1e15)},
    {"--hysteresis", MC_ARG_INT, F(precision.hysteresis), "--fp16: overflows tolerated before the dynamic scale halves", RANGE(1, 1e6)},

    /* ---- parallelism ---- */
    {"--tensor-model-parallel-size", MC_ARG_INT, F(parallel.tensor_model_parallel_size), "TP", RANGE(1, 1e6)},
    {"--pipeline-model-parallel-size", MC_ARG_INT, F(parallel.pipeline_model_parallel_size), "PP", RANGE(1, 1e6)},
    {"--context-parallel-size", MC_ARG_INT, F(parallel.context_parallel_size), "CP", RANGE(1, 1e6)},
    {"--expert-model-parallel-size", MC_ARG_INT, F(parallel.expert_model_parallel_size), "EP", RANGE(1, 1e6)},
    {"--sequence-parallel", MC_ARG_TRUE, F(parallel.sequence_parallel), "sequence parallel (needs TP > 1)"},
    {"--use-distributed-optimizer", MC_ARG_TRUE, F(parallel.use_distributed_optimizer), "shard optimizer state over DP"},
    {"--overlap-grad-reduce", MC_ARG_TRUE, F(parallel.overlap_grad_reduce), "overlap DP gradient reduction with backward"},
    {"--overlap-param-gather", MC_ARG_TRUE, F(parallel.overlap_param_gather), "overlap parameter all-gather with forward"},
    {"--ddp-bucket-size", MC_ARG_INT64, F(parallel.ddp_bucket_size), "elements per gradient bucket", RANGE(1, 1e15)},
    {"--accumulate-allreduce-grads-in-fp32", MC_ARG_TRUE, F(parallel.accumulate_allreduce_grads_in_fp32), "fp32 gradient reduction (always on)"},
    {"--distributed-timeout-minutes", MC_ARG_INT, F(parallel.distributed_timeout_minutes), "collective timeout", RANGE(1, 1e6)},
    {"--num-layers-per-virtual-pipeline-stage", MC_ARG_NOT_YET, 0, NULL, .nvalues = 1, .note = NOT_PP},
    {"--num-virtual-stages-per-pipeline-rank", MC_ARG_NOT_YET, 0, NULL, .nvalues = 1, .note = NOT_PP},
    {"--expert-tensor-parallel-size", MC_ARG_NOT_YET, 0, NULL, .nvalues = 1, .note = NOT_MOE},
    {"--cp-comm-type", MC_ARG_NOT_YET, 0, NULL, .nvalues = -1, .note = "context parallelism is not in this version yet"},
    {"--tp-comm-overlap", MC_ARG_NOT_YET, 0, NULL, .nvalues = 0, .note = "TP communication overlap is not in this version yet"},
    {"--use-torch-fsdp2", MC_ARG_NOT_YET, 0, NULL, .nvalues = 0, .note = "FSDP is not supported; use --use-distributed-optimizer"},
    {"--grad-reduce-in-bf16", MC_ARG_NOT_YET, 0, NULL, .nvalues = 0, .note = "bf16 gradient reduction is not in this version yet"},

    /* ---- data ---- */
    {"--mock-data", MC_ARG_TRUE, F(data.mock_data), "Megatron's synthetic sequences (with NullTokenizer)"},
    {"--data-path", MC_ARG_LIST, F(data.data_path), "[weight] prefix ... of .bin/.idx datasets"},
    {"--split", MC_ARG_STRING, F(data.split), "train,valid,test proportions, e.g. 969,30,1"},
    {"--data-cache-path", MC_ARG_STRING, F(data.data_cache_path), "where dataset index caches go"},
    {"--tokenizer-type", MC_ARG_CHOICE, F(data.tokenizer_type), "tokenizer", .choices = k_tokenizers},
    {"--vocab-file", MC_ARG_STRING, F(data.vocab_file), "GPT-2 vocab.json"},
    {"--merge-file", MC_ARG_STRING, F(data.merge_file), "GPT-2 merges.txt"},
    {"--tokenizer-model", MC_ARG_STRING, F(data.tokenizer_model), "tokenizer.json / tokenizer.model"},
    {"--text-data-path", MC_ARG_STRING, F(data.text_data_path), "plain text file, byte-level tokens (Megatron-C extension)"},
    {"--eod-mask-loss", MC_ARG_TRUE, F(data.eod_mask_loss), "no loss on EOD tokens"},
    {"--reset-position-ids", MC_ARG_TRUE, F(data.reset_position_ids), "positions restart after EOD"},
    {"--reset-attention-mask", MC_ARG_TRUE, F(data.reset_attention_mask), "documents do not attend across EOD"},
    {"--dataloader-type", MC_ARG_CHOICE, F(data.dataloader_type), "sampler (single: Megatron's sequential sampler)", .choices = k_dataloader},
    {"--train-data-path", MC_ARG_LIST, F(data.train_data_path), "[weight] prefix ... of the train split (no --split)"},
    {"--valid-data-path", MC_ARG_LIST, F(data.valid_data_path), "[weight] prefix ... of the validation split"},
    {"--test-data-path", MC_ARG_LIST, F(data.test_data_path), "[weight] prefix ... of the test split"},
    {"--tokenizer-hf-no-include-special-tokens", MC_ARG_TRUE, F(data.tokenizer_hf_no_include_special_tokens), "HuggingFaceTokenizer: no BOS/EOS from the post-processor"},
    {"--data-args-path", MC_ARG_NOT_YET, 0, NULL, .nvalues = 1, .note = "reading the blend from a file is not in this version yet; pass --data-path"},
    {"--per-split-data-args-path", MC_ARG_NOT_YET, 0, NULL, .nvalues = 1, .note = "reading the blends from a file is not in this version yet; pass --train-data-path etc."},
    {"--mmap-bin-files", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = ".bin files are always mmap'd"},
    {"--no-mmap-bin-files", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = ".bin files are always mmap'd (ignored)"},
    {"--num-dataset-builder-threads", MC_ARG_NOTE, 0, NULL, .nvalues = 1, .note = "dataset indices are built on one thread (ignored)"},
    {"--legacy-tokenizer", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "one tokenizer implementation (ignored)"},

    /* ---- checkpoints ---- */
    {"--save", MC_ARG_STRING, F(ckpt.save), "directory to save checkpoints in (iter_0000100/, latest_checkpointed_iteration.txt)"},
    {"--load", MC_ARG_STRING, F(ckpt.load), "directory to resume from (its newest valid checkpoint; none there: start fresh)"},
    {"--save-interval", MC_ARG_INT64, F(ckpt.save_interval), "iterations between checkpoints (default: at the end and at early exits only)", RANGE(1, 1e15)},
    {"--no-save-optim", MC_ARG_TRUE, F(ckpt.no_save_optim), "save the weights without Adam's state"},
    {"--no-save-rng", MC_ARG_TRUE, F(ckpt.no_save_rng), "save no RNG state"},
    {"--no-load-optim", MC_ARG_TRUE, F(ckpt.no_load_optim), "load the weights but not Adam's state or the LR schedule"},
    {"--no-load-rng", MC_ARG_TRUE, F(ckpt.no_load_rng), "keep this run's --seed for dropout instead of the checkpoint's"},
    {"--finetune", MC_ARG_TRUE, F(ckpt.finetune), "load the weights only and start at iteration 0"},
    {"--ckpt-step", MC_ARG_INT64, F(ckpt.ckpt_step), "load this iteration instead of the newest", RANGE(0, 1e15)},
    {"--async-save", MC_ARG_TRUE, F(ckpt.async_save), "write checkpoints in the background while training goes on"},
    {"--pretrained-checkpoint", MC_ARG_STRING, F(ckpt.pretrained_checkpoint), "checkpoint to start from (weights only) when --load holds none"},
    {"--exit-on-missing-checkpoint", MC_ARG_TRUE, F(ckpt.exit_on_missing_checkpoint), "fail when --load holds no checkpoint"},
    {"--override-opt_param-scheduler", MC_ARG_TRUE, F(ckpt.override_opt_param_scheduler), "on load, take the LR schedule from the flags"},
    {"--override-opt-param-scheduler", MC_ARG_TRUE, F(ckpt.override_opt_param_scheduler), "alias of --override-opt_param-scheduler"},
    {"--use-checkpoint-opt_param-scheduler", MC_ARG_TRUE, F(ckpt.use_checkpoint_opt_param_scheduler), "on load, take the LR schedule from the checkpoint"},
    {"--use-checkpoint-opt-param-scheduler", MC_ARG_TRUE, F(ckpt.use_checkpoint_opt_param_scheduler), "alias of --use-checkpoint-opt_param-scheduler"},
    {"--exit-duration-in-mins", MC_ARG_DOUBLE, F(train.exit_duration_in_mins), "stop (saving first) after this many minutes", RANGE(1e-9, 1e12)},
    {"--exit-signal-handler", MC_ARG_TRUE, F(train.exit_signal_handler), "on --exit-signal: finish the iteration, save, exit 0"},
    {"--exit-signal", MC_ARG_CHOICE, F(train.exit_signal), "the signal of --exit-signal-handler (default SIGTERM; mpirun forwards SIGUSR1/SIGUSR2 to its ranks)", .choices = k_signals},
    {"--ckpt-format", MC_ARG_NOTE, 0, NULL, .nvalues = 1, .note = "Megatron-C writes its own pickle-free format, loadable under any parallel layout (ignored)"},
    {"--use-dist-ckpt", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "checkpoints are always sharded and reshardable (ignored)"},
    {"--auto-detect-ckpt-format", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "Megatron-C reads its own format only (ignored)"},
    {"--dist-ckpt-strictness", MC_ARG_NOTE, 0, NULL, .nvalues = 1, .note = "every tensor must be present and fit (ignored)"},
    {"--ckpt-fully-parallel-save", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "every rank always writes its own file (ignored)"},
    {"--ckpt-fully-parallel-load", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "every rank always reads what it needs (ignored)"},
    {"--ckpt-assume-constant-structure", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "the save plan is cheap to compute (ignored)"},
    {"--non-persistent-save-interval", MC_ARG_NOT_YET, 0, NULL, .nvalues = 1, .note = "non-persistent (local) checkpoints are not in this version yet"},

    /* ---- logging ---- */
    {"--log-dir", MC_ARG_STRING, F(log.log_dir), "write every logged metric to DIR/metrics.jsonl (Megatron-C extension)"},
    {"--log-throughput", MC_ARG_TRUE, F(log.log_throughput), "throughput is always logged"},
    {"--log-params-norm", MC_ARG_TRUE, F(log.log_params_norm), "log the parameter norm"},
    {"--log-num-zeros-in-grad", MC_ARG_TRUE, F(log.log_num_zeros_in_grad), "log the number of zero gradients"},
    {"--timing-log-level", MC_ARG_INT, F(log.timing_log_level), "timer detail (0-2)", RANGE(0, 2)},
    {"--peak-tflops", MC_ARG_DOUBLE, F(log.peak_tflops), "peak TFLOP/s per device for MFU (default: measured on CPU, 989 on H100/H200)", RANGE(1e-6, 1e9)},
    {"--export-params", MC_ARG_STRING, F(log.export_params), "after training, write the full parameters as safetensors (Megatron names; Megatron-C extension)"},
    {"--sample-prompt", MC_ARG_STRING, F(log.sample_prompt), "after training, print a continuation of this text (Megatron-C extension)"},
    {"--sample-tokens", MC_ARG_INT, F(log.sample_tokens), "tokens to generate for --sample-prompt", RANGE(1, 1e6)},
    {"--sample-temperature", MC_ARG_DOUBLE, F(log.sample_temperature), "the sample's temperature (default 0: greedy)", RANGE(0, 100)},
    {"--sample-top-k", MC_ARG_INT, F(log.sample_top_k), "draw the sample from the k most likely tokens (default 0: all)", RANGE(0, 1e9)},
    {"--sample-top-p", MC_ARG_DOUBLE, F(log.sample_top_p), "draw the sample from the most likely tokens up to this probability (default 1)", RANGE(1e-6, 1)},
    {"--timing-log-option", MC_ARG_NOTE, 0, NULL, .nvalues = 1, .note = "timers print min/max across ranks (ignored)"},
    {"--tensorboard-dir", MC_ARG_NOTE, 0, NULL, .nvalues = 1, .note = "TensorBoard output is not in this version yet; use --log-dir for a JSONL of every metric (ignored)"},
    {"--tensorboard-log-interval", MC_ARG_NOTE, 0, NULL, .nvalues = 1, .note = "TensorBoard output is not in this version yet (ignored)"},
    {"--log-timers-to-tensorboard", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "TensorBoard output is not in this version yet (ignored)"},
    {"--log-validation-ppl-to-tensorboard", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "TensorBoard output is not in this version yet (ignored)"},
    {"--log-memory-to-tensorboard", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "TensorBoard output is not in this version yet (ignored)"},
    {"--log-world-size-to-tensorboard", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "TensorBoard output is not in this version yet (ignored)"},
    {"--wandb-project", MC_ARG_NOTE, 0, NULL, .nvalues = 1, .note = "Weights & Biases is not supported; use --log-dir (ignored)"},
    {"--wandb-exp-name", MC_ARG_NOTE, 0, NULL, .nvalues = 1, .note = "Weights & Biases is not supported (ignored)"},
    {"--wandb-save-dir", MC_ARG_NOTE, 0, NULL, .nvalues = 1, .note = "Weights & Biases is not supported (ignored)"},
    {"--log-energy", MC_ARG_NOTE, 0, NULL, .nvalues = 0, .note = "energy logging is not supported (ignored)"},
};

#define NFLAGS ((int)(sizeof k_flags / sizeof k_flags[0]))

const mc_arg_spec *mc_flags_table(int *n) {
    *n = NFLAGS;
    return k_flags;
}

int mc_config_parse_args(mc_config *cfg, int argc, char **argv, mc_err *err) {
    return mc_args_parse(k_flags, NFLAGS, cfg, argc, argv, NULL, mc_log_rank() == 0, err);
}

void mc_flags_print_help(void) { mc_args_print_help(k_flags, NFLAGS); }
