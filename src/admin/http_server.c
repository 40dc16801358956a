/* Admin HTTP server on libmicrohttpd: we open the listening socket ourselves so
 * that the address really is the one bound (and errors name it), then hand it
 * to MHD's internal polling thread. A thread of ours closes connections past
 * their head deadline (http_server.h). */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <microhttpd.h>
#include "admin/http_server.h"
#include "common/alloc.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/config_int.h"
#include "common/log.h"
#include "common/sock.h"

/* One connection, as the sweeper sees it (MHD's socket context): since_ms is
 * when it connected or its last answer ended, 0 while a request whose head
 * came whole is being answered. Linked while MHD holds the socket: MHD
 * unlinks it (conn_notify, under conns_lock) before it closes the socket, so
 * the sweeper never shuts down a descriptor that was closed and reused. */
typedef struct http_conn {
    struct http_conn *prev, *next;
    int fd;
    int shut; /* the sweeper shut it down */
    atomic_uint_fast64_t since_ms;
    atomic_int head_started; /* a request line came since the last answer */
} http_conn_t;

struct egm_http_server {
    struct MHD_Daemon *daemon;
    egm_http_handler_fn fn;
    void *arg;
    uint16_t port;
    char auth_token[EGM_AUTH_TOKEN_MAX + 1]; /* "" = every path is open */
    char open_paths[EGM_HTTP_OPEN_PATHS_MAX][EGM_HTTP_OPEN_PATH_LEN];
    size_t n_open_paths;
    atomic_uint_fast64_t auth_failures;
    atomic_uint_fast64_t slow_closed;
    uint64_t head_deadline_ms;
    pthread_mutex_t conns_lock;
    pthread_cond_t sweeper_wake;
    http_conn_t *conns; /* under conns_lock */
    int stopping;       /* under conns_lock */
    int sweeper_running;
    pthread_t sweeper;
};

/* Per request, created when MHD sees the request line: the raw query (MHD
 * hands the handler a decoded path and decoded arguments only). */
enum request_state { REQ_NEW, REQ_ACCEPTED, REQ_DONE };
struct http_request {
    enum request_state state;
    char query[];
};

static const char DEFAULT_CONTENT_TYPE[] = "text/plain; charset=utf-8";

__attribute__((format(printf, 2, 0))) static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char line[256];
    vsnprintf(line, sizeof(line), fmt, ap);
    size_t n = strlen(line);
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
        line[--n] = '\0';
    egm_log_ratelimited(EGM_LOG_WARN, 10, "http: %s", line);
}

static http_conn_t *conn_of(struct MHD_Connection *conn)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci != NULL ? ci->socket_context : NULL;
}

/* A request's head came whole (0: the deadline does not run while it is
 * answered), or its answer ended (now: the next head's deadline runs). */
static void conn_progress(struct MHD_Connection *conn, uint64_t since_ms)
{
    http_conn_t *hc = conn_of(conn);
    if (hc != NULL)
        atomic_store_explicit(&hc->since_ms, since_ms, memory_order_relaxed);
}

static void *request_begin(void *cls, const char *uri, struct MHD_Connection *conn)
{
    (void)cls;
    http_conn_t *hc = conn_of(conn);
    if (hc != NULL)
        atomic_store_explicit(&hc->head_started, 1, memory_order_relaxed);
    const char *q = uri != NULL ? strchr(uri, '?') : NULL;
    q = q != NULL ? q + 1 : "";
    size_t qlen = strlen(q);
    struct http_request *req = egm_malloc(sizeof(*req) + qlen + 1, "http_request");
    if (req == NULL)
        return NULL;
    req->state = REQ_NEW;
    memcpy(req->query, q, qlen + 1);
    return req;
}

static void request_done(void *cls, struct MHD_Connection *conn, void **req_p,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)toe;
    http_conn_t *hc = conn_of(conn);
    if (hc != NULL)
        atomic_store_explicit(&hc->head_started, 0, memory_order_relaxed);
    conn_progress(conn, egm__now_ms());
    egm_free(*req_p);
    *req_p = NULL;
}

/* MHD_NotifyConnectionCallback: links a new connection for the sweeper,
 * unlinks one about to be closed. A connection that cannot be linked (no
 * memory, no descriptor) has the idle timeout only. */
static void conn_notify(void *cls, struct MHD_Connection *conn, void **socket_context,
                        enum MHD_ConnectionNotificationCode code)
{
    egm_http_server_t *srv = cls;
    http_conn_t *hc = *socket_context;
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci == NULL || (hc = egm_calloc(1, sizeof(*hc), "http_conn")) == NULL)
            return;
        hc->fd = ci->connect_fd;
        atomic_init(&hc->since_ms, egm__now_ms());
        pthread_mutex_lock(&srv->conns_lock);
        hc->next = srv->conns;
        if (srv->conns != NULL)
            srv->conns->prev = hc;
        srv->conns = hc;
        pthread_mutex_unlock(&srv->conns_lock);
        *socket_context = hc;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && hc != NULL) {
        pthread_mutex_lock(&srv->conns_lock);
        if (hc->prev != NULL)
            hc->prev->next = hc->next;
        else
            srv->conns = hc->next;
        if (hc->next != NULL)
            hc->next->prev = hc->prev;
        pthread_mutex_unlock(&srv->conns_lock);
        egm_free(hc);
        *socket_context = NULL;
    }
}

/* Shuts down (both ways) every connection past its head deadline: MHD's
 * thread then reads the end and closes it. Every quarter deadline, at most
 * every second. Counted (and said) are those closed mid-head, after their
 * request line: an idle kept-alive one closes as the idle timeout would. */
static void *sweep_main(void *arg)
{
    egm_http_server_t *srv = arg;
    uint64_t period_ms = srv->head_deadline_ms / 4;
    if (period_ms > 1000)
        period_ms = 1000;
    if (period_ms == 0)
        period_ms = 1;
    pthread_mutex_lock(&srv->conns_lock);
    while (!srv->stopping) {
        struct timespec ts;
        egm__deadline_in(&ts, period_ms);
        pthread_cond_timedwait(&srv->sweeper_wake, &srv->conns_lock, &ts);
        uint64_t now = egm__now_ms();
        unsigned closed = 0;
        for (http_conn_t *hc = srv->conns; hc != NULL && !srv->stopping; hc = hc->next) {
            uint64_t since = atomic_load_explicit(&hc->since_ms, memory_order_relaxed);
            if (hc->shut || since == 0 || now < since + srv->head_deadline_ms)
                continue;
            shutdown(hc->fd, SHUT_RDWR);
            hc->shut = 1;
            closed += (unsigned)atomic_load_explicit(&hc->head_started, memory_order_relaxed);
        }
        if (closed > 0) {
            atomic_fetch_add_explicit(&srv->slow_closed, closed, memory_order_relaxed);
            pthread_mutex_unlock(&srv->conns_lock); /* MHD's callbacks need it */
            egm_log_ratelimited(EGM_LOG_WARN, 10,
                                "http: closed %u connection(s) whose request head did not come "
                                "whole within %llu ms",
                                closed, (unsigned long long)srv->head_deadline_ms);
            pthread_mutex_lock(&srv->conns_lock);
        }
    }
    pthread_mutex_unlock(&srv->conns_lock);
    return NULL;
}

/* Queues a short plain-text answer that also closes the connection: used for
 * requests we refuse, whose unread body must not be parsed as a next request. */
static enum MHD_Result refuse(struct MHD_Connection *conn, unsigned status, const char *text)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
    if (r == NULL)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, DEFAULT_CONTENT_TYPE);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static int has_body(struct MHD_Connection *conn)
{
    const char *cl =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl != NULL && strspn(cl, "0") != strlen(cl))
        return 1;
    return MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_TRANSFER_ENCODING) !=
           NULL;
}

/* What a request's Authorization header is worth, as common/auth judges a
 * token: OK, MISSING (no header) or MISMATCH (another token, or another
 * scheme). */
static egm_auth_verdict_t check_bearer(const egm_http_server_t *srv, struct MHD_Connection *conn)
{
    const char *value =
        MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (value == NULL)
        return egm__auth_check_absent(srv->auth_token);
    if (strncasecmp(value, "Bearer", 6) != 0 || (value[6] != ' ' && value[6] != '\t'))
        return EGM_AUTH_MISMATCH; /* another scheme (Basic ...) is not the token */
    const char *token = value + 6;
    while (*token == ' ' || *token == '\t')
        token++;
    size_t len = strlen(token);
    while (len > 0 && (token[len - 1] == ' ' || token[len - 1] == '\t'))
        len--;
    return egm__auth_check(srv->auth_token, token, len);
}

static int path_is_open(const egm_http_server_t *srv, const char *path)
{
    for (size_t i = 0; i < srv->n_open_paths; i++)
        if (strcmp(srv->open_paths[i], path) == 0)
            return 1;
    return 0;
}

/* 401 with the Bearer challenge (RFC 6750) and a JSON error; the connection
 * stays open (the request was read whole). Never names the token. */
static enum MHD_Result unauthorized(egm_http_server_t *srv, struct MHD_Connection *conn,
                                    const char *method, const char *path,
                                    egm_auth_verdict_t verdict)
{
    static const char missing[] =
        "{\"error\":\"authorization required: this server requires the cluster token "
        "(auth_token)\",\"accepted\":\"Authorization: Bearer <auth_token>\"}\n";
    static const char wrong[] =
        "{\"error\":\"authorization refused: the bearer token is not this server's "
        "auth_token\",\"accepted\":\"Authorization: Bearer <auth_token>\"}\n";
    const char *text = verdict == EGM_AUTH_MISSING ? missing : wrong;

    atomic_fetch_add_explicit(&srv->auth_failures, 1, memory_order_relaxed);
    egm_log_ratelimited(EGM_LOG_WARN, 1, "http: %s %.100s refused: %s", method, path,
                        verdict == EGM_AUTH_MISSING ? "no Authorization: Bearer token"
                                                    : "wrong bearer token");
    struct MHD_Response *r =
        MHD_create_response_from_buffer(strlen(text), (void *)text, MHD_RESPMEM_PERSISTENT);
    if (r == NULL)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE,
                            verdict == EGM_AUTH_MISSING
                                ? "Bearer realm=\"egmstore\""
                                : "Bearer realm=\"egmstore\", error=\"invalid_token\"");
    enum MHD_Result ret = MHD_queue_response(conn, MHD_HTTP_UNAUTHORIZED, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result answer(void *cls, struct MHD_Connection *conn, const char *url,
                              const char *method, const char *version, const char *upload_data,
                              size_t *upload_data_size, void **req_p)
{
    (void)version;
    (void)upload_data;
    egm_http_server_t *srv = cls;
    struct http_request *req = *req_p;

    if (req == NULL)
        return refuse(conn, MHD_HTTP_SERVICE_UNAVAILABLE, "out of memory\n");
    if (req->state == REQ_NEW) {
        /* Headers only: refuse now, before any body is read; answer an
         * accepted request on the next call, once the request is complete,
         * which lets MHD keep the connection alive. */
        req->state = REQ_DONE;
        conn_progress(conn, 0);
        if (strcmp(method, MHD_HTTP_METHOD_GET) != 0 && strcmp(method, MHD_HTTP_METHOD_HEAD) != 0)
            return refuse(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "only GET and HEAD are allowed\n");
        if (has_body(conn))
            return refuse(conn, MHD_HTTP_CONTENT_TOO_LARGE, "request bodies are not accepted\n");
        req->state = REQ_ACCEPTED;
        return MHD_YES;
    }
    if (req->state != REQ_ACCEPTED || *upload_data_size != 0) {
        *upload_data_size = 0; /* body of a refused request arriving anyway: drop it */
        return MHD_YES;
    }
    req->state = REQ_DONE;

    egm_http_response_t resp = {.status = MHD_HTTP_NOT_FOUND};
    const char *path = url != NULL && url[0] != '\0' ? url : "/";
    if (srv->auth_token[0] != '\0' && !path_is_open(srv, path)) {
        egm_auth_verdict_t verdict = check_bearer(srv, conn);
        if (verdict != EGM_AUTH_OK)
            return unauthorized(srv, conn, method, path, verdict);
    }
    srv->fn(srv->arg, path, req->query, &resp);
    if (resp.body == NULL)
        resp.len = 0;
    if (resp.status < 100 || resp.status > 599) {
        egm_log_ratelimited(EGM_LOG_ERROR, 1, "http: handler for %s answered status %d", path,
                            resp.status);
        egm_free(resp.body);
        return refuse(conn, MHD_HTTP_INTERNAL_SERVER_ERROR, "internal error\n");
    }

    struct MHD_Response *r;
    if (resp.body != NULL)
        r = MHD_create_response_from_buffer_with_free_callback(resp.len, resp.body, egm_free);
    else
        r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (r == NULL) {
        egm_free(resp.body);
        return MHD_NO;
    }
    const char *ctype = resp.content_type != NULL ? resp.content_type : DEFAULT_CONTENT_TYPE;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, ctype);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-store");
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)resp.status, r);
    MHD_destroy_response(r);
    egm_trace("http: %s %s -> %d (%zu bytes)", method, path, resp.status, resp.len);
    return ret;
}

/* Non-blocking listening socket bound to exactly host:port (IPv6 "::" also
 * takes IPv4). */
static egm_status_t listen_on(const char *host, uint16_t port, int *fd_p, uint16_t *port_p)
{
    struct addrinfo hints, *ai;
    char service[8], where[300];
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    snprintf(service, sizeof(service), "%u", (unsigned)port);
    egm__sock_format_hostport(host, port, where, sizeof(where));
    int rc = getaddrinfo(host, service, &hints, &ai);
    if (rc != 0)
        return egm__set_error(EGM_ERR_CONFIG, "http address \"%s\": %s", host,
                              rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));

    egm_status_t status;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        int err = errno;
        status = egm__set_error(egm__status_from_errno(err), "http listen %s: socket: %s", where,
                                strerror(err));
        goto err_free;
    }
    int one = 1, zero = 0;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ai->ai_family == AF_INET6)
        setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(fd, 128) != 0) {
        int err = errno;
        status = egm__set_error(err == ENOMEM ? EGM_ERR_NO_MEMORY : EGM_ERR_CONFIG,
                                "http_port: cannot listen on %s: %s", where, strerror(err));
        goto err_close;
    }
    struct sockaddr_storage ss;
    socklen_t sslen = sizeof(ss);
    if (getsockname(fd, (struct sockaddr *)&ss, &sslen) != 0) {
        int err = errno;
        status = egm__set_error(egm__status_from_errno(err), "http listen %s: getsockname: %s",
                                where, strerror(err));
        goto err_close;
    }
    *port_p = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                       : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    freeaddrinfo(ai);
    *fd_p = fd;
    return EGM_OK;
err_close:
    close(fd);
err_free:
    freeaddrinfo(ai);
    return status;
}

static unsigned daemon_flags(void)
{
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ERROR_LOG | MHD_USE_ITC;
    if (MHD_is_feature_supported(MHD_FEATURE_EPOLL) == MHD_YES)
        flags |= MHD_USE_EPOLL;
    else if (MHD_is_feature_supported(MHD_FEATURE_POLL) == MHD_YES)
        flags |= MHD_USE_POLL;
    return flags;
}

egm_status_t egm__http_start(const egm_http_params_t *params, egm_http_server_t **srv_p)
{
    if (params == NULL || params->fn == NULL || srv_p == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "http start: handler and srv_p are required");
    *srv_p = NULL;
    const char *address = params->address;
    uint16_t port = params->port;
    const char *host = address != NULL && address[0] != '\0' ? address : "0.0.0.0";
    const char *token = params->auth_token != NULL ? params->auth_token : "";
    egm_status_t status;
    if (strlen(token) > EGM_AUTH_TOKEN_MAX)
        return egm__set_error(EGM_ERR_INVALID_ARG, "http server: auth token longer than %d bytes",
                              EGM_AUTH_TOKEN_MAX);
    egm_http_server_t *srv = egm_calloc(1, sizeof(*srv), "http_server");
    if (srv == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "http server: out of memory");
    srv->fn = params->fn;
    srv->arg = params->arg;
    srv->head_deadline_ms =
        params->head_deadline_ms != 0 ? params->head_deadline_ms : EGM_HTTP_HEAD_DEADLINE_S * 1000u;
    pthread_mutex_init(&srv->conns_lock, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&srv->sweeper_wake, &ca);
    pthread_condattr_destroy(&ca);
    snprintf(srv->auth_token, sizeof(srv->auth_token), "%s", token);
    for (const char *const *p = params->open_paths; p != NULL && *p != NULL; p++) {
        if (srv->n_open_paths == EGM_HTTP_OPEN_PATHS_MAX || strlen(*p) >= EGM_HTTP_OPEN_PATH_LEN) {
            status = egm__set_error(EGM_ERR_INVALID_ARG,
                                    "http server: at most %d open paths of < %d bytes",
                                    EGM_HTTP_OPEN_PATHS_MAX, EGM_HTTP_OPEN_PATH_LEN);
            goto err_free;
        }
        snprintf(srv->open_paths[srv->n_open_paths++], EGM_HTTP_OPEN_PATH_LEN, "%s", *p);
    }

    int fd = -1;
    status = listen_on(host, port, &fd, &srv->port);
    if (status != EGM_OK)
        goto err_free;
    /* Whether MHD closes a listening socket it was given when it fails to start
     * differs between versions: remember which socket it is to close it once. */
    struct stat st;
    if (fstat(fd, &st) != 0)
        memset(&st, 0, sizeof(st));

    /* Before the thread starts (its creation orders the store before the
     * handler's reads): a handler may read the server through *srv_p. */
    *srv_p = srv;
    srv->daemon =
        MHD_start_daemon(daemon_flags(), 0, NULL, NULL, answer, srv, MHD_OPTION_EXTERNAL_LOGGER,
                         mhd_log, srv, MHD_OPTION_LISTEN_SOCKET, fd, MHD_OPTION_CONNECTION_LIMIT,
                         (unsigned)EGM_HTTP_MAX_CONNECTIONS, MHD_OPTION_CONNECTION_TIMEOUT,
                         (unsigned)EGM_HTTP_IDLE_TIMEOUT_S, MHD_OPTION_URI_LOG_CALLBACK,
                         request_begin, srv, MHD_OPTION_NOTIFY_COMPLETED, request_done, srv,
                         MHD_OPTION_NOTIFY_CONNECTION, conn_notify, srv, MHD_OPTION_END);
    if (srv->daemon == NULL) {
        struct stat now;
        if (fstat(fd, &now) == 0 && now.st_dev == st.st_dev && now.st_ino == st.st_ino)
            close(fd);
        status =
            egm__set_error(EGM_ERR_IO, "http server on %s port %u: libmicrohttpd did not start",
                           host, (unsigned)srv->port);
        egm_error("%s", egm_last_error());
        *srv_p = NULL;
        goto err_free;
    }
    int rc = pthread_create(&srv->sweeper, NULL, sweep_main, srv);
    if (rc != 0) {
        status = egm__set_error(egm__status_from_errno(rc), "http server: sweeper thread: %s",
                                strerror(rc));
        srv->sweeper_running = 0;
        egm__http_stop(srv); /* the handler's thread first: it may read *srv_p */
        *srv_p = NULL;
        return status;
    }
    srv->sweeper_running = 1;
    char where[300];
    egm__sock_format_hostport(host, srv->port, where, sizeof(where));
    egm_info("admin http listening on %s", where);
    return EGM_OK;
err_free:
    egm__secure_zero(srv->auth_token, sizeof(srv->auth_token));
    pthread_cond_destroy(&srv->sweeper_wake);
    pthread_mutex_destroy(&srv->conns_lock);
    egm_free(srv);
    return status;
}

uint64_t egm__http_auth_failures(const egm_http_server_t *srv)
{
    return srv != NULL ? atomic_load_explicit((atomic_uint_fast64_t *)&srv->auth_failures,
                                              memory_order_relaxed)
                       : 0;
}

uint64_t egm__http_slow_closed(const egm_http_server_t *srv)
{
    return srv != NULL ? atomic_load_explicit((atomic_uint_fast64_t *)&srv->slow_closed,
                                              memory_order_relaxed)
                       : 0;
}

uint16_t egm__http_port(const egm_http_server_t *srv)
{
    return srv != NULL ? srv->port : 0;
}

void egm__http_stop(egm_http_server_t *srv)
{
    if (srv == NULL)
        return;
    if (srv->sweeper_running) {
        pthread_mutex_lock(&srv->conns_lock);
        srv->stopping = 1;
        pthread_cond_signal(&srv->sweeper_wake);
        pthread_mutex_unlock(&srv->conns_lock);
        pthread_join(srv->sweeper, NULL);
    }
    /* Quiesce first so the listening socket is handed back and closed here, by
     * its owner, whatever MHD's version does with sockets it was given. */
    MHD_socket fd = MHD_quiesce_daemon(srv->daemon);
    MHD_stop_daemon(srv->daemon);
    if (fd != MHD_INVALID_SOCKET)
        close(fd);
    egm__secure_zero(srv->auth_token, sizeof(srv->auth_token));
    pthread_cond_destroy(&srv->sweeper_wake);
    pthread_mutex_destroy(&srv->conns_lock);
    egm_free(srv);
}

egm_textbuf_t egm__http_body_begin(const egm_http_response_t *resp)
{
    egm_textbuf_t t = egm__textbuf_growing("http_body");
    t.buf = resp->body;
    t.len = resp->cap;
    t.need = resp->len;
    return t;
}

egm_status_t egm__http_body_end(egm_http_response_t *resp, const egm_textbuf_t *t)
{
    resp->body = t->buf;
    resp->cap = t->len;
    resp->len = t->need < t->len ? t->need : t->len > 0 ? t->len - 1 : 0;
    if (t->status != EGM_OK)
        return egm__set_error(t->status, "http body: out of memory (%zu bytes)", t->need);
    return EGM_OK;
}

egm_status_t egm__http_printf(egm_http_response_t *resp, const char *fmt, ...)
{
    egm_textbuf_t t = egm__http_body_begin(resp);
    va_list ap;
    va_start(ap, fmt);
    egm__textbuf_vprintf(&t, fmt, ap);
    va_end(ap);
    return egm__http_body_end(resp, &t);
}
