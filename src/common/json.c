/* JSON string literals (see json.h). */
#include "common/json.h"

#include <string.h>
#include "common/utf8.h"

void egm__json_string(egm_textbuf_t *t, const char *text, size_t len)
{
    const unsigned char *p = (const unsigned char *)text;
    size_t i = 0;

    egm__textbuf_append(t, "\"", 1);
    while (i < len) {
        size_t run = i, n; /* bytes written verbatim: printable ASCII and valid UTF-8 */
        for (;;) {
            if (run < len && p[run] >= 0x20 && p[run] < 0x7f && p[run] != '"' && p[run] != '\\')
                run++;
            else if (run < len && p[run] >= 0x80 &&
                     (n = egm__utf8_seq(p + run, len - run, NULL)) > 0)
                run += n;
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
