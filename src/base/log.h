/* log.h: printing that knows the rank. Megatron prints most lines on rank 0
 * (print_rank_0) and the iteration line on the last rank (print_rank_last). */
#ifndef MC_BASE_LOG_H
#define MC_BASE_LOG_H

#include <stdbool.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { MC_LOG_DEBUG = 0, MC_LOG_INFO = 1, MC_LOG_WARN = 2, MC_LOG_QUIET = 3 } mc_log_level;

void mc_log_set_rank(int rank, int world_size);
void mc_log_set_level(mc_log_level level);
int mc_log_rank(void);
int mc_log_world(void);

/* Rank 0 only, to stdout. */
void mc_log_info(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Last rank only, to stdout (the iteration line). */
void mc_log_last(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Every rank, to stderr, prefixed with the rank when world > 1. */
void mc_log_warn(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* "2026-12-01 12:34:56.123456" (Megatron's %Y-%m-%d %H:%M:%S.%f), into buf (>= 32 bytes). */
void mc_log_timestamp(char *buf, int size);

#ifdef __cplusplus
}
#endif

#endif
