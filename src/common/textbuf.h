/* Text written into a caller's buffer with snprintf's contract: `need` counts
 * every byte the whole text needs, at most len - 1 are written and the buffer
 * stays NUL-terminated (len > 0). For functions that answer "the length the
 * text needs", e.g. formatters and metrics. */
#ifndef EGM_COMMON_TEXTBUF_H
#define EGM_COMMON_TEXTBUF_H

#include <stddef.h>

typedef struct {
    char *buf;
    size_t len;
    size_t need;
} egm_textbuf_t;

/* Starts an empty text in buf (NUL-terminated when len > 0). */
egm_textbuf_t egm__textbuf(char *buf, size_t len);
void egm__textbuf_printf(egm_textbuf_t *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

#endif
