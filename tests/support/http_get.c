/* Plain-socket HTTP GET for tests. */
#include "support/http_get.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#define TIMEOUT_MS 10000

int egm_test_http_get(unsigned port, const char *path, char *body, size_t len)
{
    char buf[256 * 1024];
    size_t n = 0;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    char req[512];
    int rl = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n", path);
    if (write(fd, req, (size_t)rl) != rl) {
        close(fd);
        return -1;
    }
    for (;;) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, TIMEOUT_MS) <= 0)
            break;
        ssize_t got = read(fd, buf + n, sizeof(buf) - 1 - n);
        if (got <= 0)
            break;
        n += (size_t)got;
        if (n == sizeof(buf) - 1)
            break;
    }
    close(fd);
    buf[n] = '\0';
    int status = -1;
    if (sscanf(buf, "HTTP/1.%*d %d", &status) != 1)
        return -1;
    const char *start = strstr(buf, "\r\n\r\n");
    start = start ? start + 4 : buf + n;
    if (len > 0)
        snprintf(body, len, "%s", start);
    return status;
}

unsigned egm_test_ready_http_port(const char *ready_line)
{
    const char *p = strstr(ready_line, "http ");
    return p ? (unsigned)strtoul(p + 5, NULL, 10) : 0;
}
