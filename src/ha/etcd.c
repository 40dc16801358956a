/* etcd v3 over the HTTP/JSON gateway (see etcd.h). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/alloc.h"
#include "common/base64.h"
#include "common/json_read.h"
#include "common/log.h"
#include "common/sock.h"
#include "common/textbuf.h"
#include "ha/etcd.h"
#include "ha/http.h"

struct egm_etcd {
    pthread_mutex_t lock;
    egm_http_conn_t conns[EGM_ETCD_ENDPOINTS_MAX];
    char names[EGM_ETCD_ENDPOINTS_MAX][300];
    unsigned n, current;
    int timeout_ms;
};

#define ENDPOINTS_FORM "host:port[;host:port...], e.g. etcd://10.0.0.1:2379;10.0.0.2:2379"

egm_status_t egm__etcd_create(const char *endpoints, int timeout_ms, egm_etcd_t **etcd_p)
{
    if (endpoints == NULL || endpoints[0] == '\0')
        return egm__set_error(EGM_ERR_CONFIG,
                              "etcd endpoints: none given (expected " ENDPOINTS_FORM ")");
    egm_etcd_t *e = egm_calloc(1, sizeof(*e), "etcd.client");
    if (e == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "etcd client");
    e->timeout_ms = timeout_ms > 0 ? timeout_ms : 1000;
    const char *p = endpoints;
    if (strncmp(p, "etcd://", 7) == 0)
        p += 7;
    char host[EGM_SOCK_HOST_MAX];
    uint16_t port;
    egm_status_t s = EGM_ERR_NOT_FOUND;
    while (e->n < EGM_ETCD_ENDPOINTS_MAX &&
           (s = egm__sock_next_endpoint(&p, host, sizeof(host), &port)) == EGM_OK) {
        egm__http_conn_init(&e->conns[e->n], host, port);
        egm__sock_format_hostport(host, port, e->names[e->n], sizeof(e->names[0]));
        e->n++;
    }
    if (e->n == EGM_ETCD_ENDPOINTS_MAX) /* the loop stopped before reading on */
        s = *p == '\0' ? EGM_ERR_NOT_FOUND
                       : egm__set_error(EGM_ERR_CONFIG, "more than %d", EGM_ETCD_ENDPOINTS_MAX);
    if (s != EGM_ERR_NOT_FOUND) {
        egm__set_error(EGM_ERR_CONFIG, "etcd endpoints \"%s\": %s (expected " ENDPOINTS_FORM ")",
                       endpoints, egm_last_error());
        egm_free(e);
        return EGM_ERR_CONFIG;
    }
    if (e->n == 0) {
        egm_free(e);
        return egm__set_error(EGM_ERR_CONFIG,
                              "etcd endpoints \"%s\": none given (expected " ENDPOINTS_FORM ")",
                              endpoints);
    }
    pthread_mutex_init(&e->lock, NULL);
    *etcd_p = e;
    return EGM_OK;
}

void egm__etcd_destroy(egm_etcd_t *e)
{
    if (e == NULL)
        return;
    for (unsigned i = 0; i < e->n; i++)
        egm__http_conn_cleanup(&e->conns[i]);
    pthread_mutex_destroy(&e->lock);
    egm_free(e);
}

const char *egm__etcd_endpoint(const egm_etcd_t *e)
{
    return e->names[e->current];
}

/* The answer of one call: its body and the JSON read from it. */
typedef struct {
    char *body;
    egm_json_doc_t doc;
} answer_t;

static void answer_cleanup(answer_t *a)
{
    egm__json_doc_cleanup(&a->doc);
    egm_free(a->body);
    a->body = NULL;
}

/* etcd's refusal: {"error":"...","code":N,"message":"..."}; gRPC code 5 is
 * NOT_FOUND (e.g. an unknown lease). */
static egm_status_t refusal(answer_t *a, const char *path, int http)
{
    char msg[256] = "";
    int64_t code = -1;
    int m = egm__json_member(&a->doc, 0, "message");
    if (m < 0)
        m = egm__json_member(&a->doc, 0, "error");
    egm__json_get_string(&a->doc, m, msg, sizeof(msg));
    egm__json_get_int64(&a->doc, egm__json_member(&a->doc, 0, "code"), &code);
    return egm__set_error(code == 5 ? EGM_ERR_NOT_FOUND : EGM_ERR_IO, "etcd %s: HTTP %d: %s", path,
                          http, msg[0] ? msg : "(no message)");
}

static egm_status_t call(egm_etcd_t *e, const char *path, const egm_textbuf_t *req, answer_t *a)
{
    memset(a, 0, sizeof(*a));
    if (req->status != EGM_OK)
        return egm__set_error(EGM_ERR_NO_MEMORY, "etcd %s: request", path);
    pthread_mutex_lock(&e->lock);
    egm_status_t s = EGM_ERR_UNREACHABLE;
    int http = 0;
    size_t len = 0;
    for (unsigned tries = 0; tries < e->n; tries++) {
        egm_http_conn_t *c = &e->conns[e->current];
        s = egm__http_post(c, path, req->buf, req->need, e->timeout_ms, &http, &a->body, &len);
        /* A member that lost its quorum answers 503: another may have it. */
        if (s == EGM_OK && http == 503 && tries + 1 < e->n) {
            egm_free(a->body);
            a->body = NULL;
            s = egm__set_error(EGM_ERR_UNREACHABLE, "etcd %s: HTTP 503", e->names[e->current]);
        }
        if (s != EGM_ERR_UNREACHABLE && s != EGM_ERR_TIMEOUT)
            break;
        e->current = (e->current + 1) % e->n;
    }
    pthread_mutex_unlock(&e->lock);
    if (s != EGM_OK)
        return s;
    s = egm__json_parse(a->body, len, &a->doc);
    if (s == EGM_OK && a->doc.toks[0].type != EGM_JSON_OBJECT)
        s = egm__set_error(EGM_ERR_PROTOCOL, "etcd %s: the answer is not a JSON object", path);
    if (s == EGM_OK && http != 200)
        s = refusal(a, path, http);
    if (s != EGM_OK)
        answer_cleanup(a);
    return s;
}

/* Appends "name":"<base64 of the bytes>". */
static void b64_member(egm_textbuf_t *t, const char *name, const void *data, size_t len)
{
    char small[256];
    size_t need = EGM_BASE64_LEN(len);
    char *out = need <= sizeof(small) ? small : egm_malloc(need, "etcd.b64");
    if (out == NULL) {
        t->status = EGM_ERR_NO_MEMORY;
        return;
    }
    egm__base64_encode(data, len, out);
    egm__textbuf_printf(t, "\"%s\":\"%s\"", name, out);
    if (out != small)
        egm_free(out);
}

static int64_t member_int(const answer_t *a, int obj, const char *name)
{
    int64_t v = 0;
    egm__json_get_int64(&a->doc, egm__json_member(&a->doc, obj, name), &v);
    return v;
}

/* A base64 STRING member of obj, decoded into an egm_malloc'ed text. */
static egm_status_t read_b64(const answer_t *a, int obj, const char *name, char **out_p,
                             size_t *len_p)
{
    const egm_json_doc_t *d = &a->doc;
    int v = egm__json_member(d, obj, name);
    size_t enc =
        v >= 0 && d->toks[v].type == EGM_JSON_STRING ? d->toks[v].end - d->toks[v].start : 0;
    char *out = egm_malloc(enc / 4 * 3 + 1, "etcd.value");
    if (out == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "etcd %s of %zu bytes", name, enc);
    long n = enc == 0 ? 0 : egm__base64_decode(d->text + d->toks[v].start, enc, out, enc / 4 * 3);
    if (n < 0) {
        egm_free(out);
        return egm__set_error(EGM_ERR_PROTOCOL, "etcd: a %s that is not base64", name);
    }
    out[n] = '\0';
    *out_p = out;
    if (len_p != NULL)
        *len_p = (size_t)n;
    return EGM_OK;
}

/* Element i of the kvs of a range answer at token range into kv:
 * EGM_ERR_NOT_FOUND when there is none. */
static egm_status_t read_kv_at(const answer_t *a, int range, uint32_t i, egm_etcd_kv_t *kv)
{
    memset(kv, 0, sizeof(*kv));
    int at = egm__json_element(&a->doc, egm__json_member(&a->doc, range, "kvs"), i);
    if (at < 0)
        return EGM_ERR_NOT_FOUND;
    egm_status_t s = read_b64(a, at, "key", &kv->key, NULL);
    if (s == EGM_OK)
        s = read_b64(a, at, "value", &kv->value, &kv->len);
    if (s != EGM_OK) {
        egm__etcd_kv_cleanup(kv);
        return s;
    }
    kv->create_revision = member_int(a, at, "create_revision");
    kv->mod_revision = member_int(a, at, "mod_revision");
    kv->lease = member_int(a, at, "lease");
    return EGM_OK;
}

static egm_status_t read_kv(const answer_t *a, int range, egm_etcd_kv_t *kv)
{
    return read_kv_at(a, range, 0, kv);
}

void egm__etcd_kv_cleanup(egm_etcd_kv_t *kv)
{
    egm_free(kv->key);
    egm_free(kv->value);
    memset(kv, 0, sizeof(*kv));
}

/* A lease call whose request is one int64 member: {"<name>":"<value>"}. */
static egm_status_t lease_call(egm_etcd_t *e, const char *path, const char *name, int64_t value,
                               answer_t *a)
{
    egm_textbuf_t t = egm__textbuf_growing("etcd.request");
    egm__textbuf_printf(&t, "{\"%s\":\"%lld\"}", name, (long long)value);
    egm_status_t s = call(e, path, &t, a);
    egm_free(t.buf);
    return s;
}

egm_status_t egm__etcd_lease_grant(egm_etcd_t *e, int64_t ttl_s, int64_t *id_p, int64_t *ttl_p)
{
    answer_t a;
    egm_status_t s = lease_call(e, "/v3/lease/grant", "TTL", ttl_s, &a);
    if (s != EGM_OK)
        return s;
    int64_t id = member_int(&a, 0, "ID"), ttl = member_int(&a, 0, "TTL");
    answer_cleanup(&a);
    if (id == 0 || ttl <= 0)
        return egm__set_error(EGM_ERR_PROTOCOL, "etcd lease grant: no ID or TTL in the answer");
    *id_p = id;
    if (ttl_p != NULL)
        *ttl_p = ttl;
    return EGM_OK;
}

egm_status_t egm__etcd_lease_keepalive(egm_etcd_t *e, int64_t id, int64_t *ttl_p)
{
    answer_t a;
    egm_status_t s = lease_call(e, "/v3/lease/keepalive", "ID", id, &a);
    if (s != EGM_OK)
        return s;
    /* The gateway streams: one {"result":{...}} per renewal. No TTL: gone. */
    int64_t ttl = member_int(&a, egm__json_member(&a.doc, 0, "result"), "TTL");
    answer_cleanup(&a);
    if (ttl <= 0)
        return egm__set_error(EGM_ERR_NOT_FOUND, "etcd lease %llx: expired or revoked",
                              (unsigned long long)id);
    *ttl_p = ttl;
    return EGM_OK;
}

egm_status_t egm__etcd_lease_revoke(egm_etcd_t *e, int64_t id)
{
    answer_t a;
    egm_status_t s = lease_call(e, "/v3/lease/revoke", "ID", id, &a);
    if (s == EGM_OK)
        answer_cleanup(&a);
    return s == EGM_ERR_NOT_FOUND ? EGM_OK : s;
}

egm_status_t egm__etcd_get(egm_etcd_t *e, const char *key, egm_etcd_kv_t *kv_p, int64_t *revision_p)
{
    egm_textbuf_t t = egm__textbuf_growing("etcd.request");
    egm__textbuf_append(&t, "{", 1);
    b64_member(&t, "key", key, strlen(key));
    egm__textbuf_append(&t, "}", 1);
    answer_t a;
    egm_status_t s = call(e, "/v3/kv/range", &t, &a);
    egm_free(t.buf);
    if (s != EGM_OK)
        return s;
    if (revision_p != NULL)
        *revision_p = member_int(&a, egm__json_member(&a.doc, 0, "header"), "revision");
    s = read_kv(&a, 0, kv_p);
    answer_cleanup(&a);
    return s;
}

egm_status_t egm__etcd_put(egm_etcd_t *e, const char *key, const void *value, size_t len,
                           int64_t lease)
{
    egm_textbuf_t t = egm__textbuf_growing("etcd.request");
    egm__textbuf_append(&t, "{", 1);
    b64_member(&t, "key", key, strlen(key));
    egm__textbuf_append(&t, ",", 1);
    b64_member(&t, "value", value, len);
    egm__textbuf_printf(&t, ",\"lease\":\"%lld\"}", (long long)lease);
    answer_t a;
    egm_status_t s = call(e, "/v3/kv/put", &t, &a);
    egm_free(t.buf);
    if (s == EGM_OK)
        answer_cleanup(&a);
    return s;
}

/* Runs the transaction written in t, whose key member was written in k (a
 * growing text each: both freed here). */
static egm_status_t txn(egm_etcd_t *e, egm_textbuf_t *t, egm_textbuf_t *k, answer_t *a)
{
    if (k->status != EGM_OK)
        t->status = k->status;
    egm_free(k->buf);
    egm_status_t s = call(e, "/v3/kv/txn", t, a);
    egm_free(t->buf);
    return s;
}

egm_status_t egm__etcd_create_key(egm_etcd_t *e, const char *key, const void *value, size_t len,
                                  int64_t lease, bool *created_p, egm_etcd_kv_t *kv_p)
{
    egm_textbuf_t t = egm__textbuf_growing("etcd.request");
    egm_textbuf_t k = egm__textbuf_growing("etcd.request");
    b64_member(&k, "key", key, strlen(key));
    egm__textbuf_printf(&t, "{\"compare\":[{\"target\":\"CREATE\",%s,\"create_revision\":\"0\"}],",
                        k.buf ? k.buf : "");
    egm__textbuf_printf(&t, "\"success\":[{\"request_put\":{%s,", k.buf ? k.buf : "");
    b64_member(&t, "value", value, len);
    egm__textbuf_printf(&t, ",\"lease\":\"%lld\"}},{\"request_range\":{%s}}],", (long long)lease,
                        k.buf ? k.buf : "");
    egm__textbuf_printf(&t, "\"failure\":[{\"request_range\":{%s}}]}", k.buf ? k.buf : "");
    answer_t a;
    egm_status_t s = txn(e, &t, &k, &a);
    if (s != EGM_OK)
        return s;
    *created_p = egm__json_is_true(&a.doc, egm__json_member(&a.doc, 0, "succeeded"));
    if (kv_p != NULL) {
        int responses = egm__json_member(&a.doc, 0, "responses");
        int last = responses < 0
                       ? -1
                       : egm__json_element(&a.doc, responses, a.doc.toks[responses].count - 1);
        s = read_kv(&a, egm__json_member(&a.doc, last, "response_range"), kv_p);
        if (s == EGM_ERR_NOT_FOUND) /* deleted between the two steps: as if absent */
            s = egm__set_error(EGM_ERR_PROTOCOL, "etcd txn on %s: no key in the answer", key);
    }
    answer_cleanup(&a);
    return s;
}

egm_status_t egm__etcd_delete_if(egm_etcd_t *e, const char *key, int64_t create_revision,
                                 bool *deleted_p)
{
    egm_textbuf_t t = egm__textbuf_growing("etcd.request");
    egm_textbuf_t k = egm__textbuf_growing("etcd.request");
    b64_member(&k, "key", key, strlen(key));
    egm__textbuf_printf(&t,
                        "{\"compare\":[{\"target\":\"CREATE\",%s,\"create_revision\":\"%lld\"}],"
                        "\"success\":[{\"request_delete_range\":{%s}}]}",
                        k.buf ? k.buf : "", (long long)create_revision, k.buf ? k.buf : "");
    answer_t a;
    egm_status_t s = txn(e, &t, &k, &a);
    if (s != EGM_OK)
        return s;
    if (deleted_p != NULL)
        *deleted_p = egm__json_is_true(&a.doc, egm__json_member(&a.doc, 0, "succeeded"));
    answer_cleanup(&a);
    return EGM_OK;
}

egm_status_t egm__etcd_list(egm_etcd_t *e, const char *prefix, egm_etcd_kv_t **kvs_p, size_t *n_p)
{
    size_t plen = strlen(prefix);
    char end[EGM_ETCD_KEY_MAX];
    *kvs_p = NULL;
    *n_p = 0;
    if (plen == 0 || plen >= sizeof(end))
        return egm__set_error(EGM_ERR_INVALID_ARG, "etcd list: a prefix of 1..%d bytes",
                              EGM_ETCD_KEY_MAX - 1);
    /* The range of keys with the prefix ends before the prefix with its last
     * byte incremented (etcd's clientv3.GetPrefixRangeEnd). */
    memcpy(end, prefix, plen);
    size_t elen = plen;
    while (elen > 0 && (unsigned char)end[elen - 1] == 0xff)
        elen--;
    if (elen == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "etcd list: a prefix of 0xff bytes");
    end[elen - 1] = (char)((unsigned char)end[elen - 1] + 1);
    egm_textbuf_t t = egm__textbuf_growing("etcd.request");
    egm__textbuf_append(&t, "{", 1);
    b64_member(&t, "key", prefix, plen);
    egm__textbuf_append(&t, ",", 1);
    b64_member(&t, "range_end", end, elen);
    egm__textbuf_append(&t, ",\"limit\":\"1000\"}", 16);
    answer_t a;
    egm_status_t s = call(e, "/v3/kv/range", &t, &a);
    egm_free(t.buf);
    if (s != EGM_OK)
        return s;
    int kvs = egm__json_member(&a.doc, 0, "kvs");
    size_t n = kvs >= 0 && a.doc.toks[kvs].type == EGM_JSON_ARRAY ? a.doc.toks[kvs].count : 0;
    egm_etcd_kv_t *out = n > 0 ? egm_calloc(n, sizeof(*out), "etcd.kvs") : NULL;
    if (n > 0 && out == NULL)
        s = egm__set_error(EGM_ERR_NO_MEMORY, "etcd list of %zu keys", n);
    for (size_t i = 0; s == EGM_OK && i < n; i++)
        s = read_kv_at(&a, 0, (uint32_t)i, &out[i]);
    answer_cleanup(&a);
    if (s != EGM_OK) {
        egm__etcd_kvs_free(out, n);
        return s;
    }
    *kvs_p = out;
    *n_p = n;
    return EGM_OK;
}

void egm__etcd_kvs_free(egm_etcd_kv_t *kvs, size_t n)
{
    for (size_t i = 0; kvs != NULL && i < n; i++)
        egm__etcd_kv_cleanup(&kvs[i]);
    egm_free(kvs);
}
