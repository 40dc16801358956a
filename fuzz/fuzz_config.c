/* Fuzz target: configuration parsing (src/common/config.c): INI files
 * (egm_config_load_file), "key=value" pairs (egm_config_set_pair, what
 * --config-style arguments and the Python binding pass) and command-line
 * flags (egm__config_set_flag).
 *
 * Input: u8 mode, then text. Mode % 4 == 0: the text is a whole config file
 * (NUL bytes included), loaded from a memfd; 1: a pair; 2: a flag and its
 * value, split at the first NUL or '=' byte; 3: the bytes of an
 * auth_token_file (a memfd of mode 0600), read by egm__config_auth_token,
 * whose token must then be one non-empty line without NUL, CR or LF at its
 * end, at most EGM_AUTH_TOKEN_MAX bytes, equal to itself by
 * egm__token_equal; a refused file leaves the buffer zeroed. Checks: a refusal is
 * EGM_ERR_CONFIG (or INVALID_ARG for what cannot be a pair) with a message;
 * afterwards every key's value, changed or not, is one that egm_config_set
 * accepts again (nothing invalid is ever stored, a refused line stores
 * nothing past it), and the typed getters and the settings fields
 * (egm__config_settings) agree with the text, key by key of the table;
 * nothing leaks. */
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/config_int.h"
#include "fuzz.h"

static int memfd = -1;
static char memfd_path[64];

/* The bytes as a regular file of mode 0600 (memfd_path). */
static void put_file(const uint8_t *data, size_t size)
{
    if (memfd < 0) {
        memfd = memfd_create("egm-fuzz-config", MFD_CLOEXEC);
        FUZZ_CHECK(memfd >= 0);
        FUZZ_CHECK(fchmod(memfd, 0600) == 0);
        snprintf(memfd_path, sizeof(memfd_path), "/proc/self/fd/%d", memfd);
    }
    FUZZ_CHECK(ftruncate(memfd, 0) == 0);
    FUZZ_CHECK(size == 0 || pwrite(memfd, data, size, 0) == (ssize_t)size);
}

static egm_status_t load_file(egm_config_t *config, const uint8_t *data, size_t size)
{
    put_file(data, size);
    return egm_config_load_file(config, memfd_path);
}

static egm_status_t token_file(egm_config_t *config, const uint8_t *data, size_t size)
{
    static char token[EGM_AUTH_TOKEN_MAX + 1];
    put_file(data, size);
    FUZZ_CHECK(egm_config_set(config, "auth_token_file", memfd_path) == EGM_OK);
    memset(token, 0x5a, sizeof(token));
    egm_status_t st = egm__config_auth_token(config, token, sizeof(token));
    if (st != EGM_OK) {
        for (size_t i = 0; i < sizeof(token); i++)
            FUZZ_CHECK(token[i] == 0); /* no part of a refused secret stays */
        return st;
    }
    size_t n = strnlen(token, sizeof(token));
    FUZZ_CHECK(n > 0 && n <= EGM_AUTH_TOKEN_MAX);
    FUZZ_CHECK(token[n - 1] != '\n' && token[n - 1] != '\r' && strchr(token, '\n') == NULL);
    FUZZ_CHECK(n <= size && memcmp(token, data, n) == 0); /* the file's first line */
    FUZZ_CHECK(egm__token_equal(token, token, n));
    FUZZ_CHECK(!egm__token_equal(token, token, n - 1));
    return st;
}

/* Walks the key table: every stored value passes validation again, the
 * getters read it, and its settings field holds it (within the key's range,
 * one of its words). */
static void check_values(const egm_config_t *config)
{
    size_t n;
    const egm_config_key_t *keys = egm__config_keys(&n);
    const egm_settings_t *settings = egm__config_settings(config);
    egm_config_t *probe;
    FUZZ_CHECK(egm_config_create(&probe) == EGM_OK);
    for (size_t i = 0; i < n; i++) {
        const egm_config_key_t *k = &keys[i];
        const char *v = egm_config_get(config, k->name);
        FUZZ_CHECK(v != NULL);
        FUZZ_CHECK(egm_config_set(probe, k->name, v) == EGM_OK);
        FUZZ_CHECK(egm__config_field_text(config, k->offset) == v);
        FUZZ_CHECK(egm__config_field_is_set(config, k->offset) ==
                   egm__config_is_set(config, k->name));
        switch (k->type) {
        case EGM_CFG_STRING: {
            const char *field;
            memcpy(&field, (const char *)settings + k->offset, sizeof(field));
            FUZZ_CHECK(field == v);
            break;
        }
        case EGM_CFG_INT: {
            int64_t x = egm_config_get_int(config, k->name);
            FUZZ_CHECK(x >= k->min && x <= k->max);
            FUZZ_CHECK(egm__config_field_int(config, k) == x);
            break;
        }
        case EGM_CFG_SIZE: {
            uint64_t x = egm_config_get_size(config, k->name);
            FUZZ_CHECK(x >= (uint64_t)k->min && x <= (uint64_t)k->max);
            FUZZ_CHECK((uint64_t)egm__config_field_int(config, k) == x);
            break;
        }
        case EGM_CFG_BOOL:
            FUZZ_CHECK(egm__config_field_int(config, k) == egm_config_get_bool(config, k->name));
            break;
        case EGM_CFG_ENUM: {
            int found = 0;
            for (const egm_config_choice_t *c = k->choices; c->name != NULL; c++)
                if (strcmp(c->name, v) == 0)
                    found = egm__config_field_int(config, k) == c->value;
            FUZZ_CHECK(found);
            break;
        }
        case EGM_CFG_RATIO: {
            double x = egm__config_field_ratio(config, k);
            FUZZ_CHECK(x >= EGM_SETTINGS_RATIO_MIN && x <= EGM_SETTINGS_RATIO_MAX);
            FUZZ_CHECK(x == strtod(v, NULL));
            break;
        }
        }
    }
    egm_config_destroy(probe);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    egm_config_t *config;
    egm_status_t st;

    fuzz_init_logs();
    if (size < 1)
        return 0;
    uint64_t live = egm__alloc_live_count();
    FUZZ_CHECK(egm_config_create(&config) == EGM_OK);
    uint8_t mode = data[0] % 4;
    data++;
    size--;
    if (mode == 0) {
        st = load_file(config, data, size);
    } else if (mode == 3) {
        st = token_file(config, data, size);
    } else {
        char *text = malloc(size + 1);
        FUZZ_CHECK(text != NULL);
        memcpy(text, data, size);
        text[size] = '\0';
        if (mode == 1) {
            st = egm_config_set_pair(config, text);
        } else {
            char *value = text + strcspn(text, "=");
            if (*value == '=')
                *value++ = '\0';
            else
                value = text + strlen(text) + (strlen(text) < size ? 1 : 0);
            st = egm__config_set_flag(config, text, value);
        }
        free(text);
    }
    if (st != EGM_OK) {
        FUZZ_CHECK(st == EGM_ERR_CONFIG || st == EGM_ERR_INVALID_ARG);
        FUZZ_CHECK(egm_last_error()[0] != '\0');
    }
    check_values(config);
    egm_config_destroy(config);
    FUZZ_CHECK(egm__alloc_live_count() == live);
    return 0;
}
