/* bench data: the single and batch workloads. A put phase stores objects of
 * the client's own; the get phase after it reads them back, checks every
 * byte, and removes them. Only the store's call is timed: filling a source,
 * poisoning a destination, checking it and removing keys are not. Single
 * calls go in runs of --run calls back to back, each with its own slot of
 * the source or destination buffer, prepared before the run and checked
 * after it: the store is timed busy, as the ceiling's copies are, not after
 * an idle pause of the size of a check. */
#include <stdio.h>
#include <string.h>
#include "common/clock.h"
#include "common/log.h"
#include "bench_data.h"

/* ---- single: one object per call ----------------------------------------- */

static uint64_t single_seed(const egm_bdata_worker_t *w, const egm_bdata_phase_t *ph,
                            uint64_t version)
{
    return egm__bdata_seed((uint64_t)w->global, ph->bytes, version);
}

static egm_status_t single_put_prepare(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph)
{
    egm_status_t status = egm__bdata_worker_buffers(w, ph->bytes * ph->run);
    if (status == EGM_OK)
        status = egm__bdata_worker_keys(w, ph->slots);
    if (status != EGM_OK)
        return status;
    memset(w->versions, 0, ph->slots * sizeof(*w->versions));
    w->slots = ph->slots;
    w->stored = 0;
    egm__bdata_warm(w);
    return EGM_OK;
}

/* Slot k of this phase's size: the same name in the put and get phases. */
static void single_key(const egm_bdata_worker_t *w, const egm_bdata_phase_t *ph, char *key,
                       size_t k)
{
    egm__bdata_key(w, key, "s", ph->bytes, (uint64_t)w->global * EGM_BDATA_MAX_SLOTS + k);
}

/* Before a run of puts: the run's sources filled with its new versions, and
 * the objects of its slots written before removed, in one batch: a run's
 * calls go back to back, as an engine's puts of a step's blocks do, with no
 * remove between them (plain: the put phase reads nothing, so no lease holds
 * them; a force remove would wait for the master's force watermark,
 * location_cache_ms past the last read of any key force-removed: the
 * warm-up's, another client's). 0 when a fill failed (the worker stops). */
static int single_put_run(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph)
{
    size_t old = 0;
    for (size_t r = 0; r < ph->run; r++) {
        size_t k = (size_t)((w->step + r) % w->slots); /* run <= slots: distinct */
        w->run_key[r] = k;
        if (w->versions[k] != 0) {
            single_key(w, ph, w->names[old++], k);
            w->versions[k] = 0; /* until its put succeeds: the get phase skips it */
        }
    }
    egm__bdata_remove(w, old, 0);
    w->run_n = 0;
    for (size_t r = 0; r < ph->run; r++) {
        uint64_t version = ++w->seq;
        if (egm__bdata_fill(&w->r->mem, &w->staging, &w->src, r * ph->bytes, ph->bytes,
                            single_seed(w, ph, version)) != EGM_OK) {
            egm__bdata_error(w, 1, "filling the source: %s", egm_last_error());
            w->stop = 1;
            return 0;
        }
        w->run_seed[r] = version;
        w->run_n = r + 1;
    }
    return 1;
}

static void single_put_step(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph)
{
    char key[EGM_BDATA_KEY_LEN];
    size_t r = (size_t)(w->step % ph->run);

    if (r == 0 && !single_put_run(w, ph))
        return;
    size_t k = w->run_key[r];
    single_key(w, ph, key, k);
    if (!egm__bdata_put_at(w, NULL, key, r * ph->bytes, ph->bytes))
        return;
    w->versions[k] = w->run_seed[r];
    if (k + 1 > w->stored)
        w->stored = k + 1;
}

static void no_finish(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph)
{
    (void)w;
    (void)ph;
}

static egm_status_t single_get_prepare(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph)
{
    (void)ph;
    w->run_n = 0;
    /* The slots that hold an object, in order: a put that failed, or the put
     * phase's end between a run's remove and its puts, leaves one empty. */
    w->held = 0;
    for (size_t k = 0; k < w->stored; k++)
        if (w->versions[k] != 0)
            w->perm[w->held++] = k;
    if (w->held == 0) {
        egm__bdata_error(w, 1, "nothing to get: the put phase stored no object");
        w->stop = 1;
    }
    return EGM_OK;
}

/* Calls of a get run: --run, but no more than the objects stored (each
 * call of a run reads another). */
static size_t get_run(const egm_bdata_worker_t *w, const egm_bdata_phase_t *ph)
{
    return ph->run < w->held ? ph->run : w->held;
}

/* After a run of gets: every object it fetched, checked in its slot. */
static void single_check_run(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph)
{
    char key[EGM_BDATA_KEY_LEN];
    for (size_t r = 0; r < w->run_n; r++) {
        if (!w->run_ok[r])
            continue;
        single_key(w, ph, key, w->run_key[r]);
        egm__bdata_verify(w, r * ph->bytes, ph->bytes, w->run_seed[r], key);
    }
    w->run_n = 0;
}

static void single_get_step(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph)
{
    char key[EGM_BDATA_KEY_LEN];
    size_t run = get_run(w, ph), r = (size_t)(w->step % run);
    size_t k = w->perm[w->step % w->held];

    if (r == 0 && egm__bdata_poison(&w->r->mem, &w->dst, 0, run * ph->bytes) != EGM_OK) {
        egm__bdata_error(w, 1, "poisoning the destination: %s", egm_last_error());
        w->stop = 1;
        return;
    }
    single_key(w, ph, key, k);
    w->run_key[r] = k;
    w->run_seed[r] = single_seed(w, ph, w->versions[k]);
    w->run_ok[r] = (unsigned char)egm__bdata_get_at(w, NULL, key, r * ph->bytes, ph->bytes);
    w->run_n = r + 1;
    if (r + 1 == run)
        single_check_run(w, ph);
}

static void single_get_finish(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph)
{
    size_t n = 0;
    single_check_run(w, ph); /* a run the phase's end cut short */
    for (size_t k = 0; k < w->stored; k++)
        if (w->versions[k] != 0)
            single_key(w, ph, w->names[n++], k);
    egm__bdata_remove(w, n, 1); /* read: leased */
    memset(w->versions, 0, w->slots * sizeof(*w->versions));
    w->stored = 0;
}

const egm_bdata_ops_t egm__bdata_single_put = {single_put_prepare, single_put_step, no_finish};
const egm_bdata_ops_t egm__bdata_single_get = {single_get_prepare, single_get_step,
                                               single_get_finish};

/* ---- batch: N blocks per call, scattered in one registered buffer --------- */

static uint64_t block_seed(const egm_bdata_worker_t *w, const egm_bdata_phase_t *ph, size_t i)
{
    return egm__bdata_seed((uint64_t)w->global, ph->bytes ^ 0xb10cull, i);
}

static egm_status_t batch_put_prepare(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph)
{
    size_t n = ph->batch;
    egm_status_t status = egm__bdata_worker_buffers(w, n * ph->bytes);
    if (status == EGM_OK)
        status = egm__bdata_worker_keys(w, n);
    if (status != EGM_OK)
        return status;
    egm__bdata_warm(w); /* before the fill: it writes the buffer's first bytes */
    /* Block i lives at slot perm[i]: the addresses of one call are scattered. */
    for (size_t i = 0; i < n; i++)
        w->perm[i] = i;
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)(egm__bdata_rand(w) % (i + 1)), t = w->perm[i];
        w->perm[i] = w->perm[j];
        w->perm[j] = t;
    }
    for (size_t i = 0; i < n && status == EGM_OK; i++) {
        egm__bdata_key(w, w->names[i], "b", (uint64_t)w->global, i);
        w->srcs[i] = w->src.ptr + w->perm[i] * ph->bytes;
        w->dsts[i] = w->dst.ptr + w->perm[i] * ph->bytes;
        w->lens[i] = ph->bytes;
        status = egm__bdata_fill(&w->r->mem, &w->staging, &w->src, w->perm[i] * ph->bytes,
                                 ph->bytes, block_seed(w, ph, i));
    }
    w->stored = 0;
    return status;
}

/* Counts the keys of a batch that failed; the first one is kept as the error. */
static size_t batch_failures(egm_bdata_worker_t *w, size_t n, egm_status_t status, const char *what)
{
    size_t failed = 0;
    for (size_t i = 0; i < n; i++) {
        egm_status_t s = status != EGM_OK ? status : w->results[i];
        if (s == EGM_OK)
            continue;
        if (failed++ == 0 && w->st.error[0] == '\0')
            egm__bdata_error(w, 0, "%s %s: %s (%s)", what, w->keys[i], egm_status_string(s),
                             egm_last_error());
    }
    w->st.errors += failed;
    return failed;
}

static void batch_put_step(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph)
{
    size_t n = ph->batch;
    if (w->stored) /* the keys of the previous call, only put: no lease */
        egm__bdata_remove(w, n, 0);
    uint64_t t0 = egm__now_ns();
    egm_status_t status = egm_batch_put_from(w->client, n, w->keys, (const void *const *)w->srcs,
                                             w->lens, NULL, w->results);
    uint64_t t1 = egm__now_ns();
    size_t ok = n - batch_failures(w, n, status, "batch put");
    egm__bdata_timed(w, NULL, t0, t1, ok * ph->bytes, ok);
    w->stored = 1;
}

static egm_status_t batch_get_prepare(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph)
{
    (void)ph;
    if (!w->stored) {
        egm__bdata_error(w, 1, "nothing to get: the put phase stored no batch");
        w->stop = 1;
    }
    return EGM_OK;
}

static void batch_get_step(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph)
{
    size_t n = ph->batch;
    if (egm__bdata_poison(&w->r->mem, &w->dst, 0, w->dst.len) != EGM_OK) {
        egm__bdata_error(w, 1, "poisoning the destination: %s", egm_last_error());
        w->stop = 1;
        return;
    }
    uint64_t t0 = egm__now_ns();
    egm_status_t status =
        egm_batch_get_into(w->client, n, w->keys, w->dsts, w->lens, w->sizes, w->results);
    uint64_t t1 = egm__now_ns();
    for (size_t i = 0; status == EGM_OK && i < n; i++)
        if (w->results[i] == EGM_OK && w->sizes[i] != ph->bytes)
            w->results[i] = EGM_ERR_TRANSFER;
    size_t ok = n - batch_failures(w, n, status, "batch get");
    egm__bdata_timed(w, NULL, t0, t1, ok * ph->bytes, ok);
    for (size_t i = 0; status == EGM_OK && i < n; i++)
        if (w->results[i] == EGM_OK)
            egm__bdata_verify(w, w->perm[i] * ph->bytes, ph->bytes, block_seed(w, ph, i),
                              w->keys[i]);
}

static void batch_get_finish(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph)
{
    if (w->stored)
        egm__bdata_remove(w, ph->batch, 1); /* read: leased */
    w->stored = 0;
}

const egm_bdata_ops_t egm__bdata_batch_put = {batch_put_prepare, batch_put_step, no_finish};
const egm_bdata_ops_t egm__bdata_batch_get = {batch_get_prepare, batch_get_step, batch_get_finish};
