/* bench data --procs N: N child processes of this command, each running the
 * level's clients as threads. They start one after the other (each prints
 * "started" once its clients have written the pool once). Per phase each child prepares and prints
 * "ready <phase>", the parent then writes one byte into every child's go pipe
 * so that all start together, each child prints "done <phase>" after writing
 * its clients' figures (latency samples included) into a file of a temporary
 * folder, and the parent merges them into one record. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/alloc.h"
#include "common/log.h"
#include "bench_data.h"

#define READY_TIMEOUT_MS 300000 /* preparing: buffers of hundreds of MiB to fill */
#define EXIT_TIMEOUT_MS 60000

struct egm_bdata_procs {
    egm_bdata_run_t *r;
    int n;
    egm_process_t *child;
    int *go; /* write ends */
    char dir[64];
};

/* What a child writes per client, followed by the samples. */
typedef struct {
    uint64_t calls, keys, bytes, errors, busy_ns, start_ns, end_ns;
    uint64_t n_lat, n_get, n_put, n_at;
    char error[200];
} stats_header_t;

static void result_path(const char *dir, int child, int phase, char *path, size_t len)
{
    snprintf(path, len, "%s/c%d-p%d.bin", dir, child, phase);
}

/* ---- the child's side ---------------------------------------------------------- */

static int write_samples(FILE *f, const egm_bench_samples_t *s)
{
    return s->n == 0 || fwrite(s->ns, sizeof(s->ns[0]), s->n, f) == s->n;
}

static egm_status_t write_stats(const char *path, const egm_bdata_stats_t *stats, size_t n)
{
    FILE *f = fopen(path, "wb");
    int ok = f != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        const egm_bdata_stats_t *s = &stats[i];
        stats_header_t h = {s->calls,     s->keys,      s->bytes,  s->errors,
                            s->busy_ns,   s->start_ns,  s->end_ns, s->lat.n,
                            s->lat_get.n, s->lat_put.n, s->at.n,   {0}};
        memcpy(h.error, s->error, sizeof(h.error));
        ok = fwrite(&h, sizeof(h), 1, f) == 1 && write_samples(f, &s->lat) &&
             write_samples(f, &s->lat_get) && write_samples(f, &s->lat_put) &&
             write_samples(f, &s->at);
    }
    if (f != NULL && fclose(f) != 0)
        ok = 0;
    return ok ? EGM_OK : egm__set_error(EGM_ERR_IO, "writing %s: %s", path, strerror(errno));
}

static egm_status_t child_gate(void *arg, const egm_bdata_phase_t *ph)
{
    const egm_bdata_run_t *r = arg;
    char c;
    printf("ready %d\n", ph->index);
    fflush(stdout);
    ssize_t got;
    do
        got = read(r->o.child_go_fd, &c, 1);
    while (got < 0 && errno == EINTR);
    return got == 1 ? EGM_OK : egm__set_error(EGM_ERR_UNREACHABLE, "the parent went away");
}

int egm__bdata_child_main(egm_bdata_run_t *r)
{
    egm_bdata_phase_t *phases = NULL;
    egm_bdata_group_t *g = NULL;
    size_t n = 0;
    egm_status_t status;

    r->procs = r->o.child_procs;
    r->clients = r->o.clients[0];
    r->proc_index = r->o.child_index;
    r->proto = r->o.protocols[0];
    snprintf(r->prefix, sizeof(r->prefix), "%s", r->o.child_prefix);
    status = egm__bdata_phases(&r->o, r->clients, r->procs, &phases, &n);
    if (status == EGM_OK)
        status = egm__bdata_group_start(r, &g);
    if (status == EGM_OK) { /* clients made, pool written once: the parent starts the next */
        printf("started\n");
        fflush(stdout);
    }
    for (size_t i = 0; status == EGM_OK && i < n; i++) {
        egm_bdata_stats_t *stats = NULL;
        size_t n_stats = 0;
        char path[512];
        if (phases[i].skip[0] != '\0')
            continue;
        status = egm__bdata_group_phase(g, &phases[i], child_gate, r, &stats, &n_stats);
        result_path(r->o.child_dir, r->proc_index, phases[i].index, path, sizeof(path));
        if (status == EGM_OK)
            status = write_stats(path, stats, n_stats);
        if (status == EGM_OK) {
            printf("done %d\n", phases[i].index);
            fflush(stdout);
        }
    }
    egm__bdata_group_stop(g);
    egm_free(phases);
    if (status != EGM_OK) {
        egm__cli_error("bench data child", status);
        return EGM_EXIT_FAIL;
    }
    return EGM_EXIT_OK;
}

/* ---- the parent's side --------------------------------------------------------- */

/* The child's command line: ours, then the level's settings (later flags win). */
static egm_status_t spawn(egm_bdata_procs_t *p, int i, int go_read)
{
    const egm_bdata_run_t *r = p->r;
    char num[9][32];
    char **argv = egm_calloc((size_t)r->o.argc + 40, sizeof(*argv), "bench.argv");
    int k = 0;

    if (argv == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "child arguments");
    argv[k++] = (char *)egm__process_self_exe(); /* egm-bench */
    argv[k++] = "data";
    for (int a = 0; a < r->o.argc; a++)
        argv[k++] = r->o.argv[a];
    snprintf(num[0], sizeof(num[0]), "%d", r->clients);
    snprintf(num[1], sizeof(num[1]), "%llu", (unsigned long long)r->o.pool_size);
    snprintf(num[2], sizeof(num[2]), "%llu", (unsigned long long)r->o.max_memory);
    snprintf(num[3], sizeof(num[3]), "%d", i);
    snprintf(num[4], sizeof(num[4]), "%d", p->n);
    snprintf(num[5], sizeof(num[5]), "%d", go_read);
    char *level[] = {"--master",       (char *)r->master_addr,
                     "--protocol",     (char *)egm__bdata_proto_name(r->proto),
                     "--clients",      num[0],
                     "--procs",        "1",
                     "--pool-size",    num[1],
                     "--max-memory",   num[2],
                     "--no-ceiling",   r->o.warm ? "--warm" : "--no-warm",
                     "--child-index",  num[3],
                     "--child-procs",  num[4],
                     "--child-go-fd",  num[5],
                     "--child-dir",    p->dir,
                     "--child-prefix", (char *)r->prefix};
    for (size_t a = 0; a < sizeof(level) / sizeof(level[0]); a++)
        argv[k++] = level[a];
    argv[k] = NULL;
    egm_status_t status = egm__process_spawn(argv, EGM_PROCESS_STDOUT_CAPTURE, &p->child[i]);
    egm_free(argv);
    return status;
}

egm_status_t egm__bdata_procs_start(egm_bdata_run_t *r, egm_bdata_procs_t **p_p)
{
    egm_bdata_procs_t *p = egm_calloc(1, sizeof(*p), "bench.procs");
    egm_status_t status = EGM_OK;

    *p_p = NULL;
    if (p == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "bench processes");
    p->r = r;
    p->n = r->procs;
    p->child = egm_calloc((size_t)p->n, sizeof(*p->child), "bench.procs");
    p->go = egm_calloc((size_t)p->n, sizeof(*p->go), "bench.procs");
    snprintf(p->dir, sizeof(p->dir), "/tmp/egmstore-bench-XXXXXX");
    if (p->child == NULL || p->go == NULL) {
        egm_free(p->child);
        egm_free(p->go);
        egm_free(p);
        return egm__set_error(EGM_ERR_NO_MEMORY, "bench processes");
    }
    for (int i = 0; i < p->n; i++) {
        p->child[i].out_fd = -1;
        p->go[i] = -1;
    }
    if (mkdtemp(p->dir) == NULL) {
        status = egm__set_error(EGM_ERR_IO, "mkdtemp %s: %s", p->dir, strerror(errno));
        p->dir[0] = '\0';
    }
    for (int i = 0; status == EGM_OK && i < p->n; i++) {
        int fds[2];
        if (pipe2(fds, O_CLOEXEC) != 0) {
            status = egm__set_error(EGM_ERR_IO, "pipe: %s", strerror(errno));
            break;
        }
        fcntl(fds[0], F_SETFD, 0); /* the child reads its go bytes here */
        p->go[i] = fds[1];
        status = spawn(p, i, fds[0]);
        close(fds[0]);
        /* One at a time: each child's pass over the pool must have it to itself. */
        char line[512];
        if (status == EGM_OK)
            status = egm__process_wait_line(&p->child[i], "started", line, sizeof(line),
                                            READY_TIMEOUT_MS);
    }
    *p_p = p;
    if (status != EGM_OK) {
        char why[256];
        snprintf(why, sizeof(why), "%s", egm_last_error());
        egm__bdata_procs_stop(p);
        *p_p = NULL;
        return egm__set_error(status, "starting %d processes: %s", r->procs, why);
    }
    return EGM_OK;
}

/* Waits for "<word> <phase>" from every child. */
static egm_status_t wait_all(egm_bdata_procs_t *p, const char *word, int phase, int timeout_ms)
{
    char line[512], prefix[32];
    snprintf(prefix, sizeof(prefix), "%s ", word);
    for (int i = 0; i < p->n; i++) {
        egm_status_t status =
            egm__process_wait_line(&p->child[i], prefix, line, sizeof(line), timeout_ms);
        if (status != EGM_OK)
            return egm__set_error(status, "process %d (pid %d), waiting for \"%s%d\": %s", i,
                                  (int)p->child[i].pid, prefix, phase, egm_last_error());
        if (atoi(line + strlen(prefix)) != phase)
            return egm__set_error(EGM_ERR_PROTOCOL, "process %d: \"%s\", expected phase %d", i,
                                  line, phase);
    }
    return EGM_OK;
}

static egm_status_t read_samples(FILE *f, egm_bench_samples_t *s, uint64_t n)
{
    uint64_t buf[1024];
    while (n > 0) {
        size_t k = n < 1024 ? (size_t)n : 1024;
        if (fread(buf, sizeof(buf[0]), k, f) != k)
            return egm__set_error(EGM_ERR_IO, "a short result file");
        egm_status_t status = egm__bench_samples_extend(s, buf, k);
        if (status != EGM_OK)
            return status;
        n -= k;
    }
    return EGM_OK;
}

static egm_status_t read_stats(const char *path, egm_bdata_stats_t *stats, size_t n)
{
    FILE *f = fopen(path, "rb");
    egm_status_t status = EGM_OK;
    if (f == NULL)
        return egm__set_error(EGM_ERR_IO, "%s: %s", path, strerror(errno));
    for (size_t i = 0; status == EGM_OK && i < n; i++) {
        stats_header_t h;
        egm_bdata_stats_t *s = &stats[i];
        if (fread(&h, sizeof(h), 1, f) != 1) {
            status = egm__set_error(EGM_ERR_IO, "%s: a short result file", path);
            break;
        }
        s->calls = h.calls;
        s->keys = h.keys;
        s->bytes = h.bytes;
        s->errors = h.errors;
        s->busy_ns = h.busy_ns;
        s->start_ns = h.start_ns;
        s->end_ns = h.end_ns;
        memcpy(s->error, h.error, sizeof(s->error));
        s->error[sizeof(s->error) - 1] = '\0';
        status = read_samples(f, &s->lat, h.n_lat);
        if (status == EGM_OK)
            status = read_samples(f, &s->lat_get, h.n_get);
        if (status == EGM_OK)
            status = read_samples(f, &s->lat_put, h.n_put);
        if (status == EGM_OK)
            status = read_samples(f, &s->at, h.n_at);
    }
    fclose(f);
    unlink(path);
    return status;
}

egm_status_t egm__bdata_procs_phase(egm_bdata_procs_t *p, const egm_bdata_phase_t *ph,
                                    egm_bdata_stats_t **stats_p, size_t *n_p)
{
    size_t per = (size_t)p->r->clients, n = (size_t)p->n * per;
    int done_ms = p->r->o.iters > 0 ? 3600000 : (int)(p->r->o.seconds * 1000) + READY_TIMEOUT_MS;
    egm_bdata_stats_t *stats = egm_calloc(n, sizeof(*stats), "bench.stats");
    egm_status_t status = stats != NULL ? EGM_OK : EGM_ERR_NO_MEMORY;

    if (status == EGM_OK)
        status = wait_all(p, "ready", ph->index, READY_TIMEOUT_MS);
    for (int i = 0; status == EGM_OK && i < p->n; i++)
        if (write(p->go[i], "g", 1) != 1)
            status = egm__set_error(EGM_ERR_IO, "go pipe of process %d: %s", i, strerror(errno));
    if (status == EGM_OK)
        status = wait_all(p, "done", ph->index, done_ms);
    for (int i = 0; status == EGM_OK && i < p->n; i++) {
        char path[512];
        result_path(p->dir, i, ph->index, path, sizeof(path));
        status = read_stats(path, stats + (size_t)i * per, per);
    }
    if (status != EGM_OK) {
        egm__bdata_stats_free(stats, stats != NULL ? n : 0);
        egm_free(stats);
        return status;
    }
    *stats_p = stats;
    *n_p = n;
    return EGM_OK;
}

/* The temporary folder, with the files an interrupted phase left. */
static void remove_dir(const char *dir)
{
    char path[512];
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL)
        if (e->d_name[0] != '.') {
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            unlink(path);
        }
    if (d != NULL)
        closedir(d);
    rmdir(dir);
}

egm_status_t egm__bdata_procs_stop(egm_bdata_procs_t *p)
{
    egm_status_t status = EGM_OK;
    if (p == NULL)
        return EGM_OK;
    for (int i = 0; i < p->n; i++)
        if (p->go[i] >= 0)
            close(p->go[i]); /* a child still waiting for a phase sees the end */
    for (int i = 0; i < p->n; i++) {
        int code = -1;
        if (p->child[i].pid <= 0)
            continue;
        int pid = (int)p->child[i].pid;
        egm_status_t waited = egm__process_wait(&p->child[i], EXIT_TIMEOUT_MS, &code);
        if (waited != EGM_OK)
            egm__process_signal(&p->child[i], SIGKILL);
        if (waited != EGM_OK || code != 0)
            status = egm__set_error(EGM_ERR_INTERNAL, "process %d (pid %d) %s %d", i, pid,
                                    waited != EGM_OK ? "did not exit, killed; code" : "exited with",
                                    code);
        egm__process_cleanup(&p->child[i]);
    }
    if (p->dir[0] != '\0')
        remove_dir(p->dir);
    egm_free(p->child);
    egm_free(p->go);
    egm_free(p);
    return status;
}
