/* The master process object over loopback: created from config on a free port,
 * it answers RPCs from a real client while running on its own thread, stops on
 * request, and leaves no allocation behind; its startup lines say how it was
 * configured. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "common/log.h"
#include "master/master.h"
#include "rpc/client.h"
#include "rpc/frame.h"
#include "rpc/proto_util.h"

static void *run_master(void *arg)
{
    egm__master_run(arg);
    return NULL;
}

static void test_serves_and_stops(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    egm_config_t *config;
    egm_master_t *master;
    pthread_t thread;
    char addr[64];

    egm__log_set_level(EGM_LOG_ERROR);
    assert_int_equal(egm_config_create(&config), EGM_OK);
    assert_int_equal(egm_config_set(config, "listen_address", "127.0.0.1"), EGM_OK);
    assert_int_equal(egm_config_set(config, "port", "0"), EGM_OK);
    assert_int_equal(egm__master_create(config, &master), EGM_OK);
    assert_true(egm__master_port(master) != 0);
    assert_int_equal(pthread_create(&thread, NULL, run_master, master), 0);

    snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)egm__master_port(master));
    egm_rpc_client_params_t params = {
        .addr = addr, .connect_timeout_ms = 3000, .max_frame_size = 1 << 20};
    egm_rpc_client_t *rpc;
    assert_int_equal(egm__rpc_client_create(&params, &rpc), EGM_OK);

    Egm__PingRequest ping = EGM__PING_REQUEST__INIT;
    Egm__Id client = EGM__ID__INIT;
    Egm__PingReply *pong = NULL;
    egm__id_to_pb(egm__id_random(), &client);
    ping.client = &client;
    assert_int_equal(egm__rpc_call_msg(rpc, EGM_RPC_PING, &ping.base, &egm__ping_reply__descriptor,
                                       (ProtobufCMessage **)&pong, 5000),
                     EGM_OK);
    assert_int_equal(pong->status, EGM_OK);
    assert_non_null(pong->master_id);
    egm__rpc_msg_free(&pong->base);

    /* No segment yet: a put finds no space; a get finds nothing. */
    Egm__PutStartRequest put = EGM__PUT_START_REQUEST__INIT;
    const char *keys[] = {"k"};
    uint64_t sizes[] = {10};
    Egm__KeysReply *reply = NULL;
    put.client = &client;
    put.n_keys = put.n_sizes = 1;
    put.keys = (char **)keys;
    put.sizes = sizes;
    assert_int_equal(egm__rpc_call_msg(rpc, EGM_RPC_PUT_START, &put.base,
                                       &egm__keys_reply__descriptor, (ProtobufCMessage **)&reply,
                                       5000),
                     EGM_OK);
    assert_int_equal(reply->n_results, 1);
    assert_int_equal(reply->results[0]->status, EGM_ERR_NO_SPACE);
    egm__rpc_msg_free(&reply->base);

    /* A request-level error travels back as an error reply with its text. */
    put.n_sizes = 0;
    reply = NULL;
    assert_int_equal(egm__rpc_call_msg(rpc, EGM_RPC_PUT_START, &put.base,
                                       &egm__keys_reply__descriptor, (ProtobufCMessage **)&reply,
                                       5000),
                     EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "sizes"));
    assert_null(reply);

    egm__rpc_client_destroy(rpc);
    egm__master_stop(master);
    assert_int_equal(pthread_join(thread, NULL), 0);
    egm__master_destroy(master);
    egm_config_destroy(config);
    assert_int_equal(egm__alloc_live_count(), live);
}

static void test_bad_config_refused(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    egm_config_t *config;
    egm_master_t *master = NULL;

    assert_int_equal(egm__master_create(NULL, &master), EGM_ERR_INVALID_ARG);
    assert_int_equal(egm_config_create(&config), EGM_OK);
    /* An address that is not this host's cannot be bound. */
    assert_int_equal(egm_config_set(config, "listen_address", "192.0.2.1"), EGM_OK);
    assert_int_equal(egm_config_set(config, "port", "0"), EGM_OK);
    assert_true(egm__master_create(config, &master) != EGM_OK);
    assert_null(master);
    egm_config_destroy(config);
    assert_int_equal(egm__alloc_live_count(), live);
}

/* The startup line with the placement and eviction settings names each of
 * them, the minimum residency included. */
static void test_startup_line_names_eviction(void **state)
{
    (void)state;
    uint64_t live = egm__alloc_live_count();
    egm_config_t *config;
    egm_master_t *master = NULL;
    static char log[64 * 1024];

    assert_int_equal(egm_config_create(&config), EGM_OK);
    assert_int_equal(egm_config_set(config, "listen_address", "127.0.0.1"), EGM_OK);
    assert_int_equal(egm_config_set(config, "port", "0"), EGM_OK);
    assert_int_equal(egm_config_set(config, "http_port", "-1"), EGM_OK);
    assert_int_equal(egm_config_set(config, "eviction_min_residency_ms", "4321"), EGM_OK);
    assert_int_equal(egm_config_set(config, "eviction_ratio", "0.25"), EGM_OK);
    /* The log goes to stderr: to a memfd while the master starts. */
    int fd = memfd_create("master-log", MFD_CLOEXEC);
    assert_true(fd >= 0);
    int saved = dup(STDERR_FILENO);
    assert_true(saved >= 0);
    assert_true(dup2(fd, STDERR_FILENO) >= 0);
    egm__log_set_level(EGM_LOG_INFO);
    egm_status_t status = egm__master_create(config, &master);
    egm__log_set_level(EGM_LOG_ERROR);
    assert_true(dup2(saved, STDERR_FILENO) >= 0);
    close(saved);
    assert_int_equal(status, EGM_OK);
    ssize_t n = pread(fd, log, sizeof(log) - 1, 0);
    close(fd);
    assert_true(n > 0);
    log[n] = '\0';
    const char *line = strstr(log, "master placement ");
    assert_non_null(line);
    const char *end = strchr(line, '\n');
    assert_non_null(end);
    char text[512];
    snprintf(text, sizeof(text), "%.*s", (int)(end - line), line);
    if (strstr(text, "0.25 at a time") == NULL || strstr(text, "4321 ms") == NULL)
        fail_msg("the startup line does not name eviction_ratio 0.25 and the residency of "
                 "4321 ms: %s",
                 text);
    egm__master_destroy(master);
    egm_config_destroy(config);
    assert_int_equal(egm__alloc_live_count(), live);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_serves_and_stops),
        cmocka_unit_test(test_bad_config_refused),
        cmocka_unit_test(test_startup_line_names_eviction),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
