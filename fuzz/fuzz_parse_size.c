/* Fuzz target: the size parser of config values ("256MiB", "4 k", " 1024 ";
 * egm__parse_size in src/common/config.c).
 *
 * Input: the text (up to its first NUL). Checks the verdict and the value
 * against a separate reading of the accepted forms (optional blanks, decimal
 * digits, optional blanks, an optional unit B/K/KB/KiB/M/MB/MiB/G/GB/GiB/
 * T/TB/TiB in any case, optional blanks; powers of 1024; overflow refused),
 * that a refusal is EGM_ERR_CONFIG naming the key, and that an accepted value
 * printed in plain bytes parses back to itself. egm__format_size is run on
 * the value into buffers of every small size. */
#include <ctype.h>
#include <strings.h>

#include "common/config_int.h"
#include "fuzz.h"

/* 1: value in *v; 0: not a size; -1: too large. */
static int reference(const char *s, uint64_t *v)
{
    static const char *const units[] = {"",    "b", "k",  "kb",  "kib", "m",  "mb",
                                        "mib", "g", "gb", "gib", "t",   "tb", "tib"};
    static const unsigned shifts[] = {0, 0, 10, 10, 10, 20, 20, 20, 30, 30, 30, 40, 40, 40};
    uint64_t x = 0;
    int big = 0;
    size_t i = 0, digits = 0;

    while (isspace((unsigned char)s[i]))
        i++;
    for (; s[i] >= '0' && s[i] <= '9'; i++, digits++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (x > (UINT64_MAX - d) / 10)
            big = 1;
        x = x * 10 + d;
    }
    if (digits == 0)
        return 0;
    if (big)
        return -1; /* the parser stops at the first digit too many */
    while (isspace((unsigned char)s[i]))
        i++;
    size_t end = strlen(s);
    while (end > i && isspace((unsigned char)s[end - 1]))
        end--;
    for (size_t u = 0; u < sizeof(units) / sizeof(units[0]); u++) {
        if (end - i != strlen(units[u]) || strncasecmp(s + i, units[u], end - i) != 0)
            continue;
        if (shifts[u] > 0 && x > (UINT64_MAX >> shifts[u]))
            return -1;
        *v = x << shifts[u];
        return 1;
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init_logs();
    char *text = malloc(size + 1);
    FUZZ_CHECK(text != NULL);
    memcpy(text, data, size);
    text[size] = '\0';

    uint64_t got = 0, want = 0;
    egm_status_t st = egm__parse_size("fuzz_key", text, &got);
    int ref = reference(text, &want);
    if (ref == 1) {
        FUZZ_CHECK(st == EGM_OK);
        FUZZ_CHECK(got == want);
    } else {
        FUZZ_CHECK(st == EGM_ERR_CONFIG);
        FUZZ_CHECK(strstr(egm_last_error(), "fuzz_key") != NULL);
    }
    if (st == EGM_OK) {
        char plain[32], buf[24];
        uint64_t back = 0;
        snprintf(plain, sizeof(plain), "%llu", (unsigned long long)got);
        FUZZ_CHECK(egm__parse_size("fuzz_key", plain, &back) == EGM_OK && back == got);
        for (size_t cap = 1; cap <= sizeof(buf); cap++) {
            char *small = malloc(cap);
            FUZZ_CHECK(small != NULL);
            FUZZ_CHECK(egm__format_size(got, small, cap) == small);
            FUZZ_CHECK(strlen(small) < cap);
            free(small);
        }
    }
    free(text);
    return 0;
}
