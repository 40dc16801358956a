/* The `egmstore` command: daemons, object commands and the demo; `egmstore bench` runs the
 * egm-bench executable beside it (bench/c/). */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <egmstore/egmstore.h>
#include "common/alloc.h"
#include "common/config_int.h"
#include "common/log.h"
#include "common/process.h"
#include "tools/cli.h"

typedef struct {
    const char *name;
    int (*run)(egm_cli_t *cli);
    const char *usage;
    unsigned roles;    /* EGM_ROLE_*: the config sections it reads, the keys its --help lists */
    unsigned exclude;  /* EGM_KEY_* flags of keys that do not affect it */
    unsigned own;      /* EGM_CLI_*: its own flags; the other commands refuse them */
    const char *flags; /* its own flags, explained in its --help (NULL: none) */
} command_t;

/* One-shot commands exit right after their call: they read the [client]
 * section and contribute no capacity. */
#define ONE_SHOT EGM_ROLE_CLIENT, EGM_KEY_CAPACITY

/* What every one-shot command's --help says about contributing memory. */
#define ONE_SHOT_NOTE                                                                              \
    "It contributes no memory: global_segment_size and the other capacity keys are ignored\n"      \
    "(a note on stderr says so when one is given), so that a process which exits after its\n"      \
    "call never holds an object it reported stored.\n"

static const command_t commands[] = {
    {"master", egm__cmd_master,
     "master [--port N] [--http-port N] [--listen-address ADDR]\n"
     "                                             run the master (admin HTTP on 9003)",
     EGM_ROLE_MASTER, 0, 0, NULL},
    {"provider", egm__cmd_provider,
     "provider [--global-segment-size SIZE] [--plan-only]\n"
     "                                             contribute capacity (host memory, or the EGM\n"
     "                                             pool with --enable-egm-store-pool true)",
     EGM_ROLE_PROVIDER, 0, EGM_CLI_PLAN_ONLY,
     "  --plan-only                print the pool the configuration asks for (NUMA nodes, "
     "granularity,\n"
     "                             each node's share, chunks) and exit 0 without allocating "
     "memory\n"
     "                             or contacting the master; for CUDA pools (--pool-memory\n"
     "                             host_numa|device, or --enable-egm-store-pool true)\n"},
    {"put", egm__cmd_put, "put KEY FILE|-                             store a file (- = stdin)",
     ONE_SHOT, 0, ONE_SHOT_NOTE},
    {"get", egm__cmd_get,
     "get KEY FILE|-                             fetch into a file (- = stdout)", ONE_SHOT, 0,
     ONE_SHOT_NOTE},
    {"exist", egm__cmd_exist, "exist KEY                                  exit 0 if the key exists",
     ONE_SHOT, 0, ONE_SHOT_NOTE},
    {"rm", egm__cmd_rm, "rm KEY [--force]                           remove an object", ONE_SHOT,
     EGM_CLI_FORCE,
     "  --force                    remove it even while a reader holds a read lease on it or its\n"
     "                             put is unfinished (without it: exit 1, \"object is under a "
     "read\n"
     "                             lease\" or \"still being written\"); a reader still copying "
     "it\n"
     "                             may then fail\n\n" ONE_SHOT_NOTE},
    {"ls", egm__cmd_ls, "ls                                         segments and usage", ONE_SHOT,
     0, ONE_SHOT_NOTE},
    {"stat", egm__cmd_stat,
     "stat KEY                                   an object's size, state, replicas, lease (read "
     "only)",
     ONE_SHOT, 0, ONE_SHOT_NOTE},
    {"demo", egm__cmd_demo,
     "demo                                       embedded master + provider, put/get over shm "
     "and tcp",
     EGM_ROLE_ALL, 0, 0, NULL},
    {"bench", NULL,
     "bench meta [--clients 1,8,64] [--seconds 1] [--out FILE]  master metadata round trips\n"
     "  bench data [--workload single,batch,mixed,full] [--protocol shm,tcp] [--out FILE]\n"
     "                                             put/get workloads with their copy ceiling",
     EGM_ROLE_ALL, 0, 0, NULL},
};

static void usage(FILE *out)
{
    fprintf(out,
            "egmstore %s: a KV-cache block store\n\nUsage: egmstore COMMAND [ARGS] "
            "[--master HOST:PORT] [--config FILE] [--log-level LEVEL] [--KEY VALUE]...\n\n"
            "Commands:\n",
            EGMSTORE_VERSION);
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        fprintf(out, "  %s\n", commands[i].usage);
    fprintf(out, "\n");
    egm__cli_print_keys(out, EGM_ROLE_ALL, 0);
}

/* `egmstore bench ARGS`: the benchmarks are the egm-bench executable in this one's folder
 * (bench/c/), run with ARGS; returns only when it cannot be started. */
static int run_bench(char **args)
{
    char exe[4096];
    egm_status_t status = egm__process_sibling_exe("egm-bench", exe, sizeof(exe));
    if (status != EGM_OK) {
        egm__cli_error("bench", status);
        return EGM_EXIT_FAIL;
    }
    size_t n = 0;
    while (args[n] != NULL)
        n++;
    char **argv = egm_calloc(n + 2, sizeof(*argv), "bench.argv");
    if (argv == NULL) {
        egm__cli_error("bench", EGM_ERR_NO_MEMORY);
        return EGM_EXIT_FAIL;
    }
    argv[0] = exe;
    memcpy(argv + 1, args, n * sizeof(*argv));
    execv(exe, argv);
    fprintf(stderr,
            "egmstore: error: bench: cannot run %s: %s (the benchmarks are built as "
            "egm-bench next to egmstore)\n",
            exe, strerror(errno));
    egm_free(argv);
    return EGM_EXIT_FAIL;
}

/* rc, or a failure when what the command wrote to standard output did not all
 * get there (a full disk, a closed pipe): `egmstore ls > file` must not say
 * it worked when the listing was cut. */
static int stdout_checked(int rc)
{
    if (fflush(stdout) == 0 && !ferror(stdout))
        return rc;
    fprintf(stderr, "egmstore: error: standard output: %s\n",
            errno != 0 ? strerror(errno) : "write error");
    return rc == EGM_EXIT_OK ? EGM_EXIT_FAIL : rc;
}

int main(int argc, char **argv)
{
    egm__log_set_component("egmstore");
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(argc < 2 ? stderr : stdout);
        return stdout_checked(argc < 2 ? EGM_EXIT_USAGE : EGM_EXIT_OK);
    }
    if (strcmp(argv[1], "bench") == 0)
        return run_bench(argv + 2);
    if (strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0) {
        printf("egmstore %s\n", EGMSTORE_VERSION);
        return stdout_checked(EGM_EXIT_OK);
    }
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++) {
        if (strcmp(argv[1], commands[i].name) != 0)
            continue;
        egm_cli_t cli;
        int rc = egm__cli_parse(argc - 2, argv + 2, commands[i].name, commands[i].roles,
                                commands[i].exclude, commands[i].own, &cli);
        if (rc != EGM_EXIT_OK)
            return rc;
        if (cli.help) {
            printf("Usage: egmstore %s\n\n", commands[i].usage);
            if (commands[i].flags != NULL)
                printf("%s\n", commands[i].flags);
            egm__cli_print_keys(stdout, commands[i].roles, commands[i].exclude);
            egm__cli_cleanup(&cli);
            return stdout_checked(EGM_EXIT_OK);
        }
        egm__log_set_component(commands[i].name);
        rc = commands[i].run(&cli);
        egm__cli_cleanup(&cli);
        return stdout_checked(rc);
    }
    fprintf(stderr, "egmstore: error: unknown command \"%s\" (try egmstore --help)\n", argv[1]);
    return EGM_EXIT_USAGE;
}
