/* The cluster-token handshake (common/auth.h): the check accepts the token
 * and, when no token is required, anything; refuses a wrong one, a missing
 * one and (read from a socket) one longer than the longest accepted without
 * reading it; a peer gone mid-token is the read's error. The hello sends the
 * carrier's prefix then the token's bytes, exactly; the texts name who
 * refuses, in the words the servers and clients have always used. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/auth.h"
#include "common/sock.h"

static void test_check(void **state)
{
    (void)state;
    assert_int_equal(egm__auth_check("secret", "secret", 6), EGM_AUTH_OK);
    assert_int_equal(egm__auth_check("secret", "secreT", 6), EGM_AUTH_MISMATCH);
    assert_int_equal(egm__auth_check("secret", "secret!", 7), EGM_AUTH_MISMATCH);
    assert_int_equal(egm__auth_check("secret", "secre", 5), EGM_AUTH_MISMATCH);
    assert_int_equal(egm__auth_check("secret", NULL, 0), EGM_AUTH_MISMATCH);
    /* no token required: any token, or none, is accepted */
    assert_int_equal(egm__auth_check("", "whatever", 8), EGM_AUTH_OK);
    assert_int_equal(egm__auth_check(NULL, NULL, 0), EGM_AUTH_OK);
    assert_int_equal(egm__auth_check_absent("secret"), EGM_AUTH_MISSING);
    assert_int_equal(egm__auth_check_absent(""), EGM_AUTH_OK);
    assert_int_equal(egm__auth_check_absent(NULL), EGM_AUTH_OK);
}

static void test_recv_check(void **state)
{
    (void)state;
    int sv[2];
    egm_auth_verdict_t v = EGM_AUTH_OK;
    char rest[8];

    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    /* the token, then what follows it stays unread */
    assert_int_equal(write(sv[1], "secretNEXT", 10), 10);
    assert_int_equal(egm__auth_recv_check(sv[0], "secret", 6, 1000, &v), EGM_OK);
    assert_int_equal(v, EGM_AUTH_OK);
    assert_int_equal(read(sv[0], rest, 4), 4);
    assert_memory_equal(rest, "NEXT", 4);
    /* a wrong one */
    assert_int_equal(write(sv[1], "wrong!", 6), 6);
    assert_int_equal(egm__auth_recv_check(sv[0], "secret", 6, 1000, &v), EGM_OK);
    assert_int_equal(v, EGM_AUTH_MISMATCH);
    /* too long: refused without reading a byte */
    assert_int_equal(write(sv[1], "abcd", 4), 4);
    assert_int_equal(egm__auth_recv_check(sv[0], "secret", EGM_AUTH_TOKEN_MAX + 1, 1000, &v),
                     EGM_OK);
    assert_int_equal(v, EGM_AUTH_TOO_LONG);
    assert_int_equal(read(sv[0], rest, 4), 4);
    assert_memory_equal(rest, "abcd", 4);
    /* a silent peer: the deadline */
    assert_int_equal(egm__auth_recv_check(sv[0], "secret", 6, 50, &v), EGM_ERR_TIMEOUT);
    /* the peer leaves mid-token */
    assert_int_equal(write(sv[1], "sec", 3), 3);
    close(sv[1]);
    assert_true(egm__auth_recv_check(sv[0], "secret", 6, 1000, &v) < 0);
    close(sv[0]);
}

static void test_hello(void **state)
{
    (void)state;
    int sv[2];
    uint8_t got[32];

    assert_int_equal(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
    assert_int_equal(egm__auth_hello(sv[0], "HDR:", 4, "tok"), EGM_OK);
    assert_int_equal(egm__auth_hello(sv[0], "H2", 2, ""), EGM_OK); /* no token: prefix only */
    close(sv[0]);
    assert_int_equal(egm__sock_read_full(sv[1], got, 9), EGM_OK);
    assert_memory_equal(got, "HDR:tokH2", 9);
    assert_int_equal(read(sv[1], got, sizeof(got)), 0);
    close(sv[1]);
}

static void test_texts(void **state)
{
    (void)state;
    char buf[160];

    assert_string_equal(egm__auth_problem(EGM_AUTH_MISSING, "this master", buf, sizeof(buf)),
                        "auth required: this master requires the cluster token (auth_token)");
    assert_string_equal(egm__auth_problem(EGM_AUTH_MISMATCH, "this master", buf, sizeof(buf)),
                        "auth token mismatch: the token presented is not this master's auth_token");
    assert_non_null(strstr(egm__auth_problem(EGM_AUTH_TOO_LONG, "x", buf, sizeof(buf)),
                           "longer than the longest accepted"));
    assert_string_equal(egm__auth_problem(EGM_AUTH_OK, "x", buf, sizeof(buf)), "");
    assert_string_equal(egm__auth_refusal("", "the data server", buf, sizeof(buf)),
                        "auth required: the data server requires the cluster token (auth_token)");
    assert_string_equal(egm__auth_refusal(NULL, "the provider", buf, sizeof(buf)),
                        "auth required: the provider requires the cluster token (auth_token)");
    assert_string_equal(egm__auth_refusal("tok", "the provider", buf, sizeof(buf)),
                        "auth token mismatch");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check),
        cmocka_unit_test(test_recv_check),
        cmocka_unit_test(test_hello),
        cmocka_unit_test(test_texts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
