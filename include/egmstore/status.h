/* egmstore status codes. Values are stable: they travel on the wire and map to
 * Python exceptions and to Mooncake ErrorCode values (docs/errors.md). */
#ifndef EGMSTORE_STATUS_H
#define EGMSTORE_STATUS_H

#if defined(__GNUC__)
#define EGM_API __attribute__((visibility("default")))
#else
#define EGM_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    EGM_OK = 0,
    EGM_INPROGRESS = 1,
    EGM_ERR_INTERNAL = -1,       /* a bug or an unexpected system state */
    EGM_ERR_INVALID_ARG = -2,    /* bad argument or request field */
    EGM_ERR_NO_MEMORY = -3,      /* local memory allocation failed */
    EGM_ERR_NOT_FOUND = -4,      /* object (key) not found */
    EGM_ERR_EXISTS = -5,         /* object already exists */
    EGM_ERR_NO_SPACE = -6,       /* no segment can hold the object */
    EGM_ERR_HAS_LEASE = -7,      /* object under a live read lease */
    EGM_ERR_LEASE_EXPIRED = -8,  /* the read lease ran out before the copy finished */
    EGM_ERR_TIMEOUT = -9,        /* an RPC or transfer timed out */
    EGM_ERR_IO = -10,            /* a system call failed */
    EGM_ERR_PROTOCOL = -11,      /* malformed frame or message */
    EGM_ERR_UNREACHABLE = -12,   /* peer not reachable / connection lost */
    EGM_ERR_NOT_SUPPORTED = -13, /* operation or transport not supported */
    EGM_ERR_SEGMENT_NOT_FOUND = -14,
    EGM_ERR_SEGMENT_EXISTS = -15,
    EGM_ERR_CLIENT_NOT_FOUND = -16,
    EGM_ERR_TRANSFER = -17,         /* a data copy failed */
    EGM_ERR_BUFFER_TOO_SMALL = -18, /* destination smaller than the object */
    EGM_ERR_NOT_READY = -19,        /* object's replicas not yet committed */
    EGM_ERR_PERMISSION = -20,       /* peer refused (credentials) */
    EGM_ERR_NO_CUDA = -21,          /* no CUDA driver */
    EGM_ERR_INVALID_KEY = -22,      /* empty or too long key */
    EGM_ERR_BUSY = -23,             /* resource in use */
    EGM_ERR_CLOSED = -24,           /* object closed or not initialised */
    EGM_ERR_VERSION = -25,          /* unknown protocol version */
    EGM_ERR_CONFIG = -26,           /* bad configuration key or value */
    EGM_ERR_NOT_REGISTERED = -27,   /* zero-copy buffer not inside a registered range */
} egm_status_t;

#define EGM_STATUS_MIN (-27)

/* The functions below cannot fail, take no lock and may be called from any
 * thread at any time (before any client exists, too). */

/* Short stable name, e.g. "NOT_FOUND". Unknown values give "UNKNOWN". A
 * static string: never freed, valid for the life of the process. */
EGM_API const char *egm_status_name(int status);
/* Human-readable one-line description, e.g. "not found" ("unknown status" for
 * unknown values). A static string. */
EGM_API const char *egm_status_string(int status);
/* Mooncake ErrorCode equivalent (0, -704, ...; -1 for unknown values). The
 * mapping is many-to-one (docs/errors.md). */
EGM_API int egm_status_to_mooncake(int status);
/* Detail of the last error on the calling thread (may be ""): each thread has
 * its own, so read it on the thread whose call failed. Meaningful right after
 * a call that returned an error; a call that succeeds does not clear it (and
 * may change it). The string belongs to the library; its text holds until
 * this thread's next egmstore call (copy it to keep it). */
EGM_API const char *egm_last_error(void);

#ifdef __cplusplus
}
#endif
#endif
