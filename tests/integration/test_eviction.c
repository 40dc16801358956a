/* Integration: a real master and one small provider (16 MiB) as processes.
 *
 * - A put that answers OK stays readable: with a residency longer than the
 *   test, a put as big as the pool and the puts of a burst beyond its
 *   capacity answer NO_SPACE instead of evicting what was just stored, and
 *   every key that answered OK reads back byte for byte after the master's
 *   eviction pass has run (seen in /metrics).
 * - Churn still works: with a short residency, filling the pool far beyond
 *   its capacity keeps succeeding (a NO_SPACE while every object is young is
 *   retried, bounded) because the master evicts the least recently used
 *   objects; objects under a live read lease and hard-pinned ones survive.
 * No timing assertions: waits are bounded polls, the held leases are
 * refreshed (ExistKey) on every round. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "support/cluster.h"
#include "support/http_get.h"

#define OBJ_LEN (1u << 20)
#define POOL "16MiB"
#define POOL_OBJECTS 16
#define N_LEASED 4
#define N_FILL 40 /* 40 MiB through a 16 MiB pool */
#define N_BURST 24
#define N_EARLY 4
#define WAIT_STEP_US 20000u
#define WAIT_STEPS 1500 /* 30 s: a bound, not an expectation */
#define IO_TIMEOUT_MS 10000
#define BODY_MAX (256 * 1024)

static egm_test_cluster_t cluster;
static unsigned http_port;

/* "egmstore master admin http on ADDR:PORT" follows the ready line. */
static unsigned read_admin_port(void)
{
    char line[256];
    if (egm__process_wait_line(&cluster.master, "egmstore master admin http ", line, sizeof(line),
                               IO_TIMEOUT_MS) != EGM_OK)
        return 0;
    const char *colon = strrchr(line, ':');
    return colon != NULL ? (unsigned)strtoul(colon + 1, NULL, 10) : 0;
}

static int start(const char *residency_ms)
{
    /* A long lease, so that one refresh per round is plenty however slow the machine. */
    const char *master_flags[] = {"--default-kv-lease-ttl",
                                  "60000",
                                  "--eviction-min-residency-ms",
                                  residency_ms,
                                  "--http-port",
                                  "0",
                                  NULL};
    if (egm_test_start_master(&cluster, master_flags) != 0)
        return -1;
    http_port = read_admin_port();
    if (http_port == 0 || egm_test_start_provider(&cluster, POOL, NULL) < 0)
        return -1;
    return 0;
}

static int setup_long_residency(void **state)
{
    (void)state;
    return start("600000"); /* longer than the test */
}

static int setup_short_residency(void **state)
{
    (void)state;
    return start("200");
}

static int teardown(void **state)
{
    (void)state;
    egm_test_cluster_stop(&cluster);
    return 0;
}

/* A counter of the master's /metrics; fails the test when it cannot be read. */
static uint64_t master_metric(const char *name)
{
    static char body[BODY_MAX];
    char pattern[128];
    assert_int_equal(egm_test_http_get(http_port, "/metrics", body, sizeof(body)), 200);
    snprintf(pattern, sizeof(pattern), "\n%s ", name);
    const char *at = strstr(body, pattern);
    if (at == NULL)
        fail_msg("/metrics has no %s", name);
    return strtoull(at + strlen(pattern), NULL, 10);
}

static void expect_object(egm_client_t *client, const char *key, unsigned seed, unsigned char *want)
{
    void *got = NULL;
    size_t len = 0;
    egm_test_fill(want, OBJ_LEN, seed);
    egm_status_t status = egm_get(client, key, &got, &len);
    if (status != EGM_OK)
        fail_msg("get %s: %s (%s)", key, egm_status_string(status), egm_last_error());
    assert_int_equal(len, OBJ_LEN);
    assert_memory_equal(got, want, OBJ_LEN);
    egm_buffer_free(got);
}

static void test_ok_means_readable(void **state)
{
    (void)state;
    egm_client_t *client = egm_test_client(&cluster, "auto", NULL);
    assert_non_null(client);
    unsigned char *data = malloc(POOL_OBJECTS * OBJ_LEN);
    assert_non_null(data);
    char key[64];

    for (unsigned i = 0; i < N_EARLY; i++) {
        snprintf(key, sizeof(key), "early/%u", i);
        egm_test_fill(data, OBJ_LEN, 200 + i);
        assert_int_equal(egm_put(client, key, data, OBJ_LEN, NULL), EGM_OK);
    }
    /* As big as the pool (issue 15: it said "stored", evicted every earlier
     * key, and was itself evicted within a second). */
    egm_test_fill(data, POOL_OBJECTS * OBJ_LEN, 7);
    assert_int_equal(egm_put(client, "whole", data, POOL_OBJECTS * OBJ_LEN, NULL),
                     EGM_ERR_NO_SPACE);
    /* The master's reason reaches the caller, not only the status's name. */
    if (strstr(egm_last_error(), "eviction_high_watermark_ratio") == NULL)
        fail_msg("put whole: %s", egm_last_error());
    assert_int_equal(egm_exist(client, "whole"), EGM_ERR_NOT_FOUND);

    /* A burst beyond the capacity: each put is stored or refused. */
    int ok[N_BURST], n_ok = 0, n_no_space = 0;
    for (unsigned i = 0; i < N_BURST; i++) {
        snprintf(key, sizeof(key), "burst/%u", i);
        egm_test_fill(data, OBJ_LEN, i);
        egm_status_t status = egm_put(client, key, data, OBJ_LEN, NULL);
        ok[i] = status == EGM_OK;
        n_ok += ok[i];
        n_no_space += status == EGM_ERR_NO_SPACE;
        if (status == EGM_ERR_NO_SPACE && strstr(egm_last_error(), "residency") == NULL)
            fail_msg("put %s: NO_SPACE without the master's reason: %s", key, egm_last_error());
        if (status != EGM_OK && status != EGM_ERR_NO_SPACE)
            fail_msg("put %s: %s (%s)", key, egm_status_string(status), egm_last_error());
    }
    assert_true(n_ok > 0 && n_no_space > 0);
    assert_true(n_ok <= POOL_OBJECTS - N_EARLY);

    /* The pool is above the watermark: wait (bounded) until the master's
     * eviction pass has run at least once more. */
    uint64_t runs = master_metric("egm_master_eviction_runs_total");
    int waited = 0;
    while (master_metric("egm_master_eviction_runs_total") == runs && waited++ < WAIT_STEPS)
        usleep(WAIT_STEP_US);
    assert_true(waited < WAIT_STEPS);
    assert_true(master_metric("egm_master_puts_no_space_total") >= (uint64_t)n_no_space + 1);

    /* Everything that answered OK is still there, byte for byte. */
    for (unsigned i = 0; i < N_EARLY; i++) {
        snprintf(key, sizeof(key), "early/%u", i);
        expect_object(client, key, 200 + i, data);
    }
    for (unsigned i = 0; i < N_BURST; i++) {
        snprintf(key, sizeof(key), "burst/%u", i);
        if (ok[i])
            expect_object(client, key, i, data);
        else
            assert_int_equal(egm_exist(client, key), EGM_ERR_NOT_FOUND);
    }
    free(data);
    egm_client_destroy(client);
}

/* Puts, retrying a NO_SPACE (every evictable object still young) a bounded
 * number of times. */
static egm_status_t put_retrying(egm_client_t *client, const char *key, const void *data)
{
    egm_status_t status = EGM_ERR_NO_SPACE;
    for (int i = 0; i < WAIT_STEPS && status == EGM_ERR_NO_SPACE; i++) {
        if (i > 0)
            usleep(WAIT_STEP_US);
        status = egm_put(client, key, data, OBJ_LEN, NULL);
    }
    return status;
}

static void test_churn_keeps_accepting(void **state)
{
    (void)state;
    egm_client_t *client = egm_test_client(&cluster, "auto", NULL);
    assert_non_null(client);
    unsigned char *data = malloc(OBJ_LEN);
    assert_non_null(data);
    char key[64];

    /* Objects read once (leased) and one hard-pinned object. */
    for (unsigned i = 0; i < N_LEASED; i++) {
        snprintf(key, sizeof(key), "leased/%u", i);
        egm_test_fill(data, OBJ_LEN, 100 + i);
        assert_int_equal(egm_put(client, key, data, OBJ_LEN, NULL), EGM_OK);
        expect_object(client, key, 100 + i, data);
    }
    egm_replicate_config_t pin = {.replica_num = 1, .with_hard_pin = 1};
    egm_test_fill(data, OBJ_LEN, 99);
    assert_int_equal(egm_put(client, "pinned", data, OBJ_LEN, &pin), EGM_OK);

    for (unsigned i = 0; i < N_FILL; i++) {
        for (unsigned j = 0; j < N_LEASED; j++) {
            snprintf(key, sizeof(key), "leased/%u", j);
            assert_int_equal(egm_exist(client, key), EGM_OK); /* refreshes the lease */
        }
        snprintf(key, sizeof(key), "fill/%u", i);
        egm_test_fill(data, OBJ_LEN, i);
        egm_status_t status = put_retrying(client, key, data);
        if (status != EGM_OK)
            fail_msg("put %s: %s (%s)", key, egm_status_string(status), egm_last_error());
    }

    /* The first fill objects made way; the latest is there and intact. */
    assert_true(master_metric("egm_master_evictions_total") >= N_FILL - (POOL_OBJECTS - 5));
    assert_int_equal(egm_exist(client, "fill/0"), EGM_ERR_NOT_FOUND);
    snprintf(key, sizeof(key), "fill/%u", N_FILL - 1);
    expect_object(client, key, N_FILL - 1, data);
    unsigned present = 0;
    for (unsigned i = 0; i < N_FILL; i++) {
        snprintf(key, sizeof(key), "fill/%u", i);
        present += egm_exist(client, key) == EGM_OK;
    }
    assert_true(present >= 1 && present <= POOL_OBJECTS - N_LEASED - 1);

    /* Leased and pinned objects survived, byte for byte. */
    for (unsigned i = 0; i < N_LEASED; i++) {
        snprintf(key, sizeof(key), "leased/%u", i);
        expect_object(client, key, 100 + i, data);
    }
    expect_object(client, "pinned", 99, data);

    free(data);
    egm_client_destroy(client);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_ok_means_readable, setup_long_residency, teardown),
        cmocka_unit_test_setup_teardown(test_churn_keeps_accepting, setup_short_residency,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
