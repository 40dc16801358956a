/* `egmstore bench data`: the egmstore side of the data workloads of the
 * benchmark suite (issue 7), measured through the C client library.
 *
 * For each protocol, then each level (processes x client threads), the level's
 * phases run in order (bench_data_phases.c); every phase gives one record with
 * the schema the whole suite shares (docs/benchmarks.md). The copy ceilings
 * are measured first, in the same run. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include "common/alloc.h"
#include "common/clock.h"
#include "common/config_int.h"
#include "common/id.h"
#include "common/log.h"
#include "bench_data.h"

static egm_status_t run_phase(egm_bdata_run_t *r, egm_bdata_group_t *g, egm_bdata_procs_t *p,
                              const egm_bdata_phase_t *ph)
{
    egm_bdata_stats_t *stats = NULL;
    egm_bdata_record_t rec;
    size_t n = 0;
    /* a get phase allocates nothing: it reads what its put phase just stored */
    egm_status_t status = ph->op == EGM_BDATA_GET ? EGM_OK : egm__bdata_wait_held(r);

    memset(&rec, 0, sizeof(rec));
    if (status == EGM_OK)
        status = egm__bdata_control_before(r, ph);
    if (status != EGM_OK)
        return status;
    status = g != NULL ? egm__bdata_group_phase(g, ph, NULL, NULL, &stats, &n)
                       : egm__bdata_procs_phase(p, ph, &stats, &n);
    if (status == EGM_OK)
        egm__bdata_summarize(r, ph, stats, n, &rec);
    if (p != NULL) {
        egm__bdata_stats_free(stats, n);
        egm_free(stats);
    }
    egm_status_t after = egm__bdata_control_after(r, ph, &rec);
    if (status == EGM_OK)
        status = egm__bdata_add_record(r, &rec);
    return status != EGM_OK ? status : after;
}

/* One level: its clients in this process (procs 1) or in child processes. */
static void run_level(egm_bdata_run_t *r)
{
    egm_bdata_phase_t *phases = NULL;
    egm_bdata_group_t *g = NULL;
    egm_bdata_procs_t *p = NULL;
    size_t n = 0;
    egm_status_t status = egm__bdata_phases(&r->o, r->clients, r->procs, &phases, &n);

    fprintf(stderr, "bench: %s, %d client%s x %d process%s\n", egm__bdata_transport(r), r->clients,
            r->clients > 1 ? "s" : "", r->procs, r->procs > 1 ? "es" : "");
    if (status == EGM_OK) /* the clients' pool warm-up writes the whole pool */
        status = egm__bdata_wait_held(r);
    if (status == EGM_OK)
        status = r->procs == 1 ? egm__bdata_group_start(r, &g) : egm__bdata_procs_start(r, &p);
    for (size_t i = 0; status == EGM_OK && i < n; i++) {
        if (phases[i].skip[0] != '\0') {
            status = egm__bdata_add_skipped(r, &phases[i]);
            continue;
        }
        status = run_phase(r, g, p, &phases[i]);
        if (status != EGM_OK && g != NULL) { /* threads stay in step: go on with the next */
            egm__cli_error("bench phase", status);
            r->failed = 1;
            status = EGM_OK;
        }
    }
    if (status != EGM_OK) {
        egm__cli_error("bench level", status);
        r->failed = 1;
    }
    egm__bdata_group_stop(g);
    if (p != NULL && (status = egm__bdata_procs_stop(p)) != EGM_OK) {
        egm__cli_error("bench processes", status);
        r->failed = 1;
    }
    egm_free(phases);
}

static void run_levels(egm_bdata_run_t *r)
{
    const egm_bdata_opts_t *o = &r->o;
    for (int t = 0; t < o->n_protocols; t++)
        for (int p = 0; p < o->n_procs; p++)
            for (int c = 0; c < o->n_clients; c++) {
                r->proto = o->protocols[t];
                r->procs = o->procs[p];
                r->clients = o->clients[c];
                r->proc_index = 0;
                run_level(r);
            }
}

static void announce(const egm_bdata_run_t *r)
{
    char pool[32], mem[32];
    egm__format_size(r->o.pool_size, pool, sizeof(pool));
    egm__format_size(r->o.max_memory, mem, sizeof(mem));
    fprintf(stderr,
            "bench: master %s (%s), pool %s (%s), memory %s%s, keys %s/..., max memory %s\n",
            r->master_addr, r->embedded ? "in this process" : "external",
            r->embedded ? pool : "the master's", r->o.pool_egm ? "EGM Store pool" : "host memfd",
            r->mem.gpu ? "gpu " : "host", r->mem.gpu ? r->mem.gpu_name : "", r->prefix, mem);
}

static int finish(egm_bdata_run_t *r)
{
    egm__bdata_print_table(r);
    if (r->o.out != NULL) {
        egm_status_t status = egm__bdata_write_json(r, r->o.out);
        if (status != EGM_OK) {
            egm__cli_error("writing the results", status);
            r->failed = 1;
        } else {
            fprintf(stderr, "bench: wrote %s\n", r->o.out);
        }
    }
    if (r->failed)
        fprintf(stderr, "egmstore: error: bench data: some calls or checks failed (see above)\n");
    return r->failed ? EGM_EXIT_FAIL : EGM_EXIT_OK;
}

static int run(egm_bdata_run_t *r)
{
    egm_status_t status = egm__bdata_cluster_start(r);
    if (status != EGM_OK) {
        egm__cli_error("bench data: starting the store", status);
        egm__bdata_cluster_stop(r);
        return EGM_EXIT_FAIL;
    }
    announce(r);
    if (r->o.ceiling && (status = egm__bdata_ceilings(r)) != EGM_OK) {
        egm__cli_error("bench data: ceiling", status);
        r->failed = 1;
    }
    run_levels(r);
    status = egm__bdata_cluster_stop(r);
    if (status != EGM_OK) {
        egm__cli_error("bench data: stopping the store", status);
        r->failed = 1;
    }
    return finish(r);
}

static int run_command(egm_cli_t *cli, const egm_bdata_opts_t *o)
{
    egm_bdata_run_t *r = egm_calloc(1, sizeof(*r), "bench.run");
    int rc = EGM_EXIT_FAIL;
    if (r == NULL)
        return EGM_EXIT_FAIL;
    r->o = *o;
    r->config = cli->config;
    r->started_unix_ms = egm__wall_ms();
    snprintf(r->prefix, sizeof(r->prefix), "bench-data-%08llx",
             (unsigned long long)(egm__id_random().lo & 0xffffffffu));
    egm__bench_machine(&r->machine);
    signal(SIGPIPE, SIG_IGN);
    if (!EGM_CONFIG_IS_SET(cli->config, log_level))
        egm__log_set_level(EGM_LOG_WARN);
    egm_status_t status = egm__bdata_mem_open(&r->mem, o->gpu, o->device);
    if (status != EGM_OK)
        egm__cli_error("bench data", status);
    else
        rc = o->child ? egm__bdata_child_main(r) : run(r);
    egm_free(r->records);
    egm_free(r->skipped);
    egm_free(r->cdf);
    egm_free(r);
    return rc;
}

static int take_flags(int argc, char **argv, void *o, char **rest, int *n_rest)
{
    return egm__bdata_parse(argc, argv, o, rest, n_rest);
}

int egm__bench_data(int argc, char **argv)
{
    egm_bdata_opts_t o;
    egm_cli_t cli;
    int rc;

    memset(&o, 0, sizeof(o));
    o.read_ratio = -1;
    o.ceiling = -1;
    o.pool_egm = -1;
    o.warm = -1;
    o.argc = argc;
    o.argv = argv;
    if (!egm__bench_cli(argc, argv, "data", egm__bdata_usage, take_flags, &o, &cli, &rc))
        return rc;
    if (egm__bdata_defaults(&o, !EGM_CONFIG_IS_SET(cli.config, master_server_addr)) != 0)
        rc = EGM_EXIT_USAGE;
    else
        rc = run_command(&cli, &o);
    egm__cli_cleanup(&cli);
    return rc;
}
