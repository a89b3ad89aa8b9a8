/* fuzz_ckpt_meta.c: the checkpoint metadata reader (mc_ckpt_meta_read) on any
 * metadata.json, written into a checkpoint directory of its own. So that validation reaches
 * the tensors, the files the input lists (by a plain name, up to 1 MiB) are created there
 * with the size it records, as a saver would have left them. */
#include <cjson/cJSON.h>
#include <fcntl.h>

#include "ckpt/ckpt_internal.h"
#include "fuzz_util.h"

static void make_listed_files(const char *dir, const uint8_t *data, size_t size) {
    cJSON *root = cJSON_ParseWithLength((const char *)data, size);
    const cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItemCaseSensitive(root, "files")) {
        const char *name = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(f, "name"));
        const cJSON *bytes = cJSON_GetObjectItemCaseSensitive(f, "bytes");
        if (!name || !*name || strchr(name, '/') || !strcmp(name, ".") || !strcmp(name, "..") ||
            !strcmp(name, "metadata.json") || strlen(name) > 200 || !cJSON_IsNumber(bytes) ||
            !(bytes->valuedouble >= 0 && bytes->valuedouble <= (1 << 20)))
            continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", dir, name);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) continue;
        if (ftruncate(fd, (off_t)bytes->valuedouble) != 0) perror(path);
        close(fd);
    }
    cJSON_Delete(root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *dir = fz_path("iter_0000001");
    mc_err err;
    mc_remove_tree(dir, &err);
    if (mc_mkdirs(dir, &err) != MC_OK) abort();
    char path[512];
    snprintf(path, sizeof path, "%s/%s", dir, MC_CKPT_METADATA);
    fz_write(path, data, size);
    make_listed_files(dir, data, size);
    mc_ckpt_meta m;
    if (mc_ckpt_meta_read(dir, &m, &err) == MC_OK) {
        for (int i = 0; i < m.ntensors; i++) (void)mc_ckpt_meta_find(&m, m.tensors[i].name);
    }
    mc_ckpt_meta_free(&m);
    return 0;
}
