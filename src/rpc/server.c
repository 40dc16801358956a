/* RPC server on the reactor: accepts connections, reads frames through a
 * frame reader per connection (rpc/frame_reader.h: partial frames across
 * reads, several frames per read), dispatches each to
 * its handler and queues the reply, flushing with EPOLLOUT when the socket
 * would block. Everything of a server runs on its reactor's thread; only the
 * stats (atomics) and the inbox (its mutex) are touched from elsewhere.
 *
 * Several servers on several reactors (threads) may share one set of
 * listening sockets (egm__rpc_server_create_peer): each watches them with
 * EPOLLEXCLUSIVE, so a new connection wakes one of them, which accepts it
 * (others that were woken get EAGAIN) and hands it to the server of the group
 * with the fewest open connections, through that server's inbox and a task on
 * its reactor. A connection then stays on that one thread. */
#include "rpc/server.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/config_int.h"
#include "common/log.h"
#include "common/sock.h"
#include "common/wire.h"
#include "rpc/frame.h"
#include "rpc/frame_reader.h"
#include "rpc/hold.h"
#include "rpc/proto_util.h"

#define HANDLER_SLOTS 256
#define READ_CHUNK (64 * 1024)
/* Stop reading a connection whose peer does not read its replies. */
#define OUT_HIGH_WATER (8u * 1024 * 1024)
/* Stop reading a connection with this many replies held (rpc/hold.h): a
 * client pipelining changes faster than the standbys confirm them is paced
 * by their confirmations, as by its unread replies. */
#define HOLDS_HIGH_WATER 4096
/* A connection closed after an error reply waits this long for the peer's
 * EOF, so that unread input does not turn the close into an RST that would
 * destroy the error reply before the peer reads it. */
#define LINGER_MS 2000
#define LINGER_MAX_DISCARD (4u * 1024 * 1024)
#define SWEEP_PERIOD_MS 500

#define ACCEPT_PAUSE_MS 100 /* how long accepting pauses when out of descriptors */
/* How long a connection counts as pipelined after its last request that came
 * while another of its was held or behind another in one read. */
#define PIPELINED_FOR_MS 1000

typedef struct rpc_conn rpc_conn_t;

struct rpc_conn {
    egm_rpc_server_t *server;
    rpc_conn_t *prev, *next;
    int fd;
    uint32_t events; /* currently registered */

    egm_frame_reader_t in;

    /* output */
    uint8_t *out;
    size_t out_off, out_len, out_cap;

    /* the peer presented the cluster token (or none is required) */
    int authenticated;
    uint64_t opened_ms; /* when this server adopted it */
    /* closing after an error reply: no more dispatch */
    int closing;
    int wr_shut;
    uint64_t linger_deadline_ms;
    size_t discarded;
    /* egm__rpc_server_bind_peer */
    int bound;
    uint8_t peer[16];
    egm_rpc_hold_t *holds; /* its requests answered later (rpc/hold.h) */
    size_t n_holds;
    /* When a request of it last came while another of its was held or
     * behind another in one read (0: never): its peer sends before its
     * answers come (threads sharing it, a pipeline), so the next request may
     * be a microsecond away. A lone caller whose request once met its own
     * liveness ping so is alone again PIPELINED_FOR_MS later. */
    uint64_t pipelined_ms;
    /* The peer half-closed with replies still held: no more reading; the
     * connection closes once the last of them is sent. */
    int peer_done;
};

/* egm_rpc_server_stats_t's counters: other threads read them (stat_get). */
typedef struct {
    atomic_uint_fast64_t connections_accepted;
    atomic_uint_fast64_t connections_open;
    atomic_uint_fast64_t requests;
    atomic_uint_fast64_t frames_rejected;
    atomic_uint_fast64_t connections_unix;
    atomic_uint_fast64_t auth_failures;
} server_counters_t;

struct egm_rpc_server {
    egm_reactor_t *reactor;
    int listen_fd;
    int unix_fd;           /* -1 unless egm__rpc_server_listen_unix succeeded */
    uint64_t resume_timer; /* accepting paused after EMFILE until it fires; 0 = not paused */
    uint16_t port;
    size_t max_frame_size;
    size_t max_connections;
    char auth_token[EGM_AUTH_TOKEN_MAX + 1]; /* "" = none required */
    egm_rpc_endpoint_t listen_ep;            /* the TCP listener's bound address */
    char identity[EGM_RPC_HELLO_MAX];        /* the Hello reply */
    uint64_t sweep_timer;
    int has_timer;
    struct {
        egm_rpc_handler_t fn;
        void *arg;
    } handlers[HANDLER_SLOTS];
    egm_rpc_peer_close_t on_peer_close;
    void *on_peer_close_arg;
    int destroying;    /* connections closed by destroy call no hook */
    rpc_conn_t *conns; /* doubly linked list, newest first */
    size_t nconns;
    size_t n_unauthenticated; /* of them, a token is required and not presented yet */
    uint8_t *rbuf;            /* READ_CHUNK scratch shared by all connections */
    server_counters_t stats;

    /* Listeners shared with the servers of a group; `owner` created (and
     * closes) them. Its `group` lists every server, itself first; it is set
     * up before any reactor runs and only read afterwards. */
    egm_rpc_server_t *owner;
    egm_rpc_server_t **group;
    size_t n_group;
    int listening; /* the listeners are in this server's reactor */
    /* Connections another server of the group accepted for this one. */
    pthread_mutex_t inbox_lock;
    int *inbox; /* fd, or -1 - fd for one accepted on the Unix listener */
    size_t n_inbox, cap_inbox;
    egm_rpc_holdbox_t *holds; /* replies released by other threads */
};

static void stat_add(atomic_uint_fast64_t *counter, int64_t delta)
{
    atomic_fetch_add_explicit(counter, (uint_fast64_t)delta, memory_order_relaxed);
}

static uint64_t stat_get(const atomic_uint_fast64_t *counter)
{
    return atomic_load_explicit((atomic_uint_fast64_t *)counter, memory_order_relaxed);
}

/* The connection and request a handler runs (egm__rpc_server_bind_peer,
 * egm__rpc_server_hold), and whether it held its reply. */
static _Thread_local rpc_conn_t *current_conn;
static _Thread_local const egm_frame_header_t *current_request;
static _Thread_local int current_held;
static _Thread_local int current_more_input; /* bytes read after the request's frame */

int egm__rpc_server_others_waiting(void)
{
    const rpc_conn_t *c = current_conn;
    return c != NULL &&
           (current_more_input || egm__reactor_events_waiting(c->server->reactor) > 0 ||
            (c->pipelined_ms != 0 && egm__now_ms() - c->pipelined_ms < PIPELINED_FOR_MS));
}

int egm__rpc_server_bind_peer(const uint8_t peer[16])
{
    rpc_conn_t *c = current_conn;
    if (c == NULL || (c->bound && memcmp(c->peer, peer, 16) == 0))
        return 0;
    memcpy(c->peer, peer, 16);
    c->bound = 1;
    return 1;
}

void egm__rpc_server_on_peer_close(egm_rpc_server_t *server, egm_rpc_peer_close_t fn, void *arg)
{
    server->on_peer_close = fn;
    server->on_peer_close_arg = arg;
}

egm_rpc_hold_t *egm__rpc_server_hold(void)
{
    rpc_conn_t *c = current_conn;
    if (c == NULL || current_held)
        return NULL;
    egm_rpc_hold_t *h =
        egm__rpc_holdbox_hold(c->server->holds, current_request->type, current_request->request_id);
    if (h == NULL)
        return NULL;
    h->conn = c;
    h->conn_next = c->holds;
    if (c->holds != NULL)
        c->holds->conn_prev = h;
    c->holds = h;
    c->n_holds++;
    current_held = 1;
    return h;
}

static void conn_close(rpc_conn_t *c)
{
    egm_rpc_server_t *s = c->server;

    for (egm_rpc_hold_t *h = c->holds; h != NULL; h = h->conn_next)
        h->conn = NULL; /* their replies are dropped when released */

    if (c->bound && s->on_peer_close != NULL && !s->destroying)
        s->on_peer_close(s->on_peer_close_arg, c->peer);

    egm__reactor_remove(s->reactor, c->fd);
    close(c->fd);
    if (!c->authenticated && egm__auth_required(s->auth_token))
        s->n_unauthenticated--;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    s->nconns--;
    stat_add(&s->stats.connections_open, -1);
    egm__frame_reader_cleanup(&c->in);
    egm_free(c->out);
    egm_free(c);
}

static int conn_set_events(rpc_conn_t *c, uint32_t events)
{
    if (events == c->events)
        return 0;
    if (egm__reactor_modify(c->server->reactor, c->fd, events) != EGM_OK) {
        egm_warn("rpc server: cannot update events of fd %d: %s", c->fd, egm_last_error());
        return -1;
    }
    c->events = events;
    return 0;
}

static int out_reserve(rpc_conn_t *c, size_t more)
{
    size_t need;

    if (c->out_off == c->out_len)
        c->out_off = c->out_len = 0;
    if (c->out_off > 0 && c->out_len + more > c->out_cap) {
        memmove(c->out, c->out + c->out_off, c->out_len - c->out_off);
        c->out_len -= c->out_off;
        c->out_off = 0;
    }
    need = c->out_len + more;
    if (need <= c->out_cap)
        return 0;
    size_t cap = c->out_cap ? c->out_cap : 4096;
    while (cap < need)
        cap *= 2;
    uint8_t *p = egm_realloc(c->out, cap, "rpc_server_out");
    if (p == NULL)
        return -1;
    c->out = p;
    c->out_cap = cap;
    return 0;
}

static int queue_frame(rpc_conn_t *c, uint8_t flags, uint16_t type, uint64_t request_id,
                       const uint8_t *payload, size_t len)
{
    egm_frame_header_t h = {
        .version = EGM_RPC_VERSION,
        .flags = flags,
        .type = type,
        .request_id = request_id,
        .length = (uint32_t)len,
    };

    if (out_reserve(c, EGM_FRAME_HEADER_SIZE + len) != 0) {
        egm_warn("rpc server: out of memory queueing a %zu-byte reply on fd %d", len, c->fd);
        return -1;
    }
    egm__frame_encode_header(&h, c->out + c->out_len);
    if (len)
        memcpy(c->out + c->out_len + EGM_FRAME_HEADER_SIZE, payload, len);
    c->out_len += EGM_FRAME_HEADER_SIZE + len;
    return 0;
}

static int queue_error(rpc_conn_t *c, uint16_t type, uint64_t request_id, egm_status_t status,
                       const char *text)
{
    Egm__ErrorReply er = EGM__ERROR_REPLY__INIT;
    uint8_t small[512];
    uint8_t *buf = small;
    size_t len;
    int rc;

    er.status = status;
    er.error = (char *)(text && *text ? text : egm_status_string(status));
    len = egm__error_reply__get_packed_size(&er);
    if (len > sizeof(small)) {
        buf = egm_malloc(len, "rpc_server_err");
        if (buf == NULL)
            return -1;
    }
    egm__error_reply__pack(&er, buf);
    rc = queue_frame(c, EGM_FRAME_REPLY | EGM_FRAME_ERROR, type, request_id, buf, len);
    if (buf != small)
        egm_free(buf);
    return rc;
}

/* Writes what is queued. Returns 0 while the connection lives, -1 once it is
 * closed (write error, or a closing connection whose peer went away). */
static int conn_flush(rpc_conn_t *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n =
            send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            c->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        egm_debug("rpc server: write to fd %d failed: %s", c->fd, strerror(errno));
        conn_close(c);
        return -1;
    }

    int drained = c->out_off == c->out_len;
    if (drained)
        c->out_off = c->out_len = 0;

    if (c->closing) {
        if (drained && !c->wr_shut) {
            shutdown(c->fd, SHUT_WR);
            c->wr_shut = 1;
        }
        /* keep reading (and discarding) until the peer's EOF */
        if (conn_set_events(c, EGM_EV_READ | (drained ? 0 : EGM_EV_WRITE)) != 0) {
            conn_close(c);
            return -1;
        }
        return 0;
    }

    if (c->peer_done && drained && c->holds == NULL) { /* every held reply went out */
        conn_close(c);
        return -1;
    }
    uint32_t ev = drained ? 0 : EGM_EV_WRITE;
    if (c->out_len - c->out_off < OUT_HIGH_WATER && c->n_holds < HOLDS_HIGH_WATER && !c->peer_done)
        ev |= EGM_EV_READ;
    if (conn_set_events(c, ev) != 0) {
        conn_close(c);
        return -1;
    }
    return 0;
}

static void begin_closing(rpc_conn_t *c)
{
    c->closing = 1;
    c->linger_deadline_ms = egm__now_ms() + LINGER_MS;
    egm__frame_reader_reset(&c->in);
}

static void begin_closing(rpc_conn_t *c);

/* The cluster token gate, and Hello. Returns 1 when the frame was an Auth or
 * Hello frame or was refused (answered here), 0 when it goes on to its
 * handler. */
static int auth_gate(rpc_conn_t *c, const egm_frame_header_t *h, const uint8_t *payload, size_t len)
{
    egm_rpc_server_t *s = c->server;
    uint16_t type = h->type;
    uint64_t id = h->request_id;
    egm_auth_verdict_t verdict;
    char problem[EGM_AUTH_PROBLEM_MAX];

    if (type == EGM_RPC_HELLO) {
        /* who we are, to anyone: the endpoints are what the peer dialled */
        queue_frame(c, EGM_FRAME_REPLY, type, id, (const uint8_t *)s->identity,
                    strlen(s->identity));
        return 1;
    }
    if (type != EGM_RPC_AUTH) {
        if (c->authenticated || (verdict = egm__auth_check_absent(s->auth_token)) == EGM_AUTH_OK)
            return 0;
    } else if ((verdict = egm__auth_check(s->auth_token, payload, len)) == EGM_AUTH_OK) {
        if (!c->authenticated && egm__auth_required(s->auth_token))
            s->n_unauthenticated--;
        c->authenticated = 1;
        queue_frame(c, EGM_FRAME_REPLY, type, id, NULL, 0);
        return 1;
    }
    egm__auth_problem(verdict, "this master", problem, sizeof(problem));
    stat_add(&s->stats.auth_failures, 1);
    egm_log_ratelimited(EGM_LOG_WARN, 1, "rpc server: fd %d: %s request %llu refused: %s", c->fd,
                        egm__rpc_type_name(type), (unsigned long long)id, problem);
    queue_error(c, type, id, EGM_ERR_PERMISSION, problem);
    begin_closing(c);
    return 1;
}

/* A reply over max_frame_size: a server-side limit, not a bad frame (the
 * peer is answered with the error set here, logged, not counted). */
static int reply_too_big(rpc_conn_t *c, uint16_t type, size_t len)
{
    if (len <= c->server->max_frame_size)
        return 0;
    egm__set_error(EGM_ERR_PROTOCOL, "%s reply of %zu bytes exceeds max_frame_size %zu",
                   egm__rpc_type_name(type), len, c->server->max_frame_size);
    egm_log_ratelimited(EGM_LOG_WARN, 5, "rpc server: fd %d: %s", c->fd, egm_last_error());
    return 1;
}

/* egm_rpc_hold_deliver_fn: sends the replies released by other threads. */
static void deliver_held(void *arg, egm_rpc_hold_t *released)
{
    (void)arg;
    while (released != NULL) {
        egm_rpc_hold_t *h = released, *next = h->released_next;
        rpc_conn_t *c = h->conn;
        if (c != NULL) {
            if (h->conn_prev != NULL)
                h->conn_prev->conn_next = h->conn_next;
            else
                c->holds = h->conn_next;
            if (h->conn_next != NULL)
                h->conn_next->conn_prev = h->conn_prev;
            c->n_holds--;
            if (!c->closing) { /* after an error reply, nothing more is sent on it */
                if (h->status == EGM_OK && !reply_too_big(c, h->type, h->len))
                    queue_frame(c, EGM_FRAME_REPLY, h->type, h->request_id, h->reply, h->len);
                else if (h->status == EGM_OK)
                    queue_error(c, h->type, h->request_id, EGM_ERR_PROTOCOL, egm_last_error());
                else
                    queue_error(c, h->type, h->request_id, h->status, h->error);
            }
            conn_flush(c); /* may close it: the holds still on it lose their conn */
        }
        egm__rpc_hold_free(h);
        released = next;
    }
}

static void dispatch(rpc_conn_t *c, const egm_frame_header_t *h, const uint8_t *payload)
{
    egm_rpc_server_t *s = c->server;
    uint16_t type = h->type;
    uint64_t id = h->request_id;
    size_t len = h->length;
    egm_rpc_handler_t fn = type < HANDLER_SLOTS ? s->handlers[type].fn : NULL;
    egm_rpc_reply_t reply = {NULL, 0};
    egm_status_t status;

    stat_add(&s->stats.requests, 1);
    if (auth_gate(c, h, payload, len))
        return;
    if (fn == NULL) {
        stat_add(&s->stats.frames_rejected, 1);
        egm_log_ratelimited(EGM_LOG_WARN, 5, "rpc server: fd %d: unknown request type %u (id %llu)",
                            c->fd, (unsigned)type, (unsigned long long)id);
        char text[64];
        snprintf(text, sizeof(text), "unknown request type %u", (unsigned)type);
        queue_error(c, type, id, EGM_ERR_NOT_SUPPORTED, text);
        return;
    }

    egm__clear_error();
    current_conn = c;
    current_request = h;
    status = fn(s->handlers[type].arg, type, payload, len, &reply);
    current_conn = NULL;
    current_request = NULL;
    if (current_held) { /* answered by egm__rpc_hold_release */
        current_held = 0;
        egm_free(reply.buf);
        return;
    }
    if (status == EGM_OK && reply_too_big(c, type, reply.len)) {
        status = EGM_ERR_PROTOCOL;
    } else if (status == EGM_ERR_PROTOCOL) {
        /* the payload did not decode */
        stat_add(&s->stats.frames_rejected, 1);
        egm_log_ratelimited(EGM_LOG_WARN, 5, "rpc server: fd %d: %s request %llu: %s", c->fd,
                            egm__rpc_type_name(type), (unsigned long long)id, egm_last_error());
    } else if (status > 0) {
        status = egm__set_error(EGM_ERR_INTERNAL, "%s handler returned status %d",
                                egm__rpc_type_name(type), (int)status);
        egm_warn("rpc server: %s", egm_last_error());
    }
    if (status == EGM_OK)
        queue_frame(c, EGM_FRAME_REPLY, type, id, reply.buf, reply.len);
    else
        queue_error(c, type, id, status, egm_last_error());
    egm_free(reply.buf);
}

/* The limit of the next frame's payload: before the cluster token, no frame
 * larger than a token is read, so that a peer without it cannot make the
 * master buffer max_frame_size bytes. */
static int gated(const rpc_conn_t *c)
{
    return egm__auth_required(c->server->auth_token) && !c->authenticated;
}

/* The reader refused a header (status; h holds the fields it could read).
 * Returns 0 to go on (closing), -1 if the connection was closed. */
static int on_bad_header(rpc_conn_t *c, egm_status_t status, const egm_frame_header_t *h)
{
    egm_rpc_server_t *s = c->server;
    egm_frame_header_t whole;

    /* Refused for its length alone: answer as the token gate does. */
    if (gated(c) && egm__frame_decode_header(c->in.hdr_buf, SIZE_MAX, &whole) == EGM_OK) {
        char problem[EGM_AUTH_PROBLEM_MAX];
        stat_add(&s->stats.auth_failures, 1);
        status = egm__set_error(
            EGM_ERR_PERMISSION, "%s before a frame of %u bytes",
            egm__auth_problem(EGM_AUTH_MISSING, "this master", problem, sizeof(problem)),
            (unsigned)whole.length);
    }
    stat_add(&s->stats.frames_rejected, 1);
    egm_log_ratelimited(EGM_LOG_WARN, 5, "rpc server: fd %d: rejected frame: %s", c->fd,
                        egm_last_error());
    if (egm__wire_get_u32(c->in.hdr_buf) != EGM_RPC_MAGIC) {
        /* Nothing in this stream can be trusted, not even the request id: no
         * error reply. Replies to the frames before it, queued in this read,
         * still go out: the connection closes like after an error reply
         * (flush, then wait for the peer's EOF), not with an RST that would
         * drop them. */
        if (c->out_off == c->out_len) {
            conn_close(c);
            return -1;
        }
        begin_closing(c);
        return 0;
    }
    queue_error(c, h->type, h->request_id, status, egm_last_error());
    begin_closing(c);
    return 0;
}

/* Feeds bytes read from the socket through the connection's frame reader,
 * dispatching each frame they complete. Returns 0 to go on, -1 if the
 * connection was closed. */
static int consume(rpc_conn_t *c, const uint8_t *data, size_t n)
{
    while (n > 0 && !c->closing) {
        egm_frame_t frame;
        size_t used = 0;

        c->in.max_payload = gated(c) ? EGM_AUTH_TOKEN_MAX : c->server->max_frame_size;
        egm_status_t status = egm__frame_reader_feed(&c->in, data, n, &used, &frame);
        data += used;
        n -= used;
        if (status == EGM_INPROGRESS)
            break;
        if (status == EGM_OK) {
            current_more_input = n > 0;
            if (current_more_input || c->n_holds > 0)
                c->pipelined_ms = egm__now_ms();
            dispatch(c, &frame.hdr, frame.payload);
            egm_free(frame.buf);
        } else if (status == EGM_ERR_NO_MEMORY) {
            egm_warn("rpc server: fd %d: %s", c->fd, egm_last_error());
            conn_close(c);
            return -1;
        } else if (on_bad_header(c, status, &frame.hdr) != 0) {
            return -1;
        }
    }
    if (c->closing) {
        c->discarded += n;
        if (c->discarded > LINGER_MAX_DISCARD) {
            conn_close(c);
            return -1;
        }
    }
    return 0;
}

static void conn_on_event(egm_reactor_t *reactor, int fd, uint32_t events, void *arg)
{
    rpc_conn_t *c = arg;
    egm_rpc_server_t *s = c->server;
    (void)reactor;
    (void)fd;

    if (events & (EGM_EV_READ | EGM_EV_ERROR)) {
        /* Bounded so that one busy peer cannot starve the others; the
         * reactor reports the fd again while data remains. */
        for (int round = 0; round < 16; round++) {
            if (!(c->events & EGM_EV_READ) && !(events & EGM_EV_ERROR))
                break;
            ssize_t n = recv(c->fd, s->rbuf, READ_CHUNK, MSG_DONTWAIT);
            if (n == 0) {
                /* EOF: a partial frame, a linger that completed, or a peer
                 * that half-closed after its last request */
                if (egm__frame_reader_mid_frame(&c->in))
                    egm_debug("rpc server: fd %d closed mid-frame", c->fd);
                if (c->holds != NULL && !c->closing && !(events & EGM_EV_ERROR)) {
                    c->peer_done = 1; /* its held replies still go out */
                    break;
                }
                if (c->out_off < c->out_len)
                    (void)send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                               MSG_NOSIGNAL | MSG_DONTWAIT);
                conn_close(c);
                return;
            }
            if (n < 0) {
                if (errno == EINTR)
                    continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK)
                    break;
                egm_debug("rpc server: read from fd %d failed: %s", c->fd, strerror(errno));
                conn_close(c);
                return;
            }
            if (consume(c, s->rbuf, (size_t)n) != 0) {
                return;
            }
            /* stop reading while replies pile up unread, or held */
            if (c->out_len - c->out_off >= OUT_HIGH_WATER || c->n_holds >= HOLDS_HIGH_WATER)
                break;
            if ((size_t)n < READ_CHUNK)
                break;
        }
    }
    conn_flush(c);
}

static void on_accept(egm_reactor_t *reactor, int fd, uint32_t events, void *arg);

/* The listeners in (on) or out of (off) this server's reactor. Shared
 * listeners are registered EPOLLEXCLUSIVE, which epoll cannot modify: they
 * are removed and added again. */
static void watch_listeners(egm_rpc_server_t *s, int on)
{
    if (on == s->listening)
        return;
    if (on) {
        if (egm__reactor_add(s->reactor, s->listen_fd, EGM_EV_READ | EGM_EV_EXCLUSIVE, on_accept,
                             s) != EGM_OK ||
            (s->unix_fd >= 0 &&
             egm__reactor_add(s->reactor, s->unix_fd, EGM_EV_READ | EGM_EV_EXCLUSIVE, on_accept,
                              s) != EGM_OK))
            egm_warn("rpc server: cannot watch the listening sockets again: %s", egm_last_error());
    } else {
        egm__reactor_remove(s->reactor, s->listen_fd);
        if (s->unix_fd >= 0)
            egm__reactor_remove(s->reactor, s->unix_fd);
    }
    s->listening = on;
}

static void resume_accepting(egm_reactor_t *reactor, void *arg)
{
    egm_rpc_server_t *s = arg;
    egm__reactor_remove_timer(reactor, s->resume_timer);
    s->resume_timer = 0;
    watch_listeners(s, 1);
}

/* Out of descriptors: the pending connection stays in the backlog and the
 * listening socket stays readable, so stop watching it for a while instead of
 * spinning on accept. */
static void pause_accepting(egm_rpc_server_t *s)
{
    if (s->resume_timer != 0)
        return;
    if (egm__reactor_add_timer(s->reactor, ACCEPT_PAUSE_MS, resume_accepting, s,
                               &s->resume_timer) != EGM_OK) {
        s->resume_timer = 0;
        return;
    }
    watch_listeners(s, 0);
}

static uint64_t open_count(const egm_rpc_server_t *s)
{
    return stat_get(&s->stats.connections_open);
}

/* Before one more connection without the token: closes this server's oldest
 * such connection when they hold their share of max_connections. */
static void make_room_unauthenticated(egm_rpc_server_t *s)
{
    size_t group = s->owner != NULL && s->owner->n_group > 0 ? s->owner->n_group : 1;
    size_t quota = s->max_connections / EGM_AUTH_WAITING_SHARE / group;
    if (s->n_unauthenticated < (quota > 0 ? quota : 1))
        return;
    /* the oldest: the list is newest first; one already refused (lingering
     * so that its refusal is read) before one still waiting */
    rpc_conn_t *oldest = NULL;
    for (rpc_conn_t *c = s->conns; c != NULL; c = c->next)
        if (!c->authenticated && (oldest == NULL || c->closing || !oldest->closing))
            oldest = c;
    if (oldest == NULL)
        return;
    egm_log_ratelimited(EGM_LOG_WARN, 1,
                        "rpc server: fd %d: closed: %zu connections have not presented the cluster "
                        "token, their share of max_connections",
                        oldest->fd, s->n_unauthenticated);
    stat_add(&s->stats.auth_failures, 1);
    conn_close(oldest);
}

/* A connection this server serves from now on; connections_open already
 * counts it. On its reactor's thread. */
static void adopt(egm_rpc_server_t *s, int cfd, int is_unix)
{
    if (!is_unix)
        egm__sock_set_nodelay(cfd);
    rpc_conn_t *c = egm_calloc(1, sizeof(*c), "rpc_server_conn");
    if (c == NULL) {
        egm_log_ratelimited(EGM_LOG_WARN, 1, "rpc server: out of memory accepting");
        goto err_close;
    }
    c->server = s;
    c->fd = cfd;
    c->events = EGM_EV_READ;
    c->opened_ms = egm__now_ms();
    egm__frame_reader_init(&c->in, s->max_frame_size, "rpc_server_payload");
    if (egm__reactor_add(s->reactor, cfd, EGM_EV_READ, conn_on_event, c) != EGM_OK) {
        egm_log_ratelimited(EGM_LOG_WARN, 1, "rpc server: cannot watch a connection: %s",
                            egm_last_error());
        egm_free(c);
        goto err_close;
    }
    if (egm__auth_required(s->auth_token))
        make_room_unauthenticated(s);
    c->next = s->conns;
    if (s->conns)
        s->conns->prev = c;
    s->conns = c;
    s->nconns++;
    if (egm__auth_required(s->auth_token))
        s->n_unauthenticated++;
    stat_add(&s->stats.connections_accepted, 1);
    if (is_unix)
        stat_add(&s->stats.connections_unix, 1);
    return;

err_close:
    close(cfd);
    stat_add(&s->stats.connections_open, -1);
}

/* Takes every connection handed to this server (a task on its reactor). */
static void drain_inbox(void *arg)
{
    egm_rpc_server_t *s = arg;
    pthread_mutex_lock(&s->inbox_lock);
    int *fds = s->inbox;
    size_t n = s->n_inbox;
    s->inbox = NULL;
    s->n_inbox = s->cap_inbox = 0;
    pthread_mutex_unlock(&s->inbox_lock);
    for (size_t i = 0; i < n; i++)
        adopt(s, fds[i] >= 0 ? fds[i] : -1 - fds[i], fds[i] < 0);
    egm_free(fds);
}

/* Closes whatever is in the inbox (it can no longer be taken). */
static void close_inbox(egm_rpc_server_t *s)
{
    pthread_mutex_lock(&s->inbox_lock);
    for (size_t i = 0; i < s->n_inbox; i++) {
        close(s->inbox[i] >= 0 ? s->inbox[i] : -1 - s->inbox[i]);
        stat_add(&s->stats.connections_open, -1);
    }
    egm_free(s->inbox);
    s->inbox = NULL;
    s->n_inbox = s->cap_inbox = 0;
    pthread_mutex_unlock(&s->inbox_lock);
}

/* Passes an accepted connection to server t on another thread. */
static void hand_over(egm_rpc_server_t *t, int cfd, int is_unix)
{
    int post = 0, ok = 1;
    pthread_mutex_lock(&t->inbox_lock);
    if (t->n_inbox == t->cap_inbox) {
        size_t cap = t->cap_inbox ? 2 * t->cap_inbox : 16;
        int *p = egm_realloc(t->inbox, cap * sizeof(*p), "rpc_server_inbox");
        if (p != NULL) {
            t->inbox = p;
            t->cap_inbox = cap;
        } else {
            ok = 0;
        }
    }
    if (ok) {
        post = t->n_inbox == 0; /* else a task is already on its way */
        t->inbox[t->n_inbox++] = is_unix ? -1 - cfd : cfd;
    }
    pthread_mutex_unlock(&t->inbox_lock);
    if (!ok) {
        egm_log_ratelimited(EGM_LOG_WARN, 1, "rpc server: out of memory accepting");
        close(cfd);
        stat_add(&t->stats.connections_open, -1);
    } else if (post && egm__reactor_post(t->reactor, drain_inbox, t) != EGM_OK) {
        egm_log_ratelimited(EGM_LOG_WARN, 1, "rpc server: cannot hand a connection over: %s",
                            egm_last_error());
        close_inbox(t);
    }
}

static void on_accept(egm_reactor_t *reactor, int fd, uint32_t events, void *arg)
{
    egm_rpc_server_t *s = arg;
    const egm_rpc_server_t *owner = s->owner;
    (void)reactor;
    (void)events;

    for (int i = 0; i < 64; i++) {
        int cfd = accept4(fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (cfd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return; /* none left, or another server of the group took it */
            egm_log_ratelimited(EGM_LOG_WARN, 1, "rpc server: accept failed: %s", strerror(errno));
            if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
                pause_accepting(s);
            return;
        }
        /* The least loaded server of the group serves it; this one on a tie. */
        egm_rpc_server_t *target = s;
        uint64_t open = 0, least = open_count(s);
        for (size_t k = 0; k < owner->n_group; k++) {
            uint64_t n = open_count(owner->group[k]);
            open += n;
            if (n < least) {
                least = n;
                target = owner->group[k];
            }
        }
        if (open >= s->max_connections) {
            egm_log_ratelimited(EGM_LOG_WARN, 1,
                                "rpc server: refusing a connection: %llu open (max_connections)",
                                (unsigned long long)open);
            close(cfd);
            continue;
        }
        stat_add(&target->stats.connections_open, 1);
        if (target == s)
            adopt(s, cfd, fd == s->unix_fd);
        else
            hand_over(target, cfd, fd == s->unix_fd);
    }
}

/* Closes connections whose linger ran out, and those that did not present
 * the cluster token in time. */
static void on_sweep(egm_reactor_t *reactor, void *arg)
{
    egm_rpc_server_t *s = arg;
    uint64_t now = egm__now_ms();
    rpc_conn_t *c = s->conns;
    (void)reactor;

    while (c) {
        rpc_conn_t *next = c->next;
        if (c->closing && now >= c->linger_deadline_ms) {
            conn_close(c);
        } else if (!c->closing && !c->authenticated && egm__auth_required(s->auth_token) &&
                   now - c->opened_ms >= EGM_AUTH_DEADLINE_MS) {
            egm_log_ratelimited(EGM_LOG_WARN, 1,
                                "rpc server: fd %d: closed: no cluster token within %d ms", c->fd,
                                EGM_AUTH_DEADLINE_MS);
            stat_add(&s->stats.auth_failures, 1);
            conn_close(c);
        }
        c = next;
    }
}

/* The listener's bound address, and the Hello reply made of it. */
static egm_status_t set_identity(egm_rpc_server_t *s)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);
    char text[EGM_RPC_ENDPOINT_MAX];

    if (getsockname(s->listen_fd, (struct sockaddr *)&ss, &len) != 0)
        return egm__set_error(egm__status_from_errno(errno), "rpc server: getsockname: %s",
                              strerror(errno));
    egm_status_t status = egm__rpc_endpoint_from_sockaddr((struct sockaddr *)&ss, &s->listen_ep);
    if (status != EGM_OK)
        return status;
    egm__rpc_endpoint_format(&s->listen_ep, text, sizeof(text));
    snprintf(s->identity, sizeof(s->identity), "%s", text);
    int v6only = 1;
    socklen_t optlen = sizeof(v6only);
    if (s->listen_ep.family == AF_INET6 && egm__rpc_endpoint_is_wildcard(&s->listen_ep) &&
        getsockopt(s->listen_fd, IPPROTO_IPV6, IPV6_V6ONLY, &v6only, &optlen) == 0 && !v6only) {
        /* "::" also takes IPv4 (net.ipv6.bindv6only = 0) */
        egm_rpc_endpoint_t any4 = {.family = AF_INET, .port = s->listen_ep.port};
        egm__rpc_endpoint_format(&any4, text, sizeof(text));
        size_t n = strlen(s->identity);
        snprintf(s->identity + n, sizeof(s->identity) - n, " %s", text);
    }
    return EGM_OK;
}

egm_status_t egm__rpc_server_create(egm_reactor_t *reactor, const egm_rpc_server_params_t *params,
                                    egm_rpc_server_t **server_p)
{
    egm_rpc_server_t *s;
    egm_status_t status;

    *server_p = NULL;
    if (reactor == NULL || params == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "rpc server: reactor and params are required");
    if (params->max_frame_size == 0 || params->max_frame_size > UINT32_MAX)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "rpc server: max_frame_size %zu out of range 1..%u",
                              params->max_frame_size, UINT32_MAX);

    if (params->auth_token != NULL && strlen(params->auth_token) > EGM_AUTH_TOKEN_MAX)
        return egm__set_error(EGM_ERR_INVALID_ARG, "rpc server: auth token longer than %d bytes",
                              EGM_AUTH_TOKEN_MAX);

    s = egm_calloc(1, sizeof(*s), "rpc_server");
    if (s == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "rpc server: out of memory");
    s->reactor = reactor;
    s->listen_fd = -1;
    s->unix_fd = -1;
    s->max_frame_size = params->max_frame_size;
    s->max_connections = params->max_connections ? params->max_connections : 1024;
    if (params->auth_token != NULL)
        snprintf(s->auth_token, sizeof(s->auth_token), "%s", params->auth_token);
    s->owner = s;
    pthread_mutex_init(&s->inbox_lock, NULL);
    s->rbuf = egm_malloc(READ_CHUNK, "rpc_server_rbuf");
    s->group = egm_malloc(sizeof(*s->group), "rpc_server_group");
    if (s->rbuf == NULL || s->group == NULL) {
        status = egm__set_error(EGM_ERR_NO_MEMORY, "rpc server: out of memory");
        goto err_free;
    }
    status = egm__rpc_holdbox_create(reactor, deliver_held, s, &s->holds);
    if (status != EGM_OK)
        goto err_free;
    s->group[0] = s;
    s->n_group = 1;

    status = egm__sock_tcp_listen(params->host ? params->host : "", params->port, &s->listen_fd,
                                  &s->port);
    if (status != EGM_OK)
        goto err_free;
    status = egm__sock_set_nonblock(s->listen_fd, 1);
    if (status == EGM_OK)
        status = set_identity(s);
    if (status != EGM_OK)
        goto err_close;
    status = egm__reactor_add(reactor, s->listen_fd, EGM_EV_READ | EGM_EV_EXCLUSIVE, on_accept, s);
    if (status != EGM_OK)
        goto err_close;
    s->listening = 1;
    status = egm__reactor_add_timer(reactor, SWEEP_PERIOD_MS, on_sweep, s, &s->sweep_timer);
    if (status != EGM_OK)
        goto err_remove;
    s->has_timer = 1;

    if (egm__log_enabled(EGM_LOG_DEBUG)) {
        char where[300];
        egm_debug("rpc server listening on %s",
                  egm__sock_format_hostport(params->host && *params->host ? params->host : "*",
                                            s->port, where, sizeof(where)));
    }
    *server_p = s;
    return EGM_OK;

err_remove:
    egm__reactor_remove(reactor, s->listen_fd);
err_close:
    close(s->listen_fd);
err_free:
    egm__rpc_holdbox_close(s->holds);
    pthread_mutex_destroy(&s->inbox_lock);
    egm_free(s->group);
    egm_free(s->rbuf);
    egm_free(s);
    return status;
}

egm_status_t egm__rpc_server_create_peer(egm_reactor_t *reactor, egm_rpc_server_t *owner,
                                         egm_rpc_server_t **server_p)
{
    egm_rpc_server_t *s;
    egm_status_t status;

    *server_p = NULL;
    if (reactor == NULL || owner == NULL || owner->owner != owner)
        return egm__set_error(
            EGM_ERR_INVALID_ARG,
            "rpc server: a peer needs a reactor and a server that owns listeners");
    egm_rpc_server_t **group =
        egm_realloc(owner->group, (owner->n_group + 1) * sizeof(*group), "rpc_server_group");
    if (group == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "rpc server: out of memory");
    owner->group = group;
    s = egm_calloc(1, sizeof(*s), "rpc_server");
    if (s == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "rpc server: out of memory");
    s->reactor = reactor;
    s->owner = owner;
    s->listen_fd = owner->listen_fd;
    s->unix_fd = owner->unix_fd;
    s->port = owner->port;
    s->listen_ep = owner->listen_ep;
    memcpy(s->identity, owner->identity, sizeof(s->identity));
    s->max_frame_size = owner->max_frame_size;
    s->max_connections = owner->max_connections;
    memcpy(s->auth_token, owner->auth_token, sizeof(s->auth_token));
    pthread_mutex_init(&s->inbox_lock, NULL);
    s->rbuf = egm_malloc(READ_CHUNK, "rpc_server_rbuf");
    if (s->rbuf == NULL) {
        status = egm__set_error(EGM_ERR_NO_MEMORY, "rpc server: out of memory");
        goto err_free;
    }
    status = egm__rpc_holdbox_create(reactor, deliver_held, s, &s->holds);
    if (status != EGM_OK)
        goto err_free;
    status = egm__reactor_add_timer(reactor, SWEEP_PERIOD_MS, on_sweep, s, &s->sweep_timer);
    if (status != EGM_OK)
        goto err_free;
    s->has_timer = 1;
    watch_listeners(s, 1);
    if (!s->listening) {
        status = egm__set_error(EGM_ERR_IO, "rpc server: a peer cannot watch the listeners");
        goto err_free;
    }
    owner->group[owner->n_group++] = s;
    *server_p = s;
    return EGM_OK;

err_free:
    if (s->has_timer)
        egm__reactor_remove_timer(reactor, s->sweep_timer);
    egm__reactor_remove(reactor, s->listen_fd); /* either may be absent */
    if (s->unix_fd >= 0)
        egm__reactor_remove(reactor, s->unix_fd);
    egm__rpc_holdbox_close(s->holds);
    pthread_mutex_destroy(&s->inbox_lock);
    egm_free(s->rbuf);
    egm_free(s);
    return status;
}

egm_status_t egm__rpc_server_register(egm_rpc_server_t *server, uint16_t type,
                                      egm_rpc_handler_t handler, void *arg)
{
    if (type == 0 || type >= HANDLER_SLOTS)
        return egm__set_error(EGM_ERR_INVALID_ARG, "rpc server: request type %u out of range 1..%u",
                              (unsigned)type, HANDLER_SLOTS - 1);
    server->handlers[type].fn = handler;
    server->handlers[type].arg = arg;
    return EGM_OK;
}

egm_status_t egm__rpc_server_local_name(const egm_rpc_server_t *server, char *buf, size_t len)
{
    char text[EGM_RPC_ENDPOINT_MAX];

    if (!egm__rpc_endpoint_is_loopback(&server->listen_ep) &&
        !egm__rpc_endpoint_is_wildcard(&server->listen_ep)) {
        egm__rpc_endpoint_format(&server->listen_ep, text, sizeof(text));
        return egm__set_error(EGM_ERR_NOT_SUPPORTED,
                              "rpc server on %s: not a loopback or wildcard address", text);
    }
    egm__rpc_local_name(&server->listen_ep, buf, len);
    return EGM_OK;
}

const char *egm__rpc_server_identity(const egm_rpc_server_t *server)
{
    return server->identity;
}

egm_status_t egm__rpc_server_listen_unix(egm_rpc_server_t *server, const char *path)
{
    egm_status_t status;
    int fd = -1;

    if (server == NULL || path == NULL || path[0] == '\0')
        return egm__set_error(EGM_ERR_INVALID_ARG, "rpc server: a Unix socket path is required");
    if (server->unix_fd >= 0)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "rpc server: already listening on a Unix socket");
    if (server->owner != server || server->n_group > 1)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "rpc server: listen on a Unix socket before creating peers");
    status = egm__sock_unix_listen(path, &fd);
    if (status != EGM_OK)
        return status;
    status = egm__sock_set_nonblock(fd, 1);
    if (status != EGM_OK)
        goto err_close;
    if (server->listening) {
        status = egm__reactor_add(server->reactor, fd, EGM_EV_READ | EGM_EV_EXCLUSIVE, on_accept,
                                  server);
        if (status != EGM_OK)
            goto err_close;
    }
    server->unix_fd = fd;
    egm_debug("rpc server listening on unix:%s", path);
    return EGM_OK;

err_close:
    close(fd);
    return status;
}

uint16_t egm__rpc_server_port(const egm_rpc_server_t *server)
{
    return server->port;
}

void egm__rpc_server_stats(const egm_rpc_server_t *server, egm_rpc_server_stats_t *stats_p)
{
    stats_p->connections_accepted = stat_get(&server->stats.connections_accepted);
    stats_p->connections_open = stat_get(&server->stats.connections_open);
    stats_p->requests = stat_get(&server->stats.requests);
    stats_p->frames_rejected = stat_get(&server->stats.frames_rejected);
    stats_p->connections_unix = stat_get(&server->stats.connections_unix);
    stats_p->auth_failures = stat_get(&server->stats.auth_failures);
}

void egm__rpc_server_group_stats(const egm_rpc_server_t *server, egm_rpc_server_stats_t *stats_p)
{
    const egm_rpc_server_t *owner = server->owner;
    memset(stats_p, 0, sizeof(*stats_p));
    for (size_t k = 0; k < owner->n_group; k++) {
        egm_rpc_server_stats_t one;
        egm__rpc_server_stats(owner->group[k], &one);
        stats_p->connections_accepted += one.connections_accepted;
        stats_p->connections_open += one.connections_open;
        stats_p->requests += one.requests;
        stats_p->frames_rejected += one.frames_rejected;
        stats_p->connections_unix += one.connections_unix;
        stats_p->auth_failures += one.auth_failures;
    }
}

void egm__rpc_server_destroy(egm_rpc_server_t *server)
{
    if (server == NULL)
        return;
    server->destroying = 1;
    while (server->conns)
        conn_close(server->conns);
    egm__rpc_holdbox_close(server->holds); /* replies released later are dropped */
    close_inbox(server);
    if (server->has_timer)
        egm__reactor_remove_timer(server->reactor, server->sweep_timer);
    if (server->resume_timer != 0)
        egm__reactor_remove_timer(server->reactor, server->resume_timer);
    watch_listeners(server, 0);
    if (server->owner == server) {
        close(server->listen_fd);
        if (server->unix_fd >= 0)
            close(server->unix_fd);
        egm_free(server->group);
    } else {
        /* Out of its owner's group (every reactor of the group is stopped). */
        egm_rpc_server_t *owner = server->owner;
        for (size_t k = 0; k < owner->n_group; k++)
            if (owner->group[k] == server)
                owner->group[k] = owner->group[--owner->n_group];
    }
    pthread_mutex_destroy(&server->inbox_lock);
    egm__secure_zero(server->auth_token, sizeof(server->auth_token));
    egm_free(server->rbuf);
    egm_free(server);
}
