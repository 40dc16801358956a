/* Child processes: spawn, line reads with deadlines, signals, bounded waits. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include "common/clock.h"
#include "common/log.h"
#include "common/process.h"

egm_status_t egm__process_spawn(char *const argv[], egm_process_stdout_t out, egm_process_t *proc)
{
    int pipe_fds[2] = {-1, -1};
    int capture_stdout = out == EGM_PROCESS_STDOUT_CAPTURE;

    memset(proc, 0, sizeof(*proc));
    proc->out_fd = -1;
    if (capture_stdout && pipe2(pipe_fds, O_CLOEXEC) != 0)
        return egm__set_error(egm__status_from_errno(errno), "pipe: %s", strerror(errno));
    pid_t pid = fork();
    if (pid < 0) {
        int err = errno;
        if (capture_stdout) {
            close(pipe_fds[0]);
            close(pipe_fds[1]);
        }
        return egm__set_error(egm__status_from_errno(err), "fork: %s", strerror(err));
    }
    if (pid == 0) {
        if (capture_stdout)
            dup2(pipe_fds[1], STDOUT_FILENO);
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        execv(argv[0], argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    if (capture_stdout) {
        close(pipe_fds[1]);
        proc->out_fd = pipe_fds[0];
    }
    proc->pid = pid;
    return EGM_OK;
}

/* Hands out the first n buffered bytes as a line (truncated to fit), dropping
 * `consumed` bytes (n, or n + 1 with the newline). */
static void take_line(egm_process_t *proc, size_t n, size_t consumed, char *line, size_t len)
{
    size_t copy = n < len - 1 ? n : len - 1;
    memcpy(line, proc->buf, copy);
    line[copy] = '\0';
    memmove(proc->buf, proc->buf + consumed, proc->buffered - consumed);
    proc->buffered -= consumed;
}

egm_status_t egm__process_read_line(egm_process_t *proc, char *line, size_t len, int timeout_ms)
{
    uint64_t deadline = egm__now_ms() + (uint64_t)timeout_ms;

    if (line == NULL || len == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "line buffer must hold at least the NUL");
    if (proc->out_fd < 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "process stdout is not captured");
    for (;;) {
        char *nl = memchr(proc->buf, '\n', proc->buffered);
        if (nl != NULL) {
            size_t n = (size_t)(nl - proc->buf);
            take_line(proc, n, n + 1, line, len);
            return EGM_OK;
        }
        if (proc->buffered == sizeof(proc->buf)) {
            take_line(proc, proc->buffered, proc->buffered, line, len);
            return EGM_OK;
        }
        uint64_t now = egm__now_ms();
        if (now >= deadline)
            return egm__set_error(EGM_ERR_TIMEOUT, "no line from pid %d within %d ms",
                                  (int)proc->pid, timeout_ms);
        struct pollfd pfd = {.fd = proc->out_fd, .events = POLLIN};
        int rc = poll(&pfd, 1, (int)(deadline - now));
        if (rc < 0 && errno != EINTR)
            return egm__set_error(EGM_ERR_IO, "poll: %s", strerror(errno));
        if (rc <= 0)
            continue;
        ssize_t got =
            read(proc->out_fd, proc->buf + proc->buffered, sizeof(proc->buf) - proc->buffered);
        if (got < 0 && errno == EINTR)
            continue;
        if (got == 0 && proc->buffered > 0) {
            /* A last line without its newline (a child killed mid-print, or one
             * that ends with printf) is still output the caller waits for. */
            take_line(proc, proc->buffered, proc->buffered, line, len);
            return EGM_OK;
        }
        if (got <= 0)
            return egm__set_error(EGM_ERR_UNREACHABLE, "pid %d closed its output", (int)proc->pid);
        proc->buffered += (size_t)got;
    }
}

egm_status_t egm__process_wait_line(egm_process_t *proc, const char *prefix, char *line, size_t len,
                                    int timeout_ms)
{
    uint64_t deadline = egm__now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        uint64_t now = egm__now_ms();
        int left = now >= deadline ? 0 : (int)(deadline - now);
        egm_status_t status = egm__process_read_line(proc, line, len, left);
        if (status != EGM_OK)
            return status;
        if (strncmp(line, prefix, strlen(prefix)) == 0)
            return EGM_OK;
    }
}

egm_status_t egm__process_signal(egm_process_t *proc, int sig)
{
    if (proc->pid <= 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "process already reaped");
    if (kill(proc->pid, sig) != 0)
        return egm__set_error(egm__status_from_errno(errno), "kill %d: %s", (int)proc->pid,
                              strerror(errno));
    return EGM_OK;
}

egm_status_t egm__process_wait(egm_process_t *proc, int timeout_ms, int *exit_code_p)
{
    uint64_t deadline = egm__now_ms() + (uint64_t)timeout_ms;
    int wstatus;

    if (proc->pid <= 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "process already reaped");
    for (;;) {
        pid_t rc = waitpid(proc->pid, &wstatus, WNOHANG);
        if (rc == proc->pid)
            break;
        if (rc < 0 && errno != EINTR)
            return egm__set_error(EGM_ERR_IO, "waitpid: %s", strerror(errno));
        if (egm__now_ms() >= deadline)
            return egm__set_error(EGM_ERR_TIMEOUT, "pid %d still running after %d ms",
                                  (int)proc->pid, timeout_ms);
        egm__sleep_ms(10);
    }
    proc->pid = 0;
    if (exit_code_p != NULL)
        *exit_code_p = WIFEXITED(wstatus) ? WEXITSTATUS(wstatus) : 128 + WTERMSIG(wstatus);
    return EGM_OK;
}

void egm__process_cleanup(egm_process_t *proc)
{
    if (proc->pid > 0) {
        kill(proc->pid, SIGKILL);
        waitpid(proc->pid, NULL, 0);
        proc->pid = 0;
    }
    if (proc->out_fd >= 0) {
        close(proc->out_fd);
        proc->out_fd = -1;
    }
}

const char *egm__process_self_exe(void)
{
    static char path[4096];
    ssize_t n = readlink("/proc/self/exe", path, sizeof(path) - 1);
    path[n > 0 ? n : 0] = '\0';
    return path;
}

egm_status_t egm__process_sibling_exe(const char *name, char *buf, size_t len)
{
    const char *self = egm__process_self_exe();
    const char *slash = strrchr(self, '/');
    int dir = slash != NULL ? (int)(slash - self) : 1;
    int n = snprintf(buf, len, "%.*s/%s", dir, slash != NULL ? self : ".", name);
    if (n < 0 || (size_t)n >= len)
        return egm__set_error(EGM_ERR_INVALID_ARG, "path of %s next to %s is too long", name, self);
    return EGM_OK;
}
