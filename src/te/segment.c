/* Segment descriptors: validating conversion to and from the wire form. A
 * descriptor arrives from the master (or a hostile peer posing as one), so every
 * field is checked before anything uses it. */
#include "te/segment.h"

#include <string.h>

#include "common/log.h"
#include "rpc/proto_util.h"

/* Copy a wire string into fixed storage; NULL counts as "". Control bytes are
 * refused because these strings end up in logs, socket names and host names. */
static egm_status_t copy_field(const char *field, const char *src, char *dst, size_t cap)
{
    if (src == NULL)
        src = "";
    size_t len = strnlen(src, cap);
    if (len >= cap)
        return egm__set_error(EGM_ERR_INVALID_ARG, "segment.%s: longer than %zu bytes", field,
                              cap - 1);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)src[i];
        if (c < 0x20 || c == 0x7f)
            return egm__set_error(EGM_ERR_INVALID_ARG, "segment.%s: control character at byte %zu",
                                  field, i);
    }
    memcpy(dst, src, len + 1);
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
    st = copy_field("tcp_endpoint", pb->tcp_endpoint, desc.tcp_endpoint, sizeof(desc.tcp_endpoint));
    if (st != EGM_OK)
        return st;
    st = copy_field("shm_socket", pb->shm_socket, desc.shm_socket, sizeof(desc.shm_socket));
    if (st != EGM_OK)
        return st;
    /* The fd broker listens in the abstract namespace ("@name") or at a path. */
    if (desc.shm_socket[0] != '\0' && desc.shm_socket[0] != '@' && desc.shm_socket[0] != '/')
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "segment.shm_socket: must start with '@' (abstract) or '/'");
    if (desc.shm_socket[0] == '@' && desc.shm_socket[1] == '\0')
        return egm__set_error(EGM_ERR_INVALID_ARG, "segment.shm_socket: empty abstract name");

    switch ((int)pb->handle_kind) {
    case EGM__HANDLE_KIND__HANDLE_NONE:
        desc.handle_kind = EGM_HANDLE_NONE;
        break;
    case EGM__HANDLE_KIND__HANDLE_MEMFD:
        desc.handle_kind = EGM_HANDLE_MEMFD;
        break;
    case EGM__HANDLE_KIND__HANDLE_POSIX_FD:
        desc.handle_kind = EGM_HANDLE_POSIX_FD;
        break;
    case EGM__HANDLE_KIND__HANDLE_FABRIC:
        desc.handle_kind = EGM_HANDLE_FABRIC;
        break;
    default:
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "segment.handle_kind: unknown value %d (accepted: 0..3)",
                              (int)pb->handle_kind);
    }

    /* Only a fabric segment carries a handle, and only a whole one: the
     * consumer passes these bytes straight to the driver. */
    if (desc.handle_kind == EGM_HANDLE_FABRIC) {
        if (pb->fabric_handle.len != EGM_FABRIC_HANDLE_MAX || pb->fabric_handle.data == NULL)
            return egm__set_error(EGM_ERR_INVALID_ARG,
                                  "segment.fabric_handle: %zu bytes, expected %d for "
                                  "HANDLE_FABRIC",
                                  pb->fabric_handle.len, EGM_FABRIC_HANDLE_MAX);
        memcpy(desc.fabric_handle, pb->fabric_handle.data, EGM_FABRIC_HANDLE_MAX);
        desc.fabric_handle_len = EGM_FABRIC_HANDLE_MAX;
    } else if (pb->fabric_handle.len != 0) {
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "segment.fabric_handle: %zu bytes given for handle kind %d "
                              "(only HANDLE_FABRIC carries one)",
                              pb->fabric_handle.len, (int)pb->handle_kind);
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
    pb->tcp_endpoint = (char *)desc->tcp_endpoint;
    pb->shm_socket = (char *)desc->shm_socket;
    pb->handle_kind = (Egm__HandleKind)desc->handle_kind;
    if (desc->handle_kind == EGM_HANDLE_FABRIC && desc->fabric_handle_len > 0) {
        size_t len = desc->fabric_handle_len;
        pb->fabric_handle.len = len < EGM_FABRIC_HANDLE_MAX ? len : EGM_FABRIC_HANDLE_MAX;
        pb->fabric_handle.data = (uint8_t *)desc->fabric_handle;
    }
}
