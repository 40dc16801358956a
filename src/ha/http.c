/* HTTP/1.1 client for etcd's gateway (see http.h). */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>
#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "ha/http.h"

#define HEAD_MAX 16384

void egm__http_conn_init(egm_http_conn_t *c, const char *host, uint16_t port)
{
    snprintf(c->host, sizeof(c->host), "%s", host);
    c->port = port;
    c->fd = -1;
}

void egm__http_conn_cleanup(egm_http_conn_t *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
}

/* The value of header `name` in the head (lines after the status line), or
 * NULL; *len_p its length without surrounding blanks. */
static const char *header(const char *head, size_t head_len, const char *name, size_t *len_p)
{
    size_t nlen = strlen(name);
    const char *p = memchr(head, '\n', head_len), *end = head + head_len;
    while (p != NULL && ++p < end) {
        const char *eol = memchr(p, '\n', (size_t)(end - p));
        if (eol == NULL)
            eol = end;
        if ((size_t)(eol - p) > nlen && p[nlen] == ':' && strncasecmp(p, name, nlen) == 0) {
            const char *v = p + nlen + 1, *ve = eol;
            while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
            while (ve > v && (ve[-1] == '\r' || ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
            *len_p = (size_t)(ve - v);
            return v;
        }
        p = eol;
    }
    return NULL;
}

/* A hex (chunk size) or decimal (Content-Length) number of at most 15 digits. */
static int parse_number(const char *s, size_t len, int base, size_t *value_p)
{
    size_t v = 0;
    if (len == 0 || len > 15)
        return -1;
    for (size_t i = 0; i < len; i++) {
        int d;
        char ch = s[i];
        if (ch >= '0' && ch <= '9')
            d = ch - '0';
        else if (base == 16 && ch >= 'a' && ch <= 'f')
            d = ch - 'a' + 10;
        else if (base == 16 && ch >= 'A' && ch <= 'F')
            d = ch - 'A' + 10;
        else
            return -1;
        v = v * (size_t)base + (size_t)d;
    }
    *value_p = v;
    return 0;
}

static egm_status_t body_copy(const char *src, size_t len, char **body_p)
{
    char *b = egm_malloc(len + 1, "http.body");
    if (b == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "HTTP body of %zu bytes", len);
    if (len > 0)
        memcpy(b, src, len);
    b[len] = '\0';
    *body_p = b;
    return EGM_OK;
}

/* Walks chunked data at buf (len bytes), copying the data into out unless
 * NULL: EGM_INPROGRESS until the last chunk and its trailer are in; on EGM_OK
 * *n_p is the data's length and *pos_p the bytes the encoding took. */
static egm_status_t walk_chunks(const char *buf, size_t len, char *out, size_t *n_p, size_t *pos_p)
{
    size_t pos = 0, n = 0;
    for (;;) {
        const char *eol = memchr(buf + pos, '\n', len - pos);
        if (eol == NULL)
            return len - pos > 64 ? egm__set_error(EGM_ERR_PROTOCOL, "HTTP: chunk line too long")
                                  : EGM_INPROGRESS;
        size_t line = (size_t)(eol - (buf + pos)), digits = 0, size;
        while (digits < line && buf[pos + digits] != ';' && buf[pos + digits] != '\r')
            digits++;
        if (parse_number(buf + pos, digits, 16, &size) != 0)
            return egm__set_error(EGM_ERR_PROTOCOL, "HTTP: bad chunk size");
        pos += line + 1;
        if (size == 0)
            break;
        if (size > EGM_HTTP_BODY_MAX - n)
            return egm__set_error(EGM_ERR_PROTOCOL, "HTTP: body over %u bytes", EGM_HTTP_BODY_MAX);
        if (len - pos < size + 2)
            return EGM_INPROGRESS;
        if (out != NULL)
            memcpy(out + n, buf + pos, size);
        n += size;
        pos += size;
        if (buf[pos] == '\r')
            pos++;
        if (buf[pos] != '\n')
            return egm__set_error(EGM_ERR_PROTOCOL, "HTTP: chunk not followed by CRLF");
        pos++;
    }
    /* Trailer lines up to an empty one. */
    for (;;) {
        const char *t = memchr(buf + pos, '\n', len - pos);
        if (t == NULL)
            return len - pos > HEAD_MAX ? egm__set_error(EGM_ERR_PROTOCOL, "HTTP: trailer too long")
                                        : EGM_INPROGRESS;
        size_t tl = (size_t)(t - (buf + pos));
        pos += tl + 1;
        if (tl == 0 || (tl == 1 && buf[pos - 2] == '\r'))
            break;
    }
    *n_p = n;
    *pos_p = pos;
    return EGM_OK;
}

static egm_status_t dechunk(const char *buf, size_t len, char **body_p, size_t *body_len_p,
                            size_t *consumed_p)
{
    size_t n = 0, pos = 0;
    egm_status_t s = walk_chunks(buf, len, NULL, &n, &pos);
    if (s != EGM_OK)
        return s;
    char *out = egm_malloc(n + 1, "http.body");
    if (out == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "HTTP body of %zu bytes", n);
    walk_chunks(buf, len, out, &n, &pos);
    out[n] = '\0';
    *body_p = out;
    *body_len_p = n;
    *consumed_p = pos;
    return EGM_OK;
}

egm_status_t egm__http_response_parse(const char *buf, size_t len, int *status_p, char **body_p,
                                      size_t *body_len_p, size_t *consumed_p, int *close_p)
{
    const char *end = NULL;
    size_t head_len = 0;
    for (size_t i = 0; i + 1 < len; i++) {
        if (buf[i] == '\n' &&
            (buf[i + 1] == '\n' || (buf[i + 1] == '\r' && i + 2 < len && buf[i + 2] == '\n'))) {
            head_len = i + 1;
            end = buf + i + (buf[i + 1] == '\n' ? 2 : 3);
            break;
        }
    }
    if (end == NULL) {
        if (len > HEAD_MAX)
            return egm__set_error(EGM_ERR_PROTOCOL, "HTTP: response head over %d bytes", HEAD_MAX);
        return EGM_INPROGRESS;
    }
    if (head_len < 12 || memcmp(buf, "HTTP/1.", 7) != 0 || buf[8] != ' ' || buf[9] < '1' ||
        buf[9] > '5' || buf[10] < '0' || buf[10] > '9' || buf[11] < '0' || buf[11] > '9')
        return egm__set_error(EGM_ERR_PROTOCOL, "HTTP: not a status line");
    int status = (buf[9] - '0') * 100 + (buf[10] - '0') * 10 + (buf[11] - '0');
    size_t vlen, body_off = (size_t)(end - buf);
    const char *v = header(buf, head_len, "Connection", &vlen);
    *close_p = v != NULL && vlen == 5 && strncasecmp(v, "close", 5) == 0;
    v = header(buf, head_len, "Transfer-Encoding", &vlen);
    if (v != NULL && vlen == 7 && strncasecmp(v, "chunked", 7) == 0) {
        size_t used = 0;
        egm_status_t s = dechunk(end, len - body_off, body_p, body_len_p, &used);
        if (s != EGM_OK)
            return s;
        *status_p = status;
        *consumed_p = body_off + used;
        return EGM_OK;
    }
    if (v != NULL)
        return egm__set_error(EGM_ERR_PROTOCOL, "HTTP: transfer encoding \"%.*s\"",
                              (int)(vlen > 32 ? 32 : vlen), v);
    size_t clen;
    v = header(buf, head_len, "Content-Length", &vlen);
    if (v == NULL)
        return egm__set_error(EGM_ERR_PROTOCOL, "HTTP: neither Content-Length nor chunked");
    if (parse_number(v, vlen, 10, &clen) != 0 || clen > EGM_HTTP_BODY_MAX)
        return egm__set_error(EGM_ERR_PROTOCOL, "HTTP: bad Content-Length (at most %u)",
                              EGM_HTTP_BODY_MAX);
    if (len - body_off < clen)
        return EGM_INPROGRESS;
    egm_status_t s = body_copy(end, clen, body_p);
    if (s != EGM_OK)
        return s;
    *status_p = status;
    *body_len_p = clen;
    *consumed_p = body_off + clen;
    return EGM_OK;
}

static egm_status_t wait_fd(int fd, short events, uint64_t deadline_ms, const char *what)
{
    for (;;) {
        uint64_t now = egm__now_ms();
        if (now >= deadline_ms)
            return egm__set_error(EGM_ERR_TIMEOUT, "%s: no answer in time", what);
        struct pollfd pfd = {.fd = fd, .events = events};
        int rc = poll(&pfd, 1, (int)(deadline_ms - now));
        if (rc > 0)
            return EGM_OK;
        if (rc < 0 && errno != EINTR)
            return egm__set_error(egm__status_from_errno(errno), "%s: poll: %s", what,
                                  strerror(errno));
    }
}

/* One attempt on the connection as it is; *retry_p set when a kept-alive
 * connection turned out closed before any byte of the answer came. */
static egm_status_t post_once(egm_http_conn_t *c, const char *req, size_t req_len,
                              uint64_t deadline_ms, int *status_p, char **body_p,
                              size_t *body_len_p, int *retry_p)
{
    char where[310] = "etcd ";
    egm__sock_format_hostport(c->host, c->port, where + 5, sizeof(where) - 5);
    int reused = c->fd >= 0;
    *retry_p = 0;
    if (c->fd < 0) {
        uint64_t now = egm__now_ms();
        int left = deadline_ms > now ? (int)(deadline_ms - now) : 1;
        egm_status_t s = egm__sock_tcp_connect(c->host, c->port, left, &c->fd);
        if (s != EGM_OK)
            return s;
    }
    for (size_t off = 0; off < req_len;) {
        ssize_t n = send(c->fd, req + off, req_len - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            egm__http_conn_cleanup(c);
            *retry_p = reused;
            return egm__set_error(EGM_ERR_UNREACHABLE, "%s: send: %s", where, strerror(errno));
        }
        off += (size_t)n;
    }
    size_t cap = 4096, have = 0;
    char *buf = egm_malloc(cap, "http.response");
    if (buf == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "HTTP response buffer");
    egm_status_t s;
    for (;;) {
        if (have == cap) {
            if (cap >= EGM_HTTP_BODY_MAX + HEAD_MAX) {
                s = egm__set_error(EGM_ERR_PROTOCOL, "%s: response too long", where);
                break;
            }
            char *nb = egm_realloc(buf, cap * 2, "http.response");
            if (nb == NULL) {
                s = egm__set_error(EGM_ERR_NO_MEMORY, "HTTP response buffer");
                break;
            }
            buf = nb;
            cap *= 2;
        }
        s = wait_fd(c->fd, POLLIN, deadline_ms, where);
        if (s != EGM_OK)
            break;
        ssize_t n = recv(c->fd, buf + have, cap - have, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            *retry_p = reused && have == 0;
            s = egm__set_error(EGM_ERR_UNREACHABLE, "%s: connection closed%s%s", where,
                               n < 0 ? ": " : "", n < 0 ? strerror(errno) : "");
            break;
        }
        have += (size_t)n;
        size_t used;
        int close_after;
        s = egm__http_response_parse(buf, have, status_p, body_p, body_len_p, &used, &close_after);
        if (s == EGM_INPROGRESS)
            continue;
        if (s == EGM_OK && (close_after || used != have))
            egm__http_conn_cleanup(c);
        break;
    }
    egm_free(buf);
    if (s != EGM_OK)
        egm__http_conn_cleanup(c);
    return s;
}

egm_status_t egm__http_post(egm_http_conn_t *c, const char *path, const char *body, size_t len,
                            int timeout_ms, int *status_p, char **body_p, size_t *body_len_p)
{
    char head[600];
    char where[300];
    egm__sock_format_hostport(c->host, c->port, where, sizeof(where));
    int hl = snprintf(head, sizeof(head),
                      "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Type: application/json\r\n"
                      "Content-Length: %zu\r\n\r\n",
                      path, where, len);
    if (hl < 0 || (size_t)hl >= sizeof(head))
        return egm__set_error(EGM_ERR_INVALID_ARG, "HTTP path too long");
    size_t req_len = (size_t)hl + len;
    char *req = egm_malloc(req_len, "http.request");
    if (req == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "HTTP request of %zu bytes", req_len);
    memcpy(req, head, (size_t)hl);
    memcpy(req + hl, body, len);
    uint64_t deadline = egm__now_ms() + (uint64_t)(timeout_ms > 0 ? timeout_ms : 1);
    int retry;
    egm_status_t s = post_once(c, req, req_len, deadline, status_p, body_p, body_len_p, &retry);
    if (s != EGM_OK && retry)
        s = post_once(c, req, req_len, deadline, status_p, body_p, body_len_p, &retry);
    egm_free(req);
    return s;
}
