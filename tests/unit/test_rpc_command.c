/* The RPC command list (rpc/command.h): every type is found by its number,
 * with its name and messages; handler commands are 1..EGM_RPC_TYPE_MAX,
 * session frames (Auth, Hello) are raw and flagged; names are unique; unknown
 * numbers are not found. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cmocka.h>

#include "rpc/command.h"
#include "rpc/proto_util.h"

static void test_handler_commands(void **state)
{
    (void)state;
    for (uint16_t t = 1; t <= EGM_RPC_TYPE_MAX; t++) {
        const egm_rpc_command_t *c = egm__rpc_command_find(t);
        assert_non_null(c);
        assert_int_equal(c->type, t);
        assert_int_equal(c->flags & EGM_RPC_SESSION, 0);
        assert_non_null(c->request);
        assert_non_null(c->reply);
        assert_int_equal(c->request->magic, PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC);
        assert_int_equal(c->reply->magic, PROTOBUF_C__MESSAGE_DESCRIPTOR_MAGIC);
        assert_string_equal(egm__rpc_type_name(t), c->name);
    }
    /* The rows say what each type carries (proto/egmstore.proto). */
    const egm_rpc_command_t *c = egm__rpc_command_find(EGM_RPC_PUT_START);
    assert_string_equal(c->name, "PutStart");
    assert_ptr_equal(c->request, &egm__put_start_request__descriptor);
    assert_ptr_equal(c->reply, &egm__keys_reply__descriptor);
    c = egm__rpc_command_find(EGM_RPC_EXIST_KEY);
    assert_string_equal(c->name, "ExistKey");
    assert_ptr_equal(c->request, &egm__keys_request__descriptor);
    assert_ptr_equal(c->reply, &egm__keys_reply__descriptor);
    c = egm__rpc_command_find(EGM_RPC_PING);
    assert_string_equal(c->name, "Ping");
    assert_ptr_equal(c->request, &egm__ping_request__descriptor);
    assert_ptr_equal(c->reply, &egm__ping_reply__descriptor);
    c = egm__rpc_command_find(EGM_RPC_UNMOUNT_SEGMENT);
    assert_ptr_equal(c->request, &egm__unmount_segment_request__descriptor);
    assert_ptr_equal(c->reply, &egm__status_reply__descriptor);
    c = egm__rpc_command_find(EGM_RPC_SLAB_GRANT);
    assert_string_equal(c->name, "SlabGrant");
    assert_ptr_equal(c->request, &egm__slab_grant_request__descriptor);
    assert_ptr_equal(c->reply, &egm__keys_reply__descriptor);
    c = egm__rpc_command_find(EGM_RPC_COMMIT);
    assert_string_equal(c->name, "Commit");
    assert_ptr_equal(c->request, &egm__commit_request__descriptor);
    assert_ptr_equal(c->reply, &egm__keys_reply__descriptor);
    /* Numbers never change: they are on the wire. */
    assert_int_equal(EGM_RPC_STAT_KEY, 12);
    assert_int_equal(EGM_RPC_SLAB_GRANT, 13);
    c = egm__rpc_command_find(EGM_RPC_REPAIR_GRANT);
    assert_string_equal(c->name, "RepairGrant");
    assert_ptr_equal(c->request, &egm__repair_grant_request__descriptor);
    assert_ptr_equal(c->reply, &egm__repair_grant_reply__descriptor);
    c = egm__rpc_command_find(EGM_RPC_REPAIR_COMMIT);
    assert_string_equal(c->name, "RepairCommit");
    assert_ptr_equal(c->request, &egm__repair_commit_request__descriptor);
    assert_ptr_equal(c->reply, &egm__repair_commit_reply__descriptor);
    assert_int_equal(EGM_RPC_COMMIT, 14);
    assert_int_equal(EGM_RPC_REPAIR_GRANT, 15);
    assert_int_equal(EGM_RPC_REPAIR_COMMIT, 16);
    assert_int_equal(EGM_RPC_HA_APPLY, 17);
    assert_int_equal(EGM_RPC_TYPE_MAX, EGM_RPC_HA_APPLY);
}

static void test_session_commands(void **state)
{
    (void)state;
    const uint16_t types[] = {EGM_RPC_AUTH, EGM_RPC_HELLO};
    const char *names[] = {"Auth", "Hello"};
    assert_int_equal(EGM_RPC_AUTH, 64);
    assert_int_equal(EGM_RPC_HELLO, 65);
    for (size_t i = 0; i < 2; i++) {
        const egm_rpc_command_t *c = egm__rpc_command_find(types[i]);
        assert_non_null(c);
        assert_int_equal(c->type, types[i]);
        assert_string_equal(c->name, names[i]);
        assert_true(c->flags & EGM_RPC_SESSION);
        assert_null(c->request); /* raw payloads */
        assert_null(c->reply);
        assert_string_equal(egm__rpc_type_name(types[i]), names[i]);
    }
}

static void test_unknown_types(void **state)
{
    (void)state;
    const uint16_t unknown[] = {0, EGM_RPC_TYPE_MAX + 1, 63, 66, 999, UINT16_MAX};
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++) {
        assert_null(egm__rpc_command_find(unknown[i]));
        assert_string_equal(egm__rpc_type_name(unknown[i]), "unknown");
    }
}

static void test_names_unique(void **state)
{
    (void)state;
    const char *seen[128];
    size_t n = 0;
    for (uint32_t t = 0; t <= UINT16_MAX; t++) {
        const egm_rpc_command_t *c = egm__rpc_command_find((uint16_t)t);
        if (c == NULL)
            continue;
        assert_true(n < sizeof(seen) / sizeof(seen[0]));
        for (size_t i = 0; i < n; i++)
            assert_string_not_equal(seen[i], c->name);
        seen[n++] = c->name;
    }
    assert_int_equal(n, EGM_RPC_TYPE_MAX + 2); /* the handler commands, Auth and Hello */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_handler_commands),
        cmocka_unit_test(test_session_commands),
        cmocka_unit_test(test_unknown_types),
        cmocka_unit_test(test_names_unique),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
