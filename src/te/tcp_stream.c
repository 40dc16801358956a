/* tcp transport: a stream of requests on one connection (te_int.h,
 * egm__tcp_stream_run). The data server answers a connection's requests one
 * after another, in order, so the client need not wait for each answer before
 * sending the next request: it sends while it reads. Both directions run on
 * one non-blocking poll loop, so that neither side can block the other (the
 * server writing READ payloads we have not read while we write requests it
 * has not read). */
#include "te/te_int.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"

/* Requests sent and not yet answered, at most: enough to keep the server
 * busy for many round trips, few enough that a refused WRITE (after which
 * the server closes the connection) wastes little. */
#define STREAM_WINDOW 64
/* Buffers one sendmsg gathers (a header and a WRITE's payload each). */
#define STREAM_IOV 64
/* Answers are read into a buffer, many at a time, and the small payloads
 * copied out of it; what is left of a payload this long or longer is read
 * straight into its piece's memory. */
#define STREAM_RBUF (64u << 10)
#define STREAM_DIRECT_MIN (16u << 10)

typedef struct {
    int fd;
    egm_tcp_piece_t *pieces;
    size_t n;
    size_t sent, answered; /* pieces fully sent / answered */
    size_t send_off;       /* bytes of pieces[sent] (header, then WRITE payload) sent */
    size_t recv_off;       /* of the reply header, then of a READ's payload */
    int in_payload;
    uint8_t recv_hdr[EGM_TCP_REPLY_SIZE];
    uint8_t *rbuf; /* STREAM_RBUF bytes: [rpos, rlen) read and not yet taken */
    size_t rpos, rlen;
    egm_status_t send_failed; /* sending stopped: the connection broke */
    int stop_sending;         /* a refused WRITE: the server closes after its answer */
} stream_t;

/* Pieces whose request has gone out, whole or in part (a WRITE may be
 * refused while its payload is still being sent). */
static size_t started(const stream_t *s)
{
    return s->sent + (s->send_off > 0);
}

static size_t piece_wire_len(const egm_tcp_piece_t *p)
{
    return EGM_TCP_REQ_SIZE + (p->req.op == EGM_TCP_OP_WRITE ? (size_t)p->req.length : 0);
}

/* Moves the send position `len` bytes on. */
static void sent_bytes(stream_t *s, size_t len)
{
    while (len > 0) {
        size_t left = piece_wire_len(&s->pieces[s->sent]) - s->send_off;
        if (len < left) {
            s->send_off += len;
            return;
        }
        len -= left;
        s->sent++;
        s->send_off = 0;
    }
}

/* Sends what the socket takes now: the next requests (headers and WRITE
 * payloads) gathered into one sendmsg at a time. */
static void send_some(stream_t *s)
{
    while (!s->stop_sending && s->send_failed == EGM_OK) {
        struct iovec iov[STREAM_IOV];
        int k = 0;
        size_t total = 0, off = s->send_off;
        for (size_t i = s->sent; k < STREAM_IOV - 1 && i < s->n && i - s->answered < STREAM_WINDOW;
             i++, off = 0) {
            egm_tcp_piece_t *p = &s->pieces[i];
            if (off < EGM_TCP_REQ_SIZE) {
                iov[k++] = (struct iovec){p->hdr + off, EGM_TCP_REQ_SIZE - off};
                total += EGM_TCP_REQ_SIZE - off;
                off = EGM_TCP_REQ_SIZE;
            }
            size_t wire = piece_wire_len(p);
            if (off < wire) {
                iov[k++] = (struct iovec){p->local + (off - EGM_TCP_REQ_SIZE), wire - off};
                total += wire - off;
            }
        }
        if (k == 0)
            return;
        struct msghdr msg = {.msg_iov = iov, .msg_iovlen = (size_t)k};
        ssize_t sent = sendmsg(s->fd, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (sent < 0 && errno == EINTR)
            continue;
        if (sent < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        if (sent <= 0) {
            s->send_failed =
                egm__set_error(egm__status_from_errno(sent < 0 ? errno : EPIPE), "sending: %s",
                               sent < 0 ? strerror(errno) : "no progress");
            return;
        }
        sent_bytes(s, (size_t)sent);
        if ((size_t)sent < total)
            return; /* the socket is full */
    }
}

/* The reply header of pieces[answered] is in recv_hdr: checks it. EGM_OK to
 * go on; else the connection cannot be read further (a protocol error). */
static egm_status_t take_header(stream_t *s)
{
    egm_tcp_piece_t *p = &s->pieces[s->answered];
    egm_tcp_reply_t reply;
    egm__tcp_reply_decode(s->recv_hdr, &reply);
    s->recv_off = 0;
    if (reply.magic != EGM_TCP_REPLY_MAGIC || reply.request_id != p->req.request_id)
        return egm__set_error(EGM_ERR_PROTOCOL, "reply with bad magic or request id");
    if (reply.status != EGM_OK) {
        if (reply.status > 0 || reply.status < EGM_STATUS_MIN)
            return egm__set_error(EGM_ERR_PROTOCOL, "reply status %d is no status",
                                  (int)reply.status);
        p->status = (egm_status_t)reply.status;
        p->refused = 1;
        /* A refused WRITE's payload is not read: the server closes. The rest
         * of it, if it was still going out, is not sent. */
        if (p->req.op == EGM_TCP_OP_WRITE) {
            s->stop_sending = 1;
            if (s->answered == s->sent && s->send_off > 0) {
                s->sent++;
                s->send_off = 0;
            }
        }
        s->answered++;
        return EGM_OK;
    }
    if (p->req.op == EGM_TCP_OP_READ) {
        if (reply.length != p->req.length)
            return egm__set_error(EGM_ERR_PROTOCOL, "reply length %" PRIu64 " != %" PRIu64,
                                  reply.length, p->req.length);
        s->in_payload = 1;
        return EGM_OK;
    }
    if (s->answered >= s->sent) /* a WRITE is answered OK only once all of it is read */
        return egm__set_error(EGM_ERR_PROTOCOL, "a WRITE answered before its data was sent");
    p->status = EGM_OK;
    s->answered++;
    return EGM_OK;
}

/* `len` bytes of the answer to pieces[answered] have come (into its header
 * or its payload, by recv_off): moves on. */
static egm_status_t took(stream_t *s, size_t len)
{
    egm_tcp_piece_t *p = &s->pieces[s->answered];
    s->recv_off += len;
    if (s->in_payload && s->recv_off == p->req.length) {
        s->in_payload = 0;
        s->recv_off = 0;
        p->status = EGM_OK;
        s->answered++;
    } else if (!s->in_payload && s->recv_off == EGM_TCP_REPLY_SIZE) {
        return take_header(s);
    }
    return EGM_OK;
}

/* Hands the buffered bytes to the answers they belong to. */
static egm_status_t take_buffered(stream_t *s)
{
    while (s->rpos < s->rlen && s->answered < started(s)) {
        egm_tcp_piece_t *p = &s->pieces[s->answered];
        size_t have = s->rlen - s->rpos, want;
        uint8_t *to;
        if (s->in_payload) {
            to = p->local + s->recv_off;
            want = (size_t)p->req.length - s->recv_off;
        } else {
            to = s->recv_hdr + s->recv_off;
            want = EGM_TCP_REPLY_SIZE - s->recv_off;
        }
        size_t take = have < want ? have : want;
        memcpy(to, s->rbuf + s->rpos, take);
        s->rpos += take;
        egm_status_t st = took(s, take);
        if (st != EGM_OK)
            return st;
    }
    if (s->rpos < s->rlen)
        return egm__set_error(EGM_ERR_PROTOCOL, "bytes after the answer to every request sent");
    s->rpos = s->rlen = 0;
    return EGM_OK;
}

/* Reads what has come. EGM_OK, or why the connection cannot be read further
 * (EGM_ERR_UNREACHABLE at its end). */
static egm_status_t recv_some(stream_t *s)
{
    while (s->answered < started(s)) {
        egm_tcp_piece_t *p = &s->pieces[s->answered];
        size_t left = s->in_payload ? (size_t)p->req.length - s->recv_off : 0;
        int direct = left >= STREAM_DIRECT_MIN;
        ssize_t k = direct ? recv(s->fd, p->local + s->recv_off, left, MSG_DONTWAIT)
                           : recv(s->fd, s->rbuf, STREAM_RBUF, MSG_DONTWAIT);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return EGM_OK;
        if (k < 0)
            return egm__set_error(egm__status_from_errno(errno), "reading: %s", strerror(errno));
        if (k == 0)
            return egm__set_error(EGM_ERR_UNREACHABLE, "the data server closed the connection");
        egm_status_t st;
        if (direct) {
            st = took(s, (size_t)k);
        } else {
            s->rpos = 0;
            s->rlen = (size_t)k;
            st = take_buffered(s);
        }
        if (st != EGM_OK)
            return st;
    }
    return EGM_OK;
}

egm_status_t egm__tcp_stream_run(int fd, egm_tcp_piece_t *pieces, size_t n, int io_timeout_ms,
                                 size_t *answered_p, int *conn_ok_p)
{
    stream_t s = {.fd = fd, .pieces = pieces, .n = n};
    egm_status_t st = EGM_OK;
    uint64_t deadline = egm__now_ms() + (uint64_t)io_timeout_ms;

    *answered_p = 0;
    *conn_ok_p = 0;
    s.rbuf = egm_malloc(STREAM_RBUF, "te.tcp.stream");
    if (s.rbuf == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "tcp: out of memory for a request stream");
    for (size_t i = 0; i < n; i++) {
        pieces[i].status = EGM_INPROGRESS;
        pieces[i].refused = 0;
        egm__tcp_req_encode(&pieces[i].req, pieces[i].hdr);
    }
    while (s.answered < n) {
        size_t before_sent = s.sent, before_answered = s.answered;
        size_t before_send_off = s.send_off, before_recv_off = s.recv_off;
        int before_in_payload = s.in_payload;
        if (s.send_failed == EGM_OK)
            send_some(&s);
        if ((st = recv_some(&s)) != EGM_OK) {
            if (s.stop_sending)
                st = EGM_OK; /* the close that follows a refused WRITE */
            break;
        }
        if (s.answered == n)
            break;
        if (s.stop_sending)
            break; /* a refused WRITE: the server takes nothing after it */
        if (s.send_failed != EGM_OK && s.answered == started(&s)) {
            st = s.send_failed; /* nothing more will be answered */
            break;
        }
        uint64_t now = egm__now_ms();
        if (s.sent != before_sent || s.answered != before_answered ||
            s.send_off != before_send_off || s.recv_off != before_recv_off ||
            s.in_payload != before_in_payload)
            deadline = now + (uint64_t)io_timeout_ms; /* a timeout counts from the last progress */
        if (now >= deadline) {
            st = egm__set_error(EGM_ERR_TIMEOUT, "no progress for %d ms", io_timeout_ms);
            break;
        }
        int want_out = s.send_failed == EGM_OK && !s.stop_sending && s.sent < n &&
                       s.sent - s.answered < STREAM_WINDOW;
        struct pollfd pfd = {.fd = fd, .events = (short)(POLLIN | (want_out ? POLLOUT : 0))};
        int wait_ms = (int)(deadline - now);
        if (poll(&pfd, 1, wait_ms) < 0 && errno != EINTR) {
            st = egm__set_error(egm__status_from_errno(errno), "poll: %s", strerror(errno));
            break;
        }
    }
    egm_free(s.rbuf);
    *answered_p = s.answered;
    /* Reusable only when every request was answered and none was a refused
     * WRITE (the server closes those). */
    *conn_ok_p = st == EGM_OK && s.answered == n && !s.stop_sending;
    if (st == EGM_OK && s.answered < n && !s.stop_sending)
        st = egm__set_error(EGM_ERR_INTERNAL, "stream ended with requests unanswered");
    return st;
}
