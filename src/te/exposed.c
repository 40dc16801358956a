/* Exposed segments (provider side): what the fd broker and the tcp server may
 * serve. Each use takes a reference so that withdraw can wait for the requests
 * in flight before the pool frees the memory. */
#include "te/te_int.h"

#include <pthread.h>

#include "common/alloc.h"
#include "common/hashmap.h"
#include "common/log.h"

struct egm_exposed_table {
    pthread_mutex_t lock;
    pthread_cond_t drained; /* signalled when a withdrawn segment's last use ends */
    egm_hashmap_t *by_id;   /* id bytes -> egm_exposed_t* */
};

egm_status_t egm__exposed_create(egm_exposed_table_t **table_p)
{
    egm_status_t st;
    egm_exposed_table_t *table = egm_calloc(1, sizeof(*table), "te.exposed");
    if (table == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "te: out of memory");
    if ((st = egm__hashmap_create(&table->by_id)) != EGM_OK)
        goto err_table;
    pthread_mutex_init(&table->lock, NULL);
    pthread_cond_init(&table->drained, NULL);
    *table_p = table;
    return EGM_OK;

err_table:
    egm_free(table);
    return st;
}

void egm__exposed_destroy(egm_exposed_table_t *table)
{
    if (table == NULL)
        return;
    size_t iter = 0;
    const void *key;
    size_t key_len;
    void *value;
    while (egm__hashmap_next(table->by_id, &iter, &key, &key_len, &value))
        egm_free(value);
    egm__hashmap_destroy(table->by_id);
    pthread_cond_destroy(&table->drained);
    pthread_mutex_destroy(&table->lock);
    egm_free(table);
}

static egm_status_t insert(egm_exposed_table_t *table, const egm_exposed_t *init)
{
    egm_status_t st;
    egm_exposed_t *seg = egm_calloc(1, sizeof(*seg), "te.exposed.segment");
    if (seg == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "te: out of memory");
    *seg = *init;

    pthread_mutex_lock(&table->lock);
    if (egm__hashmap_get(table->by_id, &seg->id, sizeof(seg->id)) != NULL) {
        char text[EGM_ID_STRLEN];
        st = egm__set_error(EGM_ERR_SEGMENT_EXISTS, "segment %s is already exposed",
                            egm__id_format(seg->id, text));
        goto err_unlock;
    }
    if ((st = egm__hashmap_put(table->by_id, &seg->id, sizeof(seg->id), seg, NULL)) != EGM_OK)
        goto err_unlock;
    pthread_mutex_unlock(&table->lock);
    return EGM_OK;

err_unlock:
    pthread_mutex_unlock(&table->lock);
    egm_free(seg);
    return st;
}

egm_status_t egm__exposed_add(egm_exposed_table_t *table, egm_id_t id, void *base, uint64_t size,
                              int memfd)
{
    egm_exposed_t init = {.id = id,
                          .base = base,
                          .size = size,
                          .memfd = memfd,
                          .kind = memfd >= 0 ? EGM_HANDLE_MEMFD : EGM_HANDLE_NONE,
                          .host_accessible = 1,
                          .device = -1};
    return insert(table, &init);
}

egm_status_t egm__exposed_add_vmm(egm_exposed_table_t *table, egm_id_t id, void *base,
                                  uint64_t size, egm_cu_mem_handle_t handle, egm_handle_kind_t kind,
                                  int host_accessible, int device)
{
    egm_exposed_t init = {.id = id,
                          .base = base,
                          .size = size,
                          .memfd = -1,
                          .kind = kind,
                          .handle = handle,
                          .host_accessible = host_accessible,
                          .device = device};
    return insert(table, &init);
}

egm_status_t egm__exposed_withdraw(egm_exposed_table_t *table, egm_id_t id)
{
    pthread_mutex_lock(&table->lock);
    egm_exposed_t *seg = egm__hashmap_remove(table->by_id, &id, sizeof(id));
    if (seg == NULL) {
        pthread_mutex_unlock(&table->lock);
        char text[EGM_ID_STRLEN];
        return egm__set_error(EGM_ERR_SEGMENT_NOT_FOUND, "segment %s is not exposed",
                              egm__id_format(id, text));
    }
    seg->withdrawn = 1;
    while (seg->uses > 0)
        pthread_cond_wait(&table->drained, &table->lock);
    pthread_mutex_unlock(&table->lock);
    egm_free(seg);
    return EGM_OK;
}

egm_exposed_t *egm__exposed_acquire(egm_exposed_table_t *table, egm_id_t id)
{
    pthread_mutex_lock(&table->lock);
    egm_exposed_t *seg = egm__hashmap_get(table->by_id, &id, sizeof(id));
    if (seg != NULL)
        seg->uses++;
    pthread_mutex_unlock(&table->lock);
    return seg;
}

void egm__exposed_release(egm_exposed_table_t *table, egm_exposed_t *segment)
{
    pthread_mutex_lock(&table->lock);
    if (--segment->uses == 0 && segment->withdrawn)
        pthread_cond_broadcast(&table->drained);
    pthread_mutex_unlock(&table->lock);
}

size_t egm__exposed_count(egm_exposed_table_t *table)
{
    pthread_mutex_lock(&table->lock);
    size_t n = egm__hashmap_size(table->by_id);
    pthread_mutex_unlock(&table->lock);
    return n;
}
