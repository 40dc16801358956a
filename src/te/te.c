/* Transfer engine: exposes local segments (provider side) and moves bytes to
 * and from segments through the best transport `protocol` allows (consumer
 * side): own memory -> memcpy or a GPU copy, GPU buffer and VMM segment ->
 * nvlink, same host -> shm, else tcp (GPU buffers staged through pinned host
 * memory for the last two). */
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

/* Ops per transfer whose bookkeeping lives on the stack. */
#define STACK_OPS 64

struct egm_te {
    egm_id_t client_id;
    egm_protocol_t protocol;
    char local_hostname[EGM_ENDPOINT_MAX];
    char listen_host[EGM_ENDPOINT_MAX];
    int has_listen_host;
    uint16_t data_port;
    int io_timeout_ms;
    char host_id[EGM_HOST_ID_MAX];

    egm_te_counters_t counters;
    egm_exposed_table_t *exposed;
    egm_shm_cache_t *shm;
    egm_tcp_client_t *tcp;
    egm_registry_t *registry;   /* the client's; may be NULL */
    const egm_cuda_api_t *cuda; /* NULL without a driver (or a GPU) */
    egm_status_t cuda_status;   /* why cuda is NULL: status and text */
    char cuda_missing[256];
    egm_nvlink_t *nvlink; /* non-NULL exactly when cuda is */

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
                              .prewarm_off = params->prewarm_off,
                              .prewarm_concurrency = params->prewarm_concurrency,
                              .auth_token = te->auth_token};
    if ((st = egm__nvlink_create(api, &np, &te->nvlink)) != EGM_OK)
        return st;
    te->cuda = api;
    return EGM_OK;
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
    if (params->auth_token != NULL &&
        (st = copy_param("auth_token", params->auth_token, te->auth_token,
                         sizeof(te->auth_token))) != EGM_OK)
        goto err_te;
    te->auth.token = te->auth_token;
    te->auth.fd_allowed_gid = params->fd_gid_allowed ? params->fd_allowed_gid : -1;
    pthread_mutex_init(&te->servers_lock, NULL);

    if ((st = egm__exposed_create(&te->exposed)) != EGM_OK)
        goto err_lock;
    if ((st = egm__shm_cache_create(te->auth_token, &te->shm)) != EGM_OK)
        goto err_exposed;
    if ((st = egm__tcp_client_create(te->io_timeout_ms, te->auth_token, &te->tcp)) != EGM_OK)
        goto err_shm;
    if ((st = cuda_open(te, params)) != EGM_OK)
        goto err_tcp;
    *te_p = te;
    return EGM_OK;

err_tcp:
    egm__tcp_client_destroy(te->tcp);
err_shm:
    egm__shm_cache_destroy(te->shm);
err_exposed:
    egm__exposed_destroy(te->exposed);
err_lock:
    pthread_mutex_destroy(&te->servers_lock);
err_te:
    egm_free(te);
    return st;
}

void egm__te_destroy(egm_te_t *te)
{
    if (te == NULL)
        return;
    /* Servers first: they are the only users of the exposed table. */
    egm__tcp_server_stop(te->server);
    egm__fd_broker_stop(te->broker);
    egm__nvlink_destroy(te->nvlink);
    egm__tcp_client_destroy(te->tcp);
    egm__shm_cache_destroy(te->shm);
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
    char where[sizeof(desc->tcp_endpoint) + 1];
    egm__sock_format_hostport(te->local_hostname, egm__tcp_server_port(te->server), where,
                              sizeof(where));
    if (strlen(where) >= sizeof(desc->tcp_endpoint))
        return egm__set_error(EGM_ERR_INVALID_ARG, "local_hostname: too long for an endpoint");
    memcpy(desc->tcp_endpoint, where, strlen(where) + 1);
    return EGM_OK;
}

egm_status_t egm__te_expose_segment(egm_te_t *te, egm_segment_desc_t *desc, void *base, int memfd)
{
    egm_status_t st;
    char text[EGM_ID_STRLEN];

    if (te == NULL || desc == NULL || base == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "expose: missing segment or memory");
    if (egm__id_is_nil(desc->id))
        return egm__set_error(EGM_ERR_INVALID_ARG, "expose: segment id is nil");
    if (desc->size == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "expose: segment size is 0");
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

    if (te == NULL || desc == NULL || base == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "expose: missing segment or memory");
    if (egm__id_is_nil(desc->id))
        return egm__set_error(EGM_ERR_INVALID_ARG, "expose: segment id is nil");
    if (size == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "expose: segment size is 0");
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
    return egm__exposed_withdraw(te->exposed, segment_id);
}

static int is_own(egm_te_t *te, const egm_segment_desc_t *segment)
{
    if (!egm__id_equal(segment->owner, te->client_id))
        return 0;
    egm_exposed_t *seg = egm__exposed_acquire(te->exposed, segment->id);
    if (seg == NULL)
        return 0;
    egm__exposed_release(te->exposed, seg);
    return 1;
}

/* Where a local buffer lives: GPU ordinal or -1 (host). The registry knows
 * registered buffers without a driver call. */
static int local_device(egm_te_t *te, const void *ptr, size_t len)
{
    int device = -1;
    if (te->cuda == NULL || ptr == NULL)
        return -1;
    if (te->registry != NULL && egm__registry_device(te->registry, ptr, len, &device) == EGM_OK)
        return device;
    if (egm__cuda_pointer_device(ptr, &device) != EGM_OK)
        return -1;
    return device;
}

static int is_vmm(const egm_segment_desc_t *segment)
{
    return segment->handle_kind == EGM_HANDLE_POSIX_FD || segment->handle_kind == EGM_HANDLE_FABRIC;
}

/* Why nvlink cannot reach this segment from a buffer on `device` (NULL: it can). */
static const char *nvlink_obstacle(egm_te_t *te, const egm_segment_desc_t *segment, int device)
{
    if (te->nvlink == NULL)
        return "no CUDA driver or GPU in this process";
    if (device < 0)
        return "the local buffer is host memory, not GPU memory";
    if (!is_vmm(segment))
        return "the segment is not CUDA VMM memory";
    if (segment->handle_kind == EGM_HANDLE_POSIX_FD &&
        (strcmp(segment->host_id, te->host_id) != 0 || segment->shm_socket[0] == '\0'))
        return "its posix_fd handle can only be imported on its own host";
    if (egm__mapping_retired(egm__nvlink_cache(te->nvlink), segment->id))
        return "the segment was retired";
    return NULL;
}

/* Route for a local buffer on `device` (-1: host memory). */
static egm_status_t route(egm_te_t *te, const egm_segment_desc_t *segment, int device,
                          egm_transport_t *transport_p)
{
    char text[EGM_ID_STRLEN];

    if (is_own(te, segment)) {
        *transport_p = EGM_TRANSPORT_LOCAL;
        return EGM_OK;
    }
    /* A retired id is gone for every transport (its provider may be too). */
    if (te->nvlink != NULL && egm__mapping_retired(egm__nvlink_cache(te->nvlink), segment->id))
        return egm__set_error(EGM_ERR_SEGMENT_NOT_FOUND, "segment %s was retired",
                              egm__id_format(segment->id, text));
    const char *no_nvlink = nvlink_obstacle(te, segment, device);
    int shm_ok = strcmp(segment->host_id, te->host_id) == 0 && segment->shm_socket[0] != '\0' &&
                 segment->handle_kind == EGM_HANDLE_MEMFD;
    int tcp_ok = segment->tcp_endpoint[0] != '\0';

    switch (te->protocol) {
    case EGM_PROTOCOL_AUTO:
        if (no_nvlink == NULL) {
            *transport_p = EGM_TRANSPORT_NVLINK;
            return EGM_OK;
        }
        if (shm_ok) {
            *transport_p = EGM_TRANSPORT_SHM;
            return EGM_OK;
        }
        break;
    case EGM_PROTOCOL_NVLINK:
        if (no_nvlink == NULL) {
            *transport_p = EGM_TRANSPORT_NVLINK;
            return EGM_OK;
        }
        return egm__set_error(EGM_ERR_NOT_SUPPORTED,
                              "protocol=nvlink: segment %s is not reachable over nvlink: %s",
                              egm__id_format(segment->id, text), no_nvlink);
    case EGM_PROTOCOL_SHM:
        if (shm_ok) {
            *transport_p = EGM_TRANSPORT_SHM;
            return EGM_OK;
        }
        if (strcmp(segment->host_id, te->host_id) != 0)
            return egm__set_error(EGM_ERR_NOT_SUPPORTED,
                                  "protocol=shm: segment %s is on host \"%s\", not this host "
                                  "(\"%s\"); use protocol auto or tcp",
                                  egm__id_format(segment->id, text), segment->host_id, te->host_id);
        return egm__set_error(EGM_ERR_NOT_SUPPORTED,
                              "protocol=shm: segment %s has no shm socket (handle kind %d)",
                              egm__id_format(segment->id, text), (int)segment->handle_kind);
    case EGM_PROTOCOL_TCP:
        break;
    }
    if (tcp_ok) {
        *transport_p = EGM_TRANSPORT_TCP;
        return EGM_OK;
    }
    return egm__set_error(EGM_ERR_NOT_SUPPORTED, "segment %s: no tcp endpoint%s%s%s",
                          egm__id_format(segment->id, text),
                          te->protocol == EGM_PROTOCOL_AUTO ? " and not reachable over shm" : "",
                          te->protocol == EGM_PROTOCOL_AUTO ? " or nvlink: " : "",
                          te->protocol == EGM_PROTOCOL_AUTO ? no_nvlink : "");
}

egm_status_t egm__te_route(egm_te_t *te, const egm_segment_desc_t *segment,
                           egm_transport_t *transport_p)
{
    if (te == NULL || segment == NULL || transport_p == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "route: missing segment");
    return route(te, segment, -1, transport_p);
}

egm_status_t egm__te_route_op(egm_te_t *te, const egm_te_op_t *op, egm_transport_t *transport_p)
{
    if (te == NULL || op == NULL || op->segment == NULL || transport_p == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "route: missing op or segment");
    return route(te, op->segment, local_device(te, op->local, op->length), transport_p);
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

/* ---- staging: GPU memory over host-only paths ------------------------------ */

/* Moves a piece between a staging slot and the host side of a staged copy:
 * into_slot 1 fills the slot from there, 0 drains the slot into it. */
typedef egm_status_t (*hop_fn)(egm_te_t *te, void *ctx, uint64_t off, void *slot, size_t n,
                               int into_slot);

/* `len` bytes between GPU memory at `gpu` (on `device`) and a host-only side,
 * one staging slot at a time: the conventional path (device <-> pinned
 * host <-> wire/memory), kept as the baseline nvlink is measured against. */
static egm_status_t staged(egm_te_t *te, int device, uint64_t gpu, size_t len, int to_gpu,
                           hop_fn hop, void *ctx)
{
    void *slot;
    size_t cap;
    egm_status_t st = egm__staging_get(te->nvlink, device, &slot, &cap);
    if (st != EGM_OK)
        return st;
    uint64_t pinned = (uint64_t)(uintptr_t)slot;
    size_t done = 0;
    while (done < len && st == EGM_OK) {
        size_t n = len - done < cap ? len - done : cap;
        if (to_gpu) {
            st = hop(te, ctx, done, slot, n, 1);
            if (st == EGM_OK)
                st = egm__nvlink_copy(te->nvlink, device, gpu + done, pinned, n);
        } else {
            st = egm__nvlink_copy(te->nvlink, device, pinned, gpu + done, n);
            if (st == EGM_OK)
                st = hop(te, ctx, done, slot, n, 0);
        }
        if (st == EGM_OK)
            done += n;
    }
    egm__staging_put(te->nvlink, slot, done);
    return st;
}

static egm_status_t hop_tcp(egm_te_t *te, void *ctx, uint64_t off, void *slot, size_t n,
                            int into_slot)
{
    const egm_te_op_t *op = ctx;
    return egm__tcp_client_transfer(te->tcp, op->segment->tcp_endpoint, op->segment->id,
                                    op->offset + off, slot, n,
                                    into_slot ? EGM_TE_READ : EGM_TE_WRITE);
}

static egm_status_t hop_shm(egm_te_t *te, void *ctx, uint64_t off, void *slot, size_t n,
                            int into_slot)
{
    const egm_te_op_t *op = ctx;
    return egm__shm_transfer(te->shm, op->segment, op->offset + off, slot, n,
                             into_slot ? EGM_TE_READ : EGM_TE_WRITE);
}

/* Host memory the CPU copies: ctx is its first byte. */
static egm_status_t hop_memory(egm_te_t *te, void *ctx, uint64_t off, void *slot, size_t n,
                               int into_slot)
{
    (void)te;
    uint8_t *mem = (uint8_t *)ctx + off;
    if (into_slot)
        memcpy(slot, mem, n);
    else
        memcpy(mem, slot, n);
    return EGM_OK;
}

/* ---- one op, by transport ---------------------------------------------------- */

static egm_status_t transfer_local(egm_te_t *te, const egm_te_op_t *op, int device)
{
    char text[EGM_ID_STRLEN];
    egm_exposed_t *seg = egm__exposed_acquire(te->exposed, op->segment->id);
    if (seg == NULL)
        return egm__set_error(EGM_ERR_SEGMENT_NOT_FOUND, "transfer: segment %s was withdrawn",
                              egm__id_format(op->segment->id, text));
    egm_status_t st = EGM_OK;
    if (op->offset > seg->size || op->length > seg->size - op->offset) {
        st = egm__set_error(
            EGM_ERR_INVALID_ARG,
            "transfer: [%" PRIu64 ", +%zu) beyond own segment %s of %" PRIu64 " bytes", op->offset,
            op->length, egm__id_format(op->segment->id, text), seg->size);
        goto out;
    }
    uint8_t *mem = (uint8_t *)seg->base + op->offset;
    int vmm = seg->kind == EGM_HANDLE_POSIX_FD || seg->kind == EGM_HANDLE_FABRIC;
    if (device < 0 && seg->host_accessible) {
        if (op->dir == EGM_TE_READ)
            memcpy(op->local, mem, op->length);
        else
            memcpy(mem, op->local, op->length);
    } else if (device >= 0 && vmm) {
        /* Our own VMM mapping is open to every local GPU: one GPU copy. */
        uint64_t local = (uint64_t)(uintptr_t)op->local, remote = (uint64_t)(uintptr_t)mem;
        st = op->dir == EGM_TE_READ
                 ? egm__nvlink_copy(te->nvlink, device, local, remote, op->length)
                 : egm__nvlink_copy(te->nvlink, device, remote, local, op->length);
    } else if (device >= 0) {
        /* GPU buffer, memfd pool: pageable memory, staged. */
        st = staged(te, device, (uint64_t)(uintptr_t)op->local, op->length, op->dir == EGM_TE_READ,
                    hop_memory, mem);
    } else if (te->nvlink != NULL && seg->device >= 0) {
        /* Host buffer, own GPU memory: staged on the segment's GPU. */
        st = staged(te, seg->device, (uint64_t)(uintptr_t)mem, op->length, op->dir == EGM_TE_WRITE,
                    hop_memory, op->local);
    } else {
        st = egm__set_error(EGM_ERR_NOT_SUPPORTED,
                            "transfer: own segment %s is not host-accessible and there is no GPU",
                            egm__id_format(op->segment->id, text));
    }
out:
    egm__exposed_release(te->exposed, seg);
    return st;
}

/* Every transport but nvlink (batched separately). */
static egm_status_t transfer_routed(egm_te_t *te, const egm_te_op_t *op, egm_transport_t transport,
                                    int device)
{
    switch (transport) {
    case EGM_TRANSPORT_LOCAL:
        return transfer_local(te, op, device);
    case EGM_TRANSPORT_SHM:
        if (device >= 0)
            return staged(te, device, (uint64_t)(uintptr_t)op->local, op->length,
                          op->dir == EGM_TE_READ, hop_shm, (void *)op);
        return egm__shm_transfer(te->shm, op->segment, op->offset, op->local, op->length, op->dir);
    case EGM_TRANSPORT_TCP:
        if (device >= 0)
            return staged(te, device, (uint64_t)(uintptr_t)op->local, op->length,
                          op->dir == EGM_TE_READ, hop_tcp, (void *)op);
        return egm__tcp_client_transfer(te->tcp, op->segment->tcp_endpoint, op->segment->id,
                                        op->offset, op->local, op->length, op->dir);
    case EGM_TRANSPORT_NVLINK:
        break;
    }
    return egm__set_error(EGM_ERR_INTERNAL, "transfer: transport %d here", (int)transport);
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

egm_status_t egm__te_transfer(egm_te_t *te, egm_te_op_t *ops, size_t n)
{
    int stack_devices[STACK_OPS];
    size_t stack_pending[STACK_OPS];
    egm_te_op_t *stack_group[STACK_OPS];
    int *devices = stack_devices;
    size_t *pending = stack_pending; /* nvlink ops, by index */
    egm_te_op_t **group = stack_group;
    first_failure_t first = {.status = EGM_OK};

    if (te == NULL || (ops == NULL && n > 0))
        return egm__set_error(EGM_ERR_INVALID_ARG, "transfer: missing engine or ops");
    if (n > STACK_OPS) {
        devices = egm_malloc(n * sizeof(*devices), "te.transfer.devices");
        pending = egm_malloc(n * sizeof(*pending), "te.transfer.pending");
        group = egm_malloc(n * sizeof(*group), "te.transfer.group");
        if (devices == NULL || pending == NULL || group == NULL) {
            egm_free(devices);
            egm_free(pending);
            egm_free(group);
            egm_status_t st =
                egm__set_error(EGM_ERR_NO_MEMORY, "transfer: out of memory for %zu ops", n);
            for (size_t i = 0; i < n; i++)
                ops[i].status = st;
            return st;
        }
    }

    /* Route every op; run the others now and keep the nvlink ones, which go
     * to the GPUs as one batch per device. */
    size_t n_pending = 0;
    for (size_t i = 0; i < n; i++) {
        egm_te_op_t *op = &ops[i];
        egm_transport_t transport;
        egm_status_t st = check_op(op);
        devices[i] = -1;
        if (st == EGM_OK) {
            devices[i] = local_device(te, op->local, op->length);
            st = route(te, op->segment, devices[i], &transport);
        }
        if (st == EGM_OK && transport == EGM_TRANSPORT_NVLINK) {
            pending[n_pending++] = i;
            continue;
        }
        if (st == EGM_OK)
            st = transfer_routed(te, op, transport, devices[i]);
        op->status = st;
        if (st != EGM_OK)
            note_failure(&first, i, st);
    }

    /* nvlink: one copier run per device. Each pass takes the ops of the
     * device of the first op left and compacts the rest. */
    while (n_pending > 0) {
        int device = devices[pending[0]];
        size_t k = 0, left = 0;
        for (size_t j = 0; j < n_pending; j++) {
            if (devices[pending[j]] == device)
                group[k++] = &ops[pending[j]];
            else
                pending[left++] = pending[j];
        }
        if (egm__nvlink_run(te->nvlink, device, group, k) != EGM_OK) {
            for (size_t j = 0; j < k; j++)
                if (group[j]->status != EGM_OK)
                    note_failure(&first, (size_t)(group[j] - ops), group[j]->status);
        }
        n_pending = left;
    }

    for (size_t i = 0; i < n; i++)
        if (ops[i].status == EGM_OK)
            atomic_fetch_add(ops[i].dir == EGM_TE_READ ? &te->counters.bytes_read
                                                       : &te->counters.bytes_written,
                             ops[i].length);
    if (devices != stack_devices) {
        egm_free(devices);
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
    /* tcp connections belong to endpoints, not segments: nothing to drop there. */
    egm__shm_forget(te->shm, segment_id);
    if (te->nvlink != NULL)
        egm__mapping_forget(egm__nvlink_cache(te->nvlink), segment_id);
}

void egm__te_release_pages(egm_te_t *te, egm_id_t segment_id, uint64_t offset, uint64_t length)
{
    /* nvlink copies and tcp requests map nothing of the segment here. */
    if (te != NULL)
        egm__shm_release_pages(te->shm, segment_id, offset, length);
}

egm_status_t egm__te_cached_segments(egm_te_t *te, egm_id_t **ids_p, size_t *n_p)
{
    egm_id_t *shm = NULL, *nv = NULL;
    size_t n_shm = 0, n_nv = 0;
    egm_status_t st;

    *ids_p = NULL;
    *n_p = 0;
    if (te == NULL)
        return EGM_OK;
    if ((st = egm__shm_cached_ids(te->shm, &shm, &n_shm)) != EGM_OK)
        return st;
    if (te->nvlink != NULL &&
        (st = egm__mapping_cached_ids(egm__nvlink_cache(te->nvlink), &nv, &n_nv)) != EGM_OK) {
        egm_free(shm);
        return st;
    }
    if (n_nv == 0) {
        *ids_p = shm;
        *n_p = n_shm;
        return EGM_OK;
    }
    egm_id_t *all = egm_realloc(shm, (n_shm + n_nv) * sizeof(*all), "te.cached_ids");
    if (all == NULL) {
        egm_free(shm);
        egm_free(nv);
        return egm__set_error(EGM_ERR_NO_MEMORY, "te: out of memory listing mappings");
    }
    memcpy(all + n_shm, nv, n_nv * sizeof(*all));
    egm_free(nv);
    *ids_p = all;
    *n_p = n_shm + n_nv;
    return EGM_OK;
}

void egm__te_prewarm(egm_te_t *te, const egm_segment_desc_t *descs, size_t n)
{
    if (te == NULL || te->nvlink == NULL || descs == NULL)
        return;
    if (te->protocol != EGM_PROTOCOL_AUTO && te->protocol != EGM_PROTOCOL_NVLINK)
        return;
    for (size_t i = 0; i < n; i++) {
        /* Any GPU will do for the check: the mapping serves them all. */
        if (is_own(te, &descs[i]) || nvlink_obstacle(te, &descs[i], 0) != NULL)
            continue;
        egm__nvlink_prewarm(te->nvlink, &descs[i], 1);
    }
}

void egm__te_prewarm_drain(egm_te_t *te)
{
    if (te != NULL && te->nvlink != NULL)
        egm__nvlink_prewarm_drain(te->nvlink);
}

void egm__te_stats(egm_te_t *te, egm_te_stats_t *stats_p)
{
    memset(stats_p, 0, sizeof(*stats_p));
    if (te == NULL)
        return;
    stats_p->bytes_read = atomic_load(&te->counters.bytes_read);
    stats_p->bytes_written = atomic_load(&te->counters.bytes_written);
    stats_p->tcp_requests_served = atomic_load(&te->counters.tcp_requests_served);
    stats_p->tcp_requests_refused = atomic_load(&te->counters.tcp_requests_refused);
    stats_p->shm_fds_sent = atomic_load(&te->counters.shm_fds_sent);
    stats_p->shm_peers_refused = atomic_load(&te->counters.shm_peers_refused);
    stats_p->vmm_fds_sent = atomic_load(&te->counters.vmm_fds_sent);
    stats_p->auth_failures = atomic_load(&te->counters.auth_failures);
    if (te->nvlink != NULL) {
        egm_nvlink_stats_t ns;
        egm__nvlink_stats(te->nvlink, &ns);
        stats_p->nvlink_imports_total = ns.mappings.imports_total;
        stats_p->nvlink_mappings_live = ns.mappings.mappings_live;
        stats_p->nvlink_import_failures = ns.mappings.import_failures;
        stats_p->prewarmed = ns.prewarmed;
        stats_p->nvlink_copies = ns.nvlink_copies;
        stats_p->copy_kernel_launches = ns.copier.kernel_launches;
        stats_p->copy_engine_copies = ns.copier.engine_copies;
        stats_p->copy_batch_calls = ns.copier.batch_api_calls;
        stats_p->copy_groups = ns.copier.groups;
        stats_p->copy_chunks = ns.copier.chunks;
        stats_p->copy_max_group_bytes = ns.copier.max_group_bytes;
        stats_p->staged_bytes = ns.staged_bytes;
    }
    stats_p->mappings_live = egm__shm_mappings_live(te->shm) + stats_p->nvlink_mappings_live;
}

const char *egm__transport_name(egm_transport_t transport)
{
    switch (transport) {
    case EGM_TRANSPORT_LOCAL:
        return "local";
    case EGM_TRANSPORT_NVLINK:
        return "nvlink";
    case EGM_TRANSPORT_SHM:
        return "shm";
    case EGM_TRANSPORT_TCP:
        return "tcp";
    }
    return "unknown";
}

egm_status_t egm__protocol_parse(const char *text, egm_protocol_t *protocol_p)
{
    if (text != NULL && strcmp(text, "auto") == 0)
        *protocol_p = EGM_PROTOCOL_AUTO;
    else if (text != NULL && strcmp(text, "nvlink") == 0)
        *protocol_p = EGM_PROTOCOL_NVLINK;
    else if (text != NULL && strcmp(text, "shm") == 0)
        *protocol_p = EGM_PROTOCOL_SHM;
    else if (text != NULL && strcmp(text, "tcp") == 0)
        *protocol_p = EGM_PROTOCOL_TCP;
    else
        return egm__set_error(EGM_ERR_CONFIG, "protocol: \"%s\" is not one of auto|shm|tcp|nvlink",
                              text ? text : "(null)");
    return EGM_OK;
}
