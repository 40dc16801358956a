/* Simulated hosts in network namespaces (see netns.h). */
#include "support/netns.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>
#include "common/clock.h"
#include "support/http_get.h"

#define BRIDGE "egm-br"
#define IP_TIMEOUT_MS 10000

/* The switch: the namespaces the test process started in (after isolate). */
static int switch_net_fd = -1, switch_uts_fd = -1;

static int write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t len = (ssize_t)strlen(text);
    int rc = write(fd, text, (size_t)len) == len ? 0 : -1;
    close(fd);
    return rc;
}

int egm_test_netns_isolate(void)
{
    uid_t uid = geteuid();
    gid_t gid = getegid();
    char map[64];

    if (unshare(CLONE_NEWUSER | CLONE_NEWNET | CLONE_NEWPID | CLONE_NEWUTS | CLONE_NEWNS) != 0) {
        fprintf(stderr,
                "netns: unshare(user, net, pid, uts, mount): %s: this kernel lets no "
                "unprivileged user make a user namespace (kernel.unprivileged_userns_clone, "
                "user.max_user_namespaces, or an AppArmor or SELinux rule)\n",
                strerror(errno));
        return -1;
    }
    /* Root in the namespace is the invoking user outside: enough for links and addresses. */
    snprintf(map, sizeof(map), "0 %u 1\n", (unsigned)uid);
    int rc = write_file("/proc/self/uid_map", map);
    snprintf(map, sizeof(map), "0 %u 1\n", (unsigned)gid);
    if (rc != 0 || write_file("/proc/self/setgroups", "deny") != 0 ||
        write_file("/proc/self/gid_map", map) != 0) {
        fprintf(stderr, "netns: mapping uid %u and gid %u into the user namespace: %s\n",
                (unsigned)uid, (unsigned)gid, strerror(errno));
        return -1;
    }
    fflush(stdout);
    fflush(stderr);
    pid_t child = fork();
    if (child < 0) {
        fprintf(stderr, "netns: fork: %s\n", strerror(errno));
        return -1;
    }
    if (child == 0) {
        /* PID 1 of the new namespace: when it ends, the kernel kills every
         * process left in it; and it ends when its parent does (ctest's kill). */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        /* A /proc of this PID namespace: the host's knows its processes by
         * other numbers (LeakSanitizer reads /proc/PID/task of its own pid). */
        if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
            mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) != 0)
            fprintf(stderr,
                    "netns: warning: cannot mount a /proc of the new PID namespace (%s): /proc "
                    "shows the processes under other numbers\n",
                    strerror(errno));
        switch_net_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
        switch_uts_fd = open("/proc/thread-self/ns/uts", O_RDONLY | O_CLOEXEC);
        if (switch_net_fd < 0 || switch_uts_fd < 0) {
            fprintf(stderr, "netns: opening /proc/thread-self/ns: %s\n", strerror(errno));
            _exit(1);
        }
        return 0;
    }
    /* _exit: nothing of this process is left to check or flush, and
     * LeakSanitizer could not run here (its thread would be a child in the
     * PID namespace, which ended with its PID 1). */
    int status;
    while (waitpid(child, &status, 0) < 0)
        if (errno != EINTR) {
            fprintf(stderr, "netns: waitpid: %s\n", strerror(errno));
            _exit(1);
        }
    if (WIFSIGNALED(status)) {
        fprintf(stderr, "netns: the tests were killed by signal %d\n", WTERMSIG(status));
        _exit(128 + WTERMSIG(status));
    }
    _exit(WEXITSTATUS(status));
}

static const char *ip_bin(void)
{
    const char *bin = getenv("EGM_TEST_IP");
    if (bin != NULL && bin[0] != '\0')
        return bin;
    static const char *const where[] = {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"};
    for (size_t i = 0; i < sizeof(where) / sizeof(where[0]); i++)
        if (access(where[i], X_OK) == 0)
            return where[i];
    return where[0];
}

static int enter(int net_fd, int uts_fd)
{
    if (setns(net_fd, CLONE_NEWNET) != 0 || setns(uts_fd, CLONE_NEWUTS) != 0) {
        fprintf(stderr, "netns: setns: %s\n", strerror(errno));
        return -1;
    }
    return 0;
}

/* Runs `ip ARGS` (words separated by single spaces) in the host's
 * namespaces, or the switch's (host NULL). 0 when it exits 0. */
static int ip(const egm_test_host_t *host, const char *fmt, ...)
{
    char line[256];
    char *argv[24];
    int argc = 0;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(line, sizeof(line), fmt, ap);
    va_end(ap);
    const char *bin = ip_bin();
    if (access(bin, X_OK) != 0) {
        fprintf(stderr,
                "netns: %s is missing: install iproute2 (scripts/install-deps.sh does) or "
                "set EGM_TEST_IP\n",
                bin);
        return -1;
    }
    char words[256];
    snprintf(words, sizeof(words), "%s", line);
    argv[argc++] = (char *)bin;
    for (char *save = NULL, *w = strtok_r(words, " ", &save); w != NULL && argc < 23;
         w = strtok_r(NULL, " ", &save))
        argv[argc++] = w;
    argv[argc] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        if (host != NULL && enter(host->net_fd, host->uts_fd) != 0)
            _exit(126);
        execv(bin, argv);
        _exit(127);
    }
    int status = 0;
    for (uint64_t until = egm__now_ms() + IP_TIMEOUT_MS;;) {
        pid_t got = waitpid(pid, &status, WNOHANG);
        if (got == pid)
            break;
        if (got < 0 && errno != EINTR)
            return -1;
        if (egm__now_ms() >= until) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            fprintf(stderr, "netns: ip %s: no exit within %d ms\n", line, IP_TIMEOUT_MS);
            return -1;
        }
        egm__sleep_ms(5);
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "netns: ip %s (%s): failed (status %d)\n", line,
                host != NULL ? host->name : "switch", status);
        return -1;
    }
    return 0;
}

int egm_test_lan_create(void)
{
    if (ip(NULL, "link add " BRIDGE " type bridge") != 0 || ip(NULL, "link set " BRIDGE " up") != 0)
        return -1;
    return 0;
}

int egm_test_host_add(egm_test_host_t *h, const char *name, int n)
{
    memset(h, 0, sizeof(*h));
    h->net_fd = h->uts_fd = -1;
    snprintf(h->name, sizeof(h->name), "%s", name);
    snprintf(h->addr, sizeof(h->addr), "10.77.0.%d", n);
    snprintf(h->port, sizeof(h->port), "egm-p%d", n);
    if (unshare(CLONE_NEWNET | CLONE_NEWUTS) != 0) {
        fprintf(stderr, "netns: unshare(net, uts) for host %s: %s\n", name, strerror(errno));
        return -1;
    }
    int rc = sethostname(h->name, strlen(h->name));
    h->net_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
    h->uts_fd = open("/proc/thread-self/ns/uts", O_RDONLY | O_CLOEXEC);
    if (egm_test_host_leave() != 0 || rc != 0 || h->net_fd < 0 || h->uts_fd < 0) {
        fprintf(stderr, "netns: host %s: %s\n", name, strerror(errno));
        return -1;
    }
    /* Made inside the host with its other end sent to the switch, named by
     * this process (whose main thread is back in the switch). */
    if (ip(h, "link add eth0 type veth peer name %s netns %d", h->port, (int)getpid()) != 0 ||
        ip(NULL, "link set %s master " BRIDGE " up", h->port) != 0 ||
        ip(h, "addr add %s/24 dev eth0", h->addr) != 0 || ip(h, "link set eth0 up") != 0 ||
        ip(h, "link set lo up") != 0)
        return -1;
    return 0;
}

void egm_test_host_cleanup(egm_test_host_t *h)
{
    if (h->net_fd >= 0)
        close(h->net_fd);
    if (h->uts_fd >= 0)
        close(h->uts_fd);
    h->net_fd = h->uts_fd = -1;
}

int egm_test_host_enter(const egm_test_host_t *h)
{
    return enter(h->net_fd, h->uts_fd);
}

int egm_test_host_leave(void)
{
    return enter(switch_net_fd, switch_uts_fd);
}

pid_t egm_test_host_fork(const egm_test_host_t *h)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (enter(h->net_fd, h->uts_fd) != 0)
            _exit(1);
    }
    return pid;
}

int egm_test_host_cut(const egm_test_host_t *h)
{
    return ip(NULL, "link set %s down", h->port);
}

int egm_test_host_join(const egm_test_host_t *h)
{
    return ip(NULL, "link set %s up", h->port);
}

int egm_test_host_http_get(const egm_test_host_t *h, const char *addr, unsigned port,
                           const char *path, char *body, size_t len)
{
    static char answer[64 * 1024];
    const char *start = NULL;
    if (egm_test_host_enter(h) != 0)
        return -1;
    int status = egm_test_http_request(addr, port, path, NULL, answer, sizeof(answer), &start);
    if (egm_test_host_leave() != 0)
        return -1;
    snprintf(body, len, "%s", start != NULL ? start : "");
    return status;
}
