/* Transports of the transfer engine (consumer side): each is an ops table in
 * its own file, registered once in transport.c, as UCX's uct_iface_ops_t.
 * The registered list is the order of preference (an egm_transport_t is a
 * position in it): routing walks it and takes the first transport that the
 * protocol allows and that reaches the segment; forget, release_pages, cached
 * ids, prepare and stats go to every transport that has the op.
 *
 * Adding a transport (RDMA, say): one file with its ops and state, one line in
 * transport.c's list, and its names in te.h's egm_transport_t (the value
 * callers rank by) and, to be selectable alone, in the protocol key's words
 * (egm_protocol_t and its choices, common/settings.h and config.c).
 *
 * Hot path: the engine fixes its walk when it is created (the transports its
 * protocol allows and that are available, and those with a retired op);
 * routing then calls `obstacle` with why == NULL (no formatting) along it and
 * the chosen transport's transfer; nothing here allocates or locks per op. */
#ifndef EGM_TE_TRANSPORT_H
#define EGM_TE_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "common/id.h"
#include "rpc/segment_desc.h"
#include "te/te.h"
#include "te/te_int.h"

typedef struct egm_nvlink egm_nvlink_t;

/* What the engine lends every transport; lives as long as the engine. */
typedef struct {
    egm_id_t client_id;
    const char *host_id;          /* this host's, compared with a descriptor's */
    const char *auth_token;       /* cluster token presented to providers ("" = none) */
    int io_timeout_ms;            /* requests to providers */
    egm_exposed_table_t *exposed; /* this process's own segments */
    /* GPU copies, staging ring, nvlink mapping cache: NULL without a driver
     * or a GPU, and then no op is given a GPU buffer (device is -1). */
    egm_nvlink_t *nvlink;
} egm_te_env_t;

typedef struct {
    const char *name; /* "shm": logs, egm__transport_name */
    /* The protocol value that allows this transport alone; every transport
     * is allowed under EGM_PROTOCOL_AUTO. */
    egm_protocol_t protocol;
    /* Moves this process's own segments: allowed under every protocol, asked
     * only for a segment whose owner is this engine's client, and before the
     * retired check (an own segment is served while exposed). */
    int own_memory;
    /* Carries only host memory: the engine stages a GPU buffer through the
     * pinned ring and gives `transfer` the host slot, piece by piece. */
    int host_memory_only;

    /* Its state for one engine (*state_p may stay NULL when it needs none).
     * A failure fails the engine's creation. NULL op: no state. */
    egm_status_t (*open)(const egm_te_env_t *env, void **state_p);
    void (*close)(void *state);

    /* Why this transport can reach nothing in this engine (no driver, say),
     * asked once after open: routing then skips it (its obstacle still
     * explains a failed route). NULL op or answer: it may reach segments. */
    const char *(*unavailable)(void *state);
    /* The reachability check: NULL when this transport can move bytes between
     * a buffer on `device` (-1: host memory) and the segment; else why not.
     * With why == NULL (routing) it must not format: any non-NULL answer will
     * do; with a buffer (the error path) it may write its reason there. */
    const char *(*obstacle)(const egm_te_env_t *env, void *state, const egm_segment_desc_t *segment,
                            int device, char *why, size_t why_cap);
    /* 1 when the id was retired here: no transport may reach it any more
     * (its provider may be gone). NULL op: never. */
    int (*retired)(void *state, egm_id_t segment_id);

    /* One op whose local buffer lives on `device` (-1: host; always -1 for a
     * host_memory_only transport), bounds already checked against the
     * descriptor. Sets nothing in op: returns its status. */
    egm_status_t (*transfer)(const egm_te_env_t *env, void *state, const egm_te_op_t *op,
                             int device);
    /* Instead of transfer: every op of one call routed here whose buffer is
     * on `device`, moved together. Sets each op's status; returns the first
     * failure. A host_memory_only transport has both: the batch for host
     * buffers (device -1), transfer for the staged pieces of GPU buffers. */
    egm_status_t (*transfer_batch)(const egm_te_env_t *env, void *state, int device,
                                   egm_te_op_t *const *ops, size_t n);

    /* Prepares a segment for later transfers in the background (import,
     * map), skipping one it cannot reach; the engine has checked that the
     * segment is neither own nor retired. prepare_wait waits until everything
     * prepared so far is done. */
    void (*prepare)(const egm_te_env_t *env, void *state, const egm_segment_desc_t *segment);
    void (*prepare_wait)(void *state);
    /* Drops what is cached for the segment (egm__te_forget_segment). */
    void (*forget)(void *state, egm_id_t segment_id);
    /* egm__te_release_pages, where the transport maps segments here. */
    void (*release_pages)(void *state, egm_id_t segment_id, uint64_t offset, uint64_t length);
    /* Ids with a cached mapping (egm_malloc'ed; NULL when none). */
    egm_status_t (*cached_ids)(void *state, egm_id_t **ids_p, size_t *n_p);
    /* Adds its figures to *stats_p (zeroed by the engine). */
    void (*stats)(void *state, egm_te_stats_t *stats_p);
} egm_transport_ops_t;

/* The registered transports, in order of preference; an egm_transport_t is
 * an index into it (at most EGM_TRANSPORTS_MAX, te.h). */
extern const egm_transport_ops_t *const egm__transports[];
extern const size_t egm__n_transports;

extern const egm_transport_ops_t egm__transport_local;  /* local.c */
extern const egm_transport_ops_t egm__transport_nvlink; /* nvlink.c */
extern const egm_transport_ops_t egm__transport_shm;    /* shm.c */
extern const egm_transport_ops_t egm__transport_tcp;    /* tcp_client.c */

#endif
