/* An etcd v3 client over its HTTP/JSON gateway (etcd 3.4+: /v3/kv/...,
 * /v3/lease/...): just what master election needs. Keys and values are
 * bytes; revisions and lease ids are etcd's int64s. Calls on one client are
 * serialized by its lock, so any thread may call. A call tries the endpoint
 * that answered last, then the others in turn, each within timeout_ms. */
#ifndef EGM_HA_ETCD_H
#define EGM_HA_ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>

/* Endpoints one client accepts. */
#define EGM_ETCD_ENDPOINTS_MAX 16
/* Room for a key listed by prefix. */
#define EGM_ETCD_KEY_MAX 512

typedef struct egm_etcd egm_etcd_t;

typedef struct {
    char *key;   /* egm_malloc'ed, NUL-terminated */
    char *value; /* egm_malloc'ed, NUL-terminated (values may hold any byte) */
    size_t len;
    int64_t create_revision, mod_revision, lease;
} egm_etcd_kv_t;

/* endpoints: "host:port" items separated by ';' or ',', each optionally
 * "http://"-prefixed, the whole optionally "etcd://"-prefixed (Mooncake's
 * master address form). Connects to nothing yet. Errors: EGM_ERR_CONFIG (the
 * detail names the item and the accepted form), EGM_ERR_NO_MEMORY. */
egm_status_t egm__etcd_create(const char *endpoints, int timeout_ms, egm_etcd_t **etcd_p);
void egm__etcd_destroy(egm_etcd_t *etcd);
/* The endpoint the last call used, "host:port" (static to the client). */
const char *egm__etcd_endpoint(const egm_etcd_t *etcd);

/* Errors of every call below: EGM_ERR_UNREACHABLE or EGM_ERR_TIMEOUT (no
 * endpoint answered), EGM_ERR_PROTOCOL (an answer that is not etcd's),
 * EGM_ERR_IO (etcd refused the request: its message in the detail),
 * EGM_ERR_NO_MEMORY. */

/* Grants a lease of ttl_s seconds: its id in *id_p, the TTL etcd gave in
 * *ttl_p (may be NULL). */
egm_status_t egm__etcd_lease_grant(egm_etcd_t *etcd, int64_t ttl_s, int64_t *id_p, int64_t *ttl_p);
/* Renews a lease once: *ttl_p the seconds it has now; EGM_ERR_NOT_FOUND when
 * it has expired or was revoked. */
egm_status_t egm__etcd_lease_keepalive(egm_etcd_t *etcd, int64_t id, int64_t *ttl_p);
/* Revokes a lease (deleting its keys); an unknown lease is EGM_OK. */
egm_status_t egm__etcd_lease_revoke(egm_etcd_t *etcd, int64_t id);

/* Reads key: EGM_ERR_NOT_FOUND when absent. *revision_p (may be NULL) is the
 * store's revision of the answer. kv_p is cleaned up by the caller. */
egm_status_t egm__etcd_get(egm_etcd_t *etcd, const char *key, egm_etcd_kv_t *kv_p,
                           int64_t *revision_p);
/* Writes key = value under lease (0: none). */
egm_status_t egm__etcd_put(egm_etcd_t *etcd, const char *key, const void *value, size_t len,
                           int64_t lease);
/* Creates key = value under lease only if key does not exist, in one
 * transaction: *created_p says which; *kv_p (may be NULL; clean it up) is the
 * key as it stands after: ours, or the holder's. */
egm_status_t egm__etcd_create_key(egm_etcd_t *etcd, const char *key, const void *value, size_t len,
                                  int64_t lease, bool *created_p, egm_etcd_kv_t *kv_p);
/* Deletes key only if its create_revision is create_revision (it is still
 * the one we created): *deleted_p (may be NULL) says whether. */
egm_status_t egm__etcd_delete_if(egm_etcd_t *etcd, const char *key, int64_t create_revision,
                                 bool *deleted_p);

/* Every key starting with prefix (at most 1000, in key order): *kvs_p an
 * egm_malloc'ed array of *n_p, freed with egm__etcd_kvs_free. */
egm_status_t egm__etcd_list(egm_etcd_t *etcd, const char *prefix, egm_etcd_kv_t **kvs_p,
                            size_t *n_p);
void egm__etcd_kvs_free(egm_etcd_kv_t *kvs, size_t n);

void egm__etcd_kv_cleanup(egm_etcd_kv_t *kv);

#endif
