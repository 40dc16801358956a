/* Integration (issue 8, Faults): real master, providers and client processes;
 * a provider SIGKILLed during batch Puts and during batch Gets, a client
 * SIGKILLed while holding read leases and half-finished PutStarts, a pool full
 * of leased and hard-pinned objects, a provider cut off by its network. After
 * each, every key reads back as the reference model allows: a committed key
 * (its put returned OK) must read back exactly, unless the test's own fault
 * destroyed every replica of it (the test records where each committed key's
 * replicas lie and which segments its fault took); a put in flight when the
 * fault hit may or may not be there; never other bytes. The master's
 * accounting (keys, allocated bytes, nothing pending) must match what a client
 * finds stored. test_model_sees_a_dropped_object keeps proving that the model
 * fails a store that forgets an object while that accounting still balances.
 * The moment of a kill comes from the child's reported progress, never from a
 * sleep; every wait is bounded by a generous deadline and asserts no speed. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "client/client_int.h"
#include "common/clock.h"
#include "rpc/frame.h"
#include "rpc/proto_util.h"
#include "support/cluster.h"
#include "support/model.h"
#include "support/testutil.h"

#define BATCH 16
#define OBJ_LEN (4096 + 17)
#define MAX_ROUNDS 400 /* keys r0..r399 x 16 x 4 KiB: 26 MiB, below the survivor's 64 MiB */
#define DEADLINE_MS 60000

/* What a child reports after each round. */
typedef struct {
    uint32_t round, ok, wrong, errors;
    uint32_t after; /* the round began after the child read the test's 'e' */
    /* batch_put_child: each key's put status and, when it returned OK, where
     * the master placed it (n_place 0: not known, the victim was gone before
     * the child could ask) */
    int32_t status[BATCH];
    uint8_t n_place[BATCH];
    egm_id_t place[BATCH][2];
} round_report_t;

/* The reports of rounds 0..MAX_ROUNDS-1, as they arrive. */
static round_report_t reports[MAX_ROUNDS];
static uint8_t reported[MAX_ROUNDS];

typedef struct {
    pid_t pid;
    int progress_fd; /* child -> test: round_report_t per round */
    int control_fd;  /* test -> child: 'q' to stop */
    int exit_code;   /* once reaped (pid 0) */
} child_t;

typedef int (*child_fn)(egm_test_cluster_t *cl, int progress_fd, int control_fd);

/* One cluster and at most one child per test; teardown ends whatever a failed
 * assertion left running. */
static egm_test_cluster_t cluster;
static child_t child;
static char netns[32];   /* the namespace test's, deleted by teardown */
static char host_if[16]; /* its veth end in the test's namespace, likewise */

static int setup(void **state)
{
    (void)state;
    egm_test_cluster_init(&cluster);
    memset(&child, 0, sizeof(child));
    child.progress_fd = child.control_fd = -1;
    memset(reported, 0, sizeof(reported));
    return 0;
}

static int teardown(void **state)
{
    (void)state;
    if (child.pid > 0) {
        kill(child.pid, SIGKILL);
        waitpid(child.pid, NULL, 0);
        child.pid = 0;
    }
    if (child.progress_fd >= 0)
        close(child.progress_fd);
    if (child.control_fd >= 0)
        close(child.control_fd);
    egm_test_cluster_stop(&cluster);
    if (netns[0] != '\0') {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "ip netns del %s 2>/dev/null", netns);
        (void)!system(cmd);
        netns[0] = '\0';
    }
    if (host_if[0] != '\0') {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "ip link del %s 2>/dev/null", host_if);
        (void)!system(cmd); /* gone with the namespace already, unless something held it */
        host_if[0] = '\0';
    }
    return 0;
}

/* Forks before the test process starts any client thread. */
static void child_start(child_t *c, egm_test_cluster_t *cl, child_fn fn)
{
    int up[2], down[2];
    assert_int_equal(pipe(up), 0);
    assert_int_equal(pipe(down), 0);
    c->pid = fork();
    assert_true(c->pid >= 0);
    if (c->pid == 0) {
        close(up[0]);
        close(down[1]);
        setvbuf(stdout, NULL, _IONBF, 0);
        signal(SIGPIPE, SIG_IGN);
        _exit(fn(cl, up[1], down[0]));
    }
    close(up[1]);
    close(down[0]);
    c->progress_fd = up[0];
    c->control_fd = down[1];
}

/* Next report, or -1 at EOF or after DEADLINE_MS. */
static int child_report(child_t *c, round_report_t *r)
{
    size_t got = 0;
    uint64_t deadline = egm__now_ms() + DEADLINE_MS;
    while (got < sizeof(*r) && egm__now_ms() < deadline) {
        struct pollfd pfd = {.fd = c->progress_fd, .events = POLLIN};
        if (poll(&pfd, 1, 200) <= 0)
            continue;
        ssize_t n = read(c->progress_fd, (char *)r + got, sizeof(*r) - got);
        if (n <= 0) {
            int status = 0;
            if (c->pid > 0 && waitpid(c->pid, &status, 0) == c->pid) {
                c->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                c->pid = 0;
            }
            return -1;
        }
        got += (size_t)n;
    }
    if (got != sizeof(*r))
        return -1;
    if (r->round < MAX_ROUNDS) {
        reports[r->round] = *r;
        reported[r->round] = 1;
    }
    return 0;
}

/* Asks the child to stop, drains its reports and returns its exit code. */
static int child_finish(child_t *c, round_report_t *total)
{
    round_report_t r;
    (void)!write(c->control_fd, "q", 1);
    close(c->control_fd);
    c->control_fd = -1;
    while (child_report(c, &r) == 0) {
        total->ok += r.ok;
        total->wrong += r.wrong;
        total->errors += r.errors;
    }
    close(c->progress_fd);
    c->progress_fd = -1;
    if (c->pid > 0) {
        int status = 0;
        assert_int_equal(waitpid(c->pid, &status, 0), c->pid);
        c->exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        c->pid = 0;
    }
    return c->exit_code;
}

/* Reads the test's orders: 'e' (the fault is over: later rounds report
 * after = 1) and 'q' (stop). Returns 1 when the child should stop. */
static int read_orders(int control_fd, uint32_t *after)
{
    struct pollfd pfd = {.fd = control_fd, .events = POLLIN};
    while (poll(&pfd, 1, 0) > 0) {
        char order;
        if (read(control_fd, &order, 1) != 1 || order == 'q')
            return 1;
        if (order == 'e')
            *after = 1;
    }
    return 0;
}

static void round_keys(unsigned round, char (*names)[32], const char **keys)
{
    for (unsigned i = 0; i < BATCH; i++) {
        snprintf(names[i], 32, "r%u/%u", round, i);
        keys[i] = names[i];
    }
}

/* The victim is provider 0; its segments are named "host:PID/i". */
static void victim_needle(const egm_test_cluster_t *cl, char *needle, size_t len)
{
    snprintf(needle, len, ":%d/", (int)cl->providers[0].pid);
}

/* Tells model that the victim's segments are destroyed: the test kills that
 * provider, so a committed key whose every replica lay there may be gone (a
 * key on the other provider never). Returns how many segments, 0 on failure. */
static size_t doom_victim(egm_model_t *model, egm_client_t *client, const egm_test_cluster_t *cl)
{
    char needle[32];
    egm_id_t ids[8];
    victim_needle(cl, needle, sizeof(needle));
    size_t n = egm_model_segments_matching(client, needle, ids, 8);
    if (n == (size_t)-1 || n > 8)
        return 0;
    for (size_t i = 0; i < n; i++)
        egm_model_segment_destroyed(model, ids[i]);
    return n;
}

/* After key's put returned OK: where the master placed it, into the model and
 * slot i of the report. A committed key the master no longer has is a loss,
 * unless the victim's expiry is what took it (the victim leaves the list once
 * its objects are dropped: waited for, bounded); then where it lay is unknown
 * and the key counts as in flight when the fault hit. */
static void child_placed(egm_model_t *model, egm_client_t *client, const char *needle,
                         const char *key, round_report_t *r, unsigned i)
{
    egm_status_t st = egm_model_record_placement(model, client, key);
    if (st == EGM_OK) {
        size_t n = egm_model_placement(model, key, r->place[i], 2);
        r->n_place[i] = (uint8_t)(n < 2 ? n : 2);
        return;
    }
    egm_model_uncertain(model, key);
    uint64_t deadline = egm__now_ms() + DEADLINE_MS;
    size_t listed;
    while ((listed = egm_model_segments_matching(client, needle, NULL, 0)) != 0 &&
           egm__now_ms() < deadline)
        egm__sleep_ms(20);
    if (st == EGM_ERR_NOT_FOUND && listed == 0)
        return;
    fprintf(stderr,
            "child: LOST \"%s\": committed, then StatKey answered %s while the victim "
            "was still listed\n",
            key, egm_status_string(st));
    r->wrong++;
}

/* Child: a new batch of keys per round (put once: version 0), each batch read
 * back at once; reports each put's status and placement, and gets that were
 * wrong (bytes, or a committed key lost that was not on the victim). */
static int batch_put_child(egm_test_cluster_t *cl, int progress_fd, int control_fd)
{
    /* Even rounds are placed by the master, key by key (spread over both
     * providers: the kill takes some), odd ones by the client in its slabs
     * (client-side allocation: a batch in one slab). */
    const char *pairs[] = {"ping_interval_ms=200", "slab_bytes=0", NULL};
    egm_client_t *placed_by_master = egm_test_client(cl, "tcp", pairs);
    pairs[1] = NULL;
    egm_client_t *placed_by_client = egm_test_client(cl, "tcp", pairs);
    if (placed_by_master == NULL || placed_by_client == NULL)
        return 10;
    egm_model_t *model = egm_model_create();
    unsigned char *buf = malloc((size_t)BATCH * OBJ_LEN * 2);
    if (model == NULL || buf == NULL ||
        egm_register_buffer(placed_by_master, buf, (size_t)BATCH * OBJ_LEN * 2) != EGM_OK ||
        egm_register_buffer(placed_by_client, buf, (size_t)BATCH * OBJ_LEN * 2) != EGM_OK)
        return 11;
    egm_client_t *client = placed_by_master;
    char needle[32];
    victim_needle(cl, needle, sizeof(needle));
    if (doom_victim(model, client, cl) == 0)
        return 16;
    char names[BATCH][32];
    const char *keys[BATCH];
    const void *srcs[BATCH];
    void *dsts[BATCH];
    size_t lens[BATCH], sizes[BATCH];
    egm_status_t results[BATCH];
    uint32_t after = 0;
    unsigned round = 0, after_rounds = 0;
    while (round < MAX_ROUNDS && after_rounds < MAX_ROUNDS / 2 &&
           !read_orders(control_fd, &after)) {
        if (!after && round >= MAX_ROUNDS / 2) { /* wait for the fault's end with keys to spare */
            usleep(10000);
            continue;
        }
        after_rounds += after;
        round_report_t r = {.round = round, .after = after};
        round_keys(round, names, keys);
        client = round % 2 == 0 ? placed_by_master : placed_by_client;
        for (unsigned i = 0; i < BATCH; i++) {
            srcs[i] = buf + (size_t)i * OBJ_LEN;
            dsts[i] = buf + (size_t)(BATCH + i) * OBJ_LEN;
            lens[i] = OBJ_LEN;
            egm_model_fill(keys[i], 0, buf + (size_t)i * OBJ_LEN, OBJ_LEN);
            egm_model_put_begin(model, keys[i], 0, OBJ_LEN);
        }
        egm_batch_put_from(client, BATCH, keys, srcs, lens, NULL, results);
        for (unsigned i = 0; i < BATCH; i++) {
            egm_model_put_end(model, keys[i], 0, results[i]);
            r.status[i] = results[i];
            r.ok += results[i] == EGM_OK;
            if (results[i] == EGM_OK)
                child_placed(model, client, needle, keys[i], &r, i);
        }
        egm_batch_get_into(client, BATCH, keys, dsts, lens, sizes, results);
        for (unsigned i = 0; i < BATCH; i++) {
            if (egm_model_check(model, keys[i], results[i], dsts[i],
                                results[i] == EGM_OK ? sizes[i] : 0) != 0)
                r.wrong++;
            r.errors += results[i] != EGM_OK && results[i] != EGM_ERR_NOT_FOUND;
        }
        if (write(progress_fd, &r, sizeof(r)) != (ssize_t)sizeof(r)) {
            fprintf(stderr, "child: report: %s\n", strerror(errno));
            break;
        }
        round++;
    }
    egm_unregister_buffer(placed_by_master, buf);
    egm_unregister_buffer(placed_by_client, buf);
    egm_client_destroy(placed_by_master);
    egm_client_destroy(placed_by_client);
    egm_model_destroy(model);
    free(buf);
    return 0;
}

/* Child: puts N_GET_KEYS objects once, then reads them all in one batch per round. */
#define N_GET_KEYS (4 * BATCH)
static int batch_get_child(egm_test_cluster_t *cl, int progress_fd, int control_fd)
{
    /* Placed by the master key by key, so that the keys lie on both
     * providers (a client placing its puts puts a batch in one slab). */
    const char *pairs[] = {"ping_interval_ms=200", "slab_bytes=0", NULL};
    egm_client_t *client = egm_test_client(cl, "tcp", pairs);
    if (client == NULL)
        return 10;
    egm_model_t *model = egm_model_create();
    size_t total = (size_t)N_GET_KEYS * OBJ_LEN;
    unsigned char *buf = malloc(total);
    if (model == NULL || buf == NULL || egm_register_buffer(client, buf, total) != EGM_OK)
        return 11;
    char names[N_GET_KEYS][32];
    const char *keys[N_GET_KEYS];
    void *ptrs[N_GET_KEYS];
    size_t lens[N_GET_KEYS], sizes[N_GET_KEYS];
    egm_status_t results[N_GET_KEYS];
    for (unsigned i = 0; i < N_GET_KEYS; i++) {
        snprintf(names[i], sizeof(names[i]), "g/%u", i);
        keys[i] = names[i];
        ptrs[i] = buf + (size_t)i * OBJ_LEN;
        lens[i] = OBJ_LEN;
        egm_model_fill(keys[i], 0, ptrs[i], OBJ_LEN);
        egm_model_put_begin(model, keys[i], 0, OBJ_LEN);
    }
    if (egm_batch_put_from(client, N_GET_KEYS, keys, (const void *const *)ptrs, lens, NULL,
                           results) != EGM_OK)
        return 12;
    for (unsigned i = 0; i < N_GET_KEYS; i++) {
        egm_model_put_end(model, keys[i], 0, results[i]);
        if (results[i] != EGM_OK)
            return 13;
        if (egm_model_record_placement(model, client, keys[i]) != EGM_OK)
            return 14;
    }
    if (doom_victim(model, client, cl) == 0)
        return 16;
    uint32_t after = 0;
    for (unsigned round = 0; round < 100000 && !read_orders(control_fd, &after); round++) {
        round_report_t r = {.round = round, .after = after};
        memset(buf, 0xa5, total);
        egm_batch_get_into(client, N_GET_KEYS, keys, ptrs, lens, sizes, results);
        for (unsigned i = 0; i < N_GET_KEYS; i++) {
            if (egm_model_check(model, keys[i], results[i], ptrs[i],
                                results[i] == EGM_OK ? sizes[i] : 0) != 0)
                r.wrong++;
            r.ok += results[i] == EGM_OK;
            r.errors += results[i] != EGM_OK && results[i] != EGM_ERR_NOT_FOUND;
        }
        if (write(progress_fd, &r, sizeof(r)) != (ssize_t)sizeof(r)) {
            fprintf(stderr, "child: report: %s\n", strerror(errno));
            break;
        }
    }
    egm_unregister_buffer(client, buf);
    egm_client_destroy(client);
    egm_model_destroy(model);
    free(buf);
    return 0;
}

/* With a client TTL of 2 s, clients ping often enough on a busy machine. */
static const char *fast_ping[] = {"ping_interval_ms=200", NULL};
/* The same, with every put placed by the master key by key: keys spread over
 * both providers (a client placing its own puts puts a batch in one slab). */
static const char *fast_ping_spread[] = {"ping_interval_ms=200", "slab_bytes=0", NULL};

/* Master with a short client TTL (the dead provider's segments expire soon)
 * and its admin port; two providers, the first the victim. */
static unsigned start_two_providers(void)
{
    const char *master_flags[] = {"--client-ttl", "2", "--http-port", "0", NULL};
    assert_int_equal(egm_test_start_master(&cluster, master_flags), 0);
    unsigned http_port = egm_model_admin_port(&cluster);
    assert_true(http_port != 0);
    assert_int_equal(egm_test_start_provider(&cluster, "32MiB", NULL), 0);
    assert_int_equal(egm_test_start_provider(&cluster, "64MiB", NULL), 1);
    return http_port;
}

static void kill_victim_and_wait_expiry(egm_client_t *client)
{
    assert_int_equal(egm__process_signal(&cluster.providers[0], SIGKILL), EGM_OK);
    assert_int_equal(egm__process_wait(&cluster.providers[0], 10000, NULL), EGM_OK);
    uint64_t deadline = egm__now_ms() + DEADLINE_MS;
    while (egm_test_segment_count(client) != 1 && egm__now_ms() < deadline)
        egm__sleep_ms(50);
    assert_int_equal(egm_test_segment_count(client), 1);
    (void)!write(child.control_fd, "e", 1); /* a child that died is caught by its reports */
}

/* The victim's segments (listed before it is killed). */
static size_t victim_segments(egm_client_t *client, egm_id_t *ids, size_t max)
{
    char needle[32];
    victim_needle(&cluster, needle, sizeof(needle));
    size_t n = egm_model_segments_matching(client, needle, ids, max);
    assert_true(n >= 1 && n <= max);
    return n;
}

/* The model of what batch_put_child wrote, from its reports: each key's put
 * status, and for a committed key where it lay (or, unknown, in flight when
 * the fault hit). Rounds the child never reported were never put. */
static egm_model_t *model_of_reports(void)
{
    egm_model_t *model = egm_model_create();
    assert_non_null(model);
    char names[BATCH][32];
    const char *keys[BATCH];
    for (unsigned round = 0; round < MAX_ROUNDS; round++) {
        if (!reported[round])
            continue;
        const round_report_t *r = &reports[round];
        round_keys(round, names, keys);
        for (unsigned i = 0; i < BATCH; i++) {
            egm_model_put_begin(model, keys[i], 0, OBJ_LEN);
            egm_model_put_end(model, keys[i], 0, (egm_status_t)r->status[i]);
            if (r->status[i] != EGM_OK)
                continue;
            if (r->n_place[i] > 0)
                egm_model_placed(model, keys[i], r->place[i], r->n_place[i]);
            else
                egm_model_uncertain(model, keys[i]);
        }
    }
    return model;
}

/* Every key reads back as the model allows, none is lost but by the fault,
 * the survivors are all there, and the master's accounting matches them. */
static uint64_t check_recovered(egm_model_t *model, egm_client_t *client, unsigned http_port)
{
    uint64_t found = 0, bytes = 0;
    egm_model_census_t c = egm_model_census(model);
    assert_int_equal(egm_model_verify_all(model, client, 1, &found, &bytes), 0);
    egm_model_stats_t s = egm_model_stats(model);
    assert_int_equal(s.lost, 0);
    assert_int_equal(s.wrong, 0);
    /* Committed keys the fault spared are found; at most the uncertain ones besides. */
    assert_true(found >= c.committed - c.doomed);
    assert_true(found <= c.committed - c.doomed + c.uncertain);
    assert_int_equal(egm_model_check_master(http_port, found, bytes), 0);
    print_message("recovered: %zu keys: %zu committed (%zu of them lost with the victim), %zu in "
                  "flight when it died; %llu found, 0 lost, 0 wrong\n",
                  c.keys, c.committed, c.doomed, c.uncertain, (unsigned long long)found);
    return found;
}

static void test_provider_sigkill_during_batch_put(void **state)
{
    (void)state;
    unsigned http_port = start_two_providers();
    child_start(&child, &cluster, batch_put_child);
    egm_client_t *client = egm_test_client(&cluster, "tcp", fast_ping);
    assert_non_null(client);
    egm_id_t victim[8];
    size_t n_victim = victim_segments(client, victim, 8);

    /* Kill while the child runs batches (it has done three). */
    round_report_t r, total = {0};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(child_report(&child, &r), 0);
        total.wrong += r.wrong;
    }
    kill_victim_and_wait_expiry(client);
    /* Rounds that began after the master dropped the victim land whole, and
     * read back whole. */
    unsigned n_after = 0, after_ok = 0;
    while (n_after < 4) {
        assert_int_equal(child_report(&child, &r), 0);
        total.wrong += r.wrong;
        total.errors += r.errors;
        if (r.after) {
            n_after++;
            assert_int_equal(r.ok, BATCH);
            assert_int_equal(r.errors, 0);
            assert_int_equal(r.wrong, 0);
            after_ok += r.ok;
        }
    }
    assert_int_equal(child_finish(&child, &total), 0);
    assert_int_equal(total.wrong, 0);

    egm_model_t *model = model_of_reports();
    for (size_t i = 0; i < n_victim; i++)
        egm_model_segment_destroyed(model, victim[i]);
    egm_model_census_t c = egm_model_census(model);
    /* The kill took objects (the first rounds were spread over both
     * providers) and objects survived it: both sides of the check are seen. */
    assert_true(c.doomed > 0);
    assert_true(c.committed - c.doomed >= after_ok);
    check_recovered(model, client, http_port);
    print_message("batch put: %u puts after the kill verified, %u get errors during the fault\n",
                  after_ok, total.errors);
    egm_model_destroy(model);
    egm_client_destroy(client);
}

static void test_provider_sigkill_during_batch_get(void **state)
{
    (void)state;
    unsigned http_port = start_two_providers();
    child_start(&child, &cluster, batch_get_child);
    egm_client_t *client = egm_test_client(&cluster, "tcp", fast_ping);
    assert_non_null(client);

    round_report_t r, total = {0};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(child_report(&child, &r), 0);
        assert_int_equal(r.ok, N_GET_KEYS); /* before the fault every object reads back */
        total.wrong += r.wrong;
    }
    /* Every key is committed by now: where each lies, and which segments die. */
    egm_model_t *model = egm_model_create();
    assert_non_null(model);
    char key[32];
    for (unsigned i = 0; i < N_GET_KEYS; i++) {
        snprintf(key, sizeof(key), "g/%u", i);
        egm_model_put_begin(model, key, 0, OBJ_LEN);
        egm_model_put_end(model, key, 0, EGM_OK);
        assert_int_equal(egm_model_record_placement(model, client, key), EGM_OK);
    }
    egm_id_t victim[8];
    size_t n_victim = victim_segments(client, victim, 8);

    kill_victim_and_wait_expiry(client);
    unsigned n_after = 0, last_ok = 0;
    while (n_after < 4) {
        assert_int_equal(child_report(&child, &r), 0);
        total.wrong += r.wrong;
        total.errors += r.errors;
        if (r.after) {
            n_after++;
            assert_int_equal(r.errors, 0); /* the dead provider is forgotten: not-found only */
            assert_int_equal(r.wrong, 0);
            last_ok = r.ok; /* the survivors, compared below */
        }
    }
    assert_int_equal(child_finish(&child, &total), 0);
    assert_int_equal(total.wrong, 0);

    /* Not yet told of the fault, the model counts every key that lay on the
     * victim as lost: this is what a store that dropped them would face. */
    print_message("batch get: reading back with a model not told of the kill (LOST lines "
                  "expected)\n");
    uint64_t found = 0, bytes = 0;
    uint64_t failures = egm_model_verify_all(model, client, 1, &found, &bytes);
    egm_model_stats_t s = egm_model_stats(model);
    assert_true(failures > 0);
    assert_int_equal(s.lost, failures);
    assert_int_equal(found + failures, N_GET_KEYS);

    /* Told of it, the same reads pass, and exactly the keys not on the victim are found. */
    for (size_t i = 0; i < n_victim; i++)
        egm_model_segment_destroyed(model, victim[i]);
    egm_model_census_t c = egm_model_census(model);
    assert_int_equal(c.doomed, failures);
    assert_true(c.committed - c.doomed > 0);
    assert_int_equal(egm_model_verify_all(model, client, 1, &found, &bytes), 0);
    assert_int_equal(egm_model_stats(model).lost, s.lost); /* no new loss */
    assert_int_equal(found, N_GET_KEYS - c.doomed);
    /* After the expiry the child's gets found exactly the survivors too. */
    assert_int_equal(last_ok, found);
    assert_int_equal(egm_model_check_master(http_port, found, bytes), 0);
    print_message("batch get: %llu objects survived on the other provider, %zu went with the "
                  "victim (%u get errors during the fault)\n",
                  (unsigned long long)found, c.doomed, total.errors);
    egm_model_destroy(model);
    egm_client_destroy(client);
}

/* The store forgets one committed object (another client removes it behind
 * the model's back, as a master that lost it would answer): the model's check
 * fails on exactly that key, while the master's accounting still balances
 * with what is found. Keeps proving that a loss cannot pass the suite. */
static void test_model_sees_a_dropped_object(void **state)
{
    (void)state;
    const char *master_flags[] = {"--http-port", "0", NULL};
    assert_int_equal(egm_test_start_master(&cluster, master_flags), 0);
    unsigned http_port = egm_model_admin_port(&cluster);
    assert_true(http_port != 0);
    assert_true(egm_test_start_provider(&cluster, "16MiB", NULL) >= 0);
    egm_client_t *client = egm_test_client(&cluster, "auto", NULL);
    egm_client_t *other = egm_test_client(&cluster, "tcp", NULL);
    assert_non_null(client);
    assert_non_null(other);
    egm_model_t *model = egm_model_create();
    unsigned char *buf = malloc(OBJ_LEN);
    assert_non_null(buf);
    char key[32];
    for (unsigned i = 0; i < BATCH; i++) {
        snprintf(key, sizeof(key), "drop/%u", i);
        egm_model_fill(key, 0, buf, OBJ_LEN);
        egm_model_put_begin(model, key, 0, OBJ_LEN);
        egm_model_put_end(model, key, 0, egm_put(client, key, buf, OBJ_LEN, NULL));
        assert_int_equal(egm_model_committed(model, key), 0);
        assert_int_equal(egm_model_record_placement(model, client, key), EGM_OK);
    }
    uint64_t found = 0, bytes = 0;
    assert_int_equal(egm_model_verify_all(model, client, 1, &found, &bytes), 0);
    assert_int_equal(found, BATCH);

    assert_int_equal(egm_remove(other, "drop/5", 1), EGM_OK);
    assert_int_equal(egm_model_verify_all(model, client, 1, &found, &bytes), 1);
    assert_int_equal(egm_model_stats(model).lost, 1);
    assert_int_equal(egm_model_check_exist(model, "drop/5", egm_exist(client, "drop/5")), -1);
    assert_int_equal(found, BATCH - 1);
    /* What the accounting check alone would have said: all is well. */
    assert_int_equal(egm_model_check_master(http_port, found, bytes), 0);
    print_message("dropped object: the model reported %llu lost, the accounting balanced\n",
                  (unsigned long long)egm_model_stats(model).lost);
    egm_model_destroy(model);
    free(buf);
    egm_client_destroy(other);
    egm_client_destroy(client);
}

#define BIG_LEN (1u << 20)
#define N_HELD 4
#define N_HALF 3

/* Child: puts and reads N_HELD objects (read leases), starts N_HALF puts
 * without ending them, reports, and waits to be killed. */
static int lease_holder_child(egm_test_cluster_t *cl, int progress_fd, int control_fd)
{
    (void)control_fd;
    egm_client_t *client = egm_test_client(cl, "auto", NULL);
    if (client == NULL)
        return 10;
    unsigned char *buf = malloc(BIG_LEN);
    char key[32];
    for (unsigned i = 0; i < N_HELD; i++) {
        snprintf(key, sizeof(key), "held/%u", i);
        egm_model_fill(key, 0, buf, BIG_LEN);
        if (egm_put(client, key, buf, BIG_LEN, NULL) != EGM_OK)
            return 11;
        void *data = NULL;
        size_t len = 0;
        if (egm_get(client, key, &data, &len) != EGM_OK)
            return 12;
        egm_buffer_free(data);
    }
    /* PutStart through the client's own master call, never followed by PutEnd. */
    char names[N_HALF][32];
    const char *keys[N_HALF];
    uint64_t sizes[N_HALF];
    for (unsigned i = 0; i < N_HALF; i++) {
        snprintf(names[i], sizeof(names[i]), "half/%u", i);
        keys[i] = names[i];
        sizes[i] = BIG_LEN;
    }
    Egm__PutStartRequest req = EGM__PUT_START_REQUEST__INIT;
    Egm__ReplicateConfig cfg = EGM__REPLICATE_CONFIG__INIT;
    Egm__Id client_pb = EGM__ID__INIT;
    egm__id_to_pb(client->id, &client_pb);
    cfg.replica_num = 1;
    req.client = &client_pb;
    req.n_keys = N_HALF;
    req.keys = (char **)keys;
    req.n_sizes = N_HALF;
    req.sizes = sizes;
    req.config = &cfg;
    egm_keys_reply_t *reply = NULL;
    if (egm__client_keys_rpc(client, EGM_RPC_PUT_START, &req.base, N_HALF, &reply) != EGM_OK)
        return 13;
    for (unsigned i = 0; i < N_HALF; i++)
        if (reply->results[i].status != EGM_OK)
            return 14;
    round_report_t r = {.ok = N_HELD + N_HALF};
    if (write(progress_fd, &r, sizeof(r)) != (ssize_t)sizeof(r))
        return 15;
    for (;;)
        pause(); /* SIGKILL ends it, holding everything */
}

static void test_client_sigkill_with_leases_and_put_starts(void **state)
{
    (void)state;
    const char *master_flags[] = {"--client-ttl",
                                  "2",
                                  "--default-kv-lease-ttl",
                                  "2000",
                                  "--put-start-discard-timeout-sec",
                                  "2",
                                  "--http-port",
                                  "0",
                                  NULL};
    assert_int_equal(egm_test_start_master(&cluster, master_flags), 0);
    unsigned http_port = egm_model_admin_port(&cluster);
    assert_true(http_port != 0);
    assert_true(egm_test_start_provider(&cluster, "16MiB", NULL) >= 0);
    child_start(&child, &cluster, lease_holder_child);
    round_report_t r;
    assert_int_equal(child_report(&child, &r), 0);
    assert_int_equal(r.ok, N_HELD + N_HALF);
    assert_int_equal(kill(child.pid, SIGKILL), 0);
    int status = 0;
    assert_int_equal(waitpid(child.pid, &status, 0), child.pid);
    child.pid = 0;
    assert_true(WIFSIGNALED(status));

    egm_client_t *client = egm_test_client(&cluster, "auto", NULL);
    assert_non_null(client);
    /* Pending until discarded (by the sweep or by a new put of the key): never lost track of.
     * Two reads of /metrics: the discard count must not move between them. */
    long long discarded = -1, pending = -1;
    for (int tries = 0; tries < 100; tries++) {
        discarded = egm_model_master_metric(http_port, "egm_master_discarded_puts_total");
        pending = egm_model_master_metric(http_port, "egm_master_keys_pending");
        if (egm_model_master_metric(http_port, "egm_master_discarded_puts_total") == discarded)
            break;
    }
    assert_int_equal(pending + discarded, N_HALF);
    /* The half-finished keys come back: a Put of each succeeds in the end. */
    unsigned char *buf = malloc(BIG_LEN);
    assert_non_null(buf);
    egm_model_t *model = egm_model_create();
    char key[32];
    uint64_t deadline = egm__now_ms() + DEADLINE_MS;
    for (unsigned i = 0; i < N_HALF; i++) {
        snprintf(key, sizeof(key), "half/%u", i);
        egm_model_fill(key, 1, buf, BIG_LEN);
        egm_model_put_begin(model, key, 1, BIG_LEN);
        egm_status_t s;
        while ((s = egm_put(client, key, buf, BIG_LEN, NULL)) != EGM_OK && egm__now_ms() < deadline)
            egm__sleep_ms(100);
        assert_int_equal(s, EGM_OK);
        egm_model_put_end(model, key, 1, s);
    }
    /* The leased objects read back exactly, and their leases end: a remove
     * without force succeeds in the end. */
    for (unsigned i = 0; i < N_HELD; i++) {
        snprintf(key, sizeof(key), "held/%u", i);
        egm_model_put_begin(model, key, 0, BIG_LEN);
        egm_model_put_end(model, key, 0, EGM_OK);
    }
    uint64_t found = 0, bytes = 0;
    assert_int_equal(egm_model_verify_all(model, client, 1, &found, &bytes), 0);
    assert_int_equal(found, N_HELD + N_HALF);
    for (unsigned i = 0; i < N_HELD; i++) {
        snprintf(key, sizeof(key), "held/%u", i);
        egm_status_t s;
        while ((s = egm_remove(client, key, 0)) == EGM_ERR_HAS_LEASE && egm__now_ms() < deadline)
            egm__sleep_ms(100);
        assert_int_equal(s, EGM_OK);
        assert_int_equal(egm_model_remove(model, key, s), 0);
    }
    assert_int_equal(egm_model_verify_all(model, client, 1, &found, &bytes), 0);
    assert_int_equal(found, N_HALF);
    assert_int_equal(egm_model_check_master(http_port, found, bytes), 0);
    assert_int_equal(egm_model_master_metric(http_port, "egm_master_discarded_puts_total"), N_HALF);
    egm_model_destroy(model);
    free(buf);
    egm_client_destroy(client);
}

static void test_pool_full_of_leased_and_pinned(void **state)
{
    (void)state;
    const char *master_flags[] = {"--default-kv-lease-ttl", "600000", "--http-port", "0", NULL};
    assert_int_equal(egm_test_start_master(&cluster, master_flags), 0);
    unsigned http_port = egm_model_admin_port(&cluster);
    assert_true(http_port != 0);
    assert_true(egm_test_start_provider(&cluster, "8MiB", NULL) >= 0);
    egm_client_t *client = egm_test_client(&cluster, "auto", NULL);
    assert_non_null(client);
    egm_model_t *model = egm_model_create();
    unsigned char *buf = malloc(BIG_LEN);
    assert_non_null(buf);
    char key[32];
    void *data;
    size_t len;

    /* Two objects leased (read once, long lease) while the pool has room... */
    for (unsigned i = 0; i < 2; i++) {
        snprintf(key, sizeof(key), "leased/%u", i);
        egm_model_fill(key, 0, buf, BIG_LEN);
        egm_model_put_begin(model, key, 0, BIG_LEN);
        egm_model_put_end(model, key, 0, egm_put(client, key, buf, BIG_LEN, NULL));
        assert_int_equal(egm_model_committed(model, key), 0);
        assert_int_equal(egm_get(client, key, &data, &len), EGM_OK);
        assert_int_equal(egm_model_check(model, key, EGM_OK, data, len), 0);
        egm_buffer_free(data);
    }
    /* ...then hard-pinned ones until the pool refuses. */
    egm_replicate_config_t pin = {.replica_num = 1, .with_hard_pin = 1};
    egm_status_t s = EGM_OK;
    unsigned pinned = 0;
    for (; pinned < 64 && s == EGM_OK; pinned++) {
        snprintf(key, sizeof(key), "pinned/%u", pinned);
        egm_model_fill(key, 0, buf, BIG_LEN);
        egm_model_put_begin(model, key, 0, BIG_LEN);
        s = egm_put(client, key, buf, BIG_LEN, &pin);
        egm_model_put_end(model, key, 0, s);
    }
    assert_int_equal(s, EGM_ERR_NO_SPACE);
    assert_true(pinned > 2);
    /* More Puts, pinned or not, answer NO_SPACE and leave no key behind. */
    for (unsigned i = 0; i < 4; i++) {
        snprintf(key, sizeof(key), "refused/%u", i);
        egm_model_fill(key, 0, buf, BIG_LEN);
        egm_model_put_begin(model, key, 0, BIG_LEN);
        s = egm_put(client, key, buf, BIG_LEN, (i & 1) ? &pin : NULL);
        assert_int_equal(s, EGM_ERR_NO_SPACE);
        egm_model_put_end(model, key, 0, s);
        assert_int_equal(egm_exist(client, key), EGM_ERR_NOT_FOUND);
    }
    /* Every stored object reads back exactly; the leased ones and every pinned one are there. */
    uint64_t found = 0, bytes = 0;
    assert_int_equal(egm_model_verify_all(model, client, 1, &found, &bytes), 0);
    assert_int_equal(found, 2 + pinned - 1);
    assert_int_equal(egm_model_check_master(http_port, found, bytes), 0);
    print_message("pool full: %llu objects verified after %u refused puts\n",
                  (unsigned long long)found, 5u);
    egm_model_destroy(model);
    free(buf);
    egm_client_destroy(client);
}

static int sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int sh(const char *fmt, ...)
{
    char cmd[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(cmd, sizeof(cmd), fmt, ap);
    va_end(ap);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* A tcp provider in a network namespace of its own, joined to the test's by a
 * veth pair; the link goes down (the provider is cut off: the master expires
 * it) and comes back (it must mount again). Needs root and ip(8); skipped
 * with a message where either is missing or the container refuses netns. */
static void test_netns_cut_tcp_provider(void **state)
{
    (void)state;
    if (getuid() != 0 || access("/usr/sbin/ip", X_OK) != 0) {
        print_message("skipped: needs root and /usr/sbin/ip to create a network namespace\n");
        EGM_SKIP("needs root and /usr/sbin/ip to create a network namespace");
    }
    unsigned id = (unsigned)getpid() % 200 + 20;
    snprintf(netns, sizeof(netns), "egmf%u", (unsigned)getpid());
    if (sh("ip netns add %s 2>/dev/null", netns) != 0) {
        netns[0] = '\0';
        print_message("skipped: ip netns add refused (no CAP_SYS_ADMIN in this container?)\n");
        EGM_SKIP("ip netns add refused (no CAP_SYS_ADMIN in this container?)");
    }
    char host_ip[32], ns_ip[32];
    snprintf(host_if, sizeof(host_if), "egmh%u", (unsigned)getpid() % 100000);
    snprintf(host_ip, sizeof(host_ip), "10.213.%u.1", id);
    snprintf(ns_ip, sizeof(ns_ip), "10.213.%u.2", id);
    if (sh("ip link add %s type veth peer name eth0 netns %s && ip addr add %s/24 dev %s && "
           "ip link set %s up && ip -n %s link set lo up && ip -n %s addr add %s/24 dev eth0 && "
           "ip -n %s link set eth0 up",
           host_if, netns, host_ip, host_if, host_if, netns, netns, ns_ip, netns) != 0) {
        print_message("skipped: could not make a veth pair into the namespace\n");
        EGM_SKIP("could not make a veth pair into the namespace");
    }

    const char *master_flags[] = {"--client-ttl",     "2",       "--http-port", "0",
                                  "--listen-address", "0.0.0.0", NULL};
    assert_int_equal(egm_test_start_master(&cluster, master_flags), 0);
    unsigned http_port = egm_model_admin_port(&cluster);
    assert_true(http_port != 0);
    assert_int_equal(egm_test_start_provider(&cluster, "32MiB", NULL), 0);
    char master_addr[64], line[512];
    snprintf(master_addr, sizeof(master_addr), "%s:%u", host_ip, cluster.master_port);
    const char *argv[] = {"/usr/sbin/ip",
                          "netns",
                          "exec",
                          netns,
                          egm_test_bin(),
                          "provider",
                          "--master",
                          master_addr,
                          "--global-segment-size",
                          "32MiB",
                          "--local-hostname",
                          ns_ip,
                          "--ping-interval-ms",
                          "200",
                          NULL};
    egm_process_t *cut = &cluster.providers[1];
    assert_int_equal(egm__process_spawn((char *const *)argv, EGM_PROCESS_STDOUT_CAPTURE, cut),
                     EGM_OK);
    cluster.n_providers = 2;
    assert_int_equal(
        egm__process_wait_line(cut, "egmstore provider ready", line, sizeof(line), DEADLINE_MS),
        EGM_OK);
    egm_client_t *client = egm_test_client(&cluster, "tcp", fast_ping_spread);
    assert_non_null(client);
    assert_int_equal(egm_test_segment_count(client), 2);

    egm_model_t *model = egm_model_create();
    unsigned char *buf = malloc(OBJ_LEN);
    assert_non_null(buf);
    char key[32];
    for (unsigned i = 0; i < 4 * BATCH; i++) {
        snprintf(key, sizeof(key), "ns/%u", i);
        egm_model_fill(key, 0, buf, OBJ_LEN);
        egm_model_put_begin(model, key, 0, OBJ_LEN);
        egm_model_put_end(model, key, 0, egm_put(client, key, buf, OBJ_LEN, NULL));
        assert_int_equal(egm_model_committed(model, key), 0);
        assert_int_equal(egm_model_record_placement(model, client, key), EGM_OK);
    }
    /* The cut provider's segments (its tcp endpoint is in the namespace) are
     * what the fault destroys: only keys that lay there may go. */
    char needle[48];
    egm_id_t cut_ids[8];
    snprintf(needle, sizeof(needle), "%s:", ns_ip);
    size_t n_cut = egm_model_segments_matching(client, needle, cut_ids, 8);
    assert_true(n_cut >= 1 && n_cut <= 8);
    for (size_t i = 0; i < n_cut; i++)
        egm_model_segment_destroyed(model, cut_ids[i]);
    egm_model_census_t c = egm_model_census(model);
    assert_true(c.doomed > 0 && c.doomed < c.committed); /* both providers hold keys */
    /* Cut: gets answer exact bytes or fail, until the master drops the segment. */
    assert_int_equal(sh("ip link set %s down", host_if), 0);
    uint64_t deadline = egm__now_ms() + DEADLINE_MS;
    uint64_t found = 0, bytes = 0;
    while (egm_test_segment_count(client) != 1 && egm__now_ms() < deadline) {
        for (unsigned i = 0; i < 4 * BATCH; i++) {
            void *data = NULL;
            size_t len = 0;
            snprintf(key, sizeof(key), "ns/%u", i);
            egm_status_t s = egm_get(client, key, &data, &len);
            assert_int_equal(egm_model_check(model, key, s, data, len), 0);
            egm_buffer_free(data);
        }
    }
    assert_int_equal(egm_test_segment_count(client), 1);
    assert_int_equal(egm_model_verify_all(model, client, 1, &found, &bytes), 0);
    assert_int_equal(found, c.committed - c.doomed); /* the other provider's keys, all */
    assert_int_equal(egm_model_stats(model).lost, 0);
    assert_int_equal(egm_model_check_master(http_port, found, bytes), 0);
    /* Back: the provider mounts its pool again and takes objects. */
    assert_int_equal(sh("ip link set %s up", host_if), 0);
    while (egm_test_segment_count(client) != 2 && egm__now_ms() < deadline + DEADLINE_MS)
        egm__sleep_ms(100);
    assert_int_equal(egm_test_segment_count(client), 2);
    for (unsigned i = 0; i < 4 * BATCH; i++) {
        snprintf(key, sizeof(key), "back/%u", i);
        egm_model_fill(key, 0, buf, OBJ_LEN);
        egm_model_put_begin(model, key, 0, OBJ_LEN);
        egm_model_put_end(model, key, 0, egm_put(client, key, buf, OBJ_LEN, NULL));
        assert_int_equal(egm_model_committed(model, key), 0);
    }
    assert_int_equal(egm_model_verify_all(model, client, 1, &found, &bytes), 0);
    assert_int_equal(egm_model_check_master(http_port, found, bytes), 0);
    print_message("netns cut: %llu objects verified after the provider came back\n",
                  (unsigned long long)found);
    egm_model_destroy(model);
    free(buf);
    egm_client_destroy(client);
}

int main(void)
{
    setvbuf(stdout, NULL, _IONBF, 0);
    signal(SIGPIPE, SIG_IGN); /* a dead child's pipe fails the test, not the process */
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_provider_sigkill_during_batch_put, setup, teardown),
        cmocka_unit_test_setup_teardown(test_provider_sigkill_during_batch_get, setup, teardown),
        cmocka_unit_test_setup_teardown(test_client_sigkill_with_leases_and_put_starts, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_pool_full_of_leased_and_pinned, setup, teardown),
        cmocka_unit_test_setup_teardown(test_model_sees_a_dropped_object, setup, teardown),
        cmocka_unit_test_setup_teardown(test_netns_cut_tcp_provider, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
