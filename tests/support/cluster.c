/* Integration-test harness (see cluster.h). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "client/client_int.h"
#include "common/clock.h"
#include "common/sock.h"
#include "rpc/proto_util.h"
#include "support/cluster.h"

#define START_TIMEOUT_MS 30000
#define CLI_TIMEOUT_MS 60000

const char *egm_test_bin(void)
{
    const char *bin = getenv("EGM_TEST_BINARY");
    return bin != NULL ? bin : "build/bin/egmstore";
}

static int build_argv(const char **argv, size_t max, const char *const *base,
                      const char *const *extra)
{
    size_t n = 0;
    for (; base != NULL && *base != NULL && n + 1 < max; base++)
        argv[n++] = *base;
    for (; extra != NULL && *extra != NULL && n + 1 < max; extra++)
        argv[n++] = *extra;
    argv[n] = NULL;
    return (int)n;
}

/* Spawns the master on `port` (0 = any free) and waits for it to listen. */
static int spawn_master(egm_test_cluster_t *cluster, unsigned port, const char *const *extra)
{
    char port_text[16];
    snprintf(port_text, sizeof(port_text), "%u", port);
    const char *base[] = {egm_test_bin(),     "master",    "--port", port_text,
                          "--listen-address", "127.0.0.1", NULL};
    const char *argv[64];
    char line[512];

    build_argv(argv, 64, base, extra);
    if (egm__process_spawn((char *const *)argv, EGM_PROCESS_STDOUT_CAPTURE, &cluster->master) !=
        EGM_OK)
        return -1;
    if (egm__process_wait_line(&cluster->master, "egmstore master listening on ", line,
                               sizeof(line), START_TIMEOUT_MS) != EGM_OK)
        return -1;
    const char *colon = strrchr(line, ':');
    if (colon == NULL)
        return -1;
    cluster->master_port = (unsigned)atoi(colon + 1);
    snprintf(cluster->master_addr, sizeof(cluster->master_addr), "127.0.0.1:%u",
             cluster->master_port);
    return cluster->master_port > 0 ? 0 : -1;
}

void egm_test_cluster_init(egm_test_cluster_t *cluster)
{
    memset(cluster, 0, sizeof(*cluster));
    cluster->master.out_fd = -1;
    for (int i = 0; i < EGM_TEST_MAX_PROVIDERS; i++)
        cluster->providers[i].out_fd = -1;
}

int egm_test_start_master(egm_test_cluster_t *cluster, const char *const *extra)
{
    egm_test_cluster_init(cluster);
    return spawn_master(cluster, 0, extra);
}

int egm_test_start_master_on(egm_test_cluster_t *cluster, unsigned port, const char *const *extra)
{
    egm__process_cleanup(&cluster->master);
    memset(&cluster->master, 0, sizeof(cluster->master));
    cluster->master.out_fd = -1;
    return spawn_master(cluster, port, extra);
}

int egm_test_start_provider(egm_test_cluster_t *cluster, const char *size, const char *const *extra)
{
    const char *base[] = {egm_test_bin(),
                          "provider",
                          "--master",
                          cluster->master_addr,
                          "--global-segment-size",
                          size,
                          "--local-hostname",
                          "127.0.0.1",
                          NULL};
    const char *argv[64];
    char line[512];

    if (cluster->n_providers >= EGM_TEST_MAX_PROVIDERS)
        return -1;
    int index = cluster->n_providers;
    build_argv(argv, 64, base, extra);
    if (egm__process_spawn((char *const *)argv, EGM_PROCESS_STDOUT_CAPTURE,
                           &cluster->providers[index]) != EGM_OK)
        return -1;
    cluster->n_providers++;
    if (egm__process_wait_line(&cluster->providers[index], "egmstore provider ready", line,
                               sizeof(line), START_TIMEOUT_MS) != EGM_OK)
        return -1;
    snprintf(cluster->provider_ready[index], sizeof(cluster->provider_ready[index]), "%s", line);
    return index;
}

int egm_test_cli(egm_test_cluster_t *cluster, const char *const *args, const void *input,
                 size_t input_len, char *out, size_t out_len)
{
    const char *base[] = {egm_test_bin(), NULL};
    const char *tail[] = {"--master", cluster->master_addr, NULL};
    const char *argv[64], *mid[60];
    int in_pipe[2], out_pipe[2];
    size_t n_out = 0;

    int n = build_argv(mid, 58, args, tail);
    (void)n;
    build_argv(argv, 64, base, mid);
    if (pipe2(in_pipe, O_CLOEXEC) != 0 || pipe2(out_pipe, O_CLOEXEC) != 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        dup2(in_pipe[0], STDIN_FILENO);
        dup2(out_pipe[1], STDOUT_FILENO);
        dup2(out_pipe[1], STDERR_FILENO);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(in_pipe[0]);
    close(out_pipe[1]);
    signal(SIGPIPE, SIG_IGN);
    if (input != NULL && input_len > 0) {
        const char *p = input;
        size_t left = input_len;
        while (left > 0) {
            ssize_t w = write(in_pipe[1], p, left);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                break;
            p += w;
            left -= (size_t)w;
        }
    }
    close(in_pipe[1]);
    uint64_t deadline = egm__now_ms() + CLI_TIMEOUT_MS;
    for (;;) {
        struct pollfd pfd = {.fd = out_pipe[0], .events = POLLIN};
        uint64_t now = egm__now_ms();
        if (now >= deadline)
            break;
        int rc = poll(&pfd, 1, (int)(deadline - now));
        if (rc < 0 && errno == EINTR)
            continue;
        if (rc <= 0)
            break;
        char sink[4096];
        char *dst = n_out + 1 < out_len ? out + n_out : sink;
        size_t room = n_out + 1 < out_len ? out_len - 1 - n_out : sizeof(sink);
        ssize_t got = read(out_pipe[0], dst, room);
        if (got < 0 && errno == EINTR)
            continue;
        if (got <= 0)
            break;
        if (dst != sink)
            n_out += (size_t)got;
    }
    close(out_pipe[0]);
    if (out_len > 0)
        out[n_out < out_len ? n_out : out_len - 1] = '\0';
    egm_process_t proc = {.pid = pid, .out_fd = -1};
    int code = -1;
    if (egm__process_wait(&proc, 10000, &code) != EGM_OK) {
        egm__process_cleanup(&proc);
        return -1;
    }
    return code;
}

egm_client_t *egm_test_client(egm_test_cluster_t *cluster, const char *protocol,
                              const char *const *pairs)
{
    egm_config_t *config = NULL;
    egm_client_t *client = NULL;

    if (egm_config_create(&config) != EGM_OK)
        return NULL;
    if (egm_config_set(config, "master_server_addr", cluster->master_addr) != EGM_OK ||
        egm_config_set(config, "protocol", protocol) != EGM_OK ||
        egm_config_set(config, "local_hostname", "127.0.0.1") != EGM_OK)
        goto out;
    for (; pairs != NULL && *pairs != NULL; pairs++)
        if (egm_config_set_pair(config, *pairs) != EGM_OK)
            goto out;
    if (egm_client_create(config, &client) != EGM_OK) {
        fprintf(stderr, "egm_test_client: %s\n", egm_last_error());
        client = NULL;
    }
out:
    egm_config_destroy(config);
    return client;
}

size_t egm_test_segment_count(egm_client_t *client)
{
    Egm__ListSegmentsReply *reply = NULL;
    if (client == NULL || egm__client_list_segments(client, &reply) != EGM_OK)
        return (size_t)-1;
    size_t n = reply->n_segments;
    egm__rpc_msg_free(&reply->base);
    return n;
}

size_t egm_test_cluster_segments(egm_test_cluster_t *cluster)
{
    egm_client_t *viewer = egm_test_client(cluster, "tcp", NULL);
    size_t n = egm_test_segment_count(viewer);
    egm_client_destroy(viewer);
    return n;
}

static void stop_process(egm_process_t *proc)
{
    if (proc->pid > 0) {
        egm__process_signal(proc, SIGTERM);
        if (egm__process_wait(proc, 15000, NULL) != EGM_OK)
            fprintf(stderr, "harness: pid %d ignored SIGTERM, killing it\n", (int)proc->pid);
    }
    egm__process_cleanup(proc);
}

int egm_test_process_stop(egm_process_t *proc)
{
    if (egm__process_signal(proc, SIGSTOP) != EGM_OK)
        return -1;
    for (uint64_t until = egm__now_ms() + 10000; egm__now_ms() < until; egm__sleep_ms(1)) {
        int wstatus;
        pid_t rc = waitpid(proc->pid, &wstatus, WNOHANG | WUNTRACED);
        if (rc == proc->pid && WIFSTOPPED(wstatus))
            return 0;
        if (rc < 0 || (rc == proc->pid && !WIFSTOPPED(wstatus)))
            return -1; /* gone (its exit is lost to egm__process_wait: it was to stop) */
    }
    return -1;
}

void egm_test_cluster_stop(egm_test_cluster_t *cluster)
{
    for (int i = cluster->n_providers; i-- > 0;)
        stop_process(&cluster->providers[i]);
    stop_process(&cluster->master);
}

void egm_test_fill(void *buf, size_t len, unsigned seed)
{
    unsigned char *p = buf;
    uint32_t x = seed * 2654435761u + 12345u;
    for (size_t i = 0; i < len; i++) {
        x = x * 1103515245u + 12345u;
        p[i] = (unsigned char)(x >> 16);
    }
}

egm_status_t egm_test_put_seeded(egm_client_t *client, const char *key, size_t len, unsigned seed)
{
    unsigned char *data = malloc(len ? len : 1);
    if (data == NULL)
        return EGM_ERR_NO_MEMORY;
    egm_test_fill(data, len, seed);
    egm_status_t st = egm_put(client, key, data, len, NULL);
    free(data);
    return st;
}

egm_status_t egm_test_get_seeded(egm_client_t *client, const char *key, size_t len, unsigned seed)
{
    void *data = NULL;
    size_t got = 0;
    egm_status_t st = egm_get(client, key, &data, &got);
    if (st != EGM_OK)
        return st;
    unsigned char *want = malloc(len ? len : 1);
    if (want != NULL)
        egm_test_fill(want, len, seed);
    if (want == NULL || got != len || memcmp(data, want, len) != 0) {
        fprintf(stderr, "get \"%s\": %zu bytes answered, not the %zu bytes of seed %u\n", key, got,
                len, seed);
        st = EGM_ERR_INTERNAL;
    }
    free(want);
    egm_buffer_free(data);
    return st;
}

int egm_test_only_segment(egm_client_t *client, egm_test_segment_t *seg)
{
    Egm__ListSegmentsReply *reply = NULL;
    if (egm__client_list_segments(client, &reply) != EGM_OK)
        return -1;
    int rc = -1;
    if (reply->n_segments == 1) {
        const Egm__SegmentDesc *d = reply->segments[0]->desc;
        seg->id = egm__id_from_pb(d->id);
        seg->size = d->size;
        snprintf(seg->shm_socket, sizeof(seg->shm_socket), "%s", d->shm_socket);
        rc = egm__sock_split_hostport(d->tcp_endpoint, seg->data_host, sizeof(seg->data_host),
                                      &seg->data_port) == EGM_OK
                 ? 0
                 : -1;
    }
    egm__rpc_msg_free(&reply->base);
    return rc;
}

/* extra after "--http-port 0" (room for 30 flags). */
static void http_flags(const char **flags, size_t max, const char *const *extra)
{
    size_t n = 0;
    flags[n++] = "--http-port";
    flags[n++] = "0";
    for (; extra != NULL && *extra != NULL && n + 1 < max; extra++)
        flags[n++] = *extra;
    flags[n] = NULL;
}

/* The admin HTTP port the master just started says it listens on. */
static int read_http_port(egm_test_cluster_t *cluster, unsigned *http_port_p)
{
    char line[512];
    *http_port_p = 0;
    if (egm__process_wait_line(&cluster->master, "egmstore master admin http ", line, sizeof(line),
                               30000) != EGM_OK)
        return -1;
    const char *colon = strrchr(line, ':');
    *http_port_p = colon != NULL ? (unsigned)atoi(colon + 1) : 0;
    return *http_port_p > 0 ? 0 : -1;
}

int egm_test_start_master_http(egm_test_cluster_t *cluster, const char *const *extra,
                               unsigned *http_port_p)
{
    const char *flags[32];
    http_flags(flags, 32, extra);
    *http_port_p = 0;
    if (egm_test_start_master(cluster, flags) != 0)
        return -1;
    return read_http_port(cluster, http_port_p);
}

int egm_test_start_master_http_on(egm_test_cluster_t *cluster, unsigned port,
                                  const char *const *extra, unsigned *http_port_p)
{
    const char *flags[32];
    http_flags(flags, 32, extra);
    *http_port_p = 0;
    if (egm_test_start_master_on(cluster, port, flags) != 0)
        return -1;
    return read_http_port(cluster, http_port_p);
}
