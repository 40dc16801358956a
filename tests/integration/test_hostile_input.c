/* Integration: truncated, oversized, wrong-version and random bytes sent to a
 * real master (over TCP and over its local Unix socket), to a real provider's
 * tcp data server and to its fd broker (the shm socket). Each is answered with
 * an error or the connection is closed, never a hang, never a crash; a
 * well-formed request pipelined before the junk is still answered; and
 * well-formed clients keep being served after every case. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include "client/client_int.h"
#include "common/alloc.h"
#include "common/clock.h"
#include "common/process.h"
#include "common/sock.h"
#include "rpc/frame.h"
#include "rpc/proto_util.h"
#include "rpc/server.h"
#include "support/cluster.h"
#include "support/testutil.h"
#include "te/te_int.h"

#define IO_MS 10000      /* an answer or a close within this, else the server hangs on to us */
#define RANDOM_ROUNDS 24 /* random connections per server */
#define EXIST_REQUEST_ID 4242

static egm_test_cluster_t cluster;
static egm_client_t *tcp_client;
static egm_test_segment_t seg; /* the cluster's one segment */

static int setup(void **state)
{
    (void)state;
    if (egm_test_start_master(&cluster, NULL) != 0 ||
        egm_test_start_provider(&cluster, "16MiB", NULL) < 0)
        return -1;
    tcp_client = egm_test_client(&cluster, "tcp", NULL);
    if (tcp_client == NULL || egm_test_only_segment(tcp_client, &seg) != 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    egm_client_destroy(tcp_client);
    egm_test_cluster_stop(&cluster);
    return 0;
}

/* Both daemons alive, a well-formed client served end to end (put through
 * the master, bytes through the data server, read back), and the fd broker
 * hands out the segment's descriptor. */
static void assert_still_serving(void)
{
    static unsigned round;
    char key[32], value[300], back[300];
    size_t got = 0;
    int fd = -1;
    uint64_t size = 0;

    snprintf(key, sizeof(key), "alive/%u", round++);
    egm_test_fill(value, sizeof(value), round);
    assert_int_equal(egm_put(tcp_client, key, value, sizeof(value), NULL), EGM_OK);
    assert_int_equal(egm_register_buffer(tcp_client, back, sizeof(back)), EGM_OK);
    assert_int_equal(egm_get_into(tcp_client, key, back, sizeof(back), &got), EGM_OK);
    assert_int_equal(egm_unregister_buffer(tcp_client, back), EGM_OK);
    assert_int_equal(got, sizeof(value));
    assert_memory_equal(back, value, sizeof(value));
    assert_int_equal(egm_exist(tcp_client, "never/put"), EGM_ERR_NOT_FOUND);
    if (seg.shm_socket[0] != '\0') {
        assert_int_equal(
            egm__fd_broker_fetch(seg.shm_socket, seg.id, EGM_HANDLE_MEMFD, NULL, IO_MS, &fd, &size),
            EGM_OK);
        struct stat st;
        assert_int_equal(fstat(fd, &st), 0);
        assert_true((uint64_t)st.st_size >= seg.size);
        assert_int_equal(size, seg.size);
        close(fd);
    }
    assert_int_equal(egm__process_wait(&cluster.master, 0, NULL), EGM_ERR_TIMEOUT);
    assert_int_equal(egm__process_wait(&cluster.providers[0], 0, NULL), EGM_ERR_TIMEOUT);
}

/* ---- master ----------------------------------------------------------------- */

static int connect_master(int over_unix)
{
    int fd;
    if (over_unix) {
        char name[EGM_RPC_LOCAL_NAME_MAX];
        egm_rpc_endpoint_t ep;
        assert_int_equal(
            egm__rpc_endpoint_from_host("127.0.0.1", (uint16_t)cluster.master_port, &ep), EGM_OK);
        egm__rpc_local_name(&ep, name, sizeof(name));
        assert_int_equal(egm__sock_unix_connect(name, &fd), EGM_OK);
    } else {
        assert_int_equal(
            egm__sock_tcp_connect("127.0.0.1", (uint16_t)cluster.master_port, 3000, &fd), EGM_OK);
    }
    return fd;
}

/* One reply frame: 1 (header in *h, ErrorReply status in *status when it is
 * one, else 0), 0 when the master closed instead. Fails on a hang. */
static int read_reply(int fd, egm_frame_header_t *h, int32_t *status)
{
    uint8_t hdr[EGM_FRAME_HEADER_SIZE];
    egm_status_t st = egm__sock_read_full_timeout(fd, hdr, sizeof(hdr), IO_MS);
    assert_int_not_equal(st, EGM_ERR_TIMEOUT);
    if (st != EGM_OK)
        return 0;
    assert_int_equal(egm__frame_decode_header(hdr, 1u << 30, h), EGM_OK);
    assert_true(h->flags & EGM_FRAME_REPLY);
    uint8_t *payload = malloc(h->length ? h->length : 1);
    assert_non_null(payload);
    assert_int_equal(egm__sock_read_full_timeout(fd, payload, h->length, IO_MS), EGM_OK);
    *status = 0;
    if (h->flags & EGM_FRAME_ERROR) {
        Egm__ErrorReply *err = NULL;
        assert_int_equal(egm__pb_unpack(&egm__error_reply__descriptor, payload, h->length,
                                        (ProtobufCMessage **)&err),
                         EGM_OK);
        *status = err->status;
        assert_true(*status < 0);
        egm__pb_free(&err->base);
    }
    free(payload);
    return 1;
}

/* Reads until the master closes (bounded); returns the replies seen. */
static int drain(int fd)
{
    egm_frame_header_t h;
    int32_t status;
    int replies = 0;
    while (read_reply(fd, &h, &status) == 1)
        assert_true(++replies < 1000);
    return replies;
}

static size_t frame(uint8_t *out, uint8_t version, uint16_t type, uint64_t id, const void *payload,
                    uint32_t len)
{
    egm_frame_header_t h = {version, 0, type, id, len};
    egm__frame_encode_header(&h, out);
    if (len > 0 && payload != NULL)
        memcpy(out + EGM_FRAME_HEADER_SIZE, payload, len);
    return EGM_FRAME_HEADER_SIZE + len;
}

/* A well-formed ExistKey of one key that was never put. */
static size_t exist_frame(uint8_t *out)
{
    Egm__KeysRequest req = EGM__KEYS_REQUEST__INIT;
    Egm__Id client = EGM__ID__INIT;
    char *keys[] = {"never/put"};
    uint8_t *buf;
    size_t len;
    egm__id_to_pb((egm_id_t){0x1234, 0x5678}, &client);
    req.client = &client;
    req.n_keys = 1;
    req.keys = keys;
    assert_int_equal(egm__pb_pack(&req.base, &buf, &len), EGM_OK);
    size_t n = frame(out, EGM_RPC_VERSION, EGM_RPC_EXIST_KEY, EXIST_REQUEST_ID, buf, (uint32_t)len);
    egm_free(buf);
    return n;
}

static void assert_exist_answered(int fd)
{
    egm_frame_header_t h;
    int32_t status;
    assert_int_equal(read_reply(fd, &h, &status), 1);
    assert_int_equal(h.request_id, EXIST_REQUEST_ID);
    assert_int_equal(h.type, EGM_RPC_EXIST_KEY);
    assert_false(h.flags & EGM_FRAME_ERROR);
}

static void master_cases(int over_unix)
{
    uint8_t buf[4096];
    egm_frame_header_t h;
    int32_t status;
    int fd;
    size_t n;

    /* Truncated header, truncated payload: closed without a reply. */
    n = exist_frame(buf);
    fd = connect_master(over_unix);
    assert_int_equal(egm__sock_write_full(fd, buf, 10), EGM_OK);
    shutdown(fd, SHUT_WR);
    assert_int_equal(drain(fd), 0);
    close(fd);
    fd = connect_master(over_unix);
    assert_int_equal(egm__sock_write_full(fd, buf, n - 3), EGM_OK);
    shutdown(fd, SHUT_WR);
    assert_int_equal(drain(fd), 0);
    close(fd);
    assert_still_serving();

    /* Oversized length, wrong version, reserved bits: an error reply naming
     * the fault for the frame's id, then the connection is closed. */
    const struct {
        uint8_t version;
        uint32_t length;
        int reserved;
        int32_t want;
    } bad[] = {
        {EGM_RPC_VERSION, 0x7fffffffu, 0, EGM_ERR_PROTOCOL},
        {EGM_RPC_VERSION + 1, 16, 0, EGM_ERR_VERSION},
        {0, 16, 0, EGM_ERR_VERSION},
        {EGM_RPC_VERSION, 16, 1, EGM_ERR_PROTOCOL},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        memset(buf, 0, EGM_FRAME_HEADER_SIZE + 16);
        frame(buf, bad[i].version, EGM_RPC_EXIST_KEY, 77 + i, NULL, bad[i].length);
        if (bad[i].reserved)
            buf[20] = 1;
        fd = connect_master(over_unix);
        /* the header, and 16 payload bytes at most (not the 2 GiB it announces) */
        assert_int_equal(egm__sock_write_full(fd, buf, EGM_FRAME_HEADER_SIZE + 16), EGM_OK);
        assert_int_equal(read_reply(fd, &h, &status), 1);
        assert_int_equal(h.request_id, 77 + i);
        assert_int_equal(status, bad[i].want);
        shutdown(fd, SHUT_WR);
        assert_int_equal(drain(fd), 0);
        close(fd);
    }
    assert_still_serving();

    /* Every type (and unknown ones) with a payload of random bytes: an answer
     * each, and the connection stays: the ExistKey after them is answered. */
    fd = connect_master(over_unix);
    for (uint16_t type = 0; type <= EGM_RPC_TYPE_MAX + 2; type++) {
        uint8_t junk[200];
        egm_test_fill(junk, sizeof(junk), 1000u + type);
        n = frame(buf, EGM_RPC_VERSION, type, 500u + type, junk, sizeof(junk));
        assert_int_equal(egm__sock_write_full(fd, buf, n), EGM_OK);
        assert_int_equal(read_reply(fd, &h, &status), 1);
        assert_int_equal(h.request_id, 500u + type);
        if (type == 0 || type > EGM_RPC_TYPE_MAX)
            assert_int_equal(status, EGM_ERR_NOT_SUPPORTED);
    }
    n = exist_frame(buf);
    assert_int_equal(egm__sock_write_full(fd, buf, n), EGM_OK);
    assert_exist_answered(fd);
    close(fd);

    /* A well-formed request, then junk on the same connection: the request is
     * answered before the junk ends the connection. */
    for (unsigned r = 0; r < RANDOM_ROUNDS; r++) {
        n = exist_frame(buf);
        egm_test_fill(buf + n, 512, 7000u + r);
        fd = connect_master(over_unix);
        assert_int_equal(egm__sock_write_full(fd, buf, n + 512), EGM_OK);
        shutdown(fd, SHUT_WR);
        assert_exist_answered(fd);
        drain(fd);
        close(fd);
    }

    /* Random bytes alone, of random lengths. */
    for (unsigned r = 0; r < RANDOM_ROUNDS; r++) {
        size_t len = 1 + (r * 97) % 1500;
        egm_test_fill(buf, len, 9000u + r);
        fd = connect_master(over_unix);
        (void)egm__sock_write_full(fd, buf, len); /* the master may close first */
        shutdown(fd, SHUT_WR);
        drain(fd);
        close(fd);
    }
    assert_still_serving();
}

static void test_master_tcp(void **state)
{
    (void)state;
    master_cases(0);
}

static void test_master_unix(void **state)
{
    (void)state;
    master_cases(1);
}

/* ---- tcp data server ------------------------------------------------------ */

static int connect_data(void)
{
    int fd;
    assert_int_equal(egm__sock_tcp_connect(seg.data_host, seg.data_port, 3000, &fd), EGM_OK);
    return fd;
}

static size_t data_request(uint8_t *out, uint16_t op, uint64_t id, uint64_t offset, uint64_t length)
{
    egm_tcp_req_t req = {.magic = EGM_TCP_MAGIC,
                         .version = EGM_TCP_VERSION,
                         .op = op,
                         .request_id = id,
                         .segment = seg.id,
                         .offset = offset,
                         .length = length};
    egm__tcp_req_encode(&req, out);
    return EGM_TCP_REQ_SIZE;
}

/* One reply (and a READ's bytes): 1, or 0 when the server closed instead. */
static int data_reply(int fd, egm_tcp_reply_t *reply)
{
    uint8_t buf[EGM_TCP_REPLY_SIZE];
    egm_status_t st = egm__sock_read_full_timeout(fd, buf, sizeof(buf), IO_MS);
    assert_int_not_equal(st, EGM_ERR_TIMEOUT);
    if (st != EGM_OK)
        return 0;
    egm__tcp_reply_decode(buf, reply);
    assert_int_equal(reply->magic, EGM_TCP_REPLY_MAGIC);
    if (reply->status == EGM_OK && reply->length > 0) {
        uint8_t *data = malloc(reply->length);
        assert_non_null(data);
        assert_int_equal(egm__sock_read_full_timeout(fd, data, reply->length, IO_MS), EGM_OK);
        free(data);
    }
    return 1;
}

static void data_drain(int fd)
{
    egm_tcp_reply_t reply;
    for (int i = 0; data_reply(fd, &reply) == 1; i++)
        assert_true(i < 1000);
}

static void test_data_server(void **state)
{
    (void)state;
    uint8_t buf[4096];
    egm_tcp_reply_t reply;
    int fd;

    /* Oversized and zero lengths are refused and the connection stays. */
    fd = connect_data();
    data_request(buf, EGM_TCP_OP_READ, 1, 0, EGM_TCP_MAX_REQUEST + 1);
    data_request(buf + 48, EGM_TCP_OP_READ, 2, 0, 0);
    data_request(buf + 96, EGM_TCP_OP_READ, 3, 0, 64);
    assert_int_equal(egm__sock_write_full(fd, buf, 144), EGM_OK);
    for (uint64_t id = 1; id <= 3; id++) {
        assert_int_equal(data_reply(fd, &reply), 1);
        assert_int_equal(reply.request_id, id);
        assert_int_equal(reply.status, id < 3 ? EGM_ERR_INVALID_ARG : EGM_OK);
    }
    close(fd);

    /* A refused WRITE closes the connection: what follows it (here a valid
     * READ in the place of its payload) is never taken as a request. */
    fd = connect_data();
    data_request(buf, EGM_TCP_OP_WRITE, 10, seg.size - 8, 64);
    data_request(buf + 48, EGM_TCP_OP_READ, 11, 0, 16);
    assert_int_equal(egm__sock_write_full(fd, buf, 96), EGM_OK);
    shutdown(fd, SHUT_WR);
    assert_int_equal(data_reply(fd, &reply), 1);
    assert_int_equal(reply.request_id, 10);
    assert_int_equal(reply.status, EGM_ERR_INVALID_ARG);
    assert_int_equal(data_reply(fd, &reply), 0);
    close(fd);

    /* Wrong version, truncated request: closed without a reply. */
    fd = connect_data();
    data_request(buf, EGM_TCP_OP_READ, 20, 0, 16);
    buf[4] = 2;
    assert_int_equal(egm__sock_write_full(fd, buf, 48), EGM_OK);
    shutdown(fd, SHUT_WR);
    assert_int_equal(data_reply(fd, &reply), 0);
    close(fd);
    fd = connect_data();
    data_request(buf, EGM_TCP_OP_READ, 21, 0, 16);
    assert_int_equal(egm__sock_write_full(fd, buf, 47), EGM_OK);
    shutdown(fd, SHUT_WR);
    assert_int_equal(data_reply(fd, &reply), 0);
    close(fd);
    assert_still_serving();

    /* A valid READ, then junk: the READ is served, then the connection ends. */
    for (unsigned r = 0; r < RANDOM_ROUNDS; r++) {
        data_request(buf, EGM_TCP_OP_READ, 30 + r, (r * 4096) % (seg.size - 256), 256);
        egm_test_fill(buf + 48, 480, 3000u + r);
        fd = connect_data();
        assert_int_equal(egm__sock_write_full(fd, buf, 528), EGM_OK);
        shutdown(fd, SHUT_WR);
        assert_int_equal(data_reply(fd, &reply), 1);
        assert_int_equal(reply.request_id, 30 + r);
        assert_int_equal(reply.status, EGM_OK);
        data_drain(fd);
        close(fd);
    }

    /* Random bytes alone. */
    for (unsigned r = 0; r < RANDOM_ROUNDS; r++) {
        size_t len = 1 + (r * 131) % 1000;
        egm_test_fill(buf, len, 5000u + r);
        fd = connect_data();
        (void)egm__sock_write_full(fd, buf, len);
        shutdown(fd, SHUT_WR);
        data_drain(fd);
        close(fd);
    }
    assert_still_serving();
}

/* ---- fd broker ---------------------------------------------------------------- */

/* Sends bytes to the broker: 1 with its reply's status (and *fd_p, closed
 * here unless the caller takes it), 0 when it closed without a reply. */
static int broker_exchange(const void *bytes, size_t len, int shut, int32_t *status, int *fd_p)
{
    int sock, fd = -1;
    uint8_t reply[EGM_BROKER_REPLY_SIZE];
    assert_int_equal(egm__sock_unix_connect(seg.shm_socket, &sock), EGM_OK);
    if (len > 0)
        (void)egm__sock_write_full(sock, bytes, len);
    if (shut)
        shutdown(sock, SHUT_WR);
    struct pollfd pfd = {.fd = sock, .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, IO_MS), 1); /* an answer or a close, never a hang */
    egm_status_t st = egm__sock_recv_fd(sock, &fd, reply, sizeof(reply));
    close(sock);
    if (st != EGM_OK)
        return 0;
    assert_int_equal(egm__wire_get_u32(reply), EGM_BROKER_REPLY_MAGIC);
    *status = (int32_t)egm__wire_get_u32(reply + 4);
    if (fd_p != NULL)
        *fd_p = fd;
    else if (fd >= 0)
        close(fd);
    return 1;
}

static void broker_request(uint8_t *out, uint32_t magic, uint16_t version, uint16_t kind,
                           egm_id_t id)
{
    egm__wire_put_u32(out, magic);
    egm__wire_put_u16(out + 4, version);
    egm__wire_put_u16(out + 6, kind);
    egm__wire_put_id(out + 8, id);
}

static void test_fd_broker(void **state)
{
    (void)state;
    uint8_t req[EGM_BROKER_REQ_SIZE + 100];
    int32_t status;
    int fd;

    if (seg.shm_socket[0] == '\0')
        EGM_SKIP("the provider serves no shm socket here");

    /* Truncated, wrong magic, wrong version: closed without a reply. */
    broker_request(req, EGM_BROKER_MAGIC, EGM_BROKER_VERSION, EGM_HANDLE_MEMFD, seg.id);
    assert_int_equal(broker_exchange(req, 10, 1, &status, NULL), 0);
    assert_int_equal(broker_exchange(req, 0, 1, &status, NULL), 0);
    broker_request(req, 0x12345678, EGM_BROKER_VERSION, EGM_HANDLE_MEMFD, seg.id);
    assert_int_equal(broker_exchange(req, EGM_BROKER_REQ_SIZE, 1, &status, NULL), 0);
    broker_request(req, EGM_BROKER_MAGIC, EGM_BROKER_VERSION + 1, EGM_HANDLE_MEMFD, seg.id);
    assert_int_equal(broker_exchange(req, EGM_BROKER_REQ_SIZE, 1, &status, NULL), 0);
    assert_still_serving();

    /* Refusals with a status and no descriptor: an unknown handle kind, a
     * segment that is not exposed, a kind this segment does not have. */
    const struct {
        uint16_t kind;
        int other_segment;
        int32_t want;
    } refused[] = {
        {7, 0, EGM_ERR_INVALID_ARG},
        {0xffff, 0, EGM_ERR_INVALID_ARG},
        {EGM_HANDLE_MEMFD, 1, EGM_ERR_SEGMENT_NOT_FOUND},
        {EGM_HANDLE_POSIX_FD, 0, EGM_ERR_SEGMENT_NOT_FOUND},
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        broker_request(req, EGM_BROKER_MAGIC, EGM_BROKER_VERSION, refused[i].kind,
                       refused[i].other_segment ? (egm_id_t){1, 2} : seg.id);
        fd = -1;
        assert_int_equal(broker_exchange(req, EGM_BROKER_REQ_SIZE, 1, &status, &fd), 1);
        assert_int_equal(status, refused[i].want);
        assert_int_equal(fd, -1);
    }

    /* Oversized: a valid request with bytes after it is served (one request
     * per connection; the rest is never read as another). */
    broker_request(req, EGM_BROKER_MAGIC, EGM_BROKER_VERSION, EGM_HANDLE_MEMFD, seg.id);
    egm_test_fill(req + EGM_BROKER_REQ_SIZE, 100, 77);
    fd = -1;
    assert_int_equal(broker_exchange(req, sizeof(req), 0, &status, &fd), 1);
    assert_int_equal(status, EGM_OK);
    assert_true(fd >= 0);
    close(fd);

    /* Random requests. */
    for (unsigned r = 0; r < RANDOM_ROUNDS; r++) {
        size_t len = 1 + (r * 37) % sizeof(req);
        egm_test_fill(req, len, 11000u + r);
        fd = -1;
        if (broker_exchange(req, len, 1, &status, &fd) == 1)
            assert_true(status < 0);
        assert_int_equal(fd, -1);
    }
    assert_still_serving();

    /* A peer that connects and says nothing holds the broker only until its
     * read times out: a well-formed fetch behind it is served. */
    int silent;
    assert_int_equal(egm__sock_unix_connect(seg.shm_socket, &silent), EGM_OK);
    uint64_t size = 0;
    assert_int_equal(
        egm__fd_broker_fetch(seg.shm_socket, seg.id, EGM_HANDLE_MEMFD, NULL, IO_MS, &fd, &size),
        EGM_OK);
    assert_int_equal(size, seg.size);
    close(fd);
    close(silent);
    assert_still_serving();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_master_tcp),
        cmocka_unit_test(test_master_unix),
        cmocka_unit_test(test_data_server),
        cmocka_unit_test(test_fd_broker),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
