/* fuzz_safetensors.c: the safetensors reader (mc_safetensors_open_memory) on any bytes;
 * what it accepts is read back through every accessor. */
#include <stdlib.h>

#include "fuzz_util.h"
#include "io/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mc_safetensors *st;
    mc_err err;
    if (mc_safetensors_open_memory(data, size, "fuzz.safetensors", &st, &err) != MC_OK) return 0;
    for (int i = 0; i < mc_safetensors_metadata_count(st); i++) {
        const char *key, *value;
        mc_safetensors_metadata_at(st, i, &key, &value);
        (void)mc_safetensors_metadata(st, key);
    }
    for (int i = 0; i < mc_safetensors_count(st); i++) {
        const mc_st_tensor *t = mc_safetensors_at(st, i);
        (void)mc_safetensors_find(st, t->name);
        mc_tensor view;
        (void)mc_safetensors_tensor(st, t->name, &view, &err);
        if (t->numel > (1 << 16)) continue;
        double *out = malloc(sizeof(double) * (size_t)(t->numel ? t->numel : 1));
        (void)mc_safetensors_read_f64_n(st, t->name, t->numel, out, &err);
        free(out);
    }
    mc_safetensors_close(st);
    return 0;
}
