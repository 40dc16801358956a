/* Command-line parsing shared by every subcommand. */
#include <stdlib.h>
#include <string.h>
#include "common/alloc.h"
#include "common/config_int.h"
#include "common/log.h"
#include "tools/cli.h"

void egm__cli_error(const char *what, egm_status_t status)
{
    const char *detail = egm_last_error();
    if (detail != NULL && detail[0] != '\0')
        fprintf(stderr, "egmstore: error: %s: %s\n", what, detail);
    else
        fprintf(stderr, "egmstore: error: %s: %s\n", what, egm_status_string(status));
}

static void print_key(FILE *out, const egm_config_key_t *key)
{
    char flag[96];
    size_t j = 0;
    for (const char *p = key->name; *p && j + 1 < sizeof(flag); p++)
        flag[j++] = *p == '_' ? '-' : *p;
    flag[j] = '\0';
    fprintf(out, "  --%-24s %s (default: %s)\n", flag, key->help, key->def[0] ? key->def : "\"\"");
}

void egm__cli_print_keys(FILE *out, unsigned roles, unsigned exclude)
{
    size_t n;
    const egm_config_key_t *keys = egm__config_keys(&n);
    fprintf(out, "Configuration keys (as --key-with-dashes VALUE, EGMSTORE_KEY, or key = value "
                 "in --config FILE):\n");
    for (size_t i = 0; i < n; i++)
        if ((keys[i].roles & roles) != 0 && (keys[i].roles & exclude) == 0)
            print_key(out, &keys[i]);
}

/* A flag that needs a value: "--key=value" or "--key value". */
static int flag_value(int argc, char **argv, int *i, const char *arg, char *name, size_t name_len,
                      const char **value_p)
{
    const char *eq = strchr(arg, '=');
    if (eq != NULL) {
        size_t len = (size_t)(eq - arg);
        if (len >= name_len)
            len = name_len - 1;
        memcpy(name, arg, len);
        name[len] = '\0';
        *value_p = eq + 1;
        return 0;
    }
    snprintf(name, name_len, "%s", arg);
    if (*i + 1 >= argc) {
        fprintf(stderr, "egmstore: error: %s needs a value\n", arg);
        return -1;
    }
    *value_p = argv[++*i];
    return 0;
}

int egm__cli_parse(int argc, char **argv, unsigned roles, egm_cli_t *cli)
{
    const char *config_file = NULL;
    const char **flags = NULL, **values = NULL;
    int n_flags = 0;
    egm_status_t status;
    int rc = EGM_EXIT_USAGE;

    memset(cli, 0, sizeof(*cli));
    cli->roles = roles;
    cli->argv = egm_calloc((size_t)argc + 1, sizeof(char *), "cli.argv");
    flags = egm_calloc((size_t)argc + 1, sizeof(char *), "cli.flags");
    values = egm_calloc((size_t)argc + 1, sizeof(char *), "cli.flags");
    char(*names)[96] = egm_calloc((size_t)argc + 1, sizeof(*names), "cli.flags");
    if (cli->argv == NULL || flags == NULL || values == NULL || names == NULL ||
        egm_config_create(&cli->config) != EGM_OK) {
        fprintf(stderr, "egmstore: error: out of memory\n");
        rc = EGM_EXIT_FAIL;
        goto out;
    }

    for (int i = 0; i < argc; i++) {
        const char *arg = argv[i];
        if (strcmp(arg, "--") == 0) {
            while (++i < argc)
                cli->argv[cli->argc++] = argv[i];
            break;
        }
        if (strcmp(arg, "-h") == 0 || strcmp(arg, "--help") == 0) {
            cli->help = 1;
            continue;
        }
        if (strcmp(arg, "--force") == 0) {
            cli->force = 1;
            continue;
        }
        if (strcmp(arg, "--plan-only") == 0) {
            cli->plan_only = 1;
            continue;
        }
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
            cli->argv[cli->argc++] = argv[i]; /* positional, "-" included */
            continue;
        }
        const char *value;
        if (flag_value(argc, argv, &i, arg, names[n_flags], sizeof(names[0]), &value) != 0)
            goto out;
        if (strcmp(names[n_flags], "--config") == 0) {
            config_file = value;
            continue;
        }
        flags[n_flags] =
            strcmp(names[n_flags], "--master") == 0 ? "--master-server-addr" : names[n_flags];
        values[n_flags++] = value;
    }

    if (config_file != NULL) {
        status = egm__config_load_file_as(cli->config, config_file, roles);
        if (status != EGM_OK) {
            egm__cli_error("--config", status);
            goto out;
        }
    }
    status = egm_config_load_env(cli->config);
    if (status != EGM_OK) {
        egm__cli_error("environment", status);
        goto out;
    }
    for (int k = 0; k < n_flags; k++) {
        status = egm__config_set_flag(cli->config, flags[k], values[k]);
        if (status != EGM_OK) {
            egm__cli_error(flags[k], status);
            goto out;
        }
    }
    egm_log_level_t level;
    if (egm__log_parse_level(egm_config_get(cli->config, "log_level"), &level) == EGM_OK)
        egm__log_set_level(level);
    rc = EGM_EXIT_OK;
out:
    egm_free(flags);
    egm_free(values);
    egm_free(names);
    if (rc != EGM_EXIT_OK)
        egm__cli_cleanup(cli);
    return rc;
}

void egm__cli_cleanup(egm_cli_t *cli)
{
    egm_config_destroy(cli->config);
    egm_free(cli->argv);
    memset(cli, 0, sizeof(*cli));
}
