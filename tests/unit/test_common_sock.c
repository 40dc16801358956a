/* Sockets: host:port parsing (names, IPv4, [IPv6], bad ports); TCP listen on a
 * free port, connect, full reads and writes, read deadline, refused connect;
 * abstract and path Unix sockets with fd passing and peer credentials; host id
 * form. */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "common/log.h"
#include "common/sock.h"

static void test_split_hostport(void **state)
{
    (void)state;
    char host[64];
    uint16_t port;
    assert_int_equal(egm__sock_split_hostport("127.0.0.1:50051", host, sizeof(host), &port),
                     EGM_OK);
    assert_string_equal(host, "127.0.0.1");
    assert_int_equal(port, 50051);
    assert_int_equal(egm__sock_split_hostport("node-1.example:0", host, sizeof(host), &port),
                     EGM_OK);
    assert_string_equal(host, "node-1.example");
    assert_int_equal(port, 0);
    assert_int_equal(egm__sock_split_hostport("[::1]:80", host, sizeof(host), &port), EGM_OK);
    assert_string_equal(host, "::1");
    assert_int_equal(port, 80);

    static const char *const bad[] = {
        "",         "host",     "host:",   "host:65536", "host:-1",
        "host:8x",  "[::1]80",  "[::1",    "host:1:2x",  ":99999999999999999999",
        "host: 80", "host:+80", "host:-0", "host:80 ",   "[::1]:"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        if (egm__sock_split_hostport(bad[i], host, sizeof(host), &port) != EGM_ERR_INVALID_ARG)
            fail_msg("\"%s\" accepted", bad[i]);
    assert_int_equal(egm__sock_split_hostport(NULL, host, sizeof(host), &port),
                     EGM_ERR_INVALID_ARG);
    char tiny[4];
    assert_int_equal(egm__sock_split_hostport("longhost:1", tiny, sizeof(tiny), &port),
                     EGM_ERR_INVALID_ARG);
}

/* The one parser of host:port (config's master_server_addr goes through it
 * too): what it refuses, and why. It used to read "::1:50051" as host ::1 port
 * 50051 and take a port of 7 digits, an empty host and a host with spaces,
 * which the config refused. */
static void test_split_hostport_refusals(void **state)
{
    (void)state;
    char host[64];
    uint16_t port;
    static const struct {
        const char *addr, *says;
    } bad[] = {
        {"::1:50051", "\"::1:50051\": an IPv6 address goes in brackets: [::1]:50051"},
        {"fe80::1%eth0:7000", "an IPv6 address goes in brackets: [fe80::1%eth0]:7000"},
        {"host:0000080", "\"host:0000080\": the port must be 0..65535"},
        {"host:70000", "\"host:70000\": the port must be 0..65535"},
        {":50051", "\":50051\" has no host (expected HOST:PORT or [IPv6]:PORT"},
        {"[]:50051", "\"[]:50051\" has no host"},
        {"my host:80", "the host of \"my host:80\" contains a space or a control character"},
        {"ho\nst:80", "contains a space or a control character"},
        {"[::1 ]:80", "contains a space or a control character"},
        {"host", "\"host\" has no port (expected HOST:PORT or [IPv6]:PORT"},
        {"", "\"\" has no port"},
        {"[::1]50051", "\"[::1]50051\" is not HOST:PORT or [IPv6]:PORT"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (egm__sock_split_hostport(bad[i].addr, host, sizeof(host), &port) != EGM_ERR_INVALID_ARG)
            fail_msg("\"%s\" accepted", bad[i].addr);
        if (strstr(egm_last_error(), bad[i].says) == NULL)
            fail_msg("\"%s\": \"%s\" lacks \"%s\"", bad[i].addr, egm_last_error(), bad[i].says);
    }

    /* An address to connect to needs a port: 0 is a listen address's "any". */
    assert_int_equal(egm__sock_split_peer_hostport("host:0", host, sizeof(host), &port),
                     EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "\"host:0\": the port must be 1..65535"));
    assert_int_equal(egm__sock_split_peer_hostport("host:70000", host, sizeof(host), &port),
                     EGM_ERR_INVALID_ARG);
    assert_non_null(strstr(egm_last_error(), "the port must be 1..65535"));
    assert_int_equal(egm__sock_split_peer_hostport("[fe80::1%eth0]:1", host, sizeof(host), &port),
                     EGM_OK);
    assert_string_equal(host, "fe80::1%eth0");
    assert_int_equal(port, 1);
    assert_int_equal(egm__sock_split_peer_hostport("::1:50051", host, sizeof(host), &port),
                     EGM_ERR_INVALID_ARG);
}

/* host:port for people: IPv6 literals in brackets, everything else as it is. */
static void test_format_hostport(void **state)
{
    (void)state;
    char buf[EGM_SOCK_HOSTPORT_MAX];
    assert_string_equal(egm__sock_format_hostport("127.0.0.1", 50051, buf, sizeof(buf)),
                        "127.0.0.1:50051");
    assert_string_equal(egm__sock_format_hostport("node-1.example", 0, buf, sizeof(buf)),
                        "node-1.example:0");
    assert_string_equal(egm__sock_format_hostport("::1", 50051, buf, sizeof(buf)), "[::1]:50051");
    assert_string_equal(egm__sock_format_hostport("fe80::1%eth0", 80, buf, sizeof(buf)),
                        "[fe80::1%eth0]:80");
    assert_string_equal(egm__sock_format_hostport("[::1]", 80, buf, sizeof(buf)), "[::1]:80");
    assert_string_equal(egm__sock_format_hostport("", 7, buf, sizeof(buf)), ":7");
    /* What it writes, split_hostport reads back. */
    char host[64];
    uint16_t port;
    assert_int_equal(egm__sock_split_hostport(
                         egm__sock_format_hostport("::ffff:10.0.0.1", 65535, buf, sizeof(buf)),
                         host, sizeof(host), &port),
                     EGM_OK);
    assert_string_equal(host, "::ffff:10.0.0.1");
    assert_int_equal(port, 65535);
    char tiny[6];
    assert_string_equal(egm__sock_format_hostport("::1", 80, tiny, sizeof(tiny)), "[::1]");

    /* The socket helpers' own errors name an IPv6 peer the same way (port 1:
     * nothing listens there; refused, unreachable or no address alike). */
    int fd = -1;
    assert_int_not_equal(egm__sock_tcp_connect("::1", 1, 2000, &fd), EGM_OK);
    if (strstr(egm_last_error(), "[::1]:1") == NULL)
        fail_msg("connect error without [::1]:1: %s", egm_last_error());
}

static void test_tcp_roundtrip(void **state)
{
    (void)state;
    int lfd, cfd, sfd;
    uint16_t port = 0;
    assert_int_equal(egm__sock_tcp_listen("127.0.0.1", 0, &lfd, &port), EGM_OK);
    assert_true(port != 0);
    assert_true(fcntl(lfd, F_GETFD) & FD_CLOEXEC);
    assert_int_equal(egm__sock_tcp_connect("127.0.0.1", port, 2000, &cfd), EGM_OK);
    assert_true(fcntl(cfd, F_GETFD) & FD_CLOEXEC);
    assert_int_equal(fcntl(cfd, F_GETFL) & O_NONBLOCK, 0); /* back to blocking */
    int nodelay = 0;
    socklen_t len = sizeof(nodelay);
    assert_int_equal(getsockopt(cfd, IPPROTO_TCP, TCP_NODELAY, &nodelay, &len), 0);
    assert_true(nodelay != 0);
    sfd = accept(lfd, NULL, NULL);
    assert_true(sfd >= 0);

    static char big[1 << 20];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (char)(i * 31);
    /* 1 MiB may not fit in the socket buffers: one thread sends it in pieces that
     * the other end reads in lockstep. */
    for (size_t off = 0; off < sizeof(big); off += 65536) {
        char got[65536];
        assert_int_equal(egm__sock_write_full(cfd, big + off, sizeof(got)), EGM_OK);
        assert_int_equal(egm__sock_read_full(sfd, got, sizeof(got)), EGM_OK);
        assert_memory_equal(got, big + off, sizeof(got));
    }

    /* Deadline: nothing arrives. */
    char b[4];
    assert_int_equal(egm__sock_read_full_timeout(sfd, b, sizeof(b), 30), EGM_ERR_TIMEOUT);
    assert_int_equal(egm__sock_write_full(cfd, "ping", 4), EGM_OK);
    assert_int_equal(egm__sock_read_full_timeout(sfd, b, sizeof(b), 2000), EGM_OK);
    assert_memory_equal(b, "ping", 4);

    /* EOF mid-message is UNREACHABLE. */
    assert_int_equal(egm__sock_write_full(cfd, "pi", 2), EGM_OK);
    close(cfd);
    assert_int_equal(egm__sock_read_full(sfd, b, sizeof(b)), EGM_ERR_UNREACHABLE);
    /* Writing to a closed peer answers an error, not SIGPIPE. */
    egm_status_t st = EGM_OK;
    for (int i = 0; i < 100 && st == EGM_OK; i++)
        st = egm__sock_write_full(sfd, big, 65536);
    assert_int_equal(st, EGM_ERR_UNREACHABLE);
    close(sfd);

    /* Nobody listens on the port any more: refused. */
    close(lfd);
    assert_int_equal(egm__sock_tcp_connect("127.0.0.1", port, 2000, &cfd), EGM_ERR_UNREACHABLE);
    assert_non_null(strstr(egm_last_error(), "127.0.0.1"));
    assert_int_equal(egm__sock_tcp_connect("no-such-host.invalid", 1, 500, &cfd),
                     EGM_ERR_UNREACHABLE);
}

static void test_tcp_listen_any_and_port_in_use(void **state)
{
    (void)state;
    int fd, fd2;
    uint16_t port = 0;
    assert_int_equal(egm__sock_tcp_listen("", 0, &fd, &port), EGM_OK);
    assert_true(port != 0);
    assert_int_equal(egm__sock_tcp_listen("0.0.0.0", port, &fd2, NULL), EGM_ERR_IO);
    assert_non_null(strstr(egm_last_error(), "bind"));
    close(fd);
}

static void unix_pair_roundtrip(const char *path)
{
    int lfd, cfd, sfd;
    assert_int_equal(egm__sock_unix_listen(path, &lfd), EGM_OK);
    assert_int_equal(egm__sock_unix_connect(path, &cfd), EGM_OK);
    sfd = accept(lfd, NULL, NULL);
    assert_true(sfd >= 0);

    pid_t pid;
    uid_t uid;
    gid_t gid;
    assert_int_equal(egm__sock_peer_cred(sfd, &pid, &uid, &gid), EGM_OK);
    assert_int_equal(pid, getpid());
    assert_int_equal(uid, getuid());
    assert_int_equal(gid, getgid());

    /* Pass the write end of a pipe; what is written through the received fd
     * comes out of the original read end. */
    int p[2];
    assert_int_equal(pipe(p), 0);
    assert_int_equal(egm__sock_send_fd(cfd, p[1], "seg1", 4), EGM_OK);
    int got_fd = -1;
    char data[4];
    assert_int_equal(egm__sock_recv_fd(sfd, &got_fd, data, sizeof(data)), EGM_OK);
    assert_memory_equal(data, "seg1", 4);
    assert_true(got_fd >= 0 && got_fd != p[1]);
    assert_true(fcntl(got_fd, F_GETFD) & FD_CLOEXEC);
    assert_int_equal(write(got_fd, "x", 1), 1);
    char c;
    assert_int_equal(read(p[0], &c, 1), 1);
    assert_int_equal(c, 'x');
    close(got_fd);

    /* Payload without an fd. */
    assert_int_equal(egm__sock_send_fd(cfd, -1, "none", 4), EGM_OK);
    assert_int_equal(egm__sock_recv_fd(sfd, &got_fd, data, sizeof(data)), EGM_OK);
    assert_int_equal(got_fd, -1);

    /* Short payload then EOF. */
    assert_int_equal(egm__sock_send_fd(cfd, p[1], "ab", 2), EGM_OK);
    close(cfd);
    assert_int_equal(egm__sock_recv_fd(sfd, &got_fd, data, sizeof(data)), EGM_ERR_PROTOCOL);
    assert_int_equal(got_fd, -1); /* the fd that came with it was closed */
    close(p[0]);
    close(p[1]);
    close(sfd);
    close(lfd);
}

static void test_unix_abstract(void **state)
{
    (void)state;
    char path[64];
    snprintf(path, sizeof(path), "@egm-test-%d", (int)getpid());
    unix_pair_roundtrip(path);
    /* No file was created for the abstract name. */
    assert_int_equal(access(path + 1, F_OK), -1);
    int fd;
    assert_int_equal(egm__sock_unix_connect(path, &fd), EGM_ERR_UNREACHABLE);
}

static void test_unix_path(void **state)
{
    (void)state;
    char path[64];
    snprintf(path, sizeof(path), "/tmp/egm-test-%d.sock", (int)getpid());
    unix_pair_roundtrip(path);
    unlink(path);
    char longpath[200];
    memset(longpath, 'a', sizeof(longpath) - 1);
    longpath[sizeof(longpath) - 1] = '\0';
    int fd;
    assert_int_equal(egm__sock_unix_listen(longpath, &fd), EGM_ERR_INVALID_ARG);
}

static void test_host_id(void **state)
{
    (void)state;
    const char *id = egm__host_id(), *name = egm__host_name();
    assert_true(strlen(name) > 0);
    assert_ptr_equal(egm__host_id(), id); /* computed once */
    size_t n = strlen(name);
    assert_memory_equal(id, name, n);
    assert_int_equal(id[n], '/');
    /* The boot id is a UUID when /proc is mounted. */
    if (access("/proc/sys/kernel/random/boot_id", R_OK) == 0)
        assert_int_equal(strlen(id + n + 1), 36);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_split_hostport, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_split_hostport_refusals, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_format_hostport, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_tcp_roundtrip, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_tcp_listen_any_and_port_in_use, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_unix_abstract, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_unix_path, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_host_id, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
