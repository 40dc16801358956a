/* bench data: the command's flags, their defaults (normal and --smoke), the
 * combinations refused, and the "config" object of the JSON document. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common/config_int.h"
#include "bench_data.h"

const char egm__bdata_usage[] =
    "Usage: egmstore bench data [--workload single,batch,mixed,full] [--sizes 4KiB,...,256MiB]\n"
    "                           [--keys 8192] [--block 64KiB] [--batch-blocks 4KiB,64KiB,...]\n"
    "                           [--dist uniform,zipf:0.99]\n"
    "                           [--read-ratio 0.9] [--clients 1,8] [--procs 1,2]\n"
    "                           [--protocol shm,tcp|nvlink,tcp] [--memory host|gpu[:N]]\n"
    "                           [--pool auto|host|egm] [--pool-size SIZE] [--max-memory SIZE]\n"
    "                           [--seconds S | --iters N] [--fill 0.88] [--run 8] [--no-ceiling]\n"
    "                           [--client-per-thread] [--no-warm] [--smoke] [--master HOST:PORT]\n"
    "                           [--out FILE]\n\n"
    "Puts and gets through the client library, every get checked byte for byte, with the copy\n"
    "ceiling measured in the same run. Without --master it starts a master in this process and\n"
    "one provider process (a pool of --pool-size) on free loopback ports. Progress lines go to\n"
    "stderr, a table to stdout, every figure to --out as JSON (docs/benchmarks.md).\n\n"
    "  --workload LIST    single: put then get of one object per call, for each of --sizes;\n"
    "                     batch: batch put and get of --keys blocks of --block, scattered in one\n"
    "                     registered buffer; mixed: gets of a preloaded keyspace of --keys\n"
    "                     blocks (drawn by --dist) and puts of new keys, --read-ratio of them\n"
    "                     gets; full: puts into a pool filled to --fill, the master evicting\n"
    "                     (default all four)\n"
    "  --sizes LIST       single: the object sizes (default 4KiB,64KiB,1MiB,16MiB,256MiB)\n"
    "  --keys K           batch: blocks per batch call; mixed: the preloaded keyspace\n"
    "                     (default 8192)\n"
    "  --block SIZE       batch and mixed: the block size (default 64KiB)\n"
    "  --batch-blocks LIST  batch: the block sizes, one put and get phase each (default\n"
    "                     --block); a size's batch has --keys blocks, fewer where it would pass\n"
    "                     --keys x --block bytes\n"
    "  --dist LIST        mixed: how gets draw keys, each run in turn: uniform, zipf (= "
    "zipf:0.99)\n"
    "                     or zipf:S with S in 0.01..10 (default uniform,zipf:0.99)\n"
    "  --read-ratio R     mixed: the share of calls that are gets, 0..1 (default 0.9)\n"
    "  --clients LIST     client threads per process (default 1,8); they share the process's\n"
    "                     client, as an inference process's threads share its store\n"
    "  --client-per-thread  each thread creates a client of its own instead\n"
    "  --no-warm          no untimed pass writing the pool once through each client first\n"
    "                     (default: the pass runs with the embedded provider); --warm forces it\n"
    "  --procs LIST       processes (copies of this command) running the clients (default 1)\n"
    "  --protocol LIST    transports, each run in turn (default shm,tcp; nvlink,tcp with GPU\n"
    "                     memory, where tcp is the staging path); also --protocols\n"
    "  --memory host|gpu[:N]  where the clients' buffers live (default host); --gpu = gpu:0\n"
    "  --pool auto|host|egm   the provider's pool: host memfd, or the EGM Store pool (CUDA\n"
    "                     HOST_NUMA memory; auto = egm when nvlink is asked for)\n"
    "  --pool-size SIZE   the embedded provider's capacity (default 2GiB)\n"
    "  --max-memory SIZE  host memory the buffers and pool may take; a phase that needs more\n"
    "                     is skipped and listed (default 60% of MemAvailable)\n"
    "  --seconds S        length of each phase (default 2)\n"
    "  --iters N          instead of --seconds: calls per client in each phase\n"
    "  --fill R           full: share of the pool filled before the timed puts (default 0.88)\n"
    "  --run N            single: calls timed back to back, each into its own buffer slot,\n"
    "                     before their sources are refilled and their objects checked\n"
    "                     (default 8, at most 16; fewer where the slots would pass 64 MiB,\n"
    "                     256 MiB with GPU memory); --run 1: a check between every two calls\n"
    "  --no-ceiling       skip the memcpy / cuMemcpy ceiling measurements (--ceiling: run them)\n"
    "  --smoke            a seconds-long run of every workload with tiny sizes (CI)\n"
    "  --master HOST:PORT  run against that master and its providers instead of the embedded\n"
    "                     ones (no warm pass: it never writes over a running pool)\n"
    "  --out FILE         write every figure as JSON (docs/benchmarks.md)\n";

static const egm_bench_flag_t flags[] = {
    {"--workload", 1},     {"--sizes", 1},
    {"--keys", 1},         {"--block", 1},
    {"--batch-blocks", 1}, {"--dist", 1},
    {"--read-ratio", 1},   {"--clients", 1},
    {"--procs", 1},        {"--protocol", 1},
    {"--memory", 1},       {"--pool", 1},
    {"--pool-size", 1},    {"--max-memory", 1},
    {"--seconds", 1},      {"--iters", 1},
    {"--fill", 1},         {"--run", 1},
    {"--out", 1},          {"--ceiling", 0},
    {"--no-ceiling", 0},   {"--client-per-thread", 0},
    {"--smoke", 0},        {"--child-index", 1},
    {"--child-procs", 1},  {"--child-go-fd", 1},
    {"--child-dir", 1},    {"--child-prefix", 1},
    {"--protocols", 1},    {"--gpu", 0},
    {"--warm", 0},         {"--no-warm", 0},
};

static int add_workload(const char *it, void *arg)
{
    static const char *const names[] = {"single", "batch", "mixed", "full"};
    unsigned *out = arg, bit = 0;
    for (int w = 0; w < EGM_BDATA_N_WORKLOADS; w++)
        if (strcmp(it, names[w]) == 0)
            bit = 1u << w;
    if (strcmp(it, "all") == 0)
        bit = (1u << EGM_BDATA_N_WORKLOADS) - 1;
    if (bit == 0) {
        fprintf(stderr,
                "egmstore: error: --workload: \"%s\", must be single, batch, mixed, full or all "
                "(comma separated)\n",
                it);
        return -1;
    }
    *out |= bit;
    return 0;
}

static int parse_workloads(const char *text, unsigned *out)
{
    *out = 0;
    if (egm__bench_each_item(text, add_workload, out) != 0)
        return -1;
    return *out != 0 ? 0 : -1;
}

static int add_dist(const char *it, void *arg)
{
    egm_bdata_opts_t *o = arg;
    double s = 0;
    if (o->n_dists == EGM_BDATA_MAX_LIST)
        return -1;
    if (strcmp(it, "zipf") == 0)
        s = 0.99;
    else if (strncmp(it, "zipf:", 5) == 0) {
        if (egm__bench_parse_double("--dist zipf:S", it + 5, 0.01, 10, &s) != 0)
            return -1;
    } else if (strcmp(it, "uniform") != 0) {
        fprintf(stderr, "egmstore: error: --dist: \"%s\", must be uniform or zipf:S\n", it);
        return -1;
    }
    o->zipf[o->n_dists++] = s;
    return 0;
}

static int parse_dists(const char *text, egm_bdata_opts_t *o)
{
    o->n_dists = 0;
    if (egm__bench_each_item(text, add_dist, o) != 0)
        return -1;
    return o->n_dists > 0 ? 0 : -1;
}

static int add_protocol(const char *it, void *arg)
{
    egm_bdata_opts_t *o = arg;
    int p = -1;
    for (int k = EGM_BDATA_SHM; k <= EGM_BDATA_NVLINK; k++)
        if (strcmp(it, egm__bdata_proto_name((egm_bdata_proto_t)k)) == 0)
            p = k;
    if (p < 0 || o->n_protocols == 3) {
        fprintf(stderr, "egmstore: error: --protocol: \"%s\", must be shm, tcp or nvlink\n", it);
        return -1;
    }
    o->protocols[o->n_protocols++] = (egm_bdata_proto_t)p;
    return 0;
}

static int parse_protocols(const char *text, egm_bdata_opts_t *o)
{
    o->n_protocols = 0;
    if (egm__bench_each_item(text, add_protocol, o) != 0)
        return -1;
    return o->n_protocols > 0 ? 0 : -1;
}

static int parse_memory(const char *text, egm_bdata_opts_t *o)
{
    char *end = NULL;
    o->gpu = strncmp(text, "gpu", 3) == 0;
    o->device = 0;
    if (strcmp(text, "host") == 0 || strcmp(text, "gpu") == 0)
        return 0;
    if (o->gpu && text[3] == ':') {
        long d = strtol(text + 4, &end, 10);
        if (text[4] != '\0' && *end == '\0' && d >= 0 && d < 1024) {
            o->device = (int)d;
            return 0;
        }
    }
    fprintf(stderr, "egmstore: error: --memory: \"%s\", must be host, gpu or gpu:N\n", text);
    return -1;
}

static int parse_size(const char *flag, const char *text, uint64_t min, uint64_t *out)
{
    int n = 0;
    return egm__bench_parse_sizes(flag, text, min, out, 1, &n);
}

static int parse_pool(const char *text, egm_bdata_opts_t *o)
{
    if (strcmp(text, "auto") == 0 || strcmp(text, "host") == 0 || strcmp(text, "egm") == 0) {
        o->pool_egm = strcmp(text, "auto") == 0 ? -1 : strcmp(text, "egm") == 0;
        return 0;
    }
    fprintf(stderr, "egmstore: error: --pool: \"%s\", must be auto, host or egm\n", text);
    return -1;
}

/* The workloads' shape; 1 when `name` is none of these flags. */
static int apply_shape(egm_bdata_opts_t *o, const char *name, const char *v)
{
    if (strcmp(name, "--workload") == 0)
        return parse_workloads(v, &o->workloads);
    if (strcmp(name, "--sizes") == 0)
        return egm__bench_parse_sizes(name, v, 1, o->sizes, EGM_BDATA_MAX_LIST, &o->n_sizes);
    if (strcmp(name, "--keys") == 0)
        return egm__bench_parse_u64(name, v, 1, 1u << 24, &o->keys);
    if (strcmp(name, "--block") == 0)
        return parse_size(name, v, 1, &o->block);
    if (strcmp(name, "--batch-blocks") == 0)
        return egm__bench_parse_sizes(name, v, 1, o->batch_blocks, EGM_BDATA_MAX_LIST,
                                      &o->n_batch_blocks);
    if (strcmp(name, "--dist") == 0)
        return parse_dists(v, o);
    if (strcmp(name, "--read-ratio") == 0)
        return egm__bench_parse_double(name, v, 0, 1, &o->read_ratio);
    if (strcmp(name, "--clients") == 0)
        return egm__bench_parse_ints(name, v, 1, 1024, o->clients, EGM_BDATA_MAX_LIST,
                                     &o->n_clients);
    if (strcmp(name, "--procs") == 0)
        return egm__bench_parse_ints(name, v, 1, 256, o->procs, EGM_BDATA_MAX_LIST, &o->n_procs);
    if (strcmp(name, "--protocol") == 0 || strcmp(name, "--protocols") == 0)
        return parse_protocols(v, o);
    if (strcmp(name, "--memory") == 0)
        return parse_memory(v, o);
    if (strcmp(name, "--gpu") == 0)
        return parse_memory("gpu", o);
    if (strcmp(name, "--pool") == 0)
        return parse_pool(v, o);
    if (strcmp(name, "--pool-size") == 0)
        return parse_size(name, v, 1u << 20, &o->pool_size);
    if (strcmp(name, "--max-memory") == 0)
        return parse_size(name, v, 1u << 20, &o->max_memory);
    return 1;
}

/* How long, what else, where to: 1 when `name` is none of these flags. */
static int apply_run(egm_bdata_opts_t *o, const char *name, const char *v)
{
    if (strcmp(name, "--seconds") == 0)
        return egm__bench_parse_double(name, v, 0.001, 3600, &o->seconds);
    if (strcmp(name, "--iters") == 0)
        return egm__bench_parse_u64(name, v, 1, 1000000000ull, &o->iters);
    if (strcmp(name, "--fill") == 0)
        return egm__bench_parse_double(name, v, 0.01, 0.99, &o->fill);
    if (strcmp(name, "--run") == 0)
        return egm__bench_parse_u64(name, v, 1, EGM_BDATA_MAX_RUN, &o->run);
    if (strcmp(name, "--ceiling") == 0 || strcmp(name, "--no-ceiling") == 0)
        o->ceiling = strcmp(name, "--ceiling") == 0;
    else if (strcmp(name, "--warm") == 0 || strcmp(name, "--no-warm") == 0)
        o->warm = strcmp(name, "--warm") == 0;
    else if (strcmp(name, "--client-per-thread") == 0)
        o->client_per_thread = 1;
    else if (strcmp(name, "--smoke") == 0)
        o->smoke = 1;
    else if (strcmp(name, "--out") == 0)
        o->out = v;
    else
        return 1;
    return 0;
}

/* The hidden flags a --procs parent gives its children. */
static int apply_child(egm_bdata_opts_t *o, const char *name, const char *v)
{
    uint64_t u = 0;
    o->child = 1;
    if (strcmp(name, "--child-dir") == 0) {
        o->child_dir = v;
        return 0;
    }
    if (strcmp(name, "--child-prefix") == 0) {
        o->child_prefix = v;
        return 0;
    }
    if (egm__bench_parse_u64(name, v, 0, 1u << 30, &u) != 0)
        return -1;
    if (strcmp(name, "--child-index") == 0)
        o->child_index = (int)u;
    else if (strcmp(name, "--child-procs") == 0)
        o->child_procs = (int)u;
    else
        o->child_go_fd = (int)u;
    return 0;
}

/* One flag with its value; 0 or -1 after printing why. */
static int apply(void *opts, const char *name, const char *v)
{
    egm_bdata_opts_t *o = opts;
    int rc = apply_shape(o, name, v);
    if (rc == 1)
        rc = apply_run(o, name, v);
    return rc == 1 ? apply_child(o, name, v) : rc;
}

int egm__bdata_parse(int argc, char **argv, egm_bdata_opts_t *o, char **rest, int *n_rest)
{
    return egm__bench_take_flags(argc, argv, flags, sizeof(flags) / sizeof(flags[0]), apply, o,
                                 rest, n_rest);
}

/* ---- defaults ---------------------------------------------------------------- */

static void default_lists(egm_bdata_opts_t *o)
{
    static const uint64_t sizes[] = {4u << 10, 64u << 10, 1u << 20, 16u << 20, 256u << 20};
    static const uint64_t smoke_sizes[] = {4u << 10, 64u << 10, 1u << 20};
    if (o->n_sizes == 0) {
        const uint64_t *v = o->smoke ? smoke_sizes : sizes;
        o->n_sizes = o->smoke ? 3 : 5;
        memcpy(o->sizes, v, (size_t)o->n_sizes * sizeof(*v));
    }
    if (o->n_dists == 0) {
        o->zipf[0] = 0;
        o->zipf[1] = 0.99;
        o->n_dists = 2;
    }
    if (o->n_clients == 0) {
        o->clients[0] = o->smoke ? 2 : 1;
        o->clients[1] = 8;
        o->n_clients = o->smoke ? 1 : 2;
    }
    if (o->n_procs == 0) {
        o->procs[0] = 1;
        o->procs[1] = 2;
        o->n_procs = o->smoke ? 2 : 1;
    }
    if (o->n_protocols == 0) {
        o->protocols[0] = o->gpu ? EGM_BDATA_NVLINK : EGM_BDATA_SHM;
        o->protocols[1] = EGM_BDATA_TCP;
        o->n_protocols = 2;
    }
}

static void default_numbers(egm_bdata_opts_t *o, int embedded)
{
    if (o->workloads == 0)
        o->workloads = (1u << EGM_BDATA_N_WORKLOADS) - 1;
    if (o->keys == 0)
        o->keys = o->smoke ? 64 : 8192;
    if (o->block == 0)
        o->block = o->smoke ? 16u << 10 : 64u << 10;
    if (o->n_batch_blocks == 0) { /* smoke: a second, smaller size exercises the list */
        o->batch_blocks[0] = o->block;
        o->batch_blocks[1] = 4u << 10;
        o->n_batch_blocks = o->smoke && o->block != o->batch_blocks[1] ? 2 : 1;
    }
    if (o->read_ratio < 0)
        o->read_ratio = 0.9;
    if (o->pool_size == 0)
        o->pool_size = o->smoke ? 128ull << 20 : 2ull << 30;
    if (o->max_memory == 0)
        o->max_memory = egm__bench_mem_available() / 10 * 6;
    if (o->seconds == 0 && o->iters == 0)
        o->seconds = o->smoke ? 0.1 : 2;
    if (o->run == 0)
        o->run = 8;
    if (o->fill == 0) /* smoke: nearly no room, so that even a short phase evicts */
        o->fill = o->smoke ? 0.99 : 0.88;
    if (o->ceiling < 0)
        o->ceiling = !o->child;
    if (o->warm < 0) /* never write over a running master's pool */
        o->warm = embedded;
}

static int refuse(const char *why)
{
    fprintf(stderr, "egmstore: error: %s\n", why);
    return -1;
}

int egm__bdata_defaults(egm_bdata_opts_t *o, int embedded)
{
    int nvlink = 0, shm = 0;
    if (o->seconds > 0 && o->iters > 0)
        return refuse("--seconds and --iters: give one or the other");
    default_lists(o);
    default_numbers(o, embedded);
    for (int i = 0; i < o->n_protocols; i++) {
        nvlink |= o->protocols[i] == EGM_BDATA_NVLINK;
        shm |= o->protocols[i] == EGM_BDATA_SHM;
    }
    if (nvlink && !o->gpu)
        return refuse("--protocol nvlink needs --memory gpu (nvlink copies between a GPU and "
                      "the pool)");
    if (o->pool_egm < 0)
        o->pool_egm = nvlink;
    if (o->pool_egm && shm && embedded)
        return refuse("--protocol shm needs --pool host: the EGM pool is CUDA memory, which "
                      "shm cannot map");
    if (o->block > o->pool_size)
        return refuse("--block is larger than --pool-size");
    if (o->child && (o->child_dir == NULL || o->child_prefix == NULL || o->child_procs < 1))
        return refuse("--child-*: internal flags of --procs, all of them or none");
    return 0;
}

/* ---- the JSON config object ---------------------------------------------------- */

static void json_u64_list(FILE *f, const char *name, const uint64_t *v, int n)
{
    fprintf(f, "\"%s\": [", name);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s%llu", i ? ", " : "", (unsigned long long)v[i]);
    fprintf(f, "], ");
}

static void json_int_list(FILE *f, const char *name, const int *v, int n)
{
    fprintf(f, "\"%s\": [", name);
    for (int i = 0; i < n; i++)
        fprintf(f, "%s%d", i ? ", " : "", v[i]);
    fprintf(f, "], ");
}

void egm__bdata_json_config(FILE *f, const egm_bdata_run_t *r)
{
    const egm_bdata_opts_t *o = &r->o;
    fprintf(f, "{\"workloads\": [");
    for (int w = 0, k = 0; w < EGM_BDATA_N_WORKLOADS; w++)
        if (o->workloads & (1u << w))
            fprintf(f, "%s\"%s\"", k++ ? ", " : "", egm__bdata_workload_name(w));
    fprintf(f, "], ");
    json_u64_list(f, "sizes", o->sizes, o->n_sizes);
    fprintf(f, "\"keys\": %llu, \"block\": %llu, ", (unsigned long long)o->keys,
            (unsigned long long)o->block);
    json_u64_list(f, "batch_blocks", o->batch_blocks, o->n_batch_blocks);
    fprintf(f, "\"dists\": [");
    for (int i = 0; i < o->n_dists; i++) {
        if (o->zipf[i] > 0)
            fprintf(f, "%s\"zipf-%g\"", i ? ", " : "", o->zipf[i]);
        else
            fprintf(f, "%s\"uniform\"", i ? ", " : "");
    }
    fprintf(f, "], \"read_ratio\": %g, ", o->read_ratio);
    json_int_list(f, "clients", o->clients, o->n_clients);
    json_int_list(f, "procs", o->procs, o->n_procs);
    fprintf(f, "\"protocols\": [");
    for (int i = 0; i < o->n_protocols; i++)
        fprintf(f, "%s\"%s\"", i ? ", " : "", egm__bdata_proto_name(o->protocols[i]));
    fprintf(f, "], \"memory\": \"%s\", \"device\": %d, \"pool\": \"%s\", \"pool_size\": %llu, ",
            o->gpu ? "gpu" : "host", o->device, o->pool_egm ? "egm" : "host",
            (unsigned long long)o->pool_size);
    fprintf(f,
            "\"max_memory\": %llu, \"seconds\": %g, \"iters\": %llu, \"fill\": %g, \"run\": %llu, ",
            (unsigned long long)o->max_memory, o->seconds, (unsigned long long)o->iters, o->fill,
            (unsigned long long)o->run);
    fprintf(f, "\"ceiling\": %s, \"smoke\": %s, \"client_mode\": \"%s\", \"replica_num\": 1, ",
            o->ceiling ? "true" : "false", o->smoke ? "true" : "false",
            o->client_per_thread ? "per-thread" : "shared");
    fprintf(f, "\"warm\": %s, \"master\": ", o->warm ? "true" : "false");
    egm__bench_json_str(f, r->embedded ? "embedded" : r->master_addr);
    fprintf(f, ", \"key_prefix\": ");
    egm__bench_json_str(f, r->prefix);
    fprintf(f, "}");
}
