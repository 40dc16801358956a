/* Reference model for fault and load tests: per key, what a Get may
 * legitimately answer. A key's value of version v is deterministic
 * (egm_model_fill), so processes that share nothing but the key names agree on
 * it.
 *
 * Each key is in one of three states:
 * - committed: a put returned OK; exactly that version must read back. A
 *   not-found answer is a LOSS and fails the check, unless the test's own fault
 *   destroyed every replica of it: the test records where the replicas lie
 *   (egm_model_placed, or egm_model_record_placement through a client) and which
 *   segments its fault destroyed (egm_model_segment_destroyed); only a key whose
 *   every recorded replica lay on a destroyed segment may be gone
 *   ("lost by the fault"). A committed key with no recorded placement is never
 *   excused.
 * - absent: never put, or removed (remove answered OK or NOT_FOUND); a Get must
 *   answer not-found.
 * - uncertain: a put in flight, or one whose outcome a fault hid (an error other
 *   than a refusal), or a remove that failed: the versions it may hold and
 *   absence are all allowed.
 * Other bytes, or an object the model knows absent, are WRONG. */
#ifndef EGM_TEST_MODEL_H
#define EGM_TEST_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/egmstore.h>
#include "common/id.h"
#include "support/cluster.h"

#define EGM_MODEL_MAX_VERSIONS 8
#define EGM_MODEL_MAX_REPLICAS 4

typedef struct egm_model egm_model_t;

typedef struct {
    uint64_t gets_verified; /* Gets whose bytes matched an allowed version */
    uint64_t not_found;     /* not-found answers the model allowed (absent or uncertain keys) */
    uint64_t lost_by_fault; /* committed keys not found, every replica on a destroyed segment */
    uint64_t lost;          /* committed keys not found otherwise: must stay 0 */
    uint64_t errors;        /* Gets that failed otherwise (during a fault) */
    uint64_t wrong;         /* bytes no allowed version has, or an absent key found: must stay 0 */
} egm_model_stats_t;

/* How many keys the model holds in each state. */
typedef struct {
    size_t keys;
    size_t committed; /* of which doomed: every recorded replica on a destroyed segment */
    size_t doomed;
    size_t absent;
    size_t uncertain;
} egm_model_census_t;

egm_model_t *egm_model_create(void);
void egm_model_destroy(egm_model_t *model);

/* Deterministic contents of `key` at `version`, len bytes. */
void egm_model_fill(const char *key, unsigned version, void *buf, size_t len);

/* A put of (version, len) begins: the key is uncertain, that version allowed
 * besides what was. */
void egm_model_put_begin(egm_model_t *model, const char *key, unsigned version, size_t len);
/* The put ended with status: EGM_OK commits it (only it is allowed now, with
 * no placement recorded yet); EGM_ERR_EXISTS and refusals that cannot have
 * stored it (NO_SPACE, INVALID_*) drop the new version and restore the state
 * the key had before the put; any other failure leaves the key uncertain (a
 * fault may have hidden the outcome). */
void egm_model_put_end(egm_model_t *model, const char *key, unsigned version, egm_status_t status);
/* A remove ended with status: OK or NOT_FOUND make the key absent;
 * HAS_LEASE changes nothing; other failures make it uncertain. Returns -1
 * (counted as lost, logged) when NOT_FOUND answers for a key the model knows
 * committed and no fault of the test's excuses it; else 0. */
int egm_model_remove(egm_model_t *model, const char *key, egm_status_t status);
/* The key's outcome is unknown to the model from now on (a fault hit while
 * its put's outcome was unknown). */
void egm_model_uncertain(egm_model_t *model, const char *key);

/* Where the committed version's replicas lie (segment ids, at most
 * EGM_MODEL_MAX_REPLICAS; more are ignored). Replaces what was recorded; a
 * later put or remove forgets it. */
void egm_model_placed(egm_model_t *model, const char *key, const egm_id_t *segments, size_t n);
/* The placement recorded for key's committed version: up to max segment ids
 * into ids; returns how many there are (0: none recorded, or not committed). */
size_t egm_model_placement(egm_model_t *model, const char *key, egm_id_t *ids, size_t max);
/* The test's own fault destroyed `segment` (e.g. killed its provider): a
 * committed key whose every replica lay on destroyed segments may read back
 * not-found from now on. */
void egm_model_segment_destroyed(egm_model_t *model, egm_id_t segment);

/* Checks one Get's outcome; counts it in the stats. Returns 0 when allowed,
 * -1 when the bytes are wrong or a committed key was lost (also logged to
 * stderr with the key). Other errors than not-found are counted, not judged. */
int egm_model_check(egm_model_t *model, const char *key, egm_status_t status, const void *data,
                    size_t len);
/* Checks one Exist's outcome both ways: OK for an absent key is wrong,
 * NOT_FOUND for a committed key is a loss (unless the fault excuses it);
 * other statuses are counted as errors. Returns 0 when allowed, else -1. */
int egm_model_check_exist(egm_model_t *model, const char *key, egm_status_t status);
/* The committed version of key, or -1 when it is not committed. */
long egm_model_committed(egm_model_t *model, const char *key);
egm_model_stats_t egm_model_stats(egm_model_t *model);
egm_model_census_t egm_model_census(egm_model_t *model);
/* A copy of every key the model knows (*n_p of them), to read back without
 * holding the model: free each string and the array with free(). */
char **egm_model_keys(egm_model_t *model, size_t *n_p);

/* ---- against a cluster (model_cluster.c; link the client library) ---- */

/* Reads every key the model knows through client and checks it (gets that
 * fail otherwise than not-found count too); *found_p and *bytes_p receive the
 * objects found and their sizes rounded up to the master's allocation unit
 * (64 bytes), times `replicas`. Returns the number of failures: wrong objects,
 * committed keys lost without an excuse, failed gets. */
uint64_t egm_model_verify_all(egm_model_t *model, egm_client_t *client, unsigned replicas,
                              uint64_t *found_p, uint64_t *bytes_p);

/* Asks the master where key's replicas lie (StatKey: grants no lease) and
 * records it with egm_model_placed. EGM_ERR_NOT_FOUND when the master does
 * not have the key (nothing recorded); other errors as the call's. */
egm_status_t egm_model_record_placement(egm_model_t *model, egm_client_t *client, const char *key);
/* The ids of the segments the master lists whose name or tcp endpoint
 * contains `needle` (a provider's segments are named "host:PID/i"): up to
 * max into ids; returns how many match, or (size_t)-1 when the call fails. */
size_t egm_model_segments_matching(egm_client_t *client, const char *needle, egm_id_t *ids,
                                   size_t max);

/* A gauge from a master's /metrics on 127.0.0.1:http_port; -1 when missing. */
long long egm_model_master_metric(unsigned http_port, const char *name);
/* egm_master_rpc_requests_total{type="TYPE"}: requests of one RPC type so far, or -1. */
long long egm_model_master_rpc_count(unsigned http_port, const char *type);
/* The accounting check: the master's egm_master_keys equals keys,
 * egm_master_allocated_bytes less egm_master_held_bytes (space of objects
 * force-removed under a lease) and egm_master_slab_bytes (writers' open
 * slabs, not yet committed) equals bytes, and nothing is pending.
 * Returns 0 when they match; otherwise prints both sides to stderr, -1. */
int egm_model_check_master(unsigned http_port, uint64_t keys, uint64_t bytes);

/* The admin http port the cluster's master printed after its ready line
 * (started with --http-port 0), or 0. */
unsigned egm_model_admin_port(egm_test_cluster_t *cluster);

#endif
