/* Fuzz target: what a standby master receives from whoever calls itself the
 * leader (HaApply batches, master/replication.c) and then takes over when
 * elected: egm__mirror_apply (master/mirror.c, the op decoder of
 * master/journal.c behind it) and egm__mirror_install into a fresh master
 * (egm__liveness_mount of the segments received, egm__objects_adopt of the
 * objects and ranges in use).
 *
 * Input: u8 install time (x 256 ms after the batches), then batches, each
 * u8 flags (bit 0: reset, which the first always is; bits 1-2: epoch 1..4;
 * bit 3: a `from` that does not follow), u16 length (little-endian), the
 * ops' bytes. The fresh master has one segment of its own (FUZZ_MIRROR_SEG,
 * 64 KiB) that ops may name. Checks that install succeeds whatever was
 * applied, that the index it leaves passes egm__objects_check (before and
 * after a put placed on top of it), and that nothing leaks. */
#include "common/alloc.h"
#include "fuzz.h"
#include "master/master_int.h"
#include "master/mirror.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_init_logs();
    uint64_t live = egm__alloc_live_count();
    fuzz_reader_t r = {data, size};
    uint64_t now = 1000;
    uint64_t install_at = (uint64_t)fuzz_u8(&r) * 256;

    egm_mirror_t *m;
    FUZZ_CHECK(egm__mirror_create(&m) == EGM_OK);
    uint64_t pos = 0;
    for (int first = 1; r.left > 0; first = 0) {
        uint8_t flags = fuzz_u8(&r);
        size_t len;
        uint8_t *ops = fuzz_bytes(&r, fuzz_u16(&r), &len);
        int reset = first || (flags & 1);
        int64_t epoch = 1 + ((flags >> 1) & 3);
        uint64_t from = (flags & 8) ? pos + 1 : pos;
        egm_status_t s = egm__mirror_apply(m, epoch, reset, from, from + len, ops, len, now);
        FUZZ_CHECK(s == EGM_OK || s == EGM_ERR_INVALID_ARG || s == EGM_ERR_PERMISSION);
        if (s == EGM_OK)
            pos = from + len;
        free(ops);
        now += 100;
    }

    egm_master_state_t st;
    egm_master_state_params_t sp = {.client_ttl_ms = 1000000000};
    egm__objects_params_default(&sp.objects);
    sp.objects.eviction_high_watermark = 1.0;
    FUZZ_CHECK(egm__master_state_init(&st, &sp) == EGM_OK);
    egm_id_t seg_id = FUZZ_MIRROR_SEG, owner = FUZZ_MIRROR_OWNER;
    egm_segment_params_t p = {.id = seg_id,
                              .owner = owner,
                              .size = FUZZ_MIRROR_SEG_SIZE,
                              .name = "fuzz/0",
                              .tcp_endpoint = "127.0.0.1:1"};
    FUZZ_CHECK(egm__liveness_mount(st.liveness, owner, &p, 0) == EGM_OK);

    size_t adopted = 0, skipped = 0, recovered = 0, removed = 0;
    FUZZ_CHECK(egm__mirror_install(m, st.liveness, st.segments, st.objects, NULL, now + install_at,
                                   &adopted, &skipped, &recovered, &removed) == EGM_OK);
    egm_mirror_stats_t ms;
    egm__mirror_stats(m, &ms);
    FUZZ_CHECK(ms.objects == 0 && ms.segments == 0 && ms.ranges == 0 && ms.slabs == 0);
    FUZZ_CHECK(recovered == 0 && removed == 0);
    FUZZ_CHECK(egm__objects_check(st.objects) == EGM_OK);
    egm_object_index_stats_t os;
    egm__objects_stats(st.objects, &os);
    FUZZ_CHECK(os.objects == adopted);
    /* The new leader serves on top of what it adopted. */
    egm_object_view_t v;
    egm_status_t s =
        egm__objects_put_start(st.objects, owner, "fuzz-new", 8, 4096, 1, now + install_at, &v);
    FUZZ_CHECK(s == EGM_OK || s == EGM_ERR_NO_SPACE || s == EGM_ERR_EXISTS);
    FUZZ_CHECK(egm__objects_check(st.objects) == EGM_OK);
    egm__mirror_destroy(m);
    egm__master_state_cleanup(&st);
    FUZZ_CHECK(egm__alloc_live_count() == live);
    return 0;
}
