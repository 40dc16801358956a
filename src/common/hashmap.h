/* Open-addressing hash map from byte keys to pointers. Keys are copied.
 * Not thread-safe: callers lock. */
#ifndef EGM_COMMON_HASHMAP_H
#define EGM_COMMON_HASHMAP_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>

typedef struct egm_hashmap egm_hashmap_t;

egm_status_t egm__hashmap_create(egm_hashmap_t **map_p);
/* Values are not freed. */
void egm__hashmap_destroy(egm_hashmap_t *map);
size_t egm__hashmap_size(const egm_hashmap_t *map);
/* Returns the value or NULL. */
void *egm__hashmap_get(const egm_hashmap_t *map, const void *key, size_t key_len);
/* The hash a map uses for key. Its low bits pick the slot, so a caller that
 * splits keys over several maps can pick the map with its top bits, and look
 * the key up without hashing it again (egm__hashmap_get_hashed). */
uint64_t egm__hashmap_hash(const void *key, size_t key_len);
/* egm__hashmap_get with hash = egm__hashmap_hash(key, key_len). */
void *egm__hashmap_get_hashed(const egm_hashmap_t *map, const void *key, size_t key_len,
                              uint64_t hash);
/* Inserts or replaces; *old_p (may be NULL) receives the replaced value or NULL. */
egm_status_t egm__hashmap_put(egm_hashmap_t *map, const void *key, size_t key_len, void *value,
                              void **old_p);
/* Removes and returns the value, or NULL. */
void *egm__hashmap_remove(egm_hashmap_t *map, const void *key, size_t key_len);

/* Iteration: start with *iter = 0; returns 0 when done. Removing the current
 * entry during iteration is allowed; inserting is not. */
int egm__hashmap_next(const egm_hashmap_t *map, size_t *iter, const void **key_p, size_t *key_len_p,
                      void **value_p);

/* Copies every key of exactly key_len bytes, end to end, into one egm_malloc'ed
 * array (*keys_p NULL when none): e.g. the ids of a map keyed by egm_id_t.
 * EGM_ERR_NO_MEMORY naming `what`. */
egm_status_t egm__hashmap_copy_keys(const egm_hashmap_t *map, size_t key_len, const char *what,
                                    void **keys_p, size_t *n_p);

#endif
