/* Copies into memory this process will not read again soon (a put into a
 * provider's shm segment), with non-temporal stores where the CPU has them.
 *
 * A memcpy of 16 MiB uses ordinary stores (glibc keeps non-temporal stores for
 * copies above glibc.cpu.x86_non_temporal_threshold, a share of the last-level
 * cache: 240 MiB on the 2-core VM): every destination line is first read from memory to be owned
 * (a read for ownership), then written back when evicted, so a put into pool
 * memory that is not cached moves the bytes three times against a get's two.
 * Streaming stores skip the read and the cache: on the H200 machine's CPU a
 * 16 MiB copy into a pool slot ran at 15.2 GB/s against glibc memcpy's 8.6
 * (and its hot-buffer memcpy ceiling's 11.9), and `egmstore bench data`'s shm
 * put went from 59-67% to 103-110% of that ceiling (3 alternating runs, --run 1;
 * bench/results/h200x1-shm-copy-20261201). Reads keep memcpy: their
 * destination is the caller's buffer, which it reads next. Small
 * copies (below EGM_STREAM_COPY_MIN) stay memcpy: their lines are few, and a
 * reader on this host may still find them cached. */
#ifndef EGM_TE_STREAM_COPY_H
#define EGM_TE_STREAM_COPY_H

#include <stddef.h>

#define EGM_STREAM_COPY_MIN ((size_t)256 << 10)

/* memcpy(dst, src, n) for non-overlapping ranges; when it returns, the bytes
 * are visible to other processes as after a memcpy (stores fenced). */
void egm__stream_copy(void *dst, const void *src, size_t n);

#endif
