/* Canonical TCP endpoints, local socket names, and the check a client makes
 * of a master's Hello (which endpoints cover the one it was given). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "rpc/endpoint.h"

static egm_rpc_endpoint_t ep(const char *host, uint16_t port)
{
    egm_rpc_endpoint_t e;
    assert_int_equal(egm__rpc_endpoint_from_host(host, port, &e), EGM_OK);
    return e;
}

static void test_parse_and_format(void **state)
{
    (void)state;
    char text[EGM_RPC_ENDPOINT_MAX], name[EGM_RPC_LOCAL_NAME_MAX];
    egm_rpc_endpoint_t e;

    egm__rpc_endpoint_format((e = ep("127.0.0.2", 5000), &e), text, sizeof(text));
    assert_string_equal(text, "127.0.0.2:5000");
    egm__rpc_endpoint_format((e = ep("[::1]", 7), &e), text, sizeof(text));
    assert_string_equal(text, "[::1]:7");
    egm__rpc_endpoint_format((e = ep("0:0::0", 1), &e), text, sizeof(text));
    assert_string_equal(text, "[::]:1");
    /* an IPv4-mapped address is the IPv4 one */
    e = ep("::ffff:127.0.0.9", 80);
    assert_int_equal(e.family, AF_INET);
    egm__rpc_endpoint_format(&e, text, sizeof(text));
    assert_string_equal(text, "127.0.0.9:80");
    egm__rpc_local_name(&e, name, sizeof(name));
    assert_string_equal(name, "@egmstore-master-127.0.0.9:80");
    /* the longest IPv6 text fits a name */
    e = ep("ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe", 65535);
    egm__rpc_local_name(&e, name, sizeof(name));
    assert_string_equal(name, "@egmstore-master-[ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe]:65535");

    const char *bad[] = {"", "localhost", "127.0.0.1:80", "[::1", "1.2.3", "::1]"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_int_equal(egm__rpc_endpoint_from_host(bad[i], 1, &e), EGM_ERR_INVALID_ARG);
}

static void test_loopback_and_wildcard(void **state)
{
    (void)state;
    egm_rpc_endpoint_t e;
    assert_true(egm__rpc_endpoint_is_loopback((e = ep("127.3.2.1", 1), &e)));
    assert_true(egm__rpc_endpoint_is_loopback((e = ep("::1", 1), &e)));
    assert_false(egm__rpc_endpoint_is_loopback((e = ep("10.0.0.1", 1), &e)));
    assert_false(egm__rpc_endpoint_is_loopback((e = ep("::2", 1), &e)));
    assert_true(egm__rpc_endpoint_is_wildcard((e = ep("0.0.0.0", 1), &e)));
    assert_true(egm__rpc_endpoint_is_wildcard((e = ep("::", 1), &e)));
    assert_false(egm__rpc_endpoint_is_wildcard((e = ep("127.0.0.1", 1), &e)));
}

static int covers(const char *hello, const char *host, uint16_t port)
{
    egm_rpc_endpoint_t target = ep(host, port);
    return egm__rpc_hello_covers(hello, strlen(hello), &target);
}

static void test_hello_covers(void **state)
{
    (void)state;
    assert_true(covers("127.0.0.2:5000", "127.0.0.2", 5000));
    assert_false(covers("127.0.0.1:5000", "127.0.0.2", 5000)); /* another address */
    assert_false(covers("127.0.0.2:5001", "127.0.0.2", 5000)); /* another port */
    assert_true(covers("0.0.0.0:5000", "127.0.0.5", 5000));
    assert_false(covers("0.0.0.0:5000", "::1", 5000)); /* IPv4 only */
    assert_true(covers("[::]:5000", "::1", 5000));
    assert_false(covers("[::]:5000", "127.0.0.1", 5000)); /* v6only */
    assert_true(covers("[::]:5000 0.0.0.0:5000", "127.0.0.1", 5000));
    assert_true(covers("[::1]:5000", "::1", 5000));
    assert_true(covers("  10.0.0.1:5000   127.0.0.1:5000 ", "127.0.0.1", 5000));
    /* whatever does not parse covers nothing */
    const char *junk[] = {"",
                          " ",
                          "127.0.0.1",
                          "127.0.0.1:",
                          "127.0.0.1:99999",
                          "x:5000",
                          "127.0.0.1:5000x",
                          "::1:5000",
                          "[::1]",
                          "localhost:5000"};
    for (size_t i = 0; i < sizeof(junk) / sizeof(junk[0]); i++)
        assert_false(covers(junk[i], "127.0.0.1", 5000));
    /* a NUL inside is not the end of the text */
    static const char nul[] = "127.0.0.1:5000\0";
    egm_rpc_endpoint_t target = ep("127.0.0.1", 5000);
    assert_false(egm__rpc_hello_covers("1\0"
                                       "127.0.0.1:5000",
                                       16, &target));
    assert_true(egm__rpc_hello_covers(nul, sizeof(nul) - 2, &target));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_and_format),
        cmocka_unit_test(test_loopback_and_wildcard),
        cmocka_unit_test(test_hello_covers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
