/* Integration (issue 8, Load): several client processes, each with several
 * threads on one client, do mixed put / get / get_into / exist / remove /
 * batch put / batch get against real master and provider processes for a
 * bounded time, every answer checked against the reference model (each thread
 * owns its keys, so the model knows every key's committed version exactly).
 * There is no fault here: 0 wrong objects, 0 committed keys lost, 0 failed
 * gets, puts, exists and removes are required; exist is checked both ways
 * (committed keys exist, removed ones do not) and both ways must have been
 * seen; then the master's accounting must match what is stored.
 * EGM_STRESS_SECONDS sets the length (default 10 s); the test counts
 * operations and asserts no speed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "common/clock.h"
#include "support/cluster.h"
#include "support/model.h"

#define PROCS 3
#define THREADS 2
#define KEYS 24 /* per thread */
#define MAX_LEN (48 * 1024)
#define BATCH 4
#define MAX_OPS 5000000u /* a bound besides the time */

typedef struct {
    uint64_t ops, verified, wrong, lost, found, bytes;
    uint64_t failed;        /* puts that failed otherwise than EXISTS */
    uint64_t get_errors;    /* gets that failed otherwise than NOT_FOUND */
    uint64_t exist_errors;  /* exists that answered neither OK nor NOT_FOUND */
    uint64_t remove_errors; /* removes that failed otherwise than NOT_FOUND or HAS_LEASE */
    uint64_t exist_present; /* exist answered OK for a key the model knows committed */
    uint64_t exist_absent;  /* exist answered NOT_FOUND for a key the model knows absent */
    uint64_t removed;       /* removes that took an object away */
} stress_result_t;

typedef struct {
    egm_client_t *client;
    egm_model_t *model;
    unsigned proc, thread;
    uint64_t deadline_ms;
    unsigned char *buf; /* registered: BATCH * MAX_LEN for sources, as much for reads */
    stress_result_t result;
} worker_t;

/* One Get's answer: the model judges found bytes and not-found (a committed
 * key must be found); any other failure is an error here, with no fault. */
static void check_get(worker_t *w, const char *key, egm_status_t status, const void *data,
                      size_t len)
{
    w->result.wrong += egm_model_check(w->model, key, status, data, len) != 0;
    w->result.get_errors += status != EGM_OK && status != EGM_ERR_NOT_FOUND;
}

static unsigned next_rand(unsigned *state)
{
    *state = *state * 1103515245u + 12345u;
    return *state >> 8;
}

static void key_name(const worker_t *w, unsigned k, char *out, size_t len)
{
    snprintf(out, len, "s%u/%u/%u", w->proc, w->thread, k);
}

static void *worker_main(void *arg)
{
    worker_t *w = arg;
    unsigned rnd = w->proc * 7919u + w->thread * 104729u + 1;
    unsigned versions[KEYS] = {0};
    unsigned char *src = w->buf, *dst = w->buf + (size_t)BATCH * MAX_LEN;
    char names[BATCH][48];
    const char *keys[BATCH];
    const void *srcs[BATCH];
    void *dsts[BATCH];
    size_t lens[BATCH], caps[BATCH], sizes[BATCH];
    egm_status_t results[BATCH];

    while (w->result.ops < MAX_OPS && egm__now_ms() < w->deadline_ms) {
        unsigned op = next_rand(&rnd) % 10, k = next_rand(&rnd) % KEYS;
        key_name(w, k, names[0], sizeof(names[0]));
        egm_status_t s;
        if (op <= 1) { /* put */
            size_t len = 1 + next_rand(&rnd) % MAX_LEN;
            unsigned v = ++versions[k];
            egm_model_fill(names[0], v, src, len);
            egm_model_put_begin(w->model, names[0], v, len);
            s = egm_put(w->client, names[0], src, len, NULL);
            egm_model_put_end(w->model, names[0], v, s);
            w->result.failed += s != EGM_OK && s != EGM_ERR_EXISTS;
        } else if (op == 2) { /* get into a library buffer */
            void *data = NULL;
            size_t len = 0;
            s = egm_get(w->client, names[0], &data, &len);
            check_get(w, names[0], s, data, len);
            egm_buffer_free(data);
        } else if (op == 3) { /* get_into registered memory */
            size_t len = 0;
            s = egm_get_into(w->client, names[0], dst, MAX_LEN, &len);
            check_get(w, names[0], s, dst, len);
        } else if (op == 4) { /* exist agrees with the model both ways */
            long committed = egm_model_committed(w->model, names[0]);
            s = egm_exist(w->client, names[0]);
            w->result.wrong += egm_model_check_exist(w->model, names[0], s) != 0;
            w->result.exist_errors += s != EGM_OK && s != EGM_ERR_NOT_FOUND;
            w->result.exist_present += committed >= 0 && s == EGM_OK;
            w->result.exist_absent += committed < 0 && s == EGM_ERR_NOT_FOUND;
        } else if (op == 5) { /* remove, forced or not: HAS_LEASE only without force */
            int force = (int)(next_rand(&rnd) & 1);
            s = egm_remove(w->client, names[0], force);
            w->result.wrong += egm_model_remove(w->model, names[0], s) != 0;
            w->result.remove_errors +=
                s != EGM_OK && s != EGM_ERR_NOT_FOUND && (force || s != EGM_ERR_HAS_LEASE);
            w->result.removed += s == EGM_OK;
        } else if (op <= 7) { /* batch put of BATCH consecutive keys */
            unsigned v[BATCH];
            for (unsigned i = 0; i < BATCH; i++) {
                unsigned kk = (k + i) % KEYS;
                key_name(w, kk, names[i], sizeof(names[i]));
                keys[i] = names[i];
                lens[i] = 1 + next_rand(&rnd) % MAX_LEN;
                srcs[i] = src + (size_t)i * MAX_LEN;
                v[i] = ++versions[kk];
                egm_model_fill(keys[i], v[i], src + (size_t)i * MAX_LEN, lens[i]);
                egm_model_put_begin(w->model, keys[i], v[i], lens[i]);
            }
            egm_batch_put_from(w->client, BATCH, keys, srcs, lens, NULL, results);
            for (unsigned i = 0; i < BATCH; i++) {
                egm_model_put_end(w->model, keys[i], v[i], results[i]);
                w->result.failed += results[i] != EGM_OK && results[i] != EGM_ERR_EXISTS;
            }
        } else { /* batch get */
            for (unsigned i = 0; i < BATCH; i++) {
                key_name(w, (k + i) % KEYS, names[i], sizeof(names[i]));
                keys[i] = names[i];
                dsts[i] = dst + (size_t)i * MAX_LEN;
                caps[i] = MAX_LEN;
            }
            egm_batch_get_into(w->client, BATCH, keys, dsts, caps, sizes, results);
            for (unsigned i = 0; i < BATCH; i++)
                check_get(w, keys[i], results[i], dsts[i], results[i] == EGM_OK ? sizes[i] : 0);
        }
        w->result.ops++;
    }
    return NULL;
}

static void add_result(stress_result_t *sum, const stress_result_t *r)
{
    sum->ops += r->ops;
    sum->verified += r->verified;
    sum->wrong += r->wrong;
    sum->lost += r->lost;
    sum->found += r->found;
    sum->bytes += r->bytes;
    sum->failed += r->failed;
    sum->get_errors += r->get_errors;
    sum->exist_errors += r->exist_errors;
    sum->remove_errors += r->remove_errors;
    sum->exist_present += r->exist_present;
    sum->exist_absent += r->exist_absent;
    sum->removed += r->removed;
}

/* One client process: THREADS workers on one client. Reports a stress_result_t. */
static int stress_process(egm_test_cluster_t *cl, unsigned proc, uint64_t seconds, int out_fd)
{
    const char *pairs[] = {"ping_interval_ms=200", NULL};
    egm_client_t *client = egm_test_client(cl, proc == 1 ? "tcp" : "auto", pairs);
    if (client == NULL)
        return 10;
    egm_model_t *model = egm_model_create();
    worker_t workers[THREADS];
    pthread_t tids[THREADS];
    size_t buf_len = (size_t)2 * BATCH * MAX_LEN;
    uint64_t deadline = egm__now_ms() + seconds * 1000;
    for (unsigned t = 0; t < THREADS; t++) {
        workers[t] = (worker_t){.client = client,
                                .model = model,
                                .proc = proc,
                                .thread = t,
                                .deadline_ms = deadline,
                                .buf = malloc(buf_len)};
        if (workers[t].buf == NULL ||
            egm_register_buffer(client, workers[t].buf, buf_len) != EGM_OK ||
            pthread_create(&tids[t], NULL, worker_main, &workers[t]) != 0)
            return 11;
    }
    stress_result_t total = {0};
    for (unsigned t = 0; t < THREADS; t++) {
        pthread_join(tids[t], NULL);
        add_result(&total, &workers[t].result);
        egm_unregister_buffer(client, workers[t].buf);
        free(workers[t].buf);
    }
    /* Every key once more, and what is stored for the accounting check. */
    total.wrong += egm_model_verify_all(model, client, 1, &total.found, &total.bytes);
    egm_model_stats_t stats = egm_model_stats(model);
    total.verified = stats.gets_verified;
    total.lost = stats.lost + stats.lost_by_fault; /* no fault here excuses one */
    egm_client_destroy(client);
    egm_model_destroy(model);
    return write(out_fd, &total, sizeof(total)) == (ssize_t)sizeof(total) ? 0 : 12;
}

static void test_stress_mixed_operations(void **state)
{
    (void)state;
    const char *env = getenv("EGM_STRESS_SECONDS");
    uint64_t seconds = env != NULL ? strtoull(env, NULL, 10) : 10;
    if (seconds == 0)
        seconds = 10;
    egm_test_cluster_t cluster;
    const char *master_flags[] = {"--http-port", "0", NULL};
    assert_int_equal(egm_test_start_master(&cluster, master_flags), 0);
    unsigned http_port = egm_model_admin_port(&cluster);
    assert_true(http_port != 0);
    assert_true(egm_test_start_provider(&cluster, "64MiB", NULL) >= 0);
    assert_true(egm_test_start_provider(&cluster, "64MiB", NULL) >= 0);

    pid_t pids[PROCS];
    int fds[PROCS];
    for (unsigned p = 0; p < PROCS; p++) {
        int pfd[2];
        assert_int_equal(pipe(pfd), 0);
        pids[p] = fork();
        assert_true(pids[p] >= 0);
        if (pids[p] == 0) {
            close(pfd[0]);
            _exit(stress_process(&cluster, p, seconds, pfd[1]));
        }
        close(pfd[1]);
        fds[p] = pfd[0];
    }
    stress_result_t sum = {0};
    int failed_children = 0;
    for (unsigned p = 0; p < PROCS; p++) {
        stress_result_t r;
        ssize_t n = read(fds[p], &r, sizeof(r)); /* the child's own deadline bounds this */
        close(fds[p]);
        int status = 0;
        waitpid(pids[p], &status, 0);
        if (n != (ssize_t)sizeof(r) || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            print_message("stress process %u failed (status 0x%x)\n", p, (unsigned)status);
            failed_children++;
            continue;
        }
        add_result(&sum, &r);
    }
    print_message("stress: %u processes x %u threads, %llu s: %llu operations, %llu gets verified, "
                  "%llu wrong, %llu lost, %llu puts / %llu gets / %llu exists / %llu removes "
                  "failed, exist seen both ways %llu + %llu times, %llu removed, %llu objects "
                  "stored at the end\n",
                  PROCS, THREADS, (unsigned long long)seconds, (unsigned long long)sum.ops,
                  (unsigned long long)sum.verified, (unsigned long long)sum.wrong,
                  (unsigned long long)sum.lost, (unsigned long long)sum.failed,
                  (unsigned long long)sum.get_errors, (unsigned long long)sum.exist_errors,
                  (unsigned long long)sum.remove_errors, (unsigned long long)sum.exist_present,
                  (unsigned long long)sum.exist_absent, (unsigned long long)sum.removed,
                  (unsigned long long)sum.found);
    assert_int_equal(failed_children, 0);
    assert_int_equal(sum.wrong, 0);
    assert_int_equal(sum.lost, 0);
    /* No fault here: every put succeeds or finds its key; every get, exist and
     * remove answers (found / not-found, a lease refusing an unforced remove). */
    assert_int_equal(sum.failed, 0);
    assert_int_equal(sum.get_errors, 0);
    assert_int_equal(sum.exist_errors, 0);
    assert_int_equal(sum.remove_errors, 0);
    assert_true(sum.verified > 0);
    /* Both directions of exist, and removes that took something, were exercised. */
    assert_true(sum.exist_present > 0);
    assert_true(sum.exist_absent > 0);
    assert_true(sum.removed > 0);
    assert_int_equal(egm_model_check_master(http_port, sum.found, sum.bytes), 0);
    egm_test_cluster_stop(&cluster);
}

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_stress_mixed_operations),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
