/* Base64 (see base64.h). */
#include <stdint.h>
#include "common/base64.h"

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

size_t egm__base64_encode(const void *data, size_t len, char *out)
{
    const unsigned char *d = data;
    size_t o = 0;
    for (size_t i = 0; i < len; i += 3) {
        uint32_t v = (uint32_t)d[i] << 16;
        if (i + 1 < len)
            v |= (uint32_t)d[i + 1] << 8;
        if (i + 2 < len)
            v |= d[i + 2];
        out[o++] = alphabet[v >> 18];
        out[o++] = alphabet[(v >> 12) & 63];
        out[o++] = i + 1 < len ? alphabet[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < len ? alphabet[v & 63] : '=';
    }
    out[o] = '\0';
    return o;
}

static int value_of(char c)
{
    if (c >= 'A' && c <= 'Z')
        return c - 'A';
    if (c >= 'a' && c <= 'z')
        return c - 'a' + 26;
    if (c >= '0' && c <= '9')
        return c - '0' + 52;
    if (c == '+')
        return 62;
    if (c == '/')
        return 63;
    return -1;
}

long egm__base64_decode(const char *text, size_t len, void *out, size_t cap)
{
    unsigned char *o = out;
    size_t n = 0;
    if (len % 4 != 0)
        return -1;
    for (size_t i = 0; i < len; i += 4) {
        int pad = (text[i + 3] == '=') + (text[i + 2] == '=' && text[i + 3] == '=');
        if (pad > 0 && i + 4 != len)
            return -1;
        int v[4];
        for (int k = 0; k < 4 - pad; k++)
            if ((v[k] = value_of(text[i + k])) < 0)
                return -1;
        for (int k = 4 - pad; k < 4; k++)
            v[k] = 0;
        uint32_t w =
            (uint32_t)v[0] << 18 | (uint32_t)v[1] << 12 | (uint32_t)v[2] << 6 | (uint32_t)v[3];
        size_t k = (size_t)(3 - pad);
        if (n + k > cap)
            return -1;
        o[n++] = (unsigned char)(w >> 16);
        if (k > 1)
            o[n++] = (unsigned char)(w >> 8);
        if (k > 2)
            o[n++] = (unsigned char)w;
    }
    return (long)n;
}
