/* The master process object: config, the RPC threads (each a reactor and an
 * RPC server; the first server owns the listening sockets, the others are its
 * peers), the periodic timer on the first reactor, the admin HTTP. */
#include "master/master.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "admin/http_server.h"
#include "common/alloc.h"
#include "common/clock.h"
#include "common/config_int.h"
#include "common/log.h"
#include "common/reactor.h"
#include "common/sock.h"
#include "ha/election.h"
#include "master/admin.h"
#include "master/journal.h"
#include "master/master_int.h"
#include "master/metrics.h"
#include "master/mirror.h"
#include "master/replication.h"
#include "rpc/frame.h"
#include "rpc/server.h"

typedef struct {
    egm_master_t *master;
    size_t index;
} rpc_thread_t;

struct egm_master {
    /* RPC thread i runs reactors[i], which serves servers[i]; thread 0 is the
     * caller of egm__master_run and also runs the tick. */
    size_t n_threads;
    egm_reactor_t **reactors;
    egm_rpc_server_t **servers;
    pthread_t *threads; /* [i] runs reactors[i], for i >= 1 */
    rpc_thread_t *thread_args;
    egm_master_state_t state;
    int state_ready;
    /* The state lock (master_int.h): RPC threads hold it shared or
     * exclusive by request type, the tick and the admin HTTP thread
     * exclusive. The HTTP server stops before anything it reads. */
    pthread_rwlock_t lock;
    int lock_ready;
    egm_master_metrics_t metrics;
    egm_master_admin_t admin;
    egm_http_server_t *http;
    uint64_t timer_id;
    int timer_added;
    uint16_t port;
    egm_election_t *election; /* enable_ha */
    _Atomic int deposed;      /* lost the leadership it had: the process exits */
    /* enable_ha: the state handover (docs/ha.md): the journal of changes for
     * the standbys, a standby's mirror of the leader's, and the leader's
     * side that sends the one to the others. */
    egm_journal_t *journal;
    egm_mirror_t *mirror;
    egm_replication_t *replication;
    egm_pool_reader_t pool_reader; /* under `lock` */
};

void egm__master_set_pool_reader(egm_master_t *master, const egm_pool_reader_t *reader)
{
    pthread_rwlock_wrlock(&master->lock);
    master->pool_reader = *reader;
    pthread_rwlock_unlock(&master->lock);
}

static void on_tick(egm_reactor_t *reactor, void *arg)
{
    egm_master_t *master = arg;
    (void)reactor;
    egm__master_state_tick(&master->state, master->state.now_ms()); /* takes the lock */
    egm__journal_expire(master->state.journal); /* held replies whose wait ran out */
}

/* http_port: -1 off, 0 any free port. The default port (9003) being taken is
 * only a warning, so that several masters can share a host; a port asked
 * for explicitly must be had. With a cluster token, the admin HTTP requires
 * it as a bearer token on every path but /health and /metrics. */
static egm_status_t start_admin_http(egm_master_t *master, const egm_config_t *config,
                                     const char *host)
{
    int64_t port = egm__config_settings(config)->http_port;
    if (port < 0)
        return EGM_OK;
    master->admin = (egm_master_admin_t){
        .state = &master->state,
        .lock = &master->lock,
        .metrics = &master->metrics,
        .server = master->servers[0],
        .http = &master->http,
        .start_ms = egm__now_ms(),
    };
    /* With a cluster token, everything but the probes' and scrapers' paths
     * needs it: /keys lists every key, /segments every provider endpoint. */
    static const char *const open_paths[] = {"/health", "/metrics", NULL};
    char token[EGM_AUTH_TOKEN_MAX + 1];
    egm_status_t status = egm__config_auth_token(config, token, sizeof(token));
    if (status != EGM_OK)
        return status;
    egm_http_params_t params = {.address = host,
                                .port = (uint16_t)port,
                                .fn = egm__master_admin_http,
                                .arg = &master->admin,
                                .auth_token = token,
                                .open_paths = open_paths};
    int has_token = token[0] != '\0';
    status = egm__http_start(&params, &master->http);
    egm__secure_zero(token, sizeof(token));
    if (status == EGM_OK && has_token)
        egm_info("master: admin HTTP requires the cluster token (Authorization: Bearer) except "
                 "on /health and /metrics");
    if (status == EGM_OK || EGM_CONFIG_IS_SET(config, http_port))
        return status; /* the error names http_port and the address */
    egm_warn("master: admin HTTP off: %s (set --http-port N, 0 for any free port, -1 for none)",
             egm_last_error());
    return EGM_OK;
}

/* The object index's keys: leases, pins, unfinished puts, eviction, placement.
 * The config table has checked their ranges. */
static void object_params(const egm_config_t *config, uint64_t lease_ttl_ms,
                          egm_objects_params_t *params)
{
    const egm_settings_t *settings = egm__config_settings(config);

    egm__objects_params_default(params);
    params->lease_ttl_ms = lease_ttl_ms;
    params->soft_pin_ttl_ms = (uint64_t)settings->default_kv_soft_pin_ttl;
    params->pending_timeout_ms = (uint64_t)settings->put_start_discard_timeout_sec * 1000u;
    params->min_residency_ms = (uint64_t)settings->eviction_min_residency_ms;
    params->eviction_high_watermark = settings->eviction_high_watermark_ratio;
    params->eviction_ratio = settings->eviction_ratio;
    params->placement = settings->placement_strategy;
}

/* The election's thread: a master that stops leading stops serving (the
 * per-request check already refuses) and exits, to come back as a standby. */
static void on_leadership(void *arg, bool leading, int64_t epoch)
{
    egm_master_t *master = arg;
    if (leading) {
        egm_master_state_t *st = &master->state;
        uint64_t start = st->now_ms();
        size_t adopted = 0, skipped = 0, recovered = 0, removed = 0;
        /* The predecessor's state first (what the standby's mirror holds);
         * nothing is served before serving_epoch says so. */
        pthread_rwlock_wrlock(&master->lock);
        egm_mirror_stats_t ms;
        egm__mirror_stats(master->mirror, &ms);
        egm_status_t s = egm__mirror_install(master->mirror, st->liveness, st->segments,
                                             st->objects, &master->pool_reader, start, &adopted,
                                             &skipped, &recovered, &removed);
        atomic_fetch_add(&st->takeover_removals, removed);
        atomic_fetch_add(&st->takeover_puts, recovered);
        /* Locations clients cached from the predecessor are good for one
         * cache bound: a force remove waits that out (docs/consistency.md). */
        atomic_store(&st->force_wait_until_ms, start + st->location_cache_ms);
        pthread_rwlock_unlock(&master->lock);
        if (s != EGM_OK)
            egm_error("master: taking over the state of epoch %lld: %s", (long long)ms.epoch,
                      egm_last_error());
        if (ms.epoch == 0)
            egm_info("master: no state of a previous leader to take over (none was followed)");
        else
            egm_info("master: took over %llu segments and %zu objects of epoch %lld (%zu of them "
                     "from slab logs, %zu removed by removal entries there; %zu replicas or "
                     "objects skipped) in %llu ms",
                     (unsigned long long)ms.segments, adopted, (long long)ms.epoch, recovered,
                     removed, skipped, (unsigned long long)(st->now_ms() - start));
        if (egm__replication_lead(master->replication, epoch) != EGM_OK) {
            egm_warn("master: %s", egm_last_error());
            return; /* the election tells of the loss next */
        }
        atomic_store(&st->serving_since_ms, st->now_ms());
        atomic_store(&st->serving_epoch, epoch);
        egm_info("master: leading (epoch %lld): serving", (long long)epoch);
        return;
    }
    atomic_store(&master->deposed, 1);
    egm_error("master: lost the leadership of epoch %lld: stopping", (long long)epoch);
    egm__master_stop(master);
}

/* enable_ha: stands for leader under the cluster's key, published as the
 * address clients reach this master at. */
static bool may_campaign(void *arg)
{
    egm_master_t *master = arg;
    return egm__replication_may_lead(master->replication);
}

/* The journal, the mirror and the leader's side of the handover. */
static egm_status_t start_handover(egm_master_t *master, const egm_settings_t *settings,
                                   const char *addr, const egm_config_t *config)
{
    egm_master_state_t *st = &master->state;
    egm_status_t s = egm__journal_create(&master->journal);
    if (s == EGM_OK)
        s = egm__mirror_create(&master->mirror);
    if (s != EGM_OK)
        return s;
    st->journal = master->journal;
    st->mirror = master->mirror;
    /* A change waits for the standbys a little longer than a standby may
     * take to answer before it is dropped (replication.c). */
    st->journal_wait_ms = (uint64_t)settings->ha_lease_ttl * 1000u + 1000u;
    st->early_grants = settings->ha_early_grants != 0;
    egm__objects_set_journal(st->objects, master->journal);
    egm__segment_table_set_journal(st->segments, master->journal);
    char token[EGM_AUTH_TOKEN_MAX + 1];
    if ((s = egm__config_auth_token(config, token, sizeof(token))) != EGM_OK)
        return s;
    egm_replication_params_t rp = {.state = st,
                                   .etcd_endpoints = settings->etcd_endpoints,
                                   .cluster_id = settings->cluster_id,
                                   .self = addr,
                                   .auth_token = token,
                                   .max_frame_size = (size_t)settings->max_frame_size,
                                   .ttl_s = (int)settings->ha_lease_ttl};
    s = egm__replication_create(&rp, &master->replication);
    egm__secure_zero(token, sizeof(token));
    return s;
}

static egm_status_t start_election(egm_master_t *master, const egm_settings_t *settings,
                                   const egm_config_t *config)
{
    if (settings->etcd_endpoints == NULL || settings->etcd_endpoints[0] == '\0')
        return egm__set_error(EGM_ERR_CONFIG, "enable_ha needs etcd_endpoints "
                                              "(HOST:PORT[;HOST:PORT...], or with commas)");
    const char *host = settings->listen_address;
    if (host == NULL || host[0] == '\0' || strcmp(host, "0.0.0.0") == 0 || strcmp(host, "::") == 0)
        host = egm__host_name(); /* a wildcard is no address to publish */
    char addr[300], key[EGM_ELECTION_KEY_MAX], members[EGM_ELECTION_KEY_MAX];
    egm__sock_format_hostport(host, master->port, addr, sizeof(addr));
    egm__election_master_key(settings->cluster_id, key, sizeof(key));
    egm__election_members_prefix(settings->cluster_id, members, sizeof(members));
    egm_status_t status = start_handover(master, settings, addr, config);
    if (status != EGM_OK)
        return status;
    egm_election_params_t params = {.endpoints = settings->etcd_endpoints,
                                    .key = key,
                                    .value = addr,
                                    .ttl_s = (int)settings->ha_lease_ttl,
                                    .members_prefix = members,
                                    .on_change = on_leadership,
                                    .may_campaign = may_campaign,
                                    .arg = master};
    status = egm__election_start(&params, &master->election);
    if (status != EGM_OK)
        return status;
    master->state.election = master->election;
    egm_info("master: enable_ha: standing for leader of %s as %s (etcd %s, lease %lld s)", key,
             addr, settings->etcd_endpoints, (long long)settings->ha_lease_ttl);
    return EGM_OK;
}

int egm__master_deposed(const egm_master_t *master)
{
    return atomic_load(&((egm_master_t *)master)->deposed);
}

egm_status_t egm__master_create(const egm_config_t *config, egm_master_t **master_p)
{
    egm_master_t *master;
    egm_status_t status;
    char id_text[EGM_ID_STRLEN];

    if (master_p != NULL)
        *master_p = NULL;
    if (config == NULL || master_p == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "master: config and master_p must not be NULL");
    const egm_settings_t *settings = egm__config_settings(config);
    const char *host = settings->listen_address;
    int64_t port = settings->port;
    int64_t lease_ttl_ms = settings->default_kv_lease_ttl;
    int64_t client_ttl_s = settings->client_ttl;
    int64_t rpc_threads = settings->rpc_threads;
    uint64_t max_frame = settings->max_frame_size;
    /* The config table has checked the ranges of these keys. */
    egm_master_state_params_t state_params = {
        .client_ttl_ms = (uint64_t)client_ttl_s * 1000u,
        .disconnect_grace_ms = (uint64_t)settings->client_disconnect_grace_ms,
        .location_cache_ms = (uint64_t)settings->location_cache_ms};
    const egm_objects_params_t *objects = &state_params.objects;
    object_params(config, (uint64_t)lease_ttl_ms, &state_params.objects);

    master = egm_calloc(1, sizeof(*master), "master");
    if (master == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory creating the master");
    status = egm__master_state_init(&master->state, &state_params);
    if (status != EGM_OK)
        goto err;
    master->state_ready = 1;
    status = egm__master_lock_init(&master->lock);
    if (status != EGM_OK)
        goto err;
    master->lock_ready = 1;
    egm__master_metrics_init(&master->metrics);
    master->state.lock = &master->lock;
    master->state.metrics = &master->metrics;
    size_t n = (size_t)rpc_threads;
    master->reactors = egm_calloc(n, sizeof(*master->reactors), "master.threads");
    master->servers = egm_calloc(n, sizeof(*master->servers), "master.threads");
    master->threads = egm_calloc(n, sizeof(*master->threads), "master.threads");
    master->thread_args = egm_calloc(n, sizeof(*master->thread_args), "master.threads");
    if (master->reactors == NULL || master->servers == NULL || master->threads == NULL ||
        master->thread_args == NULL) {
        status = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory creating the master");
        goto err;
    }
    master->n_threads = n;
    status = egm__reactor_create(&master->reactors[0]);
    if (status != EGM_OK)
        goto err;
    egm__reactor_set_spin(master->reactors[0], (int)settings->rpc_server_spin_us);
    char token[EGM_AUTH_TOKEN_MAX + 1];
    status = egm__config_auth_token(config, token, sizeof(token));
    if (status != EGM_OK)
        goto err;
    egm_rpc_server_params_t params = {
        .host = host,
        .port = (uint16_t)port,
        .max_frame_size = (size_t)max_frame,
        .auth_token = token,
    };
    int has_token = token[0] != '\0';
    status = egm__rpc_server_create(master->reactors[0], &params, &master->servers[0]);
    egm__secure_zero(token, sizeof(token));
    if (status != EGM_OK)
        goto err;
    if (has_token)
        egm_info("master: RPC requires the cluster token (auth_token)");
    status = egm__reactor_add_timer(master->reactors[0], EGM_MASTER_TICK_MS, on_tick, master,
                                    &master->timer_id);
    if (status != EGM_OK)
        goto err;
    master->timer_added = 1;
    master->port = egm__rpc_server_port(master->servers[0]);
    /* Clients on this host (loopback address) reach us over a Unix socket: same
     * frames, without the loopback TCP/IP stack. Its name carries the address
     * we listen on, not only the port, and a client checks with Hello that we
     * own the TCP endpoint it was given. Optional: TCP serves everyone when
     * the name is taken. */
    char local_name[EGM_RPC_LOCAL_NAME_MAX] = "";
    if (egm__rpc_server_local_name(master->servers[0], local_name, sizeof(local_name)) != EGM_OK) {
        local_name[0] = '\0'; /* not a loopback or wildcard address: no local client */
    } else {
        if (egm__rpc_server_listen_unix(master->servers[0], local_name) != EGM_OK) {
            egm_warn("master: local socket %s unavailable (%s); local clients use TCP", local_name,
                     egm_last_error());
            local_name[0] = '\0';
        }
    }
    /* The other RPC threads share the listeners (after the Unix one exists). */
    for (size_t i = 1; i < n; i++) {
        status = egm__reactor_create(&master->reactors[i]);
        if (status == EGM_OK)
            egm__reactor_set_spin(master->reactors[i], (int)settings->rpc_server_spin_us);
        if (status == EGM_OK)
            status = egm__rpc_server_create_peer(master->reactors[i], master->servers[0],
                                                 &master->servers[i]);
        if (status != EGM_OK)
            goto err;
    }
    /* Every type of the command table, on every thread's server. */
    for (size_t i = 0; i < n; i++) {
        for (uint16_t type = 1; type <= EGM_RPC_TYPE_MAX; type++) {
            if (egm__master_command(type) == NULL)
                continue;
            status = egm__rpc_server_register(master->servers[i], type, egm__master_handle,
                                              &master->state);
            if (status != EGM_OK)
                goto err;
        }
        egm__rpc_server_on_peer_close(master->servers[i], egm__master_connection_closed,
                                      &master->state);
    }
    /* Before the admin HTTP thread, which reads state.election; no RPC is
     * served before egm__master_run, and then only while elected. */
    if (settings->enable_ha) {
        status = start_election(master, settings, config);
        if (status != EGM_OK)
            goto err;
    }
    status = start_admin_http(master, config, host);
    if (status != EGM_OK)
        goto err;
    char where[300];
    egm__sock_format_hostport(host != NULL && host[0] != '\0' ? host : "0.0.0.0", master->port,
                              where, sizeof(where));
    egm_info("master listening on %s%s%s (id %s, lease %lld ms, client ttl %lld s, %zu rpc "
             "threads)",
             where, local_name[0] ? " and unix:" : "", local_name,
             egm__id_format(master->state.master_id, id_text), (long long)lease_ttl_ms,
             (long long)client_ttl_s, n);
    egm_info("master placement %s; eviction above %.2f of capacity, %.2f at a time, none "
             "within %llu ms of a PutEnd; soft pin %llu ms; unfinished puts discarded after %llu s",
             EGM_CONFIG_TEXT(config, placement_strategy), objects->eviction_high_watermark,
             objects->eviction_ratio, (unsigned long long)objects->min_residency_ms,
             (unsigned long long)objects->soft_pin_ttl_ms,
             (unsigned long long)(objects->pending_timeout_ms / 1000u));
    *master_p = master;
    return EGM_OK;

err:
    egm__master_destroy(master); /* the caller reports the error */
    return status;
}

uint16_t egm__master_port(const egm_master_t *master)
{
    return master->port;
}

uint16_t egm__master_http_port(const egm_master_t *master)
{
    return egm__http_port(master->http);
}

static void *rpc_thread_main(void *arg)
{
    rpc_thread_t *t = arg;
    egm_status_t status = egm__reactor_run(t->master->reactors[t->index]);
    if (status != EGM_OK) {
        egm_error("master: rpc thread %zu stopped: %s; stopping the master", t->index,
                  egm_last_error());
        egm__master_stop(t->master);
    }
    return NULL;
}

egm_status_t egm__master_run(egm_master_t *master)
{
    egm_status_t status = EGM_OK;
    size_t started = 1;

    for (; started < master->n_threads; started++) {
        master->thread_args[started] = (rpc_thread_t){.master = master, .index = started};
        int rc = pthread_create(&master->threads[started], NULL, rpc_thread_main,
                                &master->thread_args[started]);
        if (rc != 0) {
            status = egm__set_error(egm__status_from_errno(rc),
                                    "master: starting rpc thread %zu: %s", started, strerror(rc));
            break;
        }
    }
    if (status == EGM_OK)
        status = egm__reactor_run(master->reactors[0]);
    for (size_t i = 1; i < started; i++)
        egm__reactor_stop(master->reactors[i]);
    for (size_t i = 1; i < started; i++)
        pthread_join(master->threads[i], NULL);
    return status;
}

void egm__master_stop(egm_master_t *master)
{
    for (size_t i = 0; i < master->n_threads; i++)
        egm__reactor_stop(master->reactors[i]);
}

void egm__master_destroy(egm_master_t *master)
{
    if (master == NULL)
        return;
    egm__http_stop(master->http); /* first: its thread reads everything below */
    /* Resigns (the next leader need not wait out the lease); nothing is served after. */
    /* Its threads read the state and the election; the election's thread
     * calls it. */
    egm__replication_stop(master->replication);
    if (master->state_ready) {
        /* A writer granted a slab before the standbys held it may still copy
         * into it: a leader that resigns lets another lead at once, before
         * its fence, so it waits for those copies first (slabs.h). */
        uint64_t until = atomic_load(&master->state.early_copies_until_ms), now = egm__now_ms();
        if (until > now)
            egm__sleep_ms(until - now);
    }
    egm__election_stop(master->election);
    egm__replication_destroy(master->replication);
    master->state.election = NULL;
    if (master->timer_added)
        egm__reactor_remove_timer(master->reactors[0], master->timer_id);
    /* Peers before the server that owns the listeners. */
    for (size_t i = master->n_threads; i-- > 0;)
        egm__rpc_server_destroy(master->servers[i]);
    for (size_t i = 0; i < master->n_threads; i++)
        egm__reactor_destroy(master->reactors[i]);
    if (master->state_ready)
        egm__master_state_cleanup(&master->state);
    egm__mirror_destroy(master->mirror);
    egm__journal_destroy(master->journal);
    if (master->lock_ready)
        pthread_rwlock_destroy(&master->lock);
    egm_free(master->reactors);
    egm_free(master->servers);
    egm_free(master->threads);
    egm_free(master->thread_args);
    egm_free(master);
}
