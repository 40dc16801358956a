/* Where this client's own objects lie (client/own_places.h): a place kept
 * is taken once (and then forgotten), a later keep of a key replaces its
 * place, a full set gives up its oldest entry and keeps the rest, other
 * keys are not found, and a table that could not be made keeps nothing. */
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

static egm_id_t seg(uint64_t n)
{
    return (egm_id_t){.hi = n, .lo = ~n};
}

static void test_keep_and_take(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    egm_own_places_t *p = egm__own_places_create();
    assert_non_null(p);
    egm_id_t s;
    uint64_t off;
    assert_int_equal(egm__own_places_take(p, "a", &s, &off), 0); /* nothing kept yet */
    egm__own_places_keep(p, "a", seg(1), 4096);
    egm__own_places_keep(p, "b", seg(2), 8192);
    egm__own_places_keep(p, "a", seg(3), 12288); /* put again: its new place */
    assert_int_equal(egm__own_places_take(p, "a", &s, &off), 1);
    assert_true(s.hi == 3 && s.lo == ~3ull && off == 12288);
    assert_int_equal(egm__own_places_take(p, "a", &s, &off), 0); /* taken: forgotten, no older */
    assert_int_equal(egm__own_places_take(p, "c", &s, &off), 0);
    assert_int_equal(egm__own_places_take(p, "b", &s, &off), 1);
    assert_true(s.hi == 2 && off == 8192);
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
        egm__own_places_keep(p, keys[i], seg((uint64_t)i), (uint64_t)i * 64);
    egm_id_t s;
    uint64_t off;
    assert_int_equal(egm__own_places_take(p, keys[0], &s, &off), 0); /* the oldest went */
    for (int i = 1; i <= EGM_OWN_PLACES_WAYS; i++) {
        assert_int_equal(egm__own_places_take(p, keys[i], &s, &off), 1);
        assert_true(s.hi == (uint64_t)i && off == (uint64_t)i * 64);
    }
    egm__own_places_destroy(p);
    /* none made (out of memory): nothing kept, nothing found */
    egm__own_places_keep(NULL, "a", seg(1), 0);
    assert_int_equal(egm__own_places_take(NULL, "a", &s, &off), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keep_and_take),
        cmocka_unit_test(test_full_set),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
