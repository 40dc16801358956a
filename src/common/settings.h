/* The typed view of a configuration: one field per key of the table in
 * src/common/config.c, named as the key, kept in sync on every set. Code reads
 * these fields, never keys by name (a misspelt field does not compile; a
 * misspelt key string read 0 at run time). */
#ifndef EGM_COMMON_SETTINGS_H
#define EGM_COMMON_SETTINGS_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/config.h>
#include "common/log.h"

/* The words of the enum keys, as values of their settings fields. */
typedef enum {
    EGM_PROTOCOL_AUTO = 0, /* nvlink > shm > tcp, whichever reaches the segment */
    EGM_PROTOCOL_SHM = 1,
    EGM_PROTOCOL_TCP = 2,
    EGM_PROTOCOL_NVLINK = 3, /* only nvlink: anything else fails with NOT_SUPPORTED */
} egm_protocol_t;            /* protocol */

typedef enum {
    EGM_PLACEMENT_RANDOM = 0,
    EGM_PLACEMENT_FREE_RATIO_FIRST = 1,
    EGM_PLACEMENT_LOCAL_FIRST = 2,
} egm_placement_t; /* placement_strategy */

typedef enum {
    EGM_POOL_MEMORY_HOST = 0,      /* memfd host memory (shm, tcp) */
    EGM_POOL_MEMORY_HOST_NUMA = 1, /* CUDA VMM on a host NUMA node */
    EGM_POOL_MEMORY_DEVICE = 2,    /* CUDA VMM in a GPU's HBM */
} egm_pool_memory_t;               /* pool_memory */

typedef enum {
    EGM_HANDLE_TYPE_AUTO = 0,
    EGM_HANDLE_TYPE_FABRIC = 1,
    EGM_HANDLE_TYPE_POSIX_FD = 2,
} egm_handle_type_t; /* egm_handle_type */

/* The range of every ratio key (a share of something). */
#define EGM_SETTINGS_RATIO_MIN 0.0
#define EGM_SETTINGS_RATIO_MAX 1.0
/* Bounds of the table's keys that code given its values another way (the
 * master's object index, egm__objects_params_check) checks as well. */
#define EGM_SETTINGS_SOFT_PIN_TTL_MAX_MS 86400000  /* default_kv_soft_pin_ttl: 24 h */
#define EGM_SETTINGS_MIN_RESIDENCY_MAX_MS 86400000 /* eviction_min_residency_ms: 24 h */

/* Field types by key type: string const char * (owned by the config, valid
 * until the key is set again), int int64_t, size uint64_t (bytes), bool int
 * (0 or 1), enum the key's enum type, ratio double. Ranges are the table's. */
typedef struct egm_settings {
    egm_log_level_t log_level;
    const char *master_server_addr;
    const char *listen_address;
    int64_t port;
    int64_t http_port;
    int64_t rpc_threads;
    int64_t rpc_server_spin_us;
    const char *local_hostname;
    const char *zone;
    egm_protocol_t protocol;
    uint64_t global_segment_size;
    uint64_t max_mr_size;
    int allow_overcommit;
    int64_t data_port;
    int64_t replica_num;
    int64_t rpc_timeout_ms;
    int64_t rpc_spin_us;
    int64_t connect_timeout_ms;
    int64_t io_timeout_ms;
    int64_t ping_interval_ms;
    int64_t default_kv_lease_ttl;
    int64_t location_cache_ms;
    int64_t location_cache_entries;
    uint64_t slab_bytes;
    int64_t client_ttl;
    int64_t client_disconnect_grace_ms;
    int64_t default_kv_soft_pin_ttl;
    int64_t put_start_discard_timeout_sec;
    double eviction_high_watermark_ratio;
    double eviction_ratio;
    int64_t eviction_min_residency_ms;
    egm_placement_t placement_strategy;
    uint64_t rereplication_bytes_per_sec;
    uint64_t max_frame_size;
    egm_pool_memory_t pool_memory;
    int64_t pool_location;
    egm_handle_type_t egm_handle_type;
    int enable_egm_store_pool;
    const char *egm_numa_nodes;
    int64_t egm_setup_threads;
    int64_t provider_http_port;
    int prewarm;
    int64_t prewarm_concurrency;
    uint64_t nvlink_max_inflight_bytes;
    uint64_t nvlink_chunk_size;
    uint64_t nvlink_bounce_buffer;
    int nvlink_low_priority_stream;
    const char *auth_token;
    const char *auth_token_file;
    int64_t fd_allowed_gid;
    const char *cluster_id;
    int enable_ha;
    const char *etcd_endpoints;
    int64_t ha_lease_ttl;
    int ha_early_grants;
} egm_settings_t;

/* The settings of `config` (never NULL for a config). Valid while the config
 * lives; a set changes them. The same threads as the config may read them. */
const egm_settings_t *egm__config_settings(const egm_config_t *config);

/* True if the key of settings field `field` was set explicitly (file, env,
 * flag or egm_config_set), e.g. EGM_CONFIG_IS_SET(config, http_port). */
#define EGM_CONFIG_IS_SET(config, field)                                                           \
    egm__config_field_is_set((config), offsetof(egm_settings_t, field))
int egm__config_field_is_set(const egm_config_t *config, size_t offset);

/* The value of the key of settings field `field` as it was given (for
 * messages: an enum's word, a size as written), e.g.
 * EGM_CONFIG_TEXT(config, protocol). Valid until the key is set again. */
#define EGM_CONFIG_TEXT(config, field)                                                             \
    egm__config_field_text((config), offsetof(egm_settings_t, field))
const char *egm__config_field_text(const egm_config_t *config, size_t offset);

#endif
