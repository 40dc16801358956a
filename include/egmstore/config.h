/* egmstore configuration: ConfigDict-style key=value pairs. The same keys work in
 * an INI file, as EGMSTORE_<KEY> environment variables and as --key-with-dashes flags.
 * docs/configuration.md lists every key. */
#ifndef EGMSTORE_CONFIG_H
#define EGMSTORE_CONFIG_H

#include <stdint.h>
#include <egmstore/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct egm_config egm_config_t;

/* A config holding every key at its default. */
EGM_API egm_status_t egm_config_create(egm_config_t **config_p);
EGM_API void egm_config_destroy(egm_config_t *config);
EGM_API egm_status_t egm_config_copy(const egm_config_t *config, egm_config_t **copy_p);

/* Set one key from text. Unknown key or bad value -> EGM_ERR_CONFIG, with
 * egm_last_error() naming the key and the accepted values. */
EGM_API egm_status_t egm_config_set(egm_config_t *config, const char *key, const char *value);
/* Parse "key=value" (whitespace around both is trimmed). */
EGM_API egm_status_t egm_config_set_pair(egm_config_t *config, const char *pair);
/* INI file: "key = value" lines, '#' or ';' comments. Lines before any section
 * header and in [client] are set; [master] and [provider] lines are checked but
 * not set (the egmstore command reads its own role's section); another section
 * header is EGM_ERR_CONFIG naming the file and line. */
EGM_API egm_status_t egm_config_load_file(egm_config_t *config, const char *path);
/* Every EGMSTORE_<KEY> variable of the environment (unknown ones are errors). */
EGM_API egm_status_t egm_config_load_env(egm_config_t *config);

/* Current value as text (NULL for unknown keys). Valid until the key is set again. */
EGM_API const char *egm_config_get(const egm_config_t *config, const char *key);
EGM_API int64_t egm_config_get_int(const egm_config_t *config, const char *key);
EGM_API uint64_t egm_config_get_size(const egm_config_t *config, const char *key);
EGM_API int egm_config_get_bool(const egm_config_t *config, const char *key);

#ifdef __cplusplus
}
#endif
#endif
