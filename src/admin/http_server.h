/* Small admin HTTP server (libmicrohttpd underneath) for the daemons' /health,
 * /metrics and the master's admin endpoints. GET and HEAD only, no request
 * bodies, bounded connections with an idle timeout and a deadline for a
 * request's head; one internal thread calls the handler. */
#ifndef EGM_ADMIN_HTTP_SERVER_H
#define EGM_ADMIN_HTTP_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "common/textbuf.h"

/* At most this many connections at once; more wait in the listen backlog. */
#define EGM_HTTP_MAX_CONNECTIONS 64
/* A connection idle this long (seconds) is closed. */
#define EGM_HTTP_IDLE_TIMEOUT_S 10
/* A connection that has not sent a whole request head (request line and
 * headers) this long (seconds) after it connected or after its last answer is
 * closed, however often it sends a byte: a peer that trickles a header line
 * every few seconds cannot hold a slot (egm_http_params_t.head_deadline_ms). */
#define EGM_HTTP_HEAD_DEADLINE_S 10
/* Most paths served without the token (egm_http_params_t.open_paths), and their longest. */
#define EGM_HTTP_OPEN_PATHS_MAX 8
#define EGM_HTTP_OPEN_PATH_LEN 64

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
typedef struct {
    /* "0.0.0.0", "127.0.0.1", "::" etc.; NULL or "" = "0.0.0.0"; "::" also takes IPv4 */
    const char *address;
    uint16_t port; /* 0 = a free port */
    egm_http_handler_fn fn;
    void *arg;
    /* Bearer token (copied; NULL or "" = none). With one, a request for any
     * path but open_paths must carry `Authorization: Bearer <token>` (scheme
     * case-insensitive, token compared in constant time); otherwise it is
     * answered 401 with `WWW-Authenticate: Bearer realm="egmstore"` (plus
     * `error="invalid_token"` for a wrong one) and a JSON error, without
     * reaching the handler. Unknown paths need it too. */
    const char *auth_token;
    /* Paths (exact, after percent-decoding) served without the token;
     * NULL-terminated, at most EGM_HTTP_OPEN_PATHS_MAX; NULL = none. */
    const char *const *open_paths;
    /* EGM_HTTP_HEAD_DEADLINE_S in ms when 0 (tests set less). */
    uint64_t head_deadline_ms;
} egm_http_params_t;
/* Listens on params' address:port, answering with params->fn (required). Logs
 * the address:port at info. *srv_p is set before the server's thread starts, so
 * that its handler may read it (e.g. for egm__http_auth_failures); NULL when
 * the start fails. Errors: EGM_ERR_CONFIG naming http_port/the address and the
 * reason (e.g. port in use), EGM_ERR_NO_MEMORY; EGM_ERR_IO if libmicrohttpd
 * does not start; EGM_ERR_INVALID_ARG for no handler, a token longer than
 * EGM_AUTH_TOKEN_MAX or too many / too long open paths; the status of
 * pthread_create's error when the deadline's thread does not start. */
egm_status_t egm__http_start(const egm_http_params_t *params, egm_http_server_t **srv_p);
/* Requests refused for a missing or wrong token since the start. Thread-safe. */
uint64_t egm__http_auth_failures(const egm_http_server_t *srv);
/* Connections closed after their request line for not completing the head
 * within the deadline, since the start (idle kept-alive ones closed at the
 * deadline are not counted). Thread-safe. */
uint64_t egm__http_slow_closed(const egm_http_server_t *srv);
uint16_t egm__http_port(const egm_http_server_t *srv);
/* Stops accepting, finishes or drops connections, joins the thread; NULL is a no-op. */
void egm__http_stop(egm_http_server_t *srv);
/* Helper for handlers: printf into resp->body (egm_malloc'ed, grows, stays NUL-terminated).
 * Returns EGM_OK or NO_MEMORY. */
egm_status_t egm__http_printf(egm_http_response_t *resp, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* resp->body as a growing text (common/textbuf.h) that the common writers (egm__json_string,
 * egm__prom_*) append to; egm__http_body_end hands it back to resp: EGM_OK, or NO_MEMORY
 * (resp then holds the text up to where memory ran out). */
egm_textbuf_t egm__http_body_begin(const egm_http_response_t *resp);
egm_status_t egm__http_body_end(egm_http_response_t *resp, const egm_textbuf_t *t);

#endif
