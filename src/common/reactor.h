/* A thin epoll reactor: one thread runs the loop; callbacks run on it. */
#ifndef EGM_COMMON_REACTOR_H
#define EGM_COMMON_REACTOR_H

#include <stdint.h>
#include <egmstore/status.h>

typedef struct egm_reactor egm_reactor_t;

#define EGM_EV_READ 0x1u
#define EGM_EV_WRITE 0x2u
#define EGM_EV_ERROR 0x4u /* hang-up or error; always reported */
/* egm__reactor_add only: one fd watched by several reactors (a listening
 * socket shared by server threads) wakes one of them per event, not all
 * (EPOLLEXCLUSIVE). Such an fd cannot be modified: remove it and add it
 * again. */
#define EGM_EV_EXCLUSIVE 0x8u

typedef void (*egm_reactor_fd_cb_t)(egm_reactor_t *reactor, int fd, uint32_t events, void *arg);
typedef void (*egm_reactor_timer_cb_t)(egm_reactor_t *reactor, void *arg);
typedef void (*egm_reactor_task_cb_t)(void *arg);

egm_status_t egm__reactor_create(egm_reactor_t **reactor_p);
/* Must not be running. Registered fds are not closed. */
void egm__reactor_destroy(egm_reactor_t *reactor);

/* fd registration; events is EGM_EV_READ|EGM_EV_WRITE (add: also
 * EGM_EV_EXCLUSIVE). Loop thread only (or before the loop runs). */
egm_status_t egm__reactor_add(egm_reactor_t *reactor, int fd, uint32_t events,
                              egm_reactor_fd_cb_t cb, void *arg);
egm_status_t egm__reactor_modify(egm_reactor_t *reactor, int fd, uint32_t events);
/* Safe to call from inside that fd's callback. */
egm_status_t egm__reactor_remove(egm_reactor_t *reactor, int fd);

/* Periodic timer (period_ms > 0) firing on the loop thread; returns an id. */
egm_status_t egm__reactor_add_timer(egm_reactor_t *reactor, uint64_t period_ms,
                                    egm_reactor_timer_cb_t cb, void *arg, uint64_t *timer_id_p);
egm_status_t egm__reactor_remove_timer(egm_reactor_t *reactor, uint64_t timer_id);

/* Thread-safe: run cb(arg) on the loop thread soon. */
egm_status_t egm__reactor_post(egm_reactor_t *reactor, egm_reactor_task_cb_t cb, void *arg);

/* After a wakeup that had events, the loop polls (epoll_wait without a
 * timeout) for up to spin_us microseconds before it sleeps: a request that
 * comes within them saves the sleep and the wake-up, at the cost of a busy
 * CPU while traffic flows; an idle loop sleeps after spin_us. 0 (the
 * default): sleep at once. Before egm__reactor_run. */
void egm__reactor_set_spin(egm_reactor_t *reactor, int spin_us);

/* From a callback on the loop thread: how many fds of the same wakeup are
 * still to be dispatched after this one (others that have work waiting). */
int egm__reactor_events_waiting(const egm_reactor_t *reactor);

/* Run until egm__reactor_stop (thread-safe, also from signal-safe contexts
 * through an eventfd write). */
egm_status_t egm__reactor_run(egm_reactor_t *reactor);
void egm__reactor_stop(egm_reactor_t *reactor);

#endif
