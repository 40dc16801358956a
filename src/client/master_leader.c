/* The leader of the HA masters, from etcd (see master_leader.h). */
#include <stdio.h>
#include <string.h>
#include "client/master_leader.h"
#include "common/alloc.h"
#include "common/log.h"
#include "ha/election.h"
#include "ha/etcd.h"

struct egm_master_leader {
    egm_etcd_t *etcd;
    char key[EGM_ELECTION_KEY_MAX];
};

bool egm__master_leader_is_etcd(const char *addr)
{
    return addr != NULL && strncmp(addr, "etcd://", 7) == 0;
}

egm_status_t egm__master_leader_create(const char *addr, const char *cluster_id, int timeout_ms,
                                       egm_master_leader_t **leader_p)
{
    egm_master_leader_t *l = egm_calloc(1, sizeof(*l), "master_leader");
    if (l == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "master leader");
    egm__election_master_key(cluster_id, l->key, sizeof(l->key));
    egm_status_t s = egm__etcd_create(addr, timeout_ms, &l->etcd);
    if (s != EGM_OK) {
        egm_free(l);
        return egm__set_error(s, "master_server_addr: %s", egm_last_error());
    }
    *leader_p = l;
    return EGM_OK;
}

void egm__master_leader_destroy(egm_master_leader_t *l)
{
    if (l == NULL)
        return;
    egm__etcd_destroy(l->etcd);
    egm_free(l);
}

egm_status_t egm__master_leader_resolve(void *arg, char *addr, size_t len)
{
    egm_master_leader_t *l = arg;
    egm_etcd_kv_t kv;
    egm_status_t s = egm__etcd_get(l->etcd, l->key, &kv, NULL);
    if (s == EGM_ERR_NOT_FOUND)
        return egm__set_error(EGM_ERR_UNREACHABLE, "no master leads now (etcd %s, key %s)",
                              egm__etcd_endpoint(l->etcd), l->key);
    if (s != EGM_OK)
        return egm__set_error(EGM_ERR_UNREACHABLE, "finding the master leader: %s",
                              egm_last_error());
    if (kv.len + 1 > len) {
        egm__etcd_kv_cleanup(&kv);
        return egm__set_error(EGM_ERR_UNREACHABLE, "the leader key %s holds %zu bytes", l->key,
                              kv.len);
    }
    memcpy(addr, kv.value, kv.len + 1);
    egm__etcd_kv_cleanup(&kv);
    return EGM_OK;
}
