/* Segment reference table: see segref.h. */
#include "te/segref.h"

#include <inttypes.h>

#include "common/alloc.h"
#include "common/log.h"

egm_status_t egm__segref_create(const char *what, egm_segref_free_fn free_fn, void *ctx,
                                egm_segref_table_t **table_p)
{
    egm_status_t st;
    egm_segref_table_t *table = egm_calloc(1, sizeof(*table), "te.segref");
    if (table == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "%s table: out of memory", what);
    if ((st = egm__hashmap_create(&table->linked)) != EGM_OK)
        goto err_table;
    if ((st = egm__hashmap_create(&table->retired)) != EGM_OK)
        goto err_linked;
    pthread_mutex_init(&table->lock, NULL);
    pthread_cond_init(&table->freed_ok, NULL);
    table->free_fn = free_fn;
    table->ctx = ctx;
    table->what = what;
    *table_p = table;
    return EGM_OK;

err_linked:
    egm__hashmap_destroy(table->linked);
err_table:
    egm_free(table);
    return st;
}

void egm__segref_destroy(egm_segref_table_t *table)
{
    if (table == NULL)
        return;
    size_t iter = 0;
    const void *key;
    size_t key_len;
    void *value;
    while (egm__hashmap_next(table->linked, &iter, &key, &key_len, &value)) {
        egm_segref_t *ref = value;
        if (ref->refs > 0)
            egm_warn("%s destroyed with %" PRIu64 " references held", table->what, ref->refs);
        table->free_fn(table->ctx, ref);
    }
    egm__hashmap_destroy(table->linked);
    egm__hashmap_destroy(table->retired);
    pthread_cond_destroy(&table->freed_ok);
    pthread_mutex_destroy(&table->lock);
    egm_free(table);
}

egm_status_t egm__segref_link(egm_segref_table_t *table, egm_segref_t *ref, uint64_t refs)
{
    egm_status_t st;
    char text[EGM_ID_STRLEN];

    ref->refs = refs;
    ref->awaited = 0;
    pthread_mutex_lock(&table->lock);
    if (egm__hashmap_get(table->retired, &ref->id, sizeof(ref->id)) != NULL) {
        st = egm__set_error(EGM_ERR_SEGMENT_NOT_FOUND, "%s %s: the segment was retired",
                            table->what, egm__id_format(ref->id, text));
        goto out;
    }
    if (egm__hashmap_get(table->linked, &ref->id, sizeof(ref->id)) != NULL) {
        st = egm__set_error(EGM_ERR_SEGMENT_EXISTS, "%s %s exists already", table->what,
                            egm__id_format(ref->id, text));
        goto out;
    }
    if ((st = egm__hashmap_put(table->linked, &ref->id, sizeof(ref->id), ref, NULL)) != EGM_OK)
        goto out;
    atomic_store(&ref->linked, 1);
    table->live++;
out:
    pthread_mutex_unlock(&table->lock);
    return st;
}

int egm__segref_unlink(egm_segref_table_t *table, egm_id_t id, unsigned flags)
{
    pthread_mutex_lock(&table->lock);
    /* The marker value only has to be non-NULL. A failed put (no memory)
     * still unlinks below; only linking the id again stays possible. */
    if ((flags & EGM_SEGREF_RETIRE) && egm__hashmap_get(table->retired, &id, sizeof(id)) == NULL &&
        egm__hashmap_put(table->retired, &id, sizeof(id), table, NULL) != EGM_OK)
        egm_warn("%s: cannot remember a retired segment: %s", table->what, egm_last_error());
    egm_segref_t *ref = egm__hashmap_remove(table->linked, &id, sizeof(id));
    if (ref == NULL) {
        pthread_mutex_unlock(&table->lock);
        return 0;
    }
    atomic_store(&ref->linked, 0);
    if (flags & EGM_SEGREF_WAIT) {
        ref->awaited = 1;
        while (ref->refs > 0)
            pthread_cond_wait(&table->freed_ok, &table->lock);
    }
    int now = ref->refs == 0;
    if (now)
        table->live--;
    pthread_mutex_unlock(&table->lock);
    if (now)
        table->free_fn(table->ctx, ref);
    return 1;
}

int egm__segref_linked(const egm_segref_t *ref)
{
    return atomic_load(&ref->linked);
}

int egm__segref_has(egm_segref_table_t *table, egm_id_t id)
{
    pthread_mutex_lock(&table->lock);
    int has = egm__hashmap_get(table->linked, &id, sizeof(id)) != NULL;
    pthread_mutex_unlock(&table->lock);
    return has;
}

int egm__segref_retired(egm_segref_table_t *table, egm_id_t id)
{
    pthread_mutex_lock(&table->lock);
    int retired = egm__hashmap_get(table->retired, &id, sizeof(id)) != NULL;
    pthread_mutex_unlock(&table->lock);
    return retired;
}

size_t egm__segref_count(egm_segref_table_t *table)
{
    pthread_mutex_lock(&table->lock);
    size_t n = egm__hashmap_size(table->linked);
    pthread_mutex_unlock(&table->lock);
    return n;
}

uint64_t egm__segref_live(egm_segref_table_t *table)
{
    pthread_mutex_lock(&table->lock);
    uint64_t n = table->live;
    pthread_mutex_unlock(&table->lock);
    return n;
}

egm_status_t egm__segref_check_size(egm_segref_table_t *table, egm_segref_t *ref,
                                    const char *prefix, uint64_t described, uint64_t held)
{
    if (described == held)
        return EGM_OK;
    char text[EGM_ID_STRLEN];
    egm__id_format(ref->id, text);
    egm__segref_put(table, ref);
    return egm__set_error(EGM_ERR_INVALID_ARG,
                          "%s: segment %s: descriptor size %" PRIu64
                          " differs from the mapped %" PRIu64,
                          prefix, text, described, held);
}

egm_status_t egm__segref_ids(egm_segref_table_t *table, egm_id_t **ids_p, size_t *n_p)
{
    void *ids = NULL;
    pthread_mutex_lock(&table->lock);
    egm_status_t st =
        egm__hashmap_copy_keys(table->linked, sizeof(egm_id_t), table->what, &ids, n_p);
    pthread_mutex_unlock(&table->lock);
    *ids_p = ids;
    return st;
}
