/* The master's state: segments, objects, clients, and their periodic work. */
#include "master/master_int.h"

#include <string.h>
#include "common/clock.h"
#include "common/log.h"

egm_status_t egm__master_state_init(egm_master_state_t *state,
                                    const egm_master_state_params_t *params)
{
    egm_status_t status;

    memset(state, 0, sizeof(*state));
    state->client_ttl_ms = params->client_ttl_ms;
    state->disconnect_grace_ms = params->disconnect_grace_ms;
    state->location_cache_ms = params->location_cache_ms;
    state->master_id = egm__id_random();
    state->now_ms = egm__now_ms;
    atomic_store(&state->serving_since_ms, state->now_ms());
    status = egm__segment_table_create(0, &state->segments);
    if (status != EGM_OK)
        goto err;
    status = egm__objects_create(state->segments, &params->objects, &state->objects);
    if (status != EGM_OK)
        goto err;
    status = egm__liveness_create(state->segments, state->objects, &state->liveness);
    if (status != EGM_OK)
        goto err;
    return EGM_OK;

err:
    egm__master_state_cleanup(state);
    return status;
}

void egm__master_state_cleanup(egm_master_state_t *state)
{
    /* Objects first: they return space to segments that must still exist. */
    egm__liveness_destroy(state->liveness);
    egm__objects_destroy(state->objects);
    egm__segment_table_destroy(state->segments);
    memset(state, 0, sizeof(*state));
}

egm_status_t egm__master_lock_init(pthread_rwlock_t *lock)
{
    pthread_rwlockattr_t attr;
    int rc;

    /* glibc's default lets readers in while a writer waits: with RPC threads
     * always holding it shared, the tick or a mount could wait forever. */
    pthread_rwlockattr_init(&attr);
    pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
    rc = pthread_rwlock_init(lock, &attr);
    pthread_rwlockattr_destroy(&attr);
    if (rc != 0)
        return egm__set_error(egm__status_from_errno(rc), "the master's state lock: %s",
                              strerror(rc));
    return EGM_OK;
}

void egm__master_state_tick(egm_master_state_t *state, uint64_t now_ms)
{
    if (state->lock != NULL)
        pthread_rwlock_wrlock(state->lock);
    egm__liveness_expire(state->liveness, now_ms, state->client_ttl_ms);
    egm__liveness_expire_disconnected(state->liveness, now_ms, state->disconnect_grace_ms);
    egm__objects_sweep_pending(state->objects, now_ms);
    egm__objects_release_held(state->objects, now_ms); /* before eviction counts what is used */
    egm__objects_expire_slabs(state->objects, now_ms);
    egm__objects_evict_if_needed(state->objects, now_ms);
    if (state->lock != NULL)
        pthread_rwlock_unlock(state->lock);
}
