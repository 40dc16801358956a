/* One-line logs and the thread-local last error. */
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>
#include "common/clock.h"
#include "common/log.h"

_Atomic int egm__log_level = EGM_LOG_INFO;
static char component[32] = "egmstore";
static _Thread_local char last_error[1024];

static const char level_letters[] = "EWIDT";

void egm__log_set_level(egm_log_level_t level)
{
    atomic_store_explicit(&egm__log_level, (int)level, memory_order_relaxed);
}

void egm__log_set_component(const char *name)
{
    snprintf(component, sizeof(component), "%s", name);
}

void egm__log_write(egm_log_level_t level, const char *file, int line, const char *fmt, ...)
{
    char buf[2048];
    struct timespec ts;
    struct tm tm;
    const char *base = strrchr(file, '/');
    int n;

    if ((int)level < EGM_LOG_ERROR || (int)level > EGM_LOG_TRACE)
        level = EGM_LOG_ERROR;

    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    n = snprintf(buf, sizeof(buf), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ %c %s %d:%ld %s:%d ",
                 tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                 ts.tv_nsec / 1000000L, level_letters[level], component, (int)getpid(),
                 (long)syscall(SYS_gettid), base ? base + 1 : file, line);
    if (n < 0)
        return;
    if ((size_t)n < sizeof(buf)) {
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(buf + n, sizeof(buf) - (size_t)n, fmt, ap);
        va_end(ap);
        if (m > 0)
            n += m;
    }
    if ((size_t)n >= sizeof(buf) - 1)
        n = (int)sizeof(buf) - 2;
    buf[n++] = '\n';
    ssize_t rc = write(STDERR_FILENO, buf, (size_t)n);
    (void)rc;
}

int egm__log_ratelimit(uint64_t *state, unsigned per_sec)
{
    /* state: high 32 bits the second, low 32 bits the count in it. Races only
     * let a few extra lines through. */
    uint64_t now_s = egm__now_ms() / 1000;
    uint64_t old = __atomic_load_n(state, __ATOMIC_RELAXED);
    if ((old >> 32) != (now_s & 0xffffffffu)) {
        __atomic_store_n(state, (now_s << 32) | 1u, __ATOMIC_RELAXED);
        return 1;
    }
    if ((old & 0xffffffffu) >= per_sec)
        return 0;
    __atomic_fetch_add(state, 1, __ATOMIC_RELAXED);
    return 1;
}

egm_status_t egm__set_error(egm_status_t status, const char *fmt, ...)
{
    /* Format into a scratch buffer first: arguments may point into last_error. */
    char tmp[sizeof(last_error)];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(tmp, sizeof(tmp), fmt, ap);
    va_end(ap);
    memcpy(last_error, tmp, sizeof(last_error));
    return status;
}

void egm__clear_error(void)
{
    last_error[0] = '\0';
}

const char *egm_last_error(void)
{
    return last_error;
}

egm_status_t egm__status_from_errno(int err)
{
    switch (err) {
    case 0:
        return EGM_OK;
    case ENOMEM:
        return EGM_ERR_NO_MEMORY;
    case ETIMEDOUT:
    case EAGAIN:
        return EGM_ERR_TIMEOUT;
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case EPIPE:
    case ENOTCONN:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case ENOENT:
        return EGM_ERR_UNREACHABLE;
    case EACCES:
    case EPERM:
        return EGM_ERR_PERMISSION;
    case EINVAL:
        return EGM_ERR_INVALID_ARG;
    case EBUSY:
        return EGM_ERR_BUSY;
    default:
        return EGM_ERR_IO;
    }
}
