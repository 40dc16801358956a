/* Where the master is when master_server_addr is "etcd://host:port[;...]":
 * the leader of the HA masters, read from etcd's leader key (ha/election.h)
 * before every (re)connect of the client's RPC connection. */
#ifndef EGM_CLIENT_MASTER_LEADER_H
#define EGM_CLIENT_MASTER_LEADER_H

#include <stdbool.h>
#include <stddef.h>
#include <egmstore/status.h>

typedef struct egm_master_leader egm_master_leader_t;

/* Whether a master_server_addr names etcd rather than a master. */
bool egm__master_leader_is_etcd(const char *master_server_addr);
/* For an etcd:// address and the cluster's id. Errors: EGM_ERR_CONFIG (the
 * endpoints), EGM_ERR_NO_MEMORY. */
egm_status_t egm__master_leader_create(const char *master_server_addr, const char *cluster_id,
                                       int timeout_ms, egm_master_leader_t **leader_p);
void egm__master_leader_destroy(egm_master_leader_t *leader);
/* The resolver of rpc/client.h: the leader's "host:port". EGM_ERR_UNREACHABLE
 * when etcd answers no leader or cannot be reached (the detail says which). */
egm_status_t egm__master_leader_resolve(void *leader, char *addr, size_t len);

#endif
