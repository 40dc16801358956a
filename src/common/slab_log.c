/* A slab's commit log entries (slab_log.h). */
#include "common/slab_log.h"

#include <string.h>
#include "common/hashmap.h"
#include "common/log.h"
#include "common/wire.h"

#define MAGIC 0x4c4d4745u /* "EGML" little-endian */
#define BODY_FIXED 40     /* slab id .. key_len, after the check */

uint64_t egm__slab_log_at(uint64_t extent_size, uint64_t seq)
{
    if (seq == 0 || seq > extent_size / EGM_SLAB_LOG_ENTRY)
        return 0;
    return extent_size - seq * EGM_SLAB_LOG_ENTRY;
}

/* A key; a put has a size; a removal or a void entry has none, nor pins,
 * and a shorter key (its segment and put entry follow it). */
static int kind_ok(const egm_slab_log_entry_t *e)
{
    if (e->key_len == 0)
        return 0;
    if (e->kind == EGM_SLAB_LOG_PUT)
        return e->size != 0 && e->key_len <= EGM_SLAB_LOG_KEY_MAX;
    return (e->kind == EGM_SLAB_LOG_REMOVE || e->kind == EGM_SLAB_LOG_VOID) && e->size == 0 &&
           !e->soft_pin && !e->hard_pin && e->key_len <= EGM_SLAB_LOG_REMOVE_KEY_MAX;
}

/* Bytes after the key: a removal's segment and put entry. */
static size_t tail_of(uint8_t kind)
{
    return kind == EGM_SLAB_LOG_PUT ? 0 : 32;
}

egm_status_t egm__slab_log_encode(const egm_slab_log_entry_t *e, uint8_t *out)
{
    if (e->seq == 0 || !kind_ok(e))
        return egm__set_error(EGM_ERR_INVALID_ARG,
                              "slab log entry: key of %zu bytes (1..%d), seq %llu (not 0), kind %u "
                              "with size %llu (a put: 0, size > 0; a removal 1 or void 2: size 0, "
                              "no pins)",
                              e->key_len, EGM_SLAB_LOG_KEY_MAX, (unsigned long long)e->seq,
                              (unsigned)e->kind, (unsigned long long)e->size);
    uint32_t body = BODY_FIXED + (uint32_t)(e->key_len + tail_of(e->kind));
    memset(out, 0, EGM_SLAB_LOG_ENTRY);
    egm__wire_put_u32(out, MAGIC);
    egm__wire_put_u32(out + 4, body);
    uint8_t *b = out + 16;
    egm__wire_put_u64(b, e->slab_id);
    egm__wire_put_u64(b + 8, e->seq);
    egm__wire_put_u64(b + 16, e->offset);
    egm__wire_put_u64(b + 24, e->size);
    b[32] = (uint8_t)((e->soft_pin ? 1 : 0) | (e->hard_pin ? 2 : 0));
    b[33] = e->kind;
    egm__wire_put_u16(b + 34, (uint16_t)e->key_len);
    memcpy(b + BODY_FIXED, e->key, e->key_len);
    if (tail_of(e->kind) != 0) {
        uint8_t *t = b + BODY_FIXED + e->key_len;
        egm__wire_put_id(t, e->segment);
        egm__wire_put_u64(t + 16, e->put_slab_id);
        egm__wire_put_u64(t + 24, e->put_seq);
    }
    egm__wire_put_u64(out + 8, egm__hashmap_hash(b, body));
    return EGM_OK;
}

int egm__slab_log_decode(const uint8_t *in, uint64_t slab_id, uint64_t seq, egm_slab_log_entry_t *e)
{
    uint32_t body = egm__wire_get_u32(in + 4);
    if (egm__wire_get_u32(in) != MAGIC || body <= BODY_FIXED || body > EGM_SLAB_LOG_ENTRY - 16)
        return 0;
    const uint8_t *b = in + 16;
    if (egm__wire_get_u64(in + 8) != egm__hashmap_hash(b, body))
        return 0;
    size_t key_len = egm__wire_get_u16(b + 34), tail = tail_of(b[33]);
    if (key_len + tail != body - BODY_FIXED || egm__wire_get_u64(b) != slab_id ||
        egm__wire_get_u64(b + 8) != seq)
        return 0;
    *e = (egm_slab_log_entry_t){.kind = b[33],
                                .slab_id = slab_id,
                                .seq = seq,
                                .offset = egm__wire_get_u64(b + 16),
                                .size = egm__wire_get_u64(b + 24),
                                .soft_pin = b[32] & 1,
                                .hard_pin = (b[32] >> 1) & 1,
                                .key = (const char *)b + BODY_FIXED,
                                .key_len = key_len};
    if (tail != 0) {
        const uint8_t *t = b + BODY_FIXED + key_len;
        e->segment = egm__wire_get_id(t);
        e->put_slab_id = egm__wire_get_u64(t + 16);
        e->put_seq = egm__wire_get_u64(t + 24);
    }
    return kind_ok(e);
}
