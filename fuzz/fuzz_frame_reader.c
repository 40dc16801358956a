/* Fuzz target: the incremental frame reader (src/rpc/frame_reader.c), as the
 * master's server and the client run it on the bytes of a connection.
 *
 * Input: a 5-byte prologue, then the stream.
 *   0  u8  seed of the cuts between reads
 *   1  u8  bits 0-1: cut sizes (0 whole stream, 1 one byte, 2 1..64, 3 1..4096);
 *          bit 2: some reads go through space/commit instead of feed;
 *          bit 3: a header check refuses the type whose low byte is byte 4
 *   2  u16 payload limit (LE)
 *   4  u8  type refused by the check
 * Checks, against a reading of the whole stream at once with
 * egm__frame_decode_header: the same frames (header and payload bytes) in the
 * same order whatever the cuts, an in-place payload inside the bytes fed, the
 * first refused header with its status at its offset and nothing after it, a
 * partial frame at the end exactly when bytes are left over, no byte taken
 * past a frame, and every payload buffer freed. */
#include "fuzz.h"
#include "common/alloc.h"
#include "rpc/frame_reader.h"

#define SITE "fuzz_frame_reader"

typedef struct {
    int refuse;
    uint16_t refused_type;
} check_cfg_t;

static egm_status_t check(void *arg, const egm_frame_header_t *h)
{
    const check_cfg_t *cfg = arg;
    if (cfg->refuse && (h->type & 0xff) == cfg->refused_type)
        return egm__set_error(EGM_ERR_PERMISSION, "type %u refused", (unsigned)h->type);
    return EGM_OK;
}

static uint32_t rng;
static size_t next_cut(unsigned mode)
{
    rng = rng * 1103515245u + 12345u;
    uint32_t r = rng >> 8;
    switch (mode) {
    case 0:
        return SIZE_MAX;
    case 1:
        return 1;
    case 2:
        return 1 + r % 64;
    default:
        return 1 + r % 4096;
    }
}

/* The reference: the next event of the stream read at once from `off`.
 * Returns 1 with a frame (*h_p, payload at off + 24), 0 at the end (or a
 * partial frame), -1 with a refused header (*st_p). */
static int reference_next(const uint8_t *s, size_t len, size_t off, size_t max,
                          const check_cfg_t *cfg, egm_frame_header_t *h_p, egm_status_t *st_p)
{
    if (len - off < EGM_FRAME_HEADER_SIZE)
        return 0;
    egm_status_t st = egm__frame_decode_header(s + off, max, h_p);
    if (st == EGM_OK)
        st = check((void *)cfg, h_p);
    if (st != EGM_OK) {
        *st_p = st;
        return -1;
    }
    if (len - off - EGM_FRAME_HEADER_SIZE < h_p->length)
        return 0;
    return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init_logs();
    if (size < 5)
        return 0;
    rng = data[0];
    unsigned cuts = data[1] & 3;
    int use_space = (data[1] >> 2) & 1;
    check_cfg_t cfg = {.refuse = (data[1] >> 3) & 1, .refused_type = data[4]};
    size_t max = (size_t)data[2] | (size_t)data[3] << 8;
    const uint8_t *s = data + 5;
    size_t len = size - 5;

    egm_frame_reader_t r;
    egm__frame_reader_init(&r, max, SITE);
    r.check = check;
    r.check_arg = &cfg;

    size_t off = 0;     /* bytes given to the reader */
    size_t ref_off = 0; /* start of the next frame in the reference */
    int refused = 0;
    while (off < len && !refused) {
        size_t chunk = next_cut(cuts);
        if (chunk > len - off)
            chunk = len - off;
        const uint8_t *p = s + off;
        size_t left = chunk;
        while (left > 0 && !refused) {
            egm_frame_t f;
            egm_status_t st;
            size_t used;
            if (use_space && (rng & 0x100)) {
                uint8_t *room;
                size_t want;
                FUZZ_CHECK(egm__frame_reader_space(&r, &room, &want) == EGM_OK);
                FUZZ_CHECK(want > 0);
                used = want < left ? want : left;
                memcpy(room, p, used);
                st = egm__frame_reader_commit(&r, used, &f);
            } else {
                st = egm__frame_reader_feed(&r, p, left, &used, &f);
            }
            FUZZ_CHECK(used <= left);
            p += used;
            left -= used;
            off += used;
            if (st == EGM_INPROGRESS) {
                FUZZ_CHECK(egm__frame_reader_mid_frame(&r));
                continue;
            }
            egm_frame_header_t h;
            egm_status_t ref_st = EGM_OK;
            int ev = reference_next(s, len, ref_off, max, &cfg, &h, &ref_st);
            if (st != EGM_OK) {
                /* refused exactly where the reference refuses, after its header */
                FUZZ_CHECK(ev == -1 && st == ref_st);
                FUZZ_CHECK(off == ref_off + EGM_FRAME_HEADER_SIZE);
                FUZZ_CHECK(memcmp(r.hdr_buf, s + ref_off, EGM_FRAME_HEADER_SIZE) == 0);
                FUZZ_CHECK(f.hdr.request_id == h.request_id && f.hdr.length == h.length);
                refused = 1;
                break;
            }
            FUZZ_CHECK(ev == 1);
            FUZZ_CHECK(f.hdr.type == h.type && f.hdr.flags == h.flags &&
                       f.hdr.request_id == h.request_id && f.hdr.length == h.length);
            ref_off += EGM_FRAME_HEADER_SIZE + h.length;
            FUZZ_CHECK(off == ref_off); /* nothing taken past the frame */
            if (h.length == 0) {
                FUZZ_CHECK(f.payload == NULL && f.buf == NULL);
            } else {
                FUZZ_CHECK(memcmp(f.payload, s + ref_off - h.length, h.length) == 0);
                if (f.buf == NULL)
                    FUZZ_CHECK(f.payload == p - h.length); /* in place, in this feed */
                else
                    FUZZ_CHECK(f.payload == f.buf);
            }
            egm_free(f.buf);
            FUZZ_CHECK(!egm__frame_reader_mid_frame(&r));
        }
    }
    if (!refused) {
        egm_frame_header_t h;
        egm_status_t ref_st;
        FUZZ_CHECK(reference_next(s, len, ref_off, max, &cfg, &h, &ref_st) == 0);
        FUZZ_CHECK(egm__frame_reader_mid_frame(&r) == (ref_off < len));
    }
    egm__frame_reader_cleanup(&r);
    FUZZ_CHECK(egm__alloc_live_count_site(SITE) == 0);
    return 0;
}
