/* egm-master-mem: the master's memory per object (issue 17 item 3).
 *
 * Builds the master's segment table and object index in this process (no
 * RPC), mounts S segments, then puts N objects (PutStart + PutEnd, one
 * replica each) with keys of K bytes, and reports what the index grew by per
 * object, two ways: the heap bytes malloc counts in use (mallinfo2: exact,
 * malloc's chunk headers and rounding included) and the resident set growth
 * after malloc_trim (what the process costs the machine; the hash tables'
 * doubling shows here in steps). Then times GetReplicaList of random keys
 * in the index (the snprintf of each key included). Also the PutStart +
 * PutEnd path's mean time per put and its longest single put (put_max_us:
 * where a key table doubles, with its shard's lock held). Prints one JSON
 * line.
 *
 * --commit B: the objects are committed from slabs instead (client-side
 * allocation: SlabGrant of 32 MiB whenever the slab is used up, Commit of B
 * keys per call through egm__objects_batch, as the Commit RPC does), and the
 * index's own time per committed key is reported too (commit_ns_per_key:
 * the batch calls and slab grants only, not the key formatting).
 *
 * usage: egm-master-mem [--objects 500000] [--key-len 60] [--segments 64]
 *                       [--object-size 4096] [--replicas 1] [--commit B] */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "common/alloc.h"
#include "common/clock.h"
#include "common/log.h"
#include "master/object_index.h"
#include "master/segment_table.h"

static size_t heap_in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks + mi.hblkhd;
}

static size_t rss_bytes(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f == NULL)
        return 0;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
        resident = 0;
    fclose(f);
    return (size_t)resident * (size_t)sysconf(_SC_PAGESIZE);
}

static egm_status_t commit_done(void *arg, size_t i, egm_status_t status,
                                const egm_object_view_t *view)
{
    (void)arg;
    (void)i;
    (void)view;
    return status;
}

static void make_key(char *key, unsigned long long key_len, unsigned long long i)
{
    /* Keys as an engine's: a fixed prefix and a block hash. */
    int n = snprintf(key, key_len + 1, "model-layer-block/%016llx",
                     (unsigned long long)(i * 0x9e3779b97f4a7c15ull));
    memset(key + n, 'k', key_len - (size_t)n);
    key[key_len] = '\0';
}

static int fail(const char *what, egm_status_t st)
{
    fprintf(stderr, "egm-master-mem: %s: %s (%s)\n", what, egm_status_string(st), egm_last_error());
    return 1;
}

static int arg_u64(int argc, char **argv, int *i, const char *name, unsigned long long *v)
{
    if (strcmp(argv[*i], name) != 0)
        return 0;
    if (*i + 1 >= argc) {
        fprintf(stderr, "egm-master-mem: %s needs a value\n", name);
        exit(2);
    }
    char *end;
    *v = strtoull(argv[++*i], &end, 10);
    if (*end != '\0' || *v == 0) {
        fprintf(stderr, "egm-master-mem: %s: \"%s\" is not a positive integer\n", name, argv[*i]);
        exit(2);
    }
    return 1;
}

int main(int argc, char **argv)
{
    unsigned long long objects = 500000, key_len = 60, segments = 64, object_size = 4096,
                       replicas = 1, commit = 0;
    for (int i = 1; i < argc; i++) {
        if (!arg_u64(argc, argv, &i, "--objects", &objects) &&
            !arg_u64(argc, argv, &i, "--key-len", &key_len) &&
            !arg_u64(argc, argv, &i, "--segments", &segments) &&
            !arg_u64(argc, argv, &i, "--object-size", &object_size) &&
            !arg_u64(argc, argv, &i, "--replicas", &replicas) &&
            !arg_u64(argc, argv, &i, "--commit", &commit)) {
            fprintf(stderr, "usage: egm-master-mem [--objects N] [--key-len K] [--segments S] "
                            "[--object-size B] [--replicas R] [--commit KEYS_PER_CALL]\n");
            return 2;
        }
    }
    if (key_len < 16 || key_len > EGM_MASTER_KEY_MAX || replicas > EGM_MASTER_REPLICA_MAX ||
        replicas > segments) {
        fprintf(stderr, "egm-master-mem: --key-len 16..%d, --replicas 1..min(16, segments)\n",
                EGM_MASTER_KEY_MAX);
        return 2;
    }
    egm__log_set_level(EGM_LOG_WARN);

    egm_segment_table_t *table = NULL;
    egm_object_index_t *index = NULL;
    egm_status_t st = egm__segment_table_create(0, &table);
    if (st != EGM_OK)
        return fail("segment table", st);
    /* Room for every object with a quarter to spare, so nothing is evicted. */
    uint64_t seg_size = (objects * replicas * object_size / segments) * 5 / 4 + (64u << 20);
    egm_id_t owner = egm__id_random();
    for (unsigned long long s = 0; s < segments; s++) {
        char name[64];
        snprintf(name, sizeof(name), "mem-bench/segment-%llu", s);
        egm_segment_params_t p = {
            .id = egm__id_random(), .owner = owner, .size = seg_size, .name = name};
        egm_segment_t *seg;
        if ((st = egm__segment_table_mount(table, &p, &seg)) != EGM_OK)
            return fail("mount", st);
    }
    egm_objects_params_t params;
    egm__objects_params_default(&params);
    params.eviction_high_watermark = 1.0;
    if ((st = egm__objects_create(table, &params, &index)) != EGM_OK)
        return fail("object index", st);

    malloc_trim(0);
    size_t heap0 = heap_in_use(), rss0 = rss_bytes();
    egm_id_t client = egm__id_random();
    char *key = malloc(key_len + 1);
    if (key == NULL)
        return 1;
    uint64_t commit_ns = 0, put_ns = 0, put_max_ns = 0; /* put_*: PutStart + PutEnd path */
    if (commit > 0) {
        /* The scratch of one call, allocated before heap0 would be fairer;
         * it is a few KiB against hundreds of MB. */
        char *keys = malloc(commit * (key_len + 1));
        const char **key_v = malloc(commit * sizeof(*key_v));
        size_t *lens = malloc(commit * sizeof(*lens));
        uint64_t *sizes = malloc(commit * sizeof(*sizes)), *slab_ids = malloc(commit * 8),
                 *offsets = malloc(commit * 8);
        if (keys == NULL || key_v == NULL || lens == NULL || sizes == NULL || slab_ids == NULL ||
            offsets == NULL)
            return 1;
        egm_put_config_t config = {.replica_num = (uint32_t)replicas};
        egm_slab_view_t slab = {0};
        uint64_t used = 0, rounded = (object_size + 63) & ~63ull;
        for (unsigned long long i = 0; i < objects;) {
            size_t n = 0;
            for (; n < commit && i < objects; n++, i++) {
                if (slab.id == 0 || used + rounded > slab.size) {
                    /* A new slab: commit what the old one holds first. */
                    if (n > 0)
                        break;
                    uint64_t t0 = egm__now_ns();
                    if (slab.id != 0 &&
                        (st = egm__objects_slab_return(index, client, slab.id, 1)) != EGM_OK)
                        return fail("slab return", st);
                    st = egm__objects_slab_grant(index, client, 32u << 20, rounded, 0, 0, &config,
                                                 1, &slab);
                    commit_ns += egm__now_ns() - t0;
                    if (st != EGM_OK)
                        return fail("slab grant", st);
                    used = 0;
                }
                char *k = keys + n * (key_len + 1);
                make_key(k, key_len, i);
                key_v[n] = k;
                lens[n] = key_len;
                sizes[n] = object_size;
                slab_ids[n] = slab.id;
                offsets[n] = used;
                used += rounded;
            }
            egm_objects_batch_t b = {.op = EGM_OBJECTS_COMMIT,
                                     .client = client,
                                     .sizes = sizes,
                                     .config = &config,
                                     .slab_ids = slab_ids,
                                     .offsets = offsets,
                                     .now_ms = 2,
                                     .n = n,
                                     .keys = key_v,
                                     .key_lens = lens,
                                     .done = commit_done};
            uint64_t t0 = egm__now_ns();
            st = egm__objects_batch(index, &b);
            commit_ns += egm__now_ns() - t0;
            if (st != EGM_OK)
                return fail("commit", st);
        }
        free(keys);
        free(key_v);
        free(lens);
        free(sizes);
        free(slab_ids);
        free(offsets);
    } else {
        for (unsigned long long i = 0; i < objects; i++) {
            make_key(key, key_len, i);
            uint64_t p0 = egm__now_ns();
            st = egm__objects_put_start(index, client, key, key_len, object_size,
                                        (uint32_t)replicas, 1, NULL);
            if (st == EGM_OK)
                st = egm__objects_put_end(index, client, key, key_len, 2);
            uint64_t took = egm__now_ns() - p0;
            put_ns += took;
            if (took > put_max_ns)
                put_max_ns = took;
            if (st != EGM_OK)
                return fail("put", st);
        }
    }
    malloc_trim(0);
    size_t heap1 = heap_in_use(), rss1 = rss_bytes();
    /* Then the index's own time per GetReplicaList of a random key (no RPC). */
    uint64_t rng = 0x2545f4914f6cdd1dull, t0 = egm__now_ns();
    unsigned long long lookups = objects < 1000000 ? 1000000 : objects;
    egm_object_view_t view;
    for (unsigned long long i = 0; i < lookups; i++) {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        unsigned long long k = rng % objects;
        make_key(key, key_len, k);
        if ((st = egm__objects_get_replicas(index, key, key_len, 3, &view)) != EGM_OK)
            return fail("get", st);
    }
    double lookup_ns = (double)(egm__now_ns() - t0) / (double)lookups;
    printf("{\"objects\": %llu, \"key_len\": %llu, \"replicas\": %llu, \"segments\": %llu, "
           "\"mode\": \"%s\", \"commit_keys_per_call\": %llu, "
           "\"heap_bytes_per_object\": %.1f, \"rss_bytes_per_object\": %.1f, "
           "\"get_replicas_ns\": %.1f, \"commit_ns_per_key\": %.1f, \"put_ns_per_key\": %.1f, "
           "\"put_max_us\": %.1f}\n",
           objects, key_len, replicas, segments, commit > 0 ? "commit" : "put_start_end", commit,
           (double)(heap1 - heap0) / (double)objects, (double)(rss1 - rss0) / (double)objects,
           lookup_ns, commit > 0 ? (double)commit_ns / (double)objects : 0.0,
           commit > 0 ? 0.0 : (double)put_ns / (double)objects, (double)put_max_ns / 1e3);
    free(key);
    egm__objects_destroy(index);
    egm__segment_table_destroy(table);
    return 0;
}
