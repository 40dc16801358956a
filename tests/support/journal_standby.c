/* A standby for the master's unit tests (journal_standby.h). */
#include "support/journal_standby.h"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "common/log.h"

/* The batch's answer, from its arrival to its end. */
typedef struct {
    egm_status_t status;
    char error[200];
} answer_t;

static egm_status_t receive(void *arg, uint64_t from, uint64_t to, const uint8_t *ops, size_t len,
                            void **call_p)
{
    egm_test_standby_t *sb = arg;
    /* Called without the journal's lock: this takes it (or hangs). */
    (void)egm__journal_follower_acked(sb->j, sb->f);
    answer_t *a = egm_calloc(1, sizeof(*a), "test.standby");
    assert_non_null(a);
    if (sb->batches > 0 && sb->batches <= EGM_TEST_STANDBY_BATCHES)
        assert_true(from == sb->to[sb->batches - 1]); /* in order, no gap */
    if (sb->batches < EGM_TEST_STANDBY_BATCHES) {
        size_t i = sb->batches;
        sb->ops[i] = egm_malloc(len, "test.standby");
        assert_non_null(sb->ops[i]);
        memcpy(sb->ops[i], ops, len);
        sb->len[i] = len;
        sb->from[i] = from;
        sb->to[i] = to;
    }
    sb->batches++;
    a->status = sb->apply != NULL ? sb->apply(sb->apply_arg, from, to, ops, len) : EGM_OK;
    if (a->status != EGM_OK)
        snprintf(a->error, sizeof(a->error), "%s", egm_last_error());
    *call_p = a;
    return EGM_OK;
}

static egm_status_t answer(void *arg, void *call)
{
    (void)arg;
    answer_t *a = call;
    egm_status_t s = a->status;
    if (s != EGM_OK)
        egm__set_error(s, "%s", a->error);
    egm_free(a);
    return s;
}

uint64_t egm_test_standby_follow(egm_test_standby_t *sb, egm_journal_t *j, size_t max, int in_sync)
{
    uint64_t pos;
    sb->j = j;
    sb->batches = 0;
    assert_int_equal(egm__journal_follow(j, &sb->f, &pos), EGM_OK);
    egm_test_standby_set_max(sb, max);
    if (in_sync)
        egm__journal_set_in_sync(j, sb->f);
    return pos;
}

void egm_test_standby_set_max(egm_test_standby_t *sb, size_t max)
{
    egm__journal_set_sender(sb->j, sb->f, receive, answer, sb, max);
}

int egm_test_standby_take(egm_test_standby_t *sb, uint64_t wait_ms)
{
    egm_status_t s = egm__journal_send_next(sb->j, sb->f, wait_ms);
    if (s == EGM_ERR_TIMEOUT)
        return 0;
    assert_int_equal(s, EGM_OK);
    return 1;
}

void egm_test_standby_take_all(egm_test_standby_t *sb)
{
    while (egm_test_standby_take(sb, 0))
        ;
}

void egm_test_standby_ack_to(egm_test_standby_t *sb, uint64_t pos)
{
    while (egm_test_standby_acked(sb) < pos)
        assert_true(egm_test_standby_take(sb, 0));
    assert_true(egm_test_standby_acked(sb) == pos);
}

uint64_t egm_test_standby_acked(egm_test_standby_t *sb)
{
    return egm__journal_follower_acked(sb->j, sb->f);
}

void egm_test_standby_leave(egm_test_standby_t *sb)
{
    egm__journal_unfollow(sb->j, sb->f);
    sb->f = NULL;
    size_t kept = sb->batches < EGM_TEST_STANDBY_BATCHES ? sb->batches : EGM_TEST_STANDBY_BATCHES;
    for (size_t i = 0; i < kept; i++)
        egm_free(sb->ops[i]);
    sb->batches = 0;
}
