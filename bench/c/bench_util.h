/* Helpers the benchmarks of egm-bench (`egmstore bench`) share: latency samples and their
 * percentiles, JSON text, the machine and commit a run is recorded with, and
 * their command lines: the flags, the comma-separated lists they take, and
 * what is left for the common parser. */
#ifndef EGM_BENCH_UTIL_H
#define EGM_BENCH_UTIL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <egmstore/status.h>
#include "tools/cli.h"

/* The array v, holding n items of `size` bytes in *cap_p, with room for one
 * more: v itself when it has it, else v grown to twice *cap_p (to `first`
 * when empty) and *cap_p updated. NULL, with v and *cap_p as they were, when
 * memory runs out. */
void *egm__bench_reserve(void *v, size_t n, size_t *cap_p, size_t size, size_t first,
                         const char *site);

/* Latencies of one timed series, in ns. */
typedef struct {
    uint64_t *ns;
    size_t n, cap;
} egm_bench_samples_t;

egm_status_t egm__bench_samples_add(egm_bench_samples_t *s, uint64_t ns);
/* Appends every sample of `from`. */
egm_status_t egm__bench_samples_extend(egm_bench_samples_t *s, const uint64_t *ns, size_t n);
void egm__bench_samples_free(egm_bench_samples_t *s);

typedef struct {
    double p50_us, p99_us, mean_us, max_us;
} egm_bench_latency_t;

/* Sorts the samples in place; nearest-rank percentiles (zeros when empty). */
void egm__bench_latency(egm_bench_samples_t *s, egm_bench_latency_t *lat);

/* n evenly spaced quantiles (0, 1/(n-1), .., 1) of samples sorted by
 * egm__bench_latency, in us: a latency CDF. Zeros when empty. */
void egm__bench_quantiles(const egm_bench_samples_t *sorted, double *q_us, int n);

/* A JSON string literal of s, escaped by egm__json_string (NULL writes null). */
void egm__bench_json_str(FILE *f, const char *s);
/* A JSON number, or null when v < 0 (the schema's "not applicable"). */
void egm__bench_json_num(FILE *f, double v);

typedef struct {
    char host[256];
    char cpu[256];
    char kernel[256];
    long cores;
    uint64_t memory_bytes;
    double load[3]; /* load average (1, 5, 15 min) when the run started: others' work */
} egm_bench_machine_t;

void egm__bench_machine(egm_bench_machine_t *m);
/* The "machine" member of a result document, open after its load_avg so that
 * a caller may add members of its own before closing it with '}' (the names
 * bench/py/benchlib.py writes, schema 1). */
void egm__bench_json_machine(FILE *f, const egm_bench_machine_t *m);
/* MemAvailable of /proc/meminfo in bytes (0 when unknown). */
uint64_t egm__bench_mem_available(void);
/* The commit this executable was built from (the checkout's HEAD when it was
 * built, not when it runs), "unknown" when built outside a git checkout;
 * *dirty_p when src, include, proto, bench/c or the CMake files had uncommitted
 * changes then (cmake/build_info.cmake). */
const char *egm__bench_build_commit(int *dirty_p);

/* "4KiB,64KiB" -> sizes (each >= min); "1,8,64" -> integers in [min, max];
 * "0.5,1" -> numbers. A one-line error naming the flag goes to stderr and -1
 * comes back on bad input or more than `cap` items. */
int egm__bench_parse_sizes(const char *flag, const char *text, uint64_t min, uint64_t *out, int cap,
                           int *n_p);
int egm__bench_parse_ints(const char *flag, const char *text, long min, long max, int *out, int cap,
                          int *n_p);
int egm__bench_parse_double(const char *flag, const char *text, double min, double max,
                            double *out);
/* Calls item(it, arg) for each comma-separated item of text (of its first 255
 * characters; empty items are skipped) until one answers nonzero: that
 * answer, else 0. */
int egm__bench_each_item(const char *text, int (*item)(const char *it, void *arg), void *arg);
/* One size of at least min bytes ("4KiB"); one integer in [min, max]. The same
 * one-line errors, -1. */
int egm__bench_parse_size(const char *flag, const char *text, uint64_t min, uint64_t *out);
int egm__bench_parse_u64(const char *flag, const char *text, uint64_t min, uint64_t max,
                         uint64_t *out);

/* A bench command's own flag; has_value: it takes one (--name V or --name=V). */
typedef struct {
    const char *name;
    int has_value;
} egm_bench_flag_t;

/* Applies one of a command's own flags to opts: name as in its egm_bench_flag_t,
 * value NULL for a flag without one; 0, or -1 after printing why. */
typedef int (*egm_bench_apply_fn)(void *opts, const char *name, const char *value);

/* Reads a command's own flags (flags[n_flags], each only under its whole name,
 * "--name V" or "--name=V") from argv with getopt_long, in order, and hands
 * each to apply(opts, ...); every other item goes, in order, to
 * rest[*n_rest_p] (room for argc) for egm__cli_parse. 0, or -1 after printing
 * why (a missing value, a value given to a flag without one, or apply's
 * refusal). */
int egm__bench_take_flags(int argc, char **argv, const egm_bench_flag_t *flags, size_t n_flags,
                          egm_bench_apply_fn apply, void *opts, char **rest, int *n_rest_p);

/* Takes a command's own flags out of argv into opts, the rest into rest[*n_rest_p]; 0, or -1
 * after printing why. */
typedef int (*egm_bench_take_fn)(int argc, char **argv, void *opts, char **rest, int *n_rest_p);

/* The command line of `egmstore bench <what>`: take() reads the command's own
 * flags, egm__cli_parse the rest (config keys, --master, --config, --help)
 * into *cli. 1 when the benchmark is to run (the caller cleans *cli up after);
 * else 0 with the exit code in *rc_p, after printing usage and the config
 * keys for --help, or why the line is refused. */
int egm__bench_cli(int argc, char **argv, const char *what, const char *usage,
                   egm_bench_take_fn take, void *opts, egm_cli_t *cli, int *rc_p);

/* The benchmarks of egm-bench (main.c), each given argv after its name:
 * `meta` (bench_meta.c) and `data` (bench_data.c). Exit codes EGM_EXIT_*. */
int egm__bench_meta(int argc, char **argv);
int egm__bench_data(int argc, char **argv);
/* `egm-bench meta --help`'s text. */
extern const char egm__bench_meta_usage[];

#endif
