/* megatron.h: the public API of libmegatron (Megatron-C).
 *
 * Megatron-C trains GPT- and Llama-style decoder models with Megatron-LM's flags, data
 * formats and log. The `megatron-c` command line is a thin user of this header:
 *
 *     mc_config cfg;
 *     mc_config_init(&cfg);                          // Megatron's defaults
 *     cfg.model.num_layers = 2; ...                  // or mc_config_parse_args(...)
 *     mc_trainer *t = mc_trainer_create(&cfg, &err);
 *     for (int i = 0; i < cfg.train.train_iters; i++) mc_trainer_step(t, &stats, &err);
 *     mc_trainer_free(t);
 *
 * Every function that can fail on user input returns MC_OK (0) or MC_ERR and writes a
 * one-line message into `mc_err`. */
#ifndef MEGATRON_H
#define MEGATRON_H

#include <stdbool.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define MC_VERSION "0.1.0"

#ifndef MC_ERR_TYPE_DEFINED
#define MC_ERR_TYPE_DEFINED
enum { MC_OK = 0, MC_ERR = -1 };
typedef struct mc_err {
    char msg[1024];
} mc_err;
#endif

typedef enum { MC_NORM_LAYERNORM = 0, MC_NORM_RMSNORM } mc_normalization;
typedef enum { MC_POS_LEARNED_ABSOLUTE = 0, MC_POS_ROPE, MC_POS_NONE } mc_position_embedding;
typedef enum {
    MC_LR_CONSTANT = 0,
    MC_LR_LINEAR,
    MC_LR_COSINE,
    MC_LR_INVERSE_SQRT,
    MC_LR_WSD
} mc_lr_decay_style;
typedef enum { MC_WSD_LINEAR = 0, MC_WSD_COSINE, MC_WSD_EXPONENTIAL, MC_WSD_MINUS_SQRT } mc_wsd_decay_style;
typedef enum { MC_DEVICE_AUTO = 0, MC_DEVICE_CPU_ONLY, MC_DEVICE_CUDA_ONLY } mc_device_choice;
/* --distributed-backend: what carries GPU memory between ranks (host memory always goes
 * over MPI): NCCL, or MPI through host staging (several ranks on one GPU; gloo = mpi). */
typedef enum { MC_DIST_NCCL = 0, MC_DIST_MPI } mc_dist_backend;
typedef enum { MC_TOKENIZER_NONE = 0, MC_TOKENIZER_NULL, MC_TOKENIZER_BYTE, MC_TOKENIZER_GPT2BPE,
               MC_TOKENIZER_HF, MC_TOKENIZER_SENTENCEPIECE } mc_tokenizer_type;

/* The model (Megatron's TransformerConfig subset for dense GPT/Llama). */
typedef struct mc_model_config {
    int num_layers;
    int hidden_size;
    int ffn_hidden_size;     /* 0: 4h, or int(8h/3/64)*64 with swiglu (Megatron's rule) */
    int num_attention_heads;
    bool group_query_attention;
    int num_query_groups;    /* used only with group_query_attention */
    int kv_channels;         /* 0: hidden / heads */
    int seq_length;
    int max_position_embeddings; /* 0: seq_length */
    mc_normalization normalization;
    float norm_epsilon;
    mc_position_embedding position_embedding_type;
    float rotary_base;
    float rotary_percent;
    bool use_rope_scaling;   /* Llama 3.1 frequency scaling */
    float rope_scaling_factor;
    bool swiglu;
    bool openai_gelu;        /* tanh-approximated GELU (HF's gelu_new); Megatron's default is erf GELU */
    bool untie_embeddings_and_output_weights;
    bool add_bias_linear;    /* false with --disable-bias-linear */
    float init_method_std;
    float attention_dropout;
    float hidden_dropout;
    int make_vocab_size_divisible_by;
    int vocab_size;          /* unpadded; from the tokenizer or --vocab-size */
} mc_model_config;

typedef struct mc_optim_config {
    int optimizer;                              /* 0: adam (AdamW) */
    double lr, min_lr;
    mc_lr_decay_style lr_decay_style;
    int64_t lr_decay_iters, lr_decay_samples;   /* 0: the training length */
    int64_t lr_warmup_iters, lr_warmup_samples;
    double lr_warmup_fraction;                  /* < 0: unset */
    double lr_warmup_init;
    mc_wsd_decay_style lr_wsd_decay_style;
    int64_t lr_wsd_decay_iters, lr_wsd_decay_samples;
    float weight_decay;
    float start_weight_decay, end_weight_decay; /* < 0: unset (both = weight_decay) */
    int weight_decay_incr_style;                /* 0 constant, 1 linear, 2 cosine */
    float adam_beta1, adam_beta2, adam_eps;
    float clip_grad;                            /* 0: no clipping */
    /* With BF16 parameters, keep the fp32 master as the BF16 parameters plus their 16-bit
     * remainders (Megatron-Core's store_param_remainders; default on): 2 bytes a parameter
     * instead of 4, the master's values exactly. false: a separate fp32 master. */
    bool store_param_remainders;
} mc_optim_config;

typedef struct mc_train_config {
    int micro_batch_size;
    int global_batch_size;                      /* 0: micro_batch_size * dp */
    int64_t train_iters;
    int64_t train_samples;                      /* alternative to train_iters */
    uint64_t seed;
    int64_t eval_interval;                      /* 0: no periodic evaluation */
    int64_t eval_iters;
    int64_t log_interval;
    int64_t exit_interval;                      /* 0: off; stop after an iteration divisible by it */
    double exit_duration_in_mins;               /* 0: off; stop (saving first) once training ran this long */
    bool exit_signal_handler;                   /* on exit_signal: finish the iteration, save, exit 0 */
    int exit_signal;                            /* SIGTERM (Megatron's default), SIGINT, SIGUSR1, SIGUSR2 */
    mc_device_choice device;
    bool deterministic_mode;
    /* --recompute-granularity: 0 none, 1 selective (backward recomputes the norm outputs
     * and the MLP activation instead of keeping them), 2 full (not in this version). */
    int recompute_granularity;
    bool recompute_activations; /* legacy --recompute-activations = selective */
} mc_train_config;

typedef struct mc_data_config {
    bool mock_data;
    mc_tokenizer_type tokenizer_type;
    char *data_path;          /* Megatron's --data-path, space-separated "[w] prefix ..." */
    char *split;              /* e.g. "969,30,1" */
    char *data_cache_path;
    char *vocab_file, *merge_file, *tokenizer_model;
    /* Megatron-C extension: a plain UTF-8 text file, split into documents at blank lines
     * and tokenized with the byte-level tokenizer (256 bytes + EOD). */
    char *text_data_path;
    bool eod_mask_loss, reset_position_ids, reset_attention_mask;
    int dataloader_type;      /* 0: single (Megatron's sequential sampler) */
    /* In-memory corpus of token documents (library users, and the demo): when set, used
     * instead of data_path. Each document is tokens[doc_offsets[i] .. doc_offsets[i+1]). */
    const int32_t *corpus_tokens;
    const int64_t *corpus_doc_offsets;
    int64_t corpus_num_docs;
    /* Megatron's per-split blends (instead of --data-path + --split), "[w] prefix ..." */
    char *train_data_path, *valid_data_path, *test_data_path;
    bool tokenizer_hf_no_include_special_tokens; /* HuggingFaceTokenizer without BOS/EOS */
} mc_data_config;

typedef struct mc_parallel_config {
    int tensor_model_parallel_size;
    int pipeline_model_parallel_size;
    int context_parallel_size;
    int expert_model_parallel_size;
    bool sequence_parallel;
    bool use_distributed_optimizer;
    bool overlap_grad_reduce, overlap_param_gather;
    int64_t ddp_bucket_size;                    /* 0: Megatron's default */
    int distributed_timeout_minutes;
    bool accumulate_allreduce_grads_in_fp32;
    mc_dist_backend distributed_backend;
} mc_parallel_config;

typedef struct mc_log_config {
    char *log_dir;            /* JSONL of every logged metric in log_dir/metrics.jsonl */
    bool log_throughput;
    bool log_params_norm;
    bool log_num_zeros_in_grad;
    int timing_log_level;
    double peak_tflops;       /* 0: measure (CPU sgemm) or 989 on H100/H200 */
    bool quiet;               /* library use: no iteration lines on stdout */
    /* After training, print a greedy continuation of this prompt (Megatron-C extension). */
    char *sample_prompt;
    int sample_tokens;
    /* How the sample's tokens are drawn: temperature 0 is greedy (the most likely token);
     * above 0, from the softmax of logits / temperature, cut to the top_k most likely
     * (0: all) and to the smallest set whose probability reaches top_p (1: all). */
    double sample_temperature;
    int sample_top_k;
    double sample_top_p;
    /* After training, write the parameters here (safetensors; Megatron-C extension). */
    char *export_params;
} mc_log_config;

/* Checkpoints (Megatron's flags; the format is Megatron-C's own, see src/ckpt/ckpt.h). */
typedef struct mc_ckpt_config {
    char *save, *load;            /* directories (SAVE/iter_0000100/, the tracker file) */
    char *pretrained_checkpoint;  /* loaded as with --finetune when --load holds none */
    int64_t save_interval;        /* 0: save only at the end of training and at early exits */
    bool no_save_optim, no_save_rng, no_load_optim, no_load_rng;
    bool finetune;                /* load the weights only; iteration and samples from 0 */
    int64_t ckpt_step;            /* load that iteration instead of the newest; -1: unset */
    bool async_save;              /* write checkpoints in the background */
    bool exit_on_missing_checkpoint;
    bool override_opt_param_scheduler, use_checkpoint_opt_param_scheduler;
} mc_ckpt_config;

typedef struct mc_precision_config {
    bool bf16, fp16;          /* mutually exclusive; fp16 trains with loss scaling */
    /* fp16 loss scaling (Megatron's flags; ignored without fp16). loss_scale > 0 is a
     * constant scale (--loss-scale); 0, Megatron's None, scales dynamically: from
     * initial_loss_scale, halved on overflow once `hysteresis` overflows have been seen
     * (never below min_loss_scale), doubled after loss_scale_window clean steps. */
    double loss_scale;
    double initial_loss_scale;  /* 2^32 */
    double min_loss_scale;      /* 1.0 */
    int64_t loss_scale_window;  /* 1000 */
    int hysteresis;             /* 2 */
} mc_precision_config;

typedef struct mc_config {
    mc_model_config model;
    mc_optim_config optim;
    mc_train_config train;
    mc_data_config data;
    mc_parallel_config parallel;
    mc_precision_config precision;
    mc_log_config log;
    mc_ckpt_config ckpt;
} mc_config;

/* Megatron's defaults (core_v0.15) for every field. */
void mc_config_init(mc_config *cfg);
/* Parses Megatron-style flags (argv[0] is not skipped: pass argv + 1). Unknown flags fail
 * naming the closest known flag; see `megatron-c train --help`. */
int mc_config_parse_args(mc_config *cfg, int argc, char **argv, mc_err *err);
/* Checks the combination (heads divide hidden, gbs % (mbs*dp) == 0, ...) and fills the
 * derived values (ffn size, kv channels, query groups, padded vocab...). */
int mc_config_validate(mc_config *cfg, int world_size, mc_err *err);
/* The data part of mc_config_validate alone (sources, tokenizer, vocabulary), for tools
 * that read data without building a model (megatron-c inspect-data). */
int mc_config_validate_data(mc_config *cfg, mc_err *err);
void mc_config_free(mc_config *cfg);
/* A deep copy (dst owns copies of every string; free it with mc_config_free). */
void mc_config_copy(mc_config *dst, const mc_config *src);
/* A 64-bit digest of the whole configuration (to check that every rank runs the same job). */
uint64_t mc_config_hash(const mc_config *cfg);
/* Vocabulary size padded as Megatron: a multiple of make_vocab_size_divisible_by * TP. */
int mc_config_padded_vocab(const mc_config *cfg);
/* Micro-batches a rank runs a step (the gradient accumulation): global_batch_size /
 * (micro_batch_size * dp) of a validated configuration; 1 where that is not above 1. */
int mc_config_num_microbatches(const mc_config *cfg, int dp);

/* One training iteration's numbers, as the iteration line prints them. */
typedef struct mc_step_stats {
    int64_t iteration;
    int64_t consumed_samples;
    double lm_loss;           /* token-weighted mean over the global batch */
    double grad_norm;         /* before clipping (unscaled with fp16) */
    double learning_rate;     /* used by this iteration's update */
    double elapsed_ms;
    double tflops_per_gpu;
    double tokens_per_sec_per_gpu;
    int64_t num_zeros;
    /* fp16: the gradients overflowed, so the step was skipped (no update, the LR schedule
     * did not advance; grad_norm is then inf or NaN). */
    bool skipped;
    double loss_scale;        /* after this step's update; 1.0 without fp16 */
} mc_step_stats;

typedef struct mc_trainer mc_trainer;

mc_trainer *mc_trainer_create(const mc_config *cfg, mc_err *err);
/* Runs one iteration: global_batch_size / (micro_batch_size * dp) micro-batches of
 * forward and backward, then the optimizer step. Except for the first iteration, it
 * returns with the optimizer step still running on the device (the next call queues behind
 * it), so stats->elapsed_ms counts the previous iteration's update, not its own. */
int mc_trainer_step(mc_trainer *t, mc_step_stats *stats, mc_err *err);
/* Waits for the last iteration's optimizer step (evaluation, export and free do this
 * themselves); its time goes into the next iteration's elapsed_ms. */
void mc_trainer_finish(mc_trainer *t);
/* Mean lm loss over `iters` global batches of the validation (split 1) or test (2) set. */
int mc_trainer_evaluate(mc_trainer *t, int split, int64_t iters, double *loss, mc_err *err);
/* Runs the whole job as `megatron-c train`: the loop, periodic eval, logging, checkpoints
 * (--save, --save-interval) and the early exits (--exit-interval, --exit-duration-in-mins,
 * --exit-signal-handler), which save first. */
int mc_trainer_run(mc_trainer *t, mc_err *err);
/* Writes the parameters as one safetensors file of full F32 tensors with Megatron's names
 * (shards gathered over tensor parallelism); world rank 0 writes, atomically. */
int mc_trainer_export_params(mc_trainer *t, const char *path, mc_err *err);
/* Saves a checkpoint of the current state into cfg.ckpt.save (every rank calls it). */
int mc_trainer_save_checkpoint(mc_trainer *t, mc_err *err);
int64_t mc_trainer_num_params(const mc_trainer *t);
void mc_trainer_free(mc_trainer *t);

const char *mc_version(void);

#ifdef __cplusplus
}
#endif
#endif
