/* Small helpers shared by the unit tests. */
#ifndef EGM_TEST_TESTUTIL_H
#define EGM_TEST_TESTUTIL_H

#include <stddef.h>

/* Open descriptors of this process (entries of /proc/self/fd, without . and ..). */
int egm_test_count_fds(void);
/* len random bytes from getrandom(); fails the running cmocka test if it cannot. */
void egm_test_fill_random(void *buf, size_t len);

/* cmocka fixtures: the test's tracked allocations must return to where they
 * were before it ran. */
int egm_test_setup_alloc(void **state);
int egm_test_teardown_alloc(void **state);

#endif
