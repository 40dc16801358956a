/* Configuration: one table of keys; values set from text (file, environment,
 * flags, API) are validated against it and kept as text. */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
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

/* The words of the enum keys and their values, in the order documented. */
static const egm_config_choice_t log_levels[] = {{"error", EGM_LOG_ERROR}, {"warn", EGM_LOG_WARN},
                                                 {"info", EGM_LOG_INFO},   {"debug", EGM_LOG_DEBUG},
                                                 {"trace", EGM_LOG_TRACE}, {NULL, 0}};
static const egm_config_choice_t protocols[] = {{"auto", EGM_PROTOCOL_AUTO},
                                                {"nvlink", EGM_PROTOCOL_NVLINK},
                                                {"shm", EGM_PROTOCOL_SHM},
                                                {"tcp", EGM_PROTOCOL_TCP},
                                                {NULL, 0}};
static const egm_config_choice_t placements[] = {
    {"random", EGM_PLACEMENT_RANDOM},
    {"free_ratio_first", EGM_PLACEMENT_FREE_RATIO_FIRST},
    {"local_first", EGM_PLACEMENT_LOCAL_FIRST},
    {NULL, 0}};
static const egm_config_choice_t pool_memories[] = {{"host", EGM_POOL_MEMORY_HOST},
                                                    {"host_numa", EGM_POOL_MEMORY_HOST_NUMA},
                                                    {"device", EGM_POOL_MEMORY_DEVICE},
                                                    {NULL, 0}};
static const egm_config_choice_t handle_types[] = {{"auto", EGM_HANDLE_TYPE_AUTO},
                                                   {"fabric", EGM_HANDLE_TYPE_FABRIC},
                                                   {"posix_fd", EGM_HANDLE_TYPE_POSIX_FD},
                                                   {NULL, 0}};

/* The offset of settings field f, which must have the C type t: a key bound
 * to a field of another type does not compile. */
#define FIELD(f, t)                                                                                \
    (offsetof(egm_settings_t, f) +                                                                 \
     0 * sizeof(char[_Generic(((egm_settings_t *)0)->f, t : 1, default                             \
                              : -1)]))
/* An enum field is stored as an int. */
#define ENUM_FIELD(f, t) (FIELD(f, t) + 0 * sizeof(char[sizeof(t) == sizeof(int) ? 1 : -1]))

/* One key each, named as its settings field: STRING(name, default, accepted
 * values in words, roles, help), INT(name, default, min, max, roles, help),
 * SIZE(name, default, min, max, accepted values in words or NULL for the
 * range, roles, help), BOOL(name, default, roles, help), ENUM(name, C type,
 * choices, default, roles, help), RATIO(name, default, roles, help). */
#define STRING(n, d, acc, r, h)                                                                    \
    {                                                                                              \
        .name = #n, .type = EGM_CFG_STRING, .def = d, .accepted = acc, .roles = r, .help = h,      \
        .offset = FIELD(n, const char *)                                                           \
    }
#define INT(n, d, lo, hi, r, h)                                                                    \
    {                                                                                              \
        .name = #n, .type = EGM_CFG_INT, .def = d, .min = lo, .max = hi, .roles = r, .help = h,    \
        .offset = FIELD(n, int64_t)                                                                \
    }
#define SIZE(n, d, lo, hi, acc, r, h)                                                              \
    {                                                                                              \
        .name = #n, .type = EGM_CFG_SIZE, .def = d, .min = lo, .max = hi, .accepted = acc,         \
        .roles = r, .help = h, .offset = FIELD(n, uint64_t)                                        \
    }
#define BOOL(n, d, r, h)                                                                           \
    {                                                                                              \
        .name = #n, .type = EGM_CFG_BOOL, .def = d, .roles = r, .help = h, .offset = FIELD(n, int) \
    }
#define ENUM(n, t, ch, d, r, h)                                                                    \
    {                                                                                              \
        .name = #n, .type = EGM_CFG_ENUM, .def = d, .choices = ch, .roles = r, .help = h,          \
        .offset = ENUM_FIELD(n, t)                                                                 \
    }
#define RATIO(n, d, r, h)                                                                          \
    {                                                                                              \
        .name = #n, .type = EGM_CFG_RATIO, .def = d, .roles = r, .help = h,                        \
        .offset = FIELD(n, double)                                                                 \
    }
/* Who reads a key (the roles of egm_config_key_t). */
#define M EGM_ROLE_MASTER
#define P EGM_ROLE_PROVIDER
#define C EGM_ROLE_CLIENT
#define ALL (M | P | C)
#define CAP EGM_KEY_CAPACITY

static const egm_config_key_t keys[] = {
    ENUM(log_level, egm_log_level_t, log_levels, "info", ALL, "log verbosity"),
    STRING(master_server_addr, "127.0.0.1:50051",
           "`HOST:PORT`, `[IPv6]:PORT`, `etcd://HOST:PORT[;HOST:PORT...]` (or `,` between members)",
           P | C,
           "master RPC address HOST:PORT, or etcd://... to follow the leader of HA masters (flag "
           "alias --master)"),
    STRING(listen_address, "0.0.0.0", "an address or host name", M | P, "master: bind address"),
    INT(port, "50051", 0, 65535, M, "master: RPC port (0 = any free port)"),
    INT(http_port, "9003", -1, 65535, M,
        "master: admin HTTP port on listen_address: /metrics, /health, /segments, "
        "/get_all_segments, /keys, /query_key, /batch_query_keys, /metrics/summary "
        "(-1 = off, 0 = any free port)"),
    INT(rpc_threads, "4", 1, 64, M,
        "master: RPC threads, each with its own event loop; connections are spread over them"),
    INT(rpc_server_spin_us, "0", 0, 20000, M,
        "master: microseconds an RPC thread polls for the next request after one came, before it "
        "sleeps (0 = sleep at once)"),
    STRING(local_hostname, "", "a host name or address", P | C | CAP,
           "address others use to reach this process's data server (\"\" = host name)"),
    STRING(zone, "", "a name of up to 63 bytes, no control characters", P | C | CAP,
           "failure domain of this process's segments above its host (a rack, a power feed): the "
           "master puts the replicas of one object in distinct zones first, then hosts, then "
           "providers (\"\" = none)"),
    ENUM(protocol, egm_protocol_t, protocols, "auto", P | C,
         "data transport: auto picks nvlink (GPU buffer, VMM segment) > shm (same host) > tcp; the "
         "others force one"),
    SIZE(global_segment_size, "0", 0, I64MAX, NULL, P | C | CAP,
         "capacity this process contributes (provider: > 0; default 256MiB for egmstore provider)"),
    SIZE(max_mr_size, "1GiB", 4096, I64MAX, NULL, P | C | CAP,
         "largest segment (chunk) the pool is cut into"),
    BOOL(allow_overcommit, "false", P | C | CAP,
         "accept a global_segment_size above the memory this host (NUMA node) has available; the "
         "file descriptor limit is checked regardless"),
    INT(data_port, "0", 0, 65535, P | C | CAP, "tcp data server port (0 = any free port)"),
    INT(replica_num, "1", 1, 16, C, "default replicas per object"),
    INT(rpc_timeout_ms, "5000", 1, 3600000, P | C, "deadline of one master RPC"),
    INT(rpc_spin_us, "0", 0, 1000, C,
        "client: microseconds a master RPC polls for its reply before sleeping (0 = sleep at "
        "once)"),
    INT(connect_timeout_ms, "3000", 1, 600000, P | C, "deadline of the TCP connect to the master"),
    INT(io_timeout_ms, "10000", 1, 3600000, P | C, "deadline of one tcp data transfer request"),
    INT(ping_interval_ms, "1000", 10, 60000, P | C, "client -> master ping period"),
    INT(default_kv_lease_ttl, "10000", 1, 86400000, M,
        "master: read lease granted by Get/Exist, in ms"),
    INT(location_cache_ms, "1000", 0, 2000, M,
        "master: clients may serve a Get from a location they cached this long after asking the "
        "master (0 = no caching); a force remove waits it out (docs/consistency.md)"),
    INT(location_cache_entries, "65536", 0, 16777216, C,
        "client: object locations kept to serve Gets without a master round trip (0 = none)"),
    SIZE(slab_bytes, "256MiB", 0, I64MAX, NULL, C,
         "client: pool space asked of the master at a time for this client to place its puts in "
         "itself, each published with one Commit per call (0 = the master places every put: "
         "PutStart and PutEnd; docs/master.md)"),
    INT(client_ttl, "10", 1, 3600, M,
        "master: a client silent this many seconds is expired and its segments unmounted"),
    INT(client_disconnect_grace_ms, "3000", 0, 3600000, M,
        "master: a provider whose every connection to the master closed without a leaving ping "
        "takes no new replica at once and is dropped (segments unmounted) after this many ms "
        "unless it reconnects; longer than ping_interval_ms (0 = off: client_ttl only)"),
    INT(default_kv_soft_pin_ttl, "1800000", 1, EGM_SETTINGS_SOFT_PIN_TTL_MAX_MS, M,
        "master: soft pin (ms) of objects put with_soft_pin, counted from their last PutEnd or "
        "lease granted; at most 24 h"),
    INT(put_start_discard_timeout_sec, "30", 1, 86400, M,
        "master: a put not finished this many seconds after its PutStart is discarded (space and "
        "key return)"),
    RATIO(eviction_high_watermark_ratio, "0.90", M,
          "master: evict in the background when used / capacity is above this"),
    RATIO(eviction_ratio, "0.05", M, "master: share of capacity one eviction frees"),
    INT(eviction_min_residency_ms, "10000", 0, EGM_SETTINGS_MIN_RESIDENCY_MAX_MS, M,
        "master: ms after its PutEnd during which an object is not evicted; a put that only "
        "evicting such objects could make room for answers NO_SPACE (0 = evictable at once)"),
    ENUM(placement_strategy, egm_placement_t, placements, "random", M,
         "master: order of segments tried for replicas (after the put's preferred segments)"),
    SIZE(rereplication_bytes_per_sec, "256MiB", 0, I64MAX, NULL, M,
         "master: when a provider is dropped, copy each object that lost a replica from a "
         "surviving one to another provider at most this fast, bytes per second (0 = off; "
         "docs/rereplication.md)"),
    SIZE(max_frame_size, "64MiB", 1024, 1073741824, NULL, ALL, "largest RPC payload accepted"),
    ENUM(pool_memory, egm_pool_memory_t, pool_memories, "host", P | C | CAP,
         "contributed capacity: memfd host memory (shm/tcp), HOST_NUMA VMM or GPU VMM (nvlink)"),
    INT(pool_location, "0", 0, 1023, P | C | CAP,
        "NUMA node (pool_memory=host_numa) or GPU ordinal (pool_memory=device) of the pool"),
    ENUM(egm_handle_type, egm_handle_type_t, handle_types, "auto", P | C | CAP,
         "how VMM segments are shared: fabric (NVLink domain, needs IMEX), posix_fd (this host); "
         "auto tries fabric and falls back to posix_fd with a warning"),
    BOOL(enable_egm_store_pool, "false", P | C | CAP,
         "contribute capacity as an EGM Store pool: HOST_NUMA memory split over egm_numa_nodes, "
         "served over nvlink (docs/egm-pool.md); false keeps pool_memory"),
    STRING(
        egm_numa_nodes, "auto",
        "`auto`, or NUMA node ids 0..1023 separated by commas (`0,1`; blanks around ids allowed)",
        P | C | CAP,
        "EGM pool NUMA nodes: auto (the host NUMA node of every visible GPU) or ids, e.g. 0,1"),
    INT(egm_setup_threads, "4", 1, 64, P | C | CAP,
        "threads allocating the EGM pool's chunks at setup"),
    INT(provider_http_port, "-1", -1, 65535, P,
        "provider: admin HTTP port serving /health and /metrics on listen_address (-1 = off, 0 = "
        "any free port)"),
    BOOL(prewarm, "true", C,
         "import and map VMM segments in the background as soon as they are known"),
    INT(prewarm_concurrency, "2", 1, 64, C,
        "segments imported and mapped at once by the prewarm threads"),
    SIZE(nvlink_max_inflight_bytes, "0", 0, I64MAX, "0, or 4 KiB and up", C,
         "client: bound on the bytes of GPU copies one transfer has in flight per device: a batch "
         "goes in groups of at most this many bytes, each waited for before the next (longer "
         "copies are cut); 0 = unbounded, else at least 4KiB"),
    SIZE(nvlink_chunk_size, "0", 0, I64MAX, "0, or 4 KiB and up", C,
         "client: GPU copies longer than this are cut into pieces of at most this size (one "
         "copy-engine call each); 0 = copies whole, else at least 4KiB"),
    SIZE(nvlink_bounce_buffer, "0", 0, (int64_t)1 << 32, "0, or 8 MiB to 4 GiB", C,
         "client: GPU memory (per GPU, allocated on first use) through which a batch of small "
         "pieces between that GPU and an EGM pool goes: the kernel gathers or scatters the pieces "
         "there and the copy engines move long runs to or from the pool; 0 = off"),
    BOOL(nvlink_low_priority_stream, "false", C,
         "client: GPU copies on a stream of the device's least priority (CUDA's least is its "
         "default, 0: this ranks them below streams made with a greater priority only)"),
    STRING(auth_token, "", "any text up to 1024 bytes; `\"\"` = off", ALL,
           "cluster token: when set, the master's RPC, a provider's tcp data server and its fd "
           "socket answer only peers that present it, and clients and providers send it "
           "(docs/security.md); \"\" = off. Never logged"),
    STRING(auth_token_file, "", "path of a regular file, mode without group/other bits (e.g. 600)",
           ALL,
           "file holding auth_token (one line; the trailing newline is dropped); it must not be "
           "readable by group or others. Not together with auth_token"),
    INT(fd_allowed_gid, "-1", -1, 2147483647, P | C | CAP,
        "provider: besides its own uid and root, peers whose primary group is this gid may fetch "
        "segment descriptors from its fd socket (-1 = none)"),
    STRING(cluster_id, "egmstore", "1-64 of letters, digits, `-`, `_`, `.`", ALL,
           "names the cluster in etcd: HA masters elect their leader under the key "
           "egmstore/<cluster_id>/master/leader, which clients and providers read (docs/ha.md)"),
    BOOL(enable_ha, "false", M,
         "master: stand for leader through etcd (etcd_endpoints); only the leader serves, and a "
         "leader that loses its lease exits (docs/ha.md)"),
    STRING(etcd_endpoints, "", "`HOST:PORT[;HOST:PORT...]` (or `,` between members)", M,
           "master: the etcd members enable_ha elects through"),
    INT(ha_lease_ttl, "2", 2, 60, M,
        "master: seconds of the leader's etcd lease: a leader that dies is replaced about this "
        "long after"),
    BOOL(ha_early_grants, "true", M,
         "master: answer a writer's SlabGrant before the standbys hold it where that is safe "
         "(its copies overlap their round trip; docs/ha.md)"),
};

#undef M
#undef P
#undef C
#undef ALL
#undef CAP
#undef STRING
#undef INT
#undef SIZE
#undef BOOL
#undef ENUM
#undef RATIO

#define N_KEYS (sizeof(keys) / sizeof(keys[0]))

struct egm_config {
    char *values[N_KEYS];
    unsigned char set[N_KEYS];
    egm_settings_t settings; /* the values, typed: set with them by store() */
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

/* The word `text` of an enum key -> its value; -1 when it is none of them. */
static int choice_value(const egm_config_key_t *k, const char *text)
{
    for (const egm_config_choice_t *c = k->choices; c->name != NULL; c++)
        if (strcmp(c->name, text) == 0)
            return c->value;
    return -1;
}

const char *egm__config_choice_word(const egm_config_key_t *key, int value)
{
    for (const egm_config_choice_t *c = key->choices; c != NULL && c->name != NULL; c++)
        if (c->value == value)
            return c->name;
    return NULL;
}

const char *egm__config_choices_text(const egm_config_key_t *key, char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = '\0';
    for (const egm_config_choice_t *c = key->choices; c != NULL && c->name != NULL; c++) {
        int n = snprintf(buf + used, len - used, "%s%s", c == key->choices ? "" : "|", c->name);
        if (n < 0 || (size_t)n >= len - used)
            break;
        used += (size_t)n;
    }
    return buf;
}

egm_status_t egm__config_parse_choice(const egm_config_key_t *key, const char *word, int *value_p)
{
    char words[256];
    int value = word != NULL ? choice_value(key, word) : -1;
    if (value < 0)
        return egm__set_error(EGM_ERR_CONFIG, "%s: \"%s\" is not one of %s", key->name,
                              word != NULL ? word : "(null)",
                              egm__config_choices_text(key, words, sizeof(words)));
    *value_p = value;
    return EGM_OK;
}

/* A value of a key's type, as its settings field holds it. */
typedef union {
    int64_t i;  /* INT */
    uint64_t u; /* SIZE */
    int b;      /* BOOL, and an ENUM's value */
    double d;   /* RATIO */
} value_t;

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

/* master_server_addr (HOST:PORT, or etcd:// and a list of them) and
 * etcd_endpoints (a list, "" = none): each item HOST:PORT, optionally http://. */
static egm_status_t check_address_list(const char *name, const char *text)
{
    int etcd = strncmp(text, "etcd://", 7) == 0, list = strcmp(name, "etcd_endpoints") == 0;
    if (!etcd && !list)
        return check_hostport(name, text);
    const char *p = text + (etcd ? 7 : 0);
    if (*p == '\0' && !list)
        return egm__set_error(EGM_ERR_CONFIG, "%s: \"%s\" names no etcd endpoint", name, text);
    char host[EGM_SOCK_HOST_MAX];
    uint16_t port;
    egm_status_t s;
    while ((s = egm__sock_next_endpoint(&p, host, sizeof(host), &port)) == EGM_OK)
        ;
    if (s != EGM_ERR_NOT_FOUND)
        return egm__set_error(EGM_ERR_CONFIG, "%s: %s", name, egm_last_error());
    return EGM_OK;
}

static egm_status_t check_cluster_id(const char *name, const char *text)
{
    size_t n = strlen(text);
    for (size_t i = 0; i < n; i++)
        if (!isalnum((unsigned char)text[i]) && strchr("-_.", text[i]) == NULL)
            n = 0;
    if (n == 0 || n > 64)
        return egm__set_error(
            EGM_ERR_CONFIG, "%s: \"%s\" is not 1-64 of letters, digits, '-', '_', '.'", name, text);
    return EGM_OK;
}

/* local_hostname and listen_address: a host name or address as peers dial it
 * or the master binds it, so no space or control character (and listen_address
 * not empty); zone: a free name, no control character. Refused where given,
 * by the key's name, not at mount time by a segment field's. */
static egm_status_t check_name_text(const char *name, const char *text)
{
    int host = strcmp(name, "zone") != 0;
    if (strcmp(name, "listen_address") == 0 && text[0] == '\0')
        return egm__set_error(EGM_ERR_CONFIG, "%s: must not be empty (0.0.0.0 binds every address)",
                              name);
    for (size_t i = 0; text[i] != '\0'; i++) {
        unsigned char c = (unsigned char)text[i];
        if (c < 0x20 || c == 0x7f || (host && c == ' '))
            return egm__set_error(EGM_ERR_CONFIG, "%s: a %s (0x%02x) at byte %zu%s", name,
                                  c == ' ' ? "space" : "control character", c, i,
                                  host ? ": a host name or address has neither" : "");
    }
    return EGM_OK;
}

/* Checks `text` as a value of key k and reads it into *v (nothing for a
 * string). The one parser of values: set, files and the settings use it. */
static egm_status_t parse(const egm_config_key_t *k, const char *text, value_t *v)
{
    switch (k->type) {
    case EGM_CFG_STRING:
        if (strlen(text) > 4096)
            return egm__set_error(EGM_ERR_CONFIG, "%s: value longer than 4096 characters", k->name);
        if (strcmp(k->name, "master_server_addr") == 0 || strcmp(k->name, "etcd_endpoints") == 0)
            return check_address_list(k->name, text);
        if (strcmp(k->name, "cluster_id") == 0)
            return check_cluster_id(k->name, text);
        if (strcmp(k->name, "local_hostname") == 0 || strcmp(k->name, "listen_address") == 0 ||
            strcmp(k->name, "zone") == 0)
            return check_name_text(k->name, text);
        return EGM_OK;
    case EGM_CFG_ENUM:
        return egm__config_parse_choice(k, text, &v->b);
    case EGM_CFG_BOOL: {
        if (parse_bool(text, &v->b) != 0)
            return egm__set_error(EGM_ERR_CONFIG,
                                  "%s: \"%s\" is not a boolean (true|false|1|0|yes|no|on|off)",
                                  k->name, text);
        return EGM_OK;
    }
    case EGM_CFG_INT: {
        char *end;
        errno = 0;
        long long n = strtoll(text, &end, 10);
        if (text[0] == '\0' || *end != '\0' || errno != 0 || isspace((unsigned char)text[0]))
            return egm__set_error(EGM_ERR_CONFIG, "%s: \"%s\" is not an integer", k->name, text);
        if (n < k->min || n > k->max)
            return egm__set_error(EGM_ERR_CONFIG, "%s: %lld is out of range %" PRId64 "..%" PRId64,
                                  k->name, n, k->min, k->max);
        v->i = n;
        return EGM_OK;
    }
    case EGM_CFG_RATIO: {
        char *end;
        errno = 0;
        double d = strtod(text, &end);
        if (text[0] == '\0' || *end != '\0' || errno != 0 || isspace((unsigned char)text[0]) ||
            !(d >= EGM_SETTINGS_RATIO_MIN && d <= EGM_SETTINGS_RATIO_MAX))
            return egm__set_error(EGM_ERR_CONFIG, "%s: \"%s\" is not a number in %g..%g (e.g. 0.9)",
                                  k->name, text, EGM_SETTINGS_RATIO_MIN, EGM_SETTINGS_RATIO_MAX);
        v->d = d;
        return EGM_OK;
    }
    case EGM_CFG_SIZE: {
        egm_status_t status = egm__parse_size(k->name, text, &v->u);
        if (status != EGM_OK)
            return status;
        if (v->u < (uint64_t)k->min || v->u > (uint64_t)k->max)
            return egm__set_error(EGM_ERR_CONFIG,
                                  "%s: %s is out of range %" PRId64 "..%" PRId64 " bytes", k->name,
                                  text, k->min, k->max);
        return EGM_OK;
    }
    }
    return egm__set_error(EGM_ERR_INTERNAL, "%s: unknown key type", k->name);
}

/* Where a key's value came from, as config->set[] keeps it. */
typedef enum {
    FROM_DEFAULT = 0,
    FROM_SET = 1 /* a file, EGMSTORE_*, a flag, egm_config_set */
} origin_t;

/* Sets key i to `text`, already checked, and its settings field to the value. */
static egm_status_t store(egm_config_t *config, int i, const char *text, origin_t origin)
{
    const egm_config_key_t *k = &keys[i];
    value_t v = {0};
    if (parse(k, text, &v) != EGM_OK) /* the table's default or a checked value: never */
        return egm__set_error(EGM_ERR_INTERNAL, "%s: \"%s\" stored unchecked", k->name, text);
    char *copy = egm_strdup(text, "config.value");
    if (copy == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory setting %s", k->name);
    egm_free(config->values[i]);
    config->values[i] = copy;
    config->set[i] = (unsigned char)(origin == FROM_SET);
    char *field = (char *)&config->settings + k->offset;
    switch (k->type) {
    case EGM_CFG_STRING:
        memcpy(field, &copy, sizeof(copy));
        break;
    case EGM_CFG_INT:
        memcpy(field, &v.i, sizeof(v.i));
        break;
    case EGM_CFG_SIZE:
        memcpy(field, &v.u, sizeof(v.u));
        break;
    case EGM_CFG_BOOL:
    case EGM_CFG_ENUM:
        memcpy(field, &v.b, sizeof(v.b));
        break;
    case EGM_CFG_RATIO:
        memcpy(field, &v.d, sizeof(v.d));
        break;
    }
    return EGM_OK;
}

const egm_settings_t *egm__config_settings(const egm_config_t *config)
{
    return &config->settings;
}

static int field_index(size_t offset)
{
    for (size_t i = 0; i < N_KEYS; i++)
        if (keys[i].offset == offset)
            return (int)i;
    return -1; /* not reached: offsetof names a field, and every field has a key */
}

const egm_config_key_t *egm__config_field_key(size_t offset)
{
    int i = field_index(offset);
    return i >= 0 ? &keys[i] : NULL;
}

int egm__config_field_is_set(const egm_config_t *config, size_t offset)
{
    int i = field_index(offset);
    return i >= 0 && config->set[i];
}

int64_t egm__config_field_int(const egm_config_t *config, const egm_config_key_t *key)
{
    const char *field = (const char *)&config->settings + key->offset;
    int64_t i = 0;
    uint64_t u;
    int b;
    switch (key->type) {
    case EGM_CFG_INT:
        memcpy(&i, field, sizeof(i));
        break;
    case EGM_CFG_SIZE:
        memcpy(&u, field, sizeof(u));
        i = (int64_t)u;
        break;
    case EGM_CFG_BOOL:
    case EGM_CFG_ENUM:
        memcpy(&b, field, sizeof(b));
        i = b;
        break;
    case EGM_CFG_STRING:
    case EGM_CFG_RATIO:
        break;
    }
    return i;
}

double egm__config_field_ratio(const egm_config_t *config, const egm_config_key_t *key)
{
    double d = 0.0;
    if (key->type == EGM_CFG_RATIO)
        memcpy(&d, (const char *)&config->settings + key->offset, sizeof(d));
    return d;
}

int egm__config_field_equal(const egm_config_t *a, const egm_config_t *b,
                            const egm_config_key_t *key)
{
    const char *fa = (const char *)&a->settings + key->offset;
    const char *fb = (const char *)&b->settings + key->offset;
    switch (key->type) {
    case EGM_CFG_STRING: {
        const char *sa, *sb;
        memcpy(&sa, fa, sizeof(sa));
        memcpy(&sb, fb, sizeof(sb));
        return strcmp(sa, sb) == 0;
    }
    case EGM_CFG_RATIO:
        return egm__config_field_ratio(a, key) == egm__config_field_ratio(b, key);
    case EGM_CFG_INT:
    case EGM_CFG_SIZE:
    case EGM_CFG_BOOL:
    case EGM_CFG_ENUM:
        break;
    }
    return egm__config_field_int(a, key) == egm__config_field_int(b, key);
}

const char *egm__config_field_text(const egm_config_t *config, size_t offset)
{
    int i = field_index(offset);
    return i >= 0 ? config->values[i] : "";
}

egm_status_t egm_config_create(egm_config_t **config_p)
{
    if (config_p == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "config_p must not be NULL");
    egm_config_t *config = egm_calloc(1, sizeof(*config), "config");
    if (config == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory creating a config");
    for (size_t i = 0; i < N_KEYS; i++) {
        if (store(config, (int)i, keys[i].def, FROM_DEFAULT) != EGM_OK) {
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
    if (config == NULL || copy_p == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "config and copy_p must not be NULL");
    egm_config_t *copy;
    egm_status_t status = egm_config_create(&copy);
    if (status != EGM_OK)
        return status;
    for (size_t i = 0; i < N_KEYS; i++) {
        status = store(copy, (int)i, config->values[i], config->set[i] ? FROM_SET : FROM_DEFAULT);
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
    value_t v;
    egm_status_t status = parse(&keys[i], value, &v);
    if (status != EGM_OK)
        return status;
    return store(config, i, value, FROM_SET);
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
    value_t v;
    return parse(&keys[i], value, &v);
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

/* EGMSTORE_* variables that are not configuration keys: the Python package's switch that
 * stands in for mooncake.store (read by egmstore_mooncake.pth in the engines' processes,
 * often exported for a whole shell or container) and the binary the Python tests run. */
static const char *const env_not_keys[] = {"EGMSTORE_AS_MOONCAKE=", "EGMSTORE_BIN="};

static bool env_is_not_key(const char *entry)
{
    for (size_t i = 0; i < sizeof(env_not_keys) / sizeof(env_not_keys[0]); i++)
        if (strncmp(entry, env_not_keys[i], strlen(env_not_keys[i])) == 0)
            return true;
    return false;
}

egm_status_t egm_config_load_env(egm_config_t *config)
{
    static const char prefix[] = "EGMSTORE_";
    if (config == NULL)
        return egm__set_error(EGM_ERR_INVALID_ARG, "config must not be NULL");
    for (char **e = environ; e != NULL && *e != NULL; e++) {
        if (strncmp(*e, prefix, sizeof(prefix) - 1) != 0 || env_is_not_key(*e))
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
    const char *inline_token = config != NULL ? config->settings.auth_token : NULL;
    const char *path = config != NULL ? config->settings.auth_token_file : NULL;
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

/* A size in the docs' words: "0", "4 KiB", "1 GiB" (exact binary units only). */
static void doc_size(int64_t bytes, char *buf, size_t len)
{
    static const char *const units[] = {"KiB", "MiB", "GiB", "TiB"};
    int u = -1;
    while (u < 3 && bytes >= 1024 && bytes % 1024 == 0) {
        bytes /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(buf, len, "%" PRId64, bytes);
    else
        snprintf(buf, len, "%" PRId64 " %s", bytes, units[u]);
}

static const char *const type_names[] = {
    [EGM_CFG_STRING] = "string", [EGM_CFG_INT] = "int",   [EGM_CFG_SIZE] = "size",
    [EGM_CFG_BOOL] = "bool",     [EGM_CFG_ENUM] = "enum", [EGM_CFG_RATIO] = "ratio"};

void egm__config_range_text(const egm_config_key_t *k, char *buf, size_t len)
{
    char lo[32], hi[32];
    buf[0] = '\0';
    if (k->accepted != NULL && k->type == EGM_CFG_SIZE) {
        snprintf(buf, len, "%s", k->accepted); /* a rule of its own besides the range */
        return;
    }
    switch (k->type) {
    case EGM_CFG_INT:
        snprintf(buf, len, "%" PRId64 "..%" PRId64, k->min, k->max);
        return;
    case EGM_CFG_SIZE:
        doc_size(k->min, lo, sizeof(lo));
        doc_size(k->max, hi, sizeof(hi));
        if (k->max != INT64_MAX)
            snprintf(buf, len, "%s..%s", lo, hi);
        else if (k->min == 0)
            snprintf(buf, len, "0..2^63-1 bytes");
        else
            snprintf(buf, len, "%s and up", lo);
        return;
    case EGM_CFG_ENUM:
        egm__config_choices_text(k, buf, len);
        return;
    case EGM_CFG_RATIO:
        snprintf(buf, len, "%g..%g", EGM_SETTINGS_RATIO_MIN, EGM_SETTINGS_RATIO_MAX);
        return;
    case EGM_CFG_BOOL:
    case EGM_CFG_STRING:
        return;
    }
}

/* The accepted values in the docs' words: the range, the words, or the key's own text. */
static void doc_accepted(const egm_config_key_t *k, char *buf, size_t len)
{
    if (k->accepted != NULL) {
        snprintf(buf, len, "%s", k->accepted);
        return;
    }
    switch (k->type) {
    case EGM_CFG_INT:
    case EGM_CFG_SIZE:
        egm__config_range_text(k, buf, len);
        return;
    case EGM_CFG_BOOL:
        snprintf(buf, len, "`true`, `false` (also 1/0, yes/no, on/off)");
        return;
    case EGM_CFG_RATIO:
        snprintf(buf, len, "a number in %g..%g", EGM_SETTINGS_RATIO_MIN, EGM_SETTINGS_RATIO_MAX);
        return;
    case EGM_CFG_ENUM: {
        size_t used = 0;
        buf[0] = '\0';
        for (const egm_config_choice_t *c = k->choices; c->name != NULL && used < len; c++) {
            int n =
                snprintf(buf + used, len - used, "%s`%s`", c == k->choices ? "" : ", ", c->name);
            if (n < 0)
                break;
            used += (size_t)n;
        }
        return;
    }
    case EGM_CFG_STRING:
        break;
    }
    snprintf(buf, len, "any text up to 4096 characters");
}

/* "master, provider, client", and which of them only when contributing capacity. */
static void doc_roles(unsigned roles, char *buf, size_t len)
{
    static const struct {
        unsigned role;
        const char *name;
    } names[] = {
        {EGM_ROLE_MASTER, "master"}, {EGM_ROLE_PROVIDER, "provider"}, {EGM_ROLE_CLIENT, "client"}};
    size_t used = 0;
    buf[0] = '\0';
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]) && used < len; i++) {
        if ((roles & names[i].role) == 0)
            continue;
        int n = snprintf(buf + used, len - used, "%s%s", used > 0 ? ", " : "", names[i].name);
        if (n < 0)
            return;
        used += (size_t)n;
    }
    if ((roles & EGM_KEY_CAPACITY) != 0 && used < len)
        snprintf(buf + used, len - used, " (contributing capacity)");
}

void egm__config_doc_row(const egm_config_key_t *key, char *buf, size_t len)
{
    char accepted[512], roles[128];
    doc_accepted(key, accepted, sizeof(accepted));
    doc_roles(key->roles, roles, sizeof(roles));
    snprintf(buf, len, "| `%s` | %s | `%s` | %s | %s |", key->name, type_names[key->type],
             key->def[0] != '\0' ? key->def : "\"\"", accepted, roles);
}
