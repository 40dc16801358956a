/* Admin HTTP server: GET with path and raw query reaching the handler, HEAD
 * without a body, POST and GET-with-body refused (405 with Allow, 413), unknown
 * path 404, bad handler status 500, two requests on one kept-alive connection, growing printf
 * bodies, a busy port and a foreign address answered with EGM_ERR_CONFIG naming them, "::" dual
 * stack, start/stop in a loop without leaking memory or descriptors, the bearer token that
 * guards every path but the open ones, and peers that trickle a request's head (also after
 * an answer) cannot keep the server from answering, while a slow reader of a large answer
 * is not cut off. A real TCP client on plain sockets talks to the server. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "admin/http_server.h"
#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/sock.h"

#define BIG_LINES 5000
#define HUGE_BYTES (64u << 20)

/* What the handler saw last, written on the server thread. */
static struct {
    pthread_mutex_t lock;
    int calls;
    int wrong_arg;
    char path[256];
    char query[256];
} seen = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void handler(void *arg, const char *path, const char *query, egm_http_response_t *resp)
{
    /* No cmocka asserts here: this runs on the server's thread. */
    pthread_mutex_lock(&seen.lock);
    seen.calls++;
    seen.wrong_arg += arg != &seen;
    snprintf(seen.path, sizeof(seen.path), "%s", path);
    snprintf(seen.query, sizeof(seen.query), "%s", query);
    pthread_mutex_unlock(&seen.lock);

    if (strcmp(path, "/x") == 0) {
        resp->status = 200;
        resp->content_type = "application/json";
        egm__http_printf(resp, "{\"ok\":true,\"query\":\"%s\"}\n", query);
    } else if (strcmp(path, "/big") == 0) {
        resp->status = 200;
        for (int i = 0; i < BIG_LINES; i++)
            if (egm__http_printf(resp, "egm_line{i=\"%d\"} %d\n", i, i * 7) != EGM_OK)
                return;
    } else if (strcmp(path, "/huge") == 0) { /* more than the sockets' buffers hold */
        resp->status = 200;
        if ((resp->body = egm_malloc(HUGE_BYTES, "test_http")) != NULL) {
            memset(resp->body, 'h', HUGE_BYTES);
            resp->len = resp->cap = HUGE_BYTES;
        }
    } else if (strcmp(path, "/empty") == 0) {
        resp->status = 503; /* status with no body */
    } else if (strcmp(path, "/bad") == 0) {
        resp->status = 42;
        egm__http_printf(resp, "dropped");
    }
    /* anything else: untouched, which is a 404 */
}

static int calls(void)
{
    pthread_mutex_lock(&seen.lock);
    int n = seen.calls;
    pthread_mutex_unlock(&seen.lock);
    return n;
}

/* One request on a fresh connection; returns the whole answer (server closes
 * because we ask it to), NUL-terminated, in buf. */
static size_t http_exchange(uint16_t port, const char *request, char *buf, size_t cap)
{
    int fd;
    assert_int_equal(egm__sock_tcp_connect("127.0.0.1", port, 5000, &fd), EGM_OK);
    assert_int_equal(egm__sock_write_full(fd, request, strlen(request)), EGM_OK);
    size_t len = 0;
    for (int rounds = 0; rounds < 100000; rounds++) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        /* A guard against a hung server, not a timing assertion. */
        assert_int_equal(poll(&pfd, 1, 30000), 1);
        assert_true(len + 1 < cap);
        ssize_t n = read(fd, buf + len, cap - 1 - len);
        assert_true(n >= 0);
        if (n == 0)
            break;
        len += (size_t)n;
    }
    close(fd);
    buf[len] = '\0';
    return len;
}

static const char *body_of(const char *answer)
{
    const char *end = strstr(answer, "\r\n\r\n");
    assert_non_null(end);
    return end + 4;
}

/* Header line "Name: value" present in the header block (name case-insensitive). */
static int has_header(const char *answer, const char *name, const char *value)
{
    const char *end = strstr(answer, "\r\n\r\n");
    assert_non_null(end);
    size_t nlen = strlen(name);
    for (const char *p = strstr(answer, "\r\n"); p != NULL && p < end; p = strstr(p + 2, "\r\n")) {
        const char *h = p + 2;
        if (strncasecmp(h, name, nlen) == 0 && h[nlen] == ':') {
            const char *v = h + nlen + 1;
            while (*v == ' ')
                v++;
            if (strncmp(v, value, strlen(value)) == 0 && v[strlen(value)] == '\r')
                return 1;
        }
    }
    return 0;
}

/* The test handler on address:port. */
static egm_status_t start_at(const char *address, uint16_t port, egm_http_server_t **srv_p)
{
    egm_http_params_t params = {.address = address, .port = port, .fn = handler, .arg = &seen};
    return egm__http_start(&params, srv_p);
}

static egm_http_server_t *start_local(void)
{
    egm_http_server_t *srv = NULL;
    assert_int_equal(start_at("127.0.0.1", 0, &srv), EGM_OK);
    assert_non_null(srv);
    assert_int_not_equal(egm__http_port(srv), 0);
    return srv;
}

static void test_get_path_and_query(void **state)
{
    (void)state;
    static char buf[8192];
    egm_http_server_t *srv = start_local();
    uint16_t port = egm__http_port(srv);

    http_exchange(port, "GET /x?y=1 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", buf,
                  sizeof(buf));
    assert_true(strncmp(buf, "HTTP/1.1 200 ", 13) == 0);
    assert_true(has_header(buf, "Content-Type", "application/json"));
    assert_true(has_header(buf, "Cache-Control", "no-store"));
    const char *expect = "{\"ok\":true,\"query\":\"y=1\"}\n";
    char clen[24];
    snprintf(clen, sizeof(clen), "%zu", strlen(expect));
    assert_true(has_header(buf, "Content-Length", clen));
    assert_string_equal(body_of(buf), expect);
    assert_string_equal(seen.path, "/x");
    assert_string_equal(seen.query, "y=1");
    assert_int_equal(seen.wrong_arg, 0);

    /* No query -> ""; the path reaches the handler decoded, the query raw. */
    http_exchange(port, "GET /x HTTP/1.0\r\n\r\n", buf, sizeof(buf));
    assert_true(strncmp(buf, "HTTP/1.", 7) == 0 && strncmp(buf + 8, " 200 ", 5) == 0);
    assert_string_equal(seen.query, "");
    http_exchange(port, "GET /a%20b?k=a%20b&l=2 HTTP/1.0\r\n\r\n", buf, sizeof(buf));
    assert_string_equal(seen.path, "/a b");
    assert_string_equal(seen.query, "k=a%20b&l=2");
    egm__http_stop(srv);
}

static void test_keep_alive(void **state)
{
    (void)state;
    static char buf[8192];
    egm_http_server_t *srv = start_local();
    /* Two pipelined requests on one connection, each with its own query. */
    http_exchange(egm__http_port(srv),
                  "GET /x?a=1 HTTP/1.1\r\nHost: t\r\n\r\n"
                  "GET /x?b=2 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
                  buf, sizeof(buf));
    const char *first = strstr(buf, "{\"ok\":true,\"query\":\"a=1\"}\n");
    assert_non_null(first);
    assert_non_null(strstr(first, "HTTP/1.1 200 "));
    assert_non_null(strstr(first, "{\"ok\":true,\"query\":\"b=2\"}\n"));
    assert_string_equal(seen.query, "b=2");
    egm__http_stop(srv);
}

static void test_head_has_no_body(void **state)
{
    (void)state;
    static char buf[8192];
    egm_http_server_t *srv = start_local();
    http_exchange(egm__http_port(srv), "HEAD /x?q HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
                  buf, sizeof(buf));
    assert_true(strncmp(buf, "HTTP/1.1 200 ", 13) == 0);
    assert_true(has_header(buf, "Content-Type", "application/json"));
    assert_true(has_header(buf, "Cache-Control", "no-store"));
    assert_string_equal(body_of(buf), "");
    assert_string_equal(seen.path, "/x");
    assert_string_equal(seen.query, "q");
    egm__http_stop(srv);
}

static void test_other_methods_and_bodies_refused(void **state)
{
    (void)state;
    static char buf[8192];
    egm_http_server_t *srv = start_local();
    uint16_t port = egm__http_port(srv);
    int before = calls();

    http_exchange(
        port, "POST /x HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nConnection: close\r\n\r\nabc",
        buf, sizeof(buf));
    assert_true(strncmp(buf, "HTTP/1.1 405 ", 13) == 0);
    assert_true(has_header(buf, "Allow", "GET, HEAD"));
    http_exchange(port, "DELETE /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", buf,
                  sizeof(buf));
    assert_true(strncmp(buf, "HTTP/1.1 405 ", 13) == 0);
    http_exchange(
        port, "GET /x HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\nConnection: close\r\n\r\nhello",
        buf, sizeof(buf));
    assert_true(strncmp(buf, "HTTP/1.1 413 ", 13) == 0);
    /* None of them reached the handler. */
    assert_int_equal(calls(), before);

    /* The server still answers afterwards. */
    http_exchange(port, "GET /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", buf,
                  sizeof(buf));
    assert_true(strncmp(buf, "HTTP/1.1 200 ", 13) == 0);
    egm__http_stop(srv);
}

static void test_statuses(void **state)
{
    (void)state;
    static char buf[8192];
    egm_http_server_t *srv = start_local();
    uint16_t port = egm__http_port(srv);

    http_exchange(port, "GET /nope HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", buf,
                  sizeof(buf));
    assert_true(strncmp(buf, "HTTP/1.1 404 ", 13) == 0);
    assert_true(has_header(buf, "Cache-Control", "no-store"));
    assert_string_equal(body_of(buf), "");
    assert_string_equal(seen.path, "/nope");

    http_exchange(port, "GET /empty HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", buf,
                  sizeof(buf));
    assert_true(strncmp(buf, "HTTP/1.1 503 ", 13) == 0);
    assert_string_equal(body_of(buf), "");

    /* A status outside 100..599 is the handler's bug: 500, its body freed. */
    http_exchange(port, "GET /bad HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", buf,
                  sizeof(buf));
    assert_true(strncmp(buf, "HTTP/1.1 500 ", 13) == 0);
    egm__http_stop(srv);
}

static void test_big_body(void **state)
{
    (void)state;
    static char buf[1 << 20];
    egm_http_server_t *srv = start_local();
    http_exchange(egm__http_port(srv), "GET /big HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
                  buf, sizeof(buf));
    assert_true(strncmp(buf, "HTTP/1.1 200 ", 13) == 0);
    assert_true(has_header(buf, "Content-Type", "text/plain; charset=utf-8"));
    const char *p = body_of(buf);
    char line[64];
    for (int i = 0; i < BIG_LINES; i++) {
        int n = snprintf(line, sizeof(line), "egm_line{i=\"%d\"} %d\n", i, i * 7);
        assert_memory_equal(p, line, (size_t)n);
        p += n;
    }
    assert_string_equal(p, "");
    egm__http_stop(srv);
}

static void test_printf(void **state)
{
    (void)state;
    egm_http_response_t resp = {.status = 200};
    char chunk[1000];
    memset(chunk, 'a', sizeof(chunk) - 1);
    chunk[sizeof(chunk) - 1] = '\0';
    for (int i = 0; i < 10; i++)
        assert_int_equal(egm__http_printf(&resp, "%s%d", chunk, i), EGM_OK);
    assert_int_equal(resp.len, 10 * 1000);
    assert_true(resp.cap > resp.len);
    assert_int_equal(resp.body[resp.len], '\0');
    assert_int_equal(resp.body[999], '0');
    assert_int_equal(resp.body[9999], '9');
    egm_free(resp.body);

    /* A body the handler allocated itself (cap unknown) is appended to, not overrun. */
    egm_http_response_t own = {.status = 200, .body = egm_strdup("abc", "test"), .len = 3};
    assert_int_equal(egm__http_printf(&own, "-%d", 42), EGM_OK);
    assert_int_equal(own.len, 6);
    assert_string_equal(own.body, "abc-42");
    egm_free(own.body);
}

static void test_busy_port_and_bad_address(void **state)
{
    (void)state;
    egm_http_server_t *srv = start_local(), *other = NULL;
    uint16_t port = egm__http_port(srv);
    char where[64];
    snprintf(where, sizeof(where), "127.0.0.1:%u", (unsigned)port);

    assert_int_equal(start_at("127.0.0.1", port, &other), EGM_ERR_CONFIG);
    assert_null(other);
    assert_non_null(strstr(egm_last_error(), "http_port"));
    assert_non_null(strstr(egm_last_error(), where));
    assert_non_null(strstr(egm_last_error(), "in use"));

    /* An address that is not this host's. */
    assert_int_equal(start_at("192.0.2.1", 0, &other), EGM_ERR_CONFIG);
    assert_non_null(strstr(egm_last_error(), "192.0.2.1"));
    assert_null(other);
    egm__http_stop(srv);
}

static void test_dual_stack(void **state)
{
    (void)state;
    static char buf[8192];
    egm_http_server_t *srv = NULL;
    if (start_at("::", 0, &srv) != EGM_OK)
        EGM_SKIP("no IPv6 on this machine");
    http_exchange(egm__http_port(srv), "GET /x?v6 HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
                  buf, sizeof(buf));
    assert_true(strncmp(buf, "HTTP/1.1 200 ", 13) == 0);
    assert_string_equal(seen.query, "v6");
    egm__http_stop(srv);
}

static void test_start_stop_loop(void **state)
{
    (void)state;
    static char buf[8192];
    egm__http_stop(NULL);
    int fds = egm_test_count_fds();
    for (int i = 0; i < 20; i++) {
        egm_http_server_t *srv = start_local();
        if (i % 2 == 0) {
            http_exchange(egm__http_port(srv), "GET /x HTTP/1.0\r\n\r\n", buf, sizeof(buf));
            assert_true(strncmp(buf + 8, " 200 ", 5) == 0);
        } else {
            /* A connection left open at stop is dropped. */
            int fd;
            assert_int_equal(egm__sock_tcp_connect("127.0.0.1", egm__http_port(srv), 5000, &fd),
                             EGM_OK);
            egm__http_stop(srv);
            close(fd);
            continue;
        }
        egm__http_stop(srv);
    }
    assert_int_equal(egm_test_count_fds(), fds);
}

/* With a bearer token: open paths answer without it; every other path (known
 * or not, GET or HEAD) is answered 401 with a Bearer challenge, without
 * reaching the handler, unless the request carries the token; a 401 keeps
 * the connection; refusals are counted; bad parameters are refused. */
static void test_bearer_token(void **state)
{
    (void)state;
    static char buf[8192];
    static const char *const open_paths[] = {"/empty", NULL};
    egm_http_params_t params = {.address = "127.0.0.1",
                                .fn = handler,
                                .arg = &seen,
                                .auth_token = "s3cret-T",
                                .open_paths = open_paths};
    egm_http_server_t *srv = NULL;
    assert_int_equal(egm__http_start(&params, &srv), EGM_OK);
    uint16_t port = egm__http_port(srv);
    int before = calls();

    http_exchange(port, "GET /empty HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n", buf,
                  sizeof(buf));
    assert_true(strncmp(buf, "HTTP/1.1 503 ", 13) == 0); /* the handler's answer */
    assert_int_equal(calls(), before + 1);

    const char *refused[] = {
        "GET /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        "GET /x HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer s3cret-t\r\nConnection: close\r\n\r\n",
        "GET /x HTTP/1.1\r\nHost: t\r\nAuthorization: Bearer s3cret-T2\r\nConnection: "
        "close\r\n\r\n",
        "GET /x HTTP/1.1\r\nHost: t\r\nAuthorization: Basic s3cret-T\r\nConnection: close\r\n\r\n",
        "GET /x HTTP/1.1\r\nHost: t\r\nAuthorization: Bearers3cret-T\r\nConnection: close\r\n\r\n",
        "HEAD /x HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        "GET /unknown HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        "GET /empty/ HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
    };
    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        http_exchange(port, refused[i], buf, sizeof(buf));
        if (strncmp(buf, "HTTP/1.1 401 ", 13) != 0)
            fail_msg("request %zu: %.40s", i, buf);
        assert_true(has_header(buf, "WWW-Authenticate",
                               i == 0 || i >= 5 ? "Bearer realm=\"egmstore\""
                                                : "Bearer realm=\"egmstore\", "
                                                  "error=\"invalid_token\""));
        assert_true(has_header(buf, "Content-Type", "application/json"));
        assert_null(strstr(buf, "s3cret"));
    }
    assert_int_equal(calls(), before + 1); /* none reached the handler */
    assert_int_equal(egm__http_auth_failures(srv), sizeof(refused) / sizeof(refused[0]));

    /* the right token, on a connection kept after a 401 */
    http_exchange(port,
                  "GET /x?a=1 HTTP/1.1\r\nHost: t\r\n\r\n"
                  "GET /x?b=2 HTTP/1.1\r\nHost: t\r\nAuthorization: bEaRer  s3cret-T \r\n"
                  "Connection: close\r\n\r\n",
                  buf, sizeof(buf));
    const char *second = strstr(buf, "HTTP/1.1 401 ");
    assert_non_null(second);
    assert_non_null(strstr(second, "HTTP/1.1 200 "));
    assert_non_null(strstr(second, "{\"ok\":true,\"query\":\"b=2\"}\n"));
    assert_int_equal(calls(), before + 2);
    egm__http_stop(srv);

    /* parameters */
    char long_token[1100];
    memset(long_token, 'a', sizeof(long_token) - 1);
    long_token[sizeof(long_token) - 1] = '\0';
    params.auth_token = long_token;
    assert_int_equal(egm__http_start(&params, &srv), EGM_ERR_INVALID_ARG);
    static const char *const many[] = {"/1", "/2", "/3", "/4", "/5", "/6", "/7", "/8", "/9", NULL};
    params.auth_token = "t";
    params.open_paths = many;
    assert_int_equal(egm__http_start(&params, &srv), EGM_ERR_INVALID_ARG);
}

/* Slow peers: more connections than the server takes, each sending a header
 * line every 200 ms and never ending its head (an idle timeout never fires).
 * Past the head deadline the server closes them, so a plain GET on a new
 * connection is answered while they go on; each of them sees its end. */
#define SLOW_PEERS (EGM_HTTP_MAX_CONNECTIONS + 6)
typedef struct {
    int fds[SLOW_PEERS];
    atomic_int closed[SLOW_PEERS]; /* the server closed it (read 0 or an error) */
    atomic_int stop;
} slow_peers_t;

static void *trickle(void *arg)
{
    slow_peers_t *sp = arg;
    while (!atomic_load(&sp->stop)) {
        for (int i = 0; i < SLOW_PEERS; i++) {
            if (atomic_load(&sp->closed[i]))
                continue;
            char b[64];
            ssize_t n = recv(sp->fds[i], b, sizeof(b), MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK) ||
                send(sp->fds[i], "X-Slow: 1\r\n", 11, MSG_NOSIGNAL) < 0)
                atomic_store(&sp->closed[i], 1);
        }
        usleep(200 * 1000);
    }
    return NULL;
}

/* One GET /x on a new connection: 1 when answered 200 within 5 s. */
static int try_get(uint16_t port)
{
    int fd;
    if (egm__sock_tcp_connect("127.0.0.1", port, 5000, &fd) != EGM_OK)
        return 0;
    static const char req[] = "GET /x HTTP/1.0\r\n\r\n";
    char buf[512];
    size_t len = 0;
    if (egm__sock_write_full(fd, req, sizeof(req) - 1) == EGM_OK) {
        for (;;) {
            struct pollfd pfd = {.fd = fd, .events = POLLIN};
            if (poll(&pfd, 1, 5000) != 1)
                break;
            ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
            if (n <= 0 || (len += (size_t)n) == sizeof(buf) - 1)
                break;
        }
    }
    close(fd);
    buf[len] = '\0';
    return len > 13 && strncmp(buf + 8, " 200 ", 5) == 0;
}

static void test_slow_heads_do_not_hold_slots(void **state)
{
    (void)state;
    egm_http_params_t params = {
        .address = "127.0.0.1", .fn = handler, .arg = &seen, .head_deadline_ms = 1500};
    egm_http_server_t *srv = NULL;
    assert_int_equal(egm__http_start(&params, &srv), EGM_OK);
    uint16_t port = egm__http_port(srv);
    static slow_peers_t sp;
    memset(&sp, 0, sizeof(sp));
    for (int i = 0; i < SLOW_PEERS; i++) {
        assert_int_equal(egm__sock_tcp_connect("127.0.0.1", port, 5000, &sp.fds[i]), EGM_OK);
        static const char head[] = "GET /x HTTP/1.1\r\nHost: a\r\n";
        if (i > 0) /* the first one's head comes below */
            assert_int_equal(egm__sock_write_full(sp.fds[i], head, sizeof(head) - 1), EGM_OK);
    }
    /* One of them first gets an answer, then trickles its next head: the
     * deadline runs again from that answer. */
    static const char whole[] = "GET /x HTTP/1.1\r\nHost: a\r\n\r\n";
    int again = sp.fds[0];
    char answer[512];
    assert_int_equal(egm__sock_write_full(again, whole, sizeof(whole) - 1), EGM_OK);
    struct pollfd apfd = {.fd = again, .events = POLLIN};
    assert_int_equal(poll(&apfd, 1, 30000), 1); /* a guard, not a timing assertion */
    assert_true(read(again, answer, sizeof(answer)) > 0);
    assert_int_equal(egm__sock_write_full(again, "GET /x HTTP/1.1\r\n", 17), EGM_OK);
    pthread_t t;
    assert_int_equal(pthread_create(&t, NULL, trickle, &sp), 0);
    /* Answered once the server has closed slow peers (1.5 s and a sweep).
     * The 30 s bound is 20 deadlines; libmicrohttpd alone (no head deadline)
     * let them hold their slots for 88 s in one run. */
    int answered = 0;
    uint64_t until = egm__now_ms() + 30000;
    while (!answered && egm__now_ms() < until) {
        answered = try_get(port);
        if (!answered)
            usleep(100 * 1000);
    }
    /* Every peer the server took is closed by it: 100 looks 100 ms apart
     * (a guard again). */
    int closed = 0;
    for (int tries = 0; tries < 100 && closed < EGM_HTTP_MAX_CONNECTIONS; tries++) {
        usleep(100 * 1000);
        closed = 0;
        for (int i = 0; i < SLOW_PEERS; i++)
            closed += atomic_load(&sp.closed[i]);
    }
    atomic_store(&sp.stop, 1);
    pthread_join(t, NULL);
    assert_true(answered);
    assert_true(atomic_load(&sp.closed[0])); /* answered once, then trickling */
    assert_true(closed >= EGM_HTTP_MAX_CONNECTIONS);
    /* The server counts those it closed mid-head (without the deadline, none). */
    assert_true(egm__http_slow_closed(srv) >= EGM_HTTP_MAX_CONNECTIONS / 2);
    assert_true(egm__http_slow_closed(srv) <= SLOW_PEERS);
    for (int i = 0; i < SLOW_PEERS; i++)
        close(sp.fds[i]);
    egm__http_stop(srv);
}

/* A reader that takes its time over an answer larger than the sockets hold
 * is not cut off: the deadline is for the request's head, not its answer. */
static void test_slow_reader_not_cut(void **state)
{
    (void)state;
    egm_http_params_t params = {
        .address = "127.0.0.1", .fn = handler, .arg = &seen, .head_deadline_ms = 500};
    egm_http_server_t *srv = NULL;
    assert_int_equal(egm__http_start(&params, &srv), EGM_OK);
    int fd;
    assert_int_equal(egm__sock_tcp_connect("127.0.0.1", egm__http_port(srv), 5000, &fd), EGM_OK);
    static const char req[] = "GET /huge HTTP/1.0\r\n\r\n";
    assert_int_equal(egm__sock_write_full(fd, req, sizeof(req) - 1), EGM_OK);
    char *buf = egm_malloc(HUGE_BYTES + 4096, "test_http");
    assert_non_null(buf);
    size_t len = 0;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, 30000), 1);
    ssize_t n = read(fd, buf, 1);
    assert_int_equal(n, 1);
    len = 1;
    usleep(2000 * 1000); /* four deadlines, the answer stuck in the socket */
    for (;;) {
        assert_int_equal(poll(&pfd, 1, 30000), 1); /* a guard against a hung server */
        n = read(fd, buf + len, HUGE_BYTES + 4096 - len);
        assert_true(n >= 0);
        if (n == 0)
            break;
        len += (size_t)n;
        assert_true(len < HUGE_BYTES + 4096);
    }
    close(fd);
    buf[len < HUGE_BYTES + 4095 ? len : HUGE_BYTES + 4095] = '\0';
    const char *body = strstr(buf, "\r\n\r\n");
    assert_non_null(body);
    assert_int_equal(len - (size_t)(body + 4 - buf), HUGE_BYTES);
    assert_int_equal(egm__http_slow_closed(srv), 0);
    egm_free(buf);
    egm__http_stop(srv);
}

int main(void)
{
    egm__log_set_level(EGM_LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_get_path_and_query, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_keep_alive, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_head_has_no_body, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_other_methods_and_bodies_refused, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_statuses, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_big_body, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_printf, egm_test_setup_alloc, egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_busy_port_and_bad_address, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_dual_stack, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_start_stop_loop, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_slow_heads_do_not_hold_slots, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_slow_reader_not_cut, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_bearer_token, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
