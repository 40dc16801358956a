/* `egmstore demo`: an embedded master (a thread here) and a provider (a child
 * process) on free loopback ports; clients put and get objects over shm and tcp,
 * verify every byte and print a table. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <egmstore/egmstore.h>
#include "common/alloc.h"
#include "common/clock.h"
#include "common/config_int.h"
#include "common/log.h"
#include "common/process.h"
#include "master/master.h"
#include "tools/cli.h"

#define DEMO_POOL "512MiB"
#define DEMO_CHUNK "128MiB"
#define BATCH_KEYS 64
#define BATCH_SIZE (64u << 10)

typedef struct {
    size_t size;
    int count;
} demo_size_t;

static const demo_size_t demo_sizes[] = {
    {4u << 10, 256}, {64u << 10, 128}, {1u << 20, 32}, {8u << 20, 8}};

typedef struct {
    uint64_t objects, bytes, verified;
    double put_s, get_s, batch_gbps;
    uint64_t *lat_ns; /* get latencies */
    size_t n_lat;
} demo_row_t;

/* Deterministic content of object i of a size: verification needs no copy. */
static void fill(uint8_t *buf, size_t len, uint64_t seed)
{
    uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
    for (size_t i = 0; i < len; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        size_t n = len - i < 8 ? len - i : 8;
        memcpy(buf + i, &x, n);
    }
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double percentile_us(uint64_t *v, size_t n, double p)
{
    if (n == 0)
        return 0;
    qsort(v, n, sizeof(*v), cmp_u64);
    size_t k = (size_t)(p * (double)(n - 1) + 0.5);
    return (double)v[k] / 1000.0;
}

static egm_status_t run_sizes(egm_client_t *client, const char *transport, uint8_t *src,
                              uint8_t *dst, demo_row_t *row)
{
    char key[96];
    for (size_t s = 0; s < sizeof(demo_sizes) / sizeof(demo_sizes[0]); s++) {
        const demo_size_t *ds = &demo_sizes[s];
        for (int i = 0; i < ds->count; i++) {
            snprintf(key, sizeof(key), "demo/%s/%zu/%d", transport, ds->size, i);
            fill(src, ds->size, (uint64_t)ds->size * 7919 + (uint64_t)i);
            uint64_t t0 = egm__now_ns();
            egm_status_t status = egm_put_from(client, key, src, ds->size, NULL);
            row->put_s += (double)(egm__now_ns() - t0) / 1e9;
            if (status != EGM_OK)
                return egm__set_error(status, "put %s: %s", key, egm_last_error());
        }
        for (int i = 0; i < ds->count; i++) {
            size_t len = 0;
            snprintf(key, sizeof(key), "demo/%s/%zu/%d", transport, ds->size, i);
            uint64_t t0 = egm__now_ns();
            egm_status_t status = egm_get_into(client, key, dst, ds->size, &len);
            uint64_t dt = egm__now_ns() - t0;
            if (status != EGM_OK)
                return egm__set_error(status, "get %s: %s", key, egm_last_error());
            row->get_s += (double)dt / 1e9;
            row->lat_ns[row->n_lat++] = dt;
            fill(src, ds->size, (uint64_t)ds->size * 7919 + (uint64_t)i);
            row->objects++;
            row->bytes += ds->size;
            if (len == ds->size && memcmp(src, dst, ds->size) == 0)
                row->verified++;
        }
    }
    return EGM_OK;
}

static egm_status_t run_batch(egm_client_t *client, const char *transport, uint8_t *src,
                              uint8_t *dst, demo_row_t *row)
{
    char names[BATCH_KEYS][64];
    const char *keys[BATCH_KEYS];
    const void *srcs[BATCH_KEYS];
    void *dsts[BATCH_KEYS];
    size_t lens[BATCH_KEYS], sizes[BATCH_KEYS];
    egm_status_t results[BATCH_KEYS];

    for (int i = 0; i < BATCH_KEYS; i++) {
        snprintf(names[i], sizeof(names[i]), "demo/%s/batch/%d", transport, i);
        keys[i] = names[i];
        srcs[i] = src + (size_t)i * BATCH_SIZE;
        dsts[i] = dst + (size_t)i * BATCH_SIZE;
        lens[i] = BATCH_SIZE;
        fill(src + (size_t)i * BATCH_SIZE, BATCH_SIZE, 1000003u + (uint64_t)i);
    }
    egm_status_t status = egm_batch_put_from(client, BATCH_KEYS, keys, srcs, lens, NULL, results);
    for (int i = 0; status == EGM_OK && i < BATCH_KEYS; i++)
        if (results[i] != EGM_OK)
            status = egm__set_error(results[i], "batch put %s: %s", keys[i],
                                    egm_status_string(results[i]));
    if (status != EGM_OK)
        return status;
    uint64_t t0 = egm__now_ns();
    status = egm_batch_get_into(client, BATCH_KEYS, keys, dsts, lens, sizes, results);
    double dt = (double)(egm__now_ns() - t0) / 1e9;
    for (int i = 0; status == EGM_OK && i < BATCH_KEYS; i++) {
        if (results[i] != EGM_OK)
            return egm__set_error(results[i], "batch get %s: %s", keys[i],
                                  egm_status_string(results[i]));
        row->objects++;
        row->bytes += BATCH_SIZE;
        if (sizes[i] == BATCH_SIZE && memcmp(srcs[i], dsts[i], BATCH_SIZE) == 0)
            row->verified++;
    }
    row->batch_gbps = (double)BATCH_KEYS * BATCH_SIZE / dt / 1e9;
    return status;
}

static egm_status_t run_transport(const egm_config_t *base, const char *transport, demo_row_t *row)
{
    egm_config_t *config = NULL;
    egm_client_t *client = NULL;
    size_t buf_len = 8u << 20;
    uint8_t *src = NULL, *dst = NULL;
    egm_status_t status;

    if (buf_len < (size_t)BATCH_KEYS * BATCH_SIZE)
        buf_len = (size_t)BATCH_KEYS * BATCH_SIZE;
    status = egm_config_copy(base, &config);
    if (status == EGM_OK)
        status = egm_config_set(config, "protocol", transport);
    if (status == EGM_OK)
        status = egm_client_create(config, &client);
    if (status != EGM_OK)
        goto out;
    src = egm_malloc(buf_len, "demo.buffer");
    dst = egm_malloc(buf_len, "demo.buffer");
    if (src == NULL || dst == NULL) {
        status = egm__set_error(EGM_ERR_NO_MEMORY, "demo buffers");
        goto out;
    }
    /* Zero-copy calls need registered memory, as in Mooncake. */
    status = egm_register_buffer(client, src, buf_len);
    if (status == EGM_OK)
        status = egm_register_buffer(client, dst, buf_len);
    if (status == EGM_OK)
        status = run_sizes(client, transport, src, dst, row);
    if (status == EGM_OK)
        status = run_batch(client, transport, src, dst, row);
    if (status == EGM_OK) {
        uint64_t removed = 0;
        status = egm_remove_all(client, 1, &removed);
    }
out:
    if (client != NULL) {
        egm_unregister_buffer(client, src);
        egm_unregister_buffer(client, dst);
    }
    egm_client_destroy(client);
    egm_free(src);
    egm_free(dst);
    egm_config_destroy(config);
    return status;
}

static void *master_main(void *arg)
{
    egm__master_run(arg);
    return NULL;
}

static void print_table(const char *const *names, demo_row_t *rows, size_t n)
{
    printf("\n%-9s %8s %10s %9s %9s %11s %11s %14s %9s\n", "transport", "objects", "bytes",
           "put GB/s", "get GB/s", "get p50 us", "get p99 us", "batch get GB/s", "verified");
    for (size_t i = 0; i < n; i++) {
        demo_row_t *r = &rows[i];
        double put_bytes = (double)(r->bytes - (uint64_t)BATCH_KEYS * BATCH_SIZE);
        double p50 = percentile_us(r->lat_ns, r->n_lat, 0.50);
        double p99 = percentile_us(r->lat_ns, r->n_lat, 0.99);
        printf("%-9s %8llu %10llu %9.2f %9.2f %11.1f %11.1f %14.2f %4llu/%-4llu\n", names[i],
               (unsigned long long)r->objects, (unsigned long long)r->bytes,
               r->put_s > 0 ? put_bytes / r->put_s / 1e9 : 0.0,
               r->get_s > 0 ? put_bytes / r->get_s / 1e9 : 0.0, p50, p99, r->batch_gbps,
               (unsigned long long)r->verified, (unsigned long long)r->objects);
    }
    printf("\nsizes per transport: 256 x 4 KiB, 128 x 64 KiB, 32 x 1 MiB, 8 x 8 MiB (single "
           "put_from/get_into), then one batch of %d x 64 KiB\n",
           BATCH_KEYS);
}

int egm__cmd_demo(egm_cli_t *cli)
{
    static const char *transports[] = {"shm", "tcp"};
    demo_row_t rows[2];
    egm_master_t *master = NULL;
    egm_process_t provider = {.pid = 0, .out_fd = -1};
    pthread_t master_thread;
    int master_started = 0, rc = EGM_EXIT_FAIL;
    char addr[64], line[512];
    egm_status_t status;

    if (cli->argc != 0) {
        fprintf(stderr, "egmstore: error: demo takes no arguments (got \"%s\")\n", cli->argv[0]);
        return EGM_EXIT_USAGE;
    }
    memset(rows, 0, sizeof(rows));
    signal(SIGPIPE, SIG_IGN);
    egm_config_set(cli->config, "port", "0");
    egm_config_set(cli->config, "listen_address", "127.0.0.1");
    /* The demo needs no admin HTTP: the default port (9003) belongs to a real
     * master on this host. --http-port N (0 = a free one) still asks for it. */
    if (!EGM_CONFIG_IS_SET(cli->config, http_port))
        egm_config_set(cli->config, "http_port", "-1");
    if (!EGM_CONFIG_IS_SET(cli->config, log_level))
        egm__log_set_level(EGM_LOG_WARN);
    status = egm__master_create(cli->config, &master);
    if (status != EGM_OK) {
        egm__cli_error("demo master", status);
        return EGM_EXIT_FAIL;
    }
    if (pthread_create(&master_thread, NULL, master_main, master) != 0)
        goto out;
    master_started = 1;
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)egm__master_port(master));
    egm_config_set(cli->config, "master_server_addr", addr);
    printf("demo: master on %s (in this process)\n", addr);
    if (egm__master_http_port(master) != 0)
        printf("demo: master admin http on 127.0.0.1:%u\n",
               (unsigned)egm__master_http_port(master));

    char *argv[] = {(char *)egm__process_self_exe(),
                    "provider",
                    "--master",
                    addr,
                    "--global-segment-size",
                    DEMO_POOL,
                    "--max-mr-size",
                    DEMO_CHUNK,
                    "--local-hostname",
                    "127.0.0.1",
                    "--log-level",
                    "warn",
                    NULL};
    status = egm__process_spawn(argv, EGM_PROCESS_STDOUT_CAPTURE, &provider);
    if (status == EGM_OK)
        status =
            egm__process_wait_line(&provider, "egmstore provider ready", line, sizeof(line), 60000);
    if (status != EGM_OK) {
        egm__cli_error("demo provider", status);
        goto out;
    }
    printf("demo: provider pid %d: %s\n", (int)provider.pid, line);

    for (size_t t = 0; t < 2; t++) {
        size_t n_lat = 0;
        for (size_t s = 0; s < sizeof(demo_sizes) / sizeof(demo_sizes[0]); s++)
            n_lat += (size_t)demo_sizes[s].count;
        rows[t].lat_ns = egm_calloc(n_lat, sizeof(uint64_t), "demo.latency");
        printf("demo: %s: put and get of %zu objects, then a batch of %d...\n", transports[t],
               n_lat, BATCH_KEYS);
        fflush(stdout);
        status = rows[t].lat_ns ? run_transport(cli->config, transports[t], &rows[t])
                                : EGM_ERR_NO_MEMORY;
        if (status != EGM_OK) {
            egm__cli_error(transports[t], status);
            goto out;
        }
    }
    print_table(transports, rows, 2);
    rc = EGM_EXIT_OK;
    for (size_t t = 0; t < 2; t++)
        if (rows[t].verified != rows[t].objects)
            rc = EGM_EXIT_FAIL;
    printf("%s\n", rc == EGM_EXIT_OK ? "demo: every object verified byte for byte"
                                     : "demo: ERROR: some objects did not verify");

out:
    if (provider.pid > 0) {
        int code = -1;
        egm__process_signal(&provider, SIGTERM);
        if (egm__process_wait(&provider, 15000, &code) != EGM_OK || code != 0) {
            fprintf(stderr, "egmstore: error: demo provider did not stop cleanly (exit %d)\n",
                    code);
            rc = EGM_EXIT_FAIL;
        }
    }
    egm__process_cleanup(&provider);
    if (master_started) {
        egm__master_stop(master);
        pthread_join(master_thread, NULL);
    }
    egm__master_destroy(master);
    for (size_t t = 0; t < 2; t++)
        egm_free(rows[t].lat_ns);
    return rc;
}
