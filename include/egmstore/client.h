/* egmstore client library: the store API an inference process links.
 *
 * A client talks to the master named by `master_server_addr`, reaches replicas
 * through the nvlink, shm or tcp transport (whichever `protocol` allows: auto
 * takes nvlink for a GPU buffer and a CUDA VMM segment it can import, else shm
 * on the same host, else tcp), and may contribute capacity of its own
 * (`global_segment_size` > 0), exactly like `egmstore provider`.
 *
 * Threads. One egm_client_t may be shared by any number of threads: the
 * object calls (put, get, exist, size, remove and their batch forms),
 * egm_register_buffer, egm_unregister_buffer, egm_client_health and
 * egm_client_metrics may run at the same time on one client (the master
 * connection takes concurrent calls, the buffer registry and the transfer
 * engine have locks of their own). egm_client_close may overlap only
 * egm_client_health and egm_client_metrics (a provider's HTTP thread reports
 * health while it closes): no other call may be in flight on that client when
 * it starts or start before it returns, and two closes must not overlap.
 * egm_client_destroy is the last call: nothing else may be in flight or come
 * after. Each client has a ping thread of its own; put and get batches of
 * 2048 keys or more also run helper threads for the duration of the call.
 * Clients in one process are independent.
 *
 * Ownership. Arguments are borrowed for the call: keys, configs,
 * egm_replicate_config_t and arrays may be reused or freed once it returns;
 * nothing is kept. Buffers are read or written during the call only and must
 * stay valid until it returns. Registered memory stays the caller's. The one
 * allocation handed out is egm_get's *data_p, freed with egm_buffer_free.
 *
 * Blocking. The object calls block their thread until done: each round trip
 * to the master is bounded by `rpc_timeout_ms` (its connect by
 * `connect_timeout_ms`), each tcp data request by `io_timeout_ms`; GPU copies
 * are waited for to the end.
 *
 * Errors (docs/errors.md explains each; egm_last_error() has the detail, on
 * the thread that got the error). Beside those listed per function:
 * - any call to the master: EGM_ERR_UNREACHABLE (no connection, or lost),
 *   EGM_ERR_TIMEOUT, EGM_ERR_PERMISSION (the master refused the cluster
 *   token), EGM_ERR_PROTOCOL (malformed reply), EGM_ERR_VERSION, EGM_ERR_IO,
 *   EGM_ERR_NO_MEMORY, EGM_ERR_INVALID_ARG (a request above `max_frame_size`);
 * - any copy to or from a replica: EGM_ERR_TRANSFER (a GPU copy failed),
 *   EGM_ERR_UNREACHABLE, EGM_ERR_TIMEOUT, EGM_ERR_IO, EGM_ERR_PROTOCOL or
 *   EGM_ERR_PERMISSION (from a provider's tcp data server or fd socket),
 *   EGM_ERR_NOT_SUPPORTED (`protocol` allows no transport to the segment),
 *   EGM_ERR_SEGMENT_NOT_FOUND (the segment was retired meanwhile),
 *   EGM_ERR_NO_CUDA, EGM_ERR_NO_MEMORY. */
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
    /* Replicas wanted, each on its own provider (and zone, and host, where
     * there are enough), 1..16; 0 means the config's `replica_num`. The
     * master places at least one and at most this many (fewer when fewer
     * providers have room: never two on one provider); above 16 the whole
     * put is refused with EGM_ERR_INVALID_ARG. */
    uint32_t replica_num;
    int with_soft_pin; /* evicted only when nothing else can be (docs/master.md) */
    int with_hard_pin; /* never evicted */
    /* Segment names tried first, in order (a name also matches the segments
     * named "name/..."; unknown names are skipped); at most 256. */
    const char *const *preferred_segments;
    size_t preferred_segments_count;
} egm_replicate_config_t;

/* Keys are NUL-terminated strings of 1..EGM_KEY_MAX bytes; any other key
 * answers EGM_ERR_INVALID_KEY without a request. */
#define EGM_KEY_MAX 4096

/* Creates a client: checks the configuration, connects to the master and
 * pings it, starts the ping thread, then mounts the contributed capacity if
 * any (`global_segment_size` > 0: allocate, register, mount every segment at
 * the master). The config is copied (borrowed for the call; no other thread
 * may modify it meanwhile). *client_p is set on EGM_OK only; whatever a
 * failure had set up is released (or, where a release failed too, abandoned
 * to the process's exit). Any thread; blocks for the setup (pool allocation
 * can take minutes).
 * Errors: EGM_ERR_INVALID_ARG (config or client_p NULL), EGM_ERR_CONFIG (a
 * combination of keys, the cluster token), EGM_ERR_NO_CUDA (protocol
 * nvlink or a CUDA pool without a driver or GPU), EGM_ERR_NO_MEMORY, the
 * master call errors of the first ping, the pool's allocation errors
 * (EGM_ERR_NO_MEMORY, EGM_ERR_NOT_SUPPORTED, ...), those of mounting
 * (EGM_ERR_SEGMENT_EXISTS, ...), EGM_ERR_INTERNAL (no ping thread). */
EGM_API egm_status_t egm_client_create(const egm_config_t *config, egm_client_t **client_p);
/* Withdraw contributed capacity (unmount at the master, stop serving, release
 * the memory, in that order) and stop pinging. A step that fails keeps what it
 * could not release (never freeing memory the master may still name), health
 * turns EGM_HEALTH_CLEANUP_PENDING, and the error is answered: call again to
 * retry from where it stopped. EGM_OK once everything is released (health:
 * EGM_HEALTH_NOT_INITIALIZED); afterwards only egm_client_health,
 * egm_client_metrics and egm_client_destroy are valid. Blocks for the
 * unmount, until the ping thread ends (a ping in flight: up to
 * `rpc_timeout_ms`) and for a last ping that tells the master this client
 * leaves (up to 1 s). Threads: see the top of this file (only health and
 * metrics may overlap it).
 * Errors: EGM_ERR_INVALID_ARG (client NULL), the master call errors of the
 * unmount, the transfer engine's or the CUDA driver's of a release step. */
EGM_API egm_status_t egm_client_close(egm_client_t *client);
/* egm_client_close, then free the client. Whatever a failed close still holds
 * is abandoned to the process's exit (logged). NULL is a no-op. The last
 * call on the client: no other may be in flight, from any thread. */
EGM_API void egm_client_destroy(egm_client_t *client);

/* Health of a client (and of `egmstore provider`, whose /health reports it).
 * Stable numeric values. */
typedef enum {
    EGM_HEALTH_HEALTHY = 0,            /* set up, master answering */
    EGM_HEALTH_NOT_INITIALIZED = 1,    /* no client, still setting up, or closed */
    EGM_HEALTH_MASTER_UNREACHABLE = 2, /* the last ping got no answer */
    EGM_HEALTH_CLEANUP_PENDING = 3,    /* a teardown step failed; egm_client_close retries */
} egm_health_t;

/* The client's health as of its last ping (no request of its own):
 * CLEANUP_PENDING wins over NOT_INITIALIZED (closed), which wins over
 * MASTER_UNREACHABLE (also while a resynchronisation with a restarted master
 * waits for a retry). NULL -> EGM_HEALTH_NOT_INITIALIZED. Thread-safe: any
 * thread, also while another closes the client (not during destroy). */
EGM_API egm_health_t egm_client_health(egm_client_t *client);
/* "healthy", "not_initialized", "master_unreachable", "cleanup_pending";
 * "unknown" for another value. A static string. Any thread. */
EGM_API const char *egm_health_string(egm_health_t health);
/* Prometheus text exposition of the client's metrics (contributed pool,
 * transfer engine, health), with snprintf's contract: returns the length the
 * whole text needs, writes at most len bytes, NUL-terminates when len > 0
 * (buf may be NULL when len is 0). NULL client: the text with every value 0
 * and health not_initialized. No request to the master. Thread-safe as
 * egm_client_health. Names: egm_client_* (docs/metrics.md, docs/egm-pool.md). */
EGM_API size_t egm_client_metrics(egm_client_t *client, char *buf, size_t len);
/* The transports this client may take to another process's segment, best
 * first, as names separated by one space: "nvlink shm tcp" under protocol
 * auto with a CUDA driver and a GPU, "shm tcp" without them, "tcp" under
 * protocol tcp. Which one a copy takes still depends on the segment (nvlink:
 * a CUDA VMM segment and a GPU buffer; shm: a segment on this host).
 * snprintf's contract, as egm_client_metrics. NULL client: "". Fixed when the
 * client is created: any thread, also during and after egm_client_close (not
 * during destroy). No error. */
EGM_API size_t egm_client_transports(egm_client_t *client, char *buf, size_t len);

/* Zero-copy calls (put_from, get_into and their batch forms) need their buffers
 * inside a registered range. The memory stays the caller's and must outlive the
 * registration; unregistering while a transfer uses it answers EGM_ERR_BUSY.
 * Register [addr, addr + len): host memory or GPU memory (the device is asked
 * of the driver once, here). Any thread, concurrently with transfers.
 * Errors: EGM_ERR_INVALID_ARG (client or addr NULL, len 0, a range that wraps,
 * or one that is neither GPU memory nor host memory mapped in this process:
 * a page of it missing), EGM_ERR_EXISTS (overlaps a registered range),
 * EGM_ERR_NO_MEMORY. A registered range of host memory with a page this
 * process may not write (a read-only mapping, from /proc/self/maps, read at
 * the first get into the range) is a put's source only: a get into any part of
 * it answers EGM_ERR_INVALID_ARG (unregister and register it again once it is
 * writable). A mapping that goes away or loses its write permission later
 * (freed, unmapped, mprotect), or a page the process may not even read
 * (PROT_NONE) used as a put's source, is the caller's error: a copy there may
 * still kill the process. */
EGM_API egm_status_t egm_register_buffer(egm_client_t *client, void *addr, size_t len);
/* Unregister the range that starts at addr. Any thread.
 * Errors: EGM_ERR_INVALID_ARG (client NULL), EGM_ERR_NOT_FOUND (no range
 * starts at addr), EGM_ERR_BUSY (a call in flight uses the range). */
EGM_API egm_status_t egm_unregister_buffer(egm_client_t *client, void *addr);

/* Put copies `len` bytes into the replicas the master places (see
 * egm_replicate_config_t; rc NULL: the config's `replica_num`, no pins, no
 * preference) and commits the object: PutStart, the copies, then PutEnd, or
 * PutRevoke when a copy failed (the key never becomes visible half-written).
 * An existing key answers EGM_ERR_EXISTS (callers may treat it as success);
 * so does a key whose put is still in progress, unless that put started
 * `put_start_discard_timeout_sec` ago or more (this one then takes the key).
 * egm_put takes data from any memory (host or GPU); egm_put_from needs src
 * inside a registered range. Any thread.
 * Errors: EGM_ERR_INVALID_ARG (client NULL, data NULL, len 0, replica_num or
 * preferred_segments_count too large), EGM_ERR_INVALID_KEY,
 * EGM_ERR_NOT_REGISTERED (put_from), EGM_ERR_EXISTS, EGM_ERR_NO_SPACE, the
 * master call and copy errors; from PutEnd, EGM_ERR_NOT_FOUND when the
 * master discarded the put as unfinished (`put_start_discard_timeout_sec`),
 * EGM_ERR_INVALID_ARG when another writer has taken the key since. */
EGM_API egm_status_t egm_put(egm_client_t *client, const char *key, const void *data, size_t len,
                             const egm_replicate_config_t *rc);
EGM_API egm_status_t egm_put_from(egm_client_t *client, const char *key, const void *src,
                                  size_t len, const egm_replicate_config_t *rc);

/* Get into a library-allocated buffer, freed with egm_buffer_free (host
 * memory). GetReplicaList grants a read lease; the copy tries the replicas
 * best transport first and falls back to the others. A key whose location
 * this client asked for less than location_cache_ms ago is served from that
 * location without asking the master (single gets, and batches of up to 256
 * keys when every key has one and the batch is not pipelined;
 * docs/consistency.md). *data_p (required) and
 * *len_p (may be NULL) are set on EGM_OK, else NULL and 0. Any thread.
 * Errors: EGM_ERR_INVALID_ARG (client or data_p NULL), EGM_ERR_INVALID_KEY,
 * EGM_ERR_NOT_FOUND, EGM_ERR_NOT_READY (still being written),
 * EGM_ERR_UNREACHABLE (no replica reachable under `protocol`, the detail
 * says why), EGM_ERR_LEASE_EXPIRED (the lease ran out before the copy ended:
 * the bytes may be wrong), the master call and copy errors (the last replica
 * tried). */
EGM_API egm_status_t egm_get(egm_client_t *client, const char *key, void **data_p, size_t *len_p);
/* Frees what egm_get returned. NULL is a no-op. Any thread. */
EGM_API void egm_buffer_free(void *data);
/* Get into registered memory of `cap` bytes; *len_p (may be NULL) receives
 * the object size, also with EGM_ERR_BUFFER_TOO_SMALL (0 when the master did
 * not answer with one). dst[0, size) must lie inside one registered range.
 * Any thread. Errors: as egm_get (client NULL, or dst in a range registered
 * read-only: EGM_ERR_INVALID_ARG), EGM_ERR_BUFFER_TOO_SMALL,
 * EGM_ERR_NOT_REGISTERED. */
EGM_API egm_status_t egm_get_into(egm_client_t *client, const char *key, void *dst, size_t cap,
                                  size_t *len_p);

/* EGM_OK if the key is committed, EGM_ERR_NOT_FOUND if not (also while it is
 * still being written). Like Get, grants a read lease on a committed object
 * (a Remove without force answers EGM_ERR_HAS_LEASE until it ends). Any
 * thread. Errors: EGM_ERR_INVALID_ARG (client NULL), EGM_ERR_INVALID_KEY, the
 * master call errors. */
EGM_API egm_status_t egm_exist(egm_client_t *client, const char *key);
/* Size of a committed object into *size_p (required). Asks GetReplicaList, so
 * it grants a read lease too. Any thread. Errors: EGM_ERR_INVALID_ARG (client
 * or size_p NULL), EGM_ERR_INVALID_KEY, EGM_ERR_NOT_FOUND, EGM_ERR_NOT_READY,
 * the master call errors. */
EGM_API egm_status_t egm_size(egm_client_t *client, const char *key, uint64_t *size_p);
/* Removes an object. Refused with EGM_ERR_HAS_LEASE while a read lease is
 * live, and with EGM_ERR_NOT_READY while it is still being written, unless
 * force. A force remove returns only once no client can serve the key from a
 * cached location any more: it waits as long as the master says (up to its
 * location_cache_ms; nothing when no force-removed key was read lately),
 * whatever the answer (docs/consistency.md). Without force, for an object
 * this client put in one of its slabs, a removal entry written into its
 * slab's log first lets a master with standbys answer without waiting for
 * them (docs/ha.md "Removes the pool describes"). Any thread. Errors:
 * EGM_ERR_INVALID_ARG (client NULL), EGM_ERR_INVALID_KEY, EGM_ERR_NOT_FOUND,
 * EGM_ERR_HAS_LEASE, EGM_ERR_NOT_READY, the master call errors. */
EGM_API egm_status_t egm_remove(egm_client_t *client, const char *key, int force);
/* Removes every object of the store (every client's), skipping those under a
 * read lease or still being written unless force; *removed_p (may be NULL)
 * gets how many went. With force, waits as egm_remove does. Any thread. Errors: EGM_ERR_INVALID_ARG
 * (client NULL), the master call errors. */
EGM_API egm_status_t egm_remove_all(egm_client_t *client, int force, uint64_t *removed_p);

/* Batch forms: one RPC per phase for all keys (from 2048 valid keys on, put
 * and get cut the batch into chunks of up to 1024 keys, one RPC per phase per
 * chunk, made ahead of the copies by helper threads). results[i] is key i's
 * status, as the single-key call would answer (an invalid key gets
 * EGM_ERR_INVALID_KEY in its own slot and the others run). The return value
 * is EGM_OK when every key got its own answer (even if some keys failed),
 * else the error that stopped the batch, which is then also in the results[i]
 * of every key it stopped (a pipelined batch returns that of its lowest chunk
 * that failed whole; the other chunks' keys keep their own answers). With
 * EGM_ERR_INVALID_ARG for a NULL argument, or with EGM_ERR_NO_MEMORY,
 * results[] may be incomplete. sizes_p[i] (may be NULL) receives object sizes
 * (0 for keys the master did not answer with one). Arrays have n entries. Any
 * thread, as the single-key calls.
 * egm_batch_put_from / egm_batch_get_into: srcs[i] / dsts[i] inside a
 * registered range, as egm_put_from / egm_get_into; lens[i] bytes put,
 * caps[i] bytes of room. */
EGM_API egm_status_t egm_batch_put_from(egm_client_t *client, size_t n, const char *const *keys,
                                        const void *const *srcs, const size_t *lens,
                                        const egm_replicate_config_t *rc, egm_status_t *results);
EGM_API egm_status_t egm_batch_get_into(egm_client_t *client, size_t n, const char *const *keys,
                                        void *const *dsts, const size_t *caps, size_t *sizes_p,
                                        egm_status_t *results);
/* results[i] as egm_exist would answer (each committed key gets a lease).
 * One RPC per 65536 valid keys; a call that fails whole answers its status for
 * each of its keys, and the first such status is returned. */
EGM_API egm_status_t egm_batch_exist(egm_client_t *client, size_t n, const char *const *keys,
                                     egm_status_t *results);
/* Scatter-gather batches (Mooncake's batch_*_multi_buffers): key i's object is
 * the concatenation of its parts part_addrs[f .. f + part_counts[i]) with f the
 * sum of the earlier counts (part_lens likewise). Put: the object is the parts
 * in order. Get: the object fills the parts in order and may be shorter than
 * their sum (sizes_p[i] tells how long it is); a longer one answers
 * EGM_ERR_BUFFER_TOO_SMALL. The bytes a part carries must lie inside a
 * registered range; an empty part (length 0, any address) carries nothing, as
 * do a get's parts past the object's end. A part count of 0 is invalid
 * (EGM_ERR_INVALID_ARG for the whole batch). Returns like the batch forms
 * above. */
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
/* Remove every key (one RPC per 65536 valid keys, as egm_batch_exist);
 * results[i] as egm_remove would answer. */
EGM_API egm_status_t egm_batch_remove(egm_client_t *client, size_t n, const char *const *keys,
                                      int force, egm_status_t *results);

#ifdef __cplusplus
}
#endif
#endif
