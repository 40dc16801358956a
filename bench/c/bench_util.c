/* Helpers shared by the `egmstore bench` drivers (see bench_util.h). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/utsname.h>
#include "common/alloc.h"
#include "common/config_int.h"
#include "common/json.h"
#include "common/log.h"
#include "bench_util.h"
#include "egm_build_info.h" /* generated: cmake/build_info.cmake */

#define MAX_ITEM 64

void *egm__bench_reserve(void *v, size_t n, size_t *cap_p, size_t size, size_t first,
                         const char *site)
{
    size_t cap = *cap_p ? 2 * *cap_p : first;
    if (n < *cap_p)
        return v;
    v = egm_realloc(v, cap * size, site);
    if (v != NULL)
        *cap_p = cap;
    return v;
}

egm_status_t egm__bench_samples_add(egm_bench_samples_t *s, uint64_t ns)
{
    uint64_t *v = egm__bench_reserve(s->ns, s->n, &s->cap, sizeof(*v), 1024, "bench.samples");
    if (v == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "latency samples");
    s->ns = v;
    s->ns[s->n++] = ns;
    return EGM_OK;
}

egm_status_t egm__bench_samples_extend(egm_bench_samples_t *s, const uint64_t *ns, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        egm_status_t status = egm__bench_samples_add(s, ns[i]);
        if (status != EGM_OK)
            return status;
    }
    return EGM_OK;
}

void egm__bench_samples_free(egm_bench_samples_t *s)
{
    egm_free(s->ns);
    memset(s, 0, sizeof(*s));
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* Nearest rank: the smallest sample with at least p of the samples at or below it. */
static double rank_us(const uint64_t *v, size_t n, double p)
{
    size_t k = (size_t)(p * (double)n + 0.999999);
    if (k > 0)
        k--;
    if (k >= n)
        k = n - 1;
    return (double)v[k] / 1000.0;
}

void egm__bench_latency(egm_bench_samples_t *s, egm_bench_latency_t *lat)
{
    double sum = 0;
    memset(lat, 0, sizeof(*lat));
    if (s->n == 0)
        return;
    qsort(s->ns, s->n, sizeof(*s->ns), cmp_u64);
    for (size_t i = 0; i < s->n; i++)
        sum += (double)s->ns[i];
    lat->p50_us = rank_us(s->ns, s->n, 0.50);
    lat->p99_us = rank_us(s->ns, s->n, 0.99);
    lat->mean_us = sum / (double)s->n / 1000.0;
    lat->max_us = (double)s->ns[s->n - 1] / 1000.0;
}

void egm__bench_quantiles(const egm_bench_samples_t *sorted, double *q_us, int n)
{
    for (int i = 0; i < n; i++)
        q_us[i] = sorted->n > 0 && n > 1 ? rank_us(sorted->ns, sorted->n, (double)i / (n - 1)) : 0;
}

void egm__bench_json_str(FILE *f, const char *s)
{
    if (s == NULL) {
        fputs("null", f);
        return;
    }
    char text[256];
    egm_textbuf_t t = egm__textbuf(text, sizeof(text));
    egm__json_cstring(&t, s);
    if (t.need < sizeof(text)) {
        fwrite(text, 1, t.need, f);
        return;
    }
    t = egm__textbuf_growing("bench.json");
    egm__json_cstring(&t, s);
    fwrite(t.buf != NULL ? t.buf : "\"\"", 1, t.status == EGM_OK ? t.need : 2, f);
    egm_free(t.buf);
}

void egm__bench_json_num(FILE *f, double v)
{
    if (v < 0)
        fputs("null", f);
    else
        fprintf(f, "%.6g", v);
}

static void cpu_model(char *buf, size_t len)
{
    char line[512];
    FILE *f = fopen("/proc/cpuinfo", "r");
    snprintf(buf, len, "unknown");
    if (f == NULL)
        return;
    while (fgets(line, sizeof(line), f) != NULL) {
        char *colon = strchr(line, ':');
        if (strncmp(line, "model name", 10) != 0 || colon == NULL)
            continue;
        colon += 1 + (colon[1] == ' ');
        colon[strcspn(colon, "\n")] = '\0';
        snprintf(buf, len, "%s", colon);
        break;
    }
    fclose(f);
}

/* A /proc/meminfo field in bytes (0 when missing). */
static uint64_t meminfo(const char *field)
{
    char line[256];
    size_t flen = strlen(field);
    uint64_t kib = 0;
    FILE *f = fopen("/proc/meminfo", "r");
    if (f == NULL)
        return 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, field, flen) == 0 && line[flen] == ':') {
            kib = strtoull(line + flen + 1, NULL, 10);
            break;
        }
    fclose(f);
    return kib * 1024;
}

uint64_t egm__bench_mem_available(void)
{
    return meminfo("MemAvailable");
}

void egm__bench_machine(egm_bench_machine_t *m)
{
    struct utsname uts;
    memset(m, 0, sizeof(*m));
    if (gethostname(m->host, sizeof(m->host) - 1) != 0)
        snprintf(m->host, sizeof(m->host), "unknown");
    cpu_model(m->cpu, sizeof(m->cpu));
    if (uname(&uts) == 0)
        snprintf(m->kernel, sizeof(m->kernel), "%s %s", uts.sysname, uts.release);
    m->cores = sysconf(_SC_NPROCESSORS_ONLN);
    m->memory_bytes = meminfo("MemTotal");
    if (getloadavg(m->load, 3) != 3)
        memset(m->load, 0, sizeof(m->load));
}

void egm__bench_json_machine(FILE *f, const egm_bench_machine_t *m)
{
    fprintf(f, "\"machine\": {\"host\": ");
    egm__bench_json_str(f, m->host);
    fprintf(f, ", \"cpu\": ");
    egm__bench_json_str(f, m->cpu);
    fprintf(f, ", \"cores\": %ld, \"kernel\": ", m->cores);
    egm__bench_json_str(f, m->kernel);
    fprintf(f, ", \"memory_bytes\": %llu, \"load_avg\": [%.2f, %.2f, %.2f]",
            (unsigned long long)m->memory_bytes, m->load[0], m->load[1], m->load[2]);
}

const char *egm__bench_build_commit(int *dirty_p)
{
    *dirty_p = EGM_BUILD_DIRTY;
    return EGM_BUILD_COMMIT;
}

int egm__bench_each_item(const char *text, int (*item)(const char *it, void *arg), void *arg)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", text);
    for (char *save = NULL, *tok = strtok_r(buf, ",", &save); tok != NULL;
         tok = strtok_r(NULL, ",", &save)) {
        int rc = item(tok, arg);
        if (rc != 0)
            return rc;
    }
    return 0;
}

int egm__bench_parse_size(const char *flag, const char *text, uint64_t min, uint64_t *out)
{
    if (egm__parse_size(flag, text, out) != EGM_OK || *out < min) {
        fprintf(stderr, "egmstore: error: %s: \"%s\", must be a size of at least %llu bytes\n",
                flag, text, (unsigned long long)min);
        return -1;
    }
    return 0;
}

int egm__bench_parse_u64(const char *flag, const char *text, uint64_t min, uint64_t max,
                         uint64_t *out)
{
    char *end = NULL;
    unsigned long long v = strtoull(text, &end, 10);
    if (text[0] == '\0' || text[0] == '-' || *end != '\0' || v < min || v > max) {
        fprintf(stderr, "egmstore: error: %s: \"%s\", must be an integer %llu..%llu\n", flag, text,
                (unsigned long long)min, (unsigned long long)max);
        return -1;
    }
    *out = v;
    return 0;
}

/* flags' entry named exactly by arg ("--name" or "--name=VALUE"); NULL when none. */
static const egm_bench_flag_t *own_flag(const egm_bench_flag_t *flags, size_t n_flags,
                                        const char *arg)
{
    size_t nlen = strcspn(arg, "=");
    for (size_t k = 0; k < n_flags; k++)
        if (nlen == strlen(flags[k].name) && strncmp(arg, flags[k].name, nlen) == 0)
            return &flags[k];
    return NULL;
}

/* getopt_long reads the command's own flags. Only items that start with "--" reach it (a
 * positional, a value of a key flag, "-1", "-h" and "--" go to rest as they are, so getopt
 * neither reorders nor reads them as short options), and a flag counts as ours only under its
 * whole name: getopt's abbreviations (--clie for --clients) stay unknown flags, for
 * egm__cli_parse to refuse as before. */
int egm__bench_take_flags(int argc, char **argv, const egm_bench_flag_t *flags, size_t n_flags,
                          egm_bench_apply_fn apply, void *opts, char **rest, int *n_rest_p)
{
    struct option *longopts = egm_calloc(n_flags + 1, sizeof(*longopts), "bench.getopt");
    char **args = egm_calloc((size_t)argc + 2, sizeof(*args), "bench.getopt");
    int n = argc + 1, rc = -1;

    *n_rest_p = 0;
    if (longopts == NULL || args == NULL) {
        fprintf(stderr, "egmstore: error: out of memory reading the flags\n");
        goto out;
    }
    for (size_t k = 0; k < n_flags; k++) {
        longopts[k].name = flags[k].name + 2; /* without "--" */
        longopts[k].has_arg = flags[k].has_value ? required_argument : no_argument;
    }
    args[0] = "egm-bench"; /* getopt's argv[0] */
    memcpy(args + 1, argv, (size_t)argc * sizeof(*args));
    opterr = 0; /* the errors below name the flag as the other parsers do */
    for (int i = 1; i < n;) {
        const char *arg = args[i];
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
            rest[(*n_rest_p)++] = args[i++];
            continue;
        }
        /* "+": getopt stops at, never reorders, anything that is not a flag; ":": a
         * missing value answers ':'. optind is set at every call, so no earlier scan's
         * state is read. */
        optind = i;
        int c = getopt_long(n, args, "+:", longopts, NULL);
        const egm_bench_flag_t *flag = own_flag(flags, n_flags, arg);
        if (flag == NULL) { /* a key flag, or an abbreviation getopt took for one of ours */
            rest[(*n_rest_p)++] = args[i++];
            continue;
        }
        if (c == ':') {
            fprintf(stderr, "egmstore: error: %s needs a value\n", flag->name);
            goto out;
        }
        if (c == '?') { /* our flag under its whole name: "--smoke=1" */
            fprintf(stderr, "egmstore: error: %s takes no value\n", flag->name);
            goto out;
        }
        if (apply(opts, flag->name, flag->has_value ? optarg : NULL) != 0)
            goto out;
        i = optind;
    }
    rc = 0;
out:
    egm_free(args);
    egm_free(longopts);
    return rc;
}

int egm__bench_cli(int argc, char **argv, const char *what, const char *usage,
                   egm_bench_take_fn take, void *opts, egm_cli_t *cli, int *rc_p)
{
    char **rest = egm_calloc((size_t)argc + 1, sizeof(*rest), "cli.argv");
    int n_rest = 0;

    *rc_p = EGM_EXIT_FAIL;
    if (rest == NULL)
        return 0;
    if (take(argc, argv, opts, rest, &n_rest) != 0) {
        egm_free(rest);
        *rc_p = EGM_EXIT_USAGE;
        return 0;
    }
    char command[32];
    snprintf(command, sizeof(command), "bench %s", what);
    *rc_p = egm__cli_parse(n_rest, rest, command, EGM_ROLE_ALL, 0, 0, cli);
    egm_free(rest);
    if (*rc_p != EGM_EXIT_OK)
        return 0;
    if (cli->help) {
        printf("%s\n", usage);
        egm__cli_print_keys(stdout, EGM_ROLE_ALL, 0);
    } else if (cli->argc > 0) {
        fprintf(stderr, "egmstore: error: bench %s: unexpected argument \"%s\"\n", what,
                cli->argv[0]);
        *rc_p = EGM_EXIT_USAGE;
    } else {
        return 1;
    }
    egm__cli_cleanup(cli);
    return 0;
}

/* Splits text at commas into at most cap items; -1 (with an error) beyond. */
static int split(const char *flag, const char *text, char items[][MAX_ITEM], int cap)
{
    int n = 0;
    const char *p = text;
    for (;;) {
        size_t len = strcspn(p, ",");
        if (n == cap || len == 0 || len >= MAX_ITEM) {
            fprintf(stderr, "egmstore: error: %s: \"%s\", %s\n", flag, text,
                    n == cap ? "too many items" : "a comma-separated list without empty items");
            return -1;
        }
        memcpy(items[n], p, len);
        items[n++][len] = '\0';
        if (p[len] == '\0')
            return n;
        p += len + 1;
    }
}

int egm__bench_parse_sizes(const char *flag, const char *text, uint64_t min, uint64_t *out, int cap,
                           int *n_p)
{
    char items[32][MAX_ITEM];
    int n = split(flag, text, items, cap < 32 ? cap : 32);
    if (n < 0)
        return -1;
    for (int i = 0; i < n; i++)
        if (egm__bench_parse_size(flag, items[i], min, &out[i]) != 0)
            return -1;
    *n_p = n;
    return 0;
}

int egm__bench_parse_ints(const char *flag, const char *text, long min, long max, int *out, int cap,
                          int *n_p)
{
    char items[32][MAX_ITEM];
    int n = split(flag, text, items, cap < 32 ? cap : 32);
    if (n < 0)
        return -1;
    for (int i = 0; i < n; i++) {
        char *end = NULL;
        errno = 0;
        long v = strtol(items[i], &end, 10);
        if (errno != 0 || *end != '\0' || v < min || v > max) {
            fprintf(stderr, "egmstore: error: %s: \"%s\", must be an integer %ld..%ld\n", flag,
                    items[i], min, max);
            return -1;
        }
        out[i] = (int)v;
    }
    *n_p = n;
    return 0;
}

int egm__bench_parse_double(const char *flag, const char *text, double min, double max, double *out)
{
    char *end = NULL;
    double v = strtod(text, &end);
    if (text[0] == '\0' || *end != '\0' || !(v >= min && v <= max)) {
        fprintf(stderr, "egmstore: error: %s: \"%s\", must be a number in [%g, %g]\n", flag, text,
                min, max);
        return -1;
    }
    *out = v;
    return 0;
}
