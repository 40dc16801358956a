/* 128-bit random ids in UUID v4 form. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>
#include "common/clock.h"
#include "common/id.h"
#include "common/log.h"

egm_id_t egm__id_random(void)
{
    uint8_t b[16] = {0};
    size_t got = 0;
    while (got < sizeof(b)) {
        ssize_t n = getrandom(b + got, sizeof(b) - got, 0);
        if (n > 0) {
            got += (size_t)n;
        } else if (errno != EINTR) {
            int err = errno;
            /* Only without getrandom (pre-3.17 kernels): fall back to time and pid so
             * that ids still differ, and say so once. */
            uint64_t mix = egm__now_ns() ^ ((uint64_t)getpid() << 40) ^ (uint64_t)(uintptr_t)b;
            for (size_t i = got; i < sizeof(b); i++) {
                mix = mix * 6364136223846793005ull + 1442695040888963407ull;
                b[i] = (uint8_t)(mix >> 56);
            }
            egm_log_ratelimited(EGM_LOG_ERROR, 1, "getrandom: %s; ids are weakly random",
                                strerror(err));
            break;
        }
    }
    b[6] = (uint8_t)((b[6] & 0x0f) | 0x40); /* version 4 */
    b[8] = (uint8_t)((b[8] & 0x3f) | 0x80); /* variant 1 */
    egm_id_t id = {0, 0};
    for (int i = 0; i < 8; i++) {
        id.hi = (id.hi << 8) | b[i];
        id.lo = (id.lo << 8) | b[8 + i];
    }
    return id;
}

int egm__id_is_nil(egm_id_t id)
{
    return id.hi == 0 && id.lo == 0;
}

int egm__id_equal(egm_id_t a, egm_id_t b)
{
    return a.hi == b.hi && a.lo == b.lo;
}

uint64_t egm__id_hash(egm_id_t id)
{
    uint64_t h = id.hi ^ (id.lo * 0x9E3779B97F4A7C15ull);
    h ^= h >> 31;
    return h * 0xBF58476D1CE4E5B9ull;
}

char *egm__id_format(egm_id_t id, char *buf)
{
    snprintf(buf, EGM_ID_STRLEN, "%08x-%04x-%04x-%04x-%012llx", (unsigned)(id.hi >> 32),
             (unsigned)((id.hi >> 16) & 0xffff), (unsigned)(id.hi & 0xffff),
             (unsigned)(id.lo >> 48), (unsigned long long)(id.lo & 0xffffffffffffull));
    return buf;
}

egm_status_t egm__id_parse(const char *text, egm_id_t *id_p)
{
    egm_id_t id = {0, 0};
    int digits = 0;
    if (text == NULL || strlen(text) != EGM_ID_STRLEN - 1)
        return egm__set_error(EGM_ERR_INVALID_ARG, "id: expected 36 characters "
                                                   "xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx");
    for (int i = 0; text[i] != '\0'; i++) {
        char c = text[i];
        if (i == 8 || i == 13 || i == 18 || i == 23) {
            if (c != '-')
                return egm__set_error(EGM_ERR_INVALID_ARG, "id: expected '-' at %d", i);
            continue;
        }
        int v = (c >= '0' && c <= '9')   ? c - '0'
                : (c >= 'a' && c <= 'f') ? c - 'a' + 10
                : (c >= 'A' && c <= 'F') ? c - 'A' + 10
                                         : -1;
        if (v < 0)
            return egm__set_error(EGM_ERR_INVALID_ARG, "id: '%c' is not a hex digit", c);
        if (digits < 16)
            id.hi = (id.hi << 4) | (uint64_t)v;
        else
            id.lo = (id.lo << 4) | (uint64_t)v;
        digits++;
    }
    *id_p = id;
    return EGM_OK;
}
