/* `egmstore master`: the master daemon. */
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <egmstore/egmstore.h>
#include "client/client_int.h"
#include "common/config_int.h"
#include "common/log.h"
#include "common/sock.h"
#include "master/master.h"
#include "repair/worker.h"
#include "tools/cli.h"

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

    /* The ready line stays last-word-is-the-address (scripts split it); the
     * admin HTTP line follows it. */
    char where[300];
    printf("egmstore master listening on %s\n",
           egm__sock_format_hostport(egm__config_settings(cli->config)->listen_address,
                                     egm__master_port(master), where, sizeof(where)));
    if (egm__master_http_port(master) != 0)
        printf("egmstore master admin http on %s\n",
               egm__sock_format_hostport(egm__config_settings(cli->config)->listen_address,
                                         egm__master_http_port(master), where, sizeof(where)));
    else
        printf("egmstore master admin http off\n");
    fflush(stdout);
    /* Re-replication's copier: a client of this master, in this process. */
    egm_repair_worker_t *repair = NULL;
    uint64_t rate = egm__config_settings(cli->config)->rereplication_bytes_per_sec;
    if (rate > 0) {
        egm_repair_worker_params_t rp = {
            .master_config = cli->config, .port = egm__master_port(master), .bytes_per_sec = rate};
        status = egm__repair_worker_start(&rp, &repair);
        if (status != EGM_OK) {
            egm__cli_error("master", status);
            egm__master_destroy(master);
            return EGM_EXIT_FAIL;
        }
    } else {
        egm_info("master: re-replication off (rereplication_bytes_per_sec 0)");
    }
    status = egm__master_run(master);
    egm__repair_worker_stop(repair);
    running_master = NULL;
    int deposed = egm__master_deposed(master);
    egm__master_destroy(master);
    if (status != EGM_OK) {
        egm__cli_error("master", status);
        return EGM_EXIT_FAIL;
    }
    if (deposed) {
        fprintf(stderr, "egmstore: master: lost the leadership (enable_ha): exiting, to be "
                        "restarted as a standby\n");
        return EGM_EXIT_FAIL;
    }
    egm_info("master stopped");
    return EGM_EXIT_OK;
}
