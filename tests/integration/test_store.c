/* Integration: a real master and two providers as processes on loopback; puts
 * and gets across processes over shm and tcp, batches, leases, space reuse. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>
#include "client/client_int.h"
#include "common/alloc.h"
#include "support/cluster.h"

static egm_test_cluster_t cluster;

static int setup(void **state)
{
    (void)state;
    if (egm_test_start_master(&cluster, NULL) != 0)
        return -1;
    if (egm_test_start_provider(&cluster, "64MiB", NULL) < 0)
        return -1;
    if (egm_test_start_provider(&cluster, "64MiB", NULL) < 0)
        return -1;
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    egm_test_cluster_stop(&cluster);
    return 0;
}

/* One process writes (the CLI), another reads (this one), over each transport. */
static void test_cross_process_put_get(void **state)
{
    (void)state;
    const size_t len = 300 * 1024 + 17;
    unsigned char *data = malloc(len), *back = malloc(len);
    char out[4096];
    assert_non_null(data);
    assert_non_null(back);
    egm_test_fill(data, len, 1);

    const char *put[] = {"put", "xproc/a", "-", NULL};
    assert_int_equal(egm_test_cli(&cluster, put, data, len, out, sizeof(out)), 0);

    const char *protocols[] = {"shm", "tcp"};
    for (int p = 0; p < 2; p++) {
        egm_client_t *client = egm_test_client(&cluster, protocols[p], NULL);
        assert_non_null(client);
        assert_int_equal(egm_register_buffer(client, back, len), EGM_OK);
        memset(back, 0, len);
        size_t got = 0;
        assert_int_equal(egm_get_into(client, "xproc/a", back, len, &got), EGM_OK);
        assert_int_equal(got, len);
        assert_memory_equal(back, data, len);
        assert_int_equal(egm_unregister_buffer(client, back), EGM_OK);
        egm_client_destroy(client);
    }

    /* And the other way: this process writes over tcp, the CLI reads into a file. */
    egm_client_t *writer = egm_test_client(&cluster, "tcp", NULL);
    assert_non_null(writer);
    egm_test_fill(data, len, 2);
    assert_int_equal(egm_put(writer, "xproc/b", data, len, NULL), EGM_OK);
    egm_client_destroy(writer);
    char path[] = "/tmp/egmstore-test-XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    const char *get[] = {"get", "xproc/b", path, "--protocol", "shm", NULL};
    assert_int_equal(egm_test_cli(&cluster, get, NULL, 0, out, sizeof(out)), 0);
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    assert_int_equal(fread(back, 1, len, f), len);
    assert_int_equal(fgetc(f), EOF);
    fclose(f);
    unlink(path);
    assert_memory_equal(back, data, len);
    free(data);
    free(back);
}

/* egm_client_transports: what the protocol allows and this process can use,
 * best first, with snprintf's contract. */
static void test_transports(void **state)
{
    (void)state;
    const struct {
        const char *protocol;
        const char *walk, *walk_gpu; /* without / with a CUDA driver and a GPU */
    } cases[] = {
        {"tcp", "tcp", "tcp"}, {"shm", "shm", "shm"}, {"auto", "shm tcp", "nvlink shm tcp"}};
    char buf[64];
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        egm_client_t *client = egm_test_client(&cluster, cases[i].protocol, NULL);
        assert_non_null(client);
        size_t need = egm_client_transports(client, buf, sizeof(buf));
        assert_int_equal(need, strlen(buf));
        if (strcmp(buf, cases[i].walk) != 0 && strcmp(buf, cases[i].walk_gpu) != 0)
            fail_msg("protocol %s: transports \"%s\"", cases[i].protocol, buf);
        char small[4] = "xyz";
        assert_int_equal(egm_client_transports(client, small, sizeof(small)), need);
        assert_int_equal(strlen(small), need < 3 ? need : 3); /* cut, NUL-terminated */
        assert_int_equal(egm_client_transports(client, NULL, 0), need);
        assert_int_equal(egm_client_close(client), EGM_OK);
        char after[64];
        assert_int_equal(egm_client_transports(client, after, sizeof(after)), need);
        assert_string_equal(after, buf); /* fixed at creation, also once closed */
        egm_client_destroy(client);
    }
    assert_int_equal(egm_client_transports(NULL, buf, sizeof(buf)), 0);
    assert_string_equal(buf, "");
}

static void test_cli_errors(void **state)
{
    (void)state;
    char out[4096];
    const char *get[] = {"get", "no/such/key", "-", NULL};
    assert_int_equal(egm_test_cli(&cluster, get, NULL, 0, out, sizeof(out)), 1);
    assert_non_null(strstr(out, "not found"));
    const char *exist[] = {"exist", "no/such/key", NULL};
    assert_int_equal(egm_test_cli(&cluster, exist, NULL, 0, out, sizeof(out)), 1);
    const char *bad[] = {"get", "k", "-", "--protocol", "rdma", NULL};
    assert_int_not_equal(egm_test_cli(&cluster, bad, NULL, 0, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "protocol"));
    const char *unknown[] = {"ls", "--no-such-key", "1", NULL};
    assert_int_not_equal(egm_test_cli(&cluster, unknown, NULL, 0, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "no-such-key"));

    /* Duplicate put answers EXISTS, and the stored bytes stay the first ones. */
    const char *put[] = {"put", "dup/key", "-", NULL};
    assert_int_equal(egm_test_cli(&cluster, put, "first", 5, out, sizeof(out)), 0);
    assert_int_equal(egm_test_cli(&cluster, put, "second", 6, out, sizeof(out)), 1);
    const char *get_dup[] = {"get", "dup/key", "-", NULL};
    assert_int_equal(egm_test_cli(&cluster, get_dup, NULL, 0, out, sizeof(out)), 0);
    assert_string_equal(out, "first");

    /* nvlink says why it cannot serve: no driver (CI), or the CLI's buffer is
     * host memory (a GPU machine). */
    const char *nvlink[] = {"get", "dup/key", "-", "--protocol", "nvlink", NULL};
    assert_int_equal(egm_test_cli(&cluster, nvlink, NULL, 0, out, sizeof(out)), 1);
    if (strstr(out, "no CUDA driver") == NULL)
        assert_non_null(strstr(out, "the local buffer is host memory"));
}

static void test_batches_mixed_keys(void **state)
{
    (void)state;
    enum { N = 12, PRESENT = 8, LEN = 8192 + 3 };
    egm_client_t *client = egm_test_client(&cluster, "auto", NULL);
    assert_non_null(client);
    unsigned char *src = malloc((size_t)N * LEN), *dst = malloc((size_t)N * LEN);
    assert_non_null(src);
    assert_non_null(dst);
    assert_int_equal(egm_register_buffer(client, src, (size_t)N * LEN), EGM_OK);
    assert_int_equal(egm_register_buffer(client, dst, (size_t)N * LEN), EGM_OK);

    char names[N][32];
    const char *keys[N];
    const void *srcs[N];
    void *dsts[N];
    size_t lens[N], sizes[N];
    egm_status_t results[N];
    for (int i = 0; i < N; i++) {
        snprintf(names[i], sizeof(names[i]), "batch/%d", i);
        keys[i] = names[i];
        srcs[i] = src + (size_t)i * LEN;
        dsts[i] = dst + (size_t)i * LEN;
        lens[i] = LEN;
        egm_test_fill(src + (size_t)i * LEN, LEN, 100u + (unsigned)i);
    }
    assert_int_equal(egm_batch_put_from(client, PRESENT, keys, srcs, lens, NULL, results), EGM_OK);
    for (int i = 0; i < PRESENT; i++)
        assert_int_equal(results[i], EGM_OK);

    assert_int_equal(egm_batch_exist(client, N, keys, results), EGM_OK);
    for (int i = 0; i < N; i++)
        assert_int_equal(results[i], i < PRESENT ? EGM_OK : EGM_ERR_NOT_FOUND);

    memset(dst, 0, (size_t)N * LEN);
    assert_int_equal(egm_batch_get_into(client, N, keys, dsts, lens, sizes, results), EGM_OK);
    for (int i = 0; i < N; i++) {
        if (i < PRESENT) {
            assert_int_equal(results[i], EGM_OK);
            assert_int_equal(sizes[i], LEN);
            assert_memory_equal(dsts[i], srcs[i], LEN);
        } else {
            assert_int_equal(results[i], EGM_ERR_NOT_FOUND);
        }
    }

    /* A buffer that is too small fails that key only. */
    lens[0] = LEN - 1;
    assert_int_equal(egm_batch_get_into(client, 2, keys, dsts, lens, sizes, results), EGM_OK);
    assert_int_equal(results[0], EGM_ERR_BUFFER_TOO_SMALL);
    assert_int_equal(results[1], EGM_OK);

    /* No client: a whole-batch refusal, and every result says so (none reads as OK). */
    results[0] = results[1] = EGM_OK;
    assert_int_equal(egm_batch_get_into(NULL, 2, keys, dsts, lens, sizes, results),
                     EGM_ERR_INVALID_ARG);
    assert_int_equal(results[0], EGM_ERR_INVALID_ARG);
    assert_int_equal(results[1], EGM_ERR_INVALID_ARG);

    /* Zero-copy from unregistered memory is refused. */
    unsigned char loose[64];
    assert_int_equal(egm_put_from(client, "batch/loose", loose, sizeof(loose), NULL),
                     EGM_ERR_NOT_REGISTERED);

    assert_int_equal(egm_unregister_buffer(client, src), EGM_OK);
    assert_int_equal(egm_unregister_buffer(client, dst), EGM_OK);
    egm_client_destroy(client);
    free(src);
    free(dst);
}

/* Scatter-gather batches (Mooncake's *_multi_buffers): each object is the
 * concatenation of its parts; a get fills its parts in order and may be
 * shorter than them. Over shm and tcp. Then a batch remove. */
static void test_scatter_gather_batches(void **state)
{
    (void)state;
    enum { N = 4, PARTS = 3, SRC_LEN = 64 * 1024 };
    static const size_t put_lens[PARTS] = {1000, 1, 4097};
    const size_t total = 1000 + 1 + 4097;
    const char *protocols[] = {"shm", "tcp"};

    for (size_t t = 0; t < 2; t++) {
        egm_client_t *client = egm_test_client(&cluster, protocols[t], NULL);
        assert_non_null(client);
        unsigned char *src = malloc(SRC_LEN), *dst = malloc(SRC_LEN);
        assert_non_null(src);
        assert_non_null(dst);
        egm_test_fill(src, SRC_LEN, 7u + (unsigned)t);
        assert_int_equal(egm_register_buffer(client, src, SRC_LEN), EGM_OK);
        assert_int_equal(egm_register_buffer(client, dst, SRC_LEN), EGM_OK);

        char names[N][32];
        const char *keys[N];
        size_t counts[N];
        const void *addrs[N * PARTS];
        size_t lens[N * PARTS];
        egm_status_t results[N];
        for (size_t i = 0; i < N; i++) {
            snprintf(names[i], sizeof(names[i]), "sg/%s/%zu", protocols[t], i);
            keys[i] = names[i];
            counts[i] = PARTS;
            for (size_t p = 0; p < PARTS; p++) { /* parts scattered, out of order */
                addrs[i * PARTS + p] = src + (PARTS - p) * 12000 + i * 100;
                lens[i * PARTS + p] = put_lens[p];
            }
        }
        assert_int_equal(
            egm_batch_put_from_parts(client, N, keys, counts, addrs, lens, NULL, results), EGM_OK);
        for (size_t i = 0; i < N; i++)
            assert_int_equal(results[i], EGM_OK);

        /* egm_get sees the concatenation */
        void *whole;
        size_t whole_len;
        assert_int_equal(egm_get(client, keys[1], &whole, &whole_len), EGM_OK);
        assert_int_equal(whole_len, total);
        for (size_t p = 0, at = 0; p < PARTS; at += put_lens[p], p++)
            assert_memory_equal((unsigned char *)whole + at, addrs[PARTS + p], put_lens[p]);
        egm_buffer_free(whole);

        /* Read back split differently: two parts of 3000 (room for 6000), the
         * second one only partly filled; a missing key; a too-small pair. */
        const char *get_keys[3] = {keys[2], "sg/missing", keys[3]};
        size_t get_counts[3] = {2, 1, 2};
        void *get_addrs[5] = {dst, dst + 20000, dst + 30000, dst + 40000, dst + 50000};
        size_t get_lens[5] = {3000, 3000, 100, 2000, 3000};
        size_t sizes[3];
        egm_status_t get_results[3];
        memset(dst, 0xEE, SRC_LEN);
        assert_int_equal(egm_batch_get_into_parts(client, 3, get_keys, get_counts, get_addrs,
                                                  get_lens, sizes, get_results),
                         EGM_OK);
        assert_int_equal(get_results[0], EGM_OK);
        assert_int_equal(sizes[0], total);
        unsigned char *expect = malloc(total);
        assert_non_null(expect);
        for (size_t p = 0, at = 0; p < PARTS; at += put_lens[p], p++)
            memcpy(expect + at, addrs[2 * PARTS + p], put_lens[p]);
        assert_memory_equal(dst, expect, 3000);
        assert_memory_equal(dst + 20000, expect + 3000, total - 3000);
        assert_int_equal(dst[20000 + total - 3000], 0xEE); /* past the object: untouched */
        assert_int_equal(get_results[1], EGM_ERR_NOT_FOUND);
        assert_int_equal(get_results[2], EGM_ERR_BUFFER_TOO_SMALL);
        free(expect);

        /* An invalid key fails alone; empty parts (even NULL ones) take nothing:
         * key 1 read into {0 B, 2000 B, 0 B (NULL), rest}. */
        const char *mixed_keys[2] = {"", keys[1]};
        size_t mixed_counts[2] = {1, 4};
        void *mixed_addrs[5] = {dst, dst + 10000, dst + 20000, NULL, dst + 30000};
        size_t mixed_get_lens[5] = {100, 0, 2000, 0, 6000};
        egm_status_t mixed_results[2];
        size_t mixed_sizes[2];
        assert_int_equal(egm_batch_get_into_parts(client, 2, mixed_keys, mixed_counts, mixed_addrs,
                                                  mixed_get_lens, mixed_sizes, mixed_results),
                         EGM_OK);
        assert_int_equal(mixed_results[0], EGM_ERR_INVALID_KEY);
        assert_int_equal(mixed_results[1], EGM_OK);
        assert_int_equal(mixed_sizes[1], total);
        unsigned char *expect1 = malloc(total);
        assert_non_null(expect1);
        for (size_t p = 0, at = 0; p < PARTS; at += put_lens[p], p++)
            memcpy(expect1 + at, addrs[PARTS + p], put_lens[p]);
        assert_memory_equal(dst + 20000, expect1, 2000);
        assert_memory_equal(dst + 30000, expect1 + 2000, total - 2000);
        free(expect1);
        const char *exist_keys[2] = {"", keys[1]};
        assert_int_equal(egm_batch_exist(client, 2, exist_keys, results), EGM_OK);
        assert_int_equal(results[0], EGM_ERR_INVALID_KEY);
        assert_int_equal(results[1], EGM_OK);

        /* Whole-batch refusals fill every result: a key without parts. */
        size_t zero[1] = {0};
        get_results[0] = EGM_OK;
        assert_int_equal(egm_batch_get_into_parts(client, 1, keys, zero, get_addrs, get_lens, sizes,
                                                  get_results),
                         EGM_ERR_INVALID_ARG);
        assert_int_equal(get_results[0], EGM_ERR_INVALID_ARG);
        assert_non_null(strstr(egm_last_error(), "part_counts[0]"));
        /* A part outside registered memory fails its key. */
        unsigned char loose[16];
        const void *mixed[2] = {src, loose};
        size_t mixed_lens[2] = {16, 16}, two[1] = {2};
        const char *new_key[1] = {"sg/loose"};
        assert_int_equal(
            egm_batch_put_from_parts(client, 1, new_key, two, mixed, mixed_lens, NULL, results),
            EGM_OK);
        assert_int_equal(results[0], EGM_ERR_NOT_REGISTERED);
        assert_int_equal(egm_exist(client, "sg/loose"), EGM_ERR_NOT_FOUND);

        /* A put may have empty parts (NULL or not); an all-empty one is refused. */
        char empty_key[32];
        snprintf(empty_key, sizeof(empty_key), "sg/%s/with-empty", protocols[t]);
        const char *ek[1] = {empty_key};
        const void *e_addrs[3] = {NULL, src + 5, src};
        size_t e_lens[3] = {0, 16, 0}, e_count[1] = {3};
        assert_int_equal(
            egm_batch_put_from_parts(client, 1, ek, e_count, e_addrs, e_lens, NULL, results),
            EGM_OK);
        assert_int_equal(results[0], EGM_OK);
        void *e_data;
        size_t e_len;
        assert_int_equal(egm_get(client, empty_key, &e_data, &e_len), EGM_OK);
        assert_int_equal(e_len, 16);
        assert_memory_equal(e_data, src + 5, 16);
        egm_buffer_free(e_data);
        e_lens[1] = 0;
        assert_int_equal(
            egm_batch_put_from_parts(client, 1, ek, e_count, e_addrs, e_lens, NULL, results),
            EGM_OK);
        assert_int_equal(results[0], EGM_ERR_INVALID_ARG);

        /* Batch remove: read keys hold a lease unless forced. */
        const char *rm_keys[3] = {keys[2], "sg/missing", keys[0]};
        assert_int_equal(egm_batch_remove(client, 3, rm_keys, 0, results), EGM_OK);
        assert_int_equal(results[0], EGM_ERR_HAS_LEASE);
        assert_int_equal(results[1], EGM_ERR_NOT_FOUND);
        assert_int_equal(results[2], EGM_OK);
        assert_int_equal(egm_batch_remove(client, 3, rm_keys, 1, results), EGM_OK);
        assert_int_equal(results[0], EGM_OK);
        assert_int_equal(results[1], EGM_ERR_NOT_FOUND);
        assert_int_equal(results[2], EGM_ERR_NOT_FOUND);
        assert_int_equal(egm_exist(client, keys[2]), EGM_ERR_NOT_FOUND);

        assert_int_equal(egm_unregister_buffer(client, src), EGM_OK);
        assert_int_equal(egm_unregister_buffer(client, dst), EGM_OK);
        egm_client_destroy(client);
        free(src);
        free(dst);
    }
}

static void test_remove_while_leased(void **state)
{
    (void)state;
    char out[4096];
    egm_client_t *client = egm_test_client(&cluster, "tcp", NULL);
    assert_non_null(client);
    assert_int_equal(egm_put(client, "lease/k", "value", 5, NULL), EGM_OK);
    void *data = NULL;
    size_t len = 0;
    /* The get grants a 10 s read lease (default_kv_lease_ttl). */
    assert_int_equal(egm_get(client, "lease/k", &data, &len), EGM_OK);
    assert_int_equal(len, 5);
    assert_memory_equal(data, "value", 5);
    egm_buffer_free(data);

    assert_int_equal(egm_remove(client, "lease/k", 0), EGM_ERR_HAS_LEASE);
    const char *rm[] = {"rm", "lease/k", NULL};
    assert_int_equal(egm_test_cli(&cluster, rm, NULL, 0, out, sizeof(out)), 1);
    assert_int_equal(egm_exist(client, "lease/k"), EGM_OK);
    const char *rm_force[] = {"rm", "lease/k", "--force", NULL};
    assert_int_equal(egm_test_cli(&cluster, rm_force, NULL, 0, out, sizeof(out)), 0);
    assert_int_equal(egm_exist(client, "lease/k"), EGM_ERR_NOT_FOUND);
    assert_int_equal(egm_remove(client, "lease/k", 0), EGM_ERR_NOT_FOUND);
    egm_client_destroy(client);
}

/* Fill both providers, remove everything, and the space serves new objects. */
static void test_space_reuse_after_remove(void **state)
{
    (void)state;
    const size_t len = 4u << 20;
    egm_client_t *client = egm_test_client(&cluster, "auto", NULL);
    assert_non_null(client);
    uint64_t removed = 0;
    assert_int_equal(egm_remove_all(client, 1, &removed), EGM_OK);
    unsigned char *data = malloc(len);
    assert_non_null(data);
    char key[64];
    int placed = 0;
    egm_status_t status = EGM_OK;
    /* Hard-pinned, so that the master cannot evict them to make room. */
    egm_replicate_config_t pinned = {.with_hard_pin = 1};
    for (int i = 0; i < 64 && status == EGM_OK; i++) {
        egm_test_fill(data, len, (unsigned)i);
        snprintf(key, sizeof(key), "fill/%d", i);
        status = egm_put(client, key, data, len, &pinned);
        if (status == EGM_OK)
            placed++;
    }
    assert_int_equal(status, EGM_ERR_NO_SPACE);
    assert_true(placed >= 28); /* 2 x 64 MiB hold 32 objects of 4 MiB */
    assert_int_equal(egm_remove_all(client, 1, &removed), EGM_OK);
    assert_int_equal(removed, (uint64_t)placed);
    for (int i = 0; i < placed; i++) {
        egm_test_fill(data, len, 1000u + (unsigned)i);
        snprintf(key, sizeof(key), "refill/%d", i);
        assert_int_equal(egm_put(client, key, data, len, NULL), EGM_OK);
    }
    /* Still byte-exact after reuse. */
    void *back = NULL;
    size_t got = 0;
    egm_test_fill(data, len, 1000u + (unsigned)(placed - 1));
    snprintf(key, sizeof(key), "refill/%d", placed - 1);
    assert_int_equal(egm_get(client, key, &back, &got), EGM_OK);
    assert_int_equal(got, len);
    assert_memory_equal(back, data, len);
    egm_buffer_free(back);
    assert_int_equal(egm_remove_all(client, 1, &removed), EGM_OK);
    egm_client_destroy(client);
    free(data);
}

/* A registered buffer this process may not write is a put's source but no
 * get's destination: get_into into it answers INVALID_ARG over each
 * transport, where a copy into it would have killed the process. */
static void test_read_only_buffer(void **state)
{
    (void)state;
    size_t page = (size_t)sysconf(_SC_PAGESIZE), len = 4 * page;
    unsigned char *buf =
        mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(buf != MAP_FAILED);
    egm_test_fill(buf, len, 7);
    assert_int_equal(mprotect(buf, len, PROT_READ), 0);
    const char *protocols[] = {"shm", "tcp"};
    for (int p = 0; p < 2; p++) {
        egm_client_t *client = egm_test_client(&cluster, protocols[p], NULL);
        assert_non_null(client);
        assert_int_equal(egm_register_buffer(client, buf, len), EGM_OK);
        char key[32];
        snprintf(key, sizeof(key), "ro/%s", protocols[p]);
        assert_int_equal(egm_put_from(client, key, buf, len, NULL), EGM_OK);
        size_t got = 0;
        assert_int_equal(egm_get_into(client, key, buf, len, &got), EGM_ERR_INVALID_ARG);
        assert_non_null(strstr(egm_last_error(), "may not write"));
        assert_non_null(strstr(egm_last_error(), key)); /* names the key */
        const char *keys[] = {key};
        void *dsts[] = {buf};
        size_t lens[] = {len}, sizes[1] = {0};
        egm_status_t results[1] = {EGM_OK};
        egm_batch_get_into(client, 1, keys, dsts, lens, sizes, results);
        assert_int_equal(results[0], EGM_ERR_INVALID_ARG);
        /* the object is whole: a copy to writable memory reads it back */
        void *back = NULL;
        assert_int_equal(egm_get(client, key, &back, &got), EGM_OK);
        assert_int_equal(got, len);
        assert_memory_equal(back, buf, len);
        egm_buffer_free(back);
        assert_int_equal(egm_unregister_buffer(client, buf), EGM_OK);
        egm_client_destroy(client);
    }
    assert_int_equal(munmap(buf, len), 0);
}

static void test_two_replicas_on_distinct_providers(void **state)
{
    (void)state;
    char out[8192];
    egm_client_t *client = egm_test_client(&cluster, "tcp", NULL);
    assert_non_null(client);
    uint64_t removed = 0;
    assert_int_equal(egm_remove_all(client, 1, &removed), EGM_OK);
    egm_replicate_config_t rc = {.replica_num = 2};
    assert_int_equal(egm_put(client, "replicated", "abcdef", 6, &rc), EGM_OK);
    const char *ls[] = {"ls", NULL};
    assert_int_equal(egm_test_cli(&cluster, ls, NULL, 0, out, sizeof(out)), 0);
    assert_non_null(strstr(out, "2 segments"));
    /* Each provider's one segment holds one replica. */
    Egm__ListSegmentsReply *reply = NULL;
    assert_int_equal(egm__client_list_segments(client, &reply), EGM_OK);
    int segments_with_object = 0;
    for (size_t i = 0; i < reply->n_segments; i++)
        if (reply->segments[i]->objects == 1)
            segments_with_object++;
    egm__rpc_msg_free(&reply->base);
    assert_int_equal(segments_with_object, 2);
    assert_int_equal(egm_remove(client, "replicated", 1), EGM_OK);
    egm_client_destroy(client);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cross_process_put_get),
        cmocka_unit_test(test_cli_errors),
        cmocka_unit_test(test_transports),
        cmocka_unit_test(test_batches_mixed_keys),
        cmocka_unit_test(test_scatter_gather_batches),
        cmocka_unit_test(test_remove_while_leased),
        cmocka_unit_test(test_two_replicas_on_distinct_providers),
        cmocka_unit_test(test_space_reuse_after_remove),
        cmocka_unit_test(test_read_only_buffer),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
