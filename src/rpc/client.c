/* RPC client: one pipelined connection (TCP, or the master's abstract Unix
 * socket for a loopback address); replies are matched to waiting callers by
 * request id.
 *
 * Leader/follower: there is no reader thread. A caller waiting for its reply
 * reads the socket itself when no other caller does (it holds the reader
 * role), hands replies of other ids to their waiters, and passes the role on
 * when its own reply arrives or its deadline passes. A lone caller thus gets
 * its reply on its own thread, with no wakeup of another thread in between.
 *
 * Locking: `lock` guards the pending table, the connection state, the ids and
 * the reader role; `wlock` serialises frame writes. The connection fd and its
 * generation change only while both are held (lock first, then wlock) and
 * while nobody holds the reader role, so a writer holding only wlock and a
 * reader holding the role see a stable fd, and a frame is never written to a
 * newer connection than the one its pending entry belongs to. The input state
 * (`in`, a frame reader: rpc/frame_reader.h) belongs to the role holder and is
 * read without the lock. */
#include "rpc/client.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <strings.h>
#include <pthread.h>
#include <string.h>
#include <stddef.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/config_int.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "common/sock.h"
#include "rpc/endpoint.h"
#include "rpc/frame.h"
#include "rpc/frame_reader.h"
#include "rpc/proto_util.h"

/* Socket reads go through this scratch; payloads at least this large are
 * read straight into their reply buffer. */
#define IN_CHUNK (16 * 1024)
/* Local socket names a client tries: per address of its host ("localhost"
 * may have two), the exact one and the two wildcard ones. */
#define LOCAL_CANDIDATES_MAX 6
/* Largest answer to a fresh connection's Auth or Hello. */
#define FRESH_ANSWER_MAX 4096

/* A local socket name to try, and the TCP endpoint the master behind it
 * must own to be the one we were given. */
typedef struct {
    char name[EGM_RPC_LOCAL_NAME_MAX];
    egm_rpc_endpoint_t target;
} local_candidate_t;

typedef struct {
    pthread_cond_t cond;
    int done;
    int sleeping;        /* in pthread_cond_wait: may be handed the reader role */
    egm_status_t status; /* transport status; EGM_OK when a reply arrived */
    uint8_t flags;       /* of the reply frame */
    uint8_t *buf;        /* reply payload (egm_malloc'ed, never NULL on success) */
    size_t len;
    uint64_t id, gen;     /* its request id, on connection gen */
    uint64_t deadline_ms; /* 0: none */
    int timeout_ms;       /* what the timeout's text says */
    uint16_t type;
} pending_t;

/* Partial input of the current connection, kept across role holders. */
typedef struct {
    egm_frame_reader_t reader;
    uint8_t *scratch; /* IN_CHUNK */
} input_t;

struct egm_rpc_client {
    char host[EGM_SOCK_HOST_MAX];
    uint16_t port;
    char where[264]; /* host:port for messages, [IPv6]:port (egm__sock_format_hostport) */
    int connect_timeout_ms;
    int spin_us; /* polls without sleeping before waiting for a reply */
    size_t max_frame_size;
    local_candidate_t local[LOCAL_CANDIDATES_MAX]; /* tried in order before TCP */
    size_t n_local;                                /* 0 = TCP only */
    char auth_token[EGM_AUTH_TOKEN_MAX + 1];       /* "" = none sent */
    egm_status_t (*resolve)(void *arg, char *addr, size_t len);
    void *resolve_arg;
    int prefer_local;
    int connect_once; /* params: no second connection */
    int connected;    /* a connection was made */

    pthread_mutex_t lock;
    pthread_mutex_t wlock;
    pthread_cond_t idle;    /* signalled when the reader role is released */
    egm_hashmap_t *pending; /* request id (u64) -> pending_t* */
    uint64_t next_id;
    int fd;          /* -1 when not connected */
    uint64_t gen;    /* bumped on every (re)connect */
    int broken;      /* a reader saw the connection end; pending calls failed */
    int stream_shut; /* a writer shut the stream down after a failed write */
    int reading;     /* a caller holds the reader role */
    int closed;      /* being destroyed */
    input_t in;
};

/* Fails every pending call. Caller holds lock. */
static void fail_all_locked(egm_rpc_client_t *cl, egm_status_t status)
{
    size_t iter = 0;
    const void *key;
    size_t key_len;
    void *value;

    while (egm__hashmap_next(cl->pending, &iter, &key, &key_len, &value)) {
        pending_t *p = value;
        egm__hashmap_remove(cl->pending, key, key_len);
        p->status = status;
        p->done = 1;
        pthread_cond_signal(&p->cond);
    }
}

/* Drops the partial input of a connection that is gone. Role holder only. */
static void input_reset(input_t *in)
{
    egm__frame_reader_reset(&in->reader);
}

/* Nobody reads: wakes one sleeping waiter to take the reader role. Caller
 * holds lock. */
static void wake_successor_locked(egm_rpc_client_t *cl)
{
    size_t iter = 0;
    const void *key;
    size_t key_len;
    void *value;

    if (cl->broken || cl->reading)
        return;
    while (egm__hashmap_next(cl->pending, &iter, &key, &key_len, &value)) {
        pending_t *p = value;
        if (p->sleeping) {
            pthread_cond_signal(&p->cond);
            return;
        }
    }
}

/* Caller holds lock. */
static void release_role_locked(egm_rpc_client_t *cl)
{
    cl->reading = 0;
    pthread_cond_broadcast(&cl->idle);
    wake_successor_locked(cl);
}

/* The connection is unusable: fail everything. Caller holds lock and the role. */
static void break_connection_locked(egm_rpc_client_t *cl)
{
    if (!cl->closed)
        egm_debug("rpc client %s: connection lost", cl->where);
    cl->broken = 1;
    input_reset(&cl->in);
    fail_all_locked(cl, EGM_ERR_UNREACHABLE);
}

/* A complete reply frame: hand it to its caller. Takes ownership of buf. */
static void deliver(egm_rpc_client_t *cl, const egm_frame_header_t *h, uint8_t *buf)
{
    pthread_mutex_lock(&cl->lock);
    pending_t *p = egm__hashmap_remove(cl->pending, &h->request_id, sizeof(h->request_id));
    if (p != NULL) {
        p->status = EGM_OK;
        p->flags = h->flags;
        p->buf = buf;
        p->len = h->length;
        p->done = 1;
        if (p->sleeping)
            pthread_cond_signal(&p->cond);
        buf = NULL;
    }
    pthread_mutex_unlock(&cl->lock);
    if (buf != NULL) {
        /* its caller timed out */
        egm_debug("rpc client: dropping late reply %llu (%s)", (unsigned long long)h->request_id,
                  egm__rpc_type_name(h->type));
        egm_free(buf);
    }
}

/* A frame from the server must be a reply. */
static egm_status_t check_reply(void *arg, const egm_frame_header_t *h)
{
    (void)arg;
    if (!(h->flags & EGM_FRAME_REPLY))
        return egm__set_error(EGM_ERR_PROTOCOL, "frame %llu from the server is not a reply",
                              (unsigned long long)h->request_id);
    return EGM_OK;
}

/* A complete frame from the reader: its payload into a buffer of its own
 * (never NULL, even when empty), handed to its caller. */
static egm_status_t deliver_frame(egm_rpc_client_t *cl, const egm_frame_t *frame)
{
    uint8_t *buf = frame->buf;

    if (buf == NULL) {
        size_t len = frame->hdr.length;
        buf = egm_malloc(len ? len : 1, "rpc_reply");
        if (buf == NULL) {
            egm_status_t status =
                egm__set_error(EGM_ERR_NO_MEMORY, "rpc client: cannot allocate %zu bytes", len);
            egm_warn("rpc client %s: %s", cl->where, egm_last_error());
            return status;
        }
        if (len)
            memcpy(buf, frame->payload, len);
    }
    deliver(cl, &frame->hdr, buf);
    return EGM_OK;
}

/* Feeds received bytes through the frame reader, delivering each reply. */
static egm_status_t consume(egm_rpc_client_t *cl, const uint8_t *data, size_t n)
{
    while (n > 0) {
        egm_frame_t frame;
        size_t used = 0;
        egm_status_t status = egm__frame_reader_feed(&cl->in.reader, data, n, &used, &frame);

        data += used;
        n -= used;
        if (status == EGM_INPROGRESS)
            break;
        if (status == EGM_OK)
            status = deliver_frame(cl, &frame);
        else if (status == EGM_ERR_NO_MEMORY)
            egm_warn("rpc client %s: %s", cl->where, egm_last_error());
        else
            egm_log_ratelimited(EGM_LOG_WARN, 1, "rpc client %s: dropping the connection: %s",
                                cl->where, egm_last_error());
        if (status != EGM_OK)
            return status;
    }
    return EGM_OK;
}

/* One read from the socket, delivering every reply it completes. Returns
 * EGM_OK after progress, EGM_INPROGRESS when nothing was there, an error when
 * the connection is unusable. Role holder only; lock not held. */
static egm_status_t pump(egm_rpc_client_t *cl, int fd)
{
    input_t *in = &cl->in;
    uint8_t *room = NULL;
    size_t want = 0;
    ssize_t n;
    egm_status_t status = egm__frame_reader_space(&in->reader, &room, &want);

    if (status != EGM_OK) {
        egm_warn("rpc client %s: %s", cl->where, egm_last_error());
        return status;
    }
    if (want >= IN_CHUNK) {
        /* a large payload goes straight into its reply buffer */
        n = recv(fd, room, want, MSG_DONTWAIT);
        if (n > 0) {
            egm_frame_t frame;
            if (egm__frame_reader_commit(&in->reader, (size_t)n, &frame) == EGM_OK)
                return deliver_frame(cl, &frame);
            return EGM_OK;
        }
    } else {
        n = recv(fd, in->scratch, IN_CHUNK, MSG_DONTWAIT);
        if (n > 0)
            return consume(cl, in->scratch, (size_t)n);
    }
    if (n == 0)
        return egm__set_error(EGM_ERR_UNREACHABLE, "rpc client: connection closed by the server");
    if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)
        return EGM_INPROGRESS;
    return egm__set_error(egm__status_from_errno(errno), "rpc client: recv failed: %s",
                          strerror(errno));
}

/* Waits until fd is readable or deadline_ms passes (0: no deadline). EGM_OK
 * when readable (or interrupted: the caller reads and finds out), TIMEOUT, or
 * an error. */
/* Waits until fd is readable: first up to spin_us microseconds of polls that
 * do not sleep (a reply expected within that saves the thread's sleep and
 * wake-up, which cost several microseconds, more on a VM), then in poll. */
static egm_status_t wait_readable(int fd, uint64_t deadline_ms, int spin_us)
{
    if (spin_us > 0) {
        uint64_t until = egm__now_ns() + (uint64_t)spin_us * 1000u;
        do {
            struct pollfd pfd = {.fd = fd, .events = POLLIN};
            int rc = poll(&pfd, 1, 0);
            if (rc > 0)
                return EGM_OK;
            if (rc < 0 && errno != EINTR)
                return egm__set_error(egm__status_from_errno(errno), "rpc client: poll failed: %s",
                                      strerror(errno));
        } while (egm__now_ns() < until);
    }
    int wait_ms = -1;
    if (deadline_ms) {
        uint64_t now = egm__now_ms();
        wait_ms = now >= deadline_ms ? 0 : (int)(deadline_ms - now);
    }
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int rc = poll(&pfd, 1, wait_ms);
    if (rc < 0 && errno != EINTR)
        return egm__set_error(egm__status_from_errno(errno), "rpc client: poll failed: %s",
                              strerror(errno));
    return rc == 0 ? EGM_ERR_TIMEOUT : EGM_OK;
}

/* Holds the reader role until `p` is done or `deadline_ms` passes. Called and
 * returns with lock held; drops it while reading.
 *
 * Polls before the first read: the caller has just sent its request (or has
 * slept while another caller read), so a read at once would mostly find
 * nothing and cost a system call (sendmsg, recv EAGAIN, poll, recv). After a
 * read that made progress it reads again before polling, as more of a large
 * reply may be there already.
 *
 * Not a blocking recv: on a Unix socket a reader blocked in recv is also woken
 * each time the server drains our request from the socket (write space; poll
 * filters that out by its event mask), and goes back to sleep: measured 1.4
 * sleeps per round trip against 1.0 with poll, at 8 clients. */
static void read_until_done_locked(egm_rpc_client_t *cl, pending_t *p, uint64_t deadline_ms)
{
    int fd = cl->fd;
    int readable = 0; /* the last read made progress: try another before polling */
    egm_status_t status = EGM_OK;

    cl->reading = 1;
    while (!p->done) {
        pthread_mutex_unlock(&cl->lock);
        status = readable ? EGM_OK : wait_readable(fd, deadline_ms, cl->spin_us);
        if (status == EGM_OK) {
            status = pump(cl, fd);
            readable = status == EGM_OK;
            if (status == EGM_INPROGRESS)
                status = EGM_OK; /* nothing after all (or EINTR): poll again */
        }
        pthread_mutex_lock(&cl->lock);
        if (status == EGM_ERR_TIMEOUT)
            break; /* the caller removes its entry */
        if (status < 0) {
            break_connection_locked(cl);
            break;
        }
    }
    release_role_locked(cl);
}

/* Tears down a broken connection. Caller holds lock; nobody holds the role.
 * Calls still pending belong to it and can no longer get a reply. */
static void drop_connection_locked(egm_rpc_client_t *cl)
{
    fail_all_locked(cl, EGM_ERR_UNREACHABLE);
    pthread_mutex_lock(&cl->wlock);
    if (cl->fd >= 0)
        close(cl->fd);
    cl->fd = -1;
    cl->gen++;
    pthread_mutex_unlock(&cl->wlock);
    input_reset(&cl->in);
    cl->broken = 0;
    cl->stream_shut = 0;
}

static egm_status_t write_frame(int fd, const uint8_t *hdr, const uint8_t *payload, size_t len,
                                uint64_t deadline_ms, size_t *sent_p);
static egm_status_t decode_error_reply(uint16_t type, const uint8_t *buf, size_t len);

/* The answer to a fresh exchange: a reply to its request (request id 0). */
static egm_status_t check_fresh_answer(void *arg, const egm_frame_header_t *h)
{
    uint16_t type = *(const uint16_t *)arg;
    if (h->type != type || h->request_id != 0 || !(h->flags & EGM_FRAME_REPLY))
        return egm__set_error(EGM_ERR_PROTOCOL, "rpc client: unexpected answer to %s",
                              egm__rpc_type_name(type));
    return EGM_OK;
}

/* Reads one frame of a fresh (not yet shared) connection, the answer to a
 * `type` request, reading no byte past it. *frame_p's buf is the caller's. */
static egm_status_t read_answer(int fd, uint16_t type, uint64_t deadline_ms, egm_frame_t *frame_p)
{
    egm_frame_reader_t reader;
    egm_status_t status;

    egm__frame_reader_init(&reader, FRESH_ANSWER_MAX, "rpc_fresh_answer");
    reader.check = check_fresh_answer;
    reader.check_arg = &type;
    do {
        uint8_t *room = NULL;
        size_t want = 0;
        if ((status = egm__frame_reader_space(&reader, &room, &want)) != EGM_OK)
            break;
        status = wait_readable(fd, deadline_ms, 0);
        if (status != EGM_OK) {
            if (status == EGM_ERR_TIMEOUT)
                status = egm__set_error(EGM_ERR_TIMEOUT, "rpc client: no answer to %s",
                                        egm__rpc_type_name(type));
            break;
        }
        ssize_t n = recv(fd, room, want, MSG_DONTWAIT);
        if (n == 0) {
            status = egm__set_error(EGM_ERR_UNREACHABLE, "rpc client: connection closed during %s",
                                    egm__rpc_type_name(type));
            break;
        }
        if (n < 0) {
            if (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK) {
                status = EGM_INPROGRESS;
                continue;
            }
            status = egm__set_error(egm__status_from_errno(errno), "rpc client: recv: %s",
                                    strerror(errno));
            break;
        }
        status = egm__frame_reader_commit(&reader, (size_t)n, frame_p);
    } while (status == EGM_INPROGRESS);
    egm__frame_reader_cleanup(&reader);
    return status;
}

/* One request on a fresh connection and its answer (request id 0, which no
 * call uses), before the connection is shared: Auth and Hello. The reply's
 * payload goes to reply[*len_p] (in: its room, out: its length). */
static egm_status_t fresh_exchange(int fd, uint16_t type, const uint8_t *req, size_t req_len,
                                   uint8_t *reply, size_t *len_p, uint64_t deadline_ms)
{
    size_t sent = 0;
    uint8_t hdr[EGM_FRAME_HEADER_SIZE];
    egm_frame_header_t h = {
        .version = EGM_RPC_VERSION, .type = type, .request_id = 0, .length = (uint32_t)req_len};
    egm_frame_t answer;
    egm_status_t status;

    egm__frame_encode_header(&h, hdr);
    status = write_frame(fd, hdr, req, req_len, deadline_ms, &sent);
    if (status != EGM_OK)
        return status;
    status = read_answer(fd, type, deadline_ms, &answer);
    if (status != EGM_OK)
        return status;
    uint32_t len = answer.hdr.length;
    if (answer.hdr.flags & EGM_FRAME_ERROR)
        status = decode_error_reply(type, len ? answer.payload : (const uint8_t *)"", len);
    else if (reply == NULL) /* the answer's payload is not wanted */
        *len_p = len;
    else if (len > *len_p)
        status = egm__set_error(EGM_ERR_PROTOCOL, "rpc client: %s answer of %u bytes, at most %zu",
                                egm__rpc_type_name(type), (unsigned)len, *len_p);
    else {
        if (len)
            memcpy(reply, answer.payload, len);
        *len_p = len;
    }
    egm_free(answer.buf);
    return status;
}

/* Presents the cluster token on a fresh connection and waits for the answer. */
static egm_status_t authenticate(egm_rpc_client_t *cl, int fd, uint64_t deadline_ms)
{
    size_t len = 0;
    return fresh_exchange(fd, EGM_RPC_AUTH, (const uint8_t *)cl->auth_token, strlen(cl->auth_token),
                          NULL, &len, deadline_ms);
}

/* Adds the local names to try for one address of the host we were given: its
 * own, then the wildcard ones of its port (a listener on the exact address
 * takes the connection before a wildcard one, and both cannot listen at
 * once). */
static void add_local_candidates(egm_rpc_client_t *cl, const egm_rpc_endpoint_t *target)
{
    egm_rpc_endpoint_t any4 = {.family = AF_INET, .port = target->port};
    egm_rpc_endpoint_t any6 = {.family = AF_INET6, .port = target->port};
    const egm_rpc_endpoint_t *listens[3] = {target, target->family == AF_INET ? &any4 : &any6,
                                            target->family == AF_INET ? &any6 : NULL};

    if (!egm__rpc_endpoint_is_loopback(target))
        return;
    for (size_t i = 0; i < 3 && listens[i] != NULL; i++) {
        local_candidate_t c;
        int seen = 0;
        egm__rpc_local_name(listens[i], c.name, sizeof(c.name));
        c.target = *target;
        for (size_t j = 0; j < cl->n_local; j++)
            seen |= strcmp(cl->local[j].name, c.name) == 0;
        if (!seen && cl->n_local < LOCAL_CANDIDATES_MAX)
            cl->local[cl->n_local++] = c;
    }
}

/* The local names worth trying for cl->host: a loopback address, or
 * "localhost" (each loopback address it resolves to, in the resolver's order,
 * as TCP would try them). */
static void plan_local_candidates(egm_rpc_client_t *cl)
{
    egm_rpc_endpoint_t ep;
    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
    struct addrinfo *ai = NULL;

    if (egm__rpc_endpoint_from_host(cl->host, cl->port, &ep) == EGM_OK) {
        add_local_candidates(cl, &ep);
        return;
    }
    egm__clear_error();
    if (strcasecmp(cl->host, "localhost") != 0 || getaddrinfo(cl->host, "0", &hints, &ai) != 0)
        return;
    for (const struct addrinfo *p = ai; p != NULL; p = p->ai_next) {
        if (egm__rpc_endpoint_from_sockaddr(p->ai_addr, &ep) != EGM_OK)
            continue;
        ep.port = cl->port;
        add_local_candidates(cl, &ep);
    }
    freeaddrinfo(ai);
    egm__clear_error();
}

/* Connects to one local name: never waits (a full backlog fails at once) and
 * talks only to a master of our own uid or root, since any local process
 * could bind the abstract name first; then asks it which TCP endpoints it
 * listens on (Hello) and keeps the connection only if one of them is the one
 * we were given: that is the master TCP would have reached. Returns the fd
 * or -1 (the caller tries the next name, then TCP). */
static int local_connect(const local_candidate_t *c, uint64_t deadline_ms)
{
    char target[EGM_RPC_ENDPOINT_MAX];
    uint8_t hello[EGM_RPC_HELLO_MAX];
    size_t len = sizeof(hello) - 1;
    int fd;

    if (egm__sock_unix_connect(c->name, &fd) != EGM_OK)
        return -1; /* nobody there: the common case */
    egm__rpc_endpoint_format(&c->target, target, sizeof(target));
    if (egm__sock_peer_trusted(fd, c->name) != EGM_OK) {
        egm_log_ratelimited(EGM_LOG_WARN, 1, "rpc client: %s: using TCP", egm_last_error());
        goto err_close;
    }
    if (egm__sock_set_nonblock(fd, 1) != EGM_OK) /* as for TCP: nobody blocks */
        goto err_close;
    if (fresh_exchange(fd, EGM_RPC_HELLO, NULL, 0, hello, &len, deadline_ms) != EGM_OK) {
        egm_log_ratelimited(EGM_LOG_WARN, 1, "rpc client: unix:%s: Hello failed (%s); not using it",
                            c->name, egm_last_error());
        goto err_close;
    }
    hello[len] = '\0';
    if (!egm__rpc_hello_covers((const char *)hello, len, &c->target)) {
        for (size_t i = 0; i < len; i++)
            if (hello[i] < 0x20 || hello[i] > 0x7e)
                hello[i] = '?';
        egm_log_ratelimited(EGM_LOG_WARN, 1,
                            "rpc client: unix:%s is the master of %s, not of %s: not using it",
                            c->name, (const char *)hello, target);
        goto err_close;
    }
    egm_debug("rpc client: unix:%s is the master of %s", c->name, target);
    return fd;

err_close:
    close(fd);
    return -1;
}

/* Asks the resolver where the master is now, and aims there (local socket
 * names too) when it moved. Caller holds lock, not connected. */
static egm_status_t follow_master(egm_rpc_client_t *cl)
{
    char addr[EGM_SOCK_HOST_MAX + 16], host[EGM_SOCK_HOST_MAX];
    uint16_t port;
    egm_status_t status = cl->resolve(cl->resolve_arg, addr, sizeof(addr));
    if (status != EGM_OK)
        return status;
    status = egm__sock_split_peer_hostport(addr, host, sizeof(host), &port);
    if (status != EGM_OK)
        return egm__set_error(EGM_ERR_UNREACHABLE, "the master's address \"%s\": %s", addr,
                              egm_last_error());
    if (port == cl->port && strcmp(host, cl->host) == 0)
        return EGM_OK;
    if (cl->port != 0)
        egm_info("rpc client: the master is now %s", addr);
    snprintf(cl->host, sizeof(cl->host), "%s", host);
    cl->port = port;
    egm__sock_format_hostport(cl->host, cl->port, cl->where, sizeof(cl->where));
    cl->n_local = 0;
    if (cl->prefer_local)
        plan_local_candidates(cl);
    return EGM_OK;
}

/* A call to the master timed out. Where the master is found through a
 * resolver (an etcd leader key), it may have lost the leadership behind a
 * partition: its TCP connection stays up while no packet passes, for many
 * minutes. When the leader is now elsewhere, shut the stream down, so that
 * every call on it fails at once and the next one connects to the new
 * leader. Caller holds lock. */
static void leave_deposed_master_locked(egm_rpc_client_t *cl, uint64_t gen)
{
    char addr[EGM_SOCK_HOST_MAX + 16], host[EGM_SOCK_HOST_MAX];
    uint16_t port;
    if (cl->resolve == NULL || cl->fd < 0 || cl->gen != gen || cl->broken || cl->stream_shut ||
        cl->resolve(cl->resolve_arg, addr, sizeof(addr)) != EGM_OK ||
        egm__sock_split_peer_hostport(addr, host, sizeof(host), &port) != EGM_OK ||
        (port == cl->port && strcmp(host, cl->host) == 0))
        return;
    egm_info("rpc client: %s does not answer and %s leads now: reconnecting", cl->where, addr);
    pthread_mutex_lock(&cl->wlock);
    if (cl->gen == gen && cl->fd >= 0)
        shutdown(cl->fd, SHUT_RDWR);
    pthread_mutex_unlock(&cl->wlock);
    cl->stream_shut = 1;
}

/* Caller holds lock. */
static egm_status_t ensure_connected_locked(egm_rpc_client_t *cl, uint64_t deadline_ms)
{
    egm_status_t status;
    int fd = -1;
    int timeout = cl->connect_timeout_ms;

    if (cl->fd >= 0 && !cl->broken && !cl->stream_shut)
        return EGM_OK;
    /* the last role holder saw the end; it has let go of the fd by now */
    while (cl->reading)
        pthread_cond_wait(&cl->idle, &cl->lock);
    if (cl->fd >= 0 && !cl->broken && !cl->stream_shut)
        return EGM_OK; /* another caller reconnected meanwhile */
    if (cl->fd >= 0)
        drop_connection_locked(cl);
    if (cl->connect_once && cl->connected)
        return egm__set_error(EGM_ERR_UNREACHABLE,
                              "connection to %s lost (this client does not connect again)",
                              cl->where);

    if (deadline_ms) {
        uint64_t now = egm__now_ms();
        int left = deadline_ms > now ? (int)(deadline_ms - now) : 1;
        if (timeout <= 0 || left < timeout)
            timeout = left;
    }
    if (cl->resolve != NULL) {
        status = follow_master(cl);
        if (status != EGM_OK)
            return status;
    }
    const char *via = NULL;
    if (cl->n_local > 0) {
        /* Hello is answered by the server's thread without the master's
         * state: a local master that does not answer soon is not one */
        uint64_t hello_deadline = egm__now_ms() + (timeout > 0 ? (uint64_t)timeout : 5000u);
        for (size_t i = 0; i < cl->n_local && fd < 0; i++) {
            fd = local_connect(&cl->local[i], hello_deadline);
            via = cl->local[i].name;
        }
    }
    if (fd < 0) {
        status = egm__sock_tcp_connect(cl->host, cl->port, timeout, &fd);
        if (status != EGM_OK)
            return status;
        /* readers poll, writers pass MSG_DONTWAIT: nobody blocks in a socket call */
        status = egm__sock_set_nonblock(fd, 1);
        if (status != EGM_OK) {
            close(fd);
            return status;
        }
        egm_debug("rpc client connected to %s over tcp", cl->where);
    } else {
        egm_debug("rpc client connected to %s over unix:%s", cl->where, via);
    }
    if (cl->auth_token[0] != '\0') {
        uint64_t auth_deadline = deadline_ms;
        if (auth_deadline == 0 && cl->connect_timeout_ms > 0)
            auth_deadline = egm__now_ms() + (uint64_t)cl->connect_timeout_ms;
        status = authenticate(cl, fd, auth_deadline);
        if (status != EGM_OK) {
            char detail[256];
            snprintf(detail, sizeof(detail), "%s", egm_last_error());
            close(fd);
            return egm__set_error(status, "master %s refused the connection: %s", cl->where,
                                  detail);
        }
    }
    pthread_mutex_lock(&cl->wlock);
    cl->fd = fd;
    cl->gen++;
    pthread_mutex_unlock(&cl->wlock);
    cl->broken = 0;
    cl->connected = 1;
    return EGM_OK;
}

/* Writes one frame with a deadline. *sent_p tells whether any byte left, which
 * decides whether the stream is still usable after a failure. Caller holds wlock. */
static egm_status_t write_frame(int fd, const uint8_t *hdr, const uint8_t *payload, size_t len,
                                uint64_t deadline_ms, size_t *sent_p)
{
    size_t total = EGM_FRAME_HEADER_SIZE + len;
    size_t sent = 0;

    *sent_p = 0;
    while (sent < total) {
        struct iovec iov[2];
        int niov = 0;
        if (sent < EGM_FRAME_HEADER_SIZE) {
            iov[niov].iov_base = (void *)(hdr + sent);
            iov[niov].iov_len = EGM_FRAME_HEADER_SIZE - sent;
            niov++;
            if (len) {
                iov[niov].iov_base = (void *)payload;
                iov[niov].iov_len = len;
                niov++;
            }
        } else {
            iov[niov].iov_base = (void *)(payload + (sent - EGM_FRAME_HEADER_SIZE));
            iov[niov].iov_len = total - sent;
            niov++;
        }
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)niov};
        ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            sent += (size_t)n;
            *sent_p = sent;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)
            return egm__set_error(egm__status_from_errno(errno), "rpc client: send failed: %s",
                                  strerror(errno));
        /* socket buffer full: wait for room until the deadline */
        int wait_ms = -1;
        if (deadline_ms) {
            uint64_t now = egm__now_ms();
            if (now >= deadline_ms)
                return egm__set_error(EGM_ERR_TIMEOUT, "rpc client: send timed out");
            wait_ms = (int)(deadline_ms - now);
        }
        struct pollfd pfd = {.fd = fd, .events = POLLOUT};
        int rc = poll(&pfd, 1, wait_ms);
        if (rc < 0 && errno != EINTR)
            return egm__set_error(egm__status_from_errno(errno), "rpc client: poll failed: %s",
                                  strerror(errno));
    }
    return EGM_OK;
}

static void deadline_to_timespec(uint64_t deadline_ms, struct timespec *ts)
{
    ts->tv_sec = (time_t)(deadline_ms / 1000);
    ts->tv_nsec = (long)(deadline_ms % 1000) * 1000000L;
}

/* Turns an ErrorReply into the caller's status and last-error text. */
static egm_status_t decode_error_reply(uint16_t type, const uint8_t *buf, size_t len)
{
    Egm__ErrorReply *er = egm__error_reply__unpack(&egm__pb_allocator, len, buf);
    egm_status_t status;

    if (er == NULL)
        return egm__set_error(EGM_ERR_PROTOCOL, "%s: undecodable error reply (%zu bytes)",
                              egm__rpc_type_name(type), len);
    const char *text = er->error ? er->error : "";
    if (er->status < 0 && er->status >= EGM_STATUS_MIN) {
        status = (egm_status_t)er->status;
        egm__set_error(status, "%s", *text ? text : egm_status_string(status));
    } else {
        /* not an error status we know: never report success for an error frame */
        status = er->status >= 0 ? EGM_ERR_PROTOCOL : EGM_ERR_INTERNAL;
        egm__set_error(status, "%s: error reply with status %d: %s", egm__rpc_type_name(type),
                       (int)er->status, text);
    }
    egm__error_reply__free_unpacked(er, &egm__pb_allocator);
    return status;
}

/* The error of a call p whose connection was lost (p->status). */
static egm_status_t lost_error(const egm_rpc_client_t *cl, const pending_t *p)
{
    return egm__set_error(p->status, "%s to %s: connection lost", egm__rpc_type_name(p->type),
                          cl->where);
}

/* Registers p, connects when needed and writes the request frame: EGM_OK
 * with p pending (end it with call_end), or why not (p is then not
 * pending). */
static egm_status_t call_begin(egm_rpc_client_t *cl, pending_t *p, uint16_t type,
                               const uint8_t *req, size_t req_len, int timeout_ms)
{
    egm_status_t status;
    uint8_t hdr[EGM_FRAME_HEADER_SIZE];
    pthread_condattr_t ca;

    p->done = 0;
    p->status = EGM_OK;
    p->type = type;
    p->timeout_ms = timeout_ms;
    p->deadline_ms = timeout_ms > 0 ? egm__now_ms() + (uint64_t)timeout_ms : 0;
    if (cl == NULL)
        return egm__set_error(EGM_ERR_CLOSED, "rpc client: not created");
    if (req_len > cl->max_frame_size)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "%s request of %zu bytes exceeds max_frame_size %zu",
                              egm__rpc_type_name(type), req_len, cl->max_frame_size);

    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&p->cond, &ca);
    pthread_condattr_destroy(&ca);

    pthread_mutex_lock(&cl->lock);
    if (cl->closed) {
        status = egm__set_error(EGM_ERR_CLOSED, "rpc client: closed");
        goto fail;
    }
    status = ensure_connected_locked(cl, p->deadline_ms);
    if (status != EGM_OK)
        goto fail;
    p->id = ++cl->next_id;
    status = egm__hashmap_put(cl->pending, &p->id, sizeof(p->id), p, NULL);
    if (status != EGM_OK)
        goto fail;
    p->gen = cl->gen;
    pthread_mutex_unlock(&cl->lock);

    egm_frame_header_t h = {
        .version = EGM_RPC_VERSION,
        .flags = 0,
        .type = type,
        .request_id = p->id,
        .length = (uint32_t)req_len,
    };
    egm__frame_encode_header(&h, hdr);

    egm_status_t wstatus = EGM_OK;
    int shut = 0;
    pthread_mutex_lock(&cl->wlock);
    if (cl->gen == p->gen && cl->fd >= 0) {
        size_t sent = 0;
        wstatus = write_frame(cl->fd, hdr, req, req_len, p->deadline_ms, &sent);
        /* half a frame poisons the stream; so does any error but a timeout
         * before the first byte: fail every call on it and reconnect */
        if (wstatus != EGM_OK && (sent > 0 || wstatus != EGM_ERR_TIMEOUT)) {
            shutdown(cl->fd, SHUT_RDWR);
            shut = 1;
        }
    }
    /* else the connection was replaced: dropping it failed us */
    pthread_mutex_unlock(&cl->wlock);

    pthread_mutex_lock(&cl->lock);
    if (shut && cl->gen == p->gen)
        cl->stream_shut = 1;
    if (wstatus == EGM_OK) {
        pthread_mutex_unlock(&cl->lock);
        return EGM_OK;
    }
    if (p->done) /* failed with its connection meanwhile */
        status = lost_error(cl, p);
    else {
        egm__hashmap_remove(cl->pending, &p->id, sizeof(p->id));
        status = wstatus;
    }
fail:
    pthread_mutex_unlock(&cl->lock);
    pthread_cond_destroy(&p->cond);
    return status;
}

/* Waits for the reply of p (begun), and ends it: egm__rpc_call's results. */
static egm_status_t call_end(egm_rpc_client_t *cl, pending_t *p, uint8_t **reply_p,
                             size_t *reply_len_p)
{
    egm_status_t status;

    *reply_p = NULL;
    *reply_len_p = 0;
    pthread_mutex_lock(&cl->lock);
    while (!p->done) {
        if (!cl->reading && !cl->broken && cl->gen == p->gen && cl->fd >= 0) {
            /* nobody reads: read our own reply (and hand over others') */
            read_until_done_locked(cl, p, p->deadline_ms);
            if (p->done)
                break;
        } else {
            int rc = 0;
            p->sleeping = 1;
            if (p->deadline_ms == 0) {
                pthread_cond_wait(&p->cond, &cl->lock);
            } else {
                struct timespec ts;
                deadline_to_timespec(p->deadline_ms, &ts);
                rc = pthread_cond_timedwait(&p->cond, &cl->lock, &ts);
            }
            p->sleeping = 0;
            if (p->done || rc != ETIMEDOUT)
                continue;
        }
        if (p->deadline_ms && egm__now_ms() >= p->deadline_ms) {
            /* remove ourselves so that a late reply is dropped; a wakeup
             * meant to hand us the reader role goes on to another waiter */
            egm__hashmap_remove(cl->pending, &p->id, sizeof(p->id));
            wake_successor_locked(cl);
            leave_deposed_master_locked(cl, p->gen); /* before the error: it may set one */
            status = egm__set_error(EGM_ERR_TIMEOUT, "%s to %s timed out after %d ms",
                                    egm__rpc_type_name(p->type), cl->where, p->timeout_ms);
            pthread_mutex_unlock(&cl->lock);
            goto out;
        }
    }
    pthread_mutex_unlock(&cl->lock);

    if (p->status != EGM_OK) {
        status = lost_error(cl, p);
    } else if (p->flags & EGM_FRAME_ERROR) {
        status = decode_error_reply(p->type, p->buf, p->len);
        egm_free(p->buf);
    } else {
        *reply_p = p->buf;
        *reply_len_p = p->len;
        status = EGM_OK;
    }
out:
    pthread_cond_destroy(&p->cond);
    return status;
}

egm_status_t egm__rpc_call(egm_rpc_client_t *client, uint16_t type, const uint8_t *req,
                           size_t req_len, uint8_t **reply_p, size_t *reply_len_p, int timeout_ms)
{
    pending_t p = {0};

    *reply_p = NULL;
    *reply_len_p = 0;
    egm_status_t status = call_begin(client, &p, type, req, req_len, timeout_ms);
    return status != EGM_OK ? status : call_end(client, &p, reply_p, reply_len_p);
}

struct egm_rpc_call {
    egm_rpc_client_t *client;
    pending_t p;
};

egm_status_t egm__rpc_begin(egm_rpc_client_t *client, uint16_t type, const uint8_t *req,
                            size_t req_len, int timeout_ms, egm_rpc_call_t **call_p)
{
    egm_rpc_call_t *call = egm_calloc(1, sizeof(*call), "rpc.call");
    *call_p = NULL;
    if (call == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory for a %s call",
                              egm__rpc_type_name(type));
    call->client = client;
    egm_status_t status = call_begin(client, &call->p, type, req, req_len, timeout_ms);
    if (status != EGM_OK)
        egm_free(call);
    else
        *call_p = call;
    return status;
}

egm_status_t egm__rpc_end(egm_rpc_call_t *call, uint8_t **reply_p, size_t *reply_len_p)
{
    egm_status_t status = call_end(call->client, &call->p, reply_p, reply_len_p);
    egm_free(call);
    return status;
}

egm_status_t egm__rpc_call_pb(egm_rpc_client_t *client, uint16_t type, const ProtobufCMessage *req,
                              uint8_t **reply_p, size_t *reply_len_p, int timeout_ms)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    egm_status_t status = egm__pb_pack(req, &buf, &len);

    if (status != EGM_OK)
        return status;
    status = egm__rpc_call(client, type, buf, len, reply_p, reply_len_p, timeout_ms);
    egm_free(buf);
    return status;
}

egm_status_t egm__rpc_call_msg(egm_rpc_client_t *client, uint16_t type, const ProtobufCMessage *req,
                               const ProtobufCMessageDescriptor *reply_desc,
                               ProtobufCMessage **reply_p, int timeout_ms)
{
    uint8_t *reply = NULL;
    size_t reply_len = 0;

    *reply_p = NULL;
    egm_status_t status = egm__rpc_call_pb(client, type, req, &reply, &reply_len, timeout_ms);
    if (status != EGM_OK)
        return status;
    status = egm__pb_unpack(reply_desc, reply, reply_len, reply_p);
    if (status != EGM_OK)
        egm_warn("rpc client: %s reply: %s", egm__rpc_type_name(type), egm_last_error());
    egm_free(reply);
    return status;
}

void egm__rpc_msg_free(ProtobufCMessage *msg)
{
    egm__pb_free(msg);
}

egm_status_t egm__rpc_client_create(const egm_rpc_client_params_t *params,
                                    egm_rpc_client_t **client_p)
{
    egm_rpc_client_t *cl;
    egm_status_t status;

    *client_p = NULL;
    if (params == NULL || (params->addr == NULL && params->resolve == NULL))
        return egm__set_error(EGM_ERR_INVALID_ARG, "rpc client: an address is required");
    if (params->max_frame_size == 0 || params->max_frame_size > UINT32_MAX)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "rpc client: max_frame_size %zu out of range 1..%u",
                              params->max_frame_size, UINT32_MAX);

    cl = egm_calloc(1, sizeof(*cl), "rpc_client");
    if (cl == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "rpc client: out of memory");
    cl->resolve = params->resolve;
    cl->resolve_arg = params->resolve_arg;
    cl->prefer_local = params->prefer_local_socket;
    if (params->addr != NULL) {
        status = egm__sock_split_peer_hostport(params->addr, cl->host, sizeof(cl->host), &cl->port);
        if (status != EGM_OK)
            goto err_free;
        egm__sock_format_hostport(cl->host, cl->port, cl->where, sizeof(cl->where));
    } else {
        snprintf(cl->where, sizeof(cl->where), "(the leader of masters)");
    }
    status = egm__hashmap_create(&cl->pending);
    if (status != EGM_OK)
        goto err_free;
    egm__frame_reader_init(&cl->in.reader, params->max_frame_size, "rpc_reply");
    cl->in.reader.check = check_reply;
    cl->in.scratch = egm_malloc(IN_CHUNK, "rpc_client_in");
    if (cl->in.scratch == NULL) {
        status = egm__set_error(EGM_ERR_NO_MEMORY, "rpc client: out of memory");
        goto err_map;
    }
    pthread_mutex_init(&cl->lock, NULL);
    pthread_mutex_init(&cl->wlock, NULL);
    pthread_cond_init(&cl->idle, NULL);
    cl->fd = -1;
    cl->connect_timeout_ms = params->connect_timeout_ms;
    cl->spin_us = params->spin_us;
    cl->connect_once = params->connect_once;
    cl->max_frame_size = params->max_frame_size;
    if (params->auth_token != NULL)
        snprintf(cl->auth_token, sizeof(cl->auth_token), "%s", params->auth_token);
    if (params->prefer_local_socket && params->addr != NULL)
        plan_local_candidates(cl);
    *client_p = cl;
    return EGM_OK;

err_map:
    egm__hashmap_destroy(cl->pending);
err_free:
    egm_free(cl);
    return status;
}

int egm__rpc_client_local_probe(const char *addr, int timeout_ms)
{
    egm_rpc_client_params_t params = {.addr = addr,
                                      .connect_timeout_ms = timeout_ms,
                                      .max_frame_size = EGM_RPC_HELLO_MAX,
                                      .prefer_local_socket = 1};
    egm_rpc_client_t *cl = NULL;
    int fd = -1;

    if (egm__rpc_client_create(&params, &cl) != EGM_OK)
        return 0;
    uint64_t deadline = egm__now_ms() + (timeout_ms > 0 ? (uint64_t)timeout_ms : 5000u);
    for (size_t i = 0; i < cl->n_local && fd < 0; i++)
        fd = local_connect(&cl->local[i], deadline);
    if (fd >= 0)
        close(fd);
    egm__rpc_client_destroy(cl);
    return fd >= 0;
}

void egm__rpc_client_destroy(egm_rpc_client_t *client)
{
    egm_rpc_client_t *cl = client;

    if (cl == NULL)
        return;
    pthread_mutex_lock(&cl->lock);
    cl->closed = 1;
    if (cl->fd >= 0)
        shutdown(cl->fd, SHUT_RDWR); /* wakes a caller reading */
    while (cl->reading)
        pthread_cond_wait(&cl->idle, &cl->lock);
    fail_all_locked(cl, EGM_ERR_CLOSED);
    if (cl->fd >= 0)
        close(cl->fd);
    cl->fd = -1;
    input_reset(&cl->in);
    pthread_mutex_unlock(&cl->lock);

    egm__hashmap_destroy(cl->pending);
    pthread_cond_destroy(&cl->idle);
    pthread_mutex_destroy(&cl->wlock);
    pthread_mutex_destroy(&cl->lock);
    egm__frame_reader_cleanup(&cl->in.reader);
    egm_free(cl->in.scratch);
    egm__secure_zero(cl->auth_token, sizeof(cl->auth_token));
    egm_free(cl);
}
