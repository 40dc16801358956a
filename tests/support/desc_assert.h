/* cmocka check that two segment descriptors agree field by field (the rpc
 * tests' round trips). Include after <cmocka.h>. */
#ifndef EGM_TEST_DESC_ASSERT_H
#define EGM_TEST_DESC_ASSERT_H

#include "rpc/segment_desc.h"

static inline void egm_test_assert_same_desc(const egm_segment_desc_t *a,
                                             const egm_segment_desc_t *b)
{
    assert_true(egm__id_equal(a->id, b->id));
    assert_true(egm__id_equal(a->owner, b->owner));
    assert_int_equal(a->size, b->size);
    assert_string_equal(a->name, b->name);
    assert_string_equal(a->host_id, b->host_id);
    assert_string_equal(a->zone, b->zone);
    assert_string_equal(a->tcp_endpoint, b->tcp_endpoint);
    assert_string_equal(a->shm_socket, b->shm_socket);
    assert_int_equal(a->handle_kind, b->handle_kind);
    assert_int_equal(a->fabric_handle_len, b->fabric_handle_len);
    assert_memory_equal(a->fabric_handle, b->fabric_handle, a->fabric_handle_len);
}

#endif
