/* Socket helpers; errno becomes a status here, at the system-call boundary. */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "common/clock.h"
#include "common/log.h"
#include "common/sock.h"

static egm_status_t sys_error(const char *what)
{
    int err = errno;
    return egm__set_error(egm__status_from_errno(err), "%s: %s", what, strerror(err));
}

#define HOSTPORT_FORM "HOST:PORT or [IPv6]:PORT, e.g. 127.0.0.1:50051 or [::1]:50051"

static egm_status_t split_hostport(const char *addr, long min_port, char *host, size_t host_len,
                                   uint16_t *port_p)
{
    const char *colon, *h = addr;
    size_t hlen;

    if (addr == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "no address (expected " HOSTPORT_FORM ")");
    if (addr[0] == '[') {
        const char *close = strchr(addr, ']');
        if (close == NULL || close[1] != ':')
            return egm__set_error(EGM_ERR_INVALID_ARG, "\"%s\" is not " HOSTPORT_FORM, addr);
        h = addr + 1;
        hlen = (size_t)(close - h);
        colon = close + 1;
    } else {
        colon = strrchr(addr, ':');
        if (colon == NULL)
            return egm__set_error(EGM_ERR_INVALID_ARG,
                                  "\"%s\" has no port (expected " HOSTPORT_FORM ")", addr);
        hlen = (size_t)(colon - addr);
        /* "::1:80" is an address and a port only by guessing where one ends. */
        if (memchr(addr, ':', hlen) != NULL)
            return egm__set_error(EGM_ERR_INVALID_ARG,
                                  "\"%s\": an IPv6 address goes in brackets: [%.*s]:%s", addr,
                                  (int)hlen, addr, colon + 1);
    }
    if (hlen == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "\"%s\" has no host (expected " HOSTPORT_FORM ")", addr);
    for (size_t i = 0; i < hlen; i++)
        if (isspace((unsigned char)h[i]) || iscntrl((unsigned char)h[i]))
            return egm__set_error(EGM_ERR_INVALID_ARG,
                                  "the host of \"%s\" contains a space or a control character",
                                  addr);
    /* 1 to 5 digits only: strtol alone would take " 80", "+80" and "-0". */
    const char *digits = colon + 1;
    size_t n = strspn(digits, "0123456789");
    long port = n > 0 && n <= 5 && digits[n] == '\0' ? strtol(digits, NULL, 10) : -1;
    if (port < min_port || port > 65535)
        return egm__set_error(EGM_ERR_INVALID_ARG, "\"%s\": the port must be %ld..65535", addr,
                              min_port);
    if (hlen + 1 > host_len)
        return egm__set_error(EGM_ERR_INVALID_ARG, "\"%s\": host name too long", addr);
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    *port_p = (uint16_t)port;
    return EGM_OK;
}

egm_status_t egm__sock_split_hostport(const char *addr, char *host, size_t host_len,
                                      uint16_t *port_p)
{
    return split_hostport(addr, 0, host, host_len, port_p);
}

egm_status_t egm__sock_split_peer_hostport(const char *addr, char *host, size_t host_len,
                                           uint16_t *port_p)
{
    return split_hostport(addr, 1, host, host_len, port_p);
}

egm_status_t egm__sock_next_endpoint(const char **p, char *host, size_t host_len, uint16_t *port_p)
{
    const char *at = *p;
    if (*at == '\0')
        return EGM_ERR_NOT_FOUND;
    size_t len = strcspn(at, ";,");
    const char *next = at + len + (at[len] != '\0');
    if (len >= 7 && strncmp(at, "http://", 7) == 0) {
        at += 7;
        len -= 7;
    }
    if (len > 0 && at[len - 1] == '/')
        len--;
    char item[EGM_SOCK_HOST_MAX + 16];
    if (len == 0 || len >= sizeof(item))
        return egm__set_error(EGM_ERR_INVALID_ARG, "an empty or too long endpoint at \"%.32s\"",
                              *p);
    memcpy(item, at, len);
    item[len] = '\0';
    egm_status_t status = egm__sock_split_peer_hostport(item, host, host_len, port_p);
    if (status != EGM_OK)
        return status;
    *p = next;
    return EGM_OK;
}

char *egm__sock_format_hostport(const char *host, unsigned port, char *buf, size_t len)
{
    if (host == NULL)
        host = "";
    int v6 = host[0] != '[' && strchr(host, ':') != NULL;
    if (len > 0)
        snprintf(buf, len, "%s%s%s:%u", v6 ? "[" : "", host, v6 ? "]" : "", port);
    return buf;
}

/* What an address is resolved for: a listener's empty host means every address. */
typedef enum { RESOLVE_TO_CONNECT, RESOLVE_TO_LISTEN } resolve_use_t;

static egm_status_t resolve(const char *host, uint16_t port, resolve_use_t use,
                            struct addrinfo **ai_p)
{
    struct addrinfo hints;
    char service[8];

    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = use == RESOLVE_TO_LISTEN ? AI_PASSIVE : 0;
    if (use == RESOLVE_TO_LISTEN && (host == NULL || host[0] == '\0'))
        host = "0.0.0.0";
    snprintf(service, sizeof(service), "%u", (unsigned)port);
    int rc = getaddrinfo(host, service, &hints, ai_p);
    if (rc != 0)
        return egm__set_error(EGM_ERR_UNREACHABLE, "cannot resolve \"%s\": %s", host,
                              gai_strerror(rc));
    return EGM_OK;
}

egm_status_t egm__sock_tcp_listen(const char *host, uint16_t port, int *fd_p, uint16_t *port_p)
{
    struct addrinfo *ai;
    egm_status_t status = resolve(host, port, RESOLVE_TO_LISTEN, &ai);
    if (status != EGM_OK)
        return status;
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        freeaddrinfo(ai);
        return sys_error("socket");
    }
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
        char where[300];
        egm__sock_format_hostport(host && host[0] ? host : "0.0.0.0", port, where, sizeof(where));
        status =
            egm__set_error(egm__status_from_errno(errno), "bind %s: %s", where, strerror(errno));
        goto err;
    }
    if (listen(fd, 512) != 0) {
        status = sys_error("listen");
        goto err;
    }
    freeaddrinfo(ai);
    if (port_p != NULL) {
        struct sockaddr_storage ss;
        socklen_t len = sizeof(ss);
        getsockname(fd, (struct sockaddr *)&ss, &len);
        *port_p = ss.ss_family == AF_INET6 ? ntohs(((struct sockaddr_in6 *)&ss)->sin6_port)
                                           : ntohs(((struct sockaddr_in *)&ss)->sin_port);
    }
    *fd_p = fd;
    return EGM_OK;
err:
    close(fd);
    freeaddrinfo(ai);
    return status;
}

egm_status_t egm__sock_tcp_connect(const char *host, uint16_t port, int timeout_ms, int *fd_p)
{
    struct addrinfo *ai, *p;
    egm_status_t status = resolve(host, port, RESOLVE_TO_CONNECT, &ai);
    if (status != EGM_OK)
        return status;
    char where[300];
    egm__sock_format_hostport(host, port, where, sizeof(where));
    status = egm__set_error(EGM_ERR_UNREACHABLE, "connect %s: no address", where);
    for (p = ai; p != NULL; p = p->ai_next) {
        int fd = socket(p->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            status = sys_error("socket");
            continue;
        }
        int rc = connect(fd, p->ai_addr, p->ai_addrlen);
        if (rc != 0 && errno == EINPROGRESS) {
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            do
                rc = poll(&pfd, 1, timeout_ms);
            while (rc < 0 && errno == EINTR);
            if (rc == 0) {
                close(fd);
                status = egm__set_error(EGM_ERR_TIMEOUT, "connect %s: no answer in %d ms", where,
                                        timeout_ms);
                continue;
            }
            int err = 0;
            socklen_t len = sizeof(err);
            getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
            rc = err == 0 ? 0 : -1;
            errno = err;
        }
        if (rc != 0) {
            status = egm__set_error(egm__status_from_errno(errno), "connect %s: %s", where,
                                    strerror(errno));
            close(fd);
            continue;
        }
        egm__sock_set_nonblock(fd, 0);
        egm__sock_set_nodelay(fd);
        freeaddrinfo(ai);
        *fd_p = fd;
        return EGM_OK;
    }
    freeaddrinfo(ai);
    return status;
}

static socklen_t unix_addr(const char *path, struct sockaddr_un *sun)
{
    memset(sun, 0, sizeof(*sun));
    sun->sun_family = AF_UNIX;
    size_t len = strnlen(path, sizeof(sun->sun_path) - 1);
    memcpy(sun->sun_path, path, len);
    if (path[0] == '@') /* abstract namespace: no file to clean up after a crash */
        sun->sun_path[0] = '\0';
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + len);
}

egm_status_t egm__sock_unix_listen(const char *path, int *fd_p)
{
    struct sockaddr_un sun;
    if (strlen(path) >= sizeof(sun.sun_path))
        return egm__set_error(EGM_ERR_INVALID_ARG, "unix socket path too long: %s", path);
    socklen_t len = unix_addr(path, &sun);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return sys_error("socket(AF_UNIX)");
    if (path[0] != '@')
        unlink(path);
    if (bind(fd, (struct sockaddr *)&sun, len) != 0 || listen(fd, 128) != 0) {
        egm_status_t status = egm__set_error(egm__status_from_errno(errno), "listen on %s: %s",
                                             path, strerror(errno));
        close(fd);
        return status;
    }
    *fd_p = fd;
    return EGM_OK;
}

egm_status_t egm__sock_unix_connect(const char *path, int *fd_p)
{
    struct sockaddr_un sun;
    if (strlen(path) >= sizeof(sun.sun_path))
        return egm__set_error(EGM_ERR_INVALID_ARG, "unix socket path too long: %s", path);
    socklen_t len = unix_addr(path, &sun);
    /* Non-blocking: a Unix connect completes at once or fails (EAGAIN when the
     * listener's backlog is full) instead of waiting without a deadline. */
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        return sys_error("socket(AF_UNIX)");
    int rc;
    do
        rc = connect(fd, (struct sockaddr *)&sun, len);
    while (rc != 0 && errno == EINTR);
    if (rc != 0) {
        egm_status_t status =
            egm__set_error(errno == EAGAIN ? EGM_ERR_UNREACHABLE : egm__status_from_errno(errno),
                           "connect %s: %s", path, strerror(errno));
        close(fd);
        return status;
    }
    egm__sock_set_nonblock(fd, 0);
    *fd_p = fd;
    return EGM_OK;
}

egm_status_t egm__sock_peer_trusted(int sock, const char *what)
{
    pid_t pid = 0;
    uid_t uid = (uid_t)-1;
    egm_status_t status = egm__sock_peer_cred(sock, &pid, &uid, NULL);
    if (status != EGM_OK)
        return status;
    if (uid != geteuid() && uid != 0)
        return egm__set_error(EGM_ERR_PERMISSION, "%s: peer pid %d runs as uid %u, not ours (%u)",
                              what, (int)pid, (unsigned)uid, (unsigned)geteuid());
    return EGM_OK;
}

egm_status_t egm__sock_set_nonblock(int fd, int on)
{
    int flags = fcntl(fd, F_GETFL, 0);
    if (flags < 0)
        return sys_error("fcntl");
    flags = on ? (flags | O_NONBLOCK) : (flags & ~O_NONBLOCK);
    if (fcntl(fd, F_SETFL, flags) != 0)
        return sys_error("fcntl");
    return EGM_OK;
}

egm_status_t egm__sock_set_nodelay(int fd)
{
    int one = 1;
    if (setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one)) != 0)
        return sys_error("setsockopt(TCP_NODELAY)");
    return EGM_OK;
}

egm_status_t egm__sock_read_full(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return sys_error("read");
        if (n == 0)
            return egm__set_error(EGM_ERR_UNREACHABLE, "connection closed by peer");
        p += n;
        len -= (size_t)n;
    }
    return EGM_OK;
}

egm_status_t egm__sock_write_full(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return sys_error("send");
        p += n;
        len -= (size_t)n;
    }
    return EGM_OK;
}

egm_status_t egm__sock_read_full_timeout(int fd, void *buf, size_t len, int timeout_ms)
{
    char *p = buf;
    uint64_t deadline = egm__now_ms() + (uint64_t)timeout_ms;
    while (len > 0) {
        uint64_t now = egm__now_ms();
        if (now >= deadline)
            return egm__set_error(EGM_ERR_TIMEOUT, "read: no data in %d ms", timeout_ms);
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        int rc = poll(&pfd, 1, (int)(deadline - now));
        if (rc < 0 && errno != EINTR)
            return sys_error("poll");
        if (rc <= 0)
            continue;
        ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
        if (n < 0 && (errno == EINTR || errno == EAGAIN))
            continue;
        if (n < 0)
            return sys_error("recv");
        if (n == 0)
            return egm__set_error(EGM_ERR_UNREACHABLE, "connection closed by peer");
        p += n;
        len -= (size_t)n;
    }
    return EGM_OK;
}

egm_status_t egm__sock_send_fd(int sock, int fd, const void *data, size_t len)
{
    char control[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = (void *)data, .iov_len = len};
    struct msghdr msg;

    memset(&msg, 0, sizeof(msg));
    memset(control, 0, sizeof(control));
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (fd >= 0) {
        msg.msg_control = control;
        msg.msg_controllen = sizeof(control);
        struct cmsghdr *cm = CMSG_FIRSTHDR(&msg);
        cm->cmsg_level = SOL_SOCKET;
        cm->cmsg_type = SCM_RIGHTS;
        cm->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(cm), &fd, sizeof(int));
    }
    ssize_t n;
    do
        n = sendmsg(sock, &msg, MSG_NOSIGNAL);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return sys_error("sendmsg");
    if ((size_t)n != len)
        return egm__set_error(EGM_ERR_IO, "sendmsg: short write");
    return EGM_OK;
}

egm_status_t egm__sock_recv_fd(int sock, int *fd_p, void *data, size_t len)
{
    char control[CMSG_SPACE(sizeof(int))];
    struct iovec iov = {.iov_base = data, .iov_len = len};
    struct msghdr msg;

    memset(&msg, 0, sizeof(msg));
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    *fd_p = -1;
    ssize_t n;
    do
        n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return sys_error("recvmsg");
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm != NULL; cm = CMSG_NXTHDR(&msg, cm))
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
            cm->cmsg_len == CMSG_LEN(sizeof(int)))
            memcpy(fd_p, CMSG_DATA(cm), sizeof(int));
    if ((size_t)n != len) {
        if (*fd_p >= 0) {
            close(*fd_p);
            *fd_p = -1;
        }
        return egm__set_error(n == 0 ? EGM_ERR_UNREACHABLE : EGM_ERR_PROTOCOL,
                              "recvmsg: got %zd of %zu bytes", n, len);
    }
    return EGM_OK;
}

egm_status_t egm__sock_peer_cred(int sock, pid_t *pid_p, uid_t *uid_p, gid_t *gid_p)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);
    if (getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0)
        return sys_error("getsockopt(SO_PEERCRED)");
    if (pid_p != NULL)
        *pid_p = cred.pid;
    if (uid_p != NULL)
        *uid_p = cred.uid;
    if (gid_p != NULL)
        *gid_p = cred.gid;
    return EGM_OK;
}

static char host_name[128];
static char host_id[192];
static pthread_once_t host_once = PTHREAD_ONCE_INIT;

static void host_init(void)
{
    char boot[64] = "";
    if (gethostname(host_name, sizeof(host_name) - 1) != 0)
        snprintf(host_name, sizeof(host_name), "localhost");
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f != NULL) {
        if (fgets(boot, sizeof(boot), f) == NULL)
            boot[0] = '\0';
        fclose(f);
    }
    boot[strcspn(boot, "\n")] = '\0';
    snprintf(host_id, sizeof(host_id), "%s/%s", host_name, boot);
}

const char *egm__host_id(void)
{
    pthread_once(&host_once, host_init);
    return host_id;
}

const char *egm__host_name(void)
{
    pthread_once(&host_once, host_init);
    return host_name;
}
