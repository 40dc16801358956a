/* The cluster-token handshake (docs/security.md): the one check a server
 * makes of a peer's first message, for the three servers that require the
 * token (the master's RPC server, a provider's tcp data server and its fd
 * broker), and the hello their blocking clients send (the tcp data client and
 * the fd broker's consumer side; the RPC client sends Auth as the first frame
 * of its non-blocking connection, rpc/client.c, and reports the master's own
 * text). Each carries the token in its own framing, unchanged on the wire
 * (docs/protocol.md: an Auth frame, an AUTH request, an "EMGA" prefix); what
 * the two ends do with it is here. The admin HTTP server (admin/http_server.c)
 * judges an `Authorization: Bearer` header's token with the same check. */
#ifndef EGM_COMMON_AUTH_H
#define EGM_COMMON_AUTH_H

#include <stddef.h>
#include <egmstore/status.h>
#include "common/config_int.h"

/* Room for any text of egm__auth_problem / egm__auth_refusal with a short `who`. */
#define EGM_AUTH_PROBLEM_MAX 192

typedef enum {
    EGM_AUTH_OK = 0,   /* the token, or none is required */
    EGM_AUTH_MISSING,  /* a token is required and the peer's first message was another */
    EGM_AUTH_TOO_LONG, /* longer than EGM_AUTH_TOKEN_MAX: not read */
    EGM_AUTH_MISMATCH, /* not the token */
} egm_auth_verdict_t;

/* ---- check (server side). token: the server's; NULL or "" = none required. */

/* Whether a token is required. */
int egm__auth_required(const char *token);

/* A server that requires the token closes a connection that has not presented
 * it within EGM_AUTH_DEADLINE_MS, and lets such connections hold at most
 * 1 / EGM_AUTH_WAITING_SHARE of its connections (past that, the oldest of them
 * is closed for a new one: a client presents the token at once). Peers without
 * the token then cannot keep token holders out by holding connections open. */
#define EGM_AUTH_DEADLINE_MS 5000
#define EGM_AUTH_WAITING_SHARE 2

/* The peer's first message is not a token: MISSING when one is required. */
egm_auth_verdict_t egm__auth_check_absent(const char *token);
/* The peer presented presented[0, len): OK when none is required or they are
 * the token (egm__token_equal: the time depends on len only), else MISMATCH. */
egm_auth_verdict_t egm__auth_check(const char *token, const void *presented, size_t len);
/* The same for len bytes of token that follow on a blocking socket: TOO_LONG
 * (nothing read) past EGM_AUTH_TOKEN_MAX, else reads them, checks them and
 * wipes them. EGM_OK with *verdict_p, or the read's error (the peer is gone,
 * or silent for timeout_ms): close the connection. */
egm_status_t egm__auth_recv_check(int fd, const char *token, size_t len, int timeout_ms,
                                  egm_auth_verdict_t *verdict_p);
/* What a refusal says (logged, and sent where the carrier has text), naming
 * the server as `who` ("this master"): into buf, returned. "" for OK. */
const char *egm__auth_problem(egm_auth_verdict_t verdict, const char *who, char *buf, size_t len);

/* ---- hello (client side). token: ours; NULL or "" = none presented. */

/* Sends `prefix` (the carrier's header, which announces the token's length)
 * and then the token, on a blocking socket. */
egm_status_t egm__auth_hello(int fd, const void *prefix, size_t prefix_len, const char *token);
/* Why `who` ("the data server") answered our hello PERMISSION, as far as a
 * client can tell: into buf, returned. */
const char *egm__auth_refusal(const char *token, const char *who, char *buf, size_t len);

#endif
