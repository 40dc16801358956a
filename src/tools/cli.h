/* Shared command-line handling of the `egmstore` subcommands. */
#ifndef EGM_TOOLS_CLI_H
#define EGM_TOOLS_CLI_H

#include <stdio.h>
#include <egmstore/config.h>
#include <egmstore/status.h>

#define EGM_EXIT_OK 0
#define EGM_EXIT_FAIL 1
#define EGM_EXIT_USAGE 2

/* A command's own flags, besides the configuration keys (command_t in
 * main.c): any other command refuses them as unknown flags. */
#define EGM_CLI_FORCE (1u << 0)     /* --force (rm) */
#define EGM_CLI_PLAN_ONLY (1u << 1) /* --plan-only (provider) */

typedef struct {
    egm_config_t *config;
    int argc; /* positional arguments after the subcommand */
    char **argv;
    int help;
    int force;      /* --force (rm) */
    int plan_only;  /* --plan-only (provider) */
    unsigned roles; /* EGM_ROLE_* this command runs as: the config file sections it reads */
} egm_cli_t;

/* Builds the config: defaults < --config FILE (its sections of `roles`,
 * EGM_ROLE_*) < EGMSTORE_* env < flags. Flags:
 * --config FILE, --master HOST:PORT, --help, the command's `own` flags
 * (EGM_CLI_*), and --<key-with-dashes> VALUE (or --key=VALUE) for every
 * configuration key; any other --flag is an error naming `command` ("put",
 * "bench data") for its --help. Keys flagged `exclude`
 * (EGM_KEY_*) do not affect the command: they are reset to their defaults (for
 * EGM_KEY_CAPACITY: no contribution), with one note on stderr naming those that
 * were given and where. Positional arguments are kept in order. Prints a
 * one-line error and returns non-zero on bad input. */
int egm__cli_parse(int argc, char **argv, const char *command, unsigned roles, unsigned exclude,
                   unsigned own, egm_cli_t *cli);
void egm__cli_cleanup(egm_cli_t *cli);
/* "egmstore: error: <what>: <detail>" on stderr, control characters and
 * invalid UTF-8 escaped (details name keys and paths from outside). */
void egm__cli_error(const char *what, egm_status_t status);
/* The keys that affect a command run as `roles` (EGM_ROLE_*), less those
 * flagged `exclude` (EGM_KEY_*), in table order. */
void egm__cli_print_keys(FILE *out, unsigned roles, unsigned exclude);

/* Room for any key (EGM_KEY_MAX bytes) written by egm__cli_quote. */
#define EGM_CLI_QUOTE_MAX (4 * 4096 + 3)
/* A key, path or name from outside, for human output: as it is when it is
 * printable UTF-8 without spaces, quotes or backslashes; otherwise in double
 * quotes with C escapes: \n \t \r \" \\ and \xNN for the other control
 * bytes, DEL, invalid UTF-8 and invisible or line-breaking code points (C1
 * controls, bidi and zero-width format characters, U+2028/9), so that a key
 * can neither move the terminal's cursor nor pass for another. Truncated with
 * "..." to fit len. Returns buf. */
const char *egm__cli_quote(const char *s, char *buf, size_t len);
/* The same escapes without the quotes, for a message around keys. */
const char *egm__cli_escape(const char *s, char *buf, size_t len);

int egm__cmd_master(egm_cli_t *cli);
int egm__cmd_provider(egm_cli_t *cli);
int egm__cmd_put(egm_cli_t *cli);
int egm__cmd_get(egm_cli_t *cli);
int egm__cmd_exist(egm_cli_t *cli);
int egm__cmd_rm(egm_cli_t *cli);
int egm__cmd_ls(egm_cli_t *cli);
/* ls with an etcd:// master address: prints the HA masters and their roles
 * (tools/masters.c). Errors: the etcd client's (ha/etcd.h). */
egm_status_t egm__cli_print_masters(const egm_config_t *config);
int egm__cmd_stat(egm_cli_t *cli);
int egm__cmd_demo(egm_cli_t *cli);

#endif
