/* Small admin HTTP server (libmicrohttpd underneath) for the daemons' /health,
 * /metrics and the master's admin endpoints. GET and HEAD only, no request
 * bodies, bounded connections with an idle timeout; one internal thread calls
 * the handler. */
#ifndef EGM_ADMIN_HTTP_SERVER_H
#define EGM_ADMIN_HTTP_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>

/* At most this many connections at once; more wait in the listen backlog. */
#define EGM_HTTP_MAX_CONNECTIONS 64
/* A connection idle this long (seconds) is closed. */
#define EGM_HTTP_IDLE_TIMEOUT_S 10

/* What a handler answers. body is egm_malloc'ed by the handler (or NULL = empty); the server
 * frees it with egm_free. cap is kept by egm__http_printf (0 = unknown: exactly len bytes). */
typedef struct {
    int status; /* HTTP status, e.g. 200, 404, 503 (outside 100..599: a 500 is sent) */
    const char *content_type; /* static string, e.g. "application/json" (NULL = text/plain) */
    char *body;
    size_t len;
    size_t cap;
} egm_http_response_t;
/* Called on the server's thread for every GET/HEAD; path without the query (percent-decoded,
 * never NULL); query = raw text after '?' or "". Must fill resp (status defaults to 404 with an
 * empty body if untouched). Other methods get 405 (with Allow), requests with a body 413, without
 * reaching the handler. */
typedef void (*egm_http_handler_fn)(void *arg, const char *path, const char *query,
                                    egm_http_response_t *resp);
typedef struct egm_http_server egm_http_server_t;
/* Listens on address:port (port 0 = a free port; address "0.0.0.0", "127.0.0.1", "::" etc.; NULL
 * or "" = "0.0.0.0"; "::" also takes IPv4). Logs the address:port at info.
 * Errors: EGM_ERR_CONFIG naming http_port/the address and the reason (e.g. port in use),
 * EGM_ERR_NO_MEMORY; EGM_ERR_IO if libmicrohttpd does not start. */
egm_status_t egm__http_start(const char *address, uint16_t port, egm_http_handler_fn fn, void *arg,
                             egm_http_server_t **srv_p);
uint16_t egm__http_port(const egm_http_server_t *srv);
/* Stops accepting, finishes or drops connections, joins the thread; NULL is a no-op. */
void egm__http_stop(egm_http_server_t *srv);
/* Helper for handlers: printf into resp->body (egm_malloc'ed, grows, stays NUL-terminated).
 * Returns EGM_OK or NO_MEMORY. */
egm_status_t egm__http_printf(egm_http_response_t *resp, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
