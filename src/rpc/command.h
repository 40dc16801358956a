/* The RPC command list: every frame type of the protocol, once. A row gives
 * the type's enum name (EGM_RPC_<ENUM>), its number on the wire
 * (egm_frame_header_t.type), its name (logs, metrics labels) and its request
 * and reply messages (proto/egmstore.proto, as the stem of their protobuf-c
 * descriptors). The type enum, the names, the lookup below and the master's
 * command table (src/master/handlers.c: handler and lock mode per type) are
 * built from it: a new RPC is a row here and a row in the master, which does
 * not compile without it.
 *
 * EGM_RPC_COMMANDS are the requests a server hands to its registered handler
 * (the master's); they are numbered 1..EGM_RPC_TYPE_MAX in row order, without
 * gaps (checked at compile time in command.c). docs/protocol.md describes
 * each message. */
#ifndef EGM_RPC_COMMAND_H
#define EGM_RPC_COMMAND_H

#include <stdint.h>

#define EGM_RPC_COMMANDS(X)                                                                        \
    X(MOUNT_SEGMENT, 1, MountSegment, mount_segment_request, status_reply)                         \
    X(UNMOUNT_SEGMENT, 2, UnmountSegment, unmount_segment_request, status_reply)                   \
    X(PUT_START, 3, PutStart, put_start_request, keys_reply)                                       \
    X(PUT_END, 4, PutEnd, keys_request, keys_reply)                                                \
    X(PUT_REVOKE, 5, PutRevoke, keys_request, keys_reply)                                          \
    X(GET_REPLICA_LIST, 6, GetReplicaList, keys_request, keys_reply)                               \
    X(EXIST_KEY, 7, ExistKey, keys_request, keys_reply)                                            \
    X(REMOVE, 8, Remove, keys_request, keys_reply)                                                 \
    X(REMOVE_ALL, 9, RemoveAll, remove_all_request, remove_all_reply)                              \
    X(PING, 10, Ping, ping_request, ping_reply)                                                    \
    X(LIST_SEGMENTS, 11, ListSegments, list_segments_request, list_segments_reply)                 \
    X(STAT_KEY, 12, StatKey, stat_key_request, stat_key_reply)                                     \
    X(SLAB_GRANT, 13, SlabGrant, slab_grant_request, keys_reply)                                   \
    X(COMMIT, 14, Commit, commit_request, keys_reply)                                              \
    X(REPAIR_GRANT, 15, RepairGrant, repair_grant_request, repair_grant_reply)                     \
    X(REPAIR_COMMIT, 16, RepairCommit, repair_commit_request, repair_commit_reply)                 \
    X(HA_APPLY, 17, HaApply, ha_apply_request, status_reply)

/* Session frames, answered by the RPC server itself (rpc/server.c), never by
 * a handler; numbered above EGM_RPC_TYPE_MAX; payloads are raw bytes, not
 * protobuf.
 *   Auth: first frame of a connection to a server with a cluster token: the
 *     payload is the token's bytes; the reply is empty.
 *   Hello: which master is this. The request's payload is empty; the reply's
 *     is text, the TCP endpoints the server listens on ("127.0.0.2:5000",
 *     "[::]:5000 0.0.0.0:5000"), separated by spaces. Also answered before
 *     Auth: a client reaching a master over its local Unix socket checks that
 *     it is the master of the TCP endpoint it was given (rpc/endpoint.h). */
#define EGM_RPC_SESSION_COMMANDS(X)                                                                \
    X(AUTH, 64, Auth)                                                                              \
    X(HELLO, 65, Hello)

/* Row indexes of EGM_RPC_COMMANDS: they count the rows and check the numbering. */
enum {
#define EGM_RPC_ROW_(e, n, name, req, rep) EGM_RPC_ROW_##e,
    EGM_RPC_COMMANDS(EGM_RPC_ROW_)
#undef EGM_RPC_ROW_
        EGM_RPC_ROWS_
};

typedef enum {
#define EGM_RPC_TYPE_(e, n, name, req, rep) EGM_RPC_##e = n,
#define EGM_RPC_SESSION_TYPE_(e, n, name) EGM_RPC_##e = n,
    EGM_RPC_COMMANDS(EGM_RPC_TYPE_) EGM_RPC_SESSION_COMMANDS(EGM_RPC_SESSION_TYPE_)
#undef EGM_RPC_TYPE_
#undef EGM_RPC_SESSION_TYPE_
        EGM_RPC_TYPE_MAX = EGM_RPC_ROWS_, /* the last handler command */
} egm_rpc_type_t;

/* egm_rpc_command_t.flags */
#define EGM_RPC_SESSION 0x1u /* answered by the RPC server itself (EGM_RPC_SESSION_COMMANDS) */

struct ProtobufCMessageDescriptor;

/* One row of the list, for code that walks it (dispatch, metrics, fuzzers). */
typedef struct {
    uint16_t type;
    const char *name;
    /* The messages' protobuf-c descriptors; NULL for a session frame. */
    const struct ProtobufCMessageDescriptor *request, *reply;
    unsigned flags;
} egm_rpc_command_t;

/* The row of `type`, or NULL for a type the protocol does not have.
 * Thread-safe (constant data). */
const egm_rpc_command_t *egm__rpc_command_find(uint16_t type);
/* Its name, or "unknown". Thread-safe. */
const char *egm__rpc_type_name(uint16_t type);

#endif
