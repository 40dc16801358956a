/* A writer's slabs: reservations, grants, returns (slabs.h). */
#include "client/slabs.h"

#include <stdatomic.h>
#include <string.h>
#include "client/client_int.h"
#include "client/location_cache.h" /* EGM_LOCATION_MARGIN_MS */
#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/slab_log.h"
#include "rpc/frame.h"
#include "rpc/proto_util.h"

struct egm_wslab {
    uint64_t id;
    uint64_t size;
    uint64_t used;         /* the bump cursor */
    uint64_t log_booked;   /* commit log entries set aside (common/slab_log.h) */
    uint64_t log_seq;      /* the last entry written */
    int log_route;         /* 0 unknown; 1 every extent over shared memory: a log; -1 none */
    uint64_t granted_ms;   /* when the SlabGrant was sent */
    uint64_t confirmed_ms; /* the latest send of a request the master answered knowing it */
    uint64_t lease_ms;
    uint64_t bound_ms; /* the master's location_cache_ms */
    /* The grant's place_within_ms: the master answered before its standbys
     * held the grant; copies start only this long after granted_ms, until a
     * Commit there is answered (0 then, or from the start). */
    uint64_t early_ms;
    unsigned inflight; /* reservations not yet released */
    int retired;       /* takes no reservation; returned when inflight is 0 */
    int dead;          /* the master may not know it: never returned */
    int named;         /* a Commit answer named it degraded: the master knows it */
    int cls;           /* its class slot while open, -1 once retired */
    uint32_t n_extents;
    const egm_segment_desc_t *segs[EGM_WSLAB_EXTENTS_MAX];
    uint64_t bases[EGM_WSLAB_EXTENTS_MAX];
    egm_segment_desc_t *descs; /* decoded from the grant: segs point here */
    egm_wslab_t *prev, *next;  /* every slab held */
};

/* What places a slab: replica_num and the preferred segment names. */
typedef struct {
    uint32_t replica_num;
    char *preferred; /* the names, each followed by a NUL; NULL when none */
    size_t preferred_len;
    egm_wslab_t *slab; /* open slab of the class, or NULL */
    uint64_t used_seq; /* for replacing the least recently used class */
} wclass_t;

struct egm_wslabs {
    pthread_mutex_t lock;
    uint64_t slab_bytes;
    egm_wslab_t *all;
    wclass_t classes[EGM_WSLAB_CLASSES];
    uint64_t seq;
    uint64_t generation; /* moved on by clear: a grant asked before it is not kept */
    uint64_t *returns;
    size_t n_returns, cap_returns;
    uint64_t grants, returned, open;
    /* Where this client's objects put in slabs lie, for the removal entries
     * of its Removes (its own lock: kept outside this one's). */
    egm_own_places_t *places;
};

/* Whether an object of r bytes (and, with entry, its log entry) fits in s
 * below the log entries already set aside. */
static int fits(const egm_wslab_t *s, uint64_t r, int entry)
{
    uint64_t room = s->size - s->used, booked = s->log_booked * EGM_SLAB_LOG_ENTRY;
    return room >= booked && room - booked >= r &&
           (!entry || room - booked - r >= EGM_SLAB_LOG_ENTRY);
}

/* How many more log entries fit in s below the room already set aside. */
static uint64_t entries_room(const egm_wslab_t *s)
{
    uint64_t room = s->size - s->used, booked = s->log_booked * EGM_SLAB_LOG_ENTRY;
    return room >= booked ? (room - booked) / EGM_SLAB_LOG_ENTRY : 0;
}

/* An object's room in a slab: its size rounded up as the master's allocator
 * rounds it (0 on overflow). */
static uint64_t round_object(uint64_t len)
{
    if (len > UINT64_MAX - (EGM_OBJECT_ALIGN - 1))
        return 0;
    return (len + EGM_OBJECT_ALIGN - 1) & ~(uint64_t)(EGM_OBJECT_ALIGN - 1);
}

egm_status_t egm__wslabs_create(uint64_t slab_bytes, egm_wslabs_t **slabs_p)
{
    egm_wslabs_t *w = egm_calloc(1, sizeof(*w), "client.slabs");
    *slabs_p = NULL;
    if (w == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory creating the slab list");
    pthread_mutex_init(&w->lock, NULL);
    w->slab_bytes = slab_bytes;
    /* NULL when out of memory: Removes then name no place, and wait */
    w->places = slab_bytes > 0 ? egm__own_places_create() : NULL;
    *slabs_p = w;
    return EGM_OK;
}

static void slab_free(egm_wslabs_t *w, egm_wslab_t *s)
{
    if (s->prev != NULL)
        s->prev->next = s->next;
    else
        w->all = s->next;
    if (s->next != NULL)
        s->next->prev = s->prev;
    w->open--;
    egm_free(s->descs);
    egm_free(s);
}

void egm__wslabs_destroy(egm_wslabs_t *w)
{
    if (w == NULL)
        return;
    while (w->all != NULL)
        slab_free(w, w->all);
    for (int c = 0; c < EGM_WSLAB_CLASSES; c++)
        egm_free(w->classes[c].preferred);
    egm_free(w->returns);
    egm__own_places_destroy(w->places);
    pthread_mutex_destroy(&w->lock);
    egm_free(w);
}

int egm__wslabs_on(const egm_wslabs_t *w)
{
    return w != NULL && w->slab_bytes > 0;
}

/* Queues s's id for return (once nothing is reserved in it), or frees it. With the lock. */
static void finish_if_idle(egm_wslabs_t *w, egm_wslab_t *s)
{
    if (!s->retired || s->inflight > 0)
        return;
    if (!s->dead) {
        if (w->n_returns == w->cap_returns) {
            size_t cap = w->cap_returns ? w->cap_returns * 2 : 8;
            uint64_t *r = egm_realloc(w->returns, cap * sizeof(*r), "client.slabs");
            if (r == NULL) { /* the master frees it at its lease's end */
                slab_free(w, s);
                return;
            }
            w->returns = r;
            w->cap_returns = cap;
        }
        w->returns[w->n_returns++] = s->id;
    }
    slab_free(w, s);
}

/* With the lock. */
static void retire(egm_wslabs_t *w, egm_wslab_t *s)
{
    if (s->cls >= 0)
        w->classes[s->cls].slab = NULL;
    s->cls = -1;
    s->retired = 1;
    finish_if_idle(w, s);
}

/* With the lock: retires s unless it is already. */
static void retire_once(egm_wslabs_t *w, egm_wslab_t *s)
{
    if (!s->retired)
        retire(w, s);
}

/* Whether a copy into s may still start at now_ms + EGM_LOCATION_MARGIN_MS
 * as far as the grant's place_within_ms goes. */
static int early_open(const egm_wslab_t *s, uint64_t now_ms)
{
    return s->early_ms == 0 || now_ms + EGM_LOCATION_MARGIN_MS < s->granted_ms + s->early_ms;
}

/* Whether s takes a new object at now_ms (one whose grant the standbys may
 * not hold yet only while EGM_WSLAB_EARLY_SLACK_MS more are left for its
 * copy to start). */
static int usable(const egm_wslab_t *s, uint64_t now_ms)
{
    uint64_t until = s->granted_ms + s->lease_ms / 2;
    if (s->confirmed_ms + s->bound_ms < until)
        until = s->confirmed_ms + s->bound_ms;
    return !s->retired && !s->dead && now_ms + EGM_LOCATION_MARGIN_MS < until &&
           early_open(s, now_ms + EGM_WSLAB_EARLY_SLACK_MS);
}

/* The preferred names of rc, NUL-separated, for comparing classes. */
static size_t preferred_text(const egm_replicate_config_t *rc, char *buf, size_t cap)
{
    size_t len = 0;
    for (size_t i = 0; rc != NULL && i < rc->preferred_segments_count; i++) {
        size_t n = strlen(rc->preferred_segments[i]) + 1;
        if (buf != NULL && len + n <= cap)
            memcpy(buf + len, rc->preferred_segments[i], n);
        len += n;
    }
    return len;
}

/* The class slot of rc: found, or a free or least recently used one taken
 * over (its slab retired). -1 when out of memory. With the lock. */
static int class_of(egm_wslabs_t *w, uint32_t replica_num, const egm_replicate_config_t *rc)
{
    size_t len = preferred_text(rc, NULL, 0);
    int victim = 0;
    for (int c = 0; c < EGM_WSLAB_CLASSES; c++) {
        wclass_t *k = &w->classes[c];
        if (k->replica_num == replica_num && k->preferred_len == len && len == 0) {
            k->used_seq = ++w->seq;
            return c;
        }
        if (k->replica_num == replica_num && k->preferred_len == len && len > 0) {
            char stack[512];
            char *text = len <= sizeof(stack) ? stack : egm_malloc(len, "client.slabs");
            if (text == NULL)
                return -1;
            preferred_text(rc, text, len);
            int same = memcmp(text, k->preferred, len) == 0;
            if (text != stack)
                egm_free(text);
            if (same) {
                k->used_seq = ++w->seq;
                return c;
            }
        }
        if (k->used_seq < w->classes[victim].used_seq)
            victim = c;
    }
    wclass_t *k = &w->classes[victim];
    char *text = len > 0 ? egm_malloc(len, "client.slabs") : NULL;
    if (len > 0 && text == NULL)
        return -1;
    if (k->slab != NULL)
        retire(w, k->slab);
    egm_free(k->preferred);
    preferred_text(rc, text, len);
    *k = (wclass_t){
        .replica_num = replica_num, .preferred = text, .preferred_len = len, .used_seq = ++w->seq};
    return victim;
}

size_t egm__wslabs_take_returns(egm_wslabs_t *w, uint64_t **ids_p)
{
    pthread_mutex_lock(&w->lock);
    size_t n = w->n_returns;
    *ids_p = w->returns;
    w->returns = NULL;
    w->n_returns = w->cap_returns = 0;
    w->returned += n;
    pthread_mutex_unlock(&w->lock);
    if (n == 0) {
        egm_free(*ids_p);
        *ids_p = NULL;
    }
    return n;
}

void egm__wslabs_unreturned(egm_wslabs_t *w, uint64_t *ids, size_t n)
{
    /* Not sent: the master frees them at their lease's end. */
    pthread_mutex_lock(&w->lock);
    w->returned -= n;
    pthread_mutex_unlock(&w->lock);
    egm_free(ids);
}

int egm__wslabs_unanswered(egm_status_t status)
{
    return status == EGM_ERR_UNREACHABLE || status == EGM_ERR_TIMEOUT || status == EGM_ERR_IO ||
           status == EGM_ERR_PROTOCOL || status == EGM_ERR_CLOSED;
}

/* Why the master refused a slab: its own words where it sent them (printable
 * ASCII kept, anything else '?'), else the status's name. */
static const char *refusal_text(const egm_keys_reply_t *reply, egm_status_t status, char *buf,
                                size_t cap)
{
    size_t n = reply->error.len < cap - 1 ? reply->error.len : cap - 1;
    if (n == 0)
        return egm_status_string(status);
    for (size_t i = 0; i < n; i++) {
        uint8_t c = reply->error.data[i];
        buf[i] = c >= 0x20 && c < 0x7f ? (char)c : '?';
    }
    buf[n] = '\0';
    return buf;
}

/* One SlabGrant: a slab of at least min_size (size wanted); copy_now: its
 * copies start at once (the master may answer before its standbys hold the
 * grant, bounding when they may start). */
static egm_status_t grant(egm_client_t *client, const egm_replicate_config_t *rc,
                          uint32_t replica_num, uint64_t size, uint64_t min_size, int copy_now,
                          egm_wslab_t **slab_p, int *answered_p)
{
    Egm__SlabGrantRequest req = EGM__SLAB_GRANT_REQUEST__INIT;
    Egm__ReplicateConfig cfg = EGM__REPLICATE_CONFIG__INIT;
    Egm__Id client_pb = EGM__ID__INIT;
    egm_keys_reply_t *reply = NULL;
    egm_wslab_t *s = NULL;
    uint64_t *returns = NULL;
    size_t n_returns = egm__wslabs_take_returns(client->slabs, &returns);

    *slab_p = NULL;
    egm__id_to_pb(client->id, &client_pb);
    cfg.replica_num = replica_num;
    if (rc != NULL) {
        cfg.n_preferred_segments = rc->preferred_segments_count;
        cfg.preferred_segments = (char **)rc->preferred_segments;
    }
    req.client = &client_pb;
    req.size = size;
    req.min_size = min_size;
    req.config = &cfg;
    req.n_returned = n_returns;
    req.returned = returns;
    /* Its log is written where every extent is over shared memory (known
     * once granted): said now, so that a new leader reads it from the first
     * entry on and a Commit there need not wait for the standbys. */
    req.log = egm__te_may_route(client->te, EGM_TRANSPORT_SHM);
    req.place_bound = copy_now != 0;
    uint64_t sent_ms = egm__now_ms();
    egm_status_t status = egm__client_keys_rpc(client, EGM_RPC_SLAB_GRANT, &req.base, 1, &reply);
    if (status != EGM_OK) {
        egm__wslabs_unreturned(client->slabs, returns, n_returns);
        *answered_p = !egm__wslabs_unanswered(status);
        return status;
    }
    egm_free(returns);
    const egm_key_result_t *res = &reply->results[0];
    if (res->status != EGM_OK) {
        char why[512];
        status =
            egm__set_error(res->status, "no slab of %llu bytes: %s", (unsigned long long)min_size,
                           refusal_text(reply, res->status, why, sizeof(why)));
        goto out;
    }
    if (reply->slab_id == 0 || res->size < min_size || res->n_replicas == 0 ||
        res->n_replicas > EGM_WSLAB_EXTENTS_MAX) {
        status = egm__set_error(EGM_ERR_PROTOCOL, "master sent an inconsistent slab");
        goto out;
    }
    s = egm_calloc(1, sizeof(*s), "client.slab");
    if (s == NULL) {
        status = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory keeping a slab");
        goto out;
    }
    status = egm__client_reply_segments(reply, &s->descs);
    if (status == EGM_OK)
        status = egm__client_placed_segments(reply, res, s->descs, res->size, s->segs);
    if (status != EGM_OK)
        goto out;
    s->id = reply->slab_id;
    s->size = res->size;
    s->granted_ms = s->confirmed_ms = sent_ms;
    s->lease_ms = res->lease_ttl_ms;
    s->bound_ms = reply->location_cache_ms;
    s->early_ms = copy_now ? reply->place_within_ms : 0;
    s->n_extents = res->n_replicas;
    if (s->n_extents < replica_num) {
        static atomic_int said; /* once per process at info, then at debug */
        egm_log_ratelimited(atomic_exchange(&said, 1) == 0 ? EGM_LOG_INFO : EGM_LOG_DEBUG, 1,
                            "slab: %u of %u replicas placed (fewer providers with room than "
                            "replicas asked): its objects get as many",
                            s->n_extents, replica_num);
    }
    s->cls = -1;
    for (uint32_t e = 0; e < s->n_extents; e++)
        s->bases[e] = egm__keys_reply_replicas(reply, res)[e].offset;
    *slab_p = s;
    s = NULL;
out:
    if (s != NULL) {
        egm_free(s->descs);
        egm_free(s);
    }
    egm__keys_reply_free(reply);
    return status;
}

void egm__wslabs_reserve(egm_client_t *client, const egm_replicate_config_t *rc, size_t n,
                         const uint64_t *sizes, int copy_now, egm_wslab_ref_t *refs,
                         egm_status_t *status)
{
    egm_wslabs_t *w = client->slabs;
    uint32_t replica_num =
        rc != NULL && rc->replica_num > 0 ? rc->replica_num : client->replica_num;
    egm_wslab_t *granted_here = NULL;
    egm_status_t failed = EGM_OK;

    if (replica_num > EGM_WSLAB_EXTENTS_MAX)
        failed = egm__set_error(EGM_ERR_INVALID_ARG, "replica_num: %u, must be 1..%d", replica_num,
                                EGM_WSLAB_EXTENTS_MAX);
    pthread_mutex_lock(&w->lock);
    /* The call's class slot: it moves only while the lock is let go (a grant). */
    int c = failed == EGM_OK ? class_of(w, replica_num, rc) : -1;
    if (failed == EGM_OK && c < 0)
        failed = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory placing a put");
    for (size_t i = 0; i < n; i++) {
        uint64_t r = round_object(sizes[i]);
        refs[i].slab = NULL;
        if (failed != EGM_OK || r == 0) {
            status[i] = failed != EGM_OK
                            ? failed
                            : egm__set_error(EGM_ERR_INVALID_ARG, "value too large to place");
            continue;
        }
        egm_wslab_t *s = w->classes[c].slab;
        uint64_t now = egm__now_ms();
        /* Room for the object and one more log entry below it; a slab whose
         * grant the standbys may not hold yet only for copies that follow
         * at once. */
        if (s == NULL ||
            (s != granted_here && (!usable(s, now) || (!copy_now && s->early_ms != 0))) ||
            !fits(s, r, 0) || (s != granted_here && !fits(s, r, 1))) {
            if (s != NULL)
                retire(w, s);
            uint64_t need = 0; /* the rest of the call, in one slab if it can be */
            for (size_t j = i; j < n; j++) {
                uint64_t rj = round_object(sizes[j]) + EGM_SLAB_LOG_ENTRY;
                need = need + rj < need ? UINT64_MAX : need + rj;
            }
            uint64_t want = need > w->slab_bytes ? need : w->slab_bytes;
            uint64_t gen = w->generation;
            pthread_mutex_unlock(&w->lock);
            /* At least the rest of the call, so that a full pool (where
             * nothing bigger is free without evicting) does not give one
             * object's room per SlabGrant; only the next object's when even
             * that is refused. */
            int answered = 1;
            egm_status_t st = grant(client, rc, replica_num, want, need, copy_now, &s, &answered);
            if (st == EGM_ERR_NO_SPACE && need > r)
                st = grant(client, rc, replica_num, want, r, copy_now, &s, &answered);
            if (!answered) /* the master may be gone: as for a failed ping */
                egm__wslabs_clear(w);
            pthread_mutex_lock(&w->lock);
            if (st == EGM_OK && gen != w->generation) {
                /* Cleared meanwhile: the master it came from may be gone. */
                egm_free(s->descs);
                egm_free(s);
                st = egm__set_error(EGM_ERR_UNREACHABLE,
                                    "the master restarted or was unreachable during a put");
            }
            if (st != EGM_OK) {
                status[i] = failed = st;
                continue;
            }
            s->next = w->all;
            if (w->all != NULL)
                w->all->prev = s;
            w->all = s;
            w->open++;
            w->grants++;
            c = class_of(w, replica_num, rc); /* another thread may have moved classes */
            if (c < 0) {
                s->retired = 1;
                finish_if_idle(w, s);
                status[i] = failed = egm__set_error(EGM_ERR_NO_MEMORY, "out of memory");
                continue;
            }
            if (w->classes[c].slab != NULL)
                retire(w, w->classes[c].slab);
            w->classes[c].slab = s;
            s->cls = c;
            granted_here = s;
        }
        refs[i] = (egm_wslab_ref_t){.slab = s, .offset = s->used};
        s->used += r;
        /* A slab granted with room for the object alone keeps no entry. */
        if (fits(s, 0, 1)) {
            s->log_booked++;
            refs[i].logged = 1;
        }
        s->inflight++;
        status[i] = EGM_OK;
    }
    /* A slab with fewer extents than replicas asked (too few providers had
     * room when it was placed) serves only the call that got it, as a
     * PutStart's placement would: the next call asks again, so that its
     * objects get every replica once the providers are back. */
    if (granted_here != NULL && granted_here->n_extents < replica_num)
        retire_once(w, granted_here);
    pthread_mutex_unlock(&w->lock);
}

uint32_t egm__wslab_targets(const egm_wslab_ref_t *ref, const egm_segment_desc_t **segs,
                            uint64_t *at)
{
    const egm_wslab_t *s = ref->slab;
    for (uint32_t e = 0; e < s->n_extents; e++) {
        segs[e] = s->segs[e];
        at[e] = s->bases[e] + ref->offset;
    }
    return s->n_extents;
}

void egm__wslabs_check_copy(egm_wslabs_t *w, size_t n, const egm_wslab_ref_t *refs,
                            egm_status_t *status)
{
    uint64_t now = egm__now_ms();
    pthread_mutex_lock(&w->lock);
    for (size_t i = 0; i < n; i++) {
        egm_wslab_t *s = refs[i].slab;
        if (s == NULL || status[i] != EGM_OK)
            continue;
        uint64_t margin = now + EGM_LOCATION_MARGIN_MS;
        if (s->dead)
            status[i] = egm__set_error(EGM_ERR_UNREACHABLE,
                                       "slab %llu: the master that granted it may be gone",
                                       (unsigned long long)s->id);
        else if (margin >= s->granted_ms + s->lease_ms ||
                 (s->bound_ms > 0 && margin >= s->confirmed_ms + s->bound_ms) ||
                 !early_open(s, now))
            status[i] = egm__set_error(EGM_ERR_TIMEOUT,
                                       "slab %llu: its time ran out before the copy started",
                                       (unsigned long long)s->id);
        else
            continue;
        retire_once(w, s);
    }
    pthread_mutex_unlock(&w->lock);
}

/* Whether every extent of s is reached through shared memory (or is this
 * process's): an entry is then a copy without a round trip. Asked of the
 * transfer engine once per slab. */
static int log_reachable(egm_client_t *client, egm_wslab_t *s)
{
    for (uint32_t e = 0; e < s->n_extents && s->log_route == 0; e++) {
        egm_transport_t t;
        if (egm__te_route(client->te, s->segs[e], &t) != EGM_OK ||
            (t != EGM_TRANSPORT_SHM && t != EGM_TRANSPORT_LOCAL))
            s->log_route = -1;
    }
    if (s->log_route == 0)
        s->log_route = 1;
    return s->log_route > 0;
}

size_t egm__wslabs_unplace_late(egm_client_t *client, size_t n, egm_wslab_ref_t *refs,
                                egm_status_t *status)
{
    egm_wslabs_t *w = client->slabs;
    size_t late = 0;
    uint64_t now = egm__now_ms();
    pthread_mutex_lock(&w->lock);
    for (size_t i = 0; i < n; i++) {
        egm_wslab_t *s = refs[i].slab;
        /* Its copies must end well within the master's allowance: over
         * shared memory only (a copy over the network may take longer). */
        if (s == NULL || status[i] != EGM_OK || s->early_ms == 0 ||
            (early_open(s, now + EGM_WSLAB_EARLY_SLACK_MS) && log_reachable(client, s)))
            continue;
        retire_once(w, s);
        s->inflight--;
        finish_if_idle(w, s);
        refs[i].slab = NULL;
        status[i] = EGM_INPROGRESS;
        late++;
    }
    pthread_mutex_unlock(&w->lock);
    return late;
}

/* The writes of an encoded entry at `at` of every extent of s, into ops
 * (room for s->n_extents); their count. */
static uint32_t extent_ops(const egm_wslab_t *s, uint64_t at, uint8_t *entry, egm_te_op_t *ops)
{
    for (uint32_t x = 0; x < s->n_extents; x++)
        ops[x] = (egm_te_op_t){.segment = s->segs[x],
                               .offset = s->bases[x] + at,
                               .local = entry,
                               .length = EGM_SLAB_LOG_ENTRY,
                               .dir = EGM_TE_WRITE,
                               .local_is_host = 1};
    return s->n_extents;
}

/* Encodes e into buf and writes it at its seq in every extent of s. With the lock. */
static egm_status_t log_write(egm_client_t *client, egm_wslab_t *s, const egm_slab_log_entry_t *e,
                              uint8_t *buf)
{
    uint64_t at = egm__slab_log_at(s->size, e->seq);
    egm_status_t status = at == 0 ? egm__set_error(EGM_ERR_NO_SPACE, "no room for a log entry")
                                  : egm__slab_log_encode(e, buf);
    if (status != EGM_OK)
        return status;
    egm_te_op_t ops[EGM_WSLAB_EXTENTS_MAX];
    return egm__te_transfer(client->te, ops, extent_ops(s, at, buf, ops));
}

void egm__wslabs_log(egm_client_t *client, size_t n, const egm_wslab_ref_t *refs,
                     const char *const *keys, const uint64_t *sizes,
                     const egm_replicate_config_t *rc, const egm_status_t *status, uint64_t *seqs,
                     uint64_t *torn)
{
    egm_wslabs_t *w = client->slabs;
    uint8_t entry[EGM_SLAB_LOG_ENTRY];
    /* The objects' bytes before the entries that describe them. */
    atomic_thread_fence(memory_order_release);
    pthread_mutex_lock(&w->lock);
    for (size_t i = 0; i < n; i++) {
        egm_wslab_t *s = refs[i].slab;
        size_t key_len = strlen(keys[i]);
        seqs[i] = torn[i] = 0;
        if (s == NULL || status[i] != EGM_OK || !refs[i].logged || s->dead ||
            key_len > EGM_SLAB_LOG_KEY_MAX || !log_reachable(client, s))
            continue;
        egm_slab_log_entry_t e = {.slab_id = s->id,
                                  .seq = s->log_seq + 1,
                                  .offset = refs[i].offset,
                                  .size = sizes[i],
                                  .soft_pin = rc != NULL && rc->with_soft_pin,
                                  .hard_pin = rc != NULL && rc->with_hard_pin,
                                  .key = keys[i],
                                  .key_len = key_len};
        if (egm__slab_log_at(s->size, e.seq) == 0)
            continue;
        /* Written whole or the log ends here: the seq is not given again. */
        s->log_seq = e.seq;
        if (log_write(client, s, &e, entry) == EGM_OK) {
            seqs[i] = e.seq;
        } else {
            torn[i] = e.seq; /* it may lie in some extents */
            s->log_route = -1;
        }
    }
    pthread_mutex_unlock(&w->lock);
}

/* The open slab a Remove's n removal entries go to: the most recently used
 * one that keeps a log the master's standbys know of (not granted early)
 * with room for them. With the lock. */
static egm_wslab_t *removal_slab(egm_client_t *client, egm_wslabs_t *w, size_t n, uint64_t now)
{
    egm_wslab_t *best = NULL;
    uint64_t best_seq = 0;
    for (int c = 0; c < EGM_WSLAB_CLASSES; c++) {
        egm_wslab_t *s = w->classes[c].slab;
        if (s == NULL || w->classes[c].used_seq < best_seq || !usable(s, now) || s->early_ms != 0 ||
            entries_room(s) < n || !log_reachable(client, s))
            continue;
        best = s;
        best_seq = w->classes[c].used_seq;
    }
    return best;
}

void egm__wslabs_remember(egm_wslabs_t *w, size_t n, const egm_wslab_ref_t *refs,
                          const char *const *keys, const egm_status_t *commit, const uint64_t *seqs)
{
    /* A reserved slab's id and extents do not change: read without the lock. */
    for (size_t i = 0; i < n; i++) {
        const egm_wslab_t *s = refs[i].slab;
        if (s != NULL && commit[i] == EGM_OK)
            egm__own_places_keep(w->places, keys[i],
                                 &(egm_own_place_t){.segment = s->segs[0]->id,
                                                    .offset = s->bases[0] + refs[i].offset,
                                                    .slab_id = seqs[i] != 0 ? s->id : 0,
                                                    .seq = seqs[i]});
    }
}

void egm__wslabs_forget_places(egm_wslabs_t *w, size_t n, const char *const *keys)
{
    if (w == NULL)
        return;
    if (keys == NULL) {
        egm__own_places_clear(w->places);
        return;
    }
    egm_own_place_t gone;
    for (size_t i = 0; i < n; i++)
        if (keys[i] != NULL)
            egm__own_places_take(w->places, keys[i], &gone);
}

/* Entry seq of s's log saying (kind REMOVE) or no longer saying (VOID) that
 * key's object at place p is removed. */
static egm_slab_log_entry_t removal_entry(const egm_wslab_t *s, uint8_t kind, uint64_t seq,
                                          const egm_own_place_t *p, const char *key)
{
    return (egm_slab_log_entry_t){.kind = kind,
                                  .slab_id = s->id,
                                  .seq = seq,
                                  .offset = p->offset,
                                  .segment = p->segment,
                                  .put_slab_id = p->slab_id,
                                  .put_seq = p->seq,
                                  .key = key,
                                  .key_len = strlen(key)};
}

/* Bytes one removal entry takes while it is written: its writes to every
 * extent, and its bytes (egm__wslabs_log_removals). */
#define REMOVAL_WRITE_BYTES (EGM_WSLAB_EXTENTS_MAX * sizeof(egm_te_op_t) + EGM_SLAB_LOG_ENTRY)

void egm__wslabs_log_removals(egm_client_t *client, size_t n, const char *const *keys,
                              egm_wslab_removal_t *rm, uint64_t *seqs, uint64_t *torn)
{
    egm_wslabs_t *w = client->slabs;
    rm->slab = NULL;
    memset(seqs, 0, n * sizeof(*seqs));
    memset(torn, 0, n * sizeof(*torn));
    memset(rm->places, 0, n * sizeof(*rm->places));
    if (!egm__wslabs_on(w) || n == 0)
        return;
    /* Known only where this client put the key: the place is taken, as the
     * object goes (another Remove of it finds none). Outside the lock. */
    size_t known = 0;
    for (size_t i = 0; i < n; i++)
        known += strlen(keys[i]) <= EGM_SLAB_LOG_REMOVE_KEY_MAX &&
                 egm__own_places_take(w->places, keys[i], &rm->places[i]);
    if (known == 0)
        return;
    /* Every entry, then every extent's copy of it, written in one transfer:
     * the slabs' lock (which the put's threads take) is held that long. The
     * entries' writes to every extent, then their bytes, in one block. */
    _Alignas(egm_te_op_t) uint8_t few[4 * REMOVAL_WRITE_BYTES];
    void *mem = known <= 4 ? few : egm_malloc(known * REMOVAL_WRITE_BYTES, "client.remove_log");
    if (mem == NULL) /* a Remove without them */
        return;
    egm_te_op_t *ops = mem;
    uint8_t *buf = (uint8_t *)(ops + known * EGM_WSLAB_EXTENTS_MAX);
    pthread_mutex_lock(&w->lock);
    egm_wslab_t *s = removal_slab(client, w, known, egm__now_ms());
    size_t k = 0, n_ops = 0;
    for (size_t i = 0; s != NULL && i < n && s->log_route > 0; i++) {
        if (egm__id_is_nil(rm->places[i].segment))
            continue; /* no place known (a segment id is never nil) */
        egm_slab_log_entry_t e =
            removal_entry(s, EGM_SLAB_LOG_REMOVE, s->log_seq + 1, &rm->places[i], keys[i]);
        uint64_t at = egm__slab_log_at(s->size, e.seq);
        uint8_t *entry = buf + k * EGM_SLAB_LOG_ENTRY;
        if (at == 0 || egm__slab_log_encode(&e, entry) != EGM_OK)
            continue;
        n_ops += extent_ops(s, at, entry, ops + n_ops);
        s->log_seq = e.seq; /* not given again, written whole or not */
        seqs[i] = e.seq;
        k++;
    }
    if (k > 0) {
        rm->slab = s;
        s->inflight++;
        s->log_booked += k; /* their room, below what was set aside before */
        if (egm__te_transfer(client->te, ops, n_ops) != EGM_OK) {
            /* any of them may lie in some extents: the log ends here */
            for (size_t i = 0; i < n; i++) {
                torn[i] = seqs[i];
                seqs[i] = 0;
            }
            s->log_route = -1;
        }
    }
    pthread_mutex_unlock(&w->lock);
    if (mem != few)
        egm_free(mem);
}

/* Overwrites the removal entries of an unanswered Remove in s with void
 * ones. With the lock. */
static void void_removals(egm_client_t *client, egm_wslab_t *s, const egm_wslab_removal_t *rm,
                          size_t n, const char *const *keys, const uint64_t *seqs,
                          const uint64_t *torn)
{
    uint8_t entry[EGM_SLAB_LOG_ENTRY];
    /* Only while the slab is surely still this client's: past its lease (a
     * call that took that long) its space may be another writer's, and a
     * master that no longer knows the slab reads no log of it. */
    int ours = !s->dead && egm__now_ms() + EGM_LOCATION_MARGIN_MS < s->granted_ms + s->lease_ms;
    for (size_t i = 0; i < n; i++) {
        uint64_t seq = seqs[i] != 0 ? seqs[i] : torn[i];
        if (seq == 0)
            continue;
        if (!ours) {
            egm_log_ratelimited(EGM_LOG_WARN, 1,
                                "client: a removal entry of \"%s\" was not voided after its Remove "
                                "went unanswered: its slab's lease may have ended",
                                keys[i]);
            continue;
        }
        egm_slab_log_entry_t e = removal_entry(s, EGM_SLAB_LOG_VOID, seq, &rm->places[i], keys[i]);
        if (log_write(client, s, &e, entry) != EGM_OK)
            egm_log_ratelimited(EGM_LOG_WARN, 1,
                                "client: a removal entry of \"%s\" could not be voided after its "
                                "Remove went unanswered (%s): a new master leader may still "
                                "apply it",
                                keys[i], egm_last_error());
    }
}

void egm__wslabs_removed(egm_client_t *client, const egm_wslab_removal_t *rm, size_t n,
                         const char *const *keys, const uint64_t *seqs, const uint64_t *torn,
                         int answered)
{
    egm_wslabs_t *w = client->slabs;
    egm_wslab_t *s = rm->slab;
    if (s == NULL)
        return;
    pthread_mutex_lock(&w->lock);
    if (!answered)
        void_removals(client, s, rm, n, keys, seqs, torn);
    s->inflight--;
    finish_if_idle(w, s);
    pthread_mutex_unlock(&w->lock);
}

uint64_t egm__wslab_id(const egm_wslab_t *slab)
{
    return slab->id;
}

void egm__wslabs_release(egm_wslabs_t *w, size_t n, const egm_wslab_ref_t *refs,
                         const egm_status_t *commit, uint64_t sent_ms)
{
    pthread_mutex_lock(&w->lock);
    for (size_t i = 0; i < n; i++) {
        egm_wslab_t *s = refs[i].slab;
        if (s == NULL)
            continue;
        if (commit[i] == EGM_ERR_NOT_FOUND) {
            /* The master does not know the slab (its lease ended, or it
             * restarted): nothing more goes there. Unless it named the slab
             * degraded in the same answer: then the key found every extent on
             * a provider presumed gone, and the slab is returned as any
             * retired one (its space freed now, not at its lease's end). */
            if (!s->named)
                s->dead = 1;
            retire_once(w, s);
        } else if (commit[i] == EGM_OK) {
            /* answered once the standbys held the grant (docs/ha.md) */
            s->early_ms = 0;
            if (sent_ms > s->confirmed_ms)
                s->confirmed_ms = sent_ms;
        }
    }
    for (size_t i = 0; i < n; i++) {
        egm_wslab_t *s = refs[i].slab;
        if (s == NULL)
            continue;
        s->inflight--;
        finish_if_idle(w, s);
    }
    pthread_mutex_unlock(&w->lock);
}

void egm__wslabs_forget_segments(egm_wslabs_t *w, const egm_id_t *ids, size_t n)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->lock);
    egm_wslab_t *s = w->all;
    while (s != NULL) {
        egm_wslab_t *next = s->next; /* retire may free s */
        int hit = 0;
        for (uint32_t e = 0; e < s->n_extents && !hit; e++)
            for (size_t i = 0; i < n && !hit; i++)
                hit = egm__id_equal(s->segs[e]->id, ids[i]);
        if (hit)
            retire_once(w, s);
        s = next;
    }
    pthread_mutex_unlock(&w->lock);
}

void egm__wslabs_retire_ids(egm_wslabs_t *w, const uint64_t *ids, size_t n)
{
    if (w == NULL || n == 0)
        return;
    pthread_mutex_lock(&w->lock);
    egm_wslab_t *s = w->all;
    while (s != NULL) {
        egm_wslab_t *next = s->next; /* retire may free s */
        for (size_t i = 0; i < n; i++)
            if (s->id == ids[i]) {
                s->named = 1;
                retire_once(w, s);
                break;
            }
        s = next;
    }
    pthread_mutex_unlock(&w->lock);
}

void egm__wslabs_retire_ref(egm_wslabs_t *w, const egm_wslab_ref_t *ref)
{
    if (ref->slab == NULL)
        return;
    pthread_mutex_lock(&w->lock);
    retire_once(w, ref->slab); /* inflight > 0: the caller's reservation keeps it */
    pthread_mutex_unlock(&w->lock);
}

void egm__wslabs_clear(egm_wslabs_t *w)
{
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->lock);
    w->generation++;
    egm_wslab_t *s = w->all;
    while (s != NULL) {
        egm_wslab_t *next = s->next; /* retire may free s */
        s->dead = 1;
        retire_once(w, s);
        s = next;
    }
    w->n_returns = 0; /* a new master knows none of them */
    pthread_mutex_unlock(&w->lock);
}

void egm__wslabs_close(egm_client_t *client)
{
    egm_wslabs_t *w = client->slabs;
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->lock);
    for (int c = 0; c < EGM_WSLAB_CLASSES; c++)
        if (w->classes[c].slab != NULL)
            retire(w, w->classes[c].slab);
    int any = w->n_returns > 0;
    pthread_mutex_unlock(&w->lock);
    if (any)
        egm__client_return_slabs(client);
}

void egm__wslabs_stats(egm_wslabs_t *w, egm_wslabs_stats_t *stats_p)
{
    memset(stats_p, 0, sizeof(*stats_p));
    if (w == NULL)
        return;
    pthread_mutex_lock(&w->lock);
    stats_p->grants = w->grants;
    stats_p->returns = w->returned;
    stats_p->open = w->open;
    pthread_mutex_unlock(&w->lock);
}
