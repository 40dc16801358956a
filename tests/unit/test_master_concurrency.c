/* The master's handlers driven from several threads at once, as its RPC
 * threads do: 8 threads with mixed PutStart / PutEnd / PutRevoke /
 * SlabGrant / Commit / GetReplicaList / ExistKey / Remove / StatKey / Ping
 * on overlapping keys,
 * and one thread mounting and unmounting segments, ticking (expiry, sweep,
 * eviction above the watermark), listing and removing all. Every reply is
 * checked as it comes (only the statuses a racing caller may see; replicas
 * inside segments the reply describes); afterwards the index is checked
 * whole (egm__objects_check: replicas on mounted segments, allocator bytes
 * equal to the live replicas, lists and counters agree), the key counts of
 * the stats, ListSegments and a key-by-key StatKey agree, and the request
 * metrics counted every call. Nothing depends on timing: the interleaving
 * varies from run to run, the checks hold for every one (run it under TSan:
 * make test-tsan). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "common/log.h"
#include "master/master_int.h"
#include "master/repair.h"
#include "master/metrics.h"
#include "rpc/frame.h"
#include "rpc/proto_util.h"

#define WORKERS 8
#define ROUNDS 4000     /* calls per worker */
#define CHURN_ROUNDS 64 /* mount / tick / unmount rounds, at least: more until the workers end */
#define KEYS 64         /* shared key space: k0 .. k63 */
#define SEG_SIZE (1u << 20)
#define FIXED_SEGMENTS 3 /* mounted for the whole test */

static egm_master_state_t st;
static pthread_rwlock_t state_lock;
static egm_master_metrics_t metrics;
static uint64_t fake_now; /* atomic: the churn thread moves it */
static uint64_t live_at_start;
static egm_id_t provider, churn_provider;
static pthread_barrier_t start; /* every thread begins together */
static int workers_left;        /* atomic */

static uint64_t clock_ms(void)
{
    return __atomic_load_n(&fake_now, __ATOMIC_RELAXED);
}

/* A worker's first problem, reported by the main thread (cmocka asserts only
 * there). */
typedef struct {
    int id;
    egm_id_t client;
    uint64_t rng;
    uint64_t slab_id; /* the worker's open slab (0: none), its size, its next offset */
    uint64_t slab_size;
    uint64_t slab_next;
    uint64_t calls[EGM_RPC_TYPE_MAX + 1];
    uint64_t ok[EGM_RPC_TYPE_MAX + 1];
    char error[256];
} worker_t;

#define FAIL(w, ...)                                                                               \
    do {                                                                                           \
        if ((w)->error[0] == '\0')                                                                 \
            snprintf((w)->error, sizeof((w)->error), __VA_ARGS__);                                 \
        return -1;                                                                                 \
    } while (0)

static uint64_t next_random(worker_t *w)
{
    uint64_t x = w->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    w->rng = x;
    return x;
}

/* Packs req, calls the handler as an RPC thread does, unpacks the reply. */
static int call(worker_t *w, uint16_t type, const ProtobufCMessage *req,
                const ProtobufCMessageDescriptor *desc, ProtobufCMessage **reply_p)
{
    uint8_t *buf;
    size_t len;
    egm_rpc_reply_t reply = {0};

    *reply_p = NULL;
    if (egm__pb_pack(req, &buf, &len) != EGM_OK)
        FAIL(w, "packing a %s request", egm__rpc_type_name(type));
    egm_status_t status = egm__master_handle(&st, type, buf, len, &reply);
    egm_free(buf);
    w->calls[type]++;
    if (status != EGM_OK)
        FAIL(w, "%s answered %d: %s", egm__rpc_type_name(type), status, egm_last_error());
    status = egm__pb_unpack(desc, reply.buf, reply.len, reply_p);
    egm_free(reply.buf);
    if (status != EGM_OK)
        FAIL(w, "%s reply does not decode", egm__rpc_type_name(type));
    return 0;
}

static int allowed(egm_status_t s, const egm_status_t *set, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (s == set[i])
            return 1;
    return 0;
}

/* Each replica of an OK result lies in a segment the reply describes. */
static int check_keys_reply(worker_t *w, uint16_t type, const Egm__KeysReply *r, size_t n_keys,
                            const egm_status_t *ok_set, size_t n_ok, uint32_t max_replicas)
{
    if (r->status != EGM_OK || r->n_results != n_keys)
        FAIL(w, "%s: status %d, %zu results for %zu keys", egm__rpc_type_name(type), r->status,
             r->n_results, n_keys);
    for (size_t i = 0; i < r->n_results; i++) {
        const Egm__KeyResult *k = r->results[i];
        if (!allowed(k->status, ok_set, n_ok))
            FAIL(w, "%s: key %zu answered %d", egm__rpc_type_name(type), i, k->status);
        if (k->status == EGM_OK)
            w->ok[type]++;
        if (max_replicas == 0 || k->status != EGM_OK)
            continue;
        if (k->n_replicas == 0 || k->n_replicas > max_replicas)
            FAIL(w, "%s: key %zu has %zu replicas", egm__rpc_type_name(type), i, k->n_replicas);
        for (size_t j = 0; j < k->n_replicas; j++) {
            const Egm__Replica *rep = k->replicas[j];
            const Egm__SegmentDesc *d = NULL;
            for (size_t s = 0; s < r->n_segments && d == NULL; s++)
                if (egm__id_equal(egm__id_from_pb(r->segments[s]->id),
                                  egm__id_from_pb(rep->segment)))
                    d = r->segments[s];
            if (d == NULL)
                FAIL(w, "%s: key %zu names a segment the reply does not describe",
                     egm__rpc_type_name(type), i);
            if (rep->length != k->size || rep->offset + rep->length > d->size ||
                rep->offset % EGM_OBJECT_ALIGN != 0)
                FAIL(w, "%s: key %zu: replica [%llu, +%llu) of %llu bytes in a segment of %llu",
                     egm__rpc_type_name(type), i, (unsigned long long)rep->offset,
                     (unsigned long long)rep->length, (unsigned long long)k->size,
                     (unsigned long long)d->size);
        }
    }
    return 0;
}

static void key_name(char *buf, size_t size, uint64_t r)
{
    snprintf(buf, size, "k%u", (unsigned)(r % KEYS));
}

/* PutStart of 1..3 keys, then PutEnd of them, or PutRevoke (one time in 8),
 * or nothing (one in 16). */
static int do_put(worker_t *w, Egm__Id *client)
{
    static const egm_status_t start_ok[] = {EGM_OK, EGM_ERR_EXISTS, EGM_ERR_NO_SPACE};
    /* Another thread may have removed, discarded or taken over the key. */
    static const egm_status_t end_ok[] = {EGM_OK, EGM_ERR_NOT_FOUND, EGM_ERR_INVALID_ARG};
    char names[3][16];
    const char *keys[3];
    uint64_t sizes[3];
    size_t n = 1 + next_random(w) % 3;
    Egm__PutStartRequest req = EGM__PUT_START_REQUEST__INIT;
    Egm__ReplicateConfig cfg = EGM__REPLICATE_CONFIG__INIT;
    Egm__KeysReply *reply;

    for (size_t i = 0; i < n; i++) {
        key_name(names[i], sizeof(names[i]), next_random(w));
        keys[i] = names[i];
        sizes[i] = 1 + next_random(w) % (96 * 1024);
    }
    cfg.replica_num = 1 + (uint32_t)(next_random(w) % 2);
    cfg.with_soft_pin = next_random(w) % 4 == 0;
    req.client = client;
    req.n_keys = req.n_sizes = n;
    req.keys = (char **)keys;
    req.sizes = sizes;
    req.config = &cfg;
    if (call(w, EGM_RPC_PUT_START, &req.base, &egm__keys_reply__descriptor,
             (ProtobufCMessage **)&reply) != 0)
        return -1;
    int rc = check_keys_reply(w, EGM_RPC_PUT_START, reply, n, start_ok, 3, cfg.replica_num);
    egm__pb_free(&reply->base);
    if (rc != 0)
        return -1;

    uint64_t r = next_random(w) % 16;
    if (r == 0)
        return 0; /* abandoned: the tick discards it, or a later PutStart takes it over */
    Egm__KeysRequest end = EGM__KEYS_REQUEST__INIT;
    uint16_t type = r < 3 ? EGM_RPC_PUT_REVOKE : EGM_RPC_PUT_END;
    end.client = client;
    end.n_keys = n;
    end.keys = (char **)keys;
    if (call(w, type, &end.base, &egm__keys_reply__descriptor, (ProtobufCMessage **)&reply) != 0)
        return -1;
    rc = check_keys_reply(w, type, reply, n, end_ok, 3, 0);
    egm__pb_free(&reply->base);
    return rc;
}

/* A put placed by the client: a SlabGrant when the worker has no slab or it
 * is used up (returning the old one), then a Commit of 1..3 keys (a key now
 * and then twice) at the slab's next offsets. */
static int do_commit(worker_t *w, Egm__Id *client)
{
    static const egm_status_t grant_ok[] = {EGM_OK, EGM_ERR_NO_SPACE};
    /* The key exists; the slab went with an unmounted segment or its lease
     * ended (the churn thread moves the clock). */
    static const egm_status_t commit_ok[] = {EGM_OK, EGM_ERR_EXISTS, EGM_ERR_NOT_FOUND};
    char names[3][16];
    const char *keys[3];
    uint64_t sizes[3], ids[3], offsets[3], need = 0;
    size_t n = 1 + next_random(w) % 3;
    Egm__ReplicateConfig cfg = EGM__REPLICATE_CONFIG__INIT;
    Egm__KeysReply *reply;

    for (size_t i = 0; i < n; i++) {
        key_name(names[i], sizeof(names[i]), next_random(w));
        keys[i] = i > 0 && next_random(w) % 8 == 0 ? keys[0] : names[i];
        sizes[i] = 1 + next_random(w) % (8 * 1024);
        need += (sizes[i] + EGM_OBJECT_ALIGN - 1) & ~(uint64_t)(EGM_OBJECT_ALIGN - 1);
    }
    cfg.replica_num = 1 + (uint32_t)(next_random(w) % 2);
    cfg.with_soft_pin = next_random(w) % 4 == 0;
    if (w->slab_id == 0 || w->slab_next + need > w->slab_size) {
        Egm__SlabGrantRequest req = EGM__SLAB_GRANT_REQUEST__INIT;
        req.client = client;
        req.size = 64 * 1024;
        req.min_size = need;
        req.config = &cfg;
        if (w->slab_id != 0) {
            req.n_returned = 1;
            req.returned = &w->slab_id;
        }
        if (call(w, EGM_RPC_SLAB_GRANT, &req.base, &egm__keys_reply__descriptor,
                 (ProtobufCMessage **)&reply) != 0)
            return -1;
        w->slab_id = 0;
        int rc = check_keys_reply(w, EGM_RPC_SLAB_GRANT, reply, 1, grant_ok, 2, cfg.replica_num);
        if (rc == 0 && reply->results[0]->status == EGM_OK) {
            w->slab_id = reply->slab_id;
            w->slab_size = reply->results[0]->size;
            w->slab_next = 0;
        }
        egm__pb_free(&reply->base);
        if (rc != 0 || w->slab_id == 0)
            return rc;
    }
    for (size_t i = 0; i < n; i++) {
        ids[i] = w->slab_id;
        offsets[i] = w->slab_next;
        w->slab_next += (sizes[i] + EGM_OBJECT_ALIGN - 1) & ~(uint64_t)(EGM_OBJECT_ALIGN - 1);
    }
    Egm__CommitRequest req = EGM__COMMIT_REQUEST__INIT;
    req.client = client;
    req.n_keys = req.n_sizes = req.n_slab_ids = req.n_offsets = n;
    req.keys = (char **)keys;
    req.sizes = sizes;
    req.slab_ids = ids;
    req.offsets = offsets;
    req.config = &cfg;
    if (call(w, EGM_RPC_COMMIT, &req.base, &egm__keys_reply__descriptor,
             (ProtobufCMessage **)&reply) != 0)
        return -1;
    int rc = check_keys_reply(w, EGM_RPC_COMMIT, reply, n, commit_ok, 3, 0);
    egm__pb_free(&reply->base);
    return rc;
}

/* GetReplicaList, ExistKey or Remove of 1..4 keys. */
static int do_keys(worker_t *w, Egm__Id *client, uint16_t type)
{
    static const egm_status_t get_ok[] = {EGM_OK, EGM_ERR_NOT_FOUND, EGM_ERR_NOT_READY};
    static const egm_status_t exist_ok[] = {EGM_OK, EGM_ERR_NOT_FOUND};
    static const egm_status_t remove_ok[] = {EGM_OK, EGM_ERR_NOT_FOUND, EGM_ERR_NOT_READY,
                                             EGM_ERR_HAS_LEASE};
    char names[4][16];
    const char *keys[4];
    size_t n = 1 + next_random(w) % 4;
    Egm__KeysRequest req = EGM__KEYS_REQUEST__INIT;
    Egm__KeysReply *reply;

    for (size_t i = 0; i < n; i++) {
        key_name(names[i], sizeof(names[i]), next_random(w));
        keys[i] = names[i];
    }
    req.client = client;
    req.n_keys = n;
    req.keys = (char **)keys;
    req.force = type == EGM_RPC_REMOVE && next_random(w) % 2 == 0;
    if (call(w, type, &req.base, &egm__keys_reply__descriptor, (ProtobufCMessage **)&reply) != 0)
        return -1;
    int rc = type == EGM_RPC_GET_REPLICA_LIST
                 ? check_keys_reply(w, type, reply, n, get_ok, 3, EGM_MASTER_REPLICA_MAX)
             : type == EGM_RPC_EXIST_KEY ? check_keys_reply(w, type, reply, n, exist_ok, 2, 0)
                                         : check_keys_reply(w, type, reply, n, remove_ok, 4, 0);
    egm__pb_free(&reply->base);
    return rc;
}

static int do_stat(worker_t *w, Egm__Id *client)
{
    char name[16];
    Egm__StatKeyRequest req = EGM__STAT_KEY_REQUEST__INIT;
    Egm__StatKeyReply *reply;

    key_name(name, sizeof(name), next_random(w));
    req.client = client;
    req.key = name;
    if (call(w, EGM_RPC_STAT_KEY, &req.base, &egm__stat_key_reply__descriptor,
             (ProtobufCMessage **)&reply) != 0)
        return -1;
    int rc = 0;
    if (reply->status == EGM_OK) {
        w->ok[EGM_RPC_STAT_KEY]++;
        if (reply->n_replicas == 0)
            rc = -1, snprintf(w->error, sizeof(w->error), "StatKey %s: no replica", name);
    } else if (reply->status != EGM_ERR_NOT_FOUND) {
        rc = -1, snprintf(w->error, sizeof(w->error), "StatKey %s: %d", name, reply->status);
    }
    egm__pb_free(&reply->base);
    return rc;
}

static int do_ping(worker_t *w, Egm__Id *client)
{
    Egm__PingRequest req = EGM__PING_REQUEST__INIT;
    Egm__PingReply *reply;
    char host[32];

    snprintf(host, sizeof(host), "host-%d", w->id % 3);
    req.client = client;
    req.host_id = host;
    if (call(w, EGM_RPC_PING, &req.base, &egm__ping_reply__descriptor,
             (ProtobufCMessage **)&reply) != 0)
        return -1;
    int rc = reply->status == EGM_OK ? 0 : -1;
    if (rc != 0)
        snprintf(w->error, sizeof(w->error), "Ping: %d", reply->status);
    else
        w->ok[EGM_RPC_PING]++;
    egm__pb_free(&reply->base);
    return rc;
}

/* Re-replication (master/repair.h): asks for up to 4 repairs and commits
 * them at once, each as copied or not at random, while the churn thread
 * mounts and unmounts segments of another provider (so that objects lose
 * replicas and repairs have somewhere to go). Every per-task answer is one
 * of the documented ones. */
static int do_repair(worker_t *w, Egm__Id *client)
{
    static const egm_status_t commit_ok[] = {EGM_OK,
                                             EGM_ERR_TRANSFER,
                                             EGM_ERR_LEASE_EXPIRED,
                                             EGM_ERR_NOT_FOUND,
                                             EGM_ERR_SEGMENT_NOT_FOUND,
                                             EGM_ERR_INVALID_ARG};
    Egm__RepairGrantRequest req = EGM__REPAIR_GRANT_REQUEST__INIT;
    Egm__RepairGrantReply *gr;
    req.client = client;
    req.max_keys = 4;
    if (call(w, EGM_RPC_REPAIR_GRANT, &req.base, &egm__repair_grant_reply__descriptor,
             (ProtobufCMessage **)&gr) != 0)
        return -1;
    int rc = 0;
    if (gr->n_tasks > 4)
        rc = -1, snprintf(w->error, sizeof(w->error), "RepairGrant: %zu tasks", gr->n_tasks);
    if (rc == 0 && gr->n_tasks > 0) {
        protobuf_c_boolean copied[4];
        for (size_t i = 0; i < gr->n_tasks; i++)
            copied[i] = next_random(w) % 4 != 0;
        Egm__RepairCommitRequest creq = EGM__REPAIR_COMMIT_REQUEST__INIT;
        Egm__RepairCommitReply *cr;
        creq.client = client;
        creq.n_tasks = creq.n_copied = gr->n_tasks;
        creq.tasks = gr->tasks;
        creq.copied = copied;
        if (call(w, EGM_RPC_REPAIR_COMMIT, &creq.base, &egm__repair_commit_reply__descriptor,
                 (ProtobufCMessage **)&cr) != 0) {
            egm__pb_free(&gr->base);
            return -1;
        }
        for (size_t i = 0; rc == 0 && i < cr->n_results; i++)
            if (!allowed(cr->results[i], commit_ok, sizeof(commit_ok) / sizeof(commit_ok[0])))
                rc = -1,
                snprintf(w->error, sizeof(w->error), "RepairCommit answered %d", cr->results[i]);
        if (rc == 0 && cr->n_results != gr->n_tasks)
            rc = -1, snprintf(w->error, sizeof(w->error), "RepairCommit: %zu results for %zu",
                              cr->n_results, gr->n_tasks);
        w->ok[EGM_RPC_REPAIR_COMMIT] += rc == 0;
        egm__pb_free(&cr->base);
    }
    w->ok[EGM_RPC_REPAIR_GRANT] += rc == 0;
    egm__pb_free(&gr->base);
    return rc;
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    Egm__Id client = EGM__ID__INIT;

    egm__id_to_pb(w->client, &client);
    pthread_barrier_wait(&start);
    for (int round = 0; round < ROUNDS && w->error[0] == '\0'; round++) {
        uint64_t op = next_random(w) % 19;
        if (op < 5)
            do_put(w, &client);
        else if (op == 18)
            do_repair(w, &client);
        else if (op >= 16)
            do_commit(w, &client);
        else if (op < 9)
            do_keys(w, &client, EGM_RPC_GET_REPLICA_LIST);
        else if (op < 11)
            do_keys(w, &client, EGM_RPC_EXIST_KEY);
        else if (op < 13)
            do_keys(w, &client, EGM_RPC_REMOVE);
        else if (op < 15)
            do_stat(w, &client);
        else
            do_ping(w, &client);
    }
    __atomic_fetch_sub(&workers_left, 1, __ATOMIC_RELEASE);
    return NULL;
}

static Egm__SegmentDesc *segment_desc(Egm__SegmentDesc *d, Egm__Id *id, const char *name,
                                      uint64_t size)
{
    egm__segment_desc__init(d);
    egm__id_to_pb(egm__id_random(), id);
    d->id = id;
    d->size = size;
    d->name = (char *)name;
    d->host_id = (char *)"host-0";
    d->tcp_endpoint = (char *)"127.0.0.1:7000";
    return d;
}

static int status_call(worker_t *w, uint16_t type, const ProtobufCMessage *req)
{
    Egm__StatusReply *reply;
    if (call(w, type, req, &egm__status_reply__descriptor, (ProtobufCMessage **)&reply) != 0)
        return -1;
    int rc = reply->status == EGM_OK ? 0 : -1;
    if (rc != 0)
        snprintf(w->error, sizeof(w->error), "%s: %d %s", egm__rpc_type_name(type), reply->status,
                 reply->error);
    egm__pb_free(&reply->base);
    return rc;
}

/* Mounts two segments (one request), ticks, unmounts them one by one,
 * ticks; now and then lists the segments and, while workers run, removes
 * every unleased object. */
static void *churn_main(void *arg)
{
    worker_t *w = arg;
    Egm__Id client = EGM__ID__INIT;
    /* Another provider than the fixed segments': objects that lose a replica
     * on a churn segment can be repaired onto the next one, or onto a fixed
     * one when they lost theirs there. */
    egm__id_to_pb(churn_provider, &client);
    pthread_barrier_wait(&start);
    for (int round = 0;
         (round < CHURN_ROUNDS || __atomic_load_n(&workers_left, __ATOMIC_ACQUIRE) > 0) &&
         w->error[0] == '\0';
         round++) {
        Egm__SegmentDesc descs[2], *ptrs[2];
        Egm__Id ids[2];
        Egm__MountSegmentRequest mount = EGM__MOUNT_SEGMENT_REQUEST__INIT;
        char names[2][32];
        for (int i = 0; i < 2; i++) {
            snprintf(names[i], sizeof(names[i]), "churn/%d/%d", round, i);
            ptrs[i] = segment_desc(&descs[i], &ids[i], names[i], SEG_SIZE / 2);
        }
        mount.client = &client;
        mount.n_segments = 2;
        mount.segments = ptrs;
        if (status_call(w, EGM_RPC_MOUNT_SEGMENT, &mount.base) != 0)
            break;
        __atomic_fetch_add(&fake_now, 97, __ATOMIC_RELAXED); /* leases run out, puts go stale */
        egm__master_state_tick(&st, clock_ms());
        for (int i = 0; i < 2; i++) {
            Egm__UnmountSegmentRequest unmount = EGM__UNMOUNT_SEGMENT_REQUEST__INIT;
            unmount.client = &client;
            unmount.segment = &ids[i];
            if (status_call(w, EGM_RPC_UNMOUNT_SEGMENT, &unmount.base) != 0)
                break;
        }
        egm__master_state_tick(&st, clock_ms());
        if (round % 16 == 0) {
            Egm__ListSegmentsRequest list = EGM__LIST_SEGMENTS_REQUEST__INIT;
            Egm__ListSegmentsReply *lr;
            list.client = &client;
            if (call(w, EGM_RPC_LIST_SEGMENTS, &list.base, &egm__list_segments_reply__descriptor,
                     (ProtobufCMessage **)&lr) != 0)
                break;
            if (lr->n_segments < FIXED_SEGMENTS)
                snprintf(w->error, sizeof(w->error), "ListSegments: %zu segments", lr->n_segments);
            egm__pb_free(&lr->base);
        }
        if (round % 16 == 8 && __atomic_load_n(&workers_left, __ATOMIC_ACQUIRE) > 0) {
            Egm__RemoveAllRequest ra = EGM__REMOVE_ALL_REQUEST__INIT;
            Egm__RemoveAllReply *rr;
            ra.client = &client;
            if (call(w, EGM_RPC_REMOVE_ALL, &ra.base, &egm__remove_all_reply__descriptor,
                     (ProtobufCMessage **)&rr) != 0)
                break;
            egm__pb_free(&rr->base);
        }
    }
    return NULL;
}

static int setup(void **state)
{
    (void)state;
    live_at_start = egm__alloc_live_count();
    egm__log_set_level(EGM_LOG_ERROR);
    egm_objects_params_t p;
    egm__objects_params_default(&p);
    p.lease_ttl_ms = 300;     /* fake ms: a few churn rounds */
    p.min_residency_ms = 300; /* so that objects become evictable while the threads run */
    p.pending_timeout_ms = 2000;
    p.eviction_high_watermark = 0.7;
    p.eviction_ratio = 0.1;
    p.placement = EGM_PLACEMENT_LOCAL_FIRST;
    egm_master_state_params_t sp = {.objects = p, .client_ttl_ms = UINT64_MAX / 4};
    assert_int_equal(egm__master_state_init(&st, &sp), EGM_OK);
    assert_int_equal(egm__master_lock_init(&state_lock), EGM_OK);
    egm__master_metrics_init(&metrics);
    st.lock = &state_lock;
    st.metrics = &metrics;
    st.now_ms = clock_ms;
    fake_now = 1000;
    provider = egm__id_random();
    churn_provider = egm__id_random();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    egm__master_state_cleanup(&st);
    pthread_rwlock_destroy(&state_lock);
    assert_int_equal(egm__alloc_live_count(), live_at_start);
    return 0;
}

static uint64_t count_keys_by_stat(worker_t *w)
{
    Egm__Id client = EGM__ID__INIT;
    uint64_t found = 0;
    egm__id_to_pb(w->client, &client);
    for (unsigned i = 0; i < KEYS; i++) {
        char name[16];
        Egm__StatKeyRequest req = EGM__STAT_KEY_REQUEST__INIT;
        Egm__StatKeyReply *reply;
        snprintf(name, sizeof(name), "k%u", i);
        req.client = &client;
        req.key = name;
        assert_int_equal(call(w, EGM_RPC_STAT_KEY, &req.base, &egm__stat_key_reply__descriptor,
                              (ProtobufCMessage **)&reply),
                         0);
        found += reply->status == EGM_OK;
        egm__pb_free(&reply->base);
    }
    return found;
}

static void test_handlers_from_many_threads(void **state)
{
    (void)state;
    worker_t workers[WORKERS + 1];
    pthread_t threads[WORKERS + 1];
    Egm__Id client = EGM__ID__INIT;

    memset(workers, 0, sizeof(workers));
    for (int i = 0; i <= WORKERS; i++) {
        workers[i].id = i;
        workers[i].client = i == WORKERS ? provider : egm__id_random();
        workers[i].rng = 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1) | 1;
    }
    /* The fixed segments: 3 x 1 MiB, where 64 keys of up to 96 KiB and 2
     * replicas do not all fit, so PutStarts evict too. */
    egm__id_to_pb(provider, &client);
    for (int i = 0; i < FIXED_SEGMENTS; i++) {
        Egm__SegmentDesc d;
        Egm__Id id;
        char name[32];
        Egm__MountSegmentRequest mount = EGM__MOUNT_SEGMENT_REQUEST__INIT;
        snprintf(name, sizeof(name), "fixed/%d", i);
        mount.client = &client;
        mount.segment = segment_desc(&d, &id, name, SEG_SIZE);
        d.host_id = (char *)(i == 0 ? "host-1" : "host-2");
        assert_int_equal(status_call(&workers[WORKERS], EGM_RPC_MOUNT_SEGMENT, &mount.base), 0);
    }

    assert_int_equal(pthread_barrier_init(&start, NULL, WORKERS + 1), 0);
    workers_left = WORKERS;
    for (int i = 0; i < WORKERS; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, worker_main, &workers[i]), 0);
    assert_int_equal(pthread_create(&threads[WORKERS], NULL, churn_main, &workers[WORKERS]), 0);
    for (int i = 0; i <= WORKERS; i++)
        assert_int_equal(pthread_join(threads[i], NULL), 0);
    pthread_barrier_destroy(&start);
    for (int i = 0; i <= WORKERS; i++)
        if (workers[i].error[0] != '\0')
            fail_msg("thread %d: %s", i, workers[i].error);

    /* The index is whole. */
    if (egm__objects_check(st.objects) != EGM_OK)
        fail_msg("index: %s", egm_last_error());
    assert_int_equal(egm__segment_table_count(st.segments), FIXED_SEGMENTS);

    /* Key counts agree: stats, ListSegments, and a StatKey of every key
     * (the only keys the threads used). */
    egm_object_index_stats_t stats;
    egm__objects_stats(st.objects, &stats);
    assert_int_equal(count_keys_by_stat(&workers[0]), stats.objects);
    Egm__ListSegmentsRequest list = EGM__LIST_SEGMENTS_REQUEST__INIT;
    Egm__ListSegmentsReply *lr;
    list.client = &client;
    assert_int_equal(call(&workers[0], EGM_RPC_LIST_SEGMENTS, &list.base,
                          &egm__list_segments_reply__descriptor, (ProtobufCMessage **)&lr),
                     0);
    assert_int_equal(lr->keys, stats.objects);
    uint64_t replicas = 0, used = 0;
    for (size_t i = 0; i < lr->n_segments; i++) {
        replicas += lr->segments[i]->objects;
        used += lr->segments[i]->used;
    }
    assert_int_equal(used, stats.used_bytes);
    assert_true(replicas >= stats.objects); /* one or two replicas each */
    egm__pb_free(&lr->base);

    /* Every repair handed out was committed by its worker at once: each
     * counted once, as added, discarded or failed. */
    egm_repair_stats_t rs;
    egm__repair_queue_stats(egm__objects_repair_queue(st.objects), &rs);
    assert_int_equal(rs.granted_total, rs.repaired_total + rs.discarded_total + rs.failed_total);

    /* Every call was counted once by the metrics (atomics from 9 threads). */
    for (uint16_t t = 1; t <= EGM_RPC_TYPE_MAX; t++) {
        uint64_t calls = 0;
        for (int i = 0; i <= WORKERS; i++)
            calls += workers[i].calls[t];
        assert_int_equal(atomic_load(&metrics.rpc[t].requests), calls);
    }

    /* Puts placed by the clients were committed, not only refused. */
    uint64_t commits = 0;
    for (int i = 0; i < WORKERS; i++)
        commits += workers[i].ok[EGM_RPC_COMMIT];
    assert_true(commits > 0);

    /* The workers' open slabs go back (their space counts as used). */
    egm__objects_expire_slabs(st.objects, UINT64_MAX);

    /* Still serves: a forced RemoveAll empties every segment (the space of
     * objects still under a read lease once it ends), then a put and a read
     * work. */
    Egm__RemoveAllRequest ra = EGM__REMOVE_ALL_REQUEST__INIT;
    Egm__RemoveAllReply *rr;
    ra.client = &client;
    ra.force = 1;
    assert_int_equal(call(&workers[0], EGM_RPC_REMOVE_ALL, &ra.base,
                          &egm__remove_all_reply__descriptor, (ProtobufCMessage **)&rr),
                     0);
    assert_int_equal(rr->removed, stats.objects);
    egm__pb_free(&rr->base);
    egm__objects_stats(st.objects, &stats);
    assert_int_equal(stats.objects, 0);
    assert_int_equal(stats.used_bytes, stats.held_bytes);
    egm__objects_release_held(st.objects, UINT64_MAX);
    egm__objects_stats(st.objects, &stats);
    assert_int_equal(stats.used_bytes, 0);
    assert_int_equal(stats.held_extents, 0);
    workers[0].error[0] = '\0';
    workers[0].rng = 1;
    Egm__Id me = EGM__ID__INIT;
    egm__id_to_pb(workers[0].client, &me);
    assert_int_equal(do_put(&workers[0], &me), 0);
    assert_int_equal(egm__objects_check(st.objects), EGM_OK);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_handlers_from_many_threads, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
