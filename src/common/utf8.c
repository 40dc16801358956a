/* UTF-8 sequences (see utf8.h). */
#include "common/utf8.h"

size_t egm__utf8_seq(const unsigned char *p, size_t n, uint32_t *cp_p)
{
    unsigned lo = 0x80, hi = 0xbf; /* the range of the second byte */
    size_t len;
    uint32_t cp;

    if (n == 0)
        return 0;
    unsigned c = p[0];
    if (c < 0x80) {
        len = 1;
        cp = c;
    } else if (c >= 0xc2 && c <= 0xdf) {
        len = 2;
        cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
        len = 3;
        cp = c & 0x0f;
        lo = c == 0xe0 ? 0xa0 : lo; /* overlong */
        hi = c == 0xed ? 0x9f : hi; /* surrogates */
    } else if (c >= 0xf0 && c <= 0xf4) {
        len = 4;
        cp = c & 0x07;
        lo = c == 0xf0 ? 0x90 : lo; /* overlong */
        hi = c == 0xf4 ? 0x8f : hi; /* above U+10FFFF */
    } else {
        return 0; /* a continuation byte, C0/C1 (overlong) or F5..FF */
    }
    for (size_t i = 1; i < len; i++) {
        if (i >= n)
            return 0;
        unsigned b = p[i];
        if (b < (i == 1 ? lo : 0x80) || b > (i == 1 ? hi : 0xbf))
            return 0;
        cp = (cp << 6) | (b & 0x3f);
    }
    if (cp_p != NULL)
        *cp_p = cp;
    return len;
}

size_t egm__utf8_encode(uint32_t cp, char *out)
{
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}
