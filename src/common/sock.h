/* Socket helpers. errno is converted here, at the system-call boundary. */
#ifndef EGM_COMMON_SOCK_H
#define EGM_COMMON_SOCK_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <egmstore/status.h>

/* "host:port" -> parts: the one parser of host:port text (configuration
 * values, endpoints from peers). The host is a name, an IPv4 address or an
 * IPv6 address in brackets ("::1:80" is refused: [::1]:80), not empty, without
 * spaces or control characters; the port 1 to 5 digits, 0..65535 (0: any, as
 * in a listen address). host gets the host without brackets. Errors:
 * EGM_ERR_INVALID_ARG, with a message for people that quotes addr and says
 * what is wrong (a host longer than host_len - 1 included). */
egm_status_t egm__sock_split_hostport(const char *addr, char *host, size_t host_len,
                                      uint16_t *port_p);
/* The same for the address of a peer to connect to (a master's): the port
 * is 1..65535. */
egm_status_t egm__sock_split_peer_hostport(const char *addr, char *host, size_t host_len,
                                           uint16_t *port_p);
/* The next peer HOST:PORT of an endpoint list at *p ("a:1;b:2,c:3": items
 * separated by ';' or ',', each optionally "http://"-prefixed and
 * "/"-suffixed, as etcd's endpoints are written), and *p moved past it.
 * EGM_ERR_NOT_FOUND at the list's end; EGM_ERR_INVALID_ARG for an empty or
 * malformed item (the detail says which). The one reader of etcd_endpoints
 * and of etcd:// master addresses. */
egm_status_t egm__sock_next_endpoint(const char **p, char *host, size_t host_len, uint16_t *port_p);
/* Room for any host egm__sock_split_hostport's callers keep: a DNS name (253
 * characters) or an IPv6 literal with its zone, and the NUL. */
#define EGM_SOCK_HOST_MAX 256
/* The one way host:port is written for people and for endpoints on the wire:
 * an IPv6 literal in brackets ("[::1]:50051"), anything else as it is
 * ("127.0.0.1:50051", "node-1:50051"); a host already in brackets is kept.
 * Truncated to len - 1 characters (EGM_SOCK_HOSTPORT_MAX holds any numeric
 * address). Returns buf. */
#define EGM_SOCK_HOSTPORT_MAX 64
char *egm__sock_format_hostport(const char *host, unsigned port, char *buf, size_t len);
/* Listening TCP socket (SO_REUSEADDR, backlog 512); port 0 picks a free one,
 * returned in *port_p. host "" or "0.0.0.0" = all IPv4 addresses. */
egm_status_t egm__sock_tcp_listen(const char *host, uint16_t port, int *fd_p, uint16_t *port_p);
/* Blocking connect with a timeout; sets TCP_NODELAY and CLOEXEC. */
egm_status_t egm__sock_tcp_connect(const char *host, uint16_t port, int timeout_ms, int *fd_p);
/* Unix stream socket at path (unlinked first) / connect to it (never waits: a
 * full backlog is EGM_ERR_UNREACHABLE). '@name' is the abstract namespace. */
egm_status_t egm__sock_unix_listen(const char *path, int *fd_p);
egm_status_t egm__sock_unix_connect(const char *path, int *fd_p);
egm_status_t egm__sock_set_nonblock(int fd, int on);
egm_status_t egm__sock_set_nodelay(int fd);
/* Blocking full read/write (retry on EINTR); EGM_ERR_UNREACHABLE on EOF. */
egm_status_t egm__sock_read_full(int fd, void *buf, size_t len);
egm_status_t egm__sock_write_full(int fd, const void *buf, size_t len);
/* Same with a deadline per call (poll); EGM_ERR_TIMEOUT when it passes. */
egm_status_t egm__sock_read_full_timeout(int fd, void *buf, size_t len, int timeout_ms);
/* Send/receive one file descriptor with a small payload (SCM_RIGHTS). */
egm_status_t egm__sock_send_fd(int sock, int fd, const void *data, size_t len);
egm_status_t egm__sock_recv_fd(int sock, int *fd_p, void *data, size_t len);
/* Peer credentials of a connected Unix socket (SO_PEERCRED). */
egm_status_t egm__sock_peer_cred(int sock, pid_t *pid_p, uid_t *uid_p, gid_t *gid_p);
/* The one rule for local peers (fd broker, shm, the master's local socket):
 * same effective uid as ours, or root. EGM_ERR_PERMISSION naming `what` else. */
egm_status_t egm__sock_peer_trusted(int sock, const char *what);

/* This host's identity: hostname plus boot id, so that two containers with the
 * same hostname on different machines differ. Static string. */
const char *egm__host_id(void);
/* Short host name for display. Static string. */
const char *egm__host_name(void);

#endif
