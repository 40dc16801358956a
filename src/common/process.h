/* Child processes for the demo and the integration tests: spawn, read their
 * stdout line by line with a deadline, signal, wait with a deadline. */
#ifndef EGM_COMMON_PROCESS_H
#define EGM_COMMON_PROCESS_H

#include <stddef.h>
#include <sys/types.h>
#include <egmstore/status.h>

typedef struct {
    pid_t pid;      /* 0 once reaped */
    int out_fd;     /* child's stdout, or -1 when not captured */
    char buf[4096]; /* bytes read but not yet returned as lines */
    size_t buffered;
} egm_process_t;

/* What a spawned child's stdout is. */
typedef enum {
    EGM_PROCESS_STDOUT_INHERIT, /* the parent's */
    EGM_PROCESS_STDOUT_CAPTURE, /* a pipe, read with egm__process_read_line */
} egm_process_stdout_t;

/* argv[0] is the program path; `out` says where the child's stdout goes. */
egm_status_t egm__process_spawn(char *const argv[], egm_process_stdout_t out, egm_process_t *proc);
/* Next line of the child's stdout, without the newline. EGM_ERR_TIMEOUT after
 * timeout_ms, EGM_ERR_UNREACHABLE at end of file. */
egm_status_t egm__process_read_line(egm_process_t *proc, char *line, size_t len, int timeout_ms);
/* Reads lines until one starts with prefix (copied into line). */
egm_status_t egm__process_wait_line(egm_process_t *proc, const char *prefix, char *line, size_t len,
                                    int timeout_ms);
egm_status_t egm__process_signal(egm_process_t *proc, int sig);
/* *exit_code_p: the exit status, or 128 + signal number. EGM_ERR_TIMEOUT if
 * still running after timeout_ms. */
egm_status_t egm__process_wait(egm_process_t *proc, int timeout_ms, int *exit_code_p);
/* SIGKILL if still running, reap, close the pipe. */
void egm__process_cleanup(egm_process_t *proc);
/* Path of the running executable (/proc/self/exe resolved). Static string. */
const char *egm__process_self_exe(void);
/* Path of the executable `name` in the running executable's folder, into
 * buf (len bytes): how egmstore finds egm-bench and egm-bench its provider.
 * EGM_ERR_INVALID_ARG when it does not fit. */
egm_status_t egm__process_sibling_exe(const char *name, char *buf, size_t len);

#endif
