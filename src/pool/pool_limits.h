/* What the machine can give a pool, checked before anything is allocated: the
 * memory a capacity needs against what the host (or its NUMA node) has
 * available, and the descriptors its chunks hold against RLIMIT_NOFILE. A
 * memfd pool's pages are only taken when written, so a capacity the machine
 * does not have is accepted at setup and fails much later (SIGBUS, the OOM
 * killer); a pool of more chunks than descriptors fails half way with "Too
 * many open files". Both are refused up front with the numbers.
 *
 * The checks are pure functions of the numbers (unit-tested); the readers of
 * /proc/meminfo, the nodes' meminfo and the limit are separate. */
#ifndef EGM_POOL_POOL_LIMITS_H
#define EGM_POOL_POOL_LIMITS_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>

/* A quantity that could not be read: its check is skipped. */
#define EGM_POOL_LIMITS_UNKNOWN UINT64_MAX
/* Descriptors kept free for everything but the chunks: the master
 * connection, the data and fd servers, consumers' connections, logs. */
#define EGM_POOL_LIMITS_FD_RESERVE 64u

typedef struct {
    uint64_t requested;   /* bytes the pool takes from this memory */
    uint64_t available;   /* what it can give; EGM_POOL_LIMITS_UNKNOWN: skip the check */
    int node;             /* NUMA node whose share this is; -1: the whole host */
    int allow_overcommit; /* allow_overcommit=true: accept, reporting it */
} egm_pool_memory_check_t;

/* requested <= available (or available unknown): EGM_OK, msg "". Above it,
 * msg (optional, len bytes) says so with both sizes ("global_segment_size:
 * 64.0 GiB is more than this host's available memory (22.1 GiB
 * MemAvailable)"; a node's share names the node), and the answer is
 * EGM_ERR_CONFIG with that text and the way out ("; lower it or set
 * allow_overcommit=true") in egm_last_error(), or with allow_overcommit EGM_OK
 * (the caller warns with msg). */
egm_status_t egm__pool_limits_check_memory(const egm_pool_memory_check_t *c, char *msg, size_t len);

typedef struct {
    uint64_t chunks;     /* chunks the pool is cut into */
    uint64_t chunk_size; /* max_mr_size as planned, for the message */
    uint64_t fds_open;   /* descriptors open now (counted before the pool) */
    uint64_t fd_limit;   /* RLIMIT_NOFILE soft limit; EGM_POOL_LIMITS_UNKNOWN: unlimited */
} egm_pool_fd_check_t;

/* Descriptors the pool needs: one per chunk plus fds_open plus
 * EGM_POOL_LIMITS_FD_RESERVE (saturating). */
uint64_t egm__pool_limits_fds_needed(const egm_pool_fd_check_t *c);
/* fds_needed <= fd_limit: EGM_OK; otherwise EGM_ERR_CONFIG naming
 * global_segment_size, the chunk count and size, the descriptors needed and
 * the limit ("... 102400 chunks of max_mr_size 1.0 GiB need 102467 file
 * descriptors, the limit is 1024 (ulimit -n) ..."). allow_overcommit does not
 * apply: such a pool would fail anyway. */
egm_status_t egm__pool_limits_check_fds(const egm_pool_fd_check_t *c);

/* The value of `field` ("MemAvailable", "MemFree") in a meminfo file: lines
 * "MemAvailable:   123 kB" (/proc/meminfo) or "Node 1 MemFree:  123 kB"
 * (/sys/devices/system/node/node1/meminfo), in bytes. EGM_ERR_IO when the
 * file or the field is missing or malformed. */
egm_status_t egm__pool_limits_read_meminfo(const char *path, const char *field, uint64_t *bytes_p);
/* MemAvailable of /proc/meminfo (EGM_POOL_LIMITS_UNKNOWN when unreadable). */
uint64_t egm__pool_limits_host_available(void);
/* What NUMA node `node` can give: MemFree + Inactive(file) of its sysfs
 * meminfo (nodes have no MemAvailable). EGM_POOL_LIMITS_UNKNOWN when the node
 * has no sysfs entry (e.g. a fake driver's node), or when the nodes' MemTotal
 * do not add up to the host's (a VM that hot-adds memory to a node as it is
 * used: the node's figures say nothing about what it can give). */
uint64_t egm__pool_limits_node_available(int node);
/* The same over another tree (tests): `node_root` holds nodeN/meminfo,
 * `host_meminfo` is the host's meminfo. */
uint64_t egm__pool_limits_node_available_in(const char *node_root, const char *host_meminfo,
                                            int node);
/* Descriptors this process has open (entries of /proc/self/fd; 0 when
 * unreadable). */
uint64_t egm__pool_limits_fds_open(void);
/* RLIMIT_NOFILE's soft limit, raised to the hard limit first when it is lower
 * and `needed` is above it (logged at info: the limit this process now runs
 * with). EGM_POOL_LIMITS_UNKNOWN when unlimited. */
uint64_t egm__pool_limits_fd_limit(uint64_t needed);

#endif
