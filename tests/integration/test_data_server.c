/* Integration: a real provider's tcp data server refuses out-of-bounds and
 * malformed requests and keeps serving well-formed clients. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>
#include "client/client_int.h"
#include "common/clock.h"
#include "common/sock.h"
#include "rpc/proto_util.h"
#include "support/cluster.h"
#include "te/te_int.h"

static egm_test_cluster_t cluster;
static egm_client_t *client;
static egm_test_segment_t seg; /* the cluster's one segment */

static int setup(void **state)
{
    (void)state;
    if (egm_test_start_master(&cluster, NULL) != 0 ||
        egm_test_start_provider(&cluster, "16MiB", NULL) < 0)
        return -1;
    client = egm_test_client(&cluster, "tcp", NULL);
    if (client == NULL || egm_test_only_segment(client, &seg) != 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    egm_client_destroy(client);
    egm_test_cluster_stop(&cluster);
    return 0;
}

/* Sends a request header (and `payload` bytes after it); returns 1 and the reply
 * when one came, 0 when the server closed without a reply. */
static int exchange(const uint8_t *bytes, size_t len, egm_tcp_reply_t *reply)
{
    int fd;
    assert_int_equal(egm__sock_tcp_connect(seg.data_host, seg.data_port, 3000, &fd), EGM_OK);
    (void)egm__sock_write_full(fd, bytes, len);
    shutdown(fd, SHUT_WR); /* a truncated header must end in a close, not a wait */
    uint8_t buf[EGM_TCP_REPLY_SIZE];
    egm_status_t status = egm__sock_read_full_timeout(fd, buf, sizeof(buf), 10000);
    close(fd);
    assert_int_not_equal(status, EGM_ERR_TIMEOUT); /* an answer or a close, never a hang */
    if (status != EGM_OK)
        return 0;
    egm__tcp_reply_decode(buf, reply);
    return 1;
}

static int request(uint16_t op, egm_id_t segment, uint64_t offset, uint64_t length,
                   egm_tcp_reply_t *reply)
{
    egm_tcp_req_t req = {.magic = EGM_TCP_MAGIC,
                         .version = EGM_TCP_VERSION,
                         .op = op,
                         .request_id = 42,
                         .segment = segment,
                         .offset = offset,
                         .length = length};
    uint8_t buf[EGM_TCP_REQ_SIZE + 256];
    memset(buf, 0xab, sizeof(buf));
    egm__tcp_req_encode(&req, buf);
    size_t extra = op == EGM_TCP_OP_WRITE ? (length < 256 ? length : 256) : 0;
    return exchange(buf, EGM_TCP_REQ_SIZE + extra, reply);
}

/* A well-formed client still gets its bytes back. */
static void assert_still_serving(void)
{
    static unsigned round;
    char key[32], value[100], back[100];
    size_t got = 0;
    snprintf(key, sizeof(key), "alive/%u", round++);
    egm_test_fill(value, sizeof(value), round);
    assert_int_equal(egm_put(client, key, value, sizeof(value), NULL), EGM_OK);
    assert_int_equal(egm_register_buffer(client, back, sizeof(back)), EGM_OK);
    assert_int_equal(egm_get_into(client, key, back, sizeof(back), &got), EGM_OK);
    assert_int_equal(egm_unregister_buffer(client, back), EGM_OK);
    assert_int_equal(got, sizeof(value));
    assert_memory_equal(back, value, sizeof(value));
}

static void test_in_bounds_read_served(void **state)
{
    (void)state;
    egm_tcp_reply_t reply;
    assert_int_equal(request(EGM_TCP_OP_READ, seg.id, 0, 64, &reply), 1);
    assert_int_equal(reply.status, EGM_OK);
    assert_int_equal(reply.length, 64);
}

static void test_out_of_bounds_refused(void **state)
{
    (void)state;
    egm_tcp_reply_t reply;
    const struct {
        uint16_t op;
        uint64_t offset, length;
    } cases[] = {
        {EGM_TCP_OP_READ, seg.size - 10, 100},
        {EGM_TCP_OP_READ, seg.size, 1},
        {EGM_TCP_OP_READ, UINT64_MAX - 8, 16}, /* offset + length overflows */
        {EGM_TCP_OP_READ, 0, 0},
        {EGM_TCP_OP_READ, 0, 1ull << 40},
        {EGM_TCP_OP_WRITE, seg.size - 10, 100},
        {EGM_TCP_OP_WRITE, UINT64_MAX, 2},
        {EGM_TCP_OP_WRITE, 0, 1ull << 40},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int answered = request(cases[i].op, seg.id, cases[i].offset, cases[i].length, &reply);
        if (answered) {
            assert_int_equal(reply.magic, EGM_TCP_REPLY_MAGIC);
            assert_true(reply.status < 0);
            assert_int_equal(reply.length, 0);
        }
        assert_still_serving();
    }
}

static void test_unknown_segment_and_bad_frames(void **state)
{
    (void)state;
    egm_tcp_reply_t reply;
    if (request(EGM_TCP_OP_READ, egm__id_random(), 0, 16, &reply))
        assert_int_equal(reply.status, EGM_ERR_SEGMENT_NOT_FOUND);
    assert_still_serving();

    uint8_t frame[EGM_TCP_REQ_SIZE];
    egm_tcp_req_t req = {.magic = EGM_TCP_MAGIC,
                         .version = EGM_TCP_VERSION,
                         .op = 7,
                         .segment = seg.id,
                         .length = 16};
    egm__tcp_req_encode(&req, frame); /* unknown op */
    if (exchange(frame, sizeof(frame), &reply))
        assert_true(reply.status < 0);
    req.op = EGM_TCP_OP_READ;
    req.version = 99;
    egm__tcp_req_encode(&req, frame);
    if (exchange(frame, sizeof(frame), &reply))
        assert_true(reply.status < 0);
    req.version = EGM_TCP_VERSION;
    req.magic = 0xdeadbeef;
    egm__tcp_req_encode(&req, frame);
    assert_int_equal(exchange(frame, sizeof(frame), &reply), 0);
    egm_test_fill(frame, sizeof(frame), 5);
    assert_int_equal(exchange(frame, sizeof(frame), &reply), 0);
    assert_int_equal(exchange(frame, 7, &reply), 0); /* truncated header, then close */
    assert_still_serving();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_in_bounds_read_served),
        cmocka_unit_test(test_out_of_bounds_refused),
        cmocka_unit_test(test_unknown_segment_and_bad_frames),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
