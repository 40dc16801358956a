/* Integration: the master restarts under running clients and providers (real
 * processes on loopback; issue 6 "Liveness and identity").
 * - host pool: a provider's segments are remounted at a new master on the same
 *   port under new ids; old keys answer NOT_FOUND; new objects go in and out
 *   byte for byte over shm and tcp; a library client that had mapped the old
 *   segments drops those mappings and keeps working; health goes
 *   master_unreachable, then healthy; the provider's metrics count the event;
 * - a new master that refuses the remount (frames too small for the mount
 *   request): the provider keeps retrying, stays alive and master_unreachable,
 *   and remounts once a working master is back;
 * - EGM pool on the fake CUDA driver: the same remount, then a clean teardown
 *   that leaves no CUDA object. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "client/client_int.h"
#include "common/alloc.h"
#include "common/clock.h"
#include "common/process.h"
#include "rpc/proto_util.h"
#include "support/cluster.h"
#include "support/fake_env.h"
#include "support/http_get.h"
#include "support/testutil.h"

#define WAIT_MS 30000
#define POLL_US 50000
#define NSEG 16 /* the host provider: 8 MiB in 512 KiB chunks */

static egm_test_cluster_t cluster;
static const char *const fast_ping[] = {"ping_interval_ms=100", NULL};

/* Waits (bounded) until the master lists `want` segments. */
static int wait_segments(size_t want)
{
    uint64_t deadline = egm__now_ms() + WAIT_MS;
    while (egm__now_ms() < deadline) {
        if (egm_test_cluster_segments(&cluster) == want)
            return 1;
        usleep(POLL_US);
    }
    return 0;
}

static int wait_health(egm_client_t *client, egm_health_t want)
{
    uint64_t deadline = egm__now_ms() + WAIT_MS;
    while (egm__now_ms() < deadline) {
        if (egm_client_health(client) == want)
            return 1;
        usleep(POLL_US);
    }
    return 0;
}

/* Waits until the provider's /health body contains `want`. */
static int wait_provider_health(unsigned port, const char *want)
{
    static char body[4096];
    uint64_t deadline = egm__now_ms() + WAIT_MS;
    while (egm__now_ms() < deadline) {
        if (egm_test_http_get(port, "/health", body, sizeof(body)) > 0 && strstr(body, want))
            return 1;
        usleep(POLL_US);
    }
    return 0;
}

static void kill_master(void)
{
    int code = 0;
    assert_int_equal(egm__process_signal(&cluster.master, SIGKILL), EGM_OK);
    assert_int_equal(egm__process_wait(&cluster.master, 10000, &code), EGM_OK);
    assert_int_equal(code, 128 + SIGKILL);
}

static void restart_master(const char *const *extra)
{
    unsigned port = cluster.master_port;
    assert_int_equal(egm_test_start_master_on(&cluster, port, extra), 0);
    assert_int_equal(cluster.master_port, port);
}

/* Segment ids the master lists now, through `client`. */
static size_t segment_ids(egm_client_t *client, egm_id_t *ids, size_t max)
{
    Egm__ListSegmentsReply *reply = NULL;
    assert_int_equal(egm__client_list_segments(client, &reply), EGM_OK);
    size_t n = 0;
    for (size_t i = 0; i < reply->n_segments && n < max; i++)
        ids[n++] = egm__id_from_pb(reply->segments[i]->desc->id);
    egm__rpc_msg_free(&reply->base);
    return n;
}

static uint64_t mappings_live(egm_client_t *client)
{
    egm_te_stats_t stats;
    egm__te_stats(client->te, &stats);
    return stats.mappings_live;
}

static int provider_alive(int i)
{
    return waitpid(cluster.providers[i].pid, NULL, WNOHANG) == 0;
}

/* Puts through `writer`, reads back through `reader`, byte for byte. */
static void put_get(egm_client_t *writer, egm_client_t *reader, const char *key, size_t len,
                    unsigned seed)
{
    unsigned char *data = malloc(len);
    void *back = NULL;
    size_t got = 0;
    assert_non_null(data);
    egm_test_fill(data, len, seed);
    assert_int_equal(egm_put(writer, key, data, len, NULL), EGM_OK);
    assert_int_equal(egm_get(reader, key, &back, &got), EGM_OK);
    assert_int_equal(got, len);
    assert_memory_equal(back, data, len);
    egm_buffer_free(back);
    free(data);
}

/* This process's stderr goes to a file until capture_stderr_end reads it back
 * (the library clients' log lines; a child spawned meanwhile inherits it). */
static void capture_stderr_begin(int *saved, char *path, size_t len)
{
    snprintf(path, len, "/tmp/egm-restart-log-%d", (int)getpid());
    fflush(stderr);
    *saved = dup(STDERR_FILENO);
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    dup2(fileno(f), STDERR_FILENO);
    fclose(f);
}

static void capture_stderr_end(int saved, const char *path, char *text, size_t len)
{
    fflush(stderr);
    dup2(saved, STDERR_FILENO);
    close(saved);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    size_t n = fread(text, 1, len - 1, f);
    text[n] = '\0';
    fclose(f);
    unlink(path);
}

static void test_host_pool_restart(void **state)
{
    (void)state;
    static char log_text[65536];
    uint64_t live_before = egm__alloc_live_count();
    /* 16 segments: a mount request of all of them exceeds 1 KiB (below). */
    const char *flags[] = {
        "--max-mr-size", "512KiB", "--ping-interval-ms", "100", "--provider-http-port", "0", NULL};
    int p = egm_test_start_provider(&cluster, "8MiB", flags);
    assert_true(p >= 0);
    unsigned http = egm_test_ready_http_port(cluster.provider_ready[p]);
    assert_true(http > 0);
    assert_true(wait_segments(NSEG));
    assert_true(wait_provider_health(http, "\"healthy\""));

    egm_client_t *shm = egm_test_client(&cluster, "shm", fast_ping);
    egm_client_t *tcp = egm_test_client(&cluster, "tcp", fast_ping);
    assert_non_null(shm);
    assert_non_null(tcp);
    egm_id_t old_ids[NSEG];
    assert_int_equal(segment_ids(shm, old_ids, NSEG), NSEG);

    /* Objects before the restart; the shm client maps the provider's segment. */
    put_get(tcp, shm, "before/a", 100 * 1024 + 3, 1);
    put_get(shm, tcp, "before/b", 4096, 2);
    assert_true(mappings_live(shm) >= 1);

    kill_master();
    assert_true(wait_health(shm, EGM_HEALTH_MASTER_UNREACHABLE));
    assert_true(wait_provider_health(http, "\"master_unreachable\""));
    void *data = NULL;
    size_t len = 0;
    assert_int_not_equal(egm_get(shm, "before/a", &data, &len), EGM_OK);

    int saved;
    char path[64];
    capture_stderr_begin(&saved, path, sizeof(path));
    restart_master(NULL);
    int remounted = wait_segments(NSEG);
    int healthy = wait_health(shm, EGM_HEALTH_HEALTHY) && wait_health(tcp, EGM_HEALTH_HEALTHY);
    capture_stderr_end(saved, path, log_text, sizeof(log_text));
    fputs(log_text, stderr);
    assert_true(remounted);
    assert_true(healthy);
    assert_true(wait_provider_health(http, "\"healthy\""));

    /* One line per client for the event; the shm client dropped its mapping
     * of the old segment (it holds none until its next Get). */
    const char *line = strstr(log_text, "master restarted (id ");
    assert_non_null(line);
    assert_non_null(strstr(line, "): remounted 0 segments; dropped "));
    assert_int_equal(mappings_live(shm), 0);

    /* New ids: none of the old master's comes back. */
    egm_id_t new_ids[NSEG];
    assert_int_equal(segment_ids(shm, new_ids, NSEG), NSEG);
    for (int i = 0; i < NSEG; i++)
        for (int k = 0; k < NSEG; k++)
            assert_false(egm__id_equal(new_ids[i], old_ids[k]));

    /* The new master knows no old key. */
    assert_int_equal(egm_get(shm, "before/a", &data, &len), EGM_ERR_NOT_FOUND);
    assert_int_equal(egm_get(tcp, "before/b", &data, &len), EGM_ERR_NOT_FOUND);
    assert_int_equal(egm_exist(tcp, "before/a"), EGM_ERR_NOT_FOUND);

    /* New objects, byte for byte, both ways and both transports. */
    put_get(tcp, shm, "after/a", 100 * 1024 + 3, 3);
    put_get(shm, tcp, "after/b", 400 * 1024, 4);
    put_get(shm, shm, "after/c", 17, 5);
    put_get(tcp, tcp, "after/d", 65536, 6);
    assert_true(mappings_live(shm) >= 1);
    /* And from a separate process. */
    static char out[4096];
    const char *get[] = {"get", "after/c", "-", "--log-level", "error", NULL};
    assert_int_equal(egm_test_cli(&cluster, get, NULL, 0, out, sizeof(out)), 0);
    assert_int_equal(strlen(out), 17);

    assert_true(egm_test_metric(http, "egm_client_master_restarts_total") == 1);
    assert_true(egm_test_metric(http, "egm_client_remounted_segments_total") == NSEG);
    assert_true(egm_test_metric(http, "egm_client_remount_pending") == 0);
    assert_true(egm_test_metric(http, "egm_client_health") == 0);

    /* A new master that refuses the remount: mount requests exceed its
     * max_frame_size. The provider retries every ping, stays up, keeps its
     * memory and reports master_unreachable. */
    kill_master();
    const char *tiny[] = {"--max-frame-size", "1KiB", NULL};
    restart_master(tiny);
    uint64_t deadline = egm__now_ms() + WAIT_MS;
    while (egm__now_ms() < deadline &&
           egm_test_metric(http, "egm_client_remount_failures_total") < 3)
        usleep(POLL_US);
    assert_true(egm_test_metric(http, "egm_client_remount_failures_total") >= 3);
    assert_true(egm_test_metric(http, "egm_client_remount_pending") == 1);
    assert_true(wait_provider_health(http, "\"master_unreachable\""));
    assert_int_equal(egm_test_cluster_segments(&cluster), 0);
    assert_true(provider_alive(p));
    /* The consumers have nothing to remount: healthy with the new master. */
    assert_true(wait_health(tcp, EGM_HEALTH_HEALTHY));

    /* A working master again: remounted, and the memory still serves. */
    kill_master();
    restart_master(NULL);
    assert_true(wait_segments(NSEG));
    assert_true(wait_provider_health(http, "\"healthy\""));
    assert_true(wait_health(shm, EGM_HEALTH_HEALTHY));
    assert_true(egm_test_metric(http, "egm_client_master_restarts_total") == 3);
    assert_true(egm_test_metric(http, "egm_client_remounted_segments_total") == 2 * NSEG);
    assert_int_equal(egm_get(tcp, "after/a", &data, &len), EGM_ERR_NOT_FOUND);
    put_get(tcp, shm, "again/a", 300 * 1024, 7);
    put_get(shm, tcp, "again/b", 4097, 8);

    egm_client_destroy(shm);
    egm_client_destroy(tcp);
    assert_int_equal(egm__alloc_live_count(), live_before);
    /* The provider stops cleanly: its current segments leave the master. */
    int code = -1;
    assert_int_equal(egm__process_signal(&cluster.providers[p], SIGTERM), EGM_OK);
    assert_int_equal(egm__process_wait(&cluster.providers[p], 30000, &code), EGM_OK);
    assert_int_equal(code, 0);
    assert_int_equal(egm_test_cluster_segments(&cluster), 0);
}

/* The same master expires a provider that stopped pinging (SIGSTOP longer
 * than client_ttl): once it runs again, it sees its own segment ids retired
 * and remounts them under new ids. */
static void test_expiry_remount(void **state)
{
    (void)state;
    uint64_t live_before = egm__alloc_live_count();
    kill_master();
    const char *ttl[] = {"--client-ttl", "1", NULL};
    restart_master(ttl);
    const char *flags[] = {"--max-mr-size", "1MiB", "--ping-interval-ms", "100", NULL};
    int p = egm_test_start_provider(&cluster, "4MiB", flags);
    assert_true(p >= 0);
    assert_true(wait_segments(4));
    egm_client_t *tcp = egm_test_client(&cluster, "tcp", fast_ping);
    assert_non_null(tcp);
    egm_id_t old_ids[4];
    assert_int_equal(segment_ids(tcp, old_ids, 4), 4);
    put_get(tcp, tcp, "ttl/a", 1000, 9);

    assert_int_equal(egm__process_signal(&cluster.providers[p], SIGSTOP), EGM_OK);
    int expired = wait_segments(0); /* the master's tick expires it within ~2 s */
    assert_int_equal(egm__process_signal(&cluster.providers[p], SIGCONT), EGM_OK);
    assert_true(expired);
    void *data = NULL;
    size_t len = 0;
    assert_int_equal(egm_get(tcp, "ttl/a", &data, &len), EGM_ERR_NOT_FOUND);

    assert_true(wait_segments(4));
    egm_id_t new_ids[4];
    assert_int_equal(segment_ids(tcp, new_ids, 4), 4);
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 4; k++)
            assert_false(egm__id_equal(new_ids[i], old_ids[k]));
    put_get(tcp, tcp, "ttl/b", 300 * 1024, 10);
    egm_client_destroy(tcp);
    assert_int_equal(egm__alloc_live_count(), live_before);

    int code = -1;
    assert_int_equal(egm__process_signal(&cluster.providers[p], SIGTERM), EGM_OK);
    assert_int_equal(egm__process_wait(&cluster.providers[p], 30000, &code), EGM_OK);
    assert_int_equal(code, 0);
    assert_int_equal(egm_test_cluster_segments(&cluster), 0);
}

static void test_egm_pool_restart(void **state)
{
    (void)state;
    char report_dir[64];
    int rc = egm_test_fake_env("test_master_restart", report_dir, sizeof(report_dir));
    if (rc != 0) {
        assert_int_equal(rc, 77);
        EGM_SKIP("no fake CUDA driver (EGM_FAKE_CUDA_DIR)");
    }
    setenv("EGM_FAKE_CUDA_DEVICES", "4", 1);
    setenv("EGM_FAKE_CUDA_NUMA_NODES", "2", 1);
    const char *flags[] = {"--enable-egm-store-pool",
                           "true",
                           "--max-mr-size",
                           "4MiB",
                           "--ping-interval-ms",
                           "100",
                           "--provider-http-port",
                           "0",
                           NULL};
    int p = egm_test_start_provider(&cluster, "24MiB", flags);
    assert_true(p >= 0);
    assert_non_null(strstr(cluster.provider_ready[p], "6 segments, 24.0 MiB EGM pool"));
    unsigned http = egm_test_ready_http_port(cluster.provider_ready[p]);
    assert_true(wait_segments(6));

    static char out[4096];
    const char *put[] = {"put", "egm/old", "-", NULL};
    assert_int_equal(egm_test_cli(&cluster, put, "payload", 7, out, sizeof(out)), 0);

    kill_master();
    assert_true(wait_provider_health(http, "\"master_unreachable\""));
    restart_master(NULL);
    assert_true(wait_segments(6));
    assert_true(wait_provider_health(http, "\"healthy\""));
    assert_true(egm_test_metric(http, "egm_client_remounted_segments_total") == 6);

    const char *get_old[] = {"get", "egm/old", "-", "--log-level", "error", NULL};
    assert_int_not_equal(egm_test_cli(&cluster, get_old, NULL, 0, out, sizeof(out)), 0);
    const char *put_new[] = {"put", "egm/new", "-", NULL};
    assert_int_equal(egm_test_cli(&cluster, put_new, "fresh bytes", 11, out, sizeof(out)), 0);
    const char *get_new[] = {"get", "egm/new", "-", "--log-level", "error", NULL};
    assert_int_equal(egm_test_cli(&cluster, get_new, NULL, 0, out, sizeof(out)), 0);
    assert_string_equal(out, "fresh bytes");

    /* Teardown after a remount leaves no CUDA object behind. */
    pid_t pid = cluster.providers[p].pid;
    int code = -1;
    assert_int_equal(egm__process_signal(&cluster.providers[p], SIGTERM), EGM_OK);
    assert_int_equal(egm__process_wait(&cluster.providers[p], 30000, &code), EGM_OK);
    assert_int_equal(code, 0);
    assert_int_equal(egm_test_cluster_segments(&cluster), 0);
    char report[128];
    snprintf(report, sizeof(report), "%s/report-%d", report_dir, (int)pid);
    const char *problem = egm_test_fake_report_problem(report);
    if (problem != NULL)
        fail_msg("%s", problem);
}

static int group_setup(void **state)
{
    (void)state;
    return egm_test_start_master(&cluster, NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    egm_test_cluster_stop(&cluster);
    return 0;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_host_pool_restart),
        cmocka_unit_test(test_expiry_remount),
        cmocka_unit_test(test_egm_pool_restart),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
