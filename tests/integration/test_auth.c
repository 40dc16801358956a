/* Integration: the cluster token (auth_token / auth_token_file) and the fd
 * socket's uid check, against real master and provider processes.
 *
 * - No token anywhere: clients work as before.
 * - Token on master and provider: a client without it is refused at
 *   egm_client_create ("auth required"), one with a wrong token too ("auth
 *   token mismatch"); the right token puts and gets over shm and over tcp.
 * - The provider's tcp data server and fd socket refuse connections that do
 *   not present the token, and the master's TCP RPC port does too; every
 *   refusal is counted in /metrics.
 * - The tcp data server refuses a range outside the segment it names.
 * - A peer of another uid (a forked child that becomes nobody, when the tests
 *   run as root) is refused by the fd socket, unless fd_allowed_gid names its
 *   group.
 * - The master's admin HTTP answers every path but /health and /metrics only
 *   with `Authorization: Bearer <token>` (401 and a Bearer challenge else).
 * - Neither token appears in the daemons' logs (at debug level), /metrics or
 *   /health. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "client/client_int.h"
#include "common/clock.h"
#include "common/process.h"
#include "common/sock.h"
#include "rpc/frame.h"
#include "rpc/proto_util.h"
#include "rpc/server.h"
#include "support/cluster.h"
#include "support/http_get.h"
#include "support/testutil.h"
#include "te/te_int.h"

#define TOKEN "k9Qv-cluster-token-7f3a1e"
#define WRONG "k9Qv-wrong-token-000000"
#define IO_MS 10000
#define BODY_MAX (256 * 1024)

static egm_test_cluster_t cluster;
static char dir[128];
static char token_file[192];
static char log_path[192];
static unsigned master_http;
static unsigned provider_http;
static egm_test_segment_t seg; /* the cluster's one segment */
static char body[BODY_MAX];

/* Runs `start` with the test's stderr pointed at the log file, so that the
 * daemons it spawns write their logs there. */
static int with_daemon_log(int (*start)(void))
{
    int saved = dup(2);
    int log = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
    if (saved < 0 || log < 0)
        return -1;
    dup2(log, 2);
    int rc = start();
    dup2(saved, 2);
    close(saved);
    close(log);
    return rc;
}

static int start_master(void)
{
    const char *flags[] = {"--auth-token-file", token_file, "--http-port", "0",
                           "--log-level",       "debug",    NULL};
    char line[512];
    if (egm_test_start_master(&cluster, flags) != 0 ||
        egm__process_wait_line(&cluster.master, "egmstore master admin http ", line, sizeof(line),
                               30000) != EGM_OK)
        return -1;
    const char *colon = strrchr(line, ':');
    master_http = colon != NULL ? (unsigned)atoi(colon + 1) : 0;
    return master_http > 0 ? 0 : -1;
}

static int start_provider(void)
{
    const char *flags[] = {
        "--auth-token-file", token_file, "--provider-http-port", "0", "--log-level", "debug", NULL};
    int p = egm_test_start_provider(&cluster, "16MiB", flags);
    if (p < 0)
        return -1;
    provider_http = egm_test_ready_http_port(cluster.provider_ready[p]);
    return provider_http > 0 ? 0 : -1;
}

static egm_client_t *token_client(const char *protocol)
{
    char pair[256];
    snprintf(pair, sizeof(pair), "auth_token_file=%s", token_file);
    const char *pairs[] = {pair, NULL};
    return egm_test_client(&cluster, protocol, pairs);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/egm-auth-XXXXXX");
    if (mkdtemp(dir) == NULL)
        return -1;
    snprintf(token_file, sizeof(token_file), "%s/token", dir);
    snprintf(log_path, sizeof(log_path), "%s/daemons.log", dir);
    int fd = open(token_file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || write(fd, TOKEN "\n", sizeof(TOKEN)) != (ssize_t)sizeof(TOKEN))
        return -1;
    close(fd);
    if (with_daemon_log(start_master) != 0 || with_daemon_log(start_provider) != 0)
        return -1;

    egm_client_t *client = token_client("tcp");
    if (client == NULL || egm_test_only_segment(client, &seg) != 0)
        return -1;
    egm_client_destroy(client);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    egm_test_cluster_stop(&cluster);
    unlink(token_file);
    unlink(log_path);
    rmdir(dir);
    return 0;
}

static egm_client_t *client_with(const char *protocol, const char *pair, egm_status_t *status_p,
                                 char *error, size_t error_len)
{
    egm_config_t *config = NULL;
    egm_client_t *client = NULL;
    assert_int_equal(egm_config_create(&config), EGM_OK);
    assert_int_equal(egm_config_set(config, "master_server_addr", cluster.master_addr), EGM_OK);
    assert_int_equal(egm_config_set(config, "protocol", protocol), EGM_OK);
    if (pair != NULL)
        assert_int_equal(egm_config_set_pair(config, pair), EGM_OK);
    *status_p = egm_client_create(config, &client);
    snprintf(error, error_len, "%s", egm_last_error());
    egm_config_destroy(config);
    return client;
}

static void put_get(egm_client_t *client, const char *key, size_t len, unsigned seed)
{
    char *value = malloc(len), *back = malloc(len);
    size_t got = 0;
    assert_non_null(value);
    assert_non_null(back);
    egm_test_fill(value, len, seed);
    assert_int_equal(egm_put(client, key, value, len, NULL), EGM_OK);
    assert_int_equal(egm_register_buffer(client, back, len), EGM_OK);
    assert_int_equal(egm_get_into(client, key, back, len, &got), EGM_OK);
    assert_int_equal(egm_unregister_buffer(client, back), EGM_OK);
    assert_int_equal(got, len);
    assert_memory_equal(back, value, len);
    free(value);
    free(back);
}

static unsigned long long metric_value(unsigned port, const char *name)
{
    assert_int_equal(egm_test_http_get(port, "/metrics", body, sizeof(body)), 200);
    char pattern[128];
    snprintf(pattern, sizeof(pattern), "\n%s ", name);
    const char *p = strstr(body, pattern);
    assert_non_null(p);
    return strtoull(p + strlen(pattern), NULL, 10);
}

/* ---- the master ------------------------------------------------------------ */

static void test_client_without_token_refused(void **state)
{
    (void)state;
    egm_status_t status;
    char error[512];
    unsigned long long before = metric_value(master_http, "egm_master_auth_failures_total");
    egm_client_t *client = client_with("tcp", NULL, &status, error, sizeof(error));
    assert_null(client);
    assert_int_equal(status, EGM_ERR_PERMISSION);
    assert_non_null(strstr(error, "auth required"));
    assert_null(strstr(error, TOKEN));
    assert_true(metric_value(master_http, "egm_master_auth_failures_total") > before);
}

static void test_client_wrong_token_refused(void **state)
{
    (void)state;
    egm_status_t status;
    char error[512];
    unsigned long long before = metric_value(master_http, "egm_master_auth_failures_total");
    egm_client_t *client = client_with("shm", "auth_token=" WRONG, &status, error, sizeof(error));
    assert_null(client);
    assert_int_equal(status, EGM_ERR_PERMISSION);
    assert_non_null(strstr(error, "auth token mismatch"));
    assert_null(strstr(error, TOKEN));
    assert_null(strstr(error, WRONG));
    assert_true(metric_value(master_http, "egm_master_auth_failures_total") > before);
}

static void test_right_token_shm_and_tcp(void **state)
{
    (void)state;
    egm_status_t status;
    char error[512];
    /* inline key, the way an application may set it */
    egm_client_t *shm = client_with("shm", "auth_token=" TOKEN, &status, error, sizeof(error));
    assert_non_null(shm);
    put_get(shm, "auth/shm", 100000, 1);
    egm_client_destroy(shm);

    egm_client_t *tcp = token_client("tcp");
    assert_non_null(tcp);
    put_get(tcp, "auth/tcp", 300000, 2);
    egm_client_destroy(tcp);
}

static void test_token_keys_checked(void **state)
{
    (void)state;
    egm_status_t status;
    char error[512];
    /* both keys */
    egm_config_t *config = NULL;
    egm_client_t *client = NULL;
    assert_int_equal(egm_config_create(&config), EGM_OK);
    assert_int_equal(egm_config_set(config, "master_server_addr", cluster.master_addr), EGM_OK);
    assert_int_equal(egm_config_set(config, "auth_token", TOKEN), EGM_OK);
    assert_int_equal(egm_config_set(config, "auth_token_file", token_file), EGM_OK);
    assert_int_equal(egm_client_create(config, &client), EGM_ERR_CONFIG);
    assert_non_null(strstr(egm_last_error(), "auth_token and auth_token_file"));
    egm_config_destroy(config);

    /* a token file that others may read */
    assert_int_equal(chmod(token_file, 0644), 0);
    char pair[256];
    snprintf(pair, sizeof(pair), "auth_token_file=%s", token_file);
    client = client_with("tcp", pair, &status, error, sizeof(error));
    assert_int_equal(chmod(token_file, 0600), 0);
    assert_null(client);
    assert_int_equal(status, EGM_ERR_CONFIG);
    assert_non_null(strstr(error, "auth_token_file"));
    assert_non_null(strstr(error, "group or others"));
    assert_null(strstr(error, TOKEN));
}

/* A Ping header of `length` payload bytes (none sent) on the master's TCP
 * port without Auth: an error reply that says so, then the master closes. */
static void frame_without_auth(uint32_t length)
{
    int fd;
    assert_int_equal(egm__sock_tcp_connect("127.0.0.1", (uint16_t)cluster.master_port, 3000, &fd),
                     EGM_OK);
    uint8_t hdr[EGM_FRAME_HEADER_SIZE];
    egm_frame_header_t h = {EGM_RPC_VERSION, 0, EGM_RPC_PING, 77, length};
    egm__frame_encode_header(&h, hdr);
    assert_int_equal(egm__sock_write_full(fd, hdr, sizeof(hdr)), EGM_OK);
    assert_int_equal(egm__sock_read_full_timeout(fd, hdr, sizeof(hdr), IO_MS), EGM_OK);
    assert_int_equal(egm__frame_decode_header(hdr, 1u << 20, &h), EGM_OK);
    assert_int_equal(h.request_id, 77);
    assert_true(h.flags & EGM_FRAME_ERROR);
    uint8_t payload[1024];
    assert_true(h.length <= sizeof(payload));
    assert_int_equal(egm__sock_read_full_timeout(fd, payload, h.length, IO_MS), EGM_OK);
    Egm__ErrorReply *err = NULL;
    assert_int_equal(
        egm__pb_unpack(&egm__error_reply__descriptor, payload, h.length, (ProtobufCMessage **)&err),
        EGM_OK);
    assert_int_equal(err->status, EGM_ERR_PERMISSION);
    assert_non_null(strstr(err->error, "auth required"));
    egm__pb_free(&err->base);
    /* then closed: EOF (bounded by IO_MS) */
    assert_int_equal(egm__sock_read_full_timeout(fd, hdr, 1, IO_MS), EGM_ERR_UNREACHABLE);
    close(fd);
}

static void test_master_tcp_frame_without_auth(void **state)
{
    (void)state;
    frame_without_auth(0);
}

/* Before the token no frame longer than a token is read: a 32 MiB header is
 * refused at once, without waiting for (or buffering) its payload. */
static void test_master_large_frame_before_auth(void **state)
{
    (void)state;
    unsigned long long before = metric_value(master_http, "egm_master_auth_failures_total");
    frame_without_auth(32u << 20);
    assert_true(metric_value(master_http, "egm_master_auth_failures_total") > before);
}

/* ---- the master's admin HTTP ----------------------------------------------- */

/* GET path from 127.0.0.1:port, with `authorization` (NULL = none) as the
 * Authorization header's value. Returns the HTTP status (-1: no answer in
 * 10 s) and the whole answer, headers and body, in out. */
static int http_get_auth(unsigned port, const char *path, const char *authorization, char *out,
                         size_t out_len)
{
    char header[256];
    if (authorization != NULL)
        assert_true((size_t)snprintf(header, sizeof(header), "Authorization: %s", authorization) <
                    sizeof(header));
    return egm_test_http_request("127.0.0.1", port, path, authorization != NULL ? header : NULL,
                                 out, out_len, NULL);
}

/* With a token, every admin path but /health and /metrics needs it as a
 * bearer token: 401 with a Bearer challenge without it or with a wrong one
 * (or another scheme), the endpoint's answer with it. */
static void test_admin_http_requires_token(void **state)
{
    (void)state;
    /* Mooncake's /query_key of a key that is not there answers 404 (with the token). */
    const char *guarded[] = {"/keys",
                             "/keys?prefix=a&limit=5",
                             "/segments",
                             "/get_all_segments",
                             "/query_key?key=auth/none",
                             "/batch_query_keys?keys=auth/none,auth/tcp",
                             "/metrics/summary",
                             "/no-such-endpoint"};
    const char *refused[] = {NULL,           "Bearer " WRONG, "Bearer", "Bearer " TOKEN "x",
                             "Basic " TOKEN, "Token " TOKEN};
    const char *accepted[] = {"Bearer " TOKEN, "bearer   " TOKEN " "};
    unsigned long long refusals = 0;
    unsigned long long before = metric_value(master_http, "egm_master_http_auth_failures_total");
    unsigned long long rpc_before = metric_value(master_http, "egm_master_auth_failures_total");

    for (size_t p = 0; p < sizeof(guarded) / sizeof(guarded[0]); p++) {
        for (size_t r = 0; r < sizeof(refused) / sizeof(refused[0]); r++) {
            int st = http_get_auth(master_http, guarded[p], refused[r], body, sizeof(body));
            refusals++;
            if (st != 401)
                fail_msg("GET %s with Authorization \"%s\": %d, not 401", guarded[p],
                         refused[r] != NULL ? refused[r] : "(none)", st);
            assert_non_null(strstr(body, "\r\nWWW-Authenticate: Bearer realm=\"egmstore\""));
            assert_non_null(strstr(body, "\"error\":\"authorization "));
            assert_null(strstr(body, TOKEN));
            assert_null(strstr(body, "\"segments\"")); /* nothing of the endpoint */
        }
        for (size_t a = 0; a < sizeof(accepted) / sizeof(accepted[0]); a++) {
            int st = http_get_auth(master_http, guarded[p], accepted[a], body, sizeof(body));
            int want = strcmp(guarded[p], "/no-such-endpoint") == 0 ||
                               strncmp(guarded[p], "/query_key", 10) == 0
                           ? 404
                           : 200;
            if (st != want)
                fail_msg("GET %s with the token: %d, not %d", guarded[p], st, want);
        }
    }
    /* a wrong token says so in its challenge */
    assert_int_equal(http_get_auth(master_http, "/keys", "Bearer " WRONG, body, sizeof(body)), 401);
    refusals++;
    assert_non_null(strstr(body, "error=\"invalid_token\""));
    /* the answers with the token are the endpoints' own */
    assert_int_equal(http_get_auth(master_http, "/segments", "Bearer " TOKEN, body, sizeof(body)),
                     200);
    assert_non_null(strstr(body, "\"tcp_endpoint\":"));
    assert_int_equal(http_get_auth(master_http, "/keys", "Bearer " TOKEN, body, sizeof(body)), 200);
    assert_non_null(strstr(body, "\"keys\":["));

    /* probes and scrapers need nothing */
    assert_int_equal(http_get_auth(master_http, "/health", NULL, body, sizeof(body)), 200);
    assert_non_null(strstr(body, "\"status\":\"ok\""));
    assert_int_equal(http_get_auth(master_http, "/metrics", NULL, body, sizeof(body)), 200);
    assert_non_null(strstr(body, "egm_master_auth_failures_total"));
    assert_int_equal(http_get_auth(master_http, "/health", "Bearer " WRONG, body, sizeof(body)),
                     200);
    /* /metrics counts every refusal above (and nothing else: the open paths,
     * the accepted requests and the scrapes are not refusals), apart from
     * the RPC's */
    assert_int_equal(metric_value(master_http, "egm_master_http_auth_failures_total"),
                     before + refusals);
    assert_int_equal(metric_value(master_http, "egm_master_auth_failures_total"), rpc_before);
    /* the provider's admin HTTP serves only those two */
    assert_int_equal(http_get_auth(provider_http, "/keys", NULL, body, sizeof(body)), 404);
}

/* ---- the provider's tcp data server ----------------------------------------- */

static int data_connect(void)
{
    int fd;
    assert_int_equal(egm__sock_tcp_connect(seg.data_host, seg.data_port, 3000, &fd), EGM_OK);
    return fd;
}

static void send_req(int fd, uint16_t op, uint64_t id, uint64_t offset, uint64_t length)
{
    egm_tcp_req_t req = {.magic = EGM_TCP_MAGIC,
                         .version = EGM_TCP_VERSION,
                         .op = op,
                         .request_id = id,
                         .segment = seg.id,
                         .offset = offset,
                         .length = length};
    uint8_t buf[EGM_TCP_REQ_SIZE];
    egm__tcp_req_encode(&req, buf);
    assert_int_equal(egm__sock_write_full(fd, buf, sizeof(buf)), EGM_OK);
}

static int32_t read_status(int fd, uint64_t id)
{
    uint8_t buf[EGM_TCP_REPLY_SIZE];
    egm_tcp_reply_t reply;
    assert_int_equal(egm__sock_read_full_timeout(fd, buf, sizeof(buf), IO_MS), EGM_OK);
    egm__tcp_reply_decode(buf, &reply);
    assert_int_equal(reply.magic, EGM_TCP_REPLY_MAGIC);
    assert_int_equal(reply.request_id, id);
    return reply.status;
}

static void assert_closed(int fd)
{
    uint8_t byte;
    assert_int_equal(egm__sock_read_full_timeout(fd, &byte, 1, IO_MS), EGM_ERR_UNREACHABLE);
}

/* Whether the peer closed fd (EOF or a reset) within wait_ms. */
static int peer_closed(int fd, int wait_ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};
    if (poll(&p, 1, wait_ms) <= 0)
        return 0;
    char byte;
    ssize_t n = recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

/* Waits until every fd of fds[0..n) is closed by its peer, for up to wait_ms in all. */
static int all_closed(const int *fds, size_t n, int wait_ms)
{
    uint64_t until = egm__now_ms() + (uint64_t)wait_ms;
    for (size_t i = 0; i < n; i++) {
        uint64_t now = egm__now_ms();
        if (!peer_closed(fds[i], now < until ? (int)(until - now) : 0))
            return 0;
    }
    return 1;
}

/* With idle connections fds[0..n) open: a token holder (a new client, its
 * connections opened after them) puts and gets `key` over tcp, and every idle
 * one is closed once the deadline passed. */
static void served_then_all_closed(int *fds, size_t n, const char *key)
{
    egm_client_t *client = token_client("tcp");
    assert_non_null(client);
    put_get(client, key, 65536, 71);
    egm_client_destroy(client);
    assert_true(all_closed(fds, n, 15000));
    for (size_t i = 0; i < n; i++)
        close(fds[i]);
}

#define MASTER_CROWD 540 /* past half of the master's 1024 connections */
#define DATA_CROWD 280   /* past the data server's 256 */

/* Peers without the token cannot keep token holders out by holding
 * connections open (they could: the master's and the data server's slots
 * were taken at accept, before the token, with no deadline). Connections
 * that never present it are closed after 5 s, and past their share (half the
 * slots) the oldest make room for new ones at once. */
static void test_idle_without_token_cannot_crowd_out(void **state)
{
    (void)state;
    static int fds[MASTER_CROWD];
    for (size_t i = 0; i < MASTER_CROWD; i++)
        assert_int_equal(
            egm__sock_tcp_connect("127.0.0.1", (uint16_t)cluster.master_port, 3000, &fds[i]),
            EGM_OK);
    /* past the share: the oldest (each RPC thread's) are closed, the newest kept */
    size_t closed = 0;
    for (int tries = 0; tries < 30 && closed == 0; tries++)
        for (size_t i = 0; i < 100; i++)
            closed += (size_t)peer_closed(fds[i], i == 0 ? 100 : 0);
    assert_true(closed > 0);
    for (size_t i = MASTER_CROWD - 10; i < MASTER_CROWD; i++)
        assert_false(peer_closed(fds[i], 0));
    served_then_all_closed(fds, MASTER_CROWD, "crowd/master");

    /* The data server: more idle connections than it has room for; a token
     * holder's transfer over tcp still gets one. */
    for (size_t i = 0; i < DATA_CROWD; i++)
        fds[i] = data_connect();
    served_then_all_closed(fds, DATA_CROWD, "crowd/data");
}

static void test_data_server_requires_token(void **state)
{
    (void)state;
    unsigned long long before = metric_value(provider_http, "egm_client_te_auth_failures_total");

    /* a READ of a real range, without Auth */
    int fd = data_connect();
    send_req(fd, EGM_TCP_OP_READ, 1, 0, 4096);
    assert_int_equal(read_status(fd, 1), EGM_ERR_PERMISSION);
    assert_closed(fd);
    close(fd);

    /* a wrong token */
    fd = data_connect();
    send_req(fd, EGM_TCP_OP_AUTH, 2, 0, strlen(WRONG));
    assert_int_equal(egm__sock_write_full(fd, WRONG, strlen(WRONG)), EGM_OK);
    assert_int_equal(read_status(fd, 2), EGM_ERR_PERMISSION);
    assert_closed(fd);
    close(fd);

    /* the right one, then a READ is served */
    fd = data_connect();
    send_req(fd, EGM_TCP_OP_AUTH, 3, 0, strlen(TOKEN));
    assert_int_equal(egm__sock_write_full(fd, TOKEN, strlen(TOKEN)), EGM_OK);
    assert_int_equal(read_status(fd, 3), EGM_OK);
    send_req(fd, EGM_TCP_OP_READ, 4, 0, 64);
    assert_int_equal(read_status(fd, 4), EGM_OK);
    uint8_t data[64];
    assert_int_equal(egm__sock_read_full_timeout(fd, data, sizeof(data), IO_MS), EGM_OK);
    close(fd);

    assert_int_equal(metric_value(provider_http, "egm_client_te_auth_failures_total"), before + 2);

    /* the consumer side names the problem */
    egm_tcp_client_t *tcp = NULL;
    assert_int_equal(egm__tcp_client_create(IO_MS, NULL, &tcp), EGM_OK);
    char endpoint[128];
    snprintf(endpoint, sizeof(endpoint), "%s:%u", seg.data_host, (unsigned)seg.data_port);
    assert_int_equal(egm__tcp_client_transfer(tcp, endpoint, seg.id, 0, data, 64, EGM_TE_READ),
                     EGM_ERR_PERMISSION);
    assert_non_null(strstr(egm_last_error(), "auth required"));
    egm__tcp_client_destroy(tcp);
    assert_int_equal(egm__tcp_client_create(IO_MS, WRONG, &tcp), EGM_OK);
    assert_int_equal(egm__tcp_client_transfer(tcp, endpoint, seg.id, 0, data, 64, EGM_TE_READ),
                     EGM_ERR_PERMISSION);
    assert_non_null(strstr(egm_last_error(), "auth token mismatch"));
    assert_null(strstr(egm_last_error(), WRONG));
    egm__tcp_client_destroy(tcp);
}

/* Authenticated, a range past the segment's end is refused and nothing is
 * read or written; the connection stays usable for READ. */
static void test_data_server_refuses_out_of_segment(void **state)
{
    (void)state;
    int fd = data_connect();
    send_req(fd, EGM_TCP_OP_AUTH, 1, 0, strlen(TOKEN));
    assert_int_equal(egm__sock_write_full(fd, TOKEN, strlen(TOKEN)), EGM_OK);
    assert_int_equal(read_status(fd, 1), EGM_OK);
    send_req(fd, EGM_TCP_OP_READ, 2, seg.size - 32, 64);
    assert_int_equal(read_status(fd, 2), EGM_ERR_INVALID_ARG);
    send_req(fd, EGM_TCP_OP_READ, 3, seg.size, 1);
    assert_int_equal(read_status(fd, 3), EGM_ERR_INVALID_ARG);
    send_req(fd, EGM_TCP_OP_READ, 4, UINT64_MAX - 8, 16); /* offset + length wraps */
    assert_int_equal(read_status(fd, 4), EGM_ERR_INVALID_ARG);
    send_req(fd, EGM_TCP_OP_READ, 5, seg.size - 64, 64); /* the last bytes: served */
    assert_int_equal(read_status(fd, 5), EGM_OK);
    uint8_t data[64];
    assert_int_equal(egm__sock_read_full_timeout(fd, data, sizeof(data), IO_MS), EGM_OK);
    /* a WRITE past the end is refused before its payload is taken */
    send_req(fd, EGM_TCP_OP_WRITE, 6, seg.size - 16, 4096);
    assert_int_equal(read_status(fd, 6), EGM_ERR_INVALID_ARG);
    close(fd);

    egm_tcp_client_t *tcp = NULL;
    assert_int_equal(egm__tcp_client_create(IO_MS, TOKEN, &tcp), EGM_OK);
    char endpoint[128];
    snprintf(endpoint, sizeof(endpoint), "%s:%u", seg.data_host, (unsigned)seg.data_port);
    assert_int_equal(
        egm__tcp_client_transfer(tcp, endpoint, seg.id, seg.size - 8, data, 64, EGM_TE_WRITE),
        EGM_ERR_INVALID_ARG);
    assert_int_equal(egm__tcp_client_transfer(tcp, endpoint, seg.id, 0, data, 64, EGM_TE_READ),
                     EGM_OK);
    egm__tcp_client_destroy(tcp);
}

/* ---- the fd socket ------------------------------------------------------------- */

static void test_fd_socket_requires_token(void **state)
{
    (void)state;
    int fd = -1;
    uint64_t size = 0;
    assert_int_equal(
        egm__fd_broker_fetch(seg.shm_socket, seg.id, EGM_HANDLE_MEMFD, NULL, IO_MS, &fd, &size),
        EGM_ERR_PERMISSION);
    assert_non_null(strstr(egm_last_error(), "auth required"));
    assert_int_equal(
        egm__fd_broker_fetch(seg.shm_socket, seg.id, EGM_HANDLE_MEMFD, WRONG, IO_MS, &fd, &size),
        EGM_ERR_PERMISSION);
    assert_non_null(strstr(egm_last_error(), "auth token mismatch"));
    assert_null(strstr(egm_last_error(), WRONG));
    assert_int_equal(
        egm__fd_broker_fetch(seg.shm_socket, seg.id, EGM_HANDLE_MEMFD, TOKEN, IO_MS, &fd, &size),
        EGM_OK);
    assert_int_equal(size, seg.size);
    close(fd);
}

/* A forked child that becomes nobody asks with the right token: refused by
 * uid. Exit code 0 = refused with PERMISSION, 10 + n = something else. */
static int fetch_as_nobody(const char *socket)
{
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        if (setgid(65534) != 0 || setuid(65534) != 0)
            _exit(2);
        int fd = -1;
        uint64_t size = 0;
        egm_status_t st =
            egm__fd_broker_fetch(socket, seg.id, EGM_HANDLE_MEMFD, TOKEN, IO_MS, &fd, &size);
        _exit(st == EGM_ERR_PERMISSION ? 0 : st == EGM_OK ? 1 : 3);
    }
    int wstatus;
    assert_int_equal(waitpid(pid, &wstatus, 0), pid);
    assert_true(WIFEXITED(wstatus));
    return WEXITSTATUS(wstatus);
}

static void test_fd_socket_refuses_other_uid(void **state)
{
    (void)state;
    if (geteuid() != 0)
        EGM_SKIP("needs root to become another user");
    unsigned long long before = metric_value(provider_http, "egm_client_te_fd_peers_refused_total");
    assert_int_equal(fetch_as_nobody(seg.shm_socket), 0);
    assert_int_equal(metric_value(provider_http, "egm_client_te_fd_peers_refused_total"),
                     before + 1);
}

/* fd_allowed_gid lets the group in (a second provider with it set). */
static void test_fd_allowed_gid(void **state)
{
    (void)state;
    if (geteuid() != 0)
        EGM_SKIP("needs root to become a member of the allowed group");
    const char *flags[] = {"--auth-token-file", token_file, "--fd-allowed-gid", "65534", NULL};
    int p = egm_test_start_provider(&cluster, "8MiB", flags);
    assert_true(p >= 0);
    egm_client_t *client = token_client("tcp");
    assert_non_null(client);
    Egm__ListSegmentsReply *reply = NULL;
    assert_int_equal(egm__client_list_segments(client, &reply), EGM_OK);
    char other[EGM_SHM_SOCKET_MAX] = "";
    egm_id_t saved = seg.id;
    for (size_t i = 0; i < reply->n_segments; i++) {
        const Egm__SegmentDesc *d = reply->segments[i]->desc;
        if (strcmp(d->shm_socket, seg.shm_socket) != 0) {
            snprintf(other, sizeof(other), "%s", d->shm_socket);
            seg.id = egm__id_from_pb(d->id);
        }
    }
    egm__rpc_msg_free(&reply->base);
    egm_client_destroy(client);
    assert_true(other[0] != '\0');
    assert_int_equal(fetch_as_nobody(other), 1); /* served */
    seg.id = saved;
}

/* ---- no secret in logs, /metrics, /health ------------------------------------- */

static void assert_no_token_in(const char *what, const char *text)
{
    if (strstr(text, TOKEN) != NULL || strstr(text, WRONG) != NULL)
        fail_msg("a token appears in %s", what);
}

static void test_no_secret_in_logs_metrics_health(void **state)
{
    (void)state;
    /* every refusal above was logged, at debug level at that: read them all */
    FILE *f = fopen(log_path, "r");
    assert_non_null(f);
    size_t n = fread(body, 1, sizeof(body) - 1, f);
    body[n] = '\0';
    fclose(f);
    assert_non_null(strstr(body, "RPC requires the cluster token")); /* the log is there */
    assert_non_null(strstr(body, "auth required"));                  /* a refusal logged */
    assert_no_token_in("the daemons' logs", body);
    const char *paths[] = {"/metrics", "/health"};
    for (int i = 0; i < 2; i++) {
        assert_int_equal(egm_test_http_get(master_http, paths[i], body, sizeof(body)), 200);
        assert_no_token_in(paths[i], body);
        int st = egm_test_http_get(provider_http, paths[i], body, sizeof(body));
        assert_true(st == 200 || st == 503);
        assert_true(strlen(body) > 0);
        assert_no_token_in(paths[i], body);
    }
}

/* ---- no token anywhere -------------------------------------------------------- */

static void test_no_token_works_as_before(void **state)
{
    (void)state;
    egm_test_cluster_t plain;
    assert_int_equal(egm_test_start_master(&plain, NULL), 0);
    assert_true(egm_test_start_provider(&plain, "8MiB", NULL) >= 0);
    egm_client_t *shm = egm_test_client(&plain, "shm", NULL);
    egm_client_t *tcp = egm_test_client(&plain, "tcp", NULL);
    assert_non_null(shm);
    assert_non_null(tcp);
    put_get(shm, "plain/shm", 5000, 3);
    put_get(tcp, "plain/tcp", 5000, 4);
    egm_client_destroy(shm);
    egm_client_destroy(tcp);
    egm_test_cluster_stop(&plain);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_client_without_token_refused),
        cmocka_unit_test(test_client_wrong_token_refused),
        cmocka_unit_test(test_right_token_shm_and_tcp),
        cmocka_unit_test(test_token_keys_checked),
        cmocka_unit_test(test_master_tcp_frame_without_auth),
        cmocka_unit_test(test_master_large_frame_before_auth),
        cmocka_unit_test(test_admin_http_requires_token),
        cmocka_unit_test(test_data_server_requires_token),
        cmocka_unit_test(test_data_server_refuses_out_of_segment),
        cmocka_unit_test(test_idle_without_token_cannot_crowd_out),
        cmocka_unit_test(test_fd_socket_requires_token),
        cmocka_unit_test(test_fd_socket_refuses_other_uid),
        cmocka_unit_test(test_fd_allowed_gid),
        cmocka_unit_test(test_no_secret_in_logs_metrics_health),
        cmocka_unit_test(test_no_token_works_as_before),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
