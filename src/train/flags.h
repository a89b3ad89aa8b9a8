/* flags.h: the Megatron flag table behind mc_config_parse_args (megatron.h). */
#ifndef MC_TRAIN_FLAGS_H
#define MC_TRAIN_FLAGS_H

#include "base/args.h"

/* The table (for tests and help). */
const mc_arg_spec *mc_flags_table(int *n);
/* `megatron-c train --help`. */
void mc_flags_print_help(void);

#endif
