/* Integration: a client talks only to the master it was given. Two real
 * masters listen on the same port of two loopback addresses, 127.0.0.1:P and
 * 127.0.0.2:P; each has a provider that was given its address. Every
 * provider mounts on its own master, and a put through a client of either
 * address, library or CLI, lands on that master and not on the other. (The local socket name
 * used to carry the port only: the second master could not take it, and the
 * clients and the provider of 127.0.0.2:P all reached 127.0.0.1:P.) */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "common/process.h"
#include "support/cluster.h"
#include "support/http_get.h"

#define IO_MS 10000
#define BODY_MAX (64 * 1024)

typedef struct {
    egm_test_cluster_t cluster;
    const char *host;   /* the address the master listens on */
    unsigned http_port; /* its admin HTTP, on the same address */
    const char *size;   /* its provider's capacity, to tell them apart */
    unsigned long long capacity;
} master_t;

static master_t masters[2] = {
    {.host = "127.0.0.1", .size = "32MiB", .capacity = 32ull << 20},
    {.host = "127.0.0.2", .size = "16MiB", .capacity = 16ull << 20},
};
static char answer[BODY_MAX + 4096];
static const char *body = ""; /* in answer */

/* GET http://host:port/path: the status (-1: no answer in 10 s), the body
 * at body. */
static int http_get(const char *host, unsigned port, const char *path)
{
    return egm_test_http_request(host, port, path, NULL, answer, sizeof(answer), &body);
}

/* A number field of /health's JSON. */
static unsigned long long health_field(const master_t *m, const char *field)
{
    char pattern[64];
    assert_int_equal(http_get(m->host, m->http_port, "/health"), 200);
    snprintf(pattern, sizeof(pattern), "\"%s\":", field);
    const char *p = strstr(body, pattern);
    assert_non_null(p);
    return strtoull(p + strlen(pattern), NULL, 10);
}

/* Whether the master lists `key` in /keys. */
static int master_has_key(const master_t *m, const char *key)
{
    char path[128], quoted[128];
    snprintf(path, sizeof(path), "/keys?prefix=%s", key);
    assert_int_equal(http_get(m->host, m->http_port, path), 200);
    snprintf(quoted, sizeof(quoted), "\"key\":\"%s\"", key);
    return strstr(body, quoted) != NULL;
}

/* Starts master `i` on port (0 = any free one), then its provider. */
static int start_master(int i, unsigned port)
{
    master_t *m = &masters[i];
    egm_test_cluster_t *c = &m->cluster;
    const char *flags[] = {"--listen-address", m->host, "--http-port", "0", NULL};
    char line[256];

    egm_test_cluster_init(c);
    if (egm_test_start_master_on(c, port, flags) != 0)
        return -1;
    snprintf(c->master_addr, sizeof(c->master_addr), "%s:%u", m->host, c->master_port);
    if (egm__process_wait_line(&c->master, "egmstore master admin http on ", line, sizeof(line),
                               IO_MS) != EGM_OK)
        return -1;
    const char *colon = strrchr(line, ':');
    m->http_port = colon != NULL ? (unsigned)strtoul(colon + 1, NULL, 10) : 0;
    if (m->http_port == 0)
        return -1;
    /* the provider is given this master's address (the harness passes --master) */
    return egm_test_start_provider(c, m->size, NULL) >= 0 ? 0 : -1;
}

static int setup(void **state)
{
    (void)state;
    if (start_master(0, 0) != 0)
        return -1;
    /* the same port, on another loopback address */
    return start_master(1, masters[0].cluster.master_port);
}

static int teardown(void **state)
{
    (void)state;
    for (int i = 1; i >= 0; i--)
        egm_test_cluster_stop(&masters[i].cluster);
    return 0;
}

/* Each provider was given its master's address and mounted there. */
static void test_provider_mounts_on_its_master(void **state)
{
    (void)state;
    assert_int_equal(masters[0].cluster.master_port, masters[1].cluster.master_port);
    for (int i = 0; i < 2; i++) {
        assert_non_null(
            strstr(masters[i].cluster.provider_ready[0], masters[i].cluster.master_addr));
        unsigned long long capacity = health_field(&masters[i], "capacity_bytes");
        if (capacity != masters[i].capacity)
            fail_msg("master %s holds %llu bytes of segments, not its provider's %llu",
                     masters[i].cluster.master_addr, capacity, masters[i].capacity);
    }
}

/* A put through a client of one address lands on that master only. */
static void test_put_lands_on_given_master(void **state)
{
    (void)state;
    static char data[64 * 1024];

    for (int i = 0; i < 2; i++) {
        char key[64];
        snprintf(key, sizeof(key), "identity-via-%s", masters[i].host);
        egm_client_t *client = egm_test_client(&masters[i].cluster, "auto", NULL);
        assert_non_null(client);
        egm_test_fill(data, sizeof(data), (unsigned)i);
        assert_int_equal(egm_put(client, key, data, sizeof(data), NULL), EGM_OK);
        assert_int_equal(egm_exist(client, key), EGM_OK);
        egm_client_destroy(client);
        if (!master_has_key(&masters[i], key))
            fail_msg("%s, put through a client of %s, is not on that master", key,
                     masters[i].cluster.master_addr);
        if (master_has_key(&masters[1 - i], key))
            fail_msg("%s, put through a client of %s, is on %s", key,
                     masters[i].cluster.master_addr, masters[1 - i].cluster.master_addr);
    }
}

/* The CLI, a separate process given --master ADDR, reaches that master too. */
static void test_cli_reaches_given_master(void **state)
{
    (void)state;
    char out[4096];
    const char *args[] = {"put", "identity-cli", "-", NULL};
    assert_int_equal(egm_test_cli(&masters[1].cluster, args, "hello", 5, out, sizeof(out)), 0);
    assert_true(master_has_key(&masters[1], "identity-cli"));
    assert_false(master_has_key(&masters[0], "identity-cli"));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_provider_mounts_on_its_master),
        cmocka_unit_test(test_put_lands_on_given_master),
        cmocka_unit_test(test_cli_reaches_given_master),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
