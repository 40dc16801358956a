/* A shard's objects by key (master/object_index.c keeps one per shard, under
 * the shard's lock): open addressing with linear probing. A slot is 8 bytes
 * (with 100 million objects each byte per object is 100 MB): the object's
 * address, which holds the key, in the low 48 bits; in the top 16, how far the
 * slot lies from the key's home slot (6 bits, 63 for that far or farther) and
 * 10 bits of the key's hash. Removal shifts the following slots back (no
 * tombstones, so a table that sees puts and removes all day keeps short
 * probes), knowing each one's home from its distance. A lookup reads one slot
 * line and the object it answers, which it reads anyway; a slot of another key
 * is passed over on its distance and hash bits alone but about once in 1024.
 *
 * Growing: at 3/4 full the table doubles, and every key must be hashed again
 * (the slot does not keep the whole hash), which reads every object of the
 * shard: about 0.1-0.3 us a key, so a shard of a million objects would stall
 * the request that fills it, and every request behind it, for a third of a
 * second. So the objects move over in steps instead: the table that filled
 * stays as the old table, each insert moves the objects of its next
 * EGM_KEY_TABLE_GROW_STEP slots into the new one, and lookups and removals look
 * in both until the old one is empty (a moved or removed object leaves a
 * marker there that probes pass over, so that nothing moves in the old table
 * while it is emptied in slot order). A removal moves a step too. */
#ifndef EGM_MASTER_KEY_TABLE_H
#define EGM_MASTER_KEY_TABLE_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "master/object_index.h"

typedef uint64_t egm_key_slot_t;

typedef struct {
    egm_key_slot_t *slots;
    size_t mask;  /* capacity - 1, a power of two */
    size_t count; /* objects in the table, the old one's included */
    /* While growing: the table before it doubled, whose slots [old_next,
     * old_mask] still hold objects to move; NULL otherwise. */
    egm_key_slot_t *old;
    size_t old_mask;
    size_t old_next;
} egm_key_table_t;

/* Slots of the old table an insert moves over. The old table empties after
 * capacity / 16 inserts (a sixth of the inserts that fill the new one to 3/4),
 * costing each insert up to 6 keys hashed again. */
#define EGM_KEY_TABLE_GROW_STEP 8

/* The hash a key is filed under (object_index.c takes its shard from the top
 * bits; the table takes the slot from the low bits). */
uint64_t egm__key_hash(const char *key, size_t len);

/* Whether a slot can hold this address (below 2^48; not so with memory
 * tagging, whose tags take the top byte). */
static inline int egm__key_table_can_hold(const void *obj)
{
    return (uintptr_t)obj >> 48 == 0;
}

egm_status_t egm__key_table_init(egm_key_table_t *t);
void egm__key_table_cleanup(egm_key_table_t *t);

/* The object under the key (whose hash is `hash`), or NULL. */
egm_object_t *egm__key_table_find(const egm_key_table_t *t, const char *key, size_t len,
                                  uint64_t hash);
/* Fetches the slot line a lookup of `hash` starts at. */
void egm__key_table_prefetch(const egm_key_table_t *t, uint64_t hash);
/* The first object whose slot may hold a key of this hash (its key still to
 * be compared), or NULL when no slot may: the key is absent. */
egm_object_t *egm__key_table_candidate(const egm_key_table_t *t, uint64_t hash);

/* Room for one more object (moving a step of a growth first). */
egm_status_t egm__key_table_reserve(egm_key_table_t *t);
/* obj's key (whose hash is `hash`) must not be in the table; reserve was called. */
void egm__key_table_insert(egm_key_table_t *t, egm_object_t *obj, uint64_t hash);
/* Takes obj out (nothing if it is not in the table: a failed put), and moves
 * a step of a growth. Objects never move in memory: only their slots do. */
void egm__key_table_remove(egm_key_table_t *t, const egm_object_t *obj);

/* Ends a growth at once: afterwards every object is in slots[0..mask] (for
 * scans over the whole table). */
void egm__key_table_settle(egm_key_table_t *t);

/* The object in slot i (0..mask) of the table, NULL if none; after
 * egm__key_table_settle, these are all its objects. */
egm_object_t *egm__key_table_at(const egm_key_table_t *t, size_t i);

/* Visits every object, in both tables while growing, in slot order; stops at
 * the first nonzero answer of fn and returns it. fn must not change the table. */
typedef int (*egm_key_table_visit_fn)(void *arg, const egm_object_t *obj);
int egm__key_table_each(const egm_key_table_t *t, egm_key_table_visit_fn fn, void *arg);

/* For egm__objects_check: every slot's distance and hash bits are its
 * object's key's, every object is found under its key, the count is the
 * objects', the table at most 3/4 full and the old one's moved part empty.
 * EGM_OK, or EGM_ERR_INTERNAL with what is wrong in the error detail. */
egm_status_t egm__key_table_check(const egm_key_table_t *t);

#endif
