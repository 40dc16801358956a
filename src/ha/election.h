/* Leader election among masters through etcd: each candidate tries to
 * create one key under its own lease; the one that did leads until its lease
 * ends, the others watch the key (by polling) and try again when it is gone.
 *
 * Fencing: a leader counts itself leading only until the time its lease may
 * have run out by its own clock (the moment it sent the last successful
 * grant or keepalive, plus the TTL, less a margin), so it stops before etcd
 * can let another candidate in. The create revision of the key is the
 * leader's epoch: it grows with every new leader, so that followers of the
 * leader (clients, providers, standbys) can tell an old leader from a new
 * one. docs/ha.md tells the whole story. */
#ifndef EGM_HA_ELECTION_H
#define EGM_HA_ELECTION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>

typedef struct egm_election egm_election_t;

/* Room for a leader key. */
#define EGM_ELECTION_KEY_MAX 300

/* The etcd key the masters of cluster cluster_id elect their leader under,
 * and clients read it from: "egmstore/<cluster_id>/master/leader". */
void egm__election_master_key(const char *cluster_id, char *key, size_t len);
/* The prefix under which the masters of cluster_id are listed, each as
 * <prefix><its value> = its value, under a lease of its own:
 * "egmstore/<cluster_id>/master/members/". */
void egm__election_members_prefix(const char *cluster_id, char *prefix, size_t len);

typedef struct {
    const char *endpoints; /* etcd endpoints (ha/etcd.h's form) */
    const char *key;       /* the leader key, e.g. "egmstore/<cluster>/master" */
    const char *value;     /* what this candidate publishes when it leads: its address */
    int ttl_s;             /* lease TTL, 2..3600 (etcd's own minimum is about 2 s) */
    int poll_ms;           /* how often a follower looks at the key; 0: ttl_s * 1000 / 8 */
    /* When set, the candidate also lists itself as <members_prefix><value>
     * under a lease of its own, renewed with the election's, so that tools
     * can show every candidate and not only the leader (NULL = not listed). */
    const char *members_prefix;
    /* Called from the election's thread when this candidate starts (leading,
     * with its epoch) or stops leading other than by stop/abandon; may be
     * NULL. It should be quick. */
    void (*on_change)(void *arg, bool leading, int64_t epoch);
    void *arg;
    /* Asked on the election's thread each time the leader key is found
     * absent, before standing: false holds this candidate back (a standby
     * without its predecessor's latest state, master/replication.h). NULL:
     * always stand. */
    bool (*may_campaign)(void *arg);
} egm_election_params_t;

/* Starts campaigning on a thread of its own (params are copied). Errors:
 * EGM_ERR_CONFIG (endpoints, an empty key or value, ttl_s out of range),
 * EGM_ERR_NO_MEMORY, EGM_ERR_INTERNAL (no thread). */
egm_status_t egm__election_start(const egm_election_params_t *params, egm_election_t **e_p);
/* Stops: a leader resigns (deletes its key if still its own, revokes its
 * lease) so that another takes over at once. NULL is a no-op. */
void egm__election_stop(egm_election_t *e);
/* As stop, but without resigning: what a crashed leader leaves behind (for
 * tests of failover). */
void egm__election_abandon(egm_election_t *e);

/* Whether this candidate leads now (fenced by its own clock, see above), and
 * its epoch then (may be NULL). Lock-free; any thread, as often as wanted. */
bool egm__election_leading(const egm_election_t *e, int64_t *epoch_p);
/* Until when (egm__now_ms) this candidate counts itself leading: its fence,
 * after which another can be elected only some time later; 0 when it does
 * not lead. Lock-free; any thread. */
uint64_t egm__election_fence_ms(const egm_election_t *e);
/* The leader as last seen: its value into addr (len bytes, NUL-terminated)
 * and epoch. EGM_ERR_NOT_FOUND while none is known. Any thread. */
egm_status_t egm__election_leader(egm_election_t *e, char *addr, size_t len, int64_t *epoch_p);
/* Elections this candidate won, and leaderships it lost (not by stop). */
uint64_t egm__election_wins(const egm_election_t *e);
uint64_t egm__election_losses(const egm_election_t *e);

#endif
