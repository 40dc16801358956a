/* A standby's copy of the leader's state (mirror.h). */
#include "master/mirror.h"

#include <pthread.h>
#include <string.h>
#include "common/alloc.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "common/wire.h"
#include "master/journal.h"
#include "rpc/proto_util.h"
#include "rpc/segment_desc.h"

/* An op as received, in one allocation. */
typedef struct {
    size_t len;
    uint8_t op[];
} record_t;

typedef struct {
    egm_id_t segment;
    uint64_t offset, length, until_ms;
} range_t;

struct egm_mirror {
    pthread_mutex_t lock;
    int64_t epoch;
    uint64_t position;
    egm_hashmap_t *segments; /* id (16 bytes) -> record_t */
    egm_hashmap_t *objects;  /* key -> record_t */
    range_t *ranges;
    size_t n_ranges, cap_ranges;
    uint64_t batches;
    uint64_t last_batch_ms;
};

/* Frees every record and empties the map. */
static void records_clear(egm_hashmap_t *map)
{
    size_t iter = 0, key_len;
    const void *key;
    void *value;
    while (egm__hashmap_next(map, &iter, &key, &key_len, &value)) {
        egm_free(value);
        egm__hashmap_remove(map, key, key_len); /* allowed while iterating */
    }
}

/* The op a record keeps (decoded when it was kept: it decodes). */
static void record_op(const record_t *r, egm_jop_t *op)
{
    size_t pos = 0;
    egm__jdec_next(r->op, r->len, &pos, op);
}

static void clear(egm_mirror_t *m)
{
    records_clear(m->segments);
    records_clear(m->objects);
    m->n_ranges = 0;
}

egm_status_t egm__mirror_create(egm_mirror_t **m_p)
{
    egm_mirror_t *m = egm_calloc(1, sizeof(*m), "master.mirror");
    *m_p = NULL;
    if (m == NULL || egm__hashmap_create(&m->segments) != EGM_OK ||
        egm__hashmap_create(&m->objects) != EGM_OK) {
        if (m != NULL) {
            egm__hashmap_destroy(m->segments);
            egm_free(m);
        }
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory creating the standby's mirror");
    }
    pthread_mutex_init(&m->lock, NULL);
    *m_p = m;
    return EGM_OK;
}

void egm__mirror_destroy(egm_mirror_t *m)
{
    if (m == NULL)
        return;
    clear(m);
    egm__hashmap_destroy(m->segments);
    egm__hashmap_destroy(m->objects);
    egm_free(m->ranges);
    pthread_mutex_destroy(&m->lock);
    egm_free(m);
}

/* Keeps a copy of op's bytes under key, replacing what was there. */
static egm_status_t keep(egm_hashmap_t *map, const void *key, size_t key_len, const uint8_t *op,
                         size_t len)
{
    record_t *r = egm_malloc(sizeof(*r) + len, "master.mirror_record");
    void *old = NULL;
    if (r == NULL || egm__hashmap_put(map, key, key_len, r, &old) != EGM_OK) {
        egm_free(r);
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory keeping the leader's state");
    }
    r->len = len;
    memcpy(r->op, op, len);
    egm_free(old);
    return EGM_OK;
}

static void drop(egm_hashmap_t *map, const void *key, size_t key_len)
{
    egm_free(egm__hashmap_remove(map, key, key_len));
}

/* Appends a range in use, first dropping those that ended. */
static egm_status_t add_range(egm_mirror_t *m, const egm_jop_t *op, uint64_t now_ms)
{
    if (m->n_ranges == m->cap_ranges) {
        size_t k = 0;
        for (size_t i = 0; i < m->n_ranges; i++)
            if (m->ranges[i].until_ms > now_ms)
                m->ranges[k++] = m->ranges[i];
        m->n_ranges = k;
    }
    if (m->n_ranges == m->cap_ranges) {
        size_t cap = m->cap_ranges < 64 ? 64 : m->cap_ranges * 2;
        range_t *r = egm_realloc(m->ranges, cap * sizeof(*r), "master.mirror_ranges");
        if (r == NULL)
            return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory keeping the leader's state");
        m->ranges = r;
        m->cap_ranges = cap;
    }
    m->ranges[m->n_ranges++] = (range_t){.segment = op->segment,
                                         .offset = op->offset,
                                         .length = op->length,
                                         .until_ms = now_ms + op->for_ms};
    return EGM_OK;
}

static egm_status_t apply_one(egm_mirror_t *m, const egm_jop_t *op, const uint8_t *bytes,
                              size_t len, uint64_t now_ms)
{
    uint8_t key[16];
    egm_segment_desc_t desc;
    egm_status_t s;

    switch (op->kind) {
    case EGM_JOP_SEGMENT:
        /* The decoder answers PROTOCOL for bytes that are no SegmentDesc: a
         * batch whose op does not decode is INVALID_ARG (mirror.h). */
        if ((s = egm__segment_desc_decode(op->desc, op->desc_len, &desc)) != EGM_OK)
            return s == EGM_ERR_NO_MEMORY
                       ? s
                       : egm__set_error(EGM_ERR_INVALID_ARG,
                                        "journal op: a segment descriptor that does not decode: %s",
                                        egm_last_error());
        egm__wire_put_id(key, desc.id);
        return keep(m->segments, key, sizeof(key), bytes, len);
    case EGM_JOP_SEGMENT_GONE:
        egm__wire_put_id(key, op->segment);
        drop(m->segments, key, sizeof(key));
        return EGM_OK;
    case EGM_JOP_OBJECT:
        return keep(m->objects, op->key, op->key_len, bytes, len);
    case EGM_JOP_OBJECT_GONE:
        drop(m->objects, op->key, op->key_len);
        return EGM_OK;
    default: /* EGM_JOP_RESERVE: egm__jdec_next knows no other */
        return add_range(m, op, now_ms);
    }
}

egm_status_t egm__mirror_apply(egm_mirror_t *m, int64_t epoch, int reset, uint64_t from,
                               uint64_t to, const uint8_t *ops, size_t len, uint64_t now_ms)
{
    egm_status_t status = EGM_OK;
    pthread_mutex_lock(&m->lock);
    if (epoch < m->epoch) {
        status = egm__set_error(EGM_ERR_PERMISSION,
                                "a batch of leader epoch %lld; this standby follows epoch %lld",
                                (long long)epoch, (long long)m->epoch);
        goto out;
    }
    if (!reset && (epoch != m->epoch || from != m->position)) {
        status = egm__set_error(EGM_ERR_INVALID_ARG,
                                "a batch of epoch %lld from %llu; this standby is at epoch %lld, "
                                "%llu (a snapshot must come first)",
                                (long long)epoch, (unsigned long long)from, (long long)m->epoch,
                                (unsigned long long)m->position);
        goto out;
    }
    if (reset) {
        clear(m);
        m->epoch = epoch;
    }
    m->position = (uint64_t)-1; /* until the whole batch is in */
    for (size_t pos = 0; pos < len;) {
        size_t start = pos;
        egm_jop_t op;
        if ((status = egm__jdec_next(ops, len, &pos, &op)) != EGM_OK ||
            (status = apply_one(m, &op, ops + start, pos - start, now_ms)) != EGM_OK)
            goto out;
    }
    m->position = to;
    m->batches++;
    m->last_batch_ms = now_ms;
out:
    pthread_mutex_unlock(&m->lock);
    return status;
}

void egm__mirror_stats(egm_mirror_t *m, egm_mirror_stats_t *stats_p)
{
    pthread_mutex_lock(&m->lock);
    *stats_p = (egm_mirror_stats_t){.epoch = m->epoch,
                                    .position = m->position,
                                    .segments = egm__hashmap_size(m->segments),
                                    .objects = egm__hashmap_size(m->objects),
                                    .ranges = m->n_ranges,
                                    .batches_total = m->batches,
                                    .last_batch_ms = m->last_batch_ms};
    pthread_mutex_unlock(&m->lock);
}

/* Mounts every kept segment; one that fails is skipped (its objects lose
 * their replicas there), said once per segment. */
static size_t mount_segments(egm_mirror_t *m, egm_liveness_t *liveness, uint64_t now_ms)
{
    size_t iter = 0, mounted = 0;
    void *value;
    while (egm__hashmap_next(m->segments, &iter, NULL, NULL, &value)) {
        egm_jop_t op;
        ProtobufCMessage *msg = NULL;
        record_op(value, &op);
        if (egm__pb_unpack(&egm__segment_desc__descriptor, op.desc, op.desc_len, &msg) !=
            EGM_OK) { /* checked when kept */
            egm_warn("standby: a segment of the leader's state does not decode: %s",
                     egm_last_error());
            continue;
        }
        const Egm__SegmentDesc *d = (const Egm__SegmentDesc *)msg;
        egm_segment_params_t p = egm__segment_params_from_pb(d);
        if (egm__liveness_mount(liveness, p.owner, &p, now_ms) != EGM_OK)
            egm_warn("standby: taking over segment %s: %s", p.name, egm_last_error());
        else
            mounted++;
        egm__pb_free(msg);
    }
    return mounted;
}

egm_status_t egm__mirror_install(egm_mirror_t *m, egm_liveness_t *liveness,
                                 egm_segment_table_t *segments, egm_object_index_t *objects,
                                 uint64_t now_ms, size_t *objects_p, size_t *skipped_p)
{
    *objects_p = *skipped_p = 0;
    pthread_mutex_lock(&m->lock);
    mount_segments(m, liveness, now_ms);
    size_t n = egm__hashmap_size(m->objects), k = 0, iter = 0;
    egm_adopt_object_t *objs = egm_calloc(n ? n : 1, sizeof(*objs), "master.mirror_install");
    egm_adopt_range_t *ranges =
        egm_calloc(m->n_ranges ? m->n_ranges : 1, sizeof(*ranges), "master.mirror_install");
    egm_status_t status = EGM_OK;
    if (objs == NULL || ranges == NULL) {
        status = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory taking over %zu objects", n);
        goto out;
    }
    void *value;
    while (egm__hashmap_next(m->objects, &iter, NULL, NULL, &value)) {
        egm_jop_t op;
        record_op(value, &op);
        egm_adopt_object_t *a = &objs[k++];
        *a = (egm_adopt_object_t){.key = op.key,
                                  .key_len = op.key_len,
                                  .size = op.size,
                                  .writer = op.writer,
                                  .soft_pin = op.soft_pin,
                                  .hard_pin = op.hard_pin,
                                  .placed = op.placed,
                                  .n_replicas = op.n_replicas};
        for (uint32_t i = 0; i < op.n_replicas; i++) {
            a->segment[i] = egm__segment_table_find(segments, op.replica_segment[i]);
            a->offset[i] = op.replica_offset[i];
        }
    }
    size_t n_ranges = 0;
    for (size_t i = 0; i < m->n_ranges; i++)
        if (m->ranges[i].until_ms > now_ms)
            ranges[n_ranges++] = (egm_adopt_range_t){
                .segment = egm__segment_table_find(segments, m->ranges[i].segment),
                .offset = m->ranges[i].offset,
                .length = m->ranges[i].length,
                .until_ms = m->ranges[i].until_ms};
    status = egm__objects_adopt(objects, objs, k, ranges, n_ranges, now_ms, objects_p, skipped_p);
out:
    egm_free(objs);
    egm_free(ranges);
    clear(m);
    pthread_mutex_unlock(&m->lock);
    return status;
}
