/* The incremental frame reader (rpc/frame_reader.h): a stream of frames comes
 * out the same whatever the cuts between feeds (whole, byte by byte, random
 * chunks, straight into the reader through space/commit); a feed stops after
 * each frame it completes and says how much it took; a payload held whole by
 * one feed is handed out in place, one that spans feeds in a buffer the
 * caller then owns; an empty payload is a frame at once; a refused header
 * (bad magic, too long for the limit of the moment, refused by the check) is
 * an error with the fields it could read and its raw bytes kept, and the
 * reader goes on with the next header; reset drops a partial frame; nothing
 * leaks. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "common/log.h"
#include "rpc/frame_reader.h"

#define SITE "test_frame_reader"
#define NFRAMES 6

static const uint32_t lengths[NFRAMES] = {0, 1, 23, 24, 1000, 70000};

/* NFRAMES frames back to back: frame i has type 100 + i, id 1000 + i, and a
 * payload of lengths[i] bytes (i * 7 + k) & 0xff. */
static uint8_t *make_stream(size_t *len_p)
{
    size_t len = 0;
    for (int i = 0; i < NFRAMES; i++)
        len += EGM_FRAME_HEADER_SIZE + lengths[i];
    uint8_t *s = egm_malloc(len, "test_stream");
    assert_non_null(s);
    size_t off = 0;
    for (int i = 0; i < NFRAMES; i++) {
        egm_frame_header_t h = {.version = EGM_RPC_VERSION,
                                .flags = (uint8_t)(i & 1 ? EGM_FRAME_REPLY : 0),
                                .type = (uint16_t)(100 + i),
                                .request_id = 1000u + (uint64_t)i,
                                .length = lengths[i]};
        egm__frame_encode_header(&h, s + off);
        off += EGM_FRAME_HEADER_SIZE;
        for (uint32_t k = 0; k < lengths[i]; k++)
            s[off + k] = (uint8_t)(i * 7 + k);
        off += lengths[i];
    }
    *len_p = len;
    return s;
}

static void check_frame(const egm_frame_t *f, int i)
{
    assert_int_equal(f->hdr.type, 100 + i);
    assert_true(f->hdr.request_id == 1000u + (uint64_t)i);
    assert_int_equal(f->hdr.flags, i & 1 ? EGM_FRAME_REPLY : 0);
    assert_int_equal(f->hdr.length, lengths[i]);
    if (lengths[i] == 0) {
        assert_null(f->payload);
        assert_null(f->buf);
    }
    for (uint32_t k = 0; k < lengths[i]; k++)
        assert_int_equal(f->payload[k], (uint8_t)(i * 7 + k));
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static size_t rnd(size_t below)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (size_t)(rng % below);
}

/* Feeds the stream in chunks of chunk(i) bytes; checks every frame. */
static void feed_in_chunks(size_t (*chunk)(void), int expect_in_place)
{
    size_t len;
    uint8_t *s = make_stream(&len);
    egm_frame_reader_t r;
    int seen = 0;

    egm__frame_reader_init(&r, 1u << 20, SITE);
    for (size_t off = 0; off < len;) {
        size_t n = chunk();
        if (n > len - off)
            n = len - off;
        const uint8_t *p = s + off;
        off += n;
        while (n > 0) {
            egm_frame_t f;
            size_t used = 0;
            egm_status_t st = egm__frame_reader_feed(&r, p, n, &used, &f);
            assert_true(used <= n);
            p += used;
            n -= used;
            if (st == EGM_INPROGRESS) {
                assert_int_equal(n, 0);
                assert_true(egm__frame_reader_mid_frame(&r));
                break;
            }
            assert_int_equal(st, EGM_OK);
            assert_true(seen < NFRAMES);
            check_frame(&f, seen);
            if (expect_in_place && lengths[seen] > 0) {
                /* held whole by the feed: in place, no buffer */
                assert_null(f.buf);
                assert_ptr_equal(f.payload, p - lengths[seen]);
            }
            if (f.buf != NULL) {
                assert_ptr_equal(f.payload, f.buf);
                assert_int_equal(egm__alloc_live_count_site(SITE), 1);
            }
            egm_free(f.buf);
            assert_int_equal(egm__alloc_live_count_site(SITE), 0);
            seen++;
            assert_false(egm__frame_reader_mid_frame(&r));
        }
    }
    assert_int_equal(seen, NFRAMES);
    egm__frame_reader_cleanup(&r);
    egm_free(s);
}

static size_t whole(void)
{
    return SIZE_MAX;
}
static size_t one_byte(void)
{
    return 1;
}
static size_t random_cut(void)
{
    return 1 + rnd(3000);
}

static void test_whole_stream_in_one_feed(void **state)
{
    (void)state;
    feed_in_chunks(whole, 1);
}

static void test_byte_by_byte(void **state)
{
    (void)state;
    feed_in_chunks(one_byte, 0);
}

static void test_random_cuts(void **state)
{
    (void)state;
    for (int round = 0; round < 20; round++)
        feed_in_chunks(random_cut, 0);
}

/* A payload that spans feeds is assembled in a buffer the caller then owns;
 * one that a feed holds whole is handed out in place. */
static void test_spanning_payload_is_the_callers(void **state)
{
    (void)state;
    size_t len;
    uint8_t *s = make_stream(&len);
    egm_frame_reader_t r;
    egm_frame_t f;
    size_t used;
    const size_t H = EGM_FRAME_HEADER_SIZE;

    egm__frame_reader_init(&r, 1u << 20, SITE);
    /* frame 0 is empty: the feed stops after its header */
    assert_int_equal(egm__frame_reader_feed(&r, s, 2 * H, &used, &f), EGM_OK);
    assert_int_equal(used, H);
    check_frame(&f, 0);
    /* frame 1's header alone, then an empty feed, then its one payload byte */
    assert_int_equal(egm__frame_reader_feed(&r, s + H, H, &used, &f), EGM_INPROGRESS);
    assert_int_equal(used, H);
    assert_true(egm__frame_reader_mid_frame(&r));
    assert_int_equal(egm__frame_reader_feed(&r, s + 2 * H, 0, &used, &f), EGM_INPROGRESS);
    assert_int_equal(used, 0);
    assert_int_equal(egm__frame_reader_feed(&r, s + 2 * H, 1, &used, &f), EGM_OK);
    check_frame(&f, 1);
    assert_null(f.buf);
    assert_ptr_equal(f.payload, s + 2 * H);

    /* frame 2: its header and 10 of its 23 payload bytes, then the rest */
    const uint8_t *p = s + 2 * H + 1;
    assert_int_equal(egm__frame_reader_feed(&r, p, H + 10, &used, &f), EGM_INPROGRESS);
    assert_int_equal(egm__alloc_live_count_site(SITE), 1);
    assert_int_equal(egm__frame_reader_feed(&r, p + H + 10, 13, &used, &f), EGM_OK);
    assert_int_equal(used, 13);
    check_frame(&f, 2);
    assert_non_null(f.buf);
    assert_ptr_equal(f.payload, f.buf);
    egm__frame_reader_cleanup(&r); /* the buffer is no longer the reader's */
    assert_int_equal(egm__alloc_live_count_site(SITE), 1);
    egm_free(f.buf);
    assert_int_equal(egm__alloc_live_count_site(SITE), 0);
    egm_free(s);
}

/* Reading straight into the frame: space never reaches past the frame (its
 * header, then its payload), and commit completes it as feed would; mixing
 * with feed is fine. */
static void test_space_and_commit(void **state)
{
    (void)state;
    size_t len;
    uint8_t *s = make_stream(&len);
    egm_frame_reader_t r;
    size_t off = 0;

    egm__frame_reader_init(&r, 1u << 20, SITE);
    for (int i = 0; i < NFRAMES; i++) {
        egm_frame_t f;
        egm_status_t st = EGM_INPROGRESS;
        size_t start = off;
        size_t hdr_end = start + EGM_FRAME_HEADER_SIZE;
        size_t frame_end = hdr_end + lengths[i];
        while (st == EGM_INPROGRESS) {
            uint8_t *room;
            size_t want, used;
            if (i == 3 && off == start) {
                /* this frame's header through feed, its payload through space */
                st = egm__frame_reader_feed(&r, s + off, EGM_FRAME_HEADER_SIZE, &used, &f);
                off += used;
                continue;
            }
            assert_int_equal(egm__frame_reader_space(&r, &room, &want), EGM_OK);
            assert_int_equal(want, off < hdr_end ? hdr_end - off : frame_end - off);
            size_t n = 1 + rnd(want < 5000 ? want : 5000);
            memcpy(room, s + off, n);
            off += n;
            st = egm__frame_reader_commit(&r, n, &f);
        }
        assert_int_equal(st, EGM_OK);
        assert_int_equal(off, frame_end);
        check_frame(&f, i);
        if (lengths[i] > 0)
            assert_non_null(f.buf); /* space/commit always assemble */
        egm_free(f.buf);
    }
    assert_int_equal(off, len);
    egm__frame_reader_cleanup(&r);
    assert_int_equal(egm__alloc_live_count_site(SITE), 0);
    egm_free(s);
}

static void put_header(uint8_t *out, uint16_t type, uint64_t id, uint32_t length)
{
    egm_frame_header_t h = {
        .version = EGM_RPC_VERSION, .type = type, .request_id = id, .length = length};
    egm__frame_encode_header(&h, out);
}

static int checks;
static egm_status_t refuse_type_7(void *arg, const egm_frame_header_t *h)
{
    assert_ptr_equal(arg, &checks);
    checks++;
    return h->type == 7 ? egm__set_error(EGM_ERR_PERMISSION, "type 7 refused") : EGM_OK;
}

/* Refused headers: the error, the fields, the raw bytes, and the reader
 * carries on at the next header. */
static void test_refused_headers(void **state)
{
    (void)state;
    uint8_t buf[4 * EGM_FRAME_HEADER_SIZE + 8];
    egm_frame_reader_t r;
    egm_frame_t f;
    size_t used;

    egm__frame_reader_init(&r, 100, SITE);

    /* longer than the limit: PROTOCOL, fields filled, nothing of it read */
    put_header(buf, 3, 42, 101);
    memset(buf + EGM_FRAME_HEADER_SIZE, 0xab, 8);
    assert_int_equal(egm__frame_reader_feed(&r, buf, EGM_FRAME_HEADER_SIZE + 8, &used, &f),
                     EGM_ERR_PROTOCOL);
    assert_int_equal(used, EGM_FRAME_HEADER_SIZE);
    assert_int_equal(f.hdr.type, 3);
    assert_true(f.hdr.request_id == 42);
    assert_int_equal(f.hdr.length, 101);
    assert_memory_equal(r.hdr_buf, buf, EGM_FRAME_HEADER_SIZE);
    assert_false(egm__frame_reader_mid_frame(&r));

    /* the limit may change between frames */
    r.max_payload = 101;
    assert_int_equal(egm__frame_reader_feed(&r, buf, EGM_FRAME_HEADER_SIZE, &used, &f),
                     EGM_INPROGRESS);
    egm__frame_reader_reset(&r); /* drops the frame whose payload never came */
    assert_false(egm__frame_reader_mid_frame(&r));

    /* bad magic, cut in two feeds: refused when its last byte arrives */
    put_header(buf, 3, 43, 0);
    buf[0] ^= 0xff;
    assert_int_equal(egm__frame_reader_feed(&r, buf, 10, &used, &f), EGM_INPROGRESS);
    assert_int_equal(egm__frame_reader_feed(&r, buf + 10, EGM_FRAME_HEADER_SIZE - 10, &used, &f),
                     EGM_ERR_PROTOCOL);
    assert_int_equal(r.hdr_buf[0], buf[0]);

    /* bad version */
    put_header(buf, 3, 44, 0);
    buf[4] = EGM_RPC_VERSION + 1;
    assert_int_equal(egm__frame_reader_feed(&r, buf, EGM_FRAME_HEADER_SIZE, &used, &f),
                     EGM_ERR_VERSION);
    assert_true(f.hdr.request_id == 44);

    /* the check sees each decoded header once, before its payload */
    r.check = refuse_type_7;
    r.check_arg = &checks;
    put_header(buf, 7, 45, 8);
    put_header(buf + EGM_FRAME_HEADER_SIZE, 8, 46, 0);
    assert_int_equal(egm__frame_reader_feed(&r, buf, 2 * EGM_FRAME_HEADER_SIZE, &used, &f),
                     EGM_ERR_PERMISSION);
    assert_int_equal(used, EGM_FRAME_HEADER_SIZE);
    assert_int_equal(checks, 1);
    assert_true(f.hdr.request_id == 45);
    /* ... and the reader goes on with the next header */
    assert_int_equal(egm__frame_reader_feed(&r, buf + used, EGM_FRAME_HEADER_SIZE, &used, &f),
                     EGM_OK);
    assert_int_equal(checks, 2);
    assert_true(f.hdr.request_id == 46);
    assert_null(f.payload);

    egm__frame_reader_cleanup(&r);
}

/* reset and cleanup free a payload being assembled. */
static void test_reset_mid_payload(void **state)
{
    (void)state;
    uint8_t buf[EGM_FRAME_HEADER_SIZE + 5];
    egm_frame_reader_t r;
    egm_frame_t f;
    size_t used;

    egm__frame_reader_init(&r, 100, SITE);
    put_header(buf, 1, 1, 50);
    memset(buf + EGM_FRAME_HEADER_SIZE, 1, 5);
    assert_int_equal(egm__frame_reader_feed(&r, buf, sizeof(buf), &used, &f), EGM_INPROGRESS);
    assert_int_equal(egm__alloc_live_count_site(SITE), 1);
    egm__frame_reader_reset(&r);
    assert_int_equal(egm__alloc_live_count_site(SITE), 0);
    assert_false(egm__frame_reader_mid_frame(&r));
    /* a fresh stream reads from its first byte */
    put_header(buf, 2, 2, 5);
    assert_int_equal(egm__frame_reader_feed(&r, buf, sizeof(buf), &used, &f), EGM_OK);
    assert_int_equal(f.hdr.type, 2);
    assert_int_equal(used, sizeof(buf));
    /* cleanup frees a partial one too */
    assert_int_equal(egm__frame_reader_feed(&r, buf, EGM_FRAME_HEADER_SIZE + 1, &used, &f),
                     EGM_INPROGRESS);
    egm__frame_reader_cleanup(&r);
    assert_int_equal(egm__alloc_live_count_site(SITE), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_whole_stream_in_one_feed, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_byte_by_byte, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_random_cuts, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_spanning_payload_is_the_callers, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_space_and_commit, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_refused_headers, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_reset_mid_payload, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
