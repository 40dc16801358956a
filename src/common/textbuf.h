/* Text appended to a buffer, in one of two kinds:
 * - a caller's fixed buffer (egm__textbuf), with snprintf's contract: `need`
 *   counts every byte the whole text needs, at most len - 1 are written and the
 *   buffer stays NUL-terminated (len > 0). For functions that answer "the
 *   length the text needs", e.g. formatters and egm_client_metrics;
 * - a growing buffer (egm__textbuf_growing): egm_malloc'ed under `site`, grown
 *   as text is appended, always holding the whole text (need bytes, then a NUL)
 *   until memory runs out: then `status` turns NO_MEMORY and the text stops
 *   growing (need still counts it). The caller owns buf (egm_free).
 * The JSON (common/json.h) and Prometheus (common/prom.h) writers append to
 * either. Not thread-safe: one writer at a time. */
#ifndef EGM_COMMON_TEXTBUF_H
#define EGM_COMMON_TEXTBUF_H

#include <stdarg.h>
#include <stddef.h>
#include <egmstore/status.h>

typedef struct {
    char *buf;
    size_t len;          /* bytes of buf */
    size_t need;         /* bytes of the whole text (without its NUL) */
    const char *site;    /* growing: the allocation site of buf; NULL: a caller's fixed buffer */
    egm_status_t status; /* EGM_OK, or EGM_ERR_NO_MEMORY once a growing buffer could not grow */
} egm_textbuf_t;

/* Starts an empty text in buf (NUL-terminated when len > 0). */
egm_textbuf_t egm__textbuf(char *buf, size_t len);
/* Starts an empty growing text (buf NULL until something is written). */
egm_textbuf_t egm__textbuf_growing(const char *site);
void egm__textbuf_printf(egm_textbuf_t *t, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void egm__textbuf_vprintf(egm_textbuf_t *t, const char *fmt, va_list ap)
    __attribute__((format(printf, 2, 0)));
/* Appends n bytes of s (which may hold any byte but should not hold NUL). */
void egm__textbuf_append(egm_textbuf_t *t, const char *s, size_t n);

#endif
