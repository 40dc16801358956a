/* UTF-8: the one decoder of a sequence, for the JSON escaper and the CLI's
 * escaping of keys in human output, and the one encoder, for the JSON reader. */
#ifndef EGM_COMMON_UTF8_H
#define EGM_COMMON_UTF8_H

#include <stddef.h>
#include <stdint.h>

/* Length (1..4) of the well-formed UTF-8 sequence at p, of which n bytes may
 * be read, with its code point in *cp_p (cp_p may be NULL); 0 when the bytes
 * there are not one: an invalid lead or continuation byte, an overlong form, a
 * surrogate, a code point above U+10FFFF, or a sequence cut short by n. Bytes
 * are read in order and no further than the first that does not belong, so a
 * NUL-terminated text may pass its remaining length or SIZE_MAX. Any thread. */
size_t egm__utf8_seq(const unsigned char *p, size_t n, uint32_t *cp_p);
/* Writes code point cp (at most U+10FFFF, not a surrogate) as UTF-8 into out
 * (4 bytes room) and answers its length (1..4). Any thread. */
size_t egm__utf8_encode(uint32_t cp, char *out);

#endif
