/* The slab log entries a Commit names (src/master/commit_seqs.h): what the
 * master notes seen per key, and the requests it refuses. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "common/log.h"
#include "master/commit_seqs.h"

static void test_none_named(void **state)
{
    (void)state;
    const uint64_t *seen = (const uint64_t *)1;
    uint64_t *owned = (uint64_t *)1;
    assert_int_equal(egm__commit_seen_seqs(3, NULL, 0, NULL, 0, &seen, &owned), EGM_OK);
    assert_null(seen);
    assert_null(owned);
    assert_int_equal(egm__commit_seen_seqs(0, NULL, 0, NULL, 0, &seen, &owned), EGM_OK);
    assert_null(seen);
}

static void test_whole_and_torn_merged(void **state)
{
    (void)state;
    uint64_t whole[] = {4, 0, 0, 7}, torn[] = {0, 5, 0, 0}, *owned;
    const uint64_t *seen;
    assert_int_equal(egm__commit_seen_seqs(4, whole, 4, torn, 4, &seen, &owned), EGM_OK);
    uint64_t want[] = {4, 5, 0, 7};
    assert_ptr_equal(seen, owned);
    assert_memory_equal(seen, want, sizeof(want));
    egm_free(owned);
    /* Torn alone (the client wrote no entry whole): still noted. */
    assert_int_equal(egm__commit_seen_seqs(4, NULL, 0, torn, 4, &seen, &owned), EGM_OK);
    uint64_t want_torn[] = {0, 5, 0, 0};
    assert_memory_equal(seen, want_torn, sizeof(want_torn));
    egm_free(owned);
    /* None torn: the Commit's own list, nothing allocated. */
    assert_int_equal(egm__commit_seen_seqs(4, whole, 4, NULL, 0, &seen, &owned), EGM_OK);
    assert_ptr_equal(seen, whole);
    assert_null(owned);
}

static void test_refused(void **state)
{
    (void)state;
    uint64_t whole[] = {4, 6}, torn[] = {0, 6}, *owned = (uint64_t *)1;
    const uint64_t *seen = (const uint64_t *)1;
    assert_int_equal(egm__commit_seen_seqs(3, whole, 2, NULL, 0, &seen, &owned),
                     EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "log_seqs: 2 values for 3 keys"));
    assert_null(seen);
    assert_null(owned);
    assert_int_equal(egm__commit_seen_seqs(3, NULL, 0, torn, 2, &seen, &owned),
                     EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "torn_log_seqs: 2 values for 3 keys"));
    assert_int_equal(egm__commit_seen_seqs(2, whole, 2, torn, 2, &seen, &owned),
                     EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "key 1 names an entry in both"));
    assert_null(seen);
    assert_null(owned);
}

int main(void)
{
    egm__log_set_level(EGM_LOG_ERROR);
    uint64_t live = egm__alloc_live_count();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_none_named),
        cmocka_unit_test(test_whole_and_torn_merged),
        cmocka_unit_test(test_refused),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    if (failed == 0 && egm__alloc_live_count() != live)
        return 1;
    return failed;
}
