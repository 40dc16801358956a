/* Client liveness: ping the master every `ping_interval_ms`, and drop cached
 * mappings of segments the master retired (DESIGN.md section 3). */
#include <errno.h>
#include <time.h>
#include "client/client_int.h"
#include "common/alloc.h"
#include "common/log.h"
#include "common/sock.h"
#include "cuda/driver.h"
#include "rpc/frame.h"
#include "rpc/proto_util.h"

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
    if (status != EGM_OK)
        return status;
    status = reply->status;
    if (status == EGM_OK) {
        for (size_t i = 0; i < reply->n_retired; i++)
            egm__te_forget_segment(client->te, egm__id_from_pb(reply->retired[i]));
        client->view = reply->view;
    }
    egm__rpc_msg_free(&reply->base);
    return status;
}

/* Prewarm: map every VMM segment the master knows before a Get needs it
 * (mapping a chunk takes milliseconds, DESIGN.md 8). The engine skips what is
 * mapped already, so repeating this each ping is cheap. */
static void prewarm_segments(egm_client_t *client)
{
    Egm__ListSegmentsReply *reply = NULL;
    egm_segment_desc_t *descs = NULL;
    size_t n = 0;

    if (!egm_config_get_bool(client->config, "prewarm") || egm__cuda_device_count() == 0)
        return;
    if (egm__client_list_segments(client, &reply) != EGM_OK)
        return;
    if (reply->status == EGM_OK && reply->n_segments > 0)
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

static void *ping_main(void *arg)
{
    egm_client_t *client = arg;
    uint64_t interval_ms = (uint64_t)egm_config_get_int(client->config, "ping_interval_ms");

    pthread_mutex_lock(&client->lock);
    while (!client->stopping) {
        struct timespec deadline;
        clock_gettime(CLOCK_MONOTONIC, &deadline);
        deadline.tv_sec += (time_t)(interval_ms / 1000);
        deadline.tv_nsec += (long)(interval_ms % 1000) * 1000000L;
        if (deadline.tv_nsec >= 1000000000L) {
            deadline.tv_sec++;
            deadline.tv_nsec -= 1000000000L;
        }
        while (!client->stopping &&
               pthread_cond_timedwait(&client->cond, &client->lock, &deadline) != ETIMEDOUT)
            ;
        if (client->stopping)
            break;
        pthread_mutex_unlock(&client->lock);
        egm_status_t status = ping_once(client);
        if (status == EGM_OK)
            prewarm_segments(client);
        pthread_mutex_lock(&client->lock);
        if (status != EGM_OK && client->master_reachable)
            egm_warn("master unreachable: %s (%s)", egm_status_string(status), egm_last_error());
        else if (status == EGM_OK && !client->master_reachable)
            egm_info("master reachable again");
        client->master_reachable = (status == EGM_OK);
    }
    pthread_mutex_unlock(&client->lock);
    return NULL;
}

egm_status_t egm__liveness_start(egm_client_t *client)
{
    egm_status_t status = ping_once(client);
    if (status != EGM_OK)
        return egm__set_error(status, "master %s: %s (%s)",
                              egm_config_get(client->config, "master_server_addr"),
                              egm_status_string(status), egm_last_error());
    client->master_reachable = 1;
    prewarm_segments(client);
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
}
