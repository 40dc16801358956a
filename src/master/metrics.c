/* The master's request metrics and their Prometheus text. */
#include "master/metrics.h"

#include <string.h>
#include <egmstore/egmstore.h>
#include "common/prom.h"

/* Bucket bounds in ns and as the `le` label Prometheus reads back exactly. */
static const uint64_t bound_ns[EGM_METRICS_BUCKETS] = {
    10000,   25000,    50000,    100000,   250000,    500000,    1000000,   2500000,
    5000000, 10000000, 25000000, 50000000, 100000000, 250000000, 500000000, 1000000000,
};
static const char *const bound_text[EGM_METRICS_BUCKETS] = {
    "1e-05", "2.5e-05", "5e-05", "0.0001", "0.00025", "0.0005", "0.001", "0.0025",
    "0.005", "0.01",    "0.025", "0.05",   "0.1",     "0.25",   "0.5",   "1",
};

void egm__master_metrics_init(egm_master_metrics_t *metrics)
{
    memset(metrics, 0, sizeof(*metrics));
    for (size_t t = 0; t <= EGM_RPC_TYPE_MAX; t++) {
        egm_rpc_metrics_t *r = &metrics->rpc[t];
        atomic_init(&r->requests, 0);
        atomic_init(&r->failures, 0);
        atomic_init(&r->duration_ns, 0);
        for (size_t b = 0; b <= EGM_METRICS_BUCKETS; b++)
            atomic_init(&r->buckets[b], 0);
    }
}

void egm__master_metrics_record(egm_master_metrics_t *metrics, uint16_t type, int failed,
                                uint64_t duration_ns)
{
    if (metrics == NULL || type == 0 || type > EGM_RPC_TYPE_MAX)
        return;
    egm_rpc_metrics_t *r = &metrics->rpc[type];
    size_t b = 0;
    while (b < EGM_METRICS_BUCKETS && duration_ns > bound_ns[b])
        b++;
    atomic_fetch_add_explicit(&r->requests, 1, memory_order_relaxed);
    if (failed)
        atomic_fetch_add_explicit(&r->failures, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->duration_ns, duration_ns, memory_order_relaxed);
    atomic_fetch_add_explicit(&r->buckets[b], 1, memory_order_relaxed);
}

static uint64_t load(const atomic_uint_fast64_t *v)
{
    return atomic_load_explicit((atomic_uint_fast64_t *)v, memory_order_relaxed);
}

static void format_rpc(const egm_master_metrics_t *m, egm_textbuf_t *out)
{
    egm__prom_family(out, "egm_master_rpc_requests_total", EGM_PROM_COUNTER,
                     "RPC requests handled, by type");
    for (uint16_t t = 1; t <= EGM_RPC_TYPE_MAX; t++)
        egm__prom_sample_u64(out, "egm_master_rpc_requests_total",
                             (const char *const[]){"type", egm__rpc_type_name(t), NULL},
                             load(&m->rpc[t].requests));
    egm__prom_family(out, "egm_master_rpc_failures_total", EGM_PROM_COUNTER,
                     "RPC requests answered with an error status, by type (per-key results "
                     "of a batch are not counted)");
    for (uint16_t t = 1; t <= EGM_RPC_TYPE_MAX; t++)
        egm__prom_sample_u64(out, "egm_master_rpc_failures_total",
                             (const char *const[]){"type", egm__rpc_type_name(t), NULL},
                             load(&m->rpc[t].failures));
    egm__prom_family(out, "egm_master_rpc_duration_seconds", EGM_PROM_HISTOGRAM,
                     "time the master spent handling one RPC request (decode, work, encode), "
                     "by type");
    for (uint16_t t = 1; t <= EGM_RPC_TYPE_MAX; t++) {
        const egm_rpc_metrics_t *r = &m->rpc[t];
        uint64_t counts[EGM_METRICS_BUCKETS + 1];
        for (size_t b = 0; b <= EGM_METRICS_BUCKETS; b++)
            counts[b] = load(&r->buckets[b]);
        egm__prom_histogram(out, "egm_master_rpc_duration_seconds",
                            (const char *const[]){"type", egm__rpc_type_name(t), NULL}, bound_text,
                            counts, EGM_METRICS_BUCKETS, (double)load(&r->duration_ns) / 1e9);
    }
}

egm_status_t egm__master_metrics_format(const egm_master_metrics_t *metrics,
                                        const egm_master_snapshot_t *s, egm_textbuf_t *out)
{
    const egm_object_index_stats_t *o = &s->objects;
    char id_text[EGM_ID_STRLEN];

    egm__prom_family(out, "egm_master_info", EGM_PROM_GAUGE,
                     "always 1; labels: this master's identity");
    egm__prom_sample_u64(out, "egm_master_info",
                         (const char *const[]){"version", EGMSTORE_VERSION, "master_id",
                                               egm__id_format(s->master_id, id_text), NULL},
                         1);
    egm__prom_metric_double(out, "egm_master_uptime_seconds", EGM_PROM_GAUGE,
                            "seconds since the master started", (double)s->uptime_ms / 1000.0);
    const egm_prom_row_t rows[] = {
        {"egm_master_keys", EGM_PROM_GAUGE, "objects in the index (pending ones included)",
         o->objects},
        {"egm_master_keys_pending", EGM_PROM_GAUGE, "objects started by PutStart and not yet ended",
         o->pending},
        {"egm_master_keys_leased", EGM_PROM_GAUGE,
         "objects under a live read lease (as of the latest lease granted or tick, to within "
         "the lease TTL / 1024)",
         o->leased},
        {"egm_master_keys_soft_pinned", EGM_PROM_GAUGE, "objects put with a soft pin",
         o->soft_pinned},
        {"egm_master_keys_hard_pinned", EGM_PROM_GAUGE, "objects put with a hard pin",
         o->hard_pinned},
        {"egm_master_allocated_bytes", EGM_PROM_GAUGE,
         "bytes allocated in all mounted segments (allocator rounding included)",
         s->allocated_bytes},
        {"egm_master_lost_bytes", EGM_PROM_GAUGE,
         "of egm_master_allocated_bytes: space whose free found no memory for the allocator's "
         "record, allocated until its segment is mounted again (0 unless the master ran short "
         "of memory)",
         s->lost_bytes},
        {"egm_master_capacity_bytes", EGM_PROM_GAUGE, "bytes of all mounted segments",
         s->capacity_bytes},
        {"egm_master_segments", EGM_PROM_GAUGE, "mounted segments", s->segments},
        {"egm_master_segments_unreachable", EGM_PROM_GAUGE,
         "mounted segments whose provider's connections closed (no replica placed or committed "
         "there until it reconnects or is dropped)",
         s->segments_unreachable},
        {"egm_master_provider_disconnects_total", EGM_PROM_COUNTER,
         "providers (clients with segments) whose last connection to the master closed without a "
         "leaving ping",
         s->liveness.disconnects},
        {"egm_master_provider_reconnects_total", EGM_PROM_COUNTER,
         "of those, clients back (a ping or a new connection) before being dropped",
         s->liveness.reconnects},
        {"egm_master_commit_replicas_refused_total", EGM_PROM_COUNTER,
         "replicas a PutEnd or Commit left out because their provider's connections had closed",
         o->unreachable_replicas_total},
        {"egm_master_replicas", EGM_PROM_GAUGE, "replicas placed in mounted segments",
         s->segment_replicas},
        {"egm_master_clients", EGM_PROM_GAUGE, "registered clients (pinging or owning segments)",
         s->clients},
        {"egm_master_segments_retired_total", EGM_PROM_COUNTER,
         "segment ids retired (unmounted or expired); the segment view number", s->view},
        {"egm_master_evictions_total", EGM_PROM_COUNTER, "objects evicted", o->evictions_total},
        {"egm_master_evicted_bytes_total", EGM_PROM_COUNTER,
         "segment bytes freed by evictions (every replica)", o->evicted_bytes_total},
        {"egm_master_eviction_runs_total", EGM_PROM_COUNTER,
         "evictions started (high watermark or a PutStart without room)", o->eviction_runs_total},
        {"egm_master_puts_no_space_total", EGM_PROM_COUNTER,
         "PutStarts answered NO_SPACE: no room even after eviction, only protected objects "
         "(leased, within eviction_min_residency_ms) could have made room, or the object is "
         "above the high watermark of the capacity",
         o->no_space_total},
        {"egm_master_held_bytes", EGM_PROM_GAUGE,
         "segment bytes of objects force-removed under a read lease, kept allocated until the "
         "lease ends (counted in egm_master_allocated_bytes)",
         o->held_bytes},
        {"egm_master_held_extents", EGM_PROM_GAUGE,
         "replicas whose space is held until the read lease of their removed object ends",
         o->held_extents},
        {"egm_master_slabs", EGM_PROM_GAUGE,
         "slabs granted to writing clients and not yet returned (client-side allocation)",
         o->slabs},
        {"egm_master_slab_bytes", EGM_PROM_GAUGE,
         "segment bytes of open slabs not yet committed as objects (counted in "
         "egm_master_allocated_bytes; every extent)",
         o->slab_bytes},
        {"egm_master_slab_grants_total", EGM_PROM_COUNTER, "slabs granted", o->slab_grants_total},
        {"egm_master_slab_grants_early_total", EGM_PROM_COUNTER,
         "slabs granted before the standby masters held the grant (enable_ha; docs/ha.md)",
         o->slab_grants_early_total},
        {"egm_master_slabs_expired_total", EGM_PROM_COUNTER,
         "slabs whose lease (put_start_discard_timeout_sec) ended before their writer returned "
         "them: their uncommitted space went back to the pool",
         o->slab_expired_total},
        {"egm_master_commits_total", EGM_PROM_COUNTER, "objects committed from slabs",
         o->commits_total},
        {"egm_master_objects_under_replicated", EGM_PROM_GAUGE,
         "objects with fewer live replicas than they were placed with, since a segment holding "
         "one was dropped (queued for re-replication, those being copied included)",
         s->repair.under_replicated},
        {"egm_master_rereplicated_objects_total", EGM_PROM_COUNTER,
         "replicas added by re-replication", s->repair.repaired_total},
        {"egm_master_rereplicated_bytes_total", EGM_PROM_COUNTER,
         "bytes copied into replicas added by re-replication", s->repair.repaired_bytes_total},
        {"egm_master_rereplication_tasks_total", EGM_PROM_COUNTER,
         "re-replication tasks handed out (RepairGrant)", s->repair.granted_total},
        {"egm_master_rereplication_failed_total", EGM_PROM_COUNTER,
         "re-replication tasks whose copy failed (the object is tried again)",
         s->repair.failed_total},
        {"egm_master_rereplication_discarded_total", EGM_PROM_COUNTER,
         "re-replication commits refused because the object changed, went or its lease ended "
         "(the new extent's space went back)",
         s->repair.discarded_total},
        {"egm_master_discarded_puts_total", EGM_PROM_COUNTER,
         "pending objects discarded after put_start_discard_timeout_sec", o->discarded_puts_total},
        {"egm_master_rpc_connections", EGM_PROM_GAUGE, "open RPC connections (every RPC thread)",
         s->server.connections_open},
        {"egm_master_rpc_connections_accepted_total", EGM_PROM_COUNTER,
         "RPC connections accepted (every RPC thread)", s->server.connections_accepted},
        {"egm_master_rpc_frames_rejected_total", EGM_PROM_COUNTER,
         "RPC frames refused before a handler: bad magic, version, size, type or payload (every "
         "RPC thread)",
         s->server.frames_rejected},
        {"egm_master_auth_failures_total", EGM_PROM_COUNTER,
         "RPC requests refused for a missing or wrong cluster token (auth_token; every RPC "
         "thread)",
         s->server.auth_failures},
        {"egm_master_http_auth_failures_total", EGM_PROM_COUNTER,
         "admin HTTP requests refused for a missing or wrong bearer token (auth_token; every "
         "path but /health and /metrics needs it)",
         s->http_auth_failures},
        {"egm_master_http_slow_closed_total", EGM_PROM_COUNTER,
         "admin HTTP connections closed after their request line for not completing its head "
         "within 10 s of connecting or of their last answer (a peer trickling header lines "
         "cannot hold a slot)",
         s->http_slow_closed},
        {"egm_master_ha_leader", EGM_PROM_GAUGE,
         "1 while this master leads (enable_ha; 1 without HA too), 0 while it stands by",
         s->ha ? s->ha_leading : 1},
        {"egm_master_ha_epoch", EGM_PROM_GAUGE,
         "etcd revision this master's leadership began at (0 when it does not lead or without "
         "HA): grows with every new leader",
         s->ha_epoch},
        {"egm_master_ha_elections_won_total", EGM_PROM_COUNTER,
         "elections this master won (enable_ha)", s->ha_wins},
        {"egm_master_ha_leadership_lost_total", EGM_PROM_COUNTER,
         "leaderships this master lost to its lease (etcd unreachable or the key taken), after "
         "which it exits",
         s->ha_losses},
        {"egm_master_ha_standbys", EGM_PROM_GAUGE,
         "standby masters this leader sends its state and journal to (enable_ha)", s->ha_standbys},
        {"egm_master_ha_standbys_in_sync", EGM_PROM_GAUGE,
         "of those, the ones in the in-sync set: every change is answered only once they hold it",
         s->ha_in_sync},
        {"egm_master_ha_journal_bytes_total", EGM_PROM_COUNTER,
         "bytes of state changes journaled for the standbys (while any was followed)",
         s->ha_journal_bytes},
        {"egm_master_ha_journal_lag_bytes", EGM_PROM_GAUGE,
         "journal bytes the slowest in-sync standby has not confirmed yet (the op log's lag)",
         s->ha_lag_bytes},
        {"egm_master_ha_commits_described_total", EGM_PROM_COUNTER,
         "Commits answered without waiting for the standbys: the slab logs in the pool describe "
         "them, and a new leader reads those (enable_ha)",
         s->ha_commits_described},
        {"egm_master_ha_removes_described_total", EGM_PROM_COUNTER,
         "Removes answered without waiting for the standbys: removal entries in the slab that "
         "held each object describe them, and a new leader reads those (enable_ha)",
         s->ha_removes_described},
        {"egm_master_ha_takeover_removals_total", EGM_PROM_COUNTER,
         "objects of the previous leader's state that removal entries in the slab logs took when "
         "this master took over (removes answered without its confirmation)",
         s->ha_takeover_removals},
        {"egm_master_ha_takeover_puts_total", EGM_PROM_COUNTER,
         "objects found in put entries of the slab logs when this master took over that its copy "
         "of the previous leader's state lacked (Commits it never received, answered or not), "
         "before the adoption's own skips",
         s->ha_takeover_puts},
        {"egm_master_ha_journal_batches_pipelined_total", EGM_PROM_COUNTER,
         "of those batches, the ones that left while an earlier one to the same standby awaited "
         "its answer (up to 4 are in flight)",
         s->ha_batches_pipelined},
        {"egm_master_ha_replies_held_total", EGM_PROM_COUNTER,
         "requests whose reply was held until the standbys confirmed their changes, their RPC "
         "thread serving others meanwhile (the rest waited on their thread, or not at all)",
         s->ha_replies_held},
        {"egm_master_ha_journal_waits_timed_out_total", EGM_PROM_COUNTER,
         "requests answered UNREACHABLE because a standby in sync did not confirm their changes "
         "in time (the change is applied at the leader)",
         s->ha_waits_timed_out},
        {"egm_master_ha_mirror_epoch", EGM_PROM_GAUGE,
         "a standby: the leader epoch whose state it holds (0: none)", s->ha_mirror_epoch},
        {"egm_master_ha_mirror_objects", EGM_PROM_GAUGE,
         "a standby: objects of the leader's state it holds, taken over when it is elected",
         s->ha_mirror_objects},
        {"egm_master_ha_mirror_batches_total", EGM_PROM_COUNTER,
         "a standby: journal batches applied (HaApply)", s->ha_mirror_batches},
    };
    egm__prom_rows(out, rows, sizeof(rows) / sizeof(rows[0]));
    static const char *const reasons[EGM_DROP_REASONS] = {
        [EGM_DROP_UNMOUNTED] = "unmounted",
        [EGM_DROP_LEFT] = "left",
        [EGM_DROP_EXPIRED] = "expired",
        [EGM_DROP_DISCONNECTED] = "disconnected",
    };
    egm__prom_family(out, "egm_master_segments_dropped_total", EGM_PROM_COUNTER,
                     "segments unmounted, by reason: unmounted (UnmountSegment), left (a leaving "
                     "ping), expired (client_ttl of silence), disconnected (connections closed "
                     "for client_disconnect_grace_ms)");
    for (int r = 0; r < EGM_DROP_REASONS; r++)
        egm__prom_sample_u64(out, "egm_master_segments_dropped_total",
                             (const char *const[]){"reason", reasons[r], NULL},
                             s->liveness.segments_dropped[r]);
    egm__prom_family(out, "egm_master_ha_journal_batches_total", EGM_PROM_COUNTER,
                     "journal batches sent to the standby masters (enable_ha), by sender: "
                     "request (the thread of a request waiting for them) or thread (the "
                     "standby's sender thread)");
    egm__prom_sample_u64(out, "egm_master_ha_journal_batches_total",
                         (const char *const[]){"sender", "request", NULL},
                         s->ha_batches_by_request);
    egm__prom_sample_u64(out, "egm_master_ha_journal_batches_total",
                         (const char *const[]){"sender", "thread", NULL}, s->ha_batches_by_thread);
    format_rpc(metrics, out);
    return out->status;
}
