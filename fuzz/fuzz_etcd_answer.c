/* Fuzz target: what an etcd endpoint (or anything listening where one was
 * configured) answers the master's election: the HTTP response parser
 * (src/ha/http.c) and the JSON reader (src/common/json_read.c) behind it.
 *
 * Input: the bytes of a response. Checks that a parse either asks for more
 * (and then every shorter prefix asks too), refuses, or gives a body within
 * the limit and a consumed length within the input; that the body, read as
 * JSON, gives tokens inside the text whose subtrees nest properly; that every
 * lookup the etcd client makes stays in bounds; and that nothing leaks. */
#include "common/alloc.h"
#include "common/json_read.h"
#include "fuzz.h"
#include "ha/http.h"

static void walk_json(const char *body, size_t len)
{
    egm_json_doc_t d;
    if (egm__json_parse(body, len, &d) != EGM_OK) {
        FUZZ_CHECK(d.toks == NULL && d.n == 0);
        return;
    }
    FUZZ_CHECK(d.n >= 1 && d.toks[0].next == d.n);
    for (uint32_t i = 0; i < d.n; i++) {
        const egm_json_tok_t *t = &d.toks[i];
        FUZZ_CHECK(t->start <= t->end && t->end <= len);
        FUZZ_CHECK(t->next > i && t->next <= d.n);
        if (t->type == EGM_JSON_OBJECT || t->type == EGM_JSON_ARRAY)
            FUZZ_CHECK(t->next <= d.toks[0].next);
        int64_t v;
        char buf[64];
        egm__json_get_int64(&d, (int)i, &v);
        long n = egm__json_get_string(&d, (int)i, buf, sizeof(buf));
        FUZZ_CHECK(n < (long)sizeof(buf));
        if (n >= 0)
            FUZZ_CHECK(buf[n] == '\0');
        egm__json_is_true(&d, (int)i);
    }
    /* The etcd client's lookups. */
    int header = egm__json_member(&d, 0, "header");
    int64_t v;
    egm__json_get_int64(&d, egm__json_member(&d, header, "revision"), &v);
    int kvs = egm__json_member(&d, 0, "kvs");
    int first = egm__json_element(&d, kvs, 0);
    FUZZ_CHECK(first < (int)d.n);
    egm__json_member(&d, first, "value");
    int responses = egm__json_member(&d, 0, "responses");
    if (responses >= 0 && d.toks[responses].type == EGM_JSON_ARRAY && d.toks[responses].count > 0)
        FUZZ_CHECK(egm__json_element(&d, responses, d.toks[responses].count - 1) >= 0);
    egm__json_member(&d, egm__json_member(&d, 0, "result"), "TTL");
    egm__json_doc_cleanup(&d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init_logs();
    uint64_t live = egm__alloc_live_count();
    const char *text = (const char *)data;
    int status = 0, close_p = 0;
    char *body = NULL;
    size_t blen = 0, used = 0;
    egm_status_t s = egm__http_response_parse(text, size, &status, &body, &blen, &used, &close_p);
    FUZZ_CHECK(s == EGM_OK || s == EGM_INPROGRESS || s == EGM_ERR_PROTOCOL);
    if (s == EGM_OK) {
        FUZZ_CHECK(status >= 100 && status <= 599);
        FUZZ_CHECK(used <= size && blen <= EGM_HTTP_BODY_MAX && body[blen] == '\0');
        walk_json(body, blen);
        egm_free(body);
    } else {
        FUZZ_CHECK(body == NULL);
    }
    if (s == EGM_INPROGRESS && size > 0) {
        /* A prefix of an incomplete response is incomplete too (or refused). */
        egm_status_t p =
            egm__http_response_parse(text, size / 2, &status, &body, &blen, &used, &close_p);
        FUZZ_CHECK(p == EGM_INPROGRESS || p == EGM_ERR_PROTOCOL);
    }
    /* The whole input as JSON too: the reader sees any text. */
    walk_json(text, size);
    FUZZ_CHECK(egm__alloc_live_count() == live);
    return 0;
}
