/* Segment descriptors: their rules, and validating conversion to and from the
 * wire form. A descriptor arrives from the master (or a hostile peer posing as
 * one), so every field is checked before anything uses it. */
#include "rpc/segment_desc.h"

#include <stdatomic.h>
#include <string.h>

#include "common/log.h"
#include "rpc/proto_util.h"

/* The wire's handle kinds are ours (desc.handle_kind is taken from the wire as is). */
_Static_assert((int)EGM__HANDLE_KIND__HANDLE_NONE == (int)EGM_HANDLE_NONE &&
                   (int)EGM__HANDLE_KIND__HANDLE_MEMFD == (int)EGM_HANDLE_MEMFD &&
                   (int)EGM__HANDLE_KIND__HANDLE_POSIX_FD == (int)EGM_HANDLE_POSIX_FD &&
                   (int)EGM__HANDLE_KIND__HANDLE_FABRIC == (int)EGM_HANDLE_FABRIC,
               "proto/egmstore.proto's HandleKind and egm_handle_kind_t disagree");

egm_status_t egm__segment_check_string(const char *field, const char *s, size_t cap)
{
    if (s == NULL)
        return EGM_OK;
    size_t len = strnlen(s, cap);
    if (len >= cap)
        return egm__set_error(EGM_ERR_INVALID_ARG, "segment.%s: longer than %zu bytes", field,
                              cap - 1);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x20 || c == 0x7f)
            return egm__set_error(EGM_ERR_INVALID_ARG, "segment.%s: control character at byte %zu",
                                  field, i);
    }
    return EGM_OK;
}

egm_status_t egm__segment_check_shm_socket(const char *s)
{
    egm_status_t st = egm__segment_check_string("shm_socket", s, EGM_SHM_SOCKET_MAX);
    if (st != EGM_OK || s == NULL)
        return st;
    /* The fd broker listens in the abstract namespace ("@name") or at a path. */
    if (s[0] != '\0' && s[0] != '@' && s[0] != '/')
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "segment.shm_socket: must start with '@' (abstract) or '/'");
    if (s[0] == '@' && s[1] == '\0')
        return egm__set_error(EGM_ERR_INVALID_ARG, "segment.shm_socket: empty abstract name");
    return EGM_OK;
}

egm_status_t egm__segment_check_handle(int handle_kind, const void *fabric_handle,
                                       size_t fabric_handle_len)
{
    if (handle_kind < EGM_HANDLE_NONE || handle_kind > EGM_HANDLE_FABRIC)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "segment.handle_kind: unknown value %d (accepted: %d..%d)",
                              handle_kind, EGM_HANDLE_NONE, EGM_HANDLE_FABRIC);
    /* Only a fabric segment carries a handle, and only a whole one: the
     * consumer passes these bytes straight to the driver. */
    if (handle_kind == EGM_HANDLE_FABRIC) {
        if (fabric_handle_len != EGM_FABRIC_HANDLE_MAX || fabric_handle == NULL)
            return egm__set_error(EGM_ERR_INVALID_ARG,
                                  "segment.fabric_handle: %zu bytes, expected %d for "
                                  "HANDLE_FABRIC",
                                  fabric_handle_len, EGM_FABRIC_HANDLE_MAX);
    } else if (fabric_handle_len != 0) {
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "segment.fabric_handle: %zu bytes given for handle kind %d "
                              "(only HANDLE_FABRIC carries one)",
                              fabric_handle_len, handle_kind);
    }
    return EGM_OK;
}

/* Copy a checked wire string into fixed storage; NULL counts as "". */
static egm_status_t copy_field(const char *field, const char *src, char *dst, size_t cap)
{
    egm_status_t st = egm__segment_check_string(field, src, cap);
    if (st != EGM_OK)
        return st;
    if (src == NULL)
        src = "";
    memcpy(dst, src, strlen(src) + 1);
    return EGM_OK;
}

egm_status_t egm__segment_desc_from_pb(const Egm__SegmentDesc *pb, egm_segment_desc_t *desc_p)
{
    egm_segment_desc_t desc;
    egm_status_t st;

    if (pb == NULL || desc_p == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "segment: missing descriptor");
    memset(&desc, 0, sizeof(desc));

    desc.id = egm__id_from_pb(pb->id);
    if (egm__id_is_nil(desc.id))
        return egm__set_error(EGM_ERR_INVALID_ARG, "segment.id: nil");
    desc.owner = egm__id_from_pb(pb->owner);
    if (pb->size == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "segment.size: 0");
    desc.size = pb->size;

    if ((st = copy_field("name", pb->name, desc.name, sizeof(desc.name))) != EGM_OK)
        return st;
    if ((st = copy_field("host_id", pb->host_id, desc.host_id, sizeof(desc.host_id))) != EGM_OK)
        return st;
    if ((st = copy_field("zone", pb->zone, desc.zone, sizeof(desc.zone))) != EGM_OK)
        return st;
    st = copy_field("tcp_endpoint", pb->tcp_endpoint, desc.tcp_endpoint, sizeof(desc.tcp_endpoint));
    if (st != EGM_OK)
        return st;
    if ((st = egm__segment_check_shm_socket(pb->shm_socket)) != EGM_OK)
        return st;
    copy_field("shm_socket", pb->shm_socket, desc.shm_socket, sizeof(desc.shm_socket));
    st = egm__segment_check_handle((int)pb->handle_kind, pb->fabric_handle.data,
                                   pb->fabric_handle.len);
    if (st != EGM_OK)
        return st;
    desc.handle_kind = (egm_handle_kind_t)pb->handle_kind;
    if (desc.handle_kind == EGM_HANDLE_FABRIC) {
        memcpy(desc.fabric_handle, pb->fabric_handle.data, EGM_FABRIC_HANDLE_MAX);
        desc.fabric_handle_len = EGM_FABRIC_HANDLE_MAX;
    }

    *desc_p = desc;
    return EGM_OK;
}

void egm__segment_desc_to_pb(const egm_segment_desc_t *desc, Egm__SegmentDesc *pb,
                             Egm__Id *id_storage, Egm__Id *owner_storage)
{
    egm__segment_desc__init(pb);
    egm__id_to_pb(desc->id, id_storage);
    egm__id_to_pb(desc->owner, owner_storage);
    pb->id = id_storage;
    pb->owner = owner_storage;
    pb->size = desc->size;
    /* protobuf-c wants char *, but pack only reads these strings. */
    pb->name = (char *)desc->name;
    pb->host_id = (char *)desc->host_id;
    pb->zone = (char *)desc->zone;
    pb->tcp_endpoint = (char *)desc->tcp_endpoint;
    pb->shm_socket = (char *)desc->shm_socket;
    pb->handle_kind = (Egm__HandleKind)desc->handle_kind;
    if (desc->handle_kind == EGM_HANDLE_FABRIC && desc->fabric_handle_len > 0) {
        size_t len = desc->fabric_handle_len;
        pb->fabric_handle.len = len < EGM_FABRIC_HANDLE_MAX ? len : EGM_FABRIC_HANDLE_MAX;
        pb->fabric_handle.data = (uint8_t *)desc->fabric_handle;
    }
}

/* ---- the decoded-descriptor cache ----------------------------------------- */

/* Direct-mapped by a hash of the bytes; a slot holds one descriptor's bytes
 * (up to DESC_CACHE_BYTES: every descriptor within the limits of this file
 * packs to less) and what they decode to, under a flag held for one compare and
 * one copy. A caller that finds the flag taken never waits for it: it decodes
 * the bytes itself (and stores nothing). Waiting was measured costly: 8 threads
 * of one client on 2 cores, reading the same provider's descriptor, spent 5-8%
 * of the process's time spinning on a slot whose holder had been preempted.
 * Static, so the cache allocates nothing (and leaves no block for the
 * allocation checks of tests to count); pages are touched only as slots fill. */
#define DESC_CACHE_SLOTS 512
#define DESC_CACHE_BYTES 800

typedef struct {
    atomic_int busy; /* 1 while a caller reads or fills the slot; static zero = free */
    uint32_t len;    /* 0: empty */
    uint8_t bytes[DESC_CACHE_BYTES];
    egm_segment_desc_t desc;
} desc_slot_t;

static desc_slot_t desc_cache[DESC_CACHE_SLOTS];

static uint64_t bytes_hash(const uint8_t *p, size_t len)
{
    uint64_t h = 0x243f6a8885a308d3ull ^ len, v;
    for (; len >= 8; p += 8, len -= 8) {
        memcpy(&v, p, 8);
        h = (h ^ v) * 0x9e3779b97f4a7c15ull;
        h ^= h >> 29;
    }
    v = 0;
    memcpy(&v, p, len);
    h = (h ^ v) * 0x9e3779b97f4a7c15ull;
    return h ^ (h >> 32);
}

/* 1 when this caller took the slot; 0 when another holds it. */
static int slot_try(desc_slot_t *s)
{
    return atomic_load_explicit(&s->busy, memory_order_relaxed) == 0 &&
           atomic_exchange_explicit(&s->busy, 1, memory_order_acquire) == 0;
}

static void slot_release(desc_slot_t *s)
{
    atomic_store_explicit(&s->busy, 0, memory_order_release);
}

egm_status_t egm__segment_desc_decode(const uint8_t *data, size_t len, egm_segment_desc_t *desc_p)
{
    desc_slot_t *slot = NULL;
    Egm__SegmentDesc *pb = NULL;

    if (len > 0 && len <= DESC_CACHE_BYTES) {
        slot = &desc_cache[bytes_hash(data, len) & (DESC_CACHE_SLOTS - 1)];
        if (slot_try(slot)) {
            int hit = slot->len == len && memcmp(slot->bytes, data, len) == 0;
            if (hit)
                *desc_p = slot->desc;
            slot_release(slot);
            if (hit)
                return EGM_OK;
        }
    }
    egm_status_t status =
        egm__pb_unpack(&egm__segment_desc__descriptor, data, len, (ProtobufCMessage **)&pb);
    if (status == EGM_OK)
        status = egm__segment_desc_from_pb(pb, desc_p);
    egm__pb_free(pb != NULL ? &pb->base : NULL);
    if (status == EGM_OK && slot != NULL && slot_try(slot)) {
        slot->len = (uint32_t)len;
        memcpy(slot->bytes, data, len);
        slot->desc = *desc_p;
        slot_release(slot);
    }
    return status;
}

const egm_segment_desc_t *egm__segment_desc_find(const egm_segment_desc_t *descs, size_t n,
                                                 egm_id_t id)
{
    for (size_t i = 0; i < n; i++)
        if (egm__id_equal(descs[i].id, id))
            return &descs[i];
    return NULL;
}
