/* The master's admin HTTP endpoints. A read of the whole state holds its lock
 * exclusive (it reads segment usage and walks objects, which RPC threads
 * holding it shared change under finer locks), so RPC handling waits
 * meanwhile: the answers are built straight from the state (no copies) and
 * /keys is bounded in count and bytes. Mooncake's per-key queries
 * (/query_key, /batch_query_keys) copy each object under its shard's lock,
 * as the StatKey RPC does, and hold the state lock shared (their replicas'
 * segments stay mounted while the answer names them). */
#include "master/admin.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <egmstore/egmstore.h>
#include "common/alloc.h"
#include "common/clock.h"
#include "common/json.h"
#include "common/log.h"
#include "common/prom.h"
#include "ha/election.h"
#include "master/journal.h"
#include "master/mirror.h"
#include "rpc/command.h"

#define JSON_TYPE "application/json"
#define ENDPOINTS                                                                                  \
    "/metrics, /metrics/summary, /health, /segments, /get_all_segments, /keys?prefix=&limit=, "    \
    "/query_key?key=, /batch_query_keys?keys="
#define LIMIT_ACCEPTED "an integer 1..100000 (default 1000)"
#define PREFIX_ACCEPTED "percent-encoded text of at most 4096 bytes, without %00"
#define KEY_ACCEPTED "one percent-encoded key: /query_key?key=K"
#define KEYS_ACCEPTED "percent-encoded keys separated by commas: /batch_query_keys?keys=a,b"

static void lock(const egm_master_admin_t *a)
{
    if (a->lock != NULL)
        pthread_rwlock_wrlock(a->lock);
}

/* Enough to read what only exclusive holders change: the set of segments and
 * their descriptors. */
static void lock_shared(const egm_master_admin_t *a)
{
    if (a->lock != NULL)
        pthread_rwlock_rdlock(a->lock);
}

static void unlock(const egm_master_admin_t *a)
{
    if (a->lock != NULL)
        pthread_rwlock_unlock(a->lock);
}

/* A JSON string of len bytes (common/json.h: keys are arbitrary bytes; a byte
 * that is not part of valid UTF-8 is written as \u00XX, docs/master.md). */
static egm_status_t json_string(egm_http_response_t *out, const char *text, size_t len)
{
    egm_textbuf_t t = egm__http_body_begin(out);
    egm__json_string(&t, text, len);
    return egm__http_body_end(out, &t);
}

static egm_status_t json_cstring(egm_http_response_t *out, const char *text)
{
    return json_string(out, text != NULL ? text : "", text != NULL ? strlen(text) : 0);
}

/* Replaces whatever was written with a JSON error; `lead` (NULL = none) comes
 * first, e.g. the "success":false of Mooncake's answers. */
static void json_error_with(egm_http_response_t *resp, int status, const char *lead,
                            const char *parameter, const char *message, const char *accepted)
{
    resp->len = 0;
    resp->status = status;
    resp->content_type = JSON_TYPE;
    egm_status_t s = egm__http_printf(resp, "{%s\"error\":", lead != NULL ? lead : "");
    if (s == EGM_OK)
        s = json_cstring(resp, message);
    if (s == EGM_OK && parameter != NULL) {
        s = egm__http_printf(resp, ",\"parameter\":");
        if (s == EGM_OK)
            s = json_cstring(resp, parameter);
    }
    if (s == EGM_OK && accepted != NULL) {
        s = egm__http_printf(resp, ",\"accepted\":");
        if (s == EGM_OK)
            s = json_cstring(resp, accepted);
    }
    if (s == EGM_OK)
        s = egm__http_printf(resp, "}\n");
    if (s != EGM_OK)
        resp->status = 500;
}

static void json_error(egm_http_response_t *resp, int status, const char *parameter,
                       const char *message, const char *accepted)
{
    json_error_with(resp, status, NULL, parameter, message, accepted);
}

static void out_of_memory(egm_http_response_t *resp)
{
    egm_free(resp->body);
    resp->body = NULL;
    resp->len = resp->cap = 0;
    resp->status = 503;
    egm_log_ratelimited(EGM_LOG_WARN, 10, "admin http: out of memory building an answer");
}

/* ---- /metrics, /health ---------------------------------------------------- */

/* Under the lock. */
static void take_snapshot(const egm_master_admin_t *a, egm_master_snapshot_t *s)
{
    egm_master_state_t *st = a->state;

    memset(s, 0, sizeof(*s));
    s->master_id = st->master_id;
    s->uptime_ms = egm__now_ms() - a->start_ms;
    s->segments = egm__segment_table_count(st->segments);
    for (size_t i = 0; i < s->segments; i++) {
        const egm_segment_t *seg = egm__segment_table_at(st->segments, i);
        egm_allocator_stats_t astats;
        egm__allocator_stats(seg->allocator, &astats);
        s->allocated_bytes += astats.used;
        s->lost_bytes += astats.lost;
        s->capacity_bytes += seg->desc.size;
        s->segment_replicas += seg->replica_count;
        s->segments_unreachable += atomic_load(&seg->unreachable) != 0;
    }
    s->clients = egm__liveness_client_count(st->liveness);
    egm__liveness_stats(st->liveness, &s->liveness);
    s->view = egm__segment_table_view(st->segments);
    egm__objects_stats(st->objects, &s->objects);
    egm__repair_queue_stats(egm__objects_repair_queue(st->objects), &s->repair);
    if (a->server != NULL)
        egm__rpc_server_group_stats(a->server, &s->server); /* every RPC thread */
    if (a->http != NULL) {
        s->http_auth_failures = egm__http_auth_failures(*a->http);
        s->http_slow_closed = egm__http_slow_closed(*a->http);
    }
    if (st->election != NULL) {
        int64_t epoch = 0;
        s->ha = 1;
        s->ha_leading = egm__election_leading(st->election, &epoch);
        s->ha_epoch = s->ha_leading ? (uint64_t)epoch : 0;
        s->ha_wins = egm__election_wins(st->election);
        s->ha_losses = egm__election_losses(st->election);
    }
    if (st->journal != NULL) {
        egm_journal_stats_t js;
        egm__journal_stats(st->journal, &js);
        s->ha_standbys = js.followers;
        s->ha_in_sync = js.in_sync;
        s->ha_journal_bytes = js.end;
        s->ha_lag_bytes = js.lag_bytes;
        s->ha_waits_timed_out = js.waits_timed_out;
        s->ha_batches_by_request = js.batches_by_request;
        s->ha_batches_by_thread = js.batches_by_thread;
        s->ha_batches_pipelined = js.batches_pipelined;
        s->ha_replies_held = js.waits_notified;
        s->ha_commits_described = atomic_load(&st->commits_described);
        s->ha_removes_described = atomic_load(&st->removes_described);
        s->ha_takeover_removals = atomic_load(&st->takeover_removals);
        s->ha_takeover_puts = atomic_load(&st->takeover_puts);
    }
    if (st->mirror != NULL) {
        egm_mirror_stats_t ms;
        egm__mirror_stats(st->mirror, &ms);
        s->ha_mirror_epoch = (uint64_t)ms.epoch;
        s->ha_mirror_objects = ms.objects;
        s->ha_mirror_batches = ms.batches_total;
    }
}

static void serve_metrics(const egm_master_admin_t *a, egm_http_response_t *resp)
{
    egm_master_snapshot_t snap;
    lock(a);
    take_snapshot(a, &snap);
    unlock(a);
    resp->status = 200;
    resp->content_type = EGM_PROM_CONTENT_TYPE;
    egm_textbuf_t text = egm__http_body_begin(resp);
    egm__master_metrics_format(a->metrics, &snap, &text);
    if (egm__http_body_end(resp, &text) != EGM_OK)
        out_of_memory(resp);
}

static void serve_health(const egm_master_admin_t *a, egm_http_response_t *resp)
{
    egm_master_snapshot_t snap;
    char id_text[EGM_ID_STRLEN];
    lock(a);
    take_snapshot(a, &snap);
    unlock(a);
    char leader[300] = "";
    int64_t leader_epoch = 0;
    const char *role = "single";
    if (a->state->election != NULL) {
        role = snap.ha_leading ? "leader" : "standby";
        if (egm__election_leader((egm_election_t *)a->state->election, leader, sizeof(leader),
                                 &leader_epoch) != EGM_OK)
            leader[0] = '\0';
    }
    resp->status = 200;
    resp->content_type = JSON_TYPE;
    char leader_json[640];
    egm_textbuf_t lt = egm__textbuf(leader_json, sizeof(leader_json));
    egm__json_cstring(&lt, leader);
    if (egm__http_printf(
            resp,
            "{\"status\":\"ok\",\"role\":\"%s\",\"leader\":%s,\"epoch\":%lld,"
            "\"master_id\":\"%s\",\"version\":\"%s\",\"uptime_s\":%.3f,"
            "\"segments\":%llu,\"clients\":%llu,\"keys\":%llu,\"allocated_bytes\":%llu,"
            "\"capacity_bytes\":%llu,\"standbys_in_sync\":%llu,\"mirror_objects\":%llu}\n",
            role, leader_json, (long long)leader_epoch, egm__id_format(snap.master_id, id_text),
            EGMSTORE_VERSION, (double)snap.uptime_ms / 1000.0, (unsigned long long)snap.segments,
            (unsigned long long)snap.clients, (unsigned long long)snap.objects.objects,
            (unsigned long long)snap.allocated_bytes, (unsigned long long)snap.capacity_bytes,
            (unsigned long long)snap.ha_in_sync,
            (unsigned long long)snap.ha_mirror_objects) != EGM_OK)
        out_of_memory(resp);
}

/* ---- /segments, /get_all_segments ----------------------------------------- */

static egm_status_t segment_json(egm_http_response_t *out, const egm_segment_t *seg)
{
    char id_text[EGM_ID_STRLEN], owner_text[EGM_ID_STRLEN];
    egm_allocator_stats_t astats;
    egm__allocator_stats(seg->allocator, &astats);
    egm_status_t s =
        egm__http_printf(out, "{\"id\":\"%s\",\"name\":", egm__id_format(seg->desc.id, id_text));
    if (s == EGM_OK)
        s = json_cstring(out, seg->desc.name);
    if (s == EGM_OK)
        s = egm__http_printf(out,
                             ",\"owner\":\"%s\",\"size\":%llu,\"used\":%llu,\"objects\":%llu,"
                             "\"reachable\":%s,\"host\":",
                             egm__id_format(seg->desc.owner, owner_text),
                             (unsigned long long)seg->desc.size, (unsigned long long)astats.used,
                             (unsigned long long)seg->replica_count,
                             atomic_load(&((egm_segment_t *)seg)->unreachable) ? "false" : "true");
    if (s == EGM_OK)
        s = json_cstring(out, seg->desc.host_id);
    if (s == EGM_OK)
        s = egm__http_printf(out, ",\"zone\":");
    if (s == EGM_OK)
        s = json_cstring(out, seg->desc.zone);
    if (s == EGM_OK)
        s = egm__http_printf(out, ",\"tcp_endpoint\":");
    if (s == EGM_OK)
        s = json_cstring(out, seg->desc.tcp_endpoint);
    if (s == EGM_OK)
        s = egm__http_printf(out, ",\"shm_socket\":");
    if (s == EGM_OK)
        s = json_cstring(out, seg->desc.shm_socket);
    if (s == EGM_OK)
        s = egm__http_printf(out, "}");
    return s;
}

static void serve_segments(const egm_master_admin_t *a, egm_http_response_t *resp)
{
    egm_status_t s = egm__http_printf(resp, "[");
    lock(a);
    size_t n = egm__segment_table_count(a->state->segments);
    for (size_t i = 0; i < n && s == EGM_OK; i++) {
        if (i > 0)
            s = egm__http_printf(resp, ",");
        if (s == EGM_OK)
            s = segment_json(resp, egm__segment_table_at(a->state->segments, i));
    }
    unlock(a);
    if (s == EGM_OK)
        s = egm__http_printf(resp, "]\n");
    resp->status = 200;
    resp->content_type = JSON_TYPE;
    if (s != EGM_OK)
        out_of_memory(resp);
}

/* Mooncake's shape, which SGLang reads: the segment names, one a line. */
static void serve_all_segment_names(const egm_master_admin_t *a, egm_http_response_t *resp)
{
    egm_status_t s = EGM_OK;
    lock_shared(a);
    size_t n = egm__segment_table_count(a->state->segments);
    for (size_t i = 0; i < n && s == EGM_OK; i++)
        s = egm__http_printf(resp, "%s\n", egm__segment_table_at(a->state->segments, i)->desc.name);
    unlock(a);
    resp->status = 200;
    resp->content_type = "text/plain; charset=utf-8";
    if (s == EGM_OK && resp->body == NULL)
        s = egm__http_printf(resp, "%s", ""); /* an empty body, not a missing one */
    if (s != EGM_OK)
        out_of_memory(resp);
}

/* ---- /keys ----------------------------------------------------------------- */

static int hex_value(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    if (c >= 'A' && c <= 'F')
        return c - 'A' + 10;
    return -1;
}

/* Percent-decodes (and '+' -> ' ') len bytes of src into dst (room for len
 * bytes). Returns the decoded length, or -1 for a '%' not followed by two hex
 * digits. */
static long percent_decode(const char *src, size_t len, char *dst)
{
    size_t o = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '%') {
            if (i + 2 >= len)
                return -1;
            int h = hex_value(src[i + 1]), l = hex_value(src[i + 2]);
            if (h < 0 || l < 0)
                return -1;
            dst[o++] = (char)(h * 16 + l);
            i += 2;
        } else
            dst[o++] = src[i] == '+' ? ' ' : src[i];
    }
    return (long)o;
}

typedef struct {
    char *prefix; /* decoded, egm_malloc'ed; NULL = every key */
    size_t prefix_len;
    unsigned long limit;
} keys_query_t;

/* Parses /keys' query; on a bad one answers 400 in resp and returns -1. */
static int parse_keys_query(const char *query, keys_query_t *q, egm_http_response_t *resp)
{
    int have_prefix = 0, have_limit = 0;
    char msg[256];

    q->prefix = NULL;
    q->prefix_len = 0;
    q->limit = EGM_ADMIN_KEYS_LIMIT_DEFAULT;
    for (const char *p = query; *p != '\0';) {
        size_t plen = strcspn(p, "&");
        const char *eq = memchr(p, '=', plen);
        size_t nlen = eq != NULL ? (size_t)(eq - p) : plen;
        const char *value = eq != NULL ? eq + 1 : p + plen;
        size_t vlen = (size_t)(p + plen - value);
        char name[16];
        long n = nlen < sizeof(name) ? percent_decode(p, nlen, name) : -2;

        if (plen == 0) { /* "&&" or a trailing '&' */
            p++;
            continue;
        }
        if (n == -1) {
            json_error(resp, 400, "query", "bad percent-encoding in a parameter name",
                       "prefix, limit");
            return -1;
        }
        if (n == -2 || !((n == 6 && memcmp(name, "prefix", 6) == 0) ||
                         (n == 5 && memcmp(name, "limit", 5) == 0))) {
            snprintf(msg, sizeof(msg), "unknown parameter \"%.*s\"", (int)(nlen < 64 ? nlen : 64),
                     p);
            json_error(resp, 400, "query", msg, "prefix, limit");
            return -1;
        }
        int is_prefix = n == 6;
        if (is_prefix ? have_prefix++ : have_limit++) {
            json_error(resp, 400, is_prefix ? "prefix" : "limit", "given more than once",
                       is_prefix ? PREFIX_ACCEPTED : LIMIT_ACCEPTED);
            return -1;
        }
        if (is_prefix) {
            /* Decoding never grows text: 3 * KEY_MAX raw bytes bound a valid prefix. */
            if (vlen > 3 * (size_t)EGM_MASTER_KEY_MAX) {
                json_error(resp, 400, "prefix", "longer than 4096 bytes", PREFIX_ACCEPTED);
                return -1;
            }
            q->prefix = egm_malloc(vlen + 1, "admin.prefix");
            if (q->prefix == NULL) {
                out_of_memory(resp);
                return -1;
            }
            long dl = percent_decode(value, vlen, q->prefix);
            if (dl < 0) {
                json_error(resp, 400, "prefix", "bad percent-encoding", PREFIX_ACCEPTED);
                return -1;
            }
            if ((size_t)dl > EGM_MASTER_KEY_MAX) {
                json_error(resp, 400, "prefix", "longer than 4096 bytes", PREFIX_ACCEPTED);
                return -1;
            }
            if (memchr(q->prefix, '\0', (size_t)dl) != NULL) {
                json_error(resp, 400, "prefix", "contains a NUL byte (%00)", PREFIX_ACCEPTED);
                return -1;
            }
            q->prefix[dl] = '\0';
            q->prefix_len = (size_t)dl;
        } else {
            char text[16];
            long dl = vlen < sizeof(text) ? percent_decode(value, vlen, text) : -2;
            int ok = dl > 0 && (size_t)dl < sizeof(text);
            for (long i = 0; ok && i < dl; i++)
                ok = text[i] >= '0' && text[i] <= '9';
            if (ok) {
                text[dl] = '\0';
                errno = 0;
                q->limit = strtoul(text, NULL, 10);
            }
            if (!ok && dl == -2 && strspn(value, "0123456789") >= vlen) {
                snprintf(msg, sizeof(msg), "%.*s is out of range 1..%d",
                         (int)(vlen < 32 ? vlen : 32), value, EGM_ADMIN_KEYS_LIMIT_MAX);
                json_error(resp, 400, "limit", msg, LIMIT_ACCEPTED);
                return -1;
            }
            if (!ok) {
                snprintf(msg, sizeof(msg), "\"%.*s\" is not a decimal integer",
                         (int)(vlen < 32 ? vlen : 32), value);
                json_error(resp, 400, "limit", msg, LIMIT_ACCEPTED);
                return -1;
            }
            if (errno != 0 || q->limit < 1 || q->limit > EGM_ADMIN_KEYS_LIMIT_MAX) {
                snprintf(msg, sizeof(msg), "%s is out of range 1..%d", text,
                         EGM_ADMIN_KEYS_LIMIT_MAX);
                json_error(resp, 400, "limit", msg, LIMIT_ACCEPTED);
                return -1;
            }
        }
        p += plen;
        if (*p == '&')
            p++;
    }
    return 0;
}

/* Every object once: each is listed at its first replica that is still on a
 * mounted segment (an object without one no longer exists). */
static int first_live_replica(const egm_replica_t *rep)
{
    const egm_object_t *obj = egm__replica_object(rep);
    for (uint32_t k = 0; k < obj->n_replicas; k++)
        if (obj->replicas[k].segment != NULL)
            return &obj->replicas[k] == rep;
    return 0;
}

static void serve_keys(const egm_master_admin_t *a, const char *query, egm_http_response_t *resp)
{
    keys_query_t q;
    unsigned long count = 0;
    int truncated = 0;
    egm_status_t s;

    if (parse_keys_query(query, &q, resp) != 0) {
        egm_free(q.prefix);
        return;
    }
    s = egm__http_printf(resp, "{\"keys\":[");
    lock(a);
    size_t n = egm__segment_table_count(a->state->segments);
    for (size_t i = 0; i < n && s == EGM_OK && !truncated; i++) {
        const egm_segment_t *seg = egm__segment_table_at(a->state->segments, i);
        for (const egm_replica_t *rep = seg->replicas; rep != NULL && s == EGM_OK;
             rep = rep->seg_next) {
            const egm_object_t *obj = egm__replica_object(rep);
            if (obj->key_len < q.prefix_len ||
                (q.prefix_len > 0 && memcmp(egm__object_key(obj), q.prefix, q.prefix_len) != 0) ||
                !first_live_replica(rep))
                continue;
            if (count == q.limit || resp->len >= EGM_ADMIN_KEYS_BODY_MAX) {
                truncated = 1;
                break;
            }
            s = egm__http_printf(resp, "%s{\"key\":", count > 0 ? "," : "");
            if (s == EGM_OK)
                s = json_string(resp, egm__object_key(obj), obj->key_len);
            if (s == EGM_OK)
                s = egm__http_printf(resp, ",\"size\":%llu,\"state\":\"%s\",\"replicas\":%u}",
                                     (unsigned long long)obj->size,
                                     obj->state == EGM_OBJECT_COMPLETE ? "complete" : "pending",
                                     obj->n_live);
            count++;
        }
    }
    unlock(a);
    if (s == EGM_OK)
        s = egm__http_printf(resp,
                             "],\"count\":%lu,\"limit\":%lu,\"truncated\":%s,\"prefix\":", count,
                             q.limit, truncated ? "true" : "false");
    if (s == EGM_OK)
        s = json_string(resp, q.prefix != NULL ? q.prefix : "", q.prefix_len);
    if (s == EGM_OK)
        s = egm__http_printf(resp, "}\n");
    egm_free(q.prefix);
    resp->status = 200;
    resp->content_type = JSON_TYPE;
    if (s != EGM_OK)
        out_of_memory(resp);
}

/* ---- Mooncake's /query_key, /batch_query_keys ------------------------------ */

/* Finds parameter `name` (matched as written, not decoded) in query: 1 with
 * its raw value in *value_p / *len_p, 0 when absent, -1 when given twice. */
static int query_param(const char *query, const char *name, const char **value_p, size_t *len_p)
{
    size_t name_len = strlen(name);
    int found = 0;
    for (const char *p = query; *p != '\0';) {
        size_t plen = strcspn(p, "&");
        const char *eq = memchr(p, '=', plen);
        size_t nlen = eq != NULL ? (size_t)(eq - p) : plen;
        if (nlen == name_len && memcmp(p, name, nlen) == 0) {
            if (found)
                return -1;
            found = 1;
            *value_p = eq != NULL ? eq + 1 : p + plen;
            *len_p = (size_t)(p + plen - *value_p);
        }
        p += plen;
        if (*p == '&')
            p++;
    }
    return found;
}

/* Mooncake's ErrorCode names for the answers a query can have. */
static const char *mooncake_error_name(egm_status_t status)
{
    switch (status) {
    case EGM_ERR_NOT_FOUND:
        return "OBJECT_NOT_FOUND";
    case EGM_ERR_NOT_READY:
        return "REPLICA_IS_NOT_READY";
    default:
        return "INTERNAL_ERROR";
    }
}

/* A readable object's copy (OK), NOT_READY while it is being written, or
 * NOT_FOUND (also for a key no object can have: empty or too long). Grants no
 * lease, as StatKey. Under the state lock held shared at least: the replicas'
 * segments stay mounted until it is released. */
static egm_status_t lookup(const egm_master_admin_t *a, const char *key, size_t len,
                           egm_object_view_t *obj)
{
    if (len == 0 || len > EGM_MASTER_KEY_MAX) {
        memset(obj, 0, sizeof(*obj));
        return EGM_ERR_NOT_FOUND;
    }
    egm_status_t s = egm__objects_stat(a->state->objects, key, len, obj);
    if (s != EGM_OK)
        return s == EGM_ERR_NOT_READY ? s : EGM_ERR_NOT_FOUND;
    if (obj->state != EGM_OBJECT_COMPLETE)
        return EGM_ERR_NOT_READY;
    return obj->n_replicas > 0 ? EGM_OK : EGM_ERR_NOT_FOUND;
}

/* The transport a reader would use to reach a segment, in Mooncake's words. */
static const char *segment_protocol(const egm_segment_desc_t *d)
{
    if (d->tcp_endpoint[0] != '\0')
        return "tcp";
    if (d->shm_socket[0] != '\0')
        return "shm";
    return d->handle_kind == EGM_HANDLE_FABRIC ? "nvlink" : "";
}

/* Mooncake's replica descriptor (its BufferDescriptor's fields) plus the
 * segment's name; buffer_address_ is the offset in the segment, the only
 * address egmstore's master knows. */
static egm_status_t replica_values_json(egm_http_response_t *out, const egm_object_view_t *obj)
{
    egm_status_t s = egm__http_printf(out, "[");
    for (uint32_t k = 0; k < obj->n_replicas && s == EGM_OK; k++) {
        const egm_segment_desc_t *d = &obj->replicas[k].segment->desc;
        s = egm__http_printf(out,
                             "%s{\"size_\":%llu,\"buffer_address_\":%llu,\"protocol_\":\"%s\","
                             "\"transport_endpoint_\":",
                             k > 0 ? "," : "", (unsigned long long)obj->size,
                             (unsigned long long)obj->replicas[k].offset, segment_protocol(d));
        if (s == EGM_OK)
            s = json_cstring(out, d->tcp_endpoint);
        if (s == EGM_OK)
            s = egm__http_printf(out, ",\"segment_name_\":");
        if (s == EGM_OK)
            s = json_cstring(out, d->name);
        if (s == EGM_OK)
            s = egm__http_printf(out, "}");
    }
    if (s == EGM_OK)
        s = egm__http_printf(out, "]");
    return s;
}

/* Decodes a parameter's value into a new egm_malloc'ed text; on a bad one
 * answers 400 (or 503) in resp and returns NULL. */
static char *decode_param(const char *raw, size_t raw_len, const char *parameter,
                          const char *accepted, size_t *len_p, egm_http_response_t *resp)
{
    char *text = egm_malloc(raw_len + 1, "admin.query");
    if (text == NULL) {
        out_of_memory(resp);
        return NULL;
    }
    long len = percent_decode(raw, raw_len, text);
    if (len < 0) {
        egm_free(text);
        json_error_with(resp, 400, "\"success\":false,", parameter, "bad percent-encoding",
                        accepted);
        return NULL;
    }
    text[len] = '\0';
    *len_p = (size_t)len;
    return text;
}

/* Mooncake's answers: 200 {"success":true,"data":[replica, ...]}, or 404
 * {"success":false,"error_code":-704,"error_message":"OBJECT_NOT_FOUND"}. */
static void serve_query_key(const egm_master_admin_t *a, const char *query,
                            egm_http_response_t *resp)
{
    const char *raw = "";
    size_t raw_len = 0, key_len = 0;
    if (query_param(query, "key", &raw, &raw_len) < 0) {
        json_error_with(resp, 400, "\"success\":false,", "key", "given more than once",
                        KEY_ACCEPTED);
        return;
    }
    char *key = decode_param(raw, raw_len, "key", KEY_ACCEPTED, &key_len, resp);
    if (key == NULL)
        return;
    egm_object_view_t obj;
    egm_status_t s;
    lock_shared(a);
    egm_status_t found = lookup(a, key, key_len, &obj);
    if (found == EGM_OK) {
        resp->status = 200;
        s = egm__http_printf(resp, "{\"success\":true,\"data\":");
        if (s == EGM_OK)
            s = replica_values_json(resp, &obj);
        if (s == EGM_OK)
            s = egm__http_printf(resp, "}\n");
    } else {
        resp->status = 404;
        s = egm__http_printf(resp,
                             "{\"success\":false,\"error_code\":%d,\"error_message\":\"%s\"}\n",
                             egm_status_to_mooncake(found), mooncake_error_name(found));
    }
    unlock(a);
    egm_free(key);
    resp->content_type = JSON_TYPE;
    if (s != EGM_OK)
        out_of_memory(resp);
}

typedef struct {
    const char *text;
    size_t len;
} key_slice_t;

static int key_slice_cmp(const void *pa, const void *pb)
{
    const key_slice_t *x = pa, *y = pb;
    int c = memcmp(x->text, y->text, x->len < y->len ? x->len : y->len);
    return c != 0 ? c : (x->len > y->len) - (x->len < y->len);
}

/* Mooncake's shape: {"success":true,"data":{KEY:{"ok":B,"error":null|NAME,
 * "values":[replica, ...]|null,"disk_values":null,"local_disk_values":null,
 * "nof_values":null},...}}, one entry per distinct key in byte order (the
 * value is decoded, then split at every comma, empty keys kept). */
static void serve_batch_query_keys(const egm_master_admin_t *a, const char *query,
                                   egm_http_response_t *resp)
{
    const char *raw = "";
    size_t raw_len = 0, text_len = 0;
    int given = query_param(query, "keys", &raw, &raw_len);
    if (given < 0) {
        json_error_with(resp, 400, "\"success\":false,", "keys", "given more than once",
                        KEYS_ACCEPTED);
        return;
    }
    if (given == 0 || raw_len == 0) { /* Mooncake's answer, word for word */
        resp->status = 400;
        resp->content_type = JSON_TYPE;
        if (egm__http_printf(resp, "{\"success\":false,\"error\":\"No keys provided. Use "
                                   "?keys=key1,key2,...\"}\n") != EGM_OK)
            out_of_memory(resp);
        return;
    }
    char *text = decode_param(raw, raw_len, "keys", KEYS_ACCEPTED, &text_len, resp);
    if (text == NULL)
        return;
    size_t n = 1;
    for (size_t i = 0; i < text_len; i++)
        n += text[i] == ',';
    key_slice_t *keys = egm_malloc(n * sizeof(*keys), "admin.query");
    if (keys == NULL) {
        egm_free(text);
        out_of_memory(resp);
        return;
    }
    for (size_t i = 0, start = 0, k = 0; i <= text_len; i++) {
        if (i == text_len || text[i] == ',') {
            keys[k++] = (key_slice_t){text + start, i - start};
            start = i + 1;
        }
    }
    qsort(keys, n, sizeof(*keys), key_slice_cmp);

    egm_status_t s = egm__http_printf(resp, "{\"success\":true,\"data\":{");
    lock_shared(a);
    for (size_t i = 0, written = 0; i < n && s == EGM_OK; i++) {
        if (i > 0 && key_slice_cmp(&keys[i - 1], &keys[i]) == 0)
            continue; /* one entry per key, as Mooncake's map */
        egm_object_view_t obj;
        egm_status_t found = lookup(a, keys[i].text, keys[i].len, &obj);
        s = egm__http_printf(resp, "%s", written++ > 0 ? "," : "");
        if (s == EGM_OK)
            s = json_string(resp, keys[i].text, keys[i].len);
        if (s == EGM_OK && found == EGM_OK) {
            s = egm__http_printf(resp, ":{\"ok\":true,\"error\":null,\"values\":");
            if (s == EGM_OK)
                s = replica_values_json(resp, &obj);
        } else if (s == EGM_OK) {
            s = egm__http_printf(resp, ":{\"ok\":false,\"error\":\"%s\",\"values\":null",
                                 mooncake_error_name(found));
        }
        if (s == EGM_OK)
            s = egm__http_printf(
                resp, ",\"disk_values\":null,\"local_disk_values\":null,\"nof_values\":null}");
    }
    unlock(a);
    if (s == EGM_OK)
        s = egm__http_printf(resp, "}}\n");
    egm_free(keys);
    egm_free(text);
    resp->status = 200;
    resp->content_type = JSON_TYPE;
    if (s != EGM_OK)
        out_of_memory(resp);
}

/* ---- /metrics/summary ------------------------------------------------------ */

/* Mooncake's request counters' names where it has the RPC, egmstore's
 * otherwise; Mooncake's order first. Every RPC type once (checked below). */
static const struct {
    uint16_t type;
    const char *name;
} summary_rpcs[] = {
    {EGM_RPC_PUT_START, "PutStart"},
    {EGM_RPC_PUT_END, "PutEnd"},
    {EGM_RPC_PUT_REVOKE, "PutRevoke"},
    {EGM_RPC_GET_REPLICA_LIST, "Get"},
    {EGM_RPC_EXIST_KEY, "Exist"},
    {EGM_RPC_REMOVE, "Del"},
    {EGM_RPC_REMOVE_ALL, "DelAll"},
    {EGM_RPC_PING, "Ping"},
    {EGM_RPC_MOUNT_SEGMENT, "MountSegment"},
    {EGM_RPC_UNMOUNT_SEGMENT, "UnmountSegment"},
    {EGM_RPC_LIST_SEGMENTS, "ListSegments"},
    {EGM_RPC_STAT_KEY, "StatKey"},
    {EGM_RPC_SLAB_GRANT, "SlabGrant"},
    {EGM_RPC_COMMIT, "Commit"},
    {EGM_RPC_REPAIR_GRANT, "RepairGrant"},
    {EGM_RPC_REPAIR_COMMIT, "RepairCommit"},
    {EGM_RPC_HA_APPLY, "HaApply"},
};
_Static_assert(sizeof(summary_rpcs) / sizeof(summary_rpcs[0]) == EGM_RPC_TYPE_MAX,
               "every RPC type has a name in /metrics/summary");

/* As Mooncake writes sizes: "0 B", "512 B", "97.67 KB", "64.00 MB" (powers of 1024). */
static const char *format_size(uint64_t bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KB", "MB", "GB", "TB", "PB", "EB"};
    if (bytes < 1024) {
        snprintf(buf, len, "%llu B", (unsigned long long)bytes);
        return buf;
    }
    double v = (double)bytes;
    size_t u = 0;
    while (v >= 1024.0 && u + 1 < sizeof(units) / sizeof(units[0])) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, len, "%.2f %s", v, units[u]);
    return buf;
}

/* One line, as Mooncake's master answers: its sections, with egmstore's
 * counters under Mooncake's names; rates are per second since the previous
 * /metrics/summary (since the start for the first). */
static void serve_summary(egm_master_admin_t *a, egm_http_response_t *resp)
{
    egm_master_snapshot_t snap;
    char used[32], cap[32], evicted[32], held[32], slab[32];
    lock(a);
    take_snapshot(a, &snap);
    unlock(a);
    uint64_t now = egm__now_ns(); /* not ms: two summaries may come within one */
    uint64_t since = a->summary_ns != 0 ? a->summary_ns : a->start_ms * 1000000u;
    double seconds = now > since ? (double)(now - since) / 1e9 : 0.0;
    const egm_object_index_stats_t *o = &snap.objects;

    egm_textbuf_t t = egm__http_body_begin(resp);
    egm__textbuf_printf(&t,
                        "role=leader, state=serving, service_ready=true, master={Mem Storage: "
                        "%s / %s",
                        format_size(snap.allocated_bytes, used, sizeof(used)),
                        format_size(snap.capacity_bytes, cap, sizeof(cap)));
    if (snap.capacity_bytes > 0)
        egm__textbuf_printf(&t, " (%.1f%%)",
                            100.0 * (double)snap.allocated_bytes / (double)snap.capacity_bytes);
    egm__textbuf_printf(&t,
                        " | NVMe-oF SSD: 0 B / 0 B | SSD Storage: 0 B / 0 B | Keys: %llu "
                        "(soft-pinned: %llu) | Clients: %llu | Requests (Success/Total per sec): ",
                        (unsigned long long)o->objects, (unsigned long long)o->soft_pinned,
                        (unsigned long long)snap.clients);
    for (size_t i = 0; i < sizeof(summary_rpcs) / sizeof(summary_rpcs[0]); i++) {
        const egm_rpc_metrics_t *r = &a->metrics->rpc[summary_rpcs[i].type];
        uint16_t type = summary_rpcs[i].type;
        uint64_t req = atomic_load_explicit(&r->requests, memory_order_relaxed);
        uint64_t fail = atomic_load_explicit(&r->failures, memory_order_relaxed);
        uint64_t d_req = req - a->summary_requests[type];
        uint64_t d_fail = fail - a->summary_failures[type];
        double total = seconds > 0 ? (double)d_req / seconds : 0.0;
        double ok = seconds > 0 && d_req >= d_fail ? (double)(d_req - d_fail) / seconds : 0.0;
        egm__textbuf_printf(&t, "%s%s=%.2f/%.2f", i > 0 ? ", " : "", summary_rpcs[i].name, ok,
                            total);
        a->summary_requests[type] = req;
        a->summary_failures[type] = fail;
    }
    a->summary_ns = now;
    egm__textbuf_printf(
        &t,
        " | Eviction: Runs=%llu, NoSpace=%llu, keys=%llu, size=%s | Discard: Total=%llu | "
        "Held: size=%s, replicas=%llu | Slabs: open=%llu, size=%s, granted=%llu, expired=%llu, "
        "commits=%llu}\n",
        (unsigned long long)o->eviction_runs_total, (unsigned long long)o->no_space_total,
        (unsigned long long)o->evictions_total,
        format_size(o->evicted_bytes_total, evicted, sizeof(evicted)),
        (unsigned long long)o->discarded_puts_total, format_size(o->held_bytes, held, sizeof(held)),
        (unsigned long long)o->held_extents, (unsigned long long)o->slabs,
        format_size(o->slab_bytes, slab, sizeof(slab)), (unsigned long long)o->slab_grants_total,
        (unsigned long long)o->slab_expired_total, (unsigned long long)o->commits_total);
    resp->status = 200;
    resp->content_type = "text/plain; charset=utf-8"; /* not Prometheus text */
    if (egm__http_body_end(resp, &t) != EGM_OK)
        out_of_memory(resp);
}

void egm__master_admin_http(void *arg, const char *path, const char *query,
                            egm_http_response_t *resp)
{
    egm_master_admin_t *a = arg;

    if (strcmp(path, "/metrics") == 0)
        serve_metrics(a, resp);
    else if (strcmp(path, "/metrics/summary") == 0)
        serve_summary(a, resp);
    else if (strcmp(path, "/query_key") == 0)
        serve_query_key(a, query != NULL ? query : "", resp);
    else if (strcmp(path, "/batch_query_keys") == 0)
        serve_batch_query_keys(a, query != NULL ? query : "", resp);
    else if (strcmp(path, "/health") == 0)
        serve_health(a, resp);
    else if (strcmp(path, "/segments") == 0)
        serve_segments(a, resp);
    else if (strcmp(path, "/get_all_segments") == 0)
        serve_all_segment_names(a, resp);
    else if (strcmp(path, "/keys") == 0)
        serve_keys(a, query != NULL ? query : "", resp);
    else {
        char msg[160];
        snprintf(msg, sizeof(msg), "no endpoint %.100s", path);
        json_error(resp, 404, NULL, msg, ENDPOINTS);
    }
}
