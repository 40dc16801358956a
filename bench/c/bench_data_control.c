/* bench data, the parent's side of the store: an embedded master (a thread)
 * and one provider child process unless --master names one, the control
 * client that preloads the mixed keyspace and fills the pool for the full
 * workload (untimed), and the master's /metrics (capacity, evictions). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/alloc.h"
#include "common/clock.h"
#include "common/config_int.h"
#include "common/log.h"
#include "common/sock.h"
#include "master/master.h"
#include "bench_data.h"

#define CONTROL_CHUNK_BYTES (64u << 20) /* one preload/fill call */
#define CONTROL_CHUNK_KEYS 256
#define HTTP_TIMEOUT_MS 5000
#define PROVIDER_READY_MS 300000 /* an EGM pool of many GiB takes a while */

egm_status_t egm__bdata_client_config(const egm_bdata_run_t *r, egm_config_t **config_p)
{
    egm_status_t status = egm_config_copy(r->config, config_p);
    if (status == EGM_OK)
        status = egm_config_set(*config_p, "protocol", egm__bdata_proto_name(r->proto));
    if (status != EGM_OK) {
        egm_config_destroy(*config_p);
        *config_p = NULL;
    }
    return status;
}

void egm__bdata_keyspace_key(const egm_bdata_run_t *r, char *key, uint64_t k)
{
    snprintf(key, EGM_BDATA_KEY_LEN, "%s/%s/%dx%d/m/%llu/0", r->prefix,
             egm__bdata_proto_name(r->proto), r->procs, r->clients, (unsigned long long)k);
}

uint64_t egm__bdata_keyspace_seed(uint64_t k)
{
    return egm__bdata_seed(0x6b657973, k, 0);
}

static void fill_key(const egm_bdata_run_t *r, char *key, uint64_t k)
{
    snprintf(key, EGM_BDATA_KEY_LEN, "%s/%s/%dx%d/ff/%llu/0", r->prefix,
             egm__bdata_proto_name(r->proto), r->procs, r->clients, (unsigned long long)k);
}

/* ---- master metrics --------------------------------------------------------- */

static egm_status_t http_get(const char *host, unsigned port, const char *path, char **body_p)
{
    char req[512], where[300];
    size_t len = 0, cap = 1 << 16;
    char *buf = egm_malloc(cap, "bench.http");
    int fd = -1;

    egm__sock_format_hostport(host, port, where, sizeof(where));

    *body_p = NULL;
    if (buf == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "an HTTP reply");
    egm_status_t status = egm__sock_tcp_connect(host, (uint16_t)port, HTTP_TIMEOUT_MS, &fd);
    int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, where);
    if (status == EGM_OK)
        status = egm__sock_write_full(fd, req, (size_t)n);
    while (status == EGM_OK) {
        if (len + 1 == cap) {
            char *more = egm_realloc(buf, cap * 2, "bench.http");
            if (more == NULL) {
                status = egm__set_error(EGM_ERR_NO_MEMORY, "an HTTP reply");
                break;
            }
            buf = more;
            cap *= 2;
        }
        ssize_t got = read(fd, buf + len, cap - 1 - len);
        if (got < 0 && errno == EINTR)
            continue;
        if (got < 0)
            status =
                egm__set_error(EGM_ERR_IO, "reading http://%s%s: %s", where, path, strerror(errno));
        if (got <= 0)
            break;
        len += (size_t)got;
    }
    if (fd >= 0)
        close(fd);
    buf[len] = '\0';
    if (status == EGM_OK && strncmp(buf, "HTTP/1.", 7) == 0 && strstr(buf, " 200 ") != NULL &&
        strstr(buf, "\r\n\r\n") != NULL) {
        *body_p = buf;
        return EGM_OK;
    }
    egm_free(buf);
    return status != EGM_OK
               ? status
               : egm__set_error(EGM_ERR_PROTOCOL, "http://%s%s: no 200 reply", where, path);
}

double egm__bdata_metric(const char *body, const char *name)
{
    char pattern[128];
    snprintf(pattern, sizeof(pattern), "\n%s ", name);
    const char *p = strstr(body, pattern);
    return p != NULL ? strtod(p + strlen(pattern), NULL) : -1;
}

egm_status_t egm__bdata_metrics(egm_bdata_run_t *r, egm_bdata_metrics_t *m)
{
    char *body = NULL, where[300];
    memset(m, 0, sizeof(*m));
    if (r->http_port == 0)
        return egm__set_error(EGM_ERR_NOT_SUPPORTED, "the master's admin HTTP is off (http_port)");
    egm_status_t status = http_get(r->http_host, r->http_port, "/metrics", &body);
    if (status != EGM_OK)
        return status;
    m->capacity = egm__bdata_metric(body, "egm_master_capacity_bytes");
    m->allocated = egm__bdata_metric(body, "egm_master_allocated_bytes");
    m->evictions = egm__bdata_metric(body, "egm_master_evictions_total");
    m->evicted_bytes = egm__bdata_metric(body, "egm_master_evicted_bytes_total");
    m->eviction_runs = egm__bdata_metric(body, "egm_master_eviction_runs_total");
    m->held = egm__bdata_metric(body, "egm_master_held_bytes");
    egm_free(body);
    m->ok = m->capacity > 0 && m->allocated >= 0 && m->evictions >= 0 && m->evicted_bytes >= 0 &&
            m->eviction_runs >= 0;
    return m->ok ? EGM_OK
                 : egm__set_error(
                       EGM_ERR_PROTOCOL, "http://%s/metrics: capacity or eviction counters missing",
                       egm__sock_format_hostport(r->http_host, r->http_port, where, sizeof(where)));
}

/* Held space (objects force-removed under a lease) is counted as used until
 * the lease ends: a phase that puts into it would answer NO_SPACE, and the
 * full workload's starting fill would be off. Waits (untimed) until the
 * master holds none, at most the lease TTL plus HELD_MARGIN_MS (the master's
 * tick frees it once a second). Without the master's metrics (an external
 * master without admin HTTP) there is nothing to wait on: a warning, once. */
#define HELD_MARGIN_MS 5000

egm_status_t egm__bdata_wait_held(egm_bdata_run_t *r)
{
    egm_bdata_metrics_t m;
    if (r->http_port == 0)
        return EGM_OK;
    uint64_t t0 = egm__now_ms(), deadline = t0 + r->lease_ms + HELD_MARGIN_MS;
    for (;;) {
        egm_status_t status = egm__bdata_metrics(r, &m);
        if (status != EGM_OK && !r->embedded) { /* as before: only full needs them */
            if (!r->held_unwatched)
                fprintf(stderr, "bench: not waiting for held space: %s\n", egm_last_error());
            r->held_unwatched = 1;
            return EGM_OK;
        }
        if (status != EGM_OK)
            return status;
        if (m.held <= 0) /* < 0: a master without held space */
            return EGM_OK;
        if (egm__now_ms() >= deadline)
            return egm__set_error(
                EGM_ERR_TIMEOUT,
                "the master still holds %.0f bytes of force-removed objects %llu ms after the "
                "last phase; their read leases should have ended (default_kv_lease_ttl %llu ms: "
                "with an external master, pass its value with --default-kv-lease-ttl)",
                m.held, (unsigned long long)(egm__now_ms() - t0), (unsigned long long)r->lease_ms);
        egm__sleep_ms(50);
    }
}

/* ---- the cluster -------------------------------------------------------------- */

static void *master_main(void *arg)
{
    egm__master_run(arg);
    return NULL;
}

static egm_status_t start_master(egm_bdata_run_t *r)
{
    egm_config_t *mconfig = NULL;
    egm_master_t *master = NULL;
    egm_status_t status = egm_config_copy(r->config, &mconfig);
    if (status == EGM_OK)
        status = egm_config_set(mconfig, "port", "0");
    if (status == EGM_OK)
        status = egm_config_set(mconfig, "listen_address", "127.0.0.1");
    if (status == EGM_OK)
        status = egm_config_set(mconfig, "http_port", "0");
    /* The full workload puts into a pool it has just filled, faster than any
     * residency would allow: it measures eviction as Mooncake does it (none). */
    if (status == EGM_OK && !EGM_CONFIG_IS_SET(mconfig, eviction_min_residency_ms))
        status = egm_config_set(mconfig, "eviction_min_residency_ms", "0");
    /* A force remove of keys the gets read holds their space until the lease
     * ends; the next phase waits for it (egm__bdata_wait_held). A lease of
     * EGM_BDATA_LEASE_MS, not 10 s, keeps that wait short. It is no shorter than
     * the longest location_cache_ms, so cached gets are served exactly as under
     * the default lease. */
    if (status == EGM_OK && !EGM_CONFIG_IS_SET(mconfig, default_kv_lease_ttl))
        status = egm_config_set(mconfig, "default_kv_lease_ttl",
                                r->o.smoke ? EGM_BDATA_SMOKE_LEASE_MS : EGM_BDATA_LEASE_MS);
    if (status == EGM_OK)
        status = egm__master_create(mconfig, &master);
    r->lease_ms = (uint64_t)egm__config_settings(mconfig)->default_kv_lease_ttl;
    egm_config_destroy(mconfig);
    if (status != EGM_OK)
        return status;
    r->master = master;
    if (pthread_create(&r->master_thread, NULL, master_main, master) != 0)
        return egm__set_error(EGM_ERR_NO_MEMORY, "starting the master thread");
    r->master_started = 1;
    snprintf(r->master_addr, sizeof(r->master_addr), "127.0.0.1:%u",
             (unsigned)egm__master_port(master));
    snprintf(r->http_host, sizeof(r->http_host), "127.0.0.1");
    r->http_port = egm__master_http_port(master);
    return egm_config_set(r->config, "master_server_addr", r->master_addr);
}

static egm_status_t start_provider(egm_bdata_run_t *r)
{
    char pool[32], chunk[32], line[512], exe[4096];
    egm_status_t status = egm__process_sibling_exe("egmstore", exe, sizeof(exe));
    if (status != EGM_OK)
        return status;
    uint64_t max_chunk = r->o.pool_size < (1ull << 30) ? r->o.pool_size : (1ull << 30);
    snprintf(pool, sizeof(pool), "%llu", (unsigned long long)r->o.pool_size);
    snprintf(chunk, sizeof(chunk), "%llu", (unsigned long long)max_chunk);
    char *argv[16] = {exe, /* the egmstore next to egm-bench */
                      "provider",  "--master",      r->master_addr, "--global-segment-size",
                      pool,        "--max-mr-size", chunk,          "--local-hostname",
                      "127.0.0.1", "--log-level",   "warn"};
    if (r->o.pool_egm) { /* the EGM Store pool: HOST_NUMA memory served over nvlink */
        argv[12] = "--enable-egm-store-pool";
        argv[13] = "true";
    }
    status = egm__process_spawn(argv, EGM_PROCESS_STDOUT_CAPTURE, &r->provider);
    if (status == EGM_OK)
        status = egm__process_wait_line(&r->provider, "egmstore provider ready", line, sizeof(line),
                                        PROVIDER_READY_MS);
    if (status == EGM_OK)
        fprintf(stderr, "bench: provider pid %d: %s\n", (int)r->provider.pid, line);
    return status;
}

static egm_status_t external_master(egm_bdata_run_t *r)
{
    uint16_t port = 0;
    int64_t http = egm__config_settings(r->config)->http_port;
    snprintf(r->master_addr, sizeof(r->master_addr), "%s",
             egm__config_settings(r->config)->master_server_addr);
    egm_status_t status =
        egm__sock_split_hostport(r->master_addr, r->http_host, sizeof(r->http_host), &port);
    r->http_port = http > 0 ? (unsigned)http : 0;
    r->lease_ms = (uint64_t)egm__config_settings(r->config)->default_kv_lease_ttl;
    return status;
}

static egm_status_t control_client(egm_bdata_run_t *r)
{
    uint64_t keys = CONTROL_CHUNK_BYTES / r->o.block;
    if (keys > CONTROL_CHUNK_KEYS)
        keys = CONTROL_CHUNK_KEYS;
    if (keys == 0)
        keys = 1;
    egm_status_t status = egm_client_create(r->config, &r->control);
    if (status != EGM_OK)
        return status;
    r->control_buf.len = keys * r->o.block;
    r->control_buf.ptr = egm_malloc(r->control_buf.len, "bench.control");
    if (r->control_buf.ptr == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "the control buffer");
    status = egm_register_buffer(r->control, r->control_buf.ptr, r->control_buf.len);
    if (status != EGM_OK) {
        egm_free(r->control_buf.ptr);
        r->control_buf.ptr = NULL;
    }
    return status;
}

egm_status_t egm__bdata_cluster_start(egm_bdata_run_t *r)
{
    egm_status_t status;
    r->provider.out_fd = -1;
    r->embedded = !EGM_CONFIG_IS_SET(r->config, master_server_addr);
    if (r->embedded) {
        status = start_master(r);
        if (status == EGM_OK)
            status = start_provider(r);
    } else {
        status = external_master(r);
    }
    if (status == EGM_OK)
        status = control_client(r);
    return status;
}

egm_status_t egm__bdata_cluster_stop(egm_bdata_run_t *r)
{
    egm_status_t status = EGM_OK;
    if (r->control_buf.ptr != NULL)
        egm_unregister_buffer(r->control, r->control_buf.ptr);
    egm_free(r->control_buf.ptr);
    r->control_buf.ptr = NULL;
    egm_client_destroy(r->control);
    r->control = NULL;
    if (r->provider.pid > 0) {
        int code = -1;
        egm__process_signal(&r->provider, SIGTERM);
        if (egm__process_wait(&r->provider, 30000, &code) != EGM_OK || code != 0)
            status = egm__set_error(EGM_ERR_INTERNAL, "the provider did not stop cleanly (exit %d)",
                                    code);
    }
    egm__process_cleanup(&r->provider);
    if (r->master_started) {
        egm__master_stop(r->master);
        pthread_join(r->master_thread, NULL);
        r->master_started = 0;
    }
    egm__master_destroy(r->master);
    r->master = NULL;
    return status;
}

/* ---- preload, fill, remove ---------------------------------------------------- */

typedef void (*name_fn)(const egm_bdata_run_t *r, char *key, uint64_t k);

typedef struct {
    char (*names)[EGM_BDATA_KEY_LEN];
    const char **keys;
    const void **srcs;
    size_t *lens;
    egm_status_t *results;
} control_args_t;

static void args_free(control_args_t *a)
{
    egm_free(a->names);
    egm_free(a->keys);
    egm_free(a->srcs);
    egm_free(a->lens);
    egm_free(a->results);
    memset(a, 0, sizeof(*a));
}

static egm_status_t args_alloc(control_args_t *a, size_t n)
{
    a->names = egm_calloc(n, sizeof(*a->names), "bench.control");
    a->keys = egm_calloc(n, sizeof(*a->keys), "bench.control");
    a->srcs = egm_calloc(n, sizeof(*a->srcs), "bench.control");
    a->lens = egm_calloc(n, sizeof(*a->lens), "bench.control");
    a->results = egm_calloc(n, sizeof(*a->results), "bench.control");
    if (!a->names || !a->keys || !a->srcs || !a->lens || !a->results) {
        args_free(a);
        return egm__set_error(EGM_ERR_NO_MEMORY, "control arguments");
    }
    for (size_t i = 0; i < n; i++)
        a->keys[i] = a->names[i];
    return EGM_OK;
}

static size_t chunk_keys(const egm_bdata_run_t *r)
{
    return r->control_buf.len / r->o.block;
}

/* Keys [first, first + n) named by name: each with its own pattern (keyspace)
 * or all with the buffer's first block (fill). */
static egm_status_t put_keys(egm_bdata_run_t *r, control_args_t *a, name_fn name, uint64_t first,
                             size_t n, int patterned)
{
    for (size_t j = 0; j < n; j++) {
        name(r, a->names[j], first + j);
        a->srcs[j] = r->control_buf.ptr + (patterned ? j * r->o.block : 0);
        a->lens[j] = r->o.block;
        if (patterned)
            egm__bdata_pattern(r->control_buf.ptr + j * r->o.block, r->o.block,
                               egm__bdata_keyspace_seed(first + j));
    }
    egm_status_t status = egm_batch_put_from(r->control, n, a->keys, (const void *const *)a->srcs,
                                             a->lens, NULL, a->results);
    for (size_t j = 0; status == EGM_OK && j < n; j++)
        if (a->results[j] != EGM_OK)
            status = egm__set_error(a->results[j], "put %s: %s", a->keys[j],
                                    egm_status_string(a->results[j]));
    return status;
}

/* force only where gets read the keys (a lease holds them); see egm__bdata_remove. */
static egm_status_t remove_keys(egm_bdata_run_t *r, name_fn name, uint64_t count, int force)
{
    size_t chunk = 1024;
    control_args_t a = {0};
    egm_status_t status = args_alloc(&a, chunk);
    for (uint64_t k = 0; status == EGM_OK && k < count;) {
        size_t n = 0;
        while (n < chunk && k < count)
            name(r, a.names[n++], k++);
        status = egm_batch_remove(r->control, n, a.keys, force, a.results);
        for (size_t j = 0; status == EGM_OK && j < n; j++)
            if (a.results[j] != EGM_OK && a.results[j] != EGM_ERR_NOT_FOUND)
                status = egm__set_error(a.results[j], "remove %s: %s", a.keys[j],
                                        egm_status_string(a.results[j]));
    }
    args_free(&a);
    return status;
}

static egm_status_t preload(egm_bdata_run_t *r)
{
    control_args_t a = {0};
    size_t chunk = chunk_keys(r);
    uint64_t t0 = egm__now_ns();
    egm_status_t status = args_alloc(&a, chunk);
    if (status != EGM_OK)
        return status;
    for (uint64_t k = 0; status == EGM_OK && k < r->o.keys; k += chunk) {
        size_t n = r->o.keys - k < chunk ? (size_t)(r->o.keys - k) : chunk;
        status = put_keys(r, &a, egm__bdata_keyspace_key, k, n, 1);
    }
    args_free(&a);
    if (status == EGM_OK)
        fprintf(stderr, "bench: preloaded %llu keys in %.2f s\n", (unsigned long long)r->o.keys,
                (double)(egm__now_ns() - t0) / 1e9);
    return status;
}

/* Puts blocks until the master's allocated bytes reach `target` x capacity
 * (NO_SPACE before that ends the fill when no_space_ok). */
static egm_status_t fill_pool(egm_bdata_run_t *r, double target, int no_space_ok,
                              egm_bdata_metrics_t *m)
{
    control_args_t a = {0};
    size_t chunk = chunk_keys(r);
    egm_status_t status = egm__bdata_metrics(r, m);
    if (status != EGM_OK)
        return egm__set_error(status, "filling the pool needs the master's metrics: %s",
                              egm_last_error());
    status = args_alloc(&a, chunk);
    egm__bdata_pattern(r->control_buf.ptr, r->o.block, 0xf111);
    r->fill_keys = 0;
    uint64_t max_keys = (uint64_t)(m->capacity / (double)r->o.block) + 1;
    while (status == EGM_OK && m->allocated < target * m->capacity && r->fill_keys < max_keys) {
        double want = (target * m->capacity - m->allocated) / (double)r->o.block + 1;
        size_t n = want < (double)chunk ? (size_t)want : chunk;
        status = put_keys(r, &a, fill_key, r->fill_keys, n, 0);
        r->fill_keys += n;
        if (status == EGM_ERR_NO_SPACE && no_space_ok) {
            status = egm__bdata_metrics(r, m);
            break;
        }
        if (status == EGM_OK)
            status = egm__bdata_metrics(r, m);
    }
    args_free(&a);
    return status;
}

egm_status_t egm__bdata_control_before(egm_bdata_run_t *r, const egm_bdata_phase_t *ph)
{
    egm_status_t status = EGM_OK;
    if (ph->workload == EGM_BDATA_MIXED)
        status = preload(r);
    else if (ph->workload == EGM_BDATA_FULL)
        status = fill_pool(r, r->o.fill, 0, &r->before);
    if (status == EGM_OK && ph->workload == EGM_BDATA_FULL)
        fprintf(stderr, "bench: filled the pool to %.1f%% with %llu keys\n",
                100 * r->before.allocated / r->before.capacity, (unsigned long long)r->fill_keys);
    return status;
}

egm_status_t egm__bdata_control_after(egm_bdata_run_t *r, const egm_bdata_phase_t *ph,
                                      egm_bdata_record_t *rec)
{
    egm_bdata_metrics_t m;
    if (ph->workload == EGM_BDATA_MIXED)
        return remove_keys(r, egm__bdata_keyspace_key, r->o.keys, 1); /* read */
    if (ph->workload != EGM_BDATA_FULL)
        return EGM_OK;
    egm_status_t status = egm__bdata_metrics(r, &m);
    rec->full = 1;
    rec->metrics_ok = status == EGM_OK;
    if (status == EGM_OK) {
        rec->evictions = (uint64_t)(m.evictions - r->before.evictions);
        rec->evicted_bytes = (uint64_t)(m.evicted_bytes - r->before.evicted_bytes);
        rec->eviction_runs = (uint64_t)(m.eviction_runs - r->before.eviction_runs);
        rec->used_before = r->before.allocated / r->before.capacity;
    }
    egm_status_t removed = remove_keys(r, fill_key, r->fill_keys, 0); /* only put */
    return status != EGM_OK ? status : removed;
}
