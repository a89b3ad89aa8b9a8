/* main.c: the `megatron-c` command, a thin user of libmegatron.
 *
 *   megatron-c <command> [flags]          (see `megatron-c --help`)
 *
 * Errors in the user's input print one line and exit with code 2; failures during a
 * command exit with code 1. */
#include <stdio.h>
#include <string.h>

#include "base/error.h"
#include "cli/commands.h"
#include "megatron.h"

static const mc_command k_commands[] = {
    {"train", mc_cmd_train, "train a GPT/Llama-style model with Megatron-LM's flags"},
    {"bench", mc_cmd_bench, "benchmarks: bench comm (collective bus bandwidth, like nccl-tests), bench attention (GPU)"},
    {"preprocess", mc_cmd_preprocess, "JSONL to Megatron .bin/.idx (tools/preprocess_data.py)"},
    {"merge-datasets", mc_cmd_merge_datasets, "concatenate .bin/.idx datasets (tools/merge_datasets.py)"},
    {"inspect-data", mc_cmd_inspect_data, "print the samples a training run would see, as JSON lines"},
    {"inspect-ckpt", mc_cmd_inspect_ckpt, "what a checkpoint holds; --verify checks every file's checksums"},
    {"generate", mc_cmd_generate, "continue prompts with a trained model (--load) or a Hugging Face one (--load-hf)"},
    {"serve", mc_cmd_serve, "serve a model over HTTP: Megatron's PUT /api and OpenAI's POST /v1/completions"},
    {"convert", mc_cmd_convert, "Hugging Face model directory <-> Megatron-C checkpoint (--to hf|megatron-c)"},
};
#define NCOMMANDS ((int)(sizeof k_commands / sizeof k_commands[0]))

static void usage(FILE *f) {
    fprintf(f, "usage: megatron-c <command> [flags]\n\ncommands:\n");
    for (int i = 0; i < NCOMMANDS; i++) fprintf(f, "  %-16s %s\n", k_commands[i].name, k_commands[i].help);
    fprintf(f, "\n  megatron-c <command> --help   lists the command's flags\n  megatron-c --version\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return MC_EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version")) {
        printf("megatron-c %s\n", mc_version());
        return 0;
    }
    if (!strcmp(cmd, "--help") || !strcmp(cmd, "-h") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    for (int i = 0; i < NCOMMANDS; i++)
        if (!strcmp(cmd, k_commands[i].name)) return k_commands[i].run(argc - 2, argv + 2);
    if (!strncmp(cmd, "--", 2)) mc_die_usage("flags come after the command: megatron-c train %s ...", cmd);
    char names[256] = "";
    for (int i = 0; i < NCOMMANDS; i++) {
        if (i) strncat(names, ", ", sizeof names - strlen(names) - 1);
        strncat(names, k_commands[i].name, sizeof names - strlen(names) - 1);
    }
    mc_die_usage("unknown command '%s' (commands: %s)", cmd, names);
}
