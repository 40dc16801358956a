/* Configuration: one table of keys; values set from text (file, environment,
 * flags, API) are validated against it and kept as text. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include "common/alloc.h"
#include "common/config_int.h"
#include "common/log.h"
#include "common/sock.h"

#define CONFIG_FILE_MAX (1 << 20)

#define I64MAX INT64_MAX
/* Who reads a key (the roles of egm_config_key_t). */
#define M EGM_ROLE_MASTER
#define P EGM_ROLE_PROVIDER
#define C EGM_ROLE_CLIENT
#define ALL (M | P | C)
#define CAP EGM_KEY_CAPACITY

static const egm_config_key_t keys[] = {
    {"log_level", EGM_CFG_ENUM, "info", 0, 0, "error|warn|info|debug|trace", "log verbosity", ALL},
    {"master_server_addr", EGM_CFG_STRING, "127.0.0.1:50051", 0, 0, NULL,
     "master RPC address HOST:PORT (flag alias --master)", P | C},
    {"listen_address", EGM_CFG_STRING, "0.0.0.0", 0, 0, NULL, "master: bind address", M | P},
    {"port", EGM_CFG_INT, "50051", 0, 65535, NULL, "master: RPC port (0 = any free port)", M},
    {"http_port", EGM_CFG_INT, "9003", -1, 65535, NULL,
     "master: admin HTTP port on listen_address: /metrics, /health, /segments, "
     "/get_all_segments, /keys (-1 = off, 0 = any free port)",
     M},
    {"rpc_threads", EGM_CFG_INT, "4", 1, 64, NULL,
     "master: RPC threads, each with its own event loop; connections are spread over them", M},
    {"local_hostname", EGM_CFG_STRING, "", 0, 0, NULL,
     "address others use to reach this process's data server (\"\" = host name)", P | C | CAP},
    {"protocol", EGM_CFG_ENUM, "auto", 0, 0, "auto|nvlink|shm|tcp",
     "data transport: auto picks nvlink (GPU buffer, VMM segment) > shm (same host) > tcp; "
     "the others force one",
     P | C},
    {"global_segment_size", EGM_CFG_SIZE, "0", 0, I64MAX, NULL,
     "capacity this process contributes (provider: > 0; default 256MiB for egmstore provider)",
     P | C | CAP},
    {"max_mr_size", EGM_CFG_SIZE, "1GiB", 4096, I64MAX, NULL,
     "largest segment (chunk) the pool is cut into", P | C | CAP},
    {"allow_overcommit", EGM_CFG_BOOL, "false", 0, 0, NULL,
     "accept a global_segment_size above the memory this host (NUMA node) has available; the "
     "file descriptor limit is checked regardless",
     P | C | CAP},
    {"data_port", EGM_CFG_INT, "0", 0, 65535, NULL, "tcp data server port (0 = any free port)",
     P | C | CAP},
    {"replica_num", EGM_CFG_INT, "1", 1, 16, NULL, "default replicas per object", C},
    {"rpc_timeout_ms", EGM_CFG_INT, "5000", 1, 3600000, NULL, "deadline of one master RPC", P | C},
    {"rpc_spin_us", EGM_CFG_INT, "0", 0, 1000, NULL,
     "client: microseconds a master RPC polls for its reply before sleeping (0 = sleep at once)",
     C},
    {"connect_timeout_ms", EGM_CFG_INT, "3000", 1, 600000, NULL,
     "deadline of the TCP connect to the master", P | C},
    {"io_timeout_ms", EGM_CFG_INT, "10000", 1, 3600000, NULL,
     "deadline of one tcp data transfer request", P | C},
    {"ping_interval_ms", EGM_CFG_INT, "1000", 10, 60000, NULL, "client -> master ping period",
     P | C},
    {"default_kv_lease_ttl", EGM_CFG_INT, "10000", 1, 86400000, NULL,
     "master: read lease granted by Get/Exist, in ms", M},
    {"client_ttl", EGM_CFG_INT, "10", 1, 3600, NULL,
     "master: a client silent this many seconds is expired and its segments unmounted", M},
    {"default_kv_soft_pin_ttl", EGM_CFG_INT, "1800000", 1, 86400000, NULL,
     "master: soft pin (ms) of objects put with_soft_pin, counted from their last PutEnd or "
     "lease granted; at most 24 h",
     M},
    {"put_start_discard_timeout_sec", EGM_CFG_INT, "30", 1, 86400, NULL,
     "master: a put not finished this many seconds after its PutStart is discarded (space and "
     "key return)",
     M},
    {"eviction_high_watermark_ratio", EGM_CFG_STRING, "0.90", 0, 0, NULL,
     "master: evict in the background when used / capacity is above this (a number in 0..1)", M},
    {"eviction_ratio", EGM_CFG_STRING, "0.05", 0, 0, NULL,
     "master: share of capacity one eviction frees (a number in 0..1)", M},
    {"eviction_min_residency_ms", EGM_CFG_INT, "10000", 0, 86400000, NULL,
     "master: ms after its PutEnd during which an object is not evicted; a put that only "
     "evicting such objects could make room for answers NO_SPACE (0 = evictable at once)",
     M},
    {"placement_strategy", EGM_CFG_ENUM, "random", 0, 0, "random|free_ratio_first|local_first",
     "master: order of segments tried for replicas (after the put's preferred segments)", M},
    {"max_frame_size", EGM_CFG_SIZE, "64MiB", 1024, 1073741824, NULL,
     "largest RPC payload accepted", ALL},
    {"pool_memory", EGM_CFG_ENUM, "host", 0, 0, "host|host_numa|device",
     "contributed capacity: memfd host memory (shm/tcp), HOST_NUMA VMM or GPU VMM (nvlink)",
     P | C | CAP},
    {"pool_location", EGM_CFG_INT, "0", 0, 1023, NULL,
     "NUMA node (pool_memory=host_numa) or GPU ordinal (pool_memory=device) of the pool",
     P | C | CAP},
    {"egm_handle_type", EGM_CFG_ENUM, "auto", 0, 0, "auto|fabric|posix_fd",
     "how VMM segments are shared: fabric (NVLink domain, needs IMEX), posix_fd (this host); "
     "auto tries fabric and falls back to posix_fd with a warning",
     P | C | CAP},
    {"enable_egm_store_pool", EGM_CFG_BOOL, "false", 0, 0, NULL,
     "contribute capacity as an EGM Store pool: HOST_NUMA memory split over egm_numa_nodes, "
     "served over nvlink (docs/egm-pool.md); false keeps pool_memory",
     P | C | CAP},
    {"egm_numa_nodes", EGM_CFG_STRING, "auto", 0, 0, NULL,
     "EGM pool NUMA nodes: auto (the host NUMA node of every visible GPU) or ids, e.g. 0,1",
     P | C | CAP},
    {"egm_setup_threads", EGM_CFG_INT, "4", 1, 64, NULL,
     "threads allocating the EGM pool's chunks at setup", P | C | CAP},
    {"provider_http_port", EGM_CFG_INT, "-1", -1, 65535, NULL,
     "provider: admin HTTP port serving /health and /metrics on listen_address (-1 = off, "
     "0 = any free port)",
     P},
    {"prewarm", EGM_CFG_BOOL, "true", 0, 0, NULL,
     "import and map VMM segments in the background as soon as they are known", C},
    {"prewarm_concurrency", EGM_CFG_INT, "2", 1, 64, NULL,
     "segments imported and mapped at once by the prewarm threads", C},
    {"nvlink_max_inflight_bytes", EGM_CFG_SIZE, "0", 0, I64MAX, NULL,
     "client: bound on the bytes of GPU copies one transfer has in flight per device: a batch "
     "goes in groups of at most this many bytes, each waited for before the next (longer "
     "copies are cut); 0 = unbounded, else at least 4KiB",
     C},
    {"nvlink_chunk_size", EGM_CFG_SIZE, "0", 0, I64MAX, NULL,
     "client: GPU copies longer than this are cut into pieces of at most this size (one "
     "copy-engine call each); 0 = copies whole, else at least 4KiB",
     C},
    {"nvlink_low_priority_stream", EGM_CFG_BOOL, "false", 0, 0, NULL,
     "client: GPU copies on a stream of the device's least priority (CUDA's least is its "
     "default, 0: this ranks them below streams made with a greater priority only)",
     C},
    {"auth_token", EGM_CFG_STRING, "", 0, 0, NULL,
     "cluster token: when set, the master's RPC, a provider's tcp data server and its fd "
     "socket answer only peers that present it, and clients and providers send it "
     "(docs/security.md); \"\" = off. Never logged",
     ALL},
    {"auth_token_file", EGM_CFG_STRING, "", 0, 0, NULL,
     "file holding auth_token (one line; the trailing newline is dropped); it must not be "
     "readable by group or others. Not together with auth_token",
     ALL},
    {"fd_allowed_gid", EGM_CFG_INT, "-1", -1, 2147483647, NULL,
     "provider: besides its own uid and root, peers whose primary group is this gid may fetch "
     "segment descriptors from its fd socket (-1 = none)",
     P | C | CAP},
};

#undef M
#undef P
#undef C
#undef ALL
#undef CAP

#define N_KEYS (sizeof(keys) / sizeof(keys[0]))

struct egm_config {
    char *values[N_KEYS];
    unsigned char set[N_KEYS];
};

const egm_config_key_t *egm__config_keys(size_t *count_p)
{
    *count_p = N_KEYS;
    return keys;
}

static int key_index(const char *name)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if (name != NULL && strcmp(keys[i].name, name) == 0)
            return (int)i;
    return -1;
}

const egm_config_key_t *egm__config_find_key(const char *name)
{
    int i = key_index(name);
    return i < 0 ? NULL : &keys[i];
}

egm_status_t egm__parse_size(const char *what, const char *text, uint64_t *bytes_p)
{
    static const struct {
        const char *unit;
        unsigned shift;
    } units[] = {{"", 0},     {"b", 0},   {"k", 10},   {"kb", 10}, {"kib", 10},
                 {"m", 20},   {"mb", 20}, {"mib", 20}, {"g", 30},  {"gb", 30},
                 {"gib", 30}, {"t", 40},  {"tb", 40},  {"tib", 40}};
    const char *p = text;
    uint64_t value = 0;
    int digits = 0;

    if (text == NULL)
        text = p = "";
    while (isspace((unsigned char)*p))
        p++;
    for (; isdigit((unsigned char)*p); p++, digits++) {
        unsigned d = (unsigned)(*p - '0');
        if (value > (UINT64_MAX - d) / 10)
            goto overflow;
        value = value * 10 + d;
    }
    while (isspace((unsigned char)*p))
        p++;
    char unit[8];
    size_t ulen = strlen(p);
    while (ulen > 0 && isspace((unsigned char)p[ulen - 1]))
        ulen--;
    if (digits == 0 || ulen >= sizeof(unit))
        goto bad;
    memcpy(unit, p, ulen);
    unit[ulen] = '\0';
    for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
        if (strcasecmp(unit, units[i].unit) != 0)
            continue;
        if (units[i].shift > 0 && value > (UINT64_MAX >> units[i].shift))
            goto overflow;
        *bytes_p = value << units[i].shift;
        return EGM_OK;
    }
bad:
    return egm__set_error(EGM_ERR_CONFIG,
                          "%s: \"%s\" is not a size (use bytes or a number with "
                          "KiB/MiB/GiB/TiB, e.g. 256MiB)",
                          what, text);
overflow:
    return egm__set_error(EGM_ERR_CONFIG, "%s: \"%s\" is too large", what, text);
}

char *egm__format_size(uint64_t bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes;
    int u = 0;
    while (v >= 1024.0 && u < 5) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, len, "%llu B", (unsigned long long)bytes);
    else
        snprintf(buf, len, "%.1f %s", v, units[u]);
    return buf;
}

static int parse_bool(const char *text, int *value_p)
{
    static const char *const yes[] = {"true", "1", "yes", "on"};
    static const char *const no[] = {"false", "0", "no", "off"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(text, yes[i]) == 0) {
            *value_p = 1;
            return 0;
        }
        if (strcasecmp(text, no[i]) == 0) {
            *value_p = 0;
            return 0;
        }
    }
    return -1;
}

static int enum_has(const char *choices, const char *text)
{
    size_t len = strlen(text);
    for (const char *p = choices; *p != '\0';) {
        const char *bar = strchr(p, '|');
        size_t n = bar ? (size_t)(bar - p) : strlen(p);
        if (n == len && strncmp(p, text, n) == 0)
            return 1;
        p += n + (bar ? 1 : 0);
    }
    return 0;
}

/* An address to connect to: HOST:PORT or [IPv6]:PORT, a host and a port
 * 1..65535, read by the parser the client connects with, so that a typo is
 * an error where it is given rather than at connect time, in its words. */
static egm_status_t check_hostport(const char *name, const char *text)
{
    char host[EGM_SOCK_HOST_MAX];
    uint16_t port;
    if (egm__sock_split_peer_hostport(text, host, sizeof(host), &port) != EGM_OK)
        return egm__set_error(EGM_ERR_CONFIG, "%s: %s", name, egm_last_error());
    return EGM_OK;
}

static egm_status_t validate(const egm_config_key_t *k, const char *text)
{
    switch (k->type) {
    case EGM_CFG_STRING:
        if (strlen(text) > 4096)
            return egm__set_error(EGM_ERR_CONFIG, "%s: value longer than 4096 characters", k->name);
        if (strcmp(k->name, "master_server_addr") == 0)
            return check_hostport(k->name, text);
        return EGM_OK;
    case EGM_CFG_ENUM:
        if (!enum_has(k->choices, text))
            return egm__set_error(EGM_ERR_CONFIG, "%s: \"%s\" is not one of %s", k->name, text,
                                  k->choices);
        return EGM_OK;
    case EGM_CFG_BOOL: {
        int v;
        if (parse_bool(text, &v) != 0)
            return egm__set_error(EGM_ERR_CONFIG,
                                  "%s: \"%s\" is not a boolean (true|false|1|0|yes|no|on|off)",
                                  k->name, text);
        return EGM_OK;
    }
    case EGM_CFG_INT: {
        char *end;
        errno = 0;
        long long v = strtoll(text, &end, 10);
        if (text[0] == '\0' || *end != '\0' || errno != 0 || isspace((unsigned char)text[0]))
            return egm__set_error(EGM_ERR_CONFIG, "%s: \"%s\" is not an integer", k->name, text);
        if (v < k->min || v > k->max)
            return egm__set_error(EGM_ERR_CONFIG, "%s: %lld is out of range %" PRId64 "..%" PRId64,
                                  k->name, v, k->min, k->max);
        return EGM_OK;
    }
    case EGM_CFG_SIZE: {
        uint64_t v;
        egm_status_t status = egm__parse_size(k->name, text, &v);
        if (status != EGM_OK)
            return status;
        if (v < (uint64_t)k->min || v > (uint64_t)k->max)
            return egm__set_error(EGM_ERR_CONFIG,
                                  "%s: %s is out of range %" PRId64 "..%" PRId64 " bytes", k->name,
                                  text, k->min, k->max);
        return EGM_OK;
    }
    }
    return egm__set_error(EGM_ERR_INTERNAL, "%s: unknown key type", k->name);
}

static egm_status_t store(egm_config_t *config, int i, const char *text, int explicit_set)
{
    char *copy = egm_strdup(text, "config.value");
    if (copy == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory setting %s", keys[i].name);
    egm_free(config->values[i]);
    config->values[i] = copy;
    config->set[i] = (unsigned char)explicit_set;
    return EGM_OK;
}

egm_status_t egm_config_create(egm_config_t **config_p)
{
    egm_config_t *config = egm_calloc(1, sizeof(*config), "config");
    if (config == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory creating a config");
    for (size_t i = 0; i < N_KEYS; i++) {
        if (store(config, (int)i, keys[i].def, 0) != EGM_OK) {
            egm_config_destroy(config);
            return EGM_ERR_NO_MEMORY;
        }
    }
    *config_p = config;
    return EGM_OK;
}

void egm_config_destroy(egm_config_t *config)
{
    if (config == NULL)
        return;
    for (size_t i = 0; i < N_KEYS; i++)
        egm_free(config->values[i]);
    egm_free(config);
}

egm_status_t egm_config_copy(const egm_config_t *config, egm_config_t **copy_p)
{
    egm_config_t *copy;
    egm_status_t status = egm_config_create(&copy);
    if (status != EGM_OK)
        return status;
    for (size_t i = 0; i < N_KEYS; i++) {
        status = store(copy, (int)i, config->values[i], config->set[i]);
        if (status != EGM_OK) {
            egm_config_destroy(copy);
            return status;
        }
    }
    *copy_p = copy;
    return EGM_OK;
}

egm_status_t egm_config_set(egm_config_t *config, const char *key, const char *value)
{
    if (config == NULL || key == NULL || value == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "config, key and value must not be NULL");
    int i = key_index(key);
    if (i < 0)
        return egm__set_error(EGM_ERR_CONFIG, "unknown configuration key \"%s\"", key);
    egm_status_t status = validate(&keys[i], value);
    if (status != EGM_OK)
        return status;
    return store(config, i, value, 1);
}

static char *trim(char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    size_t n = strlen(s);
    while (n > 0 && isspace((unsigned char)s[n - 1]))
        s[--n] = '\0';
    return s;
}

egm_status_t egm_config_set_pair(egm_config_t *config, const char *pair)
{
    if (pair == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "pair must not be NULL");
    char *copy = egm_strdup(pair, "config.pair");
    if (copy == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory");
    char *eq = strchr(copy, '=');
    egm_status_t status;
    if (eq == NULL) {
        status = egm__set_error(EGM_ERR_CONFIG, "\"%s\" is not key=value", pair);
    } else {
        *eq = '\0';
        status = egm_config_set(config, trim(copy), trim(eq + 1));
    }
    egm_free(copy);
    return status;
}

/* Cuts an inline comment: '#' or ';' at the start or after whitespace, outside
 * quotes ("port = 50051  # master"). */
static void strip_comment(char *line)
{
    char quote = '\0';
    for (char *p = line; *p != '\0'; p++) {
        if (quote != '\0') {
            if (*p == quote)
                quote = '\0';
        } else if (*p == '"' || *p == '\'') {
            quote = *p;
        } else if ((*p == '#' || *p == ';') && (p == line || isspace((unsigned char)p[-1]))) {
            *p = '\0';
            return;
        }
    }
}

/* "[provider]" -> its role bit; 0 with the error set for anything else. */
static unsigned section_role(const char *path, int lineno, char *s)
{
    static const struct {
        const char *name;
        unsigned role;
    } sections[] = {
        {"master", EGM_ROLE_MASTER}, {"provider", EGM_ROLE_PROVIDER}, {"client", EGM_ROLE_CLIENT}};
    size_t len = strlen(s);
    if (len >= 2 && s[len - 1] == ']') {
        s[len - 1] = '\0';
        char *name = trim(s + 1);
        for (size_t i = 0; i < sizeof(sections) / sizeof(sections[0]); i++)
            if (strcasecmp(name, sections[i].name) == 0)
                return sections[i].role;
        egm__set_error(EGM_ERR_CONFIG,
                       "%s:%d: unknown section [%s] (accepted: [master], [provider], [client])",
                       path, lineno, name);
        return 0;
    }
    egm__set_error(EGM_ERR_CONFIG, "%s:%d: a section header is [master], [provider] or [client]",
                   path, lineno);
    return 0;
}

/* Sets a key of the file, or only checks it when its section is another role's. */
static egm_status_t file_set(egm_config_t *config, const char *key, const char *value, int apply)
{
    if (apply)
        return egm_config_set(config, key, value);
    int i = key_index(key);
    if (i < 0)
        return egm__set_error(EGM_ERR_CONFIG, "unknown configuration key \"%s\"", key);
    return validate(&keys[i], value);
}

egm_status_t egm_config_load_file(egm_config_t *config, const char *path)
{
    return egm__config_load_file_as(config, path, EGM_ROLE_CLIENT);
}

egm_status_t egm__config_load_file_as(egm_config_t *config, const char *path, unsigned roles)
{
    char line[8192];
    int lineno = 0;
    egm_status_t status = EGM_OK;
    int apply = 1; /* before any section header: every role */

    if (config == NULL || path == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "config and path must not be NULL");
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return egm__set_error(EGM_ERR_CONFIG, "%s: %s", path, strerror(errno));
    /* A config is a small text file: refuse devices, pipes and the like (reading
     * /dev/zero would never end) and anything implausibly large. */
    struct stat st;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > CONFIG_FILE_MAX) {
        fclose(f);
        return egm__set_error(EGM_ERR_CONFIG, "%s: not a regular file of at most %d bytes", path,
                              CONFIG_FILE_MAX);
    }
    char *raw = NULL;
    size_t raw_cap = 0;
    ssize_t got;
    while (status == EGM_OK && (got = getline(&raw, &raw_cap, f)) > 0) {
        lineno++;
        size_t len = (size_t)got;
        if (memchr(raw, '\0', len) != NULL) {
            status = egm__set_error(EGM_ERR_CONFIG, "%s:%d: NUL byte in the line", path, lineno);
            break;
        }
        if (len > sizeof(line) - 1 || (len == sizeof(line) - 1 && raw[len - 1] != '\n')) {
            status = egm__set_error(EGM_ERR_CONFIG, "%s:%d: line longer than %zu characters", path,
                                    lineno, sizeof(line) - 2);
            break;
        }
        memcpy(line, raw, len + 1);
        strip_comment(line);
        char *s = trim(line);
        if (s[0] == '\0' || s[0] == '#' || s[0] == ';')
            continue;
        if (s[0] == '[') {
            unsigned role = section_role(path, lineno, s);
            if (role == 0) {
                status = EGM_ERR_CONFIG;
                break;
            }
            apply = (role & roles) != 0;
            continue;
        }
        char *eq = strchr(s, '=');
        if (eq == NULL) {
            status = egm__set_error(EGM_ERR_CONFIG, "%s:%d: expected key = value", path, lineno);
            break;
        }
        *eq = '\0';
        char *value = trim(eq + 1);
        size_t vlen = strlen(value);
        if (vlen >= 2 && (value[0] == '"' || value[0] == '\'') && value[vlen - 1] == value[0]) {
            value[vlen - 1] = '\0';
            value++;
        }
        status = file_set(config, trim(s), value, apply);
        if (status != EGM_OK)
            egm__set_error(status, "%s:%d: %s", path, lineno, egm_last_error());
    }
    free(raw);
    fclose(f);
    return status;
}

extern char **environ;

egm_status_t egm_config_load_env(egm_config_t *config)
{
    static const char prefix[] = "EGMSTORE_";
    if (config == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "config must not be NULL");
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, prefix, sizeof(prefix) - 1) != 0)
            continue;
        const char *name = *e + sizeof(prefix) - 1;
        const char *eq = strchr(name, '=');
        char key[128];
        size_t n = eq ? (size_t)(eq - name) : strlen(name);
        if (eq == NULL || n == 0 || n >= sizeof(key))
            return egm__set_error(EGM_ERR_CONFIG,
                                  "environment variable %.*s is not a "
                                  "configuration key",
                                  (int)(n + sizeof(prefix) - 1), *e);
        for (size_t i = 0; i < n; i++)
            key[i] = (char)tolower((unsigned char)name[i]);
        key[n] = '\0';
        if (key_index(key) < 0)
            return egm__set_error(EGM_ERR_CONFIG,
                                  "environment variable %s%.*s: unknown configuration key \"%s\"",
                                  prefix, (int)n, name, key);
        egm_status_t status = egm_config_set(config, key, eq + 1);
        if (status != EGM_OK)
            return egm__set_error(status, "environment variable %s%.*s: %s", prefix, (int)n, name,
                                  egm_last_error());
    }
    return EGM_OK;
}

egm_status_t egm__config_set_flag(egm_config_t *config, const char *flag, const char *value)
{
    char key[128];
    const char *p = flag;
    size_t n = 0;

    if (config == NULL || flag == NULL || value == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "config, flag and value must not be NULL");
    if (strncmp(p, "--", 2) == 0)
        p += 2;
    if (strcmp(p, "master") == 0) /* the one short alias, documented with the key */
        p = "master_server_addr";
    for (; *p != '\0' && n + 1 < sizeof(key); p++)
        key[n++] = *p == '-' ? '_' : *p;
    key[n] = '\0';
    if (*p != '\0' || key_index(key) < 0)
        return egm__set_error(EGM_ERR_CONFIG, "unknown flag %s (egmstore --help lists them)", flag);
    return egm_config_set(config, key, value);
}

const char *egm_config_get(const egm_config_t *config, const char *key)
{
    int i = key_index(key);
    return (config == NULL || i < 0) ? NULL : config->values[i];
}

int egm__config_is_set(const egm_config_t *config, const char *key)
{
    int i = key_index(key);
    return config != NULL && i >= 0 && config->set[i];
}

int64_t egm_config_get_int(const egm_config_t *config, const char *key)
{
    const char *v = egm_config_get(config, key);
    return v != NULL ? strtoll(v, NULL, 10) : 0;
}

uint64_t egm_config_get_size(const egm_config_t *config, const char *key)
{
    const char *v = egm_config_get(config, key);
    uint64_t bytes = 0;
    if (v == NULL || egm__parse_size(key, v, &bytes) != EGM_OK)
        return 0;
    return bytes;
}

egm_status_t egm__config_auth_token(const egm_config_t *config, char *token, size_t len)
{
    const char *inline_token = egm_config_get(config, "auth_token");
    const char *path = egm_config_get(config, "auth_token_file");
    int has_inline = inline_token != NULL && inline_token[0] != '\0';
    int has_file = path != NULL && path[0] != '\0';

    token[0] = '\0';
    if (has_inline && has_file)
        return egm__set_error(EGM_ERR_CONFIG, "auth_token and auth_token_file are both set: "
                                              "set one of them");
    if (has_inline) {
        if (strlen(inline_token) >= len)
            return egm__set_error(EGM_ERR_CONFIG, "auth_token: longer than %zu characters",
                                  len - 1);
        snprintf(token, len, "%s", inline_token);
        return EGM_OK;
    }
    if (!has_file)
        return EGM_OK;
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return egm__set_error(EGM_ERR_CONFIG, "auth_token_file: %s: %s", path, strerror(errno));
    struct stat st;
    egm_status_t status = EGM_OK;
    if (fstat(fileno(f), &st) != 0 || !S_ISREG(st.st_mode)) {
        status = egm__set_error(EGM_ERR_CONFIG, "auth_token_file: %s: not a regular file", path);
    } else if ((st.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
        status = egm__set_error(EGM_ERR_CONFIG,
                                "auth_token_file: %s: mode %04o lets group or others access the "
                                "token (chmod 600 it)",
                                path, (unsigned)(st.st_mode & 07777));
    } else {
        size_t n = fread(token, 1, len, f);
        if (ferror(f)) {
            status = egm__set_error(EGM_ERR_CONFIG, "auth_token_file: %s: read failed", path);
        } else if (n >= len) {
            status = egm__set_error(EGM_ERR_CONFIG, "auth_token_file: %s: longer than %zu bytes",
                                    path, len - 1);
        } else {
            token[n] = '\0';
            while (n > 0 && (token[n - 1] == '\n' || token[n - 1] == '\r'))
                token[--n] = '\0';
            if (n == 0 || memchr(token, '\0', n) != NULL || strchr(token, '\n') != NULL)
                status = egm__set_error(EGM_ERR_CONFIG,
                                        "auth_token_file: %s: expected one non-empty line", path);
        }
    }
    fclose(f);
    if (status != EGM_OK)
        egm__secure_zero(token, len);
    return status;
}

void egm__secure_zero(void *p, size_t len)
{
    volatile unsigned char *v = p;
    while (len--)
        *v++ = 0;
}

int egm__token_equal(const char *a, const char *b, size_t b_len)
{
    size_t a_len = strlen(a);
    unsigned char diff = (unsigned char)(a_len != b_len);
    /* constant time in the length of the presented token */
    for (size_t i = 0; i < b_len; i++)
        diff |= (unsigned char)((unsigned char)b[i] ^ (unsigned char)a[i < a_len ? i : 0]);
    return diff == 0 && a_len > 0;
}

int egm_config_get_bool(const egm_config_t *config, const char *key)
{
    const char *v = egm_config_get(config, key);
    int b = 0;
    if (v == NULL || parse_bool(v, &b) != 0)
        return 0;
    return b;
}
