/* Master RPC handlers, called directly with encoded requests: replies carry one
 * result per key and each referenced segment's descriptor once; malformed
 * requests are refused with a status naming the field; ping reports retired
 * ids; ListSegments reports usage. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <cmocka.h>

#include "common/alloc.h"
#include "common/log.h"
#include "master/master_int.h"
#include "rpc/frame.h"
#include "rpc/proto_util.h"

static uint64_t live_at_start;
static uint64_t fake_now;
static egm_master_state_t st;
static egm_id_t me;

static uint64_t clock_ms(void)
{
    return fake_now;
}

static int setup(void **state)
{
    (void)state;
    live_at_start = egm__alloc_live_count();
    egm__log_set_level(EGM_LOG_ERROR);
    egm_master_state_params_t sp = {.client_ttl_ms = 10};
    egm__objects_params_default(&sp.objects);
    sp.objects.lease_ttl_ms = 10000;
    assert_int_equal(egm__master_state_init(&st, &sp), EGM_OK);
    st.now_ms = clock_ms;
    fake_now = 1000;
    me = egm__id_random();
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    assert_int_equal(egm__objects_check(st.objects), EGM_OK); /* whatever the test did */
    egm__master_state_cleanup(&st);
    assert_int_equal(egm__alloc_live_count(), live_at_start);
    return 0;
}

/* Packs req, calls the handler, unpacks the reply as desc (NULL on error). */
static egm_status_t call(uint16_t type, const ProtobufCMessage *req,
                         const ProtobufCMessageDescriptor *desc, ProtobufCMessage **reply_p)
{
    uint8_t *buf;
    size_t len;
    egm_rpc_reply_t reply = {0};

    *reply_p = NULL;
    assert_int_equal(egm__pb_pack(req, &buf, &len), EGM_OK);
    egm_status_t status = egm__master_handle(&st, type, buf, len, &reply);
    egm_free(buf);
    if (status != EGM_OK) {
        assert_null(reply.buf);
        return status;
    }
    assert_int_equal(egm__pb_unpack(desc, reply.buf, reply.len, reply_p), EGM_OK);
    egm_free(reply.buf);
    return EGM_OK;
}

/* A segment of provider `by` (replicas of one object go to distinct providers). */
static egm_id_t mount_by(egm_id_t by, uint64_t size, const char *name)
{
    Egm__MountSegmentRequest req = EGM__MOUNT_SEGMENT_REQUEST__INIT;
    Egm__SegmentDesc d = EGM__SEGMENT_DESC__INIT;
    Egm__Id client = EGM__ID__INIT, id = EGM__ID__INIT;
    Egm__StatusReply *reply;
    egm_id_t seg = egm__id_random();

    egm__id_to_pb(by, &client);
    egm__id_to_pb(seg, &id);
    d.id = &id;
    d.size = size;
    d.name = (char *)name;
    d.tcp_endpoint = "127.0.0.1:7000";
    d.host_id = "host-a";
    d.handle_kind = EGM__HANDLE_KIND__HANDLE_MEMFD;
    req.client = &client;
    req.segment = &d;
    assert_int_equal(call(EGM_RPC_MOUNT_SEGMENT, &req.base, &egm__status_reply__descriptor,
                          (ProtobufCMessage **)&reply),
                     EGM_OK);
    assert_int_equal(reply->status, EGM_OK);
    egm__pb_free(&reply->base);
    return seg;
}

static egm_id_t mount(uint64_t size, const char *name)
{
    return mount_by(me, size, name);
}

static Egm__KeysReply *put_start(size_t n, const char **keys, const uint64_t *sizes,
                                 uint32_t replica_num)
{
    Egm__PutStartRequest req = EGM__PUT_START_REQUEST__INIT;
    Egm__ReplicateConfig cfg = EGM__REPLICATE_CONFIG__INIT;
    Egm__Id client = EGM__ID__INIT;
    Egm__KeysReply *reply;

    egm__id_to_pb(me, &client);
    cfg.replica_num = replica_num;
    req.client = &client;
    req.n_keys = n;
    req.keys = (char **)keys;
    req.n_sizes = n;
    req.sizes = (uint64_t *)sizes;
    req.config = &cfg;
    assert_int_equal(call(EGM_RPC_PUT_START, &req.base, &egm__keys_reply__descriptor,
                          (ProtobufCMessage **)&reply),
                     EGM_OK);
    assert_int_equal(reply->status, EGM_OK);
    assert_int_equal(reply->n_results, n);
    return reply;
}

#define KEYS_LOCATIONS 2 /* keys_call's flags: 1 force, 2 locations */

static Egm__KeysReply *keys_call(uint16_t type, size_t n, const char **keys, int force)
{
    Egm__KeysRequest req = EGM__KEYS_REQUEST__INIT;
    Egm__Id client = EGM__ID__INIT;
    Egm__KeysReply *reply;

    egm__id_to_pb(me, &client);
    req.client = &client;
    req.n_keys = n;
    req.keys = (char **)keys;
    req.force = (force & 1) != 0;
    req.locations = (force & KEYS_LOCATIONS) != 0;
    assert_int_equal(
        call(type, &req.base, &egm__keys_reply__descriptor, (ProtobufCMessage **)&reply), EGM_OK);
    assert_int_equal(reply->n_results, n);
    return reply;
}

static void test_put_get_reply_contents(void **state)
{
    (void)state;
    egm_id_t seg = mount(1 << 20, "seg/0");
    const char *keys[] = {"a", "b", "a", ""};
    const uint64_t sizes[] = {100, 200, 5, 1};

    Egm__KeysReply *r = put_start(4, keys, sizes, 0); /* replica_num 0 means 1 */
    assert_int_equal(r->results[0]->status, EGM_OK);
    assert_int_equal(r->results[0]->n_replicas, 1);
    assert_int_equal(r->results[0]->replicas[0]->length, 100);
    assert_true(egm__id_equal(egm__id_from_pb(r->results[0]->replicas[0]->segment), seg));
    assert_int_equal(r->results[1]->status, EGM_OK);
    assert_int_equal(r->results[2]->status, EGM_ERR_EXISTS);
    assert_int_equal(r->results[2]->n_replicas, 0);
    assert_int_equal(r->results[3]->status, EGM_ERR_INVALID_KEY);
    /* Two replicas on one segment: its descriptor once, with every field. */
    assert_int_equal(r->n_segments, 1);
    const Egm__SegmentDesc *d = r->segments[0];
    assert_true(egm__id_equal(egm__id_from_pb(d->id), seg));
    assert_true(egm__id_equal(egm__id_from_pb(d->owner), me));
    assert_string_equal(d->name, "seg/0");
    assert_string_equal(d->tcp_endpoint, "127.0.0.1:7000");
    assert_string_equal(d->host_id, "host-a");
    assert_int_equal(d->size, 1 << 20);
    assert_int_equal(d->handle_kind, EGM__HANDLE_KIND__HANDLE_MEMFD);
    egm__pb_free(&r->base);

    /* Not visible until PutEnd. */
    r = keys_call(EGM_RPC_GET_REPLICA_LIST, 2, keys, 0);
    assert_int_equal(r->results[0]->status, EGM_ERR_NOT_READY);
    egm__pb_free(&r->base);
    r = keys_call(EGM_RPC_PUT_END, 2, keys, 0);
    assert_int_equal(r->results[0]->status, EGM_OK);
    assert_int_equal(r->results[1]->status, EGM_OK);
    egm__pb_free(&r->base);

    const char *get_keys[] = {"a", "missing", "b"};
    r = keys_call(EGM_RPC_GET_REPLICA_LIST, 3, get_keys, 0);
    assert_int_equal(r->results[0]->status, EGM_OK);
    assert_int_equal(r->results[0]->size, 100);
    assert_int_equal(r->results[0]->lease_ttl_ms, 10000);
    assert_int_equal(r->results[0]->n_replicas, 1);
    assert_int_equal(r->results[1]->status, EGM_ERR_NOT_FOUND);
    assert_int_equal(r->results[1]->n_replicas, 0);
    assert_int_equal(r->results[2]->size, 200);
    assert_int_equal(r->n_segments, 1);
    egm__pb_free(&r->base);

    r = keys_call(EGM_RPC_EXIST_KEY, 3, get_keys, 0);
    assert_int_equal(r->results[0]->status, EGM_OK);
    assert_int_equal(r->results[1]->status, EGM_ERR_NOT_FOUND);
    assert_int_equal(r->results[2]->status, EGM_OK);
    assert_int_equal(r->results[0]->n_replicas, 0);
    assert_int_equal(r->n_segments, 0);
    egm__pb_free(&r->base);
    /* Asked for locations, ExistKey answers them as GetReplicaList does. */
    r = keys_call(EGM_RPC_EXIST_KEY, 3, get_keys, KEYS_LOCATIONS);
    assert_int_equal(r->results[0]->status, EGM_OK);
    assert_int_equal(r->results[0]->size, 100);
    assert_int_equal(r->results[0]->lease_ttl_ms, 10000);
    assert_int_equal(r->results[0]->n_replicas, 1);
    assert_int_equal(r->results[0]->replicas[0]->length, 100);
    assert_true(egm__id_equal(egm__id_from_pb(r->results[0]->replicas[0]->segment), seg));
    assert_int_equal(r->results[1]->status, EGM_ERR_NOT_FOUND);
    assert_int_equal(r->results[1]->n_replicas, 0);
    assert_int_equal(r->results[2]->n_replicas, 1);
    assert_int_equal(r->n_segments, 1);
    assert_int_equal(r->location_cache_ms, st.location_cache_ms);
    egm__pb_free(&r->base);

    r = keys_call(EGM_RPC_REMOVE, 3, get_keys, 0);
    assert_int_equal(r->results[0]->status, EGM_ERR_HAS_LEASE);
    assert_int_equal(r->results[1]->status, EGM_ERR_NOT_FOUND);
    egm__pb_free(&r->base);
    r = keys_call(EGM_RPC_REMOVE, 1, get_keys, 1);
    assert_int_equal(r->results[0]->status, EGM_OK);
    egm__pb_free(&r->base);

    Egm__RemoveAllRequest ra = EGM__REMOVE_ALL_REQUEST__INIT;
    Egm__RemoveAllReply *rar;
    ra.force = 1;
    assert_int_equal(call(EGM_RPC_REMOVE_ALL, &ra.base, &egm__remove_all_reply__descriptor,
                          (ProtobufCMessage **)&rar),
                     EGM_OK);
    assert_int_equal(rar->status, EGM_OK);
    assert_int_equal(rar->removed, 1); /* "b" */
    egm__pb_free(&rar->base);
}

static void test_two_replicas_name_two_segments(void **state)
{
    (void)state;
    egm_id_t s1 = mount(1 << 20, "s1"), s2 = mount_by(egm__id_random(), 1 << 20, "s2");
    const char *keys[] = {"r"};
    const uint64_t sizes[] = {64};

    Egm__KeysReply *r = put_start(1, keys, sizes, 2);
    assert_int_equal(r->results[0]->n_replicas, 2);
    assert_int_equal(r->n_segments, 2);
    egm_id_t a = egm__id_from_pb(r->results[0]->replicas[0]->segment);
    egm_id_t b = egm__id_from_pb(r->results[0]->replicas[1]->segment);
    assert_false(egm__id_equal(a, b));
    assert_true(egm__id_equal(a, s1) || egm__id_equal(a, s2));
    assert_true(egm__id_equal(b, s1) || egm__id_equal(b, s2));
    egm__pb_free(&r->base);
}

static void test_malformed_requests(void **state)
{
    (void)state;
    egm_rpc_reply_t reply = {0};
    const uint8_t junk[16] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
                              0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff};
    Egm__KeysReply *r;

    mount(1 << 20, "m");
    for (uint16_t type = 1; type <= EGM_RPC_TYPE_MAX; type++) {
        assert_int_equal(egm__master_handle(&st, type, junk, sizeof(junk), &reply),
                         EGM_ERR_PROTOCOL);
        assert_null(reply.buf);
    }
    assert_int_equal(egm__master_handle(&st, 999, NULL, 0, &reply), EGM_ERR_NOT_SUPPORTED);
    /* An empty payload decodes as an empty request: answered, not refused. */
    assert_int_equal(egm__master_handle(&st, EGM_RPC_EXIST_KEY, NULL, 0, &reply), EGM_OK);
    egm_free(reply.buf);

    /* PutStart: sizes must match keys; replica_num at most 16; a client id. */
    Egm__PutStartRequest ps = EGM__PUT_START_REQUEST__INIT;
    Egm__ReplicateConfig cfg = EGM__REPLICATE_CONFIG__INIT;
    Egm__Id client = EGM__ID__INIT;
    const char *keys[] = {"x", "y"};
    uint64_t sizes[] = {1, 2};
    egm__id_to_pb(me, &client);
    ps.client = &client;
    ps.n_keys = 2;
    ps.keys = (char **)keys;
    ps.n_sizes = 1;
    ps.sizes = sizes;
    assert_int_equal(
        call(EGM_RPC_PUT_START, &ps.base, &egm__keys_reply__descriptor, (ProtobufCMessage **)&r),
        EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "sizes"));
    ps.n_sizes = 2;
    cfg.replica_num = 17;
    ps.config = &cfg;
    assert_int_equal(
        call(EGM_RPC_PUT_START, &ps.base, &egm__keys_reply__descriptor, (ProtobufCMessage **)&r),
        EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "replica_num"));
    cfg.replica_num = 16;
    ps.client = NULL;
    assert_int_equal(
        call(EGM_RPC_PUT_START, &ps.base, &egm__keys_reply__descriptor, (ProtobufCMessage **)&r),
        EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "client"));
    sizes[1] = 0; /* per key: size 0 */
    ps.client = &client;
    r = NULL;
    assert_int_equal(
        call(EGM_RPC_PUT_START, &ps.base, &egm__keys_reply__descriptor, (ProtobufCMessage **)&r),
        EGM_OK);
    assert_int_equal(r->results[0]->status, EGM_OK);
    assert_int_equal(r->results[1]->status, EGM_ERR_INVALID_ARG);
    egm__pb_free(&r->base);

    /* More keys than a request may hold. */
    static const char *many[EGM_MASTER_MAX_KEYS + 1];
    for (size_t i = 0; i <= EGM_MASTER_MAX_KEYS; i++)
        many[i] = "k";
    Egm__KeysRequest kr = EGM__KEYS_REQUEST__INIT;
    kr.n_keys = EGM_MASTER_MAX_KEYS + 1;
    kr.keys = (char **)many;
    assert_int_equal(
        call(EGM_RPC_EXIST_KEY, &kr.base, &egm__keys_reply__descriptor, (ProtobufCMessage **)&r),
        EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "keys"));
    /* PutEnd without a client id. */
    kr.n_keys = 1;
    assert_int_equal(
        call(EGM_RPC_PUT_END, &kr.base, &egm__keys_reply__descriptor, (ProtobufCMessage **)&r),
        EGM_ERR_INVALID_ARG);

    /* Commit: log entries per key or none, and an entry written whole or
     * torn, not both (commit_seqs.h). */
    Egm__CommitRequest cr = EGM__COMMIT_REQUEST__INIT;
    uint64_t slab_ids[] = {1, 1}, offsets[] = {0, 4096}, whole[] = {1, 0}, torn[] = {0, 2};
    cr.client = &client;
    cr.n_keys = cr.n_sizes = cr.n_slab_ids = cr.n_offsets = 2;
    cr.keys = (char **)keys;
    cr.sizes = sizes;
    cr.slab_ids = slab_ids;
    cr.offsets = offsets;
    cr.n_log_seqs = 2;
    cr.log_seqs = whole;
    cr.n_torn_log_seqs = 1;
    cr.torn_log_seqs = torn;
    assert_int_equal(
        call(EGM_RPC_COMMIT, &cr.base, &egm__keys_reply__descriptor, (ProtobufCMessage **)&r),
        EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "torn_log_seqs: 1 values for 2 keys"));
    cr.n_torn_log_seqs = 2;
    torn[0] = 3;
    assert_int_equal(
        call(EGM_RPC_COMMIT, &cr.base, &egm__keys_reply__descriptor, (ProtobufCMessage **)&r),
        EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "key 0 names an entry in both"));

    /* MountSegment problems come back in the StatusReply, naming the field. */
    Egm__MountSegmentRequest mr = EGM__MOUNT_SEGMENT_REQUEST__INIT;
    Egm__StatusReply *sr;
    mr.client = &client;
    assert_int_equal(call(EGM_RPC_MOUNT_SEGMENT, &mr.base, &egm__status_reply__descriptor,
                          (ProtobufCMessage **)&sr),
                     EGM_OK);
    assert_int_equal(sr->status, EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(sr->error, "segment"));
    egm__pb_free(&sr->base);
    Egm__SegmentDesc d = EGM__SEGMENT_DESC__INIT;
    Egm__Id id = EGM__ID__INIT;
    egm__id_to_pb(egm__id_random(), &id);
    d.id = &id;
    d.name = "n";
    mr.segment = &d; /* size 0 */
    assert_int_equal(call(EGM_RPC_MOUNT_SEGMENT, &mr.base, &egm__status_reply__descriptor,
                          (ProtobufCMessage **)&sr),
                     EGM_OK);
    assert_int_equal(sr->status, EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(sr->error, "segment.size"));
    egm__pb_free(&sr->base);

    Egm__UnmountSegmentRequest ur = EGM__UNMOUNT_SEGMENT_REQUEST__INIT;
    ur.client = &client;
    ur.segment = &id;
    assert_int_equal(call(EGM_RPC_UNMOUNT_SEGMENT, &ur.base, &egm__status_reply__descriptor,
                          (ProtobufCMessage **)&sr),
                     EGM_OK);
    assert_int_equal(sr->status, EGM_ERR_SEGMENT_NOT_FOUND);
    egm__pb_free(&sr->base);
}

static Egm__PingReply *ping(uint64_t view)
{
    Egm__PingRequest req = EGM__PING_REQUEST__INIT;
    Egm__Id client = EGM__ID__INIT;
    Egm__PingReply *reply;

    egm__id_to_pb(me, &client);
    req.client = &client;
    req.view = view;
    req.host_id = "host-a";
    assert_int_equal(
        call(EGM_RPC_PING, &req.base, &egm__ping_reply__descriptor, (ProtobufCMessage **)&reply),
        EGM_OK);
    return reply;
}

static void test_ping_and_list(void **state)
{
    (void)state;
    Egm__PingReply *p = ping(0);
    assert_int_equal(p->status, EGM_OK);
    assert_int_equal(p->view, 0);
    assert_int_equal(p->n_retired, 0);
    assert_false(p->view_reset);
    assert_true(egm__id_equal(egm__id_from_pb(p->master_id), st.master_id));
    egm__pb_free(&p->base);

    egm_id_t s1 = mount(1 << 20, "s1");
    mount_by(egm__id_random(), 1 << 20, "s2"); /* another provider: two replicas */
    const char *keys[] = {"k1", "k2"};
    const uint64_t sizes[] = {1000, 64};
    egm__pb_free(&put_start(2, keys, sizes, 2)->base);

    Egm__ListSegmentsRequest lr = EGM__LIST_SEGMENTS_REQUEST__INIT;
    Egm__ListSegmentsReply *l;
    assert_int_equal(call(EGM_RPC_LIST_SEGMENTS, &lr.base, &egm__list_segments_reply__descriptor,
                          (ProtobufCMessage **)&l),
                     EGM_OK);
    assert_int_equal(l->status, EGM_OK);
    assert_int_equal(l->n_segments, 2);
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(l->segments[i]->objects, 2);
        assert_int_equal(l->segments[i]->used, 1024 + 64);
        assert_int_equal(l->segments[i]->desc->size, 1 << 20);
    }
    assert_int_equal(l->keys, 2);
    assert_int_equal(l->clients, 2);
    egm__pb_free(&l->base);

    /* Unmount retires s1: the next ping from view 0 names it. */
    Egm__UnmountSegmentRequest ur = EGM__UNMOUNT_SEGMENT_REQUEST__INIT;
    Egm__Id client = EGM__ID__INIT, id = EGM__ID__INIT;
    Egm__StatusReply *sr;
    egm__id_to_pb(me, &client);
    egm__id_to_pb(s1, &id);
    ur.client = &client;
    ur.segment = &id;
    assert_int_equal(call(EGM_RPC_UNMOUNT_SEGMENT, &ur.base, &egm__status_reply__descriptor,
                          (ProtobufCMessage **)&sr),
                     EGM_OK);
    assert_int_equal(sr->status, EGM_OK);
    egm__pb_free(&sr->base);
    p = ping(0);
    assert_int_equal(p->view, 1);
    assert_int_equal(p->n_retired, 1);
    assert_true(egm__id_equal(egm__id_from_pb(p->retired[0]), s1));
    egm__pb_free(&p->base);
    p = ping(1);
    assert_int_equal(p->n_retired, 0);
    egm__pb_free(&p->base);
    p = ping(5); /* a view this master never had */
    assert_true(p->view_reset);
    egm__pb_free(&p->base);

    /* Objects lost a replica but survive on s2. */
    Egm__KeysReply *r = keys_call(EGM_RPC_PUT_END, 2, keys, 0);
    egm__pb_free(&r->base);
    r = keys_call(EGM_RPC_GET_REPLICA_LIST, 2, keys, 0);
    assert_int_equal(r->results[0]->status, EGM_OK);
    assert_int_equal(r->results[0]->n_replicas, 1);
    assert_int_equal(r->n_segments, 1);
    assert_false(egm__id_equal(egm__id_from_pb(r->segments[0]->id), s1));
    egm__pb_free(&r->base);

    /* A silent client expires on the tick (client_ttl 10 ms here). */
    fake_now += 10;
    egm__master_state_tick(&st, fake_now);
    assert_int_equal(egm__segment_table_count(st.segments), 0);
    r = keys_call(EGM_RPC_EXIST_KEY, 2, keys, 0);
    assert_int_equal(r->results[0]->status, EGM_ERR_NOT_FOUND);
    egm__pb_free(&r->base);
}

/* A list mount of n segments (ids[i], size 4096 unless sizes says otherwise);
 * answers the reply status. */
#define LIST_MAX 8
static egm_status_t mount_list(egm_id_t client_id, size_t n, const egm_id_t *ids,
                               const uint64_t *sizes, int also_single)
{
    Egm__MountSegmentRequest req = EGM__MOUNT_SEGMENT_REQUEST__INIT;
    Egm__SegmentDesc d[LIST_MAX], *dp[LIST_MAX];
    Egm__Id client = EGM__ID__INIT, id[LIST_MAX];
    char names[LIST_MAX][32];
    Egm__StatusReply *reply;

    egm__id_to_pb(client_id, &client);
    for (size_t i = 0; i < n; i++) {
        egm__segment_desc__init(&d[i]);
        egm__id_to_pb(ids[i], &id[i]);
        snprintf(names[i], sizeof(names[i]), "seg%zu", i);
        d[i].id = &id[i];
        d[i].size = sizes ? sizes[i] : 4096;
        d[i].name = names[i];
        d[i].host_id = "host-a";
        d[i].handle_kind = EGM__HANDLE_KIND__HANDLE_MEMFD;
        dp[i] = &d[i];
    }
    req.client = &client;
    req.n_segments = n;
    req.segments = dp;
    if (also_single)
        req.segment = &d[0];
    assert_int_equal(call(EGM_RPC_MOUNT_SEGMENT, &req.base, &egm__status_reply__descriptor,
                          (ProtobufCMessage **)&reply),
                     EGM_OK);
    egm_status_t status = reply->status;
    egm__pb_free(&reply->base);
    return status;
}

static egm_status_t unmount_list(egm_id_t client_id, size_t n, const egm_id_t *ids)
{
    Egm__UnmountSegmentRequest req = EGM__UNMOUNT_SEGMENT_REQUEST__INIT;
    Egm__Id client = EGM__ID__INIT, id[LIST_MAX], *ip[LIST_MAX];
    Egm__StatusReply *reply;

    egm__id_to_pb(client_id, &client);
    for (size_t i = 0; i < n; i++) {
        egm__id_to_pb(ids[i], &id[i]);
        ip[i] = &id[i];
    }
    req.client = &client;
    req.n_segments = n;
    req.segments = ip;
    assert_int_equal(call(EGM_RPC_UNMOUNT_SEGMENT, &req.base, &egm__status_reply__descriptor,
                          (ProtobufCMessage **)&reply),
                     EGM_OK);
    egm_status_t status = reply->status;
    egm__pb_free(&reply->base);
    return status;
}

/* A pool's segments are mounted all or none; a refused list changes nothing
 * (no id retired, no view change), so the same list can be retried. */
static void test_mount_list_all_or_none(void **state)
{
    (void)state;
    egm_id_t ids[4] = {egm__id_random(), egm__id_random(), egm__id_random(), egm__id_random()};
    uint64_t view = egm__segment_table_view(st.segments);

    /* Duplicate ids within the list; a bad descriptor at the end; both forms. */
    egm_id_t dup[3] = {ids[0], ids[1], ids[0]};
    assert_int_equal(mount_list(me, 3, dup, NULL, 0), EGM_ERR_INVALID_ARG);
    assert_int_equal(mount_list(me, 4, ids, (const uint64_t[]){4096, 4096, 4096, 1}, 0),
                     EGM_ERR_INVALID_ARG);
    assert_int_equal(mount_list(me, 2, ids, NULL, 1), EGM_ERR_INVALID_ARG);
    assert_int_equal(egm__segment_table_count(st.segments), 0);
    assert_int_equal(egm__segment_table_view(st.segments), view);

    /* The same ids now mount, all four at once. */
    assert_int_equal(mount_list(me, 4, ids, NULL, 0), EGM_OK);
    assert_int_equal(egm__segment_table_count(st.segments), 4);
    /* A list naming one mounted id is refused whole. */
    egm_id_t again[2] = {egm__id_random(), ids[2]};
    assert_int_equal(mount_list(me, 2, again, NULL, 0), EGM_ERR_SEGMENT_EXISTS);
    assert_int_equal(egm__segment_table_count(st.segments), 4);

    /* Unmount lists: another client's refused whole; a missing id reported
     * after the others are gone. */
    egm_id_t other = egm__id_random();
    assert_int_equal(unmount_list(other, 2, ids), EGM_ERR_PERMISSION);
    assert_int_equal(egm__segment_table_count(st.segments), 4);
    egm_id_t some[3] = {ids[0], egm__id_random(), ids[1]};
    assert_int_equal(unmount_list(me, 3, some), EGM_ERR_SEGMENT_NOT_FOUND);
    assert_int_equal(egm__segment_table_count(st.segments), 2);
    assert_int_equal(unmount_list(me, 2, &ids[2]), EGM_OK);
    assert_int_equal(egm__segment_table_count(st.segments), 0);
    /* Retired now: ids are never reused. */
    assert_int_equal(mount_list(me, 1, ids, NULL, 0), EGM_ERR_SEGMENT_EXISTS);
}

/* A ping from `who`; leaving: its last one (egm_client_destroy). */
static Egm__PingReply *ping_as(egm_id_t who, int leaving)
{
    Egm__PingRequest req = EGM__PING_REQUEST__INIT;
    Egm__Id client = EGM__ID__INIT;
    Egm__PingReply *reply;

    egm__id_to_pb(who, &client);
    req.client = &client;
    req.leaving = leaving != 0;
    assert_int_equal(
        call(EGM_RPC_PING, &req.base, &egm__ping_reply__descriptor, (ProtobufCMessage **)&reply),
        EGM_OK);
    assert_int_equal(reply->status, EGM_OK);
    return reply;
}

/* A leaving ping unregisters the client at once, the clock standing still
 * (no client_ttl): one without segments, and one that still has a segment and
 * objects (unmounted, its objects dropped, as expiry does) under the state
 * lock, which it releases as it took it. */
static void test_leaving_ping_unregisters(void **state)
{
    (void)state;
    egm_id_t you = egm__id_random();
    pthread_rwlock_t lock;

    egm__pb_free(&ping_as(me, 0)->base);
    egm__pb_free(&ping_as(you, 0)->base);
    assert_int_equal(egm__liveness_client_count(st.liveness), 2);
    egm__pb_free(&ping_as(you, 1)->base);
    assert_int_equal(egm__liveness_client_count(st.liveness), 1);
    assert_false(egm__liveness_is_known(st.liveness, you));
    egm__pb_free(&ping_as(you, 1)->base); /* again, or never registered: nothing to do */
    assert_int_equal(egm__liveness_client_count(st.liveness), 1);

    mount(1 << 20, "mine");
    const char *keys[] = {"done", "pending"};
    const uint64_t sizes[] = {1000, 64};
    egm__pb_free(&put_start(2, keys, sizes, 1)->base);
    egm__pb_free(&keys_call(EGM_RPC_PUT_END, 1, keys, 0)->base);
    assert_int_equal(egm__master_lock_init(&lock), 0);
    st.lock = &lock; /* as the master process holds it: a leaving Ping exclusive */
    Egm__PingReply *p = ping_as(me, 1);
    st.lock = NULL;
    assert_int_equal(p->view, 1); /* its segment retired */
    egm__pb_free(&p->base);
    assert_int_equal(pthread_rwlock_trywrlock(&lock), 0); /* released as it was taken */
    pthread_rwlock_unlock(&lock);
    pthread_rwlock_destroy(&lock);
    assert_int_equal(egm__liveness_client_count(st.liveness), 0);
    assert_int_equal(egm__segment_table_count(st.segments), 0);
    Egm__KeysReply *r = keys_call(EGM_RPC_EXIST_KEY, 2, keys, 0);
    assert_int_equal(r->results[0]->status, EGM_ERR_NOT_FOUND);
    assert_int_equal(r->results[1]->status, EGM_ERR_NOT_FOUND);
    egm__pb_free(&r->base);
}

/* The command table: a row for every request type of the rpc command list,
 * none for session frames or unknown types; the lock modes docs/master.md
 * ("Concurrency") lists. */
/* A force remove's answer says how long its caller waits (docs/consistency.md):
 * until every location cached of a force-removed object has run out (its
 * latest lease grant + location_cache_ms), for this object or any force-removed
 * earlier; 0 for objects never read; a plain remove and a get never wait. */
static void test_force_remove_wait(void **state)
{
    (void)state;
    st.location_cache_ms = 500;
    mount(1 << 20, "seg");
    const char *keys[] = {"read", "unread"};
    uint64_t sizes[] = {100, 100};
    Egm__KeysReply *r = put_start(2, keys, sizes, 1);
    egm__pb_free(&r->base);
    r = keys_call(EGM_RPC_PUT_END, 2, keys, 0);
    egm__pb_free(&r->base);

    r = keys_call(EGM_RPC_GET_REPLICA_LIST, 1, keys, 0); /* grants at 1000 */
    assert_int_equal(r->location_cache_ms, 500);
    assert_int_equal(r->wait_ms, 0);
    egm__pb_free(&r->base);
    fake_now = 1100;
    r = keys_call(EGM_RPC_REMOVE, 1, &keys[1], 1); /* never read: nothing to wait for */
    assert_int_equal(r->results[0]->status, EGM_OK);
    assert_int_equal(r->wait_ms, 0);
    egm__pb_free(&r->base);
    r = keys_call(EGM_RPC_REMOVE, 1, keys, 0); /* plain: refused under the lease, no wait */
    assert_int_equal(r->results[0]->status, EGM_ERR_HAS_LEASE);
    assert_int_equal(r->wait_ms, 0);
    egm__pb_free(&r->base);
    r = keys_call(EGM_RPC_REMOVE, 1, keys, 1); /* read at 1000: until 1500 */
    assert_int_equal(r->results[0]->status, EGM_OK);
    assert_int_equal(r->wait_ms, 400);
    egm__pb_free(&r->base);
    fake_now = 1300;
    r = keys_call(EGM_RPC_REMOVE, 1, keys, 1); /* gone, yet the first remover's wait holds */
    assert_int_equal(r->results[0]->status, EGM_ERR_NOT_FOUND);
    assert_int_equal(r->wait_ms, 200);
    egm__pb_free(&r->base);
    fake_now = 1500;
    r = keys_call(EGM_RPC_REMOVE, 1, keys, 1);
    assert_int_equal(r->wait_ms, 0);
    egm__pb_free(&r->base);
    st.location_cache_ms = 0;
}

static void test_command_table(void **state)
{
    (void)state;
    for (uint16_t t = 1; t <= EGM_RPC_TYPE_MAX; t++) {
        const egm_master_command_t *cmd = egm__master_command(t);
        assert_non_null(cmd);
        assert_int_equal(cmd->type, t);
        assert_non_null(cmd->handler);
    }
    const uint16_t exclusive[] = {EGM_RPC_MOUNT_SEGMENT, EGM_RPC_UNMOUNT_SEGMENT,
                                  EGM_RPC_REMOVE_ALL, EGM_RPC_LIST_SEGMENTS};
    size_t n_exclusive = 0;
    for (uint16_t t = 1; t <= EGM_RPC_TYPE_MAX; t++) {
        int is_exclusive = 0;
        for (size_t i = 0; i < sizeof(exclusive) / sizeof(exclusive[0]); i++)
            is_exclusive |= exclusive[i] == t;
        assert_int_equal(egm__master_command(t)->lock,
                         is_exclusive ? EGM_MASTER_LOCK_EXCLUSIVE : EGM_MASTER_LOCK_SHARED);
        n_exclusive += is_exclusive;
    }
    assert_int_equal(n_exclusive, 4);
    /* Only Ping's mode depends on its request: exclusive when the client is
     * leaving (unregistering it may unmount its segments), else shared. */
    for (uint16_t t = 1; t <= EGM_RPC_TYPE_MAX; t++)
        if (t != EGM_RPC_PING)
            assert_null(egm__master_command(t)->lock_for);
    const egm_master_command_t *ping = egm__master_command(EGM_RPC_PING);
    Egm__PingRequest ping_req = EGM__PING_REQUEST__INIT;
    assert_int_equal(egm__master_command_lock(ping, &ping_req.base), EGM_MASTER_LOCK_SHARED);
    ping_req.leaving = 1;
    assert_int_equal(egm__master_command_lock(ping, &ping_req.base), EGM_MASTER_LOCK_EXCLUSIVE);
    Egm__ListSegmentsRequest list_req = EGM__LIST_SEGMENTS_REQUEST__INIT;
    assert_int_equal(
        egm__master_command_lock(egm__master_command(EGM_RPC_LIST_SEGMENTS), &list_req.base),
        EGM_MASTER_LOCK_EXCLUSIVE);
    const uint16_t none[] = {0, EGM_RPC_TYPE_MAX + 1, EGM_RPC_AUTH, EGM_RPC_HELLO, 999};
    for (size_t i = 0; i < sizeof(none) / sizeof(none[0]); i++) {
        egm_rpc_reply_t reply = {(uint8_t *)1, 1};
        assert_null(egm__master_command(none[i]));
        assert_int_equal(egm__master_handle(&st, none[i], NULL, 0, &reply), EGM_ERR_NOT_SUPPORTED);
        assert_null(reply.buf);
        assert_non_null(strstr(egm_last_error(), "unknown request type"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_put_get_reply_contents, setup, teardown),
        cmocka_unit_test_setup_teardown(test_two_replicas_name_two_segments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_malformed_requests, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ping_and_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_mount_list_all_or_none, setup, teardown),
        cmocka_unit_test_setup_teardown(test_leaving_ping_unregisters, setup, teardown),
        cmocka_unit_test_setup_teardown(test_force_remove_wait, setup, teardown),
        cmocka_unit_test_setup_teardown(test_command_table, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
