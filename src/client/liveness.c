/* Client liveness: ping the master every `ping_interval_ms`, drop cached
 * mappings of segments the master retired (DESIGN.md section 3), and survive a
 * master restart: a new master id (or a view reset, our own segments retired,
 * CLIENT_NOT_FOUND) makes the ping thread resynchronise: forget every cached
 * mapping of a segment the master does not list (the old master's ids are
 * retired with it) and remount this client's segments under new ids. Until
 * that succeeds, health reports master_unreachable and it is retried on every
 * ping. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "client/client_int.h"
#include "client/slabs.h"
#include "common/alloc.h"
#include "common/config_int.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/sock.h"
#include "cuda/driver.h"
#include "rpc/frame.h"
#include "rpc/proto_util.h"

/* Deadline of the last ping (say_leaving), at most rpc_timeout_ms. */
#define EGM_LEAVE_TIMEOUT_MS 1000

/* Forgets the retired ids; notes when one of them is ours (the master expired
 * this client and unmounted our segments). */
static void apply_retired(egm_client_t *client, const Egm__PingReply *reply)
{
    if (reply->n_retired == 0)
        return;
    egm_id_t *ids = egm_calloc(reply->n_retired, sizeof(*ids), "client.retired");
    for (size_t i = 0; i < reply->n_retired; i++) {
        egm_id_t id = egm__id_from_pb(reply->retired[i]);
        egm__te_forget_segment(client->te, id);
        if (ids != NULL)
            ids[i] = id;
    }
    if (ids != NULL) /* a slab there takes no more objects */
        egm__wslabs_forget_segments(client->slabs, ids, reply->n_retired);
    if (ids != NULL && egm__capacity_owns_any(client, ids, reply->n_retired)) {
        client->resync_reasons |= EGM_RESYNC_OWN_RETIRED;
        client->remount_fenced = 0; /* a new loss (remount_fence) */
    }
    egm_free(ids);
}

/* EGM_OK when the master answered (CLIENT_NOT_FOUND included: it is there
 * but does not know us). Notes what calls for a resync in resync_reasons. */
static egm_status_t ping_once(egm_client_t *client)
{
    Egm__PingRequest req = EGM__PING_REQUEST__INIT;
    Egm__Id id_pb = EGM__ID__INIT;
    Egm__PingReply *reply = NULL;
    egm_status_t status;

    egm__id_to_pb(client->id, &id_pb);
    req.client = &id_pb;
    req.view = client->view;
    req.host_id = (char *)egm__host_id();
    status =
        egm__rpc_call_msg(client->master, EGM_RPC_PING, &req.base, &egm__ping_reply__descriptor,
                          (ProtobufCMessage **)&reply, client->rpc_timeout_ms);
    if (status != EGM_OK) {
        /* Cut off: the cached locations are not used past their bound anyway
         * (docs/consistency.md); dropping them now costs only round trips. */
        egm__location_cache_clear(client->locations);
        egm__wslabs_clear(client->slabs);
        return status;
    }
    status = reply->status;
    if (status == EGM_ERR_CLIENT_NOT_FOUND) {
        client->resync_reasons |= EGM_RESYNC_UNKNOWN_CLIENT;
        egm__location_cache_clear(client->locations);
        egm__wslabs_clear(client->slabs);
        status = EGM_OK;
    } else if (status == EGM_OK) {
        egm_id_t master_id = egm__id_from_pb(reply->master_id);
        /* A nil id (a master that does not send one) never counts as a change. */
        int changed = !egm__id_is_nil(master_id) && !egm__id_is_nil(client->master_id) &&
                      !egm__id_equal(master_id, client->master_id);
        /* A new master knows nothing of the leases the old one granted: no
         * location it gave may be used again. */
        if (changed || reply->view_reset) {
            egm__location_cache_clear(client->locations);
            egm__wslabs_clear(client->slabs);
        }
        if (reply->location_cache_ms > atomic_load(&client->cache_bound_max_ms))
            atomic_store(&client->cache_bound_max_ms, reply->location_cache_ms);
        if (changed) {
            /* The retired list speaks of the new master's view: meaningless
             * for ids the old one issued. The resync forgets those. */
            if (!(client->resync_reasons & EGM_RESYNC_RESTART))
                client->resync_from = client->master_id;
            client->resync_reasons |= EGM_RESYNC_RESTART;
            client->remount_fenced = 0; /* a new loss (remount_fence) */
            pthread_mutex_lock(&client->lock);
            client->master_restarts++;
            pthread_mutex_unlock(&client->lock);
        } else {
            apply_retired(client, reply);
            if (reply->view_reset)
                client->resync_reasons |= EGM_RESYNC_VIEW_RESET;
        }
        if (!egm__id_is_nil(master_id))
            client->master_id = master_id;
        client->view = reply->view;
        client->master_serving_ms = reply->serving_ms;
        client->master_serving_seen_ms = egm__now_ms();
    } else {
        egm__set_error(status, "ping refused: %s", egm_status_string(status));
    }
    egm__rpc_msg_free(&reply->base);
    return status;
}

/* The master's segment ids, sorted. */
static egm_status_t listed_segments(egm_client_t *client, egm_id_t **ids_p, size_t *n_p)
{
    Egm__ListSegmentsReply *reply = NULL;
    egm_id_t *ids = NULL;
    size_t n = 0;

    *ids_p = NULL;
    *n_p = 0;
    egm_status_t status = egm__client_list_segments(client, &reply);
    if (status != EGM_OK)
        return status;
    if (reply->n_segments > 0 &&
        (ids = egm_calloc(reply->n_segments, sizeof(*ids), "client.listed")) == NULL) {
        status = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory listing segments");
        goto out;
    }
    for (size_t i = 0; i < reply->n_segments; i++)
        if (reply->segments[i]->desc != NULL)
            ids[n++] = egm__id_from_pb(reply->segments[i]->desc->id);
    if (n > 1)
        qsort(ids, n, sizeof(*ids), egm__capacity_id_compare);
    *ids_p = ids;
    *n_p = n;
out:
    egm__rpc_msg_free(&reply->base);
    return status;
}

/* Forgets cached mappings of segments the master does not list, then
 * remounts our own that it does not list. The mappings are taken before the
 * list: a segment mounted at the master after the list cannot have been
 * mapped before it, so only ids the master no longer has are dropped. */
/* Waits ms on the client's condition (its clock is CLOCK_MONOTONIC), lock
 * held, unless the client starts closing; returns whether it is closing. */
static int wait_unless_stopping(egm_client_t *client, uint64_t ms)
{
    struct timespec deadline;
    egm__deadline_in(&deadline, ms);
    while (!client->stopping &&
           pthread_cond_timedwait(&client->cond, &client->lock, &deadline) != ETIMEDOUT)
        ;
    return client->stopping;
}

/* Before this client's capacity is mounted again (a master restarted or lost
 * it), the locations other clients cached of the objects it held must have run
 * out: they name the same memory, which the master may hand to new objects
 * once it is mounted (docs/consistency.md). Every such location was asked for
 * before the master lost the segment, so waiting the longest cache bound a
 * master told, counted from now, is enough. Once per loss: a retry of a
 * failed remount does not wait again, but a new loss seen before a retry
 * succeeds (another master id, our segments retired again) is waited for
 * anew, since a remount left without an answer may have mounted segments at
 * the master that is now lost, which handed them to objects whose locations
 * clients may have cached.
 *
 * One case waits less: the first remount at a new master (a restart or a
 * newly elected leader) with no remount attempt pending from before and no
 * segment of ours retired by that master. Every location naming our memory
 * was then asked of a master that had stopped serving before the new one
 * began (a restarted master binds the address the old one freed; an elected
 * one comes after the old leader's fence, docs/ha.md), so all have run out
 * one bound after the new master began serving: we wait only what is left of
 * it. The master's serving time is counted up to when its answer left it, so
 * what is left is overestimated, never under. Returns -1 when the client is
 * closing meanwhile. */
static int remount_fence(egm_client_t *client)
{
    uint64_t wait_ms = atomic_load(&client->cache_bound_max_ms);
    if (wait_ms == 0 || client->capacity.count == 0)
        return 0;
    unsigned reasons = client->resync_reasons;
    if ((reasons & EGM_RESYNC_RESTART) && !(reasons & EGM_RESYNC_OWN_RETIRED) &&
        !client->resync_pending) {
        uint64_t served =
            client->master_serving_ms + (egm__now_ms() - client->master_serving_seen_ms);
        wait_ms = served >= wait_ms ? 0 : wait_ms - served;
    }
    egm_debug("waiting %llu ms (location_cache_ms) before remounting", (unsigned long long)wait_ms);
    pthread_mutex_lock(&client->lock);
    int stopping = wait_unless_stopping(client, wait_ms);
    pthread_mutex_unlock(&client->lock);
    return stopping ? -1 : 0;
}

static egm_status_t resync(egm_client_t *client, size_t *dropped_p, size_t *remounted_p)
{
    egm_id_t *cached = NULL, *listed = NULL;
    size_t n_cached = 0, n_listed = 0;

    *dropped_p = 0;
    *remounted_p = 0;
    egm_status_t status = egm__te_cached_segments(client->te, &cached, &n_cached);
    if (status != EGM_OK)
        return status;
    if ((status = listed_segments(client, &listed, &n_listed)) != EGM_OK)
        goto out;
    for (size_t i = 0; i < n_cached; i++)
        if (n_listed == 0 || bsearch(&cached[i], listed, n_listed, sizeof(*listed),
                                     egm__capacity_id_compare) == NULL) {
            egm__te_forget_segment(client->te, cached[i]);
            (*dropped_p)++;
        }
    /* Once per loss: a failed remount retried at the next ping waits no more. */
    if (!client->remount_fenced && remount_fence(client) != 0) {
        status = egm__set_error(EGM_ERR_CLOSED, "the client is closing");
        goto out;
    }
    client->remount_fenced = 1;
    status = egm__capacity_remount(client, listed, n_listed, remounted_p);
out:
    egm_free(cached);
    egm_free(listed);
    return status;
}

static const char *resync_why(unsigned reasons)
{
    if (reasons & EGM_RESYNC_RESTART)
        return "master restarted";
    if (reasons & (EGM_RESYNC_OWN_RETIRED | EGM_RESYNC_UNKNOWN_CLIENT))
        return "master lost this client";
    return "master view reset";
}

/* One resync attempt; logs one line per event, and the first failure of a
 * series. Returns whether one is still pending. */
static int try_resync(egm_client_t *client)
{
    char from[EGM_ID_STRLEN], to[EGM_ID_STRLEN];
    size_t dropped = 0, remounted = 0;
    unsigned reasons = client->resync_reasons;

    egm_status_t status = resync(client, &dropped, &remounted);
    pthread_mutex_lock(&client->lock);
    client->remounts += remounted;
    int first_failure = status != EGM_OK && !client->resync_pending;
    if (status != EGM_OK)
        client->remount_failures++;
    client->resync_pending = status != EGM_OK;
    pthread_mutex_unlock(&client->lock);
    egm__id_format(client->resync_from, from);
    egm__id_format(client->master_id, to);
    if (status != EGM_OK) {
        EGM_LOG(first_failure ? EGM_LOG_WARN : EGM_LOG_DEBUG,
                "%s: resynchronising with the master failed: %s (%s); retried at the next ping, "
                "health master_unreachable until then",
                resync_why(reasons), egm_status_string(status), egm_last_error());
        return 1;
    }
    client->resync_reasons = 0;
    client->remount_fenced = 0;
    if (reasons & EGM_RESYNC_RESTART)
        egm_info("master restarted (id %s -> %s): remounted %zu segments; dropped %zu mappings of "
                 "the old master's segments",
                 from, to, remounted, dropped);
    else if (remounted == 0 && dropped == 0)
        egm_debug("master %s: resynchronised, nothing to drop or remount", to);
    else if (reasons & (EGM_RESYNC_OWN_RETIRED | EGM_RESYNC_UNKNOWN_CLIENT))
        egm_info("master %s lost this client (expired): remounted %zu segments; dropped %zu "
                 "mappings",
                 to, remounted, dropped);
    else
        egm_info("master %s: view reset: remounted %zu segments; dropped %zu mappings of segments "
                 "it no longer lists",
                 to, remounted, dropped);
    return 0;
}

/* Prewarm: map every VMM segment the master knows before a Get needs it
 * (mapping a chunk takes milliseconds, DESIGN.md 8). The engine skips what is
 * mapped already, so repeating this each ping is cheap. */
static void prewarm_segments(egm_client_t *client)
{
    Egm__ListSegmentsReply *reply = NULL;
    egm_segment_desc_t *descs = NULL;
    size_t n = 0;

    if (!egm__config_settings(client->config)->prewarm || egm__cuda_device_count() == 0)
        return;
    if (egm__client_list_segments(client, &reply) != EGM_OK)
        return;
    if (reply->n_segments > 0)
        descs = egm_calloc(reply->n_segments, sizeof(*descs), "client.prewarm");
    for (size_t i = 0; descs != NULL && i < reply->n_segments; i++)
        if (reply->segments[i]->desc != NULL &&
            egm__segment_desc_from_pb(reply->segments[i]->desc, &descs[n]) == EGM_OK)
            n++;
    if (n > 0)
        egm__te_prewarm(client->te, descs, n);
    egm_free(descs);
    egm__rpc_msg_free(&reply->base);
}

#define EGM_PING_RETRY_MS 100

static void *ping_main(void *arg)
{
    egm_client_t *client = arg;
    uint64_t interval_ms = (uint64_t)egm__config_settings(client->config)->ping_interval_ms;

    pthread_mutex_lock(&client->lock);
    while (!client->stopping) {
        /* A master that went away is looked for more often than it is
         * pinged: a restarted or newly elected one is found within 100 ms. */
        uint64_t wait_ms = client->master_reachable || interval_ms < EGM_PING_RETRY_MS
                               ? interval_ms
                               : EGM_PING_RETRY_MS;
        if (wait_unless_stopping(client, wait_ms))
            break;
        pthread_mutex_unlock(&client->lock);
        egm_status_t status = ping_once(client);
        /* A connection found broken is re-established by the next call: make
         * it now, not a ping interval later, so that a master that saw the
         * connection close has this client back well within its
         * client_disconnect_grace_ms (docs/master.md "Failure detection"). */
        if (status == EGM_ERR_UNREACHABLE)
            status = ping_once(client);
        if (status != EGM_OK) {
            char detail[512];
            snprintf(detail, sizeof(detail), "%s", egm_last_error());
            pthread_mutex_lock(&client->lock);
            if (client->master_reachable) {
                egm_warn("master unreachable: %s (%s)", egm_status_string(status), detail);
                client->master_outages++;
                client->master_lost_at_ms = egm__now_ms();
            }
            client->master_reachable = 0;
            continue; /* locked, as the loop expects */
        }
        /* Reachable again only once resynchronised: until then the new
         * master lacks our capacity. */
        int pending = client->resync_reasons != 0 ? try_resync(client) : 0;
        if (!pending)
            prewarm_segments(client);
        pthread_mutex_lock(&client->lock);
        if (!pending && !client->master_reachable && client->master_lost_at_ms != 0) {
            uint64_t ms = egm__now_ms() - client->master_lost_at_ms;
            client->master_last_outage_ms = ms;
            client->master_outage_ms_total += ms;
            client->master_lost_at_ms = 0;
            egm_info("master reachable again after %llu ms", (unsigned long long)ms);
        } else if (!pending && !client->master_reachable) {
            egm_info("master reachable again");
        }
        client->master_reachable = !pending;
    }
    pthread_mutex_unlock(&client->lock);
    return NULL;
}

egm_status_t egm__liveness_start(egm_client_t *client)
{
    egm_status_t status = ping_once(client);
    if (status != EGM_OK)
        return egm__set_error(status, "master %s: %s (%s)",
                              egm__config_settings(client->config)->master_server_addr,
                              egm_status_string(status), egm_last_error());
    client->master_reachable = 1;
    /* The first answer names the master; nothing to resynchronise yet. */
    client->resync_reasons = 0;
    /* Setup returns with the pool mapped: its first calls must not map it. */
    prewarm_segments(client);
    egm__te_prewarm_drain(client->te);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_destroy(&client->cond);
    pthread_cond_init(&client->cond, &attr);
    pthread_condattr_destroy(&attr);
    if (pthread_create(&client->ping_thread, NULL, ping_main, client) != 0)
        return egm__set_error(EGM_ERR_INTERNAL, "cannot start the ping thread");
    client->ping_started = 1;
    return EGM_OK;
}

/* The last ping: the master unregisters this client at once (unmounting what
 * it may still have) instead of expiring it after client_ttl. One try with a
 * short deadline: a master that does not answer expires it later anyway. */
static void say_leaving(egm_client_t *client)
{
    Egm__PingRequest req = EGM__PING_REQUEST__INIT;
    Egm__Id id_pb = EGM__ID__INIT;
    Egm__PingReply *reply = NULL;
    int timeout_ms = client->rpc_timeout_ms < EGM_LEAVE_TIMEOUT_MS ? client->rpc_timeout_ms
                                                                   : EGM_LEAVE_TIMEOUT_MS;

    egm__id_to_pb(client->id, &id_pb);
    req.client = &id_pb;
    req.view = client->view;
    req.leaving = 1;
    egm_status_t status =
        egm__rpc_call_msg(client->master, EGM_RPC_PING, &req.base, &egm__ping_reply__descriptor,
                          (ProtobufCMessage **)&reply, timeout_ms);
    if (status == EGM_OK)
        status = reply->status;
    if (status != EGM_OK)
        egm_debug("telling the master this client leaves: %s (%s); it expires after client_ttl",
                  egm_status_string(status), egm_last_error());
    if (reply != NULL)
        egm__rpc_msg_free(&reply->base);
}

void egm__liveness_stop(egm_client_t *client)
{
    if (!client->ping_started)
        return;
    pthread_mutex_lock(&client->lock);
    client->stopping = 1;
    pthread_cond_broadcast(&client->cond);
    pthread_mutex_unlock(&client->lock);
    pthread_join(client->ping_thread, NULL);
    client->ping_started = 0;
    /* After the join: no ping of the thread can register it again. */
    pthread_mutex_lock(&client->lock);
    int reachable = client->master_reachable;
    pthread_mutex_unlock(&client->lock);
    if (reachable)
        say_leaving(client);
}
