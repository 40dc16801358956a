/* Prefault of a shared mapping before a copy writes into it.
 *
 * A consumer's mapping of a provider's memfd starts with no page-table entries.
 * A memcpy into it then takes one write fault per 4 KiB page (shared-file write
 * faults get no fault-around): 4096 faults for 16 MiB, which made a client's
 * first put into a region of a segment that others had written 4x slower than
 * a put into mapped memory (9.6-10.4 ms against 2.4 ms for 16 MiB on the H200
 * machine's CPU). MADV_POPULATE_READ maps the same pages with fault-around (16
 * pages a fault) and, shmem needing no write notification, with writable
 * entries, so the copy after it takes no fault at all (0.8-1.4 ms + 2.5-2.7
 * ms). Reads need no help: their faults already get fault-around. Pages that
 * were never written (a fresh pool) have nothing to map around them: they are
 * allocated one fault each, with or without this.
 *
 * Only the pages a write covers are populated (fault-around may map neighbours
 * that are already in memory, as a read fault would), so a process maps and
 * allocates nothing the copy would not have faulted in: no memory beyond it, no
 * cost at map time. A bitmap per mapping remembers the 64 KiB blocks known to
 * be mapped (2 KiB per GiB), so that a later write there costs a few bit tests
 * instead of a page-table walk (populating 16 MiB that is already mapped still
 * takes 0.24-0.54 ms); a block a write covers in part stays unknown, and the
 * next write there populates its own pages again (cheap once mapped). The
 * bitmap is a hint: pages the kernel unmaps later (reclaim, migration) just
 * fault again on the next copy, as they would without it.
 * Thread-safe: blocks are marked with atomic operations; two threads that
 * populate one block at once both succeed. */
#ifndef EGM_TE_PREFAULT_H
#define EGM_TE_PREFAULT_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>

#define EGM_PREFAULT_BLOCK ((uint64_t)64 << 10)
/* Writes the shm transport populates first: at least 4 blocks, so that the
 * (re-populated) partly covered blocks at the ends are a small share. */
#define EGM_PREFAULT_MIN_WRITE ((uint64_t)256 << 10)

typedef struct egm_prefault egm_prefault_t;

/* Tracks a mapping of `size` bytes (none populated yet). */
egm_status_t egm__prefault_create(uint64_t size, egm_prefault_t **prefault_p);
void egm__prefault_destroy(egm_prefault_t *prefault);

/* Before writing [offset, offset + len) of the mapping at base: populates its
 * pages in the blocks not known to be mapped, and marks the blocks it covered
 * whole. Returns the bytes populated now (0 when all were known, the kernel
 * lacks MADV_POPULATE_READ (before Linux 5.14) or it failed: the copy then
 * faults as it would have). */
uint64_t egm__prefault_write(egm_prefault_t *prefault, void *base, uint64_t offset, uint64_t len);

/* After a copy out of [offset, offset + len): its faults mapped the blocks it
 * covered whole, so later writes there need no populate. */
void egm__prefault_mark(egm_prefault_t *prefault, uint64_t offset, uint64_t len);

#endif
