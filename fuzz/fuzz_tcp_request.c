/* Fuzz target: the tcp data server's reading of requests (src/te/tcp_server.c:
 * egm__tcp_req_parse, egm__tcp_req_check), on a table of exposed segments like
 * a provider's: two of host memory (4096 bytes and 1 byte, each an exact-size
 * heap block), one of GPU memory the CPU cannot touch, one withdrawn.
 *
 * Input: a stream of 48-byte requests, served in order like one connection:
 * a bad magic or version ends it (the server closes the connection), a
 * refused WRITE ends it too (its payload is not read). Checks: the verdicts
 * against an independent reading of the rules; for an accepted request, the
 * bytes [offset, offset + length) the server would copy are touched (ASan
 * reports any byte outside the segment); use references are all returned
 * (withdraw would wait forever otherwise); nothing leaks. */
#include "common/alloc.h"
#include "fuzz.h"
#include "te/te_int.h"

#define SEG_A_SIZE FUZZ_TCP_SIZE_A
#define SEG_B_SIZE FUZZ_TCP_SIZE_B
#define MAX_REQUESTS 64

static egm_exposed_table_t *table;
static uint8_t *seg_a, *seg_b;
static const egm_id_t id_a = FUZZ_TCP_ID_A, id_b = FUZZ_TCP_ID_B, id_gpu = FUZZ_TCP_ID_GPU,
                      id_gone = FUZZ_TCP_ID_GONE;

static void setup(void)
{
    FUZZ_CHECK(egm__exposed_create(&table) == EGM_OK);
    seg_a = malloc(SEG_A_SIZE);
    seg_b = malloc(SEG_B_SIZE);
    FUZZ_CHECK(seg_a != NULL && seg_b != NULL);
    memset(seg_a, 0x5a, SEG_A_SIZE);
    memset(seg_b, 0xb5, SEG_B_SIZE);
    FUZZ_CHECK(egm__exposed_add(table, id_a, seg_a, SEG_A_SIZE, -1) == EGM_OK);
    FUZZ_CHECK(egm__exposed_add(table, id_b, seg_b, SEG_B_SIZE, -1) == EGM_OK);
    /* GPU memory: no CPU mapping at all (base is not dereferenceable) */
    FUZZ_CHECK(egm__exposed_add_vmm(table, id_gpu, NULL, 1ull << 30, 0, EGM_HANDLE_POSIX_FD, 0,
                                    0) == EGM_OK);
    FUZZ_CHECK(egm__exposed_add(table, id_gone, seg_a, SEG_A_SIZE, -1) == EGM_OK);
    FUZZ_CHECK(egm__exposed_unlink(table, id_gone) == EGM_OK);
}

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* The server's rules (te_int.h), read independently. */
static egm_status_t expected(const uint8_t *in)
{
    uint16_t op = (uint16_t)le(in + 6, 2);
    egm_id_t seg = {le(in + 16, 8), le(in + 24, 8)};
    uint64_t offset = le(in + 32, 8), length = le(in + 40, 8), size;

    if (op != EGM_TCP_OP_READ && op != EGM_TCP_OP_WRITE)
        return EGM_ERR_INVALID_ARG;
    if (length == 0 || length > EGM_TCP_MAX_REQUEST)
        return EGM_ERR_INVALID_ARG;
    if (egm__id_equal(seg, id_a))
        size = SEG_A_SIZE;
    else if (egm__id_equal(seg, id_b))
        size = SEG_B_SIZE;
    else if (egm__id_equal(seg, id_gpu))
        return EGM_ERR_NOT_SUPPORTED;
    else
        return EGM_ERR_SEGMENT_NOT_FOUND;
    if (offset > size || length > size - offset)
        return EGM_ERR_INVALID_ARG;
    return EGM_OK;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t sink[SEG_A_SIZE];

    fuzz_init_logs();
    if (table == NULL)
        setup();
    uint64_t live = egm__alloc_live_count();
    size_t n = size / EGM_TCP_REQ_SIZE;
    if (n > MAX_REQUESTS)
        n = MAX_REQUESTS;
    for (size_t i = 0; i < n; i++) {
        uint8_t in[EGM_TCP_REQ_SIZE];
        egm_tcp_req_t req;
        memcpy(in, data + i * EGM_TCP_REQ_SIZE, sizeof(in));

        egm_status_t st = egm__tcp_req_parse(in, &req);
        if (le(in, 4) != EGM_TCP_MAGIC) {
            FUZZ_CHECK(st == EGM_ERR_PROTOCOL);
            break;
        }
        if (le(in + 4, 2) != EGM_TCP_VERSION) {
            FUZZ_CHECK(st == EGM_ERR_VERSION);
            break;
        }
        FUZZ_CHECK(st == EGM_OK);
        FUZZ_CHECK(req.op == le(in + 6, 2) && req.request_id == le(in + 8, 8));
        FUZZ_CHECK(req.offset == le(in + 32, 8) && req.length == le(in + 40, 8));

        egm_exposed_t *seg = NULL;
        st = egm__tcp_req_check(table, &req, &seg);
        FUZZ_CHECK(st == expected(in));
        if (st != EGM_OK) {
            FUZZ_CHECK(seg == NULL);
            if (req.op == EGM_TCP_OP_WRITE)
                break;
            continue;
        }
        FUZZ_CHECK(seg != NULL && seg->host_accessible && egm__id_equal(seg->ref.id, req.segment));
        /* what serve_request copies, to or from the socket */
        uint8_t *mem = (uint8_t *)seg->base + req.offset;
        if (req.op == EGM_TCP_OP_READ)
            memcpy(sink, mem, (size_t)req.length);
        else
            memset(mem, (int)(req.request_id & 0xff), (size_t)req.length);
        egm__exposed_put(table, seg);
    }
    /* every use returned (withdraw would wait forever otherwise) */
    FUZZ_CHECK(egm__exposed_count(table) == 3);
    const egm_id_t ids[] = {id_a, id_b, id_gpu};
    for (size_t i = 0; i < 3; i++) {
        egm_exposed_t *seg = egm__exposed_get(table, ids[i]);
        FUZZ_CHECK(seg != NULL && seg->ref.refs == 1);
        egm__exposed_put(table, seg);
    }
    FUZZ_CHECK(egm__alloc_live_count() == live);
    return 0;
}
