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

int egm_test_http_request(const char *host, unsigned port, const char *path, const char *header,
                          char *answer, size_t len, const char **body_p)
{
    char req[8192];
    size_t n = 0;
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};

    if (len == 0)
        return -1;
    answer[0] = '\0';
    if (body_p != NULL)
        *body_p = answer;
    int rl = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: %s\r\n%s%s\r\n", path, host,
                      header != NULL ? header : "", header != NULL ? "\r\n" : "");
    if (rl < 0 || (size_t)rl >= sizeof(req) || inet_pton(AF_INET, host, &sa.sin_addr) != 1)
        return -1;
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        write(fd, req, (size_t)rl) != rl) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    while (n + 1 < len) { /* HTTP/1.0: the server closes after the answer */
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, TIMEOUT_MS) <= 0)
            break;
        ssize_t got = read(fd, answer + n, len - 1 - n);
        if (got <= 0)
            break;
        n += (size_t)got;
    }
    close(fd);
    answer[n] = '\0';
    const char *start = strstr(answer, "\r\n\r\n");
    if (body_p != NULL)
        *body_p = start != NULL ? start + 4 : answer + n;
    int status = -1;
    if (sscanf(answer, "HTTP/1.%*d %d", &status) != 1)
        return -1;
    return status;
}

int egm_test_http_get(unsigned port, const char *path, char *body, size_t len)
{
    char answer[256 * 1024];
    const char *start;
    int status =
        egm_test_http_request("127.0.0.1", port, path, NULL, answer, sizeof(answer), &start);
    if (status >= 0 && len > 0)
        snprintf(body, len, "%s", start);
    return status;
}

unsigned egm_test_ready_http_port(const char *ready_line)
{
    const char *p = strstr(ready_line, "http ");
    return p ? (unsigned)strtoul(p + 5, NULL, 10) : 0;
}

void egm_test_health_role(const char *body, char *role, size_t len, long long *epoch_p)
{
    role[0] = '\0';
    const char *r = strstr(body, "\"role\":\"");
    if (r != NULL)
        snprintf(role, len, "%.*s", (int)strcspn(r + 8, "\""), r + 8);
    const char *e = strstr(body, "\"epoch\":");
    if (e != NULL && epoch_p != NULL)
        *epoch_p = atoll(e + 8);
}

double egm_test_metric_in(const char *body, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = body; (p = strstr(p, name)) != NULL; p += len)
        if ((p == body || p[-1] == '\n') && p[len] == ' ')
            return strtod(p + len + 1, NULL);
    return -1;
}

double egm_test_metric(unsigned port, const char *name)
{
    size_t cap = 256 * 1024;
    char *body = malloc(cap);
    double value = -1;
    if (body == NULL)
        return -1;
    if (egm_test_http_get(port, "/metrics", body, cap) == 200)
        value = egm_test_metric_in(body, name);
    free(body);
    return value;
}

long long egm_test_health_number(const char *body, const char *field)
{
    char pattern[64];
    snprintf(pattern, sizeof(pattern), "\"%s\":", field);
    const char *f = strstr(body, pattern);
    return f != NULL ? atoll(f + strlen(pattern)) : -1;
}
