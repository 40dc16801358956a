/* One-line logs: UTC time, level letter, component, pid:tid, file:line, message.
 * The level is checked before anything is formatted. */
#ifndef EGM_COMMON_LOG_H
#define EGM_COMMON_LOG_H

#include <stdatomic.h>
#include <stdint.h>
#include <egmstore/status.h>

typedef enum {
    EGM_LOG_ERROR = 0,
    EGM_LOG_WARN = 1,
    EGM_LOG_INFO = 2,
    EGM_LOG_DEBUG = 3,
    EGM_LOG_TRACE = 4,
} egm_log_level_t;

/* The current level: any thread may set it (a library client whose
 * configuration names one) while others log. */
extern _Atomic int egm__log_level;

/* Whether lines of `lvl` are written now. */
static inline int egm__log_enabled(egm_log_level_t lvl)
{
    return (int)lvl <= atomic_load_explicit(&egm__log_level, memory_order_relaxed);
}

void egm__log_set_level(egm_log_level_t level);
/* Component name printed on every line (e.g. "master"); copied. */
void egm__log_set_component(const char *component);
void egm__log_write(egm_log_level_t level, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Returns 1 when a rate-limited message at this site may be printed (at most
 * `per_sec` per second, counted by *state). */
int egm__log_ratelimit(uint64_t *state, unsigned per_sec);

#define EGM_LOG(lvl, ...)                                                                          \
    do {                                                                                           \
        if (egm__log_enabled(lvl))                                                                 \
            egm__log_write((lvl), __FILE__, __LINE__, __VA_ARGS__);                                \
    } while (0)
#define egm_error(...) EGM_LOG(EGM_LOG_ERROR, __VA_ARGS__)
#define egm_warn(...) EGM_LOG(EGM_LOG_WARN, __VA_ARGS__)
#define egm_info(...) EGM_LOG(EGM_LOG_INFO, __VA_ARGS__)
#define egm_debug(...) EGM_LOG(EGM_LOG_DEBUG, __VA_ARGS__)
#define egm_trace(...) EGM_LOG(EGM_LOG_TRACE, __VA_ARGS__)
/* At most `per_sec` lines per second from this call site. */
#define egm_log_ratelimited(lvl, per_sec, ...)                                                     \
    do {                                                                                           \
        static uint64_t egm__rl_state_;                                                            \
        if (egm__log_enabled(lvl) && egm__log_ratelimit(&egm__rl_state_, (per_sec)))               \
            egm__log_write((lvl), __FILE__, __LINE__, __VA_ARGS__);                                \
    } while (0)

/* Thread-local last-error detail (what egm_last_error() returns). Returns status
 * so that callers can write `return egm__set_error(EGM_ERR_CONFIG, "...")`. */
egm_status_t egm__set_error(egm_status_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
void egm__clear_error(void);
/* Convert an errno value to a status (ENOMEM -> NO_MEMORY, ETIMEDOUT -> TIMEOUT,
 * ECONNREFUSED/ECONNRESET/EPIPE -> UNREACHABLE, EACCES/EPERM -> PERMISSION, else IO). */
egm_status_t egm__status_from_errno(int err);

#endif
