/* The master: segments, allocation inside segments, the object index, leases,
 * client liveness. Never touches data. Serves RPCs on `rpc_threads` threads,
 * each with its own reactor (docs/master.md "Concurrency"). */
#ifndef EGM_MASTER_MASTER_H
#define EGM_MASTER_MASTER_H

#include <stdint.h>
#include <egmstore/config.h>
#include <egmstore/status.h>
#include "rpc/pool_reader.h"

typedef struct egm_master egm_master_t;

/* Reads the master's keys from config (`listen_address`, `port`,
 * `rpc_threads`, `default_kv_lease_ttl`, `client_ttl`, `max_frame_size`, the
 * object index's keys), binds the RPC port (port 0 = any free), and starts
 * the admin HTTP on `http_port` (-1 = none). */
egm_status_t egm__master_create(const egm_config_t *config, egm_master_t **master_p);
uint16_t egm__master_port(const egm_master_t *master);
/* The admin HTTP port; 0 when it is off. */
uint16_t egm__master_http_port(const egm_master_t *master);
/* Serves until egm__master_stop: runs the first RPC thread on the caller's
 * thread and the others on threads of its own, joined before it returns. */
egm_status_t egm__master_run(egm_master_t *master);
/* Thread-safe and async-signal-safe. */
void egm__master_stop(egm_master_t *master);
void egm__master_destroy(egm_master_t *master);
/* enable_ha: whether this master lost a leadership it had (etcd unreachable
 * for its lease, or its key taken): egm__master_run then returns and the
 * process should exit, to be restarted as a standby (docs/ha.md). */
int egm__master_deposed(const egm_master_t *master);
/* enable_ha: how this master, once elected, reads the slab logs in the pool
 * to adopt what its predecessor committed without its confirmation (docs/ha.md
 * "Commits the pool describes"; the master itself moves no bytes: the daemon
 * gives it a transfer engine's read). Without one, those objects are lost at
 * a failover. Call before the master can be elected (right after create). */
void egm__master_set_pool_reader(egm_master_t *master, const egm_pool_reader_t *reader);

#endif
