/* http.c: the HTTP server of http.h over libmicrohttpd (thread per connection). */
#include "serve/http.h"

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef MC_HAVE_MICROHTTPD

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#if MHD_VERSION < 0x00097002
typedef int mhd_result; /* before 0.9.71 the callbacks returned int */
#else
typedef enum MHD_Result mhd_result;
#endif

struct mc_http_server {
    struct MHD_Daemon *daemon;
    mc_http_handler handler;
    void *ctx;
    size_t max_body;
    int port;
    int quiesced_fd; /* the listening socket once quiesced (closed after the stop), else -1 */
    atomic_bool started;
    atomic_int active; /* requests from their headers until their answer is sent */
    char start_error[256]; /* libmicrohttpd's last message while starting */
};

/* One request's body as it arrives. */
typedef struct body {
    char *data;
    size_t len, cap;
    bool too_large;
} body;

/* libmicrohttpd's messages: kept while starting (the reason it cannot listen), printed after */
static void on_log(void *cls, const char *fmt, va_list ap) {
    mc_http_server *s = cls;
    char line[256];
    vsnprintf(line, sizeof line, fmt, ap);
    size_t n = strlen(line);
    while (n && (line[n - 1] == '\n' || line[n - 1] == '\r')) line[--n] = 0;
    if (atomic_load(&s->started)) fprintf(stderr, "megatron-c serve: http: %s\n", line);
    else snprintf(s->start_error, sizeof s->start_error, "%s", line);
}

static mhd_result send_reply(struct MHD_Connection *c, mc_http_reply *r) {
    size_t len = strlen(r->body);
    struct MHD_Response *resp = MHD_create_response_from_buffer(len, r->body, MHD_RESPMEM_MUST_FREE);
    if (!resp) {
        free(r->body);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (r->allow) MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
    mhd_result rc = MHD_queue_response(c, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    return rc;
}

static mhd_result too_large(struct MHD_Connection *c, size_t max) {
    char msg[128];
    snprintf(msg, sizeof msg, "{\"error\": \"the body is larger than %zu bytes\"}", max);
    mc_http_reply r = {.status = 413, .body = strdup(msg)};
    return r.body ? send_reply(c, &r) : MHD_NO;
}

static mhd_result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                             const char *version, const char *upload, size_t *upload_size, void **state) {
    (void)version;
    mc_http_server *s = cls;
    body *b = *state;
    if (!b) { /* the headers: the body follows in the next calls */
        b = calloc(1, sizeof *b);
        if (!b) return MHD_NO;
        *state = b;
        atomic_fetch_add(&s->active, 1);
        const char *declared = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (declared && strtoull(declared, NULL, 10) > s->max_body) {
            b->too_large = true;
            return too_large(c, s->max_body); /* answered before the body is read; the connection then closes */
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!b->too_large && b->len + *upload_size > s->max_body) {
            b->too_large = true;
            free(b->data);
            b->data = NULL;
        }
        if (!b->too_large) {
            if (b->len + *upload_size + 1 > b->cap) {
                size_t cap = 2 * (b->len + *upload_size) + 1;
                char *grown = realloc(b->data, cap);
                if (!grown) return MHD_NO;
                b->data = grown;
                b->cap = cap;
            }
            memcpy(b->data + b->len, upload, *upload_size);
            b->len += *upload_size;
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (b->too_large) return too_large(c, s->max_body);
    if (b->data) b->data[b->len] = 0; /* the buffer always keeps a byte for it */
    mc_http_reply r = {0};
    s->handler(s->ctx, method, url, b->data ? b->data : "", b->len, &r);
    return send_reply(c, &r);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **state, enum MHD_RequestTerminationCode why) {
    (void)c;
    (void)why;
    mc_http_server *s = cls;
    body *b = *state;
    if (!b) return;
    free(b->data);
    free(b);
    *state = NULL;
    atomic_fetch_sub(&s->active, 1);
}

mc_http_server *mc_http_start(const char *host, int port, int max_connections, size_t max_body,
                              mc_http_handler handler, void *ctx, mc_err *err) {
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    if (port < 0 || port > 65535) {
        mc_err_set(err, "--port %d: expected a port in [0, 65535]", port);
        return NULL;
    }
    if (inet_pton(AF_INET, host, &addr.sin_addr) != 1) {
        mc_err_set(err, "--host %s: expected an IPv4 address (127.0.0.1, 0.0.0.0, ...)", host);
        return NULL;
    }
    mc_http_server *s = mc_xcalloc(1, sizeof *s);
    s->handler = handler;
    s->ctx = ctx;
    s->max_body = max_body;
    s->quiesced_fd = -1;
    s->daemon = MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC |
                                     MHD_USE_ERROR_LOG,
                                 (uint16_t)port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, &addr,
                                 MHD_OPTION_CONNECTION_LIMIT, (unsigned)max_connections, MHD_OPTION_NOTIFY_COMPLETED,
                                 on_completed, s, MHD_OPTION_EXTERNAL_LOGGER, on_log, s, MHD_OPTION_END);
    if (!s->daemon) {
        mc_err_set(err, "cannot listen on %s:%d: %s", host, port, s->start_error[0] ? s->start_error : "libmicrohttpd failed");
        free(s);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->daemon, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : port;
    atomic_store(&s->started, true);
    return s;
}

int mc_http_port(const mc_http_server *s) { return s->port; }

void mc_http_quiesce(mc_http_server *s) {
    if (s->quiesced_fd < 0) s->quiesced_fd = (int)MHD_quiesce_daemon(s->daemon);
}

void mc_http_stop(mc_http_server *s) {
    if (!s) return;
    /* libmicrohttpd's stop closes every connection at once: the answers still being written
     * (their handlers just returned) are let go first, for at most 10 s */
    for (int i = 0; i < 10000 && atomic_load(&s->active) > 0; i++) nanosleep(&(struct timespec){.tv_nsec = 1000000}, NULL);
    MHD_stop_daemon(s->daemon);
    if (s->quiesced_fd >= 0) close(s->quiesced_fd);
    free(s);
}

int mc_http_available(void) { return 1; }

#else /* a build without libmicrohttpd */

mc_http_server *mc_http_start(const char *host, int port, int max_connections, size_t max_body,
                              mc_http_handler handler, void *ctx, mc_err *err) {
    (void)host, (void)port, (void)max_connections, (void)max_body, (void)handler, (void)ctx;
    mc_err_set(err, "this build has no HTTP server: install libmicrohttpd (scripts/install-deps.sh) and rebuild");
    return NULL;
}
int mc_http_port(const mc_http_server *s) { return (void)s, 0; }
void mc_http_quiesce(mc_http_server *s) { (void)s; }
void mc_http_stop(mc_http_server *s) { (void)s; }
int mc_http_available(void) { return 0; }

#endif
