/* Segment reference table (te/segref.h): link, get, put, unlink; the last
 * reference of an unlinked object frees it, never an earlier one; RETIRE
 * keeps the id from being linked again; WAIT returns only once the object is
 * freed; the counts (linked, live) and the id list follow. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "te/segref.h"

typedef struct {
    egm_segref_t ref;
    int payload;
} obj_t;

typedef struct {
    int freed;
    int last_payload;
} freelog_t;

static void obj_free(void *ctx, egm_segref_t *ref)
{
    freelog_t *log = ctx;
    log->freed++;
    log->last_payload = ((obj_t *)ref)->payload;
    egm_free(ref);
}

static obj_t *obj_new(egm_id_t id, int payload)
{
    obj_t *o = egm_calloc(1, sizeof(*o), "test.segref.obj");
    assert_non_null(o);
    o->ref.id = id;
    o->payload = payload;
    return o;
}

static void test_last_reference_frees(void **state)
{
    (void)state;
    freelog_t log = {0};
    egm_segref_table_t *t = NULL;
    assert_int_equal(egm__segref_create("test object", obj_free, &log, &t), EGM_OK);
    egm_id_t id = egm__id_random();

    obj_t *o = obj_new(id, 7);
    assert_int_equal(egm__segref_link(t, &o->ref, 1), EGM_OK); /* the caller's reference */
    assert_true(egm__segref_linked(&o->ref));
    assert_true(egm__segref_has(t, id));
    assert_int_equal(egm__segref_count(t), 1);
    assert_int_equal(egm__segref_live(t), 1);

    egm_segref_t *r = egm__segref_get(t, id);
    assert_ptr_equal(r, &o->ref);
    egm__segref_put(t, r);
    egm__segref_put(t, &o->ref); /* linked: no free at zero */
    assert_int_equal(log.freed, 0);

    /* Unlinked while referenced: no get finds it; the last put frees it. */
    r = egm__segref_get(t, id);
    assert_int_equal(egm__segref_unlink(t, id, 0), 1);
    assert_false(egm__segref_linked(r));
    assert_null(egm__segref_get(t, id));
    assert_false(egm__segref_has(t, id));
    assert_int_equal(egm__segref_count(t), 0);
    assert_int_equal(egm__segref_live(t), 1);
    assert_int_equal(log.freed, 0);
    egm__segref_put(t, r);
    assert_int_equal(log.freed, 1);
    assert_int_equal(log.last_payload, 7);
    assert_int_equal(egm__segref_live(t), 0);

    /* Unlinked with no reference: freed at once; unknown id: 0. */
    o = obj_new(id, 8);
    assert_int_equal(egm__segref_link(t, &o->ref, 0), EGM_OK);
    assert_int_equal(egm__segref_unlink(t, id, 0), 1);
    assert_int_equal(log.freed, 2);
    assert_int_equal(egm__segref_unlink(t, id, 0), 0);
    egm__segref_destroy(t);
}

/* A held object whose size disagrees with its descriptor: the reference goes
 * back (an unlinked one is freed by it) and the error names the segment. */
static void test_check_size(void **state)
{
    (void)state;
    freelog_t log = {0};
    egm_segref_table_t *t = NULL;
    assert_int_equal(egm__segref_create("test object", obj_free, &log, &t), EGM_OK);
    egm_id_t id = egm__id_random();
    char text[EGM_ID_STRLEN], want[160];
    egm__id_format(id, text);

    obj_t *o = obj_new(id, 9);
    assert_int_equal(egm__segref_link(t, &o->ref, 0), EGM_OK);
    egm_segref_t *r = egm__segref_get(t, id);
    assert_int_equal(egm__segref_check_size(t, r, "shm", 4096, 4096), EGM_OK); /* kept */
    assert_int_equal(egm__segref_unlink(t, id, 0), 1);
    assert_int_equal(log.freed, 0);
    assert_int_equal(egm__segref_check_size(t, r, "shm", 8192, 4096), EGM_ERR_INVALID_ARG);
    assert_int_equal(log.freed, 1); /* the put was the last reference */
    snprintf(want, sizeof(want),
             "shm: segment %s: descriptor size 8192 differs from the mapped 4096", text);
    assert_string_equal(egm_last_error(), want);
    egm__segref_destroy(t);
}

static void test_one_object_per_id_and_retired_ids(void **state)
{
    (void)state;
    freelog_t log = {0};
    egm_segref_table_t *t = NULL;
    assert_int_equal(egm__segref_create("test object", obj_free, &log, &t), EGM_OK);
    egm_id_t id = egm__id_random(), other = egm__id_random();

    obj_t *a = obj_new(id, 1), *b = obj_new(id, 2);
    assert_int_equal(egm__segref_link(t, &a->ref, 0), EGM_OK);
    assert_int_equal(egm__segref_link(t, &b->ref, 0), EGM_ERR_SEGMENT_EXISTS);
    assert_false(egm__segref_linked(&b->ref));

    /* Retired: unlinked, and never linked again. */
    assert_false(egm__segref_retired(t, id));
    assert_int_equal(egm__segref_unlink(t, id, EGM_SEGREF_RETIRE), 1);
    assert_true(egm__segref_retired(t, id));
    assert_int_equal(egm__segref_link(t, &b->ref, 0), EGM_ERR_SEGMENT_NOT_FOUND);
    egm_free(b);
    /* An id never linked can be retired too. */
    assert_int_equal(egm__segref_unlink(t, other, EGM_SEGREF_RETIRE), 0);
    assert_true(egm__segref_retired(t, other));
    assert_int_equal(log.freed, 1);
    egm__segref_destroy(t);
}

static void test_ids_and_destroy(void **state)
{
    (void)state;
    freelog_t log = {0};
    egm_segref_table_t *t = NULL;
    assert_int_equal(egm__segref_create("test object", obj_free, &log, &t), EGM_OK);
    egm_id_t *ids = NULL;
    size_t n = 9;
    assert_int_equal(egm__segref_ids(t, &ids, &n), EGM_OK);
    assert_null(ids);
    assert_int_equal(n, 0);

    egm_id_t want[3];
    for (int i = 0; i < 3; i++) {
        want[i] = egm__id_random();
        assert_int_equal(egm__segref_link(t, &obj_new(want[i], i)->ref, 0), EGM_OK);
    }
    egm__segref_unlink(t, want[1], 0);
    assert_int_equal(egm__segref_ids(t, &ids, &n), EGM_OK);
    assert_int_equal(n, 2);
    int seen0 = 0, seen2 = 0;
    for (size_t i = 0; i < n; i++) {
        seen0 |= egm__id_equal(ids[i], want[0]);
        seen2 |= egm__id_equal(ids[i], want[2]);
    }
    assert_true(seen0 && seen2);
    egm_free(ids);
    /* destroy frees what is still linked (the teardown counts allocations). */
    egm__segref_destroy(t);
    assert_int_equal(log.freed, 3);
}

typedef struct {
    egm_segref_table_t *t;
    egm_segref_t *held;
    freelog_t *log;
    int freed_before_put;
} holder_t;

static void *hold_then_put(void *arg)
{
    holder_t *h = arg;
    struct timespec ts = {.tv_sec = 0, .tv_nsec = 100 * 1000 * 1000};
    nanosleep(&ts, NULL);
    h->freed_before_put = h->log->freed;
    egm__segref_put(h->t, h->held);
    return NULL;
}

static void test_unlink_wait_returns_once_freed(void **state)
{
    (void)state;
    freelog_t log = {0};
    egm_segref_table_t *t = NULL;
    assert_int_equal(egm__segref_create("test object", obj_free, &log, &t), EGM_OK);
    egm_id_t id = egm__id_random();
    assert_int_equal(egm__segref_link(t, &obj_new(id, 5)->ref, 0), EGM_OK);

    holder_t h = {.t = t, .log = &log, .freed_before_put = -1};
    h.held = egm__segref_get(t, id);
    assert_non_null(h.held);
    pthread_t thread;
    assert_int_equal(pthread_create(&thread, NULL, hold_then_put, &h), 0);
    assert_int_equal(egm__segref_unlink(t, id, EGM_SEGREF_WAIT), 1);
    /* Returned after the holder's put, with the object freed. */
    assert_int_equal(log.freed, 1);
    assert_int_equal(egm__segref_live(t), 0);
    pthread_join(thread, NULL);
    assert_int_equal(h.freed_before_put, 0);
    assert_int_equal(log.freed, 1);
    egm__segref_destroy(t);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_last_reference_frees, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_check_size, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_one_object_per_id_and_retired_ids,
                                        egm_test_setup_alloc, egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_ids_and_destroy, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_unlink_wait_returns_once_freed, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
