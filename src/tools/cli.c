/* Command-line parsing shared by every subcommand, and the escaping of keys
 * in human output. */
#include <ctype.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "common/alloc.h"
#include "common/config_int.h"
#include "common/log.h"
#include "common/utf8.h"
#include "tools/cli.h"

/* ---- escaping of keys and names in human output ---------------------------- */

/* Code points that print nothing or break the line: C1 controls, soft hyphen,
 * zero-width and bidi format characters, line and paragraph separators, BOM,
 * interlinear annotations. */
static int invisible(uint32_t cp)
{
    return cp <= 0x9f || cp == 0xad || (cp >= 0x200b && cp <= 0x200f) ||
           (cp >= 0x2028 && cp <= 0x202e) || (cp >= 0x2060 && cp <= 0x206f) || cp == 0xfeff ||
           (cp >= 0xfff9 && cp <= 0xfffb);
}

typedef struct {
    char *buf;
    size_t len, at;
    int full;
} text_out_t;

/* Keeps room for "...", a closing quote and the NUL. */
static void emit(text_out_t *o, const char *p, size_t n)
{
    if (o->full || o->at + n + 5 > o->len) {
        o->full = 1;
        return;
    }
    memcpy(o->buf + o->at, p, n);
    o->at += n;
}

static const char *escape_text(const char *s, int quote, char *buf, size_t len)
{
    static const char hex[] = "0123456789abcdef";
    text_out_t o = {.buf = buf, .len = len};
    const unsigned char *p = (const unsigned char *)(s != NULL ? s : "");
    const unsigned char *end = p + strlen((const char *)p);

    if (len < 8) { /* too small to say anything useful */
        if (len > 0)
            buf[0] = '\0';
        return buf;
    }
    if (quote)
        emit(&o, "\"", 1);
    while (*p != '\0') {
        uint32_t cp;
        size_t n = *p >= 0x80 ? egm__utf8_seq(p, (size_t)(end - p), &cp) : 0;
        if (n > 0 && !invisible(cp)) {
            emit(&o, (const char *)p, n);
            p += n;
            continue;
        }
        for (size_t i = 0; i < (n > 0 ? n : 1); i++, p++) {
            unsigned c = *p;
            char esc[4] = {'\\', 0, 0, 0};
            size_t k = 2;
            if (c == '\n' || c == '\t' || c == '\r')
                esc[1] = c == '\n' ? 'n' : c == '\t' ? 't' : 'r';
            else if (quote && (c == '"' || c == '\\'))
                esc[1] = (char)c;
            else if (c < 0x20 || c >= 0x7f) {
                esc[1] = 'x';
                esc[2] = hex[c >> 4];
                esc[3] = hex[c & 0xf];
                k = 4;
            } else {
                esc[0] = (char)c;
                k = 1;
            }
            emit(&o, esc, k);
        }
    }
    if (o.full) {
        memcpy(buf + o.at, "...", 3);
        o.at += 3;
    }
    if (quote)
        buf[o.at++] = '"';
    buf[o.at] = '\0';
    return buf;
}

/* Whether s reads unambiguously as it is: non-empty printable ASCII or
 * visible UTF-8, without spaces, quotes or backslashes. */
static int plain(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    if (s == NULL || *p == '\0')
        return 0;
    const unsigned char *end = p + strlen(s);
    while (*p != '\0') {
        uint32_t cp;
        size_t n = *p >= 0x80 ? egm__utf8_seq(p, (size_t)(end - p), &cp) : 0;
        if (n > 0 && !invisible(cp)) {
            p += n;
            continue;
        }
        if (*p <= 0x20 || *p >= 0x7f || *p == '"' || *p == '\\')
            return 0;
        p++;
    }
    return 1;
}

const char *egm__cli_quote(const char *s, char *buf, size_t len)
{
    if (plain(s) && strlen(s) < len) {
        memcpy(buf, s, strlen(s) + 1);
        return buf;
    }
    return escape_text(s, !plain(s), buf, len);
}

const char *egm__cli_escape(const char *s, char *buf, size_t len)
{
    return escape_text(s, 0, buf, len);
}

void egm__cli_error(const char *what, egm_status_t status)
{
    char what_text[512], detail_text[EGM_CLI_QUOTE_MAX];
    const char *detail = egm_last_error();
    if (detail == NULL || detail[0] == '\0')
        detail = egm_status_string(status);
    fprintf(stderr, "egmstore: error: %s: %s\n",
            egm__cli_escape(what, what_text, sizeof(what_text)),
            egm__cli_escape(detail, detail_text, sizeof(detail_text)));
}

static void print_key(FILE *out, const egm_config_key_t *key)
{
    char flag[96];
    size_t j = 0;
    for (const char *p = key->name; *p && j + 1 < sizeof(flag); p++)
        flag[j++] = *p == '_' ? '-' : *p;
    flag[j] = '\0';
    char range[256];
    egm__config_range_text(key, range, sizeof(range));
    fprintf(out, "  --%-24s %s (default: %s)%s%s%s\n", flag, key->help,
            key->def[0] ? key->def : "\"\"", range[0] ? " [" : "", range, range[0] ? "]" : "");
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

/* --config, --master or --<a configuration key>, with or without "=VALUE". */
static int known_flag(const char *arg)
{
    const char *eq = strchr(arg, '=');
    size_t n = eq != NULL ? (size_t)(eq - arg) : strlen(arg);
    char key[128];

    if ((n == 8 && strncmp(arg, "--config", 8) == 0) ||
        (n == 8 && strncmp(arg, "--master", 8) == 0))
        return 1;
    if (n <= 2 || n - 2 >= sizeof(key))
        return 0;
    for (size_t i = 2; i < n; i++)
        key[i - 2] = arg[i] == '-' ? '_' : arg[i];
    key[n - 2] = '\0';
    return egm__config_find_key(key) != NULL;
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

/* "--global-segment-size" or "--global_segment_size" names global_segment_size. */
static int flag_names(const char *flag, const char *key)
{
    if (strncmp(flag, "--", 2) == 0)
        flag += 2;
    for (; *flag != '\0' && *key != '\0'; flag++, key++)
        if ((*flag == '-' ? '_' : *flag) != *key)
            return 0;
    return *flag == '\0' && *key == '\0';
}

/* Where the value of `key` came from: the last flag naming it, else its
 * EGMSTORE_ variable (matched as egm_config_load_env does), else the file. */
static const char *key_source(const char *key, const char *const *flags, int n_flags,
                              const char *config_file, char *buf, size_t len)
{
    extern char **environ;
    static const char prefix[] = "EGMSTORE_";
    char file_text[512];

    for (int k = n_flags; k-- > 0;)
        if (flag_names(flags[k], key)) {
            snprintf(buf, len, "%s", flags[k]);
            return buf;
        }
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        const char *name = *e + sizeof(prefix) - 1, *eq = strchr(*e, '=');
        size_t n = strlen(key);
        if (strncmp(*e, prefix, sizeof(prefix) - 1) != 0 || eq == NULL ||
            (size_t)(eq - name) != n || strncasecmp(name, key, n) != 0)
            continue;
        snprintf(buf, len, "%.*s", (int)(eq - *e), *e);
        return buf;
    }
    snprintf(buf, len, "the config file %s",
             egm__cli_quote(config_file, file_text, sizeof(file_text)));
    return buf;
}

/* Resets the keys flagged `exclude` to their defaults: the command's config is
 * rebuilt from the keys that affect it (set ones stay set, the others are
 * untouched defaults). Those given a value other than the default are named
 * once on stderr, with where they came from. -1 when out of memory. */
static int drop_excluded(egm_cli_t *cli, const char *command, unsigned exclude,
                         const char *config_file, const char *const *flags, int n_flags)
{
    size_t n;
    const egm_config_key_t *keys = egm__config_keys(&n);
    egm_config_t *kept = NULL;
    int noted = 0;

    if (egm_config_create(&kept) != EGM_OK)
        return -1;
    for (size_t i = 0; i < n; i++) {
        const char *name = keys[i].name, *value = egm_config_get(cli->config, name);
        if (!egm__config_is_set(cli->config, name))
            continue;
        if ((keys[i].roles & exclude) == 0) {
            if (egm_config_set(kept, name, value) != EGM_OK) { /* was valid: only out of memory */
                egm_config_destroy(kept);
                return -1;
            }
            continue;
        }
        /* Given its default, however written (1GiB, 1024MiB): not worth a note.
         * `kept` never gets an excluded key, so it holds the default. */
        if (cli->help || egm__config_field_equal(cli->config, kept, &keys[i]))
            continue;
        char source[600];
        fprintf(stderr, "%s%s (from %s)", noted++ ? ", " : "egmstore: note: ", name,
                key_source(name, flags, n_flags, config_file, source, sizeof(source)));
    }
    if (noted > 0) {
        fprintf(stderr, " %s ignored: ", noted > 1 ? "are" : "is");
        if (exclude & EGM_KEY_CAPACITY)
            fprintf(stderr, "egmstore %s exits after its call, so it contributes no memory\n",
                    command);
        else
            fprintf(stderr, "%s does not affect egmstore %s\n", noted > 1 ? "they" : "it", command);
    }
    egm_config_destroy(cli->config);
    cli->config = kept;
    return 0;
}

int egm__cli_parse(int argc, char **argv, const char *command, unsigned roles, unsigned exclude,
                   unsigned own, egm_cli_t *cli)
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
        /* A command's own flags; any other command finds no key by their name below. */
        if ((own & EGM_CLI_FORCE) != 0 && strcmp(arg, "--force") == 0) {
            cli->force = 1;
            continue;
        }
        if ((own & EGM_CLI_PLAN_ONLY) != 0 && strcmp(arg, "--plan-only") == 0) {
            cli->plan_only = 1;
            continue;
        }
        if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0') {
            cli->argv[cli->argc++] = argv[i]; /* positional, "-" included */
            continue;
        }
        if (!known_flag(arg)) {
            char flag[256], text[1024];
            snprintf(flag, sizeof(flag), "%.*s",
                     (int)(strchr(arg, '=') ? (size_t)(strchr(arg, '=') - arg) : strlen(arg)), arg);
            fprintf(stderr,
                    "egmstore: error: unknown flag %s (egmstore %s --help lists the flags)\n",
                    egm__cli_quote(flag, text, sizeof(text)), command);
            goto out;
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
            egm__cli_error(names[k], status);
            goto out;
        }
    }
    if (exclude != 0 && drop_excluded(cli, command, exclude, config_file, flags, n_flags) != 0) {
        fprintf(stderr, "egmstore: error: out of memory\n");
        rc = EGM_EXIT_FAIL;
        goto out;
    }
    egm__log_set_level(egm__config_settings(cli->config)->log_level);
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
