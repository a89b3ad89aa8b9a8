#include "data/blend.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void mc_blend_spec_free(mc_blend_spec *b) {
    for (int i = 0; i < b->n; i++) free(b->prefixes[i]);
    free(b->prefixes);
    free(b->weights);
    memset(b, 0, sizeof *b);
}

/* Python's float(s): the whole string (surrounding whitespace allowed) must be a number. */
static bool parse_float(const char *s, double *v) {
    char *end;
    *v = strtod(s, &end);
    if (end == s) return false;
    while (isspace((unsigned char)*end)) end++;
    return *end == 0;
}

int mc_blend_parse(const char *list, const char *flag, mc_blend_spec *out, mc_err *err) {
    memset(out, 0, sizeof *out);
    int cap = 8, n = 0;
    char **tok = mc_xmalloc((size_t)cap * sizeof *tok);
    for (const char *p = list ? list : ""; *p;) {
        while (isspace((unsigned char)*p)) p++;
        if (!*p) break;
        const char *s = p;
        while (*p && !isspace((unsigned char)*p)) p++;
        if (n == cap) tok = mc_xrealloc(tok, (size_t)(cap *= 2) * sizeof *tok);
        tok[n] = mc_xmalloc((size_t)(p - s) + 1);
        memcpy(tok[n], s, (size_t)(p - s));
        tok[n][p - s] = 0;
        n++;
    }
    int rc = MC_OK;
    if (n == 0) {
        rc = mc_err_set(err, "%s: no dataset prefix given", flag);
        goto done;
    }
    bool weighted = n % 2 == 0;
    if (weighted) {
        int numbers = 0;
        double v;
        for (int i = 0; i < n; i += 2) numbers += parse_float(tok[i], &v);
        if (numbers == 0) {
            weighted = false;
        } else if (numbers != n / 2) {
            rc = mc_err_set(err, "%s: expected \"weight prefix\" pairs or only prefixes, got a mix of both (\"%s\")",
                            flag, list);
            goto done;
        }
    }
    out->n = weighted ? n / 2 : n;
    if (out->n > MC_BLEND_MAX_DATASETS) {
        rc = mc_err_set(err, "%s: %d datasets; a blend takes at most %d", flag, out->n, MC_BLEND_MAX_DATASETS);
        goto done;
    }
    out->prefixes = mc_xcalloc((size_t)out->n, sizeof *out->prefixes);
    if (weighted) out->weights = mc_xmalloc((size_t)out->n * sizeof *out->weights);
    for (int i = 0; i < out->n; i++) {
        if (weighted) {
            parse_float(tok[2 * i], &out->weights[i]);
            if (!(out->weights[i] > 0) || !isfinite(out->weights[i])) {
                rc = mc_err_set(err, "%s: weight \"%s\" of %s must be a positive number", flag, tok[2 * i],
                                tok[2 * i + 1]);
                goto done;
            }
            out->prefixes[i] = mc_xstrdup(tok[2 * i + 1]);
        } else {
            out->prefixes[i] = mc_xstrdup(tok[i]);
        }
    }
done:
    for (int i = 0; i < n; i++) free(tok[i]);
    free(tok);
    if (rc != MC_OK) mc_blend_spec_free(out);
    return rc;
}

/* numpy's pairwise_sum for float64 (numpy/_core/src/umath/loops_utils.h.src). */
double mc_numpy_sum(const double *x, int64_t n) {
    if (n < 8) {
        double res = 0.0;
        for (int64_t i = 0; i < n; i++) res += x[i];
        return res;
    }
    if (n <= 128) {
        double r[8];
        for (int j = 0; j < 8; j++) r[j] = x[j];
        int64_t i;
        for (i = 8; i < n - (n % 8); i += 8)
            for (int j = 0; j < 8; j++) r[j] += x[i + j];
        double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
        for (; i < n; i++) res += x[i];
        return res;
    }
    int64_t n2 = n / 2;
    n2 -= n2 % 8;
    return mc_numpy_sum(x, n2) + mc_numpy_sum(x + n2, n - n2);
}

void mc_blend_normalize(const double *w, int n, double *out) {
    double sum = mc_numpy_sum(w, n);
    for (int i = 0; i < n; i++) out[i] = w[i] / sum;
}

int64_t mc_blend_dataset_size(int64_t target, double normalized_weight, double surplus) {
    double taken = ceil((double)target * normalized_weight);
    return (int64_t)ceil(taken * (1.0 + surplus));
}

void mc_blend_build_indices(const double *weights, int n, int64_t size, int16_t *dataset_index,
                            int64_t *dataset_sample_index) {
    int64_t *taken = mc_xcalloc((size_t)n, sizeof *taken);
    for (int64_t s = 0; s < size; s++) {
        double sd = s > 1 ? (double)s : 1.0;
        int best = 0;
        double best_error = weights[0] * sd - (double)taken[0];
        for (int i = 1; i < n; i++) {
            double error = weights[i] * sd - (double)taken[i];
            if (error > best_error) {
                best_error = error;
                best = i;
            }
        }
        dataset_index[s] = (int16_t)best;
        dataset_sample_index[s] = taken[best]++;
    }
    free(taken);
}

void mc_blend_build_exhaustive(const int64_t *sizes, int n, int16_t *dataset_index, int64_t *dataset_sample_index) {
    int64_t total = 0;
    for (int i = 0; i < n; i++) total += sizes[i];
    double *w = mc_xmalloc((size_t)n * sizeof *w);
    int64_t *taken = mc_xcalloc((size_t)n, sizeof *taken);
    bool *spent = mc_xcalloc((size_t)n, sizeof *spent);
    int unspent = 0;
    for (int i = 0; i < n; i++) {
        w[i] = (double)sizes[i] / (double)total;
        spent[i] = sizes[i] == 0;
        unspent += !spent[i];
    }
    /* helpers.cpp walks a std::set of unspent datasets in increasing order with a strict
     * '>' from the lowest double, so ties go to the lowest unspent index. (A dataset of
     * size 0 never enters the blend: Megatron asserts positive weights.) */
    for (int64_t s = 0; unspent > 0; s++) {
        double sd = s > 1 ? (double)s : 1.0;
        int best = -1;
        double best_error = -HUGE_VAL;
        for (int i = 0; i < n; i++) {
            if (spent[i]) continue;
            double error = w[i] * sd - (double)taken[i];
            if (best < 0 || error > best_error) {
                best_error = error;
                best = i;
            }
        }
        dataset_index[s] = (int16_t)best;
        dataset_sample_index[s] = taken[best]++;
        if (taken[best] == sizes[best]) {
            spent[best] = true;
            unspent--;
        }
    }
    free(w);
    free(taken);
    free(spent);
}
