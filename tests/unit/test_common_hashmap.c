/* Hash map: get/put/replace/remove agree with a reference array over a long
 * random trace (with growth, tombstone reuse and colliding prefixes), keys are
 * copied, a lookup with a precomputed hash agrees, iteration sees every entry
 * once and tolerates removing the current one, and all memory is returned. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "common/hashmap.h"

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    uint64_t x = rng_state;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    rng_state = x;
    return x;
}

static void test_basic(void **state)
{
    (void)state;
    egm_hashmap_t *m;
    assert_int_equal(egm__hashmap_create(&m), EGM_OK);
    assert_int_equal(egm__hashmap_size(m), 0);
    assert_null(egm__hashmap_get(m, "a", 1));
    assert_null(egm__hashmap_remove(m, "a", 1));

    char key[8] = "alpha";
    int v1 = 1, v2 = 2;
    void *old = &v2;
    assert_int_equal(egm__hashmap_put(m, key, 5, &v1, &old), EGM_OK);
    assert_null(old);
    memcpy(key, "XXXXX", 5); /* the map kept its own copy */
    assert_ptr_equal(egm__hashmap_get(m, "alpha", 5), &v1);
    assert_null(egm__hashmap_get(m, "alph", 4));
    assert_null(egm__hashmap_get(m, "alpha\0", 6));

    assert_int_equal(egm__hashmap_put(m, "alpha", 5, &v2, &old), EGM_OK);
    assert_ptr_equal(old, &v1);
    assert_int_equal(egm__hashmap_size(m), 1);
    assert_int_equal(egm__hashmap_put(m, "alpha", 5, &v1, NULL), EGM_OK);

    /* Binary keys with NULs, and the empty key. */
    assert_int_equal(egm__hashmap_put(m, "a\0b", 3, &v2, NULL), EGM_OK);
    assert_int_equal(egm__hashmap_put(m, "a\0c", 3, &v1, NULL), EGM_OK);
    assert_int_equal(egm__hashmap_put(m, NULL, 0, &v2, NULL), EGM_OK);
    assert_ptr_equal(egm__hashmap_get(m, "a\0b", 3), &v2);
    assert_ptr_equal(egm__hashmap_get(m, "a\0c", 3), &v1);
    assert_ptr_equal(egm__hashmap_get(m, "", 0), &v2);
    assert_int_equal(egm__hashmap_size(m), 4);

    assert_ptr_equal(egm__hashmap_remove(m, "alpha", 5), &v1);
    assert_null(egm__hashmap_get(m, "alpha", 5));
    assert_ptr_equal(egm__hashmap_remove(m, NULL, 0), &v2);
    assert_int_equal(egm__hashmap_size(m), 2);
    egm__hashmap_destroy(m);
    egm__hashmap_destroy(NULL);
}

#define UNIVERSE 3000
#define STEPS 200000

/* Keys share a long prefix so that only the tail tells them apart. */
static size_t make_key(size_t i, char *buf)
{
    return (size_t)snprintf(buf, 64, "segment/0000000000/object-%zu", i);
}

static void check_all(egm_hashmap_t *m, void *const *ref, size_t expect_count)
{
    char key[64];
    for (size_t i = 0; i < UNIVERSE; i++) {
        size_t len = make_key(i, key);
        assert_ptr_equal(egm__hashmap_get(m, key, len), ref[i]);
    }
    /* Iteration sees each live entry exactly once. */
    static unsigned char seen[UNIVERSE];
    memset(seen, 0, sizeof(seen));
    size_t it = 0, n = 0;
    const void *k;
    size_t klen;
    void *v;
    while (egm__hashmap_next(m, &it, &k, &klen, &v)) {
        size_t idx = (size_t)((uintptr_t)v - 1);
        assert_true(idx < UNIVERSE);
        assert_ptr_equal(ref[idx], v);
        assert_int_equal(seen[idx], 0);
        seen[idx] = 1;
        size_t len = make_key(idx, key);
        assert_int_equal(klen, len);
        assert_memory_equal(k, key, len);
        n++;
    }
    assert_int_equal(n, expect_count);
    assert_int_equal(egm__hashmap_size(m), expect_count);
}

static void test_random_against_reference(void **state)
{
    (void)state;
    static void *ref[UNIVERSE];
    memset(ref, 0, sizeof(ref));
    size_t count = 0;
    char key[64];
    egm_hashmap_t *m;
    assert_int_equal(egm__hashmap_create(&m), EGM_OK);
    for (size_t step = 0; step < STEPS; step++) {
        /* Phases bias towards insert or remove so the size swings up and down,
         * exercising growth and tombstone-heavy tables. */
        int insert_bias = (step / 20000) % 2 == 0 ? 70 : 30;
        size_t i = (size_t)(rnd() % UNIVERSE);
        size_t len = make_key(i, key);
        void *value = (void *)(uintptr_t)(i + 1);
        if ((int)(rnd() % 100) < insert_bias) {
            void *old = (void *)1;
            assert_int_equal(egm__hashmap_put(m, key, len, value, &old), EGM_OK);
            assert_ptr_equal(old, ref[i]);
            if (ref[i] == NULL)
                count++;
            ref[i] = value;
        } else {
            assert_ptr_equal(egm__hashmap_remove(m, key, len), ref[i]);
            if (ref[i] != NULL)
                count--;
            ref[i] = NULL;
        }
        /* A lookup with the hash computed by the caller finds the same. */
        assert_ptr_equal(egm__hashmap_get_hashed(m, key, len, egm__hashmap_hash(key, len)), ref[i]);
        assert_int_equal(egm__hashmap_size(m), count);
        if (step % 25000 == 0)
            check_all(m, ref, count);
    }
    check_all(m, ref, count);
    egm__hashmap_destroy(m);
}

static void test_remove_during_iteration(void **state)
{
    (void)state;
    egm_hashmap_t *m;
    char key[64];
    assert_int_equal(egm__hashmap_create(&m), EGM_OK);
    for (size_t i = 0; i < 500; i++) {
        size_t len = make_key(i, key);
        assert_int_equal(egm__hashmap_put(m, key, len, (void *)(uintptr_t)(i + 1), NULL), EGM_OK);
    }
    /* Remove every odd entry while iterating; each entry is visited once. */
    size_t it = 0, visited = 0;
    const void *k;
    size_t klen;
    void *v;
    while (egm__hashmap_next(m, &it, &k, &klen, &v)) {
        visited++;
        if (((uintptr_t)v - 1) % 2 == 1) {
            char copy[64];
            memcpy(copy, k, klen); /* k is freed by the removal */
            assert_ptr_equal(egm__hashmap_remove(m, copy, klen), v);
        }
    }
    assert_int_equal(visited, 500);
    assert_int_equal(egm__hashmap_size(m), 250);
    for (size_t i = 0; i < 500; i++) {
        size_t len = make_key(i, key);
        void *want = i % 2 == 0 ? (void *)(uintptr_t)(i + 1) : NULL;
        assert_ptr_equal(egm__hashmap_get(m, key, len), want);
    }
    egm__hashmap_destroy(m);
}

static void test_destroy_frees_keys(void **state)
{
    (void)state;
    uint64_t before = egm__alloc_live_count_site("hashmap.key");
    egm_hashmap_t *m;
    char key[64];
    assert_int_equal(egm__hashmap_create(&m), EGM_OK);
    for (size_t i = 0; i < 100; i++) {
        size_t len = make_key(i, key);
        assert_int_equal(egm__hashmap_put(m, key, len, m, NULL), EGM_OK);
    }
    assert_int_equal(egm__alloc_live_count_site("hashmap.key"), before + 100);
    egm__hashmap_destroy(m);
    assert_int_equal(egm__alloc_live_count_site("hashmap.key"), before);
}

/* copy_keys copies the keys of the asked length only, every one once. */
static void test_copy_keys(void **state)
{
    (void)state;
    egm_hashmap_t *map = NULL;
    uint64_t *keys = NULL;
    size_t n = 7;
    int value = 1;

    assert_int_equal(egm__hashmap_create(&map), EGM_OK);
    assert_int_equal(egm__hashmap_copy_keys(map, sizeof(uint64_t), "test", (void **)&keys, &n),
                     EGM_OK);
    assert_null(keys);
    assert_int_equal(n, 0);
    for (uint64_t k = 1; k <= 100; k++)
        assert_int_equal(egm__hashmap_put(map, &k, sizeof(k), &value, NULL), EGM_OK);
    assert_int_equal(egm__hashmap_put(map, "short", 5, &value, NULL), EGM_OK);
    assert_int_equal(egm__hashmap_copy_keys(map, sizeof(uint64_t), "test", (void **)&keys, &n),
                     EGM_OK);
    assert_int_equal(n, 100);
    uint64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += keys[i];
    assert_int_equal(sum, 5050);
    egm_free(keys);
    egm__hashmap_destroy(map);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_basic, egm_test_setup_alloc, egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_random_against_reference, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_remove_during_iteration, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_copy_keys, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_destroy_frees_keys, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
