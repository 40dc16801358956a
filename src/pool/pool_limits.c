/* Pool limits: the capacity and descriptor checks, and the readers of what
 * the machine has (see pool_limits.h). */
#include "pool/pool_limits.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "common/config_int.h"
#include "common/log.h"

egm_status_t egm__pool_limits_check_memory(const egm_pool_memory_check_t *c, char *msg, size_t len)
{
    char want[32], have[32], text[384];

    if (msg != NULL && len > 0)
        msg[0] = '\0';
    if (c->available == EGM_POOL_LIMITS_UNKNOWN || c->requested <= c->available)
        return EGM_OK;
    egm__format_size(c->requested, want, sizeof(want));
    egm__format_size(c->available, have, sizeof(have));
    if (c->node < 0)
        snprintf(text, sizeof(text),
                 "global_segment_size: %s is more than this host's available memory (%s "
                 "MemAvailable)",
                 want, have);
    else
        snprintf(text, sizeof(text),
                 "global_segment_size: %s on NUMA node %d is more than the node's available "
                 "memory (%s MemFree + Inactive(file))",
                 want, c->node, have);
    if (msg != NULL && len > 0)
        snprintf(msg, len, "%s", text);
    if (c->allow_overcommit)
        return EGM_OK;
    return egm__set_error(EGM_ERR_CONFIG, "%s; lower it%s or set allow_overcommit=true", text,
                          c->node < 0 ? "" : ", spread it over more nodes");
}

uint64_t egm__pool_limits_fds_needed(const egm_pool_fd_check_t *c)
{
    uint64_t n;
    if (__builtin_add_overflow(c->chunks, c->fds_open, &n) ||
        __builtin_add_overflow(n, (uint64_t)EGM_POOL_LIMITS_FD_RESERVE, &n))
        return UINT64_MAX;
    return n;
}

egm_status_t egm__pool_limits_check_fds(const egm_pool_fd_check_t *c)
{
    char size[32];
    uint64_t needed = egm__pool_limits_fds_needed(c);

    if (c->fd_limit == EGM_POOL_LIMITS_UNKNOWN || needed <= c->fd_limit)
        return EGM_OK;
    return egm__set_error(EGM_ERR_CONFIG,
                          "global_segment_size: %" PRIu64 " chunks of max_mr_size %s need %" PRIu64
                          " file descriptors (one per chunk, %" PRIu64 " open, %u for "
                          "connections), the limit is %" PRIu64
                          " (ulimit -n); raise the limit, use a larger max_mr_size or a smaller "
                          "global_segment_size",
                          c->chunks, egm__format_size(c->chunk_size, size, sizeof(size)), needed,
                          c->fds_open, EGM_POOL_LIMITS_FD_RESERVE, c->fd_limit);
}

/* "   123 kB" after the field's colon -> bytes; -1 when malformed. */
static int parse_kb(const char *p, uint64_t *bytes_p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    if (*p < '0' || *p > '9')
        return -1;
    errno = 0;
    char *end;
    unsigned long long kb = strtoull(p, &end, 10);
    if (errno != 0)
        return -1;
    while (*end == ' ' || *end == '\t')
        end++;
    uint64_t unit = 1;
    if (strncmp(end, "kB", 2) == 0)
        unit = 1024;
    else if (*end != '\n' && *end != '\0')
        return -1;
    if (__builtin_mul_overflow((uint64_t)kb, unit, bytes_p))
        return -1;
    return 0;
}

egm_status_t egm__pool_limits_read_meminfo(const char *path, const char *field, uint64_t *bytes_p)
{
    FILE *f = fopen(path, "re");
    if (f == NULL)
        return egm__set_error(EGM_ERR_IO, "%s: %s", path, strerror(errno));
    char line[256];
    size_t flen = strlen(field);
    egm_status_t st = egm__set_error(EGM_ERR_IO, "%s: no %s line", path, field);
    while (fgets(line, sizeof(line), f) != NULL) {
        /* The field is the line's first word (/proc/meminfo) or follows
         * "Node N " (a node's meminfo). */
        char *p = strstr(line, field);
        if (p == NULL || p[flen] != ':' || (p != line && p[-1] != ' '))
            continue;
        if (parse_kb(p + flen + 1, bytes_p) != 0)
            st = egm__set_error(EGM_ERR_IO, "%s: malformed %s line", path, field);
        else
            st = EGM_OK;
        break;
    }
    fclose(f);
    return st;
}

uint64_t egm__pool_limits_host_available(void)
{
    uint64_t bytes;
    if (egm__pool_limits_read_meminfo("/proc/meminfo", "MemAvailable", &bytes) != EGM_OK) {
        egm_debug("pool limits: %s; available memory not checked", egm_last_error());
        return EGM_POOL_LIMITS_UNKNOWN;
    }
    return bytes;
}

/* Sum of MemTotal over every nodeN/meminfo under root; 0 when none. */
static uint64_t nodes_total(const char *root)
{
    DIR *d = opendir(root);
    uint64_t sum = 0;
    if (d == NULL)
        return 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;) {
        char path[512];
        uint64_t bytes;
        if (strncmp(e->d_name, "node", 4) != 0 || e->d_name[4] < '0' || e->d_name[4] > '9')
            continue;
        snprintf(path, sizeof(path), "%s/%s/meminfo", root, e->d_name);
        if (egm__pool_limits_read_meminfo(path, "MemTotal", &bytes) == EGM_OK)
            sum += bytes;
    }
    closedir(d);
    return sum;
}

uint64_t egm__pool_limits_node_available_in(const char *node_root, const char *host_meminfo,
                                            int node)
{
    char path[512];
    uint64_t free_bytes, inactive, host;

    if (node < 0)
        return EGM_POOL_LIMITS_UNKNOWN;
    snprintf(path, sizeof(path), "%s/node%d/meminfo", node_root, node);
    if (egm__pool_limits_read_meminfo(path, "MemFree", &free_bytes) != EGM_OK ||
        egm__pool_limits_read_meminfo(path, "Inactive(file)", &inactive) != EGM_OK ||
        egm__pool_limits_read_meminfo(host_meminfo, "MemTotal", &host) != EGM_OK) {
        egm_debug("pool limits: NUMA node %d: %s; its memory not checked", node, egm_last_error());
        return EGM_POOL_LIMITS_UNKNOWN;
    }
    /* The nodes' totals add up to the host's on real hardware; a VM that
     * hot-adds memory to a node as it is used shows a small node (measured on
     * an H200 VM: node 0 4.6 GiB of a 126 GiB host). */
    uint64_t sum = nodes_total(node_root);
    uint64_t gap = sum > host ? sum - host : host - sum;
    if (gap > host / 16) {
        egm_debug("pool limits: the NUMA nodes' MemTotal (%" PRIu64
                  " B) is not the host's (%" PRIu64 " B): node %d's memory not checked",
                  sum, host, node);
        return EGM_POOL_LIMITS_UNKNOWN;
    }
    return free_bytes + inactive;
}

uint64_t egm__pool_limits_node_available(int node)
{
    return egm__pool_limits_node_available_in("/sys/devices/system/node", "/proc/meminfo", node);
}

uint64_t egm__pool_limits_fds_open(void)
{
    DIR *d = opendir("/proc/self/fd");
    uint64_t n = 0;
    if (d == NULL)
        return 0;
    for (struct dirent *e; (e = readdir(d)) != NULL;)
        n += e->d_name[0] != '.';
    closedir(d);
    return n > 0 ? n - 1 : 0; /* the directory's own descriptor */
}

uint64_t egm__pool_limits_fd_limit(uint64_t needed)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        return EGM_POOL_LIMITS_UNKNOWN;
    if (needed > rl.rlim_cur && rl.rlim_cur != RLIM_INFINITY && rl.rlim_max > rl.rlim_cur) {
        rlim_t soft = rl.rlim_cur;
        rl.rlim_cur = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
            egm_info("pool: %" PRIu64 " file descriptors needed: raised the soft limit "
                     "(ulimit -n) from %llu to the hard limit %llu",
                     needed, (unsigned long long)soft, (unsigned long long)rl.rlim_max);
        else
            rl.rlim_cur = soft;
    }
    return rl.rlim_cur == RLIM_INFINITY ? EGM_POOL_LIMITS_UNKNOWN : (uint64_t)rl.rlim_cur;
}
