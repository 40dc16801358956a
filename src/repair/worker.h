/* The re-replication worker (docs/rereplication.md): a thread of the master
 * daemon that connects to its own master as a client, asks it for repairs
 * (RepairGrant), copies each object from its surviving replica to the new
 * extent through the client's transfer engine, and commits (RepairCommit).
 * Copies are paced to at most rereplication_bytes_per_sec, so that repairs do
 * not starve foreground traffic. The master library has no transfer engine:
 * moving bytes is a client's act, hence this layer above egm_client. */
#ifndef EGM_REPAIR_WORKER_H
#define EGM_REPAIR_WORKER_H

#include <stdint.h>
#include <egmstore/config.h>
#include <egmstore/status.h>

typedef struct egm_repair_worker egm_repair_worker_t;

typedef struct {
    /* The master's configuration (borrowed for the call): the cluster token,
     * the log level, listen_address and rereplication_bytes_per_sec. */
    const egm_config_t *master_config;
    uint16_t port;          /* the master's RPC port */
    uint64_t bytes_per_sec; /* > 0 */
} egm_repair_worker_params_t;

/* Starts the thread; it connects once the master serves (retrying every
 * 200 ms). EGM_ERR_NO_MEMORY, or the thread's creation error. */
egm_status_t egm__repair_worker_start(const egm_repair_worker_params_t *params,
                                      egm_repair_worker_t **worker_p);
/* Stops the thread (a copy in progress finishes; a grant not committed
 * returns at its lease's end) and frees the worker. NULL is a no-op. */
void egm__repair_worker_stop(egm_repair_worker_t *worker);

#endif
