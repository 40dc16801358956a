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
/* Inserts or replaces; *old_p (may be NULL) receives the replaced value or NULL. */
egm_status_t egm__hashmap_put(egm_hashmap_t *map, const void *key, size_t key_len, void *value,
                              void **old_p);
/* Removes and returns the value, or NULL. */
void *egm__hashmap_remove(egm_hashmap_t *map, const void *key, size_t key_len);

/* Iteration: start with *iter = 0; returns 0 when done. Removing the current
 * entry during iteration is allowed; inserting is not. */
int egm__hashmap_next(const egm_hashmap_t *map, size_t *iter, const void **key_p, size_t *key_len_p,
                      void **value_p);

#endif
