/* Incremental frame reader (frame_reader.h): a header, then its payload, then
 * the next header; everything lands in the frame through space/commit, and
 * feed adds the in-place hand-out of a payload that a feed holds whole. */
#include "rpc/frame_reader.h"

#include <string.h>

#include "common/alloc.h"
#include "common/log.h"

void egm__frame_reader_init(egm_frame_reader_t *r, size_t max_payload, const char *site)
{
    memset(r, 0, sizeof(*r));
    r->max_payload = max_payload;
    r->site = site;
}

void egm__frame_reader_reset(egm_frame_reader_t *r)
{
    egm_free(r->payload);
    r->payload = NULL;
    r->payload_got = 0;
    r->in_payload = 0;
    r->hdr_got = 0;
}

void egm__frame_reader_cleanup(egm_frame_reader_t *r)
{
    egm__frame_reader_reset(r);
}

int egm__frame_reader_mid_frame(const egm_frame_reader_t *r)
{
    return r->hdr_got > 0 || r->in_payload;
}

/* The header's bytes are all there: decode and check it. */
static egm_status_t header_done(egm_frame_reader_t *r, egm_frame_t *frame_p)
{
    egm_status_t status = egm__frame_decode_header(r->hdr_buf, r->max_payload, &r->hdr);

    r->hdr_got = 0;
    if (status == EGM_OK && r->check != NULL)
        status = r->check(r->check_arg, &r->hdr);
    frame_p->hdr = r->hdr;
    frame_p->payload = NULL;
    frame_p->buf = NULL;
    if (status != EGM_OK)
        return status;
    if (r->hdr.length == 0)
        return EGM_OK; /* complete without a payload */
    r->in_payload = 1;
    r->payload_got = 0;
    return EGM_INPROGRESS;
}

egm_status_t egm__frame_reader_space(egm_frame_reader_t *r, uint8_t **room_p, size_t *len_p)
{
    if (!r->in_payload) {
        *room_p = r->hdr_buf + r->hdr_got;
        *len_p = EGM_FRAME_HEADER_SIZE - r->hdr_got;
        return EGM_OK;
    }
    if (r->payload == NULL) {
        r->payload = egm_malloc(r->hdr.length, r->site);
        if (r->payload == NULL)
            return egm__set_error(EGM_ERR_NO_MEMORY, "cannot allocate a %u-byte payload",
                                  (unsigned)r->hdr.length);
    }
    *room_p = r->payload + r->payload_got;
    *len_p = r->hdr.length - r->payload_got;
    return EGM_OK;
}

egm_status_t egm__frame_reader_commit(egm_frame_reader_t *r, size_t n, egm_frame_t *frame_p)
{
    if (!r->in_payload) {
        r->hdr_got += n;
        return r->hdr_got < EGM_FRAME_HEADER_SIZE ? EGM_INPROGRESS : header_done(r, frame_p);
    }
    r->payload_got += n;
    if (r->payload_got < r->hdr.length)
        return EGM_INPROGRESS;
    frame_p->hdr = r->hdr;
    frame_p->payload = r->payload;
    frame_p->buf = r->payload;
    r->payload = NULL;
    r->in_payload = 0;
    return EGM_OK;
}

egm_status_t egm__frame_reader_feed(egm_frame_reader_t *r, const uint8_t *data, size_t n,
                                    size_t *used_p, egm_frame_t *frame_p)
{
    egm_status_t status = EGM_INPROGRESS;
    size_t used = 0;

    while (used < n) {
        size_t left = n - used;
        if (r->in_payload && r->payload == NULL && left >= r->hdr.length) {
            /* the whole payload is in this feed: handed out in place */
            frame_p->hdr = r->hdr;
            frame_p->payload = data + used;
            frame_p->buf = NULL;
            used += r->hdr.length;
            r->in_payload = 0;
            status = EGM_OK;
            break;
        }
        uint8_t *room = NULL;
        size_t want = 0;
        if ((status = egm__frame_reader_space(r, &room, &want)) != EGM_OK)
            break;
        size_t take = want < left ? want : left;
        memcpy(room, data + used, take);
        used += take;
        if ((status = egm__frame_reader_commit(r, take, frame_p)) != EGM_INPROGRESS)
            break;
    }
    *used_p = used;
    return status;
}
