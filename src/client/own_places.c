/* Where this client's own objects lie (client/own_places.h). */
#include "client/own_places.h"

#include <pthread.h>
#include <string.h>
#include "common/alloc.h"
#include "common/hashmap.h"

typedef struct {
    uint64_t hash; /* 0: empty (a key whose hash is 0 is kept as 1) */
    uint64_t offset;
    egm_id_t segment;
    uint64_t age; /* when kept: the oldest of a full set goes */
} entry_t;

struct egm_own_places {
    pthread_mutex_t lock;
    uint64_t clock;
    entry_t *sets; /* EGM_OWN_PLACES_SETS x EGM_OWN_PLACES_WAYS, allocated at the first keep */
};

egm_own_places_t *egm__own_places_create(void)
{
    egm_own_places_t *p = egm_calloc(1, sizeof(*p), "client.own_places");
    if (p != NULL)
        pthread_mutex_init(&p->lock, NULL);
    return p;
}

void egm__own_places_destroy(egm_own_places_t *p)
{
    if (p == NULL)
        return;
    egm_free(p->sets);
    pthread_mutex_destroy(&p->lock);
    egm_free(p);
}

static uint64_t key_hash(const char *key)
{
    uint64_t h = egm__hashmap_hash(key, strlen(key));
    return h != 0 ? h : 1;
}

/* The set of hash h. */
static entry_t *set_of(const egm_own_places_t *p, uint64_t h)
{
    return p->sets + (size_t)(h % EGM_OWN_PLACES_SETS) * EGM_OWN_PLACES_WAYS;
}

void egm__own_places_keep(egm_own_places_t *p, const char *key, egm_id_t segment, uint64_t offset)
{
    if (p == NULL)
        return;
    uint64_t h = key_hash(key);
    pthread_mutex_lock(&p->lock);
    if (p->sets == NULL)
        p->sets = egm_calloc((size_t)EGM_OWN_PLACES_SETS * EGM_OWN_PLACES_WAYS, sizeof(entry_t),
                             "client.own_places");
    if (p->sets != NULL) {
        /* the key's own entry, else an empty one, else the oldest */
        entry_t *set = set_of(p, h), *slot = NULL, *oldest = &set[0];
        for (int w = 0; w < EGM_OWN_PLACES_WAYS && (slot == NULL || slot->hash != h); w++) {
            if (set[w].hash == h || (set[w].hash == 0 && slot == NULL))
                slot = &set[w];
            if (set[w].age < oldest->age)
                oldest = &set[w];
        }
        if (slot == NULL)
            slot = oldest;
        *slot = (entry_t){.hash = h, .offset = offset, .segment = segment, .age = ++p->clock};
    }
    pthread_mutex_unlock(&p->lock);
}

int egm__own_places_take(egm_own_places_t *p, const char *key, egm_id_t *segment_p,
                         uint64_t *offset_p)
{
    if (p == NULL)
        return 0;
    uint64_t h = key_hash(key);
    int found = 0;
    pthread_mutex_lock(&p->lock);
    if (p->sets != NULL) {
        entry_t *set = set_of(p, h);
        for (int w = 0; w < EGM_OWN_PLACES_WAYS && !found; w++)
            if (set[w].hash == h) {
                *segment_p = set[w].segment;
                *offset_p = set[w].offset;
                set[w] = (entry_t){0};
                found = 1;
            }
    }
    pthread_mutex_unlock(&p->lock);
    return found;
}
