/* RPC frame header codec. Bytes are packed one by one so that the wire format
 * is little-endian whatever the host and no struct layout ever reaches the wire. */
#include "rpc/frame.h"

#include "common/log.h"

static void put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

void egm__frame_encode_header(const egm_frame_header_t *h, uint8_t out[EGM_FRAME_HEADER_SIZE])
{
    put_u32(out + 0, EGM_RPC_MAGIC);
    out[4] = h->version;
    out[5] = h->flags;
    put_u16(out + 6, h->type);
    put_u64(out + 8, h->request_id);
    put_u32(out + 16, h->length);
    put_u32(out + 20, 0);
}

egm_status_t egm__frame_decode_header(const uint8_t in[EGM_FRAME_HEADER_SIZE], size_t max_payload,
                                      egm_frame_header_t *h_p)
{
    uint32_t magic = get_u32(in + 0);
    uint32_t reserved = get_u32(in + 20);

    /* Fill everything first: callers use the id to address an error reply. */
    h_p->version = in[4];
    h_p->flags = in[5];
    h_p->type = get_u16(in + 6);
    h_p->request_id = get_u64(in + 8);
    h_p->length = get_u32(in + 16);

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
