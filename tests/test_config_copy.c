/* mc_config_copy owns every string of the copy (the trainer keeps a copy of the caller's
 * config; a shared string would be freed twice), and mc_config_hash sees every field. */
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "megatron.h"

static char *k_args[] = {"--data-path", "a", "--split", "1,1,1", "--data-cache-path", "c", "--vocab-file", "v",
                         "--merge-file", "m", "--tokenizer-model", "t", "--text-data-path", "x",
                         "--train-data-path", "tr", "--valid-data-path", "va", "--test-data-path", "te",
                         "--log-dir", "l", "--sample-prompt", "p", "--export-params", "e"};

static void test_copy_owns_every_string(void) {
    mc_config a, b;
    mc_config_init(&a);
    mc_err err;
    CHECK(mc_config_parse_args(&a, (int)(sizeof k_args / sizeof k_args[0]), k_args, &err) == MC_OK, "%s", err.msg);
    mc_config_copy(&b, &a);
    const char *pa[] = {a.data.data_path, a.data.split, a.data.data_cache_path, a.data.vocab_file, a.data.merge_file,
                        a.data.tokenizer_model, a.data.text_data_path, a.data.train_data_path,
                        a.data.valid_data_path, a.data.test_data_path, a.log.log_dir, a.log.sample_prompt,
                        a.log.export_params};
    const char *pb[] = {b.data.data_path, b.data.split, b.data.data_cache_path, b.data.vocab_file, b.data.merge_file,
                        b.data.tokenizer_model, b.data.text_data_path, b.data.train_data_path,
                        b.data.valid_data_path, b.data.test_data_path, b.log.log_dir, b.log.sample_prompt,
                        b.log.export_params};
    for (size_t i = 0; i < sizeof pa / sizeof pa[0]; i++) {
        CHECK(pa[i] && pb[i] && pa[i] != pb[i] && strcmp(pa[i], pb[i]) == 0, "string field %zu", i);
    }
    CHECK(mc_config_hash(&a) == mc_config_hash(&b));
    free(b.data.train_data_path); /* a string the hash must see */
    b.data.train_data_path = strdup("other");
    CHECK(mc_config_hash(&a) != mc_config_hash(&b));
    mc_config_free(&a);
    mc_config_free(&b);
}

int main(void) {
    RUN(test_copy_owns_every_string);
    return check_summary();
}
