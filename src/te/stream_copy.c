/* Copies with non-temporal stores (stream_copy.h). */
#include "te/stream_copy.h"

#include <stdint.h>
#include <string.h>

#if defined(__x86_64__)
#include <emmintrin.h> /* SSE2: part of every x86-64 CPU */

void egm__stream_copy(void *dst, const void *src, size_t n)
{
    if (n < EGM_STREAM_COPY_MIN) {
        memcpy(dst, src, n);
        return;
    }
    uint8_t *d = dst;
    const uint8_t *s = src;
    /* Streaming stores need a 16-byte aligned destination. */
    size_t head = (16 - ((uintptr_t)d & 15)) & 15;
    memcpy(d, s, head);
    d += head;
    s += head;
    n -= head;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)(s + i));
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(const void *)(s + i + 48));
        _mm_stream_si128((__m128i *)(void *)(d + i), a);
        _mm_stream_si128((__m128i *)(void *)(d + i + 16), b);
        _mm_stream_si128((__m128i *)(void *)(d + i + 32), c);
        _mm_stream_si128((__m128i *)(void *)(d + i + 48), e);
    }
    /* Streaming stores are weakly ordered: fence them before the caller tells
     * anyone (PutEnd) that the bytes are there. */
    _mm_sfence();
    memcpy(d + i, s + i, n - i);
}

#else

void egm__stream_copy(void *dst, const void *src, size_t n)
{
    memcpy(dst, src, n);
}

#endif
