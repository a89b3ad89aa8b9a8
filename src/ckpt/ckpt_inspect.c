/* ckpt_inspect.c: `megatron-c inspect-ckpt DIR [--verify]`: what a checkpoint holds, and
 * whether its files are intact. */
#include "ckpt/ckpt_internal.h"

#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/crc32c.h"

static void human(double bytes, char *out, size_t cap) {
    const char *unit[] = {"B", "KB", "MB", "GB", "TB"};
    int u = 0;
    while (bytes >= 1000 && u < 4) {
        bytes /= 1000;
        u++;
    }
    snprintf(out, cap, u ? "%.2f %s" : "%.0f %s", bytes, unit[u]);
}

/* The iter_N directory `path` names: itself, or a save directory's tracked or newest one. */
static int resolve(const char *path, char *out, size_t cap, mc_err *err) {
    char probe[4200];
    snprintf(probe, sizeof probe, "%s/%s", path, MC_CKPT_METADATA);
    if (access(probe, F_OK) == 0) {
        snprintf(out, cap, "%s", path);
        return MC_OK;
    }
    int64_t it;
    int rc = mc_ckpt_read_tracker(path, &it, err);
    if (rc == MC_ERR) return MC_ERR;
    char name[32];
    if (rc == 1) {
        mc_ckpt_iter_name(it, name);
        snprintf(out, cap, "%s/%s", path, name);
        return MC_OK;
    }
    int n;
    int64_t *v = mc_ckpt_list_iterations(path, &n);
    if (n == 0) {
        free(v);
        if (access(path, F_OK) != 0) return mc_err_set(err, "%s does not exist", path);
        return mc_err_set(err, "%s holds no checkpoint (no %s, no iter_* directory with %s)", path, MC_CKPT_TRACKER,
                          MC_CKPT_METADATA);
    }
    mc_ckpt_iter_name(v[0], name);
    free(v);
    snprintf(out, cap, "%s/%s", path, name);
    return MC_OK;
}

static void print_object(FILE *out, const char *label, const cJSON *o) {
    fprintf(out, "%s:", label);
    const cJSON *v;
    cJSON_ArrayForEach(v, o) {
        if (cJSON_IsObject(v) || cJSON_IsArray(v)) continue;
        char *s = cJSON_PrintUnformatted(v);
        fprintf(out, " %s %s,", v->string, s);
        cJSON_free(s);
    }
    fprintf(out, "\n");
}

int mc_ckpt_verify_file(const mc_ckpt_meta *m, int f, mc_err *err) {
    const mc_ckpt_file_meta *fm = &m->files[f];
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", m->dir, fm->name);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return mc_err_set(err, "%s: cannot open", path);
    const unsigned char *p = mmap(NULL, (size_t)fm->bytes, PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) return mc_err_set(err, "%s: cannot map", path);
    madvise((void *)p, (size_t)fm->bytes, MADV_SEQUENTIAL);
    uint32_t whole = 0;
    int rc = MC_OK;
    for (int64_t k = 0; k < fm->nblocks && rc == MC_OK; k++) {
        int64_t a = k * fm->block_bytes, b = a + fm->block_bytes < fm->bytes ? a + fm->block_bytes : fm->bytes;
        uint32_t c = mc_crc32c(0, p + a, (size_t)(b - a));
        if (c != fm->block_crc[k])
            rc = mc_err_set(err, "%s: checksum mismatch in bytes [%lld, %lld) (the file is damaged)", path, (long long)a,
                            (long long)b);
        whole = mc_crc32c_combine(whole, c, (uint64_t)(b - a));
    }
    if (rc == MC_OK && whole != fm->crc) rc = mc_err_set(err, "%s: the whole-file checksum does not match", path);
    munmap((void *)p, (size_t)fm->bytes);
    return rc;
}

int mc_ckpt_inspect(const char *path, bool verify, FILE *out, mc_err *err) {
    char dir[4200];
    MC_TRY(resolve(path, dir, sizeof dir, err));
    mc_ckpt_meta m;
    if (mc_ckpt_meta_read(dir, &m, err) != MC_OK) {
        mc_ckpt_meta_free(&m);
        return MC_ERR;
    }
    const cJSON *r = m.root;
    fprintf(out, "checkpoint: %s\n", dir);
    fprintf(out, "iteration: %lld\n", (long long)m.iteration);
    print_object(out, "layout", cJSON_GetObjectItemCaseSensitive(r, "layout"));
    print_object(out, "model", cJSON_GetObjectItemCaseSensitive(r, "model"));
    print_object(out, "progress", cJSON_GetObjectItemCaseSensitive(r, "progress"));
    print_object(out, "opt_param_scheduler", cJSON_GetObjectItemCaseSensitive(r, "opt_param_scheduler"));
    print_object(out, "optimizer", cJSON_GetObjectItemCaseSensitive(r, "optimizer"));
    print_object(out, "grad_scaler", cJSON_GetObjectItemCaseSensitive(r, "grad_scaler"));
    print_object(out, "rng", cJSON_GetObjectItemCaseSensitive(r, "rng"));
    double total = 0;
    for (int f = 0; f < m.nfiles; f++) total += (double)m.files[f].bytes;
    char size[32];
    human(total, size, sizeof size);
    fprintf(out, "files: %d, %s\n", m.nfiles, size);
    for (int f = 0; f < m.nfiles; f++) {
        char hex[9];
        mc_ckpt_crc_hex(m.files[f].crc, hex);
        human((double)m.files[f].bytes, size, sizeof size);
        fprintf(out, "  %-40s %12s  crc32c %s\n", m.files[f].name, size, hex);
    }
    fprintf(out, "tensors: %d\n", m.ntensors);
    for (int t = 0; t < m.ntensors; t++) {
        const mc_ckpt_tensor_meta *tm = &m.tensors[t];
        char shape[64];
        if (tm->ndim == 2) snprintf(shape, sizeof shape, "[%lld, %lld]", (long long)tm->shape[0], (long long)tm->shape[1]);
        else snprintf(shape, sizeof shape, "[%lld]", (long long)tm->shape[0]);
        human((double)tm->shape[0] * (double)tm->shape[1] * 4, size, sizeof size);
        fprintf(out, "  F32 %-16s %10s  %3d piece%s  %s\n", shape, size, tm->npieces, tm->npieces == 1 ? " " : "s",
                tm->name);
    }
    int rc = MC_OK;
    if (verify) {
        for (int f = 0; f < m.nfiles && rc == MC_OK; f++) rc = mc_ckpt_verify_file(&m, f, err);
        if (rc == MC_OK) {
            human(total, size, sizeof size);
            fprintf(out, "verified: %d files, %s: every checksum holds\n", m.nfiles, size);
        }
    }
    mc_ckpt_meta_free(&m);
    return rc;
}
