/* Appending text into a caller's buffer or a growing one (see textbuf.h). */
#include "common/textbuf.h"

#include <stdio.h>
#include <string.h>
#include "common/alloc.h"

egm_textbuf_t egm__textbuf(char *buf, size_t len)
{
    if (buf != NULL && len > 0)
        buf[0] = '\0';
    return (egm_textbuf_t){buf, buf != NULL ? len : 0, 0, NULL, EGM_OK};
}

egm_textbuf_t egm__textbuf_growing(const char *site)
{
    return (egm_textbuf_t){NULL, 0, 0, site != NULL ? site : "textbuf", EGM_OK};
}

/* Room for n more bytes and a NUL when the text is growing and whole so far;
 * 0 when the bytes will not all fit (the caller then writes what fits). */
static int reserve(egm_textbuf_t *t, size_t n)
{
    if (t->need + n < t->len)
        return 1;
    if (t->site == NULL || t->status != EGM_OK)
        return 0;
    size_t cap = t->len > 128 ? t->len : 128;
    while (cap <= t->need + n) {
        if (cap > SIZE_MAX / 2) {
            t->status = EGM_ERR_NO_MEMORY;
            return 0;
        }
        cap *= 2;
    }
    char *buf = egm_realloc(t->buf, cap, t->site);
    if (buf == NULL) {
        t->status = EGM_ERR_NO_MEMORY;
        return 0;
    }
    if (t->buf == NULL)
        buf[0] = '\0';
    t->buf = buf;
    t->len = cap;
    return 1;
}

void egm__textbuf_vprintf(egm_textbuf_t *t, const char *fmt, va_list ap)
{
    va_list again;
    va_copy(again, ap);
    char *dst = t->need < t->len ? t->buf + t->need : NULL;
    size_t room = t->need < t->len ? t->len - t->need : 0;
    int n = vsnprintf(dst, room, fmt, ap);
    /* n == 0 too: a growing text written once has a buffer, even an empty one. */
    if (n >= 0 && (size_t)n >= room && reserve(t, (size_t)n))
        vsnprintf(t->buf + t->need, t->len - t->need, fmt, again);
    va_end(again);
    if (n > 0)
        t->need += (size_t)n;
}

void egm__textbuf_printf(egm_textbuf_t *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    egm__textbuf_vprintf(t, fmt, ap);
    va_end(ap);
}

void egm__textbuf_append(egm_textbuf_t *t, const char *s, size_t n)
{
    reserve(t, n);
    if (t->need < t->len) {
        size_t room = t->len - t->need - 1;
        size_t k = n < room ? n : room;
        memcpy(t->buf + t->need, s, k);
        t->buf[t->need + k] = '\0';
    }
    t->need += n;
}
