/* config.c: Megatron's defaults, the validation rules of arguments.py/TransformerConfig,
 * and the values derived from them. Every failure names the flag(s) and the rule. */
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/log.h"
#include "data/data.h"
#include "megatron.h"
#include "optim/lr_schedule.h"
#include "tokenizer/tokenizer.h"

void mc_config_init(mc_config *c) {
    memset(c, 0, sizeof *c);
    mc_model_config *m = &c->model;
    m->normalization = MC_NORM_LAYERNORM;
    m->norm_epsilon = 1e-5f;
    m->position_embedding_type = MC_POS_LEARNED_ABSOLUTE;
    m->rotary_base = 10000.0f;
    m->rotary_percent = 1.0f;
    m->rope_scaling_factor = 8.0f;
    m->add_bias_linear = true;
    m->init_method_std = 0.02f;
    m->attention_dropout = 0.1f;
    m->hidden_dropout = 0.1f;
    m->make_vocab_size_divisible_by = 128;
    m->num_query_groups = 1;

    mc_optim_config *o = &c->optim;
    o->lr = -1.0f; /* required */
    o->min_lr = 0.0f;
    o->lr_decay_style = MC_LR_LINEAR;
    o->lr_warmup_fraction = -1.0;
    o->lr_wsd_decay_style = MC_WSD_EXPONENTIAL;
    o->weight_decay = 0.01f;
    o->start_weight_decay = -1.0f;
    o->end_weight_decay = -1.0f;
    o->adam_beta1 = 0.9f;
    o->adam_beta2 = 0.999f;
    o->adam_eps = 1e-8f;
    o->clip_grad = 1.0f;
    o->store_param_remainders = true;

    mc_train_config *t = &c->train;
    t->seed = 1234;
    t->eval_interval = 1000;
    t->eval_iters = 100;
    t->log_interval = 100;
    t->device = MC_DEVICE_AUTO;
    c->log.sample_tokens = 64;
    c->log.sample_top_p = 1.0;
    c->ckpt.ckpt_step = -1;
    c->train.exit_signal = SIGTERM;

    mc_parallel_config *p = &c->parallel;
    p->tensor_model_parallel_size = 1;
    p->pipeline_model_parallel_size = 1;
    p->context_parallel_size = 1;
    p->expert_model_parallel_size = 1;
    p->distributed_timeout_minutes = 10;

    mc_precision_config *pr = &c->precision;
    pr->initial_loss_scale = 4294967296.0; /* 2^32 */
    pr->min_loss_scale = 1.0;
    pr->loss_scale_window = 1000;
    pr->hysteresis = 2;
}

/* Every owned string field of the config: the one list that free, copy and hash use. */
#define MC_CONFIG_STRINGS(c)                                                                             \
    {&(c)->data.data_path,       &(c)->data.split,           &(c)->data.data_cache_path,                \
     &(c)->data.vocab_file,      &(c)->data.merge_file,      &(c)->data.tokenizer_model,                \
     &(c)->data.text_data_path,  &(c)->data.train_data_path, &(c)->data.valid_data_path,                \
     &(c)->data.test_data_path,  &(c)->log.log_dir,          &(c)->log.sample_prompt,                   \
     &(c)->log.export_params,    &(c)->ckpt.save,            &(c)->ckpt.load,                           \
     &(c)->ckpt.pretrained_checkpoint}

void mc_config_free(mc_config *c) {
    char **strs[] = MC_CONFIG_STRINGS(c);
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        free(*strs[i]);
        *strs[i] = NULL;
    }
}

void mc_config_copy(mc_config *dst, const mc_config *src) {
    *dst = *src;
    char **strs[] = MC_CONFIG_STRINGS(dst);
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++)
        if (*strs[i]) *strs[i] = mc_xstrdup(*strs[i]);
}

int mc_config_padded_vocab(const mc_config *c) {
    int64_t multiple = (int64_t)c->model.make_vocab_size_divisible_by * c->parallel.tensor_model_parallel_size;
    int64_t v = c->model.vocab_size;
    return (int)((v + multiple - 1) / multiple * multiple);
}

int mc_config_num_microbatches(const mc_config *c, int dp) {
    const int64_t per_step = (int64_t)c->train.micro_batch_size * (dp > 0 ? dp : 1);
    const int64_t n = per_step > 0 ? c->train.global_batch_size / per_step : 1;
    return n > 1 ? (int)n : 1;
}

/* The vocabulary of a file-based tokenizer (GPT-2 BPE, HF, SentencePiece): Megatron takes
 * the model's vocabulary from the tokenizer, whatever --vocab-size says. */
static int tokenizer_vocab(mc_config *c, mc_err *err) {
    mc_tokenizer_options o = mc_data_tokenizer_options(c);
    mc_tokenizer *t;
    MC_TRY(mc_tokenizer_open(&t, &o, err));
    c->model.vocab_size = mc_tokenizer_vocab_size(t);
    mc_tokenizer_free(t);
    return MC_OK;
}

int mc_config_validate_data(mc_config *c, mc_err *err) {
    mc_data_config *d = &c->data;
    if (d->dataloader_type != 0)
        return mc_err_set(err, "--dataloader-type cyclic: the random (cyclic) sampler is not in this version yet; "
                               "use single (Megatron's default)");
    bool per_split = d->train_data_path || d->valid_data_path || d->test_data_path;
    int sources = (d->mock_data != 0) + (d->data_path != NULL) + (d->text_data_path != NULL) +
                  (d->corpus_tokens != NULL) + per_split;
    if (sources > 1)
        return mc_err_set(err, "--mock-data, --data-path, --train/valid/test-data-path and --text-data-path are "
                               "mutually exclusive (got %d of them)",
                          sources);
    if (sources == 0)
        return mc_err_set(err, "no training data: pass --mock-data (with --tokenizer-type NullTokenizer --vocab-size N), "
                               "--text-data-path FILE, or --data-path PREFIX with its --tokenizer-type");
    if (per_split && d->split)
        return mc_err_set(err, "--split cannot be combined with --train-data-path/--valid-data-path/--test-data-path "
                               "(each of those is used whole)");
    if (per_split && !d->train_data_path)
        return mc_err_set(err, "--valid-data-path/--test-data-path need --train-data-path too");
    if (d->data_path || per_split) {
        switch (d->tokenizer_type) {
        case MC_TOKENIZER_NONE:
            return mc_err_set(err, "--tokenizer-type is required with --data-path (the tokenizer the dataset was "
                                   "preprocessed with)");
        case MC_TOKENIZER_NULL:
            if (c->model.vocab_size <= 1) return mc_err_set(err, "--tokenizer-type NullTokenizer needs --vocab-size N");
            break;
        case MC_TOKENIZER_BYTE:
            if (c->model.vocab_size != 0 && c->model.vocab_size != 257)
                return mc_err_set(err, "--vocab-size %d: the byte-level tokenizer has 257 symbols (256 bytes + EOD)",
                                  c->model.vocab_size);
            c->model.vocab_size = 257;
            break;
        case MC_TOKENIZER_GPT2BPE:
            if (!d->vocab_file || !d->merge_file)
                return mc_err_set(err, "--tokenizer-type GPT2BPETokenizer needs --vocab-file and --merge-file");
            MC_TRY(tokenizer_vocab(c, err));
            break;
        case MC_TOKENIZER_HF:
            if (!d->tokenizer_model)
                return mc_err_set(err, "--tokenizer-type HuggingFaceTokenizer needs --tokenizer-model "
                                       "(tokenizer.json or its directory)");
            MC_TRY(tokenizer_vocab(c, err));
            break;
        case MC_TOKENIZER_SENTENCEPIECE:
            if (!d->tokenizer_model)
                return mc_err_set(err, "--tokenizer-type %s needs --tokenizer-model (a SentencePiece .model)",
                                  "SentencePieceTokenizer");
            MC_TRY(tokenizer_vocab(c, err));
            break;
        }
        return MC_OK;
    }
    if (d->tokenizer_type == MC_TOKENIZER_GPT2BPE || d->tokenizer_type == MC_TOKENIZER_HF ||
        d->tokenizer_type == MC_TOKENIZER_SENTENCEPIECE)
        return mc_err_set(err, "--tokenizer-type: GPT2BPETokenizer, HuggingFaceTokenizer and SentencePiece "
                               "tokenizers read preprocessed --data-path datasets (megatron-c preprocess makes them); "
                               "--mock-data uses NullTokenizer and --text-data-path ByteLevelTokenizer");
    if (d->mock_data) {
        if (d->tokenizer_type == MC_TOKENIZER_NONE) d->tokenizer_type = MC_TOKENIZER_NULL;
        if (d->tokenizer_type != MC_TOKENIZER_NULL)
            return mc_err_set(err, "--mock-data needs --tokenizer-type NullTokenizer in this version");
        if (c->model.vocab_size <= 0)
            return mc_err_set(err, "--mock-data with NullTokenizer needs --vocab-size N");
    }
    if (d->text_data_path) {
        if (d->tokenizer_type == MC_TOKENIZER_NONE) d->tokenizer_type = MC_TOKENIZER_BYTE;
        if (d->tokenizer_type != MC_TOKENIZER_BYTE)
            return mc_err_set(err, "--text-data-path uses the byte-level tokenizer (--tokenizer-type ByteLevelTokenizer)");
        if (c->model.vocab_size != 0 && c->model.vocab_size != 257)
            return mc_err_set(err, "--vocab-size %d: the byte-level tokenizer has 257 symbols (256 bytes + EOD)",
                              c->model.vocab_size);
        c->model.vocab_size = 257;
    }
    if (d->corpus_tokens && c->model.vocab_size <= 0)
        return mc_err_set(err, "an in-memory corpus needs model.vocab_size");
    return MC_OK;
}

static int validate_model(mc_config *c, int tp, mc_err *err) {
    mc_model_config *m = &c->model;
    if (m->num_layers <= 0) return mc_err_set(err, "--num-layers is required");
    if (m->hidden_size <= 0) return mc_err_set(err, "--hidden-size is required");
    if (m->num_attention_heads <= 0) return mc_err_set(err, "--num-attention-heads is required");
    if (m->seq_length <= 0) return mc_err_set(err, "--seq-length is required");
    if (m->kv_channels == 0) {
        if (m->hidden_size % m->num_attention_heads != 0)
            return mc_err_set(err,
                              "--hidden-size %d is not divisible by --num-attention-heads %d (set --kv-channels, or "
                              "make the heads divide the hidden size)",
                              m->hidden_size, m->num_attention_heads);
        m->kv_channels = m->hidden_size / m->num_attention_heads;
    }
    if (!m->group_query_attention) m->num_query_groups = m->num_attention_heads;
    if (m->num_attention_heads % m->num_query_groups != 0)
        return mc_err_set(err, "--num-attention-heads %d must be divisible by --num-query-groups %d",
                          m->num_attention_heads, m->num_query_groups);
    if (m->num_attention_heads % tp != 0)
        return mc_err_set(err, "--num-attention-heads %d must be divisible by --tensor-model-parallel-size %d",
                          m->num_attention_heads, tp);
    if (m->num_query_groups % tp != 0 && tp % m->num_query_groups != 0)
        return mc_err_set(err,
                          "--num-query-groups %d and --tensor-model-parallel-size %d: one must divide the other "
                          "(key/value heads are split, or replicated, across TP ranks)",
                          m->num_query_groups, tp);
    if (m->ffn_hidden_size == 0)
        m->ffn_hidden_size = m->swiglu ? (int)((4.0 * m->hidden_size * 2.0 / 3.0) / 64.0) * 64 : 4 * m->hidden_size;
    if (m->ffn_hidden_size <= 0)
        return mc_err_set(err, "--ffn-hidden-size: the default for --swiglu with --hidden-size %d rounds to 0; set it",
                          m->hidden_size);
    if (m->ffn_hidden_size % tp != 0)
        return mc_err_set(err, "--ffn-hidden-size %d must be divisible by --tensor-model-parallel-size %d",
                          m->ffn_hidden_size, tp);
    if (m->max_position_embeddings == 0) m->max_position_embeddings = m->seq_length;
    if (m->position_embedding_type == MC_POS_LEARNED_ABSOLUTE && m->max_position_embeddings < m->seq_length)
        return mc_err_set(err, "--max-position-embeddings %d is smaller than --seq-length %d",
                          m->max_position_embeddings, m->seq_length);
    if (m->position_embedding_type == MC_POS_ROPE) {
        int rot = (int)(m->kv_channels * m->rotary_percent);
        if (rot < 2 || rot % 2 != 0)
            return mc_err_set(err, "--rotary-percent %g of head dim %d gives %d rotated dims; it must be even and >= 2",
                              m->rotary_percent, m->kv_channels, rot);
        if (m->max_position_embeddings < m->seq_length) m->max_position_embeddings = m->seq_length;
    }
    if (m->vocab_size <= 1) return mc_err_set(err, "vocabulary size is unknown: pass --vocab-size");
    return MC_OK;
}

static int validate_schedule(mc_config *c, mc_err *err) {
    mc_optim_config *o = &c->optim;
    mc_train_config *t = &c->train;
    if (o->lr < 0) return mc_err_set(err, "--lr is required");
    if (o->min_lr > o->lr) return mc_err_set(err, "--min-lr %g is larger than --lr %g", o->min_lr, o->lr);
    if (o->lr_warmup_init > o->lr)
        return mc_err_set(err, "--lr-warmup-init %g is larger than --lr %g", o->lr_warmup_init, o->lr);
    if (t->train_iters > 0 && t->train_samples > 0)
        return mc_err_set(err, "--train-iters and --train-samples are mutually exclusive");
    if (t->train_iters <= 0 && t->train_samples <= 0)
        return mc_err_set(err, "pass --train-iters N (or --train-samples N)");
    bool iter_based = t->train_iters > 0;
    if (iter_based && (o->lr_decay_samples || o->lr_warmup_samples || o->lr_wsd_decay_samples))
        return mc_err_set(err, "with --train-iters use --lr-decay-iters/--lr-warmup-iters/--lr-wsd-decay-iters, not the "
                               "*-samples flags");
    if (!iter_based && (o->lr_decay_iters || o->lr_warmup_iters || o->lr_wsd_decay_iters))
        return mc_err_set(err, "with --train-samples use --lr-decay-samples/--lr-warmup-samples/--lr-wsd-decay-samples, "
                               "not the *-iters flags");
    if (o->lr_warmup_fraction >= 0 && (o->lr_warmup_iters || o->lr_warmup_samples))
        return mc_err_set(err, "--lr-warmup-fraction and --lr-warmup-iters/--lr-warmup-samples are mutually exclusive");
    if (o->lr_decay_style == MC_LR_WSD && !o->lr_wsd_decay_iters && !o->lr_wsd_decay_samples)
        return mc_err_set(err, "--lr-decay-style WSD needs --lr-wsd-decay-iters (or --lr-wsd-decay-samples)");
    if (o->start_weight_decay < 0 && o->end_weight_decay < 0) {
        o->start_weight_decay = o->end_weight_decay = o->weight_decay;
    } else if (o->start_weight_decay < 0 || o->end_weight_decay < 0) {
        return mc_err_set(err, "--start-weight-decay and --end-weight-decay go together");
    }
    if (o->weight_decay_incr_style == 0 && o->start_weight_decay != o->end_weight_decay)
        return mc_err_set(err, "--weight-decay-incr-style constant needs --start-weight-decay == --end-weight-decay");
    if (o->end_weight_decay < o->start_weight_decay)
        return mc_err_set(err, "--end-weight-decay must be >= --start-weight-decay");
    mc_lr_schedule s;
    mc_lr_schedule_init(&s, c);
    if (s.warmup_steps >= s.decay_steps && o->lr_decay_style != MC_LR_CONSTANT)
        return mc_err_set(err,
                          "the LR warmup (%.0f samples) must be shorter than the decay (%.0f samples: "
                          "--lr-decay-iters, or --train-iters, times --global-batch-size)",
                          s.warmup_steps, s.decay_steps);
    if (o->lr_decay_style == MC_LR_WSD && s.wsd_decay_steps > s.decay_steps)
        return mc_err_set(err, "--lr-wsd-decay-iters must not exceed the decay length (--lr-decay-iters or --train-iters)");
    return MC_OK;
}

/* The checkpoint flags (Megatron's arguments.py rules, plus the combinations that would
 * silently do nothing). */
static int validate_ckpt(const mc_config *c, mc_err *err) {
    const mc_ckpt_config *k = &c->ckpt;
    bool load = k->load || k->pretrained_checkpoint;
    if (k->ckpt_step >= 0 && !k->load) return mc_err_set(err, "--ckpt-step %lld needs --load", (long long)k->ckpt_step);
    if (k->finetune && !load) return mc_err_set(err, "--finetune needs --load (or --pretrained-checkpoint)");
    if (k->async_save && !k->save) return mc_err_set(err, "--async-save needs --save");
    if (k->save_interval > 0 && !k->save) return mc_err_set(err, "--save-interval %lld needs --save", (long long)k->save_interval);
    if (k->override_opt_param_scheduler && k->use_checkpoint_opt_param_scheduler)
        return mc_err_set(err, "--override-opt_param-scheduler and --use-checkpoint-opt_param-scheduler are mutually "
                               "exclusive");
    if (k->exit_on_missing_checkpoint && !load)
        return mc_err_set(err, "--exit-on-missing-checkpoint needs --load");
    if (c->train.exit_duration_in_mins < 0)
        return mc_err_set(err, "--exit-duration-in-mins %g must be positive", c->train.exit_duration_in_mins);
    return MC_OK;
}

/* --fp16/--bf16 and the loss-scaling flags (Megatron's arguments.py and the assertions of
 * its DynamicGradScaler). Without --fp16 the loss-scaling flags are ignored, as in
 * Megatron, with a note: launch scripts often keep them while switching to --bf16. */
static int validate_precision(const mc_config *c, mc_err *err) {
    const mc_precision_config *p = &c->precision;
    if (p->fp16 && p->bf16) return mc_err_set(err, "--fp16 and --bf16 are mutually exclusive (choose one precision)");
    if (!p->fp16) {
        mc_config dflt;
        mc_config_init(&dflt);
        const mc_precision_config *d = &dflt.precision;
        if (p->loss_scale != d->loss_scale || p->initial_loss_scale != d->initial_loss_scale ||
            p->min_loss_scale != d->min_loss_scale || p->loss_scale_window != d->loss_scale_window ||
            p->hysteresis != d->hysteresis)
            mc_log_info("note: --loss-scale, --initial-loss-scale, --min-loss-scale, --loss-scale-window and "
                        "--hysteresis apply only with --fp16 (ignored)");
        return MC_OK;
    }
    if (!(p->loss_scale >= 0) || isinf(p->loss_scale))
        return mc_err_set(err, "--loss-scale %.10g must be a positive number (or unset for dynamic scaling)",
                          p->loss_scale);
    if (!(p->initial_loss_scale > 0) || isinf(p->initial_loss_scale))
        return mc_err_set(err, "--initial-loss-scale %.10g must be a positive number", p->initial_loss_scale);
    if (!(p->min_loss_scale > 0) || p->min_loss_scale > p->initial_loss_scale)
        return mc_err_set(err, "--min-loss-scale %.10g must be positive and at most --initial-loss-scale %.10g",
                          p->min_loss_scale, p->initial_loss_scale);
    if (p->loss_scale_window < 1)
        return mc_err_set(err, "--loss-scale-window %lld must be at least 1", (long long)p->loss_scale_window);
    if (p->hysteresis < 1) return mc_err_set(err, "--hysteresis %d must be at least 1", p->hysteresis);
    return MC_OK;
}

int mc_config_validate(mc_config *c, int world_size, mc_err *err) {
    mc_parallel_config *p = &c->parallel;
    int tp = p->tensor_model_parallel_size, pp = p->pipeline_model_parallel_size, cp = p->context_parallel_size;
    if (pp > 1) return mc_err_set(err, "--pipeline-model-parallel-size %d: pipeline parallelism is not in this version yet", pp);
    if (cp > 1) return mc_err_set(err, "--context-parallel-size %d: context parallelism is not in this version yet", cp);
    if (p->expert_model_parallel_size > 1)
        return mc_err_set(err, "--expert-model-parallel-size: mixture-of-experts layers are not in this version yet");
    if (world_size % (tp * pp * cp) != 0)
        return mc_err_set(err,
                          "world size %d is not divisible by --tensor-model-parallel-size %d x "
                          "--pipeline-model-parallel-size %d x --context-parallel-size %d",
                          world_size, tp, pp, cp);
    int dp = world_size / (tp * pp * cp);
    if (p->sequence_parallel && tp == 1) { /* Megatron warns and goes on without it */
        mc_log_info("note: --sequence-parallel: disabling sequence parallelism because the tensor model parallel "
                    "size is 1");
        p->sequence_parallel = false;
    }
    MC_TRY(validate_precision(c, err));
    MC_TRY(validate_ckpt(c, err));
    if (c->train.recompute_activations) c->train.recompute_granularity = 1;
    if (c->train.recompute_granularity == 2)
        return mc_err_set(err, "--recompute-granularity full: whole-layer recomputation is not in this version yet "
                               "(selective is)");
    MC_TRY(mc_config_validate_data(c, err));
    MC_TRY(validate_model(c, tp, err));
    if (p->sequence_parallel && c->model.seq_length % tp != 0)
        return mc_err_set(err, "--sequence-parallel: --seq-length %d must be divisible by --tensor-model-parallel-size %d",
                          c->model.seq_length, tp);
    mc_train_config *t = &c->train;
    if (t->micro_batch_size <= 0) return mc_err_set(err, "--micro-batch-size is required");
    if (t->global_batch_size == 0) t->global_batch_size = t->micro_batch_size * dp;
    if (t->global_batch_size % (t->micro_batch_size * dp) != 0)
        return mc_err_set(err,
                          "--global-batch-size %d must be a multiple of --micro-batch-size %d x data-parallel size %d "
                          "= %d",
                          t->global_batch_size, t->micro_batch_size, dp, t->micro_batch_size * dp);
    if (t->train_samples > 0 && t->train_samples % t->global_batch_size != 0) {
        /* Megatron trains ceil(samples / gbs) iterations; keep it exact and simple. */
        return mc_err_set(err, "--train-samples %lld must be a multiple of --global-batch-size %d",
                          (long long)t->train_samples, t->global_batch_size);
    }
    MC_TRY(validate_schedule(c, err));
    int padded = mc_config_padded_vocab(c);
    if (padded % (int64_t)tp != 0) return mc_err_set(err, "padded vocabulary %d is not divisible by TP %d", padded, tp);
    return MC_OK;
}

const char *mc_version(void) { return MC_VERSION; }

/* FNV-1a over bytes, continuing from h. */
static uint64_t fnv(uint64_t h, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t mc_config_hash(const mc_config *c) {
    /* The scalar fields as bytes (pointers zeroed: they differ between processes), then
     * every string's contents. mc_config_init zeroes the struct, padding included. */
    mc_config copy = *c;
    char **strs[] = MC_CONFIG_STRINGS(&copy);
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < sizeof strs / sizeof strs[0]; i++) {
        const char *s = *strs[i];
        h = fnv(h, s ? s : "", s ? strlen(s) + 1 : 1);
        *strs[i] = NULL;
    }
    copy.data.corpus_tokens = NULL;
    copy.data.corpus_doc_offsets = NULL;
    return fnv(h, &copy, sizeof copy);
}
