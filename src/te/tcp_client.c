/* tcp transport (consumer side): a few pooled connections per provider
 * endpoint, each used by one thread at a time, created on demand and dropped on
 * any error. Transfers are split into requests of at most EGM_TCP_CLIENT_CHUNK.
 * A call's ops go together: the requests for one endpoint stream on a
 * connection (tcp_stream.c; a large batch in up to 4 parts, each on its own),
 * so a batch of small objects costs about one round trip instead of one per
 * object. A single transfer is a batch of one op. */
#include "te/te_int.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/alloc.h"
#include "common/auth.h"
#include "common/config_int.h"
#include "common/hashmap.h"
#include "common/log.h"
#include "common/sock.h"
#include "common/workers.h"
#include "te/transport.h"

#define IDLE_PER_ENDPOINT 4

typedef struct {
    char name[EGM_ENDPOINT_MAX];
    char host[EGM_ENDPOINT_MAX];
    uint16_t port;
    int idle[IDLE_PER_ENDPOINT]; /* connected, not in use */
    size_t nidle;
} endpoint_t;

struct egm_tcp_client {
    pthread_mutex_t lock;
    egm_hashmap_t *endpoints; /* name -> endpoint_t* */
    int io_timeout_ms;
    atomic_uint_fast64_t next_request_id;
    char auth_token[EGM_AUTH_TOKEN_MAX + 1]; /* "" = none presented */
    egm_workers_t *workers; /* the threads of a large batch's parts (stream_parts) */
};

/* Threads kept for batches' parts: three per batch (stream_parts) for up to
 * 16 batches at once; more batches make their own. */
#define PART_WORKERS_MAX 48

egm_status_t egm__tcp_client_create(int io_timeout_ms, const char *token,
                                    egm_tcp_client_t **client_p)
{
    if (token != NULL && strlen(token) > EGM_AUTH_TOKEN_MAX)
        return egm__set_error(EGM_ERR_INVALID_ARG, "tcp client: auth token too long");
    egm_status_t st;
    egm_tcp_client_t *client = egm_calloc(1, sizeof(*client), "te.tcp_client");
    if (client == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "tcp client: out of memory");
    if ((st = egm__hashmap_create(&client->endpoints)) != EGM_OK ||
        (st = egm__workers_create(PART_WORKERS_MAX, &client->workers)) != EGM_OK) {
        egm__hashmap_destroy(client->endpoints);
        egm_free(client);
        return st;
    }
    pthread_mutex_init(&client->lock, NULL);
    client->io_timeout_ms = io_timeout_ms > 0 ? io_timeout_ms : 10000;
    if (token != NULL)
        snprintf(client->auth_token, sizeof(client->auth_token), "%s", token);
    atomic_init(&client->next_request_id, 1);
    *client_p = client;
    return EGM_OK;
}

void egm__tcp_client_destroy(egm_tcp_client_t *client)
{
    if (client == NULL)
        return;
    size_t iter = 0;
    const void *key;
    size_t key_len;
    void *value;
    while (egm__hashmap_next(client->endpoints, &iter, &key, &key_len, &value)) {
        endpoint_t *ep = value;
        for (size_t i = 0; i < ep->nidle; i++)
            close(ep->idle[i]);
        egm_free(ep);
    }
    egm__hashmap_destroy(client->endpoints);
    egm__workers_destroy(client->workers);
    pthread_mutex_destroy(&client->lock);
    egm__secure_zero(client->auth_token, sizeof(client->auth_token));
    egm_free(client);
}

/* The endpoint's record, created on first use. Caller holds the lock. */
static egm_status_t endpoint_get(egm_tcp_client_t *client, const char *name, endpoint_t **ep_p)
{
    egm_status_t st;
    size_t len = strlen(name);
    endpoint_t *ep = egm__hashmap_get(client->endpoints, name, len);
    if (ep != NULL) {
        *ep_p = ep;
        return EGM_OK;
    }
    if (len == 0 || len >= EGM_ENDPOINT_MAX)
        return egm__set_error(EGM_ERR_INVALID_ARG, "tcp_endpoint: \"%s\" is empty or too long",
                              name);
    ep = egm_calloc(1, sizeof(*ep), "te.tcp_client.endpoint");
    if (ep == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "tcp client: out of memory");
    memcpy(ep->name, name, len + 1);
    st = egm__sock_split_peer_hostport(name, ep->host, sizeof(ep->host), &ep->port);
    if (st != EGM_OK) {
        st = egm__set_error(EGM_ERR_INVALID_ARG, "tcp_endpoint: %s", egm_last_error());
        goto err_free;
    }
    if ((st = egm__hashmap_put(client->endpoints, ep->name, len, ep, NULL)) != EGM_OK)
        goto err_free;
    *ep_p = ep;
    return EGM_OK;

err_free:
    egm_free(ep);
    return st;
}

static egm_status_t read_reply(egm_tcp_client_t *client, int fd, uint64_t request_id,
                               egm_tcp_reply_t *reply);

/* Presents the cluster token on a new connection. */
static egm_status_t authenticate(egm_tcp_client_t *client, int fd, const char *name)
{
    size_t len = strlen(client->auth_token);
    uint8_t buf[EGM_TCP_REQ_SIZE];
    egm_tcp_req_t req = {.magic = EGM_TCP_MAGIC,
                         .version = EGM_TCP_VERSION,
                         .op = EGM_TCP_OP_AUTH,
                         .request_id = atomic_fetch_add(&client->next_request_id, 1),
                         .length = len};
    egm_tcp_reply_t reply;

    egm__tcp_req_encode(&req, buf);
    egm_status_t st = egm__auth_hello(fd, buf, sizeof(buf), client->auth_token);
    if (st == EGM_OK)
        st = read_reply(client, fd, req.request_id, &reply);
    if (st != EGM_OK) {
        char detail[256];
        snprintf(detail, sizeof(detail), "%s", egm_last_error());
        return egm__set_error(st, "tcp: data server %s: authentication failed: %s", name, detail);
    }
    if (reply.status != EGM_OK) {
        char refusal[EGM_AUTH_PROBLEM_MAX];
        return egm__set_error(
            EGM_ERR_PERMISSION, "tcp: data server %s refused our cluster token: %s", name,
            egm__auth_refusal(client->auth_token, "the data server", refusal, sizeof(refusal)));
    }
    return EGM_OK;
}

/* A connection to the endpoint: an idle one (*reused_p = 1) or a new one. */
static egm_status_t conn_get(egm_tcp_client_t *client, const char *name, int *fd_p, int *reused_p,
                             endpoint_t **ep_p)
{
    egm_status_t st;
    endpoint_t *ep = NULL;
    char host[EGM_ENDPOINT_MAX];
    uint16_t port;

    pthread_mutex_lock(&client->lock);
    if ((st = endpoint_get(client, name, &ep)) != EGM_OK) {
        pthread_mutex_unlock(&client->lock);
        return st;
    }
    *ep_p = ep;
    if (ep->nidle > 0) {
        *fd_p = ep->idle[--ep->nidle];
        *reused_p = 1;
        pthread_mutex_unlock(&client->lock);
        return EGM_OK;
    }
    memcpy(host, ep->host, sizeof(host));
    port = ep->port;
    pthread_mutex_unlock(&client->lock);

    int fd;
    st = egm__sock_tcp_connect(host, port, client->io_timeout_ms, &fd);
    if (st != EGM_OK) {
        char detail[256];
        snprintf(detail, sizeof(detail), "%s", egm_last_error());
        return egm__set_error(st, "tcp: connect to %s: %s", name, detail);
    }
    struct timeval tv = {.tv_sec = client->io_timeout_ms / 1000,
                         .tv_usec = (client->io_timeout_ms % 1000) * 1000};
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (client->auth_token[0] != '\0' && (st = authenticate(client, fd, name)) != EGM_OK) {
        close(fd);
        return st;
    }
    *fd_p = fd;
    *reused_p = 0;
    return EGM_OK;
}

static void conn_put(egm_tcp_client_t *client, endpoint_t *ep, int fd)
{
    pthread_mutex_lock(&client->lock);
    if (ep->nidle < IDLE_PER_ENDPOINT) {
        ep->idle[ep->nidle++] = fd;
        fd = -1;
    }
    pthread_mutex_unlock(&client->lock);
    if (fd >= 0)
        close(fd);
}

static egm_status_t read_reply(egm_tcp_client_t *client, int fd, uint64_t request_id,
                               egm_tcp_reply_t *reply)
{
    uint8_t buf[EGM_TCP_REPLY_SIZE];
    egm_status_t st = egm__sock_read_full_timeout(fd, buf, sizeof(buf), client->io_timeout_ms);
    if (st != EGM_OK)
        return st;
    egm__tcp_reply_decode(buf, reply);
    if (reply->magic != EGM_TCP_REPLY_MAGIC || reply->request_id != request_id)
        return egm__set_error(EGM_ERR_PROTOCOL, "tcp: reply with bad magic or request id");
    return EGM_OK;
}

/* The text of piece p's failure, as a single transfer reports it. */
static egm_status_t piece_error(const egm_tcp_client_t *client, const char *endpoint,
                                const egm_tcp_piece_t *p)
{
    char text[EGM_ID_STRLEN], refusal[EGM_AUTH_PROBLEM_MAX];
    const char *detail =
        !p->refused ? p->why
        : p->status != EGM_ERR_PERMISSION
            ? "refused by the server"
            : egm__auth_refusal(client->auth_token, "the data server", refusal, sizeof(refusal));
    return egm__set_error(
        p->status, "tcp: %s of segment %s [%" PRIu64 ", +%" PRIu64 ") at %s: %s: %s",
        p->req.op == EGM_TCP_OP_READ ? "READ" : "WRITE", egm__id_format(p->req.segment, text),
        p->req.offset, p->req.length, endpoint, egm_status_name(p->status), detail);
}

/* Streams pieces[0, n) (all for `endpoint`) over pooled connections: a new
 * one after a refused WRITE (the server closed; the rest of that op is not
 * sent: it takes the refusal), and again, up to the pool's size and once
 * more, while a pooled connection turns out to have been closed before
 * answering anything. Pieces left unanswered when a connection fails take its
 * status, and `detail` (the caller's, DETAIL_CAP bytes) its text. */
#define DETAIL_CAP 512

static void stream_pieces(egm_tcp_client_t *client, const char *endpoint, egm_tcp_piece_t *pieces,
                          size_t n, char *detail)
{
    size_t pos = 0;
    int stale_left = IDLE_PER_ENDPOINT + 1;
    egm_status_t st = EGM_OK;

    while (pos < n) {
        int fd = -1, reused = 0, conn_ok = 0;
        endpoint_t *ep = NULL;
        size_t answered = 0;
        if ((st = conn_get(client, endpoint, &fd, &reused, &ep)) != EGM_OK)
            break;
        for (size_t i = pos; i < n; i++)
            pieces[i].req.request_id = atomic_fetch_add(&client->next_request_id, 1);
        st = egm__tcp_stream_run(fd, pieces + pos, n - pos, client->io_timeout_ms, &answered,
                                 &conn_ok);
        if (conn_ok)
            conn_put(client, ep, fd);
        else
            close(fd);
        pos += answered;
        if (st == EGM_OK && pos < n && answered > 0) {
            /* Ended at a refused WRITE: its op's other pieces fail with it. */
            const egm_tcp_piece_t *refused = &pieces[pos - 1];
            while (pos < n && pieces[pos].op == refused->op) {
                pieces[pos].status = refused->status;
                pieces[pos].refused = 1;
                pos++;
            }
        }
        if (st == EGM_OK)
            continue; /* all answered, or up to a refused WRITE: the rest on a new connection */
        /* A pooled connection the server had closed meanwhile (not one that
         * timed out: a hung server would take a timeout per pooled one). */
        if (answered == 0 && reused && st == EGM_ERR_UNREACHABLE && stale_left-- > 0)
            continue;
        break;
    }
    detail[0] = '\0';
    if (pos < n)
        snprintf(detail, DETAIL_CAP, "%s", egm_last_error());
    for (size_t i = pos; i < n; i++) {
        pieces[i].status = st;
        pieces[i].refused = 0;
        pieces[i].why = detail;
    }
}

/* A large batch for one endpoint is cut into up to this many parts, each
 * streamed on its own connection by its own thread (the server serves each
 * connection on its own thread): a part has at least STREAM_PART_MIN_PIECES
 * requests or STREAM_PART_MIN_BYTES bytes. */
#define STREAM_PARTS_MAX 4
#define STREAM_PART_MIN_PIECES 256
#define STREAM_PART_MIN_BYTES (16u << 20)

typedef struct {
    egm_tcp_client_t *client;
    const char *endpoint;
    egm_tcp_piece_t *pieces;
    size_t n;
    char *detail; /* DETAIL_CAP bytes */
    egm_worker_job_t job;
    int started;
} stream_part_t;

static void stream_part_main(void *arg)
{
    stream_part_t *part = arg;
    stream_pieces(part->client, part->endpoint, part->pieces, part->n, part->detail);
}

/* stream_pieces over up to STREAM_PARTS_MAX connections at once, part p's
 * failure text in details[p]. */
static void stream_parts(egm_tcp_client_t *client, const char *endpoint, egm_tcp_piece_t *pieces,
                         size_t n, char (*details)[DETAIL_CAP])
{
    uint64_t bytes = 0;
    for (size_t i = 0; i < n; i++)
        bytes += pieces[i].req.length;
    size_t parts = 1;
    while (
        parts < STREAM_PARTS_MAX && n / (parts + 1) >= 1 &&
        (n / (parts + 1) >= STREAM_PART_MIN_PIECES || bytes / (parts + 1) >= STREAM_PART_MIN_BYTES))
        parts++;
    stream_part_t part[STREAM_PARTS_MAX];
    for (size_t p = 0; p < parts; p++) {
        size_t from = n * p / parts, to = n * (p + 1) / parts;
        part[p] = (stream_part_t){.client = client,
                                  .endpoint = endpoint,
                                  .pieces = pieces + from,
                                  .n = to - from,
                                  .detail = details[p]};
        /* Part 0 runs here; a part whose thread does not start runs here too. */
        if (p > 0)
            part[p].started =
                egm__workers_start(client->workers, &part[p].job, stream_part_main, &part[p]) == 0;
    }
    stream_part_main(&part[0]);
    for (size_t p = 1; p < parts; p++) {
        if (part[p].started)
            egm__workers_join(client->workers, &part[p].job);
        else
            stream_part_main(&part[p]);
    }
}

static size_t n_pieces(size_t length)
{
    return length / EGM_TCP_CLIENT_CHUNK + (length % EGM_TCP_CLIENT_CHUNK != 0);
}

/* The requests that move [offset, offset + length) of segment to or from
 * local, of at most EGM_TCP_CLIENT_CHUNK bytes each, into pieces (room for
 * n_pieces(length)), each naming op; how many. */
static size_t op_pieces(egm_te_dir_t dir, egm_id_t segment, uint64_t offset, void *local,
                        size_t length, size_t op, egm_tcp_piece_t *pieces)
{
    size_t k = 0;
    for (size_t at = 0; at < length; at += EGM_TCP_CLIENT_CHUNK) {
        size_t len =
            length - at < EGM_TCP_CLIENT_CHUNK ? length - at : (size_t)EGM_TCP_CLIENT_CHUNK;
        pieces[k++] =
            (egm_tcp_piece_t){.req = {.magic = EGM_TCP_MAGIC,
                                      .version = EGM_TCP_VERSION,
                                      .op = dir == EGM_TE_READ ? EGM_TCP_OP_READ : EGM_TCP_OP_WRITE,
                                      .segment = segment,
                                      .offset = offset + at,
                                      .length = len},
                              .local = (uint8_t *)local + at,
                              .op = op};
    }
    return k;
}

/* The ops of ops[0, n) whose endpoint is ops[first]'s and not yet `done`:
 * their pieces in op order, into pieces (room for all); how many. */
static size_t endpoint_pieces(egm_te_op_t *const *ops, size_t n, size_t first, uint8_t *done,
                              egm_tcp_piece_t *pieces)
{
    const char *endpoint = ops[first]->segment->tcp_endpoint;
    size_t k = 0;
    for (size_t i = first; i < n; i++) {
        const egm_te_op_t *op = ops[i];
        if (done[i] || strcmp(op->segment->tcp_endpoint, endpoint) != 0)
            continue;
        done[i] = 1;
        k += op_pieces(op->dir, op->segment->id, op->offset, op->local, op->length, i, pieces + k);
    }
    return k;
}

egm_status_t egm__tcp_client_transfer_batch(egm_tcp_client_t *client, egm_te_op_t *const *ops,
                                            size_t n)
{
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += n_pieces(ops[i]->length);
    egm_tcp_piece_t *pieces = egm_malloc((total ? total : 1) * sizeof(*pieces), "te.tcp.batch");
    uint8_t *done = egm_calloc(n ? n : 1, 1, "te.tcp.batch");
    if (pieces == NULL || done == NULL) {
        egm_free(pieces);
        egm_free(done);
        egm_status_t st =
            egm__set_error(EGM_ERR_NO_MEMORY, "tcp: out of memory for a batch of %zu ops", n);
        for (size_t i = 0; i < n; i++)
            ops[i]->status = st;
        return st;
    }
    for (size_t i = 0; i < n; i++)
        ops[i]->status = EGM_OK;
    /* The first failure (lowest op) and its text, kept across endpoints. */
    size_t first_failed = n;
    char first_text[1024] = "";
    for (size_t first = 0; first < n; first++) {
        if (done[first])
            continue;
        const char *endpoint = ops[first]->segment->tcp_endpoint;
        size_t k = endpoint_pieces(ops, n, first, done, pieces);
        char details[STREAM_PARTS_MAX][DETAIL_CAP];
        stream_parts(client, endpoint, pieces, k, details);
        for (size_t j = 0; j < k; j++) {
            egm_tcp_piece_t *p = &pieces[j];
            if (p->status == EGM_OK || ops[p->op]->status != EGM_OK)
                continue; /* an op takes its first failed piece's status */
            ops[p->op]->status = piece_error(client, endpoint, p);
            if (p->op < first_failed) {
                first_failed = p->op;
                snprintf(first_text, sizeof(first_text), "%s", egm_last_error());
            }
        }
    }
    egm_free(pieces);
    egm_free(done);
    if (first_failed == n)
        return EGM_OK;
    return egm__set_error(ops[first_failed]->status, "%s", first_text);
}

egm_status_t egm__tcp_client_transfer(egm_tcp_client_t *client, const char *endpoint,
                                      egm_id_t segment, uint64_t offset, void *local, size_t length,
                                      egm_te_dir_t dir)
{
    size_t k = n_pieces(length);
    egm_tcp_piece_t *pieces = egm_malloc((k ? k : 1) * sizeof(*pieces), "te.tcp.transfer");
    if (pieces == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "tcp: out of memory for a %zu-byte transfer",
                              length);
    op_pieces(dir, segment, offset, local, length, 0, pieces);
    char details[STREAM_PARTS_MAX][DETAIL_CAP];
    stream_parts(client, endpoint, pieces, k, details);
    egm_status_t st = EGM_OK;
    for (size_t j = 0; j < k && st == EGM_OK; j++)
        if (pieces[j].status != EGM_OK)
            st = piece_error(client, endpoint, &pieces[j]);
    egm_free(pieces);
    return st;
}

/* ---- the tcp transport (transport.h) ------------------------------------------
 * Connections belong to endpoints, not segments: nothing to forget. */

static egm_status_t tcp_open(const egm_te_env_t *env, void **state_p)
{
    egm_tcp_client_t *client = NULL;
    egm_status_t st = egm__tcp_client_create(env->io_timeout_ms, env->auth_token, &client);
    *state_p = client;
    return st;
}

static void tcp_close(void *state)
{
    egm__tcp_client_destroy(state);
}

static const char *tcp_obstacle(const egm_te_env_t *env, void *state,
                                const egm_segment_desc_t *segment, int device, char *why,
                                size_t why_cap)
{
    (void)env, (void)state, (void)device, (void)why, (void)why_cap;
    return segment->tcp_endpoint[0] == '\0' ? "the segment has no tcp endpoint" : NULL;
}

static egm_status_t tcp_transfer(const egm_te_env_t *env, void *state, const egm_te_op_t *op,
                                 int device)
{
    (void)env, (void)device;
    return egm__tcp_client_transfer(state, op->segment->tcp_endpoint, op->segment->id, op->offset,
                                    op->local, op->length, op->dir);
}

static egm_status_t tcp_transfer_batch(const egm_te_env_t *env, void *state, int device,
                                       egm_te_op_t *const *ops, size_t n)
{
    (void)env, (void)device;
    return egm__tcp_client_transfer_batch(state, ops, n);
}

const egm_transport_ops_t egm__transport_tcp = {
    .name = "tcp",
    .protocol = EGM_PROTOCOL_TCP,
    .host_memory_only = 1,
    .open = tcp_open,
    .close = tcp_close,
    .obstacle = tcp_obstacle,
    .transfer = tcp_transfer,
    .transfer_batch = tcp_transfer_batch,
};
