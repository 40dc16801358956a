/* Exposed segments (provider side): what the fd broker and the tcp server may
 * serve, in a segment reference table (segref.h). Each use holds a reference,
 * so that withdraw (an unlink that waits) returns only once the requests in
 * flight are done and the pool may free the memory. */
#include "te/te_int.h"

#include "common/alloc.h"
#include "common/log.h"

static void exposed_free(void *ctx, egm_segref_t *ref)
{
    (void)ctx;
    egm_free(ref);
}

egm_status_t egm__exposed_create(egm_exposed_table_t **table_p)
{
    return egm__segref_create("exposed segment", exposed_free, NULL, table_p);
}

void egm__exposed_destroy(egm_exposed_table_t *table)
{
    egm__segref_destroy(table);
}

static egm_status_t insert(egm_exposed_table_t *table, const egm_exposed_t *init)
{
    egm_status_t st;
    egm_exposed_t *seg = egm_calloc(1, sizeof(*seg), "te.exposed.segment");
    if (seg == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "te: out of memory");
    *seg = *init;
    if ((st = egm__segref_link(table, &seg->ref, 0)) != EGM_OK) {
        if (st == EGM_ERR_SEGMENT_EXISTS) {
            char text[EGM_ID_STRLEN];
            st = egm__set_error(EGM_ERR_SEGMENT_EXISTS, "segment %s is already exposed",
                                egm__id_format(seg->ref.id, text));
        }
        egm_free(seg);
    }
    return st;
}

egm_status_t egm__exposed_add(egm_exposed_table_t *table, egm_id_t id, void *base, uint64_t size,
                              int memfd)
{
    egm_exposed_t init = {.ref.id = id,
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
    egm_exposed_t init = {.ref.id = id,
                          .base = base,
                          .size = size,
                          .memfd = -1,
                          .kind = kind,
                          .handle = handle,
                          .host_accessible = host_accessible,
                          .device = device};
    return insert(table, &init);
}

egm_status_t egm__exposed_unlink(egm_exposed_table_t *table, egm_id_t id)
{
    if (egm__segref_unlink(table, id, EGM_SEGREF_WAIT))
        return EGM_OK;
    char text[EGM_ID_STRLEN];
    return egm__set_error(EGM_ERR_SEGMENT_NOT_FOUND, "segment %s is not exposed",
                          egm__id_format(id, text));
}

egm_exposed_t *egm__exposed_get(egm_exposed_table_t *table, egm_id_t id)
{
    return (egm_exposed_t *)egm__segref_get(table, id);
}

void egm__exposed_put(egm_exposed_table_t *table, egm_exposed_t *segment)
{
    egm__segref_put(table, &segment->ref);
}

size_t egm__exposed_count(egm_exposed_table_t *table)
{
    return egm__segref_count(table);
}
