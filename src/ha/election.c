/* Leader election through etcd (see election.h). */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "ha/election.h"
#include "ha/etcd.h"

struct egm_election {
    egm_election_params_t params;
    char *key, *value;
    egm_etcd_t *etcd;
    pthread_t thread;
    pthread_mutex_t lock; /* leader_addr, leader_epoch; the stop flag's wait */
    pthread_cond_t cond;
    bool stopping, resign;
    /* Leading until this monotonic time (ms); 0: not leading. */
    _Atomic uint64_t leading_until;
    _Atomic int64_t epoch;
    _Atomic uint64_t wins, losses;
    char leader_addr[512];
    int64_t leader_epoch;
    int64_t lease;
    char *member_key;      /* members_prefix + value; NULL = not listed */
    int64_t member_lease;  /* 0 until listed (again) */
    uint64_t member_renew; /* when to renew it next (now_ms) */
};

/* Lists this candidate (or renews its listing) when due. Best effort: a
 * failure is tried again at the next round. */
static void keep_member(egm_election_t *e)
{
    uint64_t now = egm__now_ms();
    if (e->member_key == NULL || now < e->member_renew)
        return;
    int64_t ttl;
    if (e->member_lease != 0 &&
        egm__etcd_lease_keepalive(e->etcd, e->member_lease, &ttl) == EGM_ERR_NOT_FOUND)
        e->member_lease = 0;
    if (e->member_lease == 0) {
        int64_t lease;
        if (egm__etcd_lease_grant(e->etcd, e->params.ttl_s, &lease, NULL) != EGM_OK)
            return;
        if (egm__etcd_put(e->etcd, e->member_key, e->value, strlen(e->value), lease) != EGM_OK) {
            egm__etcd_lease_revoke(e->etcd, lease);
            return;
        }
        e->member_lease = lease;
    }
    e->member_renew = now + (uint64_t)e->params.ttl_s * 1000 / 3;
}

void egm__election_master_key(const char *cluster_id, char *key, size_t len)
{
    snprintf(key, len, "egmstore/%s/master/leader", cluster_id);
}

void egm__election_members_prefix(const char *cluster_id, char *prefix, size_t len)
{
    snprintf(prefix, len, "egmstore/%s/master/members/", cluster_id);
}

static void set_leader(egm_election_t *e, const egm_etcd_kv_t *kv)
{
    pthread_mutex_lock(&e->lock);
    if (kv == NULL) {
        e->leader_addr[0] = '\0';
        e->leader_epoch = 0;
    } else {
        snprintf(e->leader_addr, sizeof(e->leader_addr), "%.*s", (int)kv->len, kv->value);
        e->leader_epoch = kv->create_revision;
    }
    pthread_mutex_unlock(&e->lock);
}

/* Sleeps ms unless stopped meanwhile; answers whether stopping. */
static bool pause_ms(egm_election_t *e, uint64_t ms)
{
    pthread_mutex_lock(&e->lock);
    uint64_t until = egm__now_ms() + ms;
    while (!e->stopping) {
        uint64_t now = egm__now_ms();
        if (now >= until)
            break;
        struct timespec ts;
        egm__deadline_in(&ts, until - now);
        pthread_cond_timedwait(&e->cond, &e->lock, &ts);
    }
    bool stopping = e->stopping;
    pthread_mutex_unlock(&e->lock);
    return stopping;
}

/* The time a lease renewed at sent_ms for ttl_s seconds may end at the
 * earliest, by our clock, less a margin for clock rates. */
static uint64_t fence(uint64_t sent_ms, int64_t ttl_s)
{
    uint64_t ttl_ms = (uint64_t)ttl_s * 1000, margin = ttl_ms / 10 > 100 ? ttl_ms / 10 : 100;
    return sent_ms + ttl_ms - margin;
}

static void stop_leading(egm_election_t *e, const char *why)
{
    if (atomic_exchange(&e->leading_until, 0) == 0)
        return;
    atomic_fetch_add(&e->losses, 1);
    egm_warn("election %s: no longer leading (epoch %lld): %s", e->key,
             (long long)atomic_load(&e->epoch), why);
    if (e->params.on_change != NULL)
        e->params.on_change(e->params.arg, false, atomic_load(&e->epoch));
}

/* One campaign round: the key absent, try to take it. */
static void campaign(egm_election_t *e)
{
    uint64_t sent = egm__now_ms();
    int64_t lease, ttl;
    if (egm__etcd_lease_grant(e->etcd, e->params.ttl_s, &lease, &ttl) != EGM_OK) {
        egm_log_ratelimited(EGM_LOG_WARN, 1, "election %s: lease grant: %s", e->key,
                            egm_last_error());
        return;
    }
    bool created = false;
    egm_etcd_kv_t kv;
    egm_status_t s =
        egm__etcd_create_key(e->etcd, e->key, e->value, strlen(e->value), lease, &created, &kv);
    if (s != EGM_OK || !created) {
        egm__etcd_lease_revoke(e->etcd, lease);
        if (s == EGM_OK) {
            set_leader(e, &kv);
            egm__etcd_kv_cleanup(&kv);
        }
        return;
    }
    e->lease = lease;
    atomic_store(&e->epoch, kv.create_revision);
    set_leader(e, &kv);
    egm__etcd_kv_cleanup(&kv);
    atomic_store(&e->leading_until, fence(sent, ttl));
    atomic_fetch_add(&e->wins, 1);
    egm_info("election %s: leading, epoch %lld (lease %llx, TTL %lld s)", e->key,
             (long long)atomic_load(&e->epoch), (unsigned long long)lease, (long long)ttl);
    if (e->params.on_change != NULL)
        e->params.on_change(e->params.arg, true, atomic_load(&e->epoch));
}

/* One round as leader: renew the lease, check the key is still ours. */
static void renew(egm_election_t *e)
{
    uint64_t sent = egm__now_ms();
    int64_t ttl;
    egm_status_t s = egm__etcd_lease_keepalive(e->etcd, e->lease, &ttl);
    if (s == EGM_OK && egm__now_ms() >= atomic_load(&e->leading_until)) {
        /* Answered only after the fence passed (etcd stalled): this leader has
         * already stopped serving, and does not come back at the same epoch. */
        egm__etcd_lease_revoke(e->etcd, e->lease);
        stop_leading(e, "the lease was renewed only after its fence had passed");
        return;
    }
    if (s == EGM_OK) {
        egm_etcd_kv_t kv;
        s = egm__etcd_get(e->etcd, e->key, &kv, NULL);
        if (s == EGM_OK && kv.create_revision != atomic_load(&e->epoch)) {
            set_leader(e, &kv);
            s = EGM_ERR_NOT_FOUND;
        }
        if (s == EGM_OK)
            egm__etcd_kv_cleanup(&kv);
        if (s == EGM_ERR_NOT_FOUND) {
            egm__etcd_lease_revoke(e->etcd, e->lease);
            stop_leading(e, "the leader key is gone or another's");
            return;
        }
    }
    if (s == EGM_OK) {
        atomic_store(&e->leading_until, fence(sent, ttl));
        return;
    }
    if (s == EGM_ERR_NOT_FOUND) {
        stop_leading(e, "the lease expired");
        return;
    }
    egm_log_ratelimited(EGM_LOG_WARN, 1, "election %s: renewing: %s", e->key, egm_last_error());
    if (egm__now_ms() >= atomic_load(&e->leading_until))
        stop_leading(e, "etcd unreachable for the whole lease");
}

static void *run(void *arg)
{
    egm_election_t *e = arg;
    uint64_t poll = (uint64_t)e->params.poll_ms;
    uint64_t renew_every = (uint64_t)e->params.ttl_s * 1000 / 3;
    for (;;) {
        uint64_t until = atomic_load(&e->leading_until);
        if (until != 0 && egm__now_ms() >= until)
            stop_leading(e, "lease not renewed in time");
        keep_member(e);
        if (atomic_load(&e->leading_until) != 0) {
            renew(e);
            if (pause_ms(e, atomic_load(&e->leading_until) != 0 ? renew_every : 0))
                break;
            continue;
        }
        egm_etcd_kv_t kv;
        egm_status_t s = egm__etcd_get(e->etcd, e->key, &kv, NULL);
        if (s == EGM_ERR_NOT_FOUND) {
            set_leader(e, NULL);
            if (e->params.may_campaign == NULL || e->params.may_campaign(e->params.arg))
                campaign(e);
        } else if (s == EGM_OK) {
            set_leader(e, &kv);
            egm__etcd_kv_cleanup(&kv);
        } else {
            egm_log_ratelimited(EGM_LOG_WARN, 1, "election %s: reading the leader: %s", e->key,
                                egm_last_error());
        }
        if (atomic_load(&e->leading_until) == 0 && pause_ms(e, poll))
            break;
    }
    if (atomic_load(&e->leading_until) != 0) {
        int64_t epoch = atomic_load(&e->epoch);
        atomic_store(&e->leading_until, 0);
        if (e->resign) {
            egm__etcd_delete_if(e->etcd, e->key, epoch, NULL);
            egm__etcd_lease_revoke(e->etcd, e->lease);
            egm_info("election %s: resigned (epoch %lld)", e->key, (long long)epoch);
        }
    }
    if (e->resign && e->member_lease != 0)
        egm__etcd_lease_revoke(e->etcd, e->member_lease);
    return NULL;
}

egm_status_t egm__election_start(const egm_election_params_t *params, egm_election_t **e_p)
{
    if (params->key == NULL || params->key[0] == '\0' || params->value == NULL ||
        params->value[0] == '\0')
        return egm__set_error(EGM_ERR_CONFIG, "election: empty key or value");
    if (params->ttl_s < 2 || params->ttl_s > 3600)
        return egm__set_error(EGM_ERR_CONFIG, "election: ttl %d s is outside 2..3600",
                              params->ttl_s);
    egm_election_t *e = egm_calloc(1, sizeof(*e), "election");
    if (e == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "election");
    e->params = *params;
    if (e->params.poll_ms <= 0)
        e->params.poll_ms = params->ttl_s * 1000 / 8;
    e->key = egm_strdup(params->key, "election.key");
    e->value = egm_strdup(params->value, "election.value");
    if (params->members_prefix != NULL && e->value != NULL) {
        size_t n = strlen(params->members_prefix) + strlen(params->value) + 1;
        e->member_key = egm_malloc(n, "election.key");
        if (e->member_key != NULL)
            snprintf(e->member_key, n, "%s%s", params->members_prefix, params->value);
    }
    e->params.members_prefix = NULL; /* not kept: member_key is */
    egm_status_t s = e->key && e->value && (params->members_prefix == NULL || e->member_key)
                         ? EGM_OK
                         : egm__set_error(EGM_ERR_NO_MEMORY, "election key");
    if (s == EGM_OK)
        s = egm__etcd_create(params->endpoints, params->ttl_s * 1000 / 3, &e->etcd);
    if (s != EGM_OK)
        goto err;
    pthread_mutex_init(&e->lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&e->cond, &ca);
    pthread_condattr_destroy(&ca);
    if (pthread_create(&e->thread, NULL, run, e) != 0) {
        s = egm__set_error(EGM_ERR_INTERNAL, "election: no thread");
        pthread_cond_destroy(&e->cond);
        pthread_mutex_destroy(&e->lock);
        goto err;
    }
    *e_p = e;
    return EGM_OK;
err:
    egm__etcd_destroy(e->etcd);
    egm_free(e->key);
    egm_free(e->value);
    egm_free(e->member_key);
    egm_free(e);
    return s;
}

static void finish(egm_election_t *e, bool resign)
{
    if (e == NULL)
        return;
    pthread_mutex_lock(&e->lock);
    e->stopping = true;
    e->resign = resign;
    pthread_cond_broadcast(&e->cond);
    pthread_mutex_unlock(&e->lock);
    pthread_join(e->thread, NULL);
    egm__etcd_destroy(e->etcd);
    pthread_cond_destroy(&e->cond);
    pthread_mutex_destroy(&e->lock);
    egm_free(e->key);
    egm_free(e->value);
    egm_free(e->member_key);
    egm_free(e);
}

void egm__election_stop(egm_election_t *e)
{
    finish(e, true);
}

void egm__election_abandon(egm_election_t *e)
{
    finish(e, false);
}

bool egm__election_leading(const egm_election_t *e, int64_t *epoch_p)
{
    uint64_t until = atomic_load(&((egm_election_t *)e)->leading_until);
    if (until == 0 || egm__now_ms() >= until)
        return false;
    if (epoch_p != NULL)
        *epoch_p = atomic_load(&((egm_election_t *)e)->epoch);
    return true;
}

uint64_t egm__election_fence_ms(const egm_election_t *e)
{
    return atomic_load(&((egm_election_t *)e)->leading_until);
}

egm_status_t egm__election_leader(egm_election_t *e, char *addr, size_t len, int64_t *epoch_p)
{
    pthread_mutex_lock(&e->lock);
    egm_status_t s = e->leader_addr[0] ? EGM_OK : EGM_ERR_NOT_FOUND;
    if (s == EGM_OK) {
        snprintf(addr, len, "%s", e->leader_addr);
        if (epoch_p != NULL)
            *epoch_p = e->leader_epoch;
    }
    pthread_mutex_unlock(&e->lock);
    return s;
}

uint64_t egm__election_wins(const egm_election_t *e)
{
    return atomic_load(&((egm_election_t *)e)->wins);
}

uint64_t egm__election_losses(const egm_election_t *e)
{
    return atomic_load(&((egm_election_t *)e)->losses);
}
