/* watchdog.c: the collective timeout, fatal communication errors, and the note a rank
 * prints when the launcher ends it.
 *
 * Every blocking transport call brackets itself with mc_watch_begin/mc_watch_end, which
 * records (operation, group, start time) in the calling thread's slot. A watchdog thread
 * polls the slots (and, through a hook, the NCCL work queued on the GPU); when one has run
 * longer than the timeout it prints
 *   megatron-c: error: rank R: <op> on group <name> (size S) did not complete within N minutes
 * waits a short grace period (so that the other stuck ranks, whose clocks started at about
 * the same time, print their line too) and ends the job with MPI_Abort (exit code 1).
 *
 * When a rank dies, Open MPI's mpirun (and srun with --kill-on-bad-exit) send SIGTERM to
 * the others: the handler here prints one line naming the collective the rank was in, then
 * lets the signal end the process. Launchers that leave the others running are covered by
 * the timeout (or by MPI reporting the broken connection as an error). */
#include "comm/comm_internal.h"

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define MC_WATCH_SLOTS 16

/* One per thread that communicates. seq is odd while the thread is inside an operation;
 * the fields are written only while it is even, and a reader that sees the same odd seq
 * before and after reading them has a consistent copy. */
typedef struct {
    atomic_uint seq;
    const char *op, *group;
    int group_size;
    double t0;
} watch_slot;

static watch_slot g_slots[MC_WATCH_SLOTS];
static atomic_int g_nslots;
static _Thread_local int t_slot = -1;
static atomic_int g_reported; /* this rank printed its one error line */
static atomic_int g_ending;   /* a thread of this rank is ending the job */

static struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t thread;
    bool running, stop;
    void (*hook)(double now);
} g_watch = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER};

double mc_watch_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static watch_slot *my_slot(void) {
    if (t_slot < 0) {
        t_slot = atomic_fetch_add(&g_nslots, 1);
        MC_ASSERT(t_slot < MC_WATCH_SLOTS, "more than %d threads communicate", MC_WATCH_SLOTS);
    }
    return &g_slots[t_slot];
}

void mc_watch_begin(const char *op, const char *group, int group_size) {
    watch_slot *s = my_slot();
    s->op = op;
    s->group = group;
    s->group_size = group_size;
    s->t0 = mc_watch_now();
    atomic_fetch_add(&s->seq, 1); /* odd: inside */
}

void mc_watch_end(void) { atomic_fetch_add(&my_slot()->seq, 1); }

void mc_watch_set_poll_hook(void (*hook)(double now)) {
    pthread_mutex_lock(&g_watch.mu);
    g_watch.hook = hook;
    pthread_mutex_unlock(&g_watch.mu);
}

/* ---- ending the job ---- */

static MC_NORETURN void end_job(int code) {
    /* If the abort itself hangs (a wedged runtime), SIGALRM ends this process. */
    signal(SIGALRM, SIG_DFL);
    alarm(20);
#ifdef MC_HAVE_MPI
    /* MPI_Abort from this thread is allowed with MPI_THREAD_MULTIPLE; with less, leave and
     * let the launcher end the others (it does when a rank exits non-zero). */
    if (mc_rt.mpi_active && mc_rt.thread_level == MPI_THREAD_MULTIPLE) MPI_Abort(mc_rt.world, code);
#endif
    _exit(code);
}

void mc_comm_abort(int exit_code) {
    fflush(stdout);
    fflush(stderr);
    end_job(exit_code);
}

static void format_timeout(char *buf, size_t size, double t) {
    if (t >= 60 && fabs(t / 60 - round(t / 60)) < 1e-9)
        snprintf(buf, size, "%.0f minute%s", t / 60, t == 60 ? "" : "s");
    else
        snprintf(buf, size, "%g seconds", t);
}

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) == -1 && errno == EINTR) {
    }
}

/* One thread of a rank ends the job; any other that gets here waits for the end. */
static void claim_ending(void) {
    if (atomic_exchange(&g_ending, 1))
        for (;;) pause();
}

void mc_watch_expired(const char *op, const char *group, int group_size) {
    claim_ending();
    if (!atomic_exchange(&g_reported, 1)) {
        char t[64];
        format_timeout(t, sizeof t, mc_rt.timeout_s);
        fflush(stdout);
        fprintf(stderr, "megatron-c: error: rank %d: %s on group %s (size %d) did not complete within %s\n",
                mc_rt.world_rank, op, group, group_size, t);
        fflush(stderr);
    }
    /* Grace: the other stuck ranks, whose clocks started at about the same time, report
     * too before the first abort ends them; staggered by rank so that one abort, not all
     * of them at once, ends the job. */
    double grace = mc_rt.timeout_s * 0.5 < 2.0 ? mc_rt.timeout_s * 0.5 : 2.0;
    sleep_s(grace + 0.1 * (mc_rt.world_rank % 10));
    end_job(1);
}

void mc_comm_fatal(const char *fmt, ...) {
    claim_ending();
    if (!atomic_exchange(&g_reported, 1)) {
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        fflush(stdout);
        fprintf(stderr, "megatron-c: error: rank %d: %s\n", mc_rt.world_rank, msg);
        fflush(stderr);
    }
    /* A moment for the launcher to forward the line before the abort ends the job (as
     * mc_comm_exit_error's pause: mpirun under load dropped lines of ranks ended at once). */
    sleep_s(0.3);
    end_job(1);
}

void mc_comm_exit_error(int exit_code, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    fflush(stdout);
    fprintf(stderr, "megatron-c: error: %s\n", msg);
    fflush(stderr);
    atomic_store(&g_reported, 1); /* the launcher's SIGTERM adds no second line */
#ifdef MC_HAVE_MPI
    if (mc_rt.mpi_active) {
        /* Every rank has printed once all are here; a rank that never comes is the
         * watchdog's (the timeout ends the job). */
        mc_watch_start();
        mc_watch_begin("exit_error", "world", mc_rt.world_size);
        MPI_Barrier(mc_rt.world);
        mc_watch_end();
        mc_watch_stop();
        int world = mc_rt.world_size;
        mc_bootstrap_finalize();
        /* mpirun aborts the job at the first non-zero exit and may then drop what the
         * other ranks wrote but it has not yet forwarded (seen: one message of two under
         * load); a moment's grace lets it forward every rank's line first. */
        if (world > 1) {
            struct timespec grace = {0, 300 * 1000 * 1000};
            nanosleep(&grace, NULL);
        }
    }
#endif
    exit(exit_code);
}

/* ---- the watchdog thread ---- */

static void *watch_main(void *arg) {
    (void)arg;
    pthread_mutex_lock(&g_watch.mu);
    while (!g_watch.stop) {
        double T = mc_rt.timeout_s, poll = T / 20;
        if (poll < 0.02) poll = 0.02;
        if (poll > 1.0) poll = 1.0;
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        double frac = (double)until.tv_nsec * 1e-9 + poll;
        until.tv_sec += (time_t)frac;
        until.tv_nsec = (long)((frac - (double)(time_t)frac) * 1e9);
        pthread_cond_timedwait(&g_watch.cv, &g_watch.mu, &until);
        if (g_watch.stop) break;
        double now = mc_watch_now();
        int oldest = -1;
        double oldest_t0 = 0;
        const char *op = NULL, *group = NULL;
        int gsize = 0;
        int n = atomic_load(&g_nslots);
        for (int i = 0; i < n && i < MC_WATCH_SLOTS; i++) {
            watch_slot *s = &g_slots[i];
            unsigned q1 = atomic_load(&s->seq);
            if (!(q1 & 1)) continue;
            const char *sop = s->op, *sgroup = s->group;
            int sg = s->group_size;
            double t0 = s->t0;
            if (atomic_load(&s->seq) != q1) continue;
            if (now - t0 > T && (oldest < 0 || t0 < oldest_t0)) {
                oldest = i;
                oldest_t0 = t0;
                op = sop;
                group = sgroup;
                gsize = sg;
            }
        }
        void (*hook)(double) = g_watch.hook;
        pthread_mutex_unlock(&g_watch.mu);
        if (oldest >= 0) mc_watch_expired(op, group, gsize);
        if (hook) hook(now);
        pthread_mutex_lock(&g_watch.mu);
    }
    pthread_mutex_unlock(&g_watch.mu);
    return NULL;
}

/* ---- SIGTERM: one line, then the default action ---- */

static size_t put_str(char *buf, size_t at, size_t cap, const char *s) {
    while (s && *s && at + 1 < cap) buf[at++] = *s++;
    return at;
}

static size_t put_int(char *buf, size_t at, size_t cap, long long v) {
    char tmp[24];
    int n = 0;
    bool neg = v < 0;
    unsigned long long u = neg ? (unsigned long long)(-v) : (unsigned long long)v;
    do {
        tmp[n++] = (char)('0' + u % 10);
        u /= 10;
    } while (u);
    if (neg && at + 1 < cap) buf[at++] = '-';
    while (n && at + 1 < cap) buf[at++] = tmp[--n];
    return at;
}

static void on_sigterm(int sig) {
    if (!atomic_exchange(&g_reported, 1)) {
        char buf[512];
        size_t at = 0, cap = sizeof buf;
        at = put_str(buf, at, cap, "megatron-c: error: rank ");
        at = put_int(buf, at, cap, mc_rt.world_rank);
        at = put_str(buf, at, cap, ": ended by signal ");
        at = put_int(buf, at, cap, sig);
        const char *op = NULL, *group = NULL;
        int gsize = 0;
        double t0 = 0;
        int n = atomic_load(&g_nslots);
        for (int i = 0; i < n && i < MC_WATCH_SLOTS && !op; i++) {
            unsigned q = atomic_load(&g_slots[i].seq);
            if (q & 1) {
                op = g_slots[i].op;
                group = g_slots[i].group;
                gsize = g_slots[i].group_size;
                t0 = g_slots[i].t0;
            }
        }
        if (op) {
            at = put_str(buf, at, cap, " while in ");
            at = put_str(buf, at, cap, op);
            at = put_str(buf, at, cap, " on group ");
            at = put_str(buf, at, cap, group);
            at = put_str(buf, at, cap, " (size ");
            at = put_int(buf, at, cap, gsize);
            at = put_str(buf, at, cap, ") for ");
            double dt = mc_watch_now() - t0; /* clock_gettime is async-signal-safe */
            at = put_int(buf, at, cap, (long long)dt);
            at = put_str(buf, at, cap, ".");
            at = put_int(buf, at, cap, (long long)((dt - (double)(long long)dt) * 10));
            at = put_str(buf, at, cap, " s");
        } else {
            at = put_str(buf, at, cap, " (not in a collective)");
        }
        at = put_str(buf, at, cap, "; the launcher ends every rank when one rank fails or the job is cancelled\n");
        ssize_t w = write(STDERR_FILENO, buf, at);
        (void)w;
    }
    signal(sig, SIG_DFL);
    raise(sig);
}

void mc_watch_start(void) {
    pthread_mutex_lock(&g_watch.mu);
    if (!g_watch.running) {
        g_watch.stop = false;
        MC_ASSERT(pthread_create(&g_watch.thread, NULL, watch_main, NULL) == 0, "cannot start the watchdog thread");
        g_watch.running = true;
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_sigterm;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, NULL);
    }
    pthread_mutex_unlock(&g_watch.mu);
}

void mc_watch_stop(void) {
    pthread_mutex_lock(&g_watch.mu);
    bool running = g_watch.running;
    g_watch.stop = true;
    pthread_cond_broadcast(&g_watch.cv);
    pthread_mutex_unlock(&g_watch.mu);
    if (running) {
        pthread_join(g_watch.thread, NULL);
        signal(SIGTERM, SIG_DFL);
    }
    g_watch.running = false;
}
