/* RPC server on an egm reactor. Requests on one connection may be pipelined;
 * each reply carries its request id. A frame with a bad magic, a bad version or
 * an oversized length gets an error reply (when its id could be read) and its
 * connection is closed; an unknown type or an undecodable payload gets an error
 * reply and the connection stays. Other connections are never affected. */
#ifndef EGM_RPC_SERVER_H
#define EGM_RPC_SERVER_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "common/reactor.h"
#include "rpc/endpoint.h"

typedef struct egm_rpc_server egm_rpc_server_t;

/* Reply payload produced by a handler: an egm_malloc'ed buffer the server frees. */
typedef struct {
    uint8_t *buf;
    size_t len;
} egm_rpc_reply_t;

/* Called on the reactor thread (of each server of a group: make it
 * thread-safe for a group). Return EGM_OK with *reply filled (len 0 is
 * allowed), or an error: the peer then gets an ErrorReply with that status and
 * egm_last_error()'s text. */
typedef egm_status_t (*egm_rpc_handler_t)(void *arg, uint16_t type, const uint8_t *payload,
                                          size_t len, egm_rpc_reply_t *reply);

/* Answering later. A handler that cannot answer yet (a change the master's
 * standbys must hold first: master/journal.h) calls egm__rpc_server_hold
 * and returns EGM_OK with no reply: the server sends nothing for that
 * request until egm__rpc_hold_release, called once from any thread, gives
 * the answer. Meanwhile the reactor serves its other requests and
 * connections; replies on one connection may then leave in another order
 * than their requests (each carries its request id). A reply released after
 * its connection closed, or its server was destroyed, is dropped. */
typedef struct egm_rpc_hold egm_rpc_hold_t;
/* The request being handled, held; NULL outside a handler, or when out of
 * memory (then answer now). Handler thread only. */
egm_rpc_hold_t *egm__rpc_server_hold(void);
/* Whether other requests wait, or may soon, behind the one being handled:
 * bytes already read from its connection, other connections of the same
 * reactor with input in the same wakeup, or a connection whose peer sends
 * before its answers come (a request of it came, within the last second,
 * while another of its was held or behind another in one read: threads
 * sharing one client). A handler
 * that would block for a while (and could hold its reply instead) should not
 * then. 0 outside a handler. */
int egm__rpc_server_others_waiting(void);
/* The answer: status EGM_OK with reply[0..len) (an egm_malloc'ed buffer the
 * server now owns; NULL when len is 0), or an error status and its text. */
void egm__rpc_hold_release(egm_rpc_hold_t *hold, egm_status_t status, uint8_t *reply, size_t len,
                           const char *error);

typedef struct {
    const char *host;       /* bind address; NULL or "" = 0.0.0.0 */
    uint16_t port;          /* 0 = any free port */
    size_t max_frame_size;  /* payload limit */
    size_t max_connections; /* 0 = 1024 */
    /* Cluster token (copied; NULL or "" = none): each connection must first
     * send an EGM_RPC_AUTH frame carrying it; any other frame before that
     * (but EGM_RPC_HELLO), or a wrong token, gets an EGM_ERR_PERMISSION error reply ("auth
     * required" / "auth token mismatch") and the connection is closed. */
    const char *auth_token;
} egm_rpc_server_params_t;

typedef struct {
    uint64_t connections_accepted;
    uint64_t connections_open;
    uint64_t requests;
    uint64_t frames_rejected;  /* bad magic/version/size/type/payload */
    uint64_t connections_unix; /* of connections_accepted: over the Unix listener */
    uint64_t auth_failures;    /* frames refused for a missing or wrong cluster token */
} egm_rpc_server_stats_t;

egm_status_t egm__rpc_server_create(egm_reactor_t *reactor, const egm_rpc_server_params_t *params,
                                    egm_rpc_server_t **server_p);
egm_status_t egm__rpc_server_register(egm_rpc_server_t *server, uint16_t type,
                                      egm_rpc_handler_t handler, void *arg);
/* Also accepts connections on a Unix stream socket at path ("@name" = abstract
 * namespace): same frames, limits, handlers and connection cap; no TCP_NODELAY.
 * At most one per server; call before the reactor runs or on its thread. Fails
 * (the server keeps serving TCP) when the name is taken. */
egm_status_t egm__rpc_server_listen_unix(egm_rpc_server_t *server, const char *path);
/* The abstract Unix socket name (rpc/endpoint.h) under which a server
 * listening on this TCP address also serves clients of its own host: EGM_OK
 * with the name in buf when the address is a loopback or wildcard one,
 * EGM_ERR_NOT_SUPPORTED otherwise (no local client's TCP would reach it by a
 * loopback address). Abstract names live in the network namespace, like
 * 127.0.0.1, and vanish with the process. */
egm_status_t egm__rpc_server_local_name(const egm_rpc_server_t *server, char *buf, size_t len);
/* What the server answers to Hello: its TCP endpoints, separated by spaces
 * (an IPv6 wildcard that also takes IPv4 lists "0.0.0.0:PORT" too). */
const char *egm__rpc_server_identity(const egm_rpc_server_t *server);
/* Another server, on another reactor (thread), serving the listening sockets
 * of `owner` (a server made by egm__rpc_server_create, after its
 * egm__rpc_server_listen_unix): every server of the group watches them
 * (EPOLLEXCLUSIVE), and the one that accepts a connection hands it to the
 * server of the group with the fewest open connections. max_frame_size and
 * max_connections (for the whole group) are the owner's; handlers are
 * registered on each server. Create peers before any reactor of the group
 * runs. */
egm_status_t egm__rpc_server_create_peer(egm_reactor_t *reactor, egm_rpc_server_t *owner,
                                         egm_rpc_server_t **server_p);
/* Connections bound to a peer: a handler that learns who is on the other end
 * (a client id in its request) binds the connection it is serving to that
 * 16-byte identity; when a bound connection closes for any reason but the
 * server's destruction, the server's hook is called with the identity on the
 * connection's reactor thread (so that the owner can notice a peer gone
 * without waiting for a timeout). Returns 1 when the current connection was
 * not bound to `peer` before (now it is; a connection is bound to one peer,
 * the last named, and the peer it replaces is not told: its owner counts
 * that connection as its own until it closes), 0 when it was, or when called
 * outside a handler. Called on the handler's thread only. */
int egm__rpc_server_bind_peer(const uint8_t peer[16]);
typedef void (*egm_rpc_peer_close_t)(void *arg, const uint8_t peer[16]);
/* Sets the hook (NULL: none). Before the reactor runs. */
void egm__rpc_server_on_peer_close(egm_rpc_server_t *server, egm_rpc_peer_close_t fn, void *arg);
uint16_t egm__rpc_server_port(const egm_rpc_server_t *server);
/* This server's connections and frames. */
void egm__rpc_server_stats(const egm_rpc_server_t *server, egm_rpc_server_stats_t *stats_p);
/* Summed over the server's group (its owner and every peer). Thread-safe. */
void egm__rpc_server_group_stats(const egm_rpc_server_t *server, egm_rpc_server_stats_t *stats_p);
/* Closes every connection (and the listeners, for an owner). Call on the
 * reactor thread or when it is not running; for a group, with every reactor
 * of the group stopped, and the peers before their owner. */
void egm__rpc_server_destroy(egm_rpc_server_t *server);

#endif
