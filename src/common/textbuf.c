/* snprintf-style appending into a caller's buffer. */
#include "common/textbuf.h"

#include <stdarg.h>
#include <stdio.h>

egm_textbuf_t egm__textbuf(char *buf, size_t len)
{
    if (buf != NULL && len > 0)
        buf[0] = '\0';
    return (egm_textbuf_t){buf, buf != NULL ? len : 0, 0};
}

void egm__textbuf_printf(egm_textbuf_t *t, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    char *dst = t->need < t->len ? t->buf + t->need : NULL;
    size_t room = t->need < t->len ? t->len - t->need : 0;
    int n = vsnprintf(dst, room, fmt, ap);
    va_end(ap);
    if (n > 0)
        t->need += (size_t)n;
}
