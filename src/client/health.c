/* Client health, metrics and transports (a provider's /health and /metrics
 * report the first two). */
#include <stdio.h>
#include "client/client_int.h"
#include "client/slabs.h"
#include "common/prom.h"
#include "common/textbuf.h"

egm_health_t egm_client_health(egm_client_t *client)
{
    if (client == NULL)
        return EGM_HEALTH_NOT_INITIALIZED;
    pthread_mutex_lock(&client->lock);
    egm_health_t h = client->capacity_view.cleanup_pending ? EGM_HEALTH_CLEANUP_PENDING
                     : !client->ready                      ? EGM_HEALTH_NOT_INITIALIZED
                     : !client->master_reachable           ? EGM_HEALTH_MASTER_UNREACHABLE
                                                           : EGM_HEALTH_HEALTHY;
    pthread_mutex_unlock(&client->lock);
    return h;
}

const char *egm_health_string(egm_health_t health)
{
    switch (health) {
    case EGM_HEALTH_HEALTHY:
        return "healthy";
    case EGM_HEALTH_NOT_INITIALIZED:
        return "not_initialized";
    case EGM_HEALTH_MASTER_UNREACHABLE:
        return "master_unreachable";
    case EGM_HEALTH_CLEANUP_PENDING:
        return "cleanup_pending";
    }
    return "unknown";
}

/* Where put and get time goes (phases.h): seconds summed over threads. */
static void phase_metrics(egm_textbuf_t *o, egm_client_t *client, const egm_te_stats_t *te)
{
    static const char *const op_names[EGM_OP_KINDS] = {"put", "get"};
    static const struct {
        const char *name;
        const char *help;
        int puts_only; /* a step gets do not take */
    } phase_names[EGM_PHASES] = {
        {"call", "calls, entry to return", 0},
        {"rpc", "master calls they made", 0},
        {"transfer", "transfers (routing, mapping lookups, copies)", 0},
        {"place", "placing objects in the client's slabs (SlabGrant calls included)", 1},
        {"log", "writing slab-log entries (the wait for the slabs' lock included)", 1},
    };
    char name[96], help[160];

    for (int op = 0; op < EGM_OP_KINDS; op++) {
        snprintf(name, sizeof(name), "egm_client_%s_calls_total", op_names[op]);
        snprintf(help, sizeof(help), "%s calls (a batch is one)", op_names[op]);
        egm__prom_metric_u64(o, name, EGM_PROM_COUNTER, help,
                             atomic_load_explicit(&client->phases.calls[op], memory_order_relaxed));
        for (int ph = 0; ph < EGM_PHASES; ph++) {
            if (op != EGM_OP_PUT && phase_names[ph].puts_only)
                continue;
            snprintf(name, sizeof(name), "egm_client_%s_%s_seconds_total", op_names[op],
                     phase_names[ph].name);
            snprintf(help, sizeof(help), "wall time of %s %s, summed over threads", op_names[op],
                     phase_names[ph].help);
            egm__prom_metric_double(o, name, EGM_PROM_COUNTER, help,
                                    egm__phase_seconds(&client->phases, op, ph));
        }
    }
    egm_location_cache_stats_t lc;
    egm__location_cache_stats(client->locations, &lc);
    const egm_prom_row_t cache[] = {
        {"egm_client_location_cache_hits_total", EGM_PROM_COUNTER,
         "gets served from cached locations, without a master round trip", lc.hits},
        {"egm_client_location_cache_misses_total", EGM_PROM_COUNTER,
         "lookups that found no usable cached location", lc.misses},
        {"egm_client_location_cache_invalidations_total", EGM_PROM_COUNTER,
         "cached locations and kept lookups dropped by removes, master restarts and failed gets",
         lc.invalidations},
        {"egm_client_location_cache_entries", EGM_PROM_GAUGE, "cached locations held now",
         lc.entries},
    };
    egm__prom_rows(o, cache, sizeof(cache) / sizeof(cache[0]));
    egm_wslabs_stats_t ws;
    egm__wslabs_stats(client->slabs, &ws);
    const egm_prom_row_t slabs[] = {
        {"egm_client_slab_grants_total", EGM_PROM_COUNTER,
         "slabs of pool space granted to this client to place its puts in (client-side "
         "allocation)",
         ws.grants},
        {"egm_client_slab_returns_total", EGM_PROM_COUNTER,
         "slabs returned to the master once used up or past their time", ws.returns},
        {"egm_client_slabs", EGM_PROM_GAUGE, "slabs held now (open, or waiting for a commit)",
         ws.open},
    };
    egm__prom_rows(o, slabs, sizeof(slabs) / sizeof(slabs[0]));
    egm__prom_metric_double(
        o, "egm_client_location_cache_bound_seconds", EGM_PROM_GAUGE,
        "the longest location_cache_ms a master told: how long a force remove waits",
        (double)atomic_load(&client->cache_bound_max_ms) / 1e3);
    egm__prom_metric_double(o, "egm_client_te_copy_run_seconds_total", EGM_PROM_COUNTER,
                            "wall time of GPU copy runs, issue to end, summed over threads",
                            (double)te->copy_run_ns / 1e9);
}

/* Every value is a count, bytes or a 0/1 state but the setup and outage times (common/prom.h
 * writes integers exactly). Names: docs/metrics.md. */
size_t egm_client_metrics(egm_client_t *client, char *buf, size_t len)
{
    egm_textbuf_t o = egm__textbuf(buf, len);
    egm_capacity_view_t v = {0};
    egm_te_stats_t te = {0};
    uint64_t restarts = 0, remounts = 0, remount_failures = 0, outages = 0, outage_ms = 0,
             last_outage_ms = 0;
    int resync_pending = 0;

    egm_health_t health = egm_client_health(client);
    if (client != NULL) {
        pthread_mutex_lock(&client->lock);
        v = client->capacity_view;
        restarts = client->master_restarts;
        remounts = client->remounts;
        remount_failures = client->remount_failures;
        resync_pending = client->resync_pending;
        outages = client->master_outages;
        outage_ms = client->master_outage_ms_total;
        last_outage_ms = client->master_last_outage_ms;
        pthread_mutex_unlock(&client->lock);
        egm__te_stats(client->te, &te);
    }
    /* The one double, the setup time, is written between the two tables. */
    const egm_prom_row_t first[] = {
        {"egm_client_health", EGM_PROM_GAUGE,
         "0 healthy, 1 not_initialized, 2 master_unreachable, 3 cleanup_pending", health},
        {"egm_client_pool_egm", EGM_PROM_GAUGE,
         "1 when the contributed capacity is an EGM Store pool", v.egm},
        {"egm_client_pool_capacity_bytes", EGM_PROM_GAUGE, "contributed capacity published",
         v.capacity},
        {"egm_client_pool_chunks", EGM_PROM_GAUGE, "chunks (segments) of the contributed pool",
         v.chunks},
        {"egm_client_pool_numa_nodes", EGM_PROM_GAUGE, "NUMA nodes (or GPUs) the pool spans",
         v.numa_nodes},
    };
    const egm_prom_row_t after_setup[] = {
        {"egm_client_pool_cleanup_failures_total", EGM_PROM_COUNTER,
         "teardown steps that failed (each kept its resources for a retry)", v.cleanup_failures},
        {"egm_client_pool_cleanup_pending", EGM_PROM_GAUGE,
         "1 while a failed teardown step waits for the next close", v.cleanup_pending},
        {"egm_client_master_restarts_total", EGM_PROM_COUNTER,
         "new master ids seen by the pings (master restarts)", restarts},
        {"egm_client_remounted_segments_total", EGM_PROM_COUNTER,
         "contributed segments mounted again under new ids (master restart or expiry)", remounts},
        {"egm_client_remount_failures_total", EGM_PROM_COUNTER,
         "resynchronisations with a restarted master that failed (retried each ping)",
         remount_failures},
        {"egm_client_remount_pending", EGM_PROM_GAUGE,
         "1 while a resynchronisation with the master waits for a retry", resync_pending},
        {"egm_client_te_mappings", EGM_PROM_GAUGE, "segment mappings held now (shm and nvlink)",
         te.mappings_live},
        {"egm_client_te_nvlink_mappings", EGM_PROM_GAUGE, "VMM segment imports mapped now",
         te.nvlink_mappings_live},
        {"egm_client_te_nvlink_imports_total", EGM_PROM_COUNTER, "VMM segment handles imported",
         te.nvlink_imports_total},
        {"egm_client_te_nvlink_import_failures_total", EGM_PROM_COUNTER,
         "VMM segment imports that failed", te.nvlink_import_failures},
        {"egm_client_te_read_bytes_total", EGM_PROM_COUNTER,
         "bytes this process read from segments", te.bytes_read},
        {"egm_client_te_written_bytes_total", EGM_PROM_COUNTER,
         "bytes this process wrote into segments", te.bytes_written},
        {"egm_client_te_auth_failures_total", EGM_PROM_COUNTER,
         "requests to this process's tcp data server and fd socket refused for a missing or "
         "wrong cluster token (auth_token)",
         te.auth_failures},
        {"egm_client_te_fd_peers_refused_total", EGM_PROM_COUNTER,
         "fd socket peers refused by their uid/gid (SO_PEERCRED)", te.shm_peers_refused},
        {"egm_client_te_vmm_fds_sent_total", EGM_PROM_COUNTER,
         "posix_fd VMM handles exported to consumers", te.vmm_fds_sent},
        {"egm_client_te_copy_kernel_launches_total", EGM_PROM_COUNTER,
         "launches of the GPU gather/scatter kernel", te.copy_kernel_launches},
        {"egm_client_te_copy_engine_copies_total", EGM_PROM_COUNTER,
         "cuMemcpyAsync calls (copy engines)", te.copy_engine_copies},
        {"egm_client_te_copy_batch_calls_total", EGM_PROM_COUNTER, "cuMemcpyBatchAsync calls",
         te.copy_batch_calls},
        {"egm_client_te_copy_bounced_runs_total", EGM_PROM_COUNTER,
         "batches of small pieces gathered or scattered through the GPU bounce buffer, their runs "
         "to or from the pool on the copy engines (nvlink_bounce_buffer)",
         te.copy_bounced_runs},
        {"egm_client_te_copy_groups_total", EGM_PROM_COUNTER,
         "groups of GPU copies issued and waited for (one per batch and device, more under "
         "nvlink_max_inflight_bytes)",
         te.copy_groups},
        {"egm_client_te_copy_chunks_total", EGM_PROM_COUNTER,
         "pieces of GPU copies cut at nvlink_chunk_size or nvlink_max_inflight_bytes",
         te.copy_chunks},
        {"egm_client_te_copy_group_max_bytes", EGM_PROM_GAUGE, "largest group of GPU copies issued",
         te.copy_max_group_bytes},
        {"egm_client_te_copy_devices", EGM_PROM_GAUGE,
         "GPUs whose copies are ready (stream, kernel, descriptors): one registered buffer or "
         "transfer on it made them",
         te.copy_devices},
    };
    egm__prom_rows(&o, first, sizeof(first) / sizeof(first[0]));
    egm__prom_metric_double(&o, "egm_client_pool_setup_seconds", EGM_PROM_GAUGE,
                            "wall time of the pool's planning and allocation", v.setup_seconds);
    egm__prom_rows(&o, after_setup, sizeof(after_setup) / sizeof(after_setup[0]));
    egm__prom_metric_u64(&o, "egm_client_master_outages_total", EGM_PROM_COUNTER,
                         "times the ping thread lost the master (a restart, a failover, a cut)",
                         outages);
    egm__prom_metric_double(&o, "egm_client_master_outage_seconds_total", EGM_PROM_COUNTER,
                            "time without a master, from a first failed ping to reachable and "
                            "resynchronised again, summed over the outages",
                            (double)outage_ms / 1000.0);
    egm__prom_metric_double(&o, "egm_client_master_last_outage_seconds", EGM_PROM_GAUGE,
                            "the last such outage: an HA failover as this client saw it (0 when "
                            "none ended yet)",
                            (double)last_outage_ms / 1000.0);
    if (client != NULL)
        phase_metrics(&o, client, &te);
    return o.need;
}

size_t egm_client_transports(egm_client_t *client, char *buf, size_t len)
{
    egm_textbuf_t o = egm__textbuf(buf, len);
    const char *names[EGM_TRANSPORTS_MAX];
    size_t n = client != NULL ? egm__te_transports(client->te, names, EGM_TRANSPORTS_MAX) : 0;
    for (size_t i = 0; i < n && i < EGM_TRANSPORTS_MAX; i++)
        egm__textbuf_printf(&o, "%s%s", i > 0 ? " " : "", names[i]);
    return o.need;
}
