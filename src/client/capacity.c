/* Capacity a client contributes (DESIGN.md 5): allocate the pool, register
 * each chunk with the transfer engine, publish them all at the master in one
 * request. Any failure rolls back in reverse; teardown (unmount -> unregister
 * -> release) keeps whatever a failed step could not release, and the next
 * close resumes there. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "client/client_int.h"
#include "common/alloc.h"
#include "common/config_int.h"
#include "common/log.h"
#include "common/progress.h"
#include "common/sock.h"
#include "pool/egm_nodes.h"
#include "rpc/frame.h"
#include "rpc/proto_util.h"

/* Segments per Mount/Unmount request: the master's limit (about 300 bytes
 * each, far below max_frame_size). A pool of more chunks is published in
 * several requests, the only case where the master may list part of it. */
#define SEGMENTS_PER_RPC EGM_MOUNT_MAX_SEGMENTS

/* *answered_p (optional): whether the master replied, i.e. whether the
 * outcome is known. */
static egm_status_t status_call(egm_client_t *client, uint16_t type, const ProtobufCMessage *req,
                                int *answered_p)
{
    Egm__StatusReply *reply = NULL;
    egm_status_t status =
        egm__rpc_call_msg(client->master, type, req, &egm__status_reply__descriptor,
                          (ProtobufCMessage **)&reply, client->rpc_timeout_ms);
    if (answered_p != NULL)
        *answered_p = status == EGM_OK;
    if (status != EGM_OK)
        return status;
    status = reply->status;
    if (status != EGM_OK)
        egm__set_error(status, "%s", reply->error ? reply->error : "");
    egm__rpc_msg_free(&reply->base);
    return status;
}

/* Mounts segments idx[0..n) (idx NULL: [first, first + n)) in one request:
 * all or none. */
static egm_status_t mount_segments(egm_client_t *client, const size_t *idx, size_t first, size_t n)
{
    egm_capacity_t *cap = &client->capacity;
    Egm__MountSegmentRequest req = EGM__MOUNT_SEGMENT_REQUEST__INIT;
    Egm__Id client_pb = EGM__ID__INIT;
    Egm__SegmentDesc *segs = egm_calloc(n, sizeof(*segs), "client.mount");
    Egm__SegmentDesc **ptrs = egm_calloc(n, sizeof(*ptrs), "client.mount");
    Egm__Id *ids = egm_calloc(2 * n, sizeof(*ids), "client.mount");
    egm_status_t status;

    if (segs == NULL || ptrs == NULL || ids == NULL) {
        status = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory mounting segments");
        goto out;
    }
    egm__id_to_pb(client->id, &client_pb);
    for (size_t i = 0; i < n; i++) {
        size_t k = idx != NULL ? idx[i] : first + i;
        egm__segment_desc_to_pb(&cap->segments[k], &segs[i], &ids[2 * i], &ids[2 * i + 1]);
        ptrs[i] = &segs[i];
    }
    req.client = &client_pb;
    req.n_segments = n;
    req.segments = ptrs;
    int answered = 0;
    status = status_call(client, EGM_RPC_MOUNT_SEGMENT, &req.base, &answered);
    /* Without an answer (timeout, connection lost) the master may have
     * mounted them: count them as mounted so that the rollback unmounts
     * (SEGMENT_NOT_FOUND there means they never were). */
    if (status == EGM_OK || !answered)
        for (size_t i = 0; i < n; i++)
            cap->mounted[idx != NULL ? idx[i] : first + i] = 1;
out:
    egm_free(segs);
    egm_free(ptrs);
    egm_free(ids);
    return status;
}

/* Unmounts the mounted segments among [first, first + n) in one request.
 * Segments the master no longer has (expired, master restarted) count as
 * unmounted. */
static egm_status_t unmount_range(egm_client_t *client, size_t first, size_t n)
{
    egm_capacity_t *cap = &client->capacity;
    Egm__UnmountSegmentRequest req = EGM__UNMOUNT_SEGMENT_REQUEST__INIT;
    Egm__Id client_pb = EGM__ID__INIT;
    Egm__Id *ids = egm_calloc(n, sizeof(*ids), "client.unmount");
    Egm__Id **ptrs = egm_calloc(n, sizeof(*ptrs), "client.unmount");
    egm_status_t status = EGM_OK;
    size_t k = 0;

    if (ids == NULL || ptrs == NULL) {
        status = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory unmounting segments");
        goto out;
    }
    for (size_t i = first; i < first + n; i++) {
        if (!cap->mounted[i])
            continue;
        egm__id_to_pb(cap->segments[i].id, &ids[k]);
        ptrs[k] = &ids[k];
        k++;
    }
    if (k == 0)
        goto out;
    egm__id_to_pb(client->id, &client_pb);
    req.client = &client_pb;
    req.n_segments = k;
    req.segments = ptrs;
    status = status_call(client, EGM_RPC_UNMOUNT_SEGMENT, &req.base, NULL);
    if (status == EGM_ERR_SEGMENT_NOT_FOUND) {
        egm_info("unmount: %s (already gone at the master)", egm_last_error());
        status = EGM_OK;
    }
    if (status == EGM_OK)
        for (size_t i = first; i < first + n; i++)
            cap->mounted[i] = 0;
out:
    egm_free(ids);
    egm_free(ptrs);
    return status;
}

/* egm_handle_type -> the pool's handle kinds. */
static egm_vmm_handles_t vmm_handles(egm_handle_type_t type)
{
    switch (type) {
    case EGM_HANDLE_TYPE_FABRIC:
        return EGM_VMM_HANDLES_FABRIC;
    case EGM_HANDLE_TYPE_POSIX_FD:
        return EGM_VMM_HANDLES_POSIX_FD;
    case EGM_HANDLE_TYPE_AUTO:
        break;
    }
    return EGM_VMM_HANDLES_AUTO;
}

egm_status_t egm__capacity_check_config(const egm_config_t *config)
{
    const egm_settings_t *settings = egm__config_settings(config);
    if (!settings->enable_egm_store_pool)
        return EGM_OK;
    if (settings->protocol != EGM_PROTOCOL_AUTO && settings->protocol != EGM_PROTOCOL_NVLINK)
        return egm__set_error(EGM_ERR_CONFIG,
                              "enable_egm_store_pool: protocol=%s excludes nvlink, the EGM pool's "
                              "transport; use protocol=auto or protocol=nvlink",
                              EGM_CONFIG_TEXT(config, protocol));
    if (settings->global_segment_size == 0)
        return egm__set_error(EGM_ERR_CONFIG,
                              "enable_egm_store_pool: global_segment_size is 0; give the pool's "
                              "capacity (e.g. global_segment_size=64GiB)");
    if (EGM_CONFIG_IS_SET(config, pool_memory) &&
        settings->pool_memory != EGM_POOL_MEMORY_HOST_NUMA)
        return egm__set_error(EGM_ERR_CONFIG,
                              "enable_egm_store_pool: pool_memory=%s conflicts with the EGM pool "
                              "(HOST_NUMA memory on egm_numa_nodes); drop pool_memory",
                              EGM_CONFIG_TEXT(config, pool_memory));
    int is_auto = 0, *nodes = NULL;
    size_t n = 0;
    egm_status_t status = egm__egm_plan_parse_nodes(settings->egm_numa_nodes, &is_auto, &nodes, &n);
    egm_free(nodes);
    return status;
}

static void on_progress(void *arg, uint64_t done, uint64_t total, size_t done_chunks,
                        size_t total_chunks)
{
    (void)done_chunks;
    (void)total_chunks;
    egm_progress_t *bar = arg;
    bar->total = total; /* the plan's capacity: the request rounded down */
    egm__progress_update(bar, done);
}

/* The VMM pool parameters the config asks for (EGM pool, or pool_memory
 * host_numa|device). *nodes_p (egm_malloc'ed) backs p->locations. */
static egm_status_t vmm_params(const egm_config_t *config, egm_vmm_pool_params_t *p, int **nodes_p)
{
    const egm_settings_t *settings = egm__config_settings(config);
    int egm = settings->enable_egm_store_pool;
    int *nodes = NULL;
    size_t n_nodes = 1;
    egm_status_t status;

    if (egm) {
        status = egm__egm_nodes_resolve(settings->egm_numa_nodes, &nodes, &n_nodes);
        if (status != EGM_OK)
            return status;
    } else {
        if ((nodes = egm_malloc(sizeof(*nodes), "client.pool_location")) == NULL)
            return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory");
        nodes[0] = (int)settings->pool_location;
    }
    *p = (egm_vmm_pool_params_t){
        .location = !egm && settings->pool_memory == EGM_POOL_MEMORY_DEVICE ? EGM_VMM_DEVICE
                                                                            : EGM_VMM_HOST_NUMA,
        .locations = nodes,
        .location_count = n_nodes,
        .handles = vmm_handles(settings->egm_handle_type),
        .total = settings->global_segment_size,
        .max_chunk = settings->max_mr_size,
        .allocator_alignment = EGM_OBJECT_ALIGN,
        .threads = (unsigned)settings->egm_setup_threads,
        .locations_key = egm ? "egm_numa_nodes" : "pool_location",
        .allow_overcommit = settings->allow_overcommit,
    };
    *nodes_p = nodes;
    return EGM_OK;
}

egm_status_t egm__capacity_plan(const egm_config_t *config, egm_egm_plan_t **plan_p)
{
    egm_vmm_pool_params_t params;
    int *nodes = NULL;

    egm_status_t status = egm__capacity_check_config(config);
    if (status != EGM_OK)
        return status;
    const egm_settings_t *settings = egm__config_settings(config);
    if (!settings->enable_egm_store_pool && settings->pool_memory == EGM_POOL_MEMORY_HOST) {
        /* No CUDA plan to print, but the same check as at setup. */
        uint64_t chunks = 0;
        status = egm__host_pool_check(settings->global_segment_size, settings->max_mr_size,
                                      settings->allow_overcommit, &chunks);
        if (status != EGM_OK)
            return status;
        return egm__set_error(EGM_ERR_CONFIG,
                              "--plan-only: plans a CUDA pool; set enable_egm_store_pool=true (or "
                              "pool_memory=host_numa|device) (this memfd pool of %llu chunk(s) "
                              "fits this host's memory and descriptor limit)",
                              (unsigned long long)chunks);
    }
    if ((status = vmm_params(config, &params, &nodes)) != EGM_OK)
        return status;
    status = egm__vmm_pool_plan(&params, plan_p);
    egm_free(nodes);
    return status;
}

/* Allocates the pool the config asks for; fills cap->count. */
static egm_status_t create_pool(egm_client_t *client, uint64_t total, uint64_t max_chunk)
{
    egm_capacity_t *cap = &client->capacity;
    const egm_config_t *config = client->config;
    egm_status_t status;

    const egm_settings_t *settings = egm__config_settings(config);
    cap->egm = settings->enable_egm_store_pool;
    if (!cap->egm && settings->pool_memory == EGM_POOL_MEMORY_HOST) {
        status = egm__host_pool_create(total, max_chunk, settings->allow_overcommit, &cap->pool);
        if (status == EGM_OK) {
            cap->count = egm__host_pool_chunk_count(cap->pool);
            cap->numa_nodes = 1;
        }
        return status;
    }

    egm_vmm_pool_params_t params;
    int *nodes = NULL;
    if ((status = vmm_params(config, &params, &nodes)) != EGM_OK)
        return status;
    params.total = total;
    params.max_chunk = max_chunk;
    egm_progress_t progress;
    egm__progress_start(&progress, cap->egm ? "EGM pool setup" : "VMM pool setup", total);
    params.progress = on_progress;
    params.progress_arg = &progress;
    status = egm__vmm_pool_create(&params, &cap->vmm);
    if (status == EGM_OK) {
        const egm_egm_plan_t *plan = egm__vmm_pool_plan_of(cap->vmm);
        cap->count = egm__vmm_pool_chunk_count(cap->vmm);
        cap->numa_nodes = params.location_count;
        egm__progress_finish(&progress, plan->capacity, EGM_OK);
    } else {
        egm__progress_finish(&progress, 0, status);
        if (cap->vmm != NULL) /* a rollback step failed: retried by the next close */
            cap->cleanup_pending = 1;
    }
    egm_free(nodes);
    return status;
}

static egm_status_t expose_chunk(egm_client_t *client, size_t i, egm_segment_desc_t *desc)
{
    egm_capacity_t *cap = &client->capacity;
    if (cap->pool != NULL) {
        const egm_pool_chunk_t *chunk = egm__host_pool_chunk(cap->pool, i);
        desc->size = chunk->size;
        desc->handle_kind = EGM_HANDLE_MEMFD;
        return egm__te_expose_segment(client->te, desc, chunk->base, chunk->memfd);
    }
    const egm_vmm_chunk_t *chunk = egm__vmm_pool_chunk(cap->vmm, i);
    return egm__te_expose_vmm_segment(client->te, desc, chunk->base, chunk->size, chunk->handle,
                                      (egm_handle_kind_t)egm__vmm_chunk_handle_kind(chunk),
                                      chunk->device);
}

static egm_status_t mount_all(egm_client_t *client)
{
    egm_capacity_t *cap = &client->capacity;
    for (size_t first = 0; first < cap->count; first += SEGMENTS_PER_RPC) {
        size_t n = cap->count - first < SEGMENTS_PER_RPC ? cap->count - first : SEGMENTS_PER_RPC;
        egm_status_t status = mount_segments(client, NULL, first, n);
        if (status != EGM_OK) {
            char detail[512];
            snprintf(detail, sizeof(detail), "%s", egm_last_error());
            egm_error("mounting segments %zu..%zu of %zu failed: %s", first, first + n - 1,
                      cap->count, detail);
            return egm__set_error(status, "mounting the pool's segments at the master: %s", detail);
        }
    }
    return EGM_OK;
}

egm_status_t egm__capacity_mount(egm_client_t *client, uint64_t total, uint64_t max_chunk)
{
    egm_capacity_t *cap = &client->capacity;
    egm_status_t status;

    status = create_pool(client, total, max_chunk);
    if (status != EGM_OK)
        return status;
    cap->segments = egm_calloc(cap->count, sizeof(*cap->segments), "client.segments");
    cap->exposed = egm_calloc(cap->count, sizeof(*cap->exposed), "client.segments");
    cap->mounted = egm_calloc(cap->count, sizeof(*cap->mounted), "client.segments");
    if (cap->segments == NULL || cap->exposed == NULL || cap->mounted == NULL) {
        status = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory describing segments");
        goto err;
    }

    /* Register every chunk, then publish them all: the master never lists
     * part of a pool. */
    for (size_t i = 0; i < cap->count; i++) {
        egm_segment_desc_t *desc = &cap->segments[i];
        desc->id = egm__id_random();
        desc->owner = client->id;
        snprintf(desc->name, sizeof(desc->name), "%s:%d/%zu", egm__host_name(), (int)getpid(), i);
        status = expose_chunk(client, i, desc);
        if (status != EGM_OK)
            goto err;
        cap->exposed[i] = 1;
        cap->capacity += desc->size;
    }
    status = mount_all(client);
    if (status != EGM_OK)
        goto err;
    cap->setup_seconds = cap->vmm ? egm__vmm_pool_setup_seconds(cap->vmm) : 0.0;
    pthread_mutex_lock(&client->cap_lock);
    cap->live = 1; /* from now on a restarted master gets it again */
    pthread_mutex_unlock(&client->cap_lock);
    char size_text[32];
    egm_info("%s ready: %zu segment(s), %s on %zu %s, memory %s, first %s tcp %s shm %s",
             cap->egm ? "EGM pool" : "pool", cap->count,
             egm__format_size(cap->capacity, size_text, sizeof(size_text)), cap->numa_nodes,
             egm__config_settings(client->config)->pool_memory == EGM_POOL_MEMORY_DEVICE &&
                     !cap->egm
                 ? "GPU"
                 : "NUMA node(s)",
             cap->egm ? "egm" : EGM_CONFIG_TEXT(client->config, pool_memory), cap->segments[0].name,
             cap->segments[0].tcp_endpoint[0] ? cap->segments[0].tcp_endpoint : "-",
             cap->segments[0].shm_socket[0] ? cap->segments[0].shm_socket : "-");
    return EGM_OK;

err:;
    char detail[768];
    snprintf(detail, sizeof(detail), "%s", egm_last_error());
    if (egm__capacity_unmount(client) != EGM_OK)
        egm_error("rolling back the pool: %s (retried by the next close)", egm_last_error());
    return egm__set_error(status, "%s", detail);
}

/* One failed teardown step: counted, logged, and the rest waits for a retry. */
static egm_status_t teardown_failed(egm_capacity_t *cap, egm_status_t status, const char *step)
{
    char detail[512];
    snprintf(detail, sizeof(detail), "%s", egm_last_error());
    cap->cleanup_pending = 1;
    cap->cleanup_failures++;
    egm_warn("pool teardown: %s failed: %s; kept for a retry (health: cleanup_pending)", step,
             detail);
    return egm__set_error(status, "pool teardown: %s: %s", step, detail);
}

static egm_status_t unmount_locked(egm_client_t *client)
{
    egm_capacity_t *cap = &client->capacity;
    egm_status_t status;

    cap->live = 0; /* torn down from now on: never remounted */

    /* 1. Unmount: no new replica can be placed on the segments after this,
     * and no Get is routed to them. Until the master confirms, the memory
     * stays exactly as it is. */
    for (size_t first = 0; cap->mounted != NULL && first < cap->count; first += SEGMENTS_PER_RPC) {
        size_t n = cap->count - first < SEGMENTS_PER_RPC ? cap->count - first : SEGMENTS_PER_RPC;
        if ((status = unmount_range(client, first, n)) != EGM_OK)
            return teardown_failed(cap, status, "unmount at the master");
    }
    /* 2. Unregister: withdraw waits for transfers in flight on the segment. */
    for (size_t i = cap->count; cap->exposed != NULL && i-- > 0;) {
        if (!cap->exposed[i])
            continue;
        status = egm__te_withdraw_segment(client->te, cap->segments[i].id);
        if (status != EGM_OK && status != EGM_ERR_SEGMENT_NOT_FOUND && status != EGM_ERR_NOT_FOUND)
            return teardown_failed(cap, status, "unregister from the transfer engine");
        cap->exposed[i] = 0;
    }
    /* 3. Release the memory: unmap -> free the range -> release the handle. */
    egm__host_pool_destroy(cap->pool);
    cap->pool = NULL;
    if (cap->vmm != NULL) {
        if ((status = egm__vmm_pool_release(cap->vmm)) != EGM_OK)
            return teardown_failed(cap, status, "release of the pool's memory");
        egm__vmm_pool_destroy(cap->vmm);
        cap->vmm = NULL;
    }
    egm_free(cap->segments);
    egm_free(cap->exposed);
    egm_free(cap->mounted);
    uint64_t failures = cap->cleanup_failures;
    memset(cap, 0, sizeof(*cap));
    cap->cleanup_failures = failures;
    return EGM_OK;
}

egm_status_t egm__capacity_unmount(egm_client_t *client)
{
    /* Waits for a remount in progress (the ping thread) to finish. */
    pthread_mutex_lock(&client->cap_lock);
    egm_status_t status = unmount_locked(client);
    pthread_mutex_unlock(&client->cap_lock);
    return status;
}

static void abandon_locked(egm_client_t *client)
{
    egm_capacity_t *cap = &client->capacity;
    int published = 0;
    /* Stop serving first: nothing in this process touches the memory after. */
    for (size_t i = cap->count; cap->exposed != NULL && i-- > 0;)
        if (cap->exposed[i])
            egm__te_withdraw_segment(client->te, cap->segments[i].id);
    for (size_t i = 0; cap->mounted != NULL && i < cap->count; i++)
        published |= cap->mounted[i];
    /* A memfd pool may go: consumers hold their own mappings of it, and no
     * new one can be handed out once withdrawn. */
    egm__host_pool_destroy(cap->pool);
    if (published && cap->vmm != NULL) {
        /* The master may still name these segments (until client_ttl expires
         * this client): the CUDA memory is never released, only left to the
         * process's exit. */
        egm_error("pool teardown: %zu segment(s) may still be listed at the master; their "
                  "CUDA memory is left to the process's exit",
                  cap->count);
        egm__vmm_pool_forget(cap->vmm);
    } else {
        egm__vmm_pool_destroy(cap->vmm); /* logs what it abandons */
    }
    egm_free(cap->segments);
    egm_free(cap->exposed);
    egm_free(cap->mounted);
    memset(cap, 0, sizeof(*cap));
}

void egm__capacity_abandon(egm_client_t *client)
{
    pthread_mutex_lock(&client->cap_lock);
    abandon_locked(client);
    pthread_mutex_unlock(&client->cap_lock);
}

void egm__capacity_publish(egm_client_t *client)
{
    const egm_capacity_t *cap = &client->capacity;
    egm_capacity_view_t v = {
        .egm = cap->egm,
        .capacity = cap->capacity,
        .chunks = cap->count,
        .numa_nodes = cap->numa_nodes,
        .setup_seconds = cap->setup_seconds,
        .cleanup_failures = cap->cleanup_failures,
        .cleanup_pending = cap->cleanup_pending,
    };
    pthread_mutex_lock(&client->lock);
    client->capacity_view = v;
    pthread_mutex_unlock(&client->lock);
}

int egm__capacity_id_compare(const void *a, const void *b)
{
    const egm_id_t *x = a, *y = b;
    if (x->hi != y->hi)
        return x->hi < y->hi ? -1 : 1;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

int egm__capacity_owns_any(egm_client_t *client, const egm_id_t *ids, size_t n)
{
    const egm_capacity_t *cap = &client->capacity;
    int owns = 0;
    pthread_mutex_lock(&client->cap_lock);
    for (size_t i = 0; cap->live && i < cap->count && !owns; i++)
        for (size_t k = 0; k < n && !owns; k++)
            owns = egm__id_equal(cap->segments[i].id, ids[k]);
    pthread_mutex_unlock(&client->cap_lock);
    return owns;
}

/* Segment i under a new id: the old one stops being served first (withdraw
 * waits for its requests in flight), so nothing reaches this memory by an id
 * the new master never issued. */
static egm_status_t renew_segment(egm_client_t *client, size_t i)
{
    egm_capacity_t *cap = &client->capacity;
    egm_segment_desc_t *desc = &cap->segments[i];

    cap->mounted[i] = 0; /* the master does not list it */
    if (cap->exposed[i]) {
        egm_status_t status = egm__te_withdraw_segment(client->te, desc->id);
        if (status != EGM_OK && status != EGM_ERR_SEGMENT_NOT_FOUND)
            return status;
        cap->exposed[i] = 0;
    }
    desc->id = egm__id_random();
    egm_status_t status = expose_chunk(client, i, desc);
    if (status == EGM_OK)
        cap->exposed[i] = 1;
    return status;
}

egm_status_t egm__capacity_remount(egm_client_t *client, const egm_id_t *listed, size_t n_listed,
                                   size_t *remounted_p)
{
    egm_capacity_t *cap = &client->capacity;
    egm_status_t status = EGM_OK;
    size_t *idx = NULL, n = 0;

    *remounted_p = 0;
    pthread_mutex_lock(&client->cap_lock);
    if (!cap->live || cap->count == 0)
        goto out;
    if ((idx = egm_calloc(cap->count, sizeof(*idx), "client.remount")) == NULL) {
        status = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory remounting segments");
        goto out;
    }
    for (size_t i = 0; i < cap->count; i++)
        if (n_listed == 0 || bsearch(&cap->segments[i].id, listed, n_listed, sizeof(*listed),
                                     egm__capacity_id_compare) == NULL)
            idx[n++] = i;
    for (size_t k = 0; k < n; k++)
        if ((status = renew_segment(client, idx[k])) != EGM_OK) {
            char detail[512];
            snprintf(detail, sizeof(detail), "%s", egm_last_error());
            status =
                egm__set_error(status, "exposing segment %zu under a new id: %s", idx[k], detail);
            goto out;
        }
    for (size_t first = 0; first < n; first += SEGMENTS_PER_RPC) {
        size_t m = n - first < SEGMENTS_PER_RPC ? n - first : SEGMENTS_PER_RPC;
        if ((status = mount_segments(client, idx + first, 0, m)) != EGM_OK)
            goto out;
        *remounted_p += m;
    }
out:
    pthread_mutex_unlock(&client->cap_lock);
    egm_free(idx);
    return status;
}
