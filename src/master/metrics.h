/* The master's metrics: per RPC type, requests, failures and a latency
 * histogram, recorded around every handler; and the Prometheus text of a
 * scrape (docs/master.md "Admin HTTP and metrics" lists every metric).
 * Counters are relaxed atomics: recording takes no lock (so several RPC
 * threads may record at once) and the admin HTTP thread reads them at any
 * time; a scrape may see one request in `requests` and not yet in the
 * histogram, never a torn value. */
#ifndef EGM_MASTER_METRICS_H
#define EGM_MASTER_METRICS_H

#include <stdatomic.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "common/id.h"
#include "common/textbuf.h"
#include "master/liveness.h"
#include "master/object_index.h"
#include "master/repair.h"
#include "rpc/frame.h"
#include "rpc/server.h"

/* Upper bounds of the latency buckets, in seconds: 10 us .. 1 s. */
#define EGM_METRICS_BUCKETS 16

typedef struct {
    atomic_uint_fast64_t requests;
    atomic_uint_fast64_t failures;    /* answered with an error status */
    atomic_uint_fast64_t duration_ns; /* sum over the requests */
    /* Requests per latency bucket (not cumulative); the last one is above every bound. */
    atomic_uint_fast64_t buckets[EGM_METRICS_BUCKETS + 1];
} egm_rpc_metrics_t;

typedef struct egm_master_metrics {
    egm_rpc_metrics_t rpc[EGM_RPC_TYPE_MAX + 1]; /* by RPC type; [0] unused */
} egm_master_metrics_t;

/* What a scrape reads from the master's state (under its lock). */
typedef struct {
    egm_id_t master_id;
    uint64_t uptime_ms;
    uint64_t segments;
    uint64_t clients;
    uint64_t view;             /* segment ids retired since start */
    uint64_t allocated_bytes;  /* allocated in all segments */
    uint64_t lost_bytes;       /* of allocated_bytes: frees that found no memory (allocator.h) */
    uint64_t capacity_bytes;   /* of all mounted segments */
    uint64_t segment_replicas; /* replicas placed in mounted segments */
    egm_object_index_stats_t objects;
    egm_repair_stats_t repair; /* re-replication (repair.h) */
    egm_liveness_stats_t liveness;
    uint64_t segments_unreachable; /* mounted, their provider presumed gone */
    egm_rpc_server_stats_t server; /* summed over the RPC threads' servers */
    uint64_t http_auth_failures;   /* admin HTTP requests refused for the token */
    uint64_t http_slow_closed;     /* admin HTTP connections past their head deadline */
    /* enable_ha (0 when off): leading now, its epoch, elections won and leaderships lost. */
    uint64_t ha, ha_leading, ha_epoch, ha_wins, ha_losses;
    /* The state handover: the leader's journal (standbys followed, in sync,
     * lag, waits that timed out) and a standby's mirror of the leader. */
    uint64_t ha_standbys, ha_in_sync, ha_journal_bytes, ha_lag_bytes, ha_waits_timed_out;
    uint64_t ha_commits_described;
    uint64_t ha_removes_described;
    uint64_t ha_takeover_removals, ha_takeover_puts;
    uint64_t ha_batches_by_request, ha_batches_by_thread, ha_batches_pipelined, ha_replies_held;
    uint64_t ha_mirror_epoch, ha_mirror_objects, ha_mirror_batches;
} egm_master_snapshot_t;

void egm__master_metrics_init(egm_master_metrics_t *metrics);
/* One request of `type` (others are ignored) that took duration_ns; failed:
 * answered with an error status. */
void egm__master_metrics_record(egm_master_metrics_t *metrics, uint16_t type, int failed,
                                uint64_t duration_ns);
/* Appends the Prometheus text exposition (common/prom.h) of every metric to
 * out. Answers out->status: EGM_OK, or NO_MEMORY for a growing text. */
egm_status_t egm__master_metrics_format(const egm_master_metrics_t *metrics,
                                        const egm_master_snapshot_t *snapshot, egm_textbuf_t *out);

#endif
