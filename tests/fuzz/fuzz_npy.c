/* fuzz_npy.c: the .npy reader of the index caches (mc_npy_parse) on any bytes; what it
 * accepts is read element by element. */
#include "data/npy.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    mc_npy a;
    mc_err err;
    if (mc_npy_parse(data, size, "fuzz.npy", &a, &err) != MC_OK) return 0;
    int64_t count = a.shape[0] * (a.ndim == 2 ? a.shape[1] : 1);
    uint64_t sum = 0; /* unsigned: the elements are any bits */
    for (int64_t i = 0; i < count; i++) sum += (uint64_t)mc_npy_get(&a, i);
    (void)sum;
    mc_npy_free(&a);
    return 0;
}
