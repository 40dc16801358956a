/* Integration: a real master serving on 4 RPC threads (rpc_threads = 4) and
 * one provider, used at once by several client processes and threads: an
 * `egmstore bench meta` process (4 then 8 client threads, each with its own
 * connection, against fake segments it mounts and unmounts), CLI processes
 * (`exist`, `ls`) from two threads, and 6 library clients in this process
 * that put real objects, read every client's objects back byte for byte, and
 * remove their own. (One bench only: a bench's objects may be placed on
 * another bench's fake segments, which that one's end unmounts.) Every call
 * must succeed or answer what the protocol says; the master must then stop
 * cleanly on SIGTERM (exit 0: under TSan a race report makes it exit 66). No
 * timing assertion: the phases are ordered by barriers, every wait is
 * bounded. */
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "common/process.h"
#include "common/sock.h"
#include "support/cluster.h"
#include "support/http_get.h"

#define LIB_CLIENTS 6
#define OBJECTS 12 /* per library client */
#define OBJ_LEN (48 * 1024 + 5)
#define CLI_THREADS 2
#define WORKERS (LIB_CLIENTS + CLI_THREADS)
#define IO_TIMEOUT_MS 10000

static egm_test_cluster_t cluster;
static unsigned http_port;
static char preferred[160]; /* the provider's pool: "host:pid" names its chunks */
static pthread_barrier_t phase;

typedef struct {
    int id;
    char error[512];
} lib_worker_t;

#define FAIL(w, ...)                                                                               \
    do {                                                                                           \
        if ((w)->error[0] == '\0')                                                                 \
            snprintf((w)->error, sizeof((w)->error), __VA_ARGS__);                                 \
    } while (0)

static int setup(void **state)
{
    (void)state;
    /* A lease far longer than the test: a Remove after a read answers
     * HAS_LEASE however slow the machine (sanitizers). */
    const char *flags[] = {"--rpc-threads",          "4",      "--http-port", "0",
                           "--default-kv-lease-ttl", "600000", NULL};
    char line[256];
    if (egm_test_start_master(&cluster, flags) != 0)
        return -1;
    if (egm__process_wait_line(&cluster.master, "egmstore master admin http ", line, sizeof(line),
                               IO_TIMEOUT_MS) != EGM_OK)
        return -1;
    const char *colon = strrchr(line, ':');
    http_port = colon != NULL ? (unsigned)strtoul(colon + 1, NULL, 10) : 0;
    if (http_port == 0 || egm_test_start_provider(&cluster, "64MiB", NULL) < 0)
        return -1;
    snprintf(preferred, sizeof(preferred), "%s:%d", egm__host_name(),
             (int)cluster.providers[0].pid);
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    egm_test_cluster_stop(&cluster);
    return 0;
}

static void key_of(char *buf, size_t size, int client, int i)
{
    snprintf(buf, size, "threads/%d/%d", client, i);
}

/* Puts its objects (on the provider: the benches' fake segments hold no
 * data), reads everyone's, removes its own. */
static void *lib_main(void *arg)
{
    lib_worker_t *w = arg;
    const char *prefs[] = {preferred};
    egm_replicate_config_t rc = {
        .replica_num = 1, .preferred_segments = prefs, .preferred_segments_count = 1};
    unsigned char *data = malloc(OBJ_LEN);
    char key[64];
    /* Slabs small enough that all six fit on the provider's 64 MiB: a preference is best
     * effort, and a slab the provider cannot hold would go to a fake segment (which holds
     * no data) once the bench has mounted its 512 MiB, whose 1/16 would be a slab's size. */
    const char *pairs[] = {"slab_bytes=1MiB", NULL};
    egm_client_t *client = egm_test_client(&cluster, w->id % 2 ? "tcp" : "auto", pairs);

    if (client == NULL || data == NULL)
        FAIL(w, "client %d: cannot create it", w->id);
    for (int i = 0; client != NULL && data != NULL && i < OBJECTS && !w->error[0]; i++) {
        key_of(key, sizeof(key), w->id, i);
        egm_test_fill(data, OBJ_LEN, (unsigned)(w->id * 100 + i));
        egm_status_t s = egm_put(client, key, data, OBJ_LEN, &rc);
        if (s != EGM_OK)
            FAIL(w, "put %s: %s (%s)", key, egm_status_string(s), egm_last_error());
    }
    pthread_barrier_wait(&phase); /* every object is in */
    for (int c = 0; client != NULL && data != NULL && c < LIB_CLIENTS && !w->error[0]; c++) {
        for (int i = 0; i < OBJECTS && !w->error[0]; i++) {
            void *got = NULL;
            size_t len = 0;
            key_of(key, sizeof(key), c, i);
            egm_status_t s = egm_get(client, key, &got, &len);
            egm_test_fill(data, OBJ_LEN, (unsigned)(c * 100 + i));
            if (s != EGM_OK)
                FAIL(w, "get %s: %s (%s)", key, egm_status_string(s), egm_last_error());
            else if (len != OBJ_LEN || memcmp(got, data, OBJ_LEN) != 0)
                FAIL(w, "get %s: %zu bytes, not the ones put", key, len);
            egm_buffer_free(got);
            if (!w->error[0] && (s = egm_exist(client, key)) != EGM_OK)
                FAIL(w, "exist %s: %s", key, egm_status_string(s));
        }
    }
    pthread_barrier_wait(&phase); /* every object was read: every one is leased */
    for (int i = 0; client != NULL && i < OBJECTS && !w->error[0]; i++) {
        key_of(key, sizeof(key), w->id, i);
        egm_status_t s = egm_remove(client, key, 0);
        if (s != EGM_ERR_HAS_LEASE)
            FAIL(w, "remove %s (leased): %s, not HAS_LEASE", key, egm_status_string(s));
        else if ((s = egm_remove(client, key, 1)) != EGM_OK)
            FAIL(w, "remove %s (forced): %s", key, egm_status_string(s));
        else if ((s = egm_exist(client, key)) != EGM_ERR_NOT_FOUND)
            FAIL(w, "exist %s after remove: %s", key, egm_status_string(s));
    }
    egm_client_destroy(client);
    free(data);
    return NULL;
}

/* CLI processes meanwhile: metadata reads of a client's keys and the segments. */
static void *cli_main(void *arg)
{
    lib_worker_t *w = arg;
    char out[8192];
    pthread_barrier_wait(&phase);
    for (int i = 0; i < 3 && !w->error[0]; i++) {
        char key[64];
        key_of(key, sizeof(key), (w->id + i) % LIB_CLIENTS, i);
        const char *exist[] = {"exist", key, NULL};
        const char *ls[] = {"ls", NULL};
        int rc = egm_test_cli(&cluster, exist, NULL, 0, out, sizeof(out));
        if (rc != 0)
            FAIL(w, "egmstore exist %s: exit %d: %.300s", key, rc, out);
        else if ((rc = egm_test_cli(&cluster, ls, NULL, 0, out, sizeof(out))) != 0)
            FAIL(w, "egmstore ls: exit %d: %.300s", rc, out);
    }
    pthread_barrier_wait(&phase);
    return NULL;
}

static uint64_t metric(const char *body, const char *name)
{
    char pattern[128];
    snprintf(pattern, sizeof(pattern), "\n%s ", name);
    const char *p = strstr(body, pattern);
    return p != NULL ? strtoull(p + strlen(pattern), NULL, 10) : UINT64_MAX;
}

static void test_clients_on_four_rpc_threads(void **state)
{
    (void)state;
    egm_process_t bench;
    lib_worker_t workers[WORKERS];
    pthread_t threads[WORKERS];

    /* The bench: 4, then 8 threads, each with its own connection, for as
     * long as it takes; it exits 1 on any failed call. Its output goes to
     * this test's (not captured: nothing to drain). */
    const char *argv[] = {egm_test_bin(),
                          "bench",
                          "meta",
                          "--master",
                          cluster.master_addr,
                          "--clients",
                          "4,8",
                          "--ops",
                          "1500",
                          "--keys",
                          "128",
                          "--batch",
                          "16",
                          "--segments",
                          "2",
                          "--segment-size",
                          "256MiB",
                          NULL};
    assert_int_equal(egm__process_spawn((char *const *)argv, EGM_PROCESS_STDOUT_INHERIT, &bench),
                     EGM_OK);

    assert_int_equal(pthread_barrier_init(&phase, NULL, WORKERS), 0);
    memset(workers, 0, sizeof(workers));
    for (int i = 0; i < WORKERS; i++) {
        workers[i].id = i;
        assert_int_equal(
            pthread_create(&threads[i], NULL, i < LIB_CLIENTS ? lib_main : cli_main, &workers[i]),
            0);
    }
    for (int i = 0; i < WORKERS; i++)
        assert_int_equal(pthread_join(threads[i], NULL), 0);
    pthread_barrier_destroy(&phase);
    int code = -1;
    egm_status_t waited = egm__process_wait(&bench, 300000, &code);
    egm__process_cleanup(&bench);
    for (int i = 0; i < WORKERS; i++)
        if (workers[i].error[0] != '\0')
            fail_msg("worker %d: %s", i, workers[i].error);
    assert_int_equal(waited, EGM_OK);
    assert_int_equal(code, 0);

    /* Connections from every thread were counted, and are closed again
     * (the provider's own stays: at least one, fewer than the bench's). */
    char *body = malloc(256 * 1024);
    assert_non_null(body);
    assert_int_equal(egm_test_http_get(http_port, "/metrics", body, 256 * 1024), 200);
    uint64_t accepted = metric(body, "egm_master_rpc_connections_accepted_total");
    uint64_t open = metric(body, "egm_master_rpc_connections");
    free(body);
    assert_true(accepted != UINT64_MAX && accepted >= 4 + 8 + LIB_CLIENTS);
    assert_true(open != UINT64_MAX && open >= 1 && open < 8);

    /* A clean stop: every RPC thread joins, and the process exits 0. */
    code = -1;
    assert_int_equal(egm__process_signal(&cluster.master, SIGTERM), EGM_OK);
    assert_int_equal(egm__process_wait(&cluster.master, 30000, &code), EGM_OK);
    assert_int_equal(code, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clients_on_four_rpc_threads),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
