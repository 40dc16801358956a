/* fd broker: hands a segment's descriptor to a consumer on this host over an
 * abstract Unix socket, after checking that the peer runs as our user (or
 * root). One request per connection. Host segments give their memfd (shm
 * transport); posix_fd VMM segments give a descriptor exported from their CUDA
 * allocation for this request only (nvlink transport). The consumer side,
 * egm__fd_broker_fetch, is here too. */
#include "te/te_int.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/auth.h"
#include "common/clock.h"
#include "common/config_int.h"
#include "common/log.h"
#include "common/sock.h"
#include "cuda/driver.h"

/* A peer that connects but does not send its request cannot hold the broker. */
#define BROKER_IO_TIMEOUT_MS 2000

struct egm_fd_broker {
    egm_exposed_table_t *table;
    egm_te_counters_t *counters;
    const egm_cuda_api_t *api; /* NULL: no VMM descriptors served */
    const egm_te_auth_t *auth; /* token and allowed gid (the te's) */
    char name[EGM_SHM_SOCKET_MAX];
    int listen_fd;
    int stop_fd; /* eventfd: wakes the thread to stop */
    pthread_t thread;
};

/* A refusal the peer can read: a reply with `status` and no descriptor. */
static void refuse(int fd, egm_status_t status)
{
    uint8_t reply[EGM_BROKER_REPLY_SIZE] = {0};
    egm__wire_put_u32(reply, EGM_BROKER_REPLY_MAGIC);
    egm__wire_put_u32(reply + 4, (uint32_t)status);
    struct timeval tv = {.tv_sec = BROKER_IO_TIMEOUT_MS / 1000, .tv_usec = 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    (void)egm__sock_write_full(fd, reply, sizeof(reply));
    /* Take what the peer sent until its EOF (bounded) before closing: closing
     * with unread input would reset the peer's socket and could lose the
     * answer before it is read. */
    shutdown(fd, SHUT_WR);
    char sink[512];
    uint64_t deadline = egm__now_ms() + BROKER_IO_TIMEOUT_MS;
    for (size_t taken = 0; taken < 64 * 1024;) {
        uint64_t now = egm__now_ms();
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (now >= deadline || poll(&pfd, 1, (int)(deadline - now)) <= 0)
            break;
        ssize_t n = recv(fd, sink, sizeof(sink), MSG_DONTWAIT);
        if (n <= 0 && !(n < 0 && errno == EINTR))
            break;
        if (n > 0)
            taken += (size_t)n;
    }
}

/* Same uid as ours, root, or the primary gid fd_allowed_gid names. */
static egm_status_t peer_allowed(egm_fd_broker_t *broker, int fd, pid_t *pid_p)
{
    uid_t uid = (uid_t)-1;
    gid_t gid = (gid_t)-1;
    egm_status_t st = egm__sock_peer_cred(fd, pid_p, &uid, &gid);
    if (st != EGM_OK)
        return st;
    if (uid == geteuid() || uid == 0)
        return EGM_OK;
    if (broker->auth != NULL && broker->auth->fd_allowed_gid >= 0 &&
        (int64_t)gid == broker->auth->fd_allowed_gid)
        return EGM_OK;
    return egm__set_error(EGM_ERR_PERMISSION,
                          "fd broker: peer pid %d runs as uid %u gid %u: neither our uid (%u), "
                          "root, nor fd_allowed_gid",
                          (int)*pid_p, (unsigned)uid, (unsigned)gid, (unsigned)geteuid());
}

/* Reads the request, after the cluster token when one comes first or is
 * required. 0 = req filled; -1 = answered or gone (close). */
static int read_request(egm_fd_broker_t *broker, int fd, pid_t pid,
                        uint8_t req[EGM_BROKER_REQ_SIZE])
{
    const char *token = broker->auth != NULL ? broker->auth->token : NULL;
    egm_auth_verdict_t verdict;
    char problem[EGM_AUTH_PROBLEM_MAX];

    if (egm__sock_read_full_timeout(fd, req, 8, BROKER_IO_TIMEOUT_MS) != EGM_OK)
        return -1;
    if (egm__wire_get_u32(req) == EGM_BROKER_AUTH_MAGIC) {
        uint32_t len = egm__wire_get_u32(req + 4);
        if (egm__auth_recv_check(fd, token, len, BROKER_IO_TIMEOUT_MS, &verdict) != EGM_OK)
            return -1;
        if (verdict == EGM_AUTH_OK &&
            egm__sock_read_full_timeout(fd, req, 8, BROKER_IO_TIMEOUT_MS) != EGM_OK)
            return -1;
    } else {
        verdict = egm__auth_check_absent(token);
    }
    if (verdict != EGM_AUTH_OK) {
        atomic_fetch_add_explicit(&broker->counters->auth_failures, 1, memory_order_relaxed);
        egm_log_ratelimited(EGM_LOG_WARN, 1, "fd broker: pid %d refused: %s", (int)pid,
                            egm__auth_problem(verdict, "this provider", problem, sizeof(problem)));
        refuse(fd, EGM_ERR_PERMISSION);
        return -1;
    }
    if (egm__sock_read_full_timeout(fd, req + 8, EGM_BROKER_REQ_SIZE - 8, BROKER_IO_TIMEOUT_MS) !=
        EGM_OK)
        return -1;
    return 0;
}

static void serve_one(egm_fd_broker_t *broker, int fd)
{
    pid_t pid = 0;
    uint8_t req[EGM_BROKER_REQ_SIZE];
    uint8_t reply[EGM_BROKER_REPLY_SIZE];

    egm_status_t trust = peer_allowed(broker, fd, &pid);
    if (trust != EGM_OK) {
        if (trust == EGM_ERR_PERMISSION) {
            atomic_fetch_add_explicit(&broker->counters->shm_peers_refused, 1,
                                      memory_order_relaxed);
            refuse(fd, EGM_ERR_PERMISSION);
        }
        egm_log_ratelimited(EGM_LOG_WARN, 1, "%s: refused", egm_last_error());
        return;
    }
    if (read_request(broker, fd, pid, req) != 0)
        return;
    if (egm__wire_get_u32(req) != EGM_BROKER_MAGIC ||
        egm__wire_get_u16(req + 4) != EGM_BROKER_VERSION) {
        egm_log_ratelimited(EGM_LOG_WARN, 1, "fd broker: malformed request from pid %d", (int)pid);
        return;
    }
    egm_handle_kind_t want = (egm_handle_kind_t)egm__wire_get_u16(req + 6);
    egm_id_t id = egm__wire_get_id(req + 8);

    /* A send timeout: a peer that does not read cannot stall the broker. */
    struct timeval tv = {.tv_sec = BROKER_IO_TIMEOUT_MS / 1000, .tv_usec = 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));

    egm__wire_put_u32(reply, EGM_BROKER_REPLY_MAGIC);
    egm__wire_put_u64(reply + 8, 0);
    egm_exposed_t *seg = egm__exposed_get(broker->table, id);
    int send_fd = -1, exported = 0;
    egm_status_t st = EGM_ERR_SEGMENT_NOT_FOUND;
    char text[EGM_ID_STRLEN];
    egm__id_format(id, text);
    if (seg == NULL) {
        egm_debug("fd broker: pid %d asked for segment %s: not exposed", (int)pid, text);
    } else if (want == EGM_HANDLE_NONE || want == EGM_HANDLE_MEMFD) {
        if (seg->memfd >= 0) {
            send_fd = seg->memfd;
            st = EGM_OK;
        } else {
            egm_debug("fd broker: pid %d asked for segment %s: no memfd", (int)pid, text);
        }
    } else if (want == EGM_HANDLE_POSIX_FD) {
        if (seg->kind != EGM_HANDLE_POSIX_FD || broker->api == NULL) {
            egm_debug("fd broker: pid %d asked for segment %s: not a posix_fd VMM segment",
                      (int)pid, text);
        } else {
            /* Exported per request: the descriptor leaves with the reply and
             * our copy is closed below, so nothing accumulates here. */
            int vmm_fd = -1;
            egm_cu_result_t rc = broker->api->cuMemExportToShareableHandle(
                &vmm_fd, seg->handle, EGM_CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
            if (rc == EGM_CU_SUCCESS && vmm_fd >= 0) {
                send_fd = vmm_fd;
                exported = 1;
                st = EGM_OK;
            } else {
                st = egm__cuda_check(rc != EGM_CU_SUCCESS ? rc : EGM_CU_ERROR_UNKNOWN,
                                     "cuMemExportToShareableHandle");
                egm_log_ratelimited(EGM_LOG_WARN, 1, "fd broker: segment %s: %s", text,
                                    egm_last_error());
            }
        }
    } else {
        egm_log_ratelimited(EGM_LOG_WARN, 1, "fd broker: pid %d asked for handle kind %u", (int)pid,
                            (unsigned)want);
        st = EGM_ERR_INVALID_ARG;
    }
    if (st != EGM_OK) {
        egm__wire_put_u32(reply + 4, (uint32_t)st);
        if (seg != NULL)
            egm__exposed_put(broker->table, seg);
        (void)egm__sock_write_full(fd, reply, sizeof(reply));
        return;
    }
    egm__wire_put_u32(reply + 4, (uint32_t)EGM_OK);
    egm__wire_put_u64(reply + 8, seg->size);
    /* Counted before the send so that the count is exact once the peer has
     * the descriptor; taken back if the send fails. */
    atomic_uint_fast64_t *sent =
        exported ? &broker->counters->vmm_fds_sent : &broker->counters->shm_fds_sent;
    atomic_fetch_add_explicit(sent, 1, memory_order_relaxed);
    if (egm__sock_send_fd(fd, send_fd, reply, sizeof(reply)) != EGM_OK)
        atomic_fetch_sub_explicit(sent, 1, memory_order_relaxed);
    if (exported)
        close(send_fd);
    egm__exposed_put(broker->table, seg);
}

static void *broker_main(void *arg)
{
    egm_fd_broker_t *broker = arg;
    struct pollfd pfd[2] = {{.fd = broker->listen_fd, .events = POLLIN},
                            {.fd = broker->stop_fd, .events = POLLIN}};

    for (;;) {
        int n = poll(pfd, 2, -1);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            egm_error("fd broker: poll: %s", strerror(errno));
            break;
        }
        if (pfd[1].revents)
            break;
        if (!(pfd[0].revents & POLLIN))
            continue;
        int fd = accept4(broker->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EINTR && errno != EAGAIN && errno != ECONNABORTED)
                egm_log_ratelimited(EGM_LOG_WARN, 1, "fd broker: accept: %s", strerror(errno));
            continue;
        }
        serve_one(broker, fd);
        close(fd);
    }
    return NULL;
}

egm_status_t egm__fd_broker_start(egm_exposed_table_t *table, egm_te_counters_t *counters,
                                  const egm_cuda_api_t *api, const egm_te_auth_t *auth,
                                  egm_fd_broker_t **broker_p)
{
    egm_status_t st;
    egm_fd_broker_t *broker = egm_calloc(1, sizeof(*broker), "te.fd_broker");
    if (broker == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "fd broker: out of memory");
    broker->table = table;
    broker->counters = counters;
    broker->api = api;
    broker->auth = auth;
    broker->listen_fd = -1;
    broker->stop_fd = -1;

    egm_id_t nonce = egm__id_random();
    snprintf(broker->name, sizeof(broker->name), "@egmstore-%d-%016" PRIx64, (int)getpid(),
             nonce.lo ^ nonce.hi);
    if ((st = egm__sock_unix_listen(broker->name, &broker->listen_fd)) != EGM_OK)
        goto err_free;
    /* Non-blocking accept: a peer that hangs up between poll and accept must
     * not block the thread. */
    if ((st = egm__sock_set_nonblock(broker->listen_fd, 1)) != EGM_OK)
        goto err_close;
    broker->stop_fd = eventfd(0, EFD_CLOEXEC);
    if (broker->stop_fd < 0) {
        st = egm__set_error(egm__status_from_errno(errno), "fd broker: eventfd: %s",
                            strerror(errno));
        goto err_close;
    }
    int rc = pthread_create(&broker->thread, NULL, broker_main, broker);
    if (rc != 0) {
        st = egm__set_error(egm__status_from_errno(rc), "fd broker: thread: %s", strerror(rc));
        goto err_close_event;
    }
    egm_debug("fd broker: serving on %s", broker->name);
    *broker_p = broker;
    return EGM_OK;

err_close_event:
    close(broker->stop_fd);
err_close:
    close(broker->listen_fd);
err_free:
    egm_free(broker);
    return st;
}

void egm__fd_broker_stop(egm_fd_broker_t *broker)
{
    if (broker == NULL)
        return;
    uint64_t one = 1;
    if (write(broker->stop_fd, &one, sizeof(one)) != (ssize_t)sizeof(one))
        egm_warn("fd broker: stop signal failed: %s", strerror(errno));
    pthread_join(broker->thread, NULL);
    close(broker->stop_fd);
    close(broker->listen_fd);
    egm_free(broker);
}

const char *egm__fd_broker_name(const egm_fd_broker_t *broker)
{
    return broker->name;
}

egm_status_t egm__fd_broker_fetch(const char *socket, egm_id_t segment, egm_handle_kind_t kind,
                                  const char *token, int timeout_ms, int *fd_p, uint64_t *size_p)
{
    egm_status_t st;
    char text[EGM_ID_STRLEN];
    uint8_t req[EGM_BROKER_REQ_SIZE] = {0};
    uint8_t reply[EGM_BROKER_REPLY_SIZE];
    int fd = -1, sock;

    egm__id_format(segment, text);
    if ((st = egm__sock_unix_connect(socket, &sock)) != EGM_OK) {
        char detail[256];
        snprintf(detail, sizeof(detail), "%s", egm_last_error());
        return egm__set_error(st, "segment %s: fd broker %s: %s", text, socket, detail);
    }
    /* Anyone can bind an abstract name once its provider is gone: accept
     * handles only from our own user or root. */
    if ((st = egm__sock_peer_trusted(sock, socket)) != EGM_OK) {
        char detail[256];
        snprintf(detail, sizeof(detail), "%s", egm_last_error());
        st = egm__set_error(st, "segment %s: fd broker %s", text, detail);
        goto err_sock;
    }
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
    setsockopt(sock, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    setsockopt(sock, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));

    if (token != NULL && token[0] != '\0') {
        uint8_t auth[8];
        egm__wire_put_u32(auth, EGM_BROKER_AUTH_MAGIC);
        egm__wire_put_u32(auth + 4, (uint32_t)strlen(token));
        /* A write that fails (the broker refused our uid and closed) is
         * explained by its answer, read below. */
        (void)egm__auth_hello(sock, auth, sizeof(auth), token);
    }
    egm__wire_put_u32(req, EGM_BROKER_MAGIC);
    egm__wire_put_u16(req + 4, EGM_BROKER_VERSION);
    egm__wire_put_u16(req + 6, (uint16_t)kind);
    egm__wire_put_id(req + 8, segment);
    /* A broker that refused our token or uid may close before reading the
     * request: its answer, read below, says more than the failed write. */
    (void)egm__sock_write_full(sock, req, sizeof(req));
    if ((st = egm__sock_recv_fd(sock, &fd, reply, sizeof(reply))) != EGM_OK)
        goto err_sock;
    if (egm__wire_get_u32(reply) != EGM_BROKER_REPLY_MAGIC) {
        st = egm__set_error(EGM_ERR_PROTOCOL, "segment %s: bad reply from fd broker %s", text,
                            socket);
        goto err_fd;
    }
    int32_t status = (int32_t)egm__wire_get_u32(reply + 4);
    if (status != EGM_OK) {
        char why[EGM_AUTH_PROBLEM_MAX + 64], refusal[EGM_AUTH_PROBLEM_MAX];
        if (status == EGM_ERR_PERMISSION)
            snprintf(why, sizeof(why), "PERMISSION (%s, or our uid is not allowed)",
                     egm__auth_refusal(token, "the provider", refusal, sizeof(refusal)));
        else
            snprintf(why, sizeof(why), "%s", egm_status_name(status));
        st = egm__set_error(status < 0 && status >= EGM_STATUS_MIN ? (egm_status_t)status
                                                                   : EGM_ERR_PROTOCOL,
                            "segment %s: fd broker %s refused: %s", text, socket, why);
        goto err_fd;
    }
    if (fd < 0) {
        st = egm__set_error(EGM_ERR_PROTOCOL, "segment %s: fd broker %s sent no descriptor", text,
                            socket);
        goto err_fd;
    }
    close(sock);
    *fd_p = fd;
    *size_p = egm__wire_get_u64(reply + 8);
    return EGM_OK;

err_fd:
    if (fd >= 0)
        close(fd);
err_sock:
    close(sock);
    return st;
}
