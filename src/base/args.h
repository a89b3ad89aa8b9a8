/* args.h: a table-driven command-line parser with argparse's conventions
 * (`--flag value`, `--flag=value`, store_true flags, nargs='+' lists, choices).
 *
 * Each table row binds a flag name to a field (by offset into a caller's struct) and a
 * kind. Rows can also be notes (flags that mean nothing here: accepted, one line printed)
 * and not-yet rows (Megatron flags whose feature this version lacks: a clear error).
 * An unknown flag fails and names the closest known one. */
#ifndef MC_BASE_ARGS_H
#define MC_BASE_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/error.h"

typedef enum {
    MC_ARG_INT,        /* int */
    MC_ARG_INT64,      /* int64_t */
    MC_ARG_FLOAT,      /* float */
    MC_ARG_DOUBLE,     /* double */
    MC_ARG_TRUE,       /* bool set to true, no value (store_true) */
    MC_ARG_FALSE,      /* bool set to false, no value (store_false) */
    MC_ARG_STRING,     /* char *, heap copy */
    MC_ARG_LIST,       /* char *, one or more values joined by single spaces (nargs='+') */
    MC_ARG_CHOICE,     /* int (an enum), value must be one of `choices` */
    MC_ARG_NOTE,       /* accepted and ignored with `note` printed once; takes `nvalues` values */
    MC_ARG_NOT_YET,    /* recognized, but the feature is not in this version: error with `note` */
} mc_arg_kind;

typedef struct mc_arg_choice {
    const char *name;
    int value;
} mc_arg_choice;

typedef struct mc_arg_spec {
    const char *name;            /* "--num-layers" */
    mc_arg_kind kind;
    size_t offset;               /* into the target struct */
    const char *help;
    const mc_arg_choice *choices;/* MC_ARG_CHOICE: terminated by {NULL, 0} */
    int nvalues;                 /* MC_ARG_NOTE / MC_ARG_NOT_YET: values consumed (-1: 1 or more) */
    const char *note;            /* MC_ARG_NOTE / MC_ARG_NOT_YET message; for others, an alias note */
    double min, max;             /* numeric range when min < max (inclusive) */
} mc_arg_spec;

/* Marks which rows were given on the command line (index = row). */
typedef struct mc_args_seen {
    bool *given;
    int n;
} mc_args_seen;

/* Parses argv[0..argc) into `target`. Each error names the flag and the bad value.
 * `seen` (optional) records the rows given. Notes are printed to stdout via `note_out`
 * (NULL: stdout) on rank 0 only (the caller decides by passing print_notes). */
int mc_args_parse(const mc_arg_spec *table, int nrows, void *target, int argc, char **argv, mc_args_seen *seen,
                  bool print_notes, mc_err *err);

/* The known flag closest to `name` by edit distance (NULL when nothing is close). */
const char *mc_args_closest(const mc_arg_spec *table, int nrows, const char *name);
/* Levenshtein distance (exposed for tests). */
int mc_args_edit_distance(const char *a, const char *b);

/* Prints "  --flag VALUE   help" rows. */
void mc_args_print_help(const mc_arg_spec *table, int nrows);

/* Index of a row by name, -1 if absent. */
int mc_args_find(const mc_arg_spec *table, int nrows, const char *name);

#endif
