/* master HA: the leader's side of the state handover (docs/ha.md "State
 * handover"). The leader finds the standby masters listed in etcd, sends
 * each a snapshot of its state and then its journal (master/journal.h) as
 * HaApply batches; a standby that has caught up is put in the in-sync set,
 * which the leader keeps in etcd under "egmstore/<cluster_id>/master/insync"
 * as "<epoch> <address>..." and whose members every change waits for. A
 * standby that fails or falls behind is taken out of the set in etcd before
 * any change goes on without it, so a standby listed there at the leader's
 * epoch holds every change the leader ever answered for: when the leader
 * dies, only such a standby stands for election at once (the others wait a
 * while, egm__replication_may_lead). */
#ifndef EGM_MASTER_REPLICATION_H
#define EGM_MASTER_REPLICATION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "master/master_int.h"

typedef struct egm_replication egm_replication_t;

typedef struct {
    egm_master_state_t *state; /* its lock, segments, objects, journal and mirror */
    const char *etcd_endpoints;
    const char *cluster_id;
    const char *self;       /* the address this master publishes */
    const char *auth_token; /* presented to the standbys; NULL or "" = none */
    size_t max_frame_size;
    int ttl_s; /* ha_lease_ttl */
} egm_replication_params_t;

/* How long a leader's sender polls for its standby's answer before it
 * sleeps, on a host where this process may run on `cpus` CPUs: the poll
 * saves the sender's wake-up where a core is free for it, and takes the
 * CPU that clients and RPC threads wait for where few are (docs/ha.md
 * "Cost"). */
int egm__replication_spin_us(int cpus);

/* The key of the in-sync set of cluster_id's masters. */
void egm__replication_insync_key(const char *cluster_id, char *key, size_t len);

egm_status_t egm__replication_create(const egm_replication_params_t *params,
                                     egm_replication_t **r_p);
/* Stops following the standbys (joins every thread); nothing starts again.
 * Before the election is stopped: the threads read it. NULL is a no-op. */
void egm__replication_stop(egm_replication_t *r);
/* Stops, then frees. After the election is stopped (its thread calls
 * egm__replication_may_lead and egm__replication_lead). NULL is a no-op. */
void egm__replication_destroy(egm_replication_t *r);

/* A standby, the leader key being absent: whether it may stand now. Yes
 * when etcd holds no in-sync set (a new cluster), or one of the epoch this
 * standby's mirror follows that lists it; otherwise only after waiting
 * 5 x ha_lease_ttl since it first found the leader gone (a standby that
 * would take over without every change the old leader answered for waits
 * for one that has them). No while etcd cannot be read. Election thread. */
bool egm__replication_may_lead(egm_replication_t *r);

/* Newly elected at epoch, with the predecessor's state taken over: writes
 * the in-sync set as empty at this epoch (no standby holds this leader's
 * changes yet), retrying while still leading, then starts following the
 * standbys. EGM_OK once written; EGM_ERR_UNREACHABLE when leadership ended
 * first. */
egm_status_t egm__replication_lead(egm_replication_t *r, int64_t epoch);

typedef struct {
    uint64_t standbys; /* followed now */
    uint64_t in_sync;  /* of those, in the in-sync set */
    uint64_t snapshots_total;
    uint64_t dropped_total; /* standbys taken out of the set (failed, too slow) */
    uint64_t bytes_total;   /* journal bytes sent (snapshots included) */
} egm_replication_stats_t;

void egm__replication_stats(egm_replication_t *r, egm_replication_stats_t *stats_p);

#endif
