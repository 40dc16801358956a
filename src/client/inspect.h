/* Read-only questions to the master for the tools (`egmstore stat`). */
#ifndef EGM_CLIENT_INSPECT_H
#define EGM_CLIENT_INSPECT_H

#include <egmstore/client.h>
#include <egmstore/status.h>
#include "egmstore.pb-c.h"

/* StatKey: size, state, replicas, lease and pins of `key` without granting a
 * lease. EGM_OK means the master answered: (*reply_p)->status says whether the
 * key exists (NOT_FOUND). INVALID_KEY without asking. Free the reply with
 * egm__rpc_msg_free. */
egm_status_t egm__client_stat(egm_client_t *client, const char *key, Egm__StatKeyReply **reply_p);

#endif
