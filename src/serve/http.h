/* http.h: a small HTTP/1.1 server over libmicrohttpd: one thread a connection, each
 * request's body read whole (up to a cap) and handed to one handler, which may block (it
 * waits for the generator) and answers with a status and a JSON body.
 *
 * A body over the cap is answered 413 without the handler (at once when Content-Length
 * says so). Connections have no idle timeout (a handler may wait long for the generator);
 * at most max_connections are open at once. In a build without libmicrohttpd,
 * mc_http_start fails saying so. */
#ifndef MC_SERVE_HTTP_H
#define MC_SERVE_HTTP_H

#include <stddef.h>

#include "base/error.h"

typedef struct mc_http_reply {
    int status;
    char *body;        /* malloc'd JSON, freed by the server */
    const char *allow; /* the Allow header of a 405 */
} mc_http_reply;

/* body is NUL-terminated at len (and may hold NUL bytes before). */
typedef void (*mc_http_handler)(void *ctx, const char *method, const char *path, const char *body, size_t len,
                                mc_http_reply *reply);

typedef struct mc_http_server mc_http_server;

/* Listens on host (an IPv4 address) and port (0: a free one, see mc_http_port);
 * max_connections at once; bodies of at most max_body bytes. The error says why it cannot
 * listen (the port is taken, ...). */
mc_http_server *mc_http_start(const char *host, int port, int max_connections, size_t max_body,
                              mc_http_handler handler, void *ctx, mc_err *err);
int mc_http_port(const mc_http_server *s);
/* Closes the listening socket: no new connection from now on (the open ones go on). */
void mc_http_quiesce(mc_http_server *s);
/* Waits (at most 10 s) until no request is in a handler or having its answer written,
 * then closes every connection and frees the server. */
void mc_http_stop(mc_http_server *s);

/* 1 where this build can serve HTTP. */
int mc_http_available(void);

#endif
