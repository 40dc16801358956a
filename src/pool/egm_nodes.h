/* Which host NUMA nodes the EGM pool uses (`egm_numa_nodes`, DESIGN.md 5). */
#ifndef EGM_POOL_EGM_NODES_H
#define EGM_POOL_EGM_NODES_H

#include <stddef.h>
#include <egmstore/status.h>

/* "auto": CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID of every visible GPU, sorted and
 * deduplicated; each such GPU must report HOST_NUMA VMM support. A list: parsed
 * (egm__egm_plan_parse_nodes); whether each node exists and accepts
 * allocations is checked by the pool's granularity query and first chunk.
 * Answers an egm_malloc'ed array (egm_free). Errors name egm_numa_nodes: a
 * malformed list (CONFIG), no driver (NO_CUDA), no GPU with a host NUMA node
 * or without HOST_NUMA VMM (NOT_SUPPORTED). */
egm_status_t egm__egm_nodes_resolve(const char *text, int **nodes_p, size_t *count_p);

#endif
