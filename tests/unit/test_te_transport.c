/* The registered transports (te/transport.h): the list is the order of
 * preference and matches the egm_transport_t names; every entry has what
 * routing and transfer call; the reachability check formats a reason only when
 * asked; and an engine's failed route names each allowed transport's reason. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "common/log.h"
#include "common/sock.h"
#include "te/te.h"
#include "te/transport.h"

static void test_list_is_the_preference_order(void **state)
{
    (void)state;
    assert_true(egm__n_transports >= 4);
    assert_true(egm__n_transports <= EGM_TRANSPORTS_MAX);
    /* egm_transport_t values are positions in the list. */
    assert_ptr_equal(egm__transports[EGM_TRANSPORT_LOCAL], &egm__transport_local);
    assert_ptr_equal(egm__transports[EGM_TRANSPORT_NVLINK], &egm__transport_nvlink);
    assert_ptr_equal(egm__transports[EGM_TRANSPORT_SHM], &egm__transport_shm);
    assert_ptr_equal(egm__transports[EGM_TRANSPORT_TCP], &egm__transport_tcp);
    assert_string_equal(egm__transport_name(EGM_TRANSPORT_NVLINK), "nvlink");
    assert_string_equal(egm__transport_name((egm_transport_t)egm__n_transports), "unknown");

    int seen_remote = 0;
    for (size_t i = 0; i < egm__n_transports; i++) {
        const egm_transport_ops_t *ops = egm__transports[i];
        assert_non_null(ops->name);
        assert_string_equal(egm__transport_name((egm_transport_t)i), ops->name);
        assert_non_null(ops->obstacle);
        /* Exactly one way to move bytes, but a host-memory-only transport:
         * staging hands pieces to its transfer, and it may batch host
         * buffers. */
        if (ops->host_memory_only)
            assert_non_null(ops->transfer);
        else
            assert_true((ops->transfer != NULL) != (ops->transfer_batch != NULL));
        /* Own-memory transports come first: routing asks them before the
         * retired check, as an own segment is served while exposed. */
        if (ops->own_memory)
            assert_false(seen_remote);
        else
            seen_remote = 1;
        /* A protocol value selects at most one transport. */
        if (!ops->own_memory) {
            assert_int_not_equal(ops->protocol, EGM_PROTOCOL_AUTO);
            for (size_t j = 0; j < i; j++)
                if (!egm__transports[j]->own_memory)
                    assert_int_not_equal(egm__transports[j]->protocol, ops->protocol);
        }
        for (size_t j = 0; j < i; j++)
            assert_string_not_equal(egm__transports[j]->name, ops->name);
    }
}

static egm_segment_desc_t remote_segment(void)
{
    egm_segment_desc_t d;
    memset(&d, 0, sizeof(d));
    d.id = egm__id_random();
    d.owner = egm__id_random();
    d.size = 1 << 20;
    strcpy(d.host_id, "some-other-host");
    strcpy(d.shm_socket, "@egmstore-1-x");
    d.handle_kind = EGM_HANDLE_MEMFD;
    return d;
}

static void test_obstacle_formats_only_when_asked(void **state)
{
    (void)state;
    egm_te_env_t env = {.host_id = "this-host"};
    egm_segment_desc_t d = remote_segment();
    char why[256];

    memset(why, 'x', sizeof(why));
    const char *quick = egm__transport_shm.obstacle(&env, NULL, &d, -1, NULL, 0);
    assert_non_null(quick);
    const char *full = egm__transport_shm.obstacle(&env, NULL, &d, -1, why, sizeof(why));
    assert_ptr_equal(full, why);
    assert_non_null(strstr(why, "some-other-host"));
    assert_non_null(strstr(why, "this-host"));

    /* Same host with a memfd and a socket: shm reaches it. */
    strcpy(d.host_id, "this-host");
    assert_null(egm__transport_shm.obstacle(&env, NULL, &d, -1, NULL, 0));
    d.handle_kind = EGM_HANDLE_POSIX_FD;
    assert_non_null(egm__transport_shm.obstacle(&env, NULL, &d, -1, why, sizeof(why)));
    assert_non_null(strstr(why, "no shm socket"));

    /* tcp needs an endpoint, nothing else. */
    assert_non_null(egm__transport_tcp.obstacle(&env, NULL, &d, -1, NULL, 0));
    strcpy(d.tcp_endpoint, "127.0.0.1:1");
    assert_null(egm__transport_tcp.obstacle(&env, NULL, &d, 3, NULL, 0));

    /* nvlink without a GPU service (state NULL) reaches nothing. */
    assert_non_null(strstr(egm__transport_nvlink.obstacle(&env, NULL, &d, 0, NULL, 0), "no CUDA"));
}

static egm_te_t *make_te(egm_protocol_t protocol)
{
    egm_te_params_t params = {.client_id = egm__id_random(),
                              .protocol = protocol,
                              .local_hostname = "127.0.0.1",
                              .io_timeout_ms = 1000};
    egm_te_t *te = NULL;
    assert_int_equal(egm__te_create(&params, &te), EGM_OK);
    return te;
}

static void test_failed_route_names_each_allowed_transport(void **state)
{
    (void)state;
    egm_segment_desc_t d = remote_segment(); /* other host, no tcp endpoint */
    egm_transport_t t;

    egm_te_t *te = make_te(EGM_PROTOCOL_AUTO);
    assert_int_equal(egm__te_route(te, &d, &t), EGM_ERR_NOT_SUPPORTED);
    const char *msg = egm_last_error();
    assert_non_null(strstr(msg, "nvlink: "));
    assert_non_null(strstr(msg, "shm: "));
    assert_non_null(strstr(msg, "some-other-host"));
    assert_non_null(strstr(msg, "tcp: the segment has no tcp endpoint"));
    assert_null(strstr(msg, "local"));
    /* Reachable once it has an endpoint: tcp, the last resort. */
    strcpy(d.tcp_endpoint, "127.0.0.1:1");
    assert_int_equal(egm__te_route(te, &d, &t), EGM_OK);
    assert_int_equal(t, EGM_TRANSPORT_TCP);
    egm__te_destroy(te);

    /* One protocol: only its transport is asked, and named. */
    te = make_te(EGM_PROTOCOL_SHM);
    assert_int_equal(egm__te_route(te, &d, &t), EGM_ERR_NOT_SUPPORTED);
    msg = egm_last_error();
    assert_non_null(strstr(msg, "protocol=shm"));
    assert_non_null(strstr(msg, "some-other-host"));
    assert_null(strstr(msg, "tcp"));
    egm__te_destroy(te);
}

static void test_engine_without_gpu_has_no_cached_segments(void **state)
{
    (void)state;
    egm_te_t *te = make_te(EGM_PROTOCOL_AUTO);
    egm_id_t *ids = (egm_id_t *)&ids;
    size_t n = 7;
    assert_int_equal(egm__te_cached_segments(te, &ids, &n), EGM_OK);
    assert_null(ids);
    assert_int_equal(n, 0);
    /* Every transport's forget and release take an unknown id quietly. */
    egm__te_forget_segment(te, egm__id_random());
    egm__te_release_pages(te, egm__id_random(), 0, 4096);
    egm_te_stats_t stats;
    egm__te_stats(te, &stats);
    assert_int_equal(stats.mappings_live, 0);
    egm__te_destroy(te);
}

int main(void)
{
    (void)egm__host_id();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_list_is_the_preference_order, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_obstacle_formats_only_when_asked, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_failed_route_names_each_allowed_transport,
                                        egm_test_setup_alloc, egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_engine_without_gpu_has_no_cached_segments,
                                        egm_test_setup_alloc, egm_test_teardown_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
