/* The leader's journal of state changes (journal.h): op encoding, the log of
 * encoded ops its followers have not all been sent, and the waits of the RPC
 * threads for their acknowledgement. */
#include "master/journal.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>
#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/wire.h"
#include "master/object_index.h"
#include "master/segment_table.h"
#include "master/slabs.h"

/* A follower whose unsent ops pass this is dropped (it starts over with a
 * snapshot): the leader's memory does not grow without bound behind a
 * standby that stopped reading. */
#define EGM_JOURNAL_BACKLOG_MAX (256u << 20)
/* Batches sent to one follower through its sender and not answered yet: a
 * change need not wait for the answer of the batch before its own. */
#define EGM_JOURNAL_IN_FLIGHT_MAX 4
/* Ops a request's RPC thread writes to a follower without waiting for the
 * answer (egm__journal_try): more is left to the follower's thread, so as
 * not to hold up the requests behind it. */
#define EGM_JOURNAL_LEAVE_MAX (64u << 10)

void egm__jbuf_free(egm_jbuf_t *b)
{
    egm_free(b->buf);
    memset(b, 0, sizeof(*b));
}

/* Room for n more bytes; 0 (and failed) when there is none. */
static int room(egm_jbuf_t *b, size_t n)
{
    if (b->failed)
        return 0;
    if (b->len + n <= b->cap)
        return 1;
    size_t cap = b->cap < 4096 ? 4096 : b->cap * 2;
    while (cap < b->len + n)
        cap *= 2;
    uint8_t *buf = egm_realloc(b->buf, cap, "master.journal");
    if (buf == NULL) {
        b->failed = 1;
        return 0;
    }
    b->buf = buf;
    b->cap = cap;
    return 1;
}

static void put_u8(egm_jbuf_t *b, uint8_t v)
{
    b->buf[b->len++] = v;
}

static void put_u16(egm_jbuf_t *b, uint16_t v)
{
    egm__wire_put_u16(b->buf + b->len, v);
    b->len += 2;
}

static void put_u64(egm_jbuf_t *b, uint64_t v)
{
    egm__wire_put_u64(b->buf + b->len, v);
    b->len += 8;
}

static void put_id(egm_jbuf_t *b, egm_id_t id)
{
    egm__wire_put_id(b->buf + b->len, id);
    b->len += 16;
}

static void put_bytes(egm_jbuf_t *b, const void *p, size_t n)
{
    memcpy(b->buf + b->len, p, n);
    b->len += n;
}

void egm__jenc_segment(egm_jbuf_t *b, const egm_segment_t *seg)
{
    size_t n = seg->desc_pb.len;
    if (!room(b, 5 + n))
        return;
    put_u8(b, EGM_JOP_SEGMENT);
    egm__wire_put_u32(b->buf + b->len, (uint32_t)n);
    b->len += 4;
    put_bytes(b, seg->desc_pb.data, n);
}

void egm__jenc_segment_gone(egm_jbuf_t *b, egm_id_t id)
{
    if (!room(b, 17))
        return;
    put_u8(b, EGM_JOP_SEGMENT_GONE);
    put_id(b, id);
}

void egm__jenc_object(egm_jbuf_t *b, const egm_object_t *obj)
{
    uint32_t live = 0;
    for (uint32_t i = 0; i < obj->n_replicas; i++)
        live += obj->replicas[i].segment != NULL;
    if (!room(b, 3 + obj->key_len + 8 + 16 + 3 + (size_t)live * 24))
        return;
    put_u8(b, EGM_JOP_OBJECT);
    put_u16(b, obj->key_len);
    put_bytes(b, egm__object_key(obj), obj->key_len);
    put_u64(b, obj->size);
    put_id(b, obj->writer);
    put_u8(b, (uint8_t)(obj->soft_pin | (obj->hard_pin << 1)));
    put_u8(b, obj->n_replicas);
    put_u8(b, (uint8_t)live);
    for (uint32_t i = 0; i < obj->n_replicas; i++) {
        const egm_replica_t *r = &obj->replicas[i];
        if (r->segment == NULL)
            continue;
        put_id(b, r->segment->desc.id);
        put_u64(b, egm__replica_offset(r));
    }
}

void egm__jenc_object_gone(egm_jbuf_t *b, const char *key, size_t key_len)
{
    if (!room(b, 3 + key_len))
        return;
    put_u8(b, EGM_JOP_OBJECT_GONE);
    put_u16(b, (uint16_t)key_len);
    put_bytes(b, key, key_len);
}

void egm__jenc_reserve(egm_jbuf_t *b, egm_id_t segment, uint64_t offset, uint64_t length,
                       uint64_t for_ms)
{
    if (!room(b, 1 + 16 + 24))
        return;
    put_u8(b, EGM_JOP_RESERVE);
    put_id(b, segment);
    put_u64(b, offset);
    put_u64(b, length);
    put_u64(b, for_ms);
}

void egm__jenc_slab(egm_jbuf_t *b, const egm_slab_t *slab, uint64_t for_ms)
{
    uint32_t live = 0;
    for (uint32_t i = 0; i < slab->n_extents; i++)
        live += slab->extents[i].segment != NULL;
    if (!room(b, 1 + 8 + 16 + 16 + 2 + (size_t)live * 24 + 12 + slab->seen.n * 8))
        return;
    put_u8(b, EGM_JOP_SLAB);
    put_u64(b, slab->id);
    put_id(b, slab->owner);
    put_u64(b, slab->size);
    put_u64(b, for_ms);
    put_u8(b, (uint8_t)(slab->logged != 0));
    put_u8(b, (uint8_t)live);
    for (uint32_t i = 0; i < slab->n_extents; i++) {
        if (slab->extents[i].segment == NULL)
            continue;
        put_id(b, slab->extents[i].segment->desc.id);
        put_u64(b, slab->extents[i].base);
    }
    put_u64(b, slab->seen.prefix);
    egm__wire_put_u32(b->buf + b->len, (uint32_t)slab->seen.n);
    b->len += 4;
    for (size_t i = 0; i < slab->seen.n; i++)
        put_u64(b, slab->seen.extra[i]);
}

void egm__jenc_slab_seen(egm_jbuf_t *b, uint64_t id, uint64_t seq)
{
    if (!room(b, 17))
        return;
    put_u8(b, EGM_JOP_SLAB_SEEN);
    put_u64(b, id);
    put_u64(b, seq);
}

void egm__jenc_slab_gone(egm_jbuf_t *b, uint64_t id)
{
    if (!room(b, 9))
        return;
    put_u8(b, EGM_JOP_SLAB_GONE);
    put_u64(b, id);
}

/* ---- decoding ---------------------------------------------------------------- */

#define NEED(n, what)                                                                              \
    do {                                                                                           \
        if (len - at < (size_t)(n))                                                                \
            return egm__set_error(EGM_ERR_INVALID_ARG, "journal op at %zu: truncated %s", start,   \
                                  what);                                                           \
    } while (0)

static egm_status_t dec_key(const uint8_t *p, size_t len, size_t start, size_t *at_p, egm_jop_t *op)
{
    size_t at = *at_p;
    NEED(2, "key length");
    op->key_len = egm__wire_get_u16(p + at);
    at += 2;
    if (op->key_len == 0 || op->key_len > EGM_MASTER_KEY_MAX)
        return egm__set_error(EGM_ERR_INVALID_ARG, "journal op at %zu: key of %zu bytes", start,
                              op->key_len);
    NEED(op->key_len, "key");
    op->key = (const char *)p + at;
    *at_p = at + op->key_len;
    return EGM_OK;
}

egm_status_t egm__jdec_next(const uint8_t *p, size_t len, size_t *pos, egm_jop_t *op)
{
    size_t start = *pos, at = start;
    egm_status_t s;

    memset(op, 0, sizeof(*op));
    NEED(1, "kind");
    op->kind = p[at++];
    switch (op->kind) {
    case EGM_JOP_SEGMENT:
        NEED(4, "descriptor length");
        op->desc_len = egm__wire_get_u32(p + at);
        at += 4;
        NEED(op->desc_len, "descriptor");
        op->desc = p + at;
        at += op->desc_len;
        break;
    case EGM_JOP_SEGMENT_GONE:
        NEED(16, "segment id");
        op->segment = egm__wire_get_id(p + at);
        at += 16;
        break;
    case EGM_JOP_OBJECT:
        if ((s = dec_key(p, len, start, &at, op)) != EGM_OK)
            return s;
        NEED(8 + 16 + 3, "object");
        op->size = egm__wire_get_u64(p + at);
        op->writer = egm__wire_get_id(p + at + 8);
        op->soft_pin = p[at + 24] & 1;
        op->hard_pin = (p[at + 24] >> 1) & 1;
        op->placed = p[at + 25];
        op->n_replicas = p[at + 26];
        at += 27;
        if (op->n_replicas > EGM_JOP_REPLICAS_MAX || op->placed < op->n_replicas ||
            op->placed > EGM_JOP_REPLICAS_MAX || op->size == 0)
            return egm__set_error(EGM_ERR_INVALID_ARG,
                                  "journal op at %zu: object of %llu bytes with %u live of %u "
                                  "placed replicas (at most %d)",
                                  start, (unsigned long long)op->size, op->n_replicas, op->placed,
                                  EGM_JOP_REPLICAS_MAX);
        NEED((size_t)op->n_replicas * 24, "replicas");
        for (uint32_t i = 0; i < op->n_replicas; i++, at += 24) {
            op->replica_segment[i] = egm__wire_get_id(p + at);
            op->replica_offset[i] = egm__wire_get_u64(p + at + 16);
        }
        break;
    case EGM_JOP_OBJECT_GONE:
        if ((s = dec_key(p, len, start, &at, op)) != EGM_OK)
            return s;
        break;
    case EGM_JOP_RESERVE:
        NEED(16 + 24, "reserve");
        op->segment = egm__wire_get_id(p + at);
        op->offset = egm__wire_get_u64(p + at + 16);
        op->length = egm__wire_get_u64(p + at + 24);
        op->for_ms = egm__wire_get_u64(p + at + 32);
        at += 40;
        break;
    case EGM_JOP_SLAB:
        NEED(8 + 16 + 16 + 2, "slab");
        op->slab_id = egm__wire_get_u64(p + at);
        op->writer = egm__wire_get_id(p + at + 8);
        op->size = egm__wire_get_u64(p + at + 24);
        op->for_ms = egm__wire_get_u64(p + at + 32);
        op->logged = p[at + 40] != 0;
        op->n_replicas = p[at + 41];
        at += 42;
        if (op->n_replicas > EGM_JOP_REPLICAS_MAX || op->slab_id == 0 || op->size == 0)
            return egm__set_error(EGM_ERR_INVALID_ARG,
                                  "journal op at %zu: slab %llu of %llu bytes with %u extents "
                                  "(at most %d)",
                                  start, (unsigned long long)op->slab_id,
                                  (unsigned long long)op->size, op->n_replicas,
                                  EGM_JOP_REPLICAS_MAX);
        NEED((size_t)op->n_replicas * 24 + 12, "slab extents");
        for (uint32_t i = 0; i < op->n_replicas; i++, at += 24) {
            op->replica_segment[i] = egm__wire_get_id(p + at);
            op->replica_offset[i] = egm__wire_get_u64(p + at + 16);
        }
        op->prefix = egm__wire_get_u64(p + at);
        op->n_extra = egm__wire_get_u32(p + at + 8);
        at += 12;
        NEED((size_t)op->n_extra * 8, "slab seqs");
        op->extra = p + at;
        at += (size_t)op->n_extra * 8;
        break;
    case EGM_JOP_SLAB_SEEN:
        NEED(16, "slab seq");
        op->slab_id = egm__wire_get_u64(p + at);
        op->seq = egm__wire_get_u64(p + at + 8);
        at += 16;
        break;
    case EGM_JOP_SLAB_GONE:
        NEED(8, "slab id");
        op->slab_id = egm__wire_get_u64(p + at);
        at += 8;
        break;
    default:
        return egm__set_error(EGM_ERR_INVALID_ARG, "journal op at %zu: unknown kind %d", start,
                              op->kind);
    }
    *pos = at;
    return EGM_OK;
}

/* ---- the log and its followers ------------------------------------------------ */

/* A batch written to a follower whose answer is not read yet. */
typedef struct {
    void *call; /* its sender's */
    uint64_t from, to;
} journal_call_t;

struct egm_journal_follower {
    egm_journal_follower_t *next;
    uint64_t sent;  /* position up to which it was given ops */
    uint64_t acked; /* ... and acknowledged them */
    int in_sync;
    int cut;       /* fell behind past EGM_JOURNAL_BACKLOG_MAX */
    int failed;    /* a send through its sender failed */
    int writing;   /* a thread is writing it a batch: the next one leaves after */
    int in_flight; /* batches written through its sender, not answered yet */
    int leaving;   /* being unfollowed: no new batch goes through its sender */
    /* Of those in flight, the ones a request's thread wrote and left to
     * egm__journal_send_next's caller to read the answer of, oldest first
     * (a ring from first_left). */
    journal_call_t left[EGM_JOURNAL_IN_FLIGHT_MAX];
    int first_left, n_left;
    egm_journal_start_fn start;
    egm_journal_end_fn end;
    void *send_arg;
    size_t send_max;
};

/* A request told when its ops are acknowledged (egm__journal_notify). */
typedef struct journal_waiter {
    struct journal_waiter *next;
    uint64_t pos;
    uint64_t deadline_ms;
    uint64_t timeout_ms; /* what the timeout's text says */
    egm_journal_done_fn done;
    void *arg;
    egm_status_t status; /* once settled */
} journal_waiter_t;

struct egm_journal {
    pthread_mutex_t lock;
    pthread_cond_t more;  /* ops to send (a request waits for them), a send by a waiting
                             request ended, or a follower was cut */
    pthread_cond_t acked; /* a follower acknowledged, or left the in-sync set */
    egm_jbuf_t log;       /* ops from position base on */
    uint64_t base;
    egm_journal_follower_t *followers;
    atomic_int n_followers; /* read without the lock by emitters */
    uint64_t waits_timed_out;
    uint64_t batches_by_request, batches_by_thread, batches_pipelined, waits_notified;
    journal_waiter_t *waiters; /* in the order they came */
};

/* The calling thread's last op position, for egm__journal_wait. */
static _Thread_local uint64_t tl_pos;
static _Thread_local const egm_journal_t *tl_journal;

egm_status_t egm__journal_create(egm_journal_t **j_p)
{
    egm_journal_t *j = egm_calloc(1, sizeof(*j), "master.journal");
    *j_p = NULL;
    if (j == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory creating the journal");
    pthread_mutex_init(&j->lock, NULL);
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_cond_init(&j->more, &attr);
    pthread_cond_init(&j->acked, &attr);
    pthread_condattr_destroy(&attr);
    *j_p = j;
    return EGM_OK;
}

void egm__journal_destroy(egm_journal_t *j)
{
    if (j == NULL)
        return;
    for (journal_waiter_t *w = j->waiters, *next; w != NULL; w = next) {
        next = w->next;
        w->done(w->arg, EGM_ERR_UNREACHABLE, "the master stopped before a standby confirmed");
        egm_free(w);
    }
    while (j->followers != NULL) {
        egm_journal_follower_t *f = j->followers;
        j->followers = f->next;
        egm_free(f);
    }
    egm__jbuf_free(&j->log);
    pthread_cond_destroy(&j->more);
    pthread_cond_destroy(&j->acked);
    pthread_mutex_destroy(&j->lock);
    egm_free(j);
}

static uint64_t end_of(const egm_journal_t *j)
{
    return j->base + j->log.len;
}

/* Drops the bytes every follower was given. With the lock. */
static void trim(egm_journal_t *j)
{
    uint64_t low = end_of(j);
    for (egm_journal_follower_t *f = j->followers; f != NULL; f = f->next)
        if (!f->cut && f->sent < low)
            low = f->sent;
    size_t drop = (size_t)(low - j->base);
    if (drop == 0)
        return;
    memmove(j->log.buf, j->log.buf + drop, j->log.len - drop);
    j->log.len -= drop;
    j->base = low;
}

/* After an append: cuts followers too far behind. With the lock. */
static void appended(egm_journal_t *j)
{
    uint64_t end = end_of(j);
    int cut = 0;
    for (egm_journal_follower_t *f = j->followers; f != NULL; f = f->next)
        if (!f->cut && end - f->sent > EGM_JOURNAL_BACKLOG_MAX) {
            f->cut = 1;
            cut = 1;
        }
    if (cut) {
        trim(j);
        pthread_cond_broadcast(&j->more); /* its thread finds out now */
    }
    /* The follower threads are not woken: the request that made the change
     * sends it (egm__journal_try), or finds the batches in flight at their
     * limit, after which whoever sends next takes what is pending. */
    tl_pos = end;
    tl_journal = j;
}

#define EMIT(j, enc_call)                                                                          \
    do {                                                                                           \
        if ((j) == NULL || atomic_load_explicit(&(j)->n_followers, memory_order_acquire) == 0)     \
            return;                                                                                \
        pthread_mutex_lock(&(j)->lock);                                                            \
        if ((j)->followers != NULL) {                                                              \
            enc_call;                                                                              \
            appended(j);                                                                           \
        }                                                                                          \
        pthread_mutex_unlock(&(j)->lock);                                                          \
    } while (0)

void egm__journal_segment(egm_journal_t *j, const egm_segment_t *seg)
{
    EMIT(j, egm__jenc_segment(&j->log, seg));
}

void egm__journal_segment_gone(egm_journal_t *j, egm_id_t id)
{
    EMIT(j, egm__jenc_segment_gone(&j->log, id));
}

void egm__journal_object(egm_journal_t *j, const egm_object_t *obj)
{
    EMIT(j, egm__jenc_object(&j->log, obj));
}

void egm__journal_object_gone(egm_journal_t *j, const char *key, size_t key_len)
{
    EMIT(j, egm__jenc_object_gone(&j->log, key, key_len));
}

void egm__journal_reserve(egm_journal_t *j, egm_id_t segment, uint64_t offset, uint64_t length,
                          uint64_t for_ms)
{
    EMIT(j, egm__jenc_reserve(&j->log, segment, offset, length, for_ms));
}

void egm__journal_slab(egm_journal_t *j, const egm_slab_t *slab, uint64_t for_ms)
{
    EMIT(j, egm__jenc_slab(&j->log, slab, for_ms));
}

void egm__journal_slab_seen(egm_journal_t *j, uint64_t id, uint64_t seq)
{
    EMIT(j, egm__jenc_slab_seen(&j->log, id, seq));
}

void egm__journal_slab_gone(egm_journal_t *j, uint64_t id)
{
    EMIT(j, egm__jenc_slab_gone(&j->log, id));
}

/* Copies the whole ops after f->sent, up to its sender's max bytes (one at
 * least), and gives them to f. With the lock. */
static egm_status_t take_batch(egm_journal_t *j, egm_journal_follower_t *f, uint8_t **buf_p,
                               size_t *len_p, uint64_t *from_p, uint64_t *to_p)
{
    size_t max = f->send_max;
    const uint8_t *p = j->log.buf + (f->sent - j->base);
    size_t avail = (size_t)(end_of(j) - f->sent), take = 0;
    while (take < avail) {
        size_t next = take;
        egm_jop_t op;
        if (egm__jdec_next(p, avail, &next, &op) != EGM_OK) /* cannot happen: ours */
            return egm__set_error(EGM_ERR_INTERNAL, "journal: %s", egm_last_error());
        if (take > 0 && next > max)
            break;
        take = next;
    }
    uint8_t *copy = egm_malloc(take, "master.journal_batch");
    if (copy == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory sending %zu bytes to a standby",
                              take);
    memcpy(copy, p, take);
    *buf_p = copy;
    *len_p = take;
    *from_p = f->sent;
    f->sent += take;
    *to_p = f->sent;
    return EGM_OK;
}

/* Whether a batch may leave for f through its sender now: it has ops it was
 * not given, no batch is being written to it (batches leave in the order
 * they were taken: the standby refuses one not at its position), it is not
 * being unfollowed, and fewer than EGM_JOURNAL_IN_FLIGHT_MAX await their
 * answer. With the lock. */
static int may_send_to(const egm_journal_t *j, const egm_journal_follower_t *f)
{
    return f->start != NULL && !f->failed && !f->cut && !f->leaving && !f->writing &&
           f->in_flight < EGM_JOURNAL_IN_FLIGHT_MAX && f->sent < end_of(j);
}

/* A batch's answer, read (by f's sender's end): f applied it, and every
 * batch before it (the standby applies batches in order: one connection,
 * served in order, refusing one not at its place), or f failed. With the
 * lock. */
static egm_status_t settle_batch(egm_journal_t *j, egm_journal_follower_t *f,
                                 const journal_call_t *c, egm_status_t s)
{
    f->in_flight--;
    if (s == EGM_OK && c->to > f->acked) {
        f->acked = c->to;
    } else if (s != EGM_OK) { /* said here: the standby's thread only sees that it failed */
        egm_warn("master: sending ops %llu..%llu to a standby: %s", (unsigned long long)c->from,
                 (unsigned long long)c->to, egm_last_error());
        f->failed = 1;
    }
    pthread_cond_broadcast(&j->acked);
    pthread_cond_broadcast(&j->more);
    return s;
}

/* Takes the ops f was not given (up to its sender's max) and writes them
 * through its sender, one writer at a time so that batches leave in the
 * order taken; by_thread: the caller is f's own thread (for the stats).
 * With the lock, which it lets go during the write. EGM_OK with the batch
 * in flight in *c (end_batch reads its answer); else f is failed. */
static egm_status_t write_batch(egm_journal_t *j, egm_journal_follower_t *f, int by_thread,
                                journal_call_t *c)
{
    uint8_t *ops;
    size_t len;
    c->call = NULL;
    egm_status_t s = take_batch(j, f, &ops, &len, &c->from, &c->to);
    if (s != EGM_OK) {
        f->failed = 1;
        pthread_cond_broadcast(&j->more);
        return s;
    }
    f->writing = 1;
    if (f->in_flight > 0)
        j->batches_pipelined++;
    f->in_flight++;
    if (by_thread)
        j->batches_by_thread++;
    else
        j->batches_by_request++;
    trim(j);
    pthread_mutex_unlock(&j->lock);
    s = f->start(f->send_arg, c->from, c->to, ops, len, &c->call);
    egm_free(ops);
    pthread_mutex_lock(&j->lock);
    f->writing = 0;
    pthread_cond_broadcast(&j->more); /* the next batch may leave */
    return s == EGM_OK ? EGM_OK : settle_batch(j, f, c, s);
}

/* Waits for the answer of c, written to f. With the lock, which it lets go
 * meanwhile. */
static egm_status_t end_batch(egm_journal_t *j, egm_journal_follower_t *f, const journal_call_t *c)
{
    pthread_mutex_unlock(&j->lock);
    egm_status_t s = f->end(f->send_arg, c->call);
    pthread_mutex_lock(&j->lock);
    return settle_batch(j, f, c, s);
}

/* Sends f the ops it was not given and waits for the answer, while other
 * threads may send the batches after it. With the lock, let go meanwhile. */
static egm_status_t send_batch(egm_journal_t *j, egm_journal_follower_t *f, int by_thread)
{
    journal_call_t c;
    egm_status_t s = write_batch(j, f, by_thread, &c);
    return s == EGM_OK ? end_batch(j, f, &c) : s;
}

/* Leaves the answer of c, written to f, to f's own thread. With the lock. */
static void leave(egm_journal_follower_t *f, const journal_call_t *c)
{
    f->left[(f->first_left + f->n_left++) % EGM_JOURNAL_IN_FLIGHT_MAX] = *c;
}

/* For a request that waits without blocking its thread (others wait behind
 * it there): writes the ops to each in-sync follower that lacks pos and may
 * be sent to now, when they are few (a short write: more is left to the
 * follower's thread), and leaves each answer to that follower's own thread
 * (egm__journal_send_next), woken for it; so the batch is on its way while
 * that thread wakes. With the lock, let go during the writes. */
static void write_and_leave(egm_journal_t *j, uint64_t pos)
{
    for (egm_journal_follower_t *f = j->followers; f != NULL; f = f->next) {
        journal_call_t c;
        /* f outlives the write: unfollow waits while it is busy */
        if (f->in_sync && f->sent < pos && end_of(j) - f->sent <= EGM_JOURNAL_LEAVE_MAX &&
            may_send_to(j, f) && write_batch(j, f, 0, &c) == EGM_OK)
            leave(f, &c);
    }
    pthread_cond_broadcast(&j->more);
}

/* The oldest batch left to f's own thread, out of the list. With the lock. */
static journal_call_t take_left(egm_journal_follower_t *f)
{
    journal_call_t c = f->left[f->first_left];
    f->first_left = (f->first_left + 1) % EGM_JOURNAL_IN_FLIGHT_MAX;
    f->n_left--;
    return c;
}

/* Whether every in-sync follower acknowledged pos. With the lock. */
static int acked_by_all(const egm_journal_t *j, uint64_t pos)
{
    for (const egm_journal_follower_t *f = j->followers; f != NULL; f = f->next)
        if (f->in_sync && f->acked < pos)
            return 0;
    return 1;
}

/* The waiters whose ops every in-sync follower acknowledged, or whose time
 * ran out, out of the list with their status. With the lock. */
static journal_waiter_t *take_settled(egm_journal_t *j)
{
    journal_waiter_t *settled = NULL, **tail = &settled, **link = &j->waiters;
    uint64_t now = j->waiters != NULL ? egm__now_ms() : 0;
    while (*link != NULL) {
        journal_waiter_t *w = *link;
        if (acked_by_all(j, w->pos))
            w->status = EGM_OK;
        else if (now >= w->deadline_ms)
            w->status = EGM_ERR_UNREACHABLE;
        else {
            link = &w->next;
            continue;
        }
        if (w->status != EGM_OK)
            j->waits_timed_out++;
        *link = w->next;
        w->next = NULL;
        *tail = w;
        tail = &w->next;
    }
    return settled;
}

static void timeout_text(char *buf, size_t len, uint64_t timeout_ms)
{
    snprintf(buf, len,
             "a standby master did not confirm this change within %llu ms (it is applied here; "
             "enable_ha)",
             (unsigned long long)timeout_ms);
}

/* Lets go of the lock, then tells the settled waiters. */
static void unlock_and_settle(egm_journal_t *j)
{
    journal_waiter_t *w = j->waiters != NULL ? take_settled(j) : NULL;
    pthread_mutex_unlock(&j->lock);
    while (w != NULL) {
        journal_waiter_t *next = w->next;
        char text[160] = "";
        if (w->status != EGM_OK)
            timeout_text(text, sizeof(text), w->timeout_ms);
        w->done(w->arg, w->status, text);
        egm_free(w);
        w = next;
    }
}

/* Sends, as a request waiting for pos, to each in-sync follower that lacks
 * it and may be sent to (a batch being written to it ends within
 * microseconds: waited for), until none is left; then whether every
 * in-sync follower acknowledged pos. With the lock. */
static int send_while_behind(egm_journal_t *j, uint64_t pos)
{
    while (!acked_by_all(j, pos)) {
        egm_journal_follower_t *f = j->followers, *writing = NULL;
        for (; f != NULL; f = f->next) {
            if (!f->in_sync || f->sent >= pos)
                continue;
            if (may_send_to(j, f))
                break;
            if (f->writing && !f->failed && !f->cut)
                writing = f;
        }
        if (f != NULL)
            send_batch(j, f, 0);
        else if (writing != NULL)
            pthread_cond_wait(&j->more, &j->lock);
        else
            return 0;
    }
    return 1;
}

/* egm__journal_wait for position pos. */
static egm_status_t wait_for(egm_journal_t *j, uint64_t pos, uint64_t timeout_ms)
{
    struct timespec deadline;
    egm__deadline_in(&deadline, timeout_ms);
    egm_status_t status = EGM_OK;
    pthread_mutex_lock(&j->lock);
    while (!send_while_behind(j, pos)) {
        if (pthread_cond_timedwait(&j->acked, &j->lock, &deadline) == ETIMEDOUT &&
            !acked_by_all(j, pos)) {
            j->waits_timed_out++;
            char text[160];
            timeout_text(text, sizeof(text), timeout_ms);
            status = egm__set_error(EGM_ERR_UNREACHABLE, "%s", text);
            break;
        }
    }
    unlock_and_settle(j);
    return status;
}

egm_status_t egm__journal_try(egm_journal_t *j, int may_send)
{
    uint64_t pos = tl_pos;
    if (j == NULL || tl_journal != j || pos == 0)
        return EGM_OK;
    pthread_mutex_lock(&j->lock);
    int done = may_send ? send_while_behind(j, pos) : acked_by_all(j, pos);
    if (!done && !may_send)
        write_and_leave(j, pos);
    unlock_and_settle(j);
    if (!done)
        return EGM_INPROGRESS;
    tl_pos = 0;
    return EGM_OK;
}

uint64_t egm__journal_position(const egm_journal_t *j)
{
    return j != NULL && tl_journal == j ? tl_pos : 0;
}

uint64_t egm__journal_take_position(egm_journal_t *j)
{
    uint64_t pos = egm__journal_position(j);
    tl_pos = 0;
    return pos;
}

void egm__journal_wait_for(egm_journal_t *j, uint64_t pos)
{
    if (j == NULL)
        return;
    tl_pos = pos;
    tl_journal = j;
}

void egm__journal_kick(egm_journal_t *j)
{
    if (j == NULL || egm__journal_take_position(j) == 0)
        return;
    pthread_mutex_lock(&j->lock);
    pthread_cond_broadcast(&j->more);
    pthread_mutex_unlock(&j->lock);
}

size_t egm__journal_marks(egm_journal_t *j, uint64_t *end_p, uint64_t *confirmed_p)
{
    size_t in_sync = 0;
    pthread_mutex_lock(&j->lock);
    uint64_t end = end_of(j), confirmed = end;
    for (const egm_journal_follower_t *f = j->followers; f != NULL; f = f->next)
        if (f->in_sync) {
            in_sync++;
            if (f->acked < confirmed)
                confirmed = f->acked;
        }
    pthread_mutex_unlock(&j->lock);
    *end_p = end;
    *confirmed_p = confirmed;
    return in_sync;
}

int egm__journal_confirmed(egm_journal_t *j, uint64_t pos)
{
    if (j == NULL || pos == 0)
        return 1;
    pthread_mutex_lock(&j->lock);
    int done = acked_by_all(j, pos);
    pthread_mutex_unlock(&j->lock);
    return done;
}

void egm__journal_notify(egm_journal_t *j, uint64_t timeout_ms, egm_journal_done_fn done, void *arg)
{
    uint64_t pos = tl_pos;
    journal_waiter_t *w = NULL;
    if (j != NULL && tl_journal == j && pos != 0)
        w = egm_calloc(1, sizeof(*w), "master.journal_waiter");
    tl_pos = 0;
    if (w == NULL) {
        /* Nothing to wait for; or no memory to wait without blocking. */
        egm_status_t s = pos != 0 && j != NULL ? wait_for(j, pos, timeout_ms) : EGM_OK;
        done(arg, s, s == EGM_OK ? "" : egm_last_error());
        return;
    }
    w->pos = pos;
    w->timeout_ms = timeout_ms;
    w->deadline_ms = egm__now_ms() + timeout_ms;
    w->done = done;
    w->arg = arg;
    pthread_mutex_lock(&j->lock);
    j->waits_notified++;
    journal_waiter_t **link = &j->waiters;
    while (*link != NULL)
        link = &(*link)->next;
    *link = w;
    unlock_and_settle(j); /* at once if acknowledged meanwhile */
}

void egm__journal_expire(egm_journal_t *j)
{
    if (j == NULL)
        return;
    pthread_mutex_lock(&j->lock);
    unlock_and_settle(j);
}

egm_status_t egm__journal_wait(egm_journal_t *j, uint64_t timeout_ms)
{
    uint64_t pos = tl_pos;
    if (j == NULL || tl_journal != j || pos == 0)
        return EGM_OK;
    tl_pos = 0;
    return wait_for(j, pos, timeout_ms);
}

egm_status_t egm__journal_follow(egm_journal_t *j, egm_journal_follower_t **f_p, uint64_t *pos_p)
{
    egm_journal_follower_t *f = egm_calloc(1, sizeof(*f), "master.journal_follower");
    *f_p = NULL;
    if (f == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory adding a standby");
    pthread_mutex_lock(&j->lock);
    f->sent = f->acked = end_of(j);
    f->next = j->followers;
    j->followers = f;
    atomic_fetch_add_explicit(&j->n_followers, 1, memory_order_release);
    trim(j);
    *pos_p = f->sent;
    pthread_mutex_unlock(&j->lock);
    *f_p = f;
    return EGM_OK;
}

/* Whether a batch to f is being written or awaits its answer. With the lock. */
static int busy(const egm_journal_follower_t *f)
{
    return f->writing || f->in_flight > 0;
}

static egm_status_t cut_error(void)
{
    return egm__set_error(EGM_ERR_NO_SPACE, "the standby fell more than %u MiB of changes behind",
                          EGM_JOURNAL_BACKLOG_MAX >> 20);
}

egm_status_t egm__journal_send_next(egm_journal_t *j, egm_journal_follower_t *f, uint64_t wait_ms)
{
    struct timespec deadline;
    egm__deadline_in(&deadline, wait_ms);
    pthread_mutex_lock(&j->lock);
    while (!f->cut && !f->failed && f->n_left == 0 && !may_send_to(j, f))
        if (pthread_cond_timedwait(&j->more, &j->lock, &deadline) == ETIMEDOUT)
            break;
    /* What is pending leaves first, then the oldest answer is read: the
     * thread keeps batches in flight, as requests do. */
    journal_call_t c;
    egm_status_t status = EGM_OK;
    if (may_send_to(j, f) && (status = write_batch(j, f, 1, &c)) == EGM_OK)
        leave(f, &c);
    if (status != EGM_OK || f->failed)
        status = egm__set_error(EGM_ERR_UNREACHABLE, "a send to the standby failed: %s",
                                status != EGM_OK ? egm_last_error() : "(by another thread)");
    else if (f->cut)
        status = cut_error();
    else if (f->n_left == 0)
        status = EGM_ERR_TIMEOUT;
    else {
        c = take_left(f);
        status = end_batch(j, f, &c);
    }
    unlock_and_settle(j);
    return status;
}

void egm__journal_set_sender(egm_journal_t *j, egm_journal_follower_t *f,
                             egm_journal_start_fn start, egm_journal_end_fn end, void *arg,
                             size_t max)
{
    pthread_mutex_lock(&j->lock);
    f->start = start;
    f->end = end;
    f->send_arg = arg;
    f->send_max = max;
    pthread_mutex_unlock(&j->lock);
}

uint64_t egm__journal_follower_acked(egm_journal_t *j, egm_journal_follower_t *f)
{
    pthread_mutex_lock(&j->lock);
    uint64_t acked = f->acked;
    pthread_mutex_unlock(&j->lock);
    return acked;
}

uint64_t egm__journal_set_in_sync(egm_journal_t *j, egm_journal_follower_t *f)
{
    pthread_mutex_lock(&j->lock);
    f->in_sync = 1;
    uint64_t end = end_of(j);
    pthread_mutex_unlock(&j->lock);
    return end;
}

void egm__journal_unfollow(egm_journal_t *j, egm_journal_follower_t *f)
{
    pthread_mutex_lock(&j->lock);
    f->leaving = 1;
    /* Nobody else reads the answers left now; a batch being written may be
     * left next, and a send through the sender touches f after. */
    while (f->n_left > 0 || busy(f)) {
        if (f->n_left > 0) {
            journal_call_t c = take_left(f);
            end_batch(j, f, &c);
        } else {
            pthread_cond_wait(&j->more, &j->lock); /* broadcast by both */
        }
    }
    for (egm_journal_follower_t **link = &j->followers; *link != NULL; link = &(*link)->next)
        if (*link == f) {
            *link = f->next;
            atomic_fetch_sub_explicit(&j->n_followers, 1, memory_order_release);
            break;
        }
    egm_free(f);
    trim(j);
    if (j->followers == NULL) { /* nothing kept while nobody follows */
        j->base = end_of(j);
        j->log.len = 0;
    }
    pthread_cond_broadcast(&j->acked);
    unlock_and_settle(j);
}

void egm__journal_stats(egm_journal_t *j, egm_journal_stats_t *stats_p)
{
    memset(stats_p, 0, sizeof(*stats_p));
    if (j == NULL)
        return;
    pthread_mutex_lock(&j->lock);
    uint64_t end = end_of(j);
    for (const egm_journal_follower_t *f = j->followers; f != NULL; f = f->next) {
        stats_p->followers++;
        if (f->in_sync) {
            stats_p->in_sync++;
            if (end - f->acked > stats_p->lag_bytes)
                stats_p->lag_bytes = end - f->acked;
        }
    }
    stats_p->end = end;
    stats_p->waits_timed_out = j->waits_timed_out;
    stats_p->batches_by_request = j->batches_by_request;
    stats_p->batches_by_thread = j->batches_by_thread;
    stats_p->batches_pipelined = j->batches_pipelined;
    stats_p->waits_notified = j->waits_notified;
    pthread_mutex_unlock(&j->lock);
}
