/* EGM pool planner (DESIGN.md section 5): how a provider's capacity is cut
 * into HOST_NUMA chunks, computed without touching CUDA so that it can be
 * tested and printed (`--plan-only`) before anything is allocated.
 *
 * alignment = lcm(every node's CUDA granularity, allocator alignment);
 * capacity = global_segment_size rounded down to it; whole alignment units
 * spread evenly over the nodes, lower ids taking the remainder; each node's
 * share cut into chunks of max_chunk (max_mr_size rounded down to the
 * alignment), the last one smaller. No chunk crosses a node. */
#ifndef EGM_POOL_EGM_PLAN_H
#define EGM_POOL_EGM_PLAN_H

#include <stddef.h>
#include <stdint.h>
#include <egmstore/status.h>

/* Linux's MAX_NUMNODES is at most 1 << 10: ids above this are typos. */
#define EGM_EGM_PLAN_MAX_NODE_ID 1023
/* Each chunk is a CUDA allocation and a segment; more than this is a
 * max_mr_size mistake, not a plan. */
#define EGM_EGM_PLAN_MAX_CHUNKS (1u << 20)

typedef struct {
    int node;             /* NUMA node id */
    uint64_t granularity; /* CUDA allocation granularity there (bytes, > 0) */
} egm_egm_plan_node_in_t;

typedef struct {
    const egm_egm_plan_node_in_t *nodes; /* sorted by id, no duplicates */
    size_t node_count;
    uint64_t allocator_alignment; /* > 0 */
    uint64_t global_segment_size; /* requested total over all nodes */
    uint64_t max_mr_size;         /* largest chunk */
} egm_egm_plan_params_t;

typedef struct {
    int node;
    uint64_t offset; /* within the node's share */
    uint64_t size;
} egm_egm_plan_chunk_t;

typedef struct {
    int node;
    uint64_t granularity;
    uint64_t share;     /* bytes on this node */
    size_t first_chunk; /* index into chunks */
    size_t chunk_count;
} egm_egm_plan_node_t;

typedef struct {
    uint64_t alignment;
    uint64_t requested; /* global_segment_size as given */
    uint64_t capacity;  /* requested rounded down to alignment == sum of chunks */
    uint64_t max_chunk; /* max_mr_size rounded down to alignment */
    size_t node_count;
    egm_egm_plan_node_t *nodes;
    size_t chunk_count;
    egm_egm_plan_chunk_t *chunks; /* node by node, offsets ascending */
} egm_egm_plan_t;

/* Computes the plan. Errors (EGM_ERR_CONFIG, detail in egm_last_error()):
 * no nodes or nodes not sorted/unique/in 0..EGM_EGM_PLAN_MAX_NODE_ID (names
 * egm_numa_nodes); rounded capacity below one alignment unit per node (names
 * global_segment_size and that minimum); max_mr_size below one alignment unit
 * (names max_mr_size and the minimum); lcm or totals beyond 64 bits; more than
 * EGM_EGM_PLAN_MAX_CHUNKS chunks (names max_mr_size). A zero granularity or
 * allocator alignment is EGM_ERR_INVALID_ARG (a caller bug). */
egm_status_t egm__egm_plan_compute(const egm_egm_plan_params_t *params, egm_egm_plan_t **plan_p);
/* NULL is a no-op. */
void egm__egm_plan_free(egm_egm_plan_t *plan);

/* Parses `egm_numa_nodes`: "auto" -> *auto_p = 1, no list; otherwise a
 * comma-separated list of ids 0..EGM_EGM_PLAN_MAX_NODE_ID (blanks around an id
 * allowed) -> *auto_p = 0 and a sorted, deduplicated list in *nodes_p (free
 * with egm_free). Empty items, signs, non-digits and out-of-range ids are
 * EGM_ERR_CONFIG naming egm_numa_nodes and the accepted form. */
egm_status_t egm__egm_plan_parse_nodes(const char *text, int *auto_p, int **nodes_p,
                                       size_t *count_p);

/* The ids marked in seen[0..EGM_EGM_PLAN_MAX_NODE_ID] (count of them), in
 * ascending order, as an egm_malloc'ed array. */
egm_status_t egm__egm_plan_node_list(const unsigned char *seen, size_t count, int **nodes_p,
                                     size_t *count_p);

/* Writes the plan as a small table, one row per node, with snprintf's
 * contract: returns the length the whole text needs (without the NUL),
 * writes at most len bytes and always NUL-terminates when len > 0. */
size_t egm__egm_plan_format(const egm_egm_plan_t *plan, char *buf, size_t len);

#endif
