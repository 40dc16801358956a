/* RPC frame header: fixed 24 bytes, little-endian, before every message.
 *
 *   0  u32 magic    "EGMR" (0x524d4745)
 *   4  u8  version  EGM_RPC_VERSION
 *   5  u8  flags    EGM_FRAME_REPLY | EGM_FRAME_ERROR
 *   6  u16 type     egm_rpc_type_t
 *   8  u64 request id (replies carry the id of their request)
 *  16  u32 length   payload bytes that follow (protobuf message)
 *  20  u32 reserved must be 0
 */
#ifndef EGM_RPC_FRAME_H
#define EGM_RPC_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>

#define EGM_RPC_MAGIC 0x524d4745u
#define EGM_RPC_VERSION 1
#define EGM_FRAME_HEADER_SIZE 24
/* Objects start at multiples of this within a segment (the master's
 * allocator); providers align their segment sizes to it. */
#define EGM_OBJECT_ALIGN 64u
/* Most segments one MountSegment/UnmountSegment list may carry: the master
 * handles a list in one reactor turn, so it is bounded (16384 descriptors are
 * about 5 MB and a few hundred ms). Larger pools use several lists. */
#define EGM_MOUNT_MAX_SEGMENTS 16384
#define EGM_FRAME_REPLY 0x1u
#define EGM_FRAME_ERROR 0x2u /* payload is an ErrorReply */

typedef enum {
    EGM_RPC_MOUNT_SEGMENT = 1,
    EGM_RPC_UNMOUNT_SEGMENT = 2,
    EGM_RPC_PUT_START = 3,
    EGM_RPC_PUT_END = 4,
    EGM_RPC_PUT_REVOKE = 5,
    EGM_RPC_GET_REPLICA_LIST = 6,
    EGM_RPC_EXIST_KEY = 7,
    EGM_RPC_REMOVE = 8,
    EGM_RPC_REMOVE_ALL = 9,
    EGM_RPC_PING = 10,
    EGM_RPC_LIST_SEGMENTS = 11,
    EGM_RPC_STAT_KEY = 12, /* read-only: one object's replicas, lease and pins */
    EGM_RPC_TYPE_MAX = 12,
    /* First frame of a connection to a server with a cluster token: the
     * payload is the token's bytes (no protobuf); the reply is empty. Served
     * by the RPC server itself, not by a handler (so above TYPE_MAX). */
    EGM_RPC_AUTH = 64,
    /* Which master is this: the reply's payload is text, the TCP endpoints
     * the server listens on ("127.0.0.2:5000", "[::]:5000 0.0.0.0:5000"),
     * separated by spaces; the request's payload is empty. Served by the RPC
     * server itself, also before Auth: a client reaching a master over its
     * local Unix socket checks that it is the master of the TCP endpoint it
     * was given (rpc/endpoint.h). */
    EGM_RPC_HELLO = 65,
} egm_rpc_type_t;

typedef struct {
    uint8_t version;
    uint8_t flags;
    uint16_t type;
    uint64_t request_id;
    uint32_t length;
} egm_frame_header_t;

const char *egm__rpc_type_name(uint16_t type);
void egm__frame_encode_header(const egm_frame_header_t *h, uint8_t out[EGM_FRAME_HEADER_SIZE]);
/* Checks magic (EGM_ERR_PROTOCOL), version (EGM_ERR_VERSION), reserved bits
 * (EGM_ERR_PROTOCOL) and length <= max_payload (EGM_ERR_PROTOCOL, "too large").
 * On error the header fields that could be read are still filled in. */
egm_status_t egm__frame_decode_header(const uint8_t in[EGM_FRAME_HEADER_SIZE], size_t max_payload,
                                      egm_frame_header_t *h_p);

#endif
