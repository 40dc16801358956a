/* Open-addressing hash map (linear probing, tombstones, grows at 70% load). */
#include <string.h>
#include "common/alloc.h"
#include "common/hashmap.h"
#include "common/log.h"

#define EMPTY 0
#define FULL 1
#define TOMBSTONE 2

typedef struct {
    uint8_t state;
    uint64_t hash;
    void *key;
    size_t key_len;
    void *value;
} slot_t;

struct egm_hashmap {
    slot_t *slots;
    size_t cap; /* power of two */
    size_t count;
    size_t used; /* FULL + TOMBSTONE */
};

static uint64_t hash_bytes(const void *key, size_t len)
{
    const uint8_t *p = key;
    uint64_t h = 1469598103934665603ull; /* FNV-1a, then a final mix */
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

egm_status_t egm__hashmap_create(egm_hashmap_t **map_p)
{
    egm_hashmap_t *map = egm_calloc(1, sizeof(*map), "hashmap");
    if (map == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory creating a hash map");
    map->cap = 16;
    map->slots = egm_calloc(map->cap, sizeof(slot_t), "hashmap.slots");
    if (map->slots == NULL) {
        egm_free(map);
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory creating a hash map");
    }
    *map_p = map;
    return EGM_OK;
}

void egm__hashmap_destroy(egm_hashmap_t *map)
{
    if (map == NULL)
        return;
    for (size_t i = 0; i < map->cap; i++)
        if (map->slots[i].state == FULL)
            egm_free(map->slots[i].key);
    egm_free(map->slots);
    egm_free(map);
}

size_t egm__hashmap_size(const egm_hashmap_t *map)
{
    return map->count;
}

static slot_t *find(const egm_hashmap_t *map, const void *key, size_t len, uint64_t h)
{
    size_t mask = map->cap - 1;
    for (size_t i = h & mask, n = 0; n < map->cap; i = (i + 1) & mask, n++) {
        slot_t *s = &map->slots[i];
        if (s->state == EMPTY)
            return NULL;
        if (s->state == FULL && s->hash == h && s->key_len == len &&
            (len == 0 || memcmp(s->key, key, len) == 0))
            return s;
    }
    return NULL;
}

static egm_status_t resize(egm_hashmap_t *map, size_t cap)
{
    slot_t *slots = egm_calloc(cap, sizeof(slot_t), "hashmap.slots");
    if (slots == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory growing a hash map");
    for (size_t i = 0; i < map->cap; i++) {
        slot_t *s = &map->slots[i];
        if (s->state != FULL)
            continue;
        size_t j = s->hash & (cap - 1);
        while (slots[j].state == FULL)
            j = (j + 1) & (cap - 1);
        slots[j] = *s;
    }
    egm_free(map->slots);
    map->slots = slots;
    map->cap = cap;
    map->used = map->count;
    return EGM_OK;
}

void *egm__hashmap_get(const egm_hashmap_t *map, const void *key, size_t key_len)
{
    slot_t *s = find(map, key, key_len, hash_bytes(key, key_len));
    return s != NULL ? s->value : NULL;
}

uint64_t egm__hashmap_hash(const void *key, size_t key_len)
{
    return hash_bytes(key, key_len);
}

void *egm__hashmap_get_hashed(const egm_hashmap_t *map, const void *key, size_t key_len,
                              uint64_t hash)
{
    slot_t *s = find(map, key, key_len, hash);
    return s != NULL ? s->value : NULL;
}

egm_status_t egm__hashmap_put(egm_hashmap_t *map, const void *key, size_t key_len, void *value,
                              void **old_p)
{
    uint64_t h = hash_bytes(key, key_len);
    slot_t *s = find(map, key, key_len, h);
    if (old_p != NULL)
        *old_p = NULL;
    if (s != NULL) {
        if (old_p != NULL)
            *old_p = s->value;
        s->value = value;
        return EGM_OK;
    }
    if ((map->used + 1) * 10 >= map->cap * 7) {
        size_t cap = map->count * 2 * 10 >= map->cap * 7 ? map->cap * 2 : map->cap;
        egm_status_t status = resize(map, cap);
        if (status != EGM_OK)
            return status;
    }
    void *copy = egm_malloc(key_len ? key_len : 1, "hashmap.key");
    if (copy == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory storing a key");
    if (key_len > 0) /* a zero-length key may be NULL */
        memcpy(copy, key, key_len);
    size_t mask = map->cap - 1, i = h & mask;
    while (map->slots[i].state == FULL)
        i = (i + 1) & mask;
    if (map->slots[i].state == EMPTY)
        map->used++;
    map->slots[i] =
        (slot_t){.state = FULL, .hash = h, .key = copy, .key_len = key_len, .value = value};
    map->count++;
    return EGM_OK;
}

void *egm__hashmap_remove(egm_hashmap_t *map, const void *key, size_t key_len)
{
    slot_t *s = find(map, key, key_len, hash_bytes(key, key_len));
    if (s == NULL)
        return NULL;
    void *value = s->value;
    egm_free(s->key);
    s->key = NULL;
    s->value = NULL;
    s->state = TOMBSTONE;
    map->count--;
    return value;
}

int egm__hashmap_next(const egm_hashmap_t *map, size_t *iter, const void **key_p, size_t *key_len_p,
                      void **value_p)
{
    while (*iter < map->cap) {
        slot_t *s = &map->slots[(*iter)++];
        if (s->state != FULL)
            continue;
        if (key_p != NULL)
            *key_p = s->key;
        if (key_len_p != NULL)
            *key_len_p = s->key_len;
        if (value_p != NULL)
            *value_p = s->value;
        return 1;
    }
    return 0;
}

egm_status_t egm__hashmap_copy_keys(const egm_hashmap_t *map, size_t key_len, const char *what,
                                    void **keys_p, size_t *n_p)
{
    size_t iter = 0, n = 0, count = map->count;
    const void *key;
    size_t len;

    *keys_p = NULL;
    *n_p = 0;
    if (count == 0 || key_len == 0)
        return EGM_OK;
    uint8_t *keys = egm_malloc(count * key_len, "hashmap.keys");
    if (keys == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "%s: out of memory listing %zu keys", what, count);
    while (n < count && egm__hashmap_next(map, &iter, &key, &len, NULL))
        if (len == key_len)
            memcpy(keys + key_len * n++, key, key_len);
    *keys_p = keys;
    *n_p = n;
    return EGM_OK;
}
