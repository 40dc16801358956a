/* Chunk pipeline for large batches: chunk 0's first RPC runs on the caller's
 * thread as the pipeline starts, and helper threads (EGM_PIPELINE_DEPTH, each
 * taking every DEPTH-th chunk from chunk 1) make the other chunks' first RPCs
 * ahead of the caller (so the master's work and the round trip overlap the
 * copies of earlier chunks); an optional further helper runs each chunk's
 * closing step behind it (so it overlaps the copies of later chunks).
 *
 * The callers call egm__pipeline_wait(k) then egm__pipeline_release(k) for
 * every chunk k, in any order and from several threads (each chunk by one),
 * then egm__pipeline_finish once. The behind step runs chunk by chunk in order,
 * each once its chunk is released, on its own thread. If a thread cannot be
 * started its work runs on the caller's thread instead (same results, no
 * overlap); without the behind thread, each behind step runs at its chunk's
 * release, on the releasing thread and so in release order (each touches only
 * its own chunk). Helper threads come from a pool (common/workers.h: the
 * client's), so that a call does not wait for threads to be created. */
#ifndef EGM_CLIENT_PIPELINE_H
#define EGM_CLIENT_PIPELINE_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "client/parts.h"
#include "common/workers.h"

/* Large batches are cut into chunks of about EGM_PIPELINE_CHUNK_PARTS buffers
 * (a key of one buffer counts one, a multi-buffer key its parts: a vLLM key of
 * 64 pieces weighs 64); batches of fewer parts gain nothing from threads. From
 * 1024 (vLLM's 16 keys): with the helper threads kept by the client, its calls
 * were faster pipelined in 14 of 18 interleaved pairs on the H200 (gets up to
 * 12 points, puts up to 9; bench/results/h200x1-issue17-20261203-pool). */
#define EGM_PIPELINE_MIN_PARTS 1024
#define EGM_PIPELINE_CHUNK_PARTS 1024
/* The first chunks are smaller, doubling up to EGM_PIPELINE_CHUNK_PARTS: nothing
 * can be copied until the first RPC answers (a 1024-key GetReplicaList costs
 * ~0.4-1 ms, a 128-key one an eighth of that), and each chunk's RPC should be
 * back before the copy of the chunk before it ends. */
#define EGM_PIPELINE_FIRST_CHUNK_PARTS 128
/* First RPCs in flight at once (one helper thread each; the RPC client takes
 * concurrent calls on one connection). One 1024-key round trip (client encode,
 * master decode + lookups + encode, client decode) is ~0.4-1 ms against ~1.3 ms
 * of GPU copy per chunk: with one in flight a slow round trip stalls the
 * copies; with two the client's encode/decode overlaps the master's work. */
#define EGM_PIPELINE_DEPTH 2

/* The first RPC of chunk k (chunk 0's on the calling thread, in
 * egm__pipeline_start; the others' on an ahead helper); *reply_p is handed to
 * the caller. */
typedef egm_status_t (*egm_pipeline_ahead_fn)(void *arg, size_t k, void **reply_p);
/* The closing step of chunk k (on the behind thread); owns reply. */
typedef void (*egm_pipeline_behind_fn)(void *arg, size_t k, void *reply);

typedef struct egm_pipeline egm_pipeline_t;

/* Starts the helpers on threads of `workers` (NULL: threads made for them)
 * and runs chunk 0's ahead step before it returns (its status is what
 * egm__pipeline_wait(p, 0) answers). behind may be NULL. `what` ("put", "get": a
 * static string) names the pipeline in the trace log, where egm__pipeline_finish writes one line
 * per chunk with when its steps ran (docs/benchmarks.md). */
egm_status_t egm__pipeline_start(egm_workers_t *workers, const char *what, size_t n_chunks,
                                 egm_pipeline_ahead_fn ahead, egm_pipeline_behind_fn behind,
                                 void *arg, egm_pipeline_t **p_out);
/* Waits for chunk k's ahead call; returns its status (with its error detail
 * set on this thread), its reply and when the call started. */
egm_status_t egm__pipeline_wait(egm_pipeline_t *p, size_t k, void **reply_p,
                                uint64_t *started_ms_p);
/* Done with chunk k: run_behind hands reply to the behind step, else the
 * caller has disposed of it. */
void egm__pipeline_release(egm_pipeline_t *p, size_t k, void *reply, int run_behind);
/* Joins the helpers (every behind step has run) and frees p. */
void egm__pipeline_finish(egm_pipeline_t *p);

/* The copies of a pipelined batch run on EGM_PIPELINE_COPY_WORKERS workers: the
 * caller and threads, worker t taking chunks t, t + W, ... A chunk's client work
 * (segments, replica order, registry, routing, copy descriptors: ~80 ns a key)
 * would otherwise leave the GPU idle between chunks; with two, one plans while
 * the other's copy runs (the copier queues the copies themselves). */
#define EGM_PIPELINE_COPY_WORKERS 2

/* Copies chunk k (waiting for it and releasing it is the callback's), answering
 * its chunk-wide status; called from several threads, each chunk once. */
typedef egm_status_t (*egm_pipeline_copy_fn)(void *arg, size_t k);

/* Runs copy for chunks 0..n_chunks on the copy workers, the caller and
 * threads of `workers` (as egm__pipeline_start; a copy worker whose thread
 * cannot start has its chunks run by the caller) and waits for them. EGM_OK, or the
 * status and error text of the lowest chunk whose copy failed. */
egm_status_t egm__pipeline_copy(egm_workers_t *workers, size_t n_chunks, egm_pipeline_copy_fn copy,
                                void *arg);

/* Parts chunk k may hold: EGM_PIPELINE_FIRST_CHUNK_PARTS << k, at most
 * EGM_PIPELINE_CHUNK_PARTS. */
static inline size_t egm__pipeline_chunk_cap(size_t k)
{
    size_t cap = EGM_PIPELINE_FIRST_CHUNK_PARTS;
    while (k-- > 0 && cap < EGM_PIPELINE_CHUNK_PARTS)
        cap *= 2;
    return cap < EGM_PIPELINE_CHUNK_PARTS ? cap : EGM_PIPELINE_CHUNK_PARTS;
}

/* How a batch is cut: chunk k is keys [first[k], first[k + 1]). */
typedef struct {
    size_t n_chunks;
    size_t *first; /* n_chunks + 1 entries */
    size_t parts;  /* of the whole batch */
} egm_chunk_plan_t;

/* With shrink_tail, a plan's last chunks shrink as its first ones grow: the
 * last holds at most EGM_PIPELINE_FIRST_CHUNK_PARTS, the one before twice that,
 * for EGM_PIPELINE_TAIL_CHUNKS chunks. A put closes each chunk (its Commit)
 * after the chunk's copy, one chunk after another: the last chunks' copies end
 * together (two copy workers), so their Commits are what the call waits for
 * after its last copy, and small ones end it sooner. */
#define EGM_PIPELINE_TAIL_CHUNKS 3

/* Cuts n keys into chunks that fill egm__pipeline_chunk_cap(k) parts, in
 * order (with shrink_tail, the last EGM_PIPELINE_TAIL_CHUNKS chunks are cut
 * from the end, the t-th from the end filling egm__pipeline_chunk_cap(t)); key
 * j is key index[j] of parts (index NULL: key j), weighing its parts (parts
 * NULL: one each). A key never spans chunks and a chunk holds at least one key
 * (a key of more parts than the cap is a chunk of its own). Free with
 * egm__chunk_plan_free. */
egm_status_t egm__chunk_plan(size_t n, const egm_parts_t *parts, const size_t *index,
                             int shrink_tail, egm_chunk_plan_t *plan);
void egm__chunk_plan_free(egm_chunk_plan_t *plan);

/* 1 when a batch of this plan is worth pipelining. */
static inline int egm__chunk_plan_pipelined(const egm_chunk_plan_t *plan)
{
    return plan->parts >= EGM_PIPELINE_MIN_PARTS && plan->n_chunks > 1;
}

static inline size_t egm__chunk_first(const egm_chunk_plan_t *plan, size_t k)
{
    return plan->first[k];
}

static inline size_t egm__chunk_len(const egm_chunk_plan_t *plan, size_t k)
{
    return plan->first[k + 1] - plan->first[k];
}

#endif
