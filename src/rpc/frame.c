/* RPC frame header codec, on the wire codec of common/wire.h. */
#include "rpc/frame.h"

#include "common/log.h"
#include "common/wire.h"

void egm__frame_encode_header(const egm_frame_header_t *h, uint8_t out[EGM_FRAME_HEADER_SIZE])
{
    egm__wire_put_u32(out + 0, EGM_RPC_MAGIC);
    out[4] = h->version;
    out[5] = h->flags;
    egm__wire_put_u16(out + 6, h->type);
    egm__wire_put_u64(out + 8, h->request_id);
    egm__wire_put_u32(out + 16, h->length);
    egm__wire_put_u32(out + 20, 0);
}

egm_status_t egm__frame_decode_header(const uint8_t in[EGM_FRAME_HEADER_SIZE], size_t max_payload,
                                      egm_frame_header_t *h_p)
{
    uint32_t magic = egm__wire_get_u32(in + 0);
    uint32_t reserved = egm__wire_get_u32(in + 20);

    /* Fill everything first: callers use the id to address an error reply. */
    h_p->version = in[4];
    h_p->flags = in[5];
    h_p->type = egm__wire_get_u16(in + 6);
    h_p->request_id = egm__wire_get_u64(in + 8);
    h_p->length = egm__wire_get_u32(in + 16);

    if (magic != EGM_RPC_MAGIC)
        return egm__set_error(EGM_ERR_PROTOCOL, "frame: bad magic 0x%08x (expected 0x%08x)", magic,
                              EGM_RPC_MAGIC);
    if (h_p->version != EGM_RPC_VERSION)
        return egm__set_error(EGM_ERR_VERSION, "frame: version %u not supported (expected %u)",
                              (unsigned)h_p->version, (unsigned)EGM_RPC_VERSION);
    if (reserved != 0)
        return egm__set_error(EGM_ERR_PROTOCOL, "frame: reserved field is 0x%08x, must be 0",
                              reserved);
    if ((size_t)h_p->length > max_payload)
        return egm__set_error(EGM_ERR_PROTOCOL, "frame: length %u too large (max_frame_size %zu)",
                              (unsigned)h_p->length, max_payload);
    return EGM_OK;
}
