#include "base/file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

char *mc_path_dirname(const char *path) {
    const char *slash = strrchr(path, '/');
    if (!slash) return mc_xstrdup(".");
    if (slash == path) return mc_xstrdup("/");
    size_t n = (size_t)(slash - path);
    char *d = mc_xmalloc(n + 1);
    memcpy(d, path, n);
    d[n] = 0;
    return d;
}

void mc_fsync_dir(const char *dir) {
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd); /* best effort: some filesystems refuse fsync on directories */
        close(fd);
    }
}

/* fsync of the directory holding `path`, so that a rename into it is durable. */
static void sync_parent_dir(const char *path) {
    char *dir = mc_path_dirname(path);
    mc_fsync_dir(dir);
    free(dir);
}

/* ---- files removed on SIGTERM / SIGINT -------------------------------------------------- */

static pthread_mutex_t g_cleanup_lock = PTHREAD_MUTEX_INITIALIZER;
static char **g_cleanup_paths; /* NULL entries are free slots */
static int g_cleanup_cap;

int mc_cleanup_register(const char *path) {
    pthread_mutex_lock(&g_cleanup_lock);
    int slot = 0;
    while (slot < g_cleanup_cap && g_cleanup_paths[slot]) slot++;
    if (slot == g_cleanup_cap) {
        int cap = g_cleanup_cap ? 2 * g_cleanup_cap : 64;
        g_cleanup_paths = mc_xrealloc(g_cleanup_paths, (size_t)cap * sizeof *g_cleanup_paths);
        memset(g_cleanup_paths + g_cleanup_cap, 0, (size_t)(cap - g_cleanup_cap) * sizeof *g_cleanup_paths);
        g_cleanup_cap = cap;
    }
    g_cleanup_paths[slot] = mc_xstrdup(path);
    pthread_mutex_unlock(&g_cleanup_lock);
    return slot;
}

void mc_cleanup_unregister(int handle) {
    if (handle < 0) return;
    pthread_mutex_lock(&g_cleanup_lock);
    MC_ASSERT(handle < g_cleanup_cap && g_cleanup_paths[handle], "cleanup handle %d is not registered", handle);
    free(g_cleanup_paths[handle]);
    g_cleanup_paths[handle] = NULL;
    pthread_mutex_unlock(&g_cleanup_lock);
}

static sigset_t g_cleanup_signals;

static void *cleanup_thread(void *arg) {
    (void)arg;
    int sig;
    if (sigwait(&g_cleanup_signals, &sig) != 0) return NULL; /* fails only for an invalid set */
    /* The lock is kept to the end: no writer lists (or creates, for those that list first)
     * a file after the removal. */
    pthread_mutex_lock(&g_cleanup_lock);
    mc_err ignored;
    for (int i = 0; i < g_cleanup_cap; i++)
        if (g_cleanup_paths[i] && unlink(g_cleanup_paths[i]) != 0 && errno == EISDIR)
            mc_remove_tree(g_cleanup_paths[i], &ignored); /* a temporary directory (convert's) */
    signal(sig, SIG_DFL);
    sigset_t one;
    sigemptyset(&one);
    sigaddset(&one, sig);
    pthread_sigmask(SIG_UNBLOCK, &one, NULL);
    raise(sig); /* delivered to this thread now, and its default action ends the process */
    _exit(128 + sig);
}

void mc_cleanup_on_signals(void) {
    sigemptyset(&g_cleanup_signals);
    const int signals[2] = {SIGTERM, SIGINT};
    int taken = 0;
    for (int i = 0; i < 2; i++) {
        struct sigaction old;
        /* a signal ignored by whoever started us (SIGINT of a background job) stays ignored */
        if (sigaction(signals[i], NULL, &old) == 0 && old.sa_handler == SIG_IGN) continue;
        sigaddset(&g_cleanup_signals, signals[i]);
        taken++;
    }
    if (!taken) return;
    MC_ASSERT(pthread_sigmask(SIG_BLOCK, &g_cleanup_signals, NULL) == 0);
    pthread_t t;
    MC_ASSERT(pthread_create(&t, NULL, cleanup_thread, NULL) == 0, "cannot start the signal thread");
    pthread_detach(t);
}

/* ---- atomic files ------------------------------------------------------------------------- */

int mc_atomic_file_open(mc_atomic_file *af, const char *path, mc_err *err) {
    static atomic_int counter;
    memset(af, 0, sizeof *af);
    size_t n = strlen(path) + 64;
    af->path = mc_xstrdup(path);
    af->tmp = mc_xmalloc(n);
    snprintf(af->tmp, n, "%s.tmp.%ld.%d", path, (long)getpid(), atomic_fetch_add(&counter, 1));
    af->cleanup = mc_cleanup_register(af->tmp); /* before the file exists: see mc_cleanup_register */
    int fd = open(af->tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        mc_cleanup_unregister(af->cleanup);
        char *dir = mc_path_dirname(path);
        struct stat st;
        if (stat(dir, &st) != 0)
            mc_err_set(err, "%s: cannot write: the directory %s does not exist", path, dir);
        else if (!S_ISDIR(st.st_mode))
            mc_err_set(err, "%s: cannot write: %s is not a directory", path, dir);
        else
            mc_err_set(err, "%s: cannot write: %s", path, strerror(e));
        free(dir);
        free(af->path);
        free(af->tmp);
        memset(af, 0, sizeof *af);
        return MC_ERR;
    }
    af->f = fdopen(fd, "wb");
    MC_ASSERT(af->f);
    setvbuf(af->f, NULL, _IOFBF, 1 << 20);
    return MC_OK;
}

int mc_atomic_file_write(mc_atomic_file *af, const void *data, size_t n, mc_err *err) {
    if (n && fwrite(data, 1, n, af->f) != n) return mc_err_set(err, "%s: write failed: %s", af->path, strerror(errno));
    return MC_OK;
}

int mc_atomic_file_finish(mc_atomic_file *af, mc_err *err) {
    if (!af->f) return MC_OK;
    int failed = fflush(af->f) != 0 || ferror(af->f);
    int e = errno;
    if (!failed && fsync(fileno(af->f)) != 0) {
        failed = 1;
        e = errno;
    }
    if (fclose(af->f) != 0 && !failed) {
        failed = 1;
        e = errno;
    }
    af->f = NULL;
    if (failed) {
        mc_err_set(err, "%s: write failed: %s", af->path, strerror(e));
        mc_atomic_file_abort(af);
        return MC_ERR;
    }
    return MC_OK;
}

int mc_atomic_file_rename(mc_atomic_file *af, mc_err *err) {
    if (rename(af->tmp, af->path) != 0) {
        mc_err_set(err, "%s: cannot rename the finished file into place: %s", af->path, strerror(errno));
        mc_atomic_file_abort(af);
        return MC_ERR;
    }
    sync_parent_dir(af->path);
    mc_cleanup_unregister(af->cleanup);
    free(af->tmp);
    free(af->path);
    memset(af, 0, sizeof *af);
    return MC_OK;
}

int mc_atomic_file_commit(mc_atomic_file *af, mc_err *err) {
    MC_TRY(mc_atomic_file_finish(af, err));
    return mc_atomic_file_rename(af, err);
}

void mc_atomic_file_abort(mc_atomic_file *af) {
    if (af->f) fclose(af->f);
    if (af->tmp) {
        unlink(af->tmp);
        mc_cleanup_unregister(af->cleanup);
    }
    free(af->tmp);
    free(af->path);
    memset(af, 0, sizeof *af);
}

int mc_write_file_atomic(const char *path, const void *data, size_t n, mc_err *err) {
    mc_atomic_file af;
    MC_TRY(mc_atomic_file_open(&af, path, err));
    if (mc_atomic_file_write(&af, data, n, err) != MC_OK) {
        mc_atomic_file_abort(&af);
        return MC_ERR;
    }
    return mc_atomic_file_commit(&af, err);
}

int mc_read_file(const char *path, char **data, size_t *n, mc_err *err) {
    *data = NULL;
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return mc_err_set(err, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *buf = mc_xmalloc(cap);
    for (;;) {
        if (len + 1 >= cap) buf = mc_xrealloc(buf, cap *= 2);
        size_t got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        return mc_err_set(err, "%s: read error", path);
    }
    buf[len] = 0;
    *data = buf;
    *n = len;
    return MC_OK;
}

int mc_mkdirs(const char *dir, mc_err *err) {
    size_t n = strlen(dir);
    char *p = mc_xmalloc(n + 1);
    memcpy(p, dir, n + 1);
    for (size_t i = 1; i <= n; i++) {
        if (p[i] != '/' && p[i] != 0) continue;
        char c = p[i];
        p[i] = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) {
            int e = errno;
            mc_err_set(err, "cannot create the directory %s: %s", p, strerror(e));
            free(p);
            return MC_ERR;
        }
        struct stat st;
        if (stat(p, &st) != 0 || !S_ISDIR(st.st_mode)) {
            mc_err_set(err, "cannot create the directory %s: a file of that name exists", p);
            free(p);
            return MC_ERR;
        }
        p[i] = c;
    }
    free(p);
    return MC_OK;
}

int mc_remove_tree(const char *path, mc_err *err) {
    struct stat st;
    if (lstat(path, &st) != 0) return errno == ENOENT ? MC_OK : mc_err_set(err, "%s: %s", path, strerror(errno));
    if (S_ISDIR(st.st_mode)) {
        DIR *d = opendir(path);
        if (!d) return mc_err_set(err, "%s: cannot open the directory: %s", path, strerror(errno));
        struct dirent *e;
        int rc = MC_OK;
        while (rc == MC_OK && (e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            size_t n = strlen(path) + strlen(e->d_name) + 2;
            char *child = mc_xmalloc(n);
            snprintf(child, n, "%s/%s", path, e->d_name);
            rc = mc_remove_tree(child, err);
            free(child);
        }
        closedir(d);
        if (rc != MC_OK) return rc;
        if (rmdir(path) != 0) return mc_err_set(err, "%s: cannot remove the directory: %s", path, strerror(errno));
        return MC_OK;
    }
    if (unlink(path) != 0) return mc_err_set(err, "%s: cannot remove: %s", path, strerror(errno));
    return MC_OK;
}

#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

int mc_publish_dir(const char *from, const char *to, mc_err *err) {
    struct stat st;
    char *parent = mc_path_dirname(to);
    int rc = MC_OK;
    if (stat(to, &st) != 0) {
        if (rename(from, to) != 0) rc = mc_err_set(err, "cannot rename %s to %s: %s", from, to, strerror(errno));
    } else {
#ifdef SYS_renameat2
        long ex = syscall(SYS_renameat2, AT_FDCWD, from, AT_FDCWD, to, RENAME_EXCHANGE);
#else
        long ex = -1;
        errno = ENOSYS;
#endif
        if (ex == 0) {
            mc_fsync_dir(parent);
            rc = mc_remove_tree(from, err); /* `from` now holds the old tree */
        } else {
            /* No atomic exchange here: move the old tree aside, then the new one in. */
            size_t n = strlen(to) + 32;
            char *aside = mc_xmalloc(n);
            snprintf(aside, n, "%s.old.%ld", to, (long)getpid());
            if (rename(to, aside) != 0)
                rc = mc_err_set(err, "cannot move %s aside: %s", to, strerror(errno));
            else if (rename(from, to) != 0)
                rc = mc_err_set(err, "cannot rename %s to %s: %s", from, to, strerror(errno));
            else {
                mc_fsync_dir(parent);
                rc = mc_remove_tree(aside, err);
            }
            free(aside);
        }
    }
    if (rc == MC_OK) mc_fsync_dir(parent);
    free(parent);
    return rc;
}

bool mc_dir_writable(const char *dir, mc_err *err) {
    struct stat st;
    if (stat(dir, &st) != 0) {
        mc_err_set(err, "%s: %s", dir, strerror(errno));
        return false;
    }
    if (!S_ISDIR(st.st_mode)) {
        mc_err_set(err, "%s is not a directory", dir);
        return false;
    }
    size_t n = strlen(dir) + 64;
    char *probe = mc_xmalloc(n);
    snprintf(probe, n, "%s/.megatron-c-write-test.%ld", dir, (long)getpid());
    int fd = open(probe, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    bool ok = fd >= 0;
    if (!ok) mc_err_set(err, "%s is not writable: %s", dir, strerror(errno));
    if (fd >= 0) {
        close(fd);
        unlink(probe);
    }
    free(probe);
    return ok;
}
