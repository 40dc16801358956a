/* A writer's slabs (client-side allocation; docs/master.md "Client-side
 * allocation", docs/consistency.md): pool space the master granted this
 * client whole, in which it places its puts itself, each call then published
 * with one Commit. A put that finds room in an open slab makes no round trip
 * before its copy.
 *
 * Reservations bump a slab's cursor (sizes rounded to EGM_OBJECT_ALIGN), one
 * slab per placement class (replica_num and preferred segments). A slab takes
 * new reservations only while this client's own clock says the master still
 * knows it, counted from when a request that proved so was SENT (the grant,
 * or a Commit it answered for that slab): no longer than the cache bound the
 * master sends (location_cache_ms; a master that restarted has its providers
 * wait that long before their space is placed again), and half the slab's
 * lease (the master gives its unclaimed space back at the lease's end). The
 * reservations of the call that got the slab are always served from it (the
 * master just placed it, as a PutStart would).
 *
 * A slab out of room, past those bounds, or pushed out by a fifth class is
 * retired: once no reservation in it is left uncommitted it is returned (its
 * id rides on the next SlabGrant or Commit, or the client's close), and the
 * master frees what was never committed. When the master cannot be trusted
 * (a failed ping, a restart, a view reset) every slab is dropped at once and
 * never returned: that master, if it is the same, frees them at their lease.
 * Thread-safe. */
#ifndef EGM_CLIENT_SLABS_H
#define EGM_CLIENT_SLABS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <egmstore/client.h>
#include <egmstore/status.h>
#include "client/own_places.h"
#include "common/id.h"
#include "rpc/keys_reply.h"
#include "rpc/segment_desc.h"

#define EGM_WSLAB_EXTENTS_MAX 16
#define EGM_WSLAB_CLASSES 4 /* open slabs at once */
/* A put asks for grants the master may answer before its standbys hold them
 * (docs/ha.md) only when its copies follow at once and total at most this
 * many bytes, so that they end well within the master's allowance. */
#define EGM_WSLAB_EARLY_CALL_MAX (64ull << 20)
/* Time left in such a slab's place_within_ms below which it takes no new
 * object: room for the copy to start. */
#define EGM_WSLAB_EARLY_SLACK_MS 100

typedef struct egm_wslab egm_wslab_t;

/* Where one key of a put goes: its slab (NULL: not placed) and offset;
 * logged: room for its entry in the slab's commit log was set aside. */
typedef struct {
    egm_wslab_t *slab;
    uint64_t offset;
    int logged;
} egm_wslab_ref_t;

typedef struct egm_wslabs egm_wslabs_t;

struct egm_client;

/* slab_bytes: what a grant asks for at least (0: client-side allocation off,
 * egm__wslabs_on says 0). */
egm_status_t egm__wslabs_create(uint64_t slab_bytes, egm_wslabs_t **slabs_p);
/* Frees everything (no RPC: egm__wslabs_close first). */
void egm__wslabs_destroy(egm_wslabs_t *slabs);
int egm__wslabs_on(const egm_wslabs_t *slabs);

/* Places keys sizes[0..n) (each > 0) of a put with rc (NULL: defaults):
 * refs[i] for each, or status[i] the refusal (a SlabGrant that failed:
 * NO_SPACE and the like). Grants slabs as needed: at most one SlabGrant per
 * slab the keys need, asking for the rest of the call at once. copy_now:
 * the copies follow at once (not placed ahead of others): a grant may then
 * be answered before the master's standbys hold it (docs/ha.md "Grants the
 * standbys do not hold yet"), and copies into that slab start only within
 * its place_within_ms of asking, until a Commit there is answered. */
void egm__wslabs_reserve(struct egm_client *client, const egm_replicate_config_t *rc, size_t n,
                         const uint64_t *sizes, int copy_now, egm_wslab_ref_t *refs,
                         egm_status_t *status);
/* After egm__wslabs_reserve with copy_now: the keys placed in a slab whose
 * grant the standbys may not hold yet, when its place_within_ms leaves less
 * than EGM_WSLAB_EARLY_SLACK_MS for the copy to start (a grant answered
 * late) or an extent is not reached over shared memory (a copy that may take
 * too long), are placed no longer (status[i] EGM_INPROGRESS, refs[i].slab
 * NULL; the slab retired), for the caller to place again without copy_now;
 * their count. */
size_t egm__wslabs_unplace_late(struct egm_client *client, size_t n, egm_wslab_ref_t *refs,
                                egm_status_t *status);
/* Where the copy of a key placed at ref goes: its extents' segments and
 * offsets (room for EGM_WSLAB_EXTENTS_MAX); their count. */
uint32_t egm__wslab_targets(const egm_wslab_ref_t *ref, const egm_segment_desc_t **segs,
                            uint64_t *at);
uint64_t egm__wslab_id(const egm_wslab_t *slab);
/* Before the copy of refs[0..n): a key whose slab the client dropped (the
 * master may be gone: UNREACHABLE), or whose time ran out since it was
 * reserved (TIMEOUT: past the slab's lease, past the cache bound counted
 * from the last request that showed the master knows it, or past the grant's
 * place_within_ms while no Commit there was answered), is not copied;
 * status[i] says why, and the slab takes no more objects. */
void egm__wslabs_check_copy(egm_wslabs_t *slabs, size_t n, const egm_wslab_ref_t *refs,
                            egm_status_t *status);
/* After the copies of refs[0..n) (status[i] EGM_OK: key i's copy went
 * through): writes each such key's entry into its slab's commit log, in
 * every extent, when the slab set room aside for it, its key fits an entry
 * and every extent is reached through shared memory (a copy that needs no
 * round trip: docs/ha.md "Commits the pool describes"); seqs[i]: its seq, or
 * 0 (no entry: the key's Commit waits for the master's standbys). torn[i]:
 * the seq of an entry whose write failed (on some extent it may have
 * landed: the master notes it seen, so that no new leader adopts it), else 0;
 * the slab's log ends there. Entries of one slab are written in seq order,
 * under the slabs' lock, so that a log has no gap a reader would stop at. */
void egm__wslabs_log(struct egm_client *client, size_t n, const egm_wslab_ref_t *refs,
                     const char *const *keys, const uint64_t *sizes,
                     const egm_replicate_config_t *rc, const egm_status_t *status, uint64_t *seqs,
                     uint64_t *torn);
/* A Remove's removal entries (docs/ha.md "Removes the pool describes"): the
 * slab whose log holds them (NULL: none written), and per key the place of
 * its object the entry names (places[i].segment nil: none known). */
typedef struct {
    egm_wslab_t *slab;
    egm_own_place_t *places;
} egm_wslab_removal_t;

/* After a Commit of refs[0..n) (commit[i]: key i's answer, seqs[i] its log
 * entry or 0): each key committed in a slab is remembered with its place
 * (its first replica's segment and offset, and its entry), for its Remove
 * (client/own_places.h). */
void egm__wslabs_remember(egm_wslabs_t *slabs, size_t n, const egm_wslab_ref_t *refs,
                          const char *const *keys, const egm_status_t *commit,
                          const uint64_t *seqs);
/* The places of keys[0..n) forgotten (a force Remove: it writes no removal
 * entry); n 0 and keys NULL: every place (a RemoveAll). */
void egm__wslabs_forget_places(egm_wslabs_t *slabs, size_t n, const char *const *keys);
/* Before a plain Remove of keys[0..n) (rm->places: room for n): for each key this client put in a
 * slab and remembers (the place is forgotten then), writes a removal entry naming the key and its
 * object's place into the commit log of this client's most recently used
 * open slab that keeps one (every extent over shared memory, its grant not
 * answered early, room for n entries), in every extent; the slab is held
 * until egm__wslabs_removed. The master answers such a Remove without
 * waiting for its standbys when every entry names its object and lies on
 * the object's providers (a new leader reads the entries and drops the
 * objects). seqs[i]: key i's entry, or 0 (none: no place known, or a key
 * longer than a removal entry holds); torn[i]: the seq of an entry whose
 * write failed (the log ends there; the master notes it seen), else 0.
 * rm->slab NULL when no slab could take them (nothing written). */
void egm__wslabs_log_removals(struct egm_client *client, size_t n, const char *const *keys,
                              egm_wslab_removal_t *rm, uint64_t *seqs, uint64_t *torn);
/* After the Remove that carried them: answered, when the master took the
 * request (it noted every entry, so no new leader applies one it refused).
 * When not, each entry written is first overwritten with a void one, so that
 * no later leader applies a removal whose request it may never have had.
 * Then the slab is let go. */
void egm__wslabs_removed(struct egm_client *client, const egm_wslab_removal_t *rm, size_t n,
                         const char *const *keys, const uint64_t *seqs, const uint64_t *torn,
                         int answered);
/* 1 when a master request failed for want of an answer (the master may be
 * gone), not because the master refused it. */
int egm__wslabs_unanswered(egm_status_t status);
/* After the Commit of refs[0..n) sent at sent_ms (commit[i]: key i's answer,
 * EGM_INPROGRESS for a key not committed): each slab the master showed it
 * knows is confirmed as of sent_ms, one it does not know is dropped (a
 * NOT_FOUND for a slab egm__wslabs_retire_ids was given is a key whose every
 * extent is on a provider presumed gone: that slab is returned as retired
 * ones are); every reservation ends. */
void egm__wslabs_release(egm_wslabs_t *slabs, size_t n, const egm_wslab_ref_t *refs,
                         const egm_status_t *commit, uint64_t sent_ms);
/* The ids of retired slabs to return to the master (an egm_malloc'ed array,
 * NULL when none): the caller sends them, or hands them back with
 * egm__wslabs_unreturned when its request failed. */
size_t egm__wslabs_take_returns(egm_wslabs_t *slabs, uint64_t **ids_p);
void egm__wslabs_unreturned(egm_wslabs_t *slabs, uint64_t *ids, size_t n);
/* Segments the master retired (a provider gone): slabs with an extent there
 * take no more objects and are returned once idle (their other extents'
 * uncommitted space goes back). */
void egm__wslabs_forget_segments(egm_wslabs_t *slabs, const egm_id_t *ids, size_t n);
/* Slabs a Commit reply named as degraded (an extent lost, or on a provider
 * presumed gone: objects committed there get fewer replicas than placed):
 * they take no more objects and are returned once idle. */
void egm__wslabs_retire_ids(egm_wslabs_t *slabs, const uint64_t *ids, size_t n);
/* A copy into ref's slab failed (its provider may be gone): the slab takes no
 * more objects. The reservation stays the caller's to release. */
void egm__wslabs_retire_ref(egm_wslabs_t *slabs, const egm_wslab_ref_t *ref);
/* The master may not know these slabs: none is used again or returned. */
void egm__wslabs_clear(egm_wslabs_t *slabs);
/* Retires every slab and returns what can be (one Commit without keys). */
void egm__wslabs_close(struct egm_client *client);

typedef struct {
    uint64_t grants;  /* SlabGrants answered with a slab */
    uint64_t returns; /* slabs returned */
    uint64_t open;    /* slabs held now */
} egm_wslabs_stats_t;

void egm__wslabs_stats(egm_wslabs_t *slabs, egm_wslabs_stats_t *stats_p);

#endif
