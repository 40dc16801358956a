/* Transfer-engine internals shared between its files: the table of exposed
 * segments, the counters, the wire formats, and the provider servers and
 * the tcp client behind egm__te_* (the consumer transports themselves are ops
 * tables: transport.h). */
#ifndef EGM_TE_TE_INT_H
#define EGM_TE_TE_INT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "common/id.h"
#include "common/wire.h"
#include "cuda/cuda_api.h"
#include "rpc/segment_desc.h"
#include "te/segref.h"
#include "te/te.h"

/* ---- counters (shared by the servers and the engine) ---------------------- */
typedef struct {
    atomic_uint_fast64_t bytes_read;
    atomic_uint_fast64_t bytes_written;
    atomic_uint_fast64_t tcp_requests_served;
    atomic_uint_fast64_t tcp_requests_refused;
    atomic_uint_fast64_t shm_fds_sent;
    atomic_uint_fast64_t shm_peers_refused;
    atomic_uint_fast64_t vmm_fds_sent;  /* posix_fd handles exported to consumers */
    atomic_uint_fast64_t auth_failures; /* tcp/fd peers refused: cluster token missing or wrong */
} egm_te_counters_t;

/* The provider servers' access rules (the te's; outlive the servers). */
typedef struct {
    const char *token;      /* cluster token; "" = none required */
    int64_t fd_allowed_gid; /* fd socket: also this primary gid; -1 = none */
} egm_te_auth_t;

/* ---- exposed segments (provider side) ------------------------------------- */
/* A segment reference table (segref.h) of egm_exposed_t. */
typedef egm_segref_table_t egm_exposed_table_t;

/* A use reference on an exposed segment: base/size/memfd/handle stay valid
 * until egm__exposed_put. */
typedef struct {
    egm_segref_t ref; /* ref.id: the segment's id */
    void *base;
    uint64_t size;
    int memfd;                  /* -1 when the segment has no memfd (tcp only, or VMM) */
    egm_handle_kind_t kind;     /* MEMFD/NONE: host memory; POSIX_FD/FABRIC: CUDA VMM */
    egm_cu_mem_handle_t handle; /* VMM allocation (the pool's); 0 for host memory */
    int host_accessible;        /* the CPU may read/write base (tcp server, local memcpy) */
    int device;                 /* VMM on a GPU: its ordinal; else -1 */
} egm_exposed_t;

egm_status_t egm__exposed_create(egm_exposed_table_t **table_p);
/* Every segment must have been unlinked (or no server may still run). */
void egm__exposed_destroy(egm_exposed_table_t *table);
/* Same id twice -> EGM_ERR_SEGMENT_EXISTS. */
egm_status_t egm__exposed_add(egm_exposed_table_t *table, egm_id_t id, void *base, uint64_t size,
                              int memfd);
/* A CUDA VMM segment: `base` is the provider's own mapping of `handle`
 * (kind POSIX_FD or FABRIC); host_accessible when the CPU may touch it
 * (HOST_NUMA with host access), device = GPU ordinal of DEVICE memory or -1. */
egm_status_t egm__exposed_add_vmm(egm_exposed_table_t *table, egm_id_t id, void *base,
                                  uint64_t size, egm_cu_mem_handle_t handle, egm_handle_kind_t kind,
                                  int host_accessible, int device);
/* Unlinks the segment so that new lookups fail, then waits for the uses in
 * flight to end (egm__segref_unlink with EGM_SEGREF_WAIT). Unknown ->
 * EGM_ERR_SEGMENT_NOT_FOUND. */
egm_status_t egm__exposed_unlink(egm_exposed_table_t *table, egm_id_t id);
/* NULL if the segment is not exposed (now). */
egm_exposed_t *egm__exposed_get(egm_exposed_table_t *table, egm_id_t id);
void egm__exposed_put(egm_exposed_table_t *table, egm_exposed_t *segment);
size_t egm__exposed_count(egm_exposed_table_t *table);

/* ---- wire formats (fixed little-endian, common/wire.h) -------------------- */
#define EGM_TCP_MAGIC 0x54474d45u       /* "EMGT" as LE bytes 'E','M','G','T' */
#define EGM_TCP_REPLY_MAGIC 0x52474d45u /* "EMGR" */
#define EGM_TCP_VERSION 1u
#define EGM_TCP_OP_READ 1u
#define EGM_TCP_OP_WRITE 2u
/* First request of a connection to a server with a cluster token: `length`
 * bytes of token follow the header; answered OK or PERMISSION (then closed). */
#define EGM_TCP_OP_AUTH 3u
#define EGM_TCP_REQ_SIZE 48u
#define EGM_TCP_REPLY_SIZE 24u
#define EGM_TCP_MAX_REQUEST (1ull << 30)   /* server refuses longer requests */
#define EGM_TCP_CLIENT_CHUNK (64ull << 20) /* client splits transfers into these */

typedef struct {
    uint32_t magic;
    uint16_t version;
    uint16_t op;
    uint64_t request_id;
    egm_id_t segment;
    uint64_t offset;
    uint64_t length;
} egm_tcp_req_t;

typedef struct {
    uint32_t magic;
    int32_t status;
    uint64_t request_id;
    uint64_t length;
} egm_tcp_reply_t;

void egm__tcp_req_encode(const egm_tcp_req_t *req, uint8_t out[EGM_TCP_REQ_SIZE]);
void egm__tcp_req_decode(const uint8_t in[EGM_TCP_REQ_SIZE], egm_tcp_req_t *req);
void egm__tcp_reply_encode(const egm_tcp_reply_t *reply, uint8_t out[EGM_TCP_REPLY_SIZE]);
void egm__tcp_reply_decode(const uint8_t in[EGM_TCP_REPLY_SIZE], egm_tcp_reply_t *reply);

#define EGM_BROKER_MAGIC 0x42474d45u       /* "EMGB" */
#define EGM_BROKER_REPLY_MAGIC 0x46474d45u /* "EMGF" */
#define EGM_BROKER_VERSION 1u
#define EGM_BROKER_REQ_SIZE 24u   /* magic u32, version u16, reserved u16, segment id 16 */
#define EGM_BROKER_REPLY_SIZE 16u /* magic u32, status i32, size u64 */
/* Sent before the request when the consumer has a cluster token: magic u32,
 * token length u32, then the token's bytes. */
#define EGM_BROKER_AUTH_MAGIC 0x41474d45u /* "EMGA" */

/* ---- fd broker (provider side of shm and of posix_fd VMM handles) ---------- */
typedef struct egm_fd_broker egm_fd_broker_t;

/* Listens on an abstract Unix socket "@egmstore-<pid>-<random>" served by its
 * own thread. A request's u16 at byte 6 names the handle kind wanted: 0 or
 * MEMFD -> the segment's memfd; POSIX_FD -> a descriptor freshly exported from
 * the segment's VMM allocation (through `api`; NULL: none served), closed here
 * once sent. A kind the segment does not have is answered SEGMENT_NOT_FOUND. */
egm_status_t egm__fd_broker_start(egm_exposed_table_t *table, egm_te_counters_t *counters,
                                  const egm_cuda_api_t *api, const egm_te_auth_t *auth,
                                  egm_fd_broker_t **broker_p);
void egm__fd_broker_stop(egm_fd_broker_t *broker);
/* "@egmstore-..." (the '@' stands for the abstract namespace's leading NUL). */
const char *egm__fd_broker_name(const egm_fd_broker_t *broker);
/* Consumer side: asks the broker at `socket` for the segment's descriptor of
 * `kind` (MEMFD or POSIX_FD), after checking that the broker runs as our uid or
 * root. *fd_p is the caller's to close; *size_p is the size the provider
 * reports. Broker gone -> UNREACHABLE; refused -> the provider's status. */
egm_status_t egm__fd_broker_fetch(const char *socket, egm_id_t segment, egm_handle_kind_t kind,
                                  const char *token, int timeout_ms, int *fd_p, uint64_t *size_p);

/* ---- tcp data server (provider side) -------------------------------------- */
typedef struct egm_tcp_server egm_tcp_server_t;

#define EGM_TCP_MAX_CONNECTIONS 256

/* The server's reading of a request, apart from its socket (fuzz/ drives these).
 * egm__tcp_req_parse decodes the 48 bytes and refuses a bad magic (EGM_ERR_PROTOCOL) or
 * version (EGM_ERR_VERSION): the server closes that connection. egm__tcp_req_check refuses
 * an op, a length, a segment or a range it does not serve (the reply's status), else takes
 * a use reference on the segment in *seg_p, whose [offset, offset + length) then lies
 * inside base[0, size). */
egm_status_t egm__tcp_req_parse(const uint8_t in[EGM_TCP_REQ_SIZE], egm_tcp_req_t *req);
egm_status_t egm__tcp_req_check(egm_exposed_table_t *table, const egm_tcp_req_t *req,
                                egm_exposed_t **seg_p);
egm_status_t egm__tcp_server_start(egm_exposed_table_t *table, egm_te_counters_t *counters,
                                   const egm_te_auth_t *auth, const char *host, uint16_t port,
                                   int io_timeout_ms, egm_tcp_server_t **server_p);
void egm__tcp_server_stop(egm_tcp_server_t *server);
uint16_t egm__tcp_server_port(const egm_tcp_server_t *server);

/* ---- tcp data client (consumer side) -------------------------------------- */
typedef struct egm_tcp_client egm_tcp_client_t;

/* token: presented first on every new connection ("" = none; copied). */
egm_status_t egm__tcp_client_create(int io_timeout_ms, const char *token,
                                    egm_tcp_client_t **client_p);
void egm__tcp_client_destroy(egm_tcp_client_t *client);
/* One request of a stream (tcp_stream.c): at most EGM_TCP_CLIENT_CHUNK bytes
 * between `local` and a segment. */
typedef struct {
    egm_tcp_req_t req;             /* magic, version, op, request id, segment, offset, length */
    uint8_t hdr[EGM_TCP_REQ_SIZE]; /* req encoded (by the stream) */
    uint8_t *local;
    size_t op;           /* the caller's: which op it is part of */
    egm_status_t status; /* out: EGM_INPROGRESS until answered */
    int refused;         /* out: answered with an error status */
    const char *why;     /* the caller's: its connection's failure, when unanswered */
} egm_tcp_piece_t;

/* Sends the requests of pieces[0, n) on fd (connected, authenticated, no
 * call in flight on it) back to back, at most 64 unanswered, while reading
 * their answers in order (a READ's bytes into its `local`). Stops early after
 * a refused WRITE (the server closes the connection then). *answered_p: how
 * many leading pieces were answered (each with its status); *conn_ok_p:
 * whether the connection may be pooled again (all answered, none a refused
 * WRITE). EGM_OK when the stream ended as the server meant it to (all
 * answered, or up to a refused WRITE); else why the connection failed, with
 * the pieces from *answered_p on unanswered: EGM_ERR_TIMEOUT after
 * io_timeout_ms without progress, EGM_ERR_UNREACHABLE when the server closed,
 * EGM_ERR_PROTOCOL for a reply that is not the next piece's. */
egm_status_t egm__tcp_stream_run(int fd, egm_tcp_piece_t *pieces, size_t n, int io_timeout_ms,
                                 size_t *answered_p, int *conn_ok_p);

/* Every op of ops[0, n) (each on a segment with a tcp endpoint): the requests
 * for each endpoint streamed on a connection (egm__tcp_stream_run; a large
 * batch in up to 4 parts on their own connections, at once; a pooled
 * connection found closed before it answered anything is replaced, a
 * timeout is not retried). Sets
 * each op's status (the first failed request's, with the text a single
 * transfer gives); returns the lowest failed op's, with its text. */
egm_status_t egm__tcp_client_transfer_batch(egm_tcp_client_t *client, egm_te_op_t *const *ops,
                                            size_t n);
/* Moves [offset, offset+length) of the segment at `endpoint` ("host:port"):
 * a batch of one op, streamed and retried as above (a range of more than
 * 64 MiB may go on several connections at once). */
egm_status_t egm__tcp_client_transfer(egm_tcp_client_t *client, const char *endpoint,
                                      egm_id_t segment, uint64_t offset, void *local, size_t length,
                                      egm_te_dir_t dir);

#endif
