/* A read of the pool on the master's behalf: the master moves no bytes, so
 * the daemon around it hands it a transfer engine's read (repair/
 * pool_reader.h) through which a newly elected master reads the slab logs
 * its predecessor's writers left (master/mirror.h; docs/ha.md "Commits the
 * pool describes"). Here, below both, so that each names the same type. */
#ifndef EGM_RPC_POOL_READER_H
#define EGM_RPC_POOL_READER_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "rpc/segment_desc.h"

/* Reads len bytes at offset of a segment into buf. */
typedef egm_status_t (*egm_pool_read_fn)(void *arg, const egm_segment_desc_t *segment,
                                         uint64_t offset, void *buf, size_t len);
typedef struct {
    egm_pool_read_fn fn; /* NULL: nothing is read */
    void *arg;
} egm_pool_reader_t;

#endif
