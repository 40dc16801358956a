/* The master's admin HTTP endpoints (docs/master.md "Admin HTTP and metrics"):
 * /metrics (Prometheus text), /health (JSON), /segments (JSON),
 * /get_all_segments (segment names, one a line, as Mooncake's master answers
 * SGLang), /keys?prefix=&limit= (JSON), and Mooncake's /query_key?key=,
 * /batch_query_keys?keys=a,b (JSON in Mooncake's shape; Dynamo's KV router
 * reads the latter) and /metrics/summary (one line of text). They run on the
 * HTTP server's one thread and read the master's state with its lock held
 * (exclusive, except for the segment names and the per-key queries). */
#ifndef EGM_MASTER_ADMIN_H
#define EGM_MASTER_ADMIN_H

#include <pthread.h>
#include <stdint.h>
#include "admin/http_server.h"
#include "master/master_int.h"
#include "master/metrics.h"
#include "rpc/server.h"

#define EGM_ADMIN_KEYS_LIMIT_DEFAULT 1000
#define EGM_ADMIN_KEYS_LIMIT_MAX 100000
/* A /keys answer stops (truncated) once its body is this large. */
#define EGM_ADMIN_KEYS_BODY_MAX (16u << 20)

typedef struct {
    egm_master_state_t *state;
    pthread_rwlock_t *lock; /* the state lock, held around every read; NULL = none (tests) */
    const egm_master_metrics_t *metrics;
    const egm_rpc_server_t *server; /* any of the group; NULL = no connection metrics */
    /* Where the master keeps the admin HTTP server serving this, for its
     * refusals (set before its thread starts); NULL = none (tests). */
    egm_http_server_t *const *http;
    uint64_t start_ms; /* egm__now_ms() when the master started */
    /* The counters at the previous /metrics/summary, whose rates are over the
     * time since (since start_ms for the first). Changed by the handler, on
     * the HTTP server's one thread only; zero-initialised. */
    uint64_t summary_ns; /* egm__now_ns() */
    uint64_t summary_requests[EGM_RPC_TYPE_MAX + 1];
    uint64_t summary_failures[EGM_RPC_TYPE_MAX + 1];
} egm_master_admin_t;

/* egm_http_handler_fn; arg is an egm_master_admin_t (its summary fields
 * change). Unknown paths answer 404, bad query parameters 400, both with a
 * JSON error naming what was wrong and what is accepted; /query_key of a key
 * that is not there answers 404 as Mooncake's master does. */
void egm__master_admin_http(void *arg, const char *path, const char *query,
                            egm_http_response_t *resp);

#endif
