/* Segment reference table: objects keyed by segment id, reference-counted,
 * freed by their last reference once unlinked (memcached's items, UCX's
 * rcache). The one vocabulary for every such table of the transfer engine:
 * the exposed segments (provider side), the shm mappings and the nvlink
 * mappings (consumer side).
 *
 *   link    puts an object in the table under its id, with the caller's
 *           references;
 *   get     takes a reference on the linked object of an id (NULL: none);
 *   put     drops one: the last reference of an unlinked object frees it;
 *   unlink  takes the object out of the table, so that no get finds it; it is
 *           freed now when nobody holds a reference, else by the last put.
 *           EGM_SEGREF_RETIRE also retires the id: it can never be linked
 *           again. EGM_SEGREF_WAIT returns only once the object is freed (a
 *           provider may then free the memory its object describes).
 *
 * An object embeds an egm_segref_t as its first member; the table frees it
 * through the free function given at creation, outside the table's lock.
 * Thread-safe; one lock per call, no allocation but link's. */
#ifndef EGM_TE_SEGREF_H
#define EGM_TE_SEGREF_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "common/hashmap.h"
#include "common/id.h"

typedef struct egm_segref_table egm_segref_table_t;

/* The first member of a table's objects. Set `id` before linking; the rest
 * is the table's. */
typedef struct {
    egm_id_t id;
    uint64_t refs;     /* under the table's lock */
    atomic_int linked; /* 1 from link until unlink */
    int awaited;       /* an unlink with EGM_SEGREF_WAIT frees it */
} egm_segref_t;

/* Frees an object (its resources and its memory). ctx: the table's. */
typedef void (*egm_segref_free_fn)(void *ctx, egm_segref_t *ref);

#define EGM_SEGREF_RETIRE 1u /* unlink: the id can never be linked again */
#define EGM_SEGREF_WAIT 2u   /* unlink: return once the object is freed */

/* `what` names the objects in errors ("exposed segment", "shm mapping"). */
egm_status_t egm__segref_create(const char *what, egm_segref_free_fn free_fn, void *ctx,
                                egm_segref_table_t **table_p);
/* Frees the objects still linked (warning about any still referenced); an
 * unlinked object still referenced is its holders' to put first. NULL: no-op. */
void egm__segref_destroy(egm_segref_table_t *table);

/* Links `ref` with `refs` references held by the caller. Another object
 * linked under the id -> EGM_ERR_SEGMENT_EXISTS; a retired id ->
 * EGM_ERR_SEGMENT_NOT_FOUND; either way `ref` stays the caller's. */
egm_status_t egm__segref_link(egm_segref_table_t *table, egm_segref_t *ref, uint64_t refs);
static inline egm_segref_t *egm__segref_get(egm_segref_table_t *table, egm_id_t id);
static inline void egm__segref_put(egm_segref_table_t *table, egm_segref_t *ref);
/* 1 when an object was linked under the id (0: none; with RETIRE the id is
 * retired all the same). `flags`: EGM_SEGREF_RETIRE | EGM_SEGREF_WAIT. */
int egm__segref_unlink(egm_segref_table_t *table, egm_id_t id, unsigned flags);

/* 1 while `ref` is linked (a holder's check: it may be unlinked right after). */
int egm__segref_linked(const egm_segref_t *ref);
/* 1 when an object is linked under the id now. */
int egm__segref_has(egm_segref_table_t *table, egm_id_t id);
/* 1 when the id was retired. */
int egm__segref_retired(egm_segref_table_t *table, egm_id_t id);
/* Objects linked now. */
size_t egm__segref_count(egm_segref_table_t *table);
/* Objects not freed yet: linked, or unlinked and still referenced. */
uint64_t egm__segref_live(egm_segref_table_t *table);
/* A held object whose resource is `held` bytes long, found for a descriptor
 * saying `described`: a different size means a different allocation behind
 * the id, so the reference is put back and EGM_ERR_INVALID_ARG names the
 * segment (`prefix`: the transport, "shm"). EGM_OK keeps the reference. */
egm_status_t egm__segref_check_size(egm_segref_table_t *table, egm_segref_t *ref,
                                    const char *prefix, uint64_t described, uint64_t held);
/* Ids linked now (egm_malloc'ed; NULL when none). */
egm_status_t egm__segref_ids(egm_segref_table_t *table, egm_id_t **ids_p, size_t *n_p);

/* ---- inline: get and put run once per transfer -------------------------------
 * The table's fields are segref.c's and these two functions' alone. */
struct egm_segref_table {
    pthread_mutex_t lock;
    pthread_cond_t freed_ok; /* an awaited object lost its last reference */
    egm_hashmap_t *linked;   /* id bytes -> egm_segref_t* */
    egm_hashmap_t *retired;  /* id bytes -> marker: never linked again */
    uint64_t live;           /* not freed yet */
    egm_segref_free_fn free_fn;
    void *ctx;
    const char *what;
};

static inline egm_segref_t *egm__segref_get(egm_segref_table_t *table, egm_id_t id)
{
    pthread_mutex_lock(&table->lock);
    egm_segref_t *ref = egm__hashmap_get(table->linked, &id, sizeof(id));
    if (ref != NULL)
        ref->refs++;
    pthread_mutex_unlock(&table->lock);
    return ref;
}

static inline void egm__segref_put(egm_segref_table_t *table, egm_segref_t *ref)
{
    int last = 0;
    pthread_mutex_lock(&table->lock);
    if (--ref->refs == 0 && !atomic_load_explicit(&ref->linked, memory_order_relaxed)) {
        if (ref->awaited) {
            pthread_cond_broadcast(&table->freed_ok);
        } else {
            table->live--;
            last = 1;
        }
    }
    pthread_mutex_unlock(&table->lock);
    if (last)
        table->free_fn(table->ctx, ref);
}

#endif
