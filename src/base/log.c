#include "base/log.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/time.h>
#include <time.h>

static int g_rank = -1, g_world = 1; /* -1: not known yet */
static mc_log_level g_level = MC_LOG_INFO;

/* Before the comm layer sets the rank (flags are parsed first), the launcher's environment
 * tells it, so that under mpirun or srun the notes of the flag parser print once. */
static void rank_from_env(void) {
    if (g_rank >= 0) return;
    const char *vars[] = {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID", "RANK"};
    g_rank = 0;
    for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
        const char *v = getenv(vars[i]);
        if (v && *v) {
            g_rank = atoi(v);
            return;
        }
    }
}

void mc_log_set_rank(int rank, int world_size) { g_rank = rank; g_world = world_size; }
void mc_log_set_level(mc_log_level level) { g_level = level; }
int mc_log_rank(void) {
    rank_from_env();
    return g_rank;
}
int mc_log_world(void) { return g_world; }

static void vlog(FILE *f, const char *fmt, va_list ap) {
    vfprintf(f, fmt, ap);
    fputc('\n', f);
    fflush(f);
}

void mc_log_info(const char *fmt, ...) {
    if (mc_log_rank() != 0 || g_level > MC_LOG_INFO) return;
    va_list ap;
    va_start(ap, fmt);
    vlog(stdout, fmt, ap);
    va_end(ap);
}

void mc_log_last(const char *fmt, ...) {
    if (mc_log_rank() != g_world - 1 || g_level > MC_LOG_INFO) return;
    va_list ap;
    va_start(ap, fmt);
    vlog(stdout, fmt, ap);
    va_end(ap);
}

void mc_log_warn(const char *fmt, ...) {
    if (g_level > MC_LOG_WARN) return;
    va_list ap;
    va_start(ap, fmt);
    if (g_world > 1) fprintf(stderr, "[rank %d] ", mc_log_rank());
    fputs("warning: ", stderr);
    vlog(stderr, fmt, ap);
    va_end(ap);
}

void mc_log_timestamp(char *buf, int size) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    localtime_r(&tv.tv_sec, &tm);
    char head[32];
    strftime(head, sizeof head, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(buf, size, "%s.%06ld", head, (long)tv.tv_usec);
}
