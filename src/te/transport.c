/* The registered transports, in order of preference (see transport.h). */
#include "te/transport.h"

const egm_transport_ops_t *const egm__transports[] = {
    &egm__transport_local,
    &egm__transport_nvlink,
    &egm__transport_shm,
    &egm__transport_tcp,
};

const size_t egm__n_transports = sizeof(egm__transports) / sizeof(egm__transports[0]);

_Static_assert(sizeof(egm__transports) / sizeof(egm__transports[0]) <= EGM_TRANSPORTS_MAX,
               "EGM_TRANSPORTS_MAX");

const char *egm__transport_name(egm_transport_t transport)
{
    if ((size_t)transport >= egm__n_transports)
        return "unknown";
    return egm__transports[transport]->name;
}
