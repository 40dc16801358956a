/* JSON reader: one pass cuts the text into tokens (recursive descent, depth
 * bounded), lookups walk the flat array using each token's `next`. */
#include <limits.h>
#include <string.h>
#include "common/alloc.h"
#include "common/json_read.h"
#include "common/log.h"
#include "common/utf8.h"

typedef struct {
    const char *s;
    uint32_t len, pos;
    egm_json_doc_t *doc;
    uint32_t cap;
    egm_status_t status;
} parser_t;

static int fail(parser_t *p, const char *what)
{
    if (p->status == EGM_OK)
        p->status = egm__set_error(EGM_ERR_PROTOCOL, "JSON: %s at byte %u", what, p->pos);
    return -1;
}

static void skip_space(parser_t *p)
{
    while (p->pos < p->len && (p->s[p->pos] == ' ' || p->s[p->pos] == '\t' ||
                               p->s[p->pos] == '\n' || p->s[p->pos] == '\r'))
        p->pos++;
}

static int new_token(parser_t *p, egm_json_type_t type)
{
    egm_json_doc_t *d = p->doc;
    if (d->n == p->cap) {
        uint32_t cap = p->cap ? p->cap * 2 : 32;
        egm_json_tok_t *t = egm_realloc(d->toks, (size_t)cap * sizeof(*t), "json_read.toks");
        if (t == NULL) {
            if (p->status == EGM_OK)
                p->status = egm__set_error(EGM_ERR_NO_MEMORY, "JSON: %u tokens", cap);
            return -1;
        }
        d->toks = t;
        p->cap = cap;
    }
    egm_json_tok_t *t = &d->toks[d->n];
    memset(t, 0, sizeof(*t));
    t->type = type;
    t->start = p->pos;
    return (int)d->n++;
}

static int is_hex(char c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int parse_string(parser_t *p)
{
    p->pos++; /* the opening quote */
    int tok = new_token(p, EGM_JSON_STRING);
    if (tok < 0)
        return -1;
    while (p->pos < p->len) {
        unsigned char c = (unsigned char)p->s[p->pos];
        if (c == '"') {
            p->doc->toks[tok].end = p->pos++;
            return tok;
        }
        if (c < 0x20)
            return fail(p, "control character in a string");
        if (c == '\\') {
            if (p->pos + 1 >= p->len)
                break;
            char e = p->s[p->pos + 1];
            if (e == 'u') {
                if (p->pos + 6 > p->len)
                    break;
                for (int i = 2; i < 6; i++)
                    if (!is_hex(p->s[p->pos + i]))
                        return fail(p, "bad \\u escape");
                p->pos += 6;
                continue;
            }
            if (strchr("\"\\/bfnrt", e) == NULL || e == '\0')
                return fail(p, "bad escape");
            p->pos += 2;
            continue;
        }
        p->pos++;
    }
    return fail(p, "unterminated string");
}

static int parse_number(parser_t *p)
{
    int tok = new_token(p, EGM_JSON_NUMBER);
    if (tok < 0)
        return -1;
    uint32_t i = p->pos;
    if (i < p->len && p->s[i] == '-')
        i++;
    if (i >= p->len || p->s[i] < '0' || p->s[i] > '9')
        return fail(p, "bad number");
    if (p->s[i] == '0')
        i++;
    else
        while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9')
            i++;
    if (i < p->len && p->s[i] == '.') {
        i++;
        if (i >= p->len || p->s[i] < '0' || p->s[i] > '9')
            return fail(p, "bad fraction");
        while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9')
            i++;
    }
    if (i < p->len && (p->s[i] == 'e' || p->s[i] == 'E')) {
        i++;
        if (i < p->len && (p->s[i] == '+' || p->s[i] == '-'))
            i++;
        if (i >= p->len || p->s[i] < '0' || p->s[i] > '9')
            return fail(p, "bad exponent");
        while (i < p->len && p->s[i] >= '0' && p->s[i] <= '9')
            i++;
    }
    p->pos = i;
    p->doc->toks[tok].end = i;
    return tok;
}

static int parse_word(parser_t *p, const char *word, egm_json_type_t type)
{
    size_t n = strlen(word);
    if (p->len - p->pos < n || memcmp(p->s + p->pos, word, n) != 0)
        return fail(p, "unexpected character");
    int tok = new_token(p, type);
    if (tok < 0)
        return -1;
    p->pos += (uint32_t)n;
    p->doc->toks[tok].end = p->pos;
    return tok;
}

static int parse_value(parser_t *p, int depth);

/* An object or an array: '{' or '[' at p->pos. */
static int parse_container(parser_t *p, int depth)
{
    int object = p->s[p->pos] == '{';
    char close = object ? '}' : ']';
    if (depth >= EGM_JSON_DEPTH_MAX)
        return fail(p, "nesting too deep");
    int tok = new_token(p, object ? EGM_JSON_OBJECT : EGM_JSON_ARRAY);
    if (tok < 0)
        return -1;
    p->pos++;
    skip_space(p);
    uint32_t count = 0;
    if (p->pos < p->len && p->s[p->pos] == close) {
        p->pos++;
    } else {
        for (;;) {
            skip_space(p);
            if (object) {
                if (p->pos >= p->len || p->s[p->pos] != '"')
                    return fail(p, "expected a member name");
                int key = parse_string(p);
                if (key < 0)
                    return -1;
                p->doc->toks[key].next = p->doc->n;
                skip_space(p);
                if (p->pos >= p->len || p->s[p->pos] != ':')
                    return fail(p, "expected ':'");
                p->pos++;
            }
            if (parse_value(p, depth + 1) < 0)
                return -1;
            count++;
            skip_space(p);
            if (p->pos < p->len && p->s[p->pos] == ',') {
                p->pos++;
                continue;
            }
            if (p->pos < p->len && p->s[p->pos] == close) {
                p->pos++;
                break;
            }
            return fail(p, object ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
    egm_json_tok_t *t = &p->doc->toks[tok];
    t->end = p->pos;
    t->count = count;
    return tok;
}

static int parse_value(parser_t *p, int depth)
{
    skip_space(p);
    if (p->pos >= p->len)
        return fail(p, "unexpected end");
    int tok;
    switch (p->s[p->pos]) {
    case '{':
    case '[':
        tok = parse_container(p, depth);
        break;
    case '"':
        tok = parse_string(p);
        break;
    case 't':
        tok = parse_word(p, "true", EGM_JSON_TRUE);
        break;
    case 'f':
        tok = parse_word(p, "false", EGM_JSON_FALSE);
        break;
    case 'n':
        tok = parse_word(p, "null", EGM_JSON_NULL);
        break;
    default:
        if (p->s[p->pos] != '-' && (p->s[p->pos] < '0' || p->s[p->pos] > '9'))
            return fail(p, "unexpected character");
        tok = parse_number(p);
    }
    if (tok >= 0)
        p->doc->toks[tok].next = p->doc->n;
    return tok;
}

egm_status_t egm__json_parse(const char *text, size_t len, egm_json_doc_t *doc)
{
    memset(doc, 0, sizeof(*doc));
    if (len >= UINT32_MAX)
        return egm__set_error(EGM_ERR_INVALID_ARG, "JSON: %zu bytes is more than 4 GiB", len);
    parser_t p = {.s = text, .len = (uint32_t)len, .doc = doc};
    doc->text = text;
    if (parse_value(&p, 0) >= 0) {
        skip_space(&p);
        if (p.pos != p.len)
            fail(&p, "text after the value");
    }
    if (p.status != EGM_OK) {
        egm__json_doc_cleanup(doc);
        return p.status;
    }
    return EGM_OK;
}

void egm__json_doc_cleanup(egm_json_doc_t *doc)
{
    egm_free(doc->toks);
    memset(doc, 0, sizeof(*doc));
}

static bool valid(const egm_json_doc_t *doc, int tok)
{
    return tok >= 0 && (uint32_t)tok < doc->n;
}

int egm__json_member(const egm_json_doc_t *doc, int obj, const char *name)
{
    if (!valid(doc, obj) || doc->toks[obj].type != EGM_JSON_OBJECT)
        return -1;
    size_t nlen = strlen(name);
    uint32_t i = (uint32_t)obj + 1;
    for (uint32_t m = 0; m < doc->toks[obj].count; m++) {
        const egm_json_tok_t *key = &doc->toks[i];
        uint32_t value = i + 1;
        if (key->end - key->start == nlen && memcmp(doc->text + key->start, name, nlen) == 0)
            return (int)value;
        i = doc->toks[value].next;
    }
    return -1;
}

int egm__json_element(const egm_json_doc_t *doc, int arr, uint32_t i)
{
    if (!valid(doc, arr) || doc->toks[arr].type != EGM_JSON_ARRAY || i >= doc->toks[arr].count)
        return -1;
    uint32_t t = (uint32_t)arr + 1;
    while (i-- > 0)
        t = doc->toks[t].next;
    return (int)t;
}

bool egm__json_get_int64(const egm_json_doc_t *doc, int tok, int64_t *value_p)
{
    if (!valid(doc, tok))
        return false;
    const egm_json_tok_t *t = &doc->toks[tok];
    if (t->type != EGM_JSON_NUMBER && t->type != EGM_JSON_STRING)
        return false;
    const char *s = doc->text + t->start, *end = doc->text + t->end;
    int neg = s < end && *s == '-';
    s += neg;
    if (s == end)
        return false;
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (; s < end; s++) {
        if (*s < '0' || *s > '9')
            return false;
        unsigned d = (unsigned)(*s - '0');
        if (v > (limit - d) / 10)
            return false;
        v = v * 10 + d;
    }
    *value_p = neg ? (int64_t)(0 - v) : (int64_t)v;
    return true;
}

bool egm__json_is_true(const egm_json_doc_t *doc, int tok)
{
    return valid(doc, tok) && doc->toks[tok].type == EGM_JSON_TRUE;
}

static unsigned hex4(const char *s)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = s[i];
        v = v * 16 + (unsigned)(c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10);
    }
    return v;
}

long egm__json_get_string(const egm_json_doc_t *doc, int tok, char *out, size_t len)
{
    if (!valid(doc, tok) || doc->toks[tok].type != EGM_JSON_STRING)
        return -1;
    const char *s = doc->text + doc->toks[tok].start, *end = doc->text + doc->toks[tok].end;
    size_t n = 0;
    while (s < end) {
        char buf[4];
        size_t k = 1;
        if (*s != '\\') {
            buf[0] = *s++;
        } else if (s[1] != 'u') {
            const char *from = "\"\\/bfnrt", *to = "\"\\/\b\f\n\r\t";
            buf[0] = to[strchr(from, s[1]) - from];
            s += 2;
        } else {
            unsigned cp = hex4(s + 2);
            s += 6;
            if (cp >= 0xD800 && cp < 0xDC00 && end - s >= 6 && s[0] == '\\' && s[1] == 'u') {
                unsigned lo = hex4(s + 2);
                if (lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    s += 6;
                }
            }
            if (cp >= 0xD800 && cp < 0xE000)
                cp = 0xFFFD; /* a lone surrogate */
            k = egm__utf8_encode(cp, buf);
        }
        if (n + k >= len)
            return -1;
        memcpy(out + n, buf, k);
        n += k;
    }
    if (len > 0)
        out[n] = '\0';
    return (long)n;
}
