/* The HTTP response parser of the etcd client, and base64 as etcd writes it:
 * Content-Length and chunked bodies (with extensions and trailers) read whole;
 * every cut-short prefix answers INPROGRESS, never a wrong body; Connection:
 * close seen; pipelined bytes after a response left unconsumed; malformed
 * heads, sizes and bodies over the limit refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "common/base64.h"
#include "ha/http.h"

static egm_status_t parse(const char *text, size_t len, int *status, char **body, size_t *blen,
                          size_t *used, int *close_p)
{
    return egm__http_response_parse(text, len, status, body, blen, used, close_p);
}

/* Parses text whole (expecting want_body), then checks every prefix is INPROGRESS. */
static void check_whole(const char *text, int want_status, const char *want_body, int want_close)
{
    size_t len = strlen(text), blen = 0, used = 0;
    int status = 0, close_p = -1;
    char *body = NULL;
    assert_int_equal(parse(text, len, &status, &body, &blen, &used, &close_p), EGM_OK);
    assert_int_equal(status, want_status);
    assert_int_equal(blen, strlen(want_body));
    assert_string_equal(body, want_body);
    assert_int_equal(used, len);
    assert_int_equal(close_p, want_close);
    egm_free(body);
    for (size_t cut = 0; cut < len; cut++) {
        body = NULL;
        egm_status_t s = parse(text, cut, &status, &body, &blen, &used, &close_p);
        if (s != EGM_INPROGRESS)
            fail_msg("prefix of %zu bytes of %zu: status %d", cut, len, s);
        assert_null(body);
    }
}

static void test_content_length(void **state)
{
    (void)state;
    check_whole("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 7\r\n\r\n"
                "{\"a\":1}",
                200, "{\"a\":1}", 0);
    check_whole("HTTP/1.1 404 Not Found\r\ncontent-length:0\r\nConnection: close\r\n\r\n", 404, "",
                1);
    check_whole("HTTP/1.0 200 OK\nContent-Length: 2\n\nok", 200, "ok", 0);
}

static void test_chunked(void **state)
{
    (void)state;
    check_whole("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
                "5\r\n{\"res\r\nA;ext=1\r\nult\":{}}\r\n\r\n0\r\n\r\n",
                200, "{\"result\":{}}\r\n", 0);
    check_whole("HTTP/1.1 200 OK\r\nTransfer-Encoding: Chunked\r\n\r\n0\r\nX-Trailer: 1\r\n\r\n",
                200, "", 0);
}

static void test_pipelined_rest_left(void **state)
{
    (void)state;
    const char *two = "HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nAHTTP/1.1 200 OK\r\n";
    size_t blen, used;
    int status, close_p;
    char *body;
    assert_int_equal(parse(two, strlen(two), &status, &body, &blen, &used, &close_p), EGM_OK);
    assert_int_equal(used, strlen("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n\r\nA"));
    egm_free(body);
}

static void refused(const char *text)
{
    size_t blen, used;
    int status, close_p;
    char *body = NULL;
    egm_status_t s = parse(text, strlen(text), &status, &body, &blen, &used, &close_p);
    if (s != EGM_ERR_PROTOCOL)
        fail_msg("accepted (%d): %s", s, text);
    assert_null(body);
}

static void test_malformed(void **state)
{
    (void)state;
    refused("HTTP/2 200 OK\r\n\r\n");
    refused("FTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n");
    refused("HTTP/1.1 20x OK\r\nContent-Length: 0\r\n\r\n");
    refused("HTTP/1.1 200 OK\r\n\r\n"); /* no length */
    refused("HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n");
    refused("HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999\r\n\r\n");
    refused("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\n");
    refused("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n");
    refused("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nab\r\n0\r\n\r\n");
    char big[128];
    snprintf(big, sizeof(big), "HTTP/1.1 200 OK\r\nContent-Length: %u\r\n\r\n",
             EGM_HTTP_BODY_MAX + 1);
    refused(big);
    snprintf(big, sizeof(big), "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n",
             EGM_HTTP_BODY_MAX + 1);
    refused(big);
}

static void test_base64(void **state)
{
    (void)state;
    const char *plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
    const char *coded[] = {"", "Zg==", "Zm8=", "Zm9v", "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
    for (int i = 0; i < 7; i++) {
        char out[16], back[16];
        assert_int_equal(egm__base64_encode(plain[i], strlen(plain[i]), out), strlen(coded[i]));
        assert_string_equal(out, coded[i]);
        assert_int_equal(egm__base64_decode(out, strlen(out), back, sizeof(back)),
                         strlen(plain[i]));
        assert_memory_equal(back, plain[i], strlen(plain[i]));
    }
    unsigned char all[256], dec[256];
    char enc[EGM_BASE64_LEN(256)];
    for (int i = 0; i < 256; i++)
        all[i] = (unsigned char)i;
    size_t n = egm__base64_encode(all, 256, enc);
    assert_int_equal(egm__base64_decode(enc, n, dec, sizeof(dec)), 256);
    assert_memory_equal(dec, all, 256);
    char out[8];
    assert_int_equal(egm__base64_decode("Zm9", 3, out, 8), -1);      /* length */
    assert_int_equal(egm__base64_decode("Zm9v!A==", 8, out, 8), -1); /* alphabet */
    assert_int_equal(egm__base64_decode("Zg==Zm9v", 8, out, 8), -1); /* padding inside */
    assert_int_equal(egm__base64_decode("Zm9vYmFy", 8, out, 5), -1); /* room */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_content_length, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_chunked, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_pipelined_rest_left, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_malformed, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_base64, egm_test_setup_alloc, egm_test_teardown_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
