/* Simulated hosts for partition tests, without privileges: the test process
 * moves into user, network, PID, UTS and mount namespaces of its own (root
 * there, mapped to the invoking user; a /proc of its PID namespace), where each host is a network
 * and UTS namespace with one veth link to a bridge (the "switch") in the test's own network
 * namespace, and an address 10.77.0.N/24. Cutting a host off sets its switch port down: it reaches
 * nobody and nobody reaches it, while its own processes still reach each other on its address.
 *
 * Nothing outlives the test: the namespaces go with the process, and the
 * tests run as PID 1 of a PID namespace, so that every process they start is
 * killed by the kernel when they end, however they end. Links are set up with
 * iproute2's `ip` (EGM_TEST_IP, default /usr/sbin/ip; scripts/install-deps.sh
 * installs iproute2). The test process must be single-threaded while it enters
 * a host (setns applies to the calling thread only). */
#ifndef EGM_TEST_NETNS_H
#define EGM_TEST_NETNS_H

#include <stddef.h>
#include <sys/types.h>

typedef struct {
    char name[16]; /* its host name (sethostname in its UTS namespace) */
    char addr[16]; /* its IPv4 address on the bridge */
    char port[16]; /* its link's end on the switch */
    int net_fd, uts_fd;
} egm_test_host_t;

/* First thing in main(), before any thread: moves into namespaces of its
 * own and forks. The child (PID 1 of the new PID namespace, killed when this
 * process dies) returns 0 and runs the tests; this process waits for it and
 * exits with its status, never returning. -1 (said on stderr) when the
 * kernel allows no unprivileged user namespace: the test cannot run here. */
int egm_test_netns_isolate(void);
/* The bridge the hosts join, in this process's network namespace. 0 or -1. */
int egm_test_lan_create(void);
/* Host number n (1..253): address 10.77.0.n. 0, or -1 said on stderr. */
int egm_test_host_add(egm_test_host_t *host, const char *name, int n);
/* Closes its namespaces' descriptors (the namespaces end with their last process). */
void egm_test_host_cleanup(egm_test_host_t *host);
/* This thread into the host's namespaces, and back to the switch's. Processes
 * spawned in between run on the host. 0 or -1. */
int egm_test_host_enter(const egm_test_host_t *host);
int egm_test_host_leave(void);
/* fork() into the host: the child, already in its namespaces, gets 0 (and
 * SIGKILL when this process dies); the parent the child's pid, or -1. */
pid_t egm_test_host_fork(const egm_test_host_t *host);
/* Cuts the host off (its switch port down), or joins it again. 0 or -1. */
int egm_test_host_cut(const egm_test_host_t *host);
int egm_test_host_join(const egm_test_host_t *host);
/* GET http://ADDR:port/path from inside the host (its own address answers
 * there even while it is cut off): egm_test_http_request's status, the body
 * into body (len bytes). */
int egm_test_host_http_get(const egm_test_host_t *host, const char *addr, unsigned port,
                           const char *path, char *body, size_t len);

#endif
