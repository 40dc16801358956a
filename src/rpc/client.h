/* RPC client connection to one server. Thread-safe: many threads may call at
 * once; requests are pipelined on one connection (TCP with TCP_NODELAY, or the
 * master's local Unix socket, see prefer_local_socket) and replies are matched
 * to their callers by request id. There is no reader thread: a waiting caller
 * reads the socket itself while no other does, hands the replies of other ids
 * to their waiters, and passes the reading on when its own reply arrives or its
 * deadline passes (leader/follower, rpc/client.c). A call that times out
 * waiting for its reply leaves the connection up (the late reply is dropped).
 * A broken connection (end of stream, a read error, a malformed frame, a failed
 * write but for a timeout before its first byte) fails every pending call with
 * EGM_ERR_UNREACHABLE and is re-established, token presented again, by the
 * next call. Destroy only with no call in flight. */
#ifndef EGM_RPC_CLIENT_H
#define EGM_RPC_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <protobuf-c/protobuf-c.h>
#include <egmstore/status.h>

typedef struct egm_rpc_client egm_rpc_client_t;

typedef struct {
    const char *addr; /* "host:port" */
    int connect_timeout_ms;
    size_t max_frame_size;
    /* When addr's host is a loopback address (127.0.0.0/8, ::1, "localhost"),
     * connect to the master's local Unix socket first (rpc/endpoint.h: the
     * name of addr's exact address and port, then the wildcard names of its
     * port), keep that connection only when the master behind it answers
     * Hello with a TCP endpoint that covers addr (else a warning), and fall
     * back to TCP otherwise (silently when nobody listens there). Same
     * frames, without the loopback TCP/IP stack on every call. */
    int prefer_local_socket;
    /* Cluster token presented first on every (re)connection (NULL or "" =
     * none). A refusal fails the call that connected with the server's
     * EGM_ERR_PERMISSION and text. */
    const char *auth_token;
    /* Microseconds a caller polls for its reply without sleeping before it
     * waits in poll (0 = sleep at once). */
    int spin_us;
    /* When set, the master's address is asked of it before every (re)connect
     * (addr is then only the first guess, and may be NULL): the current
     * leader of masters in HA (docs/ha.md). It writes "host:port" into addr
     * (len bytes) or answers an error (e.g. EGM_ERR_UNREACHABLE: no leader
     * known) that fails the connect. Also asked when a call times out: when
     * it names another master then, the connection is shut down (its calls
     * fail) and the next call connects to that one. Called under the
     * client's lock. */
    egm_status_t (*resolve)(void *arg, char *addr, size_t len);
    void *resolve_arg;
    /* Connect once only: after the first connection is lost, every call
     * fails with EGM_ERR_UNREACHABLE at once rather than connecting again.
     * For a stream its peer must receive whole and in order on one
     * connection (the journal to a standby, master/replication.c), whose
     * sender starts over with a new client; and so that no caller blocks
     * in a connect (an RPC thread writing a batch). */
    int connect_once;
} egm_rpc_client_params_t;

/* Does not connect yet: the first call does. params and its strings are
 * copied. EGM_ERR_INVALID_ARG (no addr nor resolve, a bad host:port, max_frame_size
 * outside 1..UINT32_MAX), EGM_ERR_NO_MEMORY. */
egm_status_t egm__rpc_client_create(const egm_rpc_client_params_t *params,
                                    egm_rpc_client_t **client_p);
/* Closes the connection and frees the client. NULL is a no-op. No call may be
 * in flight or start, from any thread: a waiter would wake on freed memory. */
void egm__rpc_client_destroy(egm_rpc_client_t *client);
/* Whether a client of addr preferring the local socket would be served over
 * it now (a local name answers Hello as the master of addr). Connects and
 * closes; for labels (bench). */
int egm__rpc_client_local_probe(const char *addr, int timeout_ms);

/* Raw call: *reply_p (egm_malloc'ed, free with egm_free) receives the reply
 * payload. An error reply from the server returns its status, with its text in
 * egm_last_error(). EGM_ERR_TIMEOUT after timeout_ms (the late reply is dropped);
 * timeout_ms <= 0 waits until the reply or the loss of the connection (a
 * connect is still bounded by connect_timeout_ms). Any thread. Other errors:
 * EGM_ERR_CLOSED (client NULL), EGM_ERR_INVALID_ARG (req_len above
 * max_frame_size), those of connecting (EGM_ERR_UNREACHABLE, EGM_ERR_TIMEOUT,
 * EGM_ERR_PERMISSION when the token is refused, ...), of writing
 * (EGM_ERR_IO, ...), EGM_ERR_UNREACHABLE when the connection broke,
 * EGM_ERR_NO_MEMORY. */
egm_status_t egm__rpc_call(egm_rpc_client_t *client, uint16_t type, const uint8_t *req,
                           size_t req_len, uint8_t **reply_p, size_t *reply_len_p, int timeout_ms);

/* A call in two steps, for requests that must reach the server in a set
 * order while several are in flight (the HA journal's batches,
 * master/journal.h): egm__rpc_begin connects when needed, writes the request
 * frame and returns once it is written (frames of two begins one after the
 * other leave in that order), the call in flight in *call_p;
 * egm__rpc_end waits for its reply, with egm__rpc_call's results (timeout_ms
 * counts from the begin), and frees the call. Each begun call is ended once,
 * from any thread. On an error egm__rpc_begin begins nothing. */
typedef struct egm_rpc_call egm_rpc_call_t;
egm_status_t egm__rpc_begin(egm_rpc_client_t *client, uint16_t type, const uint8_t *req,
                            size_t req_len, int timeout_ms, egm_rpc_call_t **call_p);
egm_status_t egm__rpc_end(egm_rpc_call_t *call, uint8_t **reply_p, size_t *reply_len_p);

/* Protobuf request, raw reply: packs req and makes the raw call above, whose
 * reply ownership and errors it shares; packing adds EGM_ERR_NO_MEMORY and
 * EGM_ERR_INTERNAL. Any thread. */
egm_status_t egm__rpc_call_pb(egm_rpc_client_t *client, uint16_t type, const ProtobufCMessage *req,
                              uint8_t **reply_p, size_t *reply_len_p, int timeout_ms);

/* Protobuf call: packs req, unpacks the reply as reply_desc into *reply_p, freed
 * with egm__rpc_msg_free. A reply that does not decode is EGM_ERR_PROTOCOL. */
egm_status_t egm__rpc_call_msg(egm_rpc_client_t *client, uint16_t type, const ProtobufCMessage *req,
                               const ProtobufCMessageDescriptor *reply_desc,
                               ProtobufCMessage **reply_p, int timeout_ms);
void egm__rpc_msg_free(ProtobufCMessage *msg);

#endif
