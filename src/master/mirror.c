/* A standby's copy of the leader's state (mirror.h). */
#include "master/mirror.h"

#include <pthread.h>
#include <stdint.h>
#include <string.h>
#include "common/alloc.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "common/slab_log.h"
#include "common/wire.h"
#include "master/journal.h"
#include "master/seq_set.h"
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

/* A slab granted to a writer: where its log is, and what of it is known. */
typedef struct {
    uint64_t id;
    egm_id_t owner;
    uint64_t size; /* of each extent */
    uint64_t until_ms;
    uint32_t n;
    egm_id_t segment[EGM_JOP_REPLICAS_MAX];
    uint64_t base[EGM_JOP_REPLICAS_MAX];
    int logged; /* its writer keeps its log: read even with no entry known */
    egm_seq_set_t seen;
} mslab_t;

struct egm_mirror {
    pthread_mutex_t lock;
    int64_t epoch;
    uint64_t position;
    egm_hashmap_t *segments; /* id (16 bytes) -> record_t */
    egm_hashmap_t *objects;  /* key -> record_t */
    range_t *ranges;
    size_t n_ranges, cap_ranges;
    egm_hashmap_t *slabs;   /* id (8 bytes) -> mslab_t */
    size_t slabs_pruned_at; /* their count when expired ones were last dropped */
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

static void mslab_free(mslab_t *s)
{
    egm__seq_set_free(&s->seen);
    egm_free(s);
}

/* Drops every slab (expired_before 0), or those whose lease ended before. */
static void slabs_drop(egm_mirror_t *m, uint64_t expired_before)
{
    size_t iter = 0, key_len;
    const void *key;
    void *value;
    while (egm__hashmap_next(m->slabs, &iter, &key, &key_len, &value)) {
        mslab_t *s = value;
        if (expired_before != 0 && s->until_ms >= expired_before)
            continue;
        egm__hashmap_remove(m->slabs, key, key_len); /* allowed while iterating */
        mslab_free(s);
    }
    m->slabs_pruned_at = egm__hashmap_size(m->slabs);
}

static void clear(egm_mirror_t *m)
{
    records_clear(m->segments);
    records_clear(m->objects);
    slabs_drop(m, 0);
    m->n_ranges = 0;
}

egm_status_t egm__mirror_create(egm_mirror_t **m_p)
{
    egm_mirror_t *m = egm_calloc(1, sizeof(*m), "master.mirror");
    *m_p = NULL;
    if (m == NULL || egm__hashmap_create(&m->segments) != EGM_OK ||
        egm__hashmap_create(&m->objects) != EGM_OK || egm__hashmap_create(&m->slabs) != EGM_OK) {
        if (m != NULL) {
            egm__hashmap_destroy(m->segments);
            egm__hashmap_destroy(m->objects);
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
    egm__hashmap_destroy(m->slabs);
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

/* How long past its lease a slab whose end never came is kept. */
#define SLAB_KEPT_MS (600u * 1000u)

static egm_status_t no_memory(void)
{
    return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory keeping the leader's state");
}

/* A slab granted (or as a snapshot has it), replacing what was kept of it. */
static egm_status_t add_slab(egm_mirror_t *m, const egm_jop_t *op, uint64_t now_ms)
{
    /* A safety net only: every slab's end is journaled. */
    if (egm__hashmap_size(m->slabs) >= 2 * m->slabs_pruned_at + 64 && now_ms > SLAB_KEPT_MS)
        slabs_drop(m, now_ms - SLAB_KEPT_MS);
    mslab_t *s = egm_calloc(1, sizeof(*s), "master.mirror_slab");
    if (s == NULL)
        return no_memory();
    *s = (mslab_t){.id = op->slab_id,
                   .owner = op->writer,
                   .size = op->size,
                   .until_ms = now_ms + op->for_ms,
                   .n = op->n_replicas,
                   .logged = op->logged,
                   .seen = {.prefix = op->prefix}};
    memcpy(s->segment, op->replica_segment, sizeof(s->segment));
    memcpy(s->base, op->replica_offset, sizeof(s->base));
    for (uint32_t i = 0; i < op->n_extra; i++)
        if (egm__seq_set_add(&s->seen, egm__wire_get_u64(op->extra + 8u * i)) != EGM_OK) {
            mslab_free(s);
            return no_memory();
        }
    void *old = NULL;
    if (egm__hashmap_put(m->slabs, &s->id, sizeof(s->id), s, &old) != EGM_OK) {
        mslab_free(s);
        return no_memory();
    }
    if (old != NULL)
        mslab_free(old);
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
    case EGM_JOP_SLAB:
        return add_slab(m, op, now_ms);
    case EGM_JOP_SLAB_SEEN: {
        mslab_t *slab = egm__hashmap_get(m->slabs, &op->slab_id, sizeof(op->slab_id));
        return slab == NULL ? EGM_OK : egm__seq_set_add(&slab->seen, op->seq);
    }
    case EGM_JOP_SLAB_GONE: {
        mslab_t *slab = egm__hashmap_remove(m->slabs, &op->slab_id, sizeof(op->slab_id));
        if (slab != NULL)
            mslab_free(slab);
        return EGM_OK;
    }
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
                                    .slabs = egm__hashmap_size(m->slabs),
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

/* ---- objects the slab logs describe ----------------------------------------- */

#define LOG_CHUNK 64 /* entries read at once */

/* A removal entry found in a slab log (common/slab_log.h), its key owned:
 * the object removed had a replica at offset of segment, and was put with
 * entry put_seq of slab put_slab_id (0: none); next: the next removal of the
 * same key (an index into found_t.rm, SIZE_MAX: none). */
typedef struct {
    char *key;
    size_t key_len;
    egm_id_t segment;
    uint64_t offset;
    uint64_t put_slab_id, put_seq;
    size_t next;
} removal_t;

/* Where a found object's entry was: its slab and seq. */
typedef struct {
    const mslab_t *slab;
    uint64_t seq;
} found_at_t;

/* What slab logs say that this standby had not confirmed: objects (their
 * keys owned; where each lies in at[]) and removals. */
typedef struct {
    egm_adopt_object_t *v;
    found_at_t *at;
    size_t n, cap;
    removal_t *rm;
    size_t n_rm, cap_rm;
    egm_hashmap_t *keys;    /* the objects' keys, for duplicates (found_settle) */
    egm_hashmap_t *rm_keys; /* key -> 1 + the index of its last removal in rm */
    size_t dropped;         /* objects of the mirror the removals took */
} found_t;

static void found_free(found_t *f)
{
    for (size_t i = 0; i < f->n; i++)
        egm_free((void *)f->v[i].key);
    egm_free(f->v);
    egm_free(f->at);
    for (size_t i = 0; i < f->n_rm; i++)
        egm_free(f->rm[i].key);
    egm_free(f->rm);
    egm__hashmap_destroy(f->keys);
    egm__hashmap_destroy(f->rm_keys);
}

/* A key of an entry, its len bytes whole (egm_strndup would stop at a NUL
 * byte that a hostile entry's key may hold, while len says more). */
static char *key_copy(const char *key, size_t len)
{
    char *copy = egm_malloc(len + 1, "master.mirror_found");
    if (copy != NULL) {
        memcpy(copy, key, len);
        copy[len] = '\0';
    }
    return copy;
}

/* A removal entry, kept for found_settle. */
static egm_status_t removal_add(const egm_slab_log_entry_t *e, found_t *f)
{
    if (f->n_rm == f->cap_rm) {
        size_t cap = f->cap_rm < 16 ? 16 : 2 * f->cap_rm;
        removal_t *v = egm_realloc(f->rm, cap * sizeof(*v), "master.mirror_found");
        if (v == NULL)
            return no_memory();
        f->rm = v;
        f->cap_rm = cap;
    }
    if (f->rm_keys == NULL && egm__hashmap_create(&f->rm_keys) != EGM_OK)
        return no_memory();
    char *key = key_copy(e->key, e->key_len);
    void *last = NULL;
    if (key == NULL || egm__hashmap_put(f->rm_keys, e->key, e->key_len,
                                        (void *)(uintptr_t)(f->n_rm + 1), &last) != EGM_OK) {
        egm_free(key);
        return no_memory();
    }
    f->rm[f->n_rm++] = (removal_t){.key = key,
                                   .key_len = e->key_len,
                                   .segment = e->segment,
                                   .offset = e->offset,
                                   .put_slab_id = e->put_slab_id,
                                   .put_seq = e->put_seq,
                                   .next = last != NULL ? (size_t)(uintptr_t)last - 1 : SIZE_MAX};
    return EGM_OK;
}

/* The descriptor of a kept segment. */
static int segment_desc(egm_mirror_t *m, egm_id_t id, egm_segment_desc_t *desc)
{
    uint8_t key[16];
    egm__wire_put_id(key, id);
    const record_t *r = egm__hashmap_get(m->segments, key, sizeof(key));
    egm_jop_t op;
    if (r == NULL)
        return 0;
    record_op(r, &op);
    return egm__segment_desc_decode(op.desc, op.desc_len, desc) == EGM_OK;
}

/* One entry that decoded, unless known (seen), void or misplaced: a
 * removal, or an object that found_settle may adopt. */
static egm_status_t found_add(const mslab_t *s, egm_segment_table_t *segments,
                              const egm_slab_log_entry_t *e, found_t *f)
{
    uint64_t log_at = egm__slab_log_at(s->size, e->seq);
    if (egm__seq_set_has(&s->seen, e->seq) || e->kind == EGM_SLAB_LOG_VOID)
        return EGM_OK;
    if (e->kind == EGM_SLAB_LOG_REMOVE)
        return removal_add(e, f);
    if (e->offset % EGM_OBJECT_ALIGN != 0 || e->offset > log_at || e->size > log_at - e->offset)
        return EGM_OK;
    if (f->n == f->cap) {
        size_t cap = f->cap < 64 ? 64 : 2 * f->cap;
        egm_adopt_object_t *v = egm_realloc(f->v, cap * sizeof(*v), "master.mirror_found");
        found_at_t *at =
            v == NULL ? NULL : egm_realloc(f->at, cap * sizeof(*at), "master.mirror_found");
        if (v != NULL)
            f->v = v;
        if (at == NULL)
            return no_memory();
        f->at = at;
        f->cap = cap;
    }
    char *key = key_copy(e->key, e->key_len);
    if (key == NULL)
        return no_memory();
    f->at[f->n] = (found_at_t){.slab = s, .seq = e->seq};
    egm_adopt_object_t *a = &f->v[f->n++];
    *a = (egm_adopt_object_t){.key = key,
                              .key_len = e->key_len,
                              .size = e->size,
                              .writer = s->owner,
                              .soft_pin = e->soft_pin && !e->hard_pin,
                              .hard_pin = e->hard_pin,
                              .placed = (uint8_t)s->n,
                              .n_replicas = s->n};
    for (uint32_t i = 0; i < s->n; i++) {
        a->segment[i] = egm__segment_table_find(segments, s->segment[i]);
        a->offset[i] = s->base[i] + e->offset;
    }
    return EGM_OK;
}

/* Reads entries first.. of slab s from one of its extents, LOG_CHUNK at a
 * time, up to the first that does not decode; *next_p: the first not read
 * (a read that failed stops there). */
static egm_status_t read_log(const mslab_t *s, egm_segment_table_t *segments,
                             const egm_pool_reader_t *reader, const egm_segment_desc_t *desc,
                             uint64_t base, uint64_t first, uint8_t *buf, found_t *f,
                             uint64_t *next_p, int *end_p)
{
    uint64_t last = s->size / EGM_SLAB_LOG_ENTRY, seq = first;
    *end_p = 0;
    while (seq <= last) {
        uint64_t k = last - seq + 1 < LOG_CHUNK ? last - seq + 1 : LOG_CHUNK;
        /* entries seq..seq+k-1 lie from the end down: the last of them first */
        uint64_t at = egm__slab_log_at(s->size, seq + k - 1);
        if (reader->fn(reader->arg, desc, base + at, buf, (size_t)k * EGM_SLAB_LOG_ENTRY) != EGM_OK)
            break;
        for (uint64_t i = 0; i < k; i++, seq++) {
            egm_slab_log_entry_t e;
            if (!egm__slab_log_decode(buf + (k - 1 - i) * EGM_SLAB_LOG_ENTRY, s->id, seq, &e)) {
                *next_p = seq;
                *end_p = 1;
                return EGM_OK;
            }
            egm_status_t st = found_add(s, segments, &e, f);
            if (st != EGM_OK)
                return st;
        }
    }
    *next_p = seq;
    *end_p = seq > last;
    return EGM_OK;
}

#define LOG_FAILED_MAX 64

static int owner_in(const egm_id_t *ids, size_t n, egm_id_t owner)
{
    for (size_t i = 0; i < n; i++)
        if (egm__id_equal(ids[i], owner))
            return 1;
    return 0;
}

/* Every open slab's log past what is known, into f. */
static egm_status_t read_logs(egm_mirror_t *m, egm_segment_table_t *segments,
                              const egm_pool_reader_t *reader, found_t *f, size_t *slabs_p)
{
    uint8_t *buf = egm_malloc(LOG_CHUNK * EGM_SLAB_LOG_ENTRY, "master.mirror_log");
    if (buf == NULL)
        return no_memory();
    egm_status_t status = EGM_OK;
    size_t iter = 0, n_failed = 0;
    void *value;
    /* Providers a read failed on (gone, or cut off): not asked again, so
     * that one that does not answer costs the takeover one timeout. */
    egm_id_t failed[LOG_FAILED_MAX];
    *slabs_p = 0;
    while (status == EGM_OK && egm__hashmap_next(m->slabs, &iter, NULL, NULL, &value)) {
        const mslab_t *s = value;
        /* Read even past its lease: every slab that ends is journaled
         * (SLAB_GONE) before its space can be handed out again (a grant
         * waits for the standbys), so one still kept was not reused. */
        if (!s->logged && s->seen.prefix == 0 && s->seen.n == 0)
            continue; /* no log kept: nothing committed without this standby */
        uint64_t seq = s->seen.prefix + 1;
        int end = 0;
        for (uint32_t x = 0; x < s->n && !end && status == EGM_OK; x++) {
            egm_segment_desc_t desc;
            if (egm__segment_table_find(segments, s->segment[x]) == NULL ||
                !segment_desc(m, s->segment[x], &desc) || owner_in(failed, n_failed, desc.owner))
                continue;
            status = read_log(s, segments, reader, &desc, s->base[x], seq, buf, f, &seq, &end);
            if (status == EGM_OK && !end && n_failed < LOG_FAILED_MAX)
                failed[n_failed++] = desc.owner;
        }
        if (!end)
            egm_warn("standby: slab %llu: its log could not be read past entry %llu from any "
                     "extent: objects committed in it after that may be lost",
                     (unsigned long long)s->id, (unsigned long long)seq);
        (*slabs_p)++;
    }
    egm_free(buf);
    return status;
}

/* Whether the mirror's object (op) has a replica where removal x says. */
static int object_named(const egm_jop_t *op, const removal_t *x)
{
    for (uint32_t i = 0; i < op->n_replicas; i++)
        if (egm__id_equal(op->replica_segment[i], x->segment) && op->replica_offset[i] == x->offset)
            return 1;
    return 0;
}

/* Whether a removal names found object k: its key and its entry. (Not its
 * place alone: a removal whose Remove found another object, or none, names a
 * place that a later put may take again.) */
static int removed(const found_t *f, size_t k)
{
    const egm_adopt_object_t *a = &f->v[k];
    void *last = egm__hashmap_get(f->rm_keys, a->key, a->key_len);
    for (size_t r = last != NULL ? (size_t)(uintptr_t)last - 1 : SIZE_MAX; r != SIZE_MAX;
         r = f->rm[r].next)
        if (f->rm[r].put_slab_id == f->at[k].slab->id && f->rm[r].put_seq == f->at[k].seq)
            return 1;
    return 0;
}

/* Applies what the logs say (docs/ha.md "Removes the pool describes"): each
 * removal drops the mirror's object of its key that has a replica where it
 * says (a later object of the key there reached the mirror after the
 * removal's seen op, and a new leader skips a removal seen); then an object
 * found is kept unless a removal names its entry, the mirror holds its key,
 * or another entry gave it first. */
static egm_status_t found_settle(egm_mirror_t *m, found_t *f)
{
    for (size_t r = 0; r < f->n_rm; r++) {
        const removal_t *x = &f->rm[r];
        const record_t *rec = egm__hashmap_get(m->objects, x->key, x->key_len);
        egm_jop_t op;
        if (rec == NULL)
            continue;
        record_op(rec, &op);
        if (object_named(&op, x)) {
            drop(m->objects, x->key, x->key_len);
            f->dropped++;
        }
    }
    size_t kept = 0;
    for (size_t k = 0; k < f->n; k++) {
        egm_adopt_object_t *a = &f->v[k];
        if ((f->n_rm > 0 && removed(f, k)) ||
            egm__hashmap_get(m->objects, a->key, a->key_len) != NULL ||
            egm__hashmap_get(f->keys, a->key, a->key_len) != NULL) {
            egm_free((void *)a->key);
            continue;
        }
        if (egm__hashmap_put(f->keys, a->key, a->key_len, (void *)a->key, NULL) != EGM_OK) {
            for (size_t j = k; j < f->n; j++)
                egm_free((void *)f->v[j].key);
            f->n = kept;
            return no_memory();
        }
        f->at[kept] = f->at[k];
        f->v[kept++] = *a;
    }
    f->n = kept;
    return EGM_OK;
}

egm_status_t egm__mirror_install(egm_mirror_t *m, egm_liveness_t *liveness,
                                 egm_segment_table_t *segments, egm_object_index_t *objects,
                                 const egm_pool_reader_t *reader, uint64_t now_ms,
                                 size_t *objects_p, size_t *skipped_p, size_t *recovered_p,
                                 size_t *removed_p)
{
    *objects_p = *skipped_p = *recovered_p = *removed_p = 0;
    found_t found = {0};
    pthread_mutex_lock(&m->lock);
    mount_segments(m, liveness, now_ms);
    size_t n = 0, k = 0, iter = 0, slabs = 0;
    egm_adopt_range_t *ranges =
        egm_calloc(m->n_ranges ? m->n_ranges : 1, sizeof(*ranges), "master.mirror_install");
    egm_adopt_object_t *objs = NULL;
    egm_status_t status = egm__hashmap_create(&found.keys);
    if (status == EGM_OK && reader != NULL && reader->fn != NULL)
        status = read_logs(m, segments, reader, &found, &slabs);
    if (status == EGM_OK)
        status = found_settle(m, &found);
    n = egm__hashmap_size(m->objects); /* once the removals took theirs */
    if (status == EGM_OK)
        objs = egm_calloc(n + found.n ? n + found.n : 1, sizeof(*objs), "master.mirror_install");
    if (status != EGM_OK || objs == NULL || ranges == NULL) {
        status = status != EGM_OK ? status
                                  : egm__set_error(EGM_ERR_NO_MEMORY,
                                                   "out of memory taking over %zu objects", n);
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
    if (found.n > 0) {
        memcpy(objs + k, found.v, found.n * sizeof(*objs));
        k += found.n;
        egm_info("standby: %zu objects committed without this standby's confirmation found in "
                 "the logs of %zu slabs",
                 found.n, slabs);
    }
    if (found.n_rm > 0)
        egm_info("standby: %zu removals made without this standby's confirmation found in the "
                 "slab logs: %zu of its objects dropped",
                 found.n_rm, found.dropped);
    size_t n_ranges = 0;
    for (size_t i = 0; i < m->n_ranges; i++)
        if (m->ranges[i].until_ms > now_ms)
            ranges[n_ranges++] = (egm_adopt_range_t){
                .segment = egm__segment_table_find(segments, m->ranges[i].segment),
                .offset = m->ranges[i].offset,
                .length = m->ranges[i].length,
                .until_ms = m->ranges[i].until_ms};
    status = egm__objects_adopt(objects, objs, k, ranges, n_ranges, now_ms, objects_p, skipped_p);
    *recovered_p = found.n;
    *removed_p = found.dropped;
out:
    found_free(&found);
    egm_free(objs);
    egm_free(ranges);
    clear(m);
    pthread_mutex_unlock(&m->lock);
    return status;
}
