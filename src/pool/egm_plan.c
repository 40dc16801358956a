/* EGM pool planner: pure arithmetic over the node list and sizes (see
 * egm_plan.h). Every product and sum is checked, because capacities of
 * hundreds of TiB times small factors come close to 64 bits. */
#include "pool/egm_plan.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "common/alloc.h"
#include "common/log.h"
#include "common/textbuf.h"

#define NODES_FORM "auto or a comma-separated list of NUMA node ids 0..1023 (e.g. 0,1)"

static uint64_t gcd_u64(uint64_t a, uint64_t b)
{
    while (b != 0) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* 0 on success; -1 when the lcm does not fit in 64 bits. */
static int lcm_u64(uint64_t a, uint64_t b, uint64_t *out_p)
{
    uint64_t r;
    if (__builtin_mul_overflow(a / gcd_u64(a, b), b, &r))
        return -1;
    *out_p = r;
    return 0;
}

/* Exact size in the largest binary unit that divides it: a plan must not
 * round ("1.3 GiB" hides which chunks exist). */
static const char *exact_size(uint64_t bytes, char *buf, size_t len)
{
    static const char *const units[] = {"TiB", "GiB", "MiB", "KiB"};
    static const unsigned shifts[] = {40, 30, 20, 10};
    for (int i = 0; i < 4; i++) {
        uint64_t unit = 1ull << shifts[i];
        if (bytes != 0 && bytes % unit == 0) {
            snprintf(buf, len, "%llu %s", (unsigned long long)(bytes / unit), units[i]);
            return buf;
        }
    }
    snprintf(buf, len, "%llu B", (unsigned long long)bytes);
    return buf;
}

static egm_status_t check_nodes(const egm_egm_plan_params_t *params)
{
    if (params->node_count == 0 || params->nodes == NULL)
        return egm__set_error(EGM_ERR_CONFIG, "egm_numa_nodes: no NUMA node selected; accepted: %s",
                              NODES_FORM);
    for (size_t i = 0; i < params->node_count; i++) {
        int id = params->nodes[i].node;
        if (id < 0 || id > EGM_EGM_PLAN_MAX_NODE_ID)
            return egm__set_error(EGM_ERR_CONFIG,
                                  "egm_numa_nodes: node id %d out of range; accepted: %s", id,
                                  NODES_FORM);
        if (i > 0 && id <= params->nodes[i - 1].node)
            return egm__set_error(
                EGM_ERR_CONFIG, "egm_numa_nodes: node ids must be sorted and unique (%d after %d)",
                id, params->nodes[i - 1].node);
        if (params->nodes[i].granularity == 0)
            return egm__set_error(EGM_ERR_INVALID_ARG, "granularity of NUMA node %d is 0", id);
    }
    return EGM_OK;
}

static egm_status_t compute_alignment(const egm_egm_plan_params_t *params, uint64_t *alignment_p)
{
    uint64_t a = params->allocator_alignment;
    for (size_t i = 0; i < params->node_count; i++) {
        if (lcm_u64(a, params->nodes[i].granularity, &a) != 0)
            return egm__set_error(EGM_ERR_CONFIG,
                                  "egm_numa_nodes: alignment lcm(allocator %llu B, granularities) "
                                  "exceeds 64 bits at NUMA node %d (granularity %llu B)",
                                  (unsigned long long)params->allocator_alignment,
                                  params->nodes[i].node,
                                  (unsigned long long)params->nodes[i].granularity);
    }
    *alignment_p = a;
    return EGM_OK;
}

egm_status_t egm__egm_plan_compute(const egm_egm_plan_params_t *params, egm_egm_plan_t **plan_p)
{
    char b1[32], b2[32];
    egm_status_t st;
    egm_egm_plan_t *plan = NULL;
    uint64_t alignment = 0, capacity, max_chunk, min_total, units, nchunks = 0;

    *plan_p = NULL;
    if (params->allocator_alignment == 0)
        return egm__set_error(EGM_ERR_INVALID_ARG, "allocator alignment is 0");
    st = check_nodes(params);
    if (st != EGM_OK)
        return st;
    st = compute_alignment(params, &alignment);
    if (st != EGM_OK)
        return st;

    if (params->max_mr_size < alignment)
        return egm__set_error(EGM_ERR_CONFIG,
                              "max_mr_size %llu B is below one alignment unit; accepted: a size "
                              ">= %s (%llu B)",
                              (unsigned long long)params->max_mr_size,
                              exact_size(alignment, b1, sizeof b1), (unsigned long long)alignment);
    max_chunk = params->max_mr_size / alignment * alignment;

    /* Every selected node must get at least one unit: a node that was asked
     * for but receives nothing is a configuration mistake, not a plan. */
    if (__builtin_mul_overflow(alignment, (uint64_t)params->node_count, &min_total))
        return egm__set_error(EGM_ERR_CONFIG,
                              "global_segment_size: %zu NUMA nodes x alignment %llu B exceeds 64 "
                              "bits",
                              params->node_count, (unsigned long long)alignment);
    capacity = params->global_segment_size / alignment * alignment;
    if (capacity < min_total)
        return egm__set_error(EGM_ERR_CONFIG,
                              "global_segment_size %llu B is too small: %zu NUMA node(s) with "
                              "alignment %s need at least %s (%llu B); accepted: a size >= that",
                              (unsigned long long)params->global_segment_size, params->node_count,
                              exact_size(alignment, b1, sizeof b1),
                              exact_size(min_total, b2, sizeof b2), (unsigned long long)min_total);

    units = capacity / alignment;
    uint64_t per_node = units / params->node_count;
    uint64_t remainder = units % params->node_count;

    for (size_t i = 0; i < params->node_count; i++) {
        uint64_t share = (per_node + (i < remainder)) * alignment;
        nchunks += share / max_chunk + (share % max_chunk != 0);
        if (nchunks > EGM_EGM_PLAN_MAX_CHUNKS)
            return egm__set_error(EGM_ERR_CONFIG,
                                  "max_mr_size %s cuts global_segment_size %s into more than %u "
                                  "chunks; accepted: a larger max_mr_size",
                                  exact_size(max_chunk, b1, sizeof b1),
                                  exact_size(capacity, b2, sizeof b2), EGM_EGM_PLAN_MAX_CHUNKS);
    }

    plan = egm_calloc(1, sizeof(*plan), "egm_plan");
    if (plan == NULL)
        goto err_nomem;
    plan->nodes = egm_calloc(params->node_count, sizeof(*plan->nodes), "egm_plan.nodes");
    if (plan->nodes == NULL)
        goto err_nomem;
    plan->chunks = egm_calloc((size_t)nchunks, sizeof(*plan->chunks), "egm_plan.chunks");
    if (plan->chunks == NULL)
        goto err_nomem;
    plan->alignment = alignment;
    plan->requested = params->global_segment_size;
    plan->capacity = capacity;
    plan->max_chunk = max_chunk;
    plan->node_count = params->node_count;

    size_t c = 0;
    for (size_t i = 0; i < params->node_count; i++) {
        egm_egm_plan_node_t *n = &plan->nodes[i];
        n->node = params->nodes[i].node;
        n->granularity = params->nodes[i].granularity;
        n->share = (per_node + (i < remainder)) * alignment;
        n->first_chunk = c;
        for (uint64_t off = 0; off < n->share; off += max_chunk) {
            uint64_t left = n->share - off;
            plan->chunks[c].node = n->node;
            plan->chunks[c].offset = off;
            plan->chunks[c].size = left < max_chunk ? left : max_chunk;
            c++;
            if (left <= max_chunk)
                break; /* off + max_chunk could wrap near 2^64 */
        }
        n->chunk_count = c - n->first_chunk;
    }
    plan->chunk_count = c;
    egm_debug("egm plan: %llu B over %zu node(s), alignment %llu B, %zu chunk(s)",
              (unsigned long long)capacity, plan->node_count, (unsigned long long)alignment, c);
    *plan_p = plan;
    return EGM_OK;

err_nomem:
    egm__egm_plan_free(plan);
    return egm__set_error(EGM_ERR_NO_MEMORY, "egm plan: out of memory for %llu chunks",
                          (unsigned long long)nchunks);
}

void egm__egm_plan_free(egm_egm_plan_t *plan)
{
    if (plan == NULL)
        return;
    egm_free(plan->chunks);
    egm_free(plan->nodes);
    egm_free(plan);
}

static egm_status_t nodes_error(const char *text, const char *why)
{
    return egm__set_error(EGM_ERR_CONFIG, "egm_numa_nodes \"%s\": %s; accepted: %s", text, why,
                          NODES_FORM);
}

static int is_blank(char c)
{
    return c == ' ' || c == '\t';
}

egm_status_t egm__egm_plan_parse_nodes(const char *text, int *auto_p, int **nodes_p,
                                       size_t *count_p)
{
    /* A bitmap over the id range sorts and deduplicates in one pass. */
    unsigned char seen[EGM_EGM_PLAN_MAX_NODE_ID + 1];
    size_t count = 0;
    const char *p = text;

    *auto_p = 0;
    *nodes_p = NULL;
    *count_p = 0;
    if (text == NULL)
        return nodes_error("", "empty");
    if (strcasecmp(text, "auto") == 0) {
        *auto_p = 1;
        return EGM_OK;
    }
    memset(seen, 0, sizeof seen);
    for (;;) {
        while (is_blank(*p))
            p++;
        if (*p < '0' || *p > '9')
            return nodes_error(text, *p == '\0' || *p == ','
                                         ? "empty item"
                                         : "an id is not a non-negative number");
        unsigned id = 0;
        while (*p >= '0' && *p <= '9') {
            id = id * 10 + (unsigned)(*p - '0');
            if (id > EGM_EGM_PLAN_MAX_NODE_ID)
                return nodes_error(text, "node id out of range");
            p++;
        }
        while (is_blank(*p))
            p++;
        if (!seen[id]) {
            seen[id] = 1;
            count++;
        }
        if (*p == '\0')
            break;
        if (*p != ',')
            return nodes_error(text, "an id is not a non-negative number");
        p++;
    }

    return egm__egm_plan_node_list(seen, count, nodes_p, count_p);
}

egm_status_t egm__egm_plan_node_list(const unsigned char *seen, size_t count, int **nodes_p,
                                     size_t *count_p)
{
    int *nodes = egm_malloc(count * sizeof(*nodes), "egm_plan.numa_nodes");
    if (nodes == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "egm_numa_nodes: out of memory");
    size_t k = 0;
    for (int id = 0; id <= EGM_EGM_PLAN_MAX_NODE_ID && k < count; id++)
        if (seen[id])
            nodes[k++] = id;
    *nodes_p = nodes;
    *count_p = k;
    return EGM_OK;
}

size_t egm__egm_plan_format(const egm_egm_plan_t *plan, char *buf, size_t len)
{
    char b1[32], b2[32], b3[32], b4[32];
    egm_textbuf_t o = egm__textbuf(buf, len);
    egm__textbuf_printf(
        &o, "EGM pool plan: %s of %s requested, alignment %s, max chunk %s\n",
        exact_size(plan->capacity, b1, sizeof b1), exact_size(plan->requested, b2, sizeof b2),
        exact_size(plan->alignment, b3, sizeof b3), exact_size(plan->max_chunk, b4, sizeof b4));
    egm__textbuf_printf(&o, "%-6s %-12s %-12s %8s  %s\n", "node", "granularity", "share", "chunks",
                        "chunk sizes");
    for (size_t i = 0; i < plan->node_count; i++) {
        const egm_egm_plan_node_t *n = &plan->nodes[i];
        /* A node's chunks are all max_chunk except possibly the last. */
        uint64_t full = n->share / plan->max_chunk;
        uint64_t last = n->share % plan->max_chunk;
        char sizes[96];
        if (full > 0 && last > 0)
            snprintf(sizes, sizeof sizes, "%llu x %s + 1 x %s", (unsigned long long)full,
                     exact_size(plan->max_chunk, b1, sizeof b1), exact_size(last, b2, sizeof b2));
        else if (full > 0)
            snprintf(sizes, sizeof sizes, "%llu x %s", (unsigned long long)full,
                     exact_size(plan->max_chunk, b1, sizeof b1));
        else
            snprintf(sizes, sizeof sizes, "1 x %s", exact_size(last, b2, sizeof b2));
        egm__textbuf_printf(&o, "%-6d %-12s %-12s %8zu  %s\n", n->node,
                            exact_size(n->granularity, b3, sizeof b3),
                            exact_size(n->share, b4, sizeof b4), n->chunk_count, sizes);
    }
    egm__textbuf_printf(&o, "%-6s %-12s %-12s %8zu\n", "total", "",
                        exact_size(plan->capacity, b1, sizeof b1), plan->chunk_count);
    return o.need;
}
