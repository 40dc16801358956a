/* Master election on a real etcd (src/ha): of three candidates exactly one
 * leads and all agree on it; a leader that resigns deletes its key, one that
 * crashes leaves it to its lease; after the leader crashes another takes over
 * with a higher epoch; a leader cut off from etcd (etcd stopped with SIGSTOP)
 * stops counting itself leading no later than one TTL after it lost etcd, by
 * construction of the fence, and leads again (a new epoch) once etcd is back;
 * a dead endpoint ahead of a live one in the list costs nothing but a retry. */
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "common/clock.h"
#include "ha/election.h"
#include "ha/etcd.h"
#include "support/etcd.h"
#include "support/testutil.h"

#define TTL_S 2
#define WAIT_MS 20000

static egm_test_etcd_t etcd;

static int setup(void **state)
{
    (void)state;
    return egm_test_etcd_start(&etcd);
}

static int teardown(void **state)
{
    (void)state;
    egm_test_etcd_stop(&etcd);
    return 0;
}

static egm_election_t *candidate(const char *key, const char *value, const char *endpoints)
{
    egm_election_params_t p = {.endpoints = endpoints, .key = key, .value = value, .ttl_s = TTL_S};
    egm_election_t *e = NULL;
    assert_int_equal(egm__election_start(&p, &e), EGM_OK);
    return e;
}

/* Index of the one leading among n (waiting for one), asserting there is
 * never more than one. */
static int wait_leader(egm_election_t **e, int n, int64_t *epoch_p)
{
    for (uint64_t until = egm__now_ms() + WAIT_MS; egm__now_ms() < until;) {
        int who = -1, count = 0;
        for (int i = 0; i < n; i++)
            if (e[i] != NULL && egm__election_leading(e[i], epoch_p)) {
                who = i;
                count++;
            }
        assert_true(count <= 1);
        if (count == 1)
            return who;
        egm__sleep_ms(20);
    }
    fail_msg("no leader within %d ms", WAIT_MS);
    return -1;
}

static void test_one_leader_all_agree(void **state)
{
    (void)state;
    const char *names[] = {"10.0.0.1:50051", "10.0.0.2:50051", "10.0.0.3:50051"};
    egm_election_t *e[3];
    for (int i = 0; i < 3; i++)
        e[i] = candidate("t/agree", names[i], etcd.endpoint);
    int64_t epoch = 0;
    int who = wait_leader(e, 3, &epoch);
    assert_true(epoch > 0);
    /* Every candidate learns the leader's address and epoch. */
    for (int i = 0; i < 3; i++) {
        char addr[64] = "";
        int64_t seen = 0;
        for (uint64_t until = egm__now_ms() + WAIT_MS; egm__now_ms() < until; egm__sleep_ms(20))
            if (egm__election_leader(e[i], addr, sizeof(addr), &seen) == EGM_OK)
                break;
        assert_string_equal(addr, names[who]);
        assert_int_equal(seen, epoch);
    }
    /* Leadership holds across several lease renewals. */
    egm__sleep_ms(TTL_S * 1000 + 500);
    int64_t again = 0;
    assert_int_equal(wait_leader(e, 3, &again), who);
    assert_int_equal(again, epoch);
    assert_int_equal(egm__election_losses(e[who]), 0);
    for (int i = 0; i < 3; i++)
        egm__election_stop(e[i]);
}

static void test_resign_deletes_abandon_leaves(void **state)
{
    (void)state;
    egm_etcd_t *client;
    assert_int_equal(egm__etcd_create(etcd.endpoint, 2000, &client), EGM_OK);
    egm_etcd_kv_t kv;

    egm_election_t *e = candidate("t/resign", "m1", etcd.endpoint);
    assert_int_equal(wait_leader(&e, 1, NULL), 0);
    egm__election_stop(e);
    assert_int_equal(egm__etcd_get(client, "t/resign", &kv, NULL), EGM_ERR_NOT_FOUND);

    e = candidate("t/resign", "m2", etcd.endpoint);
    int64_t epoch;
    assert_int_equal(wait_leader(&e, 1, &epoch), 0);
    egm__election_abandon(e); /* as if the process died */
    assert_int_equal(egm__etcd_get(client, "t/resign", &kv, NULL), EGM_OK);
    assert_int_equal(kv.create_revision, epoch);
    assert_int_equal(kv.len, 2);
    assert_memory_equal(kv.value, "m2", 2);
    egm__etcd_kv_cleanup(&kv);
    /* ... until its lease runs out. */
    egm_status_t s = EGM_OK;
    for (uint64_t until = egm__now_ms() + WAIT_MS; s == EGM_OK && egm__now_ms() < until;
         egm__sleep_ms(50)) {
        s = egm__etcd_get(client, "t/resign", &kv, NULL);
        if (s == EGM_OK)
            egm__etcd_kv_cleanup(&kv);
    }
    assert_int_equal(s, EGM_ERR_NOT_FOUND);
    egm__etcd_destroy(client);
}

static void test_failover_after_crash(void **state)
{
    (void)state;
    egm_election_t *e[3];
    for (int i = 0; i < 3; i++)
        e[i] = candidate("t/failover", i == 0 ? "a" : i == 1 ? "b" : "c", etcd.endpoint);
    int64_t first = 0, second = 0;
    int who = wait_leader(e, 3, &first);
    egm__election_abandon(e[who]);
    e[who] = NULL;
    int next = wait_leader(e, 3, &second);
    assert_int_not_equal(next, who);
    assert_true(second > first);
    assert_int_equal(egm__election_wins(e[next]), 1);
    for (int i = 0; i < 3; i++)
        egm__election_stop(e[i]);
}

static void test_fenced_without_etcd(void **state)
{
    (void)state;
    egm_election_t *e = candidate("t/fence", "m", etcd.endpoint);
    int64_t epoch = 0, later = 0;
    assert_int_equal(wait_leader(&e, 1, &epoch), 0);
    uint64_t cut = egm__now_ms();
    assert_int_equal(egm__process_signal(&etcd.proc, SIGSTOP), EGM_OK);
    uint64_t unfenced = 0;
    while (egm__election_leading(e, NULL)) {
        unfenced = egm__now_ms();
        assert_true(unfenced - cut < WAIT_MS);
        egm__sleep_ms(5);
    }
    /* The fence comes from the last renewal sent before the cut: within one TTL of it. */
    assert_true(unfenced <= cut + TTL_S * 1000);
    assert_int_equal(egm__process_signal(&etcd.proc, SIGCONT), EGM_OK);
    assert_int_equal(wait_leader(&e, 1, &later), 0);
    assert_true(later > epoch);
    assert_true(egm__election_losses(e) >= 1);
    egm__election_stop(e);
}

static void test_dead_endpoint_first(void **state)
{
    (void)state;
    char endpoints[128];
    snprintf(endpoints, sizeof(endpoints), "etcd://127.0.0.1:1;%s", etcd.endpoint);
    egm_election_t *e = candidate("t/endpoints", "m", endpoints);
    assert_int_equal(wait_leader(&e, 1, NULL), 0);
    egm__election_stop(e);

    egm_etcd_t *client;
    assert_int_equal(egm__etcd_create("10.0.0.1:2379,no-port", 100, &client), EGM_ERR_CONFIG);
    assert_int_equal(egm__etcd_create("", 100, &client), EGM_ERR_CONFIG);
    assert_int_equal(egm__etcd_create("etcd://", 100, &client), EGM_ERR_CONFIG);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_one_leader_all_agree),
        cmocka_unit_test(test_resign_deletes_abandon_leaves),
        cmocka_unit_test(test_failover_after_crash),
        cmocka_unit_test(test_fenced_without_etcd),
        cmocka_unit_test(test_dead_endpoint_first),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
