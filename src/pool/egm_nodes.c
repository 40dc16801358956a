/* egm_numa_nodes: an explicit list, or the host NUMA nodes of the GPUs. */
#include "pool/egm_nodes.h"

#include <stdio.h>

#include "common/log.h"
#include "cuda/driver.h"
#include "pool/egm_plan.h"

static egm_status_t attribute(const egm_cuda_api_t *api, int ordinal, int attr, const char *name,
                              int *value_p)
{
    egm_cu_device_t dev;
    egm_status_t st = egm__cuda_check(api->cuDeviceGet(&dev, ordinal), "cuDeviceGet");
    if (st == EGM_OK)
        st = egm__cuda_check(api->cuDeviceGetAttribute(value_p, attr, dev), name);
    if (st != EGM_OK) {
        char detail[256];
        snprintf(detail, sizeof(detail), "%s", egm_last_error());
        return egm__set_error(st, "egm_numa_nodes=auto: GPU %d: %s", ordinal, detail);
    }
    return EGM_OK;
}

static egm_status_t resolve_auto(int **nodes_p, size_t *count_p)
{
    const egm_cuda_api_t *api;
    egm_status_t st = egm__cuda_load(&api);
    if (st != EGM_OK)
        return st;
    int ndev = 0;
    if ((st = egm__cuda_count_devices(&ndev)) != EGM_OK)
        return st;
    if (ndev <= 0)
        return egm__set_error(EGM_ERR_NO_CUDA,
                              "egm_numa_nodes=auto: no CUDA device visible; list the nodes instead "
                              "(e.g. egm_numa_nodes=0)");
    unsigned char seen[EGM_EGM_PLAN_MAX_NODE_ID + 1] = {0};
    size_t count = 0;
    for (int d = 0; d < ndev; d++) {
        int node = -1, vmm = 0;
        st = attribute(api, d, EGM_CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID,
                       "cuDeviceGetAttribute(HOST_NUMA_ID)", &node);
        if (st != EGM_OK)
            return st;
        if (node < 0) {
            egm_info("egm_numa_nodes=auto: GPU %d reports no host NUMA node", d);
            continue;
        }
        if (node > EGM_EGM_PLAN_MAX_NODE_ID)
            return egm__set_error(EGM_ERR_NOT_SUPPORTED,
                                  "egm_numa_nodes=auto: GPU %d reports host NUMA node %d, beyond "
                                  "0..%d",
                                  d, node, EGM_EGM_PLAN_MAX_NODE_ID);
        st =
            attribute(api, d, EGM_CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                      "cuDeviceGetAttribute(HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)", &vmm);
        if (st != EGM_OK)
            return st;
        if (!vmm)
            return egm__set_error(
                EGM_ERR_NOT_SUPPORTED,
                "egm_numa_nodes=auto: GPU %d (host NUMA node %d) does not support "
                "HOST_NUMA virtual memory (CUDA 12.2+ driver and a capable "
                "platform needed)",
                d, node);
        if (!seen[node]) {
            seen[node] = 1;
            count++;
        }
    }
    if (count == 0)
        return egm__set_error(EGM_ERR_NOT_SUPPORTED,
                              "egm_numa_nodes=auto: none of the %d visible GPU(s) reports a host "
                              "NUMA node (CU_DEVICE_ATTRIBUTE_HOST_NUMA_ID); list the nodes "
                              "instead (e.g. egm_numa_nodes=0)",
                              ndev);
    return egm__egm_plan_node_list(seen, count, nodes_p, count_p);
}

egm_status_t egm__egm_nodes_resolve(const char *text, int **nodes_p, size_t *count_p)
{
    int is_auto = 0;
    egm_status_t st = egm__egm_plan_parse_nodes(text, &is_auto, nodes_p, count_p);
    if (st != EGM_OK || !is_auto)
        return st;
    return resolve_auto(nodes_p, count_p);
}
