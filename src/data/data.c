#include "data/data.h"

#include <stdlib.h>
#include <string.h>

#include "data/byte_tokenizer.h"
#include "data/lowlevel.h"
#include "data/text_corpus.h"

struct mc_data {
    mc_lowlevel *ll;
    const char *source; /* for messages: "--mock-data", "--text-data-path FILE", ... */
    char source_buf[512];
    mc_split split;
    int64_t range_begin[MC_NUM_SPLITS], range_end[MC_NUM_SPLITS];
    mc_gpt_dataset ds[MC_NUM_SPLITS];
    mc_batch_options opt;
    int vocab_size;
    int seq_length;
};

static const char *const split_names[MC_NUM_SPLITS] = {"train", "valid", "test"};

/* Opens the low-level dataset named by cfg and fixes vocab/eod and the split string. */
static int open_source(mc_data *d, const mc_config *cfg, const char **split_text, mc_err *err) {
    const mc_data_config *dc = &cfg->data;
    int sources = (dc->mock_data ? 1 : 0) + (dc->corpus_tokens ? 1 : 0) + (dc->text_data_path ? 1 : 0) +
                  (dc->data_path && *dc->data_path ? 1 : 0);
    if (sources == 0)
        return mc_err_set(err, "no training data: pass --mock-data, --data-path or --text-data-path");
    if (sources > 1)
        return mc_err_set(err, "--mock-data, --data-path, --text-data-path and an in-memory corpus are exclusive; "
                               "pass one");
    *split_text = dc->split ? dc->split : MC_SPLIT_DEFAULT;

    if (dc->mock_data) {
        /* NullTokenizer: eod = vocab_size - 1 (Megatron-LM core_v0.14+); Megatron forces
         * an even split for mock data, whatever --split says. */
        int v = cfg->model.vocab_size;
        if (v <= 1) return mc_err_set(err, "--vocab-size: must be at least 2 with --mock-data, got %d", v);
        d->vocab_size = v;
        d->opt.eod = v - 1;
        d->source = "--mock-data";
        *split_text = MC_SPLIT_MOCK;
        return mc_lowlevel_open_mock(&d->ll, v, v - 1, err);
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
        MC_TRY(mc_lowlevel_open_memory(&d->ll, dc->corpus_tokens, dc->corpus_doc_offsets, nd, false, err));
        for (int64_t i = dc->corpus_doc_offsets[0]; i < dc->corpus_doc_offsets[nd]; i++)
            if (dc->corpus_tokens[i] < 0 || dc->corpus_tokens[i] >= d->vocab_size)
                return mc_err_set(err, "in-memory corpus: token %lld is %d, outside the vocabulary [0, %d)",
                                  (long long)i, dc->corpus_tokens[i], d->vocab_size);
        return MC_OK;
    }

    if (dc->text_data_path) {
        snprintf(d->source_buf, sizeof d->source_buf, "--text-data-path %s", dc->text_data_path);
        d->source = d->source_buf;
        d->vocab_size = MC_BYTE_TOKENIZER_VOCAB;
        d->opt.eod = MC_BYTE_TOKENIZER_EOD;
        int32_t *tokens;
        int64_t *offsets, nt, nd;
        MC_TRY(mc_text_corpus_load(dc->text_data_path, &tokens, &nt, &offsets, &nd, err));
        if (mc_lowlevel_open_memory(&d->ll, tokens, offsets, nd, true, err) != MC_OK) {
            free(tokens);
            free(offsets);
            return mc_err_prefix(err, "--text-data-path %s: ", dc->text_data_path);
        }
        return MC_OK;
    }

    return mc_err_set(err, "--data-path %s: Megatron .bin/.idx datasets are not supported yet; use --mock-data or "
                           "--text-data-path",
                      dc->data_path);
}

int mc_data_open(mc_data **out, const mc_config *cfg, int64_t train_samples, int64_t valid_samples,
                 int64_t test_samples, mc_err *err) {
    *out = NULL;
    mc_data *d = mc_xcalloc(1, sizeof *d);
    d->seq_length = cfg->model.seq_length;
    d->opt.eod_mask_loss = cfg->data.eod_mask_loss;
    d->opt.reset_position_ids = cfg->data.reset_position_ids;
    d->opt.reset_attention_mask = cfg->data.reset_attention_mask;
    const int64_t want[MC_NUM_SPLITS] = {train_samples, valid_samples, test_samples};
    const char *split_text = NULL;

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
    if (open_source(d, cfg, &split_text, err) != MC_OK) goto fail;
    if (mc_split_parse(split_text, &d->split, err) != MC_OK) goto fail;
    for (int k = 0; k < MC_NUM_SPLITS; k++) {
        mc_split_range(&d->split, k, d->ll->num_sequences, &d->range_begin[k], &d->range_end[k]);
        if (mc_gpt_dataset_build(&d->ds[k], d->ll, d->range_begin[k], d->range_end[k], want[k], d->seq_length,
                                 cfg->train.seed, err) != MC_OK) {
            mc_err_prefix(err, "%s, %s split: ", d->source, split_names[k]);
            goto fail;
        }
    }
    if (d->ds[MC_SPLIT_TRAIN].len == 0) {
        const mc_gpt_dataset *t = &d->ds[MC_SPLIT_TRAIN];
        mc_err_set(err,
                   "--split \"%s\": the train split of %s is empty (sequences [%lld, %lld) of %lld, %lld tokens; one "
                   "sample needs --seq-length + 1 = %d)",
                   split_text, d->source, (long long)t->seq_begin, (long long)t->seq_end,
                   (long long)d->ll->num_sequences, (long long)t->tokens_per_epoch, d->seq_length + 1);
        goto fail;
    }
    *out = d;
    return MC_OK;
fail:
    mc_data_close(d);
    return MC_ERR;
}

void mc_data_close(mc_data *d) {
    if (!d) return;
    for (int k = 0; k < MC_NUM_SPLITS; k++) mc_gpt_dataset_free(&d->ds[k]);
    mc_lowlevel_close(d->ll);
    free(d);
}

void mc_data_get_batch(mc_data *d, int split, int64_t first_index, int mbs, mc_batch *out) {
    MC_ASSERT(split >= 0 && split < MC_NUM_SPLITS);
    MC_ASSERT(mbs > 0 && mbs <= out->capacity && out->seq == d->seq_length, "mbs %d, batch %d x %d, seq %d", mbs,
              out->capacity, out->seq, d->seq_length);
    const mc_gpt_dataset *ds = &d->ds[split];
    MC_ASSERT(first_index >= 0 && first_index + mbs <= ds->len, "%s samples [%lld, %lld) of %lld", split_names[split],
              (long long)first_index, (long long)(first_index + mbs), (long long)ds->len);
    for (int r = 0; r < mbs; r++) {
        mc_gpt_dataset_get(ds, first_index + r, out->scratch);
        mc_batch_set_row(out, r, out->scratch, &d->opt);
        out->sample_ids[r] = first_index + r;
    }
    out->mbs = mbs;
}

int64_t mc_data_split_len(const mc_data *d, int split) {
    MC_ASSERT(split >= 0 && split < MC_NUM_SPLITS);
    return d->ds[split].len;
}

int32_t mc_data_eod(const mc_data *d) { return d->opt.eod; }
int mc_data_vocab_size(const mc_data *d) { return d->vocab_size; }
int mc_data_seq_length(const mc_data *d) { return d->seq_length; }

const mc_gpt_dataset *mc_data_split(const mc_data *d, int split) {
    MC_ASSERT(split >= 0 && split < MC_NUM_SPLITS);
    return &d->ds[split];
}

void mc_data_split_range(const mc_data *d, int split, int64_t *begin, int64_t *end) {
    MC_ASSERT(split >= 0 && split < MC_NUM_SPLITS);
    *begin = d->range_begin[split];
    *end = d->range_end[split];
}
