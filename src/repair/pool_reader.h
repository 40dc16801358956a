/* The master daemon's reads of the pool: a transfer engine of its own
 * (no segments, no master connection) through which a newly elected master
 * reads the commit logs of the slabs its predecessor granted
 * (egm__master_set_pool_reader; docs/ha.md "Commits the pool describes").
 * The master library moves no bytes itself: this layer, above the transfer
 * engine, does it for the daemon. */
#ifndef EGM_REPAIR_POOL_READER_H
#define EGM_REPAIR_POOL_READER_H

#include <egmstore/config.h>
#include <egmstore/status.h>
#include "rpc/pool_reader.h"

typedef struct egm_pool_reads egm_pool_reads_t;

/* From the master's configuration: the cluster token, io_timeout_ms and the
 * protocol. EGM_ERR_NO_MEMORY, or what the transfer engine's creation says.
 * *reader_p: the reader to hand the master. */
egm_status_t egm__pool_reads_create(const egm_config_t *config, egm_pool_reads_t **reads_p,
                                    egm_pool_reader_t *reader_p);
/* After the master is gone. NULL is a no-op. */
void egm__pool_reads_destroy(egm_pool_reads_t *reads);

#endif
