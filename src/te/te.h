/* Transfer engine: moves bytes between local memory and segments.
 *
 * Provider side: expose local memory as a segment: a memfd-backed mapping
 * (served by the fd broker for shm, Unix socket + SCM_RIGHTS after a
 * peer-credential check, and by the tcp data server), or CUDA VMM memory
 * (posix_fd handles exported per request by the same fd broker, fabric handles
 * carried in the descriptor; HOST_NUMA memory also over tcp).
 *
 * Consumer side: read/write (segment, offset, length) through the best
 * transport allowed by `protocol`: own segment -> memcpy or a GPU copy; GPU
 * buffer and VMM segment -> nvlink (mapping cached by segment id, GPU copies);
 * same host with a shm socket -> shm (mapping cached by segment id); else tcp.
 * GPU buffers that must go over shm or tcp pass through a pinned staging ring. */
#ifndef EGM_TE_TE_H
#define EGM_TE_TE_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "common/id.h"
#include "common/settings.h" /* egm_protocol_t: the protocol key's words */
#include "cuda/cuda_api.h"
#include "te/registry.h"
#include "rpc/segment_desc.h"

typedef struct egm_te egm_te_t;

/* Values are in order of preference (callers rank replicas by them). */
typedef enum {
    EGM_TRANSPORT_LOCAL = 0,  /* own memory */
    EGM_TRANSPORT_NVLINK = 1, /* GPU copy into a mapped VMM segment */
    EGM_TRANSPORT_SHM = 2,
    EGM_TRANSPORT_TCP = 3,
} egm_transport_t;

typedef struct {
    egm_id_t client_id;
    egm_protocol_t protocol;
    const char *local_hostname;   /* advertised in tcp endpoints; "" = host name */
    const char *zone;             /* put in every segment descriptor (NULL = "") */
    const char *data_listen_host; /* bind address of the data server; NULL = 0.0.0.0 */
    uint16_t data_port;           /* 0 = any free port */
    int io_timeout_ms;
    /* The client's registered buffers (borrowed; must outlive the engine):
     * where a local buffer lives. NULL: the driver is asked per op. */
    egm_registry_t *registry;
    int prewarm_off;         /* 1: egm__te_prewarm does nothing (default: on) */
    int prewarm_concurrency; /* imports at once; 0 = 2 */
    int copy_low_priority;   /* GPU copies on lowest-priority streams */
    /* Pressure of GPU copies (docs/configuration.md): 0 = unbounded. */
    uint64_t copy_max_inflight_bytes; /* nvlink_max_inflight_bytes */
    uint64_t copy_chunk_bytes;        /* nvlink_chunk_size: 0 or >= EGM_TE_CHUNK_MIN */
    uint64_t copy_bounce_bytes;       /* nvlink_bounce_buffer: 0 = none */
    /* Cluster token (copied; NULL or "" = none): required by this process's
     * tcp data server and fd socket, and presented to other providers'. */
    const char *auth_token;
    /* fd socket: when fd_gid_allowed, a peer whose primary gid is
     * fd_allowed_gid may fetch descriptors besides our uid and root (so that
     * zeroed params allow no group). */
    int fd_gid_allowed;
    int64_t fd_allowed_gid;
} egm_te_params_t;

/* Smallest nonzero chunk and in-flight bound: pieces below a page are only overhead. */
#define EGM_TE_CHUNK_MIN 4096
/* Smallest nvlink_bounce_buffer: two halves of the smallest bounced chunk (copier.c). */
#define EGM_TE_BOUNCE_MIN ((uint64_t)8 << 20)

typedef enum { EGM_TE_READ = 0, EGM_TE_WRITE = 1 } egm_te_dir_t;

/* One copy between local memory and a segment. */
typedef struct {
    const egm_segment_desc_t *segment;
    uint64_t offset;
    void *local;
    size_t length;
    egm_te_dir_t dir;
    /* 1: local is host memory of egmstore's own (a stack or heap buffer):
     * the CUDA driver is not asked where it lives. For a buffer not
     * registered it is asked on every op (docs/gpu.md). */
    int local_is_host;
    egm_status_t status; /* out */
} egm_te_op_t;

typedef struct {
    uint64_t bytes_read;
    uint64_t bytes_written;
    uint64_t tcp_requests_served;
    uint64_t tcp_requests_refused; /* bounds or unknown segment */
    uint64_t shm_fds_sent;
    uint64_t shm_peers_refused;
    uint64_t auth_failures; /* tcp data server and fd socket: cluster token missing or wrong */
    uint64_t mappings_live; /* shm + nvlink */
    /* nvlink (consumer side) */
    uint64_t nvlink_imports_total; /* VMM handles imported and mapped */
    uint64_t nvlink_mappings_live; /* of which mapped now (retired ones in use included) */
    uint64_t nvlink_import_failures;
    uint64_t prewarmed;     /* segments imported by the prewarm threads */
    uint64_t nvlink_copies; /* ops moved by GPU copies */
    uint64_t copy_kernel_launches;
    uint64_t copy_engine_copies;
    uint64_t copy_batch_calls;  /* cuMemcpyBatchAsync calls */
    uint64_t copy_bounced_runs; /* runs through the bounce buffer (nvlink_bounce_buffer) */
    uint64_t copy_groups;       /* groups issued and waited for (docs/configuration.md) */
    uint64_t copy_chunks;       /* pieces of copies cut at the chunk size or bound */
    uint64_t copy_max_group_bytes;
    uint64_t copy_run_ns;  /* wall time of GPU copy runs, issue to end, summed over threads */
    uint64_t copy_devices; /* GPUs whose copies are ready (a buffer registered or used) */
    uint64_t staged_bytes; /* GPU bytes that went over shm/tcp through the staging ring */
    /* provider side */
    uint64_t vmm_fds_sent; /* posix_fd VMM handles exported to consumers */
} egm_te_stats_t;

/* Loads the CUDA driver when there is one (GPU features need it);
 * protocol nvlink without a driver or a GPU -> EGM_ERR_NO_CUDA. */
egm_status_t egm__te_create(const egm_te_params_t *params, egm_te_t **te_p);
/* Stops servers, unmaps cached mappings, closes connections. NULL is a no-op. */
void egm__te_destroy(egm_te_t *te);

/* Provider side. `base`/`memfd` stay the caller's (the pool's); they must stay
 * valid until egm__te_withdraw_segment returns. On success desc gets host_id,
 * tcp_endpoint and shm_socket filled in (id, name, size, owner are the caller's). */
egm_status_t egm__te_expose_segment(egm_te_t *te, egm_segment_desc_t *desc, void *base, int memfd);
/* Provider side, CUDA VMM memory: `base` is this process's mapping of
 * `handle` (access granted to every local GPU, and to the host for HOST_NUMA
 * memory); both stay the caller's until withdraw returns. handle_kind
 * EGM_HANDLE_POSIX_FD (same-host consumers get a descriptor exported per
 * request by the fd broker) or EGM_HANDLE_FABRIC (the 64 handle bytes go into
 * desc). device: -1 for HOST_NUMA memory (the CPU may touch it: served over
 * tcp too), else the GPU ordinal of DEVICE memory (nvlink only: no tcp
 * endpoint). Fills desc's size, host_id, tcp_endpoint, shm_socket,
 * handle_kind and fabric handle. The handle must be exportable as its kind
 * (checked here). No driver -> EGM_ERR_NO_CUDA. */
egm_status_t egm__te_expose_vmm_segment(egm_te_t *te, egm_segment_desc_t *desc, void *base,
                                        uint64_t size, egm_cu_mem_handle_t handle,
                                        egm_handle_kind_t handle_kind, int device);
/* Stops serving the segment; waits for requests in flight on it. */
egm_status_t egm__te_withdraw_segment(egm_te_t *te, egm_id_t segment_id);

/* Consumer side. Each op's status is set; the return value is EGM_OK if every op
 * succeeded, else the first failure. Bounds are checked here and by the server. */
egm_status_t egm__te_transfer(egm_te_t *te, egm_te_op_t *ops, size_t n);
/* Which transport a transfer to this segment from host memory would use. */
egm_status_t egm__te_route(egm_te_t *te, const egm_segment_desc_t *segment,
                           egm_transport_t *transport_p);
/* Whether routing may take transport t (the protocol allows it and it
 * opened): a writer keeps a slab's commit log only over shared memory. */
int egm__te_may_route(const egm_te_t *te, egm_transport_t t);
/* Which transport this op would use: as egm__te_route, but knowing where the
 * op's local buffer lives (a GPU buffer can take nvlink). */
egm_status_t egm__te_route_op(egm_te_t *te, const egm_te_op_t *op, egm_transport_t *transport_p);
/* Drop every cached mapping/connection to a segment (retired by the master).
 * The id is never served again; an nvlink mapping is unmapped when the last
 * copy in flight on it ends. */
void egm__te_forget_segment(egm_te_t *te, egm_id_t segment_id);
/* After writing [offset, offset + length) of a segment: drops this process's
 * page-table entries of that range where the transport mapped it into this
 * process (shm), so that the written bytes, which stay in the segment, no
 * longer count in its resident memory (a streamed put of a file larger than
 * RAM would otherwise). The mapping stays cached and usable. */
void egm__te_release_pages(egm_te_t *te, egm_id_t segment_id, uint64_t offset, uint64_t length);
/* Ids of the segments with a cached mapping (shm or nvlink, imports in
 * progress included), egm_malloc'ed, NULL when none; an id may appear twice.
 * After a master restart a client forgets those the new master does not list
 * (the old master's ids, retired with it). */
egm_status_t egm__te_cached_segments(egm_te_t *te, egm_id_t **ids_p, size_t *n_p);
/* Import and map these segments in the background (nvlink mapping cache), so
 * that a later transfer finds them ready. Skips segments nvlink cannot reach
 * (not VMM, posix_fd of another host, own), mapped or queued ones, and does
 * nothing without a driver or with prewarm off. Errors are logged (debug). */
void egm__te_prewarm(egm_te_t *te, const egm_segment_desc_t *descs, size_t n);
/* Waits until every queued prewarm has finished (tests, benchmarks). */
void egm__te_prewarm_drain(egm_te_t *te);
/* Readies the GPU copies for local buffers on `device` (a GPU ordinal, or
 * EGM_DEVICE_MAPPED_HOST: GPU 0 copies pinned host memory): its copier's
 * stream, events, kernel and descriptor buffers. Nothing for other host memory
 * or without a GPU. */
egm_status_t egm__te_prepare_device(egm_te_t *te, int device);

void egm__te_stats(egm_te_t *te, egm_te_stats_t *stats_p);
/* The most transports a build registers (transport.c's list). */
#define EGM_TRANSPORTS_MAX 8
/* The transports routing may take to another process's segment, in order of
 * preference: those the protocol allows and that can reach something here
 * (nvlink needs a driver and a GPU). Writes at most cap names (static
 * strings) and returns how many there are. Fixed at creation: any thread. */
size_t egm__te_transports(const egm_te_t *te, const char **names, size_t cap);
const char *egm__transport_name(egm_transport_t transport);

#endif
