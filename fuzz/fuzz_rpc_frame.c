/* Fuzz target: the RPC frame header decoder (src/rpc/frame.c), as the master's
 * server and the client run it on the first 24 bytes of every frame.
 *
 * Input: the 24 header bytes, then optionally a u32 (LE) payload limit
 * (max_frame_size; 64 MiB when absent). Checks, against an independent reading
 * of the layout in frame.h: the verdict (magic, version, reserved, length, in
 * that order), that every field is filled even when refused (the server
 * addresses its error reply with them), and that an accepted header encodes
 * back to the same bytes. */
#include "fuzz.h"
#include "rpc/frame.h"

static uint64_t le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t hdr[EGM_FRAME_HEADER_SIZE];
    size_t max_payload = 64u << 20;
    egm_frame_header_t h;

    fuzz_init_logs();
    if (size < EGM_FRAME_HEADER_SIZE)
        return 0;
    memcpy(hdr, data, sizeof(hdr));
    if (size >= EGM_FRAME_HEADER_SIZE + 4)
        max_payload = (size_t)le(data + EGM_FRAME_HEADER_SIZE, 4);

    memset(&h, 0xa5, sizeof(h));
    egm_status_t st = egm__frame_decode_header(hdr, max_payload, &h);

    egm_status_t want = EGM_OK;
    if (le(hdr, 4) != EGM_RPC_MAGIC)
        want = EGM_ERR_PROTOCOL;
    else if (hdr[4] != EGM_RPC_VERSION)
        want = EGM_ERR_VERSION;
    else if (le(hdr + 20, 4) != 0)
        want = EGM_ERR_PROTOCOL;
    else if (le(hdr + 16, 4) > max_payload)
        want = EGM_ERR_PROTOCOL;
    FUZZ_CHECK(st == want);
    FUZZ_CHECK(h.version == hdr[4]);
    FUZZ_CHECK(h.flags == hdr[5]);
    FUZZ_CHECK(h.type == le(hdr + 6, 2));
    FUZZ_CHECK(h.request_id == le(hdr + 8, 8));
    FUZZ_CHECK(h.length == le(hdr + 16, 4));
    FUZZ_CHECK(egm__rpc_type_name(h.type) != NULL);
    if (st != EGM_OK) {
        FUZZ_CHECK(egm_last_error()[0] != '\0');
        return 0;
    }
    uint8_t again[EGM_FRAME_HEADER_SIZE];
    egm__frame_encode_header(&h, again);
    FUZZ_CHECK(memcmp(again, hdr, sizeof(hdr)) == 0);
    return 0;
}
