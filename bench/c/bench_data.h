/* `egmstore bench data`: internals shared by its files.
 *
 *   bench_data.c          the command: set up, run every protocol and level, write the results
 *   bench_data_opts.c     flags, defaults, usage, the config object of the JSON
 *   bench_data_mem.c      buffers in host memory or HBM, the byte pattern objects carry
 *   bench_data_ceiling.c  memcpy / cuMemcpy ceilings measured in the same run
 *   bench_data_control.c  embedded master and provider, the control client, master metrics,
 *                         preloading and filling the pool
 *   bench_data_phases.c   the phases a level runs and why one is skipped
 *   bench_data_worker.c   one client thread: buffers, keys, timing, errors
 *   bench_data_single.c   the single and batch workloads (put, then get of what was put)
 *   bench_data_mixed.c    the mixed and full workloads
 *   bench_data_group.c    the client threads of one process, phase by phase
 *   bench_data_procs.c    --procs: child processes of this command, phase by phase
 *   bench_data_report.c   records, progress lines, the table, the JSON document
 */
#ifndef EGM_BENCH_DATA_H
#define EGM_BENCH_DATA_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <egmstore/egmstore.h>
#include "common/process.h"
#include "cuda/cuda_api.h"
#include "bench_util.h"
#include "tools/cli.h"

#define EGM_BDATA_MAX_LIST 16
#define EGM_BDATA_KEY_LEN 128
#define EGM_BDATA_RING 16             /* new keys a mixed worker keeps before removing */
#define EGM_BDATA_MAX_SLOTS 4096      /* objects per worker and size (single) */
#define EGM_BDATA_POOL_SHARE 0.8      /* of the pool a phase may fill (eviction starts at 0.9) */
#define EGM_BDATA_STAGING (16u << 20) /* pinned bytes a GPU worker fills and checks through */
#define EGM_BDATA_QUANTILES 101       /* samples_us: latency quantiles 0, 0.01, .., 1 */
#define EGM_BDATA_MAX_RUN 16          /* single: calls timed back to back, at most */
#define EGM_BDATA_MIN_CALLS 3         /* per client and phase, even past --seconds */

typedef enum {
    EGM_BDATA_SINGLE,
    EGM_BDATA_BATCH,
    EGM_BDATA_MIXED,
    EGM_BDATA_FULL,
    EGM_BDATA_N_WORKLOADS
} egm_bdata_workload_t;

typedef enum { EGM_BDATA_PUT, EGM_BDATA_GET, EGM_BDATA_MIXED_OP } egm_bdata_op_t;

typedef enum { EGM_BDATA_SHM, EGM_BDATA_TCP, EGM_BDATA_NVLINK } egm_bdata_proto_t;

typedef struct {
    unsigned workloads; /* bits 1 << egm_bdata_workload_t */
    uint64_t sizes[EGM_BDATA_MAX_LIST];
    int n_sizes;
    uint64_t keys, block;
    uint64_t batch_blocks[EGM_BDATA_MAX_LIST]; /* batch: block sizes (default: block) */
    int n_batch_blocks;
    double zipf[EGM_BDATA_MAX_LIST]; /* 0: uniform */
    int n_dists;
    double read_ratio; /* < 0: unset */
    int clients[EGM_BDATA_MAX_LIST], n_clients;
    int procs[EGM_BDATA_MAX_LIST], n_procs;
    egm_bdata_proto_t protocols[3];
    int n_protocols;
    int gpu, device;
    int pool_egm; /* -1: auto (egm when nvlink is asked for) */
    uint64_t pool_size, max_memory;
    double seconds; /* per phase */
    uint64_t iters; /* calls per client and phase (instead of seconds) */
    uint64_t run;   /* single: calls timed back to back before their checks (--run) */
    double fill;    /* full: share of the pool filled before the timed puts */
    int ceiling;    /* -1: unset */
    int smoke;
    int client_per_thread; /* else the threads of a process share one client */
    int warm;              /* -1 unset; 1: each client writes the pool once first */
    const char *out;
    /* hidden: this process is child `child_index` of `child_procs` (--procs) */
    int child;
    int child_index, child_procs, child_go_fd;
    const char *child_dir, *child_prefix;
    /* the command line after `bench data`, given again to the children */
    int argc;
    char **argv;
} egm_bdata_opts_t;

typedef struct {
    egm_bdata_workload_t workload;
    egm_bdata_op_t op;
    uint64_t bytes;    /* object size */
    size_t batch;      /* keys per call */
    double zipf;       /* mixed: 0 = uniform */
    double read_ratio; /* mixed */
    size_t slots;      /* single: objects each client puts and gets */
    size_t run;        /* single: calls back to back, each into its own buffer slot */
    int index;         /* in the level's list: the ready/done lines of --procs */
    char skip[200];    /* why the phase does not run, "" when it does */
} egm_bdata_phase_t;

/* The client's put phases (egm_client_put_*_seconds_total, docs/egm-pool.md). */
#define EGM_BDATA_PUT_PHASES 5
extern const char *const egm__bdata_put_phase_names[EGM_BDATA_PUT_PHASES];

/* What one client did in one phase. */
typedef struct {
    uint64_t calls, keys, bytes, errors;
    /* Its client's put phases over the timed part, in seconds summed over
     * threads: on the first thread of a shared client, else on each thread.
     * Not carried from --procs children (0 there). */
    double put_phase_s[EGM_BDATA_PUT_PHASES];
    uint64_t busy_ns;                          /* time inside timed calls */
    uint64_t start_ns, end_ns;                 /* CLOCK_MONOTONIC, comparable across processes */
    egm_bench_samples_t lat, lat_get, lat_put; /* the two last: mixed only */
    egm_bench_samples_t at;                    /* each lat sample's start, CLOCK_MONOTONIC */
    char error[200];                           /* the first error */
} egm_bdata_stats_t;

void egm__bdata_stats_free(egm_bdata_stats_t *stats, size_t n);

/* ---- memory: host or HBM ------------------------------------------------- */

typedef struct {
    int gpu, device;
    const egm_cuda_api_t *cu;
    char gpu_name[256];
    int cuda_version;
} egm_bdata_mem_t;

typedef struct {
    uint8_t *ptr; /* host pointer, or the device pointer as one */
    size_t len;
} egm_bdata_buf_t;

typedef struct {
    uint8_t *host; /* pinned, GPU only */
    size_t len;
} egm_bdata_staging_t;

/* Loads the CUDA driver when gpu (a clear error without one). */
egm_status_t egm__bdata_mem_open(egm_bdata_mem_t *m, int gpu, int device);
/* Makes the device current on the calling thread (no-op for host memory). */
egm_status_t egm__bdata_mem_thread(const egm_bdata_mem_t *m);
egm_status_t egm__bdata_buf_alloc(const egm_bdata_mem_t *m, size_t len, egm_bdata_buf_t *b);
void egm__bdata_buf_free(const egm_bdata_mem_t *m, egm_bdata_buf_t *b);
void egm__bdata_staging_free(const egm_bdata_mem_t *m, egm_bdata_staging_t *s);
/* Object bytes [off, off + len) of the pattern `seed` into b at `at`. */
egm_status_t egm__bdata_fill(const egm_bdata_mem_t *m, egm_bdata_staging_t *s,
                             const egm_bdata_buf_t *b, size_t at, size_t len, uint64_t seed);
/* Overwrites [at, at + len) so that a get that copies nothing is caught. */
egm_status_t egm__bdata_poison(const egm_bdata_mem_t *m, const egm_bdata_buf_t *b, size_t at,
                               size_t len);
/* *bad_p = 1 when [at, at + len) differs from the pattern, with the first
 * wrong offset in egm_last_error(); EGM_OK when the check itself ran. */
egm_status_t egm__bdata_check(const egm_bdata_mem_t *m, egm_bdata_staging_t *s,
                              const egm_bdata_buf_t *b, size_t at, size_t len, uint64_t seed,
                              int *bad_p);
/* The pattern itself: 64-bit words, word j = (seed + j) * odd constant. */
void egm__bdata_pattern(uint8_t *p, size_t len, uint64_t seed);
/* Offset of the first byte of p that differs from the pattern, or len. */
size_t egm__bdata_pattern_diff(const uint8_t *p, size_t len, uint64_t seed);
/* Seed of an object from what names it. */
uint64_t egm__bdata_seed(uint64_t a, uint64_t b, uint64_t c);

/* ---- records ------------------------------------------------------------- */

typedef struct {
    const char *workload, *system, *transport, *op, *memory;
    uint64_t bytes, batch;
    int clients, procs;
    double zipf;       /* < 0: no distribution */
    double read_ratio; /* < 0: null */
    uint64_t calls, keys, errors;
    double seconds, wall_seconds;
    double client_seconds;                    /* each client's time inside its calls, averaged */
    double put_phase_s[EGM_BDATA_PUT_PHASES]; /* summed over the clients; 0: not read */
    egm_bench_latency_t lat;
    double samples_us[EGM_BDATA_QUANTILES]; /* the latency CDF */
    double gbps;                            /* < 0: null */
    double ops_s, keys_s;
    double gbps_p50; /* one call's bytes / p50: robust to others' load */
    int mixed;       /* get_lat/put_lat hold the mixed workload's split */
    uint64_t gets, puts;
    egm_bench_latency_t get_lat, put_lat;
    int full; /* the eviction figures below are set */
    int metrics_ok;
    uint64_t evictions, evicted_bytes, eviction_runs;
    double used_before; /* allocated / capacity when the timed puts started */
    const char *note;   /* how a ceiling was measured, or NULL */
    uint64_t run;       /* single: calls back to back between checks (0: not single) */
} egm_bdata_record_t;

/* ---- the run ------------------------------------------------------------- */

typedef struct {
    int ok;
    double capacity, allocated, evictions, evicted_bytes, eviction_runs;
    double held; /* egm_master_held_bytes; < 0: not reported */
} egm_bdata_metrics_t;

/* The embedded master's read lease (default_kv_lease_ttl, ms) unless the
 * command sets one: see egm__bdata_wait_held. --smoke's calls take
 * milliseconds: 1 s (the default location_cache_ms) shortens its waits. */
#define EGM_BDATA_LEASE_MS "2000"
#define EGM_BDATA_SMOKE_LEASE_MS "1000"

typedef struct egm_bdata_run {
    egm_bdata_opts_t o;
    egm_config_t *config; /* the command's, master_server_addr set */
    egm_bdata_mem_t mem;
    char prefix[64]; /* of every key this run writes */
    egm_bdata_proto_t proto;
    int clients, procs; /* the level now running */
    int proc_index;     /* this process among the level's (0 in the parent) */
    /* the parent's cluster and control client */
    int embedded;
    void *master; /* egm_master_t */
    pthread_t master_thread;
    int master_started;
    egm_process_t provider;
    uint64_t lease_ms;  /* the master's default_kv_lease_ttl (as told, when external) */
    int held_unwatched; /* an external master's metrics were not there: no held waits */
    char master_addr[300];
    char http_host[256];
    unsigned http_port;
    egm_client_t *control;
    egm_bdata_buf_t control_buf;
    egm_bdata_metrics_t before; /* master metrics when the phase started */
    uint64_t fill_keys;         /* full: keys the control client put */
    /* mixed: the key distribution, shared by the process's clients */
    double *cdf;
    size_t cdf_n;
    double cdf_zipf;
    /* results */
    egm_bdata_record_t *records;
    size_t n_records, cap_records;
    char (*skipped)[256];
    size_t n_skipped, cap_skipped;
    egm_bench_machine_t machine;
    uint64_t started_unix_ms;
    int failed;
} egm_bdata_run_t;

/* ---- one client thread --------------------------------------------------- */

typedef struct egm_bdata_group egm_bdata_group_t;

typedef struct egm_bdata_worker {
    egm_bdata_run_t *r;
    egm_bdata_group_t *group;
    int index;  /* in this process */
    int global; /* proc_index * clients + index: names its keys */
    pthread_t thread;
    egm_client_t *client;
    int own_client;
    egm_bdata_buf_t src, dst;
    egm_bdata_staging_t staging;
    /* keys and batch arguments */
    char (*names)[EGM_BDATA_KEY_LEN];
    const char **keys;
    const void **srcs;
    void **dsts;
    size_t *lens, *sizes, *perm;
    egm_status_t *results;
    size_t cap_keys;
    uint64_t *versions; /* single: version of each slot, 0 = not stored */
    size_t slots;
    size_t stored; /* single: slots put; batch: 1 once a batch is stored */
    size_t held;   /* single get: slots holding an object, their indexes in perm */
    uint64_t seq;  /* mixed, full: new keys put */
    uint64_t ring[EGM_BDATA_RING];
    size_t ring_n;
    uint64_t rng;
    uint64_t step; /* calls made so far in this phase */
    /* single: the run under way (its calls' buffer slots are 0..run_n) */
    size_t run_n;
    size_t run_key[EGM_BDATA_MAX_RUN];
    uint64_t run_seed[EGM_BDATA_MAX_RUN];    /* put: the version; get: the seed */
    unsigned char run_ok[EGM_BDATA_MAX_RUN]; /* get: the call succeeded, to be checked */
    int stop;                                /* the phase cannot go on (nothing to get) */
    egm_bdata_stats_t st;
} egm_bdata_worker_t;

egm_status_t egm__bdata_worker_init(egm_bdata_run_t *r, egm_bdata_worker_t *w, int index,
                                    egm_client_t *shared);
void egm__bdata_worker_cleanup(egm_bdata_worker_t *w);
/* src and dst of len bytes each, registered (kept when already that long). */
egm_status_t egm__bdata_worker_buffers(egm_bdata_worker_t *w, size_t len);
/* Room for n keys in the batch arguments. */
egm_status_t egm__bdata_worker_keys(egm_bdata_worker_t *w, size_t n);
/* "<prefix>/<protocol>/<procs>x<clients>/<what>/<a>/<b>" */
void egm__bdata_key(const egm_bdata_worker_t *w, char *key, const char *what, uint64_t a,
                    uint64_t b);
/* One timed call of `bytes` bytes and `keys` keys (0 when it failed). */
void egm__bdata_timed(egm_bdata_worker_t *w, egm_bench_samples_t *extra, uint64_t t0, uint64_t t1,
                      uint64_t bytes, uint64_t keys);
/* Counts an error (n of them), keeping the first one's text. */
void egm__bdata_error(egm_bdata_worker_t *w, uint64_t n, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Checks dst[at, at + len) against seed, counting a wrong object as an error. */
void egm__bdata_verify(egm_bdata_worker_t *w, size_t at, size_t len, uint64_t seed,
                       const char *key);
/* One object through the client, timed and recorded (in extra's samples too
 * when given), a failure counted. put: the source's first `bytes` filled from
 * seed and put under key; 1 when stored. get: key's `bytes` into the
 * poisoned destination, checked against seed. A failed fill or poisoning
 * stops the worker. */
int egm__bdata_put_one(egm_bdata_worker_t *w, egm_bench_samples_t *extra, const char *key,
                       uint64_t bytes, uint64_t seed);
/* The timed call alone, from src[at, at + bytes) / into dst[at, at + bytes):
 * 1 when it succeeded (a get: with all `bytes`), the failure counted. */
int egm__bdata_put_at(egm_bdata_worker_t *w, egm_bench_samples_t *extra, const char *key, size_t at,
                      uint64_t bytes);
int egm__bdata_get_at(egm_bdata_worker_t *w, egm_bench_samples_t *extra, const char *key, size_t at,
                      uint64_t bytes);
void egm__bdata_get_one(egm_bdata_worker_t *w, egm_bench_samples_t *extra, const char *key,
                        uint64_t bytes, uint64_t seed);
/* Removes keys[0..n) (NOT_FOUND is fine), untimed. force only for keys a get
 * read: their space is held until the lease ends, and the call waits for the
 * master's force watermark (location_cache_ms past the last read of any key
 * force-removed so far); keys only put are removed plain, which never waits
 * (HAS_LEASE is then an error: something read them). */
void egm__bdata_remove(egm_bdata_worker_t *w, size_t n, int force);
uint64_t egm__bdata_rand(egm_bdata_worker_t *w);
/* Puts and gets one small object: the first transfer's mapping is not timed. */
void egm__bdata_warm(egm_bdata_worker_t *w);
/* Writes the whole pool once through this client (then removes what it
 * wrote), untimed: the first write to each page of a client's mapping costs a
 * page fault, which is not the store's steady state. */
egm_status_t egm__bdata_warm_pool(egm_bdata_run_t *r, egm_client_t *client, int which);

/* The workloads: untimed preparation, one timed call (with its checks), and
 * untimed cleanup. */
typedef struct {
    egm_status_t (*prepare)(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph);
    void (*step)(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph);
    void (*finish)(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph);
} egm_bdata_ops_t;

extern const egm_bdata_ops_t egm__bdata_single_put, egm__bdata_single_get;
extern const egm_bdata_ops_t egm__bdata_batch_put, egm__bdata_batch_get;
extern const egm_bdata_ops_t egm__bdata_mixed, egm__bdata_full;
const egm_bdata_ops_t *egm__bdata_ops(const egm_bdata_phase_t *ph);
/* Keys of a batch of `block`-byte blocks: --keys, fewer where the batch would
 * pass --keys x --block bytes (so every block size moves about the same bytes). */
uint64_t egm__bdata_batch_keys(const egm_bdata_opts_t *o, uint64_t block);

/* ---- phases, groups, processes ------------------------------------------- */

/* Every phase of one level (clients x procs), skipped ones with their reason:
 * the parent and its children compute the same list. */
egm_status_t egm__bdata_phases(const egm_bdata_opts_t *o, int clients, int procs,
                               egm_bdata_phase_t **phases_p, size_t *n_p);
const char *egm__bdata_workload_name(egm_bdata_workload_t w);
const char *egm__bdata_op_name(egm_bdata_op_t op);
const char *egm__bdata_proto_name(egm_bdata_proto_t p);
/* The record's transport: the protocol, "-staging" for GPU memory off nvlink. */
const char *egm__bdata_transport(const egm_bdata_run_t *r);
/* The CDF of the mixed phase's distribution (built once per process). */
egm_status_t egm__bdata_dist_prepare(egm_bdata_run_t *r, const egm_bdata_phase_t *ph);
uint64_t egm__bdata_dist_draw(egm_bdata_worker_t *w, const egm_bdata_phase_t *ph);

/* Called once every client has prepared and before the clock starts. */
typedef egm_status_t (*egm_bdata_gate_t)(void *arg, const egm_bdata_phase_t *ph);

egm_status_t egm__bdata_group_start(egm_bdata_run_t *r, egm_bdata_group_t **g_p);
/* Runs a phase on every client; *stats_p (n = clients) stays the group's. */
egm_status_t egm__bdata_group_phase(egm_bdata_group_t *g, const egm_bdata_phase_t *ph,
                                    egm_bdata_gate_t gate, void *gate_arg,
                                    egm_bdata_stats_t **stats_p, size_t *n_p);
void egm__bdata_group_stop(egm_bdata_group_t *g);

typedef struct egm_bdata_procs egm_bdata_procs_t;
egm_status_t egm__bdata_procs_start(egm_bdata_run_t *r, egm_bdata_procs_t **p_p);
/* *stats_p: procs x clients entries, freed with egm__bdata_stats_free. */
egm_status_t egm__bdata_procs_phase(egm_bdata_procs_t *p, const egm_bdata_phase_t *ph,
                                    egm_bdata_stats_t **stats_p, size_t *n_p);
/* Waits for the children to exit; EGM_OK when every one exited 0. */
egm_status_t egm__bdata_procs_stop(egm_bdata_procs_t *p);
/* The child's side: runs the level's phases, gated by the parent. */
int egm__bdata_child_main(egm_bdata_run_t *r);

/* ---- control (the parent) ------------------------------------------------ */

egm_status_t egm__bdata_cluster_start(egm_bdata_run_t *r);
egm_status_t egm__bdata_cluster_stop(egm_bdata_run_t *r);
egm_status_t egm__bdata_metrics(egm_bdata_run_t *r, egm_bdata_metrics_t *m);
/* The value of the unlabelled sample `name` in a Prometheus text, -1 when absent. */
double egm__bdata_metric(const char *body, const char *name);
/* Waits (bounded) until the master holds no space of force-removed objects:
 * before each phase that puts and each level's pool warm-up, so that their
 * puts find the whole pool. */
egm_status_t egm__bdata_wait_held(egm_bdata_run_t *r);
/* Before and after a phase: the mixed keyspace, the full pool's fill. */
egm_status_t egm__bdata_control_before(egm_bdata_run_t *r, const egm_bdata_phase_t *ph);
egm_status_t egm__bdata_control_after(egm_bdata_run_t *r, const egm_bdata_phase_t *ph,
                                      egm_bdata_record_t *rec);
/* Client config of the level's protocol. */
egm_status_t egm__bdata_client_config(const egm_bdata_run_t *r, egm_config_t **config_p);
/* Keys of the mixed keyspace, and their content. */
void egm__bdata_keyspace_key(const egm_bdata_run_t *r, char *key, uint64_t k);
uint64_t egm__bdata_keyspace_seed(uint64_t k);

/* ---- results ------------------------------------------------------------- */

egm_status_t egm__bdata_ceilings(egm_bdata_run_t *r);
/* Summarises the clients' stats into a record (not yet added). */
void egm__bdata_summarize(const egm_bdata_run_t *r, const egm_bdata_phase_t *ph,
                          egm_bdata_stats_t *stats, size_t n, egm_bdata_record_t *rec);
egm_status_t egm__bdata_add_record(egm_bdata_run_t *r, const egm_bdata_record_t *rec);
egm_status_t egm__bdata_add_skipped(egm_bdata_run_t *r, const egm_bdata_phase_t *ph);
void egm__bdata_print_table(const egm_bdata_run_t *r);
egm_status_t egm__bdata_write_json(const egm_bdata_run_t *r, const char *path);

/* ---- options ------------------------------------------------------------- */

extern const char egm__bdata_usage[];
/* Takes the command's own flags out of argv (the rest goes to egm__cli_parse
 * through rest); 0, or -1 after printing why. */
int egm__bdata_parse(int argc, char **argv, egm_bdata_opts_t *o, char **rest, int *n_rest);
/* Fills what the flags left unset (smoke or normal defaults) and checks
 * combinations; 0 or -1 after printing why. */
int egm__bdata_defaults(egm_bdata_opts_t *o, int embedded);
void egm__bdata_json_config(FILE *f, const egm_bdata_run_t *r);

#endif
