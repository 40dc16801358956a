/* egmstore client library: the store API an inference process links.
 *
 * A client talks to the master named by `master_server_addr`, reaches replicas
 * through the shm or tcp transport, and may contribute capacity of its own
 * (`global_segment_size` > 0), exactly like `egmstore provider`. */
#ifndef EGMSTORE_CLIENT_H
#define EGMSTORE_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/config.h>
#include <egmstore/status.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct egm_client egm_client_t;

/* Placement of a new object (Mooncake ReplicateConfig). */
typedef struct {
    uint32_t replica_num; /* >= 1; 0 means the config's `replica_num` */
    int with_soft_pin;
    int with_hard_pin;
    const char *const *preferred_segments; /* segment names, in order of preference */
    size_t preferred_segments_count;
} egm_replicate_config_t;

#define EGM_KEY_MAX 4096

/* Connect to the master, mount contributed capacity if any, start pinging.
 * The config is copied. */
EGM_API egm_status_t egm_client_create(const egm_config_t *config, egm_client_t **client_p);
/* Withdraw contributed capacity (unmount at the master, stop serving, release
 * the memory, in that order) and stop pinging. A step that fails keeps what it
 * could not release (never freeing memory the master may still name), health
 * turns EGM_HEALTH_CLEANUP_PENDING, and the error is answered: call again to
 * retry from where it stopped. EGM_OK once everything is released (health:
 * EGM_HEALTH_NOT_INITIALIZED); only egm_client_destroy is valid afterwards. */
EGM_API egm_status_t egm_client_close(egm_client_t *client);
/* egm_client_close, then free the client. Whatever a failed close still holds
 * is abandoned to the process's exit (logged). NULL is a no-op. */
EGM_API void egm_client_destroy(egm_client_t *client);

/* Health of a client (and of `egmstore provider`, whose /health reports it).
 * Stable numeric values. */
typedef enum {
    EGM_HEALTH_HEALTHY = 0,            /* set up, master answering */
    EGM_HEALTH_NOT_INITIALIZED = 1,    /* no client, still setting up, or closed */
    EGM_HEALTH_MASTER_UNREACHABLE = 2, /* the last ping got no answer */
    EGM_HEALTH_CLEANUP_PENDING = 3,    /* a teardown step failed; egm_client_close retries */
} egm_health_t;

/* NULL -> EGM_HEALTH_NOT_INITIALIZED. Thread-safe. */
EGM_API egm_health_t egm_client_health(egm_client_t *client);
/* "healthy", "not_initialized", "master_unreachable", "cleanup_pending". */
EGM_API const char *egm_health_string(egm_health_t health);
/* Prometheus text exposition of the client's metrics (contributed pool,
 * transfer engine, health), with snprintf's contract: returns the length the
 * whole text needs, writes at most len bytes, NUL-terminates when len > 0. */
EGM_API size_t egm_client_metrics(egm_client_t *client, char *buf, size_t len);

/* Zero-copy calls (put_from, get_into and their batch forms) need their buffers
 * inside a registered range. The memory stays the caller's and must outlive the
 * registration; unregistering while a transfer uses it answers EGM_ERR_BUSY. */
EGM_API egm_status_t egm_register_buffer(egm_client_t *client, void *addr, size_t len);
EGM_API egm_status_t egm_unregister_buffer(egm_client_t *client, void *addr);

/* Put copies `len` bytes into `replica_num` replicas and commits the object.
 * An existing key answers EGM_ERR_EXISTS (callers may treat it as success). */
EGM_API egm_status_t egm_put(egm_client_t *client, const char *key, const void *data, size_t len,
                             const egm_replicate_config_t *rc);
EGM_API egm_status_t egm_put_from(egm_client_t *client, const char *key, const void *src,
                                  size_t len, const egm_replicate_config_t *rc);

/* Get into a library-allocated buffer, freed with egm_buffer_free. */
EGM_API egm_status_t egm_get(egm_client_t *client, const char *key, void **data_p, size_t *len_p);
EGM_API void egm_buffer_free(void *data);
/* Get into registered memory of `cap` bytes; *len_p receives the object size. */
EGM_API egm_status_t egm_get_into(egm_client_t *client, const char *key, void *dst, size_t cap,
                                  size_t *len_p);

/* EGM_OK if the key is committed, EGM_ERR_NOT_FOUND if not. */
EGM_API egm_status_t egm_exist(egm_client_t *client, const char *key);
EGM_API egm_status_t egm_size(egm_client_t *client, const char *key, uint64_t *size_p);
/* Refused with EGM_ERR_HAS_LEASE while a read lease is live, unless force. */
EGM_API egm_status_t egm_remove(egm_client_t *client, const char *key, int force);
EGM_API egm_status_t egm_remove_all(egm_client_t *client, int force, uint64_t *removed_p);

/* Batch forms: one RPC per phase for all keys; results[i] is key i's status
 * (an invalid key gets EGM_ERR_INVALID_KEY in its own slot and the others
 * run). The return value is EGM_OK when the batch ran (even if some keys
 * failed), or the error that stopped the whole batch, then also in every
 * results[i]. sizes_p[i] receives object sizes. */
EGM_API egm_status_t egm_batch_put_from(egm_client_t *client, size_t n, const char *const *keys,
                                        const void *const *srcs, const size_t *lens,
                                        const egm_replicate_config_t *rc, egm_status_t *results);
EGM_API egm_status_t egm_batch_get_into(egm_client_t *client, size_t n, const char *const *keys,
                                        void *const *dsts, const size_t *caps, size_t *sizes_p,
                                        egm_status_t *results);
EGM_API egm_status_t egm_batch_exist(egm_client_t *client, size_t n, const char *const *keys,
                                     egm_status_t *results);
/* Scatter-gather batches (Mooncake's batch_*_multi_buffers): key i's object is
 * the concatenation of its parts part_addrs[f .. f + part_counts[i]) with f the
 * sum of the earlier counts (part_lens likewise). Put: the object is the parts
 * in order. Get: the object fills the parts in order and may be shorter than
 * their sum (sizes_p[i] tells how long it is); a longer one answers
 * EGM_ERR_BUFFER_TOO_SMALL. The bytes a part carries must lie inside a
 * registered range; an empty part (length 0, any address) carries nothing, as
 * do a get's parts past the object's end. A part count of 0 is invalid. Returns
 * like the batch forms above. */
EGM_API egm_status_t egm_batch_put_from_parts(egm_client_t *client, size_t n,
                                              const char *const *keys, const size_t *part_counts,
                                              const void *const *part_addrs,
                                              const size_t *part_lens,
                                              const egm_replicate_config_t *rc,
                                              egm_status_t *results);
EGM_API egm_status_t egm_batch_get_into_parts(egm_client_t *client, size_t n,
                                              const char *const *keys, const size_t *part_counts,
                                              void *const *part_addrs, const size_t *part_lens,
                                              size_t *sizes_p, egm_status_t *results);
/* Remove every key (one RPC); results[i] as egm_remove would answer. */
EGM_API egm_status_t egm_batch_remove(egm_client_t *client, size_t n, const char *const *keys,
                                      int force, egm_status_t *results);

#ifdef __cplusplus
}
#endif
#endif
