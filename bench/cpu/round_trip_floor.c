/* egm-rtt-floor: the round trips per second that any synchronous
 * request/reply store can reach on this machine, without doing any work. One
 * server thread waits in epoll on N Unix stream connections (as the master's
 * RPC thread waits on its local sockets) and answers each 64-byte request
 * with a 64-byte reply; N client threads each send a request, poll for the
 * reply and read it (as egmstore's RPC client does), back to back.
 *
 * A put that must be stored before it returns waits for one such round trip
 * (its commit), so this bounds single-put rates from above; issue 17's CPU
 * goals are compared with it in bench/results (docs/benchmarks.md).
 *
 * usage: egm-rtt-floor [--clients 1,8] [--seconds 2] [--server-threads 1]
 * Prints one JSON line per client count: clients, round_trips, seconds,
 * per_second, p50_us, p99_us. */
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define MSG 64
#define MAX_CLIENTS 256
#define MAX_SERVERS 16
#define SAMPLES_MAX (1u << 22)

static atomic_int stop;

typedef struct {
    int epfd;
} server_t;

typedef struct {
    int fd;
    double seconds;
    double *lat_us; /* SAMPLES_MAX */
    size_t n;
} client_t;

static double now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void *server_main(void *arg)
{
    server_t *s = arg;
    struct epoll_event ev[64];
    char buf[MSG];
    while (!atomic_load(&stop)) {
        int n = epoll_wait(s->epfd, ev, 64, 100);
        for (int i = 0; i < n; i++) {
            int fd = ev[i].data.fd;
            ssize_t got = read(fd, buf, sizeof(buf));
            if (got == (ssize_t)sizeof(buf) && write(fd, buf, sizeof(buf)) != (ssize_t)sizeof(buf))
                perror("egm-rtt-floor: server write");
        }
    }
    return NULL;
}

static int read_full(int fd, char *buf, size_t len)
{
    size_t at = 0;
    while (at < len) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 1000) < 0)
            return -1;
        ssize_t got = read(fd, buf + at, len - at);
        if (got <= 0)
            return -1;
        at += (size_t)got;
    }
    return 0;
}

static void *client_main(void *arg)
{
    client_t *c = arg;
    char buf[MSG] = {0};
    double end = now_us() + c->seconds * 1e6;
    for (double t0 = now_us(); t0 < end; t0 = now_us()) {
        if (write(c->fd, buf, sizeof(buf)) != (ssize_t)sizeof(buf) ||
            read_full(c->fd, buf, sizeof(buf)) != 0) {
            perror("egm-rtt-floor: client");
            return NULL;
        }
        if (c->n < SAMPLES_MAX)
            c->lat_us[c->n++] = now_us() - t0;
    }
    return NULL;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static int run(int clients, int servers, double seconds)
{
    server_t srv[MAX_SERVERS];
    client_t cl[MAX_CLIENTS];
    pthread_t st[MAX_SERVERS], ct[MAX_CLIENTS];
    int fds[MAX_CLIENTS][2];

    atomic_store(&stop, 0);
    for (int s = 0; s < servers; s++)
        if ((srv[s].epfd = epoll_create1(0)) < 0)
            return perror("epoll_create1"), -1;
    for (int i = 0; i < clients; i++) {
        if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds[i]) != 0)
            return perror("socketpair"), -1;
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[i][1]};
        if (epoll_ctl(srv[i % servers].epfd, EPOLL_CTL_ADD, fds[i][1], &ev) != 0)
            return perror("epoll_ctl"), -1;
        cl[i] = (client_t){.fd = fds[i][0], .seconds = seconds};
        if ((cl[i].lat_us = malloc(SAMPLES_MAX * sizeof(double))) == NULL)
            return perror("malloc"), -1;
    }
    for (int s = 0; s < servers; s++)
        pthread_create(&st[s], NULL, server_main, &srv[s]);
    double t0 = now_us();
    for (int i = 0; i < clients; i++)
        pthread_create(&ct[i], NULL, client_main, &cl[i]);
    for (int i = 0; i < clients; i++)
        pthread_join(ct[i], NULL);
    double took = (now_us() - t0) / 1e6;
    atomic_store(&stop, 1);
    for (int s = 0; s < servers; s++)
        pthread_join(st[s], NULL);

    size_t total = 0, at = 0;
    for (int i = 0; i < clients; i++)
        total += cl[i].n;
    double *all = malloc((total ? total : 1) * sizeof(double));
    if (all == NULL)
        return perror("malloc"), -1;
    for (int i = 0; i < clients; i++) {
        memcpy(all + at, cl[i].lat_us, cl[i].n * sizeof(double));
        at += cl[i].n;
        free(cl[i].lat_us);
        close(fds[i][0]);
        close(fds[i][1]);
    }
    qsort(all, total, sizeof(double), cmp_double);
    printf("{\"tool\": \"egm-rtt-floor\", \"clients\": %d, \"server_threads\": %d, "
           "\"round_trips\": %zu, \"seconds\": %.3f, \"per_second\": %.0f, \"p50_us\": %.1f, "
           "\"p99_us\": %.1f}\n",
           clients, servers, total, took, (double)total / took, total ? all[total / 2] : 0.0,
           total ? all[total * 99 / 100] : 0.0);
    free(all);
    for (int s = 0; s < servers; s++)
        close(srv[s].epfd);
    return 0;
}

int main(int argc, char **argv)
{
    const char *clients = "1,8";
    double seconds = 2;
    int servers = 1;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--clients") == 0 && i + 1 < argc)
            clients = argv[++i];
        else if (strcmp(argv[i], "--seconds") == 0 && i + 1 < argc)
            seconds = atof(argv[++i]);
        else if (strcmp(argv[i], "--server-threads") == 0 && i + 1 < argc)
            servers = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: egm-rtt-floor [--clients 1,8] [--seconds 2] "
                            "[--server-threads 1]\n");
            return 2;
        }
    }
    if (!(seconds > 0 && seconds <= 3600) || servers < 1 || servers > MAX_SERVERS) {
        fprintf(stderr,
                "egm-rtt-floor: --seconds must be in (0, 3600], --server-threads in "
                "1..%d\n",
                MAX_SERVERS);
        return 2;
    }
    for (const char *p = clients; *p != '\0';) {
        char *end;
        long n = strtol(p, &end, 10);
        if (end == p || n < 1 || n > MAX_CLIENTS || (*end != ',' && *end != '\0')) {
            fprintf(stderr, "egm-rtt-floor: --clients: a comma-separated list of 1..%d, not %s\n",
                    MAX_CLIENTS, clients);
            return 2;
        }
        if (run((int)n, servers, seconds) != 0)
            return 1;
        p = *end == ',' ? end + 1 : end;
    }
    return 0;
}
