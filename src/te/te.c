/* Transfer engine: exposes local segments (provider side) and moves bytes to
 * and from segments through the best transport `protocol` allows (consumer
 * side): own memory -> memcpy, same host -> shm, else tcp. */
#include "te/te.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/sock.h"
#include "te/te_int.h"

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

    pthread_mutex_t servers_lock; /* servers start on the first expose */
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

egm_status_t egm__te_create(const egm_te_params_t *params, egm_te_t **te_p)
{
    egm_status_t st;

    if (params == NULL || te_p == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "te: missing parameters");
    if (params->protocol != EGM_PROTOCOL_AUTO && params->protocol != EGM_PROTOCOL_SHM &&
        params->protocol != EGM_PROTOCOL_TCP)
        return egm__set_error(EGM_ERR_INVALID_ARG, "protocol: %d is not auto|shm|tcp",
                              (int)params->protocol);
    egm_te_t *te = egm_calloc(1, sizeof(*te), "te");
    if (te == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "te: out of memory");
    te->client_id = params->client_id;
    te->protocol = params->protocol;
    te->data_port = params->data_port;
    te->io_timeout_ms = params->io_timeout_ms > 0 ? params->io_timeout_ms : 10000;
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
    pthread_mutex_init(&te->servers_lock, NULL);

    if ((st = egm__exposed_create(&te->exposed)) != EGM_OK)
        goto err_lock;
    if ((st = egm__shm_cache_create(&te->shm)) != EGM_OK)
        goto err_exposed;
    if ((st = egm__tcp_client_create(te->io_timeout_ms, &te->tcp)) != EGM_OK)
        goto err_shm;
    *te_p = te;
    return EGM_OK;

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
    egm__tcp_client_destroy(te->tcp);
    egm__shm_cache_destroy(te->shm);
    egm__exposed_destroy(te->exposed);
    pthread_mutex_destroy(&te->servers_lock);
    egm_free(te);
}

static egm_status_t start_servers(egm_te_t *te)
{
    egm_status_t st = EGM_OK;

    pthread_mutex_lock(&te->servers_lock);
    if (te->broker == NULL) {
        st = egm__fd_broker_start(te->exposed, &te->counters, &te->broker);
        if (st != EGM_OK)
            goto out;
    }
    if (te->server == NULL) {
        st = egm__tcp_server_start(te->exposed, &te->counters,
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
    snprintf(desc->host_id, sizeof(desc->host_id), "%s", te->host_id);
    int v6 = strchr(te->local_hostname, ':') != NULL; /* IPv6 literal: bracket it */
    int n = snprintf(desc->tcp_endpoint, sizeof(desc->tcp_endpoint), "%s%s%s:%u", v6 ? "[" : "",
                     te->local_hostname, v6 ? "]" : "", (unsigned)egm__tcp_server_port(te->server));
    if (n < 0 || (size_t)n >= sizeof(desc->tcp_endpoint))
        return egm__set_error(EGM_ERR_INVALID_ARG, "local_hostname: too long for an endpoint");
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

egm_status_t egm__te_route(egm_te_t *te, const egm_segment_desc_t *segment,
                           egm_transport_t *transport_p)
{
    char text[EGM_ID_STRLEN];

    if (te == NULL || segment == NULL || transport_p == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "route: missing segment");
    if (is_own(te, segment)) {
        *transport_p = EGM_TRANSPORT_LOCAL;
        return EGM_OK;
    }
    int shm_ok = strcmp(segment->host_id, te->host_id) == 0 && segment->shm_socket[0] != '\0' &&
                 segment->handle_kind == EGM_HANDLE_MEMFD;
    int tcp_ok = segment->tcp_endpoint[0] != '\0';

    switch (te->protocol) {
    case EGM_PROTOCOL_AUTO:
        if (shm_ok) {
            *transport_p = EGM_TRANSPORT_SHM;
            return EGM_OK;
        }
        break;
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
    return egm__set_error(EGM_ERR_NOT_SUPPORTED, "segment %s: no tcp endpoint%s",
                          egm__id_format(segment->id, text),
                          te->protocol == EGM_PROTOCOL_AUTO ? " and not reachable over shm" : "");
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

static egm_status_t transfer_local(egm_te_t *te, const egm_te_op_t *op)
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
    } else {
        uint8_t *mem = (uint8_t *)seg->base + op->offset;
        if (op->dir == EGM_TE_READ)
            memcpy(op->local, mem, op->length);
        else
            memcpy(mem, op->local, op->length);
    }
    egm__exposed_release(te->exposed, seg);
    return st;
}

static egm_status_t transfer_one(egm_te_t *te, const egm_te_op_t *op)
{
    egm_transport_t transport;
    egm_status_t st = check_op(op);
    if (st != EGM_OK)
        return st;
    if ((st = egm__te_route(te, op->segment, &transport)) != EGM_OK)
        return st;
    switch (transport) {
    case EGM_TRANSPORT_LOCAL:
        return transfer_local(te, op);
    case EGM_TRANSPORT_SHM:
        return egm__shm_transfer(te->shm, op->segment, op->offset, op->local, op->length, op->dir);
    case EGM_TRANSPORT_TCP:
        return egm__tcp_client_transfer(te->tcp, op->segment->tcp_endpoint, op->segment->id,
                                        op->offset, op->local, op->length, op->dir);
    }
    return egm__set_error(EGM_ERR_INTERNAL, "transfer: unknown transport %d", (int)transport);
}

egm_status_t egm__te_transfer(egm_te_t *te, egm_te_op_t *ops, size_t n)
{
    egm_status_t first = EGM_OK;
    char detail[256] = "";

    if (te == NULL || (ops == NULL && n > 0))
        return egm__set_error(EGM_ERR_INVALID_ARG, "transfer: missing engine or ops");
    for (size_t i = 0; i < n; i++) {
        egm_te_op_t *op = &ops[i];
        op->status = transfer_one(te, op);
        if (op->status == EGM_OK) {
            atomic_fetch_add(op->dir == EGM_TE_READ ? &te->counters.bytes_read
                                                    : &te->counters.bytes_written,
                             op->length);
        } else if (first == EGM_OK) {
            first = op->status;
            snprintf(detail, sizeof(detail), "%s", egm_last_error());
        }
    }
    /* Later ops may have overwritten the detail: keep the first failure's. */
    if (first != EGM_OK)
        egm__set_error(first, "%s", detail);
    return first;
}

void egm__te_forget_segment(egm_te_t *te, egm_id_t segment_id)
{
    if (te == NULL)
        return;
    /* tcp connections belong to endpoints, not segments: nothing to drop there. */
    egm__shm_forget(te->shm, segment_id);
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
    stats_p->mappings_live = egm__shm_mappings_live(te->shm);
}

const char *egm__transport_name(egm_transport_t transport)
{
    switch (transport) {
    case EGM_TRANSPORT_LOCAL:
        return "local";
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
    else if (text != NULL && strcmp(text, "shm") == 0)
        *protocol_p = EGM_PROTOCOL_SHM;
    else if (text != NULL && strcmp(text, "tcp") == 0)
        *protocol_p = EGM_PROTOCOL_TCP;
    else
        return egm__set_error(EGM_ERR_CONFIG, "protocol: \"%s\" is not one of auto|shm|tcp",
                              text ? text : "(null)");
    return EGM_OK;
}
