/* The leader's side of the state handover (replication.h): one thread finds
 * the standbys, one thread per standby sends it a snapshot, then the
 * journal. */
#include "master/replication.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "ha/election.h"
#include "ha/etcd.h"
#include "master/journal.h"
#include "master/mirror.h"
#include "rpc/client.h"
#include "rpc/command.h"
#include "rpc/proto_util.h"

#define EGM_REPL_STANDBYS_MAX 16
#define EGM_REPL_ADDR_MAX 300
#define EGM_REPL_BATCH_MAX (4u << 20) /* journal bytes in one HaApply (or max_frame_size / 2) */
/* A sender polls this long for the standby's answer before it sleeps: the
 * answer of a small batch usually comes sooner, and a thread woken from
 * sleep adds several microseconds to every change a request waits for.
 * Only on a host of EGM_REPL_SPIN_MIN_CPUS or more: on a 2-vCPU VM the
 * polling sender took 8 clients' 4 KiB puts from 0.81 of HA off to 0.74. */
#define EGM_REPL_SPIN_US 50
#define EGM_REPL_SPIN_MIN_CPUS 8
#define EGM_REPL_DISCOVER_MS 250 /* how often the leader lists the masters */
/* A sender with nothing to send looks again after this long, doubling while
 * nothing comes, up to EGM_REPL_IDLE_MAX_MS. Nobody wakes it for a Commit the
 * pool describes (nothing waits for it): such ops reach the standby within
 * this long of the last batch while Commits stream. A request that waits
 * sends, or wakes the sender, itself (journal.h). */
#define EGM_REPL_IDLE_MS 1
#define EGM_REPL_IDLE_MAX_MS 100

typedef struct {
    struct egm_replication *r;
    char addr[EGM_REPL_ADDR_MAX];
    pthread_t thread;
    atomic_int done; /* its thread returned: join it, and follow it anew later */
    int used;
    uint64_t retry_at_ms;
} standby_t;

struct egm_replication {
    egm_replication_params_t p;
    char *self;
    char *token;
    char insync_key[EGM_ELECTION_KEY_MAX];
    char members_prefix[EGM_ELECTION_KEY_MAX];
    egm_etcd_t *etcd;
    pthread_mutex_t lock; /* the set, the standbys, the stats, etcd */
    pthread_cond_t cond;
    int64_t epoch; /* leading at; 0 while a standby */
    char insync[EGM_REPL_STANDBYS_MAX][EGM_REPL_ADDR_MAX];
    size_t n_insync;
    standby_t standbys[EGM_REPL_STANDBYS_MAX];
    pthread_t discover;
    int discovering;
    atomic_int stopping;
    egm_replication_stats_t stats;
    atomic_uint_least64_t bytes_sent; /* stats.bytes_total */
    /* may_lead: when this standby first found the leader gone and itself
     * not in sync, and when it was last asked. */
    uint64_t refused_since_ms, last_asked_ms;
};

int egm__replication_spin_us(int cpus)
{
    return cpus >= EGM_REPL_SPIN_MIN_CPUS ? EGM_REPL_SPIN_US : 0;
}

/* The CPUs this process may run on (1 when that cannot be read). */
static int usable_cpus(void)
{
    cpu_set_t set;
    return sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : 1;
}

void egm__replication_insync_key(const char *cluster_id, char *key, size_t len)
{
    snprintf(key, len, "egmstore/%s/master/insync", cluster_id);
}

static bool leading(const egm_replication_t *r)
{
    int64_t epoch;
    return egm__election_leading(r->p.state->election, &epoch) && epoch == r->epoch;
}

/* Writes the in-sync set as it is, retrying every 50 ms while this master
 * leads: EGM_OK once written. With r->lock, let go while waiting (a change
 * meanwhile is written by whichever write comes last). */
static egm_status_t write_insync(egm_replication_t *r)
{
    for (;;) {
        char value[EGM_REPL_STANDBYS_MAX * (EGM_REPL_ADDR_MAX + 1) + 32];
        size_t n = (size_t)snprintf(value, sizeof(value), "%lld", (long long)r->epoch);
        for (size_t i = 0; i < r->n_insync; i++)
            n += (size_t)snprintf(value + n, sizeof(value) - n, " %s", r->insync[i]);
        egm_status_t s = egm__etcd_put(r->etcd, r->insync_key, value, n, 0);
        if (s == EGM_OK || !leading(r) || atomic_load(&r->stopping))
            return s;
        egm_log_ratelimited(EGM_LOG_WARN, 1, "master: writing the in-sync set to etcd: %s",
                            egm_last_error());
        pthread_mutex_unlock(&r->lock);
        egm__sleep_ms(50);
        pthread_mutex_lock(&r->lock);
    }
}

/* Changes the set in etcd (add or remove addr): EGM_OK once written. */
static egm_status_t change_insync(egm_replication_t *r, const char *addr, int add)
{
    pthread_mutex_lock(&r->lock);
    size_t at = r->n_insync;
    for (size_t i = 0; i < r->n_insync; i++)
        if (strcmp(r->insync[i], addr) == 0)
            at = i;
    if (add && at == r->n_insync && r->n_insync < EGM_REPL_STANDBYS_MAX)
        snprintf(r->insync[r->n_insync++], EGM_REPL_ADDR_MAX, "%s", addr);
    else if (!add && at < r->n_insync) {
        memmove(&r->insync[at], &r->insync[at + 1], (r->n_insync - at - 1) * EGM_REPL_ADDR_MAX);
        r->n_insync--;
    }
    egm_status_t s = write_insync(r);
    if (s == EGM_OK) {
        r->stats.in_sync = r->n_insync;
        if (!add)
            r->stats.dropped_total++;
    }
    pthread_mutex_unlock(&r->lock);
    return s;
}

/* Journal bytes in one HaApply: well inside the frames the standby takes. */
static size_t batch_max(const egm_replication_t *r)
{
    size_t half = r->p.max_frame_size / 2;
    return half < EGM_REPL_BATCH_MAX ? half : EGM_REPL_BATCH_MAX;
}

/* One HaApply, begun: EGM_OK once its frame left, the call in *call_p. */
static egm_status_t begin_batch(egm_replication_t *r, egm_rpc_client_t *c, int reset, uint64_t from,
                                uint64_t to, const uint8_t *ops, size_t len, int timeout_ms,
                                egm_rpc_call_t **call_p)
{
    Egm__HaApplyRequest req = EGM__HA_APPLY_REQUEST__INIT;
    req.epoch = r->epoch;
    req.reset = reset;
    req.from = from;
    req.to = to;
    req.ops.data = (uint8_t *)ops;
    req.ops.len = len;
    req.leader = r->self;
    uint8_t *buf = NULL;
    size_t n = 0;
    egm_status_t s = egm__pb_pack(&req.base, &buf, &n);
    if (s != EGM_OK)
        return s;
    s = egm__rpc_begin(c, EGM_RPC_HA_APPLY, buf, n, timeout_ms, call_p);
    egm_free(buf);
    if (s == EGM_OK) /* not under r->lock: held across etcd calls, and this may be an RPC thread */
        atomic_fetch_add_explicit(&r->bytes_sent, len, memory_order_relaxed);
    return s;
}

/* The answer of a begun HaApply: EGM_OK when the standby applied it. */
static egm_status_t end_batch(egm_rpc_call_t *call)
{
    uint8_t *buf = NULL;
    size_t n = 0;
    Egm__StatusReply *reply = NULL;
    egm_status_t s = egm__rpc_end(call, &buf, &n);
    if (s == EGM_OK)
        s = egm__pb_unpack(&egm__status_reply__descriptor, buf, n, (ProtobufCMessage **)&reply);
    egm_free(buf);
    if (s == EGM_OK && reply->status != EGM_OK)
        s = egm__set_error((egm_status_t)reply->status, "%s", reply->error);
    if (reply != NULL)
        egm__rpc_msg_free(&reply->base);
    return s;
}

/* One HaApply; EGM_OK when the standby applied it. */
static egm_status_t send_batch(egm_replication_t *r, egm_rpc_client_t *c, int reset, uint64_t from,
                               uint64_t to, const uint8_t *ops, size_t len, int timeout_ms)
{
    egm_rpc_call_t *call;
    egm_status_t s = begin_batch(r, c, reset, from, to, ops, len, timeout_ms, &call);
    return s == EGM_OK ? end_batch(call) : s;
}

typedef struct {
    egm_replication_t *r;
    egm_rpc_client_t *c;
    int timeout_ms;
} sender_t;

/* The journal's sender (egm_journal_start_fn, egm_journal_end_fn): HaApply
 * calls on the standby's one connection, which it serves in order. */
static egm_status_t start_journal(void *arg, uint64_t from, uint64_t to, const uint8_t *ops,
                                  size_t len, void **call_p)
{
    const sender_t *sd = arg;
    egm_rpc_call_t *call = NULL;
    egm_status_t s = begin_batch(sd->r, sd->c, 0, from, to, ops, len, sd->timeout_ms, &call);
    *call_p = call;
    return s;
}

static egm_status_t end_journal(void *arg, void *call)
{
    (void)arg;
    return end_batch(call);
}

/* The leader's state as journal ops, and a journal follower placed right
 * after it (nothing changes in between: the master's lock exclusive). */
static egm_status_t snapshot(egm_replication_t *r, egm_jbuf_t *b, egm_journal_follower_t **f_p,
                             uint64_t *pos_p)
{
    egm_master_state_t *st = r->p.state;
    pthread_rwlock_wrlock(st->lock);
    for (size_t i = 0; i < egm__segment_table_count(st->segments); i++)
        egm__jenc_segment(b, egm__segment_table_at(st->segments, i));
    egm__objects_snapshot(st->objects, b, st->now_ms());
    egm_status_t s = b->failed ? egm__set_error(EGM_ERR_NO_MEMORY, "out of memory for a snapshot")
                               : egm__journal_follow(st->journal, f_p, pos_p);
    pthread_rwlock_unlock(st->lock);
    return s;
}

/* Sends the snapshot in batches of whole ops, the first with reset. */
static egm_status_t send_snapshot(egm_replication_t *r, egm_rpc_client_t *c, const egm_jbuf_t *b,
                                  uint64_t pos, int timeout_ms)
{
    size_t at = 0;
    int first = 1;
    do {
        size_t end = at;
        while (end < b->len) {
            size_t next = end;
            egm_jop_t op;
            if (egm__jdec_next(b->buf, b->len, &next, &op) != EGM_OK)
                return egm__set_error(EGM_ERR_INTERNAL, "snapshot: %s", egm_last_error());
            if (end > at && next - at > batch_max(r))
                break;
            end = next;
        }
        egm_status_t s = send_batch(r, c, first, pos, pos, b->buf + at, end - at, timeout_ms);
        if (s != EGM_OK)
            return s;
        first = 0;
        at = end;
    } while (at < b->len);
    return EGM_OK;
}

/* How long a standby may take to answer a batch before it is dropped: half
 * a lease (at least 500 ms), so that a change waits at most that for a
 * standby that died. */
static int batch_timeout_ms(const egm_replication_t *r)
{
    int t = r->p.ttl_s * 500;
    return t < 500 ? 500 : t;
}

/* Sends f every op not given to it yet and reads every answer (a stopping
 * leader: nothing new is journaled): EGM_OK once f acknowledged the
 * journal's end, within timeout_ms. */
static egm_status_t flush(egm_journal_t *j, egm_journal_follower_t *f, int timeout_ms)
{
    uint64_t end, confirmed, deadline = egm__now_ms() + (uint64_t)timeout_ms;
    egm__journal_marks(j, &end, &confirmed);
    while (egm__journal_follower_acked(j, f) < end) {
        egm_status_t s = egm__journal_send_next(j, f, 10);
        if (s != EGM_OK && s != EGM_ERR_TIMEOUT)
            return s;
        if (egm__now_ms() >= deadline)
            return egm__set_error(EGM_ERR_TIMEOUT,
                                  "the standby did not confirm the journal's end within %d ms",
                                  timeout_ms);
    }
    return EGM_OK;
}

static void *standby_main(void *arg)
{
    standby_t *sb = arg;
    egm_replication_t *r = sb->r;
    egm_master_state_t *st = r->p.state;
    egm_rpc_client_t *c = NULL;
    egm_journal_follower_t *f = NULL;
    egm_jbuf_t snap = {0};
    uint64_t pos = 0, sync_at = 0;
    int in_sync = 0, listed = 0, timeout = batch_timeout_ms(r);
    uint64_t idle_ms = EGM_REPL_IDLE_MS;

    egm_rpc_client_params_t cp = {.addr = sb->addr,
                                  .connect_timeout_ms = timeout,
                                  .max_frame_size = r->p.max_frame_size,
                                  /* A standby on this host: its Unix socket, not loopback TCP. */
                                  .prefer_local_socket = 1,
                                  .spin_us = egm__replication_spin_us(usable_cpus()),
                                  .auth_token = r->token,
                                  /* A lost connection lost batches in flight:
                                   * the standby starts over with a snapshot */
                                  .connect_once = 1};
    egm_status_t s = egm__rpc_client_create(&cp, &c);
    if (s == EGM_OK)
        s = snapshot(r, &snap, &f, &pos);
    if (s == EGM_OK)
        s = send_snapshot(r, c, &snap, pos, timeout);
    if (s == EGM_OK) {
        pthread_mutex_lock(&r->lock);
        r->stats.snapshots_total++;
        pthread_mutex_unlock(&r->lock);
        egm_info("master: standby %s has the state (%zu bytes); following it", sb->addr, snap.len);
    }
    egm__jbuf_free(&snap);
    sender_t sender = {.r = r, .c = c, .timeout_ms = timeout};
    if (s == EGM_OK) {
        egm__journal_set_sender(st->journal, f, start_journal, end_journal, &sender, batch_max(r));
        /* Waited for from now on: what changed since the snapshot is little,
         * and the waiting requests send it themselves, so a standby catches
         * up under any load (waiting for a quiet moment might never end). */
        sync_at = egm__journal_set_in_sync(st->journal, f);
        in_sync = 1;
    }
    while (s == EGM_OK && !atomic_load(&r->stopping) && leading(r)) {
        s = egm__journal_send_next(st->journal, f, idle_ms);
        if (s == EGM_OK) {
            idle_ms = EGM_REPL_IDLE_MS;
        } else if (s == EGM_ERR_TIMEOUT) { /* nothing new */
            s = EGM_OK;
            idle_ms = idle_ms * 2 < EGM_REPL_IDLE_MAX_MS ? idle_ms * 2 : EGM_REPL_IDLE_MAX_MS;
        }
        /* Every change answered before in_sync was set is in what it acked
         * up to sync_at; every later one waits for it: it is in sync. */
        if (s == EGM_OK && in_sync && !listed &&
            egm__journal_follower_acked(st->journal, f) >= sync_at) {
            if ((s = change_insync(r, sb->addr, 1)) == EGM_OK) {
                listed = 1;
                egm_info("master: standby %s is in sync", sb->addr);
            }
        }
    }
    if (s != EGM_OK && !atomic_load(&r->stopping))
        egm_warn("master: standby %s dropped: %s", sb->addr, egm_last_error());
    /* A leader that stops (SIGTERM: it resigns next, its RPCs already
     * ended) gives a standby in sync what it lacks and leaves it in the set,
     * so that it takes over at once rather than after 5 x ha_lease_ttl. A
     * master that no longer leads writes nothing to the set: its standbys
     * there hold every change it acknowledged, and the set may already be
     * its successor's. */
    int leads = leading(r), keep = 0;
    if (s == EGM_OK && listed && leads && atomic_load(&r->stopping) &&
        flush(st->journal, f, timeout) == EGM_OK) {
        keep = 1;
        egm_info("master: standby %s has every change: it stays in sync for the next leader",
                 sb->addr);
    }
    /* Else out of the set in etcd before any change goes on without it. */
    if (listed && leads && !keep)
        change_insync(r, sb->addr, 0);
    if (f != NULL)
        egm__journal_unfollow(st->journal, f);
    egm__rpc_client_destroy(c);
    atomic_store(&sb->done, 1);
    return NULL;
}

/* Joins the standby threads that ended; with r->lock. */
static void reap(egm_replication_t *r, uint64_t now)
{
    for (size_t i = 0; i < EGM_REPL_STANDBYS_MAX; i++) {
        standby_t *sb = &r->standbys[i];
        if (sb->used && atomic_load(&sb->done)) {
            pthread_join(sb->thread, NULL);
            sb->used = 0;
            sb->retry_at_ms = now + 1000; /* not at once: a standby failing fast */
            r->stats.standbys--;
        }
    }
}

static int followed(const egm_replication_t *r, const char *addr, uint64_t now)
{
    for (size_t i = 0; i < EGM_REPL_STANDBYS_MAX; i++)
        if (strcmp(r->standbys[i].addr, addr) == 0 &&
            (r->standbys[i].used || now < r->standbys[i].retry_at_ms))
            return 1;
    return 0;
}

static void follow(egm_replication_t *r, const char *addr)
{
    for (size_t i = 0; i < EGM_REPL_STANDBYS_MAX; i++) {
        standby_t *sb = &r->standbys[i];
        if (sb->used ||
            (sb->addr[0] != '\0' && strcmp(sb->addr, addr) != 0 && egm__now_ms() < sb->retry_at_ms))
            continue;
        snprintf(sb->addr, sizeof(sb->addr), "%s", addr);
        sb->r = r;
        atomic_store(&sb->done, 0);
        if (pthread_create(&sb->thread, NULL, standby_main, sb) != 0) {
            egm_warn("master: no thread to follow standby %s", addr);
            return;
        }
        sb->used = 1;
        r->stats.standbys++;
        return;
    }
    egm_log_ratelimited(EGM_LOG_WARN, 60, "master: more than %d standbys: %s is not followed",
                        EGM_REPL_STANDBYS_MAX, addr);
}

static void *discover_main(void *arg)
{
    egm_replication_t *r = arg;
    size_t prefix_len = strlen(r->members_prefix);
    pthread_mutex_lock(&r->lock);
    while (!atomic_load(&r->stopping)) {
        uint64_t now = egm__now_ms();
        reap(r, now);
        egm_etcd_kv_t *kvs = NULL;
        size_t n = 0;
        /* etcd is called without the lock held by the others' paths too:
         * the client is not shared while this runs (change_insync takes the
         * lock around its own calls). */
        if (leading(r) && egm__etcd_list(r->etcd, r->members_prefix, &kvs, &n) == EGM_OK) {
            for (size_t i = 0; i < n; i++) {
                const char *addr = kvs[i].key + prefix_len;
                if (strlen(kvs[i].key) > prefix_len && strcmp(addr, r->self) != 0 &&
                    !followed(r, addr, now))
                    follow(r, addr);
            }
            egm__etcd_kvs_free(kvs, n);
        }
        struct timespec ts;
        egm__deadline_in(&ts, EGM_REPL_DISCOVER_MS);
        while (!atomic_load(&r->stopping) &&
               pthread_cond_timedwait(&r->cond, &r->lock, &ts) != ETIMEDOUT)
            ;
    }
    pthread_mutex_unlock(&r->lock);
    return NULL;
}

egm_status_t egm__replication_create(const egm_replication_params_t *params,
                                     egm_replication_t **r_p)
{
    *r_p = NULL;
    egm_replication_t *r = egm_calloc(1, sizeof(*r), "master.replication");
    if (r == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory for master HA");
    r->p = *params;
    r->self = egm_strdup(params->self, "master.replication");
    r->token =
        egm_strdup(params->auth_token != NULL ? params->auth_token : "", "master.replication");
    egm__replication_insync_key(params->cluster_id, r->insync_key, sizeof(r->insync_key));
    egm__election_members_prefix(params->cluster_id, r->members_prefix, sizeof(r->members_prefix));
    egm_status_t s =
        r->self != NULL && r->token != NULL
            ? egm__etcd_create(params->etcd_endpoints, params->ttl_s * 1000 / 3, &r->etcd)
            : egm__set_error(EGM_ERR_NO_MEMORY, "out of memory for master HA");
    if (s != EGM_OK) {
        egm_free(r->self);
        egm_free(r->token);
        egm_free(r);
        return s;
    }
    pthread_mutex_init(&r->lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cond, &attr);
    pthread_condattr_destroy(&attr);
    *r_p = r;
    return EGM_OK;
}

void egm__replication_stop(egm_replication_t *r)
{
    if (r == NULL)
        return;
    pthread_mutex_lock(&r->lock);
    atomic_store(&r->stopping, 1);
    pthread_cond_broadcast(&r->cond);
    int discovering = r->discovering;
    r->discovering = 0;
    pthread_mutex_unlock(&r->lock);
    if (discovering)
        pthread_join(r->discover, NULL);
    for (size_t i = 0; i < EGM_REPL_STANDBYS_MAX; i++)
        if (r->standbys[i].used) {
            pthread_join(r->standbys[i].thread, NULL);
            r->standbys[i].used = 0;
        }
}

void egm__replication_destroy(egm_replication_t *r)
{
    if (r == NULL)
        return;
    egm__replication_stop(r);
    egm__etcd_destroy(r->etcd);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    egm_free(r->self);
    egm_free(r->token);
    egm_free(r);
}

/* Whether the set value lists this master at epoch. */
static bool listed_at(const char *value, int64_t epoch, const char *self)
{
    char *end;
    long long e = strtoll(value, &end, 10);
    if (end == value || e != epoch)
        return false;
    size_t n = strlen(self);
    for (const char *p = end; *p != '\0';) {
        while (*p == ' ')
            p++;
        size_t w = strcspn(p, " ");
        if (w == n && strncmp(p, self, n) == 0)
            return true;
        p += w;
    }
    return false;
}

bool egm__replication_may_lead(egm_replication_t *r)
{
    egm_etcd_kv_t kv;
    uint64_t now = egm__now_ms();
    egm_status_t s = egm__etcd_get(r->etcd, r->insync_key, &kv, NULL);
    if (s == EGM_ERR_NOT_FOUND)
        return true; /* a new cluster: nobody led with standbys */
    if (s != EGM_OK)
        return false;
    egm_mirror_stats_t ms;
    egm__mirror_stats(r->p.state->mirror, &ms);
    bool in_sync = ms.epoch > 0 && listed_at(kv.value, ms.epoch, r->self);
    char value[128];
    snprintf(value, sizeof(value), "%s", kv.value);
    egm__etcd_kv_cleanup(&kv);
    if (in_sync) {
        r->refused_since_ms = 0;
        return true;
    }
    uint64_t wait_ms = (uint64_t)r->p.ttl_s * 5000u;
    /* A gap in the questions: a leader came and went meanwhile. */
    if (r->refused_since_ms == 0 || now - r->last_asked_ms > (uint64_t)r->p.ttl_s * 1000u) {
        r->refused_since_ms = now;
        egm_warn("master: the leader is gone and this standby is not in its in-sync set "
                 "(etcd: \"%s\"; this standby follows epoch %lld): waiting %llu ms for one "
                 "that is before taking over without its latest state",
                 value, (long long)ms.epoch, (unsigned long long)wait_ms);
    }
    r->last_asked_ms = now;
    if (now - r->refused_since_ms < wait_ms)
        return false;
    egm_warn("master: no standby in sync took over in %llu ms: standing for leader with the "
             "state this standby has (objects committed since it fell behind are lost)",
             (unsigned long long)wait_ms);
    return true;
}

egm_status_t egm__replication_lead(egm_replication_t *r, int64_t epoch)
{
    pthread_mutex_lock(&r->lock);
    r->epoch = epoch;
    r->n_insync = 0;
    egm_status_t s = write_insync(r);
    if (s == EGM_OK && !r->discovering && !atomic_load(&r->stopping)) {
        if (pthread_create(&r->discover, NULL, discover_main, r) == 0)
            r->discovering = 1;
        else
            egm_warn("master: no thread to find the standbys: they get no state");
    }
    pthread_mutex_unlock(&r->lock);
    if (s != EGM_OK)
        return egm__set_error(EGM_ERR_UNREACHABLE,
                              "leadership ended before the in-sync set was written");
    return EGM_OK;
}

void egm__replication_stats(egm_replication_t *r, egm_replication_stats_t *stats_p)
{
    memset(stats_p, 0, sizeof(*stats_p));
    if (r == NULL)
        return;
    pthread_mutex_lock(&r->lock);
    *stats_p = r->stats;
    pthread_mutex_unlock(&r->lock);
    stats_p->bytes_total = atomic_load_explicit(&r->bytes_sent, memory_order_relaxed);
}
