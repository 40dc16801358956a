/* Reference model for fault and load tests: per key, the contents a Get may
 * legitimately return. A key's value of version v is deterministic
 * (egm_model_fill), so processes that share nothing but the key names agree on
 * it. A committed put narrows a key to one version; a put in flight or one
 * whose outcome a fault hid leaves both the old and the new version (and
 * absence) allowed. Not-found is always allowed: faults may lose objects.
 * Other bytes, or an object the model knows was removed, are wrong. */
#ifndef EGM_TEST_MODEL_H
#define EGM_TEST_MODEL_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/egmstore.h>
#include "support/cluster.h"

#define EGM_MODEL_MAX_VERSIONS 8

typedef struct egm_model egm_model_t;

typedef struct {
    uint64_t gets_verified; /* Gets whose bytes matched an allowed version */
    uint64_t not_found;     /* Gets answered not-found */
    uint64_t errors;        /* Gets that failed otherwise (during a fault) */
    uint64_t wrong;         /* Gets with bytes no allowed version has: must stay 0 */
} egm_model_stats_t;

egm_model_t *egm_model_create(void);
void egm_model_destroy(egm_model_t *model);

/* Deterministic contents of `key` at `version`, len bytes. */
void egm_model_fill(const char *key, unsigned version, void *buf, size_t len);

/* A put of (version, len) begins: that version becomes allowed besides the old. */
void egm_model_put_begin(egm_model_t *model, const char *key, unsigned version, size_t len);
/* The put ended with status: EGM_OK commits it (only it is allowed now);
 * EGM_ERR_EXISTS and refusals that cannot have stored it (NO_SPACE,
 * INVALID_*) drop the new version; any other failure keeps both (a fault may
 * have hidden the outcome). */
void egm_model_put_end(egm_model_t *model, const char *key, unsigned version, egm_status_t status);
/* A remove ended with status: OK or NOT_FOUND leaves nothing allowed;
 * HAS_LEASE changes nothing; other failures keep what was allowed. */
void egm_model_remove(egm_model_t *model, const char *key, egm_status_t status);
/* Forget what was certain: every version so far may or may not be stored (a
 * fault happened while a put's outcome was unknown to the model). */
void egm_model_uncertain(egm_model_t *model, const char *key);

/* Checks one Get's outcome; counts it in the stats. Returns 0 when allowed,
 * -1 when the bytes are wrong (also logged to stderr with the key). */
int egm_model_check(egm_model_t *model, const char *key, egm_status_t status, const void *data,
                    size_t len);
/* The committed version of key, or -1 when none is certain. */
long egm_model_committed(egm_model_t *model, const char *key);
egm_model_stats_t egm_model_stats(egm_model_t *model);

/* Reads every key the model knows through client and checks it; *found_p and
 * *bytes_p receive the objects found and their sizes rounded up to the
 * master's allocation unit (64 bytes), times `replicas`. Returns the number of
 * wrong objects. */
uint64_t egm_model_verify_all(egm_model_t *model, egm_client_t *client, unsigned replicas,
                              uint64_t *found_p, uint64_t *bytes_p);

/* A gauge from a master's /metrics on 127.0.0.1:http_port; -1 when missing. */
long long egm_model_master_metric(unsigned http_port, const char *name);
/* The accounting check: the master's egm_master_keys and
 * egm_master_allocated_bytes equal keys and bytes, and nothing is pending.
 * Returns 0 when they match; otherwise prints both sides to stderr, -1. */
int egm_model_check_master(unsigned http_port, uint64_t keys, uint64_t bytes);

/* The admin http port the cluster's master printed after its ready line
 * (started with --http-port 0), or 0. */
unsigned egm_model_admin_port(egm_test_cluster_t *cluster);

#endif
