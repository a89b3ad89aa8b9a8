#include "base/args.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int mc_args_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    int *prev = mc_xmalloc((lb + 1) * sizeof(int)), *cur = mc_xmalloc((lb + 1) * sizeof(int));
    for (size_t j = 0; j <= lb; j++) prev[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        cur[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int sub = prev[j - 1] + (a[i - 1] != b[j - 1]);
            int del = prev[j] + 1, ins = cur[j - 1] + 1;
            cur[j] = sub < del ? (sub < ins ? sub : ins) : (del < ins ? del : ins);
        }
        int *t = prev;
        prev = cur;
        cur = t;
    }
    int d = prev[lb];
    free(prev);
    free(cur);
    return d;
}

int mc_args_find(const mc_arg_spec *table, int nrows, const char *name) {
    for (int i = 0; i < nrows; i++)
        if (strcmp(table[i].name, name) == 0) return i;
    return -1;
}

const char *mc_args_closest(const mc_arg_spec *table, int nrows, const char *name) {
    const char *best = NULL;
    int best_d = 1 << 30;
    for (int i = 0; i < nrows; i++) {
        int d = mc_args_edit_distance(name, table[i].name);
        /* A flag that contains the typed text (or vice versa) is a strong hint. */
        if (strstr(table[i].name, name + 2) && strlen(name) > 4) d = d < 3 ? d : 3;
        if (d < best_d) {
            best_d = d;
            best = table[i].name;
        }
    }
    size_t len = strlen(name);
    return best_d <= (int)(len / 2 > 3 ? len / 2 : 3) ? best : NULL;
}

static bool takes_value(const mc_arg_spec *s) {
    switch (s->kind) {
    case MC_ARG_TRUE:
    case MC_ARG_FALSE: return false;
    case MC_ARG_NOTE:
    case MC_ARG_NOT_YET: return s->nvalues != 0;
    default: return true;
    }
}

static int parse_number(const mc_arg_spec *s, const char *v, double *out, bool integer, mc_err *err) {
    char *end = NULL;
    errno = 0;
    if (integer) {
        long long x = strtoll(v, &end, 10);
        if (end == v || *end || errno) {
            /* Megatron accepts 1e6-style ints for a few flags; be strict but helpful. */
            return mc_err_set(err, "%s: expected an integer, got '%s'", s->name, v);
        }
        *out = (double)x;
    } else {
        double x = strtod(v, &end);
        if (end == v || *end || errno || !isfinite(x))
            return mc_err_set(err, "%s: expected a number, got '%s'", s->name, v);
        *out = x;
    }
    if (s->min < s->max && (*out < s->min || *out > s->max)) {
        if (integer)
            return mc_err_set(err, "%s: %s is out of range [%.0f, %.0f]", s->name, v, s->min, s->max);
        return mc_err_set(err, "%s: %s is out of range [%g, %g]", s->name, v, s->min, s->max);
    }
    return MC_OK;
}

/* Stores one value into the target field. */
static int store(const mc_arg_spec *s, void *target, const char *v, mc_err *err) {
    char *field = (char *)target + s->offset;
    double x;
    switch (s->kind) {
    case MC_ARG_INT:
        MC_TRY(parse_number(s, v, &x, true, err));
        if (x < -2147483648.0 || x > 2147483647.0) return mc_err_set(err, "%s: %s does not fit in an int", s->name, v);
        *(int *)field = (int)x;
        return MC_OK;
    case MC_ARG_INT64:
        MC_TRY(parse_number(s, v, &x, true, err));
        *(int64_t *)field = strtoll(v, NULL, 10);
        return MC_OK;
    case MC_ARG_FLOAT:
        MC_TRY(parse_number(s, v, &x, false, err));
        *(float *)field = (float)x;
        return MC_OK;
    case MC_ARG_DOUBLE:
        MC_TRY(parse_number(s, v, &x, false, err));
        *(double *)field = x;
        return MC_OK;
    case MC_ARG_STRING:
        free(*(char **)field);
        *(char **)field = mc_xstrdup(v);
        return MC_OK;
    case MC_ARG_CHOICE:
        for (const mc_arg_choice *c = s->choices; c->name; c++)
            if (strcmp(c->name, v) == 0) {
                *(int *)field = c->value;
                return MC_OK;
            }
        {
            char list[512] = "";
            for (const mc_arg_choice *c = s->choices; c->name; c++) {
                if (list[0]) strncat(list, ", ", sizeof list - strlen(list) - 1);
                strncat(list, c->name, sizeof list - strlen(list) - 1);
            }
            return mc_err_set(err, "%s: invalid choice '%s' (choose from %s)", s->name, v, list);
        }
    default: MC_ASSERT(0, "store() on kind %d", (int)s->kind); return MC_ERR;
    }
}

/* Flags the parse could not take: unknown ones and Megatron flags whose feature is not in
 * this version. They are collected, so that a Megatron command line with several of them
 * is refused once, naming them all, rather than one flag per run. */
typedef struct refused {
    char unknown[768], not_yet[768];
    int n_unknown, n_not_yet;
    char first[512]; /* the message for one refused flag alone */
} refused;

static void refuse(char *list, size_t cap, int *n, const char *item) {
    size_t at = strlen(list);
    if (at + 8 >= cap) return;
    snprintf(list + at, cap - at, "%s%s", *n ? ", " : "", item);
    if (strlen(list) + 4 >= cap) strcpy(list + cap - 5, "...");
    (*n)++;
}

static int refused_error(const refused *r, mc_err *err) {
    if (r->n_unknown + r->n_not_yet == 1) return mc_err_set(err, "%s", r->first);
    if (r->n_unknown && r->n_not_yet)
        return mc_err_set(err, "unknown flags: %s; and not in this version yet: %s", r->unknown, r->not_yet);
    if (r->n_unknown) return mc_err_set(err, "unknown flags: %s (see megatron-c train --help)", r->unknown);
    return mc_err_set(err, "these flags' features are not in this version yet: %s", r->not_yet);
}

int mc_args_parse(const mc_arg_spec *table, int nrows, void *target, int argc, char **argv, mc_args_seen *seen,
                  bool print_notes, mc_err *err) {
    if (seen) {
        seen->n = nrows;
        seen->given = mc_xcalloc((size_t)nrows, sizeof(bool));
    }
    refused r = {{0}, {0}, 0, 0, {0}};
    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (strncmp(arg, "--", 2) != 0 || strlen(arg) < 3)
            return mc_err_set(err, "unexpected argument '%s' (flags start with --)", arg);
        char name[256];
        const char *inline_value = NULL;
        const char *eq = strchr(arg, '=');
        size_t nlen = eq ? (size_t)(eq - arg) : strlen(arg);
        if (nlen >= sizeof name) return mc_err_set(err, "flag too long: '%.40s...'", arg);
        memcpy(name, arg, nlen);
        name[nlen] = 0;
        if (eq) inline_value = eq + 1;
        /* argparse also accepts underscores; Megatron's docs use dashes. */
        for (char *p = name + 2; *p; p++)
            if (*p == '_') *p = '-';
        int row = mc_args_find(table, nrows, name);
        if (row < 0) {
            const char *near = mc_args_closest(table, nrows, name);
            char item[400];
            if (near) snprintf(item, sizeof item, "%s (did you mean %s?)", name, near);
            else snprintf(item, sizeof item, "%s", name);
            if (r.n_unknown + r.n_not_yet == 0)
                snprintf(r.first, sizeof r.first, "unknown flag %s%s", item, near ? "" : " (see megatron-c train --help)");
            refuse(r.unknown, sizeof r.unknown, &r.n_unknown, item);
            while (i + 1 < argc && strncmp(argv[i + 1], "--", 2) != 0) i++; /* its values, whatever they are */
            continue;
        }
        const mc_arg_spec *s = &table[row];
        if (seen) seen->given[row] = true;
        /* Collect the values. */
        const char *vals[64];
        int nv = 0;
        if (takes_value(s)) {
            if (inline_value) {
                vals[nv++] = inline_value;
            } else {
                bool many = s->kind == MC_ARG_LIST || ((s->kind == MC_ARG_NOTE || s->kind == MC_ARG_NOT_YET) &&
                                                       s->nvalues < 0);
                while (i + 1 < argc && !(strncmp(argv[i + 1], "--", 2) == 0 && strlen(argv[i + 1]) > 2) &&
                       nv < 64) {
                    vals[nv++] = argv[++i];
                    if (!many && nv == (s->nvalues > 0 ? s->nvalues : 1)) break;
                }
            }
            if (nv == 0) return mc_err_set(err, "%s: expected a value", s->name);
        } else if (inline_value) {
            return mc_err_set(err, "%s takes no value (got '%s')", s->name, inline_value);
        }
        switch (s->kind) {
        case MC_ARG_TRUE: *(bool *)((char *)target + s->offset) = true; break;
        case MC_ARG_FALSE: *(bool *)((char *)target + s->offset) = false; break;
        case MC_ARG_LIST: {
            size_t len = 1;
            for (int k = 0; k < nv; k++) len += strlen(vals[k]) + 1;
            char *joined = mc_xmalloc(len);
            joined[0] = 0;
            for (int k = 0; k < nv; k++) {
                if (k) strcat(joined, " ");
                strcat(joined, vals[k]);
            }
            char **field = (char **)((char *)target + s->offset);
            free(*field);
            *field = joined;
            break;
        }
        case MC_ARG_NOTE:
            if (print_notes) printf("note: %s: %s\n", s->name, s->note);
            break;
        case MC_ARG_NOT_YET: {
            char item[400];
            snprintf(item, sizeof item, "%s (%s)", s->name, s->note);
            if (r.n_unknown + r.n_not_yet == 0) snprintf(r.first, sizeof r.first, "%s: %s", s->name, s->note);
            refuse(r.not_yet, sizeof r.not_yet, &r.n_not_yet, item);
            break;
        }
        default: MC_TRY(store(s, target, vals[0], err));
        }
        if (s->note && s->kind != MC_ARG_NOTE && s->kind != MC_ARG_NOT_YET && print_notes)
            printf("note: %s: %s\n", s->name, s->note);
    }
    if (r.n_unknown + r.n_not_yet) return refused_error(&r, err);
    return MC_OK;
}

void mc_args_print_help(const mc_arg_spec *table, int nrows) {
    for (int i = 0; i < nrows; i++) {
        const mc_arg_spec *s = &table[i];
        char left[96];
        const char *meta = "";
        switch (s->kind) {
        case MC_ARG_INT:
        case MC_ARG_INT64: meta = " N"; break;
        case MC_ARG_FLOAT:
        case MC_ARG_DOUBLE: meta = " X"; break;
        case MC_ARG_STRING: meta = " S"; break;
        case MC_ARG_LIST: meta = " S [S ...]"; break;
        case MC_ARG_CHOICE: meta = " {..}"; break;
        default: meta = "";
        }
        snprintf(left, sizeof left, "%s%s", s->name, meta);
        const char *help = s->help ? s->help : (s->note ? s->note : "");
        if (s->kind == MC_ARG_CHOICE) {
            char list[256] = "";
            for (const mc_arg_choice *c = s->choices; c->name; c++) {
                if (list[0]) strncat(list, "|", sizeof list - strlen(list) - 1);
                strncat(list, c->name, sizeof list - strlen(list) - 1);
            }
            printf("  %-44s %s [%s]\n", left, help, list);
        } else {
            printf("  %-44s %s\n", left, help);
        }
    }
}
