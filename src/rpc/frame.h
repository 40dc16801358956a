/* RPC frame header: fixed 24 bytes, little-endian, before every message.
 *
 *   0  u32 magic    "EGMR" (0x524d4745)
 *   4  u8  version  EGM_RPC_VERSION
 *   5  u8  flags    EGM_FRAME_REPLY | EGM_FRAME_ERROR
 *   6  u16 type     egm_rpc_type_t (rpc/command.h, the command list)
 *   8  u64 request id (replies carry the id of their request)
 *  16  u32 length   payload bytes that follow (protobuf message)
 *  20  u32 reserved must be 0
 */
#ifndef EGM_RPC_FRAME_H
#define EGM_RPC_FRAME_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "rpc/command.h"

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

typedef struct {
    uint8_t version;
    uint8_t flags;
    uint16_t type;
    uint64_t request_id;
    uint32_t length;
} egm_frame_header_t;

void egm__frame_encode_header(const egm_frame_header_t *h, uint8_t out[EGM_FRAME_HEADER_SIZE]);
/* Checks magic (EGM_ERR_PROTOCOL), version (EGM_ERR_VERSION), reserved bits
 * (EGM_ERR_PROTOCOL) and length <= max_payload (EGM_ERR_PROTOCOL, "too large").
 * On error the header fields that could be read are still filled in. */
egm_status_t egm__frame_decode_header(const uint8_t in[EGM_FRAME_HEADER_SIZE], size_t max_payload,
                                      egm_frame_header_t *h_p);

#endif
