/* Base64 (RFC 4648, with padding), as etcd's gateway writes keys and values. */
#ifndef EGM_COMMON_BASE64_H
#define EGM_COMMON_BASE64_H

#include <stddef.h>

/* Room the encoding of n bytes needs, with its NUL. */
#define EGM_BASE64_LEN(n) (((n) + 2) / 3 * 4 + 1)

/* Writes the encoding of len bytes of data into out (EGM_BASE64_LEN(len)
 * bytes), NUL-terminated; answers its length. Any thread. */
size_t egm__base64_encode(const void *data, size_t len, char *out);
/* Decodes len characters of text into out (cap bytes); answers the decoded
 * length, or -1 when text is not base64 (length not a multiple of 4, a
 * character outside the alphabet, padding in the middle) or out is too
 * small. Any thread. */
long egm__base64_decode(const char *text, size_t len, void *out, size_t cap);

#endif
