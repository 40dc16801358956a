/* egm-bench: the benchmarks, apart from the product's `egmstore` command.
 *
 *   egm-bench meta ...   the master's metadata round trips (bench_meta.c)
 *   egm-bench data ...   the data workloads through the client library (bench_data*.c)
 *
 * `egmstore bench ...` runs this executable (from egmstore's own folder) with the same
 * arguments, so both spellings work; the texts name the documented one. `bench data`
 * starts its provider from the `egmstore` next to this executable. */
#include <stdio.h>
#include <string.h>
#include "bench_util.h"
#include "common/log.h"

int main(int argc, char **argv)
{
    egm__log_set_component("bench");
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("%s\nData workloads: egmstore bench data --help\n", egm__bench_meta_usage);
        return EGM_EXIT_OK;
    }
    if (argc >= 2 && strcmp(argv[1], "data") == 0)
        return egm__bench_data(argc - 2, argv + 2);
    if (argc >= 2 && strcmp(argv[1], "meta") == 0)
        return egm__bench_meta(argc - 2, argv + 2);
    fprintf(stderr, "egmstore: error: bench: which benchmark? (egmstore bench meta|data)\n");
    return EGM_EXIT_USAGE;
}
