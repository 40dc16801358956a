/* Fixed little-endian encoding of the data-path headers (tcp server, fd broker):
 * byte by byte, so the format does not depend on the host's byte order. */
#include "te/te_int.h"

void egm__wire_put_u16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

void egm__wire_put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

void egm__wire_put_u64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

uint16_t egm__wire_get_u16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

uint32_t egm__wire_get_u32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

uint64_t egm__wire_get_u64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

void egm__wire_put_id(uint8_t *p, egm_id_t id)
{
    egm__wire_put_u64(p, id.hi);
    egm__wire_put_u64(p + 8, id.lo);
}

egm_id_t egm__wire_get_id(const uint8_t *p)
{
    egm_id_t id = {.hi = egm__wire_get_u64(p), .lo = egm__wire_get_u64(p + 8)};
    return id;
}

void egm__tcp_req_encode(const egm_tcp_req_t *req, uint8_t out[EGM_TCP_REQ_SIZE])
{
    egm__wire_put_u32(out, req->magic);
    egm__wire_put_u16(out + 4, req->version);
    egm__wire_put_u16(out + 6, req->op);
    egm__wire_put_u64(out + 8, req->request_id);
    egm__wire_put_id(out + 16, req->segment);
    egm__wire_put_u64(out + 32, req->offset);
    egm__wire_put_u64(out + 40, req->length);
}

void egm__tcp_req_decode(const uint8_t in[EGM_TCP_REQ_SIZE], egm_tcp_req_t *req)
{
    req->magic = egm__wire_get_u32(in);
    req->version = egm__wire_get_u16(in + 4);
    req->op = egm__wire_get_u16(in + 6);
    req->request_id = egm__wire_get_u64(in + 8);
    req->segment = egm__wire_get_id(in + 16);
    req->offset = egm__wire_get_u64(in + 32);
    req->length = egm__wire_get_u64(in + 40);
}

void egm__tcp_reply_encode(const egm_tcp_reply_t *reply, uint8_t out[EGM_TCP_REPLY_SIZE])
{
    egm__wire_put_u32(out, reply->magic);
    egm__wire_put_u32(out + 4, (uint32_t)reply->status);
    egm__wire_put_u64(out + 8, reply->request_id);
    egm__wire_put_u64(out + 16, reply->length);
}

void egm__tcp_reply_decode(const uint8_t in[EGM_TCP_REPLY_SIZE], egm_tcp_reply_t *reply)
{
    reply->magic = egm__wire_get_u32(in);
    reply->status = (int32_t)egm__wire_get_u32(in + 4);
    reply->request_id = egm__wire_get_u64(in + 8);
    reply->length = egm__wire_get_u64(in + 16);
}
