/* Status names, descriptions and their Mooncake ErrorCode equivalents. */
#include <stddef.h>
#include <egmstore/status.h>

typedef struct {
    int status;
    const char *name;
    const char *text;
    int mooncake;
} status_info_t;

static const status_info_t infos[] = {
    {EGM_OK, "OK", "success", 0},
    {EGM_INPROGRESS, "INPROGRESS", "in progress", 0},
    {EGM_ERR_INTERNAL, "INTERNAL", "internal error", -1},
    {EGM_ERR_INVALID_ARG, "INVALID_ARG", "invalid argument", -600},
    {EGM_ERR_NO_MEMORY, "NO_MEMORY", "out of memory", -1},
    {EGM_ERR_NOT_FOUND, "NOT_FOUND", "not found", -704},
    {EGM_ERR_EXISTS, "EXISTS", "object already exists", -705},
    {EGM_ERR_NO_SPACE, "NO_SPACE", "no space left in any segment", -200},
    {EGM_ERR_HAS_LEASE, "HAS_LEASE", "object is under a read lease", -706},
    {EGM_ERR_LEASE_EXPIRED, "LEASE_EXPIRED", "read lease expired during the copy", -707},
    {EGM_ERR_TIMEOUT, "TIMEOUT", "timed out", -901},
    {EGM_ERR_IO, "IO", "input/output error", -800},
    {EGM_ERR_PROTOCOL, "PROTOCOL", "malformed message", -900},
    {EGM_ERR_UNREACHABLE, "UNREACHABLE", "peer unreachable", -900},
    {EGM_ERR_NOT_SUPPORTED, "NOT_SUPPORTED", "not supported", -1012},
    {EGM_ERR_SEGMENT_NOT_FOUND, "SEGMENT_NOT_FOUND", "segment not found", -101},
    {EGM_ERR_SEGMENT_EXISTS, "SEGMENT_EXISTS", "segment already exists", -102},
    {EGM_ERR_CLIENT_NOT_FOUND, "CLIENT_NOT_FOUND", "client not found", -103},
    {EGM_ERR_TRANSFER, "TRANSFER", "data transfer failed", -800},
    {EGM_ERR_BUFFER_TOO_SMALL, "BUFFER_TOO_SMALL", "buffer too small for the object", -10},
    {EGM_ERR_NOT_READY, "NOT_READY", "object not yet committed", -703},
    {EGM_ERR_PERMISSION, "PERMISSION", "permission denied", -601},
    {EGM_ERR_NO_CUDA, "NO_CUDA", "no CUDA driver", -1012},
    {EGM_ERR_INVALID_KEY, "INVALID_KEY", "invalid key", -400},
    {EGM_ERR_BUSY, "BUSY", "resource busy", -714},
    {EGM_ERR_CLOSED, "CLOSED", "closed or not initialised", -1010},
    {EGM_ERR_VERSION, "VERSION", "unsupported protocol version", -300},
    {EGM_ERR_CONFIG, "CONFIG", "invalid configuration", -600},
    {EGM_ERR_NOT_REGISTERED, "NOT_REGISTERED", "buffer not registered", -600},
};

static const status_info_t *find(int status)
{
    for (size_t i = 0; i < sizeof(infos) / sizeof(infos[0]); i++)
        if (infos[i].status == status)
            return &infos[i];
    return NULL;
}

const char *egm_status_name(int status)
{
    const status_info_t *info = find(status);
    return info != NULL ? info->name : "UNKNOWN";
}

const char *egm_status_string(int status)
{
    const status_info_t *info = find(status);
    return info != NULL ? info->text : "unknown status";
}

int egm_status_to_mooncake(int status)
{
    const status_info_t *info = find(status);
    return info != NULL ? info->mooncake : -1;
}
