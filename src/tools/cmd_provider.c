/* `egmstore provider`: contributes capacity (a memfd host pool, a VMM pool,
 * or the EGM Store pool) until SIGTERM/SIGINT, then withdraws it. Optional
 * admin HTTP (`provider_http_port`): /health (JSON; 200 only when healthy)
 * and /metrics (Prometheus text). `--plan-only` prints the pool plan and
 * allocates nothing. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <egmstore/egmstore.h>
#include "admin/http_server.h"
#include "client/client_int.h"
#include "common/alloc.h"
#include "common/config_int.h"
#include "common/log.h"
#include "common/prom.h"
#include "pool/egm_plan.h"
#include "tools/cli.h"

#define PROVIDER_DEFAULT_CAPACITY "256MiB"
#define CLOSE_ATTEMPTS 5
#define METRICS_MAX (64 * 1024)

/* What the HTTP thread reports: the client once it exists. */
typedef struct {
    pthread_mutex_t lock;
    egm_client_t *client; /* NULL while setting up and after teardown */
} provider_state_t;

static void serve_health(provider_state_t *ps, egm_http_response_t *resp)
{
    pthread_mutex_lock(&ps->lock);
    egm_health_t h = egm_client_health(ps->client);
    pthread_mutex_unlock(&ps->lock);
    resp->status = h == EGM_HEALTH_HEALTHY ? 200 : 503;
    resp->content_type = "application/json";
    egm__http_printf(resp, "{\"status\":\"%s\",\"code\":%d}\n", egm_health_string(h), (int)h);
}

static void serve_metrics(provider_state_t *ps, egm_http_response_t *resp)
{
    char *text = egm_malloc(METRICS_MAX, "provider.metrics");
    if (text == NULL) {
        resp->status = 500;
        return;
    }
    pthread_mutex_lock(&ps->lock);
    size_t n = egm_client_metrics(ps->client, text, METRICS_MAX);
    pthread_mutex_unlock(&ps->lock);
    resp->status = 200;
    resp->content_type = EGM_PROM_CONTENT_TYPE;
    resp->body = text;
    resp->len = n < METRICS_MAX ? n : METRICS_MAX - 1;
    resp->cap = METRICS_MAX;
}

static void on_http(void *arg, const char *path, const char *query, egm_http_response_t *resp)
{
    (void)query;
    if (strcmp(path, "/health") == 0)
        serve_health(arg, resp);
    else if (strcmp(path, "/metrics") == 0)
        serve_metrics(arg, resp);
    else {
        resp->status = 404;
        egm__http_printf(resp, "not found: %s (try /health or /metrics)\n", path);
    }
}

static int plan_only(egm_cli_t *cli)
{
    egm_egm_plan_t *plan = NULL;
    egm_status_t status = egm__capacity_plan(cli->config, &plan);
    if (status != EGM_OK) {
        /* The refusal of a memfd plan names --plan-only itself; the other errors
         * are those of a provider run without it. */
        egm__cli_error("provider", status);
        return status == EGM_ERR_CONFIG ? EGM_EXIT_USAGE : EGM_EXIT_FAIL;
    }
    size_t need = egm__egm_plan_format(plan, NULL, 0) + 1;
    char *text = egm_malloc(need, "provider.plan");
    if (text != NULL) {
        egm__egm_plan_format(plan, text, need);
        fputs(text, stdout);
        printf("nothing allocated (--plan-only)\n");
    }
    egm_free(text);
    egm__egm_plan_free(plan);
    return text != NULL ? EGM_EXIT_OK : EGM_EXIT_FAIL;
}

/* Withdraws the capacity; a failed step is retried a few times (health says
 * cleanup_pending meanwhile). Another signal stops the retries. */
static int close_client(egm_client_t *client, const sigset_t *set)
{
    for (int attempt = 1;; attempt++) {
        if (egm_client_close(client) == EGM_OK)
            return EGM_EXIT_OK;
        if (attempt == CLOSE_ATTEMPTS) {
            fprintf(stderr,
                    "egmstore: error: provider: teardown incomplete after %d attempts: %s\n",
                    attempt, egm_last_error());
            return EGM_EXIT_FAIL;
        }
        egm_warn("teardown attempt %d of %d failed: %s; retrying in 1 s", attempt, CLOSE_ATTEMPTS,
                 egm_last_error());
        struct timespec wait = {1, 0};
        if (sigtimedwait(set, NULL, &wait) > 0) {
            fprintf(stderr,
                    "egmstore: error: provider: teardown abandoned on a second signal: "
                    "%s\n",
                    egm_last_error());
            return EGM_EXIT_FAIL;
        }
    }
}

static egm_status_t start_http(egm_cli_t *cli, provider_state_t *ps, egm_http_server_t **srv_p)
{
    int64_t port = egm__config_settings(cli->config)->provider_http_port;
    *srv_p = NULL;
    if (port < 0)
        return EGM_OK;
    egm_http_params_t params = {.address = egm__config_settings(cli->config)->listen_address,
                                .port = (uint16_t)port,
                                .fn = on_http,
                                .arg = ps};
    egm_status_t status = egm__http_start(&params, srv_p);
    if (status != EGM_OK)
        return egm__set_error(status, "provider_http_port: %s", egm_last_error());
    return EGM_OK;
}

int egm__cmd_provider(egm_cli_t *cli)
{
    provider_state_t ps = {.lock = PTHREAD_MUTEX_INITIALIZER};
    egm_http_server_t *http = NULL;
    egm_client_t *client;
    egm_status_t status;
    sigset_t set;
    int sig = 0, rc;

    if (cli->argc != 0) {
        fprintf(stderr, "egmstore: error: provider takes no arguments (got \"%s\")\n",
                cli->argv[0]);
        return EGM_EXIT_USAGE;
    }
    if (!EGM_CONFIG_IS_SET(cli->config, global_segment_size))
        egm_config_set(cli->config, "global_segment_size", PROVIDER_DEFAULT_CAPACITY);
    if (egm__config_settings(cli->config)->global_segment_size == 0) {
        fprintf(stderr, "egmstore: error: global_segment_size: a provider needs a capacity > 0 "
                        "(e.g. --global-segment-size 1GiB)\n");
        return EGM_EXIT_USAGE;
    }
    if ((status = egm__capacity_check_config(cli->config)) != EGM_OK) {
        egm__cli_error("provider", status);
        return EGM_EXIT_USAGE;
    }
    if (cli->plan_only)
        return plan_only(cli);

    /* Signals are taken by sigwait below; threads started from here inherit the mask. */
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    /* /health answers not_initialized while the pool is set up. */
    if ((status = start_http(cli, &ps, &http)) != EGM_OK) {
        egm__cli_error("provider", status);
        return EGM_EXIT_FAIL;
    }
    status = egm_client_create(cli->config, &client);
    if (status != EGM_OK) {
        egm__cli_error("provider", status);
        egm__http_stop(http);
        return EGM_EXIT_FAIL;
    }
    pthread_mutex_lock(&ps.lock);
    ps.client = client;
    pthread_mutex_unlock(&ps.lock);

    char size_text[32], http_text[32] = "off";
    if (http != NULL)
        snprintf(http_text, sizeof(http_text), "%u", (unsigned)egm__http_port(http));
    printf("egmstore provider ready: %zu segments, %s%s, master %s, http %s\n",
           client->capacity.count,
           egm__format_size(client->capacity.capacity, size_text, sizeof(size_text)),
           client->capacity.egm ? " EGM pool" : "",
           egm__config_settings(cli->config)->master_server_addr, http_text);
    fflush(stdout);
    sigwait(&set, &sig);
    egm_info("signal %d: unmounting and stopping", sig);
    rc = close_client(client, &set);
    pthread_mutex_lock(&ps.lock);
    ps.client = NULL;
    pthread_mutex_unlock(&ps.lock);
    egm__http_stop(http);
    egm_client_destroy(client);
    return rc;
}
