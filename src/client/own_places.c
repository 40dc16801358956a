/* Where this client's own objects lie (client/own_places.h). */
#include "client/own_places.h"

#include <pthread.h>
#include <stdatomic.h>
#include <string.h>
#include "common/alloc.h"
#include "common/hashmap.h"

typedef struct {
    uint64_t hash; /* 0: empty (a key whose hash is 0 is kept as 1) */
    uint64_t age;  /* when kept: the oldest of a full set goes */
    egm_own_place_t place;
} entry_t;

/* Locks, each over every LOCKS-th set: a put's threads seldom meet on one
 * (one lock had them wait for each other on a 2-vCPU VM). */
#define LOCKS 64

struct egm_own_places {
    pthread_mutex_t locks[LOCKS];
    _Atomic uint64_t clock;
    entry_t *sets; /* EGM_OWN_PLACES_SETS x EGM_OWN_PLACES_WAYS */
};

egm_own_places_t *egm__own_places_create(void)
{
    egm_own_places_t *p = egm_calloc(1, sizeof(*p), "client.own_places");
    if (p == NULL)
        return NULL;
    for (int i = 0; i < LOCKS; i++)
        pthread_mutex_init(&p->locks[i], NULL);
    p->sets = egm_calloc((size_t)EGM_OWN_PLACES_SETS * EGM_OWN_PLACES_WAYS, sizeof(entry_t),
                         "client.own_places");
    if (p->sets == NULL) {
        egm__own_places_destroy(p);
        return NULL;
    }
    return p;
}

void egm__own_places_destroy(egm_own_places_t *p)
{
    if (p == NULL)
        return;
    egm_free(p->sets);
    for (int i = 0; i < LOCKS; i++)
        pthread_mutex_destroy(&p->locks[i]);
    egm_free(p);
}

static uint64_t key_hash(const char *key)
{
    uint64_t h = egm__hashmap_hash(key, strlen(key));
    return h != 0 ? h : 1;
}

/* The set of hash h, and its lock. */
static entry_t *set_of(egm_own_places_t *p, uint64_t h, pthread_mutex_t **lock_p)
{
    size_t set = (size_t)(h % EGM_OWN_PLACES_SETS);
    *lock_p = &p->locks[set % LOCKS];
    return p->sets + set * EGM_OWN_PLACES_WAYS;
}

void egm__own_places_keep(egm_own_places_t *p, const char *key, const egm_own_place_t *place)
{
    if (p == NULL)
        return;
    uint64_t h = key_hash(key), age = atomic_fetch_add_explicit(&p->clock, 1, memory_order_relaxed);
    pthread_mutex_t *lock;
    entry_t *set = set_of(p, h, &lock);
    /* the key's own entry, else an empty one, else the oldest */
    entry_t *slot = NULL, *oldest = &set[0];
    pthread_mutex_lock(lock);
    for (int w = 0; w < EGM_OWN_PLACES_WAYS && (slot == NULL || slot->hash != h); w++) {
        if (set[w].hash == h || (set[w].hash == 0 && slot == NULL))
            slot = &set[w];
        if (set[w].age < oldest->age)
            oldest = &set[w];
    }
    if (slot == NULL)
        slot = oldest;
    *slot = (entry_t){.hash = h, .age = age + 1, .place = *place};
    pthread_mutex_unlock(lock);
}

int egm__own_places_take(egm_own_places_t *p, const char *key, egm_own_place_t *place_p)
{
    if (p == NULL)
        return 0;
    uint64_t h = key_hash(key);
    int found = 0;
    pthread_mutex_t *lock;
    entry_t *set = set_of(p, h, &lock);
    pthread_mutex_lock(lock);
    for (int w = 0; w < EGM_OWN_PLACES_WAYS && !found; w++)
        if (set[w].hash == h) {
            *place_p = set[w].place;
            set[w] = (entry_t){0};
            found = 1;
        }
    pthread_mutex_unlock(lock);
    return found;
}

void egm__own_places_clear(egm_own_places_t *p)
{
    if (p == NULL)
        return;
    for (size_t set = 0; set < EGM_OWN_PLACES_SETS; set++) {
        pthread_mutex_lock(&p->locks[set % LOCKS]);
        memset(p->sets + set * EGM_OWN_PLACES_WAYS, 0, EGM_OWN_PLACES_WAYS * sizeof(entry_t));
        pthread_mutex_unlock(&p->locks[set % LOCKS]);
    }
}
