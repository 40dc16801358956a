/* Unit: the location cache (src/client/location_cache.[ch]): an entry is used
 * only before min(lease, its bound) less the margin has passed since it was
 * asked for; expired entries go on lookup; a full cache drops expired entries
 * before it skips an insert; a drop and a clear forget entries, and a location
 * asked before a clear is not kept; a bound of 0 keeps nothing; a location
 * comes back with its segments' descriptors. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "client/location_cache.h"

static egm_location_t loc_at(uint64_t asked_ms, uint64_t ttl_ms, egm_segment_desc_t *seg)
{
    egm_location_t loc = {.size = 100,
                          .lease_ttl_ms = ttl_ms,
                          .bound_ms = 1000,
                          .asked_ms = asked_ms,
                          .n_replicas = 1};
    loc.replicas[0] = (egm_replica_desc_t){.segment = seg->id, .offset = 64, .length = 100};
    return loc;
}

static void test_usable_window(void **state)
{
    (void)state;
    egm_location_cache_t *c;
    egm_segment_desc_t seg = {.id = {.hi = 1, .lo = 2}, .size = 4096};
    const egm_segment_desc_t *segs[] = {&seg};
    egm_location_t got;
    assert_int_equal(egm__location_cache_create(8, &c), EGM_OK);

    /* Its bound 1000 < lease 10000: usable until 1000 + 1000 - margin. */
    egm_location_t loc = loc_at(1000, 10000, &seg);
    egm__location_cache_put(c, "k", &loc, segs, egm__location_cache_generation(c));
    assert_int_equal(egm__location_usable_until(&loc), 2000 - EGM_LOCATION_MARGIN_MS);
    assert_true(egm__location_cache_get(c, "k", 1000, &got));
    assert_int_equal(got.replicas[0].offset, 64);
    assert_true(egm__location_cache_get(c, "k", 2000 - EGM_LOCATION_MARGIN_MS - 1, &got));
    assert_false(egm__location_cache_get(c, "k", 2000 - EGM_LOCATION_MARGIN_MS, &got));
    /* ... and it is gone, not just unusable. */
    egm_location_cache_stats_t st;
    egm__location_cache_stats(c, &st);
    assert_int_equal(st.entries, 0);
    assert_int_equal(st.hits, 2);
    assert_int_equal(st.misses, 1);

    /* Lease 500 < bound: the lease decides. */
    loc = loc_at(1000, 500, &seg);
    egm__location_cache_put(c, "short", &loc, segs, egm__location_cache_generation(c));
    assert_true(egm__location_cache_get(c, "short", 1500 - EGM_LOCATION_MARGIN_MS - 1, &got));
    assert_false(egm__location_cache_get(c, "short", 1500 - EGM_LOCATION_MARGIN_MS, &got));

    /* The segment's descriptor comes back; an unknown one does not. */
    egm_segment_desc_t d;
    assert_true(egm__location_cache_segment(c, seg.id, &d));
    assert_int_equal(d.size, 4096);
    assert_false(egm__location_cache_segment(c, (egm_id_t){.hi = 9, .lo = 9}, &d));

    /* Drop and clear forget entries. */
    loc = loc_at(1000, 10000, &seg);
    egm__location_cache_put(c, "a", &loc, segs, egm__location_cache_generation(c));
    egm__location_cache_put(c, "b", &loc, segs, egm__location_cache_generation(c));
    egm__location_cache_drop(c, "a");
    assert_false(egm__location_cache_get(c, "a", 1001, &got));
    assert_true(egm__location_cache_get(c, "b", 1001, &got));
    uint64_t before_clear = egm__location_cache_generation(c);
    egm__location_cache_clear(c);
    assert_false(egm__location_cache_get(c, "b", 1001, &got));
    assert_false(egm__location_cache_segment(c, seg.id, &d));
    /* A location asked before the clear (a restart seen meanwhile) is not kept. */
    egm__location_cache_put(c, "b", &loc, segs, before_clear);
    assert_false(egm__location_cache_get(c, "b", 1001, &got));
    egm__location_cache_put(c, "b", &loc, segs, egm__location_cache_generation(c));
    assert_true(egm__location_cache_get(c, "b", 1001, &got));
    /* Bound 0 (the master's caching off): not kept. */
    loc.bound_ms = 0;
    egm__location_cache_put(c, "zero", &loc, segs, egm__location_cache_generation(c));
    assert_false(egm__location_cache_get(c, "zero", 1001, &got));
    egm__location_cache_destroy(c);
}

static void test_capacity(void **state)
{
    (void)state;
    egm_location_cache_t *c;
    egm_segment_desc_t seg = {.id = {.hi = 3, .lo = 4}, .size = 4096};
    const egm_segment_desc_t *segs[] = {&seg};
    egm_location_t got;
    assert_int_equal(egm__location_cache_create(2, &c), EGM_OK);
    egm_location_t old = loc_at(0, 10000, &seg), fresh = loc_at(5000, 10000, &seg);
    egm__location_cache_put(c, "old1", &old, segs, egm__location_cache_generation(c));
    egm__location_cache_put(c, "old2", &old, segs, egm__location_cache_generation(c));
    /* Full of entries expired by the new one's ask time: they make room. */
    egm__location_cache_put(c, "new1", &fresh, segs, egm__location_cache_generation(c));
    assert_true(egm__location_cache_get(c, "new1", 5001, &got));
    egm__location_cache_put(c, "new2", &fresh, segs, egm__location_cache_generation(c));
    /* Full of live entries: the insert is skipped. */
    egm__location_cache_put(c, "new3", &fresh, segs, egm__location_cache_generation(c));
    assert_false(egm__location_cache_get(c, "new3", 5001, &got));
    assert_true(egm__location_cache_get(c, "new2", 5001, &got));
    /* A location of no replica, or of too many, is not kept. */
    egm_location_t none = fresh;
    none.n_replicas = 0;
    egm__location_cache_drop(c, "new2");
    egm__location_cache_put(c, "none", &none, segs, egm__location_cache_generation(c));
    assert_false(egm__location_cache_get(c, "none", 5001, &got));
    egm__location_cache_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_usable_window),
        cmocka_unit_test(test_capacity),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
