/* Replies answered later (rpc/server.h: egm__rpc_server_hold): a handler
 * that cannot answer yet holds its request's reply; another thread later
 * releases it with the answer, and the server's reactor sends it.
 *
 * The box is how released replies cross threads: the releasing thread puts
 * the hold in the box's list and signals the box's eventfd, which the
 * reactor watches; the reactor takes the whole list and gives it to the
 * server (deliver). The box outlives the server while holds are out: once
 * the server closed it, a hold released later is freed by its releaser. Server side (hold creation,
 * the connection links, deliver, close) runs on the reactor thread; release on any thread. */
#ifndef EGM_RPC_HOLD_H
#define EGM_RPC_HOLD_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>
#include "common/reactor.h"
#include "rpc/server.h"

typedef struct egm_rpc_holdbox egm_rpc_holdbox_t;

struct egm_rpc_hold {
    /* The server's (reactor thread): its connection (NULL once that closed)
     * and the connection's list of held replies. */
    void *conn;
    egm_rpc_hold_t *conn_prev, *conn_next;
    uint16_t type;
    uint64_t request_id;
    /* Set by the release: the answer. */
    egm_status_t status;
    uint8_t *reply;
    size_t len;
    char *error;
    egm_rpc_hold_t *released_next; /* in the box, under its lock */
    egm_rpc_holdbox_t *box;
};

/* Called on the reactor thread with the released holds, in release order
 * (linked by released_next); it frees each with egm__rpc_hold_free. */
typedef void (*egm_rpc_hold_deliver_fn)(void *arg, egm_rpc_hold_t *released);

egm_status_t egm__rpc_holdbox_create(egm_reactor_t *reactor, egm_rpc_hold_deliver_fn deliver,
                                     void *arg, egm_rpc_holdbox_t **box_p);
/* A hold for request (type, request_id), not linked to any connection yet;
 * NULL when out of memory. */
egm_rpc_hold_t *egm__rpc_holdbox_hold(egm_rpc_holdbox_t *box, uint16_t type, uint64_t request_id);
/* Frees a released hold and its answer. */
void egm__rpc_hold_free(egm_rpc_hold_t *h);
/* The server is going: released holds not delivered yet are freed, and so
 * is every hold released from now on (by its releaser); deliver is not
 * called again. Its holds must have been unlinked from their connections. */
void egm__rpc_holdbox_close(egm_rpc_holdbox_t *box);

#endif
