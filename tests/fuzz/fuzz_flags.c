/* fuzz_flags.c: the command-line flag parser (mc_config_parse_args, base/args.c with
 * Megatron's flag table) and the rules after it (mc_config_validate for one rank) on any
 * argument list: the input's lines (or NUL-separated parts) are the arguments. */
#include "fuzz_util.h"
#include "megatron.h"

#define FZ_MAX_ARGS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);
    memcpy(text, data, size);
    text[size] = 0;
    char *argv[FZ_MAX_ARGS + 1];
    int argc = 0;
    for (char *p = text; argc < FZ_MAX_ARGS;) {
        argv[argc++] = p;
        size_t n = strcspn(p, "\n");
        if (p + n >= text + size) break;
        p[n] = 0;
        p += n + 1;
    }
    argv[argc] = NULL;
    mc_config cfg;
    mc_config_init(&cfg);
    mc_err err;
    if (mc_config_parse_args(&cfg, argc, argv, &err) == MC_OK) (void)mc_config_validate(&cfg, 1, &err);
    mc_config_free(&cfg);
    free(text);
    return 0;
}
