/* bootstrap.c: who launched us, and the MPI world.
 *
 * Detection, first match wins (the environment each launcher sets for its processes):
 *   mpirun   OMPI_COMM_WORLD_SIZE / _RANK / _LOCAL_RANK (Open MPI; checked first because
 *            mpirun inside a Slurm allocation leaves SLURM_* in its processes' environment)
 *   srun     SLURM_PROCID with SLURM_STEP_NUM_TASKS (set for a job step only, not in the
 *            batch script itself); local rank SLURM_LOCALID. Open MPI joins the step
 *            through PMI/PMIx (srun --mpi=pmix); if the MPI world does not match the step,
 *            that is reported as an error naming the fix.
 *   pmi      PMI_SIZE / PMI_RANK (MPICH hydra, srun --mpi=pmi2) or PMIX_RANK (PMIx
 *            launchers); local rank MPI_LOCALRANKID / PMI_LOCAL_RANK.
 *   torchrun RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (see below).
 *   none     world size 1: MPI is not initialized at all.
 * A launcher that starts a single process also gives world size 1 without MPI. Under an
 * MPI launcher the local rank falls back to MPI_Comm_split_type(MPI_COMM_TYPE_SHARED).
 *
 * Threads: MPI is initialized with MPI_THREAD_MULTIPLE because two threads besides the
 * main one may call MPI while the main thread is inside a collective: the async worker
 * (comm_mpi.c; it runs its collectives on duplicated communicators) and the watchdog
 * (MPI_Abort on a timeout). If the library provides less (FUNNELED or SERIALIZED), async
 * collectives run at once on the calling thread and the watchdog ends its process with
 * _exit, after which the launcher ends the others; results are the same.
 *
 * torchrun-style environment (no MPI launcher): the processes are started separately, so
 * there is no MPI_COMM_WORLD spanning them. They are joined with MPI's dynamic process
 * management: rank 0 opens an MPI port, and ranks 1, 2, ... connect in rank order, each
 * accept/connect pair merged with MPI_Intercomm_merge into the growing world (the newcomer
 * last, so the merged rank equals RANK). The port name, a string, reaches the other ranks
 * over a TCP rendezvous at MASTER_ADDR:MASTER_PORT, which carries nothing else. Open MPI
 * 4.x (checked with 4.1.4) can connect processes of separate launches only through an
 * ompi-server: rank 0 starts one (ompi-server --no-daemonize -r FILE, ended with rank 0)
 * and passes its URI over the same rendezvous before MPI_Init, as the MCA parameter
 * pmix_server_uri. If OMPI_MCA_pmix_server_uri is already set, that server is used.
 * Separate launches also mean that MPI_Abort ends only the calling process: each rank's own
 * watchdog ends it within the timeout (torchrun's agent ends the others when one fails). */
#include "comm/comm_internal.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

static const char *env(const char *name) {
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

/* Integer environment variable; -1 when absent. */
static int env_int(const char *name, mc_err *err, bool *ok) {
    const char *v = env(name);
    if (!v) return -1;
    char *end;
    long x = strtol(v, &end, 10);
    if (*end || x < 0 || x > 1 << 24) {
        *ok = false;
        mc_err_set(err, "environment variable %s: expected a non-negative integer, got '%s'", name, v);
        return -1;
    }
    return (int)x;
}

typedef struct {
    mc_launcher launcher;
    int size, rank, local_rank; /* -1: unknown */
} launch_info;

static int detect(launch_info *li, mc_err *err) {
    bool ok = true;
    li->launcher = MC_LAUNCH_NONE;
    li->size = 1;
    li->rank = 0;
    li->local_rank = -1;
    if (env("OMPI_COMM_WORLD_SIZE")) {
        li->launcher = MC_LAUNCH_MPIRUN;
        li->size = env_int("OMPI_COMM_WORLD_SIZE", err, &ok);
        li->rank = env_int("OMPI_COMM_WORLD_RANK", err, &ok);
        li->local_rank = env_int("OMPI_COMM_WORLD_LOCAL_RANK", err, &ok);
    } else if (env("SLURM_PROCID") && env("SLURM_STEP_NUM_TASKS")) {
        li->launcher = MC_LAUNCH_SLURM;
        li->size = env_int("SLURM_STEP_NUM_TASKS", err, &ok);
        li->rank = env_int("SLURM_PROCID", err, &ok);
        li->local_rank = env_int("SLURM_LOCALID", err, &ok);
    } else if (env("PMI_SIZE") || env("PMI_RANK") || env("PMIX_RANK")) {
        li->launcher = MC_LAUNCH_PMI;
        li->size = env_int("PMI_SIZE", err, &ok); /* unknown with PMIx: MPI tells */
        li->rank = env("PMI_RANK") ? env_int("PMI_RANK", err, &ok) : env_int("PMIX_RANK", err, &ok);
        li->local_rank = env("MPI_LOCALRANKID") ? env_int("MPI_LOCALRANKID", err, &ok)
                                                : env_int("PMI_LOCAL_RANK", err, &ok);
    } else if (env("WORLD_SIZE") || env("RANK")) {
        li->launcher = MC_LAUNCH_TORCHRUN;
        if (!env("WORLD_SIZE") || !env("RANK"))
            return mc_err_set(err, "torchrun-style launch: both RANK and WORLD_SIZE must be set (got RANK=%s, "
                                   "WORLD_SIZE=%s)",
                              env("RANK") ? env("RANK") : "<unset>", env("WORLD_SIZE") ? env("WORLD_SIZE") : "<unset>");
        li->size = env_int("WORLD_SIZE", err, &ok);
        li->rank = env_int("RANK", err, &ok);
        li->local_rank = env_int("LOCAL_RANK", err, &ok);
        if (ok && li->size < 1) return mc_err_set(err, "WORLD_SIZE must be >= 1, got %d", li->size);
        if (ok && li->rank >= li->size)
            return mc_err_set(err, "RANK=%d is outside WORLD_SIZE=%d", li->rank, li->size);
    }
    return ok ? MC_OK : MC_ERR;
}

#ifdef MC_HAVE_MPI

static int mpi_error(mc_err *err, int rc, const char *what) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(rc, msg, &len);
    msg[len] = 0;
    return mc_err_set(err, "%s failed: %s", what, msg);
}

static int mpi_start(mc_err *err) {
    int provided = MPI_THREAD_SINGLE;
    int rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    if (rc != MPI_SUCCESS) return mc_err_set(err, "MPI_Init_thread failed (error %d)", rc);
    mc_rt.mpi_active = true;
    mc_rt.thread_level = provided;
    mc_rt.world = MPI_COMM_WORLD;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    return MC_OK;
}

/* ---- the TCP rendezvous of the torchrun-style launch (strings only) ---- */

static double remaining(double deadline) { return deadline - mc_watch_now(); }

static int wait_fd(int fd, short events, double deadline) {
    for (;;) {
        double left = remaining(deadline);
        if (left <= 0) return 0;
        struct pollfd p = {fd, events, 0};
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r > 0) return 1;
        if (r < 0 && errno != EINTR) return -1;
    }
}

static bool write_all(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        p += w;
        n -= (size_t)w;
    }
    return true;
}

static bool read_all(int fd, void *buf, size_t n, double deadline) {
    char *p = buf;
    while (n) {
        if (wait_fd(fd, POLLIN, deadline) <= 0) return false;
        ssize_t r = recv(fd, p, n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        p += r;
        n -= (size_t)r;
    }
    return true;
}

static bool send_str(int fd, const char *s) {
    uint32_t n = htonl((uint32_t)strlen(s));
    return write_all(fd, &n, 4) && write_all(fd, s, strlen(s));
}

static bool recv_str(int fd, char *s, size_t cap, double deadline) {
    uint32_t n;
    if (!read_all(fd, &n, 4, deadline)) return false;
    n = ntohl(n);
    if (n + 1 > cap) return false;
    if (!read_all(fd, s, n, deadline)) return false;
    s[n] = 0;
    return true;
}

static int tcp_listen(int port, mc_err *err) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return mc_err_set(err, "rendezvous: socket: %s", strerror(errno)), -1;
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    a.sin_port = htons((uint16_t)port);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 1024) < 0) {
        mc_err_set(err, "rendezvous: rank 0 cannot listen on MASTER_PORT=%d: %s", port, strerror(errno));
        close(fd);
        return -1;
    }
    return fd;
}

static int tcp_connect(const char *host, int port, double deadline, mc_err *err) {
    char ports[16];
    snprintf(ports, sizeof ports, "%d", port);
    const char *why = "timed out";
    while (remaining(deadline) > 0) {
        struct addrinfo hints, *res = NULL;
        memset(&hints, 0, sizeof hints);
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        int g = getaddrinfo(host, ports, &hints, &res);
        if (g != 0) {
            mc_err_set(err, "rendezvous: cannot resolve MASTER_ADDR=%s: %s", host, gai_strerror(g));
            return -1;
        }
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            int fd = socket(ai->ai_family, ai->ai_socktype, ai->ai_protocol);
            if (fd < 0) continue;
            if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
                freeaddrinfo(res);
                return fd;
            }
            why = strerror(errno);
            close(fd);
        }
        freeaddrinfo(res);
        usleep(100 * 1000); /* rank 0 may not listen yet */
    }
    mc_err_set(err, "rendezvous: could not reach rank 0 at MASTER_ADDR=%s MASTER_PORT=%d within %.0f s (%s)", host,
               port, mc_rt.timeout_s, why);
    return -1;
}

/* Starts an ompi-server and returns its URI (rank 0 of a torchrun-style launch). */
static int start_ompi_server(char *uri, size_t cap, double deadline, mc_err *err) {
    char path[] = "/tmp/megatron-c-ompi-server-XXXXXX";
    int tfd = mkstemp(path);
    if (tfd < 0) return mc_err_set(err, "rendezvous: cannot create a temporary file: %s", strerror(errno));
    close(tfd);
    pid_t pid = fork();
    if (pid < 0) return mc_err_set(err, "rendezvous: fork: %s", strerror(errno));
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* ends with rank 0, whatever happens to it */
        int nul = open("/dev/null", O_RDWR);
        if (nul >= 0) {
            dup2(nul, 0);
            dup2(nul, 1);
            dup2(nul, 2);
        }
        execlp("ompi-server", "ompi-server", "--no-daemonize", "-r", path, (char *)NULL);
        _exit(127);
    }
    mc_rt.ompi_server_pid = pid;
    double until = mc_watch_now() + 30.0;
    if (until > deadline) until = deadline;
    for (;;) {
        FILE *f = fopen(path, "r");
        size_t n = 0;
        if (f) {
            n = fread(uri, 1, cap - 1, f);
            fclose(f);
        }
        uri[n] = 0;
        if (n > 0 && uri[n - 1] == '\n') {
            while (n && (uri[n - 1] == '\n' || uri[n - 1] == '\r' || uri[n - 1] == ' ')) uri[--n] = 0;
            unlink(path);
            return MC_OK;
        }
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) {
            mc_rt.ompi_server_pid = 0;
            unlink(path);
            return mc_err_set(err,
                              "torchrun-style launch: Open MPI needs an ompi-server to connect separately started "
                              "processes, and 'ompi-server' %s (install Open MPI's tools, start one and set "
                              "OMPI_MCA_pmix_server_uri, or launch with mpirun)",
                              WIFEXITED(status) && WEXITSTATUS(status) == 127 ? "was not found on PATH"
                                                                              : "exited at start");
        }
        if (mc_watch_now() > until) {
            unlink(path);
            return mc_err_set(err, "torchrun-style launch: the ompi-server did not report its address within 30 s");
        }
        usleep(20 * 1000);
    }
}

static int torchrun_join(const launch_info *li, mc_err *err) {
    const char *addr = env("MASTER_ADDR") ? env("MASTER_ADDR") : "127.0.0.1";
    bool ok = true;
    int port = env("MASTER_PORT") ? env_int("MASTER_PORT", err, &ok) : 29500;
    if (!ok) return MC_ERR;
    if (port < 1 || port > 65535) return mc_err_set(err, "MASTER_PORT must be in 1..65535, got %d", port);
    double deadline = mc_watch_now() + mc_rt.timeout_s;
    int W = li->size, R = li->rank;
    char uri[4096], port_name[MPI_MAX_PORT_NAME + 1];
    mc_watch_start(); /* covers the MPI accept/connect below */
    if (R == 0) {
        int lfd = tcp_listen(port, err);
        if (lfd < 0) return MC_ERR;
        int *fds = mc_xcalloc((size_t)W, sizeof(int));
        for (int i = 0; i < W; i++) fds[i] = -1;
        int rc = MC_OK;
        for (int got = 1; got < W && rc == MC_OK;) {
            if (wait_fd(lfd, POLLIN, deadline) <= 0) {
                rc = mc_err_set(err, "rendezvous: only %d of %d ranks reached MASTER_PORT=%d within %.0f s", got, W,
                                port, mc_rt.timeout_s);
                break;
            }
            int fd = accept(lfd, NULL, NULL);
            if (fd < 0) continue;
            char hello[64];
            int r = -1, w = -1;
            if (!recv_str(fd, hello, sizeof hello, deadline) || sscanf(hello, "megatron-c %d %d", &r, &w) != 2) {
                close(fd); /* not one of ours */
                continue;
            }
            if (w != W || r < 1 || r >= W || fds[r] >= 0) {
                rc = mc_err_set(err, "rendezvous: a process with RANK=%d WORLD_SIZE=%d joined rank 0's WORLD_SIZE=%d "
                                     "(duplicate or mismatched RANK/WORLD_SIZE)",
                                r, w, W);
                close(fd);
                break;
            }
            fds[r] = fd;
            got++;
        }
        close(lfd);
        if (rc == MC_OK) {
            const char *given = env("OMPI_MCA_pmix_server_uri");
            if (given)
                snprintf(uri, sizeof uri, "%s", given);
#ifdef OPEN_MPI
            else
                rc = start_ompi_server(uri, sizeof uri, deadline, err);
#else
            else
                uri[0] = 0;
#endif
        }
        for (int k = 1; k < W && rc == MC_OK; k++)
            if (!send_str(fds[k], uri)) rc = mc_err_set(err, "rendezvous: rank %d went away", k);
        if (rc == MC_OK && uri[0]) setenv("OMPI_MCA_pmix_server_uri", uri, 1);
        if (rc == MC_OK) rc = mpi_start(err);
        MPI_Comm comm = MPI_COMM_NULL;
        if (rc == MC_OK) {
            int e = MPI_Open_port(MPI_INFO_NULL, port_name);
            if (e != MPI_SUCCESS) rc = mpi_error(err, e, "MPI_Open_port");
        }
        if (rc == MC_OK) MPI_Comm_dup(MPI_COMM_SELF, &comm);
        for (int k = 1; k < W && rc == MC_OK; k++) {
            if (!send_str(fds[k], port_name)) {
                rc = mc_err_set(err, "rendezvous: rank %d went away", k);
                break;
            }
            MPI_Comm inter, merged;
            mc_watch_begin("accept", "world", W);
            int e = MPI_Comm_accept(port_name, MPI_INFO_NULL, 0, comm, &inter);
            if (e == MPI_SUCCESS) e = MPI_Intercomm_merge(inter, 0, &merged);
            mc_watch_end();
            if (e != MPI_SUCCESS) {
                rc = mpi_error(err, e, "MPI_Comm_accept");
                break;
            }
            MPI_Comm_free(&inter);
            MPI_Comm_free(&comm);
            comm = merged;
        }
        if (rc == MC_OK) MPI_Close_port(port_name);
        for (int k = 1; k < W; k++)
            if (fds[k] >= 0) close(fds[k]);
        free(fds);
        if (rc != MC_OK) return rc;
        mc_rt.world = comm;
    } else {
        int fd = tcp_connect(addr, port, deadline, err);
        if (fd < 0) return MC_ERR;
        char hello[64];
        snprintf(hello, sizeof hello, "megatron-c %d %d", R, W);
        if (!send_str(fd, hello) || !recv_str(fd, uri, sizeof uri, deadline)) {
            close(fd);
            return mc_err_set(err, "rendezvous: rank 0 at %s:%d closed the connection or did not answer within %.0f s "
                                   "(see rank 0's message)",
                              addr, port, mc_rt.timeout_s);
        }
        if (uri[0]) setenv("OMPI_MCA_pmix_server_uri", uri, 1);
        if (mpi_start(err) != MC_OK) {
            close(fd);
            return MC_ERR;
        }
        bool got = recv_str(fd, port_name, sizeof port_name, deadline);
        close(fd);
        if (!got)
            return mc_err_set(err, "rendezvous: rank 0 did not send the MPI port within %.0f s (a lower rank is "
                                   "missing, or rank 0 failed)",
                              mc_rt.timeout_s);
        MPI_Comm inter, comm;
        mc_watch_begin("connect", "world", W);
        int e = MPI_Comm_connect(port_name, MPI_INFO_NULL, 0, MPI_COMM_SELF, &inter);
        if (e == MPI_SUCCESS) e = MPI_Intercomm_merge(inter, 1, &comm);
        mc_watch_end();
        if (e != MPI_SUCCESS) return mpi_error(err, e, "MPI_Comm_connect");
        MPI_Comm_free(&inter);
        for (int k = R + 1; k < W; k++) { /* the later ranks join through rank 0's port */
            MPI_Comm merged;
            mc_watch_begin("accept", "world", W);
            e = MPI_Comm_accept(NULL, MPI_INFO_NULL, 0, comm, &inter);
            if (e == MPI_SUCCESS) e = MPI_Intercomm_merge(inter, 0, &merged);
            mc_watch_end();
            if (e != MPI_SUCCESS) return mpi_error(err, e, "MPI_Comm_accept");
            MPI_Comm_free(&inter);
            MPI_Comm_free(&comm);
            comm = merged;
        }
        mc_rt.world = comm;
    }
    MPI_Comm_set_errhandler(mc_rt.world, MPI_ERRORS_RETURN);
    return MC_OK;
}

static int mpi_world(const launch_info *li, mc_err *err) {
    if (li->launcher == MC_LAUNCH_TORCHRUN) {
        MC_TRY(torchrun_join(li, err));
    } else {
        MC_TRY(mpi_start(err));
    }
    int size, rank;
    MPI_Comm_size(mc_rt.world, &size);
    MPI_Comm_rank(mc_rt.world, &rank);
    const char *who = mc_comm_launcher_name(li->launcher);
    if (li->size > 0 && size != li->size)
        return mc_err_set(err,
                          "the launcher (%s) started %d processes but MPI sees a world of %d: this MPI does not "
                          "support that launcher (with srun, try --mpi=pmix; or launch with mpirun)",
                          who, li->size, size);
    if (li->rank >= 0 && rank != li->rank)
        return mc_err_set(err, "the launcher (%s) says this is rank %d but MPI says %d", who, li->rank, rank);
    mc_rt.world_size = size;
    mc_rt.world_rank = rank;
    /* Local rank and size from the processes sharing this host's memory. */
    MPI_Comm node;
    int lrank = 0, lsize = 1;
    if (MPI_Comm_split_type(mc_rt.world, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
        MPI_Comm_rank(node, &lrank);
        MPI_Comm_size(node, &lsize);
        MPI_Comm_free(&node);
    }
    mc_rt.local_rank = li->local_rank >= 0 ? li->local_rank : lrank;
    const char *lws = env("LOCAL_WORLD_SIZE");
    mc_rt.local_size = li->launcher == MC_LAUNCH_TORCHRUN && lws ? atoi(lws) : lsize;
    if (mc_rt.local_size <= mc_rt.local_rank) mc_rt.local_size = mc_rt.local_rank + 1;
    return MC_OK;
}

#endif

int mc_bootstrap(mc_err *err) {
    if (mc_rt.world_size > 0) return MC_OK;
    launch_info li;
    MC_TRY(detect(&li, err));
    mc_rt.launcher = li.launcher;
    if (li.size == 1 || li.launcher == MC_LAUNCH_NONE) {
        mc_rt.world_size = 1;
        mc_rt.world_rank = 0;
        mc_rt.local_rank = 0;
        mc_rt.local_size = 1;
        return MC_OK;
    }
#ifdef MC_HAVE_MPI
    if (mc_rt.mpi_finalized)
        return mc_err_set(err, "MPI was already finalized in this process (it cannot start twice): keep one comm "
                               "alive while creating the next");
    mc_rt.world_rank = li.rank >= 0 ? li.rank : 0; /* for messages until MPI says */
    if (mpi_world(&li, err) != MC_OK) {
        mc_err_prefix(err, "rank %d: ", li.rank >= 0 ? li.rank : 0);
        return MC_ERR;
    }
    mc_watch_start();
    return MC_OK;
#else
    return mc_err_set(err, "launched by %s with %d processes, but this build of megatron-c has no MPI (CMake did not "
                           "find it: install an MPI, e.g. libopenmpi-dev, and rebuild)",
                      mc_comm_launcher_name(li.launcher), li.size);
#endif
}

void mc_bootstrap_finalize(void) {
#ifdef MC_HAVE_MPI
    if (mc_rt.mpi_active) {
        if (mc_rt.launcher == MC_LAUNCH_TORCHRUN) {
            /* Separately launched processes: leave together, before rank 0's ompi-server ends. */
            MPI_Barrier(mc_rt.world);
        }
        MPI_Finalize();
        mc_rt.mpi_active = false;
        mc_rt.mpi_finalized = true;
    }
#endif
    if (mc_rt.ompi_server_pid > 0) {
        kill(mc_rt.ompi_server_pid, SIGTERM);
        waitpid(mc_rt.ompi_server_pid, NULL, 0);
        mc_rt.ompi_server_pid = 0;
    }
    mc_rt.world_size = 0;
}
