/* Integration: `egmstore put` streams its input (a real master and provider,
 * the real binary). A 96 MiB file and the same bytes on stdin are stored byte
 * for byte while the put process's peak RSS stays a small fraction of them
 * (shm and tcp), a file's put asking the master no ListSegments (its state lock
 * exclusive) and stdin's one; a file or stream larger than the pool fails at once with both
 * numbers, leaving no key; bad paths are named with their reason, and a key
 * with control characters is escaped in the "stored" line. A streaming
 * put whose reader or copy fails part way (the provider killed) leaves no key,
 * pending or not, and no space used. Clients unregister on exit: after
 * egm_client_destroy, or a one-shot `put`, the master's client count is back
 * at once (its client_ttl is 600 s: expiry cannot explain it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cmocka.h>
#include "client/client_int.h"
#include "client/inspect.h"
#include "common/clock.h"
#include "common/log.h"
#include "rpc/proto_util.h"
#include "support/cluster.h"
#include "support/model.h"
#include "support/testutil.h"

extern char **environ;

#define MIB ((uint64_t)1 << 20)
#define FILE_SIZE (96 * MIB)
#define CHUNK MIB /* the test's own buffers: its RSS stays small (see run_t) */
#define RUN_TIMEOUT_MS 120000
#define RSS_FRACTION 0.4 /* the put's peak RSS against the file */

static char tmp_dir[256];
/* Each test's master and provider; teardown stops them even after a failed assert. */
static egm_test_cluster_t cluster;

static int setup_cluster(void **state)
{
    (void)state;
    egm_test_cluster_init(&cluster);
    return 0;
}

static int teardown_cluster(void **state)
{
    (void)state;
    egm_test_cluster_stop(&cluster);
    return 0;
}

static int setup_dir(void **state)
{
    (void)state;
    const char *base = getenv("TMPDIR");
    snprintf(tmp_dir, sizeof(tmp_dir), "%s/egm-test-cli-put-XXXXXX",
             base != NULL && base[0] != '\0' ? base : "/tmp");
    assert_non_null(mkdtemp(tmp_dir));
    /* The put's spool file goes here too (unlinked at once). */
    setenv("TMPDIR", tmp_dir, 1);
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

static int teardown_dir(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp_dir);
    assert_int_equal(system(cmd), 0);
    return 0;
}

static void path_in_dir(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", tmp_dir, name);
}

/* Chunk i of a test object: deterministic bytes, never the whole object in memory. */
static void fill_chunk(unsigned char *buf, size_t len, unsigned seed, uint64_t i)
{
    egm_test_fill(buf, len, seed * 7919u + (unsigned)i);
}

static void write_object(const char *path, uint64_t size, unsigned seed)
{
    unsigned char *buf = malloc(CHUNK);
    FILE *f = fopen(path, "wb");
    assert_non_null(buf);
    assert_non_null(f);
    for (uint64_t at = 0, i = 0; at < size; at += CHUNK, i++) {
        size_t len = size - at < CHUNK ? (size_t)(size - at) : CHUNK;
        fill_chunk(buf, len, seed, i);
        assert_int_equal(fwrite(buf, 1, len, f), len);
    }
    assert_int_equal(fclose(f), 0);
    free(buf);
}

static void check_object(const char *path, uint64_t size, unsigned seed)
{
    unsigned char *want = malloc(CHUNK), *got = malloc(CHUNK);
    FILE *f = fopen(path, "rb");
    struct stat st;
    assert_non_null(want);
    assert_non_null(got);
    assert_non_null(f);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal((uint64_t)st.st_size, size);
    for (uint64_t at = 0, i = 0; at < size; at += CHUNK, i++) {
        size_t len = size - at < CHUNK ? (size_t)(size - at) : CHUNK;
        fill_chunk(want, len, seed, i);
        assert_int_equal(fread(got, 1, len, f), len);
        assert_memory_equal(got, want, len);
    }
    fclose(f);
    free(want);
    free(got);
}

/* One run of the binary. maxrss: the child's peak RSS from wait4. It is
 * spawned with posix_spawn (vfork semantics), whose child starts from this
 * process's peak: this test keeps its own memory to a few MiB (CHUNK). */
typedef struct {
    int code;       /* exit status, 128 + signal, or -1 */
    long maxrss_kb; /* ru_maxrss */
    uint64_t fed;   /* bytes written to its stdin */
    char out[8192]; /* stdout + stderr */
} run_t;

/* Feeds `size` bytes of object `seed` into fd until done or the reader goes
 * away (EPIPE); returns the bytes written. Bounded by the deadline. */
static uint64_t feed(int fd, uint64_t size, unsigned seed, uint64_t deadline)
{
    unsigned char *buf = malloc(CHUNK);
    uint64_t at = 0;
    assert_non_null(buf);
    for (uint64_t i = 0; at < size; i++) {
        size_t len = size - at < CHUNK ? (size_t)(size - at) : CHUNK, off = 0;
        fill_chunk(buf, len, seed, i);
        while (off < len) {
            uint64_t now = egm__now_ms();
            struct pollfd pfd = {.fd = fd, .events = POLLOUT};
            if (now >= deadline || poll(&pfd, 1, (int)(deadline - now)) <= 0)
                goto out;
            ssize_t w = write(fd, buf + off, len - off);
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0)
                goto out; /* EPIPE: it stopped reading */
            off += (size_t)w;
            at += (uint64_t)w;
        }
    }
out:
    free(buf);
    return at;
}

/* Runs `egmstore ARGS --master ADDR`; stdin: `stdin_size` bytes of object
 * `stdin_seed` through a pipe when stdin_size > 0, else /dev/null. */
static void run_cli(const char *const *args, uint64_t stdin_size, unsigned stdin_seed, run_t *r)
{
    const char *argv[32];
    size_t n = 0;
    char out_path[512];
    int in_pipe[2] = {-1, -1};
    posix_spawn_file_actions_t fa;
    pid_t pid;

    memset(r, 0, sizeof(*r));
    r->code = -1;
    argv[n++] = egm_test_bin();
    for (; *args != NULL && n < 28; args++)
        argv[n++] = *args;
    argv[n++] = "--master";
    argv[n++] = cluster.master_addr;
    argv[n] = NULL;
    path_in_dir(out_path, sizeof(out_path), "cli.out");
    assert_int_equal(posix_spawn_file_actions_init(&fa), 0);
    if (stdin_size > 0) {
        assert_int_equal(pipe2(in_pipe, O_CLOEXEC), 0);
        posix_spawn_file_actions_adddup2(&fa, in_pipe[0], STDIN_FILENO);
    } else {
        posix_spawn_file_actions_addopen(&fa, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
    }
    posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, out_path, O_WRONLY | O_CREAT | O_TRUNC,
                                     0600);
    posix_spawn_file_actions_adddup2(&fa, STDOUT_FILENO, STDERR_FILENO);
    assert_int_equal(posix_spawn(&pid, argv[0], &fa, NULL, (char *const *)argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    uint64_t deadline = egm__now_ms() + RUN_TIMEOUT_MS;
    if (stdin_size > 0) {
        close(in_pipe[0]);
        r->fed = feed(in_pipe[1], stdin_size, stdin_seed, deadline);
        close(in_pipe[1]);
    }
    struct rusage ru;
    int wstatus = 0;
    pid_t done = 0;
    while ((done = wait4(pid, &wstatus, WNOHANG, &ru)) == 0 && egm__now_ms() < deadline)
        egm__sleep_ms(20);
    if (done != pid) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        fail_msg("egmstore %s did not end within %d ms", argv[1], RUN_TIMEOUT_MS);
    }
    r->code = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
    r->maxrss_kb = ru.ru_maxrss;
    FILE *f = fopen(out_path, "r");
    assert_non_null(f);
    size_t got = fread(r->out, 1, sizeof(r->out) - 1, f);
    r->out[got] = '\0';
    fclose(f);
    printf("egmstore %s %s: exit %d, peak RSS %ld KiB, fed %llu: %s", argv[1], n > 2 ? argv[2] : "",
           r->code, r->maxrss_kb, (unsigned long long)r->fed, r->out);
}

/* The master's admin http port (start). */
static unsigned admin_port;

static void start(const char *pool)
{
    /* One provider: nothing to re-replicate. Without the master's repair
     * worker (a client of its own), the clients counted are the test's. */
    const char *master_flags[] = {
        "--client-ttl", "600", "--http-port", "0", "--rereplication-bytes-per-sec", "0", NULL};
    assert_int_equal(egm_test_start_master(&cluster, master_flags), 0);
    admin_port = egm_model_admin_port(&cluster);
    assert_true(admin_port > 0);
    assert_true(egm_test_start_provider(&cluster, pool, NULL) >= 0);
}

/* How many RPCs of `type` the master has handled (its /metrics). */
static long long rpc_count(const char *type)
{
    long long n = egm_model_master_rpc_count(admin_port, type);
    assert_true(n >= 0);
    return n;
}

static void get_and_check(const char *key, uint64_t size, unsigned seed)
{
    char path[512], out[1024];
    path_in_dir(path, sizeof(path), "readback");
    const char *args[] = {"get", key, path, NULL};
    assert_int_equal(egm_test_cli(&cluster, args, NULL, 0, out, sizeof(out)), 0);
    check_object(path, size, seed);
    unlink(path);
}

/* Whether the master knows key at all (complete or pending), asked by StatKey. */
static egm_status_t stat_key(egm_client_t *client, const char *key)
{
    Egm__StatKeyReply *reply = NULL;
    assert_int_equal(egm__client_stat(client, key, &reply), EGM_OK);
    egm_status_t status = reply->status;
    egm__rpc_msg_free(&reply->base);
    return status;
}

static uint64_t pool_used(egm_client_t *client)
{
    Egm__ListSegmentsReply *reply = NULL;
    uint64_t used = 0;
    assert_int_equal(egm__client_list_segments(client, &reply), EGM_OK);
    for (size_t i = 0; i < reply->n_segments; i++)
        used += reply->segments[i]->used;
    egm__rpc_msg_free(&reply->base);
    return used;
}

static uint64_t master_clients(egm_client_t *client)
{
    Egm__ListSegmentsReply *reply = NULL;
    assert_int_equal(egm__client_list_segments(client, &reply), EGM_OK);
    uint64_t n = reply->clients;
    egm__rpc_msg_free(&reply->base);
    return n;
}

/* The peak RSS of a put of one byte: what the binary takes whatever the object
 * (more under ASan, whose shadow memory grows with the process). */
static long baseline_rss_kb(void)
{
    run_t r;
    const char *args[] = {"put", "rss/baseline", "-", NULL};
    run_cli(args, 1, 9, &r);
    assert_int_equal(r.code, 0);
    return r.maxrss_kb;
}

static void assert_small_rss(const run_t *r, uint64_t object, long baseline_kb)
{
    struct rusage self;
    double bound = RSS_FRACTION * (double)object;
    double grown = ((double)r->maxrss_kb - (double)baseline_kb) * 1024.0;

    /* The child's ru_maxrss starts from this process's peak (run_t): a
     * measure only while that is below the bound. */
    assert_int_equal(getrusage(RUSAGE_SELF, &self), 0);
    printf("peak RSS %ld KiB (a one-byte put: %ld KiB) for a %llu KiB object (bound %.0f%% of "
           "it above the one-byte put; this test's own peak %ld KiB)\n",
           r->maxrss_kb, baseline_kb, (unsigned long long)(object / 1024), RSS_FRACTION * 100,
           self.ru_maxrss);
    if ((double)self.ru_maxrss * 1024.0 >= bound)
        fail_msg("this test's own peak RSS (%ld KiB) leaves no room to measure the put's",
                 self.ru_maxrss);
    assert_true(grown < bound);
}

static void test_put_file(void **state)
{
    (void)state;
    char path[512], want[128];
    run_t r;

    start("384MiB"); /* three objects, below the high watermark */
    long baseline = baseline_rss_kb();
    path_in_dir(path, sizeof(path), "object");
    write_object(path, FILE_SIZE, 1);
    const char *shm_args[] = {"put", "file/shm", path, NULL};
    /* A put that fits asks the master nothing but PutStart and PutEnd: no
     * ListSegments, which holds the master's state lock exclusive. */
    long long lists = rpc_count("ListSegments"), starts = rpc_count("PutStart");
    run_cli(shm_args, 0, 0, &r);
    assert_int_equal(r.code, 0);
    assert_int_equal(rpc_count("ListSegments"), lists);
    assert_int_equal(rpc_count("PutStart"), starts + 1);
    snprintf(want, sizeof(want), "stored file/shm (%llu bytes)", (unsigned long long)FILE_SIZE);
    assert_non_null(strstr(r.out, want));
    assert_small_rss(&r, FILE_SIZE, baseline);
    get_and_check("file/shm", FILE_SIZE, 1);

    const char *tcp_args[] = {"put", "file/tcp", path, "--protocol", "tcp", NULL};
    run_cli(tcp_args, 0, 0, &r);
    assert_int_equal(r.code, 0);
    assert_small_rss(&r, FILE_SIZE, baseline);
    get_and_check("file/tcp", FILE_SIZE, 1);

    /* On a host with a CUDA driver (the fake one: the transfer engine then
     * has its nvlink side too) a part's pages are dropped the same way, and
     * the segment stays usable for the next part. */
    const char *fake = getenv("EGM_FAKE_CUDA_DIR");
    assert_non_null(fake);
    const char *old_path = getenv("LD_LIBRARY_PATH");
    char *saved = old_path != NULL ? strdup(old_path) : NULL;
    char lib_path[1024]; /* the fake driver first, the libraries found before after it */
    snprintf(lib_path, sizeof(lib_path), "%s%s%s", fake, saved != NULL ? ":" : "",
             saved != NULL ? saved : "");
    assert_int_equal(setenv("LD_LIBRARY_PATH", lib_path, 1), 0);
    const char *gpu_host_args[] = {"put", "file/gpu-host", path, "--log-level", "debug", NULL};
    run_cli(gpu_host_args, 0, 0, &r);
    if (saved != NULL)
        setenv("LD_LIBRARY_PATH", saved, 1);
    else
        unsetenv("LD_LIBRARY_PATH");
    free(saved);
    assert_int_equal(r.code, 0);
    assert_non_null(strstr(r.out, "CUDA driver"));
    assert_small_rss(&r, FILE_SIZE, baseline);
    get_and_check("file/gpu-host", FILE_SIZE, 1);
    unlink(path);
}

static void test_put_stdin(void **state)
{
    (void)state;
    char want[128];
    run_t r;

    start("256MiB");
    long baseline = baseline_rss_kb();
    const char *shm_args[] = {"put", "stdin/shm", "-", NULL};
    /* One ListSegments: the most a stream may be before it is spooled. */
    long long lists = rpc_count("ListSegments"), starts = rpc_count("PutStart");
    run_cli(shm_args, FILE_SIZE, 2, &r);
    assert_int_equal(r.fed, FILE_SIZE);
    assert_int_equal(r.code, 0);
    assert_int_equal(rpc_count("ListSegments"), lists + 1);
    assert_int_equal(rpc_count("PutStart"), starts + 1);
    snprintf(want, sizeof(want), "stored stdin/shm (%llu bytes)", (unsigned long long)FILE_SIZE);
    assert_non_null(strstr(r.out, want));
    assert_small_rss(&r, FILE_SIZE, baseline);
    get_and_check("stdin/shm", FILE_SIZE, 2);

    const char *tcp_args[] = {"put", "stdin/tcp", "-", "--protocol", "tcp", NULL};
    run_cli(tcp_args, FILE_SIZE, 3, &r);
    assert_int_equal(r.code, 0);
    assert_small_rss(&r, FILE_SIZE, baseline);
    get_and_check("stdin/tcp", FILE_SIZE, 3);
}

/* Pool 64 MiB; a 100 MiB file (sparse: never read) and 100 MiB on stdin. */
static void test_put_larger_than_pool(void **state)
{
    (void)state;
    char path[512], out[1024];
    const uint64_t big = 100 * MIB;
    run_t r;

    start("64MiB");
    path_in_dir(path, sizeof(path), "big");
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    assert_true(fd >= 0);
    assert_int_equal(ftruncate(fd, (off_t)big), 0);
    close(fd);
    const char *file_args[] = {"put", "big/file", path, NULL};
    run_cli(file_args, 0, 0, &r);
    assert_int_equal(r.code, 1);
    assert_non_null(strstr(r.out, path));
    assert_non_null(strstr(r.out, "104857600 bytes")); /* the file */
    assert_non_null(strstr(r.out, "67108864 bytes"));  /* the pool */
    assert_non_null(strstr(r.out, "more than the whole pool"));
    unlink(path);

    /* stdin: it stops reading once past what the pool can hold. */
    const char *stdin_args[] = {"put", "big/stdin", "-", NULL};
    run_cli(stdin_args, big, 4, &r);
    assert_int_equal(r.code, 1);
    assert_non_null(strstr(r.out, "stdin: more than 67108864 bytes"));
    assert_true(r.fed < big);

    egm_client_t *client = egm_test_client(&cluster, "tcp", NULL);
    assert_non_null(client);
    assert_int_equal(stat_key(client, "big/file"), EGM_ERR_NOT_FOUND);
    assert_int_equal(stat_key(client, "big/stdin"), EGM_ERR_NOT_FOUND);
    assert_int_equal(pool_used(client), 0);
    egm_client_destroy(client);
    const char *exist_args[] = {"exist", "big/file", NULL};
    assert_int_equal(egm_test_cli(&cluster, exist_args, NULL, 0, out, sizeof(out)), 1);
}

static void test_put_bad_paths(void **state)
{
    (void)state;
    char path[512], want[600];
    run_t r;

    start("16MiB");
    const char *dir_args[] = {"put", "k", "/tmp", NULL};
    run_cli(dir_args, 0, 0, &r);
    assert_int_equal(r.code, 1);
    assert_non_null(strstr(r.out, "/tmp: Is a directory"));

    path_in_dir(path, sizeof(path), "missing");
    const char *missing_args[] = {"put", "k", path, NULL};
    run_cli(missing_args, 0, 0, &r);
    assert_int_equal(r.code, 1);
    snprintf(want, sizeof(want), "%s: No such file or directory", path);
    assert_non_null(strstr(r.out, want));

    /* The key in the "stored" line is escaped, never echoed raw. */
    const char *ctl_args[] = {"put", "ctl\x1b[2Jkey", "-", NULL};
    run_cli(ctl_args, 5, 0, &r);
    assert_int_equal(r.code, 0);
    assert_non_null(strstr(r.out, "stored \"ctl\\x1b[2Jkey\" (5 bytes)"));
    assert_null(strchr(r.out, 0x1b));
}

/* A reader that hands out chunks of object `seed`, and at part `fail_at`
 * either fails itself or kills the provider first (the copy then fails). */
typedef struct {
    unsigned seed;
    uint64_t parts;
    uint64_t fail_at;
    int kill_provider;
} reader_t;

static egm_status_t test_read(void *ctx, void *buf, size_t len)
{
    reader_t *rd = ctx;
    if (rd->parts == rd->fail_at) {
        if (!rd->kill_provider)
            return egm__set_error(EGM_ERR_IO, "test reader: failing at part %llu",
                                  (unsigned long long)rd->parts);
        assert_int_equal(egm__process_signal(&cluster.providers[0], SIGKILL), EGM_OK);
        assert_int_equal(egm__process_wait(&cluster.providers[0], 10000, NULL), EGM_OK);
    }
    fill_chunk(buf, len, rd->seed, rd->parts++);
    return EGM_OK;
}

static void test_stream_failure_revokes(void **state)
{
    (void)state;
    egm_put_stream_params_t params = {.part_size = CHUNK};
    const uint64_t size = 8 * CHUNK;

    start("64MiB");
    egm_client_t *client = egm_test_client(&cluster, "tcp", NULL);
    assert_non_null(client);

    /* The reader fails after 3 of 8 parts were written. */
    reader_t rd = {.seed = 5, .fail_at = 3};
    assert_int_equal(egm__put_stream(client, "torn", size, test_read, &rd, &params), EGM_ERR_IO);
    assert_non_null(strstr(egm_last_error(), "failing at part 3"));
    assert_int_equal(stat_key(client, "torn"), EGM_ERR_NOT_FOUND); /* not even pending */
    assert_int_equal(egm_exist(client, "torn"), EGM_ERR_NOT_FOUND);
    assert_int_equal(pool_used(client), 0);
    /* Nothing left behind: the key can be stored now. */
    rd = (reader_t){.seed = 5, .fail_at = UINT64_MAX};
    assert_int_equal(egm__put_stream(client, "torn", size, test_read, &rd, &params), EGM_OK);
    assert_int_equal(stat_key(client, "torn"), EGM_OK);

    /* The provider dies after 2 parts: the next copy fails (tcp). */
    rd = (reader_t){.seed = 6, .fail_at = 2, .kill_provider = 1};
    egm_status_t status = egm__put_stream(client, "killed", size, test_read, &rd, &params);
    assert_int_not_equal(status, EGM_OK);
    assert_int_equal(stat_key(client, "killed"), EGM_ERR_NOT_FOUND);
    assert_int_equal(egm_exist(client, "killed"), EGM_ERR_NOT_FOUND);
    egm_client_destroy(client);
}

static void test_clients_unregister(void **state)
{
    (void)state;
    char out[1024];

    start("16MiB");
    egm_client_t *viewer = egm_test_client(&cluster, "tcp", NULL);
    assert_non_null(viewer);
    uint64_t before = master_clients(viewer); /* the provider and the viewer */
    assert_int_equal(before, 2);

    egm_client_t *client = egm_test_client(&cluster, "tcp", NULL);
    assert_non_null(client);
    assert_int_equal(master_clients(viewer), before + 1);
    egm_client_destroy(client);
    assert_int_equal(master_clients(viewer), before);

    const char *put_args[] = {"put", "one-shot", "-", NULL};
    assert_int_equal(egm_test_cli(&cluster, put_args, "hello", 5, out, sizeof(out)), 0);
    const char *exist_args[] = {"exist", "one-shot", NULL};
    assert_int_equal(egm_test_cli(&cluster, exist_args, NULL, 0, out, sizeof(out)), 0);
    assert_int_equal(master_clients(viewer), before);
    egm_client_destroy(viewer);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_put_file, setup_cluster, teardown_cluster),
        cmocka_unit_test_setup_teardown(test_put_stdin, setup_cluster, teardown_cluster),
        cmocka_unit_test_setup_teardown(test_put_larger_than_pool, setup_cluster, teardown_cluster),
        cmocka_unit_test_setup_teardown(test_put_bad_paths, setup_cluster, teardown_cluster),
        cmocka_unit_test_setup_teardown(test_stream_failure_revokes, setup_cluster,
                                        teardown_cluster),
        cmocka_unit_test_setup_teardown(test_clients_unregister, setup_cluster, teardown_cluster),
    };
    return cmocka_run_group_tests(tests, setup_dir, teardown_dir);
}
