/* A JSON reader for answers from outside (etcd's HTTP gateway): the text is
 * cut into a flat array of tokens once, then members and elements are looked
 * up by name or index. No value is copied: tokens point into the text, which
 * must outlive the document. Strict RFC 8259 syntax; nesting is limited to
 * EGM_JSON_DEPTH_MAX so hostile input cannot exhaust anything. Not
 * thread-safe per document; documents are independent. */
#ifndef EGM_COMMON_JSON_READ_H
#define EGM_COMMON_JSON_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>

#define EGM_JSON_DEPTH_MAX 64

typedef enum {
    EGM_JSON_OBJECT,
    EGM_JSON_ARRAY,
    EGM_JSON_STRING, /* start..end is the text between the quotes, escapes undecoded */
    EGM_JSON_NUMBER,
    EGM_JSON_TRUE,
    EGM_JSON_FALSE,
    EGM_JSON_NULL,
} egm_json_type_t;

typedef struct {
    egm_json_type_t type;
    uint32_t start, end; /* bytes of the text */
    uint32_t count;      /* object: members; array: elements */
    uint32_t next;       /* the token after this one's whole subtree */
} egm_json_tok_t;

typedef struct {
    const char *text;
    egm_json_tok_t
        *toks; /* toks[0] is the root; an object's member is a STRING key then its value */
    uint32_t n;
} egm_json_doc_t;

/* Parses len bytes of text (one JSON value, whitespace around it allowed).
 * Errors: EGM_ERR_PROTOCOL (not JSON: the detail says where), EGM_ERR_NO_MEMORY,
 * EGM_ERR_INVALID_ARG (text longer than 4 GiB). On error the document is empty
 * and egm__json_doc_cleanup is still safe. */
egm_status_t egm__json_parse(const char *text, size_t len, egm_json_doc_t *doc);
void egm__json_doc_cleanup(egm_json_doc_t *doc);

/* Index of the value of member `name` of object token obj, or -1 (not an
 * object, no such member). Names are compared byte for byte, undecoded. */
int egm__json_member(const egm_json_doc_t *doc, int obj, const char *name);
/* Index of element i of array token arr, or -1. */
int egm__json_element(const egm_json_doc_t *doc, int arr, uint32_t i);
/* An integer from a NUMBER token or from a STRING holding one (etcd writes
 * int64 as strings). false for anything else, a fraction or an overflow. */
bool egm__json_get_int64(const egm_json_doc_t *doc, int tok, int64_t *value_p);
/* true for TRUE, false for anything else (etcd leaves false fields out). */
bool egm__json_is_true(const egm_json_doc_t *doc, int tok);
/* Decodes STRING token tok into out (len bytes, always NUL-terminated when
 * len > 0); answers the decoded length, or -1 when tok is not a string or out
 * is too small. \uXXXX escapes become UTF-8 (surrogate pairs joined). */
long egm__json_get_string(const egm_json_doc_t *doc, int tok, char *out, size_t len);

#endif
