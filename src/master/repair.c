/* Re-replication, the master's side: the queue of under-replicated objects,
 * the choice of a provider for a new replica, and the RepairGrant and
 * RepairCommit handlers (repair.h; docs/rereplication.md). */
#include "master/repair.h"

#include <pthread.h>
#include <string.h>
#include "common/alloc.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "master/master_int.h"
#include "rpc/proto_util.h"

#define GRANT_MAX_KEYS 1024   /* tasks in one RepairGrant */
#define GRANT_DEFAULT_KEYS 64 /* max_keys 0 */
#define FAILED_RETRY_MS 1000u /* a task whose copy failed waits this long before another try */
/* Keys one grant visits beyond those it grants: a queue of objects no other
 * provider can take (one provider left) costs each ask this much, not the
 * whole queue. */
#define GRANT_EXTRA_VISITS 256

typedef struct entry {
    struct entry *prev, *next;
    uint64_t busy_until_ms; /* granted: not handed out again before (the lease's end) */
    /* First time it waited for a reader's lease to end (0: not waiting): after
     * one lease TTL of that it is repaired over the readers' leases. */
    uint64_t readers_since_ms;
    size_t len;
    char key[]; /* len bytes and a NUL */
} entry_t;

struct egm_repair_queue {
    pthread_mutex_t lock;
    egm_hashmap_t *by_key; /* key -> entry_t */
    entry_t *head, *tail;  /* visiting order: the next to try first */
    egm_repair_stats_t stats;
};

egm_status_t egm__repair_queue_create(egm_repair_queue_t **queue_p)
{
    egm_repair_queue_t *q = egm_calloc(1, sizeof(*q), "master.repair");
    if (q == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory for the repair queue");
    egm_status_t status = egm__hashmap_create(&q->by_key);
    if (status != EGM_OK) {
        egm_free(q);
        return status;
    }
    pthread_mutex_init(&q->lock, NULL);
    *queue_p = q;
    return EGM_OK;
}

void egm__repair_queue_destroy(egm_repair_queue_t *q)
{
    if (q == NULL)
        return;
    for (entry_t *e = q->head; e != NULL;) {
        entry_t *next = e->next;
        egm_free(e);
        e = next;
    }
    egm__hashmap_destroy(q->by_key);
    pthread_mutex_destroy(&q->lock);
    egm_free(q);
}

static void unlink_entry(egm_repair_queue_t *q, entry_t *e)
{
    if (e->prev != NULL)
        e->prev->next = e->next;
    else
        q->head = e->next;
    if (e->next != NULL)
        e->next->prev = e->prev;
    else
        q->tail = e->prev;
    e->prev = e->next = NULL;
}

static void append_entry(egm_repair_queue_t *q, entry_t *e)
{
    e->prev = q->tail;
    e->next = NULL;
    if (q->tail != NULL)
        q->tail->next = e;
    else
        q->head = e;
    q->tail = e;
}

static void remove_entry(egm_repair_queue_t *q, entry_t *e)
{
    unlink_entry(q, e);
    egm__hashmap_remove(q->by_key, e->key, e->len);
    egm_free(e);
}

/* With q->lock held. */
static entry_t *add_locked(egm_repair_queue_t *q, const char *key, size_t key_len)
{
    entry_t *e = egm__hashmap_get(q->by_key, key, key_len);
    if (e != NULL)
        return e;
    e = egm_malloc(sizeof(*e) + key_len + 1, "master.repair");
    if (e == NULL) {
        egm_error("re-replication: out of memory queueing an object that lost a replica");
        return NULL;
    }
    e->busy_until_ms = 0;
    e->len = key_len;
    memcpy(e->key, key, key_len);
    e->key[key_len] = '\0';
    if (egm__hashmap_put(q->by_key, e->key, key_len, e, NULL) != EGM_OK) {
        egm_error("re-replication: out of memory queueing an object that lost a replica");
        egm_free(e);
        return NULL;
    }
    append_entry(q, e);
    return e;
}

void egm__repair_queue_add(egm_repair_queue_t *q, const char *key, size_t key_len)
{
    pthread_mutex_lock(&q->lock);
    add_locked(q, key, key_len);
    pthread_mutex_unlock(&q->lock);
}

void egm__repair_queue_stats(egm_repair_queue_t *q, egm_repair_stats_t *stats_p)
{
    pthread_mutex_lock(&q->lock);
    *stats_p = q->stats;
    stats_p->under_replicated = egm__hashmap_size(q->by_key);
    pthread_mutex_unlock(&q->lock);
}

int egm__repair_target_ok(const egm_segment_t *candidate, egm_segment_t *const *holders,
                          size_t n_holders)
{
    for (size_t i = 0; i < n_holders; i++)
        if (holders[i] == candidate || egm__id_equal(holders[i]->desc.owner, candidate->desc.owner))
            return 0;
    return 1;
}

egm_status_t egm__repair_grant(egm_object_index_t *index, size_t max_keys, uint64_t max_bytes,
                               uint64_t now_ms, char **keys, egm_repair_task_t *tasks, size_t *n_p)
{
    egm_repair_queue_t *q = egm__objects_repair_queue(index);
    size_t n = 0;
    uint64_t bytes = 0;
    egm_status_t status = EGM_OK;

    pthread_mutex_lock(&q->lock);
    size_t visits = egm__hashmap_size(q->by_key);
    if (visits > max_keys + GRANT_EXTRA_VISITS)
        visits = max_keys + GRANT_EXTRA_VISITS;
    for (size_t v = 0; v < visits && n < max_keys && (max_bytes == 0 || bytes < max_bytes); v++) {
        entry_t *e = q->head;
        unlink_entry(q, e);
        append_entry(q, e); /* visited: to the back */
        if (e->busy_until_ms > now_ms)
            continue;
        int over_readers = e->readers_since_ms != 0 &&
                           now_ms - e->readers_since_ms >= egm__objects_lease_ttl_ms(index);
        egm_status_t s =
            egm__objects_repair_start(index, e->key, e->len, now_ms, over_readers, &tasks[n]);
        if (s == EGM_ERR_BUSY && e->readers_since_ms == 0)
            e->readers_since_ms = now_ms;
        if (s != EGM_ERR_BUSY)
            e->readers_since_ms = 0;
        if (s == EGM_OK) {
            keys[n] = egm_malloc(e->len + 1, "master.repair");
            if (keys[n] == NULL) {
                /* The task's extent returns when its lease ends. */
                status = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory granting repairs");
                break;
            }
            memcpy(keys[n], e->key, e->len + 1);
            e->busy_until_ms = now_ms + egm__objects_lease_ttl_ms(index);
            bytes += tasks[n].size;
            n++;
        } else if (s == EGM_ERR_NOT_FOUND || s == EGM_ERR_EXISTS || s == EGM_ERR_INVALID_KEY) {
            remove_entry(q, e); /* gone, or whole again */
        }
        /* else NOT_READY (being put), NO_SPACE (no distinct provider with
         * room), BUSY (a reader's lease: waited for, one lease TTL at most),
         * NO_MEMORY: tried again at a later visit */
    }
    q->stats.granted_total += n;
    pthread_mutex_unlock(&q->lock);
    *n_p = n;
    return status;
}

egm_status_t egm__repair_commit(egm_object_index_t *index, const char *key, size_t key_len,
                                const egm_repair_task_t *task, int copied, uint64_t now_ms)
{
    egm_repair_queue_t *q = egm__objects_repair_queue(index);
    int still_under = 0;

    pthread_mutex_lock(&q->lock);
    egm_status_t s =
        egm__objects_repair_end(index, key, key_len, task, copied, now_ms, &still_under);
    entry_t *e = egm__hashmap_get(q->by_key, key, key_len);
    if (s == EGM_OK) {
        q->stats.repaired_total++;
        q->stats.repaired_bytes_total += task->size;
    } else if (!copied) {
        q->stats.failed_total++;
    } else {
        q->stats.discarded_total++;
    }
    if (!still_under) {
        if (e != NULL) {
            remove_entry(q, e);
            if (q->head == NULL)
                egm_info("re-replication: every object that lost a replica has its count again "
                         "(%llu replicas added, %llu bytes, since start)",
                         (unsigned long long)q->stats.repaired_total,
                         (unsigned long long)q->stats.repaired_bytes_total);
        }
    } else {
        if (e == NULL)
            e = add_locked(q, key, key_len);
        if (e != NULL) /* again at once after a commit; a failed copy waits a little */
            e->busy_until_ms = s == EGM_OK || copied ? 0 : now_ms + FAILED_RETRY_MS;
    }
    pthread_mutex_unlock(&q->lock);
    return s;
}

/* ---- RPC handlers ----------------------------------------------------------- */

static void replica_pb(const egm_segment_t *seg, uint64_t offset, uint64_t length, Egm__Replica *r,
                       Egm__Id *id)
{
    egm__id_to_pb(seg->desc.id, id);
    r->segment = id;
    r->offset = offset;
    r->length = length;
}

egm_status_t egm__master_handle_repair_grant(egm_master_state_t *st, egm_master_call_t *call)
{
    const Egm__RepairGrantRequest *req = (const Egm__RepairGrantRequest *)call->request;
    Egm__RepairGrantReply msg = EGM__REPAIR_GRANT_REPLY__INIT;
    size_t max_keys = req->max_keys == 0 ? GRANT_DEFAULT_KEYS : req->max_keys;
    char **keys = NULL;
    egm_repair_task_t *tasks = NULL;
    Egm__RepairTask *tpb = NULL, **tptrs = NULL;
    Egm__Replica *reps = NULL;
    Egm__Id *ids = NULL;
    Egm__SegmentDesc *descs = NULL, **dptrs = NULL;
    const egm_segment_t **segs = NULL;
    size_t n = 0, n_segs = 0;
    egm_status_t status;

    if (egm__id_is_nil(egm__id_from_pb(req->client)))
        return egm__set_error(EGM_ERR_INVALID_ARG, "client: must not be nil");
    if (max_keys > GRANT_MAX_KEYS)
        max_keys = GRANT_MAX_KEYS;
    keys = egm_calloc(max_keys, sizeof(*keys), "master.repair");
    tasks = egm_calloc(max_keys, sizeof(*tasks), "master.repair");
    if (keys == NULL || tasks == NULL) {
        status = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory granting repairs");
        goto out;
    }
    status =
        egm__repair_grant(st->objects, max_keys, req->max_bytes, st->now_ms(), keys, tasks, &n);
    if (status != EGM_OK)
        goto out;
    if (n > 0) {
        tpb = egm_calloc(n, sizeof(*tpb), "master.reply");
        tptrs = egm_calloc(n, sizeof(*tptrs), "master.reply");
        reps = egm_calloc(2 * n, sizeof(*reps), "master.reply");
        /* 2 per task's replicas, then 2 per segment described (id, owner) */
        ids = egm_calloc(6 * n, sizeof(*ids), "master.reply");
        descs = egm_calloc(2 * n, sizeof(*descs), "master.reply");
        dptrs = egm_calloc(2 * n, sizeof(*dptrs), "master.reply");
        segs = egm_calloc(2 * n, sizeof(*segs), "master.reply");
        if (tpb == NULL || tptrs == NULL || reps == NULL || ids == NULL || descs == NULL ||
            dptrs == NULL || segs == NULL) {
            status = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory answering RepairGrant");
            goto out;
        }
    }
    for (size_t i = 0; i < n; i++) {
        const egm_repair_task_t *t = &tasks[i];
        egm__repair_task__init(&tpb[i]);
        egm__replica__init(&reps[2 * i]);
        egm__replica__init(&reps[2 * i + 1]);
        replica_pb(t->source, t->source_offset, t->size, &reps[2 * i], &ids[2 * i]);
        replica_pb(t->target, t->target_offset, t->size, &reps[2 * i + 1], &ids[2 * i + 1]);
        tpb[i].key = keys[i];
        tpb[i].size = t->size;
        tpb[i].source = &reps[2 * i];
        tpb[i].target = &reps[2 * i + 1];
        tptrs[i] = &tpb[i];
        const egm_segment_t *both[2] = {t->source, t->target};
        for (int k = 0; k < 2; k++) {
            size_t j = 0;
            while (j < n_segs && segs[j] != both[k])
                j++;
            if (j < n_segs)
                continue;
            segs[n_segs] = both[k];
            egm__segment_desc_to_pb(&both[k]->desc, &descs[n_segs], &ids[2 * n + 2 * n_segs],
                                    &ids[2 * n + 2 * n_segs + 1]);
            dptrs[n_segs] = &descs[n_segs];
            n_segs++;
        }
    }
    msg.status = EGM_OK;
    msg.n_tasks = n;
    msg.tasks = tptrs;
    msg.n_segments = n_segs;
    msg.segments = dptrs;
    msg.lease_ms = egm__objects_lease_ttl_ms(st->objects);
    status = egm__pb_pack(&msg.base, &call->reply->buf, &call->reply->len);
    if (n > 0)
        egm_debug("re-replication: granted %zu repairs", n);
out:
    for (size_t i = 0; keys != NULL && i < n; i++)
        egm_free(keys[i]);
    egm_free(keys);
    egm_free(tasks);
    egm_free(tpb);
    egm_free(tptrs);
    egm_free(reps);
    egm_free(ids);
    egm_free(descs);
    egm_free(dptrs);
    egm_free(segs);
    return status;
}

/* A replica of the request as a segment of the table (NULL: not mounted) and an offset. */
static egm_status_t task_replica(egm_master_state_t *st, const Egm__Replica *r, size_t i,
                                 const char *what, egm_segment_t **seg_p, uint64_t *offset_p)
{
    if (r == NULL || r->segment == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "tasks[%zu].%s: missing", i, what);
    *seg_p = egm__segment_table_find(st->segments, egm__id_from_pb(r->segment));
    *offset_p = r->offset;
    return EGM_OK;
}

egm_status_t egm__master_handle_repair_commit(egm_master_state_t *st, egm_master_call_t *call)
{
    const Egm__RepairCommitRequest *req = (const Egm__RepairCommitRequest *)call->request;
    Egm__RepairCommitReply msg = EGM__REPAIR_COMMIT_REPLY__INIT;
    int32_t *results = NULL;
    egm_status_t status;

    if (egm__id_is_nil(egm__id_from_pb(req->client)))
        return egm__set_error(EGM_ERR_INVALID_ARG, "client: must not be nil");
    if (req->n_tasks > GRANT_MAX_KEYS)
        return egm__set_error(EGM_ERR_INVALID_ARG, "tasks: %zu, at most %d", req->n_tasks,
                              GRANT_MAX_KEYS);
    if (req->n_copied != req->n_tasks)
        return egm__set_error(EGM_ERR_INVALID_ARG, "copied: %zu values for %zu tasks",
                              req->n_copied, req->n_tasks);
    /* Every task is checked before any is committed: a malformed request
     * changes nothing. */
    for (size_t i = 0; i < req->n_tasks; i++) {
        const Egm__RepairTask *t = req->tasks[i];
        if (t == NULL || t->source == NULL || t->source->segment == NULL || t->target == NULL ||
            t->target->segment == NULL)
            return egm__set_error(EGM_ERR_INVALID_ARG, "tasks[%zu]: source and target required", i);
    }
    if (req->n_tasks > 0) {
        results = egm_calloc(req->n_tasks, sizeof(*results), "master.reply");
        if (results == NULL)
            return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory answering RepairCommit");
    }
    uint64_t now = st->now_ms();
    for (size_t i = 0; i < req->n_tasks; i++) {
        const Egm__RepairTask *t = req->tasks[i];
        egm_repair_task_t task = {.size = t->size};
        task_replica(st, t->source, i, "source", &task.source, &task.source_offset);
        task_replica(st, t->target, i, "target", &task.target, &task.target_offset);
        size_t klen = t->key != NULL ? strnlen(t->key, EGM_MASTER_KEY_MAX + 1) : 0;
        results[i] = egm__repair_commit(st->objects, t->key != NULL ? t->key : "", klen, &task,
                                        req->copied[i], now);
    }
    msg.status = EGM_OK;
    msg.n_results = req->n_tasks;
    msg.results = results;
    status = egm__pb_pack(&msg.base, &call->reply->buf, &call->reply->len);
    egm_free(results);
    return status;
}
