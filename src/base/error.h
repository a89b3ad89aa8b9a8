/* error.h: the one error policy of Megatron-C.
 *
 * User errors (a bad flag, a missing file, an impossible shape) travel as a status:
 * a library function returns MC_OK or MC_ERR and writes one line into an mc_err saying
 * what was wrong and where. The CLI prints that line and exits with code 2.
 * Broken invariants (bugs) abort at once with file, line and the failing expression. */
#ifndef MC_BASE_ERROR_H
#define MC_BASE_ERROR_H

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#ifdef __cplusplus
extern "C" {
#endif

#ifndef MC_ERR_TYPE_DEFINED
#define MC_ERR_TYPE_DEFINED
enum { MC_OK = 0, MC_ERR = -1 };
typedef struct mc_err {
    char msg[1024];
} mc_err;
#endif

/* Exit code for errors in the user's input (flags, files, shapes). */
#define MC_EXIT_USAGE 2

#ifdef __cplusplus
#define MC_NORETURN [[noreturn]]
#else
#define MC_NORETURN _Noreturn
#endif

/* Formats the message into err (if non-NULL) and returns MC_ERR, so a caller writes
 * `return mc_err_set(err, "--seq-length: must be positive, got %d", s);` */
int mc_err_set(mc_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Prepends context ("reading foo.idx: ") to an existing message; returns MC_ERR. */
int mc_err_prefix(mc_err *err, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Prints "megatron-c: error: <msg>" and exits with MC_EXIT_USAGE. */
MC_NORETURN void mc_die_usage(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

MC_NORETURN void mc_assert_fail(const char *expr, const char *file, int line, const char *fmt, ...);

/* Invariant check: always on, also in release builds (they are cheap next to the math). */
#define MC_ASSERT(cond, ...)                                                         \
    do {                                                                             \
        if (!(cond)) mc_assert_fail(#cond, __FILE__, __LINE__, "" __VA_ARGS__);      \
    } while (0)

/* Propagate a failing status. */
#define MC_TRY(call)                    \
    do {                                \
        if ((call) != MC_OK) return MC_ERR; \
    } while (0)

/* malloc/calloc that abort with a message on failure (outside the step loop only). */
void *mc_xmalloc(size_t bytes);
void *mc_xcalloc(size_t n, size_t size);
void *mc_xrealloc(void *p, size_t bytes);
char *mc_xstrdup(const char *s);

#ifdef __cplusplus
}
#endif

#endif
