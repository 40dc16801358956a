/* bench data: one client thread's state (client, registered buffers, key
 * arguments) and what every workload does with it: name keys, time a call,
 * count an error, check an object, remove keys. */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "bench_data.h"

egm_status_t egm__bdata_worker_init(egm_bdata_run_t *r, egm_bdata_worker_t *w, int index,
                                    egm_client_t *shared)
{
    memset(w, 0, sizeof(*w));
    w->r = r;
    w->index = index;
    w->global = r->proc_index * r->clients + index;
    w->rng = egm__bdata_seed((uint64_t)w->global, 0x5eed, r->started_unix_ms) | 1;
    if (shared != NULL) {
        w->client = shared;
        return EGM_OK;
    }
    egm_config_t *config = NULL;
    egm_status_t status = egm__bdata_client_config(r, &config);
    if (status == EGM_OK)
        status = egm_client_create(config, &w->client);
    egm_config_destroy(config);
    w->own_client = status == EGM_OK;
    return status;
}

static void release_buffers(egm_bdata_worker_t *w)
{
    const egm_bdata_mem_t *m = &w->r->mem;
    if (w->src.ptr != NULL)
        egm_unregister_buffer(w->client, w->src.ptr);
    if (w->dst.ptr != NULL)
        egm_unregister_buffer(w->client, w->dst.ptr);
    egm__bdata_buf_free(m, &w->src);
    egm__bdata_buf_free(m, &w->dst);
}

void egm__bdata_worker_cleanup(egm_bdata_worker_t *w)
{
    if (w->r == NULL)
        return;
    release_buffers(w);
    egm__bdata_staging_free(&w->r->mem, &w->staging);
    if (w->own_client)
        egm_client_destroy(w->client);
    egm_free(w->names);
    egm_free(w->keys);
    egm_free(w->srcs);
    egm_free(w->dsts);
    egm_free(w->lens);
    egm_free(w->sizes);
    egm_free(w->perm);
    egm_free(w->results);
    egm_free(w->versions);
    egm__bdata_stats_free(&w->st, 1);
    memset(w, 0, sizeof(*w));
}

egm_status_t egm__bdata_worker_buffers(egm_bdata_worker_t *w, size_t len)
{
    const egm_bdata_mem_t *m = &w->r->mem;
    egm_status_t status;

    if (w->src.ptr != NULL && w->src.len == len)
        return EGM_OK;
    release_buffers(w);
    status = egm__bdata_buf_alloc(m, len, &w->src);
    if (status == EGM_OK)
        status = egm__bdata_buf_alloc(m, len, &w->dst);
    /* Zero-copy calls need registered memory, as in Mooncake. */
    if (status == EGM_OK)
        status = egm_register_buffer(w->client, w->src.ptr, len);
    if (status == EGM_OK)
        status = egm_register_buffer(w->client, w->dst.ptr, len);
    if (status != EGM_OK) {
        char why[256];
        snprintf(why, sizeof(why), "%s", egm_last_error());
        release_buffers(w);
        return egm__set_error(status, "two %zu-byte buffers: %s", len, why);
    }
    return EGM_OK;
}

#define GROW(field, n, site)                                                                       \
    do {                                                                                           \
        void *p_ = egm_realloc(w->field, (n) * sizeof(*w->field), site);                           \
        if (p_ == NULL)                                                                            \
            return egm__set_error(EGM_ERR_NO_MEMORY, "arguments for %zu keys", (size_t)(n));       \
        w->field = p_;                                                                             \
    } while (0)

egm_status_t egm__bdata_worker_keys(egm_bdata_worker_t *w, size_t n)
{
    if (n <= w->cap_keys)
        return EGM_OK;
    GROW(names, n, "bench.keys");
    GROW(keys, n, "bench.keys");
    GROW(srcs, n, "bench.keys");
    GROW(dsts, n, "bench.keys");
    GROW(lens, n, "bench.keys");
    GROW(sizes, n, "bench.keys");
    GROW(perm, n, "bench.keys");
    GROW(results, n, "bench.keys");
    GROW(versions, n, "bench.keys");
    for (size_t i = 0; i < n; i++)
        w->keys[i] = w->names[i];
    w->cap_keys = n;
    return EGM_OK;
}

void egm__bdata_key(const egm_bdata_worker_t *w, char *key, const char *what, uint64_t a,
                    uint64_t b)
{
    const egm_bdata_run_t *r = w->r;
    snprintf(key, EGM_BDATA_KEY_LEN, "%s/%s/%dx%d/%s/%llu/%llu", r->prefix,
             egm__bdata_proto_name(r->proto), r->procs, r->clients, what, (unsigned long long)a,
             (unsigned long long)b);
}

void egm__bdata_timed(egm_bdata_worker_t *w, egm_bench_samples_t *extra, uint64_t t0, uint64_t t1,
                      uint64_t bytes, uint64_t keys)
{
    egm_bdata_stats_t *st = &w->st;
    st->calls++;
    st->busy_ns += t1 - t0;
    st->bytes += bytes;
    st->keys += keys;
    if (egm__bench_samples_add(&st->lat, t1 - t0) != EGM_OK ||
        egm__bench_samples_add(&st->at, t0) != EGM_OK ||
        (extra != NULL && egm__bench_samples_add(extra, t1 - t0) != EGM_OK)) {
        egm__bdata_error(w, 1, "latency samples: out of memory");
        w->stop = 1;
    }
}

int egm__bdata_put_at(egm_bdata_worker_t *w, egm_bench_samples_t *extra, const char *key, size_t at,
                      uint64_t bytes)
{
    uint64_t t0 = egm__now_ns();
    egm_status_t status = egm_put_from(w->client, key, w->src.ptr + at, bytes, NULL);
    uint64_t t1 = egm__now_ns();
    if (status != EGM_OK) {
        egm__bdata_timed(w, extra, t0, t1, 0, 0);
        egm__bdata_error(w, 1, "put %s: %s (%s)", key, egm_status_string(status), egm_last_error());
        return 0;
    }
    egm__bdata_timed(w, extra, t0, t1, bytes, 1);
    return 1;
}

int egm__bdata_get_at(egm_bdata_worker_t *w, egm_bench_samples_t *extra, const char *key, size_t at,
                      uint64_t bytes)
{
    size_t len = 0;
    uint64_t t0 = egm__now_ns();
    egm_status_t status = egm_get_into(w->client, key, w->dst.ptr + at, bytes, &len);
    uint64_t t1 = egm__now_ns();
    if (status != EGM_OK || len != bytes) {
        egm__bdata_timed(w, extra, t0, t1, 0, 0);
        egm__bdata_error(w, 1, "get %s: %s (%zu bytes of %llu)", key, egm_status_string(status),
                         len, (unsigned long long)bytes);
        return 0;
    }
    egm__bdata_timed(w, extra, t0, t1, bytes, 1);
    return 1;
}

int egm__bdata_put_one(egm_bdata_worker_t *w, egm_bench_samples_t *extra, const char *key,
                       uint64_t bytes, uint64_t seed)
{
    if (egm__bdata_fill(&w->r->mem, &w->staging, &w->src, 0, bytes, seed) != EGM_OK) {
        egm__bdata_error(w, 1, "filling the source: %s", egm_last_error());
        w->stop = 1;
        return 0;
    }
    return egm__bdata_put_at(w, extra, key, 0, bytes);
}

void egm__bdata_get_one(egm_bdata_worker_t *w, egm_bench_samples_t *extra, const char *key,
                        uint64_t bytes, uint64_t seed)
{
    if (egm__bdata_poison(&w->r->mem, &w->dst, 0, bytes) != EGM_OK) {
        egm__bdata_error(w, 1, "poisoning the destination: %s", egm_last_error());
        w->stop = 1;
        return;
    }
    if (egm__bdata_get_at(w, extra, key, 0, bytes))
        egm__bdata_verify(w, 0, bytes, seed, key);
}

void egm__bdata_error(egm_bdata_worker_t *w, uint64_t n, const char *fmt, ...)
{
    va_list ap;
    w->st.errors += n;
    if (w->st.error[0] != '\0')
        return;
    va_start(ap, fmt);
    vsnprintf(w->st.error, sizeof(w->st.error), fmt, ap);
    va_end(ap);
}

void egm__bdata_verify(egm_bdata_worker_t *w, size_t at, size_t len, uint64_t seed, const char *key)
{
    int bad = 0;
    egm_status_t status = egm__bdata_check(&w->r->mem, &w->staging, &w->dst, at, len, seed, &bad);
    if (status != EGM_OK)
        egm__bdata_error(w, 1, "checking %s: %s", key, egm_last_error());
    else if (bad)
        egm__bdata_error(w, 1, "get %s: %s", key, egm_last_error());
}

void egm__bdata_remove(egm_bdata_worker_t *w, size_t n, int force)
{
    for (size_t i = 0; i < n; i += 1024) {
        size_t k = n - i < 1024 ? n - i : 1024;
        egm_status_t status = egm_batch_remove(w->client, k, w->keys + i, force, w->results + i);
        for (size_t j = 0; j < k; j++) {
            egm_status_t s = status != EGM_OK ? status : w->results[i + j];
            if (s != EGM_OK && s != EGM_ERR_NOT_FOUND) {
                egm__bdata_error(w, 1, "remove %s: %s", w->keys[i + j], egm_status_string(s));
                break;
            }
        }
    }
}

uint64_t egm__bdata_rand(egm_bdata_worker_t *w)
{
    uint64_t x = w->rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    return w->rng = x;
}

void egm__bdata_warm(egm_bdata_worker_t *w)
{
    char key[EGM_BDATA_KEY_LEN];
    size_t len = w->src.len < 4096 ? w->src.len : 4096, got = 0;
    uint64_t seed = egm__bdata_seed((uint64_t)w->global, 0x3a3a, 0);

    egm__bdata_key(w, key, "warm", (uint64_t)w->global, 0);
    egm_status_t status = egm__bdata_fill(&w->r->mem, &w->staging, &w->src, 0, len, seed);
    if (status == EGM_OK)
        status = egm_put_from(w->client, key, w->src.ptr, len, NULL);
    if (status == EGM_OK)
        status = egm_get_into(w->client, key, w->dst.ptr, w->dst.len, &got);
    if (status != EGM_OK)
        egm__bdata_error(w, 1, "warm-up put/get %s: %s (%s)", key, egm_status_string(status),
                         egm_last_error());
    else
        egm__bdata_verify(w, 0, len, seed, key);
    egm_remove(w->client, key, 1);
}

#define WARM_OBJECT (4u << 20)

static egm_status_t warm_remove(egm_client_t *client, char (*names)[EGM_BDATA_KEY_LEN],
                                const char **keys, egm_status_t *results, uint64_t n)
{
    egm_status_t status = EGM_OK;
    for (uint64_t i = 0; status == EGM_OK && i < n; i += 1024) {
        size_t k = n - i < 1024 ? (size_t)(n - i) : 1024;
        for (size_t j = 0; j < k; j++)
            keys[j] = names[i + j];
        /* plain: nothing read these, so no lease holds them (and nothing waits) */
        status = egm_batch_remove(client, k, keys, 0, results);
        for (size_t j = 0; status == EGM_OK && j < k; j++)
            if (results[j] != EGM_OK && results[j] != EGM_ERR_NOT_FOUND)
                status = egm__set_error(results[j], "remove %s: %s", keys[j],
                                        egm_status_string(results[j]));
    }
    return status;
}

egm_status_t egm__bdata_warm_pool(egm_bdata_run_t *r, egm_client_t *client, int which)
{
    size_t len = r->o.pool_size / 16 < WARM_OBJECT ? (size_t)(r->o.pool_size / 16) : WARM_OBJECT;
    uint64_t n = (uint64_t)(0.98 * (double)r->o.pool_size / (double)len), put = 0;
    uint64_t t0 = egm__now_ns();

    if (r->proto == EGM_BDATA_NVLINK) /* a VMM pool is mapped whole when imported */
        return EGM_OK;
    uint8_t *buf = egm_malloc(len, "bench.warm");
    char(*names)[EGM_BDATA_KEY_LEN] = egm_calloc(n, sizeof(*names), "bench.warm");
    const char **keys = egm_calloc(1024, sizeof(*keys), "bench.warm");
    egm_status_t *results = egm_calloc(1024, sizeof(*results), "bench.warm");
    egm_status_t status = EGM_OK;
    if (buf == NULL || names == NULL || keys == NULL || results == NULL)
        status = egm__set_error(EGM_ERR_NO_MEMORY, "warming the pool");
    if (status == EGM_OK)
        egm__bdata_pattern(buf, len, 0x3a3a);
    /* More than fits evicts the oldest of these (the master makes room): every page is
     * written all the same. */
    for (; status == EGM_OK && put < n; put++) {
        snprintf(names[put], EGM_BDATA_KEY_LEN, "%s/%s/%dx%d/warm/%d/%llu", r->prefix,
                 egm__bdata_proto_name(r->proto), r->procs, r->clients, which,
                 (unsigned long long)put);
        status = egm_put(client, names[put], buf, len, NULL);
    }
    egm_status_t removed = names != NULL ? warm_remove(client, names, keys, results, put) : EGM_OK;
    if (status == EGM_OK && removed == EGM_OK && !r->o.child)
        fprintf(stderr, "bench: a client wrote the pool once (untimed, first touch) in %.2f s\n",
                (double)(egm__now_ns() - t0) / 1e9);
    egm_free(buf);
    egm_free(names);
    egm_free(keys);
    egm_free(results);
    return status != EGM_OK ? status : removed;
}
