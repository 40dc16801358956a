/* Integration-test harness: real `egmstore` master and provider processes on
 * loopback ports, CLI runs as separate client processes, library clients in
 * the test process. Every wait is bounded. */
#ifndef EGM_TEST_CLUSTER_H
#define EGM_TEST_CLUSTER_H

#include <stddef.h>
#include <egmstore/egmstore.h>
#include "common/id.h"
#include "common/process.h"

#define EGM_TEST_MAX_PROVIDERS 4

typedef struct {
    egm_process_t master;
    egm_process_t providers[EGM_TEST_MAX_PROVIDERS];
    int n_providers;
    char provider_ready[EGM_TEST_MAX_PROVIDERS][512]; /* each provider's "ready" line */
    char master_addr[64];
    unsigned master_port;
} egm_test_cluster_t;

/* An empty cluster: nothing started, every pipe closed (-1), so that
 * egm_test_cluster_stop is safe on it whatever a test got to start. */
void egm_test_cluster_init(egm_test_cluster_t *cluster);
/* Path of the egmstore binary (EGM_TEST_BINARY, set by ctest). */
const char *egm_test_bin(void);
/* Start a master on a free port; extra flags (NULL-terminated) are appended. 0 on success. */
int egm_test_start_master(egm_test_cluster_t *cluster, const char *const *extra);
/* Start a new master on `port` in a running cluster (the providers and
 * master_addr stay): after the previous master was stopped and reaped, e.g.
 * to restart it on the same address. 0 on success. */
/* egm_test_start_master with its admin HTTP on a free port (--http-port 0,
 * then extra), whose port goes to *http_port_p. 0, or -1. */
int egm_test_start_master_http(egm_test_cluster_t *cluster, const char *const *extra,
                               unsigned *http_port_p);
int egm_test_start_master_on(egm_test_cluster_t *cluster, unsigned port, const char *const *extra);
/* egm_test_start_master_on with its admin HTTP on a free port, as
 * egm_test_start_master_http. */
int egm_test_start_master_http_on(egm_test_cluster_t *cluster, unsigned port,
                                  const char *const *extra, unsigned *http_port_p);
/* Start a provider with `size` capacity; returns its index or -1. Waits for "ready". */
int egm_test_start_provider(egm_test_cluster_t *cluster, const char *size,
                            const char *const *extra);
/* Run `egmstore ARGS --master ADDR`, feeding `input` (may be NULL) on stdin and
 * capturing stdout+stderr into out (NUL-terminated). Returns the exit code or -1. */
int egm_test_cli(egm_test_cluster_t *cluster, const char *const *args, const void *input,
                 size_t input_len, char *out, size_t out_len);
/* A library client in this process; protocol "shm", "tcp" or "auto". */
egm_client_t *egm_test_client(egm_test_cluster_t *cluster, const char *protocol,
                              const char *const *pairs);
/* Segments the master lists now, asked through `client`; (size_t)-1 when the
 * call fails. */
size_t egm_test_segment_count(egm_client_t *client);
/* The same through a short-lived client of the cluster's master. */
size_t egm_test_cluster_segments(egm_test_cluster_t *cluster);
/* SIGSTOP to a process this one started, then waits until every thread of it
 * has stopped (kill returns before: a thread still running may answer a
 * request sent after it). 0, or -1 when it did not stop within 10 s. */
int egm_test_process_stop(egm_process_t *proc);
/* SIGTERM everything, wait (bounded), then SIGKILL what is left. */
void egm_test_cluster_stop(egm_test_cluster_t *cluster);
/* The one segment a single-provider cluster serves, as a client lists it. */
typedef struct {
    egm_id_t id;
    uint64_t size;
    char data_host[64]; /* the provider's tcp data server */
    uint16_t data_port;
    char shm_socket[100]; /* its fd broker (EGM_SHM_SOCKET_MAX) */
} egm_test_segment_t;
/* 0, or -1 unless the master lists exactly one segment with a tcp endpoint. */
int egm_test_only_segment(egm_client_t *client, egm_test_segment_t *seg);

/* Deterministic bytes for object seeds. */
void egm_test_fill(void *buf, size_t len, unsigned seed);
/* egm_put of len bytes of egm_test_fill(seed) under key; its status. */
egm_status_t egm_test_put_seeded(egm_client_t *client, const char *key, size_t len, unsigned seed);
/* egm_get of key: its status, or EGM_ERR_INTERNAL (said on stderr) when it
 * answers OK with other than len bytes of egm_test_fill(seed). */
egm_status_t egm_test_get_seeded(egm_client_t *client, const char *key, size_t len, unsigned seed);

#endif
