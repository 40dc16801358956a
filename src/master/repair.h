/* Re-replication, the master's side (docs/rereplication.md).
 *
 * When a segment is dropped (its provider left or was expired), every object
 * that keeps a live replica but has fewer than it was placed with is queued
 * here as under-replicated. A repair worker (src/repair/, a client of the
 * master running in the master daemon) asks for work (RepairGrant): for each
 * object, a surviving replica under a read lease and a new extent on a
 * segment of a provider that holds no replica of it. It copies and commits
 * (RepairCommit): the extent becomes a replica of the object if the object is
 * still the one the task was granted for; otherwise its space goes back.
 *
 * The new extent is kept on the index's held list (object_index.c) until the
 * commit, with the grant's lease end as its release time: it counts as used,
 * the self-check accounts for it, a segment dropped meanwhile takes it along,
 * and a worker that never commits gives it back when the lease ends (the
 * master's tick).
 *
 * The queue has its own mutex. Lock order: the master's state lock -> queue
 * -> an object shard -> the index's space lock. Nothing here is called with a
 * shard or `space` locked (the index queues dropped objects after letting
 * them go). */
#ifndef EGM_MASTER_REPAIR_H
#define EGM_MASTER_REPAIR_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "master/object_index.h"
#include "master/segment_table.h"

typedef struct egm_repair_queue egm_repair_queue_t;

typedef struct {
    uint64_t under_replicated; /* objects queued (those being repaired included) */
    uint64_t granted_total;    /* tasks handed out */
    uint64_t repaired_total;   /* replicas added by a commit */
    uint64_t repaired_bytes_total;
    uint64_t discarded_total; /* commits refused: the object changed, went, or its lease ended */
    uint64_t failed_total;    /* tasks whose copy the worker reported failed */
} egm_repair_stats_t;

/* One task, as the index hands it out (segments valid while the master's
 * state lock is held). */
typedef struct egm_repair_task_s {
    uint64_t size;
    egm_segment_t *source;
    uint64_t source_offset;
    egm_segment_t *target;
    uint64_t target_offset;
} egm_repair_task_t;

egm_status_t egm__repair_queue_create(egm_repair_queue_t **queue_p);
void egm__repair_queue_destroy(egm_repair_queue_t *queue);
/* Queues key (copied) unless it is queued already. Out of memory: logged,
 * the key is not queued. */
void egm__repair_queue_add(egm_repair_queue_t *queue, const char *key, size_t key_len);
void egm__repair_queue_stats(egm_repair_queue_t *queue, egm_repair_stats_t *stats_p);

/* Where a new replica of an object may go: 1 when `candidate` is none of the
 * object's segments (`holders`, its live replicas') and belongs to another
 * provider than each of them. The one place that decides "distinct
 * provider" for re-replication (normal placement has its own). */
int egm__repair_target_ok(const egm_segment_t *candidate, egm_segment_t *const *holders,
                          size_t n_holders);

/* Hands out up to max_keys tasks (sizes summing to at least max_bytes stop
 * it, after one task at least; 0: no bound), walking the queue from its
 * head and visiting each key at most once: a key granted stays queued,
 * marked busy until the lease ends; a key whose object is gone or whole
 * again leaves the queue; one that cannot be repaired now (PENDING, no
 * distinct provider with room) goes to the back. keys[i] (egm_malloc'ed, the
 * caller frees each) and tasks[i], room for max_keys. *n_p: tasks. */
egm_status_t egm__repair_grant(egm_object_index_t *index, size_t max_keys, uint64_t max_bytes,
                               uint64_t now_ms, char **keys, egm_repair_task_t *tasks, size_t *n_p);
/* A task back from the worker: copied says whether its copy succeeded.
 * source or target NULL: that segment is no longer mounted. OK when the
 * target became a replica; otherwise the refusal (the target's space is
 * freed, if the index still held it) and the key is queued again when its
 * object still needs a replica. */
egm_status_t egm__repair_commit(egm_object_index_t *index, const char *key, size_t key_len,
                                const egm_repair_task_t *task, int copied, uint64_t now_ms);

#endif
