/* A real etcd (Debian's etcd-server) for the HA tests: one member on free
 * loopback ports, its data in a fresh temporary folder. Every wait is bounded.
 * etcd missing is an error, not a skip: scripts/install-deps.sh installs it. */
#ifndef EGM_TEST_ETCD_H
#define EGM_TEST_ETCD_H

#include "common/process.h"

typedef struct {
    egm_process_t proc;
    unsigned client_port, peer_port;
    char dir[256];
    char host[16];     /* the address it serves clients and peers on ("127.0.0.1") */
    char endpoint[64]; /* "HOST:PORT" */
    char name[8];
    char cluster[512]; /* --initial-cluster */
} egm_test_etcd_t;

/* Starts it and waits (up to 30 s) until /health answers. 0 on success;
 * -1 with a line on stderr saying why. */
int egm_test_etcd_start(egm_test_etcd_t *etcd);
/* egm_test_etcd_start on the IPv4 address host (NULL: 127.0.0.1), e.g. a
 * simulated host's (support/netns.h); it answers on 127.0.0.1 too. */
int egm_test_etcd_start_on(egm_test_etcd_t *etcd, const char *host);
/* Starts it again on the same ports and data (after a kill). */
int egm_test_etcd_restart(egm_test_etcd_t *etcd);
/* Starts n members of one cluster again on their ports and data, after every
 * one of them was killed and reaped (all launched before any is waited for: a
 * member is healthy only with its quorum). 0 or -1. */
int egm_test_etcd_cluster_restart(egm_test_etcd_t *members, int n);
/* Kills it and removes its folder. */
void egm_test_etcd_stop(egm_test_etcd_t *etcd);
/* Starts n (<= 5) members of one etcd cluster and waits until each is
 * healthy; *endpoints gets "a;b;c" (len bytes). 0 or -1. */
int egm_test_etcd_cluster_start(egm_test_etcd_t *members, int n, char *endpoints, size_t len);

#endif
