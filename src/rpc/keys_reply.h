/* The KeysReply codec (proto/egmstore.proto): the master's encoder and the
 * clients' fast decoder, one place for the reply whose size grows with the
 * keys (8192 keys: one KeyResult and a Replica per key).
 *
 * Encoding writes the wire bytes straight from flat arrays, in field-number
 * order with proto3 zero scalars left out, as protobuf-c does; only the few
 * SegmentDescs go through protobuf-c.
 *
 * protobuf-c allocates one block per KeyResult, Replica, Id and repeated array
 * (five or more per key); decoding a 1024-key reply that way was a third of a
 * batch Get's client instructions. This parser reads the same wire bytes into
 * flat arrays with one allocation. It accepts exactly what protobuf-c accepts
 * for this schema (unknown fields skipped per wire type, a known field with the
 * wrong wire type refused, the last value wins for scalars and for a repeated
 * Id sub-message) and decodes it to the same values; segments stay as
 * their (validated) sub-message bytes, for protobuf-c to decode on demand. */
#ifndef EGM_RPC_KEYS_REPLY_H
#define EGM_RPC_KEYS_REPLY_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "common/id.h"
#include "rpc/segment_desc.h"

/* Limits on what one reply may hold (beyond what its size allows). */
#define EGM_KEYS_REPLY_MAX_REPLICAS 256 /* per key; the master places <= 16 */
#define EGM_KEYS_REPLY_MAX_SEGMENTS 65536

typedef struct {
    int32_t status;
    uint32_t n_replicas;
    uint32_t replica_first; /* index of its first replica in egm_keys_reply_t.replicas */
    uint64_t size;
    uint64_t lease_ttl_ms;
} egm_key_result_t;

/* A replica descriptor (DESIGN.md section 1): where one copy of an object lies.
 * (The master's record of a placed replica is egm_replica_t in
 * master/object_index.h.) */
typedef struct {
    egm_id_t segment; /* nil when absent */
    uint64_t offset;
    uint64_t length;
} egm_replica_desc_t;

typedef struct {
    const uint8_t *data; /* a SegmentDesc's wire bytes, inside the reply buffer */
    size_t len;
} egm_pb_slice_t;

typedef struct {
    int32_t status;
    size_t n_results;
    egm_key_result_t *results;
    size_t n_replicas;
    egm_replica_desc_t *replicas;
    size_t n_segments;
    egm_pb_slice_t *segments;
    uint64_t location_cache_ms; /* every keys answer: the master's cache bound */
    uint64_t wait_ms;           /* force Remove: how long the caller waits */
    uint64_t slab_id;           /* SlabGrant: the slab, described by results[0] */
    size_t n_degraded_slabs;    /* Commit: slabs that lost an extent (take no more objects) */
    uint64_t *degraded_slabs;
    egm_pb_slice_t
        error; /* SlabGrant refused: the master's reason (not NUL-terminated; len 0: none) */
    /* SlabGrant: not yet held by the standbys; copies into the slab start
     * only this long after the request was sent, until a Commit there is
     * answered (0: no such bound) */
    uint64_t place_within_ms;
    uint8_t *buf; /* the wire bytes (owned) */
    size_t len;
} egm_keys_reply_t;

/* A KeysReply to encode: results[i]'s replicas are
 * replicas[results[i].replica_first, + n_replicas); each segment they name is
 * described once in segments. Zero fields are left out (a result with only a
 * status carries size, replicas and lease_ttl_ms of 0). */
typedef struct {
    int32_t status;
    size_t n_results;
    const egm_key_result_t *results;
    const egm_replica_desc_t *replicas;
    size_t n_segments;
    const egm_segment_desc_t *const *segments;
    /* Instead of segments (NULL: use segments): each segment's SegmentDesc
     * already packed (egm__segment_desc__pack of it), copied as they are. */
    const egm_pb_slice_t *const *packed_segments;
    uint64_t location_cache_ms; /* 0: left out */
    uint64_t wait_ms;           /* 0: left out */
    uint64_t slab_id;           /* 0: left out */
    size_t n_degraded_slabs;    /* packed, as protobuf-c writes a repeated uint64 */
    const uint64_t *degraded_slabs;
    const char *error;        /* NULL or "": left out */
    uint64_t place_within_ms; /* 0: left out */
} egm_keys_reply_msg_t;

/* Encodes msg into *buf_p (egm_malloc'ed, freed with egm_free), *len_p bytes:
 * the bytes protobuf-c packs for the same message. EGM_ERR_NO_MEMORY;
 * EGM_ERR_INTERNAL should the sizes computed and written disagree. */
egm_status_t egm__keys_reply_encode(const egm_keys_reply_msg_t *msg, uint8_t **buf_p,
                                    size_t *len_p);

/* Decodes buf[0..len) (egm_malloc'ed; ownership passes to the call, freed on
 * error) into *reply_p, freed with egm__keys_reply_free. More than max_results
 * results, a malformed or truncated message, a wrong wire type or a count over
 * the limits above are EGM_ERR_PROTOCOL naming the field. */
egm_status_t egm__keys_reply_decode(uint8_t *buf, size_t len, size_t max_results,
                                    egm_keys_reply_t **reply_p);
/* As above without taking buf: the reply points into it (reply->buf is NULL). */
egm_status_t egm__keys_reply_view(const uint8_t *buf, size_t len, size_t max_results,
                                  egm_keys_reply_t **reply_p);
void egm__keys_reply_free(egm_keys_reply_t *reply);

/* The replicas of result i. */
static inline const egm_replica_desc_t *egm__keys_reply_replicas(const egm_keys_reply_t *reply,
                                                                 const egm_key_result_t *res)
{
    return reply->replicas + res->replica_first;
}

#endif
