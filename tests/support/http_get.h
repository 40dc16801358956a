/* A plain HTTP/1.0 GET for tests of the admin endpoints (no curl needed). */
#ifndef EGM_TEST_HTTP_GET_H
#define EGM_TEST_HTTP_GET_H

#include <stddef.h>

/* GET http://host:port/path (host: an IPv4 literal, also sent as Host:),
 * with one more header line `header` ("Name: value", without CRLF; NULL =
 * none). Returns the HTTP status, or -1 when the request could not be sent
 * or no answer came within 10 s. The whole answer (status line, headers,
 * blank line, body) goes into answer, NUL-terminated and cut at len - 1
 * bytes; *body_p (optional) points at its body there ("" when there is
 * none). */
int egm_test_http_request(const char *host, unsigned port, const char *path, const char *header,
                          char *answer, size_t len, const char **body_p);
/* GET http://127.0.0.1:port/path. Returns the HTTP status (or -1 when no
 * answer came within 10 s) and copies the body, NUL-terminated, into body
 * (up to 256 KiB of answer are read). */
int egm_test_http_get(unsigned port, const char *path, char *body, size_t len);
/* A master's /health body: its role ("single", "leader", "standby") into
 * role (len bytes; "" when absent) and its epoch into *epoch_p (optional;
 * left as it was when absent). */
void egm_test_health_role(const char *body, char *role, size_t len, long long *epoch_p);
/* The number of a field of a /health body, or -1 when absent. */
long long egm_test_health_number(const char *body, const char *field);
/* The value of the sample `name` (with its labels, as /metrics writes them:
 * egm_x_total{type="Get"}) in the /metrics of 127.0.0.1:port, or -1 when
 * absent or no answer came. Any thread. */
double egm_test_metric(unsigned port, const char *name);
/* The same, in a /metrics body already read. */
double egm_test_metric_in(const char *body, const char *name);
/* The number after "http " in a provider's ready line, or 0. */
unsigned egm_test_ready_http_port(const char *ready_line);

#endif
