/* The leader's journal: every change of the master's durable state (segments
 * mounted and gone, objects committed and gone, space reserved for writers
 * and readers) as ops, streamed to the standby masters (master/replication.c)
 * and acknowledged by them before the RPC that made the change is answered
 * (docs/ha.md "State handover"). Standbys keep what they receive in a mirror
 * (master/mirror.c) and take it over when elected.
 *
 * Ops are state, not commands: "segment S is mounted with descriptor D",
 * "key K is COMPLETE with these replicas", "key K is gone", "this range is
 * in use for this long". Applying one again, or applying the latest of two
 * on one key, gives the same state, so a snapshot followed by the stream
 * needs no exact cut.
 *
 * Wire form of an op (common/wire.h's little-endian integers):
 *   SEGMENT       u8 1, u32 n, n bytes: the segment's SegmentDesc (owner inside)
 *   SEGMENT_GONE  u8 2, id(16)
 *   OBJECT        u8 3, u16 key_len, key, u64 size, id writer, u8 pins (bit 0
 *                 soft, bit 1 hard), u8 placed, u8 n, n x (id segment, u64 offset)
 *   OBJECT_GONE   u8 4, u16 key_len, key
 *   RESERVE       u8 5, id segment, u64 offset, u64 length, u64 for_ms
 *   SLAB          u8 6, u64 id, id owner, u64 size, u64 for_ms, u8 logged, u8
 *                 n, n x (id segment, u64 base), u64 prefix, u32 n_extra,
 *                 n_extra x u64: a slab granted, whether its writer keeps
 *                 its commit log (SlabGrant `log`), the seqs of that log
 *                 known (master/seq_set.h; common/slab_log.h)
 *   SLAB_SEEN     u8 7, u64 id, u64 seq: one more entry of its log known
 *   SLAB_GONE     u8 8, u64 id: returned or expired (its log is not read)
 *
 * Emitters call the egm__journal_* functions under the locks that order
 * their change (an object's shard, the index's space lock, the master's lock
 * exclusive for segments), so that the journal's order is the order in which
 * changes of one key or range happened. Thread-safe. */
#ifndef EGM_MASTER_JOURNAL_H
#define EGM_MASTER_JOURNAL_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "common/id.h"

struct egm_segment;
struct egm_object;
struct egm_slab;

enum {
    EGM_JOP_SEGMENT = 1,
    EGM_JOP_SEGMENT_GONE = 2,
    EGM_JOP_OBJECT = 3,
    EGM_JOP_OBJECT_GONE = 4,
    EGM_JOP_RESERVE = 5,
    EGM_JOP_SLAB = 6,
    EGM_JOP_SLAB_SEEN = 7,
    EGM_JOP_SLAB_GONE = 8,
};

/* A growing byte buffer of encoded ops; `failed` once an append found no
 * memory (the buffer then holds what fitted before). */
typedef struct egm_jbuf {
    uint8_t *buf;
    size_t len;
    size_t cap;
    int failed;
} egm_jbuf_t;

void egm__jbuf_free(egm_jbuf_t *b);

/* Encoders: append one op to b. */
void egm__jenc_segment(egm_jbuf_t *b, const struct egm_segment *seg);
void egm__jenc_segment_gone(egm_jbuf_t *b, egm_id_t id);
/* A COMPLETE object: its live replicas, and how many it was placed with. */
void egm__jenc_object(egm_jbuf_t *b, const struct egm_object *obj);
void egm__jenc_object_gone(egm_jbuf_t *b, const char *key, size_t key_len);
void egm__jenc_reserve(egm_jbuf_t *b, egm_id_t segment, uint64_t offset, uint64_t length,
                       uint64_t for_ms);
/* A slab, its extents whose segments are mounted, and its seen set. */
void egm__jenc_slab(egm_jbuf_t *b, const struct egm_slab *slab, uint64_t for_ms);
void egm__jenc_slab_seen(egm_jbuf_t *b, uint64_t id, uint64_t seq);
void egm__jenc_slab_gone(egm_jbuf_t *b, uint64_t id);

#define EGM_JOP_REPLICAS_MAX 16 /* = EGM_MASTER_REPLICA_MAX */

/* One decoded op; pointers into the decoded buffer. */
typedef struct {
    int kind;
    const uint8_t *desc; /* SEGMENT */
    size_t desc_len;
    egm_id_t segment; /* SEGMENT_GONE, RESERVE */
    const char *key;  /* OBJECT, OBJECT_GONE (not NUL-terminated) */
    size_t key_len;
    uint64_t size; /* OBJECT */
    egm_id_t writer;
    uint8_t soft_pin, hard_pin, placed;
    uint32_t n_replicas;
    egm_id_t replica_segment[EGM_JOP_REPLICAS_MAX];
    uint64_t replica_offset[EGM_JOP_REPLICAS_MAX];
    uint64_t offset, length, for_ms; /* RESERVE; for_ms also SLAB */
    /* SLAB (writer: its owner, size: of each extent, replica_*: its extents,
     * logged: granted with `log`), SLAB_SEEN, SLAB_GONE */
    uint64_t slab_id, seq, prefix;
    uint8_t logged;
    uint32_t n_extra;
    const uint8_t *extra; /* n_extra u64 */
} egm_jop_t;

/* Decodes the op at *pos of p[0..len) and moves *pos past it. EGM_ERR_INVALID_ARG
 * naming the offset and what is wrong (unknown kind, truncated, a key of 0 or
 * more than 4096 bytes, more than 16 replicas, fewer placed than live). */
egm_status_t egm__jdec_next(const uint8_t *p, size_t len, size_t *pos, egm_jop_t *op);

typedef struct egm_journal egm_journal_t;
typedef struct egm_journal_follower egm_journal_follower_t;

egm_status_t egm__journal_create(egm_journal_t **j_p);
/* Followers must be gone (egm__journal_unfollow). NULL is a no-op. */
void egm__journal_destroy(egm_journal_t *j);

/* Emitting: each appends the op when the journal has a follower (nothing
 * otherwise: no standby, nothing to send) and notes, for the calling thread,
 * the position that egm__journal_wait waits for. j may be NULL (no HA). */
void egm__journal_segment(egm_journal_t *j, const struct egm_segment *seg);
void egm__journal_segment_gone(egm_journal_t *j, egm_id_t id);
void egm__journal_object(egm_journal_t *j, const struct egm_object *obj);
void egm__journal_object_gone(egm_journal_t *j, const char *key, size_t key_len);
void egm__journal_reserve(egm_journal_t *j, egm_id_t segment, uint64_t offset, uint64_t length,
                          uint64_t for_ms);
void egm__journal_slab(egm_journal_t *j, const struct egm_slab *slab, uint64_t for_ms);
void egm__journal_slab_seen(egm_journal_t *j, uint64_t id, uint64_t seq);
void egm__journal_slab_gone(egm_journal_t *j, uint64_t id);

/* Waits until every in-sync follower has acknowledged the last op the
 * calling thread emitted (at once when it emitted none since its last wait,
 * or no follower is in sync), at most timeout_ms. EGM_OK, or
 * EGM_ERR_UNREACHABLE naming the wait. The thread's position is cleared
 * either way. While a follower with a sender has not been given the ops
 * waited for and fewer than a few batches to it await their answers, the
 * waiting thread sends them itself (with whatever else is pending: a group
 * commit), without waking any other thread and without waiting for the
 * answers of the batches before. */
egm_status_t egm__journal_wait(egm_journal_t *j, uint64_t timeout_ms);

/* Without blocking the thread (an RPC thread serving other requests
 * meanwhile): egm__journal_try sends, like egm__journal_wait, to the
 * followers that may be sent to when may_send (blocking for their answer: for a
 * thread with nothing else to do); else it writes the ops to them without
 * waiting, leaving the answers to the followers' threads
 * (egm__journal_send_next), which it wakes; and answers EGM_OK when every in-sync follower has the
 * calling thread's last op (or there is none: the thread's position is cleared), or EGM_INPROGRESS
 * when some still lack it. Then egm__journal_notify calls done(arg, status, error) once they have
 * it (EGM_OK, error "") or timeout_ms passed (EGM_ERR_UNREACHABLE and its text), from whichever
 * thread saw that (the one that got the acknowledgement, a follower's thread between its sends, the
 * caller of egm__journal_expire; at once, here, when nothing is left to wait for), with no lock
 * held; at the journal's destruction, with EGM_ERR_UNREACHABLE. It clears the thread's position.
 * Ops waited for that could not be written then (the batches in flight at their limit, or another
 * being written) are sent by whoever sends next: the follower's thread, or a waiting request. */
egm_status_t egm__journal_try(egm_journal_t *j, int may_send);
/* The calling thread's last op position (0: none since its last wait), and
 * egm__journal_take_position the same, clearing it: for a request answered
 * without waiting (a Commit its slab log describes, docs/ha.md), whose ops the
 * followers' threads take with their next batch (nobody wakes them for it). */
uint64_t egm__journal_position(const egm_journal_t *j);
uint64_t egm__journal_take_position(egm_journal_t *j);
/* Makes pos the calling thread's position (0: nothing to wait for): a
 * request whose own changes need no wait (described in the pool) but that
 * must not be answered before an earlier op is confirmed (a Commit into a
 * slab granted before the standbys held it). No-op for j NULL. */
void egm__journal_wait_for(egm_journal_t *j, uint64_t pos);
/* For a request answered without waiting whose ops are wanted soon (a
 * SlabGrant answered before the standbys hold it, docs/ha.md): clears the
 * calling thread's position and wakes the followers' threads to send. */
void egm__journal_kick(egm_journal_t *j);
/* The journal's end and the position every in-sync follower acknowledged
 * (the end when none is in sync); the number of followers in sync. */
size_t egm__journal_marks(egm_journal_t *j, uint64_t *end_p, uint64_t *confirmed_p);
/* Whether every in-sync follower acknowledged pos (1 for pos 0 or j NULL). */
int egm__journal_confirmed(egm_journal_t *j, uint64_t pos);
typedef void (*egm_journal_done_fn)(void *arg, egm_status_t status, const char *error);
void egm__journal_notify(egm_journal_t *j, uint64_t timeout_ms, egm_journal_done_fn done,
                         void *arg);
/* Tells the waiters whose time ran out (the master's tick calls it: a
 * follower's thread may be blocked in a send or in etcd meanwhile). NULL is a
 * no-op. */
void egm__journal_expire(egm_journal_t *j);

/* Followers (master/replication.c). A new follower starts at the journal's
 * current end, returned in *pos_p: the caller makes sure nothing is emitted
 * meanwhile (the master's lock exclusive) and sends a snapshot of the state
 * first. It is not in sync (no wait waits for it) until
 * egm__journal_set_in_sync. */
egm_status_t egm__journal_follow(egm_journal_t *j, egm_journal_follower_t **f_p, uint64_t *pos_p);
/* f's ops go through a sender (egm__journal_set_sender): start sends
 * [from, to), returning once the batch left (batches leave in the order of
 * the start calls, one call at a time per follower) with the call in flight
 * in *call_p; end waits for its answer, EGM_OK once f applied it, and ends
 * the call. Both called without the journal's lock, by the thread that
 * took the batch: a waiting request's, or egm__journal_send_next's caller.
 * Several batches may await their answers at once (the next one need not
 * wait for the last one's round trip): f must apply them in the order they
 * left, refusing one not at its position, so that an answer also
 * acknowledges every batch before it. */
typedef egm_status_t (*egm_journal_start_fn)(void *arg, uint64_t from, uint64_t to,
                                             const uint8_t *ops, size_t len, void **call_p);
typedef egm_status_t (*egm_journal_end_fn)(void *arg, void *call);
/* Lets f's ops go through its sender (replication sets it before
 * egm__journal_set_in_sync; a follower without one is sent nothing),
 * max bytes of ops at a time (whole ops, one at least): by the waiting
 * requests and egm__journal_send_next. A send that fails
 * marks f failed: egm__journal_send_next then answers EGM_ERR_UNREACHABLE,
 * and waits still wait for f until it is unfollowed. Called again, it
 * changes the sender or max for the batches after. */
void egm__journal_set_sender(egm_journal_t *j, egm_journal_follower_t *f,
                             egm_journal_start_fn start, egm_journal_end_fn end, void *arg,
                             size_t max);
/* For f's own thread: reads the answer of the oldest batch a request wrote
 * and left to it (egm__journal_try), else sends f the next batch through its
 * sender, waiting up to wait_ms for either (and for room among the batches
 * in flight): EGM_OK once f applied it; EGM_ERR_TIMEOUT when there was
 * nothing to do; EGM_ERR_NO_SPACE when f fell so far behind that the
 * journal dropped it, EGM_ERR_UNREACHABLE when a send to it failed, or the
 * error of the answer it read (any way, it must start over with a
 * snapshot). Waiters whose time ran out are
 * told on the way. egm__journal_unfollow reads the answers left when
 * nobody calls this any more. */
egm_status_t egm__journal_send_next(egm_journal_t *j, egm_journal_follower_t *f, uint64_t wait_ms);
/* Up to where f acknowledged. */
uint64_t egm__journal_follower_acked(egm_journal_t *j, egm_journal_follower_t *f);
/* From now on waits wait for f; returns the journal's end at that moment:
 * once f has acknowledged it, f holds every op any wait returned for. */
uint64_t egm__journal_set_in_sync(egm_journal_t *j, egm_journal_follower_t *f);
/* Waits no longer wait for f, and it is forgotten. The caller has made sure
 * first that f can no longer be elected (master/replication.c). */
void egm__journal_unfollow(egm_journal_t *j, egm_journal_follower_t *f);

typedef struct {
    uint64_t followers;
    uint64_t in_sync;
    uint64_t end;       /* bytes of ops emitted while followed, since start */
    uint64_t lag_bytes; /* the most any in-sync follower has not acknowledged */
    uint64_t waits_timed_out;
    /* Batches sent through the followers' senders: by a waiting request's
     * thread, by egm__journal_send_next's caller; of all those, the ones
     * that left while an earlier one to the same follower awaited its
     * answer. Requests that waited without blocking (egm__journal_notify
     * with something left to wait for). */
    uint64_t batches_by_request, batches_by_thread, batches_pipelined;
    uint64_t waits_notified;
} egm_journal_stats_t;

void egm__journal_stats(egm_journal_t *j, egm_journal_stats_t *stats_p);

#endif
