/* commands.h: the subcommands of `megatron-c`, one file each (cmd_<name>.c). A command
 * gets the arguments after its name and returns the process exit code. */
#ifndef MC_CLI_COMMANDS_H
#define MC_CLI_COMMANDS_H

typedef struct mc_command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *help;
} mc_command;

int mc_cmd_train(int argc, char **argv);
int mc_cmd_bench(int argc, char **argv);
int mc_cmd_bench_attention(int argc, char **argv); /* `bench attention` (cmd_bench_attention.c) */
int mc_cmd_preprocess(int argc, char **argv);
int mc_cmd_merge_datasets(int argc, char **argv);
int mc_cmd_inspect_data(int argc, char **argv);
int mc_cmd_inspect_ckpt(int argc, char **argv);
int mc_cmd_convert(int argc, char **argv);
int mc_cmd_generate(int argc, char **argv);
int mc_cmd_serve(int argc, char **argv);

#endif
