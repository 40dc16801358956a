/* The cluster-token handshake (auth.h). */
#include "common/auth.h"

#include <stdio.h>
#include <string.h>

#include "common/sock.h"

int egm__auth_required(const char *token)
{
    return token != NULL && token[0] != '\0';
}

egm_auth_verdict_t egm__auth_check_absent(const char *token)
{
    return egm__auth_required(token) ? EGM_AUTH_MISSING : EGM_AUTH_OK;
}

egm_auth_verdict_t egm__auth_check(const char *token, const void *presented, size_t len)
{
    if (!egm__auth_required(token) || egm__token_equal(token, presented, len))
        return EGM_AUTH_OK;
    return EGM_AUTH_MISMATCH;
}

egm_status_t egm__auth_recv_check(int fd, const char *token, size_t len, int timeout_ms,
                                  egm_auth_verdict_t *verdict_p)
{
    char presented[EGM_AUTH_TOKEN_MAX + 1];

    if (len > EGM_AUTH_TOKEN_MAX) {
        *verdict_p = EGM_AUTH_TOO_LONG;
        return EGM_OK;
    }
    egm_status_t status = egm__sock_read_full_timeout(fd, presented, len, timeout_ms);
    if (status == EGM_OK)
        *verdict_p = egm__auth_check(token, presented, len);
    egm__secure_zero(presented, sizeof(presented));
    return status;
}

const char *egm__auth_problem(egm_auth_verdict_t verdict, const char *who, char *buf, size_t len)
{
    switch (verdict) {
    case EGM_AUTH_OK:
        snprintf(buf, len, "%s", "");
        break;
    case EGM_AUTH_MISSING:
        snprintf(buf, len, "auth required: %s requires the cluster token (auth_token)", who);
        break;
    case EGM_AUTH_TOO_LONG:
        snprintf(buf, len, "auth token longer than the longest accepted (%d bytes)",
                 EGM_AUTH_TOKEN_MAX);
        break;
    case EGM_AUTH_MISMATCH:
        snprintf(buf, len, "auth token mismatch: the token presented is not %s's auth_token", who);
        break;
    }
    return buf;
}

egm_status_t egm__auth_hello(int fd, const void *prefix, size_t prefix_len, const char *token)
{
    egm_status_t status = egm__sock_write_full(fd, prefix, prefix_len);
    if (status == EGM_OK && egm__auth_required(token))
        status = egm__sock_write_full(fd, token, strlen(token));
    return status;
}

const char *egm__auth_refusal(const char *token, const char *who, char *buf, size_t len)
{
    if (egm__auth_required(token))
        snprintf(buf, len, "auth token mismatch");
    else
        snprintf(buf, len, "auth required: %s requires the cluster token (auth_token)", who);
    return buf;
}
