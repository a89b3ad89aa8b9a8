/* sample.c: the next token from a full row of logits (sample.h). */
#include "generate/sample.h"

#include <math.h>
#include <stdlib.h>

#include "base/error.h"
#include "base/philox.h"

static int by_logit_desc(const void *a, const void *b) {
    const mc_gen_scored *x = a, *y = b;
    return x->logit > y->logit ? -1 : x->logit < y->logit ? 1 : x->id - y->id;
}

float mc_gen_uniform(uint64_t seed, uint64_t index) {
    return mc_philox_uniform(seed, mc_stream_of_name("sample"), index);
}

int32_t mc_gen_pick(const float *logits, int vocab, const mc_gen_params *p, uint64_t index, mc_gen_scored *tmp) {
    if (p->temperature <= 0) {
        int32_t best = 0;
        for (int32_t j = 1; j < vocab; j++)
            if (logits[j] > logits[best]) best = j; /* the lowest id among equals */
        return best;
    }
    for (int32_t j = 0; j < vocab; j++) tmp[j] = (mc_gen_scored){.logit = logits[j], .id = j};
    qsort(tmp, (size_t)vocab, sizeof *tmp, by_logit_desc);
    const int keep = p->top_k > 0 && p->top_k < vocab ? p->top_k : vocab;
    double total = 0;
    double *w = mc_xmalloc(sizeof(double) * (size_t)keep);
    for (int i = 0; i < keep; i++) total += w[i] = exp(((double)tmp[i].logit - tmp[0].logit) / p->temperature);
    double mass = 0;
    int n = 0;
    while (n < keep && (n == 0 || mass < p->top_p * total)) mass += w[n++]; /* the top-p nucleus */
    const double x = mc_gen_uniform(p->seed, index) * mass;
    double acc = 0;
    int32_t id = tmp[n - 1].id;
    for (int i = 0; i < n; i++) {
        acc += w[i];
        if (x < acc) {
            id = tmp[i].id;
            break;
        }
    }
    free(w);
    return id;
}
