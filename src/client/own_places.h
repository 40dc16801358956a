/* Where this client's own objects lie (docs/ha.md "Removes the pool
 * describes"): for each object it committed in one of its slabs, the place
 * of its first replica (a segment and the offset in it), so that a Remove of
 * it can name that place in a removal entry. A fixed table of
 * EGM_OWN_PLACES_SETS sets of EGM_OWN_PLACES_WAYS entries, by the key's
 * 64-bit hash (7 MiB, allocated with the table), under 64 locks: keeping a
 * place allocates nothing, a full set gives up its oldest entry, and a key is
 * known by its hash alone (two keys of one hash: the master finds no object
 * of the key at the place named, and the Remove waits for its standbys, as
 * one naming none does). Thread-safe. */
#ifndef EGM_CLIENT_OWN_PLACES_H
#define EGM_CLIENT_OWN_PLACES_H

#include <stddef.h>
#include <stdint.h>
#include "common/id.h"

#define EGM_OWN_PLACES_SETS 16384
#define EGM_OWN_PLACES_WAYS 8

typedef struct egm_own_places egm_own_places_t;

/* An object's place: its first replica's segment and offset, and the entry
 * of its slab's commit log that describes it (slab_id, seq; 0: none). */
typedef struct {
    egm_id_t segment;
    uint64_t offset;
    uint64_t slab_id, seq;
} egm_own_place_t;

/* NULL when out of memory (then nothing is kept, and no Remove names a place). */
egm_own_places_t *egm__own_places_create(void);
void egm__own_places_destroy(egm_own_places_t *places);
/* Keeps key's place, over an older one of the key. */
void egm__own_places_keep(egm_own_places_t *places, const char *key, const egm_own_place_t *place);
/* 1 and the place of key in *place_p, which is forgotten (its object is
 * being removed); 0 when none is kept. */
int egm__own_places_take(egm_own_places_t *places, const char *key, egm_own_place_t *place_p);
/* Forgets every place (a RemoveAll). */
void egm__own_places_clear(egm_own_places_t *places);

#endif
