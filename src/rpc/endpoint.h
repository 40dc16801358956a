/* TCP endpoints of the master in one canonical form, and the names of its
 * local Unix socket derived from them (docs/protocol.md "Local socket").
 *
 * A master whose TCP listener is on a loopback or wildcard address also
 * listens on the abstract Unix socket named after that exact listen address
 * and port ("@egmstore-master-127.0.0.2:5000", "@egmstore-master-0.0.0.0:5000",
 * "@egmstore-master-[::]:5000"). A client given a loopback HOST:PORT tries the
 * name of HOST:PORT, then the wildcard names of PORT (the kernel's own order:
 * a listener on the exact address wins over a wildcard one), and keeps a Unix
 * connection only when the master's Hello reply lists a TCP endpoint that
 * covers HOST:PORT, i.e. the master that TCP would have reached. */
#ifndef EGM_RPC_ENDPOINT_H
#define EGM_RPC_ENDPOINT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <egmstore/status.h>

#define EGM_RPC_LOCAL_NAME_PREFIX "@egmstore-master-"
/* sun_path's size: the longest abstract name we form is about 75 bytes. */
#define EGM_RPC_LOCAL_NAME_MAX 108
/* "[IPv6]:PORT" */
#define EGM_RPC_ENDPOINT_MAX 64
/* What a Hello reply may carry (a few endpoints separated by spaces). */
#define EGM_RPC_HELLO_MAX 512

/* A numeric TCP endpoint. An IPv4-mapped IPv6 address is kept as IPv4 (a
 * listener on one takes the IPv4 connections to it). */
typedef struct {
    int family; /* AF_INET or AF_INET6 */
    uint8_t addr[16];
    uint16_t port;
} egm_rpc_endpoint_t;

/* From a bound or peer address. EGM_ERR_INVALID_ARG for another family. */
egm_status_t egm__rpc_endpoint_from_sockaddr(const struct sockaddr *sa, egm_rpc_endpoint_t *ep_p);
/* From a numeric host ("127.0.0.2", "::1", "[::1]") and a port.
 * EGM_ERR_INVALID_ARG when host is not a numeric address. */
egm_status_t egm__rpc_endpoint_from_host(const char *host, uint16_t port, egm_rpc_endpoint_t *ep_p);
/* "127.0.0.2:5000", "[::1]:5000" (inet_ntop's text). */
void egm__rpc_endpoint_format(const egm_rpc_endpoint_t *ep, char *buf, size_t len);
/* Loopback (127.0.0.0/8, ::1) or wildcard (0.0.0.0, ::). */
int egm__rpc_endpoint_is_loopback(const egm_rpc_endpoint_t *ep);
int egm__rpc_endpoint_is_wildcard(const egm_rpc_endpoint_t *ep);
/* Whether a TCP connection to `target` reaches a listener bound to `listen`:
 * same family and port, and the same address or a wildcard one. */
int egm__rpc_endpoint_covers(const egm_rpc_endpoint_t *listen, const egm_rpc_endpoint_t *target);
/* Whether a Hello reply (endpoints separated by spaces) lists one that covers
 * `target`. Never trusts its input: anything unparsable covers nothing. */
int egm__rpc_hello_covers(const char *text, size_t len, const egm_rpc_endpoint_t *target);
/* The local socket name of a master listening on `ep`: EGM_RPC_LOCAL_NAME_PREFIX
 * followed by egm__rpc_endpoint_format's text. */
void egm__rpc_local_name(const egm_rpc_endpoint_t *ep, char *buf, size_t len);

#endif
