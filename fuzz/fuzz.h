/* What the fuzz targets share: the libFuzzer entry point, a check that aborts
 * (libFuzzer, or the replay driver, then reports the input), logs kept quiet,
 * and a cursor over the input bytes. */
#ifndef EGM_FUZZ_FUZZ_H
#define EGM_FUZZ_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config_int.h"
#include "common/log.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The segments fuzz_tcp_request.c exposes (make_corpus.c aims at them). */
#define FUZZ_TCP_ID_A                                                                              \
    {                                                                                              \
        0x1111, 0xa                                                                                \
    } /* host memory, 4096 bytes */
#define FUZZ_TCP_ID_B                                                                              \
    {                                                                                              \
        0x2222, 0xb                                                                                \
    } /* host memory, 1 byte */
#define FUZZ_TCP_ID_GPU                                                                            \
    {                                                                                              \
        0x3333, 0xc                                                                                \
    } /* GPU memory: nvlink only */
#define FUZZ_TCP_ID_GONE                                                                           \
    {                                                                                              \
        0x4444, 0xd                                                                                \
    } /* withdrawn */
#define FUZZ_TCP_SIZE_A 4096
#define FUZZ_TCP_SIZE_B 1

/* The segment fuzz_mirror_apply.c's fresh master has of its own (make_corpus.c
 * aims ops at it). */
#define FUZZ_MIRROR_SEG                                                                            \
    {                                                                                              \
        0x5e6, 0x100                                                                               \
    }
#define FUZZ_MIRROR_OWNER                                                                          \
    {                                                                                              \
        0x0a, 0x1                                                                                  \
    }
#define FUZZ_MIRROR_SEG_SIZE (64u << 10)

/* A broken promise of the code under test (not merely a refused input). */
#define FUZZ_CHECK(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz: check failed at %s:%d: %s (last error: %s)\n", __FILE__,        \
                    __LINE__, #cond, egm_last_error());                                            \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* Logs off (a fuzzer runs millions of refused inputs), unless EGM_FUZZ_LOG
 * names a level (error|warn|info|debug|trace) to see what one input does. */
static inline void fuzz_init_logs(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    int level; /* in the words of the log_level key */
    const char *text = getenv("EGM_FUZZ_LOG");
    if (text != NULL && egm__config_parse_choice(EGM_CONFIG_KEY(log_level), text, &level) == EGM_OK)
        egm__log_set_level((egm_log_level_t)level);
    else
        egm__log_level = -1;
}

/* The input read front to back; past the end everything reads as 0. */
typedef struct {
    const uint8_t *p;
    size_t left;
} fuzz_reader_t;

static inline uint8_t fuzz_u8(fuzz_reader_t *r)
{
    if (r->left == 0)
        return 0;
    r->left--;
    return *r->p++;
}

static inline uint16_t fuzz_u16(fuzz_reader_t *r)
{
    uint16_t lo = fuzz_u8(r);
    return (uint16_t)(lo | (uint16_t)fuzz_u8(r) << 8);
}

/* Up to n bytes (fewer at the end), copied into an exact-size heap block so
 * that AddressSanitizer sees any read past them; free() it. */
static inline uint8_t *fuzz_bytes(fuzz_reader_t *r, size_t n, size_t *len_p)
{
    if (n > r->left)
        n = r->left;
    uint8_t *copy = malloc(n ? n : 1);
    if (copy == NULL)
        abort();
    if (n > 0)
        memcpy(copy, r->p, n);
    r->p += n;
    r->left -= n;
    *len_p = n;
    return copy;
}

#endif
