/* Where this client's own objects lie (client/own_places.h): a place kept
 * (with its log entry) is taken once (and then forgotten), a later keep of a
 * key replaces its place, a full set gives up its oldest entry and keeps the
 * rest, other keys are not found, clear forgets all, and a table that could
 * not be made keeps nothing. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "client/own_places.h"
#include "common/alloc.h"
#include "common/hashmap.h"

/* Place number n: its segment, offset and log entry all say n. */
static const egm_own_place_t *place(uint64_t n)
{
    static egm_own_place_t p;
    p = (egm_own_place_t){
        .segment = {.hi = n, .lo = ~n}, .offset = n * 64, .slab_id = n + 1000, .seq = n + 1};
    return &p;
}

static int is_place(const egm_own_place_t *p, uint64_t n)
{
    return p->segment.hi == n && p->segment.lo == ~n && p->offset == n * 64 &&
           p->slab_id == n + 1000 && p->seq == n + 1;
}

static void test_keep_and_take(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    egm_own_places_t *p = egm__own_places_create();
    assert_non_null(p);
    egm_own_place_t got;
    assert_int_equal(egm__own_places_take(p, "a", &got), 0); /* nothing kept yet */
    egm__own_places_keep(p, "a", place(1));
    egm__own_places_keep(p, "b", place(2));
    egm__own_places_keep(p, "a", place(3)); /* put again: its new place */
    assert_int_equal(egm__own_places_take(p, "a", &got), 1);
    assert_true(is_place(&got, 3));
    assert_int_equal(egm__own_places_take(p, "a", &got), 0); /* taken: forgotten, no older */
    assert_int_equal(egm__own_places_take(p, "c", &got), 0);
    assert_int_equal(egm__own_places_take(p, "b", &got), 1);
    assert_true(is_place(&got, 2));
    egm__own_places_keep(p, "d", place(4));
    egm__own_places_clear(p); /* a RemoveAll */
    assert_int_equal(egm__own_places_take(p, "d", &got), 0);
    egm__own_places_destroy(p);
    assert_int_equal(egm__alloc_live_count(), live);
}

/* Keys of one set (their hash modulo the set count), one more than a set
 * holds: the oldest goes, the others stay. */
static void test_full_set(void **state)
{
    (void)state;
    egm_own_places_t *p = egm__own_places_create();
    char keys[EGM_OWN_PLACES_WAYS + 1][32];
    uint64_t want = egm__hashmap_hash("k0", 2) % EGM_OWN_PLACES_SETS;
    snprintf(keys[0], sizeof(keys[0]), "k0");
    int n = 1;
    for (unsigned i = 1; n <= EGM_OWN_PLACES_WAYS; i++) {
        char k[32];
        snprintf(k, sizeof(k), "k%u", i);
        if (egm__hashmap_hash(k, strlen(k)) % EGM_OWN_PLACES_SETS == want)
            memcpy(keys[n++], k, sizeof(k));
    }
    for (int i = 0; i <= EGM_OWN_PLACES_WAYS; i++)
        egm__own_places_keep(p, keys[i], place((uint64_t)i));
    egm_own_place_t got;
    assert_int_equal(egm__own_places_take(p, keys[0], &got), 0); /* the oldest went */
    for (int i = 1; i <= EGM_OWN_PLACES_WAYS; i++) {
        assert_int_equal(egm__own_places_take(p, keys[i], &got), 1);
        assert_true(is_place(&got, (uint64_t)i));
    }
    egm__own_places_destroy(p);
    /* none made (out of memory): nothing kept, nothing found */
    egm__own_places_keep(NULL, "a", place(1));
    assert_int_equal(egm__own_places_take(NULL, "a", &got), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keep_and_take),
        cmocka_unit_test(test_full_set),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
