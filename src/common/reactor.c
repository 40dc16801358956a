/* A thin epoll reactor: fd callbacks, periodic timers, tasks posted from other
 * threads, and a stop that is safe from signal handlers (an eventfd write). */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>
#include "common/alloc.h"
#include "common/clock.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "common/reactor.h"

typedef struct fd_rec {
    int fd;
    egm_reactor_fd_cb_t cb;
    void *arg;
    int removed;
    struct fd_rec *next_dead;
} fd_rec_t;

typedef struct timer {
    uint64_t id;
    uint64_t period_ms;
    uint64_t due_ms;
    egm_reactor_timer_cb_t cb;
    void *arg;
    struct timer *next;
} timer_t_;

typedef struct task {
    egm_reactor_task_cb_t cb;
    void *arg;
    struct task *next;
} task_t;

struct egm_reactor {
    int epfd;
    int wakefd;
    egm_hashmap_t *fds; /* fd -> fd_rec_t */
    fd_rec_t *dead;     /* removed records, freed after the current dispatch */
    timer_t_ *timers;
    uint64_t next_timer_id;
    pthread_mutex_t lock; /* tasks */
    task_t *tasks, *tasks_tail;
    int stop;       /* set from any thread or a signal handler: atomic accesses only */
    int ready_left; /* events of the current epoll batch after the one dispatched */
    int spin_us;    /* egm__reactor_set_spin */
};

static uint32_t to_epoll(uint32_t events)
{
    return ((events & EGM_EV_READ) ? EPOLLIN : 0u) | ((events & EGM_EV_WRITE) ? EPOLLOUT : 0u) |
           ((events & EGM_EV_EXCLUSIVE) ? EPOLLEXCLUSIVE : 0u);
}

egm_status_t egm__reactor_create(egm_reactor_t **reactor_p)
{
    egm_reactor_t *r = egm_calloc(1, sizeof(*r), "reactor");
    egm_status_t status;
    if (r == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory creating a reactor");
    r->epfd = epoll_create1(EPOLL_CLOEXEC);
    r->wakefd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    pthread_mutex_init(&r->lock, NULL);
    if (r->epfd < 0 || r->wakefd < 0) {
        status =
            egm__set_error(egm__status_from_errno(errno), "epoll/eventfd: %s", strerror(errno));
        goto err;
    }
    status = egm__hashmap_create(&r->fds);
    if (status != EGM_OK)
        goto err;
    struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
    if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, r->wakefd, &ev) != 0) {
        status = egm__set_error(EGM_ERR_IO, "epoll_ctl: %s", strerror(errno));
        goto err;
    }
    *reactor_p = r;
    return EGM_OK;
err:
    egm__reactor_destroy(r);
    return status;
}

static void free_dead(egm_reactor_t *r)
{
    while (r->dead != NULL) {
        fd_rec_t *rec = r->dead;
        r->dead = rec->next_dead;
        egm_free(rec);
    }
}

void egm__reactor_destroy(egm_reactor_t *r)
{
    if (r == NULL)
        return;
    if (r->fds != NULL) {
        size_t it = 0;
        void *value;
        while (egm__hashmap_next(r->fds, &it, NULL, NULL, &value))
            egm_free(value);
        egm__hashmap_destroy(r->fds);
    }
    free_dead(r);
    while (r->timers != NULL) {
        timer_t_ *t = r->timers;
        r->timers = t->next;
        egm_free(t);
    }
    while (r->tasks != NULL) {
        task_t *t = r->tasks;
        r->tasks = t->next;
        egm_free(t);
    }
    if (r->epfd >= 0)
        close(r->epfd);
    if (r->wakefd >= 0)
        close(r->wakefd);
    pthread_mutex_destroy(&r->lock);
    egm_free(r);
}

egm_status_t egm__reactor_add(egm_reactor_t *r, int fd, uint32_t events, egm_reactor_fd_cb_t cb,
                              void *arg)
{
    if (egm__hashmap_get(r->fds, &fd, sizeof(fd)) != NULL)
        return egm__set_error(EGM_ERR_EXISTS, "fd %d is already in the reactor", fd);
    fd_rec_t *rec = egm_calloc(1, sizeof(*rec), "reactor.fd");
    if (rec == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory adding an fd");
    *rec = (fd_rec_t){.fd = fd, .cb = cb, .arg = arg};
    egm_status_t status = egm__hashmap_put(r->fds, &fd, sizeof(fd), rec, NULL);
    if (status != EGM_OK) {
        egm_free(rec);
        return status;
    }
    struct epoll_event ev = {.events = to_epoll(events), .data.ptr = rec};
    if (epoll_ctl(r->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        status = egm__set_error(egm__status_from_errno(errno), "epoll_ctl(ADD %d): %s", fd,
                                strerror(errno));
        egm__hashmap_remove(r->fds, &fd, sizeof(fd));
        egm_free(rec);
        return status;
    }
    return EGM_OK;
}

egm_status_t egm__reactor_modify(egm_reactor_t *r, int fd, uint32_t events)
{
    fd_rec_t *rec = egm__hashmap_get(r->fds, &fd, sizeof(fd));
    if (rec == NULL)
        return egm__set_error(EGM_ERR_NOT_FOUND, "fd %d is not in the reactor", fd);
    struct epoll_event ev = {.events = to_epoll(events & ~EGM_EV_EXCLUSIVE), .data.ptr = rec};
    if (epoll_ctl(r->epfd, EPOLL_CTL_MOD, fd, &ev) != 0)
        return egm__set_error(egm__status_from_errno(errno), "epoll_ctl(MOD %d): %s", fd,
                              strerror(errno));
    return EGM_OK;
}

egm_status_t egm__reactor_remove(egm_reactor_t *r, int fd)
{
    fd_rec_t *rec = egm__hashmap_remove(r->fds, &fd, sizeof(fd));
    if (rec == NULL)
        return egm__set_error(EGM_ERR_NOT_FOUND, "fd %d is not in the reactor", fd);
    epoll_ctl(r->epfd, EPOLL_CTL_DEL, fd, NULL);
    /* Events for it may still be in this round's batch: free it afterwards. */
    rec->removed = 1;
    rec->next_dead = r->dead;
    r->dead = rec;
    return EGM_OK;
}

egm_status_t egm__reactor_add_timer(egm_reactor_t *r, uint64_t period_ms, egm_reactor_timer_cb_t cb,
                                    void *arg, uint64_t *timer_id_p)
{
    /* The upper bound keeps now + period from wrapping around. */
    if (period_ms == 0 || period_ms > (uint64_t)INT64_MAX)
        return egm__set_error(EGM_ERR_INVALID_ARG, "timer period must be 1..2^63-1 ms");
    timer_t_ *t = egm_calloc(1, sizeof(*t), "reactor.timer");
    if (t == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory adding a timer");
    *t = (timer_t_){.id = ++r->next_timer_id,
                    .period_ms = period_ms,
                    .due_ms = egm__now_ms() + period_ms,
                    .cb = cb,
                    .arg = arg,
                    .next = r->timers};
    r->timers = t;
    if (timer_id_p != NULL)
        *timer_id_p = t->id;
    return EGM_OK;
}

egm_status_t egm__reactor_remove_timer(egm_reactor_t *r, uint64_t timer_id)
{
    for (timer_t_ **pp = &r->timers; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->id == timer_id) {
            timer_t_ *t = *pp;
            *pp = t->next;
            egm_free(t);
            return EGM_OK;
        }
    }
    return egm__set_error(EGM_ERR_NOT_FOUND, "no timer %llu", (unsigned long long)timer_id);
}

static void wake(egm_reactor_t *r)
{
    uint64_t one = 1;
    ssize_t rc = write(r->wakefd, &one, sizeof(one));
    (void)rc;
}

egm_status_t egm__reactor_post(egm_reactor_t *r, egm_reactor_task_cb_t cb, void *arg)
{
    task_t *t = egm_calloc(1, sizeof(*t), "reactor.task");
    if (t == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "out of memory posting a task");
    t->cb = cb;
    t->arg = arg;
    pthread_mutex_lock(&r->lock);
    if (r->tasks_tail != NULL)
        r->tasks_tail->next = t;
    else
        r->tasks = t;
    r->tasks_tail = t;
    pthread_mutex_unlock(&r->lock);
    wake(r);
    return EGM_OK;
}

static int stopping(egm_reactor_t *r)
{
    return __atomic_load_n(&r->stop, __ATOMIC_ACQUIRE);
}

void egm__reactor_stop(egm_reactor_t *r)
{
    __atomic_store_n(&r->stop, 1, __ATOMIC_RELEASE);
    wake(r);
}

static void run_tasks(egm_reactor_t *r)
{
    pthread_mutex_lock(&r->lock);
    task_t *t = r->tasks;
    r->tasks = r->tasks_tail = NULL;
    pthread_mutex_unlock(&r->lock);
    while (t != NULL) {
        task_t *next = t->next;
        t->cb(t->arg);
        egm_free(t);
        t = next;
    }
}

/* Fires due timers; returns ms until the next one (-1 if none). A callback may
 * add or remove any timer, so after each one the scan restarts from the head;
 * timers fired in this round are already rescheduled past `now` and skipped. */
static int run_timers(egm_reactor_t *r)
{
    uint64_t now = egm__now_ms();
    for (int fired = 1; fired;) {
        fired = 0;
        for (timer_t_ *t = r->timers; t != NULL; t = t->next) {
            if (t->due_ms <= now) {
                t->due_ms = now + t->period_ms;
                t->cb(r, t->arg);
                fired = 1;
                break;
            }
        }
    }
    uint64_t next_due = UINT64_MAX;
    for (timer_t_ *t = r->timers; t != NULL; t = t->next)
        if (t->due_ms < next_due)
            next_due = t->due_ms;
    if (next_due == UINT64_MAX)
        return -1;
    now = egm__now_ms();
    if (next_due <= now)
        return 0;
    return next_due - now > INT_MAX ? INT_MAX : (int)(next_due - now);
}

void egm__reactor_set_spin(egm_reactor_t *r, int spin_us)
{
    r->spin_us = spin_us > 0 ? spin_us : 0;
}

/* Polls without sleeping until spin_until (egm__now_ns), and no longer than
 * timeout_ms (the next timer; -1: none): the events found, 0 if none. */
static int spin_wait(egm_reactor_t *r, struct epoll_event *events, int max, int timeout_ms,
                     uint64_t spin_until)
{
    uint64_t now = egm__now_ns(), until = spin_until;
    if (timeout_ms >= 0 && now + (uint64_t)timeout_ms * 1000000u < until)
        until = now + (uint64_t)timeout_ms * 1000000u;
    int n;
    do {
        n = epoll_wait(r->epfd, events, max, 0);
    } while (n == 0 && !stopping(r) && egm__now_ns() < until);
    return n;
}

egm_status_t egm__reactor_run(egm_reactor_t *r)
{
    struct epoll_event events[64];
    /* After a wakeup that had events, poll until this time before sleeping;
     * a timer that falls due meanwhile runs and the polling goes on. */
    uint64_t spin_until = 0;
    while (!stopping(r)) {
        int timeout = run_timers(r);
        if (stopping(r))
            break;
        int n = 0;
        if (r->spin_us > 0 && timeout != 0 && egm__now_ns() < spin_until) {
            n = spin_wait(r, events, 64, timeout, spin_until);
            if (n == 0)
                continue; /* the timers again (time passed), then polling or a sleep */
        } else {
            n = epoll_wait(r->epfd, events, 64, timeout);
        }
        if (n > 0 && r->spin_us > 0)
            spin_until = egm__now_ns() + (uint64_t)r->spin_us * 1000u;
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return egm__set_error(EGM_ERR_IO, "epoll_wait: %s", strerror(errno));
        }
        for (int i = 0; i < n && !stopping(r); i++) {
            fd_rec_t *rec = events[i].data.ptr;
            if (rec == NULL) {
                uint64_t value;
                ssize_t rc = read(r->wakefd, &value, sizeof(value));
                (void)rc;
                continue;
            }
            if (rec->removed)
                continue;
            uint32_t ev = 0;
            if (events[i].events & (EPOLLIN | EPOLLRDHUP))
                ev |= EGM_EV_READ;
            if (events[i].events & EPOLLOUT)
                ev |= EGM_EV_WRITE;
            if (events[i].events & (EPOLLERR | EPOLLHUP))
                ev |= EGM_EV_ERROR;
            r->ready_left = n - i - 1;
            rec->cb(r, rec->fd, ev, rec->arg);
        }
        r->ready_left = 0;
        free_dead(r);
        run_tasks(r);
    }
    __atomic_store_n(&r->stop, 0, __ATOMIC_RELEASE);
    return EGM_OK;
}

int egm__reactor_events_waiting(const egm_reactor_t *r)
{
    return r->ready_left;
}
