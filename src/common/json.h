/* JSON string literals: the one escaper of the master's admin HTTP and the
 * benchmarks' result files. */
#ifndef EGM_COMMON_JSON_H
#define EGM_COMMON_JSON_H

#include <stddef.h>
#include "common/textbuf.h"

/* Appends len bytes of text (any bytes; NULL when len is 0) to t as a JSON
 * string, quotes included: '"' and '\' are escaped with a backslash, valid
 * UTF-8 is written as it is, and control characters, DEL and every byte that
 * is not part of valid UTF-8 are written as \u00XX (so that keys of arbitrary
 * bytes always give valid JSON; docs/master.md). */
void egm__json_string(egm_textbuf_t *t, const char *text, size_t len);
/* The same for a NUL-terminated text; NULL is written as "". */
void egm__json_cstring(egm_textbuf_t *t, const char *text);

#endif
