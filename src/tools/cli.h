/* Shared command-line handling of the `egmstore` subcommands. */
#ifndef EGM_TOOLS_CLI_H
#define EGM_TOOLS_CLI_H

#include <stdio.h>
#include <egmstore/config.h>
#include <egmstore/status.h>

#define EGM_EXIT_OK 0
#define EGM_EXIT_FAIL 1
#define EGM_EXIT_USAGE 2

typedef struct {
    egm_config_t *config;
    int argc; /* positional arguments after the subcommand */
    char **argv;
    int help;
    int force;     /* --force (rm) */
    int plan_only; /* --plan-only (provider) */
} egm_cli_t;

/* Builds the config: defaults < --config FILE < EGMSTORE_* env < flags. Flags:
 * --config FILE, --master HOST:PORT, --help, and --<key-with-dashes> VALUE (or
 * --key=VALUE) for every configuration key. Positional arguments are kept in
 * order. Prints a one-line error and returns non-zero on bad input. */
int egm__cli_parse(int argc, char **argv, egm_cli_t *cli);
void egm__cli_cleanup(egm_cli_t *cli);
/* "egmstore: error: <what>: <detail>" on stderr. */
void egm__cli_error(const char *what, egm_status_t status);
void egm__cli_print_keys(FILE *out);
/* Only the keys named in `names` (NULL-terminated), in that order, under `title`. */
void egm__cli_print_keys_of(FILE *out, const char *title, const char *const *names);
/* The keys `egmstore master` reads (its --help lists them). */
extern const char *const egm__master_keys[];

int egm__cmd_master(egm_cli_t *cli);
int egm__cmd_provider(egm_cli_t *cli);
int egm__cmd_put(egm_cli_t *cli);
int egm__cmd_get(egm_cli_t *cli);
int egm__cmd_exist(egm_cli_t *cli);
int egm__cmd_rm(egm_cli_t *cli);
int egm__cmd_ls(egm_cli_t *cli);
int egm__cmd_stat(egm_cli_t *cli);
int egm__cmd_demo(egm_cli_t *cli);
/* `egmstore bench ...`: parses its own flags, then the common ones. */
int egm__cmd_bench(int argc, char **argv);
/* `egmstore bench data ...` (argv after "data"; bench_data.c). */
int egm__cmd_bench_data(int argc, char **argv);

#endif
