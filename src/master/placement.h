/* Placement: which segments receive the replicas of one object (or of one
 * slab), in which order (docs/master.md "Placement").
 *
 * Replicas of one object go to distinct failure domains: never two on one
 * provider (a segment's owner, the client that mounted it), and in distinct
 * zones (a segment's zone, its provider's `zone` setting), then on distinct
 * hosts (its host_id), whenever the segments with room allow it. The
 * candidates are taken in this order: the preferred segments (in the
 * request's order), then the placement strategy's order three times: first
 * only segments in a zone no replica is in yet, then on a host none is on,
 * then any segment of a provider that holds none. Fewer providers with room than replicas wanted
 * gives fewer replicas: the caller says how many it got.
 *
 * A segment whose provider the master believes gone (egm_segment_t.unreachable:
 * its connections closed, not yet dropped) and segments of the excluded
 * providers are never candidates.
 *
 * Not thread-safe: the object index calls it with its `space` lock held. */
#ifndef EGM_MASTER_PLACEMENT_H
#define EGM_MASTER_PLACEMENT_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "common/id.h"
#include "common/settings.h" /* egm_placement_t */
#include "master/segment_table.h"

typedef struct egm_placer egm_placer_t;

typedef struct {
    egm_placement_t strategy;
    const char *writer_host_id; /* for local_first; NULL or "" = unknown (then random) */
    /* Segment names tried first, in this order (best effort): a name matches
     * a segment named exactly so, or every segment named "NAME/...". */
    const char *const *preferred;
    size_t n_preferred;
    /* Segments already holding replicas of the object (re-replication: the
     * surviving copies): their providers get no other, their zones and hosts
     * are avoided first. May be NULL with n_holding 0. */
    egm_segment_t *const *holding;
    size_t n_holding;
    /* Providers (segment owners) that must get no replica. */
    const egm_id_t *exclude_providers;
    size_t n_exclude;
} egm_placement_request_t;

/* Asked to put a replica in `segment`: 1 when it did (allocated the space),
 * 0 when it could not (full): the next candidate is tried. */
typedef int (*egm_placement_try_t)(void *arg, egm_segment_t *segment);

egm_status_t egm__placer_create(egm_placer_t **placer_p);
void egm__placer_destroy(egm_placer_t *placer);
/* The placer's random numbers (xorshift, seeded at random). */
uint64_t egm__placer_random(egm_placer_t *placer);

/* Chooses up to `want` segments of `table` for one object and calls try_fn
 * on candidates in order until `want` accepted one (or none is left);
 * *placed_p: how many accepted. The segments try_fn accepts count as holding
 * for the rest of the call. EGM_ERR_NO_MEMORY (scratch space; nothing was
 * tried). Runs in O(segments x replicas). This is also how re-replication
 * picks new homes: `holding` = the surviving replicas' segments,
 * `exclude_providers` = providers known to be going away. */
egm_status_t egm__placement_choose(egm_placer_t *placer, egm_segment_table_t *table,
                                   const egm_placement_request_t *req, uint32_t want,
                                   egm_placement_try_t try_fn, void *arg, uint32_t *placed_p);

/* Whether two segments share a provider, a host (host_id; "" counts as the
 * provider's own host), a zone (without a zone on both, a host is its own
 * zone). */
int egm__placement_same_provider(const egm_segment_t *a, const egm_segment_t *b);
int egm__placement_same_host(const egm_segment_t *a, const egm_segment_t *b);
int egm__placement_same_zone(const egm_segment_t *a, const egm_segment_t *b);

#endif
