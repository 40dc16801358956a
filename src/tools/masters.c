/* `egmstore ls` with master_server_addr etcd://...: the HA masters, each with
 * its role, read from etcd (the leader key and the members' listings,
 * docs/ha.md). */
#include <stdio.h>
#include <string.h>
#include "common/config_int.h"
#include "common/log.h"
#include "ha/election.h"
#include "ha/etcd.h"
#include "tools/cli.h"

egm_status_t egm__cli_print_masters(const egm_config_t *config)
{
    const egm_settings_t *settings = egm__config_settings(config);
    egm_etcd_t *etcd;
    egm_status_t s =
        egm__etcd_create(settings->master_server_addr, (int)settings->connect_timeout_ms, &etcd);
    if (s != EGM_OK)
        return s;
    char key[EGM_ELECTION_KEY_MAX], prefix[EGM_ELECTION_KEY_MAX];
    egm__election_master_key(settings->cluster_id, key, sizeof(key));
    egm__election_members_prefix(settings->cluster_id, prefix, sizeof(prefix));
    egm_etcd_kv_t leader;
    egm_etcd_kv_t *members = NULL;
    size_t n = 0;
    memset(&leader, 0, sizeof(leader)); /* cleaned up on every path, a failed get's too */
    s = egm__etcd_get(etcd, key, &leader, NULL);
    if (s == EGM_ERR_NOT_FOUND)
        memset(&leader, 0, sizeof(leader));
    if (s == EGM_OK || s == EGM_ERR_NOT_FOUND)
        s = egm__etcd_list(etcd, prefix, &members, &n);
    if (s != EGM_OK) {
        egm__etcd_kv_cleanup(&leader);
        egm__etcd_destroy(etcd);
        return s;
    }
    char text[300];
    printf("%-40s %-8s %s\n", "MASTER", "ROLE", "EPOCH");
    int leader_listed = 0;
    for (size_t i = 0; i < n; i++) {
        int leads = leader.value != NULL && strcmp(members[i].value, leader.value) == 0;
        leader_listed |= leads;
        if (leads)
            printf("%-40s %-8s %lld\n", egm__cli_escape(members[i].value, text, sizeof(text)),
                   "leader", (long long)leader.create_revision);
        else
            printf("%-40s %-8s -\n", egm__cli_escape(members[i].value, text, sizeof(text)),
                   "standby");
    }
    if (leader.value != NULL && !leader_listed)
        printf("%-40s %-8s %lld\n", egm__cli_escape(leader.value, text, sizeof(text)), "leader",
               (long long)leader.create_revision);
    if (leader.value == NULL)
        printf("(no master leads now)\n");
    egm__etcd_kvs_free(members, n);
    egm__etcd_kv_cleanup(&leader);
    egm__etcd_destroy(etcd);
    return EGM_OK;
}
