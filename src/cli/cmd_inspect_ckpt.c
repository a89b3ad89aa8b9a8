/* cmd_inspect_ckpt.c: `megatron-c inspect-ckpt DIR [--verify]`: a checkpoint's iteration,
 * layout, config, progress and tensors; --verify re-reads every file against its
 * checksums. DIR is a --save directory (its tracked, else newest, checkpoint) or one
 * iter_N directory. A missing, malformed or damaged checkpoint is one line on stderr and
 * exit code 2. */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "ckpt/ckpt.h"
#include "cli/commands.h"

int mc_cmd_inspect_ckpt(int argc, char **argv) {
    const char *dir = NULL;
    bool verify = false;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: megatron-c inspect-ckpt DIR [--verify]\n\n"
                   "  DIR        a --save directory (its newest checkpoint) or an iter_NNNNNNN directory\n"
                   "  --verify   re-read every file and check its CRC-32C checksums\n");
            return 0;
        }
        if (!strcmp(argv[i], "--verify")) verify = true;
        else if (!strncmp(argv[i], "--", 2)) mc_die_usage("inspect-ckpt: unknown flag %s (flags: --verify)", argv[i]);
        else if (dir) mc_die_usage("inspect-ckpt: one directory, got %s and %s", dir, argv[i]);
        else dir = argv[i];
    }
    if (!dir) mc_die_usage("inspect-ckpt: which checkpoint? usage: megatron-c inspect-ckpt DIR [--verify]");
    mc_err err;
    if (mc_ckpt_inspect(dir, verify, stdout, &err) != MC_OK) mc_die_usage("%s", err.msg);
    return 0;
}
