/* Transfer engine end to end in one process: a provider engine exposes memfd
 * chunks (as the host pool makes them; te tests cannot link the pool layer), a consumer engine
 * (another client id) moves random bytes both ways over shm and tcp. Refusals are checked at the
 * route level and, with raw sockets, at the tcp server and the fd broker. */
#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "common/sock.h"
#include "te/te.h"
#include "te/te_int.h"

/* memfd-backed chunks, as src/pool/host_pool.c makes them. */
typedef struct {
    void *base;
    uint64_t size;
    int memfd;
} test_chunk_t;

typedef struct {
    test_chunk_t chunks[2];
    size_t count;
} test_pool_t;

static void test_pool_destroy(test_pool_t *pool)
{
    for (size_t i = 0; i < pool->count; i++) {
        munmap(pool->chunks[i].base, pool->chunks[i].size);
        close(pool->chunks[i].memfd);
    }
    free(pool);
}

static egm_status_t test_pool_create(uint64_t total, uint64_t chunk_size, test_pool_t **pool_p)
{
    test_pool_t *pool = calloc(1, sizeof(*pool));
    assert_non_null(pool);
    for (uint64_t left = total; left > 0 && pool->count < 2; pool->count++) {
        test_chunk_t *c = &pool->chunks[pool->count];
        c->size = left < chunk_size ? left : chunk_size;
        c->memfd = memfd_create("egmstore-test", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        assert_true(c->memfd >= 0);
        assert_int_equal(ftruncate(c->memfd, (off_t)c->size), 0);
        assert_int_equal(fcntl(c->memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), 0);
        c->base = mmap(NULL, c->size, PROT_READ | PROT_WRITE, MAP_SHARED, c->memfd, 0);
        assert_true(c->base != MAP_FAILED);
        left -= c->size;
    }
    *pool_p = pool;
    return EGM_OK;
}

static const test_chunk_t *test_pool_chunk(const test_pool_t *pool, size_t index)
{
    assert_true(index < pool->count);
    return &pool->chunks[index];
}

typedef struct {
    test_pool_t *pool;
    egm_te_t *provider;
    egm_te_t *consumer;
    egm_id_t provider_id;
    egm_id_t consumer_id;
    egm_segment_desc_t desc; /* chunk 0 */
    const test_chunk_t *chunk;
    uint16_t port;
    int fds_at_start;
    uint64_t live_at_start;
} fx_t;

static egm_te_t *make_te(egm_id_t id, egm_protocol_t protocol)
{
    egm_te_params_t params = {.client_id = id,
                              .protocol = protocol,
                              .local_hostname = "127.0.0.1",
                              .data_listen_host = "127.0.0.1",
                              .data_port = 0,
                              .io_timeout_ms = 5000};
    egm_te_t *te = NULL;
    assert_int_equal(egm__te_create(&params, &te), EGM_OK);
    return te;
}

static void set_consumer(fx_t *fx, egm_protocol_t protocol)
{
    egm__te_destroy(fx->consumer);
    fx->consumer = make_te(fx->consumer_id, protocol);
}

static void expose(fx_t *fx, size_t index, egm_segment_desc_t *desc)
{
    const test_chunk_t *c = test_pool_chunk(fx->pool, index);
    memset(desc, 0, sizeof(*desc));
    desc->id = egm__id_random();
    desc->owner = fx->provider_id;
    desc->size = c->size;
    strcpy(desc->name, "test/chunk");
    assert_int_equal(egm__te_expose_segment(fx->provider, desc, c->base, c->memfd), EGM_OK);
}

static fx_t *fx_open(uint64_t pool_size, uint64_t chunk_size)
{
    fx_t *fx = calloc(1, sizeof(*fx));
    assert_non_null(fx);
    fx->live_at_start = egm__alloc_live_count();
    fx->fds_at_start = egm_test_count_fds();
    fx->provider_id = egm__id_random();
    fx->consumer_id = egm__id_random();
    assert_int_equal(test_pool_create(pool_size, chunk_size, &fx->pool), EGM_OK);
    fx->provider = make_te(fx->provider_id, EGM_PROTOCOL_AUTO);
    fx->consumer = make_te(fx->consumer_id, EGM_PROTOCOL_AUTO);
    expose(fx, 0, &fx->desc);
    fx->chunk = test_pool_chunk(fx->pool, 0);
    const char *colon = strrchr(fx->desc.tcp_endpoint, ':');
    assert_non_null(colon);
    fx->port = (uint16_t)atoi(colon + 1);
    assert_true(fx->port > 0);
    return fx;
}

static int setup(void **state)
{
    *state = fx_open(2 << 20, 1 << 20);
    return 0;
}

static int teardown(void **state)
{
    fx_t *fx = *state;
    egm__te_destroy(fx->consumer);
    egm__te_destroy(fx->provider);
    test_pool_destroy(fx->pool);
    assert_int_equal(egm__alloc_live_count(), fx->live_at_start);
    assert_int_equal(egm_test_count_fds(), fx->fds_at_start);
    free(fx);
    return 0;
}

static egm_status_t xfer(egm_te_t *te, const egm_segment_desc_t *desc, uint64_t offset, void *buf,
                         size_t len, egm_te_dir_t dir)
{
    egm_te_op_t op = {.segment = desc, .offset = offset, .local = buf, .length = len, .dir = dir};
    egm_status_t st = egm__te_transfer(te, &op, 1);
    assert_int_equal(op.status, st);
    return st;
}

/* Write random bytes through the consumer and check them in the provider's
 * memory, then the other way round. */
static void round_trip(fx_t *fx, uint64_t offset, size_t len)
{
    uint8_t *out = malloc(len), *in = malloc(len);
    assert_non_null(out);
    assert_non_null(in);
    egm_test_fill_random(out, len);
    assert_int_equal(xfer(fx->consumer, &fx->desc, offset, out, len, EGM_TE_WRITE), EGM_OK);
    assert_memory_equal((uint8_t *)fx->chunk->base + offset, out, len);

    egm_test_fill_random((uint8_t *)fx->chunk->base + offset, len);
    assert_int_equal(xfer(fx->consumer, &fx->desc, offset, in, len, EGM_TE_READ), EGM_OK);
    assert_memory_equal(in, (uint8_t *)fx->chunk->base + offset, len);
    free(out);
    free(in);
}

static void test_shm_round_trip(void **state)
{
    fx_t *fx = *state;
    set_consumer(fx, EGM_PROTOCOL_SHM);
    egm_transport_t t;
    assert_int_equal(egm__te_route(fx->consumer, &fx->desc, &t), EGM_OK);
    assert_int_equal(t, EGM_TRANSPORT_SHM);
    round_trip(fx, 12345, 300000);
    round_trip(fx, 0, fx->desc.size);
    round_trip(fx, fx->desc.size - 1, 1);

    egm_te_stats_t cs, ps;
    egm__te_stats(fx->consumer, &cs);
    egm__te_stats(fx->provider, &ps);
    assert_int_equal(cs.mappings_live, 1);
    assert_int_equal(ps.shm_fds_sent, 1); /* mapped once, then cached */
    assert_int_equal(cs.bytes_written, 300000 + fx->desc.size + 1);
    assert_int_equal(ps.tcp_requests_served, 0);
}

static void test_tcp_round_trip(void **state)
{
    fx_t *fx = *state;
    set_consumer(fx, EGM_PROTOCOL_TCP);
    egm_transport_t t;
    assert_int_equal(egm__te_route(fx->consumer, &fx->desc, &t), EGM_OK);
    assert_int_equal(t, EGM_TRANSPORT_TCP);
    round_trip(fx, 777, 200000);
    round_trip(fx, 0, fx->desc.size);

    egm_te_stats_t cs, ps;
    egm__te_stats(fx->consumer, &cs);
    egm__te_stats(fx->provider, &ps);
    assert_int_equal(cs.mappings_live, 0);
    assert_int_equal(ps.shm_fds_sent, 0);
    assert_int_equal(ps.tcp_requests_served, 4);
    assert_int_equal(ps.tcp_requests_refused, 0);
}

/* A call's tcp ops stream on pooled connections (tcp_stream.c): 1100 reads
 * and writes, cut into 4 parts streamed at once (each more than the 64
 * requests a stream leaves unanswered), among them reads and writes of a
 * segment the server does not serve. A refused read leaves the connection
 * going; a refused write makes the server close it (once its refusal is
 * out), and the ops after it go on over a new one. Every op gets its own
 * status and bytes. */
static void test_tcp_batch_stream(void **state)
{
    fx_t *fx = *state;
    enum { N = 1100, LEN = 512, STRIDE = 768 };
    set_consumer(fx, EGM_PROTOCOL_TCP);
    egm_segment_desc_t ghost = fx->desc;
    ghost.id = egm__id_random(); /* same endpoint, not served there */
    uint8_t *local = malloc((size_t)N * LEN);
    assert_non_null(local);
    egm_test_fill_random(local, (size_t)N * LEN);
    uint8_t *pool = fx->chunk->base;
    egm_test_fill_random(pool, (size_t)N * STRIDE);
    egm_te_op_t *ops = calloc(N, sizeof(*ops));
    assert_non_null(ops);
    size_t refused = 0;
    for (size_t i = 0; i < N; i++) {
        int ghost_op = i % 7 == 3 || i == 150 || i == 1050; /* even ones: refused writes */
        ops[i] = (egm_te_op_t){.segment = ghost_op ? &ghost : &fx->desc,
                               .offset = i * STRIDE,
                               .local = local + i * LEN,
                               .length = LEN,
                               .dir = i % 2 == 0 ? EGM_TE_WRITE : EGM_TE_READ};
        refused += ghost_op;
    }
    assert_int_equal(ops[150].dir, EGM_TE_WRITE);
    assert_int_equal(ops[1050].dir, EGM_TE_WRITE);
    egm_te_stats_t before;
    egm__te_stats(fx->provider, &before);

    assert_int_equal(egm__te_transfer(fx->consumer, ops, N), EGM_ERR_SEGMENT_NOT_FOUND);
    assert_non_null(strstr(egm_last_error(), "READ of segment")); /* op 3's, the first */
    assert_non_null(strstr(egm_last_error(), "refused by the server"));
    for (size_t i = 0; i < N; i++) {
        if (ops[i].segment == &ghost) {
            assert_int_equal(ops[i].status, EGM_ERR_SEGMENT_NOT_FOUND);
            continue;
        }
        assert_int_equal(ops[i].status, EGM_OK);
        assert_memory_equal(pool + i * STRIDE, local + i * LEN, LEN); /* written or read */
    }
    egm_te_stats_t after;
    egm__te_stats(fx->provider, &after);
    assert_int_equal(after.tcp_requests_served - before.tcp_requests_served, N - refused);
    assert_int_equal(after.tcp_requests_refused - before.tcp_requests_refused, refused);

    /* The pooled connections still serve a call of every op. */
    for (size_t i = 0; i < N; i++)
        ops[i].segment = &fx->desc;
    egm_test_fill_random(local, (size_t)N * LEN);
    egm_test_fill_random(pool, (size_t)N * STRIDE);
    assert_int_equal(egm__te_transfer(fx->consumer, ops, N), EGM_OK);
    for (size_t i = 0; i < N; i++)
        assert_memory_equal(pool + i * STRIDE, local + i * LEN, LEN);
    free(ops);
    free(local);
}

static void test_tcp_splits_big_transfers(void **state)
{
    fx_t *fx = *state;
    /* A segment bigger than one client request (64 MiB). */
    teardown(state);
    fx = fx_open(72 << 20, 72 << 20);
    *state = fx;
    set_consumer(fx, EGM_PROTOCOL_TCP);
    round_trip(fx, 4096, (72 << 20) - 8192);
    egm_te_stats_t ps;
    egm__te_stats(fx->provider, &ps);
    assert_int_equal(ps.tcp_requests_served, 4); /* 2 per direction */

    /* The same through a single transfer (a batch of one op: its two requests
     * go as two parts, on two connections at once), then nothing for an
     * empty range, and a range past the end refused with its piece named. */
    egm_tcp_client_t *tcp = NULL;
    assert_int_equal(egm__tcp_client_create(5000, NULL, &tcp), EGM_OK);
    size_t len = (72 << 20) - 8192;
    uint8_t *out = malloc(len), *in = malloc(len);
    assert_non_null(out);
    assert_non_null(in);
    egm_test_fill_random(out, len);
    const char *ep = fx->desc.tcp_endpoint;
    assert_int_equal(egm__tcp_client_transfer(tcp, ep, fx->desc.id, 4096, out, len, EGM_TE_WRITE),
                     EGM_OK);
    assert_memory_equal((uint8_t *)fx->chunk->base + 4096, out, len);
    assert_int_equal(egm__tcp_client_transfer(tcp, ep, fx->desc.id, 4096, in, len, EGM_TE_READ),
                     EGM_OK);
    assert_memory_equal(in, out, len);
    assert_int_equal(egm__tcp_client_transfer(tcp, ep, fx->desc.id, 0, in, 0, EGM_TE_READ), EGM_OK);
    egm__te_stats(fx->provider, &ps);
    assert_int_equal(ps.tcp_requests_served, 8);
    assert_int_equal(egm__tcp_client_transfer(tcp, ep, fx->desc.id, fx->desc.size - 4096, in, 8192,
                                              EGM_TE_WRITE),
                     EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "tcp: WRITE of segment"));
    assert_non_null(strstr(egm_last_error(), "refused by the server"));
    egm__te_stats(fx->provider, &ps);
    assert_int_equal(ps.tcp_requests_refused, 1);
    /* The connections still serve. */
    assert_int_equal(egm__tcp_client_transfer(tcp, ep, fx->desc.id, 4096, in, 4096, EGM_TE_READ),
                     EGM_OK);
    assert_memory_equal(in, out, 4096);
    egm__tcp_client_destroy(tcp);
    free(out);
    free(in);
}

static void test_routes(void **state)
{
    fx_t *fx = *state;
    egm_transport_t t;
    /* Own segment, exposed here -> memcpy whatever the protocol. */
    assert_int_equal(egm__te_route(fx->provider, &fx->desc, &t), EGM_OK);
    assert_int_equal(t, EGM_TRANSPORT_LOCAL);
    /* Same host with a shm socket -> shm under auto. */
    assert_int_equal(egm__te_route(fx->consumer, &fx->desc, &t), EGM_OK);
    assert_int_equal(t, EGM_TRANSPORT_SHM);

    /* Another host -> tcp under auto; refused (clearly) under shm. */
    egm_segment_desc_t remote = fx->desc;
    strcpy(remote.host_id, "some-other-host");
    assert_int_equal(egm__te_route(fx->consumer, &remote, &t), EGM_OK);
    assert_int_equal(t, EGM_TRANSPORT_TCP);
    set_consumer(fx, EGM_PROTOCOL_SHM);
    assert_int_equal(egm__te_route(fx->consumer, &remote, &t), EGM_ERR_NOT_SUPPORTED);
    assert_non_null(strstr(egm_last_error(), "some-other-host"));
    uint8_t buf[16];
    assert_int_equal(xfer(fx->consumer, &remote, 0, buf, sizeof(buf), EGM_TE_READ),
                     EGM_ERR_NOT_SUPPORTED);

    /* No endpoint at all. */
    set_consumer(fx, EGM_PROTOCOL_AUTO);
    remote.tcp_endpoint[0] = '\0';
    assert_int_equal(egm__te_route(fx->consumer, &remote, &t), EGM_ERR_NOT_SUPPORTED);

    /* Same owner id but not exposed by this engine is not "own". */
    egm_segment_desc_t stranger = fx->desc;
    stranger.id = egm__id_random();
    assert_int_equal(egm__te_route(fx->provider, &stranger, &t), EGM_OK);
    assert_int_equal(t, EGM_TRANSPORT_SHM);
}

static void test_local_transfer(void **state)
{
    fx_t *fx = *state;
    uint8_t out[5000], in[5000];
    egm_test_fill_random(out, sizeof(out));
    assert_int_equal(xfer(fx->provider, &fx->desc, 100, out, sizeof(out), EGM_TE_WRITE), EGM_OK);
    assert_memory_equal((uint8_t *)fx->chunk->base + 100, out, sizeof(out));
    assert_int_equal(xfer(fx->provider, &fx->desc, 100, in, sizeof(in), EGM_TE_READ), EGM_OK);
    assert_memory_equal(in, out, sizeof(out));
    egm_te_stats_t ps;
    egm__te_stats(fx->provider, &ps);
    assert_int_equal(ps.shm_fds_sent, 0);
    assert_int_equal(ps.tcp_requests_served, 0);
}

static void check_route_level_bounds(fx_t *fx)
{
    uint8_t buf[64];
    uint64_t size = fx->desc.size;
    assert_int_equal(xfer(fx->consumer, &fx->desc, size, buf, 1, EGM_TE_READ), EGM_ERR_INVALID_ARG);
    assert_int_equal(xfer(fx->consumer, &fx->desc, size - 10, buf, 11, EGM_TE_WRITE),
                     EGM_ERR_INVALID_ARG);
    assert_int_equal(xfer(fx->consumer, &fx->desc, UINT64_MAX - 5, buf, 10, EGM_TE_READ),
                     EGM_ERR_INVALID_ARG);
    assert_int_equal(xfer(fx->consumer, &fx->desc, 0, buf, 0, EGM_TE_READ), EGM_ERR_INVALID_ARG);
    assert_int_equal(xfer(fx->consumer, &fx->desc, 0, NULL, 10, EGM_TE_READ), EGM_ERR_INVALID_ARG);
    /* A descriptor that claims more than the provider has is stopped by the
     * transport: the shm mapping size or the tcp server's check. */
    egm_segment_desc_t liar = fx->desc;
    liar.size = size * 2;
    egm_status_t st = xfer(fx->consumer, &liar, size, buf, sizeof(buf), EGM_TE_READ);
    assert_int_not_equal(st, EGM_OK);
}

static void test_route_level_bounds(void **state)
{
    fx_t *fx = *state;
    set_consumer(fx, EGM_PROTOCOL_TCP);
    check_route_level_bounds(fx);
    set_consumer(fx, EGM_PROTOCOL_SHM);
    check_route_level_bounds(fx);
    egm_te_stats_t ps;
    egm__te_stats(fx->provider, &ps);
    assert_int_equal(ps.tcp_requests_refused, 1); /* only the lying descriptor got there */

    /* Several ops: each gets its own status, the first failure is returned. */
    uint8_t a[8], b[8];
    egm_te_op_t ops[3] = {
        {.segment = &fx->desc, .offset = 0, .local = a, .length = 8, .dir = EGM_TE_READ},
        {.segment = &fx->desc,
         .offset = fx->desc.size,
         .local = b,
         .length = 8,
         .dir = EGM_TE_READ},
        {.segment = NULL, .offset = 0, .local = b, .length = 8, .dir = EGM_TE_READ},
    };
    assert_int_equal(egm__te_transfer(fx->consumer, ops, 3), EGM_ERR_INVALID_ARG);
    assert_int_equal(ops[0].status, EGM_OK);
    assert_int_equal(ops[1].status, EGM_ERR_INVALID_ARG);
    assert_int_equal(ops[2].status, EGM_ERR_INVALID_ARG);
}

/* ---- raw tcp client ------------------------------------------------------- */

static int raw_connect(fx_t *fx)
{
    int fd = -1;
    assert_int_equal(egm__sock_tcp_connect("127.0.0.1", fx->port, 5000, &fd), EGM_OK);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

static void raw_send(int fd, uint32_t magic, uint16_t version, uint16_t op, egm_id_t seg,
                     uint64_t offset, uint64_t length)
{
    egm_tcp_req_t req = {.magic = magic,
                         .version = version,
                         .op = op,
                         .request_id = 42,
                         .segment = seg,
                         .offset = offset,
                         .length = length};
    uint8_t buf[EGM_TCP_REQ_SIZE];
    egm__tcp_req_encode(&req, buf);
    assert_int_equal(send(fd, buf, sizeof(buf), MSG_NOSIGNAL), (ssize_t)sizeof(buf));
}

/* Reads a reply; returns its status, or 1 if the server closed instead. */
static int raw_reply(int fd, uint64_t *length_p)
{
    uint8_t buf[EGM_TCP_REPLY_SIZE];
    size_t got = 0;
    while (got < sizeof(buf)) {
        ssize_t n = recv(fd, buf + got, sizeof(buf) - got, 0);
        if (n <= 0)
            return 1;
        got += (size_t)n;
    }
    egm_tcp_reply_t reply;
    egm__tcp_reply_decode(buf, &reply);
    assert_int_equal(reply.magic, EGM_TCP_REPLY_MAGIC);
    assert_int_equal(reply.request_id, 42);
    if (length_p)
        *length_p = reply.length;
    return reply.status;
}

static int is_closed(int fd)
{
    char c;
    return recv(fd, &c, 1, 0) == 0;
}

/* The tcp path of a normal client still works (on a fresh consumer). */
static void good_client_still_served(fx_t *fx)
{
    set_consumer(fx, EGM_PROTOCOL_TCP);
    round_trip(fx, 4096, 8192);
}

static void test_tcp_server_refuses_bad_requests(void **state)
{
    fx_t *fx = *state;
    uint64_t size = fx->desc.size, len;
    uint8_t data[100];
    egm_te_stats_t ps;

    /* READ beyond the segment: error reply, connection stays usable. */
    int fd = raw_connect(fx);
    raw_send(fd, EGM_TCP_MAGIC, EGM_TCP_VERSION, EGM_TCP_OP_READ, fx->desc.id, size - 50, 100);
    assert_int_equal(raw_reply(fd, &len), EGM_ERR_INVALID_ARG);
    assert_int_equal(len, 0);
    raw_send(fd, EGM_TCP_MAGIC, EGM_TCP_VERSION, EGM_TCP_OP_READ, fx->desc.id, UINT64_MAX, 100);
    assert_int_equal(raw_reply(fd, NULL), EGM_ERR_INVALID_ARG);
    /* READ of an unknown segment. */
    raw_send(fd, EGM_TCP_MAGIC, EGM_TCP_VERSION, EGM_TCP_OP_READ, egm__id_random(), 0, 100);
    assert_int_equal(raw_reply(fd, NULL), EGM_ERR_SEGMENT_NOT_FOUND);
    /* Huge and zero lengths. */
    raw_send(fd, EGM_TCP_MAGIC, EGM_TCP_VERSION, EGM_TCP_OP_READ, fx->desc.id, 0, 1ull << 40);
    assert_int_equal(raw_reply(fd, NULL), EGM_ERR_INVALID_ARG);
    raw_send(fd, EGM_TCP_MAGIC, EGM_TCP_VERSION, EGM_TCP_OP_READ, fx->desc.id, 0, 0);
    assert_int_equal(raw_reply(fd, NULL), EGM_ERR_INVALID_ARG);
    /* ...and a good READ on the same connection. */
    memset((uint8_t *)fx->chunk->base + 10, 0x77, sizeof(data));
    raw_send(fd, EGM_TCP_MAGIC, EGM_TCP_VERSION, EGM_TCP_OP_READ, fx->desc.id, 10, sizeof(data));
    assert_int_equal(raw_reply(fd, &len), EGM_OK);
    assert_int_equal(len, sizeof(data));
    assert_int_equal(recv(fd, data, sizeof(data), MSG_WAITALL), (ssize_t)sizeof(data));
    for (size_t i = 0; i < sizeof(data); i++)
        assert_int_equal(data[i], 0x77);
    close(fd);
    good_client_still_served(fx);

    /* WRITE beyond the segment: error reply, then the server closes without
     * reading the payload. */
    fd = raw_connect(fx);
    raw_send(fd, EGM_TCP_MAGIC, EGM_TCP_VERSION, EGM_TCP_OP_WRITE, fx->desc.id, size, 1 << 20);
    assert_int_equal(raw_reply(fd, NULL), EGM_ERR_INVALID_ARG);
    assert_true(is_closed(fd));
    close(fd);
    good_client_still_served(fx);

    /* WRITE of a hostile length to an unknown segment. */
    fd = raw_connect(fx);
    raw_send(fd, EGM_TCP_MAGIC, EGM_TCP_VERSION, EGM_TCP_OP_WRITE, egm__id_random(), 0, UINT64_MAX);
    assert_int_equal(raw_reply(fd, NULL), EGM_ERR_INVALID_ARG);
    assert_true(is_closed(fd));
    close(fd);
    fd = raw_connect(fx);
    raw_send(fd, EGM_TCP_MAGIC, EGM_TCP_VERSION, EGM_TCP_OP_WRITE, egm__id_random(), 0, 100);
    assert_int_equal(raw_reply(fd, NULL), EGM_ERR_SEGMENT_NOT_FOUND);
    assert_true(is_closed(fd));
    close(fd);
    good_client_still_served(fx);

    /* Bad magic, bad version, bad op. */
    fd = raw_connect(fx);
    raw_send(fd, 0xdeadbeef, EGM_TCP_VERSION, EGM_TCP_OP_READ, fx->desc.id, 0, 10);
    assert_int_equal(raw_reply(fd, NULL), 1);
    close(fd);
    fd = raw_connect(fx);
    raw_send(fd, EGM_TCP_MAGIC, 99, EGM_TCP_OP_READ, fx->desc.id, 0, 10);
    assert_int_equal(raw_reply(fd, NULL), 1);
    close(fd);
    fd = raw_connect(fx);
    raw_send(fd, EGM_TCP_MAGIC, EGM_TCP_VERSION, 7, fx->desc.id, 0, 10);
    assert_int_equal(raw_reply(fd, NULL), EGM_ERR_INVALID_ARG);
    assert_true(is_closed(fd));
    close(fd);
    /* A truncated header, then hang up. */
    fd = raw_connect(fx);
    assert_int_equal(send(fd, "EMGT", 4, MSG_NOSIGNAL), 4);
    close(fd);
    good_client_still_served(fx);

    egm__te_stats(fx->provider, &ps);
    assert_int_equal(ps.tcp_requests_refused, 11);
}

/* ---- raw fd broker client ------------------------------------------------- */

static int broker_connect(const char *name)
{
    int fd = -1;
    assert_int_equal(egm__sock_unix_connect(name, &fd), EGM_OK);
    struct timeval tv = {.tv_sec = 5};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    return fd;
}

/* Receives a broker reply; returns the number of descriptors attached (closing
 * them), or -1 if the broker closed without a reply. */
static int broker_reply(int fd, int32_t *status_p, uint64_t *size_p)
{
    uint8_t buf[EGM_BROKER_REPLY_SIZE];
    char control[CMSG_SPACE(sizeof(int) * 4)];
    struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
    struct msghdr msg = {.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = control,
                         .msg_controllen = sizeof(control)};
    ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n <= 0)
        return -1;
    assert_int_equal(n, sizeof(buf));
    int fds = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&msg); c != NULL; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
            for (size_t i = 0; i < k; i++) {
                int got;
                memcpy(&got, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
                close(got);
                fds++;
            }
        }
    }
    assert_int_equal(egm__wire_get_u32(buf), EGM_BROKER_REPLY_MAGIC);
    *status_p = (int32_t)egm__wire_get_u32(buf + 4);
    *size_p = egm__wire_get_u64(buf + 8);
    return fds;
}

static void broker_request(int fd, uint32_t magic, egm_id_t id)
{
    uint8_t req[EGM_BROKER_REQ_SIZE] = {0};
    egm__wire_put_u32(req, magic);
    egm__wire_put_u16(req + 4, EGM_BROKER_VERSION);
    egm__wire_put_id(req + 8, id);
    assert_int_equal(send(fd, req, sizeof(req), MSG_NOSIGNAL), (ssize_t)sizeof(req));
}

static void test_shm_refuses_unsealed_memfd(void **state)
{
    fx_t *fx = *state;
    /* A memfd its provider could still truncate would let copies fault here. */
    int memfd = memfd_create("egmstore-unsealed", MFD_CLOEXEC);
    assert_true(memfd >= 0);
    assert_int_equal(ftruncate(memfd, 4096), 0);
    void *base = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    assert_true(base != MAP_FAILED);
    egm_segment_desc_t desc;
    memset(&desc, 0, sizeof(desc));
    desc.id = egm__id_random();
    desc.owner = fx->provider_id;
    desc.size = 4096;
    assert_int_equal(egm__te_expose_segment(fx->provider, &desc, base, memfd), EGM_OK);

    set_consumer(fx, EGM_PROTOCOL_SHM);
    uint8_t buf[64];
    assert_int_equal(xfer(fx->consumer, &desc, 0, buf, sizeof(buf), EGM_TE_READ),
                     EGM_ERR_PERMISSION);
    assert_non_null(strstr(egm_last_error(), "sealed"));
    /* tcp still serves it. */
    set_consumer(fx, EGM_PROTOCOL_TCP);
    assert_int_equal(xfer(fx->consumer, &desc, 0, buf, sizeof(buf), EGM_TE_READ), EGM_OK);

    assert_int_equal(egm__te_withdraw_segment(fx->provider, desc.id), EGM_OK);
    munmap(base, 4096);
    close(memfd);
}

static void test_fd_broker(void **state)
{
    fx_t *fx = *state;
    int32_t status;
    uint64_t size;

    /* Known segment: status OK, its size and one descriptor. */
    int fd = broker_connect(fx->desc.shm_socket);
    broker_request(fd, EGM_BROKER_MAGIC, fx->desc.id);
    assert_int_equal(broker_reply(fd, &status, &size), 1);
    assert_int_equal(status, EGM_OK);
    assert_int_equal(size, fx->desc.size);
    close(fd);

    /* Unknown segment: error status and no descriptor. */
    fd = broker_connect(fx->desc.shm_socket);
    broker_request(fd, EGM_BROKER_MAGIC, egm__id_random());
    assert_int_equal(broker_reply(fd, &status, &size), 0);
    assert_int_equal(status, EGM_ERR_SEGMENT_NOT_FOUND);
    close(fd);

    /* Malformed request: closed without a reply. */
    fd = broker_connect(fx->desc.shm_socket);
    broker_request(fd, 0x12345678, fx->desc.id);
    assert_int_equal(broker_reply(fd, &status, &size), -1);
    close(fd);

    /* Through the engine: an unknown segment on this host fails cleanly. */
    set_consumer(fx, EGM_PROTOCOL_SHM);
    egm_segment_desc_t unknown = fx->desc;
    unknown.id = egm__id_random();
    uint8_t buf[16];
    assert_int_equal(xfer(fx->consumer, &unknown, 0, buf, sizeof(buf), EGM_TE_READ),
                     EGM_ERR_SEGMENT_NOT_FOUND);
    /* A descriptor whose size disagrees with the memfd is refused. */
    egm_segment_desc_t wrong = fx->desc;
    wrong.size = fx->desc.size / 2;
    assert_int_equal(xfer(fx->consumer, &wrong, 0, buf, sizeof(buf), EGM_TE_READ),
                     EGM_ERR_PROTOCOL);

    egm_te_stats_t ps, cs;
    egm__te_stats(fx->provider, &ps);
    egm__te_stats(fx->consumer, &cs);
    assert_int_equal(ps.shm_fds_sent, 2);
    assert_int_equal(cs.mappings_live, 0);
}

static void test_fd_broker_refuses_other_users(void **state)
{
    fx_t *fx = *state;
    if (geteuid() != 0) {
        /* Needs root to become another user. */
        EGM_SKIP("needs root to become another user");
    }
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        /* Child: async-signal-safe calls only (the parent has threads). */
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(2);
        int fd;
        if (egm__sock_unix_connect(fx->desc.shm_socket, &fd) != EGM_OK)
            _exit(3);
        uint8_t req[EGM_BROKER_REQ_SIZE] = {0};
        egm__wire_put_u32(req, EGM_BROKER_MAGIC);
        egm__wire_put_u16(req + 4, EGM_BROKER_VERSION);
        egm__wire_put_id(req + 8, fx->desc.id);
        (void)send(fd, req, sizeof(req), MSG_NOSIGNAL);
        char reply[EGM_BROKER_REPLY_SIZE];
        ssize_t n = recv(fd, reply, sizeof(reply), 0);
        /* refused = a PERMISSION reply without a descriptor, then closed */
        _exit(n == (ssize_t)sizeof(reply) &&
                      egm__wire_get_u32((const uint8_t *)reply + 4) == (uint32_t)EGM_ERR_PERMISSION
                  ? 0
                  : 1);
    }
    int wstatus;
    assert_int_equal(waitpid(pid, &wstatus, 0), pid);
    assert_true(WIFEXITED(wstatus));
    assert_int_equal(WEXITSTATUS(wstatus), 0);
    egm_te_stats_t ps;
    egm__te_stats(fx->provider, &ps);
    assert_int_equal(ps.shm_peers_refused, 1);
    assert_int_equal(ps.shm_fds_sent, 0);
}

static void test_forget_then_remap(void **state)
{
    fx_t *fx = *state;
    set_consumer(fx, EGM_PROTOCOL_SHM);
    round_trip(fx, 0, 4096);
    egm_te_stats_t cs, ps;
    egm__te_stats(fx->consumer, &cs);
    assert_int_equal(cs.mappings_live, 1);

    egm__te_forget_segment(fx->consumer, fx->desc.id);
    egm__te_stats(fx->consumer, &cs);
    assert_int_equal(cs.mappings_live, 0);
    egm__te_forget_segment(fx->consumer, fx->desc.id); /* twice is harmless */

    round_trip(fx, 8192, 4096);
    egm__te_stats(fx->consumer, &cs);
    egm__te_stats(fx->provider, &ps);
    assert_int_equal(cs.mappings_live, 1);
    assert_int_equal(ps.shm_fds_sent, 2);
}

typedef struct {
    fx_t *fx;
    int failures;
} reader_arg_t;

static void *reader_main(void *p)
{
    reader_arg_t *arg = p;
    static uint8_t buf[65536];
    for (int i = 0; i < 300; i++) {
        if (xfer(arg->fx->consumer, &arg->fx->desc, 4096, buf, sizeof(buf), EGM_TE_READ) != EGM_OK)
            arg->failures++;
        else if (memcmp(buf, (uint8_t *)arg->fx->chunk->base + 4096, sizeof(buf)) != 0)
            arg->failures++;
    }
    return NULL;
}

static void test_forget_while_transfers_run(void **state)
{
    fx_t *fx = *state;
    set_consumer(fx, EGM_PROTOCOL_SHM);
    egm_test_fill_random(fx->chunk->base, fx->chunk->size);
    reader_arg_t arg = {.fx = fx};
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, reader_main, &arg), 0);
    /* Forgetting under a running transfer defers the unmap to its end: the
     * reader never sees a failure or a fault. */
    for (int i = 0; i < 300; i++) {
        egm__te_forget_segment(fx->consumer, fx->desc.id);
        sched_yield();
    }
    pthread_join(thread, NULL);
    assert_int_equal(arg.failures, 0);
    egm__te_forget_segment(fx->consumer, fx->desc.id);
    egm_te_stats_t cs;
    egm__te_stats(fx->consumer, &cs);
    assert_int_equal(cs.mappings_live, 0);
}

static void test_withdraw_then_transfer_fails(void **state)
{
    fx_t *fx = *state;
    uint8_t buf[4096];
    assert_int_equal(egm__te_withdraw_segment(fx->provider, fx->desc.id), EGM_OK);
    assert_int_equal(egm__te_withdraw_segment(fx->provider, fx->desc.id),
                     EGM_ERR_SEGMENT_NOT_FOUND);

    set_consumer(fx, EGM_PROTOCOL_TCP);
    assert_int_equal(xfer(fx->consumer, &fx->desc, 0, buf, sizeof(buf), EGM_TE_READ),
                     EGM_ERR_SEGMENT_NOT_FOUND);
    assert_int_equal(xfer(fx->consumer, &fx->desc, 0, buf, sizeof(buf), EGM_TE_WRITE),
                     EGM_ERR_SEGMENT_NOT_FOUND);
    set_consumer(fx, EGM_PROTOCOL_SHM);
    assert_int_equal(xfer(fx->consumer, &fx->desc, 0, buf, sizeof(buf), EGM_TE_READ),
                     EGM_ERR_SEGMENT_NOT_FOUND);
    /* The provider's own route no longer treats it as local memory. */
    egm_transport_t t;
    assert_int_equal(egm__te_route(fx->provider, &fx->desc, &t), EGM_OK);
    assert_int_not_equal(t, EGM_TRANSPORT_LOCAL);

    /* Exposing it again (same id) works, and so do transfers. */
    const test_chunk_t *c = fx->chunk;
    assert_int_equal(egm__te_expose_segment(fx->provider, &fx->desc, c->base, c->memfd), EGM_OK);
    assert_int_equal(egm__te_expose_segment(fx->provider, &fx->desc, c->base, c->memfd),
                     EGM_ERR_SEGMENT_EXISTS);
    round_trip(fx, 0, 4096);
}

typedef struct {
    fx_t *fx;
    egm_segment_desc_t desc;
    int ok, not_found, other;
} withdraw_arg_t;

static void *tcp_writer_main(void *p)
{
    withdraw_arg_t *arg = p;
    uint8_t *buf = malloc(1 << 20);
    memset(buf, 0xaa, 1 << 20);
    for (int i = 0; i < 200; i++) {
        egm_status_t st = xfer(arg->fx->consumer, &arg->desc, 0, buf, 1 << 20, EGM_TE_WRITE);
        if (st == EGM_OK)
            arg->ok++;
        else if (st == EGM_ERR_SEGMENT_NOT_FOUND)
            arg->not_found++;
        else
            arg->other++;
    }
    free(buf);
    return NULL;
}

static void test_withdraw_waits_for_requests_in_flight(void **state)
{
    fx_t *fx = *state;
    set_consumer(fx, EGM_PROTOCOL_TCP);
    /* Chunk 1, written by a thread while the main thread withdraws it. */
    withdraw_arg_t arg = {.fx = fx};
    expose(fx, 1, &arg.desc);
    uint8_t *mem = test_pool_chunk(fx->pool, 1)->base;
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, tcp_writer_main, &arg), 0);
    uint8_t probe[16];
    for (int i = 0; i < 20; i++)
        (void)xfer(fx->consumer, &fx->desc, 0, probe, sizeof(probe), EGM_TE_READ);
    assert_int_equal(egm__te_withdraw_segment(fx->provider, arg.desc.id), EGM_OK);
    /* Once withdraw returns no request may touch the memory: clear it and
     * check that no write lands afterwards. */
    memset(mem, 0, 1 << 20);
    pthread_join(thread, NULL);
    assert_int_equal(arg.other, 0);
    assert_int_equal(arg.ok + arg.not_found, 200);
    for (size_t i = 0; i < (1 << 20); i++)
        if (mem[i] != 0)
            fail_msg("byte %zu written after withdraw returned", i);
    assert_int_equal(xfer(fx->consumer, &arg.desc, 0, probe, sizeof(probe), EGM_TE_READ),
                     EGM_ERR_SEGMENT_NOT_FOUND);
}

static void test_transport_names(void **state)
{
    (void)state;
    assert_string_equal(egm__transport_name(EGM_TRANSPORT_LOCAL), "local");
    assert_string_equal(egm__transport_name(EGM_TRANSPORT_SHM), "shm");
    assert_string_equal(egm__transport_name(EGM_TRANSPORT_TCP), "tcp");
}

int main(void)
{
    /* Warm up process-wide statics (host id) before fds are counted. */
    (void)egm__host_id();
    (void)egm__host_name();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_shm_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tcp_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tcp_splits_big_transfers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tcp_batch_stream, setup, teardown),
        cmocka_unit_test_setup_teardown(test_routes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_local_transfer, setup, teardown),
        cmocka_unit_test_setup_teardown(test_route_level_bounds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_tcp_server_refuses_bad_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fd_broker, setup, teardown),
        cmocka_unit_test_setup_teardown(test_shm_refuses_unsealed_memfd, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fd_broker_refuses_other_users, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forget_then_remap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_forget_while_transfers_run, setup, teardown),
        cmocka_unit_test_setup_teardown(test_withdraw_then_transfer_fails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_withdraw_waits_for_requests_in_flight, setup,
                                        teardown),
        cmocka_unit_test(test_transport_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
