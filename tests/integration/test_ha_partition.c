/* No split brain under a network partition (issue 19): a leader cut off from
 * etcd and from everyone stops serving, fenced by its own view of its etcd
 * lease, before another master can lead; it then exits with status 1, and the
 * clients that can reach the new leader write and read through it.
 *
 * Four simulated hosts, each a network (and UTS) namespace with a veth link
 * to one bridge (support/netns.h: user namespaces, no privileges needed):
 * etcd on host E, master A on host A, master B on host B (in A's in-sync set
 * before the clients start), a provider and a client on host C that follow the
 * leader through etcd, and on host A a provider and two clients of A's address
 * (what a client holding A's connection would do; the worst case for split
 * brain): a writer, and a reader getting one key over and over (A cannot
 * confirm a change without B once cut off, but it answers reads until its
 * fence). The masters let clients cache no location, so that every get asks
 * the master. Every client records CLOCK_MONOTONIC (one clock for all the
 * namespaces) before and after each call. With A leading and all of them
 * writing or reading, A's switch port goes down. The test then asserts:
 *  1. B leads within 6 x ha_lease_ttl + 10 s of the cut (5 x of them are what a
 *     standby out of the in-sync set waits), with a higher epoch;
 *  2. no put or get that *started* after any of these was acknowledged by A
 *     (A then answered it after that moment):
 *     - B's /health said "leader" (polled from inside host B);
 *     - A's own /health said "standby", i.e. past its fence (polled from inside
 *       host A, where A's address still answers while it is cut off);
 *     - one ha_lease_ttl after the cut: A's last renewal was sent before the
 *       cut, so no correct fence reaches past that;
 *     and A's /health never said "leader" after B was seen leading; and no put
 *     of the writer on A was answered OK more than half a lease after the cut
 *     (B, cut off, cannot have confirmed it);
 *     while at least one call of the clients on A did go through A after the
 *     cut (so that the test looked at A's last moments and can fail);
 *  3. A exits with status 1;
 *  4. the client on host C puts and gets again, through B.
 * Every bound is generous (the order of events is asserted, not their speed).
 * test_lost_early_grant: with B's switch port down, a writer on C (over shared
 * memory, with its provider) gets a slab granted early by A, and its Commit
 * waits for B; A is killed and cut off, so B never gets the grant, and B,
 * joined again, leads. The put failed and its key is absent (or, had it
 * succeeded, exact), and the next puts of that writer and of another, placed
 * by B (where the lost slab was, most likely: not checked), read back
 * exactly. It fails when a Commit
 * into a slab granted early is answered before the standbys hold the grant
 * (acknowledged objects are then lost).
 * EGM_TEST_HA_TTL sets the masters' ha_lease_ttl (default 4 s, as in
 * test_ha_master; 8 s at least for test_lost_early_grant).
 * Where the kernel allows no unprivileged user namespace the test is skipped
 * (77), saying why. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include <egmstore/egmstore.h>
#include "common/clock.h"
#include "support/cluster.h"
#include "support/etcd.h"
#include "support/http_get.h"
#include "support/netns.h"
#include "support/testutil.h"

#define WAIT_MS 30000
#define PUT_BYTES 4096
#define MAX_RECORDS 100000
#define NS_PER_MS 1000000ull

/* One round of a client process: a put, a get, or both, as it saw them
 * (status 1: not tried). */
typedef struct {
    uint64_t put_start, put_end, get_start, get_end;
    int put, get;
} round_t;

/* A client process on a host, until told to stop: a writer puts keys
 * "<name>-<i>" (and gets each back, with check_get); a reader puts one key,
 * then only gets it. */
typedef struct {
    const char *name;
    const egm_test_host_t *host;
    char master[128];   /* its master_server_addr */
    char preferred[64]; /* the segment its puts prefer ("" none) */
    int check_get;      /* a writer gets each key back after its put */
    int reader;
    char path[300]; /* its rounds, one line each */
    pid_t pid;
    int stop_fd; /* a byte written here stops it */
} writer_t;

static egm_test_host_t host_e, host_a, host_b, host_c;
static egm_test_etcd_t etcd;
static int etcd_started;
static egm_test_cluster_t ma, mb, pool; /* masters A and B; the providers */
static writer_t wa, ra, wc;             /* writer and reader on A, writer on C */
static char tmpdir[64];
static round_t rounds[MAX_RECORDS];
static pid_t lost_grant_pid; /* test_lost_early_grant's writers, until reaped */
static int b_cut;            /* host B's port is down */

static const char *ttl_floor; /* a test's least ha_lease_ttl (NULL: none); teardown resets it */

static const char *ttl_text(void)
{
    const char *t = getenv("EGM_TEST_HA_TTL");
    t = t != NULL && t[0] != '\0' ? t : "4";
    return ttl_floor != NULL && atoi(t) < atoi(ttl_floor) ? ttl_floor : t;
}

/* ms from `from` to `t` (both egm__now_ns), signed. */
static double ms_after(uint64_t t, uint64_t from)
{
    return ((double)t - (double)from) / 1e6;
}

static void writer_main(const writer_t *w, int stop_fd)
{
    FILE *out = fopen(w->path, "w");
    egm_config_t *config = NULL;
    egm_client_t *client = NULL;
    if (out == NULL || egm_config_create(&config) != EGM_OK ||
        egm_config_set(config, "master_server_addr", w->master) != EGM_OK ||
        egm_config_set(config, "protocol", "tcp") != EGM_OK ||
        egm_config_set(config, "local_hostname", w->host->addr) != EGM_OK) {
        fprintf(stderr, "writer %s: cannot configure its client\n", w->name);
        _exit(2);
    }
    for (uint64_t until = egm__now_ms() + WAIT_MS; client == NULL && egm__now_ms() < until;)
        if (egm_client_create(config, &client) != EGM_OK) {
            client = NULL;
            egm__sleep_ms(100);
        }
    if (client == NULL) {
        fprintf(stderr, "writer %s: no client within %d ms: %s\n", w->name, WAIT_MS,
                egm_last_error());
        _exit(3);
    }
    static unsigned char data[PUT_BYTES];
    const char *preferred[] = {w->preferred};
    egm_replicate_config_t rc = {.replica_num = 1,
                                 .preferred_segments = preferred,
                                 .preferred_segments_count = w->preferred[0] != '\0' ? 1 : 0};
    char key[64], last[64] = "";
    unsigned seed = 0;
    /* Bounded even if nobody stops it (the test's own bound is lower). */
    uint64_t until = egm__now_ms() + 10 * WAIT_MS;
    for (unsigned i = 0; egm__now_ms() < until; egm__sleep_ms(20)) {
        struct pollfd pfd = {.fd = stop_fd, .events = POLLIN};
        if (poll(&pfd, 1, 0) != 0)
            break;
        round_t r = {.put = 1, .get = 1};
        if (!w->reader || last[0] == '\0') {
            snprintf(key, sizeof(key), "%s-%u", w->name, i);
            egm_test_fill(data, sizeof(data), i);
            r.put_start = egm__now_ns();
            r.put = egm_put(client, key, data, sizeof(data), &rc);
            r.put_end = egm__now_ns();
            if (r.put == EGM_OK) {
                snprintf(last, sizeof(last), "%s", key);
                seed = i;
            }
            i++;
        }
        if (last[0] != '\0' && (w->reader || (w->check_get && r.put == EGM_OK))) {
            r.get_start = egm__now_ns();
            r.get = egm_test_get_seeded(client, last, sizeof(data), seed);
            r.get_end = egm__now_ns();
        }
        fprintf(out, "%" PRIu64 " %" PRIu64 " %d %" PRIu64 " %" PRIu64 " %d\n", r.put_start,
                r.put_end, r.put, r.get_start, r.get_end, r.get);
        fflush(out);
    }
    fclose(out);
    /* No egm_client_destroy: its goodbye to a master cut off would only wait. */
    _exit(0);
}

static void start_writer(writer_t *w)
{
    int fds[2];
    snprintf(w->path, sizeof(w->path), "%s/writer-%s", tmpdir, w->name);
    assert_int_equal(pipe2(fds, O_CLOEXEC), 0);
    pid_t pid = egm_test_host_fork(w->host);
    if (pid == 0) {
        close(fds[1]);
        writer_main(w, fds[0]);
    }
    close(fds[0]);
    w->stop_fd = fds[1];
    w->pid = pid;
    assert_true(pid > 0);
}

/* Tells it to stop, waits (bounded), kills it if it does not. */
static void stop_writer(writer_t *w)
{
    if (w->stop_fd >= 0) {
        if (write(w->stop_fd, "x", 1) != 1)
            fprintf(stderr, "writer %s: cannot signal the stop: %s\n", w->name, strerror(errno));
        close(w->stop_fd);
        w->stop_fd = -1;
    }
    if (w->pid <= 0)
        return;
    int status;
    for (uint64_t until = egm__now_ms() + WAIT_MS;; egm__sleep_ms(20)) {
        pid_t got = waitpid(w->pid, &status, WNOHANG);
        if (got == w->pid || (got < 0 && errno != EINTR))
            break;
        if (egm__now_ms() >= until) {
            fprintf(stderr, "writer %s: pid %d did not stop, killing it\n", w->name, (int)w->pid);
            kill(w->pid, SIGKILL);
            waitpid(w->pid, &status, 0);
            break;
        }
    }
    w->pid = 0;
}

/* The client's rounds so far, into rounds[]; their number. */
static size_t read_rounds(const writer_t *w)
{
    FILE *f = fopen(w->path, "r");
    size_t n = 0;
    if (f == NULL)
        return 0;
    while (n < MAX_RECORDS && fscanf(f, "%" SCNu64 " %" SCNu64 " %d %" SCNu64 " %" SCNu64 " %d",
                                     &rounds[n].put_start, &rounds[n].put_end, &rounds[n].put,
                                     &rounds[n].get_start, &rounds[n].get_end, &rounds[n].get) == 6)
        n++;
    fclose(f);
    return n;
}

/* w's rounds that started after `after` and did what w does: a writer's put
 * acknowledged (and read back, with check_get), a reader's get. */
static size_t good_rounds_after(const writer_t *w, uint64_t after)
{
    size_t n = read_rounds(w), good = 0;
    for (size_t i = 0; i < n; i++) {
        const round_t *r = &rounds[i];
        if (w->reader
                ? r->get_start > after && r->get == EGM_OK
                : r->put_start > after && r->put == EGM_OK && (!w->check_get || r->get == EGM_OK))
            good++;
    }
    return good;
}

/* Waits until w has `want` good rounds after `after`; fails saying so. */
static void wait_good_rounds(const writer_t *w, uint64_t after, size_t want, const char *what)
{
    for (uint64_t until = egm__now_ms() + WAIT_MS; egm__now_ms() < until; egm__sleep_ms(50))
        if (good_rounds_after(w, after) >= want)
            return;
    fail_msg("the %s %s on host %s had %zu good rounds %s, not %zu, within %d ms",
             w->reader ? "reader" : "writer", w->name, w->host->name, good_rounds_after(w, after),
             what, want, WAIT_MS);
}

/* Over w's rounds: the latest start of a call A acknowledged (put or get
 * answered OK) into *last_p, and how many started after `after`. */
static size_t acks_after(const writer_t *w, uint64_t after, uint64_t *last_p)
{
    size_t n = read_rounds(w), acks = 0;
    for (size_t i = 0; i < n; i++) {
        const round_t *r = &rounds[i];
        uint64_t starts[2] = {r->put == EGM_OK ? r->put_start : 0,
                              r->get == EGM_OK ? r->get_start : 0};
        for (int k = 0; k < 2; k++) {
            acks += starts[k] > after;
            if (starts[k] > *last_p)
                *last_p = starts[k];
        }
    }
    return acks;
}

/* The latest moment a put of w was answered OK (0: none). */
static uint64_t last_put_ack(const writer_t *w)
{
    size_t n = read_rounds(w);
    uint64_t last = 0;
    for (size_t i = 0; i < n; i++)
        if (rounds[i].put == EGM_OK && rounds[i].put_end > last)
            last = rounds[i].put_end;
    return last;
}

/* The role in the /health of the master on http port `port` of `host`, asked
 * from inside that host: "leader", "standby", or "" (no answer). */
static void role_of(const egm_test_host_t *host, unsigned port, char *role, size_t len,
                    long long *epoch_p)
{
    char body[4096];
    role[0] = '\0'; /* when no answer */
    if (egm_test_host_http_get(host, host->addr, port, "/health", body, sizeof(body)) != 200)
        return;
    egm_test_health_role(body, role, len, epoch_p);
}

static long long wait_role(const egm_test_host_t *host, unsigned port, const char *want)
{
    char role[32];
    long long epoch = 0;
    for (uint64_t until = egm__now_ms() + WAIT_MS; egm__now_ms() < until; egm__sleep_ms(50)) {
        role_of(host, port, role, sizeof(role), &epoch);
        if (strcmp(role, want) == 0)
            return epoch;
    }
    fail_msg("the master on host %s is not %s after %d ms (its /health says \"%s\")", host->name,
             want, WAIT_MS, role);
    return 0;
}

/* The standbys in the leader's in-sync set, from its /health (-1: no answer). */
static int standbys_in_sync(const egm_test_host_t *host, unsigned port)
{
    char body[4096];
    if (egm_test_host_http_get(host, host->addr, port, "/health", body, sizeof(body)) != 200)
        return -1;
    return (int)egm_test_health_number(body, "standbys_in_sync");
}

/* A master with enable_ha on the host's address; its admin HTTP port.
 * cache_ms: its location_cache_ms (NULL: the default). "0" lets clients cache
 * no location: every get asks the master (a get served from a location cached
 * from A would be no answer of A's). */
static unsigned start_master(egm_test_cluster_t *m, const egm_test_host_t *host,
                             const char *cache_ms)
{
    unsigned http = 0;
    const char *flags[] = {"--listen-address",
                           host->addr,
                           "--enable-ha",
                           "true",
                           "--etcd-endpoints",
                           etcd.endpoint,
                           "--ha-lease-ttl",
                           ttl_text(),
                           cache_ms != NULL ? "--location-cache-ms" : NULL,
                           cache_ms,
                           NULL};
    assert_int_equal(egm_test_host_enter(host), 0);
    int rc = egm_test_start_master_http(m, flags, &http);
    assert_int_equal(egm_test_host_leave(), 0);
    assert_int_equal(rc, 0);
    snprintf(m->master_addr, sizeof(m->master_addr), "%s:%u", host->addr, m->master_port);
    return http;
}

/* A provider on the host following the leader through etcd; its pid. */
static pid_t start_provider(const egm_test_host_t *host)
{
    const char *flags[] = {"--local-hostname", host->addr, NULL};
    assert_int_equal(egm_test_host_enter(host), 0);
    int index = egm_test_start_provider(&pool, "64MiB", flags);
    assert_int_equal(egm_test_host_leave(), 0);
    assert_true(index >= 0);
    return pool.providers[index].pid;
}

static int setup(void **state)
{
    (void)state;
    egm_test_cluster_init(&ma);
    egm_test_cluster_init(&mb);
    egm_test_cluster_init(&pool);
    etcd_started = 0;
    wa = (writer_t){.name = "a", .host = &host_a, .stop_fd = -1};
    ra = (writer_t){.name = "r", .host = &host_a, .reader = 1, .stop_fd = -1};
    wc = (writer_t){.name = "c", .host = &host_c, .check_get = 1, .stop_fd = -1};
    snprintf(tmpdir, sizeof(tmpdir), "/tmp/egm-test-partition-XXXXXX");
    return mkdtemp(tmpdir) != NULL ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    stop_writer(&wa);
    stop_writer(&ra);
    stop_writer(&wc);
    /* The providers keep nothing worth a clean stop, which would try to
     * unmount from a master cut off (15 s each). */
    for (int i = 0; i < pool.n_providers; i++)
        egm__process_signal(&pool.providers[i], SIGKILL);
    egm_test_cluster_stop(&pool);
    egm_test_cluster_stop(&ma);
    egm_test_cluster_stop(&mb);
    if (etcd_started)
        egm_test_etcd_stop(&etcd);
    etcd_started = 0;
    unlink(wa.path);
    unlink(ra.path);
    unlink(wc.path);
    rmdir(tmpdir);
    if (lost_grant_pid > 0) {
        kill(lost_grant_pid, SIGKILL);
        waitpid(lost_grant_pid, NULL, 0);
        lost_grant_pid = 0;
    }
    /* A cut-off host joins again for the next test. */
    egm_test_host_join(&host_a);
    if (b_cut)
        egm_test_host_join(&host_b);
    b_cut = 0;
    ttl_floor = NULL;
    return 0;
}

static void test_partitioned_leader_is_fenced(void **state)
{
    (void)state;
    const uint64_t ttl_ns = (uint64_t)atoi(ttl_text()) * 1000 * NS_PER_MS;

    assert_int_equal(egm_test_host_enter(&host_e), 0);
    int rc = egm_test_etcd_start_on(&etcd, host_e.addr);
    assert_int_equal(egm_test_host_leave(), 0);
    etcd_started = 1;
    assert_int_equal(rc, 0);

    unsigned http_a = start_master(&ma, &host_a, "0");
    long long epoch_a = wait_role(&host_a, http_a, "leader");
    unsigned http_b = start_master(&mb, &host_b, "0");
    wait_role(&host_b, http_b, "standby");
    assert_int_equal(wait_role(&host_a, http_a, "leader"), epoch_a);

    snprintf(pool.master_addr, sizeof(pool.master_addr), "etcd://%.50s", etcd.endpoint);
    pid_t provider_a = start_provider(&host_a), provider_c = start_provider(&host_c);

    /* B holds A's state, so that it may take over at once (else it waits 5 x
     * ha_lease_ttl). Before the clients start: the leader marks a standby in
     * sync only once 100 ms pass without a change to send it
     * (src/master/replication.c); under writes as steady as these, that took
     * 11 s in one run, and may never come. */
    int in_sync = 0;
    for (uint64_t until = egm__now_ms() + WAIT_MS; in_sync < 1 && egm__now_ms() < until;
         egm__sleep_ms(50))
        in_sync = standbys_in_sync(&host_a, http_a);
    if (in_sync < 1)
        fail_msg("B is not in A's in-sync set after %d ms (A's /health: standbys_in_sync %d)",
                 WAIT_MS, in_sync);

    /* Each client writes into the provider next to it (segments are named
     * host:pid): those on A to A's address, into what A can still reach once
     * cut off; the one on C never into host A, so that no copy of its hangs
     * across the cut (only its master calls cross it). On A a reader too:
     * with the standbys' confirmation that every change waits for, A can
     * acknowledge no put once B is out of reach, but it answers gets until
     * its fence. */
    snprintf(wa.master, sizeof(wa.master), "%s", ma.master_addr);
    snprintf(wa.preferred, sizeof(wa.preferred), "%s:%d", host_a.name, (int)provider_a);
    ra = (writer_t){.name = "r", .host = &host_a, .reader = 1, .stop_fd = -1};
    memcpy(ra.master, wa.master, sizeof(ra.master));
    memcpy(ra.preferred, wa.preferred, sizeof(ra.preferred));
    snprintf(wc.master, sizeof(wc.master), "etcd://%s", etcd.endpoint);
    snprintf(wc.preferred, sizeof(wc.preferred), "%s:%d", host_c.name, (int)provider_c);
    start_writer(&wa);
    start_writer(&ra);
    start_writer(&wc);
    wait_good_rounds(&wa, 0, 10, "before the cut");
    wait_good_rounds(&ra, 0, 10, "before the cut");
    wait_good_rounds(&wc, 0, 10, "before the cut");
    uint64_t cut = egm__now_ns();
    assert_int_equal(egm_test_host_cut(&host_a), 0);
    uint64_t cut_done = egm__now_ns();

    /* Watch both masters from inside their hosts until B leads and A is gone.
     * The bound covers a B that fell out of the in-sync set meanwhile (it
     * then waits 5 x ha_lease_ttl before it stands). */
    uint64_t bound = cut_done + 6 * ttl_ns + 10000 * NS_PER_MS;
    uint64_t a_standby = 0, a_leader_last = 0, a_exit = 0, b_leader = 0;
    long long epoch_b = 0;
    int a_code = -1;
    char role[32];
    while (egm__now_ns() < bound && (b_leader == 0 || a_exit == 0)) {
        if (a_exit == 0 && egm__process_wait(&ma.master, 0, &a_code) == EGM_OK)
            a_exit = egm__now_ns();
        if (a_exit == 0) {
            uint64_t t0 = egm__now_ns();
            role_of(&host_a, http_a, role, sizeof(role), NULL);
            uint64_t t1 = egm__now_ns();
            if (strcmp(role, "leader") == 0)
                a_leader_last = t0; /* A led at some time after t0 */
            else if (role[0] != '\0' && a_standby == 0)
                a_standby = t1; /* A was fenced at some time before t1 */
        }
        if (b_leader == 0) {
            role_of(&host_b, http_b, role, sizeof(role), &epoch_b);
            if (strcmp(role, "leader") == 0)
                b_leader = egm__now_ns(); /* B led at some time before this */
        }
        egm__sleep_ms(20);
    }
    if (b_leader == 0)
        fail_msg("B did not lead within %.0f ms of the cut (6 x ha_lease_ttl %s s + 10 s)",
                 ms_after(bound, cut_done), ttl_text());
    if (a_exit == 0) {
        if (egm__process_wait(&ma.master, WAIT_MS, &a_code) != EGM_OK)
            fail_msg("A, cut off, still runs %d ms after B was seen leading", WAIT_MS);
        a_exit = egm__now_ns();
    }
    wait_good_rounds(&wc, b_leader, 5, "after B led");
    stop_writer(&wa);
    stop_writer(&ra);
    stop_writer(&wc);

    uint64_t last_by_a = 0, last_put_by_a = last_put_ack(&wa);
    size_t puts_after_cut = acks_after(&wa, cut_done, &last_by_a);
    size_t gets_after_cut = acks_after(&ra, cut_done, &last_by_a);
    size_t c_resumed = good_rounds_after(&wc, b_leader);
    fprintf(stderr,
            "ha partition (ha_lease_ttl %s s), ms after the cut: A's /health standby %.0f, "
            "A exited (status %d) %.0f, B leading (epoch %lld, A's %lld) %.0f; A acknowledged "
            "%zu puts and %zu gets started after the cut, the last at %.0f; the client on C: %zu "
            "puts and gets through B\n",
            ttl_text(), a_standby ? ms_after(a_standby, cut) : -1.0, a_code, ms_after(a_exit, cut),
            epoch_b, epoch_a, ms_after(b_leader, cut), puts_after_cut, gets_after_cut,
            ms_after(last_by_a, cut), c_resumed);

    if (last_by_a > b_leader)
        fail_msg("split brain: A acknowledged a call that started %.0f ms after B was seen "
                 "leading",
                 ms_after(last_by_a, b_leader));
    if (a_leader_last > b_leader)
        fail_msg("split brain: A's /health said leader %.0f ms after B was seen leading",
                 ms_after(a_leader_last, b_leader));
    if (a_standby != 0 && last_by_a > a_standby)
        fail_msg("A acknowledged a call that started %.0f ms after its own /health said standby: "
                 "it served past its fence",
                 ms_after(last_by_a, a_standby));
    if (last_by_a > cut_done + ttl_ns)
        fail_msg("A acknowledged a call that started %.0f ms after the cut, later than one "
                 "ha_lease_ttl (%s s): it served past any lease it can have held",
                 ms_after(last_by_a, cut_done), ttl_text());
    /* A put waits for B's confirmation, which cannot come once B is cut
     * off: one answered OK later than the reply of a confirmation sent just
     * before the cut could take (half a lease is generous: microseconds
     * unloaded) was not confirmed. (A leader that answered changes without
     * waiting for B fails this, its puts acknowledged until its fence; the
     * starts checked above would not catch a put started within a lease of
     * the cut.) */
    if (last_put_by_a > cut_done + ttl_ns / 2)
        fail_msg("A acknowledged a put %.0f ms after the cut, when B could not have confirmed "
                 "it",
                 ms_after(last_put_by_a, cut_done));
    if (puts_after_cut + gets_after_cut == 0)
        fail_msg("the clients on A had no call acknowledged after the cut: the test did not see "
                 "A serve up to its fence, so it could not have seen A serve past it");
    assert_true(epoch_b > epoch_a);
    if (a_code != 1)
        fail_msg("A, cut off, exited with status %d, not 1", a_code);
    assert_true(c_resumed >= 5);
}

/* ---- a grant answered early whose ops the standby never gets ----------------- */

#define LOST_KEYS 32
#define LOST_BYTES 8192

/* A put retried until it is answered OK (or the key exists: a try the
 * caller did not see succeed), for up to WAIT_MS while no leader answers. */
static egm_status_t put_until_stored(egm_client_t *client, const char *key, unsigned seed)
{
    egm_status_t s = EGM_ERR_UNREACHABLE;
    for (uint64_t until = egm__now_ms() + WAIT_MS; egm__now_ms() < until; egm__sleep_ms(50)) {
        s = egm_test_put_seeded(client, key, LOST_BYTES, seed);
        if (s == EGM_OK || s == EGM_ERR_EXISTS)
            return EGM_OK;
    }
    return s;
}

/* A get checking every byte, retried while no leader answers (for up to
 * WAIT_MS). */
static egm_status_t get_when_led(egm_client_t *client, const char *key, unsigned seed)
{
    egm_status_t s = EGM_ERR_UNREACHABLE;
    for (uint64_t until = egm__now_ms() + WAIT_MS;
         (s == EGM_ERR_UNREACHABLE || s == EGM_ERR_TIMEOUT) && egm__now_ms() < until;
         egm__sleep_ms(50))
        s = egm_test_get_seeded(client, key, LOST_BYTES, seed);
    return s;
}

/* A client of the leader through etcd, over shared memory, on this host. */
static egm_client_t *lost_grant_client(void)
{
    char master[160];
    egm_config_t *config = NULL;
    egm_client_t *client = NULL;
    snprintf(master, sizeof(master), "etcd://%s", etcd.endpoint);
    if (egm_config_create(&config) != EGM_OK ||
        egm_config_set(config, "master_server_addr", master) != EGM_OK ||
        egm_config_set(config, "protocol", "shm") != EGM_OK ||
        egm_config_set(config, "local_hostname", host_c.addr) != EGM_OK)
        return NULL;
    for (uint64_t until = egm__now_ms() + WAIT_MS; client == NULL && egm__now_ms() < until;)
        if (egm_client_create(config, &client) != EGM_OK) {
            client = NULL;
            egm__sleep_ms(100);
        }
    egm_config_destroy(config);
    return client;
}

/* The child on host C: two writers. Says "r" on ready_fd once both clients
 * exist, waits for a byte on go_fd, then the first puts "early" (its first
 * put: a slab granted early); once that returns, the other puts LOST_KEYS
 * objects (at the new leader: likely where the lost slab was), then the first
 * puts LOST_KEYS more; every object must read back exactly ("early" too, if
 * its put succeeded). Exits 0, or 1 saying what was wrong into `report`. */
static void lost_grant_main(int ready_fd, int go_fd, const char *report)
{
    FILE *out = fopen(report, "w");
    egm_client_t *first = lost_grant_client(), *other = lost_grant_client();
    char go, key[64];
    if (out == NULL || first == NULL || other == NULL || write(ready_fd, "r", 1) != 1 ||
        read(go_fd, &go, 1) != 1)
        _exit(2);
    egm_status_t early = egm_test_put_seeded(first, "early", LOST_BYTES, 5);
    fprintf(out, "early put: %s\n", egm_status_string(early));
    int bad = 0;
    for (int i = 0; i < LOST_KEYS; i++) {
        snprintf(key, sizeof(key), "reused-%d", i);
        egm_status_t s = put_until_stored(other, key, 100 + (unsigned)i);
        if (s != EGM_OK) {
            fprintf(out, "%s: put %s\n", key, egm_status_string(s));
            bad = 1;
        }
    }
    for (int i = 0; i < LOST_KEYS; i++) {
        snprintf(key, sizeof(key), "again-%d", i);
        egm_status_t s = put_until_stored(first, key, 200 + (unsigned)i);
        if (s != EGM_OK) {
            fprintf(out, "%s: put %s\n", key, egm_status_string(s));
            bad = 1;
        }
    }
    for (int i = 0; i < LOST_KEYS; i++) {
        snprintf(key, sizeof(key), "reused-%d", i);
        egm_status_t s = get_when_led(other, key, 100 + (unsigned)i);
        if (s != EGM_OK) {
            fprintf(out, "%s, put by the other writer at the new leader: get %s\n", key,
                    egm_status_string(s));
            bad = 1;
        }
        snprintf(key, sizeof(key), "again-%d", i);
        s = get_when_led(first, key, 200 + (unsigned)i);
        if (s != EGM_OK) {
            fprintf(out, "%s: get %s\n", key, egm_status_string(s));
            bad = 1;
        }
    }
    egm_status_t got = get_when_led(first, "early", 5);
    fprintf(out, "early get: %s\n", egm_status_string(got));
    if (got != EGM_OK && (early == EGM_OK || got != EGM_ERR_NOT_FOUND)) {
        fprintf(out, "early: put %s, then get %s\n", egm_status_string(early),
                egm_status_string(got));
        bad = 1;
    }
    fclose(out);
    _exit(bad); /* no destroy: nothing to wait for */
}

/* A number from the /metrics of the master on http port `port` of `host`,
 * asked from inside that host (-1: no answer, or not there). */
static double metric_on(const egm_test_host_t *host, unsigned port, const char *name)
{
    static char body[1 << 18];
    if (egm_test_host_http_get(host, host->addr, port, "/metrics", body, sizeof(body)) != 200)
        return -1;
    return egm_test_metric_in(body, name);
}

/* A slab granted early (docs/ha.md "Grants the standbys do not hold yet")
 * whose grant never reaches the standby: B's switch port is down when a
 * writer on C puts its first object, A answers the grant early, the writer
 * copies, and its Commit waits for B. A is then killed and cut off at once
 * (what it had sent B dies with it), and B, joined again, leads without
 * knowing the slab: its space is free there. Another writer's objects put
 * through B, and the first writer's next ones, read back exactly: the first
 * writer copies nothing more into its old slab (its copies there end within
 * place_within_ms of its request, long before B can lead). The early put
 * either failed (its key then absent or exact) or succeeded (exact). */
static void test_lost_early_grant(void **state)
{
    (void)state;
    assert_int_equal(egm_test_host_enter(&host_e), 0);
    int rc = egm_test_etcd_start_on(&etcd, host_e.addr);
    assert_int_equal(egm_test_host_leave(), 0);
    etcd_started = 1;
    assert_int_equal(rc, 0);
    /* A lease of 8 s at least: A takes a standby that does not answer out of
     * the in-sync set after half of it, and the test kills A before that
     * even on a loaded host. Clients keep their slabs as long as they
     * normally do (the default location_cache_ms). */
    ttl_floor = "8";
    unsigned http_a = start_master(&ma, &host_a, NULL);
    long long epoch_a = wait_role(&host_a, http_a, "leader");
    unsigned http_b = start_master(&mb, &host_b, NULL);
    wait_role(&host_b, http_b, "standby");
    snprintf(pool.master_addr, sizeof(pool.master_addr), "etcd://%.50s", etcd.endpoint);
    start_provider(&host_c);
    int in_sync = 0;
    for (uint64_t until = egm__now_ms() + WAIT_MS; in_sync < 1 && egm__now_ms() < until;
         egm__sleep_ms(50))
        in_sync = standbys_in_sync(&host_a, http_a);
    if (in_sync < 1)
        fail_msg("B is not in A's in-sync set after %d ms", WAIT_MS);

    int ready[2], go[2];
    char report[320];
    snprintf(report, sizeof(report), "%s/lost-grant", tmpdir);
    assert_int_equal(pipe2(ready, O_CLOEXEC), 0);
    assert_int_equal(pipe2(go, O_CLOEXEC), 0);
    pid_t child = egm_test_host_fork(&host_c);
    if (child == 0) {
        close(ready[0]);
        close(go[1]);
        lost_grant_main(ready[1], go[0], report);
    }
    assert_true(child > 0);
    lost_grant_pid = child;
    close(ready[1]);
    close(go[0]);
    char r;
    struct pollfd pfd = {.fd = ready[0], .events = POLLIN};
    if (poll(&pfd, 1, 2 * WAIT_MS) != 1 || read(ready[0], &r, 1) != 1)
        fail_msg("the writers on C did not get their clients within %d ms", 2 * WAIT_MS);
    close(ready[0]);

    assert_int_equal(egm_test_host_cut(&host_b), 0);
    b_cut = 1;
    assert_int_equal(write(go[1], "g", 1), 1);
    close(go[1]);
    double early = 0, commits = 0;
    for (uint64_t until = egm__now_ms() + WAIT_MS;
         (early < 1 || commits < 1) && egm__now_ms() < until; egm__sleep_ms(5)) {
        early = metric_on(&host_a, http_a, "egm_master_slab_grants_early_total");
        commits = metric_on(&host_a, http_a, "egm_master_commits_total");
    }
    if (early < 1 || commits < 1)
        fail_msg("A answered %.0f grants early and committed %.0f objects within %d ms: the test "
                 "saw nothing",
                 early, commits, WAIT_MS);
    /* The Commit waits for B, which cannot answer: killed well within the
     * half lease after which A would take B out of the in-sync set. */
    int still = standbys_in_sync(&host_a, http_a);
    assert_int_equal(egm__process_signal(&ma.master, SIGKILL), EGM_OK);
    if (still != 1)
        fail_msg("A counted %d standbys in sync when it was killed: it had dropped B (a loaded "
                 "host?), so B would lead without A's acknowledged changes",
                 still);
    assert_int_equal(egm_test_host_cut(&host_a), 0);
    assert_int_equal(egm_test_host_join(&host_b), 0);
    b_cut = 0;
    assert_true(wait_role(&host_b, http_b, "leader") > epoch_a);

    int status = -1;
    pid_t got = -1;
    for (uint64_t until = egm__now_ms() + 3 * WAIT_MS; egm__now_ms() < until; egm__sleep_ms(50))
        if ((got = waitpid(child, &status, WNOHANG)) == child)
            break;
    if (got == child)
        lost_grant_pid = 0;
    char text[4096] = "";
    FILE *f = fopen(report, "r");
    if (f != NULL) {
        size_t n = fread(text, 1, sizeof(text) - 1, f);
        text[n] = '\0';
        fclose(f);
    }
    unlink(report);
    fprintf(stderr, "lost early grant (the writers on C):\n%s", text);
    if (got != child)
        fail_msg("the writers on C did not end within %d ms", 3 * WAIT_MS);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        fail_msg("the writers on C found objects wrong or lost (status %d):\n%s", status, text);
}

int main(void)
{
    if (egm_test_netns_isolate() != 0) {
        egm_test_skip_note(
            "test_ha_partition",
            "it needs unprivileged user namespaces (the split-brain test did not run)");
        return 77;
    }
    /* The simulated hosts, made once (they cost nothing while unused). */
    if (egm_test_lan_create() != 0 || egm_test_host_add(&host_e, "egm-etcd", 1) != 0 ||
        egm_test_host_add(&host_a, "egm-master-a", 2) != 0 ||
        egm_test_host_add(&host_b, "egm-master-b", 3) != 0 ||
        egm_test_host_add(&host_c, "egm-client-c", 4) != 0) {
        fprintf(stderr, "test_ha_partition: cannot build the simulated hosts\n");
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_partitioned_leader_is_fenced, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lost_early_grant, setup, teardown),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    egm_test_host_cleanup(&host_e);
    egm_test_host_cleanup(&host_a);
    egm_test_host_cleanup(&host_b);
    egm_test_host_cleanup(&host_c);
    return rc;
}
