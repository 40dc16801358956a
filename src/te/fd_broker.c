/* fd broker (provider side of the shm transport): hands a segment's memfd to a
 * consumer on this host over an abstract Unix socket, after checking that the
 * peer runs as our user (or root). One request per connection. */
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
#include "common/log.h"
#include "common/sock.h"

/* A peer that connects but does not send its request cannot hold the broker. */
#define BROKER_IO_TIMEOUT_MS 2000

struct egm_fd_broker {
    egm_exposed_table_t *table;
    egm_te_counters_t *counters;
    char name[EGM_SHM_SOCKET_MAX];
    int listen_fd;
    int stop_fd; /* eventfd: wakes the thread to stop */
    pthread_t thread;
};

static void serve_one(egm_fd_broker_t *broker, int fd)
{
    pid_t pid;
    uid_t uid;
    gid_t gid;
    uint8_t req[EGM_BROKER_REQ_SIZE];
    uint8_t reply[EGM_BROKER_REPLY_SIZE];

    if (egm__sock_peer_cred(fd, &pid, &uid, &gid) != EGM_OK) {
        egm_log_ratelimited(EGM_LOG_WARN, 1, "fd broker: no peer credentials: %s",
                            egm_last_error());
        return;
    }
    if (uid != geteuid() && uid != 0) {
        atomic_fetch_add(&broker->counters->shm_peers_refused, 1);
        egm_log_ratelimited(EGM_LOG_WARN, 1,
                            "fd broker: refused peer pid %d uid %u (only uid %u or root)", (int)pid,
                            (unsigned)uid, (unsigned)geteuid());
        return;
    }
    if (egm__sock_read_full_timeout(fd, req, sizeof(req), BROKER_IO_TIMEOUT_MS) != EGM_OK)
        return;
    if (egm__wire_get_u32(req) != EGM_BROKER_MAGIC ||
        egm__wire_get_u16(req + 4) != EGM_BROKER_VERSION) {
        egm_log_ratelimited(EGM_LOG_WARN, 1, "fd broker: malformed request from pid %d", (int)pid);
        return;
    }
    egm_id_t id = egm__wire_get_id(req + 8);

    /* A send timeout: a peer that does not read cannot stall the broker. */
    struct timeval tv = {.tv_sec = BROKER_IO_TIMEOUT_MS / 1000, .tv_usec = 0};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));

    egm__wire_put_u32(reply, EGM_BROKER_REPLY_MAGIC);
    egm_exposed_t *seg = egm__exposed_acquire(broker->table, id);
    if (seg == NULL || seg->memfd < 0) {
        char text[EGM_ID_STRLEN];
        egm_debug("fd broker: pid %d asked for segment %s: not exposed with a memfd", (int)pid,
                  egm__id_format(id, text));
        egm__wire_put_u32(reply + 4, (uint32_t)EGM_ERR_SEGMENT_NOT_FOUND);
        egm__wire_put_u64(reply + 8, 0);
        if (seg != NULL)
            egm__exposed_release(broker->table, seg);
        (void)egm__sock_write_full(fd, reply, sizeof(reply));
        return;
    }
    egm__wire_put_u32(reply + 4, (uint32_t)EGM_OK);
    egm__wire_put_u64(reply + 8, seg->size);
    /* Counted before the send so that the count is exact once the peer has
     * the descriptor; taken back if the send fails. */
    atomic_fetch_add(&broker->counters->shm_fds_sent, 1);
    if (egm__sock_send_fd(fd, seg->memfd, reply, sizeof(reply)) != EGM_OK)
        atomic_fetch_sub(&broker->counters->shm_fds_sent, 1);
    egm__exposed_release(broker->table, seg);
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
                                  egm_fd_broker_t **broker_p)
{
    egm_status_t st;
    egm_fd_broker_t *broker = egm_calloc(1, sizeof(*broker), "te.fd_broker");
    if (broker == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "fd broker: out of memory");
    broker->table = table;
    broker->counters = counters;
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
