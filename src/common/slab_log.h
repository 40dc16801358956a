/* A slab's commit log (docs/ha.md "Commits the pool describes"): a writer
 * that places objects in a slab (client-side allocation) writes, before the
 * Commit that publishes them, one entry per object into the slab itself,
 * after the object's bytes: the key, where the object lies and how long it
 * is. A new master leader reads the entries its standby's copy had not
 * confirmed and takes those objects over, so a Commit need not wait for the
 * standby: the pool describes what was committed in it.
 *
 * Layout: entry `seq` (1, 2, ... in the order the writer gave them out, with
 * no gap) lies EGM_SLAB_LOG_ENTRY * seq bytes before the end of each of the
 * slab's extents, the same place in every replica; objects fill the extent
 * from its start. An entry is EGM_SLAB_LOG_ENTRY bytes, little-endian:
 *   u32 magic "EGML", u32 length of what follows the check (40 + key_len),
 *   u64 check (egm__hashmap_hash of the bytes after it, up to the length),
 *   u64 slab id, u64 seq, u64 offset of the object in the extent,
 *   u64 size, u8 flags (bit 0 soft pin, bit 1 hard pin), u8 kind, u16 key_len,
 *   u32 0, key (at byte 56).
 * kind 0 (EGM_SLAB_LOG_PUT) describes an object placed at offset, of size > 0
 * bytes. kind 1 (EGM_SLAB_LOG_REMOVE) says that the writer removed the key's
 * object that has a replica at `offset` of segment `segment`, wherever that
 * lies, and that the writer had put with the PUT entry put_seq of slab
 * put_slab_id (0, 0: none); these follow the key (u128 segment, u64
 * put_slab_id, u64 put_seq); size 0, no pins. A new leader drops its mirror's
 * object of the key at that place, and does not adopt that PUT entry
 * (docs/ha.md "Removes the pool describes"). kind 2 (EGM_SLAB_LOG_VOID, as a
 * removal) is an entry that says nothing: a removal whose request got no
 * answer, overwritten so that no later leader applies it.
 * An entry that is torn, of another slab, or at another place than its seq
 * says does not decode. Pure functions; thread-safe. */
#ifndef EGM_COMMON_SLAB_LOG_H
#define EGM_COMMON_SLAB_LOG_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "common/id.h"

#define EGM_SLAB_LOG_ENTRY 256
#define EGM_SLAB_LOG_HEADER 56
/* Longest key an entry holds; a longer one's Commit waits for the standby. */
#define EGM_SLAB_LOG_KEY_MAX (EGM_SLAB_LOG_ENTRY - EGM_SLAB_LOG_HEADER)
/* A removal also holds its object's segment id and put entry after the key. */
#define EGM_SLAB_LOG_REMOVE_KEY_MAX (EGM_SLAB_LOG_KEY_MAX - 32)

#define EGM_SLAB_LOG_PUT 0
#define EGM_SLAB_LOG_REMOVE 1
#define EGM_SLAB_LOG_VOID 2

typedef struct {
    uint8_t kind; /* EGM_SLAB_LOG_PUT (0), _REMOVE or _VOID */
    uint64_t slab_id;
    uint64_t seq;
    uint64_t offset;               /* PUT: in the extent; REMOVE, VOID: in `segment` */
    egm_id_t segment;              /* REMOVE, VOID: where a replica of the object removed lies */
    uint64_t put_slab_id, put_seq; /* REMOVE, VOID: the PUT entry of that object (0: none) */
    uint64_t size;
    uint8_t soft_pin, hard_pin;
    const char *key; /* into the decoded bytes (encode: the caller's) */
    size_t key_len;
} egm_slab_log_entry_t;

/* Where entry seq starts in an extent of extent_size bytes; 0 when it does
 * not fit (seq 0, or past the extent's start). */
uint64_t egm__slab_log_at(uint64_t extent_size, uint64_t seq);
/* Writes e into out[0..EGM_SLAB_LOG_ENTRY). EGM_ERR_INVALID_ARG for a key of
 * 0 or more than EGM_SLAB_LOG_KEY_MAX bytes (EGM_SLAB_LOG_REMOVE_KEY_MAX for
 * a REMOVE or VOID), seq 0, an unknown kind, a PUT of size 0, or a REMOVE or
 * VOID with a size or pins. */
egm_status_t egm__slab_log_encode(const egm_slab_log_entry_t *e, uint8_t *out);
/* Decodes the entry of slab slab_id at seq from in[0..EGM_SLAB_LOG_ENTRY):
 * 1 when it is one (e filled, its key pointing into in), 0 otherwise. */
int egm__slab_log_decode(const uint8_t *in, uint64_t slab_id, uint64_t seq,
                         egm_slab_log_entry_t *e);

#endif
