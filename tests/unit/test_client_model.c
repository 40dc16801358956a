/* The reference model of the fault and load tests (tests/support/model.c),
 * proven on its own: it must fail a test whose store drops an object. A
 * committed key answered not-found is a loss (by Get, Exist or Remove) unless
 * the test's own fault destroyed every replica of it; an absent key found is
 * wrong; a put whose outcome a fault hid allows both versions and absence;
 * refusals and EXISTS leave the key as it was. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>
#include "support/model.h"

#define LEN 4113

static unsigned char buf[LEN];

static egm_id_t seg(uint64_t n)
{
    return (egm_id_t){.hi = 0x5e9, .lo = n};
}

/* A put of (key, version) that returned status. */
static void put(egm_model_t *m, const char *key, unsigned version, egm_status_t status)
{
    egm_model_put_begin(m, key, version, LEN);
    egm_model_put_end(m, key, version, status);
}

/* A Get that found version's bytes of key. */
static int get_found(egm_model_t *m, const char *key, unsigned version, size_t len)
{
    egm_model_fill(key, version, buf, len);
    return egm_model_check(m, key, EGM_OK, buf, len);
}

static int get_missing(egm_model_t *m, const char *key)
{
    return egm_model_check(m, key, EGM_ERR_NOT_FOUND, NULL, 0);
}

/* The demonstration: the store drops a committed object; every way the test
 * can ask about it fails. */
static void test_dropped_object_is_a_loss(void **state)
{
    (void)state;
    egm_model_t *m = egm_model_create();
    assert_non_null(m);
    put(m, "k", 0, EGM_OK);
    assert_int_equal(egm_model_committed(m, "k"), 0);
    assert_int_equal(get_found(m, "k", 0, LEN), 0);
    assert_int_equal(egm_model_check_exist(m, "k", EGM_OK), 0);

    assert_int_equal(get_missing(m, "k"), -1);
    assert_int_equal(egm_model_check_exist(m, "k", EGM_ERR_NOT_FOUND), -1);
    egm_model_stats_t s = egm_model_stats(m);
    assert_int_equal(s.lost, 2);
    assert_int_equal(s.lost_by_fault, 0);
    assert_int_equal(s.not_found, 0);
    assert_int_equal(s.gets_verified, 1);
    /* A remove that finds nothing where the model knows an object is one too. */
    assert_int_equal(egm_model_remove(m, "k", EGM_ERR_NOT_FOUND), -1);
    assert_int_equal(egm_model_stats(m).lost, 3);
    egm_model_destroy(m);
}

/* Only a fault of the test's that destroyed every replica excuses a loss, and
 * only with the placement recorded. */
static void test_lost_by_fault_needs_every_replica(void **state)
{
    (void)state;
    egm_model_t *m = egm_model_create();
    egm_id_t a = seg(1), b = seg(2), c = seg(3);
    put(m, "on-a", 0, EGM_OK);
    egm_model_placed(m, "on-a", &a, 1);
    put(m, "on-a-and-b", 0, EGM_OK);
    egm_model_placed(m, "on-a-and-b", (egm_id_t[]){a, b}, 2);
    put(m, "on-c", 0, EGM_OK);
    egm_model_placed(m, "on-c", &c, 1);
    put(m, "unplaced", 0, EGM_OK);
    egm_id_t got[2];
    assert_int_equal(egm_model_placement(m, "on-a-and-b", got, 2), 2);
    assert_true(egm__id_equal(got[0], a) && egm__id_equal(got[1], b));
    assert_int_equal(egm_model_placement(m, "unplaced", got, 2), 0);

    /* Before the fault nothing is excused. */
    assert_int_equal(get_missing(m, "on-a"), -1);
    assert_int_equal(egm_model_census(m).doomed, 0);

    egm_model_segment_destroyed(m, a);
    egm_model_segment_destroyed(m, a); /* twice is once */
    egm_model_census_t c1 = egm_model_census(m);
    assert_int_equal(c1.keys, 4);
    assert_int_equal(c1.committed, 4);
    assert_int_equal(c1.doomed, 1);
    assert_int_equal(get_missing(m, "on-a"), 0);
    assert_int_equal(egm_model_check_exist(m, "on-a", EGM_ERR_NOT_FOUND), 0);
    assert_int_equal(get_missing(m, "on-a-and-b"), -1); /* b still holds it */
    assert_int_equal(get_missing(m, "on-c"), -1);
    assert_int_equal(get_missing(m, "unplaced"), -1); /* where it lay is unknown */
    /* The doomed key may still read back (it was read before the fault took hold). */
    assert_int_equal(get_found(m, "on-a", 0, LEN), 0);

    egm_model_segment_destroyed(m, b);
    assert_int_equal(egm_model_census(m).doomed, 2);
    assert_int_equal(get_missing(m, "on-a-and-b"), 0);

    egm_model_stats_t s = egm_model_stats(m);
    assert_int_equal(s.lost, 4);
    assert_int_equal(s.lost_by_fault, 3);

    /* A new committed version forgets the old placement: not excused. */
    assert_int_equal(egm_model_remove(m, "on-a", EGM_OK), 0);
    put(m, "on-a", 1, EGM_OK);
    assert_int_equal(get_missing(m, "on-a"), -1);
    egm_model_destroy(m);
}

static void test_absent_key_found_is_wrong(void **state)
{
    (void)state;
    egm_model_t *m = egm_model_create();
    /* Never put. */
    assert_int_equal(get_missing(m, "never"), 0);
    assert_int_equal(egm_model_check_exist(m, "never", EGM_ERR_NOT_FOUND), 0);
    assert_int_equal(egm_model_check_exist(m, "never", EGM_OK), -1);
    assert_int_equal(get_found(m, "never", 0, LEN), -1);
    /* Removed. */
    put(m, "gone", 3, EGM_OK);
    assert_int_equal(egm_model_remove(m, "gone", EGM_OK), 0);
    assert_int_equal(egm_model_committed(m, "gone"), -1);
    assert_int_equal(get_found(m, "gone", 3, LEN), -1);
    assert_int_equal(egm_model_check_exist(m, "gone", EGM_OK), -1);
    assert_int_equal(get_missing(m, "gone"), 0);
    assert_int_equal(egm_model_check_exist(m, "gone", EGM_ERR_NOT_FOUND), 0);
    /* Refused: nothing stored. */
    put(m, "refused", 0, EGM_ERR_NO_SPACE);
    assert_int_equal(get_found(m, "refused", 0, LEN), -1);
    assert_int_equal(egm_model_check_exist(m, "refused", EGM_OK), -1);
    egm_model_stats_t s = egm_model_stats(m);
    assert_int_equal(s.wrong, 6);
    assert_int_equal(s.not_found, 2);
    assert_int_equal(s.lost, 0);
    assert_int_equal(egm_model_census(m).absent, 2); /* "never" was only asked about */
    egm_model_destroy(m);
}

/* A put whose outcome a fault hid: old version, new version or nothing. */
static void test_hidden_outcome_is_uncertain(void **state)
{
    (void)state;
    egm_model_t *m = egm_model_create();
    put(m, "k", 1, EGM_OK);
    assert_int_equal(egm_model_remove(m, "k", EGM_ERR_TIMEOUT), 0); /* may or may not be gone */
    assert_int_equal(egm_model_committed(m, "k"), -1);
    put(m, "k", 2, EGM_ERR_TRANSFER);
    assert_int_equal(egm_model_census(m).uncertain, 1);
    assert_int_equal(get_found(m, "k", 1, LEN), 0);
    assert_int_equal(get_found(m, "k", 2, LEN), 0);
    assert_int_equal(get_missing(m, "k"), 0);
    assert_int_equal(egm_model_check_exist(m, "k", EGM_OK), 0);
    assert_int_equal(egm_model_check_exist(m, "k", EGM_ERR_NOT_FOUND), 0);
    /* Never another version's bytes, nor a prefix of an allowed one. */
    assert_int_equal(get_found(m, "k", 3, LEN), -1);
    assert_int_equal(get_found(m, "k", 2, LEN - 1), -1);
    /* A put that succeeds settles it. */
    put(m, "k", 4, EGM_OK);
    assert_int_equal(egm_model_committed(m, "k"), 4);
    assert_int_equal(get_found(m, "k", 2, LEN), -1);
    assert_int_equal(get_missing(m, "k"), -1);
    /* A put in flight when the fault hit, made uncertain by the test. */
    put(m, "f", 0, EGM_OK);
    egm_model_uncertain(m, "f");
    assert_int_equal(get_missing(m, "f"), 0);
    /* Other errors are counted, not judged. */
    assert_int_equal(egm_model_check(m, "f", EGM_ERR_UNREACHABLE, NULL, 0), 0);
    assert_int_equal(egm_model_check_exist(m, "f", EGM_ERR_TIMEOUT), 0);
    egm_model_stats_t s = egm_model_stats(m);
    assert_int_equal(s.errors, 2);
    assert_int_equal(s.wrong, 3);
    assert_int_equal(s.lost, 1);
    egm_model_destroy(m);
}

/* EXISTS (immutable objects) and HAS_LEASE leave a committed key committed. */
static void test_exists_keeps_the_committed_version(void **state)
{
    (void)state;
    egm_model_t *m = egm_model_create();
    egm_id_t a = seg(7);
    put(m, "k", 1, EGM_OK);
    egm_model_placed(m, "k", &a, 1);
    put(m, "k", 2, EGM_ERR_EXISTS);
    assert_int_equal(egm_model_committed(m, "k"), 1);
    assert_int_equal(get_found(m, "k", 2, LEN), -1);
    assert_int_equal(get_found(m, "k", 1, LEN), 0);
    put(m, "k", 1, EGM_ERR_EXISTS); /* the same version again */
    assert_int_equal(egm_model_committed(m, "k"), 1);
    assert_int_equal(egm_model_remove(m, "k", EGM_ERR_HAS_LEASE), 0);
    assert_int_equal(egm_model_committed(m, "k"), 1);
    assert_int_equal(get_missing(m, "k"), -1);
    egm_model_segment_destroyed(m, a); /* the placement survived the refused puts */
    assert_int_equal(get_missing(m, "k"), 0);
    egm_model_destroy(m);
}

static void test_keys_are_copied(void **state)
{
    (void)state;
    egm_model_t *m = egm_model_create();
    put(m, "x", 0, EGM_OK);
    put(m, "y", 0, EGM_ERR_TRANSFER);
    size_t n = 0;
    char **keys = egm_model_keys(m, &n);
    assert_int_equal(n, 2);
    assert_string_equal(keys[0], "x");
    assert_string_equal(keys[1], "y");
    for (size_t i = 0; i < n; i++)
        free(keys[i]);
    free(keys);
    egm_model_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dropped_object_is_a_loss),
        cmocka_unit_test(test_lost_by_fault_needs_every_replica),
        cmocka_unit_test(test_absent_key_found_is_wrong),
        cmocka_unit_test(test_hidden_outcome_is_uncertain),
        cmocka_unit_test(test_exists_keeps_the_committed_version),
        cmocka_unit_test(test_keys_are_copied),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
