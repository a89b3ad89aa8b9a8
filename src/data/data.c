#include "data/data.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/md5.h"
#include "data/blend.h"
#include "data/index_cache.h"
#include "data/indexed_dataset.h"
#include "data/lowlevel.h"
#include "data/npy.h"
#include "data/text_corpus.h"
#include "tokenizer/byte_tokenizer.h"
#include "tokenizer/tokenizer.h"

/* arguments.py's value when --data-path comes without --split (it prints a warning). The
 * text matters: it is part of the cache description. */
#define MEGATRON_LEGACY_DEFAULT_SPLIT "969, 30, 1"

/* What one split reads: nothing, one GPT dataset, or a blend of several. */
typedef struct split_source {
    int n;              /* component GPT datasets (0: absent) */
    int *gpt;           /* (n,) indices into mc_data.gpt */
    bool blended;
    int16_t *dataset_index;         /* (len,) blends only */
    int64_t *dataset_sample_index;  /* (len,) */
    int64_t len;
} split_source;

struct mc_data {
    /* Low-level datasets: one per distinct prefix (or the one mock/memory/text source). */
    int nll;
    mc_lowlevel **ll;
    char **ll_prefix;
    /* Mid-level GPT datasets. */
    int ngpt, gpt_cap;
    mc_gpt_dataset **gpt;
    split_source split[MC_NUM_SPLITS];
    mc_gpt_dataset empty; /* what an absent split shows */

    const char *source; /* for messages */
    char source_buf[512];
    mc_split split_def;
    mc_batch_options opt;
    int vocab_size;
    char tokenizer_desc[96]; /* the flags that gave vocab_size, for messages */
    int seq_length;
    int cache_loaded, cache_built;
};

static const char *const split_names[MC_NUM_SPLITS] = {"train", "valid", "test"};

static int add_lowlevel(mc_data *d, mc_lowlevel *ll, const char *prefix) {
    d->ll = mc_xrealloc(d->ll, (size_t)(d->nll + 1) * sizeof *d->ll);
    d->ll_prefix = mc_xrealloc(d->ll_prefix, (size_t)(d->nll + 1) * sizeof *d->ll_prefix);
    d->ll[d->nll] = ll;
    d->ll_prefix[d->nll] = prefix ? mc_xstrdup(prefix) : NULL;
    return d->nll++;
}

/* The token ids of an indexed dataset must be inside the tokenizer's vocabulary: an id at
 * or above it would fall outside the (vocab-parallel) embedding and read as zeros, a wrong
 * loss without an error (data made by another tokenizer). The dtype settles it when its
 * range fits the vocabulary; otherwise the .bin is scanned, whole up to 1 GiB, else 1 GiB of
 * it in evenly spaced windows. */
#define VOCAB_CHECK_SCAN_BYTES ((size_t)1 << 30)

static int check_token_ids(const mc_data *d, const mc_indexed_dataset *ds, const char *flag, const char *prefix,
                           mc_err *err) {
    int64_t lo, hi;
    mc_idx_dtype_range(ds->dtype, &lo, &hi);
    if (lo >= 0 && hi < d->vocab_size) return MC_OK;
    bool whole = mc_indexed_dataset_token_range(ds, VOCAB_CHECK_SCAN_BYTES, &lo, &hi);
    if (hi < lo || (lo >= 0 && hi < d->vocab_size)) return MC_OK;
    return mc_err_set(err,
                      "%s %s: token id %lld in %s.bin is outside the vocabulary of %s (%d ids; %s tokens%s): the "
                      "data was made with another tokenizer",
                      flag, prefix, (long long)(lo < 0 ? lo : hi), prefix, d->tokenizer_desc, d->vocab_size,
                      mc_idx_dtype_name(ds->dtype), whole ? "" : ", a sample of the file read");
}

/* The indexed dataset at prefix (given by `flag`), opened once however many splits and
 * blends use it. */
static int open_indexed(mc_data *d, const char *flag, const char *prefix, mc_lowlevel **out, mc_err *err) {
    for (int i = 0; i < d->nll; i++)
        if (d->ll_prefix[i] && !strcmp(d->ll_prefix[i], prefix)) {
            *out = d->ll[i];
            return MC_OK;
        }
    mc_lowlevel *ll;
    MC_TRY(mc_lowlevel_open_indexed(&ll, prefix, err));
    if (check_token_ids(d, mc_lowlevel_indexed(ll), flag, prefix, err) != MC_OK) {
        mc_lowlevel_close(ll);
        return MC_ERR;
    }
    add_lowlevel(d, ll, prefix);
    *out = ll;
    return MC_OK;
}

static int add_gpt(mc_data *d) {
    if (d->ngpt == d->gpt_cap) {
        d->gpt_cap = d->gpt_cap ? 2 * d->gpt_cap : 4;
        d->gpt = mc_xrealloc(d->gpt, (size_t)d->gpt_cap * sizeof *d->gpt);
    }
    d->gpt[d->ngpt] = mc_xcalloc(1, sizeof **d->gpt);
    return d->ngpt++;
}

static void split_add_component(split_source *s, int gpt) {
    s->gpt = mc_xrealloc(s->gpt, (size_t)(s->n + 1) * sizeof *s->gpt);
    s->gpt[s->n++] = gpt;
}

/* ---- tokenizer: vocabulary, EOD and cache identity ------------------------------------ */

typedef struct tok_info {
    mc_tokenizer_identity id;
    char vocab_str[32];
} tok_info;

/* Megatron's legacy tokenizer classes (megatron/training/tokenizer/tokenizer.py) and what
 * they record as unique identifiers. */
static void tokenizer_identity(const mc_config *cfg, tok_info *t) {
    const mc_data_config *dc = &cfg->data;
    mc_tokenizer_identity *id = &t->id;
    memset(id, 0, sizeof *id);
    switch (dc->tokenizer_type) {
    case MC_TOKENIZER_GPT2BPE:
        id->cls = "_GPT2BPETokenizer";
        id->npaths = 2;
        id->paths[0] = dc->vocab_file;
        id->paths[1] = dc->merge_file;
        break;
    case MC_TOKENIZER_HF:
        id->cls = "_HuggingFaceTokenizer";
        id->npaths = 1;
        id->paths[0] = dc->tokenizer_model;
        break;
    case MC_TOKENIZER_SENTENCEPIECE:
        id->cls = "_SentencePieceTokenizer";
        id->npaths = 1;
        id->paths[0] = dc->tokenizer_model;
        id->noptions = 1;
        id->option_keys[0] = "vocab_extra_ids";
        id->option_values[0] = "0";
        break;
    case MC_TOKENIZER_NULL:
        id->cls = "_NullTokenizer";
        id->npaths = 1;
        id->paths[0] = NULL;
        id->noptions = 1;
        id->option_keys[0] = "vocab_size";
        snprintf(t->vocab_str, sizeof t->vocab_str, "%d", cfg->model.vocab_size);
        id->option_values[0] = t->vocab_str;
        break;
    default: /* ByteLevelTokenizer: a Megatron-C extension */
        id->cls = "ByteLevelTokenizer";
        break;
    }
}

/* Vocabulary size and EOD of the tokenizer the .bin/.idx files were made with. */
static int tokenizer_vocab_eod(mc_data *d, const mc_config *cfg, mc_err *err) {
    const mc_data_config *dc = &cfg->data;
    switch (dc->tokenizer_type) {
    case MC_TOKENIZER_NONE:
        return mc_err_set(err, "--tokenizer-type is required with --data-path (the tokenizer the dataset was "
                               "preprocessed with: it gives the EOD id and the vocabulary)");
    case MC_TOKENIZER_NULL:
        if (cfg->model.vocab_size <= 1)
            return mc_err_set(err, "--vocab-size: NullTokenizer needs the vocabulary size (at least 2), got %d",
                              cfg->model.vocab_size);
        d->vocab_size = cfg->model.vocab_size;
        d->opt.eod = cfg->model.vocab_size - 1;
        snprintf(d->tokenizer_desc, sizeof d->tokenizer_desc, "--tokenizer-type NullTokenizer --vocab-size %d",
                 d->vocab_size);
        return MC_OK;
    case MC_TOKENIZER_BYTE:
        d->vocab_size = MC_BYTE_TOKENIZER_VOCAB;
        d->opt.eod = MC_BYTE_TOKENIZER_EOD;
        snprintf(d->tokenizer_desc, sizeof d->tokenizer_desc, "--tokenizer-type ByteLevelTokenizer");
        return MC_OK;
    default: {
        mc_tokenizer_options o = mc_data_tokenizer_options(cfg);
        mc_tokenizer *t;
        MC_TRY(mc_tokenizer_open(&t, &o, err));
        d->vocab_size = mc_tokenizer_vocab_size(t);
        d->opt.eod = mc_tokenizer_eod(t);
        snprintf(d->tokenizer_desc, sizeof d->tokenizer_desc, "--tokenizer-type %s", mc_tokenizer_name(t));
        mc_tokenizer_free(t);
        return MC_OK;
    }
    }
}

/* ---- building the splits ------------------------------------------------------------- */

typedef struct build_ctx {
    const mc_config *cfg;
    int64_t want[MC_NUM_SPLITS];
    int rank;
    tok_info tok;
    const char *split_text;    /* NULL for per-split blends */
    const mc_split *split_def; /* NULL for per-split blends */
} build_ctx;

static void gpt_identity(const build_ctx *c, const char *prefix, int64_t num_samples, int k, mc_gpt_identity *id) {
    *id = (mc_gpt_identity){.dataset_path = prefix,
                            .num_samples = num_samples,
                            .index_split = k,
                            .random_seed = c->cfg->train.seed,
                            .sequence_length = c->cfg->model.seq_length,
                            .split = c->split_text,
                            .split_matrix = c->split_def,
                            .tokenizer = &c->tok.id};
}

/* One GPTDataset over sequences [begin, end) of the dataset at prefix, through the cache. */
static int build_gpt(mc_data *d, const build_ctx *c, mc_lowlevel *ll, const char *prefix, int64_t begin,
                     int64_t end, int64_t num_samples, int k, int *out, mc_err *err) {
    int g = add_gpt(d);
    *out = g;
    mc_gpt_identity id;
    gpt_identity(c, prefix, num_samples, k, &id);
    char *desc = mc_gpt_description(&id);
    char *dir = NULL;
    if (c->cfg->data.data_cache_path) {
        dir = mc_xstrdup(c->cfg->data.data_cache_path);
    } else {
        mc_strbuf b = {0};
        mc_strbuf_printf(&b, "%s/cache/GPTDataset_indices", prefix);
        dir = b.s;
    }
    mc_gpt_cache cache = {.dir = dir, .description = desc, .index_split = k, .rank = c->rank};
    mc_gpt_cache_result res;
    int rc = mc_gpt_dataset_build_cached(d->gpt[g], ll, begin, end, num_samples, c->cfg->model.seq_length,
                                         c->cfg->train.seed, &cache, &res, err);
    d->cache_loaded += res == MC_GPT_CACHE_LOADED;
    d->cache_built += res == MC_GPT_CACHE_BUILT;
    free(desc);
    free(dir);
    if (rc != MC_OK) return mc_err_prefix(err, "--data-path %s, %s split: ", prefix, split_names[k]);
    return MC_OK;
}

/* Blending indices of split k over its components, from the cache when one is set. */
static int build_blend_indices(mc_data *d, const build_ctx *c, split_source *s, int k, const mc_blend_spec *spec,
                               const int64_t *num_samples, const double *weights, const int64_t *int_weights,
                               int64_t size, mc_err *err) {
    int64_t n = size >= 0 ? size : 0;
    if (size < 0)
        for (int i = 0; i < s->n; i++) n += int_weights[i];
    s->len = n;
    s->dataset_index = mc_xmalloc((size_t)(n ? n : 1) * sizeof *s->dataset_index);
    s->dataset_sample_index = mc_xmalloc((size_t)(n ? n : 1) * sizeof *s->dataset_sample_index);
    const char *dir = c->cfg->data.data_cache_path;
    char *desc = NULL, md5[33], *path_di = NULL, *path_dsi = NULL;
    bool hit = false;
    int rc = MC_ERR;
    if (dir) {
        mc_gpt_identity *ids = mc_xmalloc((size_t)s->n * sizeof *ids);
        for (int i = 0; i < s->n; i++) gpt_identity(c, spec->prefixes[i], num_samples[i], k, &ids[i]);
        desc = mc_blended_description(ids, s->n, k, weights, int_weights, size);
        free(ids);
        mc_md5_hex(desc, strlen(desc), md5);
        static const char *const affixes[2] = {"dataset_index.npy", "dataset_sample_index.npy"};
        if (mc_cache_probe(dir, md5, "BlendedDataset", split_names[k], desc, affixes, 2, &hit, err) != MC_OK)
            goto done;
        path_di = mc_cache_path(dir, md5, "BlendedDataset", split_names[k], affixes[0]);
        path_dsi = mc_cache_path(dir, md5, "BlendedDataset", split_names[k], affixes[1]);
    }
    if (hit) {
        mc_npy a = {0}, b = {0};
        if (mc_npy_read(path_di, &a, err) != MC_OK) goto done;
        if (mc_npy_read(path_dsi, &b, err) != MC_OK) {
            mc_npy_free(&a);
            goto done;
        }
        bool ok = !strcmp(a.descr, "<i2") && a.ndim == 1 && a.shape[0] == n && !strcmp(b.descr, "<i8") &&
                  b.ndim == 1 && b.shape[0] == n;
        if (ok) {
            memcpy(s->dataset_index, a.data, (size_t)n * 2);
            memcpy(s->dataset_sample_index, b.data, (size_t)n * 8);
        }
        mc_npy_free(&a);
        mc_npy_free(&b);
        if (!ok) {
            mc_err_set(err, "dataset index cache %s / %s: expected int16 and int64 arrays of %lld entries", path_di,
                       path_dsi, (long long)n);
            goto done;
        }
    } else {
        if (dir && c->rank != 0) {
            mc_err_set(err, "dataset index cache %s: missing after rank 0 built it (is %s shared by all ranks?)",
                       path_di, dir);
            goto done;
        }
        if (size >= 0)
            mc_blend_build_indices(weights, s->n, n, s->dataset_index, s->dataset_sample_index);
        else
            mc_blend_build_exhaustive(int_weights, s->n, s->dataset_index, s->dataset_sample_index);
    }
    /* BlendedDataset: a blend must not ask a component for more samples than it has. */
    for (int64_t j = 0; j < n; j++) {
        int i = s->dataset_index[j];
        if (i < 0 || i >= s->n || s->dataset_sample_index[j] < 0 ||
            s->dataset_sample_index[j] >= d->gpt[s->gpt[i]]->len) {
            if (i < 0 || i >= s->n) {
                mc_err_set(err, "dataset index cache %s: entry %lld names dataset %d of %d", path_di, (long long)j, i,
                           s->n);
                goto done;
            }
            mc_err_set(err,
                       "the %s blend oversamples %s: it needs sample %lld of a dataset of %lld samples (Megatron "
                       "raises IndexError here; give that dataset more data or a smaller weight)",
                       split_names[k], spec->prefixes[i], (long long)s->dataset_sample_index[j],
                       (long long)d->gpt[s->gpt[i]]->len);
            goto done;
        }
    }
    if (dir && !hit && c->rank == 0) {
        int64_t shape[1] = {n};
        char *path_desc = mc_cache_path(dir, md5, "BlendedDataset", split_names[k], "description.txt");
        int w = mc_mkdirs(dir, err) == MC_OK && mc_npy_write(path_di, "<i2", 1, shape, s->dataset_index, err) == MC_OK &&
                mc_npy_write(path_dsi, "<i8", 1, shape, s->dataset_sample_index, err) == MC_OK &&
                mc_write_file_atomic(path_desc, desc, strlen(desc), err) == MC_OK;
        free(path_desc);
        if (!w) goto done;
    }
    rc = MC_OK;
done:
    free(desc);
    free(path_di);
    free(path_dsi);
    return rc;
}

/* The datasets of split k from `spec` (blended_megatron_dataset_builder.py). `range_of`
 * gives each prefix's sequence range for k; per-split blends use all of every prefix. */
static int build_split_from_blend(mc_data *d, const build_ctx *c, const mc_blend_spec *spec, int k, bool per_split,
                                  mc_err *err) {
    static const char *const split_flags[MC_NUM_SPLITS] = {"--train-data-path", "--valid-data-path",
                                                           "--test-data-path"};
    const char *flag = per_split ? split_flags[k] : "--data-path";
    split_source *s = &d->split[k];
    int64_t target = c->want[k];
    /* A single prefix without weights is a plain GPTDataset (per-split blends ignore the
     * weight of a single prefix too). */
    if (spec->n == 1 && (!spec->weights || per_split)) {
        mc_lowlevel *ll;
        MC_TRY(open_indexed(d, flag, spec->prefixes[0], &ll, err));
        int64_t b = 0, e = ll->num_sequences;
        if (!per_split) mc_split_range(c->split_def, k, ll->num_sequences, &b, &e);
        int g;
        MC_TRY(build_gpt(d, c, ll, spec->prefixes[0], b, e, target, k, &g, err));
        split_add_component(s, g);
        s->len = d->gpt[g]->len;
        return MC_OK;
    }
    double *w = NULL, *w2 = NULL;
    int64_t *num_samples = mc_xmalloc((size_t)spec->n * sizeof *num_samples);
    int64_t *lengths = NULL;
    int rc = MC_ERR;
    if (spec->weights) {
        if (target < 0) {
            mc_err_set(err, "the %s split: a weighted blend needs a sample count", split_names[k]);
            goto done;
        }
        w = mc_xmalloc((size_t)spec->n * sizeof *w);
        mc_blend_normalize(spec->weights, spec->n, w);
        for (int i = 0; i < spec->n; i++) num_samples[i] = mc_blend_dataset_size(target, w[i], MC_BLEND_SURPLUS);
    } else {
        for (int i = 0; i < spec->n; i++) num_samples[i] = -1; /* one epoch each */
    }
    for (int i = 0; i < spec->n; i++) {
        mc_lowlevel *ll;
        if (open_indexed(d, flag, spec->prefixes[i], &ll, err) != MC_OK) goto done;
        int64_t b = 0, e = ll->num_sequences;
        if (!per_split) mc_split_range(c->split_def, k, ll->num_sequences, &b, &e);
        int g;
        if (build_gpt(d, c, ll, spec->prefixes[i], b, e, num_samples[i], k, &g, err) != MC_OK) goto done;
        split_add_component(s, g);
    }
    s->blended = true;
    int64_t size;
    w2 = mc_xmalloc((size_t)spec->n * sizeof *w2);
    if (spec->weights) {
        /* size = sum of the targets without surplus; BlendedDataset normalizes the
         * (already normalized) weights once more, which can move their last bits. */
        size = 0;
        for (int i = 0; i < spec->n; i++) size += mc_blend_dataset_size(target, w[i], 0.0);
        mc_blend_normalize(w, spec->n, w2);
    } else {
        lengths = mc_xmalloc((size_t)spec->n * sizeof *lengths);
        int64_t total = 0;
        for (int i = 0; i < spec->n; i++) total += lengths[i] = d->gpt[s->gpt[i]]->len;
        if (target >= 0) {
            size = target < total ? target : total;
            double *lw = mc_xmalloc((size_t)spec->n * sizeof *lw);
            for (int i = 0; i < spec->n; i++) lw[i] = (double)lengths[i];
            if (total > 0)
                mc_blend_normalize(lw, spec->n, w2);
            else
                size = 0;
            free(lw);
        } else {
            size = -1;
        }
    }
    rc = build_blend_indices(d, c, s, k, spec, num_samples, w2, lengths, size, err);
done:
    free(w);
    free(w2);
    free(num_samples);
    free(lengths);
    return rc;
}

static int build_indexed(mc_data *d, const build_ctx *c0, int rank, mc_err *err) {
    const mc_data_config *dc = &c0->cfg->data;
    build_ctx c = *c0;
    c.rank = rank;
    if (dc->data_path) {
        mc_blend_spec spec;
        MC_TRY(mc_blend_parse(dc->data_path, "--data-path", &spec, err));
        int rc = MC_OK;
        for (int k = 0; k < MC_NUM_SPLITS && rc == MC_OK; k++)
            if (c.split_def->present[k]) rc = build_split_from_blend(d, &c, &spec, k, false, err);
        mc_blend_spec_free(&spec);
        return rc;
    }
    const char *paths[MC_NUM_SPLITS] = {dc->train_data_path, dc->valid_data_path, dc->test_data_path};
    static const char *const flags[MC_NUM_SPLITS] = {"--train-data-path", "--valid-data-path", "--test-data-path"};
    for (int k = 0; k < MC_NUM_SPLITS; k++) {
        if (!paths[k]) continue;
        mc_blend_spec spec;
        MC_TRY(mc_blend_parse(paths[k], flags[k], &spec, err));
        int rc = build_split_from_blend(d, &c, &spec, k, true, err);
        mc_blend_spec_free(&spec);
        MC_TRY(rc);
    }
    return MC_OK;
}

/* ---- sources ---------------------------------------------------------------------------- */

/* Opens the single low-level dataset of mock/corpus/text data and fixes vocab/eod. */
static int open_simple_source(mc_data *d, const mc_config *cfg, const char **split_text, mc_err *err) {
    const mc_data_config *dc = &cfg->data;
    mc_lowlevel *ll = NULL;
    if (dc->mock_data) {
        /* NullTokenizer: eod = vocab_size - 1 (Megatron-LM core_v0.14+); Megatron forces
         * an even split for mock data, whatever --split says. */
        int v = cfg->model.vocab_size;
        if (v <= 1) return mc_err_set(err, "--vocab-size: must be at least 2 with --mock-data, got %d", v);
        d->vocab_size = v;
        d->opt.eod = v - 1;
        d->source = "--mock-data";
        *split_text = MC_SPLIT_MOCK;
        MC_TRY(mc_lowlevel_open_mock(&ll, v, v - 1, err));
        add_lowlevel(d, ll, NULL);
        return MC_OK;
    }
    if (dc->corpus_tokens) {
        d->source = "in-memory corpus";
        int64_t nd = dc->corpus_num_docs;
        if (!dc->corpus_doc_offsets || nd <= 0)
            return mc_err_set(err, "in-memory corpus: corpus_doc_offsets and corpus_num_docs > 0 are required");
        if (dc->tokenizer_type == MC_TOKENIZER_BYTE) {
            d->vocab_size = MC_BYTE_TOKENIZER_VOCAB;
            d->opt.eod = MC_BYTE_TOKENIZER_EOD;
        } else {
            if (cfg->model.vocab_size <= 1)
                return mc_err_set(err, "--vocab-size: must be at least 2 with an in-memory corpus, got %d",
                                  cfg->model.vocab_size);
            d->vocab_size = cfg->model.vocab_size;
            d->opt.eod = d->vocab_size - 1;
        }
        MC_TRY(mc_lowlevel_open_memory(&ll, dc->corpus_tokens, dc->corpus_doc_offsets, nd, false, err));
        add_lowlevel(d, ll, NULL);
        for (int64_t i = dc->corpus_doc_offsets[0]; i < dc->corpus_doc_offsets[nd]; i++)
            if (dc->corpus_tokens[i] < 0 || dc->corpus_tokens[i] >= d->vocab_size)
                return mc_err_set(err, "in-memory corpus: token %lld is %d, outside the vocabulary [0, %d)",
                                  (long long)i, dc->corpus_tokens[i], d->vocab_size);
        return MC_OK;
    }
    snprintf(d->source_buf, sizeof d->source_buf, "--text-data-path %s", dc->text_data_path);
    d->source = d->source_buf;
    d->vocab_size = MC_BYTE_TOKENIZER_VOCAB;
    d->opt.eod = MC_BYTE_TOKENIZER_EOD;
    int32_t *tokens;
    int64_t *offsets, nt, nd;
    MC_TRY(mc_text_corpus_load(dc->text_data_path, &tokens, &nt, &offsets, &nd, err));
    if (mc_lowlevel_open_memory(&ll, tokens, offsets, nd, true, err) != MC_OK) {
        free(tokens);
        free(offsets);
        return mc_err_prefix(err, "--text-data-path %s: ", dc->text_data_path);
    }
    add_lowlevel(d, ll, NULL);
    return MC_OK;
}

int mc_data_open_dist(mc_data **out, const mc_config *cfg, int64_t train_samples, int64_t valid_samples,
                      int64_t test_samples, const mc_data_dist *dist, mc_err *err) {
    *out = NULL;
    const mc_data_config *dc = &cfg->data;
    mc_data *d = mc_xcalloc(1, sizeof *d);
    d->seq_length = cfg->model.seq_length;
    d->opt.eod_mask_loss = dc->eod_mask_loss;
    d->opt.reset_position_ids = dc->reset_position_ids;
    d->opt.reset_attention_mask = dc->reset_attention_mask;
    const int64_t want[MC_NUM_SPLITS] = {train_samples, valid_samples, test_samples};
    const char *split_text = NULL;
    int rank = dist ? dist->rank : 0;
    bool per_split = dc->train_data_path || dc->valid_data_path || dc->test_data_path;
    int sources = (dc->mock_data ? 1 : 0) + (dc->corpus_tokens ? 1 : 0) + (dc->text_data_path ? 1 : 0) +
                  (dc->data_path && *dc->data_path ? 1 : 0) + (per_split ? 1 : 0);

    if (d->seq_length < 1) {
        mc_err_set(err, "--seq-length: must be positive, got %d", d->seq_length);
        goto fail;
    }
    if (cfg->train.seed > 0xffffffffu) {
        /* GPTDataset seeds numpy.random.RandomState with it, which takes 32 bits. */
        mc_err_set(err, "--seed: must be in [0, 2^32-1] (numpy's RandomState seeds the data order), got %llu",
                   (unsigned long long)cfg->train.seed);
        goto fail;
    }
    if (sources == 0) {
        mc_err_set(err, "no training data: pass --mock-data, --data-path or --text-data-path");
        goto fail;
    }
    if (sources > 1) {
        mc_err_set(err, "--mock-data, --data-path, --train/valid/test-data-path, --text-data-path and an in-memory "
                        "corpus are exclusive; pass one");
        goto fail;
    }

    if (dc->data_path || per_split) {
        if (per_split && dc->split) {
            mc_err_set(err, "--split \"%s\" cannot be combined with --train-data-path/--valid-data-path/--test-data-path "
                            "(each of those blends is used whole)",
                       dc->split);
            goto fail;
        }
        if (!per_split && (!dc->data_path || !*dc->data_path)) {
            mc_err_set(err, "--data-path: no dataset prefix given");
            goto fail;
        }
        snprintf(d->source_buf, sizeof d->source_buf, "%s %s", per_split ? "--train-data-path" : "--data-path",
                 per_split ? (dc->train_data_path ? dc->train_data_path : "(none)") : dc->data_path);
        d->source = d->source_buf;
        if (tokenizer_vocab_eod(d, cfg, err) != MC_OK) {
            mc_err_prefix(err, "%s: ", d->source);
            goto fail;
        }
        build_ctx c = {.cfg = cfg, .want = {want[0], want[1], want[2]}};
        tokenizer_identity(cfg, &c.tok);
        if (!per_split) {
            split_text = dc->split ? dc->split : MEGATRON_LEGACY_DEFAULT_SPLIT;
            if (mc_split_parse(split_text, &d->split_def, err) != MC_OK) goto fail;
            c.split_text = split_text;
            c.split_def = &d->split_def;
        }
        /* Rank 0 builds or loads every cache; the others load what it wrote. */
        if (rank == 0 && build_indexed(d, &c, 0, err) != MC_OK) goto fail;
        if (dist && dist->barrier) dist->barrier(dist->ctx);
        if (rank != 0 && build_indexed(d, &c, rank, err) != MC_OK) goto fail;
    } else {
        if (open_simple_source(d, cfg, &split_text, err) != MC_OK) goto fail;
        if (!split_text) split_text = dc->split ? dc->split : MC_SPLIT_DEFAULT;
        if (mc_split_parse(split_text, &d->split_def, err) != MC_OK) goto fail;
        mc_lowlevel *ll = d->ll[0];
        for (int k = 0; k < MC_NUM_SPLITS; k++) {
            int64_t b, e;
            mc_split_range(&d->split_def, k, ll->num_sequences, &b, &e);
            int g = add_gpt(d);
            if (mc_gpt_dataset_build(d->gpt[g], ll, b, e, want[k], d->seq_length, cfg->train.seed, err) != MC_OK) {
                mc_err_prefix(err, "%s, %s split: ", d->source, split_names[k]);
                goto fail;
            }
            split_add_component(&d->split[k], g);
            d->split[k].len = d->gpt[g]->len;
        }
    }
    if (d->split[MC_SPLIT_TRAIN].len == 0) {
        const mc_gpt_dataset *t = mc_data_split(d, MC_SPLIT_TRAIN);
        if (d->split[MC_SPLIT_TRAIN].n == 0)
            mc_err_set(err, "%s: the train split is empty (--split \"%s\" gives it no data)", d->source,
                       split_text ? split_text : "");
        else
            mc_err_set(err,
                       "--split \"%s\": the train split of %s is empty (sequences [%lld, %lld) of %lld, %lld tokens; "
                       "one sample needs --seq-length + 1 = %d)",
                       split_text ? split_text : "", d->source, (long long)t->seq_begin, (long long)t->seq_end,
                       (long long)(t->ll ? t->ll->num_sequences : 0), (long long)t->tokens_per_epoch,
                       d->seq_length + 1);
        goto fail;
    }
    *out = d;
    return MC_OK;
fail:
    mc_data_close(d);
    return MC_ERR;
}

int mc_data_open(mc_data **out, const mc_config *cfg, int64_t train_samples, int64_t valid_samples,
                 int64_t test_samples, mc_err *err) {
    return mc_data_open_dist(out, cfg, train_samples, valid_samples, test_samples, NULL, err);
}

void mc_data_close(mc_data *d) {
    if (!d) return;
    for (int k = 0; k < MC_NUM_SPLITS; k++) {
        free(d->split[k].gpt);
        free(d->split[k].dataset_index);
        free(d->split[k].dataset_sample_index);
    }
    for (int i = 0; i < d->ngpt; i++) {
        mc_gpt_dataset_free(d->gpt[i]);
        free(d->gpt[i]);
    }
    free(d->gpt);
    for (int i = 0; i < d->nll; i++) {
        mc_lowlevel_close(d->ll[i]);
        free(d->ll_prefix[i]);
    }
    free(d->ll);
    free(d->ll_prefix);
    free(d);
}

void mc_data_get_sample(const mc_data *d, int split, int64_t idx, int32_t *out) {
    MC_ASSERT(split >= 0 && split < MC_NUM_SPLITS);
    const split_source *s = &d->split[split];
    MC_ASSERT(idx >= 0 && idx < s->len, "%s sample %lld of %lld", split_names[split], (long long)idx,
              (long long)s->len);
    if (s->blended)
        mc_gpt_dataset_get(d->gpt[s->gpt[s->dataset_index[idx]]], s->dataset_sample_index[idx], out);
    else
        mc_gpt_dataset_get(d->gpt[s->gpt[0]], idx, out);
}

void mc_data_get_batch(mc_data *d, int split, int64_t first_index, int mbs, mc_batch *out) {
    MC_ASSERT(split >= 0 && split < MC_NUM_SPLITS);
    MC_ASSERT(mbs > 0 && mbs <= out->capacity && out->seq == d->seq_length, "mbs %d, batch %d x %d, seq %d", mbs,
              out->capacity, out->seq, d->seq_length);
    MC_ASSERT(first_index >= 0 && first_index + mbs <= d->split[split].len, "%s samples [%lld, %lld) of %lld",
              split_names[split], (long long)first_index, (long long)(first_index + mbs),
              (long long)d->split[split].len);
    for (int r = 0; r < mbs; r++) {
        mc_data_get_sample(d, split, first_index + r, out->scratch);
        mc_batch_set_row(out, r, out->scratch, &d->opt);
        out->sample_ids[r] = first_index + r;
    }
    out->mbs = mbs;
}

int64_t mc_data_split_len(const mc_data *d, int split) {
    MC_ASSERT(split >= 0 && split < MC_NUM_SPLITS);
    return d->split[split].len;
}

int32_t mc_data_eod(const mc_data *d) { return d->opt.eod; }
int mc_data_vocab_size(const mc_data *d) { return d->vocab_size; }
int mc_data_seq_length(const mc_data *d) { return d->seq_length; }
const char *mc_data_source(const mc_data *d) { return d->source; }

void mc_data_cache_stats(const mc_data *d, int *loaded, int *built) {
    *loaded = d->cache_loaded;
    *built = d->cache_built;
}

const mc_gpt_dataset *mc_data_split(const mc_data *d, int split) {
    MC_ASSERT(split >= 0 && split < MC_NUM_SPLITS);
    const split_source *s = &d->split[split];
    return s->n ? d->gpt[s->gpt[0]] : &d->empty;
}

int mc_data_split_blend(const mc_data *d, int split, const int16_t **dataset_index,
                        const int64_t **dataset_sample_index) {
    MC_ASSERT(split >= 0 && split < MC_NUM_SPLITS);
    const split_source *s = &d->split[split];
    if (dataset_index) *dataset_index = s->dataset_index;
    if (dataset_sample_index) *dataset_sample_index = s->dataset_sample_index;
    return s->blended ? s->n : 0;
}

const mc_gpt_dataset *mc_data_split_component(const mc_data *d, int split, int i) {
    MC_ASSERT(split >= 0 && split < MC_NUM_SPLITS);
    const split_source *s = &d->split[split];
    MC_ASSERT(i >= 0 && i < s->n);
    return d->gpt[s->gpt[i]];
}

void mc_data_split_range(const mc_data *d, int split, int64_t *begin, int64_t *end) {
    const mc_gpt_dataset *g = mc_data_split(d, split);
    *begin = g->seq_begin;
    *end = g->seq_end;
}

mc_tokenizer_options mc_data_tokenizer_options(const mc_config *cfg) {
    const mc_data_config *dc = &cfg->data;
    return (mc_tokenizer_options){.type = dc->tokenizer_type,
                                  .vocab_file = dc->vocab_file,
                                  .merge_file = dc->merge_file,
                                  .tokenizer_model = dc->tokenizer_model,
                                  .vocab_size = cfg->model.vocab_size,
                                  .hf_include_special_tokens = !dc->tokenizer_hf_no_include_special_tokens};
}
