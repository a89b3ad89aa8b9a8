/* fuzz_indexed_dataset.c: the .idx/.bin reader (mc_indexed_dataset_open) on any pair of
 * files. The input is the .idx's size (4 bytes, little-endian), PREFIX.idx, then PREFIX.bin
 * (a size past the end gives the .idx the rest and an empty .bin). What opens is read
 * back: every pointer and document index, and the tokens of every sequence (head, tail). */
#include "data/indexed_dataset.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 4) return 0;
    size_t idx_len = (size_t)data[0] | (size_t)data[1] << 8 | (size_t)data[2] << 16 | (size_t)data[3] << 24;
    data += 4;
    size -= 4;
    if (idx_len > size) idx_len = size;
    fz_write(fz_path("d.idx"), data, idx_len);
    fz_write(fz_path("d.bin"), data + idx_len, size - idx_len);
    mc_indexed_dataset *ds;
    mc_err err;
    if (mc_indexed_dataset_open(&ds, fz_path("d"), &err) != MC_OK) return 0;
    int32_t tokens[64];
    for (int64_t i = 0; i < ds->num_sequences; i++) {
        (void)mc_indexed_dataset_pointer(ds, i);
        int64_t len = ds->lengths[i], n = len < 64 ? len : 64;
        mc_indexed_dataset_read(ds, i, 0, n, tokens);
        mc_indexed_dataset_read(ds, i, len - n, n, tokens);
    }
    for (int64_t k = 0; k < ds->num_doc_indices; k++) (void)mc_indexed_dataset_doc_index(ds, k);
    mc_indexed_dataset_close(ds);
    return 0;
}
