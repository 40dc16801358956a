/* tcp data server (provider side): READ/WRITE of (segment, offset, length) on
 * exposed segments, one thread per connection, its requests served in order.
 * Every request is bounds-checked against the exposed segment; a refused WRITE
 * closes the connection because its payload, of a length we just refused, is
 * not read (after the refusal has gone out: linger_close). */
#include "te/te_int.h"

#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/config_int.h"
#include "common/log.h"
#include "common/sock.h"

typedef struct conn conn_t;

struct egm_tcp_server {
    egm_exposed_table_t *table;
    egm_te_counters_t *counters;
    const egm_te_auth_t *auth;
    int listen_fd;
    int stop_fd; /* eventfd: wakes the accept thread to stop */
    uint16_t port;
    int io_timeout_ms;
    pthread_t accept_thread;
    pthread_mutex_t lock;
    conn_t *conns[EGM_TCP_MAX_CONNECTIONS];
    size_t nconns;
};

struct conn {
    egm_tcp_server_t *server;
    int fd;   /* -1 once the thread closed it (under the server lock) */
    int done; /* thread finished: join it */
    pthread_t thread;
    atomic_int authenticated; /* presented the token (or none is required) */
    uint64_t opened_ms;
    int evicted; /* shut down for want of the token (under the server lock) */
};

/* With a cluster token (common/auth.h: EGM_AUTH_DEADLINE_MS, the waiting
 * share), the accept thread looks for connections past their deadline this
 * often. */
#define AUTH_SWEEP_MS 1000
#define UNAUTHENTICATED_MAX (EGM_TCP_MAX_CONNECTIONS / EGM_AUTH_WAITING_SHARE)

static int token_required(const egm_tcp_server_t *server)
{
    return server->auth != NULL && egm__auth_required(server->auth->token);
}

static egm_status_t send_reply(int fd, uint64_t request_id, egm_status_t status, uint64_t length)
{
    uint8_t buf[EGM_TCP_REPLY_SIZE];
    egm_tcp_reply_t reply = {.magic = EGM_TCP_REPLY_MAGIC,
                             .status = (int32_t)status,
                             .request_id = request_id,
                             .length = length};
    egm__tcp_reply_encode(&reply, buf);
    return egm__sock_write_full(fd, buf, sizeof(buf));
}

/* An OK reply and its data, in one sendmsg where the socket takes it (one
 * segment for a small READ instead of two). */
static egm_status_t send_data_reply(int fd, uint64_t request_id, const uint8_t *data, size_t len)
{
    uint8_t hdr[EGM_TCP_REPLY_SIZE];
    egm_tcp_reply_t reply = {
        .magic = EGM_TCP_REPLY_MAGIC, .status = EGM_OK, .request_id = request_id, .length = len};
    egm__tcp_reply_encode(&reply, hdr);
    struct iovec iov[2] = {{hdr, sizeof(hdr)}, {(void *)data, len}};
    struct msghdr msg = {.msg_iov = iov, .msg_iovlen = 2};
    size_t left = sizeof(hdr) + len;
    while (left > 0) {
        ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return egm__set_error(egm__status_from_errno(errno), "send: %s", strerror(errno));
        left -= (size_t)n;
        while (n > 0 && msg.msg_iovlen > 0) { /* past what went out */
            size_t take = (size_t)n < msg.msg_iov->iov_len ? (size_t)n : msg.msg_iov->iov_len;
            msg.msg_iov->iov_base = (uint8_t *)msg.msg_iov->iov_base + take;
            msg.msg_iov->iov_len -= take;
            n -= (ssize_t)take;
            if (msg.msg_iov->iov_len == 0) {
                msg.msg_iov++;
                msg.msg_iovlen--;
            }
        }
    }
    return EGM_OK;
}

egm_status_t egm__tcp_req_parse(const uint8_t in[EGM_TCP_REQ_SIZE], egm_tcp_req_t *req)
{
    egm__tcp_req_decode(in, req);
    if (req->magic != EGM_TCP_MAGIC)
        return egm__set_error(EGM_ERR_PROTOCOL, "magic: 0x%08x, expected 0x%08x",
                              (unsigned)req->magic, (unsigned)EGM_TCP_MAGIC);
    if (req->version != EGM_TCP_VERSION)
        return egm__set_error(EGM_ERR_VERSION, "version: %u, expected %u", (unsigned)req->version,
                              (unsigned)EGM_TCP_VERSION);
    return EGM_OK;
}

egm_status_t egm__tcp_req_check(egm_exposed_table_t *table, const egm_tcp_req_t *req,
                                egm_exposed_t **seg_p)
{
    char text[EGM_ID_STRLEN];

    if (req->op != EGM_TCP_OP_READ && req->op != EGM_TCP_OP_WRITE)
        return egm__set_error(EGM_ERR_INVALID_ARG, "op: %u is neither READ (1) nor WRITE (2)",
                              (unsigned)req->op);
    if (req->length == 0 || req->length > EGM_TCP_MAX_REQUEST)
        return egm__set_error(EGM_ERR_INVALID_ARG, "length: %" PRIu64 " not in 1..%llu",
                              req->length, (unsigned long long)EGM_TCP_MAX_REQUEST);
    egm_exposed_t *seg = egm__exposed_get(table, req->segment);
    if (seg == NULL)
        return egm__set_error(EGM_ERR_SEGMENT_NOT_FOUND, "segment: %s is not served here",
                              egm__id_format(req->segment, text));
    /* GPU memory (DEVICE VMM) is reachable over nvlink only: the CPU cannot
     * touch the provider's mapping of it. */
    if (!seg->host_accessible) {
        egm__exposed_put(table, seg);
        return egm__set_error(EGM_ERR_NOT_SUPPORTED,
                              "segment: %s is GPU memory, reachable over nvlink only",
                              egm__id_format(req->segment, text));
    }
    if (req->offset > seg->size || req->length > seg->size - req->offset) {
        egm__exposed_put(table, seg);
        return egm__set_error(
            EGM_ERR_INVALID_ARG,
            "offset/length: [%" PRIu64 ", +%" PRIu64 ") outside segment %s of %" PRIu64 " bytes",
            req->offset, req->length, egm__id_format(req->segment, text), seg->size);
    }
    *seg_p = seg;
    return EGM_OK;
}

/* Serves one request; returns 0 to keep the connection, -1 to close it, 1
 * to close it after a refused WRITE (linger_close). */
static int serve_request(egm_tcp_server_t *server, int fd, const egm_tcp_req_t *req)
{
    egm_exposed_t *seg = NULL;
    egm_status_t st = egm__tcp_req_check(server->table, req, &seg);
    if (st != EGM_OK) {
        atomic_fetch_add_explicit(&server->counters->tcp_requests_refused, 1, memory_order_relaxed);
        egm_log_ratelimited(EGM_LOG_INFO, 5, "tcp server: refused request %" PRIu64 ": %s",
                            req->request_id, egm_last_error());
        (void)send_reply(fd, req->request_id, st, 0);
        return req->op == EGM_TCP_OP_READ ? 0 : 1;
    }

    /* Counted when accepted, before the reply lets the client go on, so that
     * the count is exact as soon as the client sees the answer. */
    atomic_fetch_add_explicit(&server->counters->tcp_requests_served, 1, memory_order_relaxed);
    uint8_t *mem = (uint8_t *)seg->base + req->offset;
    if (req->op == EGM_TCP_OP_READ) {
        st = send_data_reply(fd, req->request_id, mem, (size_t)req->length);
        egm__exposed_put(server->table, seg);
    } else {
        st = egm__sock_read_full_timeout(fd, mem, (size_t)req->length, server->io_timeout_ms);
        egm__exposed_put(server->table, seg);
        if (st == EGM_OK)
            st = send_reply(fd, req->request_id, EGM_OK, 0);
    }
    if (st != EGM_OK) {
        egm_debug("tcp server: request %" PRIu64 " failed: %s", req->request_id, egm_last_error());
        return -1;
    }
    return 0;
}

/* The cluster token gate: 1 when the request was the connection's
 * authentication (answered: *close_p says whether it failed) or was refused
 * for want of one (answered, *close_p = 1); 0 when it goes on to be served. */
static int auth_gate(egm_tcp_server_t *server, int fd, const egm_tcp_req_t *req,
                     atomic_int *authed_p, int *close_p)
{
    const char *token = server->auth != NULL ? server->auth->token : NULL;
    egm_auth_verdict_t verdict;
    char problem[EGM_AUTH_PROBLEM_MAX];

    *close_p = 0;
    if (req->op != EGM_TCP_OP_AUTH) {
        if (atomic_load(authed_p) || (verdict = egm__auth_check_absent(token)) == EGM_AUTH_OK)
            return 0;
    } else {
        size_t len = req->length > SIZE_MAX ? SIZE_MAX : (size_t)req->length;
        if (egm__auth_recv_check(fd, token, len, server->io_timeout_ms, &verdict) != EGM_OK) {
            *close_p = 1;
            return 1;
        }
        if (verdict == EGM_AUTH_OK) {
            atomic_store(authed_p, 1); /* before the reply lets the client go on */
            if (send_reply(fd, req->request_id, EGM_OK, 0) != EGM_OK)
                *close_p = 1;
            return 1;
        }
    }
    atomic_fetch_add_explicit(&server->counters->auth_failures, 1, memory_order_relaxed);
    egm_log_ratelimited(EGM_LOG_WARN, 1, "tcp server: request %" PRIu64 " refused: %s",
                        req->request_id,
                        egm__auth_problem(verdict, "this data server", problem, sizeof(problem)));
    (void)send_reply(fd, req->request_id, EGM_ERR_PERMISSION, 0);
    *close_p = 1;
    return 1;
}

/* After a refused WRITE: nothing more is taken as a request, but the
 * refusal must reach the client. Closing with its payload (or requests it
 * streamed after it) unread would reset the connection, and a reset drops
 * what is still queued to send, the refusal included. So: end our side
 * (shutdown: the refusal, then the end of the stream), and discard what
 * comes until the client closes, for LINGER_MS and LINGER_BYTES at most. */
#define LINGER_MS 1000
#define LINGER_BYTES (64u << 20)

static void linger_close(int fd)
{
    uint8_t junk[16384];
    size_t dropped = 0;
    uint64_t deadline = egm__now_ms() + LINGER_MS;
    shutdown(fd, SHUT_WR);
    while (dropped < LINGER_BYTES) {
        uint64_t now = egm__now_ms();
        if (now >= deadline)
            return;
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int n = poll(&pfd, 1, (int)(deadline - now));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return;
        ssize_t k = recv(fd, junk, sizeof(junk), 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return; /* the client closed (or the server stops) */
        dropped += (size_t)k;
    }
}

static void *conn_main(void *arg)
{
    conn_t *conn = arg;
    egm_tcp_server_t *server = conn->server;
    uint8_t buf[EGM_TCP_REQ_SIZE];
    egm_tcp_req_t req;
    int close_now = 0;

    /* Between requests a connection may idle as long as it likes (clients pool
     * them), once it presented the token; stop wakes this read with shutdown(). */
    while (egm__sock_read_full(conn->fd, buf, sizeof(buf)) == EGM_OK) {
        if (egm__tcp_req_parse(buf, &req) != EGM_OK) {
            atomic_fetch_add_explicit(&server->counters->tcp_requests_refused, 1,
                                      memory_order_relaxed);
            egm_log_ratelimited(EGM_LOG_WARN, 1, "tcp server: request %s: closing",
                                egm_last_error());
            break;
        }
        if (auth_gate(server, conn->fd, &req, &conn->authenticated, &close_now)) {
            if (close_now) {
                linger_close(conn->fd); /* the refusal must get out, as after a WRITE */
                break;
            }
            continue;
        }
        int rc = serve_request(server, conn->fd, &req);
        if (rc > 0)
            linger_close(conn->fd);
        if (rc != 0)
            break;
    }

    pthread_mutex_lock(&server->lock);
    close(conn->fd);
    conn->fd = -1;
    conn->done = 1;
    pthread_mutex_unlock(&server->lock);
    return NULL;
}

/* Joins finished connection threads. Accept thread only (it alone removes). */
static void reap(egm_tcp_server_t *server)
{
    for (size_t i = 0; i < server->nconns;) {
        pthread_mutex_lock(&server->lock);
        conn_t *conn = server->conns[i];
        int done = conn->done;
        if (done)
            server->conns[i] = server->conns[--server->nconns];
        pthread_mutex_unlock(&server->lock);
        if (!done) {
            i++;
            continue;
        }
        pthread_join(conn->thread, NULL);
        egm_free(conn);
    }
}

/* Shuts conn down for want of the token (its thread then sees the end of its
 * input and leaves). Under the server lock, so its fd is still its own. */
static void evict(egm_tcp_server_t *server, conn_t *conn, const char *why, size_t waiting)
{
    egm_log_ratelimited(EGM_LOG_WARN, 1, "tcp server: closing a connection: %s (%zu waiting)", why,
                        waiting);
    atomic_fetch_add_explicit(&server->counters->auth_failures, 1, memory_order_relaxed);
    shutdown(conn->fd, SHUT_RDWR);
    conn->evicted = 1;
}

/* With a token: shuts down the connections that have not presented it within
 * EGM_AUTH_DEADLINE_MS and, when `room` and UNAUTHENTICATED_MAX of them are open,
 * the oldest, for a new one. Accept thread only. */
static void sweep_unauthenticated(egm_tcp_server_t *server, int room)
{
    uint64_t now = egm__now_ms();
    size_t waiting = 0;
    conn_t *oldest = NULL;
    pthread_mutex_lock(&server->lock);
    for (size_t i = 0; i < server->nconns; i++) {
        conn_t *c = server->conns[i];
        if (c->fd < 0 || c->evicted || atomic_load(&c->authenticated))
            continue;
        if (now - c->opened_ms >= EGM_AUTH_DEADLINE_MS) {
            evict(server, c, "no cluster token in time", 0);
            continue;
        }
        waiting++;
        if (oldest == NULL || c->opened_ms < oldest->opened_ms)
            oldest = c;
    }
    if (room && waiting >= UNAUTHENTICATED_MAX && oldest != NULL)
        evict(server, oldest, "too many without the cluster token", waiting);
    pthread_mutex_unlock(&server->lock);
}

static void accept_one(egm_tcp_server_t *server)
{
    int fd = accept4(server->listen_fd, NULL, NULL, SOCK_CLOEXEC);
    if (fd < 0) {
        int err = errno;
        if (err != EINTR && err != EAGAIN && err != ECONNABORTED)
            egm_log_ratelimited(EGM_LOG_WARN, 1, "tcp server: accept: %s", strerror(err));
        /* Out of descriptors the connection stays pending and the socket stays
         * readable: back off instead of spinning on accept. */
        if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM)
            egm__sleep_ms(100);
        return;
    }
    reap(server);
    if (token_required(server) && server->nconns < EGM_TCP_MAX_CONNECTIONS)
        sweep_unauthenticated(server, 1);
    if (server->nconns >= EGM_TCP_MAX_CONNECTIONS) {
        egm_log_ratelimited(EGM_LOG_WARN, 1, "tcp server: %d connections already: refusing",
                            EGM_TCP_MAX_CONNECTIONS);
        close(fd);
        return;
    }
    (void)egm__sock_set_nodelay(fd);
    /* A reader that stops reading cannot hold a segment (and its withdraw). */
    struct timeval tv = {.tv_sec = server->io_timeout_ms / 1000,
                         .tv_usec = (server->io_timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));

    conn_t *conn = egm_calloc(1, sizeof(*conn), "te.tcp_server.conn");
    if (conn == NULL) {
        close(fd);
        return;
    }
    conn->server = server;
    conn->fd = fd;
    conn->opened_ms = egm__now_ms();
    atomic_init(&conn->authenticated, !token_required(server));
    pthread_mutex_lock(&server->lock);
    int rc = pthread_create(&conn->thread, NULL, conn_main, conn);
    if (rc == 0)
        server->conns[server->nconns++] = conn;
    pthread_mutex_unlock(&server->lock);
    if (rc != 0) {
        egm_log_ratelimited(EGM_LOG_WARN, 1, "tcp server: thread: %s", strerror(rc));
        close(fd);
        egm_free(conn);
    }
}

static void *accept_main(void *arg)
{
    egm_tcp_server_t *server = arg;
    struct pollfd pfd[2] = {{.fd = server->listen_fd, .events = POLLIN},
                            {.fd = server->stop_fd, .events = POLLIN}};

    int token = token_required(server);
    for (;;) {
        /* with a token, wakes every second for the connections' deadline */
        int n = poll(pfd, 2, token ? AUTH_SWEEP_MS : -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            egm_error("tcp server: poll: %s", strerror(errno));
            break;
        }
        if (pfd[1].revents)
            break;
        if (pfd[0].revents & POLLIN)
            accept_one(server);
        if (token)
            sweep_unauthenticated(server, 0);
    }
    return NULL;
}

egm_status_t egm__tcp_server_start(egm_exposed_table_t *table, egm_te_counters_t *counters,
                                   const egm_te_auth_t *auth, const char *host, uint16_t port,
                                   int io_timeout_ms, egm_tcp_server_t **server_p)
{
    egm_status_t st;
    egm_tcp_server_t *server = egm_calloc(1, sizeof(*server), "te.tcp_server");
    if (server == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "tcp server: out of memory");
    server->table = table;
    server->counters = counters;
    server->auth = auth;
    server->io_timeout_ms = io_timeout_ms > 0 ? io_timeout_ms : 10000;
    pthread_mutex_init(&server->lock, NULL);

    st = egm__sock_tcp_listen(host ? host : "0.0.0.0", port, &server->listen_fd, &server->port);
    if (st != EGM_OK)
        goto err_free;
    if ((st = egm__sock_set_nonblock(server->listen_fd, 1)) != EGM_OK)
        goto err_close;
    server->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (server->stop_fd < 0) {
        st = egm__set_error(egm__status_from_errno(errno), "tcp server: eventfd: %s",
                            strerror(errno));
        goto err_close;
    }
    int rc = pthread_create(&server->accept_thread, NULL, accept_main, server);
    if (rc != 0) {
        st = egm__set_error(egm__status_from_errno(rc), "tcp server: thread: %s", strerror(rc));
        goto err_close_event;
    }
    if (egm__log_enabled(EGM_LOG_DEBUG)) {
        char where[300];
        egm_debug(
            "tcp server: listening on %s",
            egm__sock_format_hostport(host ? host : "0.0.0.0", server->port, where, sizeof(where)));
    }
    *server_p = server;
    return EGM_OK;

err_close_event:
    close(server->stop_fd);
err_close:
    close(server->listen_fd);
err_free:
    pthread_mutex_destroy(&server->lock);
    egm_free(server);
    return st;
}

void egm__tcp_server_stop(egm_tcp_server_t *server)
{
    if (server == NULL)
        return;
    uint64_t one = 1;
    if (write(server->stop_fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
        egm_warn("tcp server: stop signal failed: %s", strerror(errno));
    pthread_join(server->accept_thread, NULL);

    /* Wake every connection thread out of its read or write, then join. */
    pthread_mutex_lock(&server->lock);
    for (size_t i = 0; i < server->nconns; i++)
        if (server->conns[i]->fd >= 0)
            shutdown(server->conns[i]->fd, SHUT_RDWR);
    pthread_mutex_unlock(&server->lock);
    for (size_t i = 0; i < server->nconns; i++) {
        pthread_join(server->conns[i]->thread, NULL);
        egm_free(server->conns[i]);
    }
    close(server->stop_fd);
    close(server->listen_fd);
    pthread_mutex_destroy(&server->lock);
    egm_free(server);
}

uint16_t egm__tcp_server_port(const egm_tcp_server_t *server)
{
    return server->port;
}
