/* Integration: a provider killed with SIGKILL, and malformed frames sent to a
 * real master. Nothing may return wrong bytes; the master keeps serving. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <poll.h>
#include <unistd.h>
#include <cmocka.h>
#include "client/client_int.h"
#include "common/clock.h"
#include "common/sock.h"
#include "rpc/frame.h"
#include "support/cluster.h"

#define OBJECTS 16
#define LEN (64 * 1024 + 5)

static void test_provider_sigkill(void **state)
{
    (void)state;
    egm_test_cluster_t cluster;
    const char *master_flags[] = {"--client-ttl", "2", NULL};
    assert_int_equal(egm_test_start_master(&cluster, master_flags), 0);
    int victim = egm_test_start_provider(&cluster, "32MiB", NULL);
    assert_true(victim >= 0);
    const char *pairs[] = {"ping_interval_ms=200", NULL};
    egm_client_t *client = egm_test_client(&cluster, "tcp", pairs);
    assert_non_null(client);

    unsigned char *data = malloc(LEN), *back = malloc(LEN);
    assert_non_null(data);
    assert_non_null(back);
    char key[32];
    for (int i = 0; i < OBJECTS; i++) {
        snprintf(key, sizeof(key), "victim/%d", i);
        egm_test_fill(data, LEN, (unsigned)i);
        assert_int_equal(egm_put(client, key, data, LEN, NULL), EGM_OK);
    }
    /* A survivor joins; then the first provider dies without unmounting. */
    assert_true(egm_test_start_provider(&cluster, "32MiB", NULL) >= 0);
    assert_int_equal(egm_test_segment_count(client), 2);
    assert_int_equal(egm__process_signal(&cluster.providers[victim], SIGKILL), EGM_OK);
    assert_int_equal(egm__process_wait(&cluster.providers[victim], 10000, NULL), EGM_OK);

    /* Until the master expires it, gets fail or return the exact bytes: never others. */
    assert_int_equal(egm_register_buffer(client, back, LEN), EGM_OK);
    uint64_t deadline = egm__now_ms() + 30000;
    while (egm_test_segment_count(client) != 1 && egm__now_ms() < deadline) {
        for (int i = 0; i < OBJECTS; i++) {
            size_t got = 0;
            snprintf(key, sizeof(key), "victim/%d", i);
            if (egm_get_into(client, key, back, LEN, &got) == EGM_OK) {
                egm_test_fill(data, LEN, (unsigned)i);
                assert_int_equal(got, LEN);
                assert_memory_equal(back, data, LEN);
            }
        }
        egm__sleep_ms(100);
    }
    assert_int_equal(egm_test_segment_count(client), 1);
    for (int i = 0; i < OBJECTS; i++) {
        size_t got = 0;
        snprintf(key, sizeof(key), "victim/%d", i);
        assert_int_equal(egm_get_into(client, key, back, LEN, &got), EGM_ERR_NOT_FOUND);
        assert_int_equal(egm_exist(client, key), EGM_ERR_NOT_FOUND);
    }
    /* The survivor takes new objects. */
    assert_int_equal(egm_put(client, "after/kill", data, LEN, NULL), EGM_OK);
    assert_int_equal(egm_unregister_buffer(client, back), EGM_OK);
    egm_client_destroy(client);
    egm_test_cluster_stop(&cluster);
    free(data);
    free(back);
}

/* Sends raw bytes; returns 1 if the server closed the connection (EOF) within
 * the timeout, 0 if it answered something, -1 on a local failure. *reply_flags
 * receives the flags of a reply frame when one came. */
static int send_raw(unsigned port, const void *bytes, size_t len, int *reply_flags)
{
    int fd;
    if (egm__sock_tcp_connect("127.0.0.1", (uint16_t)port, 3000, &fd) != EGM_OK)
        return -1;
    if (len > 0 && egm__sock_write_full(fd, bytes, len) != EGM_OK) {
        close(fd);
        return 1;
    }
    uint8_t hdr[EGM_FRAME_HEADER_SIZE];
    size_t got = 0;
    int result = 1;
    uint64_t deadline = egm__now_ms() + 10000;
    while (got < sizeof(hdr) && egm__now_ms() < deadline) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 200) <= 0)
            continue;
        ssize_t n = read(fd, hdr + got, sizeof(hdr) - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    if (got == sizeof(hdr)) {
        egm_frame_header_t h;
        egm__frame_decode_header(hdr, 1u << 30, &h);
        *reply_flags = h.flags;
        result = 0;
    } else if (egm__now_ms() >= deadline) {
        result = -1; /* neither an answer nor a close: the server hangs on to it */
    }
    close(fd);
    return result;
}

static void test_master_survives_malformed_frames(void **state)
{
    (void)state;
    egm_test_cluster_t cluster;
    assert_int_equal(egm_test_start_master(&cluster, NULL), 0);
    egm_client_t *client = egm_test_client(&cluster, "auto", NULL);
    assert_non_null(client);
    int flags = 0;

    /* Garbage: closed. */
    const char garbage[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
    assert_int_equal(send_raw(cluster.master_port, garbage, sizeof(garbage) - 1, &flags), 1);
    assert_int_equal(egm_exist(client, "k"), EGM_ERR_NOT_FOUND);

    /* Wrong version: an error reply (or a close), never a hang. */
    uint8_t frame[EGM_FRAME_HEADER_SIZE + 16];
    egm_frame_header_t h = {
        .version = EGM_RPC_VERSION, .type = EGM_RPC_EXIST_KEY, .request_id = 7, .length = 16};
    egm__frame_encode_header(&h, frame);
    frame[4] = 9;
    memset(frame + EGM_FRAME_HEADER_SIZE, 0xff, 16);
    int r = send_raw(cluster.master_port, frame, sizeof(frame), &flags);
    assert_true(r == 1 || (r == 0 && (flags & EGM_FRAME_ERROR)));
    assert_int_equal(egm_exist(client, "k"), EGM_ERR_NOT_FOUND);

    /* Oversized length. */
    h.length = 0x7fffffff;
    egm__frame_encode_header(&h, frame);
    r = send_raw(cluster.master_port, frame, EGM_FRAME_HEADER_SIZE, &flags);
    assert_true(r == 1 || (r == 0 && (flags & EGM_FRAME_ERROR)));

    /* Unknown type and an undecodable payload: error replies. */
    h.length = 16;
    h.type = 999;
    egm__frame_encode_header(&h, frame);
    assert_int_equal(send_raw(cluster.master_port, frame, sizeof(frame), &flags), 0);
    assert_true(flags & EGM_FRAME_ERROR);
    h.type = EGM_RPC_PUT_START;
    egm__frame_encode_header(&h, frame);
    assert_int_equal(send_raw(cluster.master_port, frame, sizeof(frame), &flags), 0);
    assert_true(flags & EGM_FRAME_ERROR);

    /* Truncated frame then close; random bytes. */
    int fd;
    assert_int_equal(egm__sock_tcp_connect("127.0.0.1", (uint16_t)cluster.master_port, 3000, &fd),
                     EGM_OK);
    assert_int_equal(egm__sock_write_full(fd, frame, 10), EGM_OK);
    close(fd);
    uint8_t noise[512];
    egm_test_fill(noise, sizeof(noise), 99);
    assert_int_equal(send_raw(cluster.master_port, noise, sizeof(noise), &flags), 1);

    /* Still serving well-formed clients, and still alive. */
    assert_int_equal(egm_exist(client, "k"), EGM_ERR_NOT_FOUND);
    assert_int_equal(egm__process_wait(&cluster.master, 0, NULL), EGM_ERR_TIMEOUT);
    egm_client_destroy(client);
    egm_test_cluster_stop(&cluster);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_master_survives_malformed_frames),
        cmocka_unit_test(test_provider_sigkill),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
