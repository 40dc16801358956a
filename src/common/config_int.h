/* Internals of the config module shared with the tools (flag parsing, help, docs). */
#ifndef EGM_COMMON_CONFIG_INT_H
#define EGM_COMMON_CONFIG_INT_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/config.h>
#include "common/settings.h"

typedef enum {
    EGM_CFG_STRING,
    EGM_CFG_INT,   /* decimal integer within [min, max] */
    EGM_CFG_SIZE,  /* bytes: plain or with B/KiB/MiB/GiB/TiB/KB/MB/GB/TB/K/M/G/T */
    EGM_CFG_BOOL,  /* true|false|1|0|yes|no|on|off */
    EGM_CFG_ENUM,  /* one of the words of `choices` */
    EGM_CFG_RATIO, /* a number in EGM_SETTINGS_RATIO_MIN..EGM_SETTINGS_RATIO_MAX (0..1) */
} egm_config_type_t;

/* The processes a key affects, and the config file sections a process reads
 * ([master], [provider], [client]; lines before any section apply to all). A
 * provider is a client that contributes capacity; the library reads files as a
 * client. */
#define EGM_ROLE_MASTER 0x1u
#define EGM_ROLE_PROVIDER 0x2u
#define EGM_ROLE_CLIENT 0x4u
#define EGM_ROLE_ALL (EGM_ROLE_MASTER | EGM_ROLE_PROVIDER | EGM_ROLE_CLIENT)
/* Read only by a process that contributes capacity (global_segment_size > 0):
 * one-shot commands contribute nothing, so these keys do not affect them. */
#define EGM_KEY_CAPACITY 0x100u

/* One word of an enum key and the value its settings field takes. */
typedef struct {
    const char *name; /* NULL ends a list */
    int value;
} egm_config_choice_t;

/* A key: its name (that of its egm_settings_t field), type, default, range,
 * the processes that read it and its help line (printed by --help). */
typedef struct {
    const char *name;
    egm_config_type_t type;
    const char *def;
    int64_t min; /* INT and SIZE (a ratio's range is the type's) */
    int64_t max;
    const egm_config_choice_t *choices; /* ENUM, in documented order */
    const char *help;
    unsigned roles;       /* EGM_ROLE_* of the processes that read it, and EGM_KEY_* flags */
    size_t offset;        /* of its field in egm_settings_t */
    const char *accepted; /* the accepted values in words, where the type and range do not
                             say it (strings; sizes with a rule of their own); else NULL */
} egm_config_key_t;

/* The table of every key, in documentation order. */
const egm_config_key_t *egm__config_keys(size_t *count_p);
const egm_config_key_t *egm__config_find_key(const char *name);
/* True if the key was set explicitly (file, env, flag or egm_config_set); for
 * code that walks the table (code reading one key uses EGM_CONFIG_IS_SET). */
int egm__config_is_set(const egm_config_t *config, const char *key);
/* The key of settings field `field`, e.g. EGM_CONFIG_KEY(placement_strategy):
 * for code that checks a value it was given without a config in the table's
 * words (a misspelt field does not compile). */
#define EGM_CONFIG_KEY(field) egm__config_field_key(offsetof(egm_settings_t, field))
const egm_config_key_t *egm__config_field_key(size_t offset);
/* A word of enum key `key` -> its value in *value_p; another word (or NULL)
 * -> EGM_ERR_CONFIG naming the key and its words. */
egm_status_t egm__config_parse_choice(const egm_config_key_t *key, const char *word, int *value_p);
/* The word of enum key `key` whose value is `value`; NULL when none has it. */
const char *egm__config_choice_word(const egm_config_key_t *key, int value);
/* The settings field of a key that is not a string or a ratio, as an integer
 * (a size's bytes, a bool's 0 or 1, an enum's value); 0 for a string or a
 * ratio. For code that walks the table (tests, the fuzzer); other code reads
 * the field itself. */
int64_t egm__config_field_int(const egm_config_t *config, const egm_config_key_t *key);
/* The settings field of a ratio key; 0 for a key of another type. For code
 * that walks the table, as egm__config_field_int. */
double egm__config_field_ratio(const egm_config_t *config, const egm_config_key_t *key);
/* Whether configs a and b hold the same value of key, compared as its type
 * reads it (a size of 1GiB equals one of 1024MiB, a ratio of 0.9 one of 0.90). */
int egm__config_field_equal(const egm_config_t *a, const egm_config_t *b,
                            const egm_config_key_t *key);
/* "a|b|c": the words of an enum key, into buf. */
const char *egm__config_choices_text(const egm_config_key_t *key, char *buf, size_t len);
/* The accepted values of an int, size, ratio or enum key in words, as --help
 * and the docs show them ("0..65535", "4 KiB and up", "0..1",
 * "auto|nvlink|shm|tcp"); "" for strings and bools. */
void egm__config_range_text(const egm_config_key_t *key, char *buf, size_t len);
/* docs/configuration.md's row of a key up to its meaning column:
 * "| `name` | type | `default` | accepted values | read by |". Truncated to len. */
void egm__config_doc_row(const egm_config_key_t *key, char *buf, size_t len);

/* "256MiB" -> bytes. Error text names `what` (the key). Overflow is an error. */
egm_status_t egm__parse_size(const char *what, const char *text, uint64_t *bytes_p);
/* Format bytes as "1.5 GiB" into buf. */
char *egm__format_size(uint64_t bytes, char *buf, size_t len);

/* Loads an INI file as a process of `roles` (EGM_ROLE_*): lines before any
 * section header and in the sections of those roles are set; lines of other
 * roles' sections are checked (known key, valid value) but not set. An unknown
 * section is an error naming the file and line. */
egm_status_t egm__config_load_file_as(egm_config_t *config, const char *path, unsigned roles);

/* Command-line flag: "--global-segment-size" (dashes or underscores) with its
 * value. Unknown flag -> EGM_ERR_CONFIG naming it. */
egm_status_t egm__config_set_flag(egm_config_t *config, const char *flag, const char *value);

/* Longest cluster token (auth_token, auth_token_file), without the NUL. */
#define EGM_AUTH_TOKEN_MAX 1024
/* The cluster token of `config` into token[len] ("" when none is set). Both
 * keys set, a token file group/world accessible, unreadable or empty ->
 * EGM_ERR_CONFIG naming the key (never the token). */
egm_status_t egm__config_auth_token(const egm_config_t *config, char *token, size_t len);
/* 1 when the presented bytes b[0, b_len) equal the NUL-terminated non-empty
 * token a; the time taken depends on b_len only. */
int egm__token_equal(const char *a, const char *b, size_t b_len);
/* memset that the compiler keeps (for secrets going out of scope). */
void egm__secure_zero(void *p, size_t len);

#endif
