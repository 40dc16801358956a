/* The RPC command list's table, built from command.h's rows. */
#include "rpc/command.h"

#include <stddef.h>
#include "egmstore.pb-c.h"

/* Handler commands are numbered 1, 2, ... in row order: with this, the type
 * of row i is i + 1 and no two rows share a number. */
#define CHECK_ROW(e, n, name, req, rep)                                                            \
    _Static_assert(EGM_RPC_ROW_##e + 1 == (n),                                                     \
                   "EGM_RPC_COMMANDS: " #name " must be numbered after the row before it");
EGM_RPC_COMMANDS(CHECK_ROW)
#undef CHECK_ROW

#define CHECK_SESSION(e, n, name)                                                                  \
    _Static_assert((n) > EGM_RPC_TYPE_MAX && (n) <= UINT16_MAX,                                    \
                   "EGM_RPC_SESSION_COMMANDS: " #name " must be numbered above the handler ones");
EGM_RPC_SESSION_COMMANDS(CHECK_SESSION)
#undef CHECK_SESSION

static const egm_rpc_command_t commands[] = {
#define ROW(e, n, name, req, rep)                                                                  \
    {n, #name, &egm__##req##__descriptor, &egm__##rep##__descriptor, 0},
    EGM_RPC_COMMANDS(ROW)
#undef ROW
};

enum {
#define SESSION_ROW(e, n, name) SESSION_ROW_##e,
    EGM_RPC_SESSION_COMMANDS(SESSION_ROW)
#undef SESSION_ROW
};

static const egm_rpc_command_t session_commands[] = {
#define ROW(e, n, name) {n, #name, NULL, NULL, EGM_RPC_SESSION},
    EGM_RPC_SESSION_COMMANDS(ROW)
#undef ROW
};

_Static_assert(sizeof(commands) / sizeof(commands[0]) == EGM_RPC_TYPE_MAX,
               "one row per handler command");

const egm_rpc_command_t *egm__rpc_command_find(uint16_t type)
{
    if (type >= 1 && type <= EGM_RPC_TYPE_MAX)
        return &commands[type - 1];
    /* A switch, so that two session rows with one number do not compile. */
    switch (type) {
#define CASE(e, n, name)                                                                           \
    case n:                                                                                        \
        return &session_commands[SESSION_ROW_##e];
        EGM_RPC_SESSION_COMMANDS(CASE)
#undef CASE
    default:
        return NULL;
    }
}

const char *egm__rpc_type_name(uint16_t type)
{
    const egm_rpc_command_t *c = egm__rpc_command_find(type);
    return c != NULL ? c->name : "unknown";
}
