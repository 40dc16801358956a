/* KeysReply codec: see keys_reply.h. The encoder sizes the message, then
 * writes it into one exactly sized buffer. The decoder makes two passes over
 * the bytes: the first validates and counts, the second fills one exactly
 * sized block. The wire rules mirror protobuf-c 1.4's unpacker so both accept
 * the same messages. */
#include "rpc/keys_reply.h"

#include <string.h>
#include "common/alloc.h"
#include "common/log.h"
#include "common/wire.h"

/* ---- encoding ------------------------------------------------------------ */

/* Field keys (field number << 3 | wire type) of proto/egmstore.proto. */
enum {
    TAG_KEYS_STATUS = 0x08,    /* KeysReply.status = 1, varint (sint32) */
    TAG_KEYS_RESULTS = 0x12,   /* KeysReply.results = 2, bytes */
    TAG_KEYS_SEGMENTS = 0x1a,  /* KeysReply.segments = 3, bytes */
    TAG_KEYS_CACHE = 0x20,     /* KeysReply.location_cache_ms = 4, varint */
    TAG_KEYS_WAIT = 0x28,      /* KeysReply.wait_ms = 5, varint */
    TAG_KEYS_SLAB = 0x30,      /* KeysReply.slab_id = 6, varint */
    TAG_KEYS_DEGRADED = 0x3a,  /* KeysReply.degraded_slabs = 7, packed varints */
    TAG_KEYS_ERROR = 0x42,     /* KeysReply.error = 8, bytes */
    TAG_KEYS_PLACE = 0x48,     /* KeysReply.place_within_ms = 9, varint */
    TAG_RESULT_STATUS = 0x08,  /* KeyResult.status = 1 */
    TAG_RESULT_SIZE = 0x10,    /* KeyResult.size = 2 */
    TAG_RESULT_REPLICA = 0x1a, /* KeyResult.replicas = 3 */
    TAG_RESULT_LEASE = 0x20,   /* KeyResult.lease_ttl_ms = 4 */
    TAG_REPLICA_SEGMENT = 0x0a,
    TAG_REPLICA_OFFSET = 0x10,
    TAG_REPLICA_LENGTH = 0x18,
    TAG_ID_HI = 0x09, /* fixed64 */
    TAG_ID_LO = 0x11,
};

static size_t varint_len(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static uint8_t *put_varint(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static uint64_t zigzag32(int32_t v)
{
    return (uint32_t)(((uint32_t)v << 1) ^ (uint32_t)(v >> 31));
}

/* Optional scalar: proto3 leaves out zeros. */
static size_t scalar_len(uint64_t v)
{
    return v != 0 ? 1 + varint_len(v) : 0;
}

static uint8_t *put_scalar(uint8_t *p, uint8_t tag, uint64_t v)
{
    if (v == 0)
        return p;
    *p++ = tag;
    return put_varint(p, v);
}

static uint8_t *put_fixed64(uint8_t *p, uint8_t tag, uint64_t v)
{
    if (v == 0)
        return p;
    *p++ = tag;
    egm__wire_put_u64(p, v);
    return p + 8;
}

static size_t id_len(egm_id_t id)
{
    return (id.hi != 0 ? 9 : 0) + (id.lo != 0 ? 9 : 0);
}

static size_t replica_len(const egm_replica_desc_t *rep)
{
    size_t idl = id_len(rep->segment);
    return 1 + varint_len(idl) + idl + scalar_len(rep->offset) + scalar_len(rep->length);
}

static size_t key_result_len(const egm_keys_reply_msg_t *msg, const egm_key_result_t *res)
{
    size_t len =
        scalar_len(zigzag32(res->status)) + scalar_len(res->size) + scalar_len(res->lease_ttl_ms);
    for (uint32_t k = 0; k < res->n_replicas; k++) {
        size_t rl = replica_len(&msg->replicas[res->replica_first + k]);
        len += 1 + varint_len(rl) + rl;
    }
    return len;
}

static uint8_t *put_key_result(uint8_t *p, const egm_keys_reply_msg_t *msg,
                               const egm_key_result_t *res, size_t len)
{
    *p++ = TAG_KEYS_RESULTS;
    p = put_varint(p, len);
    p = put_scalar(p, TAG_RESULT_STATUS, zigzag32(res->status));
    p = put_scalar(p, TAG_RESULT_SIZE, res->size);
    for (uint32_t k = 0; k < res->n_replicas; k++) {
        const egm_replica_desc_t *rep = &msg->replicas[res->replica_first + k];
        *p++ = TAG_RESULT_REPLICA;
        p = put_varint(p, replica_len(rep));
        *p++ = TAG_REPLICA_SEGMENT;
        p = put_varint(p, id_len(rep->segment));
        p = put_fixed64(p, TAG_ID_HI, rep->segment.hi);
        p = put_fixed64(p, TAG_ID_LO, rep->segment.lo);
        p = put_scalar(p, TAG_REPLICA_OFFSET, rep->offset);
        p = put_scalar(p, TAG_REPLICA_LENGTH, rep->length);
    }
    /* protobuf-c writes fields in number order: lease_ttl_ms (4) after replicas (3). */
    return put_scalar(p, TAG_RESULT_LEASE, res->lease_ttl_ms);
}

egm_status_t egm__keys_reply_encode(const egm_keys_reply_msg_t *msg, uint8_t **buf_p, size_t *len_p)
{
    Egm__SegmentDesc *descs = NULL;
    Egm__Id *ids = NULL;
    size_t total = scalar_len(zigzag32(msg->status));
    egm_status_t status = EGM_OK;

    *buf_p = NULL;
    *len_p = 0;
    if (msg->n_segments > 0 && msg->packed_segments == NULL) {
        descs = egm_calloc(msg->n_segments, sizeof(*descs), "rpc.keys_reply_encode");
        ids = egm_calloc(2 * msg->n_segments, sizeof(*ids), "rpc.keys_reply_encode");
        if (descs == NULL || ids == NULL)
            goto err_nomem;
    }
    for (size_t i = 0; i < msg->n_results; i++) {
        size_t len = key_result_len(msg, &msg->results[i]);
        total += 1 + varint_len(len) + len;
    }
    for (size_t s = 0; s < msg->n_segments; s++) {
        size_t len;
        if (msg->packed_segments != NULL) {
            len = msg->packed_segments[s]->len;
        } else {
            egm__segment_desc_to_pb(msg->segments[s], &descs[s], &ids[2 * s], &ids[2 * s + 1]);
            len = egm__segment_desc__get_packed_size(&descs[s]);
        }
        total += 1 + varint_len(len) + len;
    }
    total += scalar_len(msg->location_cache_ms) + scalar_len(msg->wait_ms) +
             scalar_len(msg->slab_id) + scalar_len(msg->place_within_ms);
    size_t degraded_len = 0;
    for (size_t d = 0; d < msg->n_degraded_slabs; d++)
        degraded_len += varint_len(msg->degraded_slabs[d]);
    if (msg->n_degraded_slabs > 0) /* an empty repeated field is left out */
        total += 1 + varint_len(degraded_len) + degraded_len;
    size_t error_len = msg->error != NULL ? strlen(msg->error) : 0;
    if (error_len > 0)
        total += 1 + varint_len(error_len) + error_len;
    uint8_t *buf = egm_malloc(total ? total : 1, "rpc_pack"), *p = buf;
    if (buf == NULL)
        goto err_nomem;
    p = put_scalar(p, TAG_KEYS_STATUS, zigzag32(msg->status));
    for (size_t i = 0; i < msg->n_results; i++)
        p = put_key_result(p, msg, &msg->results[i], key_result_len(msg, &msg->results[i]));
    for (size_t s = 0; s < msg->n_segments; s++) {
        *p++ = TAG_KEYS_SEGMENTS;
        if (msg->packed_segments != NULL) {
            const egm_pb_slice_t *b = msg->packed_segments[s];
            p = put_varint(p, b->len);
            memcpy(p, b->data, b->len);
            p += b->len;
        } else {
            p = put_varint(p, egm__segment_desc__get_packed_size(&descs[s]));
            p += egm__segment_desc__pack(&descs[s], p);
        }
    }
    p = put_scalar(p, TAG_KEYS_CACHE, msg->location_cache_ms);
    p = put_scalar(p, TAG_KEYS_WAIT, msg->wait_ms);
    p = put_scalar(p, TAG_KEYS_SLAB, msg->slab_id);
    if (msg->n_degraded_slabs > 0) {
        *p++ = TAG_KEYS_DEGRADED;
        p = put_varint(p, degraded_len);
        for (size_t d = 0; d < msg->n_degraded_slabs; d++)
            p = put_varint(p, msg->degraded_slabs[d]);
    }
    if (error_len > 0) {
        *p++ = TAG_KEYS_ERROR;
        p = put_varint(p, error_len);
        memcpy(p, msg->error, error_len);
        p += error_len;
    }
    p = put_scalar(p, TAG_KEYS_PLACE, msg->place_within_ms);
    if ((size_t)(p - buf) != total) {
        egm_free(buf);
        status = egm__set_error(EGM_ERR_INTERNAL, "KeysReply: wrote %zu bytes, expected %zu",
                                (size_t)(p - buf), total);
        goto out;
    }
    *buf_p = buf;
    *len_p = total;
    goto out;

err_nomem:
    status = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory building a reply for %zu keys",
                            msg->n_results);
out:
    egm_free(descs);
    egm_free(ids);
    return status;
}

/* ---- decoding ------------------------------------------------------------ */

enum { WT_VARINT = 0, WT_64BIT = 1, WT_LEN = 2, WT_32BIT = 5 };

typedef struct {
    const uint8_t *p, *end;
} rd_t;

/* A varint of at most 10 bytes (bits past 64 dropped, as protobuf-c does). */
static int rd_varint(rd_t *r, uint64_t *v)
{
    size_t max = (size_t)(r->end - r->p) < 10 ? (size_t)(r->end - r->p) : 10;
    uint64_t x = 0;
    for (size_t i = 0; i < max; i++) {
        uint8_t b = r->p[i];
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if ((b & 0x80) == 0) {
            r->p += i + 1;
            *v = x;
            return 0;
        }
    }
    return -1;
}

/* A field key: at most 5 bytes, field number 0 refused (protobuf-c's rules). */
static int rd_tag(rd_t *r, uint32_t *field, unsigned *wt)
{
    if (r->p >= r->end)
        return -1;
    uint8_t b0 = r->p[0];
    if ((b0 & 0xf8) == 0)
        return -1;
    *wt = b0 & 7;
    if ((b0 & 0x80) == 0) {
        *field = b0 >> 3;
        r->p++;
        return 0;
    }
    uint32_t tag = (b0 & 0x7f) >> 3;
    unsigned shift = 4;
    size_t max = (size_t)(r->end - r->p) < 5 ? (size_t)(r->end - r->p) : 5;
    for (size_t i = 1; i < max; i++, shift += 7) {
        uint8_t b = r->p[i];
        tag |= (uint32_t)(b & 0x7f) << shift;
        if ((b & 0x80) == 0) {
            *field = tag;
            r->p += i + 1;
            return 0;
        }
    }
    return -1;
}

/* A length-delimited payload: prefix of at most 5 bytes, payload in bounds. */
static int rd_len(rd_t *r, rd_t *sub)
{
    size_t max = (size_t)(r->end - r->p) < 5 ? (size_t)(r->end - r->p) : 5;
    uint64_t val = 0;
    for (size_t i = 0; i < max; i++) {
        uint8_t b = r->p[i];
        val |= (uint64_t)(b & 0x7f) << (7 * i);
        if ((b & 0x80) == 0) {
            const uint8_t *start = r->p + i + 1;
            if (val > (uint64_t)(r->end - start))
                return -1;
            sub->p = start;
            sub->end = start + val;
            r->p = sub->end;
            return 0;
        }
    }
    return -1;
}

static int rd_fixed64(rd_t *r, uint64_t *v)
{
    if (r->end - r->p < 8)
        return -1;
    *v = egm__wire_get_u64(r->p);
    r->p += 8;
    return 0;
}

/* Skips an unknown field; groups and wire types 6/7 are refused as protobuf-c does. */
static int skip_field(rd_t *r, unsigned wt)
{
    uint64_t v;
    rd_t sub;
    switch (wt) {
    case WT_VARINT:
        return rd_varint(r, &v);
    case WT_64BIT:
        return rd_fixed64(r, &v);
    case WT_LEN:
        return rd_len(r, &sub);
    case WT_32BIT:
        if (r->end - r->p < 4)
            return -1;
        r->p += 4;
        return 0;
    default:
        return -1;
    }
}

static int32_t unzigzag32(uint64_t v)
{
    uint32_t u = (uint32_t)v;
    return (u & 1) ? (int32_t) ~(u >> 1) : (int32_t)(u >> 1);
}

static egm_status_t bad(const char *what)
{
    return egm__set_error(EGM_ERR_PROTOCOL, "malformed KeysReply: %s", what);
}

/* Id {fixed64 hi = 1; fixed64 lo = 2;} */
static egm_status_t parse_id(rd_t r, egm_id_t *id)
{
    *id = (egm_id_t){0, 0};
    while (r.p < r.end) {
        uint32_t field;
        unsigned wt;
        if (rd_tag(&r, &field, &wt) != 0)
            return bad("Id: bad field key");
        if (field == 1 || field == 2) {
            if (wt != WT_64BIT || rd_fixed64(&r, field == 1 ? &id->hi : &id->lo) != 0)
                return bad(field == 1 ? "Id.hi" : "Id.lo");
        } else if (skip_field(&r, wt) != 0) {
            return bad("Id: unknown field");
        }
    }
    return EGM_OK;
}

/* A second occurrence of an Id field replaces the first whole (what
 * protobuf-c 1.4 does for proto3 sub-messages; no merge). */
static egm_status_t parse_id_field(rd_t *r, unsigned wt, egm_id_t *id, const char *what)
{
    rd_t sub;
    if (wt != WT_LEN || rd_len(r, &sub) != 0)
        return bad(what);
    return parse_id(sub, id);
}

/* SegmentDesc: only checked here (protobuf-c decodes it later). */
static egm_status_t check_segment(rd_t r)
{
    while (r.p < r.end) {
        uint32_t field;
        unsigned wt;
        rd_t sub;
        uint64_t v;
        if (rd_tag(&r, &field, &wt) != 0)
            return bad("SegmentDesc: bad field key");
        switch (field) {
        case 1: /* id */
        case 4: /* owner */
            if (wt != WT_LEN || rd_len(&r, &sub) != 0)
                return bad("SegmentDesc id/owner");
            egm_status_t status = parse_id(sub, &(egm_id_t){0, 0});
            if (status != EGM_OK)
                return status;
            break;
        case 2:  /* name */
        case 5:  /* host_id */
        case 6:  /* tcp_endpoint */
        case 7:  /* shm_socket */
        case 9:  /* fabric_handle */
        case 10: /* zone */
            if (wt != WT_LEN || rd_len(&r, &sub) != 0)
                return bad("SegmentDesc string field");
            break;
        case 3: /* size */
        case 8: /* handle_kind */
            if (wt != WT_VARINT || rd_varint(&r, &v) != 0)
                return bad("SegmentDesc size/handle_kind");
            break;
        default:
            if (skip_field(&r, wt) != 0)
                return bad("SegmentDesc: unknown field");
        }
    }
    return EGM_OK;
}

/* Replica {Id segment = 1; uint64 offset = 2; uint64 length = 3;} */
static egm_status_t parse_replica(rd_t r, egm_replica_desc_t *rep)
{
    *rep = (egm_replica_desc_t){{0, 0}, 0, 0};
    while (r.p < r.end) {
        uint32_t field;
        unsigned wt;
        if (rd_tag(&r, &field, &wt) != 0)
            return bad("Replica: bad field key");
        if (field == 1) {
            egm_status_t status = parse_id_field(&r, wt, &rep->segment, "Replica.segment");
            if (status != EGM_OK)
                return status;
        } else if (field == 2 || field == 3) {
            if (wt != WT_VARINT || rd_varint(&r, field == 2 ? &rep->offset : &rep->length) != 0)
                return bad(field == 2 ? "Replica.offset" : "Replica.length");
        } else if (skip_field(&r, wt) != 0) {
            return bad("Replica: unknown field");
        }
    }
    return EGM_OK;
}

/* KeyResult {sint32 status = 1; uint64 size = 2; repeated Replica replicas = 3;
 * uint64 lease_ttl_ms = 4;}. replicas NULL: count only. */
static egm_status_t parse_result(rd_t r, egm_key_result_t *res, egm_replica_desc_t *replicas)
{
    uint64_t v;
    res->status = 0;
    res->n_replicas = 0;
    res->size = 0;
    res->lease_ttl_ms = 0;
    while (r.p < r.end) {
        uint32_t field;
        unsigned wt;
        rd_t sub;
        if (rd_tag(&r, &field, &wt) != 0)
            return bad("KeyResult: bad field key");
        switch (field) {
        case 1:
            if (wt != WT_VARINT || rd_varint(&r, &v) != 0)
                return bad("KeyResult.status");
            res->status = unzigzag32(v);
            break;
        case 2:
            if (wt != WT_VARINT || rd_varint(&r, &res->size) != 0)
                return bad("KeyResult.size");
            break;
        case 3: {
            egm_replica_desc_t rep;
            if (wt != WT_LEN || rd_len(&r, &sub) != 0)
                return bad("KeyResult.replicas");
            egm_status_t status = parse_replica(sub, &rep);
            if (status != EGM_OK)
                return status;
            if (res->n_replicas >= EGM_KEYS_REPLY_MAX_REPLICAS)
                return bad("too many replicas for a key");
            if (replicas != NULL)
                replicas[res->n_replicas] = rep;
            res->n_replicas++;
            break;
        }
        case 4:
            if (wt != WT_VARINT || rd_varint(&r, &res->lease_ttl_ms) != 0)
                return bad("KeyResult.lease_ttl_ms");
            break;
        default:
            if (skip_field(&r, wt) != 0)
                return bad("KeyResult: unknown field");
        }
    }
    return EGM_OK;
}

/* degraded_slabs (a repeated uint64): one value (varint) or a packed run of
 * them (length-delimited), appended at out[*n] (out NULL: counted only). A
 * packed run must end on a whole varint, as protobuf-c requires. */
static egm_status_t parse_u64s(rd_t *r, unsigned wt, uint64_t *out, size_t *n)
{
    uint64_t v;
    rd_t sub;
    if (wt == WT_VARINT) {
        if (rd_varint(r, &v) != 0)
            return bad("KeysReply.degraded_slabs");
        if (out != NULL)
            out[*n] = v;
        (*n)++;
        return EGM_OK;
    }
    if (wt != WT_LEN || rd_len(r, &sub) != 0)
        return bad("KeysReply.degraded_slabs");
    while (sub.p < sub.end) {
        if (rd_varint(&sub, &v) != 0)
            return bad("KeysReply.degraded_slabs: a packed value is cut off");
        if (out != NULL)
            out[*n] = v;
        (*n)++;
    }
    return EGM_OK;
}

/* KeysReply {sint32 status = 1; repeated KeyResult results = 2;
 * repeated SegmentDesc segments = 3; ...; repeated uint64 degraded_slabs = 7}.
 * out's arrays NULL: validate and count. */
static egm_status_t parse_reply(const uint8_t *buf, size_t len, size_t max_results,
                                egm_keys_reply_t *out)
{
    rd_t r = {buf, buf + len};
    int fill = out->results != NULL;
    size_t n_results = 0, n_replicas = 0, n_segments = 0, n_degraded = 0;
    uint64_t v;

    out->status = 0;
    out->location_cache_ms = 0;
    out->wait_ms = 0;
    out->slab_id = 0;
    out->place_within_ms = 0;
    out->error = (egm_pb_slice_t){0};
    while (r.p < r.end) {
        uint32_t field;
        unsigned wt;
        rd_t sub;
        if (rd_tag(&r, &field, &wt) != 0)
            return bad("bad field key");
        switch (field) {
        case 1:
            if (wt != WT_VARINT || rd_varint(&r, &v) != 0)
                return bad("KeysReply.status");
            out->status = unzigzag32(v);
            break;
        case 4:
            if (wt != WT_VARINT || rd_varint(&r, &v) != 0)
                return bad("KeysReply.location_cache_ms");
            out->location_cache_ms = v;
            break;
        case 5:
            if (wt != WT_VARINT || rd_varint(&r, &v) != 0)
                return bad("KeysReply.wait_ms");
            out->wait_ms = v;
            break;
        case 6:
            if (wt != WT_VARINT || rd_varint(&r, &v) != 0)
                return bad("KeysReply.slab_id");
            out->slab_id = v;
            break;
        case 9:
            if (wt != WT_VARINT || rd_varint(&r, &v) != 0)
                return bad("KeysReply.place_within_ms");
            out->place_within_ms = v;
            break;
        case 8:
            if (wt != WT_LEN || rd_len(&r, &sub) != 0)
                return bad("KeysReply.error");
            out->error = (egm_pb_slice_t){.data = sub.p, .len = (size_t)(sub.end - sub.p)};
            break;
        case 7: {
            egm_status_t status =
                parse_u64s(&r, wt, fill ? out->degraded_slabs : NULL, &n_degraded);
            if (status != EGM_OK)
                return status;
            break;
        }
        case 2: {
            egm_key_result_t tmp, *res = fill ? &out->results[n_results] : &tmp;
            if (wt != WT_LEN || rd_len(&r, &sub) != 0)
                return bad("KeysReply.results");
            if (n_results >= max_results)
                return egm__set_error(EGM_ERR_PROTOCOL,
                                      "malformed KeysReply: more than %zu results", max_results);
            egm_status_t status = parse_result(sub, res, fill ? out->replicas + n_replicas : NULL);
            if (status != EGM_OK)
                return status;
            res->replica_first = (uint32_t)n_replicas;
            n_replicas += res->n_replicas;
            n_results++;
            break;
        }
        case 3: {
            if (wt != WT_LEN || rd_len(&r, &sub) != 0)
                return bad("KeysReply.segments");
            if (n_segments >= EGM_KEYS_REPLY_MAX_SEGMENTS)
                return bad("too many segments");
            if (!fill) {
                egm_status_t status = check_segment(sub);
                if (status != EGM_OK)
                    return status;
            } else {
                out->segments[n_segments] =
                    (egm_pb_slice_t){.data = sub.p, .len = (size_t)(sub.end - sub.p)};
            }
            n_segments++;
            break;
        }
        default:
            if (skip_field(&r, wt) != 0)
                return bad("unknown field");
        }
    }
    if (n_replicas > UINT32_MAX)
        return bad("too many replicas");
    out->n_results = n_results;
    out->n_replicas = n_replicas;
    out->n_segments = n_segments;
    out->n_degraded_slabs = n_degraded;
    return EGM_OK;
}

egm_status_t egm__keys_reply_view(const uint8_t *buf, size_t len, size_t max_results,
                                  egm_keys_reply_t **reply_p)
{
    egm_keys_reply_t count = {0};
    egm_status_t status;

    *reply_p = NULL;
    if (buf == NULL && len > 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "KeysReply: no bytes");
    status = parse_reply(buf, len, max_results, &count);
    if (status != EGM_OK)
        return status;
    /* One block: header, results, replicas, degraded slabs, segments (each
     * count bounded by len). */
    size_t size = sizeof(egm_keys_reply_t) + count.n_results * sizeof(egm_key_result_t) +
                  count.n_replicas * sizeof(egm_replica_desc_t) +
                  count.n_degraded_slabs * sizeof(uint64_t) +
                  count.n_segments * sizeof(egm_pb_slice_t);
    egm_keys_reply_t *reply = egm_malloc(size, "rpc.keys_reply");
    if (reply == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "KeysReply: out of memory for %zu results",
                              count.n_results);
    memset(reply, 0, sizeof(*reply));
    unsigned char *p = (unsigned char *)(reply + 1);
    reply->results = (egm_key_result_t *)p;
    p += count.n_results * sizeof(egm_key_result_t);
    reply->replicas = (egm_replica_desc_t *)p;
    p += count.n_replicas * sizeof(egm_replica_desc_t);
    reply->degraded_slabs = (uint64_t *)p;
    p += count.n_degraded_slabs * sizeof(uint64_t);
    reply->segments = (egm_pb_slice_t *)p;
    status = parse_reply(buf, len, max_results, reply);
    if (status != EGM_OK) { /* cannot happen: same bytes as the first pass */
        egm_free(reply);
        return status;
    }
    reply->len = len;
    *reply_p = reply;
    return EGM_OK;
}

egm_status_t egm__keys_reply_decode(uint8_t *buf, size_t len, size_t max_results,
                                    egm_keys_reply_t **reply_p)
{
    egm_status_t status = egm__keys_reply_view(buf, len, max_results, reply_p);
    if (status != EGM_OK) {
        egm_free(buf);
        return status;
    }
    (*reply_p)->buf = buf;
    return EGM_OK;
}

void egm__keys_reply_free(egm_keys_reply_t *reply)
{
    if (reply == NULL)
        return;
    egm_free(reply->buf);
    egm_free(reply);
}
