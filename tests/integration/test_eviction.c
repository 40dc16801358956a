/* Integration: a real master and one small provider as processes. Filling the
 * pool far beyond its capacity keeps succeeding because the master evicts the
 * least recently used objects; objects under a live read lease and
 * hard-pinned ones survive and read back byte for byte. No timing
 * assertions: the held leases are refreshed (ExistKey) on every round. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "support/cluster.h"

#define OBJ_LEN (1u << 20)
#define N_LEASED 4
#define N_FILL 40 /* 40 MiB through a 16 MiB pool */

static egm_test_cluster_t cluster;

static int setup(void **state)
{
    (void)state;
    /* A long lease, so that one refresh per round is plenty however slow the machine. */
    const char *master_flags[] = {"--default-kv-lease-ttl", "60000", NULL};
    if (egm_test_start_master(&cluster, master_flags) != 0)
        return -1;
    if (egm_test_start_provider(&cluster, "16MiB", NULL) < 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    egm_test_cluster_stop(&cluster);
    return 0;
}

static void expect_object(egm_client_t *client, const char *key, unsigned seed, unsigned char *want)
{
    void *got = NULL;
    size_t len = 0;
    egm_test_fill(want, OBJ_LEN, seed);
    assert_int_equal(egm_get(client, key, &got, &len), EGM_OK);
    assert_int_equal(len, OBJ_LEN);
    assert_memory_equal(got, want, OBJ_LEN);
    egm_buffer_free(got);
}

static void test_fill_beyond_capacity(void **state)
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
        egm_status_t status = egm_put(client, key, data, OBJ_LEN, NULL);
        if (status != EGM_OK)
            fail_msg("put %s: %s (%s)", key, egm_status_string(status), egm_last_error());
    }

    /* The first fill objects made way; the latest is there and intact. */
    assert_int_equal(egm_exist(client, "fill/0"), EGM_ERR_NOT_FOUND);
    snprintf(key, sizeof(key), "fill/%u", N_FILL - 1);
    expect_object(client, key, N_FILL - 1, data);
    unsigned present = 0;
    for (unsigned i = 0; i < N_FILL; i++) {
        snprintf(key, sizeof(key), "fill/%u", i);
        present += egm_exist(client, key) == EGM_OK;
    }
    assert_true(present >= 1 && present <= 16 - N_LEASED - 1);

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
        cmocka_unit_test(test_fill_beyond_capacity),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
