/* A minimal HTTP/1.1 client for JSON POSTs to etcd's gateway: one kept-alive
 * connection, a response read whole (Content-Length or chunked), bounded in
 * size and time. The response parser is a pure function so that it can be
 * fuzzed. Not thread-safe: one caller per connection at a time. */
#ifndef EGM_HA_HTTP_H
#define EGM_HA_HTTP_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "common/sock.h"

/* The largest response body accepted (etcd's answers here are a few KiB). */
#define EGM_HTTP_BODY_MAX (4u << 20)

typedef struct {
    char host[EGM_SOCK_HOST_MAX];
    uint16_t port;
    int fd; /* -1 when not connected */
} egm_http_conn_t;

/* Prepares c for host:port (nothing is connected until the first post). */
void egm__http_conn_init(egm_http_conn_t *c, const char *host, uint16_t port);
/* Closes the connection (init may follow again). */
void egm__http_conn_cleanup(egm_http_conn_t *c);

/* POSTs body (len bytes of JSON) to path and reads the response within
 * timeout_ms. On EGM_OK, *status_p is the HTTP status and *body_p the body
 * (NUL-terminated, *body_len_p bytes; egm_free it). A kept-alive connection
 * the server closed meanwhile is reopened once. Errors: EGM_ERR_UNREACHABLE
 * (connect or a lost connection), EGM_ERR_TIMEOUT, EGM_ERR_PROTOCOL (not an
 * HTTP response, or a body over EGM_HTTP_BODY_MAX), EGM_ERR_NO_MEMORY. */
egm_status_t egm__http_post(egm_http_conn_t *c, const char *path, const char *body, size_t len,
                            int timeout_ms, int *status_p, char **body_p, size_t *body_len_p);

/* Parses one response from the len bytes at buf. EGM_INPROGRESS: more bytes
 * are needed. EGM_OK: *status_p, the body (decoded from chunks; egm_malloc'ed,
 * NUL-terminated, *body_len_p bytes) in *body_p, *consumed_p the bytes of buf
 * it used and *close_p whether the server said Connection: close.
 * EGM_ERR_PROTOCOL: malformed (the detail says how). EGM_ERR_NO_MEMORY. */
egm_status_t egm__http_response_parse(const char *buf, size_t len, int *status_p, char **body_p,
                                      size_t *body_len_p, size_t *consumed_p, int *close_p);

#endif
