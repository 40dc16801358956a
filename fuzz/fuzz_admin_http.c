/* Fuzz target: the master's admin HTTP endpoints (src/master/admin.c) as the
 * HTTP server calls them, with the query text a request line carries, on a
 * master state holding a few objects (built once: the endpoints only read it).
 *
 * Input: u8 path (low 4 bits: /keys, /query_key, /batch_query_keys,
 * /metrics/summary, /segments, /get_all_segments, /health, /metrics, or an
 * unknown path), then the raw query (up to a NUL, as a C string reaches the
 * handler).
 *
 * Checks: the status is 200, 400 or 404 (and 404 only for /query_key and the
 * unknown path); a body always, ending in a newline; every JSON answer is one
 * valid JSON value in valid UTF-8 whatever bytes the query decodes to (keys
 * are arbitrary bytes); Mooncake's endpoints answer in their shape
 * ({"success":true|false,...}); /batch_query_keys has no more members than
 * the query has commas plus one; nothing allocated is left behind. */
#include "common/alloc.h"
#include "fuzz.h"
#include "master/admin.h"

#define N_PATHS 9
static const char *const paths[N_PATHS] = {
    "/keys",     "/query_key",        "/batch_query_keys", "/metrics/summary",
    "/segments", "/get_all_segments", "/health",           "/metrics",
    "/other"};

static egm_master_state_t st;
static egm_master_metrics_t metrics;
static egm_master_admin_t admin;

static void put(const char *key, size_t key_len, uint64_t size, int complete)
{
    static const egm_id_t writer = {0x77, 7};
    FUZZ_CHECK(egm__objects_put_start(st.objects, writer, key, key_len, size, 1, 0, NULL) ==
               EGM_OK);
    if (complete)
        FUZZ_CHECK(egm__objects_put_end(st.objects, writer, key, key_len, 0) == EGM_OK);
}

/* Once per process: one segment and objects whose keys need escaping. */
static void init_state(void)
{
    static int done;
    if (done)
        return;
    done = 1;
    egm_master_state_params_t sp = {.client_ttl_ms = 10000};
    egm__objects_params_default(&sp.objects);
    FUZZ_CHECK(egm__master_state_init(&st, &sp) == EGM_OK);
    egm_segment_params_t p = {.id = {0x5e6, 1},
                              .owner = {0x9a, 2},
                              .size = 1u << 20,
                              .name = "fuzz/0",
                              .tcp_endpoint = "127.0.0.1:1"};
    FUZZ_CHECK(egm__liveness_mount(st.liveness, p.owner, &p, 0) == EGM_OK);
    put("a", 1, 100, 1);
    put("a,b", 3, 10, 1);
    put("k 2", 3, 10, 1);
    put("q\"\\", 3, 10, 1);
    put("\xff\x01", 2, 10, 1);
    put("\xe2\x82\xac", 3, 10, 1);
    put("pending", 7, 10, 0);
    static char long_key[EGM_MASTER_KEY_MAX];
    memset(long_key, 'x', sizeof(long_key));
    put(long_key, sizeof(long_key), 10, 1);
    egm__master_metrics_init(&metrics);
    admin = (egm_master_admin_t){.state = &st, .metrics = &metrics, .start_ms = 0};
}

/* ---- a small JSON reader: is `s` one valid value, in valid UTF-8? ---------- */

typedef struct {
    const unsigned char *p, *end;
    int depth;
} json_t;

static void ws(json_t *j)
{
    while (j->p < j->end && (*j->p == ' ' || *j->p == '\n' || *j->p == '\r' || *j->p == '\t'))
        j->p++;
}

/* Length of the valid UTF-8 sequence at p (0: not one). */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
    size_t n = *p < 0x80             ? 1
               : (*p & 0xe0) == 0xc0 ? 2
               : (*p & 0xf0) == 0xe0 ? 3
               : (*p & 0xf8) == 0xf0 ? 4
                                     : 0;
    if (n == 0 || (size_t)(end - p) < n || (n == 2 && *p < 0xc2) || (n == 4 && *p > 0xf4))
        return 0;
    for (size_t i = 1; i < n; i++)
        if ((p[i] & 0xc0) != 0x80)
            return 0;
    if (n == 3 && ((*p == 0xe0 && p[1] < 0xa0) || (*p == 0xed && p[1] >= 0xa0)))
        return 0; /* overlong, surrogate */
    if (n == 4 && ((*p == 0xf0 && p[1] < 0x90) || (*p == 0xf4 && p[1] >= 0x90)))
        return 0;
    return n;
}

static int string(json_t *j)
{
    if (j->p >= j->end || *j->p != '"')
        return 0;
    j->p++;
    while (j->p < j->end && *j->p != '"') {
        if (*j->p < 0x20)
            return 0;
        if (*j->p == '\\') {
            if (++j->p >= j->end)
                return 0;
            if (*j->p == 'u') {
                for (int i = 1; i <= 4; i++)
                    if (j->p + i >= j->end || !strchr("0123456789abcdefABCDEF", j->p[i]) ||
                        j->p[i] == '\0')
                        return 0;
                j->p += 5;
            } else if (strchr("\"\\/bfnrt", *j->p) != NULL && *j->p != '\0') {
                j->p++;
            } else {
                return 0;
            }
            continue;
        }
        size_t n = utf8_len(j->p, j->end);
        if (n == 0)
            return 0;
        j->p += n;
    }
    if (j->p >= j->end)
        return 0;
    j->p++;
    return 1;
}

static int value(json_t *j);

static int literal(json_t *j, const char *word)
{
    size_t n = strlen(word);
    if ((size_t)(j->end - j->p) < n || memcmp(j->p, word, n) != 0)
        return 0;
    j->p += n;
    return 1;
}

static int number(json_t *j)
{
    const unsigned char *start = j->p;
    if (j->p < j->end && *j->p == '-')
        j->p++;
    while (j->p < j->end &&
           ((*j->p >= '0' && *j->p <= '9') || (*j->p != '\0' && strchr(".eE+-", *j->p) != NULL)))
        j->p++;
    return j->p > start && j->p[-1] != '-';
}

static int members(json_t *j, char close, int keyed, size_t *count)
{
    j->p++;
    ws(j);
    if (j->p < j->end && *j->p == close) {
        j->p++;
        return 1;
    }
    for (;;) {
        ws(j);
        if (keyed) {
            if (!string(j))
                return 0;
            ws(j);
            if (j->p >= j->end || *j->p != ':')
                return 0;
            j->p++;
        }
        if (!value(j))
            return 0;
        if (count != NULL)
            (*count)++;
        ws(j);
        if (j->p < j->end && *j->p == ',') {
            j->p++;
            continue;
        }
        if (j->p < j->end && *j->p == close) {
            j->p++;
            return 1;
        }
        return 0;
    }
}

static int value(json_t *j)
{
    int ok;
    ws(j);
    if (j->p >= j->end || ++j->depth > 32)
        return 0;
    switch (*j->p) {
    case '{':
        ok = members(j, '}', 1, NULL);
        break;
    case '[':
        ok = members(j, ']', 0, NULL);
        break;
    case '"':
        ok = string(j);
        break;
    case 't':
        ok = literal(j, "true");
        break;
    case 'f':
        ok = literal(j, "false");
        break;
    case 'n':
        ok = literal(j, "null");
        break;
    default:
        ok = number(j);
    }
    j->depth--;
    return ok;
}

static int is_json(const char *text, size_t len)
{
    json_t j = {(const unsigned char *)text, (const unsigned char *)text + len, 0};
    if (!value(&j))
        return 0;
    ws(&j);
    return j.p == j.end;
}

/* Members of the object after `"data":` in a /batch_query_keys answer. */
static size_t batch_members(const char *body, size_t len)
{
    const char *data = strstr(body, "\"data\":{");
    size_t count = 0;
    FUZZ_CHECK(data != NULL);
    json_t j = {(const unsigned char *)data + 7, (const unsigned char *)body + len, 0};
    FUZZ_CHECK(members(&j, '}', 1, &count));
    return count;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init_logs();
    init_state();
    if (size == 0)
        return 0;
    const char *path = paths[(data[0] & 0x0f) % N_PATHS];
    char *query = malloc(size);
    FUZZ_CHECK(query != NULL);
    memcpy(query, data + 1, size - 1);
    query[size - 1] = '\0';
    size_t commas = 0;
    for (const char *q = query; *q != '\0'; q++)
        commas += *q == ',' || (q[0] == '%' && q[1] == '2' && (q[2] == 'c' || q[2] == 'C'));

    size_t live = egm__alloc_live_count();
    egm_http_response_t resp = {0};
    egm__master_admin_http(&admin, path, query, &resp);
    FUZZ_CHECK(resp.status == 200 || resp.status == 400 || resp.status == 404);
    FUZZ_CHECK(resp.status != 404 || strcmp(path, "/query_key") == 0 ||
               strcmp(path, "/other") == 0);
    FUZZ_CHECK(resp.body != NULL && resp.len > 0 && resp.body[resp.len - 1] == '\n');
    FUZZ_CHECK(strlen(resp.body) == resp.len);
    int text = strcmp(path, "/metrics") == 0 || strcmp(path, "/metrics/summary") == 0 ||
               strcmp(path, "/get_all_segments") == 0;
    if (!text)
        FUZZ_CHECK(is_json(resp.body, resp.len));
    if (strcmp(path, "/query_key") == 0 || strcmp(path, "/batch_query_keys") == 0) {
        const char *lead = resp.status == 200 ? "{\"success\":true," : "{\"success\":false,";
        FUZZ_CHECK(strncmp(resp.body, lead, strlen(lead)) == 0);
    }
    if (strcmp(path, "/batch_query_keys") == 0 && resp.status == 200)
        FUZZ_CHECK(batch_members(resp.body, resp.len) <= commas + 1);
    if (strcmp(path, "/metrics/summary") == 0)
        FUZZ_CHECK(strncmp(resp.body, "role=leader, state=serving, service_ready=true, master={",
                           56) == 0);
    egm_free(resp.body);
    FUZZ_CHECK(egm__alloc_live_count() == live);
    free(query);
    return 0;
}
