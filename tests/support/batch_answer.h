/* The done() of an egm__objects_batch in the master's unit tests: records
 * the status of the last key answered in egm_test_answered. */
#ifndef EGM_TEST_BATCH_ANSWER_H
#define EGM_TEST_BATCH_ANSWER_H

#include <stddef.h>
#include <egmstore/status.h>
#include "master/object_index.h"

extern egm_status_t egm_test_answered;

egm_status_t egm_test_record_answer(void *arg, size_t i, egm_status_t s,
                                    const egm_object_view_t *view);

#endif
