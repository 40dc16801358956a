/* JSON string literals (see json.h). */
#include "common/json.h"

#include <string.h>

/* Length of the valid UTF-8 sequence at p (at most n bytes), 0 if invalid. */
static size_t utf8_len(const unsigned char *p, size_t n)
{
    unsigned char c = p[0];
    size_t len;
    unsigned char lo = 0x80, hi = 0xbf; /* range of the second byte */

    if (c >= 0xc2 && c <= 0xdf)
        len = 2;
    else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        lo = c == 0xe0 ? 0xa0 : 0x80;
        hi = c == 0xed ? 0x9f : 0xbf;
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        lo = c == 0xf0 ? 0x90 : 0x80;
        hi = c == 0xf4 ? 0x8f : 0xbf;
    } else
        return 0;
    if (len > n || p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if (p[i] < 0x80 || p[i] > 0xbf)
            return 0;
    return len;
}

void egm__json_string(egm_textbuf_t *t, const char *text, size_t len)
{
    const unsigned char *p = (const unsigned char *)text;
    size_t i = 0;

    egm__textbuf_append(t, "\"", 1);
    while (i < len) {
        size_t run = i; /* bytes written verbatim: printable ASCII and valid UTF-8 */
        for (;;) {
            if (run < len && p[run] >= 0x20 && p[run] < 0x7f && p[run] != '"' && p[run] != '\\')
                run++;
            else if (run < len && p[run] >= 0x80 && utf8_len(p + run, len - run) > 0)
                run += utf8_len(p + run, len - run);
            else
                break;
        }
        if (run > i) {
            egm__textbuf_append(t, text + i, run - i);
            i = run;
        } else if (p[i] == '"' || p[i] == '\\') {
            egm__textbuf_printf(t, "\\%c", p[i++]);
        } else {
            egm__textbuf_printf(t, "\\u%04x", (unsigned)p[i++]);
        }
    }
    egm__textbuf_append(t, "\"", 1);
}

void egm__json_cstring(egm_textbuf_t *t, const char *text)
{
    egm__json_string(t, text != NULL ? text : "", text != NULL ? strlen(text) : 0);
}
