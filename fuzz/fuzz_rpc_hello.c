/* Fuzz target: a master's Hello reply as a client reads it
 * (egm__rpc_hello_covers in src/rpc/endpoint.c): which TCP endpoints the
 * peer on a local socket name says it listens on, and whether one of them is
 * the endpoint the client was given.
 *
 * Input: a first byte choosing the client's endpoint from a small table, then
 * the reply's bytes (any, NULs included). Beyond "no crash, no UB": a reply
 * that covers the endpoint still does with words added before or after it; a
 * reply with the endpoint's own canonical text added as a word always covers
 * it; a reply that covers it holds a ':' and the port's digits. */
#include <sys/socket.h>

#include "fuzz.h"
#include "rpc/endpoint.h"

static const struct {
    const char *host;
    uint16_t port;
} TARGETS[] = {
    {"127.0.0.1", 5000}, {"127.0.0.2", 5000}, {"::1", 5000}, {"127.0.0.1", 1}, {"127.9.9.9", 65535},
};

static int covers_with(const uint8_t *pre, size_t pre_len, const uint8_t *text, size_t len,
                       const uint8_t *post, size_t post_len, const egm_rpc_endpoint_t *target)
{
    size_t n = pre_len + len + post_len;
    char *buf = malloc(n + 1);
    FUZZ_CHECK(buf != NULL);
    memcpy(buf, pre, pre_len);
    memcpy(buf + pre_len, text, len);
    memcpy(buf + pre_len + len, post, post_len);
    int r = egm__rpc_hello_covers(buf, n, target);
    free(buf);
    FUZZ_CHECK(r == 0 || r == 1);
    return r;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init_logs();
    if (size == 0)
        return 0;
    egm_rpc_endpoint_t target;
    size_t pick = data[0] % (sizeof(TARGETS) / sizeof(TARGETS[0]));
    FUZZ_CHECK(egm__rpc_endpoint_from_host(TARGETS[pick].host, TARGETS[pick].port, &target) ==
               EGM_OK);
    const uint8_t *text = data + 1;
    size_t len = size - 1;

    int r = covers_with((const uint8_t *)"", 0, text, len, (const uint8_t *)"", 0, &target);
    if (r) {
        static const uint8_t junk[] = "x:1 ";
        FUZZ_CHECK(memchr(text, ':', len) != NULL);
        char port[8];
        snprintf(port, sizeof(port), "%u", (unsigned)target.port);
        FUZZ_CHECK(memmem(text, len, port, strlen(port)) != NULL);
        FUZZ_CHECK(
            covers_with(junk, sizeof(junk) - 1, text, len, (const uint8_t *)"", 0, &target) == 1);
        FUZZ_CHECK(covers_with((const uint8_t *)"", 0, text, len, (const uint8_t *)" x:1", 4,
                               &target) == 1);
    }
    char canon[EGM_RPC_ENDPOINT_MAX + 1] = " ";
    egm__rpc_endpoint_format(&target, canon + 1, sizeof(canon) - 1);
    FUZZ_CHECK(covers_with((const uint8_t *)"", 0, text, len, (const uint8_t *)canon, strlen(canon),
                           &target) == 1);
    return 0;
}
