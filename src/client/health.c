/* Client health and metrics (a provider's /health and /metrics report these). */
#include "client/client_int.h"
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

/* One metric: HELP, TYPE and the sample. */
static void metric(egm_textbuf_t *o, const char *name, const char *type, const char *help,
                   double value)
{
    egm__textbuf_printf(o, "# HELP %s %s\n# TYPE %s %s\n%s %.17g\n", name, help, name, type, name,
                        value);
}

size_t egm_client_metrics(egm_client_t *client, char *buf, size_t len)
{
    egm_textbuf_t o = egm__textbuf(buf, len);
    egm_capacity_view_t v = {0};
    egm_te_stats_t te = {0};
    uint64_t restarts = 0, remounts = 0, remount_failures = 0;
    int resync_pending = 0;

    egm_health_t health = egm_client_health(client);
    if (client != NULL) {
        pthread_mutex_lock(&client->lock);
        v = client->capacity_view;
        restarts = client->master_restarts;
        remounts = client->remounts;
        remount_failures = client->remount_failures;
        resync_pending = client->resync_pending;
        pthread_mutex_unlock(&client->lock);
        egm__te_stats(client->te, &te);
    }
    metric(&o, "egmstore_health", "gauge",
           "0 healthy, 1 not_initialized, 2 master_unreachable, 3 cleanup_pending", health);
    metric(&o, "egmstore_pool_egm", "gauge", "1 when the contributed capacity is an EGM Store pool",
           v.egm);
    metric(&o, "egmstore_pool_capacity_bytes", "gauge", "contributed capacity published",
           (double)v.capacity);
    metric(&o, "egmstore_pool_chunks", "gauge", "chunks (segments) of the contributed pool",
           (double)v.chunks);
    metric(&o, "egmstore_pool_numa_nodes", "gauge", "NUMA nodes (or GPUs) the pool spans",
           (double)v.numa_nodes);
    metric(&o, "egmstore_pool_setup_seconds", "gauge",
           "wall time of the pool's planning and allocation", v.setup_seconds);
    metric(&o, "egmstore_pool_cleanup_failures_total", "counter",
           "teardown steps that failed (each kept its resources for a retry)",
           (double)v.cleanup_failures);
    metric(&o, "egmstore_pool_cleanup_pending", "gauge",
           "1 while a failed teardown step waits for the next close", v.cleanup_pending);
    metric(&o, "egmstore_master_restarts_total", "counter",
           "new master ids seen by the pings (master restarts)", (double)restarts);
    metric(&o, "egmstore_remounted_segments_total", "counter",
           "contributed segments mounted again under new ids (master restart or expiry)",
           (double)remounts);
    metric(&o, "egmstore_remount_failures_total", "counter",
           "resynchronisations with a restarted master that failed (retried each ping)",
           (double)remount_failures);
    metric(&o, "egmstore_remount_pending", "gauge",
           "1 while a resynchronisation with the master waits for a retry", resync_pending);
    metric(&o, "egmstore_te_mappings", "gauge", "segment mappings held now (shm and nvlink)",
           (double)te.mappings_live);
    metric(&o, "egmstore_te_nvlink_mappings", "gauge", "VMM segment imports mapped now",
           (double)te.nvlink_mappings_live);
    metric(&o, "egmstore_te_nvlink_imports_total", "counter", "VMM segment handles imported",
           (double)te.nvlink_imports_total);
    metric(&o, "egmstore_te_nvlink_import_failures_total", "counter",
           "VMM segment imports that failed", (double)te.nvlink_import_failures);
    metric(&o, "egmstore_te_bytes_read_total", "counter", "bytes this process read from segments",
           (double)te.bytes_read);
    metric(&o, "egmstore_te_bytes_written_total", "counter",
           "bytes this process wrote into segments", (double)te.bytes_written);
    metric(&o, "egmstore_te_auth_failures_total", "counter",
           "requests to this process's tcp data server and fd socket refused for a missing or "
           "wrong cluster token (auth_token)",
           (double)te.auth_failures);
    metric(&o, "egmstore_te_fd_peers_refused_total", "counter",
           "fd socket peers refused by their uid/gid (SO_PEERCRED)", (double)te.shm_peers_refused);
    metric(&o, "egmstore_te_vmm_fds_sent_total", "counter",
           "posix_fd VMM handles exported to consumers", (double)te.vmm_fds_sent);
    metric(&o, "egmstore_te_copy_kernel_launches_total", "counter",
           "launches of the GPU gather/scatter kernel", (double)te.copy_kernel_launches);
    metric(&o, "egmstore_te_copy_engine_copies_total", "counter",
           "cuMemcpyAsync calls (copy engines)", (double)te.copy_engine_copies);
    metric(&o, "egmstore_te_copy_batch_calls_total", "counter", "cuMemcpyBatchAsync calls",
           (double)te.copy_batch_calls);
    metric(&o, "egmstore_te_copy_groups_total", "counter",
           "groups of GPU copies issued and waited for (one per batch and device, more under "
           "nvlink_max_inflight_bytes)",
           (double)te.copy_groups);
    metric(&o, "egmstore_te_copy_chunks_total", "counter",
           "pieces of GPU copies cut at nvlink_chunk_size or nvlink_max_inflight_bytes",
           (double)te.copy_chunks);
    metric(&o, "egmstore_te_copy_group_bytes_max", "gauge", "largest group of GPU copies issued",
           (double)te.copy_max_group_bytes);
    return o.need;
}
