/* fuzz_jsonl.c: preprocess's JSONL input on any file: the streaming reader (plain, or gzip
 * when the bytes start with its magic) and the record parser on every line, reading the
 * "text" and "title" keys as preprocess does. */
#include "data/jsonl.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fz_path("in.jsonl");
    fz_write(path, data, size);
    mc_jsonl_reader *r;
    mc_err err;
    if (mc_jsonl_open(&r, path, &err) != MC_OK) return 0;
    static const char *const keys[2] = {"text", "title"};
    mc_jsonl_scratch sc = {0};
    const char *line;
    size_t len;
    int64_t lineno;
    while (mc_jsonl_next(r, &line, &len, &lineno, &err) == 1) {
        (void)mc_jsonl_position(r);
        mc_jv vals[2];
        if (mc_jsonl_parse(line, len, 2, keys, &sc, vals, &err) != MC_OK) continue;
        size_t sum = 0;
        for (int k = 0; k < 2; k++)
            for (int64_t j = 0; j < vals[k].nparts && (vals[k].kind == MC_JV_STRING || vals[k].kind == MC_JV_LIST);
                 j++) {
                size_t n;
                const char *text = mc_jv_part(&sc, &vals[k], j, &n);
                for (size_t i = 0; i < n; i++) sum += (unsigned char)text[i];
            }
        (void)sum;
    }
    mc_jsonl_scratch_free(&sc);
    mc_jsonl_close(r);
    return 0;
}
