/* Reference model for fault and load tests (see model.h): the bookkeeping,
 * with no process or network behind it, so that tests/unit can prove it. */
#include "support/model.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { KEY_ABSENT, KEY_COMMITTED, KEY_UNCERTAIN } key_state_t;

typedef struct {
    key_state_t state;
    unsigned n;                                /* allowed versions */
    unsigned versions[EGM_MODEL_MAX_VERSIONS]; /* versions a Get may return */
    size_t lens[EGM_MODEL_MAX_VERSIONS];
} allowed_t;

typedef struct {
    char *key;
    allowed_t now;   /* committed: n == 1; absent: n == 0 */
    allowed_t saved; /* as it was when the last put began, for a put that stored nothing */
    int has_saved;
    unsigned n_places; /* replicas of the committed version, where recorded */
    egm_id_t places[EGM_MODEL_MAX_REPLICAS];
} model_key_t;

struct egm_model {
    pthread_mutex_t lock;
    model_key_t *keys;
    size_t n, cap;
    egm_id_t *destroyed; /* segments the test's fault destroyed */
    size_t n_destroyed, cap_destroyed;
    egm_model_stats_t stats;
};

egm_model_t *egm_model_create(void)
{
    egm_model_t *m = calloc(1, sizeof(*m));
    if (m != NULL)
        pthread_mutex_init(&m->lock, NULL);
    return m;
}

void egm_model_destroy(egm_model_t *model)
{
    if (model == NULL)
        return;
    for (size_t i = 0; i < model->n; i++)
        free(model->keys[i].key);
    free(model->keys);
    free(model->destroyed);
    pthread_mutex_destroy(&model->lock);
    free(model);
}

static uint64_t key_hash(const char *key)
{
    uint64_t h = 14695981039346656037ull;
    for (; *key != '\0'; key++)
        h = (h ^ (unsigned char)*key) * 1099511628211ull;
    return h;
}

void egm_model_fill(const char *key, unsigned version, void *buf, size_t len)
{
    /* splitmix64 seeded by key, version and length: the length goes into the
     * stream too, so that a prefix of another version's bytes never passes for
     * this one. */
    uint64_t x =
        key_hash(key) ^ ((uint64_t)version * 0x9e3779b97f4a7c15ull) ^ ((uint64_t)len << 17);
    unsigned char *p = buf;
    for (size_t i = 0; i < len; i += 8) {
        x += 0x9e3779b97f4a7c15ull;
        uint64_t z = x;
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
        z ^= z >> 31;
        size_t n = len - i < 8 ? len - i : 8;
        memcpy(p + i, &z, n);
    }
}

/* Linear search is enough for the few thousand keys a test holds. Caller holds the lock. */
static model_key_t *find(egm_model_t *m, const char *key, int create)
{
    for (size_t i = 0; i < m->n; i++)
        if (strcmp(m->keys[i].key, key) == 0)
            return &m->keys[i];
    if (!create)
        return NULL;
    if (m->n == m->cap) {
        size_t cap = m->cap ? m->cap * 2 : 64;
        model_key_t *keys = realloc(m->keys, cap * sizeof(*keys));
        if (keys == NULL)
            abort();
        m->keys = keys;
        m->cap = cap;
    }
    model_key_t *k = &m->keys[m->n++];
    memset(k, 0, sizeof(*k));
    k->now.state = KEY_ABSENT;
    k->key = strdup(key);
    if (k->key == NULL)
        abort();
    return k;
}

static void drop_version(allowed_t *a, unsigned version)
{
    for (unsigned i = 0; i < a->n; i++)
        if (a->versions[i] == version) {
            a->versions[i] = a->versions[a->n - 1];
            a->lens[i] = a->lens[a->n - 1];
            a->n--;
            return;
        }
}

static int destroyed(const egm_model_t *m, egm_id_t segment)
{
    for (size_t i = 0; i < m->n_destroyed; i++)
        if (egm__id_equal(m->destroyed[i], segment))
            return 1;
    return 0;
}

/* Committed, with a recorded placement that the test's fault destroyed whole. */
static int doomed(const egm_model_t *m, const model_key_t *k)
{
    if (k->now.state != KEY_COMMITTED || k->n_places == 0)
        return 0;
    for (unsigned i = 0; i < k->n_places; i++)
        if (!destroyed(m, k->places[i]))
            return 0;
    return 1;
}

/* A committed key was answered not-found: counted; -1 unless the fault excuses it. */
static int missing(egm_model_t *m, const model_key_t *k, const char *what)
{
    if (doomed(m, k)) {
        m->stats.lost_by_fault++;
        return 0;
    }
    m->stats.lost++;
    fprintf(stderr,
            "model: LOST object \"%s\": version %u was committed, %s answered not-found (%s)\n",
            k->key, k->now.versions[0], what,
            k->n_places ? "a replica lay on a segment no fault of the test's destroyed"
                        : "no placement recorded");
    return -1;
}

void egm_model_put_begin(egm_model_t *model, const char *key, unsigned version, size_t len)
{
    pthread_mutex_lock(&model->lock);
    model_key_t *k = find(model, key, 1);
    k->saved = k->now;
    k->has_saved = 1;
    allowed_t *a = &k->now;
    drop_version(a, version);
    if (a->n == EGM_MODEL_MAX_VERSIONS) { /* keep the newest ones */
        memmove(a->versions, a->versions + 1, (a->n - 1) * sizeof(a->versions[0]));
        memmove(a->lens, a->lens + 1, (a->n - 1) * sizeof(a->lens[0]));
        a->n--;
    }
    a->versions[a->n] = version;
    a->lens[a->n] = len;
    a->n++;
    a->state = KEY_UNCERTAIN;
    pthread_mutex_unlock(&model->lock);
}

void egm_model_put_end(egm_model_t *model, const char *key, unsigned version, egm_status_t status)
{
    pthread_mutex_lock(&model->lock);
    model_key_t *k = find(model, key, 1);
    allowed_t *a = &k->now;
    if (status == EGM_OK) {
        unsigned i = 0;
        while (i < a->n && a->versions[i] != version)
            i++;
        if (i < a->n) {
            a->versions[0] = version;
            a->lens[0] = a->lens[i];
            a->n = 1;
            a->state = KEY_COMMITTED;
            k->n_places = 0; /* a new object: where it lies is not known yet */
        } else {
            a->state = KEY_UNCERTAIN; /* a put the model did not see begin */
        }
    } else if (status == EGM_ERR_EXISTS || status == EGM_ERR_NO_SPACE ||
               status == EGM_ERR_INVALID_ARG || status == EGM_ERR_INVALID_KEY) {
        /* Nothing was stored: the key is as it was before the put. */
        if (k->has_saved)
            *a = k->saved;
        else
            drop_version(a, version);
    } else {
        a->state = KEY_UNCERTAIN;
    }
    k->has_saved = 0;
    pthread_mutex_unlock(&model->lock);
}

int egm_model_remove(egm_model_t *model, const char *key, egm_status_t status)
{
    int result = 0;
    pthread_mutex_lock(&model->lock);
    model_key_t *k = find(model, key, 1);
    if (status == EGM_OK || status == EGM_ERR_NOT_FOUND) {
        if (status == EGM_ERR_NOT_FOUND && k->now.state == KEY_COMMITTED)
            result = missing(model, k, "remove");
        k->now.n = 0;
        k->now.state = KEY_ABSENT;
        k->n_places = 0;
    } else if (status != EGM_ERR_HAS_LEASE) {
        k->now.state = KEY_UNCERTAIN;
    }
    pthread_mutex_unlock(&model->lock);
    return result;
}

void egm_model_uncertain(egm_model_t *model, const char *key)
{
    pthread_mutex_lock(&model->lock);
    find(model, key, 1)->now.state = KEY_UNCERTAIN;
    pthread_mutex_unlock(&model->lock);
}

void egm_model_placed(egm_model_t *model, const char *key, const egm_id_t *segments, size_t n)
{
    pthread_mutex_lock(&model->lock);
    model_key_t *k = find(model, key, 1);
    k->n_places = 0;
    for (size_t i = 0; i < n && i < EGM_MODEL_MAX_REPLICAS; i++)
        k->places[k->n_places++] = segments[i];
    pthread_mutex_unlock(&model->lock);
}

size_t egm_model_placement(egm_model_t *model, const char *key, egm_id_t *ids, size_t max)
{
    pthread_mutex_lock(&model->lock);
    model_key_t *k = find(model, key, 0);
    size_t n = k != NULL && k->now.state == KEY_COMMITTED ? k->n_places : 0;
    for (size_t i = 0; i < n && i < max; i++)
        ids[i] = k->places[i];
    pthread_mutex_unlock(&model->lock);
    return n;
}

void egm_model_segment_destroyed(egm_model_t *model, egm_id_t segment)
{
    pthread_mutex_lock(&model->lock);
    if (!destroyed(model, segment)) {
        if (model->n_destroyed == model->cap_destroyed) {
            size_t cap = model->cap_destroyed ? model->cap_destroyed * 2 : 8;
            egm_id_t *ids = realloc(model->destroyed, cap * sizeof(*ids));
            if (ids == NULL)
                abort();
            model->destroyed = ids;
            model->cap_destroyed = cap;
        }
        model->destroyed[model->n_destroyed++] = segment;
    }
    pthread_mutex_unlock(&model->lock);
}

long egm_model_committed(egm_model_t *model, const char *key)
{
    pthread_mutex_lock(&model->lock);
    model_key_t *k = find(model, key, 0);
    long v = (k != NULL && k->now.state == KEY_COMMITTED) ? (long)k->now.versions[0] : -1;
    pthread_mutex_unlock(&model->lock);
    return v;
}

int egm_model_check(egm_model_t *model, const char *key, egm_status_t status, const void *data,
                    size_t len)
{
    int result = 0;
    pthread_mutex_lock(&model->lock);
    model_key_t *k = find(model, key, 0);
    if (status == EGM_ERR_NOT_FOUND) {
        if (k != NULL && k->now.state == KEY_COMMITTED)
            result = missing(model, k, "get");
        else
            model->stats.not_found++;
    } else if (status != EGM_OK) {
        model->stats.errors++;
    } else {
        unsigned char *want = NULL;
        result = -1;
        for (unsigned i = 0; k != NULL && i < k->now.n && result != 0; i++) {
            if (k->now.lens[i] != len)
                continue;
            want = realloc(want, len ? len : 1);
            if (want == NULL)
                abort();
            egm_model_fill(key, k->now.versions[i], want, len);
            if (memcmp(want, data, len) == 0)
                result = 0;
        }
        free(want);
        if (result == 0) {
            model->stats.gets_verified++;
        } else {
            model->stats.wrong++;
            fprintf(stderr, "model: WRONG object \"%s\": %zu bytes match none of %u allowed%s\n",
                    key, len, k != NULL ? k->now.n : 0,
                    k == NULL || k->now.state == KEY_ABSENT ? " (the key is absent)" : "");
        }
    }
    pthread_mutex_unlock(&model->lock);
    return result;
}

int egm_model_check_exist(egm_model_t *model, const char *key, egm_status_t status)
{
    int result = 0;
    pthread_mutex_lock(&model->lock);
    model_key_t *k = find(model, key, 0);
    key_state_t state = k != NULL ? k->now.state : KEY_ABSENT;
    if (status == EGM_OK) {
        if (state == KEY_ABSENT) {
            model->stats.wrong++;
            fprintf(stderr, "model: WRONG exist \"%s\": answered OK for an absent key\n", key);
            result = -1;
        }
    } else if (status == EGM_ERR_NOT_FOUND) {
        if (state == KEY_COMMITTED)
            result = missing(model, k, "exist");
    } else {
        model->stats.errors++;
    }
    pthread_mutex_unlock(&model->lock);
    return result;
}

egm_model_stats_t egm_model_stats(egm_model_t *model)
{
    pthread_mutex_lock(&model->lock);
    egm_model_stats_t s = model->stats;
    pthread_mutex_unlock(&model->lock);
    return s;
}

egm_model_census_t egm_model_census(egm_model_t *model)
{
    egm_model_census_t c = {0};
    pthread_mutex_lock(&model->lock);
    c.keys = model->n;
    for (size_t i = 0; i < model->n; i++) {
        const model_key_t *k = &model->keys[i];
        c.committed += k->now.state == KEY_COMMITTED;
        c.doomed += doomed(model, k);
        c.absent += k->now.state == KEY_ABSENT;
        c.uncertain += k->now.state == KEY_UNCERTAIN;
    }
    pthread_mutex_unlock(&model->lock);
    return c;
}

char **egm_model_keys(egm_model_t *model, size_t *n_p)
{
    pthread_mutex_lock(&model->lock);
    size_t n = model->n;
    char **keys = calloc(n ? n : 1, sizeof(*keys));
    if (keys == NULL)
        abort();
    for (size_t i = 0; i < n; i++)
        if ((keys[i] = strdup(model->keys[i].key)) == NULL)
            abort();
    pthread_mutex_unlock(&model->lock);
    *n_p = n;
    return keys;
}
