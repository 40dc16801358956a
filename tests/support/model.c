/* Reference model for fault and load tests (see model.h). */
#include "support/model.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "support/http_get.h"

typedef struct {
    char *key;
    unsigned n;                                /* allowed versions */
    unsigned versions[EGM_MODEL_MAX_VERSIONS]; /* allowed stored versions */
    size_t lens[EGM_MODEL_MAX_VERSIONS];
    int certain; /* versions[0] is committed and the only one */
} model_key_t;

struct egm_model {
    pthread_mutex_t lock;
    model_key_t *keys;
    size_t n, cap;
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
    pthread_mutex_destroy(&model->lock);
    free(model);
}

static uint32_t key_hash(const char *key)
{
    uint32_t h = 2166136261u;
    for (; *key != '\0'; key++)
        h = (h ^ (unsigned char)*key) * 16777619u;
    return h;
}

void egm_model_fill(const char *key, unsigned version, void *buf, size_t len)
{
    /* The length goes into the stream too, so that a prefix of another
     * version's bytes never passes for this one. */
    egm_test_fill(buf, len, key_hash(key) ^ (version * 2654435761u) ^ (unsigned)len);
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
    k->key = strdup(key);
    if (k->key == NULL)
        abort();
    return k;
}

static void drop_version(model_key_t *k, unsigned version)
{
    for (unsigned i = 0; i < k->n; i++)
        if (k->versions[i] == version) {
            k->versions[i] = k->versions[k->n - 1];
            k->lens[i] = k->lens[k->n - 1];
            k->n--;
            return;
        }
}

void egm_model_put_begin(egm_model_t *model, const char *key, unsigned version, size_t len)
{
    pthread_mutex_lock(&model->lock);
    model_key_t *k = find(model, key, 1);
    drop_version(k, version);
    if (k->n == EGM_MODEL_MAX_VERSIONS) { /* keep the newest ones */
        memmove(k->versions, k->versions + 1, (k->n - 1) * sizeof(k->versions[0]));
        memmove(k->lens, k->lens + 1, (k->n - 1) * sizeof(k->lens[0]));
        k->n--;
    }
    k->versions[k->n] = version;
    k->lens[k->n] = len;
    k->n++;
    k->certain = 0;
    pthread_mutex_unlock(&model->lock);
}

void egm_model_put_end(egm_model_t *model, const char *key, unsigned version, egm_status_t status)
{
    pthread_mutex_lock(&model->lock);
    model_key_t *k = find(model, key, 1);
    if (status == EGM_OK) {
        for (unsigned i = 0; i < k->n; i++)
            if (k->versions[i] == version) {
                k->versions[0] = version;
                k->lens[0] = k->lens[i];
                k->n = 1;
                k->certain = 1;
                break;
            }
    } else if (status == EGM_ERR_EXISTS || status == EGM_ERR_NO_SPACE ||
               status == EGM_ERR_INVALID_ARG || status == EGM_ERR_INVALID_KEY) {
        drop_version(k, version);
        k->certain = k->certain || k->n == 1;
    }
    pthread_mutex_unlock(&model->lock);
}

void egm_model_remove(egm_model_t *model, const char *key, egm_status_t status)
{
    pthread_mutex_lock(&model->lock);
    model_key_t *k = find(model, key, 1);
    if (status == EGM_OK || status == EGM_ERR_NOT_FOUND) {
        k->n = 0;
        k->certain = 1;
    } else if (status != EGM_ERR_HAS_LEASE) {
        k->certain = 0;
    }
    pthread_mutex_unlock(&model->lock);
}

void egm_model_uncertain(egm_model_t *model, const char *key)
{
    pthread_mutex_lock(&model->lock);
    find(model, key, 1)->certain = 0;
    pthread_mutex_unlock(&model->lock);
}

long egm_model_committed(egm_model_t *model, const char *key)
{
    pthread_mutex_lock(&model->lock);
    model_key_t *k = find(model, key, 0);
    long v = (k != NULL && k->certain && k->n == 1) ? (long)k->versions[0] : -1;
    pthread_mutex_unlock(&model->lock);
    return v;
}

int egm_model_check(egm_model_t *model, const char *key, egm_status_t status, const void *data,
                    size_t len)
{
    int result = 0;
    pthread_mutex_lock(&model->lock);
    if (status == EGM_ERR_NOT_FOUND) {
        model->stats.not_found++;
    } else if (status != EGM_OK) {
        model->stats.errors++;
    } else {
        model_key_t *k = find(model, key, 0);
        unsigned char *want = NULL;
        result = -1;
        for (unsigned i = 0; k != NULL && i < k->n && result != 0; i++) {
            if (k->lens[i] != len)
                continue;
            want = realloc(want, len ? len : 1);
            if (want == NULL)
                abort();
            egm_model_fill(key, k->versions[i], want, len);
            if (memcmp(want, data, len) == 0)
                result = 0;
        }
        free(want);
        if (result == 0) {
            model->stats.gets_verified++;
        } else {
            model->stats.wrong++;
            fprintf(stderr, "model: WRONG object \"%s\": %zu bytes match none of %u allowed\n", key,
                    len, k != NULL ? k->n : 0);
        }
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

uint64_t egm_model_verify_all(egm_model_t *model, egm_client_t *client, unsigned replicas,
                              uint64_t *found_p, uint64_t *bytes_p)
{
    uint64_t wrong = 0, found = 0, bytes = 0;
    pthread_mutex_lock(&model->lock);
    size_t n = model->n;
    char **keys = calloc(n ? n : 1, sizeof(*keys));
    if (keys == NULL)
        abort();
    for (size_t i = 0; i < n; i++)
        keys[i] = strdup(model->keys[i].key);
    pthread_mutex_unlock(&model->lock);
    for (size_t i = 0; i < n; i++) {
        void *data = NULL;
        size_t len = 0;
        egm_status_t status = egm_get(client, keys[i], &data, &len);
        if (egm_model_check(model, keys[i], status, data, len) != 0)
            wrong++;
        if (status == EGM_OK) {
            found++;
            bytes += (((uint64_t)len + 63) & ~(uint64_t)63) * replicas;
            egm_buffer_free(data);
        } else if (status != EGM_ERR_NOT_FOUND) {
            fprintf(stderr, "model: get \"%s\" failed after recovery: %s\n", keys[i],
                    egm_status_string(status));
            wrong++;
        }
        free(keys[i]);
    }
    free(keys);
    *found_p = found;
    *bytes_p = bytes;
    return wrong;
}

long long egm_model_master_metric(unsigned http_port, const char *name)
{
    static char body[1 << 16];
    static pthread_mutex_t body_lock = PTHREAD_MUTEX_INITIALIZER;
    char needle[128];
    long long value = -1;
    snprintf(needle, sizeof(needle), "\n%s ", name);
    pthread_mutex_lock(&body_lock);
    if (egm_test_http_get(http_port, "/metrics", body, sizeof(body)) == 200) {
        const char *p = strstr(body, needle);
        if (p != NULL)
            value = strtoll(p + strlen(needle), NULL, 10);
    }
    pthread_mutex_unlock(&body_lock);
    return value;
}

int egm_model_check_master(unsigned http_port, uint64_t keys, uint64_t bytes)
{
    long long m_keys = egm_model_master_metric(http_port, "egm_master_keys");
    long long m_pending = egm_model_master_metric(http_port, "egm_master_keys_pending");
    long long m_bytes = egm_model_master_metric(http_port, "egm_master_allocated_bytes");
    if (m_keys == (long long)keys && m_bytes == (long long)bytes && m_pending == 0)
        return 0;
    fprintf(stderr,
            "model: master accounting differs: keys %lld (stored %llu), allocated bytes %lld "
            "(stored %llu), pending %lld\n",
            m_keys, (unsigned long long)keys, m_bytes, (unsigned long long)bytes, m_pending);
    return -1;
}

unsigned egm_model_admin_port(egm_test_cluster_t *cluster)
{
    char line[256];
    if (egm__process_wait_line(&cluster->master, "egmstore master admin http ", line, sizeof(line),
                               10000) != EGM_OK)
        return 0;
    const char *colon = strrchr(line, ':');
    return colon != NULL ? (unsigned)strtoul(colon + 1, NULL, 10) : 0;
}
