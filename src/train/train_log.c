#include "train/train_log.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>

#include "base/json.h"
#include "base/log.h"

void mc_log_format_iteration(char *buf, size_t size, const mc_iter_log *l) {
    char ts[40];
    mc_log_timestamp(ts, sizeof ts);
    size_t n = 0;
#define APPEND(...) n += (size_t)snprintf(buf + n, n < size ? size - n : 0, __VA_ARGS__)
    APPEND(" [%s]", ts);
    APPEND(" iteration %8lld/%8lld |", (long long)l->iteration, (long long)l->train_iters);
    APPEND(" consumed samples: %12lld |", (long long)l->consumed_samples);
    APPEND(" elapsed time per iteration (ms): %.1f |", l->elapsed_ms);
    /* Megatron's one decimal, and three significant digits below 1 (a CPU run's rates) */
    APPEND(l->tflops_per_gpu >= 1.0 ? " throughput per GPU (TFLOP/s/GPU): %.1f |" : " throughput per GPU (TFLOP/s/GPU): %.3g |",
           l->tflops_per_gpu);
    APPEND(" learning rate: %.6E |", l->learning_rate);
    APPEND(" global batch size: %5d |", l->global_batch_size);
    if (l->have_lm_loss) APPEND(" lm loss: %.6E |", l->lm_loss);
    APPEND(" loss scale: %.1f |", l->loss_scale);
    if (l->have_grad_norm) APPEND(" grad norm: %.3f |", l->grad_norm);
    if (l->have_num_zeros) APPEND(" num zeros: %.1f |", (double)l->num_zeros);
    if (l->have_params_norm) APPEND(" params norm: %.3f |", l->params_norm);
    APPEND(" number of skipped iterations: %3lld |", (long long)l->skipped_iters);
    APPEND(" number of nan iterations: %3lld |", (long long)l->nan_iters);
    APPEND(" tokens per second per GPU: %.1f |", l->tokens_per_sec_per_gpu);
    APPEND(" MFU: %.2f%% |", 100.0 * l->mfu);
#undef APPEND
}

void mc_log_print_validation(const char *prefix, double loss) {
    char line[512];
    double ppl = exp(loss < 20.0 ? loss : 20.0);
    int len = snprintf(line, sizeof line, " validation loss at %s | lm loss value: %.6E | lm loss PPL: %.6E | ",
                       prefix, loss, ppl);
    char dashes[600];
    int nd = len + 1 < (int)sizeof dashes - 1 ? len + 1 : (int)sizeof dashes - 1;
    memset(dashes, '-', (size_t)nd);
    dashes[nd] = 0;
    mc_log_last("%s", dashes);
    mc_log_last("%s", line);
    mc_log_last("%s", dashes);
}

/* mkdir -p */
static int make_dirs(const char *dir) {
    char path[4096];
    snprintf(path, sizeof path, "%s", dir);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/') continue;
        *p = 0;
        if (mkdir(path, 0777) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    if (mkdir(path, 0777) != 0 && errno != EEXIST) return -1;
    return 0;
}

int mc_metrics_open(mc_metrics_file *m, const char *dir, mc_err *err) {
    m->f = NULL;
    if (make_dirs(dir) != 0)
        return mc_err_set(err, "--log-dir %s: cannot create directory: %s", dir, strerror(errno));
    char path[4096];
    snprintf(path, sizeof path, "%s/metrics.jsonl", dir);
    m->f = fopen(path, "a");
    if (!m->f) return mc_err_set(err, "--log-dir %s: cannot open %s for appending: %s", dir, path, strerror(errno));
    return MC_OK;
}

static void write_json(mc_metrics_file *m, cJSON *obj) {
    char *s = cJSON_PrintUnformatted(obj);
    fprintf(m->f, "%s\n", s);
    fflush(m->f);
    cJSON_free(s);
    cJSON_Delete(obj);
}

void mc_metrics_write_iteration(mc_metrics_file *m, const mc_iter_log *l) {
    if (!m->f) return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "iteration", mc_json_number((double)l->iteration));
    cJSON_AddItemToObject(o, "consumed_samples", mc_json_number((double)l->consumed_samples));
    if (l->have_lm_loss) cJSON_AddItemToObject(o, "lm_loss", mc_json_number(l->lm_loss));
    cJSON_AddItemToObject(o, "learning_rate", mc_json_number(l->learning_rate));
    if (l->have_grad_norm) cJSON_AddItemToObject(o, "grad_norm", mc_json_number(l->grad_norm));
    cJSON_AddItemToObject(o, "loss_scale", mc_json_number(l->loss_scale));
    cJSON_AddItemToObject(o, "global_batch_size", mc_json_number(l->global_batch_size));
    cJSON_AddItemToObject(o, "elapsed_ms_per_iteration", mc_json_number(l->elapsed_ms));
    cJSON_AddItemToObject(o, "tflops_per_gpu", mc_json_number(l->tflops_per_gpu));
    cJSON_AddItemToObject(o, "tokens_per_sec_per_gpu", mc_json_number(l->tokens_per_sec_per_gpu));
    cJSON_AddItemToObject(o, "mfu", mc_json_number(l->mfu));
    if (l->have_num_zeros) cJSON_AddItemToObject(o, "num_zeros", mc_json_number((double)l->num_zeros));
    if (l->have_params_norm) cJSON_AddItemToObject(o, "params_norm", mc_json_number(l->params_norm));
    cJSON_AddItemToObject(o, "skipped_iterations", mc_json_number((double)l->skipped_iters));
    cJSON_AddItemToObject(o, "nan_iterations", mc_json_number((double)l->nan_iters));
    write_json(m, o);
}

void mc_metrics_write_validation(mc_metrics_file *m, int64_t iteration, const char *split, double loss) {
    if (!m->f) return;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "iteration", mc_json_number((double)iteration));
    cJSON_AddStringToObject(o, "split", split);
    cJSON_AddItemToObject(o, "lm_loss", mc_json_number(loss));
    cJSON_AddItemToObject(o, "lm_loss_ppl", mc_json_number(exp(loss < 20.0 ? loss : 20.0)));
    write_json(m, o);
}

void mc_metrics_close(mc_metrics_file *m) {
    if (m->f) fclose(m->f);
    m->f = NULL;
}
