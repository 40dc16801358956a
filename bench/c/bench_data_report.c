/* bench data: the clients' figures of a phase become one record (schema 1 of
 * issue 7, docs/benchmarks.md); each record is a progress line on stderr, the
 * table on stdout at the end, and an element of the JSON document's results. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/alloc.h"
#include "common/log.h"
#include "bench_data.h"

static void size_label(uint64_t bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (u < 4 && bytes >= 1024 && bytes % 1024 == 0) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, len, "%llu%s", (unsigned long long)bytes, units[u]);
}

static void dist_label(double zipf, char *buf, size_t len)
{
    if (zipf < 0)
        snprintf(buf, len, "-");
    else if (zipf == 0)
        snprintf(buf, len, "uniform");
    else
        snprintf(buf, len, "zipf-%g", zipf);
}

static void merge_samples(egm_bench_samples_t *all, const egm_bench_samples_t *s)
{
    if (egm__bench_samples_extend(all, s->ns, s->n) != EGM_OK)
        egm_warn("bench: merging latency samples: %s", egm_last_error());
}

static int cmp_interval(const void *a, const void *b)
{
    const uint64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* The time during which at least one client was inside a timed call: the
 * union of every call's [start, start + latency). 0 when a client's start
 * times are missing (then the caller falls back to the clients' average). */
static uint64_t busy_union_ns(const egm_bdata_stats_t *stats, size_t n)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (stats[i].at.n != stats[i].lat.n)
            return 0;
        total += stats[i].at.n;
    }
    if (total == 0)
        return 0;
    uint64_t *iv = egm_malloc(total * 2 * sizeof(*iv), "bench.busy");
    if (iv == NULL)
        return 0;
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < stats[i].at.n; j++, k++) {
            iv[2 * k] = stats[i].at.ns[j];
            iv[2 * k + 1] = stats[i].at.ns[j] + stats[i].lat.ns[j];
        }
    qsort(iv, total, 2 * sizeof(*iv), cmp_interval);
    uint64_t busy = 0, from = iv[0], to = iv[1];
    for (k = 1; k < total; k++) {
        if (iv[2 * k] > to) {
            busy += to - from;
            from = iv[2 * k];
            to = iv[2 * k + 1];
        } else if (iv[2 * k + 1] > to) {
            to = iv[2 * k + 1];
        }
    }
    busy += to - from;
    egm_free(iv);
    return busy;
}

void egm__bdata_summarize(const egm_bdata_run_t *r, const egm_bdata_phase_t *ph,
                          egm_bdata_stats_t *stats, size_t n, egm_bdata_record_t *rec)
{
    egm_bench_samples_t lat = {0}, get = {0}, put = {0};
    uint64_t busy = 0, start = UINT64_MAX, end = 0;

    memset(rec, 0, sizeof(*rec));
    rec->workload = egm__bdata_workload_name(ph->workload);
    rec->system = "egmstore";
    rec->transport = egm__bdata_transport(r);
    rec->op = egm__bdata_op_name(ph->op);
    rec->memory = r->mem.gpu ? "gpu" : "host";
    rec->bytes = ph->bytes;
    rec->run = ph->workload == EGM_BDATA_SINGLE ? ph->run : 0;
    rec->batch = ph->batch;
    rec->clients = r->clients;
    rec->procs = r->procs;
    rec->mixed = ph->workload == EGM_BDATA_MIXED;
    rec->zipf = rec->mixed ? ph->zipf : -1;
    rec->read_ratio = rec->mixed ? ph->read_ratio : -1;
    for (size_t i = 0; i < n; i++) {
        const egm_bdata_stats_t *s = &stats[i];
        rec->calls += s->calls;
        rec->keys += s->keys;
        rec->errors += s->errors;
        rec->gets += s->lat_get.n;
        rec->puts += s->lat_put.n;
        busy += s->busy_ns;
        for (int p = 0; p < EGM_BDATA_PUT_PHASES; p++)
            rec->put_phase_s[p] += s->put_phase_s[p];
        if (s->calls > 0 && s->start_ns < start)
            start = s->start_ns;
        if (s->end_ns > end)
            end = s->end_ns;
        merge_samples(&lat, &s->lat);
        merge_samples(&get, &s->lat_get);
        merge_samples(&put, &s->lat_put);
        if (s->error[0] != '\0')
            fprintf(stderr, "bench: %s %s: client %zu: %llu errors, first: %s\n", rec->workload,
                    rec->op, i, (unsigned long long)s->errors, s->error);
    }
    /* The time at least one client was inside a call: the checks between
     * calls are not the store's time, and with several clients a client's
     * check is not a pause of the store when another's call runs meanwhile
     * (docs/benchmarks.md). Samples come before the summary sorts them. */
    rec->client_seconds = n > 0 ? (double)busy / (double)n / 1e9 : 0;
    uint64_t union_ns = busy_union_ns(stats, n);
    rec->seconds = union_ns > 0 ? (double)union_ns / 1e9 : rec->client_seconds;
    rec->wall_seconds = end > start ? (double)(end - start) / 1e9 : 0;
    egm__bench_latency(&lat, &rec->lat);
    egm__bench_quantiles(&lat, rec->samples_us, EGM_BDATA_QUANTILES);
    egm__bench_latency(&get, &rec->get_lat);
    egm__bench_latency(&put, &rec->put_lat);
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += stats[i].bytes;
    rec->gbps = rec->seconds > 0 ? (double)bytes / rec->seconds / 1e9 : 0;
    rec->ops_s = rec->seconds > 0 ? (double)rec->calls / rec->seconds : 0;
    rec->keys_s = rec->seconds > 0 ? (double)rec->keys / rec->seconds : 0;
    rec->gbps_p50 =
        rec->lat.p50_us > 0 ? (double)(ph->bytes * ph->batch) / rec->lat.p50_us / 1e3 : 0;
    egm__bench_samples_free(&lat);
    egm__bench_samples_free(&get);
    egm__bench_samples_free(&put);
}

static void print_progress(const egm_bdata_record_t *rec)
{
    char size[32], dist[32];
    size_label(rec->bytes, size, sizeof(size));
    dist_label(rec->zipf, dist, sizeof(dist));
    fprintf(stderr,
            "bench: %-7s %-5s %-11s %-4s %7s x%-5llu %2dc x %dp %-9s %8llu calls  p50 %9.1f us  "
            "p99 %9.1f us  %7.2f GB/s (at p50 %6.2f)  %9.0f ops/s%s\n",
            rec->workload, rec->op, rec->transport, rec->memory, size,
            (unsigned long long)rec->batch, rec->clients, rec->procs, dist,
            (unsigned long long)rec->calls, rec->lat.p50_us, rec->lat.p99_us, rec->gbps,
            rec->gbps_p50, rec->ops_s, rec->errors ? "  ERRORS" : "");
    if (rec->full)
        fprintf(
            stderr,
            "bench: full: pool %.1f%% used at the start, %llu evictions (%llu runs, %.1f MB)%s\n",
            100 * rec->used_before, (unsigned long long)rec->evictions,
            (unsigned long long)rec->eviction_runs, (double)rec->evicted_bytes / 1e6,
            rec->metrics_ok ? "" : " (metrics unavailable)");
}

egm_status_t egm__bdata_add_record(egm_bdata_run_t *r, const egm_bdata_record_t *rec)
{
    egm_bdata_record_t *v = egm__bench_reserve(r->records, r->n_records, &r->cap_records,
                                               sizeof(*v), 64, "bench.records");
    if (v == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "bench records");
    r->records = v;
    r->records[r->n_records++] = *rec;
    print_progress(rec);
    if (rec->errors > 0)
        r->failed = 1;
    return EGM_OK;
}

egm_status_t egm__bdata_add_skipped(egm_bdata_run_t *r, const egm_bdata_phase_t *ph)
{
    char size[32];
    char(*v)[256] = egm__bench_reserve(r->skipped, r->n_skipped, &r->cap_skipped, sizeof(*v), 16,
                                       "bench.records");
    if (v == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "bench records");
    r->skipped = v;
    size_label(ph->bytes, size, sizeof(size));
    snprintf(r->skipped[r->n_skipped], sizeof(r->skipped[0]),
             "%s %s %s x%zu, %s, %d clients x %d procs: %.160s",
             egm__bdata_workload_name(ph->workload), egm__bdata_op_name(ph->op), size, ph->batch,
             egm__bdata_transport(r), r->clients, r->procs, ph->skip);
    fprintf(stderr, "bench: skipped %s\n", r->skipped[r->n_skipped]);
    r->n_skipped++;
    return EGM_OK;
}

void egm__bdata_print_table(const egm_bdata_run_t *r)
{
    printf("\n%-8s %-5s %-11s %-4s %7s %5s %7s %5s %-9s %9s %10s %10s %8s %8s %10s %6s\n",
           "workload", "op", "transport", "mem", "bytes", "batch", "clients", "procs", "dist",
           "calls", "p50 us", "p99 us", "GB/s", "p50 GB/s", "ops/s", "errors");
    for (size_t i = 0; i < r->n_records; i++) {
        const egm_bdata_record_t *rec = &r->records[i];
        char size[32], dist[32];
        size_label(rec->bytes, size, sizeof(size));
        dist_label(rec->zipf, dist, sizeof(dist));
        printf("%-8s %-5s %-11s %-4s %7s %5llu %7d %5d %-9s %9llu %10.1f %10.1f %8.2f %8.2f "
               "%10.0f %6llu\n",
               rec->workload, rec->op, rec->transport, rec->memory, size,
               (unsigned long long)rec->batch, rec->clients, rec->procs, dist,
               (unsigned long long)rec->calls, rec->lat.p50_us, rec->lat.p99_us, rec->gbps,
               rec->gbps_p50, rec->ops_s, (unsigned long long)rec->errors);
    }
    printf("\nlatency = one call (a batch call is one sample); GB/s = bytes / time inside the "
           "calls, 1e9; p50 GB/s = one call's bytes / p50; clients are per process\n");
}

/* ---- JSON ------------------------------------------------------------------------ */

static void json_latency(FILE *f, const char *prefix, const egm_bench_latency_t *lat)
{
    fprintf(f, ", \"%sp50_us\": %.3f, \"%sp99_us\": %.3f", prefix, lat->p50_us, prefix,
            lat->p99_us);
}

static void json_record(FILE *f, const egm_bdata_record_t *rec)
{
    char dist[32];
    dist_label(rec->zipf, dist, sizeof(dist));
    fprintf(f, "    {\"workload\": \"%s\", \"system\": \"%s\", \"api\": \"c\", \"transport\": ",
            rec->workload, rec->system);
    egm__bench_json_str(f, rec->transport);
    fprintf(f,
            ", \"op\": \"%s\", \"memory\": \"%s\", \"bytes\": %llu, \"batch\": %llu, "
            "\"clients\": %d, \"procs\": %d, \"dist\": ",
            rec->op, rec->memory, (unsigned long long)rec->bytes, (unsigned long long)rec->batch,
            rec->clients, rec->procs);
    egm__bench_json_str(f, rec->zipf < 0 ? NULL : dist);
    fprintf(f, ", \"read_ratio\": ");
    egm__bench_json_num(f, rec->read_ratio);
    fprintf(f,
            ", \"calls\": %llu, \"seconds\": %.6f, \"p50_us\": %.3f, \"p99_us\": %.3f, "
            "\"mean_us\": %.3f, \"max_us\": %.3f, \"gbps\": ",
            (unsigned long long)rec->calls, rec->seconds, rec->lat.p50_us, rec->lat.p99_us,
            rec->lat.mean_us, rec->lat.max_us);
    egm__bench_json_num(f, rec->gbps);
    fprintf(f, ", \"ops_s\": %.3f, \"keys_s\": %.3f, \"errors\": %llu", rec->ops_s, rec->keys_s,
            (unsigned long long)rec->errors);
    fprintf(f, ", \"keys\": %llu, \"wall_seconds\": %.6f, \"gbps_p50\": %.6g",
            (unsigned long long)rec->keys, rec->wall_seconds, rec->gbps_p50);
    if (rec->client_seconds > 0)
        fprintf(f, ", \"client_seconds\": %.6f", rec->client_seconds);
    /* where the put calls' time went (bench/meta/put_call_time.py) */
    if (rec->put_phase_s[0] > 0) {
        fprintf(f, ", \"put_phases_s\": {");
        for (int p = 0; p < EGM_BDATA_PUT_PHASES; p++)
            fprintf(f, "%s\"%s\": %.6f", p > 0 ? ", " : "", egm__bdata_put_phase_names[p],
                    rec->put_phase_s[p]);
        fprintf(f, "}");
    }
    if (rec->mixed) {
        fprintf(f, ", \"gets\": %llu, \"puts\": %llu", (unsigned long long)rec->gets,
                (unsigned long long)rec->puts);
        json_latency(f, "get_", &rec->get_lat);
        json_latency(f, "put_", &rec->put_lat);
    }
    if (rec->full && rec->metrics_ok)
        fprintf(f,
                ", \"evictions\": %llu, \"evicted_bytes\": %llu, \"eviction_runs\": %llu, "
                "\"pool_used_before\": %.4f",
                (unsigned long long)rec->evictions, (unsigned long long)rec->evicted_bytes,
                (unsigned long long)rec->eviction_runs, rec->used_before);
    if (rec->run > 0)
        fprintf(f, ", \"run\": %llu", (unsigned long long)rec->run);
    fprintf(f, ", \"samples_us\": [");
    for (int i = 0; i < EGM_BDATA_QUANTILES; i++)
        fprintf(f, "%s%.2f", i ? ", " : "", rec->samples_us[i]);
    fprintf(f, "]");
    if (rec->note != NULL) {
        fprintf(f, ", \"note\": ");
        egm__bench_json_str(f, rec->note);
    }
    fprintf(f, "}");
}

/* The NVIDIA driver's version ("580.65.06"), "" when unknown. */
static void nvidia_driver(char *buf, size_t len)
{
    char line[512], version[64];
    FILE *f = fopen("/proc/driver/nvidia/version", "r");
    buf[0] = '\0';
    if (f == NULL)
        return;
    if (fgets(line, sizeof(line), f) != NULL) {
        const char *p = strstr(line, "Kernel Module");
        if (p != NULL && sscanf(p + 13, " %63s", version) == 1)
            snprintf(buf, len, "%s", version);
    }
    fclose(f);
}

static void json_machine(FILE *f, const egm_bdata_run_t *r)
{
    const egm_bench_machine_t *m = &r->machine;
    fprintf(f, "  ");
    egm__bench_json_machine(f, m);
    fprintf(f, ", \"gpus\": [");
    if (r->mem.gpu) {
        char driver[64], cuda[32];
        nvidia_driver(driver, sizeof(driver));
        snprintf(cuda, sizeof(cuda), "%d.%d", r->mem.cuda_version / 1000,
                 r->mem.cuda_version % 1000 / 10);
        fprintf(f, "{\"name\": ");
        egm__bench_json_str(f, r->mem.gpu_name);
        fprintf(f, ", \"index\": %d, \"driver\": ", r->mem.device);
        egm__bench_json_str(f, driver);
        fprintf(f, ", \"cuda\": ");
        egm__bench_json_str(f, cuda);
        fprintf(f, "}");
    }
    fprintf(f, "]},\n");
}

egm_status_t egm__bdata_write_json(const egm_bdata_run_t *r, const char *path)
{
    char commit[64];
    int dirty = 0;
    FILE *f = fopen(path, "w");

    if (f == NULL)
        return egm__set_error(EGM_ERR_IO, "--out %s: %s", path, strerror(errno));
    /* schema 1: the short commit */
    snprintf(commit, sizeof(commit), "%s", egm__bench_build_commit(&dirty));
    if (strlen(commit) == 40)
        commit[7] = '\0';
    fprintf(f, "{\n  \"schema\": 1,\n  \"tool\": \"egmstore bench data\",\n  \"version\": ");
    egm__bench_json_str(f, EGMSTORE_VERSION);
    fprintf(f, ",\n");
    json_machine(f, r);
    fprintf(f, "  \"commit\": ");
    egm__bench_json_str(f, commit);
    fprintf(f, ",\n  \"dirty\": %s,\n  \"started_unix_ms\": %llu,\n  \"config\": ",
            dirty ? "true" : "false", (unsigned long long)r->started_unix_ms);
    egm__bdata_json_config(f, r);
    fprintf(f, ",\n  \"results\": [\n");
    for (size_t i = 0; i < r->n_records; i++) {
        json_record(f, &r->records[i]);
        fprintf(f, "%s\n", i + 1 < r->n_records ? "," : "");
    }
    fprintf(f, "  ],\n  \"skipped\": [");
    for (size_t i = 0; i < r->n_skipped; i++) {
        fprintf(f, "%s\n    ", i ? "," : "");
        egm__bench_json_str(f, r->skipped[i]);
    }
    fprintf(f, "%s]\n}\n", r->n_skipped ? "\n  " : "");
    if (fclose(f) != 0)
        return egm__set_error(EGM_ERR_IO, "--out %s: %s", path, strerror(errno));
    return EGM_OK;
}
