/* `egmstore master` and `egmstore provider`: the two daemons. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <egmstore/egmstore.h>
#include "client/client_int.h"
#include "common/config_int.h"
#include "common/log.h"
#include "master/master.h"
#include "tools/cli.h"

#define PROVIDER_DEFAULT_CAPACITY "256MiB"

static egm_master_t *running_master;

static void master_on_signal(int sig)
{
    (void)sig;
    if (running_master != NULL)
        egm__master_stop(running_master);
}

int egm__cmd_master(egm_cli_t *cli)
{
    egm_master_t *master;
    egm_status_t status;

    if (cli->argc != 0) {
        fprintf(stderr, "egmstore: error: master takes no arguments (got \"%s\")\n", cli->argv[0]);
        return EGM_EXIT_USAGE;
    }
    status = egm__master_create(cli->config, &master);
    if (status != EGM_OK) {
        egm__cli_error("master", status);
        return EGM_EXIT_FAIL;
    }
    running_master = master;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = master_on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    printf("egmstore master listening on %s:%u\n", egm_config_get(cli->config, "listen_address"),
           (unsigned)egm__master_port(master));
    fflush(stdout);
    status = egm__master_run(master);
    running_master = NULL;
    egm__master_destroy(master);
    if (status != EGM_OK) {
        egm__cli_error("master", status);
        return EGM_EXIT_FAIL;
    }
    egm_info("master stopped");
    return EGM_EXIT_OK;
}

int egm__cmd_provider(egm_cli_t *cli)
{
    egm_client_t *client;
    egm_status_t status;
    sigset_t set;
    int sig = 0;

    if (cli->argc != 0) {
        fprintf(stderr, "egmstore: error: provider takes no arguments (got \"%s\")\n",
                cli->argv[0]);
        return EGM_EXIT_USAGE;
    }
    if (!egm__config_is_set(cli->config, "global_segment_size"))
        egm_config_set(cli->config, "global_segment_size", PROVIDER_DEFAULT_CAPACITY);
    if (egm_config_get_size(cli->config, "global_segment_size") == 0) {
        fprintf(stderr, "egmstore: error: global_segment_size: a provider needs a capacity > 0 "
                        "(e.g. --global-segment-size 1GiB)\n");
        return EGM_EXIT_USAGE;
    }
    /* Signals are taken by sigwait below; threads started from here inherit the mask. */
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    status = egm_client_create(cli->config, &client);
    if (status != EGM_OK) {
        egm__cli_error("provider", status);
        return EGM_EXIT_FAIL;
    }
    char size_text[32];
    printf("egmstore provider ready: %zu segments, %s, master %s\n", client->capacity.count,
           egm__format_size(egm_config_get_size(cli->config, "global_segment_size"), size_text,
                            sizeof(size_text)),
           egm_config_get(cli->config, "master_server_addr"));
    fflush(stdout);
    sigwait(&set, &sig);
    egm_info("signal %d: unmounting and stopping", sig);
    egm_client_destroy(client);
    return EGM_EXIT_OK;
}
