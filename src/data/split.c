#include "data/split.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "megatron.h"

static bool is_num_char(char c) { return c == '.' || (c >= '0' && c <= '9'); }

int mc_split_parse(const char *text, mc_split *out, mc_err *err) {
    memset(out, 0, sizeof *out);
    if (!text) text = MC_SPLIT_DEFAULT;
    double w[MC_NUM_SPLITS] = {0, 0, 0};
    int count = 0;
    for (const char *p = text; *p;) {
        if (!is_num_char(*p)) {
            p++;
            continue;
        }
        const char *start = p;
        int dots = 0, digits = 0;
        while (is_num_char(*p)) {
            dots += *p == '.';
            digits += *p != '.';
            p++;
        }
        int len = (int)(p - start);
        /* Python's float() rejects what the regex lets through: "1.2.3", "." */
        if (dots > 1 || digits == 0)
            return mc_err_set(err, "--split \"%s\": \"%.*s\" is not a number", text, len, start);
        if (start > text && start[-1] == '-')
            return mc_err_set(err, "--split \"%s\": weights must not be negative", text);
        if (count == MC_NUM_SPLITS)
            return mc_err_set(err, "--split \"%s\": at most 3 weights (train,valid,test)", text);
        char buf[64];
        if (len >= (int)sizeof buf) return mc_err_set(err, "--split \"%s\": number too long", text);
        memcpy(buf, start, (size_t)len);
        buf[len] = 0;
        w[count++] = strtod(buf, NULL); /* correctly rounded, as Python's float() */
    }
    if (count == 0) return mc_err_set(err, "--split \"%s\": no numbers (expected e.g. \"969,30,1\")", text);
    double sum = 0.0; /* numpy.sum of 3 values: left to right */
    for (int k = 0; k < MC_NUM_SPLITS; k++) sum += w[k];
    if (!(sum > 0.0) || !isfinite(sum))
        return mc_err_set(err, "--split \"%s\": the weights must have a positive, finite sum", text);
    double edge = 0.0;
    for (int k = 0; k < MC_NUM_SPLITS; k++) {
        double next = edge + w[k] / sum;
        out->lo[k] = edge;
        out->hi[k] = next;
        out->present[k] = next > edge; /* min(hi) <= max(lo) means None */
        edge = next;
    }
    return MC_OK;
}

void mc_split_range(const mc_split *s, int k, int64_t n, int64_t *begin, int64_t *end) {
    if (!s->present[k]) {
        *begin = *end = 0;
        return;
    }
    /* int(round(x)): Python 3 rounds half to even, as rint in the default FP mode. */
    *begin = (int64_t)rint(s->lo[k] * (double)n);
    *end = (int64_t)rint(s->hi[k] * (double)n);
}

void mc_split_requested_samples(const struct mc_config *cfg, int64_t out[MC_NUM_SPLITS]) {
    const mc_train_config *t = &cfg->train;
    int64_t gbs = t->global_batch_size > 0 ? t->global_batch_size : t->micro_batch_size;
    int64_t train_iters = t->train_iters;
    if (t->train_samples > 0) {
        out[MC_SPLIT_TRAIN] = t->train_samples;
        if (train_iters <= 0 && gbs > 0) train_iters = t->train_samples / gbs;
    } else {
        out[MC_SPLIT_TRAIN] = train_iters * gbs;
    }
    int64_t evals = t->eval_interval > 0 ? train_iters / t->eval_interval + 1 : 1;
    out[MC_SPLIT_VALID] = evals * t->eval_iters * gbs;
    out[MC_SPLIT_TEST] = t->eval_iters * gbs;
}
