/* Helpers shared by every user of the protobuf schema. */
#ifndef EGM_RPC_PROTO_UTIL_H
#define EGM_RPC_PROTO_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <protobuf-c/protobuf-c.h>
#include <egmstore/status.h>
#include "common/id.h"
#include "egmstore.pb-c.h"

/* protobuf-c allocator backed by egm_malloc (site "protobuf"). */
extern ProtobufCAllocator egm__pb_allocator;

/* Unpack with egm__pb_allocator; NULL -> EGM_ERR_PROTOCOL with a message naming
 * the message type. */
egm_status_t egm__pb_unpack(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
                            ProtobufCMessage **msg_p);
void egm__pb_free(ProtobufCMessage *msg);
/* Pack into an egm_malloc'ed buffer. */
egm_status_t egm__pb_pack(const ProtobufCMessage *msg, uint8_t **buf_p, size_t *len_p);

/* Id conversion. egm__id_to_pb fills caller storage (no allocation). A missing
 * message decodes to the nil id. */
void egm__id_to_pb(egm_id_t id, Egm__Id *pb);
egm_id_t egm__id_from_pb(const Egm__Id *pb);

#endif
