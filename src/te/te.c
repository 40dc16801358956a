/* Transfer engine: exposes local segments (provider side) and moves bytes to
 * and from segments through the best transport `protocol` allows (consumer
 * side). The transports are ops tables registered in transport.c, in order
 * of preference (local, nvlink, shm, tcp): routing walks that list, and GPU
 * buffers bound for a host-memory-only transport go through the pinned
 * staging ring. */
#include "te/te.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/config_int.h"
#include "common/log.h"
#include "common/sock.h"
#include "cuda/driver.h"
#include "te/nvlink.h"
#include "te/te_int.h"
#include "te/transport.h"

/* Ops per transfer whose bookkeeping lives on the stack. */
#define STACK_OPS 64

typedef struct {
    const egm_transport_ops_t *ops;
    void *state;
    size_t index; /* in egm__transports: the egm_transport_t */
} route_entry_t;

struct egm_te {
    egm_id_t client_id;
    egm_protocol_t protocol;
    char local_hostname[EGM_ENDPOINT_MAX];
    char listen_host[EGM_ENDPOINT_MAX];
    int has_listen_host;
    uint16_t data_port;
    int io_timeout_ms;
    char host_id[EGM_HOST_ID_MAX];
    char zone[EGM_ZONE_MAX];

    egm_te_counters_t counters;
    egm_exposed_table_t *exposed;
    egm_registry_t *registry;   /* the client's; may be NULL */
    const egm_cuda_api_t *cuda; /* NULL without a driver (or a GPU) */
    egm_status_t cuda_status;   /* why cuda is NULL: status and text */
    char cuda_missing[256];
    egm_nvlink_t *nvlink;                      /* non-NULL exactly when cuda is */
    egm_te_env_t env;                          /* lent to the transports */
    void *transport_state[EGM_TRANSPORTS_MAX]; /* by egm__transports index */
    size_t n_open;                             /* transports opened so far */
    /* Routing's walk, fixed at creation (no per-op filtering): the transports
     * the protocol allows and that can reach something here, in order of
     * preference; the retired check runs before route[retired_at]. */
    route_entry_t route[EGM_TRANSPORTS_MAX];
    size_t n_route, retired_at;
    route_entry_t retirers[EGM_TRANSPORTS_MAX]; /* those with a retired op */
    size_t n_retirers;

    char auth_token[EGM_AUTH_TOKEN_MAX + 1]; /* "" = none */
    egm_te_auth_t auth;                      /* points at auth_token */
    pthread_mutex_t servers_lock;            /* servers start on the first expose */
    egm_fd_broker_t *broker;
    egm_tcp_server_t *server;
};

static egm_status_t copy_param(const char *field, const char *src, char *dst, size_t cap)
{
    size_t len = strlen(src);
    if (len >= cap)
        return egm__set_error(EGM_ERR_INVALID_ARG, "%s: longer than %zu bytes", field, cap - 1);
    memcpy(dst, src, len + 1);
    return EGM_OK;
}

/* GPU features when there is a driver and a GPU; without them everything
 * else works, unless the protocol demands nvlink. */
static egm_status_t cuda_open(egm_te_t *te, const egm_te_params_t *params)
{
    const egm_cuda_api_t *api = NULL;
    int ndev = 0;
    egm_status_t st = egm__cuda_load(&api);
    if (st == EGM_OK)
        st = egm__cuda_count_devices(&ndev);
    if (st == EGM_OK && ndev <= 0)
        st = egm__set_error(EGM_ERR_NO_CUDA, "no CUDA device visible");
    if (st != EGM_OK) {
        te->cuda_status = st;
        snprintf(te->cuda_missing, sizeof(te->cuda_missing), "%s", egm_last_error());
        if (te->protocol == EGM_PROTOCOL_NVLINK) {
            char detail[256];
            snprintf(detail, sizeof(detail), "%s", egm_last_error());
            return egm__set_error(EGM_ERR_NO_CUDA, "protocol=nvlink: %s", detail);
        }
        egm_debug("te: no GPU transports: %s", egm_last_error());
        return EGM_OK;
    }
    egm_nvlink_params_t np = {.timeout_ms = te->io_timeout_ms,
                              .copy_low_priority = params->copy_low_priority,
                              .copy_max_inflight_bytes = params->copy_max_inflight_bytes,
                              .copy_chunk_bytes = params->copy_chunk_bytes,
                              .copy_bounce_bytes = params->copy_bounce_bytes,
                              .prewarm_off = params->prewarm_off,
                              .prewarm_concurrency = params->prewarm_concurrency,
                              .auth_token = te->auth_token};
    if ((st = egm__nvlink_create(api, &np, &te->nvlink)) != EGM_OK)
        return st;
    te->cuda = api;
    return EGM_OK;
}

static int allowed(const egm_te_t *te, const egm_transport_ops_t *ops)
{
    return ops->own_memory || te->protocol == EGM_PROTOCOL_AUTO || ops->protocol == te->protocol;
}

/* The walks routing takes on every op, once the transports are open. */
static void plan_routes(egm_te_t *te)
{
    te->n_route = te->n_retirers = 0;
    te->retired_at = SIZE_MAX;
    for (size_t t = 0; t < te->n_open; t++) {
        const egm_transport_ops_t *ops = egm__transports[t];
        route_entry_t entry = {.ops = ops, .state = te->transport_state[t], .index = t};
        if (ops->unavailable != NULL && ops->unavailable(entry.state) != NULL)
            continue;
        if (ops->retired != NULL)
            te->retirers[te->n_retirers++] = entry;
        if (!allowed(te, ops))
            continue;
        if (!ops->own_memory && te->retired_at == SIZE_MAX)
            te->retired_at = te->n_route;
        te->route[te->n_route++] = entry;
    }
}

/* In reverse order of opening. */
static void close_transports(egm_te_t *te)
{
    while (te->n_open > 0) {
        te->n_open--;
        const egm_transport_ops_t *ops = egm__transports[te->n_open];
        if (ops->close != NULL)
            ops->close(te->transport_state[te->n_open]);
        te->transport_state[te->n_open] = NULL;
    }
}

egm_status_t egm__te_create(const egm_te_params_t *params, egm_te_t **te_p)
{
    egm_status_t st;

    if (params == NULL || te_p == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "te: missing parameters");
    if (params->protocol != EGM_PROTOCOL_AUTO && params->protocol != EGM_PROTOCOL_SHM &&
        params->protocol != EGM_PROTOCOL_TCP && params->protocol != EGM_PROTOCOL_NVLINK)
        return egm__set_error(EGM_ERR_INVALID_ARG, "protocol: %d is not auto|nvlink|shm|tcp",
                              (int)params->protocol);
    if (params->prewarm_concurrency < 0 ||
        params->prewarm_concurrency > EGM_PREWARM_MAX_CONCURRENCY)
        return egm__set_error(EGM_ERR_INVALID_ARG, "prewarm_concurrency: %d not in 0..%d",
                              params->prewarm_concurrency, EGM_PREWARM_MAX_CONCURRENCY);
    if (params->copy_max_inflight_bytes > 0 && params->copy_max_inflight_bytes < EGM_TE_CHUNK_MIN)
        return egm__set_error(EGM_ERR_CONFIG,
                              "nvlink_max_inflight_bytes: %" PRIu64 " is neither 0 (unbounded) "
                              "nor at least %d bytes",
                              params->copy_max_inflight_bytes, EGM_TE_CHUNK_MIN);
    if (params->copy_chunk_bytes > 0 && params->copy_chunk_bytes < EGM_TE_CHUNK_MIN)
        return egm__set_error(EGM_ERR_CONFIG,
                              "nvlink_chunk_size: %" PRIu64 " is neither 0 (copies whole) nor at "
                              "least %d bytes",
                              params->copy_chunk_bytes, EGM_TE_CHUNK_MIN);
    if (params->copy_bounce_bytes > 0 && params->copy_bounce_bytes < EGM_TE_BOUNCE_MIN)
        return egm__set_error(EGM_ERR_CONFIG,
                              "nvlink_bounce_buffer: %" PRIu64 " is neither 0 (off) nor at least "
                              "%llu bytes (two halves of 4 MiB)",
                              params->copy_bounce_bytes, (unsigned long long)EGM_TE_BOUNCE_MIN);
    egm_te_t *te = egm_calloc(1, sizeof(*te), "te");
    if (te == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "te: out of memory");
    te->client_id = params->client_id;
    te->protocol = params->protocol;
    te->data_port = params->data_port;
    te->io_timeout_ms = params->io_timeout_ms > 0 ? params->io_timeout_ms : 10000;
    te->registry = params->registry;
    const char *hostname = params->local_hostname && params->local_hostname[0]
                               ? params->local_hostname
                               : egm__host_name();
    if ((st = copy_param("local_hostname", hostname, te->local_hostname,
                         sizeof(te->local_hostname))) != EGM_OK)
        goto err_te;
    if (params->data_listen_host != NULL) {
        st = copy_param("data_listen_host", params->data_listen_host, te->listen_host,
                        sizeof(te->listen_host));
        if (st != EGM_OK)
            goto err_te;
        te->has_listen_host = 1;
    }
    if ((st = copy_param("host_id", egm__host_id(), te->host_id, sizeof(te->host_id))) != EGM_OK)
        goto err_te;
    if (params->zone != NULL &&
        ((st = copy_param("zone", params->zone, te->zone, sizeof(te->zone))) != EGM_OK ||
         (st = egm__segment_check_string("zone", te->zone, sizeof(te->zone))) != EGM_OK))
        goto err_te;
    if (params->auth_token != NULL &&
        (st = copy_param("auth_token", params->auth_token, te->auth_token,
                         sizeof(te->auth_token))) != EGM_OK)
        goto err_te;
    te->auth.token = te->auth_token;
    te->auth.fd_allowed_gid = params->fd_gid_allowed ? params->fd_allowed_gid : -1;
    pthread_mutex_init(&te->servers_lock, NULL);

    if ((st = egm__exposed_create(&te->exposed)) != EGM_OK)
        goto err_lock;
    if ((st = cuda_open(te, params)) != EGM_OK)
        goto err_exposed;
    te->env = (egm_te_env_t){.client_id = te->client_id,
                             .host_id = te->host_id,
                             .auth_token = te->auth_token,
                             .io_timeout_ms = te->io_timeout_ms,
                             .exposed = te->exposed,
                             .nvlink = te->nvlink};
    for (; te->n_open < egm__n_transports; te->n_open++) {
        const egm_transport_ops_t *ops = egm__transports[te->n_open];
        if (ops->open != NULL &&
            (st = ops->open(&te->env, &te->transport_state[te->n_open])) != EGM_OK)
            goto err_transports;
    }
    plan_routes(te);
    *te_p = te;
    return EGM_OK;

err_transports:
    close_transports(te);
    egm__nvlink_destroy(te->nvlink);
err_exposed:
    egm__exposed_destroy(te->exposed);
err_lock:
    pthread_mutex_destroy(&te->servers_lock);
err_te:
    egm_free(te);
    return st;
}

size_t egm__te_transports(const egm_te_t *te, const char **names, size_t cap)
{
    size_t n = 0;
    for (size_t i = 0; te != NULL && i < te->n_route; i++) {
        if (te->route[i].ops->own_memory)
            continue; /* this process's own segments: not a way to reach others */
        if (n < cap)
            names[n] = te->route[i].ops->name;
        n++;
    }
    return n;
}

void egm__te_destroy(egm_te_t *te)
{
    if (te == NULL)
        return;
    /* Servers first: they are the only users of the exposed table. */
    egm__tcp_server_stop(te->server);
    egm__fd_broker_stop(te->broker);
    close_transports(te);
    egm__nvlink_destroy(te->nvlink);
    egm__exposed_destroy(te->exposed);
    pthread_mutex_destroy(&te->servers_lock);
    egm__secure_zero(te->auth_token, sizeof(te->auth_token));
    egm_free(te);
}

static egm_status_t start_servers(egm_te_t *te)
{
    egm_status_t st = EGM_OK;

    pthread_mutex_lock(&te->servers_lock);
    if (te->broker == NULL) {
        st = egm__fd_broker_start(te->exposed, &te->counters, te->cuda, &te->auth, &te->broker);
        if (st != EGM_OK)
            goto out;
    }
    if (te->server == NULL) {
        st = egm__tcp_server_start(te->exposed, &te->counters, &te->auth,
                                   te->has_listen_host ? te->listen_host : NULL, te->data_port,
                                   te->io_timeout_ms, &te->server);
        if (st != EGM_OK)
            goto out;
        egm_info("te: data server on port %u, fd broker %s",
                 (unsigned)egm__tcp_server_port(te->server), egm__fd_broker_name(te->broker));
    }
out:
    pthread_mutex_unlock(&te->servers_lock);
    return st;
}

static egm_status_t fill_endpoints(egm_te_t *te, egm_segment_desc_t *desc)
{
    snprintf(desc->host_id, sizeof(desc->host_id), "%s", te->host_id);
    snprintf(desc->zone, sizeof(desc->zone), "%s", te->zone);
    char where[sizeof(desc->tcp_endpoint) + 1];
    egm__sock_format_hostport(te->local_hostname, egm__tcp_server_port(te->server), where,
                              sizeof(where));
    if (strlen(where) >= sizeof(desc->tcp_endpoint))
        return egm__set_error(EGM_ERR_INVALID_ARG, "local_hostname: too long for an endpoint");
    memcpy(desc->tcp_endpoint, where, strlen(where) + 1);
    return EGM_OK;
}

/* What every exposed segment needs, whatever its memory. */
static egm_status_t expose_check(const egm_te_t *te, const egm_segment_desc_t *desc,
                                 const void *base, uint64_t size)
{
    if (te == NULL || desc == NULL || base == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "expose: missing segment or memory");
    if (egm__id_is_nil(desc->id))
        return egm__set_error(EGM_ERR_INVALID_ARG, "expose: segment id is nil");
    if (size == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "expose: segment size is 0");
    return EGM_OK;
}

egm_status_t egm__te_expose_segment(egm_te_t *te, egm_segment_desc_t *desc, void *base, int memfd)
{
    egm_status_t st;
    char text[EGM_ID_STRLEN];

    if ((st = expose_check(te, desc, base, desc->size)) != EGM_OK)
        return st;
    if ((st = start_servers(te)) != EGM_OK)
        return st;

    /* Fill the descriptor before publishing: the caller mounts it next. */
    if ((st = fill_endpoints(te, desc)) != EGM_OK)
        return st;
    desc->fabric_handle_len = 0;
    if (memfd >= 0) {
        snprintf(desc->shm_socket, sizeof(desc->shm_socket), "%s", egm__fd_broker_name(te->broker));
        desc->handle_kind = EGM_HANDLE_MEMFD;
    } else {
        desc->shm_socket[0] = '\0';
        desc->handle_kind = EGM_HANDLE_NONE;
    }
    if ((st = egm__exposed_add(te->exposed, desc->id, base, desc->size, memfd)) != EGM_OK)
        return st;
    egm_debug("te: exposed segment %s (%" PRIu64 " bytes)", egm__id_format(desc->id, text),
              desc->size);
    return EGM_OK;
}

/* The handle must leave as its kind: checked now rather than at a consumer's
 * first import. Fabric bytes go into the descriptor. */
static egm_status_t export_check(egm_te_t *te, egm_segment_desc_t *desc, egm_cu_mem_handle_t handle,
                                 egm_handle_kind_t kind)
{
    egm_cu_result_t rc;
    if (kind == EGM_HANDLE_FABRIC) {
        egm_cu_fabric_handle_t fabric;
        rc = te->cuda->cuMemExportToShareableHandle(&fabric, handle, EGM_CU_MEM_HANDLE_TYPE_FABRIC,
                                                    0);
        egm_status_t st = egm__cuda_check(rc, "cuMemExportToShareableHandle(fabric)");
        if (st != EGM_OK)
            return st;
        _Static_assert(sizeof(fabric.data) == sizeof(desc->fabric_handle), "fabric handle size");
        memcpy(desc->fabric_handle, fabric.data, sizeof(fabric.data));
        desc->fabric_handle_len = (uint8_t)sizeof(fabric.data);
        return EGM_OK;
    }
    int fd = -1;
    rc = te->cuda->cuMemExportToShareableHandle(&fd, handle,
                                                EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    egm_status_t st = egm__cuda_check(rc, "cuMemExportToShareableHandle(posix_fd)");
    if (st == EGM_OK && fd >= 0)
        close(fd);
    desc->fabric_handle_len = 0;
    return st;
}

egm_status_t egm__te_expose_vmm_segment(egm_te_t *te, egm_segment_desc_t *desc, void *base,
                                        uint64_t size, egm_cu_mem_handle_t handle,
                                        egm_handle_kind_t handle_kind, int device)
{
    egm_status_t st;
    char text[EGM_ID_STRLEN];

    if ((st = expose_check(te, desc, base, size)) != EGM_OK)
        return st;
    if (handle_kind != EGM_HANDLE_POSIX_FD && handle_kind != EGM_HANDLE_FABRIC)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "expose: handle kind %d is neither posix_fd nor fabric",
                              (int)handle_kind);
    if (device < -1)
        return egm__set_error(EGM_ERR_INVALID_ARG, "expose: device %d", device);
    if (te->cuda == NULL)
        return egm__set_error(te->cuda_status,
                              "expose: VMM segment without a usable CUDA driver: %s",
                              te->cuda_missing);
    if ((st = start_servers(te)) != EGM_OK)
        return st;

    desc->size = size;
    if ((st = export_check(te, desc, handle, handle_kind)) != EGM_OK)
        return st;
    if ((st = fill_endpoints(te, desc)) != EGM_OK)
        return st;
    /* GPU memory is nvlink-only: the data server cannot touch it. */
    if (device >= 0)
        desc->tcp_endpoint[0] = '\0';
    if (handle_kind == EGM_HANDLE_POSIX_FD)
        snprintf(desc->shm_socket, sizeof(desc->shm_socket), "%s", egm__fd_broker_name(te->broker));
    else
        desc->shm_socket[0] = '\0';
    desc->handle_kind = handle_kind;
    st = egm__exposed_add_vmm(te->exposed, desc->id, base, size, handle, handle_kind, device < 0,
                              device);
    if (st != EGM_OK)
        return st;
    egm_debug("te: exposed VMM segment %s (%" PRIu64 " bytes, %s, %s %d)",
              egm__id_format(desc->id, text), size,
              handle_kind == EGM_HANDLE_FABRIC ? "fabric" : "posix_fd",
              device < 0 ? "host" : "device", device);
    return EGM_OK;
}

egm_status_t egm__te_withdraw_segment(egm_te_t *te, egm_id_t segment_id)
{
    if (te == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "withdraw: no engine");
    return egm__exposed_unlink(te->exposed, segment_id);
}

/* 1 when one of the own-memory transports serves the segment. */
static int is_own(egm_te_t *te, const egm_segment_desc_t *segment)
{
    if (!egm__id_equal(segment->owner, te->client_id))
        return 0;
    for (size_t i = 0; i < te->n_route && te->route[i].ops->own_memory; i++)
        if (te->route[i].ops->obstacle(&te->env, te->route[i].state, segment, -1, NULL, 0) == NULL)
            return 1;
    return 0;
}

/* A retired id is gone for every transport (its provider may be too). */
static int is_retired(egm_te_t *te, egm_id_t segment_id)
{
    for (size_t i = 0; i < te->n_retirers; i++)
        if (te->retirers[i].ops->retired(te->retirers[i].state, segment_id))
            return 1;
    return 0;
}

/* The registered range the last op's buffer was found in, and its device: a
 * batch's buffers mostly lie in a few ranges (a KV cache's regions). */
typedef struct {
    uintptr_t base, end; /* end == 0: none yet */
    int device;
} device_memo_t;

/* Where an op's local buffer lives: GPU ordinal or -1 (host). An op marked
 * local_is_host, and registered buffers, need no driver call (the registry
 * knows); memo (or NULL) remembers the range. */
static int local_device(egm_te_t *te, const egm_te_op_t *op, device_memo_t *memo)
{
    int device = -1;
    const void *ptr = op->local;
    size_t len = op->length;
    uintptr_t at = (uintptr_t)ptr;
    if (te->cuda == NULL || ptr == NULL || op->local_is_host)
        return -1;
    if (memo != NULL && at >= memo->base && at < memo->end && len <= memo->end - at)
        return memo->device;
    uintptr_t base, end;
    if (te->registry != NULL &&
        egm__registry_device_range(te->registry, ptr, len, &device, &base, &end) == EGM_OK) {
        if (memo != NULL)
            *memo = (device_memo_t){.base = base, .end = end, .device = device};
        return device;
    }
    if (egm__cuda_pointer_device(ptr, &device) != EGM_OK)
        return -1;
    return device;
}

/* No allowed transport reaches the segment: each one's reason (error path). */
static egm_status_t unreachable(egm_te_t *te, const egm_segment_desc_t *segment, int device)
{
    char text[EGM_ID_STRLEN], detail[768] = "", why[256];
    const char *alone = NULL;
    size_t len = 0;

    for (size_t t = 0; t < egm__n_transports; t++) {
        const egm_transport_ops_t *ops = egm__transports[t];
        if (ops->own_memory || !allowed(te, ops))
            continue;
        const char *reason =
            ops->obstacle(&te->env, te->transport_state[t], segment, device, why, sizeof(why));
        if (te->protocol != EGM_PROTOCOL_AUTO)
            alone = ops->name;
        if (len < sizeof(detail))
            len += (size_t)snprintf(detail + len, sizeof(detail) - len, "%s%s: %s",
                                    len > 0 ? "; " : "", ops->name,
                                    reason != NULL ? reason : "reachable now");
    }
    egm__id_format(segment->id, text);
    if (alone != NULL)
        return egm__set_error(EGM_ERR_NOT_SUPPORTED,
                              "protocol=%s: segment %s is not reachable over %s", alone, text,
                              detail);
    return egm__set_error(EGM_ERR_NOT_SUPPORTED, "segment %s is not reachable by any transport: %s",
                          text, detail);
}

/* Route for a local buffer on `device` (-1: host memory): the first allowed
 * transport in the list that reaches the segment. */
static egm_status_t route(egm_te_t *te, const egm_segment_desc_t *segment, int device,
                          const route_entry_t **route_p)
{
    for (size_t i = 0; i < te->n_route; i++) {
        const route_entry_t *r = &te->route[i];
        if (i == te->retired_at && is_retired(te, segment->id)) {
            char text[EGM_ID_STRLEN];
            return egm__set_error(EGM_ERR_SEGMENT_NOT_FOUND, "segment %s was retired",
                                  egm__id_format(segment->id, text));
        }
        if (r->ops->own_memory && !egm__id_equal(segment->owner, te->client_id))
            continue;
        if (r->ops->obstacle(&te->env, r->state, segment, device, NULL, 0) == NULL) {
            *route_p = r;
            return EGM_OK;
        }
    }
    return unreachable(te, segment, device);
}

egm_status_t egm__te_route(egm_te_t *te, const egm_segment_desc_t *segment,
                           egm_transport_t *transport_p)
{
    const route_entry_t *r;
    if (te == NULL || segment == NULL || transport_p == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "route: missing segment");
    egm_status_t st = route(te, segment, -1, &r);
    if (st == EGM_OK)
        *transport_p = (egm_transport_t)r->index;
    return st;
}

int egm__te_may_route(const egm_te_t *te, egm_transport_t t)
{
    for (size_t i = 0; te != NULL && i < te->n_route; i++)
        if (te->route[i].index == (size_t)t)
            return 1;
    return 0;
}

egm_status_t egm__te_route_op(egm_te_t *te, const egm_te_op_t *op, egm_transport_t *transport_p)
{
    const route_entry_t *r;
    if (te == NULL || op == NULL || op->segment == NULL || transport_p == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "route: missing op or segment");
    egm_status_t st = route(te, op->segment, local_device(te, op, NULL), &r);
    if (st == EGM_OK)
        *transport_p = (egm_transport_t)r->index;
    return st;
}

/* Bounds and arguments of one op, before any transport sees it. */
static egm_status_t check_op(const egm_te_op_t *op)
{
    if (op->segment == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "transfer: op has no segment");
    if (op->local == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "transfer: local buffer is NULL");
    if (op->dir != EGM_TE_READ && op->dir != EGM_TE_WRITE)
        return egm__set_error(EGM_ERR_INVALID_ARG, "transfer: dir %d is neither read nor write",
                              (int)op->dir);
    if (op->length == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "transfer: length is 0");
    if (op->offset > op->segment->size || op->length > op->segment->size - op->offset) {
        char text[EGM_ID_STRLEN];
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "transfer: offset %" PRIu64 " + length %zu beyond segment %s of "
                              "%" PRIu64 " bytes",
                              op->offset, op->length, egm__id_format(op->segment->id, text),
                              op->segment->size);
    }
    return EGM_OK;
}

/* ---- one op ------------------------------------------------------------------ */

/* A piece of a staged op, moved by its host-memory-only transport. */
typedef struct {
    const egm_te_env_t *env;
    const egm_transport_ops_t *ops;
    void *state;
    const egm_te_op_t *op;
} hop_t;

static egm_status_t hop_transport(void *ctx, uint64_t off, void *slot, size_t n,
                                  egm_staging_dir_t dir)
{
    const hop_t *hop = ctx;
    egm_te_op_t piece = *hop->op;
    piece.offset += off;
    piece.local = slot;
    piece.length = n;
    piece.dir = dir == EGM_STAGING_TO_GPU ? EGM_TE_READ : EGM_TE_WRITE;
    return hop->ops->transfer(hop->env, hop->state, &piece, -1);
}

/* One op by a transport without a batch op; a GPU buffer bound for a
 * host-memory-only transport goes through the staging ring (the conventional
 * path nvlink is measured against). */
static egm_status_t transfer_one(egm_te_t *te, const route_entry_t *r, const egm_te_op_t *op,
                                 int device)
{
    if (device >= 0 && r->ops->host_memory_only) {
        hop_t hop = {.env = &te->env, .ops = r->ops, .state = r->state, .op = op};
        return egm__staging_copy(te->nvlink, device, (uint64_t)(uintptr_t)op->local, op->length,
                                 op->dir == EGM_TE_READ ? EGM_STAGING_TO_GPU : EGM_STAGING_FROM_GPU,
                                 hop_transport, &hop);
    }
    return r->ops->transfer(&te->env, r->state, op, device);
}

/* Keeps the detail of the failure of the lowest-numbered op. */
typedef struct {
    egm_status_t status;
    size_t index;
    char detail[256];
} first_failure_t;

static void note_failure(first_failure_t *f, size_t index, egm_status_t st)
{
    if (f->status != EGM_OK && f->index <= index)
        return;
    f->status = st;
    f->index = index;
    snprintf(f->detail, sizeof(f->detail), "%s", egm_last_error());
}

/* Whether an op for this transport, its buffer on `device`, waits for the
 * transport's batch: a GPU buffer bound for a host-memory-only transport
 * goes through the staging ring one op at a time instead. */
static int batched(const egm_transport_ops_t *ops, int device)
{
    return ops->transfer_batch != NULL && !(device >= 0 && ops->host_memory_only);
}

/* Where an op goes: its transport and the GPU of its local buffer (-1: host). */
typedef struct {
    const route_entry_t *route;
    int device;
} routed_t;

egm_status_t egm__te_transfer(egm_te_t *te, egm_te_op_t *ops, size_t n)
{
    routed_t stack_routed[STACK_OPS];
    size_t stack_pending[STACK_OPS];
    egm_te_op_t *stack_group[STACK_OPS];
    routed_t *routed = stack_routed;
    size_t *pending = stack_pending; /* ops of batching transports, by index */
    egm_te_op_t **group = stack_group;
    first_failure_t first = {.status = EGM_OK};

    if (te == NULL || (ops == NULL && n > 0))
        return egm__set_error(EGM_ERR_INVALID_ARG, "transfer: missing engine or ops");
    if (n > STACK_OPS) {
        routed = egm_malloc(n * sizeof(*routed), "te.transfer.routed");
        pending = egm_malloc(n * sizeof(*pending), "te.transfer.pending");
        group = egm_malloc(n * sizeof(*group), "te.transfer.group");
        if (routed == NULL || pending == NULL || group == NULL) {
            egm_free(routed);
            egm_free(pending);
            egm_free(group);
            egm_status_t st =
                egm__set_error(EGM_ERR_NO_MEMORY, "transfer: out of memory for %zu ops", n);
            for (size_t i = 0; i < n; i++)
                ops[i].status = st;
            return st;
        }
    }

    /* Route every op; run those of per-op transports now and keep the others
     * (nvlink: one batch per device). */
    size_t n_pending = 0;
    device_memo_t memo = {0};
    const egm_segment_desc_t *last_segment = NULL; /* ops of one object share its segment */
    routed_t last = {.device = -1, .route = NULL};
    for (size_t i = 0; i < n; i++) {
        egm_te_op_t *op = &ops[i];
        egm_status_t st = check_op(op);
        routed[i].device = -1;
        routed[i].route = NULL;
        if (st == EGM_OK) {
            routed[i].device = local_device(te, op, &memo);
            if (op->segment == last_segment && routed[i].device == last.device) {
                routed[i].route = last.route;
            } else {
                st = route(te, op->segment, routed[i].device, &routed[i].route);
                last_segment = st == EGM_OK ? op->segment : NULL;
                last = routed[i];
            }
        }
        if (st == EGM_OK && batched(routed[i].route->ops, routed[i].device)) {
            pending[n_pending++] = i;
            continue;
        }
        if (st == EGM_OK)
            st = transfer_one(te, routed[i].route, op, routed[i].device);
        op->status = st;
        if (st != EGM_OK)
            note_failure(&first, i, st);
    }

    /* One batch per transport and device. Each pass takes the ops of the
     * first op left's pair and compacts the rest. */
    while (n_pending > 0) {
        routed_t key = routed[pending[0]];
        size_t k = 0, left = 0;
        for (size_t j = 0; j < n_pending; j++) {
            const routed_t *r = &routed[pending[j]];
            if (r->device == key.device && r->route == key.route)
                group[k++] = &ops[pending[j]];
            else
                pending[left++] = pending[j];
        }
        if (key.route->ops->transfer_batch(&te->env, key.route->state, key.device, group, k) !=
            EGM_OK) {
            for (size_t j = 0; j < k; j++)
                if (group[j]->status != EGM_OK)
                    note_failure(&first, (size_t)(group[j] - ops), group[j]->status);
        }
        n_pending = left;
    }

    for (size_t i = 0; i < n; i++)
        if (ops[i].status == EGM_OK)
            atomic_fetch_add_explicit(ops[i].dir == EGM_TE_READ ? &te->counters.bytes_read
                                                                : &te->counters.bytes_written,
                                      ops[i].length, memory_order_relaxed);
    if (routed != stack_routed) {
        egm_free(routed);
        egm_free(pending);
        egm_free(group);
    }
    /* Later ops may have overwritten the detail: keep the first failure's. */
    if (first.status != EGM_OK)
        egm__set_error(first.status, "%s", first.detail);
    return first.status;
}

void egm__te_forget_segment(egm_te_t *te, egm_id_t segment_id)
{
    if (te == NULL)
        return;
    for (size_t t = 0; t < te->n_open; t++)
        if (egm__transports[t]->forget != NULL)
            egm__transports[t]->forget(te->transport_state[t], segment_id);
}

void egm__te_release_pages(egm_te_t *te, egm_id_t segment_id, uint64_t offset, uint64_t length)
{
    if (te == NULL)
        return;
    for (size_t t = 0; t < te->n_open; t++)
        if (egm__transports[t]->release_pages != NULL)
            egm__transports[t]->release_pages(te->transport_state[t], segment_id, offset, length);
}

egm_status_t egm__te_cached_segments(egm_te_t *te, egm_id_t **ids_p, size_t *n_p)
{
    egm_id_t *all = NULL;
    size_t n_all = 0;

    *ids_p = NULL;
    *n_p = 0;
    if (te == NULL)
        return EGM_OK;
    for (size_t t = 0; t < te->n_open; t++) {
        const egm_transport_ops_t *ops = egm__transports[t];
        egm_id_t *ids = NULL;
        size_t n = 0;
        egm_status_t st;
        if (ops->cached_ids == NULL)
            continue;
        if ((st = ops->cached_ids(te->transport_state[t], &ids, &n)) != EGM_OK) {
            egm_free(all);
            return st;
        }
        if (n == 0) {
            egm_free(ids);
            continue;
        }
        if (all == NULL) {
            all = ids;
            n_all = n;
            continue;
        }
        egm_id_t *more = egm_realloc(all, (n_all + n) * sizeof(*all), "te.cached_ids");
        if (more == NULL) {
            egm_free(all);
            egm_free(ids);
            return egm__set_error(EGM_ERR_NO_MEMORY, "te: out of memory listing mappings");
        }
        memcpy(more + n_all, ids, n * sizeof(*more));
        egm_free(ids);
        all = more;
        n_all += n;
    }
    *ids_p = all;
    *n_p = n_all;
    return EGM_OK;
}

void egm__te_prewarm(egm_te_t *te, const egm_segment_desc_t *descs, size_t n)
{
    if (te == NULL || descs == NULL)
        return;
    for (size_t i = 0; i < n; i++) {
        if (is_own(te, &descs[i]) || is_retired(te, descs[i].id))
            continue;
        for (size_t t = 0; t < te->n_open; t++) {
            const egm_transport_ops_t *ops = egm__transports[t];
            if (ops->prepare != NULL && allowed(te, ops))
                ops->prepare(&te->env, te->transport_state[t], &descs[i]);
        }
    }
}

egm_status_t egm__te_prepare_device(egm_te_t *te, int device)
{
    if (te == NULL || te->nvlink == NULL || (device < 0 && device != EGM_DEVICE_MAPPED_HOST))
        return EGM_OK; /* no GPU copies here, or none for host memory */
    return egm__nvlink_prepare_device(te->nvlink, device == EGM_DEVICE_MAPPED_HOST ? 0 : device);
}

void egm__te_prewarm_drain(egm_te_t *te)
{
    if (te == NULL)
        return;
    for (size_t t = 0; t < te->n_open; t++)
        if (egm__transports[t]->prepare_wait != NULL)
            egm__transports[t]->prepare_wait(te->transport_state[t]);
}

void egm__te_stats(egm_te_t *te, egm_te_stats_t *stats_p)
{
    memset(stats_p, 0, sizeof(*stats_p));
    if (te == NULL)
        return;
    stats_p->bytes_read = atomic_load_explicit(&te->counters.bytes_read, memory_order_relaxed);
    stats_p->bytes_written =
        atomic_load_explicit(&te->counters.bytes_written, memory_order_relaxed);
    stats_p->tcp_requests_served =
        atomic_load_explicit(&te->counters.tcp_requests_served, memory_order_relaxed);
    stats_p->tcp_requests_refused =
        atomic_load_explicit(&te->counters.tcp_requests_refused, memory_order_relaxed);
    stats_p->shm_fds_sent = atomic_load_explicit(&te->counters.shm_fds_sent, memory_order_relaxed);
    stats_p->shm_peers_refused =
        atomic_load_explicit(&te->counters.shm_peers_refused, memory_order_relaxed);
    stats_p->vmm_fds_sent = atomic_load_explicit(&te->counters.vmm_fds_sent, memory_order_relaxed);
    stats_p->auth_failures =
        atomic_load_explicit(&te->counters.auth_failures, memory_order_relaxed);
    for (size_t t = 0; t < te->n_open; t++)
        if (egm__transports[t]->stats != NULL)
            egm__transports[t]->stats(te->transport_state[t], stats_p);
}
