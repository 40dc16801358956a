/* Held replies and the box that hands released ones to the server's reactor
 * (rpc/hold.h). */
#include "rpc/hold.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "common/alloc.h"
#include "common/log.h"

struct egm_rpc_holdbox {
    pthread_mutex_t lock;
    egm_reactor_t *reactor;
    int efd; /* readable while released holds wait in the list */
    egm_rpc_hold_deliver_fn deliver;
    void *arg;
    int closed;
    int signalled; /* efd was written since the reactor last took the list */
    egm_rpc_hold_t *released, *released_tail;
    /* The server's reference and one per hold not freed; the last one out
     * frees the box. */
    size_t refs;
};

/* Drops one reference; with the lock, which it lets go. */
static void unref_locked(egm_rpc_holdbox_t *box)
{
    int last = --box->refs == 0;
    pthread_mutex_unlock(&box->lock);
    if (last) {
        pthread_mutex_destroy(&box->lock);
        egm_free(box);
    }
}

/* On the reactor thread: hands what was released to the server. */
static void on_released(egm_reactor_t *reactor, int fd, uint32_t events, void *arg)
{
    egm_rpc_holdbox_t *box = arg;
    uint64_t n;
    (void)reactor;
    (void)events;
    while (read(fd, &n, sizeof(n)) < 0 && errno == EINTR)
        ;
    pthread_mutex_lock(&box->lock);
    egm_rpc_hold_t *list = box->released;
    box->released = box->released_tail = NULL;
    box->signalled = 0;
    pthread_mutex_unlock(&box->lock);
    if (list != NULL)
        box->deliver(box->arg, list);
}

egm_status_t egm__rpc_holdbox_create(egm_reactor_t *reactor, egm_rpc_hold_deliver_fn deliver,
                                     void *arg, egm_rpc_holdbox_t **box_p)
{
    *box_p = NULL;
    egm_rpc_holdbox_t *box = egm_calloc(1, sizeof(*box), "rpc_holdbox");
    if (box == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "rpc server: out of memory");
    box->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (box->efd < 0) {
        egm_status_t s =
            egm__set_error(egm__status_from_errno(errno),
                           "rpc server: eventfd for held replies: %s", strerror(errno));
        egm_free(box);
        return s;
    }
    egm_status_t s = egm__reactor_add(reactor, box->efd, EGM_EV_READ, on_released, box);
    if (s != EGM_OK) {
        close(box->efd);
        egm_free(box);
        return s;
    }
    pthread_mutex_init(&box->lock, NULL);
    box->reactor = reactor;
    box->deliver = deliver;
    box->arg = arg;
    box->refs = 1;
    *box_p = box;
    return EGM_OK;
}

egm_rpc_hold_t *egm__rpc_holdbox_hold(egm_rpc_holdbox_t *box, uint16_t type, uint64_t request_id)
{
    egm_rpc_hold_t *h = egm_calloc(1, sizeof(*h), "rpc_hold");
    if (h == NULL)
        return NULL;
    h->type = type;
    h->request_id = request_id;
    h->box = box;
    pthread_mutex_lock(&box->lock);
    box->refs++;
    pthread_mutex_unlock(&box->lock);
    return h;
}

/* Frees h without touching its box's count. */
static void free_answer(egm_rpc_hold_t *h)
{
    egm_free(h->reply);
    egm_free(h->error);
    egm_free(h);
}

void egm__rpc_hold_free(egm_rpc_hold_t *h)
{
    egm_rpc_holdbox_t *box = h->box;
    free_answer(h);
    pthread_mutex_lock(&box->lock);
    unref_locked(box);
}

void egm__rpc_hold_release(egm_rpc_hold_t *h, egm_status_t status, uint8_t *reply, size_t len,
                           const char *error)
{
    egm_rpc_holdbox_t *box = h->box;
    h->status = status;
    h->reply = reply;
    h->len = len;
    if (status != EGM_OK && error != NULL && error[0] != '\0')
        h->error = egm_strdup(error, "rpc_hold"); /* none: the status's own text */
    pthread_mutex_lock(&box->lock);
    if (box->closed) {
        free_answer(h);
        unref_locked(box);
        return;
    }
    if (box->released_tail != NULL)
        box->released_tail->released_next = h;
    else
        box->released = h;
    box->released_tail = h;
    if (!box->signalled) {
        uint64_t one = 1;
        while (write(box->efd, &one, sizeof(one)) < 0 && errno == EINTR)
            ;
        box->signalled = 1;
    }
    pthread_mutex_unlock(&box->lock);
}

void egm__rpc_holdbox_close(egm_rpc_holdbox_t *box)
{
    if (box == NULL)
        return;
    egm__reactor_remove(box->reactor, box->efd);
    pthread_mutex_lock(&box->lock);
    close(box->efd);
    box->closed = 1;
    egm_rpc_hold_t *h = box->released;
    box->released = box->released_tail = NULL;
    while (h != NULL) {
        egm_rpc_hold_t *next = h->released_next;
        free_answer(h);
        box->refs--; /* not the last: the server's own is dropped below */
        h = next;
    }
    unref_locked(box);
}
