/* Reference model against a running cluster (see model.h): reads every key
 * back, asks the master where replicas lie, and compares its accounting. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "client/client_int.h"
#include "client/inspect.h"
#include "rpc/proto_util.h"
#include "support/http_get.h"
#include "support/model.h"

uint64_t egm_model_verify_all(egm_model_t *model, egm_client_t *client, unsigned replicas,
                              uint64_t *found_p, uint64_t *bytes_p)
{
    uint64_t failures = 0, found = 0, bytes = 0;
    size_t n = 0;
    char **keys = egm_model_keys(model, &n);
    for (size_t i = 0; i < n; i++) {
        void *data = NULL;
        size_t len = 0;
        egm_status_t status = egm_get(client, keys[i], &data, &len);
        if (egm_model_check(model, keys[i], status, data, len) != 0)
            failures++;
        if (status == EGM_OK) {
            found++;
            bytes += (((uint64_t)len + 63) & ~(uint64_t)63) * replicas;
            egm_buffer_free(data);
        } else if (status != EGM_ERR_NOT_FOUND) {
            fprintf(stderr, "model: get \"%s\" failed after recovery: %s\n", keys[i],
                    egm_status_string(status));
            failures++;
        }
        free(keys[i]);
    }
    free(keys);
    *found_p = found;
    *bytes_p = bytes;
    return failures;
}

egm_status_t egm_model_record_placement(egm_model_t *model, egm_client_t *client, const char *key)
{
    Egm__StatKeyReply *reply = NULL;
    egm_status_t status = egm__client_stat(client, key, &reply);
    if (status != EGM_OK)
        return status;
    status = (egm_status_t)reply->status;
    if (status == EGM_OK) {
        egm_id_t ids[EGM_MODEL_MAX_REPLICAS];
        size_t n = 0;
        for (size_t i = 0; i < reply->n_replicas && n < EGM_MODEL_MAX_REPLICAS; i++)
            ids[n++] = egm__id_from_pb(reply->replicas[i]->segment);
        if (n == 0)
            status = EGM_ERR_NOT_FOUND; /* no replica on a mounted segment: nothing to read */
        else
            egm_model_placed(model, key, ids, n);
    }
    egm__rpc_msg_free(&reply->base);
    return status;
}

size_t egm_model_segments_matching(egm_client_t *client, const char *needle, egm_id_t *ids,
                                   size_t max)
{
    Egm__ListSegmentsReply *reply = NULL;
    if (egm__client_list_segments(client, &reply) != EGM_OK)
        return (size_t)-1;
    size_t n = 0;
    for (size_t i = 0; i < reply->n_segments; i++) {
        const Egm__SegmentDesc *d = reply->segments[i]->desc;
        if (d == NULL || (strstr(d->name, needle) == NULL &&
                          (d->tcp_endpoint == NULL || strstr(d->tcp_endpoint, needle) == NULL)))
            continue;
        if (n < max)
            ids[n] = egm__id_from_pb(d->id);
        n++;
    }
    egm__rpc_msg_free(&reply->base);
    return n;
}

long long egm_model_master_metric(unsigned http_port, const char *name)
{
    double value = egm_test_metric(http_port, name);
    return value < 0 ? -1 : (long long)value;
}

long long egm_model_master_rpc_count(unsigned http_port, const char *type)
{
    char name[128];
    snprintf(name, sizeof(name), "egm_master_rpc_requests_total{type=\"%s\"}", type);
    return egm_model_master_metric(http_port, name);
}

int egm_model_check_master(unsigned http_port, uint64_t keys, uint64_t bytes)
{
    long long m_keys = egm_model_master_metric(http_port, "egm_master_keys");
    long long m_pending = egm_model_master_metric(http_port, "egm_master_keys_pending");
    long long m_bytes = egm_model_master_metric(http_port, "egm_master_allocated_bytes");
    /* Space of objects force-removed under a read lease stays allocated until it ends; so
     * does the uncommitted space of writers' open slabs. */
    long long m_held = egm_model_master_metric(http_port, "egm_master_held_bytes");
    long long m_slab = egm_model_master_metric(http_port, "egm_master_slab_bytes");
    if (m_keys == (long long)keys && m_held >= 0 && m_slab >= 0 &&
        m_bytes - m_held - m_slab == (long long)bytes && m_pending == 0)
        return 0;
    fprintf(stderr,
            "model: master accounting differs: keys %lld (stored %llu), allocated bytes %lld, "
            "%lld of them held, %lld in open slabs (stored %llu), pending %lld\n",
            m_keys, (unsigned long long)keys, m_bytes, m_held, m_slab, (unsigned long long)bytes,
            m_pending);
    return -1;
}

unsigned egm_model_admin_port(egm_test_cluster_t *cluster)
{
    char line[256];
    if (egm__process_wait_line(&cluster->master, "egmstore master admin http ", line, sizeof(line),
                               10000) != EGM_OK)
        return 0;
    const char *colon = strrchr(line, ':');
    return colon != NULL ? (unsigned)strtoul(colon + 1, NULL, 10) : 0;
}
