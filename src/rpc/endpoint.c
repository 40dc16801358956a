/* Canonical TCP endpoints and local socket names (see endpoint.h). */
#include "rpc/endpoint.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/sock.h"

static const uint8_t V4_MAPPED_PREFIX[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};

static void set_v6(egm_rpc_endpoint_t *ep, const struct in6_addr *a6, uint16_t port)
{
    memset(ep, 0, sizeof(*ep));
    ep->port = port;
    if (memcmp(a6->s6_addr, V4_MAPPED_PREFIX, sizeof(V4_MAPPED_PREFIX)) == 0) {
        ep->family = AF_INET;
        memcpy(ep->addr, a6->s6_addr + 12, 4);
    } else {
        ep->family = AF_INET6;
        memcpy(ep->addr, a6->s6_addr, 16);
    }
}

static void set_v4(egm_rpc_endpoint_t *ep, const struct in_addr *a4, uint16_t port)
{
    memset(ep, 0, sizeof(*ep));
    ep->family = AF_INET;
    ep->port = port;
    memcpy(ep->addr, &a4->s_addr, 4);
}

egm_status_t egm__rpc_endpoint_from_sockaddr(const struct sockaddr *sa, egm_rpc_endpoint_t *ep_p)
{
    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        set_v4(ep_p, &in->sin_addr, ntohs(in->sin_port));
        return EGM_OK;
    }
    if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        set_v6(ep_p, &in6->sin6_addr, ntohs(in6->sin6_port));
        return EGM_OK;
    }
    return egm__set_error(EGM_ERR_INVALID_ARG, "address family %d is not IPv4 or IPv6",
                          (int)sa->sa_family);
}

egm_status_t egm__rpc_endpoint_from_host(const char *host, uint16_t port, egm_rpc_endpoint_t *ep_p)
{
    char text[EGM_RPC_ENDPOINT_MAX];
    size_t n = strlen(host);
    struct in_addr a4;
    struct in6_addr a6;

    if (n >= 2 && host[0] == '[' && host[n - 1] == ']')
        snprintf(text, sizeof(text), "%.*s", (int)(n - 2), host + 1);
    else
        snprintf(text, sizeof(text), "%s", host);
    if (inet_pton(AF_INET, text, &a4) == 1) {
        set_v4(ep_p, &a4, port);
        return EGM_OK;
    }
    if (inet_pton(AF_INET6, text, &a6) == 1) {
        set_v6(ep_p, &a6, port);
        return EGM_OK;
    }
    return egm__set_error(EGM_ERR_INVALID_ARG, "\"%s\" is not a numeric IPv4 or IPv6 address",
                          host);
}

void egm__rpc_endpoint_format(const egm_rpc_endpoint_t *ep, char *buf, size_t len)
{
    char text[INET6_ADDRSTRLEN];

    if (inet_ntop(ep->family, ep->addr, text, sizeof(text)) == NULL)
        snprintf(text, sizeof(text), "?");
    egm__sock_format_hostport(text, ep->port, buf, len);
}

int egm__rpc_endpoint_is_loopback(const egm_rpc_endpoint_t *ep)
{
    if (ep->family == AF_INET)
        return ep->addr[0] == 127;
    return IN6_IS_ADDR_LOOPBACK((const struct in6_addr *)ep->addr);
}

int egm__rpc_endpoint_is_wildcard(const egm_rpc_endpoint_t *ep)
{
    static const uint8_t zero[16];
    return memcmp(ep->addr, zero, ep->family == AF_INET ? 4 : 16) == 0;
}

int egm__rpc_endpoint_covers(const egm_rpc_endpoint_t *listen, const egm_rpc_endpoint_t *target)
{
    size_t n = listen->family == AF_INET ? 4 : 16;
    return listen->family == target->family && listen->port == target->port &&
           (memcmp(listen->addr, target->addr, n) == 0 || egm__rpc_endpoint_is_wildcard(listen));
}

int egm__rpc_hello_covers(const char *text, size_t len, const egm_rpc_endpoint_t *target)
{
    size_t i = 0;

    while (i < len) {
        while (i < len && text[i] == ' ')
            i++;
        size_t start = i;
        while (i < len && text[i] != ' ')
            i++;
        if (i == start || i - start >= EGM_RPC_ENDPOINT_MAX)
            continue;
        char word[EGM_RPC_ENDPOINT_MAX], host[EGM_RPC_ENDPOINT_MAX];
        egm_rpc_endpoint_t ep;
        uint16_t port;
        memcpy(word, text + start, i - start);
        word[i - start] = '\0';
        if (memchr(word, '\0', i - start) != NULL)
            continue;
        if (egm__sock_split_hostport(word, host, sizeof(host), &port) != EGM_OK ||
            egm__rpc_endpoint_from_host(host, port, &ep) != EGM_OK)
            continue;
        if (egm__rpc_endpoint_covers(&ep, target))
            return 1;
    }
    return 0;
}

void egm__rpc_local_name(const egm_rpc_endpoint_t *ep, char *buf, size_t len)
{
    char text[EGM_RPC_ENDPOINT_MAX];
    egm__rpc_endpoint_format(ep, text, sizeof(text));
    snprintf(buf, len, EGM_RPC_LOCAL_NAME_PREFIX "%s", text);
}
