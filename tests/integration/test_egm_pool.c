/* Integration: the EGM Store pool of a library client against a real master
 * process, on the fake CUDA driver (4 GPUs over 2 host NUMA nodes).
 * - setup publishes the whole pool at once, spread over the nodes; objects go
 *   in and out of it; close withdraws it and leaves no CUDA object;
 * - configuration mistakes are refused before anything is allocated;
 * - enable_egm_store_pool=false is the previous behaviour (no CUDA call);
 * - fault sweep: every CUDA call made during setup, and every one made during
 *   teardown, failed in turn (each occurrence). Setup failures reach the
 *   caller with the CUDA error's name and leave nothing published nor
 *   allocated; teardown failures report cleanup_pending until a retry
 *   succeeds, then nothing is left;
 * - two faults in one run: a setup call fails, and so does a call of the
 *   rollback that it sets off (the first and the last occurrence of every
 *   function the rollback calls). The caller still gets the first error; the
 *   failed cleanup step is kept and retried (exactly once more) before
 *   create returns, and nothing is left;
 * - every run of the sweeps leaves as many open file descriptors as it found
 *   (memfds, exported handles, sockets to the master). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>
#include "client/client_int.h"
#include "common/alloc.h"
#include "cuda/driver.h"
#include "support/cluster.h"
#include "support/fake_cuda.h"
#include "support/testutil.h"

#define MIB (1ull << 20)
#define N_GPUS 4
#define N_NODES 2
/* 24 MiB over 2 nodes in chunks of at most 4 MiB: 3 chunks per node. */
#define POOL "24MiB"
#define POOL_CHUNKS 6

static egm_test_cluster_t cluster;

static int group_setup(void **state)
{
    (void)state;
    egm__cuda_set_api(egm_fake_cuda_api());
    return egm_test_start_master(&cluster, NULL);
}

static int group_teardown(void **state)
{
    (void)state;
    egm_test_cluster_stop(&cluster);
    return 0;
}

static uint64_t live_at_start;

static int setup(void **state)
{
    (void)state;
    egm_fake_cuda_reset(N_GPUS, N_NODES);
    egm_fake_cuda_set_fabric(1, 0); /* as on the H200: no IMEX channel */
    live_at_start = egm__alloc_live_count();
    return 0;
}

/* Every error path of every run gave back what it allocated. */
static int teardown(void **state)
{
    (void)state;
    assert_int_equal(egm__alloc_live_count(), live_at_start);
    return 0;
}

/* An EGM pool config; extra "key=value" pairs override. Deterministic: one
 * setup thread, no prewarm, pings far apart (they make no CUDA call anyway). */
static egm_config_t *pool_config(const char *const *extra)
{
    static const char *const base[] = {"enable_egm_store_pool=true",
                                       "global_segment_size=" POOL,
                                       "max_mr_size=4MiB",
                                       "egm_setup_threads=1",
                                       "prewarm=false",
                                       "ping_interval_ms=60000",
                                       "local_hostname=127.0.0.1",
                                       NULL};
    egm_config_t *c = NULL;
    assert_int_equal(egm_config_create(&c), EGM_OK);
    assert_int_equal(egm_config_set(c, "master_server_addr", cluster.master_addr), EGM_OK);
    for (const char *const *p = base; *p; p++)
        assert_int_equal(egm_config_set_pair(c, *p), EGM_OK);
    for (const char *const *p = extra; p && *p; p++)
        assert_int_equal(egm_config_set_pair(c, *p), EGM_OK);
    return c;
}

static void assert_nothing_left(void)
{
    egm_fake_cuda_counters_t k = egm_fake_cuda_counters();
    assert_int_equal(k.allocations, 0);
    assert_int_equal(k.reservations, 0);
    assert_int_equal(k.mappings, 0);
    assert_int_equal(egm_fake_cuda_live_objects(), 0);
    assert_int_equal(egm_test_cluster_segments(&cluster), 0);
}

static int contains(const char *text, const char *what)
{
    return strstr(text, what) != NULL;
}

static void test_setup_publishes_whole_pool(void **state)
{
    (void)state;
    egm_config_t *c = pool_config(NULL);
    egm_client_t *provider = NULL;
    assert_int_equal(egm_client_create(c, &provider), EGM_OK);
    egm_config_destroy(c);
    assert_int_equal(egm_client_health(provider), EGM_HEALTH_HEALTHY);
    assert_string_equal(egm_health_string(egm_client_health(provider)), "healthy");

    /* Published whole: 6 segments of 4 MiB, 3 on each node, posix_fd. */
    Egm__ListSegmentsReply *reply = NULL;
    assert_int_equal(egm__client_list_segments(provider, &reply), EGM_OK);
    assert_int_equal(reply->n_segments, POOL_CHUNKS);
    for (size_t i = 0; i < reply->n_segments; i++) {
        egm_segment_desc_t d;
        assert_int_equal(egm__segment_desc_from_pb(reply->segments[i]->desc, &d), EGM_OK);
        assert_int_equal(d.size, 4 * MIB);
        assert_int_equal(d.handle_kind, EGM_HANDLE_POSIX_FD);
        assert_true(egm__id_equal(d.owner, provider->id));
    }
    egm__rpc_msg_free(&reply->base);
    const egm_vmm_pool_t *pool = provider->capacity.vmm;
    for (size_t i = 0; i < POOL_CHUNKS; i++)
        assert_int_equal(egm__vmm_pool_chunk(pool, i)->location, i < 3 ? 0 : 1);
    egm_fake_cuda_counters_t k = egm_fake_cuda_counters();
    assert_int_equal(k.allocations, POOL_CHUNKS);

    char metrics[32768];
    size_t need = egm_client_metrics(provider, metrics, sizeof(metrics));
    assert_true(need < sizeof(metrics));
    assert_true(contains(metrics, "\negm_client_health 0\n"));
    assert_true(contains(metrics, "\negm_client_pool_egm 1\n"));
    assert_true(contains(metrics, "\negm_client_pool_capacity_bytes 25165824\n"));
    assert_true(contains(metrics, "\negm_client_pool_chunks 6\n"));
    assert_true(contains(metrics, "\negm_client_pool_numa_nodes 2\n"));
    assert_true(contains(metrics, "# TYPE egm_client_pool_setup_seconds gauge"));
    char why[256];
    const char *problem = egm_test_prom_scheme_problem(metrics, "client", why, sizeof(why));
    if (problem != NULL)
        fail_msg("docs/metrics.md's naming scheme: %s", problem);
    /* A truncated buffer still gets a terminated prefix and the full length. */
    char small[16];
    assert_int_equal(egm_client_metrics(provider, small, sizeof(small)), need);
    assert_int_equal(strlen(small), sizeof(small) - 1);

    /* Objects go in and come back through another client. */
    egm_client_t *user = egm_test_client(&cluster, "auto", NULL);
    assert_non_null(user);
    static unsigned char data[3 * MIB + 17], back[sizeof(data)];
    egm_test_fill(data, sizeof(data), 4);
    for (int i = 0; i < POOL_CHUNKS; i++) {
        char key[32];
        snprintf(key, sizeof(key), "egm/%d", i);
        egm_status_t st = egm_put(user, key, data, sizeof(data) - (size_t)i, NULL);
        if (st != EGM_OK)
            fprintf(stderr, "put %s: %s\n", key, egm_last_error());
        assert_int_equal(st, EGM_OK);
    }
    for (int i = 0; i < POOL_CHUNKS; i++) {
        char key[32];
        size_t len = 0;
        snprintf(key, sizeof(key), "egm/%d", i);
        assert_int_equal(egm_register_buffer(user, back, sizeof(back)), EGM_OK);
        assert_int_equal(egm_get_into(user, key, back, sizeof(back), &len), EGM_OK);
        assert_int_equal(len, sizeof(data) - (size_t)i);
        assert_memory_equal(back, data, len);
        assert_int_equal(egm_unregister_buffer(user, back), EGM_OK);
    }
    egm_client_destroy(user);

    /* Close withdraws everything; a second close is a no-op. */
    assert_int_equal(egm_client_close(provider), EGM_OK);
    assert_int_equal(egm_client_health(provider), EGM_HEALTH_NOT_INITIALIZED);
    assert_int_equal(egm_client_close(provider), EGM_OK);
    egm_client_destroy(provider);
    assert_nothing_left();
    assert_int_equal(egm_client_health(NULL), EGM_HEALTH_NOT_INITIALIZED);
}

/* Each mistake: refused with the key named, nothing allocated or published. */
static void refused(const char *const *pairs, egm_status_t want, const char *const *words)
{
    egm_config_t *c = pool_config(pairs);
    egm_client_t *client = NULL;
    egm_status_t st = egm_client_create(c, &client);
    egm_config_destroy(c);
    if (st != want)
        fprintf(stderr, "%s: got %s (%s)\n", pairs[0], egm_status_string(st), egm_last_error());
    assert_int_equal(st, want);
    assert_null(client);
    for (const char *const *w = words; *w; w++) {
        if (!contains(egm_last_error(), *w))
            fprintf(stderr, "missing \"%s\" in: %s\n", *w, egm_last_error());
        assert_true(contains(egm_last_error(), *w));
    }
    assert_nothing_left();
}

static void test_config_refused(void **state)
{
    (void)state;
    refused((const char *const[]){"protocol=shm", NULL}, EGM_ERR_CONFIG,
            (const char *const[]){"enable_egm_store_pool", "protocol=shm", "nvlink", NULL});
    refused((const char *const[]){"protocol=tcp", NULL}, EGM_ERR_CONFIG,
            (const char *const[]){"protocol=tcp", NULL});
    refused((const char *const[]){"global_segment_size=0", NULL}, EGM_ERR_CONFIG,
            (const char *const[]){"global_segment_size", NULL});
    refused((const char *const[]){"pool_memory=device", NULL}, EGM_ERR_CONFIG,
            (const char *const[]){"pool_memory=device", NULL});
    static const char *const bad_lists[] = {"egm_numa_nodes=1,,2", "egm_numa_nodes=-1",
                                            "egm_numa_nodes=x", "egm_numa_nodes=", NULL};
    for (const char *const *b = bad_lists; *b; b++)
        refused((const char *const[]){*b, NULL}, EGM_ERR_CONFIG,
                (const char *const[]){"egm_numa_nodes", "accepted", NULL});
    /* Too small for one 2 MiB unit on each of 2 nodes; and a max_mr_size
     * below one unit. */
    refused((const char *const[]){"global_segment_size=3MiB", NULL}, EGM_ERR_CONFIG,
            (const char *const[]){"global_segment_size", "4 MiB", NULL});
    refused((const char *const[]){"max_mr_size=1MiB", NULL}, EGM_ERR_CONFIG,
            (const char *const[]){"max_mr_size", "2 MiB", NULL});
    /* A node the machine does not have: the driver's error, naming the node. */
    refused((const char *const[]){"egm_numa_nodes=0,7", NULL}, EGM_ERR_CONFIG,
            (const char *const[]){"egm_numa_nodes", "host NUMA node 7", "CUDA_ERROR_INVALID_VALUE",
                                  NULL});
    /* auto with GPUs that report no host NUMA node, or without HOST_NUMA VMM. */
    egm_fake_cuda_set_attribute(-1, EGM_CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID, -1);
    refused((const char *const[]){"egm_numa_nodes=auto", NULL}, EGM_ERR_NOT_SUPPORTED,
            (const char *const[]){"egm_numa_nodes=auto", "HOST_NUMA_ID", NULL});
    egm_fake_cuda_reset(N_GPUS, N_NODES);
    egm_fake_cuda_set_attribute(
        2, EGM_CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0);
    refused((const char *const[]){"egm_numa_nodes=auto", NULL}, EGM_ERR_NOT_SUPPORTED,
            (const char *const[]){"GPU 2", "HOST_NUMA virtual memory", NULL});
    /* An explicit list is taken as given: node 1 only. */
    egm_fake_cuda_reset(N_GPUS, N_NODES);
    egm_config_t *c = pool_config((const char *const[]){"egm_numa_nodes=1", NULL});
    egm_client_t *client = NULL;
    assert_int_equal(egm_client_create(c, &client), EGM_OK);
    egm_config_destroy(c);
    for (size_t i = 0; i < POOL_CHUNKS; i++)
        assert_int_equal(egm__vmm_pool_chunk(client->capacity.vmm, i)->location, 1);
    egm_client_destroy(client);
    assert_nothing_left();
}

static void test_disabled_is_previous_behaviour(void **state)
{
    (void)state;
    egm_fake_cuda_clear_calls();
    egm_config_t *c = pool_config((const char *const[]){"enable_egm_store_pool=false", NULL});
    egm_client_t *client = NULL;
    assert_int_equal(egm_client_create(c, &client), EGM_OK);
    egm_config_destroy(c);
    /* The memfd host pool, as before: no VMM call at all. */
    assert_non_null(client->capacity.pool);
    assert_null(client->capacity.vmm);
    assert_int_equal(client->capacity.segments[0].handle_kind, EGM_HANDLE_MEMFD);
    static const char *const vmm_calls[] = {"cuMemGetAllocationGranularity",
                                            "cuMemCreate",
                                            "cuMemAddressReserve",
                                            "cuMemMap",
                                            "cuMemSetAccess",
                                            "cuMemExportToShareableHandle",
                                            NULL};
    for (const char *const *f = vmm_calls; *f; f++)
        assert_int_equal(egm_fake_cuda_calls(*f), 0);
    assert_int_equal(egm_test_cluster_segments(&cluster), POOL_CHUNKS);
    char metrics[32768];
    egm_client_metrics(client, metrics, sizeof(metrics));
    assert_true(contains(metrics, "\negm_client_pool_egm 0\n"));
    egm_client_destroy(client);
    assert_nothing_left();
}

typedef struct {
    const char *name;
    size_t calls;
} site_t;

/* The CUDA calls `run` makes, by function and count. */
static size_t record_calls(site_t *sites)
{
    const char *names[EGM_FAKE_CUDA_N_FUNCTIONS];
    size_t n = egm_fake_cuda_called(names, EGM_FAKE_CUDA_N_FUNCTIONS);
    for (size_t i = 0; i < n; i++)
        sites[i] = (site_t){names[i], egm_fake_cuda_calls(names[i])};
    return n;
}

/* Error-text lookups only word a message (the driver layer falls back to
 * "CUDA error N"); they hold no resource, so they are not failed. */
static int diagnostic(const char *name)
{
    return strcmp(name, "cuGetErrorName") == 0 || strcmp(name, "cuGetErrorString") == 0;
}

/* The run left as many open descriptors as it found. */
static void assert_fds(int before, const char *function, size_t nth)
{
    int now = egm_test_count_fds();
    if (now != before)
        fprintf(stderr, "%s call %zu: %d descriptors open before, %d after\n", function, nth,
                before, now);
    assert_int_equal(now, before);
}

/* Index of name among the cleanup functions, or -1. */
static int cleanup_index(const char *name, const site_t *cleanup, size_t n_cleanup)
{
    for (size_t i = 0; i < n_cleanup; i++)
        if (strcmp(name, cleanup[i].name) == 0)
            return (int)i;
    return -1;
}

/* After setup call `nth` of `first` failed (a run that made the calls `made`,
 * at_fault[i] of them before the failure): runs it again with a second fault
 * on each call after the failure of each cleanup function (one that teardown
 * calls: `cleanup`), i.e. in the rollback the first failure set off. Each run
 * must answer the first error, have retried the failed cleanup step once
 * (every function called exactly as often as without the second fault, the
 * failed one once more) and leave nothing. Counts the runs per cleanup
 * function in hits[]. */
static void rollback_faults(egm_config_t *c, int fabric_permitted, const char *first, size_t nth,
                            const site_t *made, const size_t *at_fault, size_t n_made,
                            const site_t *cleanup, size_t n_cleanup, size_t *hits)
{
    for (size_t g = 0; g < n_made; g++) {
        int ci = cleanup_index(made[g].name, cleanup, n_cleanup);
        if (ci < 0 || diagnostic(made[g].name))
            continue;
        for (size_t m = at_fault[g] + 1; m <= made[g].calls; m++) {
            int fds = egm_test_count_fds();
            egm_fake_cuda_reset(N_GPUS, N_NODES);
            egm_fake_cuda_set_fabric(1, fabric_permitted);
            egm_fake_cuda_fail(first, (unsigned)nth, EGM_CU_ERROR_OUT_OF_MEMORY);
            egm_fake_cuda_fail(made[g].name, (unsigned)m, EGM_CU_ERROR_UNKNOWN);
            egm_client_t *client = NULL;
            egm_status_t st = egm_client_create(c, &client);
            if (st != EGM_ERR_NO_MEMORY || egm_fake_cuda_failures_fired() != 2)
                fprintf(stderr, "%s call %zu, then %s call %zu: %s (%zu faults fired): %s\n", first,
                        nth, made[g].name, m, egm_status_string(st), egm_fake_cuda_failures_fired(),
                        egm_last_error());
            assert_int_equal(egm_fake_cuda_failures_fired(), 2); /* the cleanup call did fail */
            assert_int_equal(st, EGM_ERR_NO_MEMORY);             /* the first error is the answer */
            assert_null(client);
            assert_true(contains(egm_last_error(), "CUDA_ERROR_OUT_OF_MEMORY"));
            assert_true(contains(egm_last_error(), first));
            for (size_t h = 0; h < n_made; h++) {
                if (diagnostic(made[h].name))
                    continue;
                size_t want = made[h].calls + (h == g);
                if (egm_fake_cuda_calls(made[h].name) != want)
                    fprintf(stderr, "%s call %zu, then %s call %zu: %s called %zu times, not %zu\n",
                            first, nth, made[g].name, m, made[h].name,
                            egm_fake_cuda_calls(made[h].name), want);
                assert_int_equal(egm_fake_cuda_calls(made[h].name), want);
            }
            egm_fake_cuda_clear_failures();
            assert_nothing_left();
            assert_fds(fds, made[g].name, m);
            hits[ci]++;
        }
    }
}

/* fabric_permitted 0: the H200's case, where the first cuMemCreate (fabric)
 * is refused and setup falls back to posix_fd; 1: fabric granted. */
static void fault_sweep(int fabric_permitted)
{
    site_t setup_sites[EGM_FAKE_CUDA_N_FUNCTIONS], teardown_sites[EGM_FAKE_CUDA_N_FUNCTIONS];
    egm_client_t *client = NULL;
    egm_config_t *c = pool_config(NULL);

    egm_fake_cuda_set_fabric(1, fabric_permitted);
    /* A clean run, recording setup's calls and teardown's. */
    egm_fake_cuda_clear_calls();
    assert_int_equal(egm_client_create(c, &client), EGM_OK);
    size_t n_setup = record_calls(setup_sites);
    egm_fake_cuda_clear_calls();
    assert_int_equal(egm_client_close(client), EGM_OK);
    size_t n_teardown = record_calls(teardown_sites);
    egm_client_destroy(client);
    assert_nothing_left();
    assert_true(n_setup >= 6);    /* granularity, create, reserve, map, access, attributes */
    assert_true(n_teardown >= 3); /* unmap, address free, release */

    size_t setup_runs = 0, teardown_runs = 0, double_runs = 0;
    size_t hits[EGM_FAKE_CUDA_N_FUNCTIONS] = {0}; /* second faults per teardown function */
    for (size_t s = 0; s < n_setup; s++) {
        for (size_t k = 1; k <= setup_sites[s].calls && !diagnostic(setup_sites[s].name); k++) {
            int fds = egm_test_count_fds();
            egm_fake_cuda_reset(N_GPUS, N_NODES);
            egm_fake_cuda_set_fabric(1, fabric_permitted);
            egm_fake_cuda_fail(setup_sites[s].name, (unsigned)k, EGM_CU_ERROR_OUT_OF_MEMORY);
            client = NULL;
            egm_status_t st = egm_client_create(c, &client);
            if (st == EGM_OK)
                fprintf(stderr, "setup survived failure of %s call %zu\n", setup_sites[s].name, k);
            if (st != EGM_ERR_NO_MEMORY)
                fprintf(stderr, "%s call %zu: %s: %s\n", setup_sites[s].name, k,
                        egm_status_string(st), egm_last_error());
            assert_int_equal(st, EGM_ERR_NO_MEMORY);
            assert_null(client);
            if (!contains(egm_last_error(), "CUDA_ERROR_OUT_OF_MEMORY"))
                fprintf(stderr, "%s call %zu: error without the CUDA name: %s\n",
                        setup_sites[s].name, k, egm_last_error());
            assert_true(contains(egm_last_error(), "CUDA_ERROR_OUT_OF_MEMORY"));
            assert_true(contains(egm_last_error(), setup_sites[s].name));
            site_t made[EGM_FAKE_CUDA_N_FUNCTIONS];
            size_t n_made = record_calls(made);
            size_t at_fault[EGM_FAKE_CUDA_N_FUNCTIONS];
            for (size_t i = 0; i < n_made; i++)
                at_fault[i] = egm_fake_cuda_calls_at_first_failure(made[i].name);
            egm_fake_cuda_clear_failures();
            assert_nothing_left();
            assert_fds(fds, setup_sites[s].name, k);
            setup_runs++;
            rollback_faults(c, fabric_permitted, setup_sites[s].name, k, made, at_fault, n_made,
                            teardown_sites, n_teardown, hits);
        }
    }
    for (size_t s = 0; s < n_teardown; s++) {
        for (size_t k = 1; k <= teardown_sites[s].calls && !diagnostic(teardown_sites[s].name);
             k++) {
            int fds = egm_test_count_fds();
            egm_fake_cuda_reset(N_GPUS, N_NODES);
            egm_fake_cuda_set_fabric(1, fabric_permitted);
            client = NULL;
            assert_int_equal(egm_client_create(c, &client), EGM_OK);
            egm_fake_cuda_fail(teardown_sites[s].name, (unsigned)k, EGM_CU_ERROR_OUT_OF_MEMORY);
            assert_int_not_equal(egm_client_close(client), EGM_OK);
            assert_true(contains(egm_last_error(), "CUDA_ERROR_OUT_OF_MEMORY"));
            assert_true(contains(egm_last_error(), teardown_sites[s].name));
            assert_int_equal(egm_client_health(client), EGM_HEALTH_CLEANUP_PENDING);
            char metrics[32768];
            egm_client_metrics(client, metrics, sizeof(metrics));
            assert_true(contains(metrics, "\negm_client_pool_cleanup_pending 1\n"));
            assert_true(contains(metrics, "\negm_client_pool_cleanup_failures_total 1\n"));
            /* Unpublished already; the memory it could not release is still held. */
            assert_int_equal(egm_test_cluster_segments(&cluster), 0);
            assert_true(egm_fake_cuda_live_objects() > 0);
            egm_fake_cuda_clear_failures();
            assert_int_equal(egm_client_close(client), EGM_OK);
            assert_int_equal(egm_client_health(client), EGM_HEALTH_NOT_INITIALIZED);
            egm_client_destroy(client);
            assert_nothing_left();
            assert_fds(fds, teardown_sites[s].name, k);
            teardown_runs++;
        }
    }
    egm_config_destroy(c);
    for (size_t i = 0; i < n_teardown; i++)
        double_runs += hits[i];
    printf("fault sweep (fabric %s): %zu setup call sites over %zu functions, %zu teardown "
           "call sites over %zu functions, each failed once; %zu runs with a second fault on "
           "the rollback path\n",
           fabric_permitted ? "granted" : "refused", setup_runs, n_setup, teardown_runs, n_teardown,
           double_runs);
    assert_true(setup_runs >= POOL_CHUNKS * 4);
    assert_int_equal(teardown_runs, POOL_CHUNKS * 3);
    /* Every cleanup function was failed on the rollback path. */
    for (size_t i = 0; i < n_teardown; i++) {
        if (diagnostic(teardown_sites[i].name))
            continue;
        if (hits[i] == 0)
            fprintf(stderr, "no second fault on %s\n", teardown_sites[i].name);
        assert_true(hits[i] > 0);
    }
}

static void test_fault_sweep_fabric_refused(void **state)
{
    (void)state;
    fault_sweep(0);
}

static void test_fault_sweep_fabric_granted(void **state)
{
    (void)state;
    fault_sweep(1);
}

/* A master that goes away: health turns master_unreachable (and the pool is
 * still this client's to withdraw; close then fails with cleanup_pending,
 * since the master cannot confirm the unmount, and keeps the memory). */
static void test_master_unreachable(void **state)
{
    (void)state;
    egm_test_cluster_t own;
    assert_int_equal(egm_test_start_master(&own, NULL), 0);
    egm_config_t *c = pool_config((const char *const[]){"ping_interval_ms=50", NULL});
    assert_int_equal(egm_config_set(c, "master_server_addr", own.master_addr), EGM_OK);
    egm_client_t *client = NULL;
    assert_int_equal(egm_client_create(c, &client), EGM_OK);
    egm_config_destroy(c);
    assert_int_equal(egm_client_health(client), EGM_HEALTH_HEALTHY);
    egm_test_cluster_stop(&own);
    /* Bounded wait for the next failed ping (no timing asserted). */
    for (int i = 0; i < 400 && egm_client_health(client) != EGM_HEALTH_MASTER_UNREACHABLE; i++)
        usleep(25 * 1000);
    assert_int_equal(egm_client_health(client), EGM_HEALTH_MASTER_UNREACHABLE);
    assert_int_not_equal(egm_client_close(client), EGM_OK);
    assert_true(contains(egm_last_error(), "unmount at the master"));
    assert_int_equal(egm_client_health(client), EGM_HEALTH_CLEANUP_PENDING);
    assert_int_equal(egm_fake_cuda_counters().allocations, POOL_CHUNKS);
    /* destroy stops serving but never releases memory the master may still
     * name: it is left to the process's exit (the fake's reset stands in). */
    egm_client_destroy(client);
    assert_int_equal(egm_fake_cuda_counters().allocations, POOL_CHUNKS);
    assert_int_equal(egm_fake_cuda_counters().mappings, POOL_CHUNKS);
    egm_fake_cuda_reset(N_GPUS, N_NODES);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_setup_publishes_whole_pool, setup, teardown),
        cmocka_unit_test_setup_teardown(test_config_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_disabled_is_previous_behaviour, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_sweep_fabric_refused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_sweep_fabric_granted, setup, teardown),
        cmocka_unit_test_setup_teardown(test_master_unreachable, setup, teardown),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
