/* Transfer engine: moves bytes between local memory and segments.
 *
 * Provider side: expose local memory (a memfd-backed mapping) as a segment; the
 * engine serves it over its fd broker (shm transport, Unix socket, SCM_RIGHTS
 * after a peer-credential check) and its tcp data server.
 *
 * Consumer side: read/write (segment, offset, length) through the best transport
 * allowed by `protocol`: own segment -> memcpy; same host with a shm socket ->
 * shm (mapping cached by segment id); else tcp. */
#ifndef EGM_TE_TE_H
#define EGM_TE_TE_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "common/id.h"
#include "te/segment.h"

typedef struct egm_te egm_te_t;

typedef enum {
    EGM_PROTOCOL_AUTO = 0,
    EGM_PROTOCOL_SHM = 1,
    EGM_PROTOCOL_TCP = 2,
} egm_protocol_t;

typedef enum {
    EGM_TRANSPORT_LOCAL = 0, /* own memory */
    EGM_TRANSPORT_SHM = 1,
    EGM_TRANSPORT_TCP = 2,
} egm_transport_t;

typedef struct {
    egm_id_t client_id;
    egm_protocol_t protocol;
    const char *local_hostname;   /* advertised in tcp endpoints; "" = host name */
    const char *data_listen_host; /* bind address of the data server; NULL = 0.0.0.0 */
    uint16_t data_port;           /* 0 = any free port */
    int io_timeout_ms;
} egm_te_params_t;

typedef enum { EGM_TE_READ = 0, EGM_TE_WRITE = 1 } egm_te_dir_t;

/* One copy between local memory and a segment. */
typedef struct {
    const egm_segment_desc_t *segment;
    uint64_t offset;
    void *local;
    size_t length;
    egm_te_dir_t dir;
    egm_status_t status; /* out */
} egm_te_op_t;

typedef struct {
    uint64_t bytes_read;
    uint64_t bytes_written;
    uint64_t tcp_requests_served;
    uint64_t tcp_requests_refused; /* bounds or unknown segment */
    uint64_t shm_fds_sent;
    uint64_t shm_peers_refused;
    uint64_t mappings_live;
} egm_te_stats_t;

egm_status_t egm__te_create(const egm_te_params_t *params, egm_te_t **te_p);
/* Stops servers, unmaps cached mappings, closes connections. NULL is a no-op. */
void egm__te_destroy(egm_te_t *te);

/* Provider side. `base`/`memfd` stay the caller's (the pool's); they must stay
 * valid until egm__te_withdraw_segment returns. On success desc gets host_id,
 * tcp_endpoint and shm_socket filled in (id, name, size, owner are the caller's). */
egm_status_t egm__te_expose_segment(egm_te_t *te, egm_segment_desc_t *desc, void *base, int memfd);
/* Stops serving the segment; waits for requests in flight on it. */
egm_status_t egm__te_withdraw_segment(egm_te_t *te, egm_id_t segment_id);

/* Consumer side. Each op's status is set; the return value is EGM_OK if every op
 * succeeded, else the first failure. Bounds are checked here and by the server. */
egm_status_t egm__te_transfer(egm_te_t *te, egm_te_op_t *ops, size_t n);
/* Which transport a transfer to this segment would use. */
egm_status_t egm__te_route(egm_te_t *te, const egm_segment_desc_t *segment,
                           egm_transport_t *transport_p);
/* Drop every cached mapping/connection to a segment (retired by the master). */
void egm__te_forget_segment(egm_te_t *te, egm_id_t segment_id);

void egm__te_stats(egm_te_t *te, egm_te_stats_t *stats_p);
const char *egm__transport_name(egm_transport_t transport);
/* "auto|shm|tcp" */
egm_status_t egm__protocol_parse(const char *text, egm_protocol_t *protocol_p);

#endif
