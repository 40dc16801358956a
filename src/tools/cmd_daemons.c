/* `egmstore master`: the master daemon. */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <egmstore/egmstore.h>
#include "client/client_int.h"
#include "common/config_int.h"
#include "common/log.h"
#include "common/sock.h"
#include "master/master.h"
#include "repair/pool_reader.h"
#include "repair/worker.h"
#include "tools/cli.h"

/* SIGINT and SIGTERM are blocked in every thread and taken by this one
 * (sigwait): it stops the re-replication worker first, while the master
 * still answers it (its client says goodbye instead of waiting out an RPC to
 * reactors that stopped), then the master. */
typedef struct {
    egm_master_t *master;
    egm_repair_worker_t *repair;
    sigset_t signals;
    atomic_int done; /* the master returned by itself: only end */
} stopper_t;

static void *stopper_main(void *arg)
{
    stopper_t *s = arg;
    int sig = 0;
    sigwait(&s->signals, &sig);
    if (atomic_load(&s->done))
        return NULL;
    egm_info("master: signal %d: stopping", sig);
    egm__repair_worker_stop(s->repair);
    s->repair = NULL;
    egm__master_stop(s->master);
    return NULL;
}

int egm__cmd_master(egm_cli_t *cli)
{
    egm_master_t *master;
    egm_status_t status;
    stopper_t stopper = {0};
    pthread_t stopper_thread;

    if (cli->argc != 0) {
        fprintf(stderr, "egmstore: error: master takes no arguments (got \"%s\")\n", cli->argv[0]);
        return EGM_EXIT_USAGE;
    }
    /* Before any thread starts (the master's HTTP server, the worker): they
     * inherit the mask. */
    sigemptyset(&stopper.signals);
    sigaddset(&stopper.signals, SIGINT);
    sigaddset(&stopper.signals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stopper.signals, NULL);
    signal(SIGPIPE, SIG_IGN);
    status = egm__master_create(cli->config, &master);
    if (status != EGM_OK) {
        egm__cli_error("master", status);
        return EGM_EXIT_FAIL;
    }
    stopper.master = master;
    /* enable_ha: a new leader reads its predecessor's slab logs in the pool. */
    egm_pool_reads_t *reads = NULL;
    if (egm__config_settings(cli->config)->enable_ha) {
        egm_pool_reader_t reader;
        status = egm__pool_reads_create(cli->config, &reads, &reader);
        if (status != EGM_OK) {
            egm__cli_error("master", status);
            egm__master_destroy(master);
            return EGM_EXIT_FAIL;
        }
        egm__master_set_pool_reader(master, &reader);
    }

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
    uint64_t rate = egm__config_settings(cli->config)->rereplication_bytes_per_sec;
    if (rate > 0) {
        egm_repair_worker_params_t rp = {
            .master_config = cli->config, .port = egm__master_port(master), .bytes_per_sec = rate};
        status = egm__repair_worker_start(&rp, &stopper.repair);
        if (status != EGM_OK) {
            egm__cli_error("master", status);
            egm__master_destroy(master);
            egm__pool_reads_destroy(reads);
            return EGM_EXIT_FAIL;
        }
    } else {
        egm_info("master: re-replication off (rereplication_bytes_per_sec 0)");
    }
    int rc = pthread_create(&stopper_thread, NULL, stopper_main, &stopper);
    if (rc != 0) {
        egm__repair_worker_stop(stopper.repair);
        egm__master_destroy(master);
        egm__pool_reads_destroy(reads);
        fprintf(stderr, "egmstore: error: master: starting the signal thread: %s\n", strerror(rc));
        return EGM_EXIT_FAIL;
    }
    status = egm__master_run(master);
    /* Returned by itself (an RPC thread failed, or leadership lost): end the
     * signal thread. */
    atomic_store(&stopper.done, 1);
    pthread_kill(stopper_thread, SIGTERM);
    pthread_join(stopper_thread, NULL);
    egm__repair_worker_stop(stopper.repair); /* NULL when the signal thread stopped it */
    int deposed = egm__master_deposed(master);
    egm__master_destroy(master);
    egm__pool_reads_destroy(reads);
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
