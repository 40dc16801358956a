/* A shard's objects by key, growing in steps (master/key_table.h). */
#include "master/key_table.h"

#include <string.h>
#include "common/alloc.h"
#include "common/log.h"

#define SLOT_ADDR_BITS 48 /* egm__key_table_can_hold */
#define SLOT_ADDR_MASK ((1ull << SLOT_ADDR_BITS) - 1)
#define SLOT_FAR 63u /* distance field: 63 or more slots from home */
#define SLOT_TAG_BITS 10
#define SLOT_DIST_SHIFT (SLOT_ADDR_BITS + SLOT_TAG_BITS)
/* An old table's slot whose object moved to the new table or was removed:
 * probes pass over it. No object lies at address 1 (they are aligned). */
#define SLOT_GONE ((egm_key_slot_t)1)

#define TABLE_MIN_CAP 64

_Static_assert(sizeof(void *) == 8, "a slot holds an object's address in 48 bits");

/* The hash of a key: 8 bytes at a time, multiply-mixed (the key is read once,
 * and a 60-byte key costs about 8 multiplies, not 60 dependent ones). */
static uint64_t mix(uint64_t h, uint64_t v)
{
    h ^= v;
    h *= 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 29);
}

uint64_t egm__key_hash(const char *key, size_t len)
{
    const unsigned char *p = (const unsigned char *)key;
    uint64_t h = 0x243f6a8885a308d3ull ^ (len * 0xff51afd7ed558ccdull), v;
    for (; len >= 8; p += 8, len -= 8) {
        memcpy(&v, p, 8);
        h = mix(h, v);
    }
    v = 0;
    memcpy(&v, p, len);
    h = mix(h, v ^ ((uint64_t)len << 56));
    h ^= h >> 33;
    h *= 0xc4ceb9fe1a85ec53ull;
    return h ^ (h >> 33);
}

static uint64_t object_hash(const egm_object_t *obj)
{
    return egm__key_hash(egm__object_key(obj), obj->key_len);
}

static egm_object_t *slot_obj(egm_key_slot_t v)
{
    return (egm_object_t *)(uintptr_t)(v & SLOT_ADDR_MASK);
}

/* The hash bits a slot keeps (not the home bits, nor the shard's). */
static uint64_t hash_tag(uint64_t hash)
{
    return (hash >> 32) & ((1u << SLOT_TAG_BITS) - 1);
}

static uint64_t slot_dist_field(size_t dist)
{
    return dist < SLOT_FAR ? dist : SLOT_FAR;
}

static egm_key_slot_t slot_make(const egm_object_t *obj, uint64_t hash, size_t dist)
{
    return (uint64_t)(uintptr_t)obj | hash_tag(hash) << SLOT_ADDR_BITS |
           slot_dist_field(dist) << SLOT_DIST_SHIFT;
}

/* Whether slot v, `dist` slots from the home of a key hashing to `hash`, may
 * hold that key: its home is the same and so are the hash bits it keeps. */
static int slot_may_hold(egm_key_slot_t v, uint64_t hash, size_t dist)
{
    return (v >> SLOT_ADDR_BITS) == (hash_tag(hash) | slot_dist_field(dist) << SLOT_TAG_BITS);
}

/* The home slot of the key in slots[i] (not empty) of a table of `mask`. */
static size_t slot_home(const egm_key_slot_t *slots, size_t mask, size_t i)
{
    egm_key_slot_t v = slots[i];
    uint64_t dist = v >> SLOT_DIST_SHIFT;
    if (dist < SLOT_FAR)
        return (i - dist) & mask;
    return object_hash(slot_obj(v)) & mask;
}

/* The first slot from the home of `hash` that may hold such a key and, unless
 * key is NULL, holds that key; -1 at the first empty slot. Passes over gone
 * slots (only an old table has them). */
static ptrdiff_t probe(const egm_key_slot_t *slots, size_t mask, uint64_t hash, const char *key,
                       size_t len)
{
    for (size_t i = hash & mask, dist = 0;; i = (i + 1) & mask, dist++) {
        egm_key_slot_t v = slots[i];
        if (v == 0)
            return -1;
        if (v == SLOT_GONE || !slot_may_hold(v, hash, dist))
            continue;
        const egm_object_t *obj = slot_obj(v);
        if (key == NULL || (obj->key_len == len && memcmp(egm__object_key(obj), key, len) == 0))
            return (ptrdiff_t)i;
    }
}

egm_status_t egm__key_table_init(egm_key_table_t *t)
{
    memset(t, 0, sizeof(*t));
    t->slots = egm_calloc(TABLE_MIN_CAP, sizeof(*t->slots), "master.object_table");
    if (t->slots == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory creating the object index");
    t->mask = TABLE_MIN_CAP - 1;
    return EGM_OK;
}

void egm__key_table_cleanup(egm_key_table_t *t)
{
    egm_free(t->slots);
    egm_free(t->old);
    t->slots = t->old = NULL;
}

egm_object_t *egm__key_table_find(const egm_key_table_t *t, const char *key, size_t len,
                                  uint64_t hash)
{
    ptrdiff_t i = probe(t->slots, t->mask, hash, key, len);
    if (i >= 0)
        return slot_obj(t->slots[i]);
    if (t->old != NULL && (i = probe(t->old, t->old_mask, hash, key, len)) >= 0)
        return slot_obj(t->old[i]);
    return NULL;
}

void egm__key_table_prefetch(const egm_key_table_t *t, uint64_t hash)
{
    __builtin_prefetch(&t->slots[hash & t->mask]);
}

egm_object_t *egm__key_table_candidate(const egm_key_table_t *t, uint64_t hash)
{
    ptrdiff_t i = probe(t->slots, t->mask, hash, NULL, 0);
    if (i >= 0)
        return slot_obj(t->slots[i]);
    if (t->old != NULL && (i = probe(t->old, t->old_mask, hash, NULL, 0)) >= 0)
        return slot_obj(t->old[i]);
    return NULL;
}

/* Puts obj (its key hashing to `hash`) in the first empty slot from its home. */
static void slots_put(egm_key_slot_t *slots, size_t mask, const egm_object_t *obj, uint64_t hash)
{
    size_t i = hash & mask, dist = 0;
    while (slots[i] != 0) {
        i = (i + 1) & mask;
        dist++;
    }
    slots[i] = slot_make(obj, hash, dist);
}

/* Moves the objects of the old table's next `n` slots into the new one
 * (hashing each key again); frees the old table once it is empty. */
static void move_old(egm_key_table_t *t, size_t n)
{
    size_t end = t->old_mask + 1;
    if (n < end - t->old_next)
        end = t->old_next + n;
    for (size_t i = t->old_next; i < end; i++) {
        /* The objects of the slots a step ahead are fetched meanwhile, for
         * the rest of this move or the next insert's (a key starts in its
         * object's first or second line). */
        size_t ahead = i + EGM_KEY_TABLE_GROW_STEP;
        if (ahead <= t->old_mask && t->old[ahead] > SLOT_GONE)
            for (int line = 0; line < 2; line++)
                __builtin_prefetch((const char *)slot_obj(t->old[ahead]) + 64 * line);
        egm_key_slot_t v = t->old[i];
        if (v > SLOT_GONE) {
            const egm_object_t *obj = slot_obj(v);
            slots_put(t->slots, t->mask, obj, object_hash(obj));
            t->old[i] = SLOT_GONE;
        }
    }
    t->old_next = end;
    if (end == t->old_mask + 1) {
        egm_free(t->old);
        t->old = NULL;
        t->old_mask = t->old_next = 0;
    }
}

void egm__key_table_settle(egm_key_table_t *t)
{
    if (t->old != NULL)
        move_old(t, SIZE_MAX);
}

egm_status_t egm__key_table_reserve(egm_key_table_t *t)
{
    if (t->old != NULL)
        move_old(t, EGM_KEY_TABLE_GROW_STEP);
    size_t cap = t->mask + 1;
    if ((t->count + 1) * 4 <= cap * 3)
        return EGM_OK;
    /* Never while growing: the old table empties within cap / 16 inserts,
     * long before the new one is 3/4 full; should it not, it ends here. */
    egm__key_table_settle(t);
    egm_key_slot_t *slots = egm_calloc(cap * 2, sizeof(*slots), "master.object_table");
    if (slots == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory growing the object index to %zu",
                              cap * 2);
    t->old = t->slots;
    t->old_mask = t->mask;
    t->old_next = 0;
    t->slots = slots;
    t->mask = cap * 2 - 1;
    move_old(t, EGM_KEY_TABLE_GROW_STEP);
    return EGM_OK;
}

void egm__key_table_insert(egm_key_table_t *t, egm_object_t *obj, uint64_t hash)
{
    slots_put(t->slots, t->mask, obj, hash);
    t->count++;
}

/* Takes obj out of the old table: its slot becomes gone (nothing in the old
 * table moves, so the slots left to move stay where move_old will look). */
static int remove_old(egm_key_table_t *t, const egm_object_t *obj, uint64_t hash)
{
    for (size_t i = hash & t->old_mask;; i = (i + 1) & t->old_mask) {
        if (t->old[i] == 0)
            return 0;
        if (slot_obj(t->old[i]) == obj) {
            t->old[i] = SLOT_GONE;
            return 1;
        }
    }
}

/* Takes obj out of the new table; the slots after it that probed past its
 * slot move back, so none of them ever lands before where a scan over the
 * table stands (see egm__objects_remove_all). */
static int remove_new(egm_key_table_t *t, const egm_object_t *obj, uint64_t hash)
{
    size_t i = hash & t->mask;
    while (slot_obj(t->slots[i]) != obj) {
        if (t->slots[i] == 0)
            return 0;
        i = (i + 1) & t->mask;
    }
    for (size_t j = i;;) {
        j = (j + 1) & t->mask;
        if (t->slots[j] == 0)
            break;
        size_t home = slot_home(t->slots, t->mask, j);
        /* The entry at j stays when its home lies cyclically in (i, j]. */
        if (i <= j ? (i < home && home <= j) : (i < home || home <= j))
            continue;
        /* Moves back to i: nearer its home by j - i. */
        egm_key_slot_t v = t->slots[j];
        uint64_t dist = (i - home) & t->mask;
        t->slots[i] = (v & ~(~0ull << SLOT_DIST_SHIFT)) | slot_dist_field(dist) << SLOT_DIST_SHIFT;
        i = j;
    }
    t->slots[i] = 0;
    return 1;
}

void egm__key_table_remove(egm_key_table_t *t, const egm_object_t *obj)
{
    /* The object does not keep its hash (8 bytes of every object): hashing
     * its key again costs less than a cache miss. */
    uint64_t hash = object_hash(obj);
    if (remove_new(t, obj, hash) || (t->old != NULL && remove_old(t, obj, hash)))
        t->count--;
    if (t->old != NULL) /* a shard that sees removals but no puts empties it too */
        move_old(t, EGM_KEY_TABLE_GROW_STEP);
}

egm_object_t *egm__key_table_at(const egm_key_table_t *t, size_t i)
{
    return slot_obj(t->slots[i]);
}

int egm__key_table_each(const egm_key_table_t *t, egm_key_table_visit_fn fn, void *arg)
{
    int rc = 0;
    for (size_t i = 0; i <= t->mask && rc == 0; i++)
        if (t->slots[i] != 0)
            rc = fn(arg, slot_obj(t->slots[i]));
    for (size_t i = t->old_next; t->old != NULL && i <= t->old_mask && rc == 0; i++)
        if (t->old[i] > SLOT_GONE)
            rc = fn(arg, slot_obj(t->old[i]));
    return rc;
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return egm__set_error(EGM_ERR_INTERNAL, __VA_ARGS__);                                  \
    } while (0)

/* The objects of one of the two tables: each slot's bits, each found. */
static egm_status_t check_slots(const egm_key_table_t *t, const egm_key_slot_t *slots, size_t mask,
                                size_t from, size_t *n_p)
{
    for (size_t i = 0; i <= mask; i++) {
        egm_key_slot_t v = slots[i];
        if (i < from) {
            CHECK(v == 0 || v == SLOT_GONE,
                  "old table slot %zu: an object left where it moved from", i);
            continue;
        }
        if (v == 0 || v == SLOT_GONE) {
            CHECK(v == 0 || slots != t->slots, "slot %zu: a gone marker in the new table", i);
            continue;
        }
        const egm_object_t *o = slot_obj(v);
        uint64_t hash = object_hash(o);
        CHECK(slot_may_hold(v, hash, (i - (hash & mask)) & mask),
              "object %s: its slot's distance or hash bits are not its key's", egm__object_key(o));
        CHECK(egm__key_table_find(t, egm__object_key(o), o->key_len, hash) == o,
              "object %s not found under its key", egm__object_key(o));
        (*n_p)++;
    }
    return EGM_OK;
}

egm_status_t egm__key_table_check(const egm_key_table_t *t)
{
    size_t n = 0;
    egm_status_t status = check_slots(t, t->slots, t->mask, 0, &n);
    if (status == EGM_OK && t->old != NULL)
        status = check_slots(t, t->old, t->old_mask, t->old_next, &n);
    if (status != EGM_OK)
        return status;
    CHECK(n == t->count && t->count * 4 <= (t->mask + 1) * 3,
          "%zu objects in the table, count %zu, capacity %zu", n, t->count, t->mask + 1);
    CHECK(t->old == NULL || t->old_mask < t->mask, "the old table is not the smaller one");
    return EGM_OK;
}
