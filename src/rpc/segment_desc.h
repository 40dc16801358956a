/* Segment descriptors: what a consumer needs to reach a segment. The one
 * definition the master (which hands them out) and the transfer engine (which
 * reaches segments through them) share, with the rules a descriptor obeys. */
#ifndef EGM_RPC_SEGMENT_DESC_H
#define EGM_RPC_SEGMENT_DESC_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "common/id.h"
#include "egmstore.pb-c.h"

typedef enum {
    EGM_HANDLE_NONE = 0,
    EGM_HANDLE_MEMFD = 1,
    EGM_HANDLE_POSIX_FD = 2,
    EGM_HANDLE_FABRIC = 3,
} egm_handle_kind_t;

#define EGM_SEGMENT_NAME_MAX 128
#define EGM_HOST_ID_MAX 160
#define EGM_ZONE_MAX 64
#define EGM_ENDPOINT_MAX 128
#define EGM_SHM_SOCKET_MAX 100   /* fits sun_path with the abstract-namespace NUL */
#define EGM_FABRIC_HANDLE_MAX 64 /* CUmemFabricHandle */

typedef struct {
    egm_id_t id;
    char name[EGM_SEGMENT_NAME_MAX];
    uint64_t size;
    egm_id_t owner;
    char host_id[EGM_HOST_ID_MAX];
    char zone[EGM_ZONE_MAX];             /* failure domain above the host; "" = none */
    char tcp_endpoint[EGM_ENDPOINT_MAX]; /* "" = no tcp */
    char shm_socket[EGM_SHM_SOCKET_MAX]; /* "" = no shm */
    egm_handle_kind_t handle_kind;
    /* HANDLE_FABRIC: the provider's CUmemFabricHandle (len 64); else len 0. */
    unsigned char fabric_handle[EGM_FABRIC_HANDLE_MAX];
    uint8_t fabric_handle_len;
} egm_segment_desc_t;

/* The rules every descriptor field obeys, shared by the clients' decoding
 * (egm__segment_desc_from_pb) and the master's check of a MountSegment, so
 * that every descriptor the master hands out decodes at the clients. Each is
 * EGM_ERR_INVALID_ARG naming "segment.<field>" when broken. */
/* A string: NULL counts as ""; fits cap bytes with its NUL; no control bytes
 * (these strings end up in logs, socket names and host names). */
egm_status_t egm__segment_check_string(const char *field, const char *s, size_t cap);
/* shm_socket (NULL = ""): empty, "@name" (abstract namespace) or a path. */
egm_status_t egm__segment_check_shm_socket(const char *s);
/* handle_kind is one of egm_handle_kind_t; a whole fabric handle (data non-NULL,
 * EGM_FABRIC_HANDLE_MAX bytes) for EGM_HANDLE_FABRIC, none for another kind. */
egm_status_t egm__segment_check_handle(int handle_kind, const void *fabric_handle,
                                       size_t fabric_handle_len);

/* Validating conversion from the wire: nil id, zero size, over-long strings,
 * unknown handle kinds and a fabric handle that is not exactly 64 bytes for
 * HANDLE_FABRIC (or present for another kind) are EGM_ERR_INVALID_ARG naming
 * the field. */
egm_status_t egm__segment_desc_from_pb(const Egm__SegmentDesc *pb, egm_segment_desc_t *desc_p);
/* A SegmentDesc's wire bytes (one of a KeysReply's segments) decoded and
 * validated into *desc_p: egm__pb_unpack, then egm__segment_desc_from_pb, with
 * its errors. Replies repeat the same few descriptors call after call, so the
 * descriptors decoded are remembered in a process-wide cache of fixed size
 * (no allocation), keyed by the bytes themselves: the same bytes always
 * decode to the same descriptor, and a segment mounted again under a new id,
 * or whose descriptor changed, has other bytes and is decoded afresh. Any
 * thread. */
egm_status_t egm__segment_desc_decode(const uint8_t *data, size_t len, egm_segment_desc_t *desc_p);
/* The descriptor of segment id among descs[0..n) (a reply's decoded
 * segments), or NULL. */
const egm_segment_desc_t *egm__segment_desc_find(const egm_segment_desc_t *descs, size_t n,
                                                 egm_id_t id);
/* Fills pb and id storage from desc; strings and the fabric handle point into
 * desc (no allocation). */
void egm__segment_desc_to_pb(const egm_segment_desc_t *desc, Egm__SegmentDesc *pb,
                             Egm__Id *id_storage, Egm__Id *owner_storage);

#endif
