/* Store client: creation, teardown and buffer registration. */
#include <string.h>
#include "client/client_int.h"
#include "client/master_leader.h"
#include "client/slabs.h"
#include "common/alloc.h"
#include "common/config_int.h"
#include "common/log.h"

static void client_free(egm_client_t *client)
{
    egm__te_destroy(client->te);
    egm__rpc_client_destroy(client->master);
    egm__master_leader_destroy(client->leader);
    egm__registry_destroy(client->registry);
    egm__location_cache_destroy(client->locations);
    egm__wslabs_destroy(client->slabs);
    egm__workers_destroy(client->workers);
    egm_config_destroy(client->config);
    pthread_cond_destroy(&client->cond);
    pthread_mutex_destroy(&client->cap_lock);
    pthread_mutex_destroy(&client->lock);
    egm_free(client);
}

egm_status_t egm_client_create(const egm_config_t *config, egm_client_t **client_p)
{
    egm_client_t *client;
    egm_status_t status;

    if (config == NULL || client_p == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "egm_client_create: config and client_p "
                                                   "must not be NULL");
    client = egm_calloc(1, sizeof(*client), "client");
    if (client == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory creating a client");
    pthread_mutex_init(&client->lock, NULL);
    pthread_mutex_init(&client->cap_lock, NULL);
    pthread_cond_init(&client->cond, NULL);
    client->id = egm__id_random();

    status = egm_config_copy(config, &client->config);
    if (status != EGM_OK)
        goto err_free;
    /* Configuration mistakes are reported before anything is contacted. */
    status = egm__capacity_check_config(config);
    if (status != EGM_OK)
        goto err_free;
    const egm_settings_t *settings = egm__config_settings(config);
    /* The log is the process's: a client sets its level only when told to. */
    if (egm__config_is_set(config, "log_level"))
        egm__log_set_level(settings->log_level);
    client->rpc_timeout_ms = (int)settings->rpc_timeout_ms;
    client->replica_num = (uint32_t)settings->replica_num;

    status = egm__registry_create(&client->registry);
    if (status == EGM_OK && settings->location_cache_entries > 0)
        status = egm__location_cache_create((size_t)settings->location_cache_entries,
                                            &client->locations);
    if (status == EGM_OK)
        status = egm__wslabs_create(settings->slab_bytes, &client->slabs);
    if (status == EGM_OK)
        status = egm__workers_create(EGM_CLIENT_WORKERS_MAX, &client->workers);
    if (status != EGM_OK)
        goto err_free;
    egm_te_params_t te_params = {
        .client_id = client->id,
        .protocol = settings->protocol,
        .local_hostname = settings->local_hostname,
        .zone = settings->zone,
        .data_port = (uint16_t)settings->data_port,
        .io_timeout_ms = (int)settings->io_timeout_ms,
        .registry = client->registry,
        .prewarm_off = !settings->prewarm,
        .prewarm_concurrency = (int)settings->prewarm_concurrency,
        .copy_low_priority = settings->nvlink_low_priority_stream,
        .copy_max_inflight_bytes = settings->nvlink_max_inflight_bytes,
        .copy_chunk_bytes = settings->nvlink_chunk_size,
        .copy_bounce_bytes = settings->nvlink_bounce_buffer,
        .fd_gid_allowed = settings->fd_allowed_gid >= 0,
        .fd_allowed_gid = settings->fd_allowed_gid,
    };

    char token[EGM_AUTH_TOKEN_MAX + 1];
    status = egm__config_auth_token(config, token, sizeof(token));
    if (status != EGM_OK)
        goto err_free;
    te_params.auth_token = token;
    egm_rpc_client_params_t rpc_params = {
        .addr = settings->master_server_addr,
        .connect_timeout_ms = (int)settings->connect_timeout_ms,
        .max_frame_size = settings->max_frame_size,
        .prefer_local_socket = 1,
        .auth_token = token,
        .spin_us = (int)settings->rpc_spin_us,
    };
    if (egm__master_leader_is_etcd(settings->master_server_addr)) {
        status = egm__master_leader_create(settings->master_server_addr, settings->cluster_id,
                                           (int)settings->connect_timeout_ms, &client->leader);
        rpc_params.addr = NULL;
        rpc_params.resolve = egm__master_leader_resolve;
        rpc_params.resolve_arg = client->leader;
    }
    if (status == EGM_OK)
        status = egm__rpc_client_create(&rpc_params, &client->master);
    if (status == EGM_OK)
        status = egm__te_create(&te_params, &client->te);
    egm__secure_zero(token, sizeof(token));
    if (status != EGM_OK)
        goto err_free;

    /* A first ping proves the master is there before anything is mounted. */
    status = egm__liveness_start(client);
    if (status != EGM_OK)
        goto err_free;

    uint64_t total = settings->global_segment_size;
    if (total > 0) {
        status = egm__capacity_mount(client, total, settings->max_mr_size);
        if (status != EGM_OK)
            goto err_capacity;
    }
    egm__capacity_publish(client);
    pthread_mutex_lock(&client->lock);
    client->ready = 1;
    pthread_mutex_unlock(&client->lock);
    *client_p = client;
    return EGM_OK;

err_capacity:
    /* The rollback inside mount left something only if a cleanup step
     * failed too: one more try, then it is abandoned to the process's exit. */
    if (client->capacity.cleanup_pending && egm__capacity_unmount(client) != EGM_OK)
        egm__capacity_abandon(client);
    egm__liveness_stop(client);
err_free:
    client_free(client);
    return status;
}

egm_status_t egm_client_close(egm_client_t *client)
{
    if (client == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "client must not be NULL");
    egm__wslabs_close(client); /* before the master forgets this client */
    egm_status_t status = egm__capacity_unmount(client);
    egm__capacity_publish(client);
    if (status != EGM_OK)
        return status;
    egm__liveness_stop(client);
    pthread_mutex_lock(&client->lock);
    client->ready = 0;
    pthread_mutex_unlock(&client->lock);
    return EGM_OK;
}

void egm_client_destroy(egm_client_t *client)
{
    if (client == NULL)
        return;
    if (egm_client_close(client) != EGM_OK) {
        egm_error("closing the client: %s", egm_last_error());
        egm__capacity_abandon(client);
        egm__liveness_stop(client);
    }
    client_free(client);
}

egm_status_t egm_register_buffer(egm_client_t *client, void *addr, size_t len)
{
    if (client == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "client must not be NULL");
    egm_status_t status = egm__registry_add(client->registry, addr, len);
    int device = -1;
    if (status != EGM_OK || egm__registry_device(client->registry, addr, len, &device) != EGM_OK)
        return status;
    /* The first transfer from this buffer finds its GPU's copies ready. A
     * failure here is the transfer's to report. */
    if (egm__te_prepare_device(client->te, device) != EGM_OK)
        egm_debug("register_buffer: preparing GPU copies for device %d: %s", device,
                  egm_last_error());
    return EGM_OK;
}

egm_status_t egm_unregister_buffer(egm_client_t *client, void *addr)
{
    if (client == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "client must not be NULL");
    return egm__registry_remove(client->registry, addr);
}
