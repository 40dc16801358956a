/* Writes the seed corpora of the fuzz targets, fuzz/corpus/<target>/<name>,
 * from valid messages (and a few near misses) built with the project's own
 * encoders, so the seeds follow the schema. Deterministic: running it again
 * rewrites the same bytes.
 *   build/fuzz/fuzz_make_corpus fuzz/corpus */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common/alloc.h"
#include "common/config_int.h"
#include "common/wire.h"
#include "fuzz.h"
#include "rpc/frame.h"
#include "rpc/proto_util.h"
#include "te/te_int.h"

static const char *root;
static size_t written;

static void put_file(const char *target, const char *name, const void *data, size_t len)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", root, target);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
        perror(path);
        exit(1);
    }
    snprintf(path, sizeof(path), "%s/%s/%s", root, target, name);
    FILE *f = fopen(path, "wb");
    if (f == NULL || (len > 0 && fwrite(data, 1, len, f) != len) || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
    written++;
}

/* ---- a growing byte buffer ------------------------------------------------ */
typedef struct {
    uint8_t data[65536];
    size_t len;
} buf_t;

static void add(buf_t *b, const void *p, size_t n)
{
    if (b->len + n > sizeof(b->data)) {
        fprintf(stderr, "make_corpus: seed too large\n");
        exit(1);
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

static void add_u8(buf_t *b, uint8_t v)
{
    add(b, &v, 1);
}

static void add_msg(buf_t *b, const ProtobufCMessage *msg)
{
    uint8_t *packed;
    size_t len;
    if (egm__pb_pack(msg, &packed, &len) != EGM_OK)
        exit(1);
    add(b, packed, len);
    egm_free(packed);
}

/* ---- rpc_frame -------------------------------------------------------------- */
static void frame_seed(const char *name, uint8_t version, uint8_t flags, uint16_t type,
                       uint32_t length, uint32_t max, int with_max)
{
    egm_frame_header_t h = {version, flags, type, 0x0102030405060708ull + type, length};
    uint8_t out[EGM_FRAME_HEADER_SIZE + 4];
    egm__frame_encode_header(&h, out);
    egm__wire_put_u32(out + EGM_FRAME_HEADER_SIZE, max);
    put_file("rpc_frame", name, out, with_max ? sizeof(out) : EGM_FRAME_HEADER_SIZE);
}

static void make_rpc_frame(void)
{
    char name[64];
    for (uint16_t t = 1; t <= EGM_RPC_TYPE_MAX; t++) {
        snprintf(name, sizeof(name), "request_type%02u", (unsigned)t);
        frame_seed(name, EGM_RPC_VERSION, 0, t, 40u * t, 0, 0);
        snprintf(name, sizeof(name), "reply_type%02u", (unsigned)t);
        frame_seed(name, EGM_RPC_VERSION, EGM_FRAME_REPLY, t, 100u * t, 1u << 20, 1);
    }
    frame_seed("error_reply", EGM_RPC_VERSION, EGM_FRAME_REPLY | EGM_FRAME_ERROR, 3, 17, 0, 0);
    frame_seed("empty_ping", EGM_RPC_VERSION, 0, EGM_RPC_PING, 0, 0, 0);
    frame_seed("at_limit", EGM_RPC_VERSION, 0, EGM_RPC_PUT_START, 4096, 4096, 1);
    frame_seed("over_limit", EGM_RPC_VERSION, 0, EGM_RPC_PUT_START, 4097, 4096, 1);
    frame_seed("version2", 2, 0, EGM_RPC_EXIST_KEY, 16, 0, 0);
    frame_seed("unknown_type", EGM_RPC_VERSION, 0, 999, 8, 0, 0);
    uint8_t bad[EGM_FRAME_HEADER_SIZE];
    egm_frame_header_t h = {EGM_RPC_VERSION, 0, EGM_RPC_PING, 1, 0};
    egm__frame_encode_header(&h, bad);
    bad[0] ^= 0xff;
    put_file("rpc_frame", "bad_magic", bad, sizeof(bad));
    bad[0] ^= 0xff;
    bad[22] = 1;
    put_file("rpc_frame", "reserved_set", bad, sizeof(bad));
    put_file("rpc_frame", "http_get", "GET / HTTP/1.1\r\nHost: x\r\n\r\n", 27);
}

/* ---- frame_reader: streams of frames, cut in reads ----------------------------- */
static size_t add_frame(uint8_t *out, uint8_t flags, uint16_t type, uint32_t length)
{
    egm_frame_header_t h = {EGM_RPC_VERSION, flags, type, 0x1000u + type, length};
    egm__frame_encode_header(&h, out);
    for (uint32_t k = 0; k < length; k++)
        out[EGM_FRAME_HEADER_SIZE + k] = (uint8_t)(type + k);
    return EGM_FRAME_HEADER_SIZE + length;
}

static void reader_seed(const char *name, uint8_t seed, uint8_t mode, uint16_t max, uint8_t refused,
                        const uint8_t *stream, size_t len)
{
    uint8_t out[1024];
    out[0] = seed;
    out[1] = mode;
    egm__wire_put_u16(out + 2, max);
    out[4] = refused;
    memcpy(out + 5, stream, len);
    put_file("frame_reader", name, out, 5 + len);
}

static void make_frame_reader(void)
{
    uint8_t stream[900];
    size_t len = 0;
    len += add_frame(stream + len, 0, EGM_RPC_PING, 0);
    len += add_frame(stream + len, 0, EGM_RPC_PUT_START, 40);
    len += add_frame(stream + len, EGM_FRAME_REPLY, EGM_RPC_GET_REPLICA_LIST, 300);
    len += add_frame(stream + len, EGM_FRAME_REPLY | EGM_FRAME_ERROR, EGM_RPC_AUTH, 17);
    reader_seed("whole", 1, 0, 4096, 0, stream, len);
    reader_seed("byte_by_byte", 2, 1, 4096, 0, stream, len);
    reader_seed("small_cuts", 3, 2, 4096, 0, stream, len);
    reader_seed("space_commit", 4, 2 | 4, 4096, 0, stream, len);
    reader_seed("check_refuses", 5, 2 | 8, 4096, EGM_RPC_GET_REPLICA_LIST, stream, len);
    reader_seed("over_limit", 6, 2, 100, 0, stream, len);
    reader_seed("partial_end", 7, 2, 4096, 0, stream, len - 5);
    uint8_t bad[sizeof(stream)];
    memcpy(bad, stream, len);
    bad[EGM_FRAME_HEADER_SIZE] ^= 0xff; /* the second frame's magic */
    reader_seed("bad_magic_second", 8, 2, 4096, 0, bad, len);
}

/* ---- master_rpc: sequences of calls ------------------------------------------ */
static const egm_id_t client_a = {0xaaaa, 1}, client_b = {0xbbbb, 2};

static void call(buf_t *b, uint8_t op, const ProtobufCMessage *msg)
{
    uint8_t *packed = NULL;
    size_t len = 0;
    if (msg != NULL && egm__pb_pack(msg, &packed, &len) != EGM_OK)
        exit(1);
    add_u8(b, op);
    add_u8(b, (uint8_t)len);
    add_u8(b, (uint8_t)(len >> 8));
    add(b, packed, len);
    egm_free(packed);
}

typedef struct {
    egm_id_t id, owner;
    uint64_t size;
    const char *name, *host, *tcp, *shm;
    int kind;
} seg_t;

static void fill_desc(Egm__SegmentDesc *d, Egm__Id *ids, const seg_t *s)
{
    static uint8_t fabric[64] = {1, 2, 3, 4};
    egm__segment_desc__init(d);
    egm__id_to_pb(s->id, &ids[0]);
    egm__id_to_pb(s->owner, &ids[1]);
    d->id = &ids[0];
    d->owner = &ids[1];
    d->size = s->size;
    d->name = (char *)s->name;
    d->host_id = (char *)s->host;
    d->tcp_endpoint = (char *)s->tcp;
    d->shm_socket = (char *)s->shm;
    d->handle_kind = (Egm__HandleKind)s->kind;
    if (s->kind == EGM__HANDLE_KIND__HANDLE_FABRIC) {
        d->fabric_handle.data = fabric;
        d->fabric_handle.len = sizeof(fabric);
    }
}

static seg_t seg(uint64_t n, egm_id_t owner, uint64_t size, int kind)
{
    static char names[64][32];
    snprintf(names[n % 64], sizeof(names[0]), "host-a:%llu/%llu", (unsigned long long)owner.lo,
             (unsigned long long)n);
    return (seg_t){{0x5e6, n},       owner,           size, names[n % 64], "host-a",
                   "127.0.0.1:7000", "@egmstore-1-0", kind};
}

static void mount(buf_t *b, egm_id_t client, const seg_t *segs, size_t n, int as_list)
{
    Egm__MountSegmentRequest req = EGM__MOUNT_SEGMENT_REQUEST__INIT;
    Egm__SegmentDesc descs[8], *ptrs[8];
    Egm__Id ids[8][2], cid;
    egm__id_to_pb(client, &cid);
    req.client = &cid;
    for (size_t i = 0; i < n; i++) {
        fill_desc(&descs[i], ids[i], &segs[i]);
        ptrs[i] = &descs[i];
    }
    if (as_list) {
        req.n_segments = n;
        req.segments = ptrs;
    } else {
        req.segment = ptrs[0];
    }
    call(b, EGM_RPC_MOUNT_SEGMENT, &req.base);
}

static void unmount(buf_t *b, egm_id_t client, const seg_t *segs, size_t n, int as_list)
{
    Egm__UnmountSegmentRequest req = EGM__UNMOUNT_SEGMENT_REQUEST__INIT;
    Egm__Id cid, ids[8], *ptrs[8];
    egm__id_to_pb(client, &cid);
    req.client = &cid;
    for (size_t i = 0; i < n; i++) {
        egm__id_to_pb(segs[i].id, &ids[i]);
        ptrs[i] = &ids[i];
    }
    if (as_list) {
        req.n_segments = n;
        req.segments = ptrs;
    } else {
        req.segment = ptrs[0];
    }
    call(b, EGM_RPC_UNMOUNT_SEGMENT, &req.base);
}

static void put_start(buf_t *b, egm_id_t client, size_t n, const char **keys, const uint64_t *sizes,
                      uint32_t replicas, int soft, int hard, const char *preferred)
{
    Egm__PutStartRequest req = EGM__PUT_START_REQUEST__INIT;
    Egm__ReplicateConfig cfg = EGM__REPLICATE_CONFIG__INIT;
    Egm__Id cid;
    char *pref[1] = {(char *)preferred};
    egm__id_to_pb(client, &cid);
    req.client = &cid;
    req.n_keys = n;
    req.keys = (char **)keys;
    req.n_sizes = n;
    req.sizes = (uint64_t *)sizes;
    cfg.replica_num = replicas;
    cfg.with_soft_pin = soft;
    cfg.with_hard_pin = hard;
    if (preferred != NULL) {
        cfg.n_preferred_segments = 1;
        cfg.preferred_segments = pref;
    }
    req.config = &cfg;
    call(b, EGM_RPC_PUT_START, &req.base);
}

static void keys(buf_t *b, uint8_t op, egm_id_t client, size_t n, const char **k, int force)
{
    Egm__KeysRequest req = EGM__KEYS_REQUEST__INIT;
    Egm__Id cid;
    egm__id_to_pb(client, &cid);
    req.client = &cid;
    req.n_keys = n;
    req.keys = (char **)k;
    req.force = force;
    call(b, op, &req.base);
}

static void ping(buf_t *b, uint8_t op, egm_id_t client, uint64_t view, const char *host)
{
    Egm__PingRequest req = EGM__PING_REQUEST__INIT;
    Egm__Id cid;
    egm__id_to_pb(client, &cid);
    req.client = &cid;
    req.view = view;
    req.host_id = (char *)host;
    call(b, op, &req.base);
}

static void list(buf_t *b, egm_id_t client)
{
    Egm__ListSegmentsRequest req = EGM__LIST_SEGMENTS_REQUEST__INIT;
    Egm__Id cid;
    egm__id_to_pb(client, &cid);
    req.client = &cid;
    call(b, EGM_RPC_LIST_SEGMENTS, &req.base);
}

static void stat_key(buf_t *b, egm_id_t client, const char *key)
{
    Egm__StatKeyRequest req = EGM__STAT_KEY_REQUEST__INIT;
    Egm__Id cid;
    egm__id_to_pb(client, &cid);
    req.client = &cid;
    req.key = (char *)key;
    call(b, EGM_RPC_STAT_KEY, &req.base);
}

static void remove_all(buf_t *b, egm_id_t client, int force)
{
    Egm__RemoveAllRequest req = EGM__REMOVE_ALL_REQUEST__INIT;
    Egm__Id cid;
    egm__id_to_pb(client, &cid);
    req.client = &cid;
    req.force = force;
    call(b, EGM_RPC_REMOVE_ALL, &req.base);
}

#define TICK(secs) ((uint8_t)(0x80 | (((secs)-1) & 7) << 4))

/* A call of a type above 14: op 0 (with its tick bits), then the type byte. */
static void call_wide(buf_t *b, uint8_t tick, uint8_t type, const ProtobufCMessage *msg)
{
    add_u8(b, tick);
    call(b, type, msg);
}

/* Re-replication: objects on providers a and b, a's segment goes, a grant
 * (the queue holds them; the target is c's segment) and a commit of tasks
 * the corpus cannot know (refused), then a tick past the lease. */
static void make_master_rpc_repair(void)
{
    static const egm_id_t client_c = {0xcccc, 3};
    const char *k4[] = {"alpha", "beta", "gamma", "delta"};
    const uint64_t s4[] = {1000, 2000, 3000, 4000};
    seg_t a = seg(10, client_a, 1 << 20, EGM__HANDLE_KIND__HANDLE_MEMFD);
    seg_t bb = seg(11, client_b, 1 << 20, EGM__HANDLE_KIND__HANDLE_MEMFD);
    seg_t c = seg(12, client_c, 1 << 20, EGM__HANDLE_KIND__HANDLE_MEMFD);
    buf_t *b = calloc(1, sizeof(*b));
    Egm__Id cid = EGM__ID__INIT, sid = EGM__ID__INIT;

    mount(b, client_a, &a, 1, 0);
    mount(b, client_b, &bb, 1, 0);
    put_start(b, client_a, 4, k4, s4, 2, 0, 0, NULL);
    keys(b, EGM_RPC_PUT_END, client_a, 4, k4, 0);
    mount(b, client_c, &c, 1, 0);
    unmount(b, client_a, &a, 1, 0);
    Egm__RepairGrantRequest grant = EGM__REPAIR_GRANT_REQUEST__INIT;
    cid.hi = client_c.hi;
    cid.lo = client_c.lo;
    grant.client = &cid;
    grant.max_keys = 2;
    call_wide(b, 0, EGM_RPC_REPAIR_GRANT, &grant.base);
    Egm__RepairCommitRequest commit = EGM__REPAIR_COMMIT_REQUEST__INIT;
    Egm__RepairTask task = EGM__REPAIR_TASK__INIT, *tasks[1] = {&task};
    Egm__Replica src = EGM__REPLICA__INIT, dst = EGM__REPLICA__INIT;
    protobuf_c_boolean copied[1] = {1};
    sid.hi = bb.id.hi;
    sid.lo = bb.id.lo;
    src.segment = &sid;
    src.length = dst.length = 1000;
    dst.segment = &sid;
    task.key = (char *)"alpha";
    task.size = 1000;
    task.source = &src;
    task.target = &dst;
    commit.client = &cid;
    commit.n_tasks = 1;
    commit.tasks = tasks;
    commit.n_copied = 1;
    commit.copied = copied;
    call_wide(b, 0, EGM_RPC_REPAIR_COMMIT, &commit.base);
    grant.max_keys = 0;
    call_wide(b, TICK(8), EGM_RPC_REPAIR_GRANT, &grant.base);
    put_file("master_rpc", "repair_after_drop", b->data, b->len);
    free(b);
}

/* A slab granted, then Commits in it naming log entries whole and torn
 * (commit_seqs.h), and one naming an entry in both (refused). */
static void make_master_rpc_slab_commit(void)
{
    const char *k2[] = {"alpha", "beta"};
    uint64_t s2[] = {1000, 2000}, ids[] = {1, 1}, offsets[] = {0, 4096};
    uint64_t whole[] = {1, 0}, torn[] = {0, 2};
    seg_t a = seg(20, client_a, 1 << 20, EGM__HANDLE_KIND__HANDLE_MEMFD);
    buf_t *b = calloc(1, sizeof(*b));
    Egm__Id cid = EGM__ID__INIT;

    mount(b, client_a, &a, 1, 0);
    egm__id_to_pb(client_a, &cid);
    Egm__SlabGrantRequest grant = EGM__SLAB_GRANT_REQUEST__INIT;
    grant.client = &cid;
    grant.size = grant.min_size = 1 << 16;
    grant.log = 1;
    grant.place_bound = 1;
    call(b, EGM_RPC_SLAB_GRANT, &grant.base);
    Egm__CommitRequest commit = EGM__COMMIT_REQUEST__INIT;
    commit.client = &cid;
    commit.n_keys = commit.n_sizes = commit.n_slab_ids = commit.n_offsets = 2;
    commit.keys = (char **)k2;
    commit.sizes = s2;
    commit.slab_ids = ids;
    commit.offsets = offsets;
    commit.n_log_seqs = commit.n_torn_log_seqs = 2;
    commit.log_seqs = whole;
    commit.torn_log_seqs = torn;
    call(b, EGM_RPC_COMMIT, &commit.base);
    torn[0] = 1;
    call(b, EGM_RPC_COMMIT, &commit.base);
    put_file("master_rpc", "slab_commit_torn", b->data, b->len);
    free(b);
}

static void make_master_rpc(void)
{
    const char *k2[] = {"alpha", "beta"};
    const char *k4[] = {"alpha", "beta", "gamma", "delta"};
    const char *bad_keys[] = {"", "ok"};
    const uint64_t s2[] = {100, 4096}, s4[] = {1000, 2000, 3000, 4000};
    const uint64_t big[] = {1ull << 20, 1ull << 20, 1ull << 20, 1ull << 20};
    seg_t one = seg(1, client_a, 1 << 20, EGM__HANDLE_KIND__HANDLE_MEMFD);
    seg_t three[3] = {seg(2, client_a, 1 << 16, EGM__HANDLE_KIND__HANDLE_MEMFD),
                      seg(3, client_a, 1 << 16, EGM__HANDLE_KIND__HANDLE_POSIX_FD),
                      seg(4, client_a, 1 << 16, EGM__HANDLE_KIND__HANDLE_FABRIC)};
    seg_t small = seg(5, client_b, 2 << 20, EGM__HANDLE_KIND__HANDLE_NONE);
    buf_t *b = calloc(1, sizeof(*b));
    char name[64];

    /* every type alone, empty payload (a valid message of all defaults); those
     * above 14 after an op of type 0 */
    for (uint8_t t = 0; t <= EGM_RPC_TYPE_MAX + 1; t++) {
        b->len = 0;
        if (t == 0 || t > 14)
            add_u8(b, 0);
        call(b, t, NULL);
        snprintf(name, sizeof(name), "empty_type%02u", (unsigned)t);
        put_file("master_rpc", name, b->data, b->len);
    }

    b->len = 0; /* the life of two objects */
    mount(b, client_a, &one, 1, 0);
    put_start(b, client_a, 2, k2, s2, 1, 0, 0, NULL);
    keys(b, EGM_RPC_GET_REPLICA_LIST, client_a, 2, k2, 0);
    keys(b, EGM_RPC_PUT_END, client_a, 2, k2, 0);
    keys(b, EGM_RPC_GET_REPLICA_LIST, client_a, 2, k2, 0);
    keys(b, EGM_RPC_EXIST_KEY, client_a, 2, k2, 0);
    stat_key(b, client_a, "alpha");
    keys(b, EGM_RPC_REMOVE, client_a, 2, k2, 0);
    keys(b, EGM_RPC_REMOVE, client_a, 2, k2, 1);
    list(b, client_a);
    put_file("master_rpc", "put_get_remove", b->data, b->len);

    b->len = 0; /* a pool as one list, replicas over it, then withdrawn */
    mount(b, client_a, three, 3, 1);
    put_start(b, client_a, 4, k4, s4, 3, 0, 0, NULL);
    keys(b, EGM_RPC_PUT_END, client_a, 4, k4, 0);
    keys(b, EGM_RPC_GET_REPLICA_LIST, client_b, 4, k4, 0);
    ping(b, EGM_RPC_PING, client_b, 0, "host-b");
    unmount(b, client_a, three, 3, 1);
    ping(b, EGM_RPC_PING, client_b, 1, "host-b");
    keys(b, EGM_RPC_GET_REPLICA_LIST, client_b, 4, k4, 0);
    list(b, client_b);
    put_file("master_rpc", "pool_list_mount_unmount", b->data, b->len);

    b->len = 0; /* PutStart never ended, then revoked, then swept */
    mount(b, client_a, &one, 1, 0);
    put_start(b, client_a, 2, k2, s2, 1, 0, 0, NULL);
    keys(b, EGM_RPC_PUT_REVOKE, client_a, 1, k2, 0);
    ping(b, TICK(5) | EGM_RPC_PING, client_a, 0, "host-a");
    keys(b, TICK(8) | EGM_RPC_EXIST_KEY, client_a, 2, k2, 0);
    put_file("master_rpc", "revoke_and_sweep", b->data, b->len);

    b->len = 0; /* a client that stops pinging: its segments go */
    mount(b, client_b, &small, 1, 0);
    put_start(b, client_a, 4, k4, s4, 1, 0, 0, NULL);
    keys(b, EGM_RPC_PUT_END, client_a, 4, k4, 0);
    ping(b, TICK(8) | EGM_RPC_PING, client_a, 0, "host-a");
    keys(b, EGM_RPC_GET_REPLICA_LIST, client_a, 4, k4, 0);
    list(b, client_a);
    put_file("master_rpc", "client_expiry", b->data, b->len);

    for (int placement = 0; placement < 3; placement++) {
        static const uint8_t settings[3][3] = {{0, 255, 25}, {1, 200, 50}, {2, 128, 128}};
        b->len = 0; /* a placement strategy, a watermark that evicts, two providers */
        add_u8(b, 15);
        add_u8(b, 3);
        add_u8(b, 0);
        add(b, settings[placement], 3);
        mount(b, client_b, &small, 1, 0);
        mount(b, client_a, three, 3, 1);
        ping(b, EGM_RPC_PING, client_a, 0, "host-a");
        put_start(b, client_a, 4, k4, s4, 2, 0, 0, NULL);
        keys(b, EGM_RPC_PUT_END, client_a, 4, k4, 0);
        put_start(b, client_a, 4, k4, big, 1, 0, 0, NULL);
        keys(b, TICK(1) | EGM_RPC_GET_REPLICA_LIST, client_a, 4, k4, 0);
        snprintf(name, sizeof(name), "settings_placement%d", placement);
        put_file("master_rpc", name, b->data, b->len);
    }

    b->len = 0; /* a full pool: eviction, pins */
    mount(b, client_b, &small, 1, 0);
    put_start(b, client_a, 1, k4, big, 1, 0, 1, NULL);
    put_start(b, client_a, 1, k4 + 1, big + 1, 1, 1, 0, NULL);
    keys(b, EGM_RPC_PUT_END, client_a, 4, k4, 0);
    put_start(b, client_a, 2, k4 + 2, big + 2, 1, 0, 0, "host-b:2/5");
    keys(b, TICK(2) | EGM_RPC_PUT_END, client_a, 4, k4, 0);
    stat_key(b, client_a, "beta");
    remove_all(b, client_a, 0);
    remove_all(b, client_a, 1);
    put_file("master_rpc", "full_pool_pins", b->data, b->len);

    b->len = 0; /* refusals: bad keys, replica counts, someone else's segment */
    mount(b, client_a, &one, 1, 0);
    mount(b, client_a, &one, 1, 0);
    put_start(b, client_a, 2, bad_keys, s2, 17, 0, 0, NULL);
    put_start(b, client_a, 2, bad_keys, s2, 2, 0, 0, NULL);
    put_start(b, (egm_id_t){0, 0}, 2, k2, s2, 1, 0, 0, NULL);
    keys(b, EGM_RPC_PUT_END, client_b, 2, bad_keys, 0);
    unmount(b, client_b, &one, 1, 0);
    unmount(b, client_b, &one, 1, 1);
    put_file("master_rpc", "refusals", b->data, b->len);
    free(b);
}

/* ---- keys_reply and segment_desc --------------------------------------------- */
static void make_descriptors(void)
{
    const seg_t segs[] = {
        seg(1, client_a, 1 << 20, EGM__HANDLE_KIND__HANDLE_MEMFD),
        seg(2, client_a, 64, EGM__HANDLE_KIND__HANDLE_NONE),
        seg(3, client_b, 1ull << 40, EGM__HANDLE_KIND__HANDLE_POSIX_FD),
        seg(4, client_b, 1 << 30, EGM__HANDLE_KIND__HANDLE_FABRIC),
    };
    buf_t *b = calloc(1, sizeof(*b));
    char name[64];
    Egm__SegmentDesc d;
    Egm__Id ids[2];

    for (size_t i = 0; i < 4; i++) {
        b->len = 0;
        fill_desc(&d, ids, &segs[i]);
        add_msg(b, &d.base);
        snprintf(name, sizeof(name), "kind%d", segs[i].kind);
        put_file("segment_desc", name, b->data, b->len);
    }
    seg_t odd = segs[0];
    odd.shm = "/run/egmstore/broker.sock";
    odd.tcp = "";
    b->len = 0;
    fill_desc(&d, ids, &odd);
    add_msg(b, &d.base);
    put_file("segment_desc", "path_socket_no_tcp", b->data, b->len);
    odd.shm = "relative";
    b->len = 0;
    fill_desc(&d, ids, &odd);
    add_msg(b, &d.base);
    put_file("segment_desc", "relative_socket", b->data, b->len);
    odd = segs[0];
    odd.name = "tab\there";
    b->len = 0;
    fill_desc(&d, ids, &odd);
    add_msg(b, &d.base);
    put_file("segment_desc", "control_char", b->data, b->len);
    put_file("segment_desc", "empty", "", 0);

    /* KeysReply: n results with replicas over the segments, each segment once */
    for (size_t n = 0; n <= 6; n += 2) {
        Egm__KeysReply reply = EGM__KEYS_REPLY__INIT;
        Egm__KeyResult results[6], *rptr[6];
        Egm__Replica reps[6][2], *pptr[6][2];
        Egm__Id rid[6][2];
        Egm__SegmentDesc descs[4], *dptr[4];
        Egm__Id dids[4][2];
        for (size_t i = 0; i < n; i++) {
            egm__key_result__init(&results[i]);
            rptr[i] = &results[i];
            results[i].status = i == 3 ? EGM_ERR_NOT_FOUND : EGM_OK;
            results[i].size = 100 * (i + 1);
            results[i].lease_ttl_ms = 5000;
            results[i].n_replicas = i == 3 ? 0 : 1 + i % 2;
            results[i].replicas = pptr[i];
            for (size_t k = 0; k < results[i].n_replicas; k++) {
                egm__replica__init(&reps[i][k]);
                pptr[i][k] = &reps[i][k];
                egm__id_to_pb(segs[(i + k) % 4].id, &rid[i][k]);
                reps[i][k].segment = &rid[i][k];
                reps[i][k].offset = 4096 * i;
                reps[i][k].length = results[i].size;
            }
        }
        size_t nseg = n < 4 ? n : 4;
        for (size_t s = 0; s < nseg; s++) {
            fill_desc(&descs[s], dids[s], &segs[s]);
            dptr[s] = &descs[s];
        }
        reply.n_results = n;
        reply.results = rptr;
        reply.n_segments = nseg;
        reply.segments = dptr;
        b->len = 0;
        add_u8(b, (uint8_t)n);
        add_msg(b, &reply.base);
        snprintf(name, sizeof(name), "results%zu", n);
        put_file("keys_reply", name, b->data, b->len);
        b->data[0] = 255;
        snprintf(name, sizeof(name), "results%zu_nolimit", n);
        put_file("keys_reply", name, b->data, b->len);
        if (n > 0) {
            b->data[0] = (uint8_t)(n - 1);
            snprintf(name, sizeof(name), "results%zu_over_limit", n);
            put_file("keys_reply", name, b->data, b->len);
        }
    }
    Egm__KeysReply refused = EGM__KEYS_REPLY__INIT;
    refused.status = EGM_ERR_INVALID_ARG;
    b->len = 0;
    add_u8(b, 4);
    add_msg(b, &refused.base);
    put_file("keys_reply", "whole_request_refused", b->data, b->len);
    /* A Commit's answer naming slabs that lost an extent (packed varints) */
    Egm__KeyResult committed = EGM__KEY_RESULT__INIT, *cptr = &committed;
    uint64_t degraded[3] = {7, 1ull << 40, 300};
    Egm__KeysReply commit = EGM__KEYS_REPLY__INIT;
    commit.n_results = 1;
    commit.results = &cptr;
    commit.location_cache_ms = 1000;
    commit.n_degraded_slabs = 3;
    commit.degraded_slabs = degraded;
    b->len = 0;
    add_u8(b, 1);
    add_msg(b, &commit.base);
    put_file("keys_reply", "commit_degraded_slabs", b->data, b->len);
    free(b);
}

/* ---- tcp_request ------------------------------------------------------------- */
static void tcp_add(buf_t *b, uint32_t magic, uint16_t version, uint16_t op, egm_id_t seg,
                    uint64_t offset, uint64_t length)
{
    static uint64_t id;
    egm_tcp_req_t req = {magic, version, op, ++id, seg, offset, length};
    uint8_t out[EGM_TCP_REQ_SIZE];
    egm__tcp_req_encode(&req, out);
    add(b, out, sizeof(out));
}

static void make_tcp_request(void)
{
    const egm_id_t a = FUZZ_TCP_ID_A, bb = FUZZ_TCP_ID_B, gpu = FUZZ_TCP_ID_GPU,
                   gone = FUZZ_TCP_ID_GONE, none = {7, 7};
    const uint32_t M = EGM_TCP_MAGIC;
    const uint16_t V = EGM_TCP_VERSION, R = EGM_TCP_OP_READ, W = EGM_TCP_OP_WRITE;
    buf_t *b = calloc(1, sizeof(*b));

    tcp_add(b, M, V, R, a, 0, FUZZ_TCP_SIZE_A);
    put_file("tcp_request", "read_whole", b->data, b->len);
    b->len = 0;
    tcp_add(b, M, V, W, a, 1024, 1024);
    tcp_add(b, M, V, R, a, 1024, 1024);
    tcp_add(b, M, V, R, bb, 0, 1);
    put_file("tcp_request", "write_then_read", b->data, b->len);
    b->len = 0;
    tcp_add(b, M, V, R, a, FUZZ_TCP_SIZE_A, 1);
    tcp_add(b, M, V, R, a, 1, FUZZ_TCP_SIZE_A);
    tcp_add(b, M, V, R, a, UINT64_MAX, 2);
    tcp_add(b, M, V, R, bb, 1, 1);
    tcp_add(b, M, V, R, a, 0, 0);
    tcp_add(b, M, V, R, a, 0, EGM_TCP_MAX_REQUEST + 1);
    tcp_add(b, M, V, 3, a, 0, 1);
    tcp_add(b, M, V, R, gpu, 0, 1);
    tcp_add(b, M, V, R, gone, 0, 1);
    tcp_add(b, M, V, R, none, 0, 1);
    tcp_add(b, M, V, R, a, 10, 10);
    put_file("tcp_request", "refused_reads", b->data, b->len);
    b->len = 0;
    tcp_add(b, M, V, W, a, 4000, 200);
    tcp_add(b, M, V, R, a, 0, 1);
    put_file("tcp_request", "refused_write_closes", b->data, b->len);
    b->len = 0;
    tcp_add(b, M, 2, R, a, 0, 1);
    put_file("tcp_request", "version2", b->data, b->len);
    b->len = 0;
    tcp_add(b, 0x20544547, V, R, a, 0, 1);
    put_file("tcp_request", "bad_magic", b->data, b->len);
    free(b);
}

/* ---- config and parse_size ------------------------------------------------------ */
static void make_config(void)
{
    size_t n;
    const egm_config_key_t *keys = egm__config_keys(&n);
    buf_t *b = calloc(1, sizeof(*b));
    char line[2048], name[160];

    /* a whole file of every key at its default, with the INI forms */
    b->len = 0;
    add_u8(b, 0);
    const char *head = "# egmstore\n[master]\n; comment\n";
    add(b, head, strlen(head));
    for (size_t i = 0; i < n; i++) {
        int len = snprintf(line, sizeof(line),
                           i % 3 == 0   ? "%s = %s\n"
                           : i % 3 == 1 ? "  %s=\"%s\"  # default\n"
                                        : "%s = '%s'\n",
                           keys[i].name, keys[i].def);
        add(b, line, (size_t)len);
    }
    put_file("config", "file_defaults", b->data, b->len);
    b->len = 0;
    static const char bad[] = "\x00port = 50051\nno equals sign here\n";
    add(b, bad, sizeof(bad) - 1);
    put_file("config", "file_bad_line", b->data, b->len);

    /* one pair and one flag per key */
    for (size_t i = 0; i < n; i++) {
        int len = snprintf(line, sizeof(line), "%c%s = %s", 1, keys[i].name, keys[i].def);
        snprintf(name, sizeof(name), "pair_%s", keys[i].name);
        put_file("config", name, line, (size_t)len);
        len = snprintf(line, sizeof(line), "%c--%s=%s", 2, keys[i].name, keys[i].def);
        for (char *p = line + 3; *p != '=' && *p != '\0'; p++)
            if (*p == '_')
                *p = '-';
        snprintf(name, sizeof(name), "flag_%s", keys[i].name);
        put_file("config", name, line, (size_t)len);
    }

    /* auth_token_file contents */
    static const char *const tokens[] = {"s3cret\n", "s3cret",   "two\nlines\n", "\n",
                                         "",         "crlf\r\n", "nul\0inside\n"};
    static const size_t token_len[] = {7, 6, 10, 1, 0, 6, 12};
    for (size_t i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++) {
        line[0] = 3;
        memcpy(line + 1, tokens[i], token_len[i]);
        snprintf(name, sizeof(name), "token_file%zu", i);
        put_file("config", name, line, 1 + token_len[i]);
    }
    memset(line + 1, 't', 1025);
    line[1026] = '\n';
    put_file("config", "token_file_too_long", line, 1027);

    static const char *const sizes[] = {"0",
                                        "1",
                                        "256MiB",
                                        " 4 k ",
                                        "1TiB",
                                        "18446744073709551615",
                                        "17179869184GiB",
                                        "1.5G",
                                        "",
                                        "GB",
                                        "12 kb",
                                        "16 EiB",
                                        "64\tmb\n",
                                        "007B"};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        snprintf(name, sizeof(name), "size%02zu", i);
        put_file("parse_size", name, sizes[i], strlen(sizes[i]));
    }
    free(b);
}

/* The admin HTTP: a path byte (fuzz_admin_http.c's order), then the query. */
static void make_admin_http(void)
{
    static const struct {
        uint8_t path;
        const char *query;
    } seeds[] = {
        {0, "prefix=a&limit=5"},
        {0, "prefix=%FF%01"},
        {0, "limit=abc"},
        {1, "key=a"},
        {1, "key=k+2"},
        {1, "key=%E2%82%AC"},
        {1, "key=pending"},
        {1, "key=a&key=b"},
        {1, "key=%4"},
        {2, "keys=a,a%2Cb,,k+2,q%22%5C,%FF%01,pending,none"},
        {2, "keys="},
        {2, "keys=a&keys=b"},
        {2, "keys=%zz"},
        {3, ""},
        {4, ""},
        {5, ""},
        {6, ""},
        {8, "x=1"},
    };
    char name[32];
    for (size_t i = 0; i < sizeof(seeds) / sizeof(seeds[0]); i++) {
        char input[128];
        size_t n = strlen(seeds[i].query);
        input[0] = (char)seeds[i].path;
        memcpy(input + 1, seeds[i].query, n);
        snprintf(name, sizeof(name), "admin%02zu", i);
        put_file("admin_http", name, input, n + 1);
    }
}

/* ---- mirror_apply: batches of journal ops (master/journal.h's wire form) ---- */
static void add_le(buf_t *b, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        add_u8(b, (uint8_t)(v >> (8 * i)));
}

static void add_id(buf_t *b, egm_id_t id)
{
    uint8_t w[16];
    egm__wire_put_id(w, id);
    add(b, w, sizeof(w));
}

static void jop_segment(buf_t *b, const seg_t *s)
{
    buf_t *d = calloc(1, sizeof(*d));
    Egm__SegmentDesc pb;
    Egm__Id ids[2];
    fill_desc(&pb, ids, s);
    add_msg(d, &pb.base);
    add_u8(b, 1);
    add_le(b, d->len, 4);
    add(b, d->data, d->len);
    free(d);
}

static void jop_object(buf_t *b, const char *key, uint64_t size, uint8_t pins, uint8_t placed,
                       uint8_t n, const egm_id_t *segs, const uint64_t *offsets)
{
    add_u8(b, 3);
    add_le(b, strlen(key), 2);
    add(b, key, strlen(key));
    add_le(b, size, 8);
    add_id(b, client_a);
    add_u8(b, pins);
    add_u8(b, placed);
    add_u8(b, n);
    for (uint8_t i = 0; i < n; i++) {
        add_id(b, segs[i]);
        add_le(b, offsets[i], 8);
    }
}

static void jop_gone(buf_t *b, const char *key)
{
    add_u8(b, 4);
    add_le(b, strlen(key), 2);
    add(b, key, strlen(key));
}

static void jop_reserve(buf_t *b, egm_id_t seg_id, uint64_t offset, uint64_t length, uint64_t ms)
{
    add_u8(b, 5);
    add_id(b, seg_id);
    add_le(b, offset, 8);
    add_le(b, length, 8);
    add_le(b, ms, 8);
}

static void jop_segment_gone(buf_t *b, egm_id_t seg_id)
{
    add_u8(b, 2);
    add_id(b, seg_id);
}

/* One batch of the input: flags, u16 length, the ops. */
static void batch(buf_t *in, uint8_t flags, const buf_t *ops)
{
    add_u8(in, flags);
    add_le(in, ops->len, 2);
    add(in, ops->data, ops->len);
}

static void make_mirror_apply(void)
{
    const egm_id_t own = FUZZ_MIRROR_SEG;
    const seg_t s1 = seg(1, client_a, 1 << 20, EGM__HANDLE_KIND__HANDLE_MEMFD);
    const seg_t s2 = seg(2, client_b, 1 << 16, EGM__HANDLE_KIND__HANDLE_NONE);
    buf_t *in = calloc(1, sizeof(*in)), *ops = calloc(1, sizeof(*ops));

    /* A snapshot (two segments, objects on them and on the fresh master's
     * own, ranges in use), then a batch of changes. */
    in->len = 0;
    add_u8(in, 4);
    ops->len = 0;
    jop_segment(ops, &s1);
    jop_segment(ops, &s2);
    {
        egm_id_t sg[3] = {s1.id, s2.id, own};
        uint64_t off[3] = {0, 4096, 8192};
        jop_object(ops, "a", 1000, 1, 2, 2, sg, off);
        jop_object(ops, "b", 64, 2, 3, 3, sg, off);
        jop_object(ops, "lost", 100, 0, 2, 1, sg + 2, off + 1);
    }
    jop_reserve(ops, own, 16384, 4096, 5000);
    jop_reserve(ops, s1.id, 0, 65536, 100000);
    batch(in, 1, ops);
    ops->len = 0;
    {
        egm_id_t sg[1] = {own};
        uint64_t off[1] = {20480};
        jop_object(ops, "c", 3000, 0, 1, 1, sg, off);
    }
    jop_gone(ops, "a");
    jop_reserve(ops, s2.id, 8192, 640, 30000);
    jop_segment_gone(ops, s2.id);
    batch(in, 0, ops);
    put_file("mirror_apply", "snapshot_then_stream", in->data, in->len);

    /* Overlaps: replicas over each other and over ranges, two on one segment,
     * misaligned and out of bounds. */
    in->len = 0;
    add_u8(in, 0);
    ops->len = 0;
    {
        egm_id_t sg[2] = {own, own};
        uint64_t off[2] = {0, 512};
        jop_object(ops, "x", 1000, 0, 1, 1, sg, off);
        jop_object(ops, "y", 100, 0, 1, 1, sg + 1, off + 1);
        jop_object(ops, "two-here", 64, 0, 2, 2, sg, (uint64_t[]){2048, 4096});
        jop_object(ops, "misaligned", 64, 0, 1, 1, sg, (uint64_t[]){100});
        jop_object(ops, "past-end", 64, 0, 1, 1, sg, (uint64_t[]){FUZZ_MIRROR_SEG_SIZE});
        jop_object(ops, "huge", UINT64_MAX, 0, 1, 1, sg, (uint64_t[]){0});
    }
    jop_reserve(ops, own, 0, 8192, 1000);
    jop_reserve(ops, own, 4096, 8192, 2000);
    jop_reserve(ops, own, UINT64_MAX - 63, 128, 2000);
    batch(in, 1, ops);
    put_file("mirror_apply", "overlaps", in->data, in->len);

    /* Refused: an older epoch after a newer one; a batch that does not follow;
     * a truncated op. */
    in->len = 0;
    add_u8(in, 1);
    ops->len = 0;
    jop_gone(ops, "k");
    batch(in, 1 | (3 << 1), ops);
    batch(in, 1 | (1 << 1), ops);
    batch(in, 8 | (3 << 1), ops);
    ops->len = 0;
    jop_reserve(ops, own, 0, 64, 10);
    ops->len -= 3;
    batch(in, 3 << 1, ops);
    put_file("mirror_apply", "refused", in->data, in->len);
    free(in);
    free(ops);
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: %s fuzz/corpus\n", argv[0]);
        return 2;
    }
    root = argv[1];
    if (mkdir(root, 0755) != 0 && errno != EEXIST) {
        perror(root);
        return 1;
    }
    make_rpc_frame();
    make_frame_reader();
    make_master_rpc();
    make_master_rpc_repair();
    make_master_rpc_slab_commit();
    make_descriptors();
    make_tcp_request();
    make_config();
    make_admin_http();
    make_mirror_apply();
    printf("make_corpus: %zu files under %s\n", written, root);
    return 0;
}
