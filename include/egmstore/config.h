/* egmstore configuration: ConfigDict-style key=value pairs. The same keys work in
 * an INI file, as EGMSTORE_<KEY> environment variables and as --key-with-dashes flags.
 * docs/configuration.md lists every key.
 *
 * Threads. An egm_config_t has no lock: while one thread changes a config
 * (set, set_pair, load_file, load_env, destroy) no other thread may use it.
 * Concurrent reads of a config nobody changes (the getters, egm_config_copy,
 * egm_client_create) are safe. Separate configs are independent.
 *
 * Ownership. Key, value, pair and path strings are borrowed for the call (the
 * config keeps copies). A config is freed with egm_config_destroy; a client
 * keeps its own copy, so the caller's may be destroyed once
 * egm_client_create returns. */
#ifndef EGMSTORE_CONFIG_H
#define EGMSTORE_CONFIG_H

#include <stdint.h>
#include <egmstore/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct egm_config egm_config_t;

/* A config holding every key at its default, into *config_p (required; set on
 * EGM_OK only). Errors: EGM_ERR_NO_MEMORY. */
EGM_API egm_status_t egm_config_create(egm_config_t **config_p);
/* Frees a config and its values. NULL is a no-op. */
EGM_API void egm_config_destroy(egm_config_t *config);
/* A new config with config's values (and which keys were set explicitly), into
 * *copy_p; free it with egm_config_destroy. Neither may be NULL. Errors:
 * EGM_ERR_NO_MEMORY. */
EGM_API egm_status_t egm_config_copy(const egm_config_t *config, egm_config_t **copy_p);

/* Set one key from text, checked against its type and range (the same rules
 * as the file, environment and flags). Unknown key or bad value ->
 * EGM_ERR_CONFIG, with egm_last_error() naming the key and the accepted
 * values; the key then keeps its value. Other errors: EGM_ERR_INVALID_ARG
 * (an argument NULL), EGM_ERR_NO_MEMORY. */
EGM_API egm_status_t egm_config_set(egm_config_t *config, const char *key, const char *value);
/* Parse "key=value" (whitespace around both is trimmed) and set it as
 * egm_config_set. Errors: those of egm_config_set; EGM_ERR_CONFIG for text
 * without '='. */
EGM_API egm_status_t egm_config_set_pair(egm_config_t *config, const char *pair);
/* INI file: "key = value" lines, '#' or ';' comments. Lines before any section
 * header and in [client] are set; [master] and [provider] lines are checked but
 * not set (the egmstore command reads its own role's section); another section
 * header is EGM_ERR_CONFIG naming the file and line. Stops at the first bad
 * line: the lines before it stay set. Errors: EGM_ERR_INVALID_ARG (config or
 * path NULL), EGM_ERR_CONFIG (the file cannot be opened, is not a regular file
 * of at most 1 MiB, or has a bad line, named with its number),
 * EGM_ERR_NO_MEMORY. */
EGM_API egm_status_t egm_config_load_file(egm_config_t *config, const char *path);
/* Every EGMSTORE_<KEY> variable of the environment (unknown ones are errors).
 * Stops at the first bad variable: those before it stay set. Reads environ:
 * no thread may change the environment (setenv, putenv) meanwhile. Errors:
 * EGM_ERR_INVALID_ARG (config NULL), EGM_ERR_CONFIG naming the variable,
 * EGM_ERR_NO_MEMORY. */
EGM_API egm_status_t egm_config_load_env(egm_config_t *config);

/* Current value as text (NULL for unknown keys or a NULL config), owned by the
 * config. Valid until the key is set again or the config is destroyed. */
EGM_API const char *egm_config_get(const egm_config_t *config, const char *key);
/* The value parsed as the getter's type. These cannot fail: an unknown key (or
 * a NULL config) answers 0, as does a value that does not parse as that type
 * (egm_config_get_int reads the leading digits). */
EGM_API int64_t egm_config_get_int(const egm_config_t *config, const char *key);
EGM_API uint64_t egm_config_get_size(const egm_config_t *config, const char *key);
EGM_API int egm_config_get_bool(const egm_config_t *config, const char *key);

#ifdef __cplusplus
}
#endif
#endif
