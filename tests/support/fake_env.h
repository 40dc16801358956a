/* Child processes on the fake CUDA driver: the shim libcuda.so.1 built in
 * EGM_FAKE_CUDA_DIR (tests/fake_libcuda), configured by EGM_FAKE_CUDA_*
 * variables, writes its live-object counters to EGM_FAKE_CUDA_REPORT at exit. */
#ifndef EGM_TEST_FAKE_ENV_H
#define EGM_TEST_FAKE_ENV_H

#include <stddef.h>

/* Makes processes started from now load the shim (LD_LIBRARY_PATH; this
 * process's loader is not affected), with posix_fd handles as on the H200
 * (EGM_FAKE_CUDA_FABRIC=0) and reports in a fresh directory written to
 * report_dir as <dir>/report-<pid>; the directory and what the test put in it
 * are removed when this process exits (atexit; not by forked children). Returns 0; 77 (a skip, with
 * its EGM-SKIP line) when EGM_FAKE_CUDA_DIR is not set (a test run by hand, outside ctest); 1
 * (printed why) when it is set but holds no shim, or on a system error. */
int egm_test_fake_env(const char *test, char *report_dir, size_t len);
/* Value of `name` in a report, -1 when the report or the line is missing. */
long long egm_test_fake_report_value(const char *path, const char *name);
/* NULL when the report exists, shows CUDA calls and every live counter is 0,
 * descriptors opened since the shim was loaded included
 * (fds_opened_since_load); else what is wrong, in a static buffer. */
const char *egm_test_fake_report_problem(const char *path);

#endif
