/* The tcp data server's request and reply headers (docs/protocol.md), on the
 * wire codec of common/wire.h. */
#include "te/te_int.h"

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
