/* Environment and reports of the fake libcuda.so.1 for child processes. */
#include "support/fake_env.h"

#include <errno.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "support/testutil.h"

/* Live-object counters of a report (egm_fake_cuda_counters_t). */
static const char *const live_counters[] = {
    "allocations",
    "imports",
    "reservations",
    "mappings",
    "memory_objects",
    "fabric_names",
    "device_allocations",
    "pinned_host",
    "host_registrations",
    "streams",
    "events",
    "modules",
    "live_objects",
    "fds_opened_since_load",
};

/* Report folders this process made, removed when it exits (by the process
 * that made them, not by a forked child that exits). */
#define MAX_REPORT_DIRS 4
static char report_dirs[MAX_REPORT_DIRS][64];
static pid_t report_dirs_owner;

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st;
    (void)flag;
    (void)ftw;
    if (remove(path) != 0 && errno != ENOENT)
        fprintf(stderr, "fake env: could not remove %s: %s\n", path, strerror(errno));
    return 0;
}

static void remove_report_dirs(void)
{
    if (getpid() != report_dirs_owner)
        return;
    for (int i = 0; i < MAX_REPORT_DIRS; i++)
        if (report_dirs[i][0] != '\0') {
            nftw(report_dirs[i], remove_entry, 8, FTW_DEPTH | FTW_PHYS);
            report_dirs[i][0] = '\0';
        }
}

/* Removes `dir` (and what is in it) when this process exits. */
static int remove_at_exit(const char *dir)
{
    if (report_dirs_owner != getpid()) {
        memset(report_dirs, 0, sizeof(report_dirs)); /* a forked child's copy is not its own */
        if (report_dirs_owner == 0 && atexit(remove_report_dirs) != 0)
            return -1;
        report_dirs_owner = getpid();
    }
    for (int i = 0; i < MAX_REPORT_DIRS; i++)
        if (report_dirs[i][0] == '\0') {
            snprintf(report_dirs[i], sizeof(report_dirs[i]), "%s", dir);
            return 0;
        }
    return -1;
}

int egm_test_fake_env(const char *test, char *report_dir, size_t len)
{
    const char *dir = getenv("EGM_FAKE_CUDA_DIR");
    char lib[512], path[1024];
    if (dir == NULL || dir[0] == '\0') {
        egm_test_skip_note(test, "EGM_FAKE_CUDA_DIR is not set (ctest sets it to the build's "
                                 "fake-cuda folder)");
        return 77;
    }
    snprintf(lib, sizeof(lib), "%s/libcuda.so.1", dir);
    if (access(lib, R_OK) != 0) {
        /* ctest named the folder and builds the shim first: its absence is a broken build. */
        printf("%s: FAILED: EGM_FAKE_CUDA_DIR is set but %s: %s (build egm_fake_libcuda)\n", test,
               lib, strerror(errno));
        return 1;
    }
    const char *old = getenv("LD_LIBRARY_PATH");
    snprintf(path, sizeof(path), "%s%s%s", dir, old && old[0] ? ":" : "", old ? old : "");
    setenv("LD_LIBRARY_PATH", path, 1);
    setenv("EGM_FAKE_CUDA_FABRIC", "0", 1);
    snprintf(report_dir, len, "/tmp/egm-fake-XXXXXX");
    if (mkdtemp(report_dir) == NULL) {
        perror("mkdtemp");
        return 1;
    }
    if (remove_at_exit(report_dir) != 0) {
        fprintf(stderr, "%s: cannot arrange removal of %s at exit\n", test, report_dir);
        rmdir(report_dir);
        return 1;
    }
    snprintf(path, sizeof(path), "%s/report-%%p", report_dir);
    setenv("EGM_FAKE_CUDA_REPORT", path, 1);
    return 0;
}

long long egm_test_fake_report_value(const char *path, const char *name)
{
    FILE *f = fopen(path, "r");
    char key[64];
    unsigned long long value;
    long long found = -1;
    if (f == NULL)
        return -1;
    while (fscanf(f, "%63s %llu", key, &value) == 2)
        if (strcmp(key, name) == 0)
            found = (long long)value;
    fclose(f);
    return found;
}

const char *egm_test_fake_report_problem(const char *path)
{
    static char why[512];
    if (egm_test_fake_report_value(path, "calls_total") <= 0) {
        snprintf(why, sizeof(why), "%s: no report, or no CUDA call was made through the fake",
                 path);
        return why;
    }
    for (size_t i = 0; i < sizeof(live_counters) / sizeof(live_counters[0]); i++) {
        long long v = egm_test_fake_report_value(path, live_counters[i]);
        if (v != 0) {
            snprintf(why, sizeof(why), "%s: %s = %lld, expected 0", path, live_counters[i], v);
            return why;
        }
    }
    return NULL;
}
