/* The done() of a batch in the master's unit tests (batch_answer.h). */
#include "support/batch_answer.h"

egm_status_t egm_test_answered;

egm_status_t egm_test_record_answer(void *arg, size_t i, egm_status_t s,
                                    const egm_object_view_t *view)
{
    (void)arg;
    (void)i;
    (void)view;
    egm_test_answered = s;
    return EGM_OK;
}
