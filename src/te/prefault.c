/* Prefault of a shared mapping before a copy writes into it (prefault.h). */
#include "te/prefault.h"

#include <errno.h>
#include <stdatomic.h>
#include <sys/mman.h>

#include "common/alloc.h"
#include "common/log.h"

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22 /* Linux 5.14 */
#endif

#define PAGE 4096u

struct egm_prefault {
    uint64_t size; /* of the mapping: its last block may be shorter */
    uint64_t blocks;
    _Atomic uint64_t *words; /* bit b: block b is mapped in this process */
};

/* Cleared the first time the kernel answers EINVAL (no MADV_POPULATE_READ). */
static atomic_int populate_works = 1;

egm_status_t egm__prefault_create(uint64_t size, egm_prefault_t **prefault_p)
{
    egm_prefault_t *p = egm_calloc(1, sizeof(*p), "te.prefault");
    if (p == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "prefault: out of memory");
    p->size = size;
    p->blocks = (size + EGM_PREFAULT_BLOCK - 1) / EGM_PREFAULT_BLOCK;
    size_t n_words = (size_t)((p->blocks + 63) / 64);
    p->words = egm_calloc(n_words ? n_words : 1, sizeof(*p->words), "te.prefault.bitmap");
    if (p->words == NULL) {
        egm_free(p);
        return egm__set_error(EGM_ERR_NO_MEMORY, "prefault: out of memory for %zu words", n_words);
    }
    *prefault_p = p;
    return EGM_OK;
}

void egm__prefault_destroy(egm_prefault_t *prefault)
{
    if (prefault == NULL)
        return;
    egm_free((void *)prefault->words);
    egm_free(prefault);
}

static int is_marked(const egm_prefault_t *p, uint64_t b)
{
    return (atomic_load_explicit(&p->words[b / 64], memory_order_relaxed) >> (b % 64)) & 1;
}

static void mark_blocks(egm_prefault_t *p, uint64_t first, uint64_t end)
{
    for (uint64_t b = first; b < end; b++)
        atomic_fetch_or_explicit(&p->words[b / 64], (uint64_t)1 << (b % 64), memory_order_relaxed);
}

uint64_t egm__prefault_write(egm_prefault_t *prefault, void *base, uint64_t offset, uint64_t len)
{
    if (prefault == NULL || len == 0 || offset >= prefault->size ||
        !atomic_load_explicit(&populate_works, memory_order_relaxed))
        return 0;
    /* The pages the write covers: populating more could allocate pool pages of
     * other objects (a hole has no page for fault-around to map, so none is). */
    uint64_t lo = offset / PAGE * PAGE;
    uint64_t hi = len > prefault->size - offset ? prefault->size : offset + len;
    hi = (hi + PAGE - 1) / PAGE * PAGE;
    if (hi > prefault->size)
        hi = prefault->size;
    uint64_t end = (hi + EGM_PREFAULT_BLOCK - 1) / EGM_PREFAULT_BLOCK, populated = 0;
    /* One madvise per run of blocks not known to be mapped. */
    for (uint64_t b = lo / EGM_PREFAULT_BLOCK; b < end;) {
        if (is_marked(prefault, b)) {
            b++;
            continue;
        }
        uint64_t run_end = b + 1;
        while (run_end < end && !is_marked(prefault, run_end))
            run_end++;
        uint64_t start = b * EGM_PREFAULT_BLOCK, stop = run_end * EGM_PREFAULT_BLOCK;
        start = start < lo ? lo : start;
        stop = stop > hi ? hi : stop;
        if (madvise((uint8_t *)base + start, stop - start, MADV_POPULATE_READ) == 0) {
            egm__prefault_mark(prefault, start, stop - start);
            populated += stop - start;
        } else if (errno == EINVAL) {
            atomic_store_explicit(&populate_works, 0, memory_order_relaxed);
            egm_debug("shm: MADV_POPULATE_READ not supported here: writes fault page by page");
            return populated;
        }
        /* Any other failure (ENOMEM, EINTR, ...) leaves the pages to the copy's faults. */
        b = run_end;
    }
    return populated;
}

void egm__prefault_mark(egm_prefault_t *prefault, uint64_t offset, uint64_t len)
{
    if (prefault == NULL || len == 0)
        return;
    /* The blocks the copy covered whole (the last block ends at the mapping's end). */
    uint64_t first = (offset + EGM_PREFAULT_BLOCK - 1) / EGM_PREFAULT_BLOCK;
    uint64_t end =
        offset + len >= prefault->size ? prefault->blocks : (offset + len) / EGM_PREFAULT_BLOCK;
    mark_blocks(prefault, first, end);
}
