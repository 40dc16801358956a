/* Segment table: a hash map by id plus a dense array for iteration and random
 * choice; retired ids in a ring indexed by view. */
#include "master/segment_table.h"

#include <string.h>
#include "common/alloc.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "master/journal.h"
#include "rpc/proto_util.h"

struct egm_segment_table {
    egm_hashmap_t *by_id;
    egm_segment_t **list;
    size_t n;
    size_t cap;
    uint64_t view;
    /* The id retired at view v sits at retired[(v - 1) % history]; views
     * (view - retired_count, view] are remembered. */
    egm_id_t *retired;
    size_t history;
    size_t retired_count;
    uint64_t generation;    /* bumped whenever a segment comes or goes */
    egm_journal_t *journal; /* enable_ha: told of every segment that comes or goes */
};

static void id_key(egm_id_t id, uint8_t key[16])
{
    memcpy(key, &id.hi, 8);
    memcpy(key + 8, &id.lo, 8);
}

egm_status_t egm__segment_table_create(size_t history, egm_segment_table_t **table_p)
{
    egm_segment_table_t *t;
    egm_status_t status;

    *table_p = NULL;
    if (history == 0)
        history = EGM_MASTER_RETIRED_HISTORY;
    t = egm_calloc(1, sizeof(*t), "master.segment_table");
    if (t == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory creating the segment table");
    t->history = history;
    t->retired = egm_calloc(history, sizeof(*t->retired), "master.retired_ids");
    if (t->retired == NULL) {
        status = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory creating the segment table");
        goto err_free;
    }
    status = egm__hashmap_create(&t->by_id);
    if (status != EGM_OK)
        goto err_free;
    *table_p = t;
    return EGM_OK;

err_free:
    egm_free(t->retired);
    egm_free(t);
    return status;
}

static egm_status_t pack_desc(egm_segment_t *seg)
{
    Egm__SegmentDesc pb;
    Egm__Id id, owner;
    egm__segment_desc_to_pb(&seg->desc, &pb, &id, &owner);
    size_t len = egm__segment_desc__get_packed_size(&pb);
    uint8_t *buf = egm_malloc(len ? len : 1, "master.segment_desc_pb");
    if (buf == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory mounting a segment");
    egm__segment_desc__pack(&pb, buf);
    seg->desc_pb = (egm_pb_slice_t){.data = buf, .len = len};
    return EGM_OK;
}

static void segment_free(egm_segment_t *seg)
{
    egm_free((void *)seg->desc_pb.data);
    egm__allocator_destroy(seg->allocator);
    egm_free(seg);
}

void egm__segment_table_destroy(egm_segment_table_t *t)
{
    if (t == NULL)
        return;
    for (size_t i = 0; i < t->n; i++)
        segment_free(t->list[i]);
    egm__hashmap_destroy(t->by_id);
    egm_free(t->list);
    egm_free(t->retired);
    egm_free(t);
}

egm_status_t egm__segment_validate(const egm_segment_params_t *p)
{
    egm_status_t status;

    if (egm__id_is_nil(p->id))
        return egm__set_error(EGM_ERR_INVALID_ARG, "segment.id: must not be nil");
    if (egm__id_is_nil(p->owner))
        return egm__set_error(EGM_ERR_INVALID_ARG, "segment.owner: must not be nil");
    if (p->size < EGM_ALLOCATOR_ALIGN || p->size > EGM_SEGMENT_SIZE_MAX)
        return egm__set_error(EGM_ERR_INVALID_ARG, "segment.size: %llu, must be %u..%llu",
                              (unsigned long long)p->size, EGM_ALLOCATOR_ALIGN,
                              (unsigned long long)EGM_SEGMENT_SIZE_MAX);
    if (p->name == NULL || p->name[0] == '\0')
        return egm__set_error(EGM_ERR_INVALID_ARG, "segment.name: must not be empty");
    if ((status = egm__segment_check_string("name", p->name, EGM_SEGMENT_NAME_MAX)) != EGM_OK ||
        (status = egm__segment_check_string("host_id", p->host_id, EGM_HOST_ID_MAX)) != EGM_OK ||
        (status = egm__segment_check_string("zone", p->zone, EGM_ZONE_MAX)) != EGM_OK ||
        (status = egm__segment_check_string("tcp_endpoint", p->tcp_endpoint, EGM_ENDPOINT_MAX)) !=
            EGM_OK ||
        (status = egm__segment_check_shm_socket(p->shm_socket)) != EGM_OK)
        return status;
    return egm__segment_check_handle(p->handle_kind, p->fabric_handle, p->fabric_handle_len);
}

static int recently_retired(const egm_segment_table_t *t, egm_id_t id)
{
    for (size_t i = 0; i < t->retired_count; i++)
        if (egm__id_equal(t->retired[i], id))
            return 1;
    return 0;
}

static void copy_string(char *dst, const char *src, size_t max)
{
    if (src == NULL)
        src = "";
    size_t len = strnlen(src, max - 1);
    memcpy(dst, src, len);
    dst[len] = '\0';
}

egm_status_t egm__segment_table_check(const egm_segment_table_t *t, const egm_segment_params_t *p)
{
    char id_text[EGM_ID_STRLEN];
    egm_status_t status = egm__segment_validate(p);
    if (status != EGM_OK)
        return status;
    /* The capacity and used totals are sums over the segments: they must not wrap. */
    uint64_t total = p->size;
    for (size_t i = 0; i < t->n; i++)
        total += t->list[i]->desc.size;
    if (total > EGM_CAPACITY_MAX)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "segment.size: %llu would take the mounted capacity past %llu bytes",
                              (unsigned long long)p->size, (unsigned long long)EGM_CAPACITY_MAX);
    if (egm__segment_table_find(t, p->id) != NULL || recently_retired(t, p->id))
        return egm__set_error(
            EGM_ERR_SEGMENT_EXISTS, "segment %s is %s", egm__id_format(p->id, id_text),
            recently_retired(t, p->id) ? "retired (ids are never reused)" : "already mounted");
    return EGM_OK;
}

egm_status_t egm__segment_table_mount(egm_segment_table_t *t, const egm_segment_params_t *p,
                                      egm_segment_t **segment_p)
{
    egm_segment_t *seg;
    uint8_t key[16];
    egm_status_t status;

    if (segment_p != NULL)
        *segment_p = NULL;
    status = egm__segment_table_check(t, p);
    if (status != EGM_OK)
        return status;
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 16;
        egm_segment_t **list = egm_realloc(t->list, cap * sizeof(*list), "master.segment_list");
        if (list == NULL)
            return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory mounting a segment");
        t->list = list;
        t->cap = cap;
    }
    seg = egm_calloc(1, sizeof(*seg), "master.segment");
    if (seg == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory mounting a segment");
    status = egm__allocator_create(p->size, &seg->allocator);
    if (status != EGM_OK)
        goto err_free;
    egm_segment_desc_t *d = &seg->desc;
    d->id = p->id;
    d->owner = p->owner;
    d->size = p->size;
    copy_string(d->name, p->name, sizeof(d->name));
    copy_string(d->host_id, p->host_id, sizeof(d->host_id));
    copy_string(d->zone, p->zone, sizeof(d->zone));
    copy_string(d->tcp_endpoint, p->tcp_endpoint, sizeof(d->tcp_endpoint));
    copy_string(d->shm_socket, p->shm_socket, sizeof(d->shm_socket));
    d->handle_kind = (egm_handle_kind_t)p->handle_kind;
    if (p->fabric_handle_len > 0)
        memcpy(d->fabric_handle, p->fabric_handle, p->fabric_handle_len);
    d->fabric_handle_len = (uint8_t)p->fabric_handle_len;
    if ((status = pack_desc(seg)) != EGM_OK)
        goto err_free;
    id_key(d->id, key);
    status = egm__hashmap_put(t->by_id, key, sizeof(key), seg, NULL);
    if (status != EGM_OK)
        goto err_free;
    seg->index = t->n;
    t->list[t->n++] = seg;
    t->generation++;
    egm__journal_segment(t->journal, seg);
    if (segment_p != NULL)
        *segment_p = seg;
    return EGM_OK;

err_free:
    segment_free(seg);
    return status;
}

egm_segment_t *egm__segment_table_find(const egm_segment_table_t *t, egm_id_t id)
{
    uint8_t key[16];
    id_key(id, key);
    return egm__hashmap_get(t->by_id, key, sizeof(key));
}

size_t egm__segment_table_count(const egm_segment_table_t *t)
{
    return t->n;
}

egm_segment_t *egm__segment_table_at(const egm_segment_table_t *t, size_t i)
{
    return i < t->n ? t->list[i] : NULL;
}

static void detach(egm_segment_table_t *t, egm_segment_t *seg)
{
    uint8_t key[16];

    id_key(seg->desc.id, key);
    egm__hashmap_remove(t->by_id, key, sizeof(key));
    /* Swap-remove keeps the array dense. */
    t->list[seg->index] = t->list[t->n - 1];
    t->list[seg->index]->index = seg->index;
    t->n--;
    t->generation++;
}

uint64_t egm__segment_table_generation(const egm_segment_table_t *t)
{
    return t->generation;
}

egm_segment_params_t egm__segment_params_from_pb(const Egm__SegmentDesc *d)
{
    return (egm_segment_params_t){
        .id = egm__id_from_pb(d->id),
        .owner = egm__id_from_pb(d->owner),
        .size = d->size,
        .name = d->name,
        .host_id = d->host_id,
        .zone = d->zone,
        .tcp_endpoint = d->tcp_endpoint,
        .shm_socket = d->shm_socket,
        .handle_kind = (int)d->handle_kind,
        .fabric_handle = d->fabric_handle.data,
        .fabric_handle_len = d->fabric_handle.len,
    };
}

void egm__segment_table_set_journal(egm_segment_table_t *t, egm_journal_t *journal)
{
    t->journal = journal;
}

void egm__segment_table_unpublish(egm_segment_table_t *t, egm_segment_t *seg)
{
    egm__journal_segment_gone(t->journal, seg->desc.id);
    detach(t, seg);
    segment_free(seg);
}

void egm__segment_table_remove(egm_segment_table_t *t, egm_segment_t *seg)
{
    egm__journal_segment_gone(t->journal, seg->desc.id);
    detach(t, seg);
    t->view++;
    t->retired[(t->view - 1) % t->history] = seg->desc.id;
    if (t->retired_count < t->history)
        t->retired_count++;
    segment_free(seg);
}

uint64_t egm__segment_table_view(const egm_segment_table_t *t)
{
    return t->view;
}

egm_status_t egm__segment_table_retired_since(const egm_segment_table_t *t, uint64_t since,
                                              egm_id_t **ids_p, size_t *n_p, int *reset_p)
{
    *ids_p = NULL;
    *n_p = 0;
    *reset_p = 0;
    if (since > t->view || t->view - since > t->retired_count) {
        *reset_p = 1;
        return EGM_OK;
    }
    size_t n = (size_t)(t->view - since);
    if (n == 0)
        return EGM_OK;
    egm_id_t *ids = egm_calloc(n, sizeof(*ids), "master.retired_reply");
    if (ids == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory listing retired segments");
    for (size_t i = 0; i < n; i++)
        ids[i] = t->retired[(since + i) % t->history]; /* view since + i + 1 */
    *ids_p = ids;
    *n_p = n;
    return EGM_OK;
}
