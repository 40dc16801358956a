/* The re-replication worker (worker.h; docs/rereplication.md). */
#include "repair/worker.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include "client/client_int.h"
#include "common/alloc.h"
#include "common/clock.h"
#include "common/config_int.h"
#include "common/log.h"
#include "common/sock.h"
#include "rpc/command.h"
#include "rpc/proto_util.h"

#define GRANT_KEYS 256               /* tasks asked for at a time */
#define GRANT_BUDGET_MS 2000u        /* ... and at most this long of copying at the pace */
#define PART_BYTES ((size_t)4 << 20) /* one bounce buffer: read a part, write it */
#define IDLE_WAIT_MS 500u            /* between asks when there is nothing to repair */
#define CONNECT_RETRY_MS 200u        /* until the master serves */
#define LEASE_MARGIN_MIN_MS 1000u    /* no copy starts this close to the lease's end */

struct egm_repair_worker {
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond; /* on CLOCK_MONOTONIC */
    int stopping;        /* under lock */
    egm_config_t *config;
    uint64_t rate; /* bytes per second */
    egm_client_t *client;
    uint8_t *buf; /* PART_BYTES */
    /* The pace: bytes copied since pace_start_ns may not run ahead of rate. */
    uint64_t pace_start_ns, pace_bytes;
};

/* Waits ms or until stopped; 1 when stopping. */
static int wait_ms(egm_repair_worker_t *w, uint64_t ms)
{
    struct timespec ts;
    egm__deadline_in(&ts, ms);
    pthread_mutex_lock(&w->lock);
    while (!w->stopping && pthread_cond_timedwait(&w->cond, &w->lock, &ts) == 0)
        ;
    int stopping = w->stopping;
    pthread_mutex_unlock(&w->lock);
    return stopping;
}

static int stopping(egm_repair_worker_t *w)
{
    pthread_mutex_lock(&w->lock);
    int s = w->stopping;
    pthread_mutex_unlock(&w->lock);
    return s;
}

/* Holds the next copy back until the bytes so far fit the pace. 1 when stopping. */
static int pace(egm_repair_worker_t *w)
{
    uint64_t due = w->pace_start_ns + (uint64_t)((double)w->pace_bytes * 1e9 / (double)w->rate);
    uint64_t now = egm__now_ns();
    return due > now ? wait_ms(w, (due - now + 999999u) / 1000000u) : stopping(w);
}

static const egm_segment_desc_t *find_desc(const egm_segment_desc_t *descs, size_t n,
                                           const Egm__Replica *r)
{
    if (r == NULL || r->segment == NULL)
        return NULL;
    egm_id_t id = egm__id_from_pb(r->segment);
    for (size_t i = 0; i < n; i++)
        if (egm__id_equal(descs[i].id, id))
            return &descs[i];
    return NULL;
}

/* Copies one task's bytes, source -> target, a part at a time. */
static egm_status_t copy_task(egm_repair_worker_t *w, const egm_segment_desc_t *src,
                              const egm_segment_desc_t *dst, const Egm__RepairTask *t)
{
    for (uint64_t done = 0; done < t->size;) {
        size_t len = t->size - done < PART_BYTES ? (size_t)(t->size - done) : PART_BYTES;
        egm_te_op_t op = {.segment = src,
                          .offset = t->source->offset + done,
                          .local = w->buf,
                          .length = len,
                          .dir = EGM_TE_READ,
                          .local_is_host = 1};
        egm_status_t status = egm__te_transfer(w->client->te, &op, 1);
        if (status != EGM_OK)
            return status;
        op = (egm_te_op_t){.segment = dst,
                           .offset = t->target->offset + done,
                           .local = w->buf,
                           .length = len,
                           .dir = EGM_TE_WRITE,
                           .local_is_host = 1};
        status = egm__te_transfer(w->client->te, &op, 1);
        if (status != EGM_OK)
            return status;
        done += len;
    }
    return EGM_OK;
}

/* One round: ask, copy, commit. *n_p: tasks granted. */
static egm_status_t round_trip(egm_repair_worker_t *w, size_t *n_p)
{
    egm_client_t *c = w->client;
    Egm__RepairGrantRequest req = EGM__REPAIR_GRANT_REQUEST__INIT;
    Egm__Id client_pb = EGM__ID__INIT;
    Egm__RepairGrantReply *reply = NULL;
    Egm__RepairCommitReply *creply = NULL;
    egm_segment_desc_t *descs = NULL;
    protobuf_c_boolean *copied = NULL;
    egm_status_t status;

    *n_p = 0;
    egm__id_to_pb(c->id, &client_pb);
    req.client = &client_pb;
    req.max_keys = GRANT_KEYS;
    req.max_bytes = w->rate * GRANT_BUDGET_MS / 1000u;
    if (req.max_bytes == 0)
        req.max_bytes = 1;
    uint64_t sent_ns = egm__now_ns();
    status = egm__rpc_call_msg(c->master, EGM_RPC_REPAIR_GRANT, &req.base,
                               &egm__repair_grant_reply__descriptor, (ProtobufCMessage **)&reply,
                               c->rpc_timeout_ms);
    if (status != EGM_OK)
        return status;
    if (reply->status != EGM_OK) {
        status = egm__set_error(reply->status, "RepairGrant refused");
        goto out;
    }
    size_t n = reply->n_tasks;
    *n_p = n;
    if (n == 0)
        goto out;
    descs = egm_calloc(reply->n_segments ? reply->n_segments : 1, sizeof(*descs), "repair.worker");
    copied = egm_calloc(n, sizeof(*copied), "repair.worker");
    if (descs == NULL || copied == NULL) {
        /* Nothing committed: the extents return at the lease's end. */
        status = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory copying repairs");
        goto out;
    }
    for (size_t i = 0; i < reply->n_segments; i++)
        if (egm__segment_desc_from_pb(reply->segments[i], &descs[i]) != EGM_OK)
            memset(&descs[i], 0, sizeof(descs[i])); /* its tasks fail below */
    uint64_t margin_ms = reply->lease_ms / 4;
    if (margin_ms < LEASE_MARGIN_MIN_MS)
        margin_ms = LEASE_MARGIN_MIN_MS;
    uint64_t last_start_ns =
        reply->lease_ms > margin_ms ? sent_ns + (reply->lease_ms - margin_ms) * 1000000u : sent_ns;
    size_t ok = 0;
    for (size_t i = 0; i < n; i++) {
        const Egm__RepairTask *t = reply->tasks[i];
        const egm_segment_desc_t *src = find_desc(descs, reply->n_segments, t->source);
        const egm_segment_desc_t *dst = find_desc(descs, reply->n_segments, t->target);
        if (pace(w))
            break; /* stopping: the rest is reported not copied */
        if (egm__now_ns() > last_start_ns)
            break; /* too close to the lease's end to start a copy */
        if (src == NULL || dst == NULL || t->size == 0)
            continue;
        egm_status_t s = copy_task(w, src, dst, t);
        w->pace_bytes += t->size;
        if (s == EGM_OK) {
            copied[i] = 1;
            ok++;
        } else {
            egm_log_ratelimited(EGM_LOG_WARN, 10, "re-replication: copying %s from %s to %s: %s",
                                t->key, src->name, dst->name, egm_last_error());
        }
    }
    Egm__RepairCommitRequest creq = EGM__REPAIR_COMMIT_REQUEST__INIT;
    creq.client = &client_pb;
    creq.n_tasks = n;
    creq.tasks = reply->tasks;
    creq.n_copied = n;
    creq.copied = copied;
    status = egm__rpc_call_msg(c->master, EGM_RPC_REPAIR_COMMIT, &creq.base,
                               &egm__repair_commit_reply__descriptor, (ProtobufCMessage **)&creply,
                               c->rpc_timeout_ms);
    if (status == EGM_OK) {
        size_t committed = 0;
        for (size_t i = 0; i < creply->n_results; i++)
            committed += creply->results[i] == EGM_OK;
        egm_debug("re-replication: %zu tasks, %zu copied, %zu committed", n, ok, committed);
    }
out:
    egm_free(descs);
    egm_free(copied);
    if (creply != NULL)
        egm__rpc_msg_free(&creply->base);
    if (reply != NULL)
        egm__rpc_msg_free(&reply->base);
    return status;
}

static void *worker_main(void *arg)
{
    egm_repair_worker_t *w = arg;

    while (w->client == NULL) {
        if (egm_client_create(w->config, &w->client) == EGM_OK)
            break;
        w->client = NULL;
        if (wait_ms(w, CONNECT_RETRY_MS))
            return NULL;
    }
    egm_info("re-replication: worker connected (at most %llu bytes/s)",
             (unsigned long long)w->rate);
    w->pace_start_ns = egm__now_ns();
    while (!stopping(w)) {
        size_t n = 0;
        egm_status_t status = round_trip(w, &n);
        if (status != EGM_OK)
            egm_log_ratelimited(EGM_LOG_WARN, 10, "re-replication: %s", egm_last_error());
        if (n == 0) {
            if (wait_ms(w, IDLE_WAIT_MS))
                break;
            /* Idle time earns no credit: the pace starts again. */
            w->pace_start_ns = egm__now_ns();
            w->pace_bytes = 0;
        }
    }
    return NULL;
}

/* The master's address as its own client reaches it. */
static void master_addr(const egm_settings_t *s, uint16_t port, char *buf, size_t len)
{
    const char *host = s->listen_address;
    if (host == NULL || host[0] == '\0' || strcmp(host, "0.0.0.0") == 0)
        host = "127.0.0.1";
    else if (strcmp(host, "::") == 0 || strcmp(host, "[::]") == 0)
        host = "::1";
    egm__sock_format_hostport(host, port, buf, len);
}

static egm_status_t worker_config(const egm_repair_worker_params_t *p, egm_config_t **config_p)
{
    char addr[300], token[EGM_AUTH_TOKEN_MAX + 1];
    egm_config_t *config = NULL;
    egm_status_t status = egm_config_create(&config);

    master_addr(egm__config_settings(p->master_config), p->port, addr, sizeof(addr));
    if (status == EGM_OK)
        status = egm_config_set(config, "master_server_addr", addr);
    if (status == EGM_OK)
        status = egm_config_set(config, "log_level", egm_config_get(p->master_config, "log_level"));
    if (status == EGM_OK)
        status = egm__config_auth_token(p->master_config, token, sizeof(token));
    if (status == EGM_OK && token[0] != '\0')
        status = egm_config_set(config, "auth_token", token);
    egm__secure_zero(token, sizeof(token));
    /* A plain copier: no capacity, no slabs, no cached locations, no prewarm. */
    /* Its calls are small and answered at once; a short deadline keeps a
     * master that stopped serving (leadership lost) from holding its exit. */
    const char *const pairs[][2] = {{"rpc_timeout_ms", "2000"},
                                    {"global_segment_size", "0"},
                                    {"slab_bytes", "0"},
                                    {"location_cache_entries", "0"},
                                    {"prewarm", "false"}};
    for (size_t i = 0; status == EGM_OK && i < sizeof(pairs) / sizeof(pairs[0]); i++)
        status = egm_config_set(config, pairs[i][0], pairs[i][1]);
    if (status != EGM_OK) {
        egm_config_destroy(config);
        return status;
    }
    *config_p = config;
    return EGM_OK;
}

egm_status_t egm__repair_worker_start(const egm_repair_worker_params_t *params,
                                      egm_repair_worker_t **worker_p)
{
    egm_repair_worker_t *w = egm_calloc(1, sizeof(*w), "repair.worker");
    egm_status_t status;

    *worker_p = NULL;
    if (w == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory starting re-replication");
    w->rate = params->bytes_per_sec;
    w->buf = egm_malloc(PART_BYTES, "repair.worker");
    if (w->buf == NULL) {
        egm_free(w);
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory starting re-replication");
    }
    status = worker_config(params, &w->config);
    if (status != EGM_OK) {
        egm_free(w->buf);
        egm_free(w);
        return status;
    }
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&w->cond, &attr);
    pthread_condattr_destroy(&attr);
    pthread_mutex_init(&w->lock, NULL);
    int rc = pthread_create(&w->thread, NULL, worker_main, w);
    if (rc != 0) {
        status =
            egm__set_error(egm__status_from_errno(rc), "starting re-replication: %s", strerror(rc));
        pthread_cond_destroy(&w->cond);
        pthread_mutex_destroy(&w->lock);
        egm_config_destroy(w->config);
        egm_free(w->buf);
        egm_free(w);
        return status;
    }
    *worker_p = w;
    return EGM_OK;
}

void egm__repair_worker_stop(egm_repair_worker_t *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->lock);
    w->stopping = 1;
    pthread_cond_broadcast(&w->cond);
    pthread_mutex_unlock(&w->lock);
    pthread_join(w->thread, NULL);
    egm_client_destroy(w->client);
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->lock);
    egm_config_destroy(w->config);
    egm_free(w->buf);
    egm_free(w);
}
