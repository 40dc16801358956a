/* bench data: the client threads of one process. For each phase every thread
 * prepares (untimed), then all start together at the same instant (after the
 * gate: a --procs child waits for its parent there), run their timed loop
 * until the deadline or the call count, and clean up (untimed). */
#include <stdio.h>
#include <string.h>
#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "bench_data.h"

struct egm_bdata_group {
    egm_bdata_run_t *r;
    egm_bdata_worker_t *w;
    egm_bdata_stats_t *stats; /* the last phase's, moved out of the workers */
    int n, started;
    egm_client_t *shared;
    pthread_mutex_t lock;
    pthread_cond_t to_workers, to_main;
    uint64_t gen, go_gen;
    const egm_bdata_phase_t *phase; /* NULL: the threads exit */
    int prepared, finished;
    int abort; /* a client could not prepare: nobody runs the phase */
    egm_status_t prepare_status;
    uint64_t deadline_ns;
    char prepare_error[256];
    double (*put_phases)[EGM_BDATA_PUT_PHASES]; /* each client's, when the phase started */
};

const char *const egm__bdata_put_phase_names[EGM_BDATA_PUT_PHASES] = {"call", "rpc", "transfer",
                                                                      "place", "log"};

/* The client's egm_client_put_*_seconds_total, from its metrics text (0 for
 * any it cannot read). */
static void read_put_phases(egm_client_t *client, double *out)
{
    memset(out, 0, EGM_BDATA_PUT_PHASES * sizeof(*out));
    /* Room to spare: counters may gain digits between the two calls; a text
     * cut short anyway is read again, larger. */
    char *text = NULL;
    for (size_t len = egm_client_metrics(client, NULL, 0) + 4096;; len *= 2) {
        egm_free(text);
        if ((text = egm_malloc(len, "bench.put_phases")) == NULL)
            return;
        if (egm_client_metrics(client, text, len) < len)
            break;
    }
    for (int p = 0; p < EGM_BDATA_PUT_PHASES; p++) {
        char name[80];
        snprintf(name, sizeof(name), "egm_client_put_%s_seconds_total",
                 egm__bdata_put_phase_names[p]);
        double v = egm__bdata_metric(text, name);
        out[p] = v > 0 ? v : 0;
    }
    egm_free(text);
}

/* Worker i's client when it is one of its own (the first thread's of a shared one). */
static egm_client_t *own_client(egm_bdata_group_t *g, int i)
{
    return g->shared == NULL || i == 0 ? g->w[i].client : NULL;
}

void egm__bdata_stats_free(egm_bdata_stats_t *stats, size_t n)
{
    for (size_t i = 0; stats != NULL && i < n; i++) {
        egm__bench_samples_free(&stats[i].lat);
        egm__bench_samples_free(&stats[i].lat_get);
        egm__bench_samples_free(&stats[i].lat_put);
        egm__bench_samples_free(&stats[i].at);
        memset(&stats[i], 0, sizeof(stats[i]));
    }
}

static void timed_loop(egm_bdata_worker_t *w, const egm_bdata_ops_t *ops,
                       const egm_bdata_phase_t *ph, uint64_t deadline)
{
    const egm_bdata_opts_t *o = &w->r->o;
    uint64_t now = egm__now_ns();

    w->st.start_ns = now;
    for (w->step = 0; !w->stop; w->step++) {
        if (o->iters > 0 ? w->step >= o->iters
                         : (w->step >= EGM_BDATA_MIN_CALLS && now >= deadline))
            break;
        ops->step(w, ph);
        now = egm__now_ns();
    }
    w->st.end_ns = now;
}

static void run_phase(egm_bdata_group_t *g, egm_bdata_worker_t *w, const egm_bdata_phase_t *ph,
                      uint64_t gen)
{
    const egm_bdata_ops_t *ops = egm__bdata_ops(ph);

    egm__bdata_stats_free(&w->st, 1);
    w->stop = 0;
    egm_status_t status = ops->prepare(w, ph);
    pthread_mutex_lock(&g->lock);
    if (status != EGM_OK && !g->abort) {
        g->abort = 1;
        g->prepare_status = status;
        snprintf(g->prepare_error, sizeof(g->prepare_error), "client %d: %s", w->index,
                 egm_last_error());
    }
    g->prepared++;
    pthread_cond_signal(&g->to_main);
    while (g->go_gen != gen)
        pthread_cond_wait(&g->to_workers, &g->lock);
    int abort = g->abort;
    uint64_t deadline = g->deadline_ns;
    pthread_mutex_unlock(&g->lock);
    if (!abort)
        timed_loop(w, ops, ph, deadline);
    if (status == EGM_OK)
        ops->finish(w, ph);
}

static void *worker_main(void *arg)
{
    egm_bdata_worker_t *w = arg;
    egm_bdata_group_t *g = w->group;
    uint64_t seen = 0;

    /* HBM buffers are allocated on this thread: the device's context first. */
    if (egm__bdata_mem_thread(&w->r->mem) != EGM_OK)
        egm_warn("bench: client %d: %s", w->index, egm_last_error());
    for (;;) {
        pthread_mutex_lock(&g->lock);
        while (g->gen == seen)
            pthread_cond_wait(&g->to_workers, &g->lock);
        seen = g->gen;
        const egm_bdata_phase_t *ph = g->phase;
        pthread_mutex_unlock(&g->lock);
        if (ph == NULL)
            break;
        run_phase(g, w, ph, seen);
        pthread_mutex_lock(&g->lock);
        g->finished++;
        pthread_cond_signal(&g->to_main);
        pthread_mutex_unlock(&g->lock);
    }
    return NULL;
}

egm_status_t egm__bdata_group_start(egm_bdata_run_t *r, egm_bdata_group_t **g_p)
{
    egm_bdata_group_t *g = egm_calloc(1, sizeof(*g), "bench.group");
    egm_status_t status = EGM_OK;

    *g_p = NULL;
    if (g == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "bench clients");
    g->r = r;
    g->n = r->clients;
    pthread_mutex_init(&g->lock, NULL);
    pthread_cond_init(&g->to_workers, NULL);
    pthread_cond_init(&g->to_main, NULL);
    g->w = egm_calloc((size_t)g->n, sizeof(*g->w), "bench.group");
    g->stats = egm_calloc((size_t)g->n, sizeof(*g->stats), "bench.group");
    g->put_phases = egm_calloc((size_t)g->n, sizeof(*g->put_phases), "bench.group");
    if (g->w == NULL || g->stats == NULL || g->put_phases == NULL)
        status = egm__set_error(EGM_ERR_NO_MEMORY, "bench clients");
    if (status == EGM_OK && !r->o.client_per_thread) {
        egm_config_t *config = NULL;
        status = egm__bdata_client_config(r, &config);
        if (status == EGM_OK)
            status = egm_client_create(config, &g->shared);
        egm_config_destroy(config);
    }
    for (int i = 0; status == EGM_OK && i < g->n; i++) {
        status = egm__bdata_worker_init(r, &g->w[i], i, g->shared);
        g->w[i].group = g;
    }
    for (int i = 0; status == EGM_OK && r->o.warm && i < g->n; i++)
        if (g->shared == NULL || i == 0) /* one client at a time: each gets the whole pool */
            status = egm__bdata_warm_pool(r, g->w[i].client, g->w[i].global);
    for (; status == EGM_OK && g->started < g->n; g->started++)
        if (pthread_create(&g->w[g->started].thread, NULL, worker_main, &g->w[g->started]) != 0)
            status = egm__set_error(EGM_ERR_NO_MEMORY, "starting client thread %d", g->started);
    if (status != EGM_OK) {
        char why[256];
        snprintf(why, sizeof(why), "%s", egm_last_error());
        egm__bdata_group_stop(g);
        return egm__set_error(status, "%d clients: %s", r->clients, why);
    }
    *g_p = g;
    return EGM_OK;
}

egm_status_t egm__bdata_group_phase(egm_bdata_group_t *g, const egm_bdata_phase_t *ph,
                                    egm_bdata_gate_t gate, void *gate_arg,
                                    egm_bdata_stats_t **stats_p, size_t *n_p)
{
    egm_status_t status = EGM_OK;

    if (ph->workload == EGM_BDATA_MIXED)
        status = egm__bdata_dist_prepare(g->r, ph);
    if (status != EGM_OK)
        return status;
    pthread_mutex_lock(&g->lock);
    g->phase = ph;
    g->prepared = g->finished = g->abort = 0;
    g->prepare_error[0] = '\0';
    g->gen++;
    pthread_cond_broadcast(&g->to_workers);
    while (g->prepared < g->n)
        pthread_cond_wait(&g->to_main, &g->lock);
    int abort = g->abort;
    pthread_mutex_unlock(&g->lock);
    if (abort)
        status = egm__set_error(g->prepare_status, "preparing the phase: %s", g->prepare_error);
    else if (gate != NULL)
        status = gate(gate_arg, ph);

    for (int i = 0; i < g->n; i++)
        if (own_client(g, i) != NULL)
            read_put_phases(own_client(g, i), g->put_phases[i]);
    pthread_mutex_lock(&g->lock);
    g->abort = status != EGM_OK;
    g->deadline_ns = egm__now_ns() + (uint64_t)(g->r->o.seconds * 1e9);
    g->go_gen = g->gen;
    pthread_cond_broadcast(&g->to_workers);
    while (g->finished < g->n)
        pthread_cond_wait(&g->to_main, &g->lock);
    pthread_mutex_unlock(&g->lock);

    egm__bdata_stats_free(g->stats, (size_t)g->n);
    for (int i = 0; i < g->n; i++) {
        g->stats[i] = g->w[i].st;
        memset(&g->w[i].st, 0, sizeof(g->w[i].st));
        double now[EGM_BDATA_PUT_PHASES];
        if (own_client(g, i) == NULL)
            continue;
        read_put_phases(own_client(g, i), now);
        for (int p = 0; p < EGM_BDATA_PUT_PHASES; p++)
            g->stats[i].put_phase_s[p] = now[p] - g->put_phases[i][p];
    }
    *stats_p = g->stats;
    *n_p = (size_t)g->n;
    return status;
}

void egm__bdata_group_stop(egm_bdata_group_t *g)
{
    if (g == NULL)
        return;
    pthread_mutex_lock(&g->lock);
    g->phase = NULL;
    g->gen++;
    pthread_cond_broadcast(&g->to_workers);
    pthread_mutex_unlock(&g->lock);
    for (int i = 0; i < g->started; i++)
        pthread_join(g->w[i].thread, NULL);
    for (int i = 0; g->w != NULL && i < g->n; i++)
        egm__bdata_worker_cleanup(&g->w[i]);
    egm_client_destroy(g->shared);
    egm__bdata_stats_free(g->stats, (size_t)g->n);
    egm_free(g->stats);
    egm_free(g->put_phases);
    egm_free(g->w);
    pthread_cond_destroy(&g->to_workers);
    pthread_cond_destroy(&g->to_main);
    pthread_mutex_destroy(&g->lock);
    egm_free(g);
}
