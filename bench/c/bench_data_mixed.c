/* bench data: the mixed and full workloads.
 *
 * mixed: the control client preloaded a keyspace of K blocks; each call is a
 * get of a key drawn from the distribution (uniform or zipf) with probability
 * read_ratio, else a put of a new key of the client's own. A client keeps its
 * last EGM_BDATA_RING new keys and removes the oldest (untimed) to make room,
 * so the pool stays below the eviction watermark.
 *
 * full: the control client filled the pool close to the watermark; every call
 * is a put of a new key, so the master evicts while the puts go on. At the end
 * each client reads back its newest keys (LRU must not have taken them). */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "bench_data.h"

#define FULL_CHECKED EGM_BDATA_RING /* newest keys each client reads back after a full phase */

/* ---- key distribution ----------------------------------------------------- */

egm_status_t egm__bdata_dist_prepare(egm_bdata_run_t *r, const egm_bdata_phase_t *ph)
{
    size_t n = (size_t)r->o.keys;
    if (ph->zipf <= 0 || (r->cdf != NULL && r->cdf_n == n && r->cdf_zipf == ph->zipf))
        return EGM_OK;
    double *cdf = egm_realloc(r->cdf, n * sizeof(*cdf), "bench.zipf");
    if (cdf == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "the zipf table of %zu keys", n);
    double sum = 0;
    for (size_t i = 0; i < n; i++) {
        sum += 1.0 / pow((double)(i + 1), ph->zipf);
        cdf[i] = sum;
    }
    for (size_t i = 0; i < n; i++)
        cdf[i] /= sum;
    r->cdf = cdf;
    r->cdf_n = n;
    r->cdf_zipf = ph->zipf;
    return EGM_OK;
}

static double unit(egm_bdata_worker_t *w)
{
    return (double)(egm__bdata_rand(w) >> 11) * (1.0 / 9007199254740992.0);
}

/* Key k has rank k + 1: key 0 is the most popular. */
uint64_t egm__bdata_dist_draw(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph)
{
    const egm_bdata_run_t *r = w->r;
    if (ph->zipf <= 0)
        return egm__bdata_rand(w) % r->o.keys;
    double u = unit(w);
    size_t lo = 0, hi = r->cdf_n - 1;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (r->cdf[mid] > u)
            hi = mid;
        else
            lo = mid + 1;
    }
    return lo;
}

/* ---- mixed ------------------------------------------------------------------ */

static uint64_t new_key_seed(const egm_bdata_worker_t *w, uint64_t seq)
{
    return egm__bdata_seed((uint64_t)w->global, 0x6e6577, seq);
}

static egm_status_t mixed_prepare(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph)
{
    egm_status_t status = egm__bdata_worker_buffers(w, ph->bytes);
    if (status == EGM_OK)
        status = egm__bdata_worker_keys(w, EGM_BDATA_RING);
    if (status != EGM_OK)
        return status;
    w->ring_n = 0;
    egm__bdata_warm(w);
    return EGM_OK;
}

static void mixed_get(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph)
{
    char key[EGM_BDATA_KEY_LEN];
    uint64_t k = egm__bdata_dist_draw(w, ph);

    egm__bdata_keyspace_key(w->r, key, k);
    egm__bdata_get_one(w, &w->st.lat_get, key, ph->bytes, egm__bdata_keyspace_seed(k));
}

static void new_key(const egm_bdata_worker_t *w, char *key, const char *what, uint64_t seq)
{
    egm__bdata_key(w, key, what, (uint64_t)w->global, seq);
}

/* A put of a new key; *ok_p tells whether it was stored. */
static void put_new(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph, const char *what,
                    egm_bench_samples_t *extra, int *ok_p)
{
    char key[EGM_BDATA_KEY_LEN];
    uint64_t seq = ++w->seq;

    new_key(w, key, what, seq);
    *ok_p = egm__bdata_put_one(w, extra, key, ph->bytes, new_key_seed(w, seq));
}

static void mixed_put(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph)
{
    int ok = 0;
    if (w->ring_n == EGM_BDATA_RING) { /* untimed: room for the next one */
        new_key(w, w->names[0], "mp", w->ring[0]);
        egm__bdata_remove(w, 1, 0); /* only put: no lease */
        memmove(w->ring, w->ring + 1, (EGM_BDATA_RING - 1) * sizeof(w->ring[0]));
        w->ring_n--;
    }
    put_new(w, ph, "mp", &w->st.lat_put, &ok);
    if (ok)
        w->ring[w->ring_n++] = w->seq;
}

static void mixed_step(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph)
{
    if (unit(w) < ph->read_ratio)
        mixed_get(w, ph);
    else
        mixed_put(w, ph);
}

static void mixed_finish(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph)
{
    (void)ph;
    for (size_t i = 0; i < w->ring_n; i++)
        new_key(w, w->names[i], "mp", w->ring[i]);
    egm__bdata_remove(w, w->ring_n, 0);
    w->ring_n = 0;
}

const egm_bdata_ops_t egm__bdata_mixed = {mixed_prepare, mixed_step, mixed_finish};

/* ---- full ------------------------------------------------------------------- */

static egm_status_t full_prepare(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph)
{
    egm_status_t status = egm__bdata_worker_buffers(w, ph->bytes);
    if (status == EGM_OK)
        status = egm__bdata_worker_keys(w, 1024);
    w->seq = 0;
    w->ring_n = 0;
    return status;
}

static void full_step(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph)
{
    int ok;
    put_new(w, ph, "f", NULL, &ok);
    if (!ok)
        return;
    if (w->ring_n == FULL_CHECKED) {
        memmove(w->ring, w->ring + 1, (FULL_CHECKED - 1) * sizeof(w->ring[0]));
        w->ring_n--;
    }
    w->ring[w->ring_n++] = w->seq;
}

/* The newest keys stored must have survived the evictions (least recently
 * used go first), byte for byte; then every key of the phase goes. */
static void full_finish(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph)
{
    char key[EGM_BDATA_KEY_LEN];

    for (size_t i = 0; i < w->ring_n; i++) {
        size_t len = 0;
        new_key(w, key, "f", w->ring[i]);
        egm_status_t status = egm_get_into(w->client, key, w->dst.ptr, ph->bytes, &len);
        if (status != EGM_OK || len != ph->bytes)
            egm__bdata_error(w, 1, "get %s, one of the newest, after the puts: %s", key,
                             egm_status_string(status));
        else
            egm__bdata_verify(w, 0, ph->bytes, new_key_seed(w, w->ring[i]), key);
    }
    /* The keys just read are leased (force); the others were only put (plain). */
    for (size_t i = 0; i < w->ring_n; i++)
        new_key(w, w->names[i], "f", w->ring[i]);
    egm__bdata_remove(w, w->ring_n, 1);
    w->ring_n = 0;
    for (uint64_t seq = 1; seq <= w->seq;) {
        size_t n = 0;
        while (n < 1024 && seq <= w->seq)
            new_key(w, w->names[n++], "f", seq++);
        egm__bdata_remove(w, n, 0);
    }
}

const egm_bdata_ops_t egm__bdata_full = {full_prepare, full_step, full_finish};
