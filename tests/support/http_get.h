/* A plain HTTP/1.0 GET for tests of the admin endpoints (no curl needed). */
#ifndef EGM_TEST_HTTP_GET_H
#define EGM_TEST_HTTP_GET_H

#include <stddef.h>

/* GET http://127.0.0.1:port/path. Returns the HTTP status (or -1 when no
 * answer came within 10 s) and copies the body, NUL-terminated, into body. */
int egm_test_http_get(unsigned port, const char *path, char *body, size_t len);
/* The number after "http " in a provider's ready line, or 0. */
unsigned egm_test_ready_http_port(const char *ready_line);

#endif
