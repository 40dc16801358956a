/* Real etcd members for tests (see etcd.h). */
#include "support/etcd.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "common/clock.h"
#include "support/http_get.h"

static const char *etcd_bin(void)
{
    const char *bin = getenv("EGM_TEST_ETCD");
    return bin != NULL && bin[0] != '\0' ? bin : "/usr/bin/etcd";
}

/* A port the kernel gave a socket bound to port 0, closed again: free now,
 * but the kernel may give it out once more, so a port this process handed
 * out lately is not given again (a cluster's members once got one peer port
 * for two and etcd refused the cluster: "has duplicate url"). */
static unsigned free_port(void)
{
    static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
    static unsigned given[64];
    static size_t n_given;
    unsigned port = 0;
    pthread_mutex_lock(&lock);
    for (int tries = 0; port == 0 && tries < 100; tries++) {
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof(sa);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd >= 0 && bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
            getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
            port = ntohs(sa.sin_port);
        if (fd >= 0)
            close(fd);
        for (size_t i = 0; port != 0 && i < sizeof(given) / sizeof(given[0]); i++)
            if (given[i] == port)
                port = 0; /* handed out lately: another */
    }
    if (port != 0)
        given[n_given++ % (sizeof(given) / sizeof(given[0]))] = port;
    pthread_mutex_unlock(&lock);
    return port;
}

static int launch(egm_test_etcd_t *e)
{
    char client[64], listen[140], peer[64], data[300];
    snprintf(client, sizeof(client), "http://%s:%u", e->host, e->client_port);
    /* Also on loopback, where wait_healthy asks. */
    if (strcmp(e->host, "127.0.0.1") != 0)
        snprintf(listen, sizeof(listen), "%s,http://127.0.0.1:%u", client, e->client_port);
    else
        snprintf(listen, sizeof(listen), "%s", client);
    snprintf(peer, sizeof(peer), "http://%s:%u", e->host, e->peer_port);
    if (e->cluster[0] == '\0')
        snprintf(e->cluster, sizeof(e->cluster), "%s=%s", e->name, peer);
    snprintf(data, sizeof(data), "%s/data", e->dir);
    const char *argv[] = {etcd_bin(), "--name",
                          e->name,    "--data-dir",
                          data,       "--listen-client-urls",
                          listen,     "--advertise-client-urls",
                          client,     "--listen-peer-urls",
                          peer,       "--initial-advertise-peer-urls",
                          peer,       "--initial-cluster",
                          e->cluster, "--log-level",
                          "error",    NULL};
    if (access(argv[0], X_OK) != 0) {
        fprintf(stderr,
                "etcd: %s is missing: install Debian's etcd-server "
                "(scripts/install-deps.sh does) or set EGM_TEST_ETCD\n",
                argv[0]);
        return -1;
    }
    if (egm__process_spawn((char *const *)argv, EGM_PROCESS_STDOUT_INHERIT, &e->proc) != EGM_OK) {
        fprintf(stderr, "etcd: cannot start %s\n", argv[0]);
        return -1;
    }
    return 0;
}

static int wait_healthy(egm_test_etcd_t *e)
{
    char body[256];
    for (uint64_t until = egm__now_ms() + 30000; egm__now_ms() < until;) {
        if (egm_test_http_get(e->client_port, "/health", body, sizeof(body)) == 200 &&
            strstr(body, "true") != NULL)
            return 0;
        int code;
        if (egm__process_wait(&e->proc, 0, &code) == EGM_OK) {
            fprintf(stderr, "etcd %s: exited with %d before it was healthy\n", e->name, code);
            return -1;
        }
        egm__sleep_ms(50);
    }
    fprintf(stderr, "etcd %s: not healthy after 30 s\n", e->name);
    return -1;
}

static int prepare(egm_test_etcd_t *e, const char *name, const char *host)
{
    memset(e, 0, sizeof(*e));
    e->proc.out_fd = -1;
    snprintf(e->name, sizeof(e->name), "%s", name);
    snprintf(e->host, sizeof(e->host), "%s", host != NULL ? host : "127.0.0.1");
    snprintf(e->dir, sizeof(e->dir), "/tmp/egm-test-etcd-XXXXXX");
    if (mkdtemp(e->dir) == NULL)
        return -1;
    e->client_port = free_port();
    e->peer_port = free_port();
    snprintf(e->endpoint, sizeof(e->endpoint), "%s:%u", e->host, e->client_port);
    return e->client_port && e->peer_port ? 0 : -1;
}

int egm_test_etcd_start_on(egm_test_etcd_t *e, const char *host)
{
    if (prepare(e, "t", host) != 0 || launch(e) != 0)
        return -1;
    return wait_healthy(e);
}

int egm_test_etcd_start(egm_test_etcd_t *e)
{
    return egm_test_etcd_start_on(e, NULL);
}

int egm_test_etcd_cluster_start(egm_test_etcd_t *m, int n, char *endpoints, size_t len)
{
    char cluster[512] = "";
    size_t used = 0;
    if (n < 1 || n > 5)
        return -1;
    for (int i = 0; i < n; i++) {
        char name[8];
        snprintf(name, sizeof(name), "m%d", i);
        if (prepare(&m[i], name, NULL) != 0)
            return -1;
        used += (size_t)snprintf(cluster + used, sizeof(cluster) - used, "%s%s=http://127.0.0.1:%u",
                                 i ? "," : "", name, m[i].peer_port);
    }
    endpoints[0] = '\0';
    for (int i = 0; i < n; i++) {
        snprintf(m[i].cluster, sizeof(m[i].cluster), "%s", cluster);
        size_t el = strlen(endpoints);
        snprintf(endpoints + el, len - el, "%s%s", i ? ";" : "", m[i].endpoint);
        /* All start before any can be healthy: a member waits for its quorum. */
        if (launch(&m[i]) != 0)
            return -1;
    }
    for (int i = 0; i < n; i++)
        if (wait_healthy(&m[i]) != 0)
            return -1;
    return 0;
}

int egm_test_etcd_restart(egm_test_etcd_t *e)
{
    egm__process_cleanup(&e->proc);
    memset(&e->proc, 0, sizeof(e->proc));
    e->proc.out_fd = -1;
    if (launch(e) != 0)
        return -1;
    return wait_healthy(e);
}

int egm_test_etcd_cluster_restart(egm_test_etcd_t *m, int n)
{
    for (int i = 0; i < n; i++) {
        egm__process_cleanup(&m[i].proc);
        memset(&m[i].proc, 0, sizeof(m[i].proc));
        m[i].proc.out_fd = -1;
        if (launch(&m[i]) != 0)
            return -1;
    }
    for (int i = 0; i < n; i++)
        if (wait_healthy(&m[i]) != 0)
            return -1;
    return 0;
}

void egm_test_etcd_stop(egm_test_etcd_t *e)
{
    egm__process_cleanup(&e->proc);
    if (e->dir[0] != '\0') {
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", e->dir);
        if (system(cmd) != 0)
            fprintf(stderr, "etcd: could not remove %s\n", e->dir);
    }
    e->dir[0] = '\0';
}
