/* Prewarm: a few threads that import and map segments as soon as the client
 * learns of them, so that a later Get finds its mapping ready (mapping cost
 * grows with the chunk: DESIGN.md 8). Bounded concurrency; errors are only
 * logged, a transfer will meet (and report) them again. */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "common/alloc.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "te/nvlink.h"

/* A long drain (a big pool) says how far it is this often. */
#define EGM_PREWARM_PROGRESS_SEC 2

typedef struct job {
    struct job *next;
    egm_segment_desc_t desc;
} job_t;

struct egm_prewarm {
    egm_mapping_cache_t *cache;
    pthread_mutex_t lock;
    pthread_cond_t work; /* a job was queued, or stop */
    pthread_cond_t idle; /* the queue emptied and no import runs */
    job_t *head, *tail;
    egm_hashmap_t *queued; /* id -> job_t*, queued or running */
    int running;           /* imports in progress */
    int stop;
    uint64_t prewarmed;
    int nthreads;
    pthread_t threads[EGM_PREWARM_MAX_CONCURRENCY];
};

static void *prewarm_main(void *arg)
{
    egm_prewarm_t *pw = arg;
    char text[EGM_ID_STRLEN];

    pthread_mutex_lock(&pw->lock);
    for (;;) {
        while (!pw->stop && pw->head == NULL)
            pthread_cond_wait(&pw->work, &pw->lock);
        if (pw->stop)
            break;
        job_t *job = pw->head;
        pw->head = job->next;
        if (pw->head == NULL)
            pw->tail = NULL;
        pw->running++;
        pthread_mutex_unlock(&pw->lock);

        egm_mapping_t *m = NULL;
        int imported = 0;
        egm_status_t st = egm__mapping_get(pw->cache, &job->desc, &m, &imported);
        if (st == EGM_OK)
            egm__mapping_put(pw->cache, m);
        else
            egm_debug("prewarm: segment %s: %s", egm__id_format(job->desc.id, text),
                      egm_last_error());

        pthread_mutex_lock(&pw->lock);
        if (imported)
            pw->prewarmed++;
        egm__hashmap_remove(pw->queued, &job->desc.id, sizeof(job->desc.id));
        egm_free(job);
        pw->running--;
        if (pw->running == 0 && pw->head == NULL)
            pthread_cond_broadcast(&pw->idle);
    }
    pthread_mutex_unlock(&pw->lock);
    return NULL;
}

egm_status_t egm__prewarm_create(egm_mapping_cache_t *cache, int concurrency,
                                 egm_prewarm_t **prewarm_p)
{
    egm_status_t st;
    egm_prewarm_t *pw = egm_calloc(1, sizeof(*pw), "te.prewarm");
    if (pw == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "prewarm: out of memory");
    pw->cache = cache;
    if ((st = egm__hashmap_create(&pw->queued)) != EGM_OK) {
        egm_free(pw);
        return st;
    }
    pthread_mutex_init(&pw->lock, NULL);
    pthread_cond_init(&pw->work, NULL);
    pthread_cond_init(&pw->idle, NULL);
    if (concurrency < 1)
        concurrency = 1;
    if (concurrency > EGM_PREWARM_MAX_CONCURRENCY)
        concurrency = EGM_PREWARM_MAX_CONCURRENCY;
    for (int i = 0; i < concurrency; i++) {
        int rc = pthread_create(&pw->threads[i], NULL, prewarm_main, pw);
        if (rc != 0) {
            /* Fewer threads still prewarm; none at all is an error. */
            egm_warn("prewarm: thread %d of %d: %s", i + 1, concurrency, strerror(rc));
            break;
        }
        pw->nthreads++;
    }
    if (pw->nthreads == 0) {
        egm__prewarm_destroy(pw);
        return egm__set_error(EGM_ERR_INTERNAL, "prewarm: no thread could start");
    }
    *prewarm_p = pw;
    return EGM_OK;
}

void egm__prewarm_destroy(egm_prewarm_t *pw)
{
    if (pw == NULL)
        return;
    pthread_mutex_lock(&pw->lock);
    pw->stop = 1;
    pthread_cond_broadcast(&pw->work);
    pthread_mutex_unlock(&pw->lock);
    for (int i = 0; i < pw->nthreads; i++)
        pthread_join(pw->threads[i], NULL);
    while (pw->head != NULL) {
        job_t *job = pw->head;
        pw->head = job->next;
        egm_free(job);
    }
    egm__hashmap_destroy(pw->queued);
    pthread_cond_destroy(&pw->idle);
    pthread_cond_destroy(&pw->work);
    pthread_mutex_destroy(&pw->lock);
    egm_free(pw);
}

void egm__prewarm_queue(egm_prewarm_t *pw, const egm_segment_desc_t *descs, size_t n)
{
    size_t added = 0;
    pthread_mutex_lock(&pw->lock);
    for (size_t i = 0; i < n && !pw->stop; i++) {
        const egm_segment_desc_t *d = &descs[i];
        if (egm__hashmap_get(pw->queued, &d->id, sizeof(d->id)) != NULL ||
            egm__mapping_known(pw->cache, d->id) || egm__mapping_retired(pw->cache, d->id))
            continue;
        job_t *job = egm_malloc(sizeof(*job), "te.prewarm.job");
        if (job == NULL)
            break;
        job->next = NULL;
        job->desc = *d;
        if (egm__hashmap_put(pw->queued, &job->desc.id, sizeof(job->desc.id), job, NULL) !=
            EGM_OK) {
            egm_free(job);
            break;
        }
        if (pw->tail != NULL)
            pw->tail->next = job;
        else
            pw->head = job;
        pw->tail = job;
        added++;
    }
    if (added > 0)
        pthread_cond_broadcast(&pw->work);
    pthread_mutex_unlock(&pw->lock);
    if (added > 0)
        egm_debug("prewarm: %zu segment(s) queued", added);
}

void egm__prewarm_drain(egm_prewarm_t *pw)
{
    struct timespec next;
    pthread_mutex_lock(&pw->lock);
    clock_gettime(CLOCK_REALTIME, &next); /* the condition variable's clock */
    while (!pw->stop && (pw->head != NULL || pw->running > 0)) {
        next.tv_sec += EGM_PREWARM_PROGRESS_SEC;
        while (!pw->stop && (pw->head != NULL || pw->running > 0) &&
               pthread_cond_timedwait(&pw->idle, &pw->lock, &next) != ETIMEDOUT)
            ;
        if (pw->stop || (pw->head == NULL && pw->running == 0))
            break;
        size_t queued = 0;
        for (const job_t *j = pw->head; j != NULL; j = j->next)
            queued++;
        egm_info("mapping segments: %zu queued, %d being mapped, %" PRIu64 " mapped so far", queued,
                 pw->running, pw->prewarmed);
    }
    pthread_mutex_unlock(&pw->lock);
}

uint64_t egm__prewarm_count(egm_prewarm_t *pw)
{
    pthread_mutex_lock(&pw->lock);
    uint64_t n = pw->prewarmed;
    pthread_mutex_unlock(&pw->lock);
    return n;
}
