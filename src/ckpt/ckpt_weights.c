/* ckpt_weights.c: a checkpoint's weights as whole global tensors on the host, without a
 * model or a backend (megatron-c convert --to hf; ckpt.h). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckpt/ckpt_internal.h"

/* The iteration a --load of dir takes: the tracker's, else the newest iter_N. */
static int pick_iteration(const char *dir, int64_t *iteration, mc_err *err) {
    int64_t tracked = -1;
    int rc = mc_ckpt_read_tracker(dir, &tracked, err);
    if (rc == MC_ERR) return MC_ERR;
    if (rc == 1) {
        *iteration = tracked;
        return MC_OK;
    }
    int n = 0;
    int64_t *its = mc_ckpt_list_iterations(dir, &n); /* newest first */
    if (n > 0) *iteration = its[0];
    free(its);
    if (n == 0) return mc_err_set(err, "%s holds no checkpoint (no %s, no iter_NNNNNNN directory)", dir, MC_CKPT_TRACKER);
    return MC_OK;
}

/* The metadata of the checkpoint --load would take, with its model config and padded
 * vocabulary; iter_dir gets its directory. */
static int open_meta(const char *dir, mc_ckpt_meta *meta, char *iter_dir, size_t cap, mc_model_config *m,
                     int *padded_vocab, int64_t *iteration, mc_err *err) {
    int64_t it = -1;
    if (pick_iteration(dir, &it, err) != MC_OK) return MC_ERR;
    char name[32];
    mc_ckpt_iter_name(it, name);
    snprintf(iter_dir, cap, "%s/%s", dir, name);
    if (mc_ckpt_meta_read(iter_dir, meta, err) != MC_OK) return MC_ERR;
    int rc = mc_ckpt_config_parse(cJSON_GetObjectItemCaseSensitive(meta->root, "model"), m, iter_dir, err);
    const cJSON *pv = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(meta->root, "layout"),
                                                       "padded_vocab_size");
    if (rc == MC_OK && !cJSON_IsNumber(pv))
        rc = mc_err_set(err, "%s: metadata.json has no layout.padded_vocab_size", iter_dir);
    if (rc == MC_OK) {
        *padded_vocab = (int)pv->valuedouble;
        *iteration = it;
    } else {
        mc_ckpt_meta_free(meta);
    }
    return rc;
}

int mc_ckpt_read_model_config(const char *dir, mc_model_config *m, int64_t *iteration, mc_err *err) {
    mc_ckpt_meta meta;
    char iter_dir[4096];
    int padded;
    if (open_meta(dir, &meta, iter_dir, sizeof iter_dir, m, &padded, iteration, err) != MC_OK) return MC_ERR;
    mc_ckpt_meta_free(&meta);
    return MC_OK;
}

int mc_ckpt_read_weights(const char *dir, mc_model_config *m, int *padded_vocab, int64_t *iteration,
                         mc_host_params *out, mc_err *err) {
    mc_ckpt_meta meta;
    char iter_dir[4096];
    if (open_meta(dir, &meta, iter_dir, sizeof iter_dir, m, padded_vocab, iteration, err) != MC_OK) return MC_ERR;
    int rc = MC_OK;
    for (int f = 0; f < meta.nfiles && rc == MC_OK; f++) rc = mc_ckpt_verify_file(&meta, f, err);
    mc_safetensors **files = mc_xcalloc((size_t)meta.nfiles + 1, sizeof *files);
    for (int f = 0; f < meta.nfiles && rc == MC_OK; f++) {
        char path[8192];
        snprintf(path, sizeof path, "%s/%s", iter_dir, meta.files[f].name);
        rc = mc_safetensors_open(path, &files[f], err);
    }
    for (int t = 0; t < meta.ntensors && rc == MC_OK; t++) {
        const mc_ckpt_tensor_meta *tm = &meta.tensors[t];
        if (!strncmp(tm->name, "optimizer.", 10)) continue; /* the moments */
        float *dst = mc_host_params_add(out, tm->name, tm->ndim, tm->shape);
        int64_t C = tm->ndim == 2 ? tm->shape[1] : 1;
        for (int k = 0; k < tm->npieces && rc == MC_OK; k++) {
            const mc_ckpt_piece_meta *pc = &tm->pieces[k];
            const mc_st_tensor *st = mc_safetensors_find(files[pc->file], pc->key);
            if (!st || st->dtype != MC_F32 || st->numel != pc->rows * pc->cols) {
                rc = mc_err_set(err, "%s: piece %s of %s is missing from %s or has another size", iter_dir, pc->key,
                                tm->name, meta.files[pc->file].name);
                break;
            }
            const float *src = st->data;
            for (int64_t r = 0; r < pc->rows; r++)
                memcpy(dst + (pc->row + r) * C + pc->col, src + r * pc->cols, (size_t)pc->cols * sizeof(float));
        }
    }
    for (int f = 0; f < meta.nfiles; f++)
        if (files[f]) mc_safetensors_close(files[f]);
    free(files);
    mc_ckpt_meta_free(&meta);
    return rc;
}
