/* Integration: the `egmstore` command as a user runs it, against a real
 * master (and provider): one-shot commands contribute no memory whatever the
 * config says (and say so once), keys from outside are escaped in every line
 * they appear in, unknown flags (another command's --force or --plan-only
 * included) and bad master addresses are usage errors, a refusal of
 * --plan-only names it once, IPv6 addresses print in brackets, --help lists
 * what affects each command and explains its own flags, the demo leaves the
 * default admin port alone, and nothing is left in /tmp, pass or fail. */
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <cmocka.h>
#include "common/process.h"
#include "support/cluster.h"

#define OUT_MAX 65536

static egm_test_cluster_t cluster;
static egm_process_t v6_master = {.pid = 0, .out_fd = -1}; /* test_ipv6_bracketed's */
static char out[OUT_MAX];
/* A test's temporary file: removed by the teardown, whether the test got to
 * its end or not. */
static char tmp_file[64];

/* Creates tmp_file (empty) and answers its path. */
static const char *temp_file(void)
{
    snprintf(tmp_file, sizeof(tmp_file), "/tmp/egmstore-test-cli-XXXXXX");
    int fd = mkstemp(tmp_file);
    if (fd < 0) {
        tmp_file[0] = '\0';
        fail_msg("mkstemp: %s", strerror(errno));
    }
    close(fd);
    return tmp_file;
}

static int start_master(void **state)
{
    (void)state;
    return egm_test_start_master(&cluster, NULL) == 0 ? 0 : -1;
}

static int start_master_and_provider(void **state)
{
    (void)state;
    if (egm_test_start_master(&cluster, NULL) != 0)
        return -1;
    return egm_test_start_provider(&cluster, "64MiB", NULL) >= 0 ? 0 : -1;
}

/* For the commands that fail before they connect: a master address nothing
 * serves (egm_test_cli appends --master with it). */
static int no_cluster(void **state)
{
    (void)state;
    egm_test_cluster_init(&cluster);
    snprintf(cluster.master_addr, sizeof(cluster.master_addr), "127.0.0.1:1");
    return 0;
}

static int stop_cluster(void **state)
{
    (void)state;
    int removed = tmp_file[0] == '\0' || unlink(tmp_file) == 0 || errno == ENOENT;
    tmp_file[0] = '\0';
    unsetenv("EGMSTORE_GLOBAL_SEGMENT_SIZE"); /* when a test failed before it did */
    unsetenv("EGMSTORE_MASTER_SERVER_ADDR");
    if (v6_master.pid > 0) { /* killed and reaped whether the test got to it or not */
        egm__process_signal(&v6_master, SIGTERM);
        egm__process_wait(&v6_master, 15000, NULL);
    }
    egm__process_cleanup(&v6_master);
    v6_master = (egm_process_t){.pid = 0, .out_fd = -1};
    egm_test_cluster_stop(&cluster);
    return removed ? 0 : -1;
}

static int run(const char *const *args, const void *input, size_t len)
{
    return egm_test_cli(&cluster, args, input, len, out, sizeof(out));
}

static size_t count(const char *text, const char *needle)
{
    size_t n = 0;
    for (const char *p = strstr(text, needle); p != NULL; p = strstr(p + 1, needle))
        n++;
    return n;
}

static void assert_has(const char *needle)
{
    if (strstr(out, needle) == NULL)
        fail_msg("output lacks \"%s\":\n%s", needle, out);
}

static void assert_lacks(const char *needle)
{
    if (strstr(out, needle) != NULL)
        fail_msg("output has \"%s\":\n%s", needle, out);
}

/* The one note of a one-shot command given capacity, naming where from. */
static void assert_one_note(const char *source)
{
    char text[256];
    snprintf(text, sizeof(text), "egmstore: note: global_segment_size (from %s) is ignored",
             source);
    if (count(out, "egmstore: note:") != 1 || count(out, text) != 1)
        fail_msg("expected one note \"%s\":\n%s", text, out);
    assert_has("contributes no memory");
}

/* The "N segments, ..." total line of `egmstore ls`. */
static size_t ls_segments(void)
{
    const char *line = strstr(out, " segments, ");
    assert_non_null(line);
    while (line > out && line[-1] != '\n')
        line--;
    return (size_t)strtoull(line, NULL, 10);
}

/* Master and no provider: a put given capacity (environment, config file or
 * flag) has nowhere to go and fails; it used to mount a segment of its own,
 * print "stored" and take the object with it when it exited. */
static void test_one_shot_without_provider(void **state)
{
    (void)state;
    const char *put[] = {"put", "noprov/env", "-", NULL};
    assert_int_equal(setenv("EGMSTORE_GLOBAL_SEGMENT_SIZE", "64MiB", 1), 0);
    int rc = run(put, "some bytes", 10);
    assert_int_equal(unsetenv("EGMSTORE_GLOBAL_SEGMENT_SIZE"), 0);
    if (rc == 0)
        fail_msg("put without a provider succeeded:\n%s", out);
    assert_lacks("stored");
    assert_one_note("EGMSTORE_GLOBAL_SEGMENT_SIZE");

    const char *path = temp_file();
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("global_segment_size = 64MiB\n[client]\nmax_mr_size = 32MiB\n", f);
    assert_int_equal(fclose(f), 0);
    const char *put_file[] = {"put", "noprov/file", "-", "--config", path, NULL};
    rc = run(put_file, "some bytes", 10);
    assert_int_not_equal(rc, 0);
    assert_lacks("stored");
    assert_has("max_mr_size (from the config file /tmp/egmstore-test-cli-");
    assert_has("global_segment_size (from the config file /tmp/egmstore-test-cli-");
    assert_int_equal(count(out, "egmstore: note:"), 1);

    const char *put_flag[] = {"put", "noprov/flag", "-", "--global-segment-size", "64MiB", NULL};
    assert_int_not_equal(run(put_flag, "some bytes", 10), 0);
    assert_lacks("stored");
    assert_one_note("--global-segment-size");

    /* Nothing stored, nothing mounted. */
    const char *names[] = {"noprov/env", "noprov/file", "noprov/flag"};
    for (size_t i = 0; i < 3; i++) {
        const char *exist[] = {"exist", names[i], NULL};
        assert_int_equal(run(exist, NULL, 0), 1);
    }
    assert_int_equal(egm_test_cluster_segments(&cluster), 0);

    /* Capacity given as its default is no contribution: no note. */
    const char *zero[] = {"exist", "noprov/env", "--global-segment-size", "0B", NULL};
    assert_int_equal(run(zero, NULL, 0), 1);
    assert_lacks("note:");
}

/* With a provider, every put of a CLI given capacity lands there and stays
 * readable after the CLI exits; the master never lists a CLI's segment. */
static void test_one_shot_with_provider(void **state)
{
    (void)state;
    enum { N = 6, LEN = 64 * 1024 + 3 };
    static unsigned char data[N][LEN];
    char key[N][32];
    size_t provider_segments = egm_test_cluster_segments(&cluster);
    assert_true(provider_segments > 0 && provider_segments != (size_t)-1);

    assert_int_equal(setenv("EGMSTORE_GLOBAL_SEGMENT_SIZE", "64MiB", 1), 0);
    for (int i = 0; i < N; i++) {
        snprintf(key[i], sizeof(key[i]), "prov/%d", i);
        egm_test_fill(data[i], LEN, 100u + (unsigned)i);
        const char *put[] = {"put", key[i], "-", NULL};
        int rc = run(put, data[i], LEN);
        if (rc != 0)
            fail_msg("put %s: exit %d:\n%s", key[i], rc, out);
        assert_has("stored prov/");
        assert_one_note("EGMSTORE_GLOBAL_SEGMENT_SIZE");
    }
    /* ls given capacity lists the provider's segments only (it used to list
     * one of its own besides). */
    const char *ls[] = {"ls", NULL};
    int rc = run(ls, NULL, 0);
    assert_int_equal(unsetenv("EGMSTORE_GLOBAL_SEGMENT_SIZE"), 0);
    assert_int_equal(rc, 0);
    assert_int_equal(ls_segments(), provider_segments);
    assert_one_note("EGMSTORE_GLOBAL_SEGMENT_SIZE");

    egm_client_t *client = egm_test_client(&cluster, "tcp", NULL);
    assert_non_null(client);
    for (int i = 0; i < N; i++) {
        void *back = NULL;
        size_t got = 0;
        egm_status_t status = egm_get(client, key[i], &back, &got);
        if (status != EGM_OK)
            fail_msg("%s lost after the CLI exited: %s", key[i], egm_last_error());
        assert_int_equal(got, LEN);
        assert_memory_equal(back, data[i], LEN);
        egm_buffer_free(back);
    }
    assert_int_equal(egm_test_segment_count(client), provider_segments);
    egm_client_destroy(client);
}

/* Control characters, invalid UTF-8, invisible code points, spaces, quotes
 * and backslashes in keys come out escaped (and quoted) in every line of the
 * CLI; visible UTF-8 and plain keys as they are. */
static void test_keys_escaped(void **state)
{
    (void)state;
    static const struct {
        const char *key, *shown;
    } keys[] = {
        {"esc/\n\x1b[2J\tend\r", "\"esc/\\n\\x1b[2J\\tend\\r\""},
        {"esc/bad\xff\xc3(\x7f", "\"esc/bad\\xff\\xc3(\\x7f\""},
        {"esc/zw\xe2\x80\x8bx\xc2\x85", "\"esc/zw\\xe2\\x80\\x8bx\\xc2\\x85\""},
        {"esc/with space", "\"esc/with space\""},
        {"esc/q\"b\\s", "\"esc/q\\\"b\\\\s\""},
        {"esc/caf\xc3\xa9", "esc/caf\xc3\xa9"},
        {"esc/plain", "esc/plain"},
    };
    char line[512];
    const char *path = temp_file();

    egm_client_t *client = egm_test_client(&cluster, "tcp", NULL);
    assert_non_null(client);
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++)
        assert_int_equal(egm_put(client, keys[i].key, "12345", 5, NULL), EGM_OK);
    egm_client_destroy(client);

    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        const char *exist[] = {"exist", keys[i].key, NULL};
        assert_int_equal(run(exist, NULL, 0), 0);
        snprintf(line, sizeof(line), "%s exists\n", keys[i].shown);
        assert_string_equal(out, line);

        const char *stat[] = {"stat", keys[i].key, NULL};
        assert_int_equal(run(stat, NULL, 0), 0);
        snprintf(line, sizeof(line), "key       %s\n", keys[i].shown);
        if (strncmp(out, line, strlen(line)) != 0)
            fail_msg("stat begins otherwise than \"%s\":\n%s", line, out);

        const char *get[] = {"get", keys[i].key, path, NULL};
        if (run(get, NULL, 0) != 0)
            fail_msg("get %s:\n%s", keys[i].shown, out);
        snprintf(line, sizeof(line), "fetched %s (5 bytes) into %s\n", keys[i].shown, path);
        assert_string_equal(out, line);

        const char *rm[] = {"rm", keys[i].key, "--force", NULL}; /* get left a lease */
        if (run(rm, NULL, 0) != 0)
            fail_msg("rm %s:\n%s", keys[i].shown, out);
        snprintf(line, sizeof(line), "removed %s\n", keys[i].shown);
        assert_string_equal(out, line);

        /* Errors naming the key (now missing). */
        assert_int_equal(run(stat, NULL, 0), 1);
        assert_lacks("\x1b");
        assert_int_equal(count(out, "\n"), 1);
        assert_int_equal(run(get, NULL, 0), 1);
        assert_lacks("\x1b");
        assert_int_equal(count(out, "\n"), 1);
    }
    const char *missing[] = {"stat", "esc/gone\x1b]0;title\a", NULL};
    assert_int_equal(run(missing, NULL, 0), 1);
    assert_has("\"esc/gone\\x1b]0;title\\x07\": ");
}

/* A flag that names no key is "unknown" (exit 2), pointing at the command's
 * --help, instead of "needs a value". */
static void test_unknown_flag(void **state)
{
    (void)state;
    const char *ls[] = {"ls", "--bogus", NULL};
    assert_int_equal(run(ls, NULL, 0), 2);
    assert_has("egmstore: error: unknown flag --bogus (egmstore ls --help lists the flags)\n");
    assert_lacks("needs a value");
    const char *ls_eq[] = {"ls", "--bogus=1", NULL};
    assert_int_equal(run(ls_eq, NULL, 0), 2);
    assert_has("unknown flag --bogus (egmstore ls --help lists the flags)");
    const char *put[] = {"put", "k", "-", "--global-segmant-size", "1GiB", NULL};
    assert_int_equal(run(put, NULL, 0), 2);
    assert_has("unknown flag --global-segmant-size (egmstore put --help lists the flags)");
    const char *bench[] = {"bench", "data", "--bogus", NULL};
    assert_int_equal(run(bench, NULL, 0), 2);
    assert_has("unknown flag --bogus (egmstore bench data --help lists the flags)");
    /* --force is rm's own flag and --plan-only the provider's: the other
     * commands refuse them as they refuse any flag that names no key. */
    const char *ls_force[] = {"ls", "--force", NULL};
    assert_int_equal(run(ls_force, NULL, 0), 2);
    assert_has("egmstore: error: unknown flag --force (egmstore ls --help lists the flags)\n");
    const char *put_plan[] = {"put", "k", "-", "--plan-only", NULL};
    assert_int_equal(run(put_plan, NULL, 0), 2);
    assert_has("egmstore: error: unknown flag --plan-only (egmstore put --help lists the flags)\n");
    const char *rm_plan[] = {"rm", "k", "--plan-only", NULL};
    assert_int_equal(run(rm_plan, NULL, 0), 2);
    assert_has("unknown flag --plan-only (egmstore rm --help lists the flags)");
    const char *provider_force[] = {"provider", "--force", "--plan-only", NULL};
    assert_int_equal(run(provider_force, NULL, 0), 2);
    assert_has("unknown flag --force (egmstore provider --help lists the flags)");
    /* ... and their own commands take them: rm gets as far as the master
     * (nothing serves this address), the provider prints its refusal of a
     * memfd plan, naming --plan-only once. */
    const char *rm_force[] = {"rm", "k", "--force", NULL};
    assert_int_equal(run(rm_force, NULL, 0), 1);
    assert_lacks("unknown flag");
    assert_has("127.0.0.1:1");
    const char *plan[] = {"provider", "--plan-only", "--global-segment-size", "16MiB", NULL};
    assert_int_equal(run(plan, NULL, 0), 2);
    assert_has("egmstore: error: provider: --plan-only: plans a CUDA pool; set "
               "enable_egm_store_pool=true");
    if (count(out, "--plan-only") != 1)
        fail_msg("--plan-only named more than once:\n%s", out);
    /* Known flags still take their value. */
    const char *known[] = {"ls", "--protocol=rdma", NULL};
    assert_int_equal(run(known, NULL, 0), 2);
    assert_has("protocol: \"rdma\" is not one of");
}

/* master_server_addr is refused where it is given, exit 2 like a bad --port,
 * instead of failing at connect time. */
static void test_bad_master_addr(void **state)
{
    (void)state;
    const char *port[] = {"ls", "--master", "localhost:70000", NULL};
    assert_int_equal(run(port, NULL, 0), 2);
    assert_has("egmstore: error: --master: master_server_addr: \"localhost:70000\": the port must "
               "be 1..65535");
    const char *v6[] = {"exist", "k", "--master=::1:50051", NULL};
    assert_int_equal(run(v6, NULL, 0), 2);
    assert_has("an IPv6 address goes in brackets: [::1]:50051");
    const char *nohost[] = {"get", "k", "-", "--master-server-addr", ":50051", NULL};
    assert_int_equal(run(nohost, NULL, 0), 2);
    assert_has("has no host");
    assert_int_equal(setenv("EGMSTORE_MASTER_SERVER_ADDR", "host:0", 1), 0);
    const char *ls[] = {"ls", NULL};
    int rc = run(ls, NULL, 0);
    assert_int_equal(unsetenv("EGMSTORE_MASTER_SERVER_ADDR"), 0);
    assert_int_equal(rc, 2);
    assert_has("EGMSTORE_MASTER_SERVER_ADDR");
    assert_has("the port must be 1..65535");
    /* etcd that nothing serves: ls fails with the reason (it freed an
     * uninitialised leader record and aborted on a double free) */
    char saved[sizeof(cluster.master_addr)];
    memcpy(saved, cluster.master_addr, sizeof(saved));
    snprintf(cluster.master_addr, sizeof(cluster.master_addr), "etcd://127.0.0.1:1");
    rc = run(ls, NULL, 0);
    memcpy(cluster.master_addr, saved, sizeof(saved));
    assert_int_equal(rc, 1);
    assert_has("egmstore: error: ls: the masters in etcd: connect 127.0.0.1:1");
}

/* IPv6 addresses print in brackets: the master's ready lines, and errors
 * naming the master (they printed ::1:50051). */
static void test_ipv6_bracketed(void **state)
{
    (void)state;
    char line[512];
    const char *argv[] = {egm_test_bin(), "master", "--listen-address",
                          "::1",          "--port", "0",
                          "--http-port",  "0",      NULL};
    egm_process_t *master = &v6_master;
    assert_int_equal(egm__process_spawn((char *const *)argv, EGM_PROCESS_STDOUT_CAPTURE, master),
                     EGM_OK);
    if (egm__process_wait_line(master, "egmstore master listening on ", line, sizeof(line),
                               30000) != EGM_OK)
        fail_msg("a master on ::1 did not start (no IPv6 loopback?)");
    unsigned port = 0;
    char rest[8] = "";
    if (sscanf(line, "egmstore master listening on [::1]:%u%7s", &port, rest) != 1 || port == 0)
        fail_msg("ready line: \"%s\"", line);
    assert_int_equal(egm__process_read_line(master, line, sizeof(line), 30000), EGM_OK);
    if (strncmp(line, "egmstore master admin http on [::1]:", 36) != 0)
        fail_msg("admin line: \"%s\"", line);

    /* A client reaches it by [::1]:PORT. */
    snprintf(cluster.master_addr, sizeof(cluster.master_addr), "[::1]:%u", port);
    const char *ls[] = {"ls", NULL};
    int rc = run(ls, NULL, 0);
    egm__process_signal(master, SIGTERM);
    assert_int_equal(egm__process_wait(master, 15000, NULL), EGM_OK);
    if (rc != 0)
        fail_msg("ls --master [::1]:%u: exit %d:\n%s", port, rc, out);
    assert_has("0 segments");

    /* And names it so when nothing answers there. */
    snprintf(cluster.master_addr, sizeof(cluster.master_addr), "[::1]:%u", port);
    assert_int_equal(run(ls, NULL, 0), 1);
    snprintf(line, sizeof(line), "connect [::1]:%u: ", port);
    assert_has(line);
    snprintf(line, sizeof(line), " ::1:%u", port);
    assert_lacks(line);
}

/* `egmstore CMD --help` into out (exit 0). */
static void help(const char *cmd, const char *sub)
{
    const char *args[] = {cmd, sub != NULL ? sub : "--help", sub != NULL ? "--help" : NULL, NULL};
    assert_int_equal(run(args, NULL, 0), 0);
}

/* Every --flag of the usage (the text up to the first blank line) starts a
 * description: it stands in the flag column of a line "  --a X, --b Y  text"
 * (before the first two spaces after the flags). */
static void assert_usage_flags_described(const char *what)
{
    const char *end = strstr(out, "\n\n");
    assert_non_null(end);
    for (const char *p = strstr(out, "--"); p != NULL && p < end; p = strstr(p + 2, "--")) {
        char flag[64];
        size_t n = strspn(p + 2, "abcdefghijklmnopqrstuvwxyz-");
        snprintf(flag, sizeof(flag), "--%.*s", (int)n, p + 2);
        int found = 0;
        for (const char *l = strstr(end, "\n  --"); l != NULL && !found;
             l = strstr(l + 1, "\n  --")) {
            const char *col_end = strstr(l + 3, "  "), *eol = strchr(l + 1, '\n');
            if (col_end == NULL || (eol != NULL && eol < col_end))
                col_end = eol;
            for (const char *f = strstr(l + 3, flag); f != NULL && f < col_end && !found;
                 f = strstr(f + 1, flag)) {
                char after = f[strlen(flag)];
                found = (f[-1] == ' ' || f[-1] == ',') &&
                        (after == ' ' || after == ',' || after == '=' || after == '\n');
            }
        }
        if (!found)
            fail_msg("%s --help: %s is in the usage line but not described:\n%s", what, flag, out);
    }
}

static void test_help(void **state)
{
    (void)state;
    /* One-shot commands: client keys, no capacity keys, no master keys. */
    static const char *const one_shot[] = {"put", "get", "exist", "rm", "ls", "stat"};
    for (size_t i = 0; i < sizeof(one_shot) / sizeof(one_shot[0]); i++) {
        help(one_shot[i], NULL);
        assert_has("\n  --master-server-addr ");
        assert_has("\n  --protocol ");
        assert_has("\n  --auth-token ");
        assert_lacks("--global-segment-size");
        assert_lacks("--max-mr-size");
        assert_lacks("--enable-egm-store-pool");
        assert_lacks("\n  --port ");
        assert_lacks("\n  --client-ttl ");
        assert_has("contributes no memory");
    }
    help("master", NULL);
    assert_has("\n  --auth-token ");
    assert_has("\n  --auth-token-file ");
    assert_has("\n  --port ");
    assert_has("\n  --http-port ");
    assert_lacks("--global-segment-size");
    assert_lacks("--replica-num");
    help("provider", NULL);
    assert_has("\n  --plan-only  ");
    assert_has("without allocating");
    assert_has("\n  --global-segment-size ");
    help("rm", NULL);
    assert_has("\n  --force  ");
    assert_has("read lease");
    help("demo", NULL);
    assert_has("\n  --global-segment-size ");
    assert_has("\n  --port ");

    help("bench", NULL);
    assert_usage_flags_described("bench");
    help("bench", "meta");
    assert_usage_flags_described("bench meta");
    help("bench", "data");
    assert_usage_flags_described("bench data");
}

/* `egmstore CMD ARGS > /dev/full`: exit status and what went to stderr. */
static int run_to_full(const char *cmd_args)
{
    char cmd[1024];
    if (tmp_file[0] == '\0')
        temp_file();
    snprintf(cmd, sizeof(cmd), "exec '%s' %s --master %s > /dev/full 2> %s", egm_test_bin(),
             cmd_args, cluster.master_addr, tmp_file);
    int st = system(cmd);
    assert_true(st != -1 && WIFEXITED(st));
    FILE *f = fopen(tmp_file, "r");
    assert_non_null(f);
    size_t n = fread(out, 1, sizeof(out) - 1, f);
    out[n] = '\0';
    fclose(f);
    return WEXITSTATUS(st);
}

/* What a command prints that cannot be written (a full disk) fails it,
 * saying so, instead of exiting 0 with its output cut; and the demo takes no
 * stray arguments. */
static void test_stdout_write_errors(void **state)
{
    (void)state;
    const char *const cmds[] = {"ls", "version", "--help", "ls --help"};
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        if (run_to_full(cmds[i]) != 1)
            fail_msg("egmstore %s > /dev/full: not exit 1:\n%s", cmds[i], out);
        assert_has("egmstore: error: standard output: No space left on device");
    }
    const char *demo[] = {"demo", "extra", NULL};
    assert_int_equal(run(demo, NULL, 0), 2);
    assert_has("egmstore: error: demo takes no arguments (got \"extra\")");
}

/* The demo's master serves no admin HTTP unless asked: the default port
 * (9003) is a real master's. With 9003 taken, its master used to warn
 * "admin HTTP off: bind 127.0.0.1:9003 ...". */
static void test_demo_leaves_admin_port(void **state)
{
    (void)state;
    /* Hold 9003; if it is held already, it is just as taken. */
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons(9003)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int held = bind(fd, (struct sockaddr *)&sin, sizeof(sin)) == 0 && listen(fd, 1) == 0;
    if (!held && errno != EADDRINUSE)
        fail_msg("127.0.0.1:9003: %s", strerror(errno));

    const char *demo[] = {"demo", NULL};
    int rc = run(demo, NULL, 0);
    close(fd);
    if (rc != 0)
        fail_msg("demo: exit %d:\n%s", rc, out);
    assert_has("demo: every object verified byte for byte");
    assert_lacks(":9003");
    assert_lacks("admin HTTP");
    assert_lacks("admin http");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_one_shot_without_provider, start_master, stop_cluster),
        cmocka_unit_test_setup_teardown(test_one_shot_with_provider, start_master_and_provider,
                                        stop_cluster),
        cmocka_unit_test_setup_teardown(test_keys_escaped, start_master_and_provider, stop_cluster),
        cmocka_unit_test_setup_teardown(test_unknown_flag, no_cluster, stop_cluster),
        cmocka_unit_test_setup_teardown(test_bad_master_addr, no_cluster, stop_cluster),
        cmocka_unit_test_setup_teardown(test_ipv6_bracketed, no_cluster, stop_cluster),
        cmocka_unit_test_setup_teardown(test_help, no_cluster, stop_cluster),
        cmocka_unit_test_setup_teardown(test_demo_leaves_admin_port, no_cluster, stop_cluster),
        cmocka_unit_test_setup_teardown(test_stdout_write_errors, start_master, stop_cluster),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
