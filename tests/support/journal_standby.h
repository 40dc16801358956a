/* A standby for the master's unit tests, without sockets: a follower of a
 * leader's journal (master/journal.h) whose sender receives each batch in
 * the order it leaves, keeps a copy, hands it to apply (when set) and
 * answers with apply's status (or OK) at once. Its sender takes the
 * journal's lock: called with it held, it hangs (the test's timeout tells).
 * Batches go through the
 * journal's own paths: the requests that wait send them, and
 * egm_test_standby_take sends as the follower's thread does. */
#ifndef EGM_TEST_JOURNAL_STANDBY_H
#define EGM_TEST_JOURNAL_STANDBY_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "master/journal.h"

#define EGM_TEST_STANDBY_BATCHES 64

typedef struct egm_test_standby {
    egm_journal_t *j;
    egm_journal_follower_t *f;
    /* Called as each batch arrives, in the order they leave (one at a time):
     * its status answers the batch. */
    egm_status_t (*apply)(void *arg, uint64_t from, uint64_t to, const uint8_t *ops, size_t len);
    void *apply_arg;
    /* Batches received, the first EGM_TEST_STANDBY_BATCHES kept (ops
     * egm_malloc'ed: freed by egm_test_standby_leave), each checked to start
     * where the one before ended. */
    size_t batches;
    uint8_t *ops[EGM_TEST_STANDBY_BATCHES];
    size_t len[EGM_TEST_STANDBY_BATCHES];
    uint64_t from[EGM_TEST_STANDBY_BATCHES], to[EGM_TEST_STANDBY_BATCHES];
} egm_test_standby_t;

/* Follows j from its end, returned (sb new, or left), at most max bytes of ops a batch (1:
 * one op a batch, so that egm_test_standby_ack_to can stop at any op), in
 * sync when in_sync (requests wait for it). sb's apply and apply_arg are
 * kept. */
uint64_t egm_test_standby_follow(egm_test_standby_t *sb, egm_journal_t *j, size_t max, int in_sync);
/* From now on at most max bytes of ops a batch. */
void egm_test_standby_set_max(egm_test_standby_t *sb, size_t max);
/* Sends sb the next batch as its follower's thread does, waiting up to
 * wait_ms for one: 1 once it was answered OK, 0 when none came. Any other
 * outcome fails the test. */
int egm_test_standby_take(egm_test_standby_t *sb, uint64_t wait_ms);
/* Takes every batch pending. */
void egm_test_standby_take_all(egm_test_standby_t *sb);
/* Takes batches until sb acknowledged exactly pos (an op's end). */
void egm_test_standby_ack_to(egm_test_standby_t *sb, uint64_t pos);
/* Up to where sb acknowledged. */
uint64_t egm_test_standby_acked(egm_test_standby_t *sb);
/* Unfollows and frees the copies kept. */
void egm_test_standby_leave(egm_test_standby_t *sb);

#endif
