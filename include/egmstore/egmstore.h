/* egmstore public API: include this one header. */
#ifndef EGMSTORE_EGMSTORE_H
#define EGMSTORE_EGMSTORE_H
#include <egmstore/status.h>
#include <egmstore/config.h>
#include <egmstore/client.h>
#define EGMSTORE_VERSION "0.1.0"
#endif
