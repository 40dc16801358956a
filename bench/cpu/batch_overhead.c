/* egm-batch-bench: per-key overhead of batch Put/Get on the CPU path. An
 * in-process master (a thread), one provider process (`egmstore provider`,
 * found next to this binary or named by --egmstore), and a client that
 * batch_put_from's then batch_get_into's N keys of B bytes over shm into
 * scattered places of one registered buffer. Prints one JSON line.
 *
 * usage: egm-batch-bench [--keys N] [--block BYTES] [--reps R] [--put-chunk K]
 *                        [--egmstore PATH] [--protocol shm|tcp]
 * Under callgrind use few reps; the master's instructions are counted too. */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <egmstore/egmstore.h>
#include "common/clock.h"
#include "common/log.h"
#include "common/process.h"
#include "master/master.h"

static int check(egm_status_t st, const char *what)
{
    if (st == EGM_OK)
        return 0;
    fprintf(stderr, "egm-batch-bench: %s: %s (%s)\n", what, egm_status_string(st),
            egm_last_error());
    return -1;
}

static void *master_main(void *arg)
{
    egm__master_run(arg);
    return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static double median_ms(uint64_t *ns, size_t n)
{
    qsort(ns, n, sizeof(*ns), cmp_u64);
    return (double)ns[n / 2] / 1e6;
}

typedef struct {
    size_t keys, block, reps, put_chunk;
    const char *egmstore, *protocol;
} opts_t;

static int parse(int argc, char **argv, opts_t *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (v == NULL)
            return -1;
        if (strcmp(a, "--keys") == 0)
            o->keys = strtoull(v, NULL, 0);
        else if (strcmp(a, "--block") == 0)
            o->block = strtoull(v, NULL, 0);
        else if (strcmp(a, "--reps") == 0)
            o->reps = strtoull(v, NULL, 0);
        else if (strcmp(a, "--put-chunk") == 0)
            o->put_chunk = strtoull(v, NULL, 0);
        else if (strcmp(a, "--egmstore") == 0)
            o->egmstore = v;
        else if (strcmp(a, "--protocol") == 0)
            o->protocol = v;
        else
            return -1;
        i++;
    }
    return o->keys > 0 && o->block > 0 && o->reps > 0 && o->reps <= 64 && o->put_chunk > 0 ? 0 : -1;
}

static int run(egm_client_t *client, const opts_t *o)
{
    char(*names)[32] = calloc(o->keys, sizeof(*names));
    const char **keys = calloc(o->keys, sizeof(*keys));
    void **ptrs = calloc(o->keys, sizeof(*ptrs));
    size_t *lens = calloc(o->keys, sizeof(*lens)), *sizes = calloc(o->keys, sizeof(*sizes));
    size_t *perm = calloc(o->keys, sizeof(*perm));
    egm_status_t *results = calloc(o->keys, sizeof(*results));
    size_t buf_len = o->keys * o->block;
    uint8_t *buf = malloc(buf_len);
    uint64_t put_ns[64], get_ns[64];
    int rc = -1;

    if (!names || !keys || !ptrs || !lens || !sizes || !perm || !results || !buf)
        goto out;
    memset(buf, 0x5a, buf_len);
    if (check(egm_register_buffer(client, buf, buf_len), "register") != 0)
        goto out;
    for (size_t i = 0; i < o->keys; i++)
        perm[i] = i;
    srand(7);
    for (size_t i = o->keys - 1; i > 0; i--) {
        size_t j = (size_t)rand() % (i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    for (size_t i = 0; i < o->keys; i++) {
        snprintf(names[i], sizeof(names[i]), "blk/%zu", i);
        keys[i] = names[i];
        ptrs[i] = buf + perm[i] * o->block;
        lens[i] = o->block;
    }
    for (size_t r = 0; r < o->reps; r++) {
        uint64_t t0 = egm__now_ns();
        for (size_t i = 0; i < o->keys; i += o->put_chunk) {
            size_t n = o->keys - i < o->put_chunk ? o->keys - i : o->put_chunk;
            if (check(egm_batch_put_from(client, n, keys + i, (const void *const *)ptrs + i,
                                         lens + i, NULL, results + i),
                      "batch_put_from") != 0)
                goto out_unreg;
        }
        put_ns[r] = egm__now_ns() - t0;
        for (size_t i = 0; i < o->keys; i++)
            if (check(results[i], "batch_put_from key") != 0)
                goto out_unreg;
        t0 = egm__now_ns();
        if (check(egm_batch_get_into(client, o->keys, keys, ptrs, lens, sizes, results),
                  "batch_get_into") != 0)
            goto out_unreg;
        get_ns[r] = egm__now_ns() - t0;
        for (size_t i = 0; i < o->keys; i++)
            if (check(results[i], "batch_get_into key") != 0 || sizes[i] != o->block)
                goto out_unreg;
        uint64_t removed = 0;
        if (check(egm_remove_all(client, 1, &removed), "remove_all") != 0)
            goto out_unreg;
    }
    double put_ms = median_ms(put_ns, o->reps), get_ms = median_ms(get_ns, o->reps);
    double bytes = (double)o->keys * (double)o->block;
    printf("{\"bench\": \"batch_overhead\", \"protocol\": \"%s\", \"keys\": %zu, \"block\": %zu, "
           "\"reps\": %zu, \"put_chunk\": %zu, \"put_ms_p50\": %.2f, \"put_gbps\": %.2f, "
           "\"get_ms_p50\": %.2f, \"get_gbps\": %.2f, \"get_us_per_key\": %.3f}\n",
           o->protocol, o->keys, o->block, o->reps, o->put_chunk, put_ms, bytes / put_ms / 1e6,
           get_ms, bytes / get_ms / 1e6, get_ms * 1e3 / (double)o->keys);
    rc = 0;
out_unreg:
    egm_unregister_buffer(client, buf);
out:
    free(names);
    free(keys);
    free(ptrs);
    free(lens);
    free(sizes);
    free(perm);
    free(results);
    free(buf);
    return rc;
}

int main(int argc, char **argv)
{
    opts_t o = {.keys = 8192, .block = 64 << 10, .reps = 5, .put_chunk = 1024, .protocol = "shm"};
    egm_config_t *config = NULL;
    egm_master_t *master = NULL;
    egm_client_t *client = NULL;
    egm_process_t provider = {.pid = 0, .out_fd = -1};
    pthread_t master_thread;
    int master_started = 0, rc = 1;
    char addr[64], line[512], exe[4096], pool[64];

    if (parse(argc, argv, &o) != 0) {
        fprintf(stderr, "usage: egm-batch-bench [--keys N] [--block BYTES] [--reps R<=64] "
                        "[--put-chunk K] [--egmstore PATH] [--protocol shm|tcp]\n");
        return 2;
    }
    if (o.egmstore == NULL) {
        snprintf(exe, sizeof(exe), "%s", egm__process_self_exe());
        char *slash = strrchr(exe, '/');
        snprintf(slash ? slash + 1 : exe, sizeof(exe) - (size_t)(slash ? slash + 1 - exe : 0),
                 "egmstore");
        o.egmstore = exe;
    }
    signal(SIGPIPE, SIG_IGN);
    egm__log_set_level(EGM_LOG_WARN);
    if (check(egm_config_create(&config), "config") != 0 ||
        check(egm_config_set(config, "port", "0"), "config") != 0 ||
        check(egm_config_set(config, "listen_address", "127.0.0.1"), "config") != 0 ||
        check(egm_config_set(config, "max_frame_size", "256MiB"), "config") != 0 ||
        check(egm__master_create(config, &master), "master") != 0)
        goto out;
    if (pthread_create(&master_thread, NULL, master_main, master) != 0)
        goto out;
    master_started = 1;
    snprintf(addr, sizeof(addr), "127.0.0.1:%u", (unsigned)egm__master_port(master));
    /* Room for every key plus allocator slack. */
    snprintf(pool, sizeof(pool), "%zu", o.keys * o.block + (o.keys * o.block) / 4 + (64u << 20));
    char *pargv[] = {(char *)o.egmstore,
                     "provider",
                     "--master",
                     addr,
                     "--global-segment-size",
                     pool,
                     "--max-mr-size",
                     "128MiB",
                     "--local-hostname",
                     "127.0.0.1",
                     "--log-level",
                     "warn",
                     NULL};
    if (check(egm__process_spawn(pargv, EGM_PROCESS_STDOUT_CAPTURE, &provider), "spawn provider") !=
            0 ||
        check(
            egm__process_wait_line(&provider, "egmstore provider ready", line, sizeof(line), 60000),
            "provider ready") != 0)
        goto out;
    if (check(egm_config_set(config, "master_server_addr", addr), "config") != 0 ||
        check(egm_config_set(config, "protocol", o.protocol), "config") != 0 ||
        check(egm_client_create(config, &client), "client") != 0)
        goto out;
    rc = run(client, &o) == 0 ? 0 : 1;
out:
    egm_client_destroy(client);
    if (provider.pid > 0) {
        int code = -1;
        egm__process_signal(&provider, SIGTERM);
        egm__process_wait(&provider, 15000, &code);
    }
    egm__process_cleanup(&provider);
    if (master_started) {
        egm__master_stop(master);
        pthread_join(master_thread, NULL);
    }
    egm__master_destroy(master);
    egm_config_destroy(config);
    return rc;
}
