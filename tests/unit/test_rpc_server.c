/* RPC server and client over loopback: replies reach their callers under
 * concurrency, calls begun one after the other (egm__rpc_begin) reach the
 * server in that order and each end gets its own reply (or TIMEOUT counted
 * from its begin, or UNREACHABLE when the server goes), malformed frames get the documented
 * treatment without disturbing well-formed peers, handler errors travel back with their text,
 * timeouts drop late replies, a lost connection fails calls and the next call
 * reconnects (to where a resolver says the master is now, also after a
 * timeout on a master that no longer answers), except on a client that
 * connects once only; clients of a loopback address reach a server's local
 * Unix socket when they prefer it and it exists, and TCP otherwise; servers on several threads
 * sharing listeners split the connections between them; a handler that holds its reply lets the
 * reactor serve the requests behind it, and the reply (or error) released later from another
 * thread reaches its caller (also one that half-closed after its request), or is dropped when
 * its connection or server is gone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/reactor.h"
#include "common/sock.h"
#include "rpc/client.h"
#include "rpc/frame.h"
#include "rpc/proto_util.h"
#include "rpc/server.h"
#include "support/testutil.h"

#define MAX_FRAME (1u << 20)
#define TYPE_ECHO EGM_RPC_PING
#define TYPE_FAIL EGM_RPC_REMOVE
#define TYPE_DECODE EGM_RPC_PUT_START
#define TYPE_HUGE EGM_RPC_LIST_SEGMENTS
#define TYPE_UNKNOWN 200

typedef struct {
    egm_reactor_t *reactor;
    egm_rpc_server_t *server;
    pthread_t thread;
    uint16_t port;
    char addr[64];
} env_t;

/* --- handlers (reactor thread) --------------------------------------------- */

static egm_status_t echo_handler(void *arg, uint16_t type, const uint8_t *payload, size_t len,
                                 egm_rpc_reply_t *reply)
{
    (void)arg;
    (void)type;
    if (len == 0)
        return EGM_OK; /* empty reply, no buffer */
    reply->buf = egm_malloc(len, "test_echo");
    if (reply->buf == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "echo");
    memcpy(reply->buf, payload, len);
    reply->len = len;
    return EGM_OK;
}

static egm_status_t fail_handler(void *arg, uint16_t type, const uint8_t *payload, size_t len,
                                 egm_rpc_reply_t *reply)
{
    (void)arg;
    (void)type;
    (void)reply;
    return egm__set_error(EGM_ERR_NOT_FOUND, "no such key '%.*s'", (int)len, (const char *)payload);
}

/* Decodes a PutStartRequest and answers a StatusReply naming its first key. */
static egm_status_t decode_handler(void *arg, uint16_t type, const uint8_t *payload, size_t len,
                                   egm_rpc_reply_t *reply)
{
    ProtobufCMessage *msg;
    egm_status_t status;
    (void)arg;
    (void)type;

    status = egm__pb_unpack(&egm__put_start_request__descriptor, payload, len, &msg);
    if (status != EGM_OK)
        return status;
    Egm__PutStartRequest *req = (Egm__PutStartRequest *)msg;
    Egm__StatusReply sr = EGM__STATUS_REPLY__INIT;
    sr.error = req->n_keys ? req->keys[0] : "";
    status = egm__pb_pack(&sr.base, &reply->buf, &reply->len);
    egm__pb_free(msg);
    return status;
}

static egm_status_t huge_handler(void *arg, uint16_t type, const uint8_t *payload, size_t len,
                                 egm_rpc_reply_t *reply)
{
    (void)arg;
    (void)type;
    (void)payload;
    (void)len;
    reply->len = MAX_FRAME + 1;
    reply->buf = egm_calloc(1, reply->len, "test_huge");
    return reply->buf ? EGM_OK : egm__set_error(EGM_ERR_NO_MEMORY, "huge");
}

/* Notes the order in which requests reach it (their first byte), and echoes. */
#define TYPE_ORDER EGM_RPC_HA_APPLY
static char order_seen[16];
static size_t n_order_seen;

static egm_status_t order_handler(void *arg, uint16_t type, const uint8_t *payload, size_t len,
                                  egm_rpc_reply_t *reply)
{
    if (len > 0 && n_order_seen < sizeof(order_seen))
        order_seen[n_order_seen++] = (char)payload[0];
    return echo_handler(arg, type, payload, len, reply);
}

/* Holds its reply (egm__rpc_server_hold) for the test thread to release. */
#define TYPE_HOLD EGM_RPC_GET_REPLICA_LIST
static egm_rpc_hold_t *held[8];
static size_t n_held, n_taken;
static int held_others_waiting[8]; /* egm__rpc_server_others_waiting() in each */
static size_t n_seen;
static pthread_mutex_t held_lock = PTHREAD_MUTEX_INITIALIZER;
static sem_t held_sem;

static egm_status_t hold_handler(void *arg, uint16_t type, const uint8_t *payload, size_t len,
                                 egm_rpc_reply_t *reply)
{
    (void)arg;
    (void)type;
    (void)payload;
    (void)len;
    int waiting = egm__rpc_server_others_waiting();
    egm_rpc_hold_t *h = egm__rpc_server_hold();
    if (h == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "hold");
    /* A second hold of the same request is refused. */
    if (egm__rpc_server_hold() != NULL)
        return egm__set_error(EGM_ERR_INTERNAL, "held twice");
    /* Whatever the handler leaves in reply is not sent (and not leaked). */
    reply->buf = egm_malloc(4, "test_hold");
    reply->len = 4;
    pthread_mutex_lock(&held_lock);
    held[n_held++ % 8] = h;
    held_others_waiting[n_seen++ % 8] = waiting;
    pthread_mutex_unlock(&held_lock);
    sem_post(&held_sem);
    return EGM_OK;
}

/* The oldest hold not taken yet, once it is there. */
static egm_rpc_hold_t *next_held(void)
{
    assert_int_equal(sem_wait(&held_sem), 0);
    pthread_mutex_lock(&held_lock);
    egm_rpc_hold_t *h = held[n_taken++ % 8];
    pthread_mutex_unlock(&held_lock);
    return h;
}

static void release_text(egm_rpc_hold_t *h, const char *text)
{
    size_t n = strlen(text);
    uint8_t *buf = egm_malloc(n, "test_hold");
    assert_non_null(buf);
    memcpy(buf, text, n);
    egm__rpc_hold_release(h, EGM_OK, buf, n, NULL);
}

/* --- environment ------------------------------------------------------------ */

static void *reactor_main(void *arg)
{
    egm__reactor_run(arg);
    return NULL;
}

/* Reactor + server on host:port (0 = any), running on its own thread; with
 * `local`, also on its local Unix socket name. */
static void env_start_on(env_t *env, const char *host, uint16_t port, size_t max_connections,
                         int local)
{
    egm_rpc_server_params_t params = {
        .host = host,
        .port = port,
        .max_frame_size = MAX_FRAME,
        .max_connections = max_connections,
    };

    memset(env, 0, sizeof(*env));
    assert_int_equal(egm__reactor_create(&env->reactor), EGM_OK);
    assert_int_equal(egm__rpc_server_create(env->reactor, &params, &env->server), EGM_OK);
    assert_int_equal(egm__rpc_server_register(env->server, TYPE_ECHO, echo_handler, NULL), EGM_OK);
    assert_int_equal(egm__rpc_server_register(env->server, TYPE_FAIL, fail_handler, NULL), EGM_OK);
    assert_int_equal(egm__rpc_server_register(env->server, TYPE_DECODE, decode_handler, NULL),
                     EGM_OK);
    assert_int_equal(egm__rpc_server_register(env->server, TYPE_HUGE, huge_handler, NULL), EGM_OK);
    assert_int_equal(egm__rpc_server_register(env->server, TYPE_HOLD, hold_handler, NULL), EGM_OK);
    assert_int_equal(egm__rpc_server_register(env->server, TYPE_ORDER, order_handler, NULL),
                     EGM_OK);
    env->port = egm__rpc_server_port(env->server);
    assert_true(env->port != 0);
    if (port)
        assert_int_equal(env->port, port);
    snprintf(env->addr, sizeof(env->addr), "%s:%u", host, (unsigned)env->port);
    if (local) {
        char name[EGM_RPC_LOCAL_NAME_MAX];
        assert_int_equal(egm__rpc_server_local_name(env->server, name, sizeof(name)), EGM_OK);
        assert_int_equal(egm__rpc_server_listen_unix(env->server, name), EGM_OK);
    }
    assert_int_equal(pthread_create(&env->thread, NULL, reactor_main, env->reactor), 0);
}

static void env_start_ex(env_t *env, uint16_t port, size_t max_connections, int local)
{
    env_start_on(env, "127.0.0.1", port, max_connections, local);
}

static void env_start(env_t *env, uint16_t port, size_t max_connections)
{
    env_start_ex(env, port, max_connections, 0);
}

static void env_stop(env_t *env)
{
    egm__reactor_stop(env->reactor);
    pthread_join(env->thread, NULL);
    egm__rpc_server_destroy(env->server);
    egm__reactor_destroy(env->reactor);
}

static egm_rpc_client_t *new_client_ex(const char *addr, int prefer_local_socket)
{
    egm_rpc_client_params_t params = {
        .addr = addr,
        .connect_timeout_ms = 3000,
        .max_frame_size = MAX_FRAME,
        .prefer_local_socket = prefer_local_socket,
    };
    egm_rpc_client_t *client = NULL;

    assert_int_equal(egm__rpc_client_create(&params, &client), EGM_OK);
    assert_non_null(client);
    return client;
}

static egm_rpc_client_t *new_client(const char *addr)
{
    return new_client_ex(addr, 0);
}

/* One echo call that must succeed with the same bytes back. */
static void echo_ok(egm_rpc_client_t *client, const char *text)
{
    uint8_t *reply = NULL;
    size_t len = 0;

    assert_int_equal(
        egm__rpc_call(client, TYPE_ECHO, (const uint8_t *)text, strlen(text), &reply, &len, 10000),
        EGM_OK);
    assert_int_equal(len, strlen(text));
    assert_memory_equal(reply, text, len);
    egm_free(reply);
}

/* --- raw socket helpers ------------------------------------------------------- */

static int raw_connect(uint16_t port)
{
    int fd = -1;
    struct timeval tv = {.tv_sec = 10, .tv_usec = 0};

    assert_int_equal(egm__sock_tcp_connect("127.0.0.1", port, 3000, &fd), EGM_OK);
    /* every blocking read in these tests is bounded */
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    return fd;
}

static size_t build_frame(uint8_t *out, uint8_t version, uint16_t type, uint64_t id,
                          const void *payload, uint32_t len)
{
    egm_frame_header_t h = {version, 0, type, id, len};
    egm__frame_encode_header(&h, out);
    if (len && payload)
        memcpy(out + EGM_FRAME_HEADER_SIZE, payload, len);
    return EGM_FRAME_HEADER_SIZE + len;
}

static void raw_send(int fd, const void *buf, size_t len)
{
    assert_int_equal(egm__sock_write_full(fd, buf, len), EGM_OK);
}

/* Reads one frame; the payload goes into buf (NUL-terminated). */
static void raw_read_frame(int fd, egm_frame_header_t *h, uint8_t *buf, size_t cap)
{
    uint8_t hb[EGM_FRAME_HEADER_SIZE];

    assert_int_equal(egm__sock_read_full(fd, hb, sizeof(hb)), EGM_OK);
    assert_int_equal(egm__frame_decode_header(hb, MAX_FRAME, h), EGM_OK);
    assert_true(h->length < cap);
    if (h->length)
        assert_int_equal(egm__sock_read_full(fd, buf, h->length), EGM_OK);
    buf[h->length] = 0;
}

static void raw_expect_reply(int fd, uint64_t id, const char *text)
{
    egm_frame_header_t h;
    uint8_t buf[256];

    raw_read_frame(fd, &h, buf, sizeof(buf));
    assert_int_equal(h.flags, EGM_FRAME_REPLY);
    assert_true(h.request_id == id);
    assert_string_equal((char *)buf, text);
}

/* Reads an ErrorReply frame for `id` and checks its status and text. */
static void raw_expect_error(int fd, uint64_t id, egm_status_t status, const char *text_part)
{
    egm_frame_header_t h;
    uint8_t buf[1024];

    raw_read_frame(fd, &h, buf, sizeof(buf));
    assert_int_equal(h.flags, EGM_FRAME_REPLY | EGM_FRAME_ERROR);
    assert_true(h.request_id == id);
    Egm__ErrorReply *er = egm__error_reply__unpack(NULL, h.length, buf);
    assert_non_null(er);
    assert_int_equal(er->status, status);
    assert_non_null(strstr(er->error, text_part));
    egm__error_reply__free_unpacked(er, NULL);
}

/* The server closed the connection (FIN, or RST when input was unread). */
static void raw_expect_eof(int fd)
{
    uint8_t b;
    ssize_t n;

    do
        n = recv(fd, &b, 1, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        assert_int_equal(errno, ECONNRESET);
    else
        assert_int_equal(n, 0);
}

static void wait_open_connections(env_t *env, uint64_t want)
{
    egm_rpc_server_stats_t st;

    for (int i = 0; i < 500; i++) {
        egm__rpc_server_stats(env->server, &st);
        if (st.connections_open == want)
            return;
        egm__sleep_ms(10);
    }
    egm__rpc_server_stats(env->server, &st);
    assert_int_equal(st.connections_open, want);
}

/* --- tests ----------------------------------------------------------------------- */

static void test_echo_and_msg(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    env_t env;
    env_start(&env, 0, 0);
    egm_rpc_client_t *client = new_client(env.addr);

    echo_ok(client, "hello");

    /* empty request, empty reply */
    uint8_t *reply = NULL;
    size_t len = 99;
    assert_int_equal(egm__rpc_call(client, TYPE_ECHO, NULL, 0, &reply, &len, 5000), EGM_OK);
    assert_int_equal(len, 0);
    egm_free(reply);

    /* protobuf call: PingRequest echoed decodes as PingRequest */
    Egm__PingRequest req = EGM__PING_REQUEST__INIT;
    req.view = 77;
    req.host_id = "h1";
    ProtobufCMessage *msg = NULL;
    assert_int_equal(
        egm__rpc_call_msg(client, TYPE_ECHO, &req.base, &egm__ping_request__descriptor, &msg, 5000),
        EGM_OK);
    Egm__PingRequest *back = (Egm__PingRequest *)msg;
    assert_true(back->view == 77);
    assert_string_equal(back->host_id, "h1");
    egm__rpc_msg_free(msg);
    egm__rpc_msg_free(NULL);

    /* a reply that does not decode as the expected message: PingRequest's
     * varint field 2 is ListSegmentsReply's message field 2 */
    msg = (ProtobufCMessage *)1;
    assert_int_equal(egm__rpc_call_msg(client, TYPE_ECHO, &req.base,
                                       &egm__list_segments_reply__descriptor, &msg, 5000),
                     EGM_ERR_PROTOCOL);
    assert_null(msg);
    assert_non_null(strstr(egm_last_error(), "ListSegmentsReply"));

    /* an undecodable request: the handler's PROTOCOL error with its text */
    const uint8_t junk[] = {0xff, 0xff, 0xff};
    reply = NULL;
    assert_int_equal(egm__rpc_call(client, TYPE_DECODE, junk, sizeof(junk), &reply, &len, 5000),
                     EGM_ERR_PROTOCOL);
    assert_null(reply);
    assert_non_null(strstr(egm_last_error(), "PutStartRequest"));

    egm_rpc_server_stats_t st;
    egm__rpc_server_stats(env.server, &st);
    assert_true(st.requests == 5);
    assert_int_equal(st.connections_open, 1);
    assert_true(st.connections_accepted == 1);

    egm__rpc_client_destroy(client);
    env_stop(&env);
    assert_int_equal(egm__alloc_live_count(), live);
}

typedef struct {
    egm_rpc_client_t *client;
    int index;
    int ok;
} worker_t;

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    char text[64];
    uint8_t *reply;
    size_t len;

    w->ok = 0;
    for (int i = 0; i < 200; i++) {
        int n = snprintf(text, sizeof(text), "thread %d call %d", w->index, i);
        reply = NULL;
        if (egm__rpc_call(w->client, TYPE_ECHO, (uint8_t *)text, (size_t)n, &reply, &len, 20000) !=
            EGM_OK)
            return NULL;
        int same = len == (size_t)n && memcmp(reply, text, len) == 0;
        egm_free(reply);
        if (!same)
            return NULL;
    }
    w->ok = 1;
    return NULL;
}

static void test_concurrent_callers(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    env_t env;
    env_start(&env, 0, 0);
    egm_rpc_client_t *client = new_client(env.addr);
    pthread_t threads[8];
    worker_t workers[8];

    for (int i = 0; i < 8; i++) {
        workers[i] = (worker_t){.client = client, .index = i, .ok = 0};
        assert_int_equal(pthread_create(&threads[i], NULL, worker_main, &workers[i]), 0);
    }
    for (int i = 0; i < 8; i++) {
        pthread_join(threads[i], NULL);
        assert_true(workers[i].ok);
    }
    egm_rpc_server_stats_t st;
    egm__rpc_server_stats(env.server, &st);
    assert_true(st.requests == 1600);
    assert_true(st.connections_accepted == 1); /* all on one pipelined connection */

    egm__rpc_client_destroy(client);
    env_stop(&env);
    assert_int_equal(egm__alloc_live_count(), live);
}

/* Calls begun one after the other (egm__rpc_begin) reach the server in that
 * order while all are in flight, and each end, in any order and from any
 * thread, gets its own reply. A begin that cannot connect begins nothing. */
typedef struct {
    egm_rpc_call_t **calls;
    const char *const *texts;
    size_t from, to; /* ends calls [from, to), last first */
} ender_t;

static void end_expecting(egm_rpc_call_t *call, const char *text)
{
    uint8_t *reply = NULL;
    size_t len = 0;
    assert_int_equal(egm__rpc_end(call, &reply, &len), EGM_OK);
    assert_int_equal(len, strlen(text));
    assert_memory_equal(reply, text, len);
    egm_free(reply);
}

static void *ender_main(void *arg)
{
    const ender_t *e = arg;
    for (size_t i = e->to; i-- > e->from;)
        end_expecting(e->calls[i], e->texts[i]);
    return NULL;
}

static void test_begun_calls(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    env_t env;
    env_start(&env, 0, 0);
    egm_rpc_client_t *client = new_client(env.addr);
    static const char *const texts[8] = {"0 first", "1",     "2 x", "3 yy",
                                         "4",       "5 zzz", "6",   "7 last"};
    egm_rpc_call_t *calls[8];

    n_order_seen = 0;
    for (size_t i = 0; i < 8; i++)
        assert_int_equal(egm__rpc_begin(client, TYPE_ORDER, (const uint8_t *)texts[i],
                                        strlen(texts[i]), 5000, &calls[i]),
                         EGM_OK);
    ender_t e = {.calls = calls, .texts = texts, .from = 0, .to = 4};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, ender_main, &e), 0);
    for (size_t i = 8; i-- > 4;)
        end_expecting(calls[i], texts[i]);
    pthread_join(t, NULL);
    assert_int_equal(n_order_seen, 8);
    assert_memory_equal(order_seen, "01234567", 8);

    /* Nobody listens: nothing begun, nothing left allocated. */
    egm_rpc_client_t *lost = new_client("127.0.0.1:1");
    egm_rpc_call_t *call = (egm_rpc_call_t *)1;
    assert_int_not_equal(egm__rpc_begin(lost, TYPE_ORDER, (const uint8_t *)"x", 1, 2000, &call),
                         EGM_OK);
    assert_null(call);
    egm__rpc_client_destroy(lost);

    egm__rpc_client_destroy(client);
    env_stop(&env);
    assert_int_equal(egm__alloc_live_count(), live);
}

/* A begun call whose answer does not come in time ends with TIMEOUT counted
 * from its begin (the late answer is dropped, the connection stays); one
 * whose connection goes ends UNREACHABLE. */
static void test_begun_calls_fail(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    env_t env;
    assert_int_equal(sem_init(&held_sem, 0, 0), 0);
    n_held = n_taken = n_seen = 0;
    env_start(&env, 0, 0);
    egm_rpc_client_t *client = new_client(env.addr);
    egm_rpc_call_t *late, *echo;

    assert_int_equal(egm__rpc_begin(client, TYPE_HOLD, (const uint8_t *)"h", 1, 1000, &late),
                     EGM_OK);
    egm_rpc_hold_t *h = next_held();
    assert_int_equal(egm__rpc_begin(client, TYPE_ECHO, (const uint8_t *)"e", 1, 5000, &echo),
                     EGM_OK);
    end_expecting(echo, "e");
    egm__sleep_ms(1100); /* past the held call's deadline before its end began */
    uint64_t t0 = egm__now_ms();
    uint8_t *reply = (uint8_t *)1;
    size_t len = 1;
    assert_int_equal(egm__rpc_end(late, &reply, &len), EGM_ERR_TIMEOUT);
    /* At once: counted from the begin (from the end, it would take 1 s). */
    assert_true(egm__now_ms() - t0 < 900);
    assert_null(reply);
    assert_int_equal(len, 0);
    release_text(h, "too late");
    echo_ok(client, "still up");

    /* The server goes while a begun call waits: UNREACHABLE. */
    egm_rpc_call_t *lost;
    assert_int_equal(egm__rpc_begin(client, TYPE_HOLD, (const uint8_t *)"l", 1, 5000, &lost),
                     EGM_OK);
    h = next_held();
    env_stop(&env);
    assert_int_equal(egm__rpc_end(lost, &reply, &len), EGM_ERR_UNREACHABLE);
    assert_null(reply);
    release_text(h, "nobody");

    egm__rpc_client_destroy(client);
    sem_destroy(&held_sem);
    assert_int_equal(egm__alloc_live_count(), live);
}

/* Several frames in one write, a frame dribbled byte by byte, a payload larger
 * than one read: all answered in order on the same connection. */
static void test_raw_pipelining_and_partial_frames(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    env_t env;
    env_start(&env, 0, 0);
    int fd = raw_connect(env.port);
    uint8_t buf[512];
    size_t n = 0;

    n += build_frame(buf + n, EGM_RPC_VERSION, TYPE_ECHO, 1, "one", 3);
    n += build_frame(buf + n, EGM_RPC_VERSION, TYPE_ECHO, 2, "two", 3);
    n += build_frame(buf + n, EGM_RPC_VERSION, TYPE_ECHO, 3, NULL, 0);
    n += build_frame(buf + n, EGM_RPC_VERSION, TYPE_ECHO, 4, "four", 4);
    raw_send(fd, buf, n);
    raw_expect_reply(fd, 1, "one");
    raw_expect_reply(fd, 2, "two");
    raw_expect_reply(fd, 3, "");
    raw_expect_reply(fd, 4, "four");

    n = build_frame(buf, EGM_RPC_VERSION, TYPE_ECHO, 5, "dribble", 7);
    for (size_t i = 0; i < n; i++) {
        raw_send(fd, buf + i, 1);
        if (i % 8 == 0)
            egm__sleep_ms(1); /* let some bytes arrive in reads of their own */
    }
    raw_expect_reply(fd, 5, "dribble");

    /* 300 KiB payload: spans several server reads */
    size_t big = 300 * 1024;
    uint8_t *frame = egm_malloc(EGM_FRAME_HEADER_SIZE + big, "test_big");
    assert_non_null(frame);
    for (size_t i = 0; i < big; i++)
        frame[EGM_FRAME_HEADER_SIZE + i] = (uint8_t)(i * 7 + 3);
    egm_frame_header_t h = {EGM_RPC_VERSION, 0, TYPE_ECHO, 6, (uint32_t)big};
    egm__frame_encode_header(&h, frame);
    raw_send(fd, frame, EGM_FRAME_HEADER_SIZE + big);
    uint8_t hb[EGM_FRAME_HEADER_SIZE];
    assert_int_equal(egm__sock_read_full(fd, hb, sizeof(hb)), EGM_OK);
    assert_int_equal(egm__frame_decode_header(hb, MAX_FRAME, &h), EGM_OK);
    assert_true(h.request_id == 6);
    assert_int_equal(h.length, big);
    uint8_t *back = egm_malloc(big, "test_big");
    assert_non_null(back);
    assert_int_equal(egm__sock_read_full(fd, back, big), EGM_OK);
    assert_memory_equal(back, frame + EGM_FRAME_HEADER_SIZE, big);
    egm_free(back);
    egm_free(frame);

    close(fd);
    wait_open_connections(&env, 0);
    env_stop(&env);
    assert_int_equal(egm__alloc_live_count(), live);
}

static void test_bad_frames(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    env_t env;
    env_start(&env, 0, 0);
    egm_rpc_client_t *client = new_client(env.addr);
    uint8_t buf[256];
    size_t n;
    int fd;

    echo_ok(client, "before");

    /* garbage: no reply, closed */
    fd = raw_connect(env.port);
    for (size_t i = 0; i < 100; i++)
        buf[i] = (uint8_t)(i * 37 + 11);
    raw_send(fd, buf, 100);
    raw_expect_eof(fd);
    close(fd);
    echo_ok(client, "after garbage");

    /* valid header except the magic: no reply, closed */
    fd = raw_connect(env.port);
    n = build_frame(buf, EGM_RPC_VERSION, TYPE_ECHO, 9, "x", 1);
    buf[3] = 'X';
    raw_send(fd, buf, n);
    raw_expect_eof(fd);
    close(fd);
    echo_ok(client, "after bad magic");

    /* a valid frame, then garbage in the same write: the frame is answered,
     * then closed (tests/integration/test_hostile_input.c found the reply
     * dropped) */
    fd = raw_connect(env.port);
    n = build_frame(buf, EGM_RPC_VERSION, TYPE_ECHO, 18, "answered", 8);
    for (size_t i = 0; i < 64; i++)
        buf[n + i] = (uint8_t)(i * 37 + 11);
    raw_send(fd, buf, n + 64);
    raw_expect_reply(fd, 18, "answered");
    raw_expect_eof(fd);
    close(fd);
    echo_ok(client, "after a frame and garbage");

    /* version 2: VERSION error reply for its id, then closed, even though
     * its payload was never read */
    fd = raw_connect(env.port);
    n = build_frame(buf, 2, TYPE_ECHO, 10, "payload of v2", 13);
    raw_send(fd, buf, n);
    raw_expect_error(fd, 10, EGM_ERR_VERSION, "version");
    raw_expect_eof(fd);
    close(fd);
    echo_ok(client, "after version");

    /* oversized length: PROTOCOL error reply, then closed */
    fd = raw_connect(env.port);
    n = build_frame(buf, EGM_RPC_VERSION, TYPE_ECHO, 11, NULL, 0);
    egm_frame_header_t h = {EGM_RPC_VERSION, 0, TYPE_ECHO, 11, MAX_FRAME + 1};
    egm__frame_encode_header(&h, buf);
    raw_send(fd, buf, n);
    raw_expect_error(fd, 11, EGM_ERR_PROTOCOL, "too large");
    raw_expect_eof(fd);
    close(fd);

    /* non-zero reserved field: PROTOCOL error reply, then closed */
    fd = raw_connect(env.port);
    n = build_frame(buf, EGM_RPC_VERSION, TYPE_ECHO, 12, NULL, 0);
    buf[22] = 1;
    raw_send(fd, buf, n);
    raw_expect_error(fd, 12, EGM_ERR_PROTOCOL, "reserved");
    raw_expect_eof(fd);
    close(fd);
    echo_ok(client, "after oversize");

    /* unknown type: error reply, the connection stays and keeps serving */
    fd = raw_connect(env.port);
    n = build_frame(buf, EGM_RPC_VERSION, TYPE_UNKNOWN, 13, "?", 1);
    n += build_frame(buf + n, EGM_RPC_VERSION, TYPE_ECHO, 14, "still here", 10);
    raw_send(fd, buf, n);
    raw_expect_error(fd, 13, EGM_ERR_NOT_SUPPORTED, "200");
    raw_expect_reply(fd, 14, "still here");
    close(fd);

    /* undecodable payload: the handler's PROTOCOL error, connection stays */
    fd = raw_connect(env.port);
    n = build_frame(buf, EGM_RPC_VERSION, TYPE_DECODE, 15, "\xff\xff\xff", 3);
    n += build_frame(buf + n, EGM_RPC_VERSION, TYPE_ECHO, 16, "ok", 2);
    raw_send(fd, buf, n);
    raw_expect_error(fd, 15, EGM_ERR_PROTOCOL, "PutStartRequest");
    raw_expect_reply(fd, 16, "ok");
    close(fd);

    /* truncated header, then close; truncated payload, then close */
    fd = raw_connect(env.port);
    n = build_frame(buf, EGM_RPC_VERSION, TYPE_ECHO, 17, "truncated", 9);
    raw_send(fd, buf, 10);
    close(fd);
    fd = raw_connect(env.port);
    raw_send(fd, buf, n - 4);
    close(fd);

    wait_open_connections(&env, 1); /* only the well-formed client is left */
    echo_ok(client, "at the end");

    egm_rpc_server_stats_t st;
    egm__rpc_server_stats(env.server, &st);
    assert_true(st.frames_rejected == 8);

    egm__rpc_client_destroy(client);
    env_stop(&env);
    assert_int_equal(egm__alloc_live_count(), live);
}

static void test_handler_errors(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    env_t env;
    env_start(&env, 0, 0);
    egm_rpc_client_t *client = new_client(env.addr);
    uint8_t *reply = NULL;
    size_t len = 0;

    assert_int_equal(
        egm__rpc_call(client, TYPE_FAIL, (const uint8_t *)"k42", 3, &reply, &len, 5000),
        EGM_ERR_NOT_FOUND);
    assert_null(reply);
    assert_non_null(strstr(egm_last_error(), "no such key 'k42'"));

    assert_int_equal(egm__rpc_call(client, TYPE_UNKNOWN, NULL, 0, &reply, &len, 5000),
                     EGM_ERR_NOT_SUPPORTED);
    assert_non_null(strstr(egm_last_error(), "unknown request type 200"));

    /* a reply too large to send becomes an error, not a broken stream */
    assert_int_equal(egm__rpc_call(client, TYPE_HUGE, NULL, 0, &reply, &len, 5000),
                     EGM_ERR_PROTOCOL);
    assert_non_null(strstr(egm_last_error(), "max_frame_size"));

    /* protobuf round trip through a decoding handler */
    Egm__PutStartRequest req = EGM__PUT_START_REQUEST__INIT;
    char *keys[] = {"first-key", "second"};
    req.n_keys = 2;
    req.keys = keys;
    ProtobufCMessage *msg = NULL;
    assert_int_equal(egm__rpc_call_msg(client, TYPE_DECODE, &req.base,
                                       &egm__status_reply__descriptor, &msg, 5000),
                     EGM_OK);
    assert_string_equal(((Egm__StatusReply *)msg)->error, "first-key");
    egm__rpc_msg_free(msg);

    /* a request over the client's own limit never leaves */
    uint8_t *big = egm_calloc(1, MAX_FRAME + 1, "test_big");
    assert_non_null(big);
    assert_int_equal(egm__rpc_call(client, TYPE_ECHO, big, MAX_FRAME + 1, &reply, &len, 5000),
                     EGM_ERR_INVALID_ARG);
    egm_free(big);

    echo_ok(client, "connection kept");
    egm_rpc_server_stats_t st;
    egm__rpc_server_stats(env.server, &st);
    assert_true(st.connections_accepted == 1);

    egm__rpc_client_destroy(client);
    env_stop(&env);
    assert_int_equal(egm__alloc_live_count(), live);
}

typedef struct {
    egm_rpc_client_t *client;
    const char *text;
    egm_status_t status;
    uint8_t *reply;
    size_t len;
    int timeout_ms; /* 0: 20 s */
} call_t;

static void *call_main(void *arg)
{
    call_t *c = arg;
    c->status = egm__rpc_call(c->client, TYPE_ECHO, (const uint8_t *)c->text, strlen(c->text),
                              &c->reply, &c->len, c->timeout_ms ? c->timeout_ms : 20000);
    return NULL;
}

/* Accepts the client's connection on lfd with a bounded receive timeout. */
static int raw_accept(int lfd)
{
    struct timeval tv = {.tv_sec = 10, .tv_usec = 0};
    int sfd = accept(lfd, NULL, NULL);

    assert_true(sfd >= 0);
    assert_int_equal(setsockopt(sfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    return sfd;
}

/* Appends a reply frame for `id` carrying `text` to out; returns its size. */
static size_t build_reply(uint8_t *out, uint64_t id, const char *text)
{
    size_t n = build_frame(out, EGM_RPC_VERSION, TYPE_ECHO, id, text, (uint32_t)strlen(text));
    out[5] = EGM_FRAME_REPLY;
    return n;
}

/* Callers reading their own replies (leader/follower): three calls in flight
 * get replies in reverse order, two of them in one write and the last split
 * mid-header across writes; whoever reads hands each reply to its caller. */
static void test_out_of_order_replies_to_waiting_callers(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    int lfd = -1;
    uint16_t port = 0;
    char addr[64];
    egm_frame_header_t h;
    uint8_t buf[256], out[512];
    call_t calls[3];
    pthread_t threads[3];
    uint64_t ids[3];
    const char *texts[3] = {"zero", "one", "two"};

    assert_int_equal(egm__sock_tcp_listen("127.0.0.1", 0, &lfd, &port), EGM_OK);
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)port);
    egm_rpc_client_t *client = new_client(addr);

    /* the first call connects; the others reuse its connection */
    calls[0] = (call_t){.client = client, .text = texts[0]};
    assert_int_equal(pthread_create(&threads[0], NULL, call_main, &calls[0]), 0);
    int sfd = raw_accept(lfd);
    raw_read_frame(sfd, &h, buf, sizeof(buf));
    assert_string_equal((char *)buf, texts[0]);
    ids[0] = h.request_id;
    for (int i = 1; i < 3; i++) {
        calls[i] = (call_t){.client = client, .text = texts[i]};
        assert_int_equal(pthread_create(&threads[i], NULL, call_main, &calls[i]), 0);
        raw_read_frame(sfd, &h, buf, sizeof(buf));
        assert_string_equal((char *)buf, texts[i]);
        ids[i] = h.request_id;
    }

    size_t n = build_reply(out, ids[2], "reply-two");
    n += build_reply(out + n, ids[1], "reply-one");
    raw_send(sfd, out, n);
    n = build_reply(out, ids[0], "reply-zero");
    raw_send(sfd, out, 10);
    egm__sleep_ms(20);
    raw_send(sfd, out + 10, n - 10);

    const char *want[3] = {"reply-zero", "reply-one", "reply-two"};
    for (int i = 0; i < 3; i++) {
        pthread_join(threads[i], NULL);
        assert_int_equal(calls[i].status, EGM_OK);
        assert_int_equal(calls[i].len, strlen(want[i]));
        assert_memory_equal(calls[i].reply, want[i], calls[i].len);
        egm_free(calls[i].reply);
    }

    close(sfd);
    egm__rpc_client_destroy(client);
    close(lfd);
    assert_int_equal(egm__alloc_live_count(), live);
}

/* The caller reading the socket times out while another caller waits: the
 * reader role passes to the waiter, which gets its reply; the timed-out
 * caller's late reply, arriving first, is dropped. */
static void test_reader_timeout_hands_over(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    int lfd = -1;
    uint16_t port = 0;
    char addr[64];
    egm_frame_header_t h;
    uint8_t buf[256], out[512];

    assert_int_equal(egm__sock_tcp_listen("127.0.0.1", 0, &lfd, &port), EGM_OK);
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)port);
    egm_rpc_client_t *client = new_client(addr);

    /* a connects and reads (nobody else is waiting); b then waits behind it */
    call_t a = {.client = client, .text = "short", .timeout_ms = 300};
    call_t b = {.client = client, .text = "long"};
    pthread_t ta, tb;
    assert_int_equal(pthread_create(&ta, NULL, call_main, &a), 0);
    int sfd = raw_accept(lfd);
    raw_read_frame(sfd, &h, buf, sizeof(buf));
    assert_string_equal((char *)buf, "short");
    uint64_t id_a = h.request_id;
    assert_int_equal(pthread_create(&tb, NULL, call_main, &b), 0);
    raw_read_frame(sfd, &h, buf, sizeof(buf));
    assert_string_equal((char *)buf, "long");
    uint64_t id_b = h.request_id;

    pthread_join(ta, NULL);
    assert_int_equal(a.status, EGM_ERR_TIMEOUT);
    assert_null(a.reply);

    size_t n = build_reply(out, id_a, "late-a");
    n += build_reply(out + n, id_b, "reply-b");
    raw_send(sfd, out, n);
    pthread_join(tb, NULL);
    assert_int_equal(b.status, EGM_OK);
    assert_int_equal(b.len, 7);
    assert_memory_equal(b.reply, "reply-b", 7);
    egm_free(b.reply);

    /* the connection is still good for a lone caller afterwards */
    call_t c = {.client = client, .text = "again"};
    pthread_t tc;
    assert_int_equal(pthread_create(&tc, NULL, call_main, &c), 0);
    raw_read_frame(sfd, &h, buf, sizeof(buf));
    assert_string_equal((char *)buf, "again");
    n = build_reply(out, h.request_id, "reply-c");
    raw_send(sfd, out, n);
    pthread_join(tc, NULL);
    assert_int_equal(c.status, EGM_OK);
    assert_memory_equal(c.reply, "reply-c", 7);
    egm_free(c.reply);

    close(sfd);
    egm__rpc_client_destroy(client);
    close(lfd);
    assert_int_equal(egm__alloc_live_count(), live);
}

typedef struct {
    egm_rpc_client_t *client;
    int index;
    int ok;
    int timeouts;
} mixed_worker_t;

/* Echoes of sizes from a few bytes to several hundred KiB (read straight into
 * their reply buffers), some with deadlines too short to be met. */
static void *mixed_worker_main(void *arg)
{
    mixed_worker_t *w = arg;
    size_t cap = 300 * 1024;
    uint8_t *msg = egm_malloc(cap, "test_mixed");
    if (msg == NULL)
        return NULL;
    for (int i = 0; i < 60; i++) {
        size_t len = 1 + ((size_t)(w->index * 7919 + i * 104729) % cap);
        memset(msg, 'a' + (w->index + i) % 26, len);
        uint8_t *reply = NULL;
        size_t rlen = 0;
        int timeout_ms = i % 10 == 9 ? 1 : 20000;
        egm_status_t st = egm__rpc_call(w->client, TYPE_ECHO, msg, len, &reply, &rlen, timeout_ms);
        if (st == EGM_ERR_TIMEOUT && timeout_ms == 1) {
            w->timeouts++;
            continue;
        }
        if (st != EGM_OK || rlen != len || memcmp(reply, msg, len) != 0) {
            egm_free(reply);
            egm_free(msg);
            return NULL;
        }
        egm_free(reply);
    }
    egm_free(msg);
    w->ok = 1;
    return NULL;
}

/* Many callers on one connection take turns reading; large and small replies
 * and calls that time out mid-stream never give anyone a wrong reply. */
static void test_concurrent_mixed_sizes_and_timeouts(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    env_t env;
    env_start(&env, 0, 0);
    egm_rpc_client_t *client = new_client(env.addr);
    pthread_t threads[6];
    mixed_worker_t workers[6];

    for (int i = 0; i < 6; i++) {
        workers[i] = (mixed_worker_t){.client = client, .index = i};
        assert_int_equal(pthread_create(&threads[i], NULL, mixed_worker_main, &workers[i]), 0);
    }
    for (int i = 0; i < 6; i++) {
        pthread_join(threads[i], NULL);
        assert_true(workers[i].ok);
    }
    echo_ok(client, "after the storm");
    egm_rpc_server_stats_t st;
    egm__rpc_server_stats(env.server, &st);
    assert_true(st.connections_accepted == 1);

    egm__rpc_client_destroy(client);
    env_stop(&env);
    assert_int_equal(egm__alloc_live_count(), live);
}

/* A server that accepts and never answers: the call times out; its late reply
 * is dropped and does not reach the next caller. */
static void test_timeout_and_late_reply(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    int lfd = -1, sfd;
    uint16_t port = 0;
    char addr[64];
    uint8_t *reply = NULL;
    size_t len = 0;
    egm_frame_header_t h;
    uint8_t buf[256];

    assert_int_equal(egm__sock_tcp_listen("127.0.0.1", 0, &lfd, &port), EGM_OK);
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)port);
    egm_rpc_client_t *client = new_client(addr);

    /* the kernel completes the handshake from the backlog; nobody reads */
    assert_int_equal(
        egm__rpc_call(client, TYPE_ECHO, (const uint8_t *)"first", 5, &reply, &len, 200),
        EGM_ERR_TIMEOUT);
    assert_null(reply);
    assert_non_null(strstr(egm_last_error(), "timed out"));

    sfd = accept(lfd, NULL, NULL);
    assert_true(sfd >= 0);
    struct timeval tv = {.tv_sec = 10, .tv_usec = 0};
    setsockopt(sfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    raw_read_frame(sfd, &h, buf, sizeof(buf));
    assert_string_equal((char *)buf, "first");
    uint64_t first_id = h.request_id;
    size_t n = build_frame(buf, EGM_RPC_VERSION, TYPE_ECHO, first_id, "late", 4);
    buf[5] = EGM_FRAME_REPLY;
    raw_send(sfd, buf, n);

    /* the next call gets its own answer, not the late one */
    call_t c = {.client = client, .text = "second"};
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, call_main, &c), 0);
    raw_read_frame(sfd, &h, buf, sizeof(buf));
    assert_string_equal((char *)buf, "second");
    assert_true(h.request_id != first_id);
    n = build_frame(buf, EGM_RPC_VERSION, TYPE_ECHO, h.request_id, "answer2", 7);
    buf[5] = EGM_FRAME_REPLY;
    raw_send(sfd, buf, n);
    pthread_join(t, NULL);
    assert_int_equal(c.status, EGM_OK);
    assert_int_equal(c.len, 7);
    assert_memory_equal(c.reply, "answer2", 7);
    egm_free(c.reply);

    /* the server answers with bad magic: the connection is treated as broken */
    c = (call_t){.client = client, .text = "third"};
    assert_int_equal(pthread_create(&t, NULL, call_main, &c), 0);
    raw_read_frame(sfd, &h, buf, sizeof(buf));
    n = build_frame(buf, EGM_RPC_VERSION, TYPE_ECHO, h.request_id, "bad", 3);
    buf[0] = 'Z';
    raw_send(sfd, buf, n);
    pthread_join(t, NULL);
    assert_int_equal(c.status, EGM_ERR_UNREACHABLE);

    /* the peer closes while a call waits: UNREACHABLE */
    close(sfd);
    c = (call_t){.client = client, .text = "fourth"};
    assert_int_equal(pthread_create(&t, NULL, call_main, &c), 0);
    sfd = accept(lfd, NULL, NULL); /* the call reconnected */
    assert_true(sfd >= 0);
    setsockopt(sfd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    raw_read_frame(sfd, &h, buf, sizeof(buf));
    assert_string_equal((char *)buf, "fourth");
    close(sfd);
    pthread_join(t, NULL);
    assert_int_equal(c.status, EGM_ERR_UNREACHABLE);

    egm__rpc_client_destroy(client);
    close(lfd);
    assert_int_equal(egm__alloc_live_count(), live);
}

/* rpc_spin_us: a caller that polls for its reply before sleeping gets the
 * same answers, from several threads at once, and still times out when no
 * reply comes (the spin is part of the wait, not added to the deadline's
 * checks). */
static void test_spinning_caller(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    env_t env;
    env_start(&env, 0, 0);
    egm_rpc_client_params_t params = {
        .addr = env.addr, .connect_timeout_ms = 3000, .max_frame_size = MAX_FRAME, .spin_us = 1000};
    egm_rpc_client_t *client = NULL;
    assert_int_equal(egm__rpc_client_create(&params, &client), EGM_OK);
    for (int i = 0; i < 50; i++)
        echo_ok(client, i % 2 ? "spin" : "a longer request that spins before its reply");
    call_t calls[4];
    pthread_t t[4];
    for (int k = 0; k < 4; k++) {
        calls[k] = (call_t){.client = client, .text = "together"};
        assert_int_equal(pthread_create(&t[k], NULL, call_main, &calls[k]), 0);
    }
    for (int k = 0; k < 4; k++) {
        pthread_join(t[k], NULL);
        assert_int_equal(calls[k].status, EGM_OK);
        assert_int_equal(calls[k].len, strlen("together"));
        assert_memory_equal(calls[k].reply, "together", calls[k].len);
        egm_free(calls[k].reply);
    }
    egm__rpc_client_destroy(client);
    env_stop(&env);

    /* nobody reads: the call times out although it spins first */
    int lfd = -1;
    uint16_t port = 0;
    char addr[64];
    assert_int_equal(egm__sock_tcp_listen("127.0.0.1", 0, &lfd, &port), EGM_OK);
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)port);
    params.addr = addr;
    assert_int_equal(egm__rpc_client_create(&params, &client), EGM_OK);
    uint8_t *reply = NULL;
    size_t len = 0;
    assert_int_equal(egm__rpc_call(client, TYPE_ECHO, (const uint8_t *)"x", 1, &reply, &len, 200),
                     EGM_ERR_TIMEOUT);
    assert_null(reply);
    egm__rpc_client_destroy(client);
    close(lfd);
    assert_int_equal(egm__alloc_live_count(), live);
}

static void test_server_restart(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    env_t env;
    uint8_t *reply = NULL;
    size_t len = 0;

    env_start(&env, 0, 0);
    uint16_t port = env.port;
    egm_rpc_client_t *client = new_client(env.addr);
    echo_ok(client, "first life");
    /* and one that connects once only */
    egm_rpc_client_params_t once_params = {.addr = env.addr,
                                           .connect_timeout_ms = 3000,
                                           .max_frame_size = MAX_FRAME,
                                           .connect_once = 1};
    egm_rpc_client_t *once = NULL;
    assert_int_equal(egm__rpc_client_create(&once_params, &once), EGM_OK);
    echo_ok(once, "first life, once");
    echo_ok(once, "same connection");
    env_stop(&env);

    /* server gone: the call fails (lost connection, or refused on reconnect) */
    egm_status_t st = egm__rpc_call(client, TYPE_ECHO, (const uint8_t *)"x", 1, &reply, &len, 2000);
    assert_int_equal(st, EGM_ERR_UNREACHABLE);
    st = egm__rpc_call(client, TYPE_ECHO, (const uint8_t *)"x", 1, &reply, &len, 2000);
    assert_int_equal(st, EGM_ERR_UNREACHABLE);

    env_start(&env, port, 0);
    echo_ok(client, "second life");
    /* the server is back, but the connect-once client does not reach it:
     * its first call finds the old connection gone, the next ones do not
     * connect */
    for (int i = 0; i < 3; i++) {
        st = egm__rpc_call(once, TYPE_ECHO, (const uint8_t *)"x", 1, &reply, &len, 2000);
        assert_int_equal(st, EGM_ERR_UNREACHABLE);
        if (i > 0)
            assert_non_null(strstr(egm_last_error(), "does not connect again"));
    }
    egm_rpc_call_t *call = NULL;
    assert_int_equal(egm__rpc_begin(once, TYPE_ECHO, (const uint8_t *)"x", 1, 2000, &call),
                     EGM_ERR_UNREACHABLE);
    assert_null(call);
    egm_rpc_server_stats_t stats;
    egm__rpc_server_stats(env.server, &stats);
    assert_true(stats.connections_accepted == 1);

    egm__rpc_client_destroy(once);
    egm__rpc_client_destroy(client);
    env_stop(&env);
    assert_int_equal(egm__alloc_live_count(), live);
}

/* Where the master is, as a resolver says (the etcd leader key in HA). */
static char resolved[64];

static egm_status_t resolve_master(void *arg, char *addr, size_t len)
{
    (void)arg;
    snprintf(addr, len, "%s", resolved);
    return EGM_OK;
}

/* Accepts the connections waiting in lfd's backlog into fds (up to max), open
 * (closing them would end the client's connection by itself); their number. */
static int accept_waiting(int lfd, int *fds, int max)
{
    int n = 0;
    while (n < max && (fds[n] = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0)
        n++;
    assert_true(n == max || errno == EAGAIN || errno == EWOULDBLOCK);
    return n;
}

/* A master found through a resolver stops answering (a leader cut off by a
 * partition: its connection stays up): a call that times out keeps the
 * connection while the resolver still names that master, and shuts it down
 * once it names another, so that the next call reaches the new one. */
static void test_timeout_follows_moved_master(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    int lfd = -1;
    uint16_t port = 0;
    uint8_t *reply = NULL;
    size_t len = 0;
    env_t env;

    /* the kernel completes the handshake from the backlog; nobody answers */
    assert_int_equal(egm__sock_tcp_listen("127.0.0.1", 0, &lfd, &port), EGM_OK);
    assert_int_equal(egm__sock_set_nonblock(lfd, 1), EGM_OK);
    snprintf(resolved, sizeof(resolved), "127.0.0.1:%u", (unsigned)port);
    env_start(&env, 0, 0);
    egm_rpc_client_params_t params = {
        .connect_timeout_ms = 3000, .max_frame_size = MAX_FRAME, .resolve = resolve_master};
    egm_rpc_client_t *client = NULL;
    assert_int_equal(egm__rpc_client_create(&params, &client), EGM_OK);

    for (int i = 0; i < 2; i++)
        assert_int_equal(
            egm__rpc_call(client, TYPE_ECHO, (const uint8_t *)"x", 1, &reply, &len, 200),
            EGM_ERR_TIMEOUT);
    assert_non_null(strstr(egm_last_error(), "timed out"));
    int fds[4];
    int n = accept_waiting(lfd, fds, 4);
    assert_int_equal(n, 1); /* still the same master: the same connection */

    snprintf(resolved, sizeof(resolved), "%s", env.addr);
    assert_int_equal(egm__rpc_call(client, TYPE_ECHO, (const uint8_t *)"x", 1, &reply, &len, 200),
                     EGM_ERR_TIMEOUT);
    assert_non_null(strstr(egm_last_error(), "timed out"));
    echo_ok(client, "the new master");
    assert_int_equal(accept_waiting(lfd, fds + n, 4 - n), 0);
    while (n > 0)
        close(fds[--n]);

    egm__rpc_client_destroy(client);
    env_stop(&env);
    close(lfd);
    assert_int_equal(egm__alloc_live_count(), live);
}

static void test_max_connections(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    env_t env;
    uint8_t buf[64];
    size_t n;

    env_start(&env, 0, 2);
    int a = raw_connect(env.port);
    n = build_frame(buf, EGM_RPC_VERSION, TYPE_ECHO, 1, "a", 1);
    raw_send(a, buf, n);
    raw_expect_reply(a, 1, "a");
    int b = raw_connect(env.port);
    n = build_frame(buf, EGM_RPC_VERSION, TYPE_ECHO, 2, "b", 1);
    raw_send(b, buf, n);
    raw_expect_reply(b, 2, "b");

    int c = raw_connect(env.port);
    raw_expect_eof(c); /* refused: closed at once */
    close(c);

    close(a);
    wait_open_connections(&env, 1);
    int d = raw_connect(env.port);
    n = build_frame(buf, EGM_RPC_VERSION, TYPE_ECHO, 3, "d", 1);
    raw_send(d, buf, n);
    raw_expect_reply(d, 3, "d");

    egm_rpc_server_stats_t st;
    egm__rpc_server_stats(env.server, &st);
    assert_int_equal(st.connections_open, 2);
    assert_true(st.connections_accepted == 3);

    close(b);
    close(d);
    env_stop(&env);
    assert_int_equal(egm__alloc_live_count(), live);
}

static void expect_stats(env_t *env, uint64_t accepted, uint64_t over_unix)
{
    egm_rpc_server_stats_t st;

    egm__rpc_server_stats(env->server, &st);
    assert_true(st.connections_accepted == accepted);
    assert_true(st.connections_unix == over_unix);
}

static int raw_connect_unix(const char *name)
{
    int fd = -1;
    struct timeval tv = {.tv_sec = 10, .tv_usec = 0};

    assert_int_equal(egm__sock_unix_connect(name, &fd), EGM_OK);
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    return fd;
}

/* A server on TCP and its local name: a client preferring the local socket is
 * served over Unix for the address and "localhost", one that does not over TCP;
 * frames, error replies and the bad-frame treatment are the same on both. */
static void test_local_socket_preferred(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    env_t env;
    char addr[64], name[EGM_RPC_LOCAL_NAME_MAX];
    uint8_t buf[64];
    size_t n;

    env_start_ex(&env, 0, 0, 1);
    assert_int_equal(egm__rpc_server_local_name(env.server, name, sizeof(name)), EGM_OK);

    egm_rpc_client_t *local = new_client_ex(env.addr, 1);
    echo_ok(local, "over unix");
    echo_ok(local, "still over unix");
    expect_stats(&env, 1, 1);
    uint8_t *reply = NULL;
    size_t len = 0;
    assert_int_equal(egm__rpc_call(local, TYPE_FAIL, (const uint8_t *)"k1", 2, &reply, &len, 10000),
                     EGM_ERR_NOT_FOUND);
    assert_non_null(strstr(egm_last_error(), "no such key 'k1'"));
    egm__rpc_client_destroy(local);

    /* "localhost" resolves to 127.0.0.1 (and perhaps ::1, where nobody listens) */
    snprintf(addr, sizeof(addr), "localhost:%u", (unsigned)env.port);
    local = new_client_ex(addr, 1);
    echo_ok(local, "localhost");
    egm__rpc_client_destroy(local);
    expect_stats(&env, 2, 2);

    egm_rpc_client_t *tcp = new_client_ex(env.addr, 0);
    echo_ok(tcp, "over tcp");
    expect_stats(&env, 3, 2);
    egm__rpc_client_destroy(tcp);

    /* raw Unix peer: pipelined frames, an unknown type keeps the connection,
     * a bad version is answered and closes it */
    int fd = raw_connect_unix(name);
    n = build_frame(buf, EGM_RPC_VERSION, TYPE_ECHO, 7, "u", 1);
    n += build_frame(buf + n, EGM_RPC_VERSION, TYPE_UNKNOWN, 8, NULL, 0);
    raw_send(fd, buf, n);
    raw_expect_reply(fd, 7, "u");
    raw_expect_error(fd, 8, EGM_ERR_NOT_SUPPORTED, "unknown request type");
    n = build_frame(buf, EGM_RPC_VERSION + 1, TYPE_ECHO, 9, "v", 1);
    raw_send(fd, buf, n);
    raw_expect_error(fd, 9, EGM_ERR_VERSION, "version");
    raw_expect_eof(fd);
    close(fd);
    expect_stats(&env, 4, 3);

    env_stop(&env);
    assert_int_equal(egm__alloc_live_count(), live);
}

/* No local socket: a client preferring it falls back to TCP silently, also
 * when it reconnects after the server it reached over Unix went away. */
static void test_local_socket_fallback(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    env_t env;
    uint8_t *reply = NULL;
    size_t len = 0;

    env_start(&env, 0, 0);
    egm_rpc_client_t *client = new_client_ex(env.addr, 1);
    echo_ok(client, "tcp, no local socket");
    expect_stats(&env, 1, 0);
    uint16_t port = env.port;
    env_stop(&env);

    assert_int_equal(egm__rpc_call(client, TYPE_ECHO, (const uint8_t *)"x", 1, &reply, &len, 2000),
                     EGM_ERR_UNREACHABLE);
    env_start_ex(&env, port, 0, 1);
    echo_ok(client, "now over unix");
    expect_stats(&env, 1, 1);
    env_stop(&env);

    assert_int_equal(egm__rpc_call(client, TYPE_ECHO, (const uint8_t *)"x", 1, &reply, &len, 2000),
                     EGM_ERR_UNREACHABLE);
    env_start(&env, port, 0);
    echo_ok(client, "back on tcp");
    expect_stats(&env, 1, 0);

    egm__rpc_client_destroy(client);
    env_stop(&env);
    assert_int_equal(egm__alloc_live_count(), live);
}

/* The local name is taken: listening on it fails, the server goes on serving
 * TCP, and the holder of the name is left alone. */
static void test_local_socket_name_clash(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    env_t env;
    char name[EGM_RPC_LOCAL_NAME_MAX];
    int holder = -1;

    env_start(&env, 0, 0);
    assert_int_equal(egm__rpc_server_local_name(env.server, name, sizeof(name)), EGM_OK);
    assert_int_equal(egm__sock_unix_listen(name, &holder), EGM_OK);
    /* on the reactor's thread or before it runs: stop it around the call */
    egm__reactor_stop(env.reactor);
    pthread_join(env.thread, NULL);
    assert_int_not_equal(egm__rpc_server_listen_unix(env.server, name), EGM_OK);
    assert_int_equal(pthread_create(&env.thread, NULL, reactor_main, env.reactor), 0);

    egm_rpc_client_t *client = new_client_ex(env.addr, 0);
    echo_ok(client, "tcp after the clash");
    expect_stats(&env, 1, 0);
    egm__rpc_client_destroy(client);

    /* the holder still owns the name */
    int fd = -1;
    assert_int_equal(egm__sock_unix_connect(name, &fd), EGM_OK);
    close(fd);
    close(holder);
    env_stop(&env);
    assert_int_equal(egm__alloc_live_count(), live);
}

/* Answers the letter of the server that ran it (its arg), to tell servers apart. */
static egm_status_t letter_handler(void *arg, uint16_t type, const uint8_t *payload, size_t len,
                                   egm_rpc_reply_t *reply)
{
    (void)type;
    (void)payload;
    (void)len;
    reply->buf = egm_malloc(1, "test_letter");
    if (reply->buf == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "letter");
    reply->buf[0] = (uint8_t)(uintptr_t)arg;
    reply->len = 1;
    return EGM_OK;
}

/* The letter of the server that answered a call through `client`. */
static char call_letter(egm_rpc_client_t *client)
{
    uint8_t *reply = NULL;
    size_t len = 0;
    assert_int_equal(egm__rpc_call(client, TYPE_DECODE, NULL, 0, &reply, &len, 10000), EGM_OK);
    assert_int_equal(len, 1);
    char letter = (char)reply[0];
    egm_free(reply);
    return letter;
}

/* Like env_start_on, with the letter handler (TYPE_DECODE) answering `letter`;
 * `local_name` NULL = the server's own local name, "" = none. */
static void env_start_letter(env_t *env, const char *host, uint16_t port, char letter,
                             const char *local_name)
{
    env_start_on(env, host, port, 0, 0);
    egm__reactor_stop(env->reactor); /* registering and listening: not while it runs */
    pthread_join(env->thread, NULL);
    assert_int_equal(egm__rpc_server_register(env->server, TYPE_DECODE, letter_handler,
                                              (void *)(uintptr_t)letter),
                     EGM_OK);
    char name[EGM_RPC_LOCAL_NAME_MAX];
    if (local_name == NULL)
        assert_int_equal(egm__rpc_server_local_name(env->server, name, sizeof(name)), EGM_OK);
    else
        snprintf(name, sizeof(name), "%s", local_name);
    if (name[0] != '\0')
        assert_int_equal(egm__rpc_server_listen_unix(env->server, name), EGM_OK);
    assert_int_equal(pthread_create(&env->thread, NULL, reactor_main, env->reactor), 0);
}

static egm_rpc_client_t *local_client(const char *host, uint16_t port)
{
    char addr[80];
    snprintf(addr, sizeof(addr), "%s:%u", host, (unsigned)port);
    return new_client_ex(addr, 1);
}

/* Two servers on the same port of two loopback addresses, each on its own
 * local name: a client reaches the one of the address it was given, over
 * Unix, never the other (the name used to carry the port only). */
static void test_local_socket_keyed_by_address(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    env_t one, two;
    char name[EGM_RPC_LOCAL_NAME_MAX];

    env_start_letter(&one, "127.0.0.1", 0, '1', NULL);
    env_start_letter(&two, "127.0.0.2", one.port, '2', NULL);
    assert_int_equal(egm__rpc_server_local_name(two.server, name, sizeof(name)), EGM_OK);
    char want[EGM_RPC_LOCAL_NAME_MAX];
    snprintf(want, sizeof(want), "@egmstore-master-127.0.0.2:%u", (unsigned)one.port);
    assert_string_equal(name, want);
    assert_string_equal(egm__rpc_server_identity(two.server), want + strlen("@egmstore-master-"));

    egm_rpc_client_t *c2 = local_client("127.0.0.2", one.port);
    egm_rpc_client_t *c1 = local_client("127.0.0.1", one.port);
    egm_rpc_client_t *cl = local_client("localhost", one.port);
    assert_int_equal(call_letter(c2), '2');
    assert_int_equal(call_letter(c1), '1');
    assert_int_equal(call_letter(cl), '1');
    expect_stats(&two, 1, 1);
    expect_stats(&one, 2, 2);
    egm__rpc_client_destroy(c2);
    egm__rpc_client_destroy(c1);
    egm__rpc_client_destroy(cl);
    env_stop(&two);
    env_stop(&one);
    assert_int_equal(egm__alloc_live_count(), live);
}

/* A server on a wildcard address takes the wildcard name: a client of any
 * loopback address of its family (what TCP would reach too) is served over
 * Unix; an IPv6 wildcard that takes IPv4 says so in its Hello. */
static void test_local_socket_wildcard(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    env_t any;
    char want[EGM_RPC_LOCAL_NAME_MAX], name[EGM_RPC_LOCAL_NAME_MAX];

    env_start_letter(&any, "0.0.0.0", 0, 'a', NULL);
    assert_int_equal(egm__rpc_server_local_name(any.server, name, sizeof(name)), EGM_OK);
    snprintf(want, sizeof(want), "@egmstore-master-0.0.0.0:%u", (unsigned)any.port);
    assert_string_equal(name, want);
    egm_rpc_client_t *c = local_client("127.0.0.5", any.port);
    assert_int_equal(call_letter(c), 'a');
    egm__rpc_client_destroy(c);
    expect_stats(&any, 1, 1);
    env_stop(&any);

    env_start_letter(&any, "::", 0, 'b', NULL);
    assert_int_equal(egm__rpc_server_local_name(any.server, name, sizeof(name)), EGM_OK);
    snprintf(want, sizeof(want), "@egmstore-master-[::]:%u", (unsigned)any.port);
    assert_string_equal(name, want);
    c = local_client("[::1]", any.port);
    assert_int_equal(call_letter(c), 'b');
    egm__rpc_client_destroy(c);
    expect_stats(&any, 1, 1);
    snprintf(want, sizeof(want), "[::]:%u 0.0.0.0:%u", (unsigned)any.port, (unsigned)any.port);
    if (strcmp(egm__rpc_server_identity(any.server), want) == 0) {
        /* dual stack (net.ipv6.bindv6only = 0): IPv4 clients too */
        c = local_client("127.0.0.5", any.port);
        assert_int_equal(call_letter(c), 'b');
        egm__rpc_client_destroy(c);
        expect_stats(&any, 2, 2);
    } else {
        want[strcspn(want, " ")] = '\0';
        assert_string_equal(egm__rpc_server_identity(any.server), want);
    }
    env_stop(&any);
    assert_int_equal(egm__alloc_live_count(), live);
}

/* The Unix name of the endpoint a client was given is held by a server that
 * listens elsewhere: its Hello does not list that endpoint, so the client
 * does not keep that connection and reaches the right server over TCP. */
static void test_local_socket_identity_mismatch(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    env_t wrong, right;
    char name[EGM_RPC_LOCAL_NAME_MAX];
    egm_rpc_endpoint_t ep;

    env_start_letter(&wrong, "127.0.0.1", 0, 'w', "");
    assert_int_equal(egm__rpc_endpoint_from_host("127.0.0.3", wrong.port, &ep), EGM_OK);
    egm__rpc_local_name(&ep, name, sizeof(name));
    egm__reactor_stop(wrong.reactor);
    pthread_join(wrong.thread, NULL);
    assert_int_equal(egm__rpc_server_listen_unix(wrong.server, name), EGM_OK);
    assert_int_equal(pthread_create(&wrong.thread, NULL, reactor_main, wrong.reactor), 0);
    env_start_letter(&right, "127.0.0.3", wrong.port, 'r', "");

    egm_rpc_client_t *c = local_client("127.0.0.3", wrong.port);
    assert_int_equal(call_letter(c), 'r');
    assert_int_equal(call_letter(c), 'r');
    expect_stats(&right, 1, 0);
    egm_rpc_server_stats_t st;
    egm__rpc_server_stats(wrong.server, &st);
    assert_true(st.connections_unix == 1); /* asked who it is, then left */
    assert_true(st.requests == 1);
    egm__rpc_client_destroy(c);
    env_stop(&right);
    env_stop(&wrong);
    assert_int_equal(egm__alloc_live_count(), live);
}

/* Hello is answered before Auth (the token goes only to the right master),
 * with the server's endpoints; anything else before Auth is still refused. */
static void test_hello_before_auth(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    egm_reactor_t *reactor;
    egm_rpc_server_t *server;
    pthread_t thread;
    char name[EGM_RPC_LOCAL_NAME_MAX], want[64];
    uint8_t buf[256];
    egm_frame_header_t h;
    egm_rpc_server_params_t params = {
        .host = "127.0.0.1", .max_frame_size = MAX_FRAME, .auth_token = "hello-test-token"};

    assert_int_equal(egm__reactor_create(&reactor), EGM_OK);
    assert_int_equal(egm__rpc_server_create(reactor, &params, &server), EGM_OK);
    assert_int_equal(egm__rpc_server_register(server, TYPE_ECHO, echo_handler, NULL), EGM_OK);
    uint16_t port = egm__rpc_server_port(server);
    assert_int_equal(egm__rpc_server_local_name(server, name, sizeof(name)), EGM_OK);
    assert_int_equal(egm__rpc_server_listen_unix(server, name), EGM_OK);
    assert_int_equal(pthread_create(&thread, NULL, reactor_main, reactor), 0);
    snprintf(want, sizeof(want), "127.0.0.1:%u", (unsigned)port);

    for (int over_unix = 0; over_unix < 2; over_unix++) {
        int fd = over_unix ? raw_connect_unix(name) : raw_connect(port);
        size_t n = build_frame(buf, EGM_RPC_VERSION, EGM_RPC_HELLO, 5, NULL, 0);
        raw_send(fd, buf, n);
        raw_read_frame(fd, &h, buf, sizeof(buf));
        assert_int_equal(h.flags, EGM_FRAME_REPLY);
        assert_int_equal(h.type, EGM_RPC_HELLO);
        assert_true(h.request_id == 5);
        assert_int_equal(h.length, strlen(want));
        assert_memory_equal(buf, want, h.length);
        n = build_frame(buf, EGM_RPC_VERSION, TYPE_ECHO, 6, "x", 1);
        raw_send(fd, buf, n);
        raw_expect_error(fd, 6, EGM_ERR_PERMISSION, "auth required");
        raw_expect_eof(fd);
        close(fd);
    }

    /* and a client with the token, over Unix, gets on with its calls */
    egm_rpc_client_params_t cp = {.addr = want,
                                  .connect_timeout_ms = 3000,
                                  .max_frame_size = MAX_FRAME,
                                  .prefer_local_socket = 1,
                                  .auth_token = "hello-test-token"};
    egm_rpc_client_t *client = NULL;
    assert_int_equal(egm__rpc_client_create(&cp, &client), EGM_OK);
    echo_ok(client, "after hello and auth");
    egm_rpc_server_stats_t st;
    egm__rpc_server_stats(server, &st);
    assert_true(st.connections_unix == 2);
    assert_true(egm__rpc_client_local_probe(want, 3000));
    egm__rpc_client_destroy(client);

    egm__reactor_stop(reactor);
    pthread_join(thread, NULL);
    egm__rpc_server_destroy(server);
    egm__reactor_destroy(reactor);
    assert_int_equal(egm__alloc_live_count(), live);
}

/* A Hello round trip on fd (answered with or without the token). */
static void raw_hello(int fd, uint64_t id)
{
    uint8_t buf[256];
    egm_frame_header_t h;
    raw_send(fd, buf, build_frame(buf, EGM_RPC_VERSION, EGM_RPC_HELLO, id, NULL, 0));
    raw_read_frame(fd, &h, buf, sizeof(buf));
    assert_int_equal(h.flags, EGM_FRAME_REPLY);
    assert_true(h.request_id == id);
}

/* With the token required and room for 2 connections without it (4 / 2):
 * a third closes one that was refused and lingers (so that its refusal is
 * read) before an older one still waiting to present the token. */
static void test_room_made_from_refused_first(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    egm_reactor_t *reactor;
    egm_rpc_server_t *server;
    pthread_t thread;
    egm_rpc_server_params_t params = {.host = "127.0.0.1",
                                      .max_frame_size = MAX_FRAME,
                                      .max_connections = 4,
                                      .auth_token = "room-test-token"};
    assert_int_equal(egm__reactor_create(&reactor), EGM_OK);
    assert_int_equal(egm__rpc_server_create(reactor, &params, &server), EGM_OK);
    assert_int_equal(egm__rpc_server_register(server, TYPE_ECHO, echo_handler, NULL), EGM_OK);
    uint16_t port = egm__rpc_server_port(server);
    assert_int_equal(pthread_create(&thread, NULL, reactor_main, reactor), 0);

    int waiting = raw_connect(port);
    raw_hello(waiting, 1); /* taken, still without the token */
    int refused = raw_connect(port);
    uint8_t buf[64];
    raw_send(refused, buf, build_frame(buf, EGM_RPC_VERSION, TYPE_ECHO, 2, "x", 1));
    raw_expect_error(refused, 2, EGM_ERR_PERMISSION, "auth required");
    uint64_t refused_ms = egm__now_ms();
    int third = raw_connect(port);
    raw_hello(third, 3);
    /* The refused one lingers 2 s (server.c LINGER_MS): past that it is
     * closed anyway and nothing here tells which went first. */
    int linger_ended = egm__now_ms() - refused_ms >= 1500;
    raw_expect_eof(refused);
    raw_hello(waiting, 4); /* the older one is still served */
    egm_rpc_server_stats_t st;
    egm__rpc_server_stats(server, &st);
    if (!linger_ended)
        assert_int_equal(st.auth_failures, 2); /* the refusal, and the room made */

    close(waiting);
    close(refused);
    close(third);
    egm__reactor_stop(reactor);
    pthread_join(thread, NULL);
    egm__rpc_server_destroy(server);
    egm__reactor_destroy(reactor);
    assert_int_equal(egm__alloc_live_count(), live);
    if (linger_ended) {
        EGM_SKIP("the refused connection's linger ended before the third came (a stalled host): "
                 "the preference was not exercised");
    }
}

/* --- several servers sharing listeners (a group) ----------------------------- */

/* Answers the index of the server that ran it (its arg). */
static egm_status_t whoami_handler(void *arg, uint16_t type, const uint8_t *payload, size_t len,
                                   egm_rpc_reply_t *reply)
{
    (void)type;
    (void)payload;
    (void)len;
    reply->buf = egm_malloc(1, "test_whoami");
    if (reply->buf == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "whoami");
    reply->buf[0] = (uint8_t)('0' + (uintptr_t)arg);
    reply->len = 1;
    return EGM_OK;
}

/* Which server answered on fd: '0' or '1'. */
static char raw_whoami(int fd, uint64_t id)
{
    uint8_t buf[64];
    egm_frame_header_t h;
    size_t n = build_frame(buf, EGM_RPC_VERSION, TYPE_ECHO, id, NULL, 0);
    raw_send(fd, buf, n);
    raw_read_frame(fd, &h, buf, sizeof(buf));
    assert_int_equal(h.flags, EGM_FRAME_REPLY);
    assert_true(h.request_id == id);
    assert_int_equal(h.length, 1);
    return (char)buf[0];
}

/* An owner and a peer on two reactor threads share the TCP and Unix
 * listeners: connections opened one after another (each answered before the
 * next) go to the server with fewer open ones, so each serves half, whichever
 * thread accepted them; the group's connection cap and stats cover both. */
static void test_peer_group_spreads_connections(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    egm_reactor_t *reactors[2];
    egm_rpc_server_t *servers[2];
    pthread_t threads[2];
    char name[EGM_RPC_LOCAL_NAME_MAX];
    egm_rpc_server_params_t params = {
        .host = "127.0.0.1", .port = 0, .max_frame_size = MAX_FRAME, .max_connections = 8};

    for (int i = 0; i < 2; i++)
        assert_int_equal(egm__reactor_create(&reactors[i]), EGM_OK);
    assert_int_equal(egm__rpc_server_create(reactors[0], &params, &servers[0]), EGM_OK);
    uint16_t port = egm__rpc_server_port(servers[0]);
    assert_int_equal(egm__rpc_server_local_name(servers[0], name, sizeof(name)), EGM_OK);
    assert_int_equal(egm__rpc_server_listen_unix(servers[0], name), EGM_OK);
    assert_int_equal(egm__rpc_server_create_peer(reactors[1], servers[0], &servers[1]), EGM_OK);
    assert_int_equal(egm__rpc_server_port(servers[1]), port);
    /* A Unix listener comes before the peers. */
    assert_int_equal(egm__rpc_server_listen_unix(servers[0], "@egmstore-test-late"),
                     EGM_ERR_INVALID_ARG);
    for (uintptr_t i = 0; i < 2; i++)
        assert_int_equal(egm__rpc_server_register(servers[i], TYPE_ECHO, whoami_handler, (void *)i),
                         EGM_OK);
    for (int i = 0; i < 2; i++)
        assert_int_equal(pthread_create(&threads[i], NULL, reactor_main, reactors[i]), 0);

    int fds[8], served[2] = {0, 0};
    for (int i = 0; i < 8; i++) {
        fds[i] = i % 2 ? raw_connect_unix(name) : raw_connect(port);
        char who = raw_whoami(fds[i], (uint64_t)i + 1);
        assert_true(who == '0' || who == '1');
        served[who - '0']++;
        assert_int_equal(raw_whoami(fds[i], 100 + (uint64_t)i), who); /* it stays there */
    }
    assert_int_equal(served[0], 4);
    assert_int_equal(served[1], 4);
    egm_rpc_server_stats_t st, one;
    egm__rpc_server_group_stats(servers[1], &st);
    assert_int_equal(st.connections_open, 8);
    assert_int_equal(st.connections_accepted, 8);
    assert_int_equal(st.connections_unix, 4);
    assert_int_equal(st.requests, 16);
    for (int i = 0; i < 2; i++) {
        egm__rpc_server_stats(servers[i], &one);
        assert_int_equal(one.connections_open, 4);
        assert_int_equal(one.requests, 8);
    }

    /* The cap is the group's: a ninth connection is closed at once. */
    int extra = raw_connect(port);
    raw_expect_eof(extra);
    close(extra);

    for (int i = 0; i < 8; i++)
        close(fds[i]);
    for (int k = 0; k < 500; k++) {
        egm__rpc_server_group_stats(servers[0], &st);
        if (st.connections_open == 0)
            break;
        egm__sleep_ms(10);
    }
    assert_int_equal(st.connections_open, 0);
    for (int i = 0; i < 2; i++) {
        egm__reactor_stop(reactors[i]);
        pthread_join(threads[i], NULL);
    }
    egm__rpc_server_destroy(servers[1]); /* peers first */
    egm__rpc_server_destroy(servers[0]);
    for (int i = 0; i < 2; i++)
        egm__reactor_destroy(reactors[i]);
    assert_int_equal(egm__alloc_live_count(), live);
}

static void test_held_replies(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    env_t env;
    uint8_t frame[256];
    assert_int_equal(sem_init(&held_sem, 0, 0), 0);
    n_held = n_taken = n_seen = 0;
    assert_null(egm__rpc_server_hold()); /* outside a handler */
    env_start(&env, 0, 0);
    int fd = raw_connect(env.port);

    /* Held, then an echo behind it on the same connection: the echo is
     * answered first, the held reply when released (another thread). */
    raw_send(fd, frame, build_frame(frame, EGM_RPC_VERSION, TYPE_HOLD, 1, "a", 1));
    egm_rpc_hold_t *h = next_held();
    raw_send(fd, frame, build_frame(frame, EGM_RPC_VERSION, TYPE_ECHO, 2, "b", 1));
    raw_expect_reply(fd, 2, "b");
    release_text(h, "a-late");
    raw_expect_reply(fd, 1, "a-late");

    /* Released with an error: an ErrorReply with its status and text. */
    raw_send(fd, frame, build_frame(frame, EGM_RPC_VERSION, TYPE_HOLD, 3, "c", 1));
    egm__rpc_hold_release(next_held(), EGM_ERR_UNREACHABLE, NULL, 0, "standby late");
    raw_expect_error(fd, 3, EGM_ERR_UNREACHABLE, "standby late");

    /* Alone on a fresh connection, a request has nobody waiting behind it;
     * once its peer sent a request while another was held ("b" behind "a"),
     * the next may come at any moment: others wait behind each of its. */
    assert_int_equal(egm__rpc_server_others_waiting(), 0); /* outside a handler */
    assert_int_equal(held_others_waiting[0], 0);
    assert_int_equal(held_others_waiting[1], 1);
    /* A peer that waits for each answer before its next request stays alone. */
    int fd3 = raw_connect(env.port);
    for (uint64_t id = 10; id < 12; id++) {
        raw_send(fd3, frame, build_frame(frame, EGM_RPC_VERSION, TYPE_HOLD, id, "x", 1));
        release_text(next_held(), "alone");
        raw_expect_reply(fd3, id, "alone");
    }
    assert_int_equal(held_others_waiting[2], 0);
    assert_int_equal(held_others_waiting[3], 0);
    /* Two held on one connection, sent in one write: the first has the
     * second waiting behind it, and the connection is pipelined from then
     * on; released in the other order. */
    size_t two = build_frame(frame, EGM_RPC_VERSION, TYPE_HOLD, 4, "d", 1);
    two += build_frame(frame + two, EGM_RPC_VERSION, TYPE_HOLD, 5, "e", 1);
    raw_send(fd3, frame, two);
    egm_rpc_hold_t *h4 = next_held();
    egm_rpc_hold_t *h5 = next_held();
    assert_int_equal(held_others_waiting[4], 1);
    assert_int_equal(held_others_waiting[5], 1);
    release_text(h5, "five");
    raw_expect_reply(fd3, 5, "five");
    release_text(h4, "four");
    raw_expect_reply(fd3, 4, "four");
    /* A second with nothing pipelined since (a lone caller whose request once
     * met its own liveness ping): alone again. */
    usleep(1100 * 1000);
    raw_send(fd3, frame, build_frame(frame, EGM_RPC_VERSION, TYPE_HOLD, 12, "y", 1));
    release_text(next_held(), "alone again");
    raw_expect_reply(fd3, 12, "alone again");
    assert_int_equal(held_others_waiting[6], 0);
    close(fd3);

    /* The connection is reset before the release: the server closes it at
     * once, and the reply is dropped. */
    raw_send(fd, frame, build_frame(frame, EGM_RPC_VERSION, TYPE_HOLD, 6, "f", 1));
    h = next_held();
    struct linger reset = {.l_onoff = 1, .l_linger = 0};
    assert_int_equal(setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset)), 0);
    close(fd);
    wait_open_connections(&env, 0);
    release_text(h, "nobody");
    /* The server still answers others. */
    fd = raw_connect(env.port);
    raw_send(fd, frame, build_frame(frame, EGM_RPC_VERSION, TYPE_ECHO, 7, "g", 1));
    raw_expect_reply(fd, 7, "g");

    /* The peer half-closes after its request: the held reply still comes,
     * then the server closes. */
    int fd2 = raw_connect(env.port);
    raw_send(fd2, frame, build_frame(frame, EGM_RPC_VERSION, TYPE_HOLD, 9, "i", 1));
    h = next_held();
    assert_int_equal(shutdown(fd2, SHUT_WR), 0);
    release_text(h, "after eof");
    raw_expect_reply(fd2, 9, "after eof");
    raw_expect_eof(fd2);
    close(fd2);

    /* The server goes with a reply held: released afterwards, it is freed. */
    raw_send(fd, frame, build_frame(frame, EGM_RPC_VERSION, TYPE_HOLD, 8, "h", 1));
    h = next_held();
    env_stop(&env);
    release_text(h, "too late");
    close(fd);
    sem_destroy(&held_sem);
    assert_int_equal(egm__alloc_live_count(), live);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_echo_and_msg),
        cmocka_unit_test(test_concurrent_callers),
        cmocka_unit_test(test_begun_calls),
        cmocka_unit_test(test_begun_calls_fail),
        cmocka_unit_test(test_raw_pipelining_and_partial_frames),
        cmocka_unit_test(test_bad_frames),
        cmocka_unit_test(test_handler_errors),
        cmocka_unit_test(test_timeout_and_late_reply),
        cmocka_unit_test(test_spinning_caller),
        cmocka_unit_test(test_out_of_order_replies_to_waiting_callers),
        cmocka_unit_test(test_reader_timeout_hands_over),
        cmocka_unit_test(test_concurrent_mixed_sizes_and_timeouts),
        cmocka_unit_test(test_server_restart),
        cmocka_unit_test(test_timeout_follows_moved_master),
        cmocka_unit_test(test_max_connections),
        cmocka_unit_test(test_room_made_from_refused_first),
        cmocka_unit_test(test_local_socket_preferred),
        cmocka_unit_test(test_local_socket_fallback),
        cmocka_unit_test(test_local_socket_name_clash),
        cmocka_unit_test(test_local_socket_keyed_by_address),
        cmocka_unit_test(test_local_socket_wildcard),
        cmocka_unit_test(test_local_socket_identity_mismatch),
        cmocka_unit_test(test_hello_before_auth),
        cmocka_unit_test(test_peer_group_spreads_connections),
        cmocka_unit_test(test_held_replies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
