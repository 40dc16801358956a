/* `egmstore bench meta`: round trips of the master's metadata calls.
 *
 * Client threads, each with its own RPC connection (rpc/client.h, as one
 * egm_client_t has), time ExistKey, GetReplicaList, PutStart+PutEnd (a put
 * the master places) and Commit (a put the client placed in its slab: one
 * SlabGrant whenever the slab is used up, one Commit per call) with one key
 * and with batches of keys, at each client count asked for. Each call
 * packs its request and decodes its reply as the client library does
 * (egm__pb_pack, egm__keys_reply_decode, egm__client_reply_segments for the
 * segment descriptors a reply names).
 *
 * Capacity: the bench mounts fake segments, descriptors of memory that does
 * not exist (no handle, no endpoint), under a client id of its own that a
 * pinger thread keeps alive. The master only hands out offsets and no data
 * moves in this bench, so no provider is needed. The keys read are preloaded
 * (untimed, in batches); the keys a put phase writes are removed after it,
 * once every client has finished the timed part (untimed, so no removal runs
 * while another client is being timed), so every phase sees the same index.
 * Everything the bench adds to a master is removed at the end. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <egmstore/egmstore.h>
#include "client/client_int.h"
#include "common/alloc.h"
#include "common/clock.h"
#include "common/config_int.h"
#include "common/id.h"
#include "common/log.h"
#include "common/sock.h"
#include "master/master.h"
#include "rpc/client.h"
#include "rpc/frame.h"
#include "rpc/keys_reply.h"
#include "rpc/proto_util.h"
#include "rpc/server.h"
#include "bench_util.h"
#include "tools/cli.h"

#define MAX_LEVELS 16
#define MAX_CLIENTS 1024
#define MAX_BATCH 8192
#define KEY_LEN 64
#define FAKE_HOST_ID "egmstore-bench-meta-fake"

typedef enum { OP_EXIST, OP_GET_REPLICAS, OP_PUT, OP_COMMIT } op_kind_t;

typedef struct {
    const char *name;
    op_kind_t kind;
    int batched;
} phase_t;

static const phase_t phases[] = {
    {"exist", OP_EXIST, 0},       {"get_replica_list", OP_GET_REPLICAS, 0},
    {"put_start_end", OP_PUT, 0}, {"commit", OP_COMMIT, 0},
    {"exist", OP_EXIST, 1},       {"get_replica_list", OP_GET_REPLICAS, 1},
    {"put_start_end", OP_PUT, 1}, {"commit", OP_COMMIT, 1},
};
#define N_PHASES (sizeof(phases) / sizeof(phases[0]))

typedef struct {
    int levels[MAX_LEVELS];
    int n_levels;
    uint64_t ops;       /* single-key calls per phase */
    uint64_t batch_ops; /* batch calls per phase; 0 = ops / 16 */
    double seconds;     /* > 0: each phase runs this long instead */
    uint64_t keys;
    int batch;
    uint64_t object_size;
    int segments;
    uint64_t segment_size;
    int tcp; /* --transport tcp: never the master's local socket */
    const char *out;
} bench_opts_t;

typedef struct {
    int clients;
    const phase_t *phase;
    int batch;
    uint64_t calls, keys, errors;
    double seconds;
    double p50_us, p99_us, mean_us, max_us;
} bench_result_t;

typedef struct bench bench_t;

/* One client: a thread with its own connection and id (or the control client
 * that mounts, preloads and cleans up). */
typedef struct {
    bench_t *b;
    int index;
    pthread_t thread;
    egm_rpc_client_t *rpc;
    egm_id_t id;
    uint64_t rng;
    uint64_t quota; /* calls this phase, ops mode */
    egm_bench_samples_t lat;
    uint64_t calls, keys, errors;
    uint64_t remove_errors; /* the removal step after a put phase */
    uint64_t put_seq, put_removed;
    uint64_t end_ns;
    uint64_t seen_gen; /* the phase generation this thread last ran */
    char error[256];
    char (*names)[KEY_LEN];
    char **keys_v;
    uint64_t *sizes;
    uint64_t *slab_ids, *offsets; /* Commit: per key */
    uint64_t slab_id, slab_size, slab_used;
} worker_t;

struct bench {
    bench_opts_t o;
    egm_rpc_client_params_t rpc_params;
    char auth_token[EGM_AUTH_TOKEN_MAX + 1]; /* rpc_params.auth_token */
    int timeout_ms;
    int ping_interval_ms;
    char prefix[32];
    egm_id_t owner; /* of the fake segments */
    egm_id_t *segment_ids;
    int mounted;
    worker_t control;

    pthread_t pinger;
    int pinger_started;
    pthread_mutex_t ids_lock;
    egm_id_t ping_ids[MAX_CLIENTS + 1];
    size_t n_ping_ids;
    atomic_int stop_pinger;
    atomic_int ping_failures;

    /* A step starts when gen moves (workers wait on go) and ends when every
     * started worker has counted itself in `finished` (signalling done). A
     * phase is the timed step, then for puts the untimed removal step. */
    pthread_mutex_t phase_lock;
    pthread_cond_t go, done;
    uint64_t gen;
    int finished;
    const phase_t *phase; /* NULL: workers exit */
    int removing;         /* this step removes the keys the phase put */
    int level;
    uint64_t t0_ns, deadline_ns;

    bench_result_t results[MAX_LEVELS * N_PHASES];
    size_t n_results;
    egm_bench_machine_t machine; /* when the run started */
    int tty;                     /* stderr is a terminal: progress lines */
};

/* A progress line on a terminal; nothing otherwise (the table and the JSON
 * hold every figure). */
__attribute__((format(printf, 2, 3))) static void progress(const bench_t *b, const char *fmt, ...)
{
    va_list ap;
    if (!b->tty)
        return;
    fputs("bench: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

static uint64_t next_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return *s = x;
}

/* ---- calls ---------------------------------------------------------------- */

/* Packs msg, calls, decodes the KeysReply; a whole-request error or any
 * per-key status but OK (or `allowed`) fails the call. decode_segments
 * decodes the descriptors as the client does before it moves data. */
static egm_status_t call_keys_slab(worker_t *w, uint16_t type, const ProtobufCMessage *msg,
                                   size_t n, int decode_segments, egm_status_t allowed,
                                   uint64_t *slab_id_p)
{
    uint8_t *buf = NULL, *rbuf = NULL;
    size_t len = 0, rlen = 0;
    egm_keys_reply_t *reply = NULL;
    egm_status_t status;

    status = egm__pb_pack(msg, &buf, &len);
    if (status != EGM_OK)
        return status;
    status = egm__rpc_call(w->rpc, type, buf, len, &rbuf, &rlen, w->b->timeout_ms);
    egm_free(buf);
    if (status != EGM_OK)
        return status;
    status = egm__keys_reply_decode(rbuf, rlen, n, &reply);
    if (status != EGM_OK)
        return status;
    if (reply->status != EGM_OK)
        status = egm__set_error(reply->status, "%s refused: %s", egm__rpc_type_name(type),
                                egm_status_string(reply->status));
    else if (reply->n_results != n)
        status = egm__set_error(EGM_ERR_PROTOCOL, "%s: %zu results for %zu keys",
                                egm__rpc_type_name(type), reply->n_results, n);
    for (size_t i = 0; status == EGM_OK && i < n; i++) {
        egm_status_t s = reply->results[i].status;
        if (s != EGM_OK && s != allowed)
            status = egm__set_error(s, "%s %s: %s", egm__rpc_type_name(type), w->keys_v[i],
                                    egm_status_string(s));
    }
    if (status == EGM_OK && decode_segments) {
        egm_segment_desc_t *descs = NULL;
        status = egm__client_reply_segments(reply, &descs);
        egm_free(descs);
    }
    if (slab_id_p != NULL) { /* SlabGrant: the slab and its size */
        *slab_id_p = reply->slab_id;
        w->slab_size = status == EGM_OK ? reply->results[0].size : 0;
    }
    egm__keys_reply_free(reply);
    return status;
}

static egm_status_t call_keys(worker_t *w, uint16_t type, const ProtobufCMessage *msg, size_t n,
                              int decode_segments, egm_status_t allowed)
{
    return call_keys_slab(w, type, msg, n, decode_segments, allowed, NULL);
}

static egm_status_t keys_call(worker_t *w, uint16_t type, size_t n, int force, int decode_segments,
                              egm_status_t allowed)
{
    Egm__KeysRequest req = EGM__KEYS_REQUEST__INIT;
    Egm__Id id = EGM__ID__INIT;

    egm__id_to_pb(w->id, &id);
    req.client = &id;
    req.n_keys = n;
    req.keys = w->keys_v;
    req.force = force != 0;
    return call_keys(w, type, &req.base, n, decode_segments, allowed);
}

/* PutStart then PutEnd of w->keys_v[0..n): one object write's metadata. */
static egm_status_t put_call(worker_t *w, size_t n)
{
    Egm__PutStartRequest req = EGM__PUT_START_REQUEST__INIT;
    Egm__ReplicateConfig config = EGM__REPLICATE_CONFIG__INIT;
    Egm__Id id = EGM__ID__INIT;

    egm__id_to_pb(w->id, &id);
    config.replica_num = 1;
    req.client = &id;
    req.n_keys = n;
    req.keys = w->keys_v;
    req.n_sizes = n;
    req.sizes = w->sizes;
    req.config = &config;
    egm_status_t status = call_keys(w, EGM_RPC_PUT_START, &req.base, n, 1, EGM_OK);
    if (status == EGM_OK)
        status = keys_call(w, EGM_RPC_PUT_END, n, 0, 0, EGM_OK);
    return status;
}

#define SLAB_BYTES ((uint64_t)256 << 20) /* the client's slab_bytes default */

/* A new slab (the old one returned with the request), as the client asks. */
static egm_status_t slab_grant(worker_t *w, uint64_t need)
{
    Egm__SlabGrantRequest req = EGM__SLAB_GRANT_REQUEST__INIT;
    Egm__ReplicateConfig config = EGM__REPLICATE_CONFIG__INIT;
    Egm__Id id = EGM__ID__INIT;
    uint64_t returned = w->slab_id;

    egm__id_to_pb(w->id, &id);
    config.replica_num = 1;
    req.client = &id;
    req.size = need > SLAB_BYTES ? need : SLAB_BYTES;
    req.min_size = need;
    req.config = &config;
    req.n_returned = returned != 0;
    req.returned = &returned;
    w->slab_id = 0;
    w->slab_used = 0;
    return call_keys_slab(w, EGM_RPC_SLAB_GRANT, &req.base, 1, 1, EGM_OK, &w->slab_id);
}

/* Commit of w->keys_v[0..n), placed at the next offsets of the worker's slab. */
static egm_status_t commit_call(worker_t *w, size_t n)
{
    Egm__CommitRequest req = EGM__COMMIT_REQUEST__INIT;
    Egm__ReplicateConfig config = EGM__REPLICATE_CONFIG__INIT;
    Egm__Id id = EGM__ID__INIT;
    uint64_t room = (w->sizes[0] + EGM_OBJECT_ALIGN - 1) & ~(uint64_t)(EGM_OBJECT_ALIGN - 1);

    if (w->slab_id == 0 || w->slab_used + n * room > w->slab_size) {
        egm_status_t status = slab_grant(w, n * room);
        if (status != EGM_OK)
            return status;
    }
    for (size_t j = 0; j < n; j++) {
        w->slab_ids[j] = w->slab_id;
        w->offsets[j] = w->slab_used;
        w->slab_used += room;
    }
    egm__id_to_pb(w->id, &id);
    config.replica_num = 1;
    req.client = &id;
    req.n_keys = req.n_sizes = req.n_slab_ids = req.n_offsets = n;
    req.keys = w->keys_v;
    req.sizes = w->sizes;
    req.slab_ids = w->slab_ids;
    req.offsets = w->offsets;
    req.config = &config;
    return call_keys(w, EGM_RPC_COMMIT, &req.base, n, 0, EGM_OK);
}

static void read_key_name(const bench_t *b, char *name, uint64_t i)
{
    snprintf(name, KEY_LEN, "%s/%llu", b->prefix, (unsigned long long)i);
}

static void put_key_name(const bench_t *b, const worker_t *w, char *name, uint64_t seq)
{
    snprintf(name, KEY_LEN, "%s/p%d/%d/%llu", b->prefix, b->level, w->index,
             (unsigned long long)seq);
}

static egm_status_t one_call(worker_t *w, const phase_t *ph, size_t n)
{
    bench_t *b = w->b;
    if (ph->kind == OP_PUT || ph->kind == OP_COMMIT) {
        for (size_t j = 0; j < n; j++)
            put_key_name(b, w, w->names[j], w->put_seq++);
        return ph->kind == OP_PUT ? put_call(w, n) : commit_call(w, n);
    }
    for (size_t j = 0; j < n; j++)
        read_key_name(b, w->names[j], next_rand(&w->rng) % b->o.keys);
    if (ph->kind == OP_EXIST)
        return keys_call(w, EGM_RPC_EXIST_KEY, n, 0, 0, EGM_OK);
    return keys_call(w, EGM_RPC_GET_REPLICA_LIST, n, 0, 1, EGM_OK);
}

/* Untimed: returns the worker's slab (a Commit without keys), as a client
 * does when it closes. */
static egm_status_t slab_return(worker_t *w)
{
    Egm__CommitRequest req = EGM__COMMIT_REQUEST__INIT;
    Egm__Id id = EGM__ID__INIT;
    uint64_t returned = w->slab_id;

    if (returned == 0)
        return EGM_OK;
    egm__id_to_pb(w->id, &id);
    req.client = &id;
    req.n_returned = 1;
    req.returned = &returned;
    w->slab_id = 0;
    return call_keys(w, EGM_RPC_COMMIT, &req.base, 0, 0, EGM_OK);
}

/* Untimed: removes the keys this worker put at this level (and returns its
 * slab). */
static egm_status_t remove_put_keys(worker_t *w)
{
    bench_t *b = w->b;
    egm_status_t status = slab_return(w);
    while (w->put_removed < w->put_seq && status == EGM_OK) {
        size_t n = 0;
        while (n < (size_t)b->o.batch && w->put_removed < w->put_seq)
            put_key_name(b, w, w->names[n++], w->put_removed++);
        status = keys_call(w, EGM_RPC_REMOVE, n, 1, 0, EGM_ERR_NOT_FOUND);
    }
    return status;
}

static void note_error(worker_t *w, egm_status_t status)
{
    w->errors++;
    if (w->error[0] == '\0')
        snprintf(w->error, sizeof(w->error), "%s: %s", egm_status_string(status), egm_last_error());
}

static void run_phase(worker_t *w, const phase_t *ph)
{
    bench_t *b = w->b;
    size_t n = ph->batched ? (size_t)b->o.batch : 1;
    uint64_t now = egm__now_ns();

    w->calls = w->keys = w->errors = 0;
    w->lat.n = 0;
    for (uint64_t i = 0;; i++) {
        if (b->o.seconds > 0 ? (i > 0 && now >= b->deadline_ns) : i >= w->quota)
            break;
        uint64_t t = egm__now_ns();
        egm_status_t status = one_call(w, ph, n);
        now = egm__now_ns();
        if (egm__bench_samples_add(&w->lat, now - t) != EGM_OK) {
            note_error(w, EGM_ERR_NO_MEMORY);
            break;
        }
        w->calls++;
        w->keys += n;
        if (status != EGM_OK)
            note_error(w, status);
    }
    w->end_ns = now;
}

/* The step after a timed put phase. */
static void run_removal(worker_t *w)
{
    char error[sizeof(w->error)];
    egm_status_t status = remove_put_keys(w);
    w->remove_errors = 0;
    if (status != EGM_OK) {
        w->remove_errors = 1;
        snprintf(error, sizeof(error), "removing the keys put: %s: %s", egm_status_string(status),
                 egm_last_error());
        memcpy(w->error, error, sizeof(error));
    }
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    bench_t *b = w->b;
    uint64_t seen = w->seen_gen;
    for (;;) {
        pthread_mutex_lock(&b->phase_lock);
        while (b->gen == seen)
            pthread_cond_wait(&b->go, &b->phase_lock);
        seen = b->gen;
        const phase_t *ph = b->phase;
        int removing = b->removing;
        pthread_mutex_unlock(&b->phase_lock);
        if (ph == NULL)
            break;
        if (removing)
            run_removal(w);
        else
            run_phase(w, ph);
        pthread_mutex_lock(&b->phase_lock);
        b->finished++;
        pthread_cond_signal(&b->done);
        pthread_mutex_unlock(&b->phase_lock);
    }
    return NULL;
}

static egm_status_t worker_init(bench_t *b, worker_t *w, int index)
{
    memset(w, 0, sizeof(*w));
    w->b = b;
    w->index = index;
    w->id = egm__id_random();
    w->rng = (w->id.lo | 1) ^ ((uint64_t)index << 32);
    w->names = egm_calloc((size_t)b->o.batch, sizeof(*w->names), "bench.keys");
    w->keys_v = egm_calloc((size_t)b->o.batch, sizeof(*w->keys_v), "bench.keys");
    w->sizes = egm_calloc((size_t)b->o.batch, sizeof(*w->sizes), "bench.keys");
    w->slab_ids = egm_calloc((size_t)b->o.batch, sizeof(*w->slab_ids), "bench.keys");
    w->offsets = egm_calloc((size_t)b->o.batch, sizeof(*w->offsets), "bench.keys");
    if (w->names == NULL || w->keys_v == NULL || w->sizes == NULL || w->slab_ids == NULL ||
        w->offsets == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "bench client buffers");
    for (int j = 0; j < b->o.batch; j++) {
        w->keys_v[j] = w->names[j];
        w->sizes[j] = b->o.object_size;
    }
    return egm__rpc_client_create(&b->rpc_params, &w->rpc);
}

static void worker_cleanup(worker_t *w)
{
    egm__rpc_client_destroy(w->rpc);
    egm_free(w->names);
    egm_free(w->keys_v);
    egm_free(w->sizes);
    egm_free(w->slab_ids);
    egm_free(w->offsets);
    egm__bench_samples_free(&w->lat);
    memset(w, 0, sizeof(*w));
}

/* ---- liveness: the fake segments' owner and every client keep pinging ---- */

static egm_status_t ping_once(egm_rpc_client_t *rpc, egm_id_t id, int timeout_ms)
{
    Egm__PingRequest req = EGM__PING_REQUEST__INIT;
    Egm__Id id_pb = EGM__ID__INIT;
    Egm__PingReply *reply = NULL;

    egm__id_to_pb(id, &id_pb);
    req.client = &id_pb;
    req.host_id = (char *)egm__host_id();
    egm_status_t status =
        egm__rpc_call_msg(rpc, EGM_RPC_PING, &req.base, &egm__ping_reply__descriptor,
                          (ProtobufCMessage **)&reply, timeout_ms);
    if (status == EGM_OK && reply->status != EGM_OK)
        status =
            egm__set_error(reply->status, "Ping refused: %s", egm_status_string(reply->status));
    egm__rpc_msg_free(reply != NULL ? &reply->base : NULL);
    return status;
}

static void *pinger_main(void *arg)
{
    bench_t *b = arg;
    egm_rpc_client_t *rpc = NULL;
    egm_id_t ids[MAX_CLIENTS + 1];

    if (egm__rpc_client_create(&b->rpc_params, &rpc) != EGM_OK) {
        atomic_fetch_add(&b->ping_failures, 1);
        return NULL;
    }
    while (!atomic_load(&b->stop_pinger)) {
        pthread_mutex_lock(&b->ids_lock);
        size_t n = b->n_ping_ids;
        memcpy(ids, b->ping_ids, n * sizeof(ids[0]));
        pthread_mutex_unlock(&b->ids_lock);
        for (size_t i = 0; i < n; i++)
            if (ping_once(rpc, ids[i], b->timeout_ms) != EGM_OK) {
                atomic_fetch_add(&b->ping_failures, 1);
                egm_log_ratelimited(EGM_LOG_WARN, 1, "bench: ping: %s", egm_last_error());
            }
        for (int t = 0; t < b->ping_interval_ms && !atomic_load(&b->stop_pinger); t += 20)
            egm__sleep_ms(20);
    }
    egm__rpc_client_destroy(rpc);
    return NULL;
}

static void set_ping_ids(bench_t *b, const worker_t *workers, int n)
{
    pthread_mutex_lock(&b->ids_lock);
    b->ping_ids[0] = b->owner;
    for (int i = 0; i < n; i++)
        b->ping_ids[1 + i] = workers[i].id;
    b->n_ping_ids = 1 + (size_t)n;
    pthread_mutex_unlock(&b->ids_lock);
}

/* ---- setup and teardown on the master ------------------------------------ */

static egm_status_t status_call(bench_t *b, uint16_t type, const ProtobufCMessage *req)
{
    Egm__StatusReply *reply = NULL;
    egm_status_t status =
        egm__rpc_call_msg(b->control.rpc, type, req, &egm__status_reply__descriptor,
                          (ProtobufCMessage **)&reply, b->timeout_ms);
    if (status == EGM_OK && reply->status != EGM_OK)
        status = egm__set_error(reply->status, "%s: %s", egm__rpc_type_name(type),
                                reply->error != NULL ? reply->error : "");
    egm__rpc_msg_free(reply != NULL ? &reply->base : NULL);
    return status;
}

static egm_status_t mount_fake_segments(bench_t *b)
{
    size_t n = (size_t)b->o.segments;
    Egm__MountSegmentRequest req = EGM__MOUNT_SEGMENT_REQUEST__INIT;
    Egm__Id client = EGM__ID__INIT;
    Egm__SegmentDesc *descs = egm_calloc(n, sizeof(*descs), "bench.mount");
    Egm__SegmentDesc **ptrs = egm_calloc(n, sizeof(*ptrs), "bench.mount");
    Egm__Id *ids = egm_calloc(2 * n, sizeof(*ids), "bench.mount");
    /* The prefix (< 32 bytes), "/fake-segment-" and any size_t always fit. */
    char(*names)[sizeof(b->prefix) + 40] = egm_calloc(n, sizeof(*names), "bench.mount");
    egm_status_t status;

    b->segment_ids = egm_calloc(n, sizeof(*b->segment_ids), "bench.mount");
    if (descs == NULL || ptrs == NULL || ids == NULL || names == NULL || b->segment_ids == NULL) {
        status = egm__set_error(EGM_ERR_NO_MEMORY, "mount request");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        egm__segment_desc__init(&descs[i]);
        b->segment_ids[i] = egm__id_random();
        egm__id_to_pb(b->segment_ids[i], &ids[2 * i]);
        egm__id_to_pb(b->owner, &ids[2 * i + 1]);
        snprintf(names[i], sizeof(names[i]), "%s/fake-segment-%zu", b->prefix, i);
        descs[i].id = &ids[2 * i];
        descs[i].owner = &ids[2 * i + 1];
        descs[i].name = names[i];
        descs[i].size = b->o.segment_size;
        /* No host shares this id and there is no endpoint: nobody can reach
         * it, which is right for memory that does not exist. */
        descs[i].host_id = FAKE_HOST_ID;
        descs[i].handle_kind = EGM__HANDLE_KIND__HANDLE_NONE;
        ptrs[i] = &descs[i];
    }
    egm__id_to_pb(b->owner, &client);
    req.client = &client;
    req.n_segments = n;
    req.segments = ptrs;
    status = status_call(b, EGM_RPC_MOUNT_SEGMENT, &req.base);
    if (status == EGM_OK)
        b->mounted = 1;
out:
    egm_free(descs);
    egm_free(ptrs);
    egm_free(ids);
    egm_free(names);
    return status;
}

static egm_status_t unmount_fake_segments(bench_t *b)
{
    Egm__UnmountSegmentRequest req = EGM__UNMOUNT_SEGMENT_REQUEST__INIT;
    Egm__Id client = EGM__ID__INIT;
    size_t n = (size_t)b->o.segments;
    Egm__Id *ids = egm_calloc(n, sizeof(*ids), "bench.mount");
    Egm__Id **ptrs = egm_calloc(n, sizeof(*ptrs), "bench.mount");
    egm_status_t status;

    if (ids == NULL || ptrs == NULL) {
        status = egm__set_error(EGM_ERR_NO_MEMORY, "unmount request");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        egm__id_to_pb(b->segment_ids[i], &ids[i]);
        ptrs[i] = &ids[i];
    }
    egm__id_to_pb(b->owner, &client);
    req.client = &client;
    req.n_segments = n;
    req.segments = ptrs;
    status = status_call(b, EGM_RPC_UNMOUNT_SEGMENT, &req.base);
out:
    egm_free(ids);
    egm_free(ptrs);
    return status;
}

/* Puts (PutRemove with remove != 0: removes) keys [0, keys) in batches. */
static egm_status_t preload(bench_t *b, int remove)
{
    worker_t *w = &b->control;
    uint64_t t0 = egm__now_ns(), next_note = t0 + 2000000000ull;
    egm_status_t status = EGM_OK;

    for (uint64_t i = 0; i < b->o.keys && status == EGM_OK;) {
        size_t n = 0;
        while (n < (size_t)b->o.batch && i < b->o.keys)
            read_key_name(b, w->names[n++], i++);
        status = remove ? keys_call(w, EGM_RPC_REMOVE, n, 1, 0, EGM_ERR_NOT_FOUND) : put_call(w, n);
        if (egm__now_ns() >= next_note) {
            progress(b, "%s %llu of %llu keys", remove ? "removed" : "preloaded",
                     (unsigned long long)i, (unsigned long long)b->o.keys);
            next_note += 2000000000ull;
        }
    }
    if (status == EGM_OK)
        progress(b, "%s %llu keys in %.2f s", remove ? "removed" : "preloaded",
                 (unsigned long long)b->o.keys, (double)(egm__now_ns() - t0) / 1e9);
    return status;
}

/* ---- phases --------------------------------------------------------------- */

static egm_status_t summarize(bench_t *b, worker_t *workers, int n, const phase_t *ph,
                              bench_result_t *r)
{
    egm_bench_samples_t all = {0};
    egm_bench_latency_t lat;
    uint64_t end = b->t0_ns;

    memset(r, 0, sizeof(*r));
    r->clients = n;
    r->phase = ph;
    r->batch = ph->batched ? b->o.batch : 1;
    for (int i = 0; i < n; i++) {
        r->calls += workers[i].calls;
        r->keys += workers[i].keys;
        r->errors += workers[i].errors;
        if (workers[i].end_ns > end)
            end = workers[i].end_ns;
        if (workers[i].error[0] != '\0') {
            fprintf(stderr, "bench: %s client %d: %llu failed calls, first: %s\n", ph->name, i,
                    (unsigned long long)workers[i].errors, workers[i].error);
            workers[i].error[0] = '\0';
        }
    }
    r->seconds = (double)(end - b->t0_ns) / 1e9;
    for (int i = 0; i < n; i++) {
        egm_status_t status = egm__bench_samples_extend(&all, workers[i].lat.ns, workers[i].lat.n);
        if (status != EGM_OK) {
            egm__bench_samples_free(&all);
            return status;
        }
    }
    egm__bench_latency(&all, &lat);
    r->p50_us = lat.p50_us;
    r->p99_us = lat.p99_us;
    r->mean_us = lat.mean_us;
    r->max_us = lat.max_us;
    egm__bench_samples_free(&all);
    return EGM_OK;
}

static double per_s(uint64_t count, double seconds)
{
    return seconds > 0 ? (double)count / seconds : 0;
}

/* One step of a phase on every client; returns when all of them are done. */
static void run_step(bench_t *b, const phase_t *ph, int removing, int clients)
{
    pthread_mutex_lock(&b->phase_lock);
    b->phase = ph;
    b->removing = removing;
    b->finished = 0;
    b->t0_ns = egm__now_ns();
    b->deadline_ns = b->t0_ns + (uint64_t)(b->o.seconds * 1e9);
    b->gen++;
    pthread_cond_broadcast(&b->go);
    while (b->finished < clients)
        pthread_cond_wait(&b->done, &b->phase_lock);
    pthread_mutex_unlock(&b->phase_lock);
}

static egm_status_t run_level(bench_t *b, int clients)
{
    worker_t *workers = egm_calloc((size_t)clients, sizeof(*workers), "bench.workers");
    int created = 0, started = 0;
    egm_status_t status = EGM_OK;

    if (workers == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "bench clients");
    b->level = clients;
    for (; created < clients && status == EGM_OK; created++)
        status = worker_init(b, &workers[created], created);
    /* Connect and register every client before the clock starts. */
    for (int i = 0; i < created && status == EGM_OK; i++)
        status = ping_once(workers[i].rpc, workers[i].id, b->timeout_ms);
    if (status != EGM_OK)
        goto out;
    set_ping_ids(b, workers, clients);
    /* b->gen has moved on at earlier levels: a new thread waits for the next
     * move, not for the ones it never saw. */
    for (int i = 0; i < clients; i++)
        workers[i].seen_gen = b->gen;
    for (; started < clients; started++)
        if (pthread_create(&workers[started].thread, NULL, worker_main, &workers[started]) != 0) {
            status = egm__set_error(EGM_ERR_NO_MEMORY, "starting client thread %d", started);
            break;
        }
    for (size_t p = 0; p < N_PHASES && status == EGM_OK && started == clients; p++) {
        const phase_t *ph = &phases[p];
        uint64_t total = ph->batched ? b->o.batch_ops : b->o.ops;
        if (total < (uint64_t)clients)
            total = (uint64_t)clients;
        for (int i = 0; i < clients; i++)
            workers[i].quota =
                total / (uint64_t)clients + ((uint64_t)i < total % (uint64_t)clients);
        run_step(b, ph, 0, clients);
        bench_result_t *r = &b->results[b->n_results];
        status = summarize(b, workers, clients, ph, r);
        if (status != EGM_OK)
            break;
        b->n_results++;
        if (ph->kind == OP_PUT || ph->kind == OP_COMMIT) {
            /* Untimed, and only once every client's timed part is over. */
            run_step(b, ph, 1, clients);
            for (int i = 0; i < clients; i++)
                if (workers[i].remove_errors > 0) {
                    fprintf(stderr, "bench: %s client %d: %s\n", ph->name, i, workers[i].error);
                    workers[i].error[0] = '\0';
                    r->errors += workers[i].remove_errors;
                }
        }
        progress(b,
                 "%-16s x%-4d %3d clients: %8llu calls in %6.2f s, %9.0f calls/s, %10.0f "
                 "keys/s, p50 %7.1f us, p99 %8.1f us%s",
                 ph->name, r->batch, clients, (unsigned long long)r->calls, r->seconds,
                 per_s(r->calls, r->seconds), per_s(r->keys, r->seconds), r->p50_us, r->p99_us,
                 r->errors ? ", ERRORS" : "");
    }
out:
    if (started > 0) {
        pthread_mutex_lock(&b->phase_lock);
        b->phase = NULL;
        b->gen++;
        pthread_cond_broadcast(&b->go);
        pthread_mutex_unlock(&b->phase_lock);
        for (int i = 0; i < started; i++)
            pthread_join(workers[i].thread, NULL);
    }
    set_ping_ids(b, NULL, 0);
    for (int i = 0; i < created; i++)
        worker_cleanup(&workers[i]);
    egm_free(workers);
    return status;
}

/* ---- report --------------------------------------------------------------- */

static const char *op_title(const phase_t *ph)
{
    switch (ph->kind) {
    case OP_EXIST:
        return "ExistKey";
    case OP_GET_REPLICAS:
        return "GetReplicaList";
    case OP_COMMIT:
        return "Commit";
    default:
        return "PutStart+PutEnd";
    }
}

static void print_table(const bench_t *b, const char *where)
{
    printf("\n%-16s %5s %7s %9s %8s %10s %11s %9s %9s %6s\n", "op", "batch", "clients", "calls",
           "seconds", "calls/s", "keys/s", "p50 us", "p99 us", "errors");
    for (size_t i = 0; i < b->n_results; i++) {
        const bench_result_t *r = &b->results[i];
        printf("%-16s %5d %7d %9llu %8.2f %10.0f %11.0f %9.1f %9.1f %6llu\n", op_title(r->phase),
               r->batch, r->clients, (unsigned long long)r->calls, r->seconds,
               per_s(r->calls, r->seconds), per_s(r->keys, r->seconds), r->p50_us, r->p99_us,
               (unsigned long long)r->errors);
    }
    printf("\nlatency = one call (PutStart+PutEnd: both round trips; Commit: with the SlabGrant "
           "when its slab is used up); keys/s = calls/s x batch\n"
           "%s\n",
           where);
}

static egm_status_t write_json(const bench_t *b, const char *path, const char *master,
                               const char *transport)
{
    const egm_bench_machine_t *m = &b->machine;
    char when[32];
    int dirty = 0;
    const char *commit = egm__bench_build_commit(&dirty);
    time_t now = time(NULL);
    struct tm tm;
    FILE *f = fopen(path, "w");

    if (f == NULL)
        return egm__set_error(EGM_ERR_IO, "--out %s: %s", path, strerror(errno));
    gmtime_r(&now, &tm);
    strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);

    fprintf(f, "{\n  \"benchmark\": \"egmstore bench meta\",\n  \"version\": ");
    egm__bench_json_str(f, EGMSTORE_VERSION);
    fprintf(f, ",\n  \"time_utc\": ");
    egm__bench_json_str(f, when);
    /* The names of `egmstore bench data` and bench/py/benchlib.py (schema 1). */
    fprintf(f, ",\n  ");
    egm__bench_json_machine(f, m);
    fprintf(f, "},\n");
    /* The commit the binary was built from, not the checkout's HEAD now. */
    fprintf(f, "  \"commit\": ");
    egm__bench_json_str(f, commit);
    fprintf(f, ",\n  \"commit_dirty\": %s,\n  \"config\": {\"master\": ", dirty ? "true" : "false");
    egm__bench_json_str(f, master);
    fprintf(f, ", \"transport\": ");
    egm__bench_json_str(f, transport);
    fprintf(f, ", \"clients\": [");
    for (int i = 0; i < b->o.n_levels; i++)
        fprintf(f, "%s%d", i ? ", " : "", b->o.levels[i]);
    fprintf(f, "], \"mode\": \"%s\", ", b->o.seconds > 0 ? "seconds" : "ops");
    /* the other mode's settings are null */
    if (b->o.seconds > 0)
        fprintf(f, "\"ops\": null, \"batch_ops\": null, \"seconds\": %g, ", b->o.seconds);
    else
        fprintf(f, "\"ops\": %llu, \"batch_ops\": %llu, \"seconds\": null, ",
                (unsigned long long)b->o.ops, (unsigned long long)b->o.batch_ops);
    fprintf(f,
            "\"keys\": %llu, \"batch\": %d, \"object_size\": %llu, \"replica_num\": 1, "
            "\"segments\": %d, \"segment_size\": %llu, \"key_example\": ",
            (unsigned long long)b->o.keys, b->o.batch, (unsigned long long)b->o.object_size,
            b->o.segments, (unsigned long long)b->o.segment_size);
    char example[KEY_LEN];
    read_key_name(b, example, b->o.keys - 1);
    egm__bench_json_str(f, example);
    fprintf(f, "},\n  \"ping_failures\": %d,\n  \"results\": [\n",
            atomic_load(&((bench_t *)b)->ping_failures));
    for (size_t i = 0; i < b->n_results; i++) {
        const bench_result_t *r = &b->results[i];
        fprintf(f,
                "    {\"op\": \"%s\", \"rpc\": \"%s\", \"batch\": %d, \"clients\": %d, "
                "\"round_trips_per_call\": %d, \"calls\": %llu, \"keys\": %llu, "
                "\"seconds\": %.6f, \"calls_per_s\": %.1f, \"keys_per_s\": %.1f, "
                "\"p50_us\": %.2f, \"p99_us\": %.2f, \"mean_us\": %.2f, \"max_us\": %.2f, "
                "\"errors\": %llu}%s\n",
                r->phase->name, op_title(r->phase), r->batch, r->clients,
                r->phase->kind == OP_PUT ? 2 : 1, (unsigned long long)r->calls,
                (unsigned long long)r->keys, r->seconds, per_s(r->calls, r->seconds),
                per_s(r->keys, r->seconds), r->p50_us, r->p99_us, r->mean_us, r->max_us,
                (unsigned long long)r->errors, i + 1 < b->n_results ? "," : "");
    }
    fprintf(f, "  ]\n}\n");
    if (fclose(f) != 0)
        return egm__set_error(EGM_ERR_IO, "--out %s: %s", path, strerror(errno));
    return EGM_OK;
}

/* ---- options -------------------------------------------------------------- */

const char egm__bench_meta_usage[] =
    "Usage: egmstore bench meta [--master HOST:PORT] [--clients 1,8,64]\n"
    "                           [--seconds 1 | --ops N [--batch-ops N]] [--keys K] [--batch 128]\n"
    "                           [--object-size 4KiB] [--segments 64] [--segment-size 1GiB]\n"
    "                           [--transport auto|tcp] [--out FILE.json]\n\n"
    "Round trips of the master's metadata calls: ExistKey, GetReplicaList,\n"
    "PutStart+PutEnd and Commit (into a slab, SlabGrant when it is used up), with one key and\n"
    "with batches, from 1, 8 and 64 client threads (each\n"
    "with its own connection). Without --master it starts a master in this process on a\n"
    "free loopback port. Capacity comes from fake segments (descriptors only; the master just\n"
    "hands out offsets, no data moves). Configuration keys given here (--rpc-threads 4,\n"
    "--http-port -1, ...) configure that master. Prints a table; --out writes every figure\n"
    "as JSON. Progress lines go to stderr when it is a terminal.\n\n"
    "  --master HOST:PORT a running master to measure instead of one in this process (the\n"
    "                     fake segments and keys are mounted there and removed at the end)\n"
    "  --clients LIST     client counts, comma separated (default 1,8,64)\n"
    "  --seconds S        run each op for S seconds at each client count (default 1)\n"
    "  --ops N            instead, a number of calls: N single-key calls per op and client\n"
    "                     count, shared by the clients (a short run: 20000 calls last 0.1-1 s)\n"
    "  --batch-ops N      with --ops: batch calls per op and client count (default\n"
    "                     ops/16, at least one per client)\n"
    "  --keys K           keys preloaded and read at random (default 100000)\n"
    "  --batch B          keys per batch call (default 128)\n"
    "  --object-size SIZE size of each object put (default 4KiB)\n"
    "  --segments N, --segment-size SIZE  fake capacity (default 64 x 1GiB)\n"
    "  --transport auto|tcp  auto: the master's local socket when it is on this host, as\n"
    "                     the client library does; tcp: always TCP (default auto)\n"
    "  --out FILE.json    write every figure as JSON (docs/benchmarks.md)\n";

static int add_level(const char *it, void *arg)
{
    bench_opts_t *o = arg;
    uint64_t v;
    if (o->n_levels == MAX_LEVELS) {
        fprintf(stderr, "egmstore: error: --clients: at most %d counts\n", MAX_LEVELS);
        return -1;
    }
    if (egm__bench_parse_u64("--clients", it, 1, MAX_CLIENTS, &v) != 0)
        return -1;
    o->levels[o->n_levels++] = (int)v;
    return 0;
}

static int parse_levels(const char *text, bench_opts_t *o)
{
    o->n_levels = 0;
    if (egm__bench_each_item(text, add_level, o) != 0)
        return -1;
    if (o->n_levels == 0) {
        fprintf(stderr, "egmstore: error: --clients: a list such as 1,8,64\n");
        return -1;
    }
    return 0;
}

/* This command's own flags; the rest (config keys, --master, --config, --help)
 * is left for egm__cli_parse. */
static const egm_bench_flag_t own[] = {
    {"--clients", 1},      {"--ops", 1},       {"--batch-ops", 1},   {"--seconds", 1},
    {"--keys", 1},         {"--batch", 1},     {"--object-size", 1}, {"--segments", 1},
    {"--segment-size", 1}, {"--transport", 1}, {"--out", 1},
};

/* Which of --ops/--batch-ops and --seconds were given (parse_opts). */
typedef struct {
    bench_opts_t *o;
    int have_ops, have_seconds;
} meta_flags_t;

/* One of own[] with its value; 0, or -1 after printing why. */
static int apply_flag(void *arg, const char *name, const char *value)
{
    meta_flags_t *m = arg;
    bench_opts_t *o = m->o;
    uint64_t v;
    int rc = 0;
    if (strcmp(name, "--clients") == 0) {
        rc = parse_levels(value, o);
    } else if (strcmp(name, "--ops") == 0) {
        rc = egm__bench_parse_u64(name, value, 1, 1000000000ull, &o->ops);
        m->have_ops = 1;
    } else if (strcmp(name, "--batch-ops") == 0) {
        rc = egm__bench_parse_u64(name, value, 1, 1000000000ull, &o->batch_ops);
        m->have_ops = 1;
    } else if (strcmp(name, "--seconds") == 0) {
        char *end = NULL;
        m->have_seconds = 1;
        o->seconds = strtod(value, &end);
        if (value[0] == '\0' || *end != '\0' || !(o->seconds > 0 && o->seconds <= 3600)) {
            fprintf(stderr, "egmstore: error: --seconds: \"%s\", must be in (0, 3600]\n", value);
            rc = -1;
        }
    } else if (strcmp(name, "--keys") == 0) {
        rc = egm__bench_parse_u64(name, value, 1, 100000000ull, &o->keys);
    } else if (strcmp(name, "--batch") == 0) {
        rc = egm__bench_parse_u64(name, value, 1, MAX_BATCH, &v);
        o->batch = (int)v;
    } else if (strcmp(name, "--object-size") == 0) {
        rc = egm__bench_parse_size(name, value, 1, &o->object_size);
    } else if (strcmp(name, "--segments") == 0) {
        rc = egm__bench_parse_u64(name, value, 1, EGM_MOUNT_MAX_SEGMENTS, &v);
        o->segments = (int)v;
    } else if (strcmp(name, "--segment-size") == 0) {
        rc = egm__bench_parse_size(name, value, 4096, &o->segment_size);
    } else if (strcmp(name, "--transport") == 0) {
        if (strcmp(value, "auto") != 0 && strcmp(value, "tcp") != 0) {
            fprintf(stderr, "egmstore: error: --transport: \"%s\", must be auto or tcp\n", value);
            rc = -1;
        }
        o->tcp = strcmp(value, "tcp") == 0;
    } else {
        o->out = value;
    }
    return rc != 0 ? -1 : 0;
}

/* Takes this command's own flags out of argv; the rest goes to *rest for egm__cli_parse. */
static int parse_opts(int argc, char **argv, void *opts, char **rest, int *n_rest)
{
    meta_flags_t m = {.o = opts};
    bench_opts_t *o = opts;
    if (egm__bench_take_flags(argc, argv, own, sizeof(own) / sizeof(own[0]), apply_flag, &m, rest,
                              n_rest) != 0)
        return -1;
    if (m.have_ops && m.have_seconds) {
        fprintf(stderr,
                "egmstore: error: --ops/--batch-ops and --seconds: give one or the other\n");
        return -1;
    }
    /* A number of calls only when asked: 20000 single-key calls last 0.1-1 s
     * and 1250 batch calls even less, too short for a steady figure. */
    if (m.have_ops)
        o->seconds = 0;
    if (o->batch_ops == 0)
        o->batch_ops = o->ops / 16 ? o->ops / 16 : 1;
    if (o->object_size > o->segment_size) {
        fprintf(stderr, "egmstore: error: --object-size: larger than --segment-size\n");
        return -1;
    }
    return 0;
}

/* ---- the command ---------------------------------------------------------- */

static void *master_main(void *arg)
{
    egm__master_run(arg);
    return NULL;
}

/* "unix" when the client library would reach the master through its local
 * socket (same host), else "tcp". */
static const char *probe_transport(const bench_t *b, const char *addr)
{
    return !b->o.tcp && egm__rpc_client_local_probe(addr, 1000) ? "unix" : "tcp";
}

static int bench_meta(egm_cli_t *cli, bench_opts_t *o)
{
    bench_t *b = egm_calloc(1, sizeof(*b), "bench");
    egm_config_t *mconfig = NULL;
    egm_master_t *master = NULL;
    pthread_t master_thread;
    int master_started = 0, rc = EGM_EXIT_FAIL, control = 0, preloaded = 0;
    char addr[300];
    const char *master_label;
    egm_status_t status;

    if (b == NULL) {
        fprintf(stderr, "egmstore: error: out of memory\n");
        return EGM_EXIT_FAIL;
    }
    b->o = *o;
    egm__bench_machine(&b->machine);
    b->tty = isatty(STDERR_FILENO);
    pthread_mutex_init(&b->ids_lock, NULL);
    pthread_mutex_init(&b->phase_lock, NULL);
    pthread_cond_init(&b->go, NULL);
    pthread_cond_init(&b->done, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (!EGM_CONFIG_IS_SET(cli->config, log_level))
        egm__log_set_level(EGM_LOG_WARN);

    if (EGM_CONFIG_IS_SET(cli->config, master_server_addr)) {
        snprintf(addr, sizeof(addr), "%s", egm__config_settings(cli->config)->master_server_addr);
        master_label = addr;
    } else {
        status = egm_config_copy(cli->config, &mconfig);
        if (status == EGM_OK)
            status = egm_config_set(mconfig, "port", "0");
        if (status == EGM_OK)
            status = egm_config_set(mconfig, "listen_address", "127.0.0.1");
        if (status == EGM_OK)
            status = egm__master_create(mconfig, &master);
        if (status != EGM_OK) {
            egm__cli_error("bench master", status);
            goto out;
        }
        if (pthread_create(&master_thread, NULL, master_main, master) != 0) {
            fprintf(stderr, "egmstore: error: starting the master thread\n");
            goto out;
        }
        master_started = 1;
        snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)egm__master_port(master));
        master_label = "embedded";
    }
    status = egm__config_auth_token(cli->config, b->auth_token, sizeof(b->auth_token));
    if (status != EGM_OK) {
        egm__cli_error("bench", status);
        goto out;
    }
    b->rpc_params = (egm_rpc_client_params_t){
        .addr = addr,
        .connect_timeout_ms = (int)egm__config_settings(cli->config)->connect_timeout_ms,
        .max_frame_size = egm__config_settings(cli->config)->max_frame_size,
        .prefer_local_socket = !o->tcp,
        .auth_token = b->auth_token,
    };
    b->timeout_ms = (int)egm__config_settings(cli->config)->rpc_timeout_ms;
    b->ping_interval_ms = (int)egm__config_settings(cli->config)->ping_interval_ms;
    b->owner = egm__id_random();
    snprintf(b->prefix, sizeof(b->prefix), "bench-%08llx",
             (unsigned long long)(egm__id_random().lo & 0xffffffffu));
    const char *transport = probe_transport(b, addr);
    char where[600];
    snprintf(where, sizeof(where), "master %s (%s), %s transport, keys %s/0..%llu", addr,
             master_started ? "in this process" : "external", transport, b->prefix,
             (unsigned long long)o->keys - 1);
    progress(b, "%s", where);

    status = worker_init(b, &b->control, -1);
    control = 1;
    if (status == EGM_OK)
        status = mount_fake_segments(b);
    if (status != EGM_OK) {
        egm__cli_error("mounting the fake segments", status);
        goto out;
    }
    set_ping_ids(b, NULL, 0);
    if (pthread_create(&b->pinger, NULL, pinger_main, b) != 0) {
        fprintf(stderr, "egmstore: error: starting the pinger thread\n");
        goto out;
    }
    b->pinger_started = 1;
    preloaded = 1;
    status = preload(b, 0);
    if (status != EGM_OK) {
        egm__cli_error("preloading keys", status);
        goto out;
    }
    for (int l = 0; l < o->n_levels; l++) {
        status = run_level(b, o->levels[l]);
        if (status != EGM_OK) {
            egm__cli_error("bench", status);
            goto out;
        }
    }
    print_table(b, where);
    rc = EGM_EXIT_OK;
    for (size_t i = 0; i < b->n_results; i++)
        if (b->results[i].errors > 0)
            rc = EGM_EXIT_FAIL;
    if (atomic_load(&b->ping_failures) > 0)
        fprintf(stderr, "bench: warning: %d pings failed\n", atomic_load(&b->ping_failures));
    if (o->out != NULL) {
        status = write_json(b, o->out, master_label, transport);
        if (status != EGM_OK) {
            egm__cli_error("writing the results", status);
            rc = EGM_EXIT_FAIL;
        } else {
            fprintf(stderr, "bench: wrote %s\n", o->out);
        }
    }
    if (rc != EGM_EXIT_OK)
        fprintf(stderr, "egmstore: error: some calls failed (see above)\n");

out:
    if (preloaded && (status = preload(b, 1)) != EGM_OK) {
        egm__cli_error("removing the preloaded keys", status);
        rc = EGM_EXIT_FAIL;
    }
    if (b->mounted && (status = unmount_fake_segments(b)) != EGM_OK) {
        egm__cli_error("unmounting the fake segments", status);
        rc = EGM_EXIT_FAIL;
    }
    if (b->pinger_started) {
        atomic_store(&b->stop_pinger, 1);
        pthread_join(b->pinger, NULL);
    }
    if (control)
        worker_cleanup(&b->control);
    if (master_started) {
        egm__master_stop(master);
        pthread_join(master_thread, NULL);
    }
    egm__master_destroy(master);
    egm_config_destroy(mconfig);
    egm_free(b->segment_ids);
    pthread_mutex_destroy(&b->ids_lock);
    pthread_mutex_destroy(&b->phase_lock);
    pthread_cond_destroy(&b->go);
    pthread_cond_destroy(&b->done);
    egm_free(b);
    return rc;
}

int egm__bench_meta(int argc, char **argv)
{
    bench_opts_t o = {
        .levels = {1, 8, 64},
        .n_levels = 3,
        .ops = 20000,
        .seconds = 1,
        .keys = 100000,
        .batch = 128,
        .object_size = 4096,
        .segments = 64,
        .segment_size = 1ull << 30,
    };
    egm_cli_t cli;
    int rc;

    if (!egm__bench_cli(argc, argv, "meta", egm__bench_meta_usage, parse_opts, &o, &cli, &rc))
        return rc;
    rc = bench_meta(&cli, &o);
    egm__cli_cleanup(&cli);
    return rc;
}
