/* Object commands: put, get, exist, rm, ls, stat. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <egmstore/egmstore.h>
#include "client/client_int.h"
#include "client/inspect.h"
#include "common/alloc.h"
#include "common/config_int.h"
#include "common/id.h"
#include "common/log.h"
#include "rpc/proto_util.h"
#include "tools/cli.h"

static int need_args(egm_cli_t *cli, int n, const char *usage)
{
    if (cli->argc == n)
        return 0;
    fprintf(stderr, "egmstore: error: usage: egmstore %s\n", usage);
    return -1;
}

static egm_client_t *connect_client(egm_cli_t *cli)
{
    egm_client_t *client = NULL;
    egm_status_t status = egm_client_create(cli->config, &client);
    if (status != EGM_OK) {
        egm__cli_error("cannot connect", status);
        return NULL;
    }
    return client;
}

/* Whole file or stdin into an egm_malloc'ed buffer. */
static egm_status_t read_input(const char *path, void **data_p, size_t *len_p)
{
    FILE *f = strcmp(path, "-") == 0 ? stdin : fopen(path, "rb");
    size_t cap = 1 << 16, len = 0;
    char *buf;

    if (f == NULL)
        return egm__set_error(EGM_ERR_IO, "%s: %s", path, strerror(errno));
    buf = egm_malloc(cap, "cli.input");
    while (buf != NULL) {
        len += fread(buf + len, 1, cap - len, f);
        if (len < cap)
            break;
        cap *= 2;
        char *grown = egm_realloc(buf, cap, "cli.input");
        if (grown == NULL) {
            egm_free(buf);
            buf = NULL;
        }
        buf = grown;
    }
    int failed = ferror(f);
    if (f != stdin)
        fclose(f);
    if (buf == NULL)
        return egm__set_error(EGM_ERR_NO_MEMORY, "%s: out of memory", path);
    if (failed) {
        egm_free(buf);
        return egm__set_error(EGM_ERR_IO, "%s: read error", path);
    }
    *data_p = buf;
    *len_p = len;
    return EGM_OK;
}

int egm__cmd_put(egm_cli_t *cli)
{
    void *data = NULL;
    size_t len = 0;
    egm_status_t status;

    if (need_args(cli, 2, "put KEY FILE|-") != 0)
        return EGM_EXIT_USAGE;
    status = read_input(cli->argv[1], &data, &len);
    if (status != EGM_OK) {
        egm__cli_error("put", status);
        return EGM_EXIT_FAIL;
    }
    egm_client_t *client = connect_client(cli);
    if (client == NULL) {
        egm_free(data);
        return EGM_EXIT_FAIL;
    }
    status = egm_put(client, cli->argv[0], data, len, NULL);
    if (status != EGM_OK) /* before the client's teardown can replace the detail */
        egm__cli_error("put", status);
    egm_client_destroy(client);
    egm_free(data);
    if (status != EGM_OK)
        return EGM_EXIT_FAIL;
    printf("stored %s (%zu bytes)\n", cli->argv[0], len);
    return EGM_EXIT_OK;
}

int egm__cmd_get(egm_cli_t *cli)
{
    void *data = NULL;
    size_t len = 0;
    egm_status_t status;

    if (need_args(cli, 2, "get KEY FILE|-") != 0)
        return EGM_EXIT_USAGE;
    egm_client_t *client = connect_client(cli);
    if (client == NULL)
        return EGM_EXIT_FAIL;
    status = egm_get(client, cli->argv[0], &data, &len);
    if (status != EGM_OK)
        egm__cli_error("get", status);
    egm_client_destroy(client);
    if (status != EGM_OK)
        return EGM_EXIT_FAIL;
    int to_stdout = strcmp(cli->argv[1], "-") == 0;
    FILE *f = to_stdout ? stdout : fopen(cli->argv[1], "wb");
    int ok = f != NULL && fwrite(data, 1, len, f) == len;
    if (f != NULL && !to_stdout)
        ok = (fclose(f) == 0) && ok;
    else if (f != NULL)
        ok = (fflush(f) == 0) && ok;
    egm_buffer_free(data);
    if (!ok) {
        fprintf(stderr, "egmstore: error: %s: %s\n", cli->argv[1], strerror(errno));
        return EGM_EXIT_FAIL;
    }
    if (!to_stdout)
        printf("fetched %s (%zu bytes) into %s\n", cli->argv[0], len, cli->argv[1]);
    return EGM_EXIT_OK;
}

int egm__cmd_exist(egm_cli_t *cli)
{
    if (need_args(cli, 1, "exist KEY") != 0)
        return EGM_EXIT_USAGE;
    egm_client_t *client = connect_client(cli);
    if (client == NULL)
        return EGM_EXIT_FAIL;
    egm_status_t status = egm_exist(client, cli->argv[0]);
    if (status != EGM_OK)
        egm__cli_error("exist", status);
    egm_client_destroy(client);
    if (status != EGM_OK)
        return EGM_EXIT_FAIL;
    printf("%s exists\n", cli->argv[0]);
    return EGM_EXIT_OK;
}

int egm__cmd_rm(egm_cli_t *cli)
{
    if (need_args(cli, 1, "rm KEY [--force]") != 0)
        return EGM_EXIT_USAGE;
    egm_client_t *client = connect_client(cli);
    if (client == NULL)
        return EGM_EXIT_FAIL;
    egm_status_t status = egm_remove(client, cli->argv[0], cli->force);
    if (status != EGM_OK) {
        egm__cli_error("rm", status);
        if (status == EGM_ERR_HAS_LEASE)
            fprintf(stderr, "egmstore: use --force to remove it anyway\n");
    }
    egm_client_destroy(client);
    if (status != EGM_OK)
        return EGM_EXIT_FAIL;
    printf("removed %s\n", cli->argv[0]);
    return EGM_EXIT_OK;
}

int egm__cmd_ls(egm_cli_t *cli)
{
    Egm__ListSegmentsReply *reply = NULL;
    char size_text[32], used_text[32], id_text[EGM_ID_STRLEN];
    uint64_t total = 0, used = 0;

    if (need_args(cli, 0, "ls") != 0)
        return EGM_EXIT_USAGE;
    egm_client_t *client = connect_client(cli);
    if (client == NULL)
        return EGM_EXIT_FAIL;
    egm_status_t status = egm__client_list_segments(client, &reply);
    egm_client_destroy(client);
    if (status == EGM_OK && reply->status != EGM_OK)
        status = reply->status;
    if (status != EGM_OK) {
        egm__rpc_msg_free(reply ? &reply->base : NULL);
        egm__cli_error("ls", status);
        return EGM_EXIT_FAIL;
    }
    printf("%-24s %-36s %10s %10s %8s  %s\n", "SEGMENT", "ID", "SIZE", "USED", "OBJECTS",
           "ENDPOINTS");
    for (size_t i = 0; i < reply->n_segments; i++) {
        const Egm__SegmentInfo *info = reply->segments[i];
        const Egm__SegmentDesc *d = info->desc;
        if (d == NULL)
            continue;
        total += d->size;
        used += info->used;
        printf("%-24s %-36s %10s %10s %8llu  tcp=%s shm=%s\n", d->name,
               egm__id_format(egm__id_from_pb(d->id), id_text),
               egm__format_size(d->size, size_text, sizeof(size_text)),
               egm__format_size(info->used, used_text, sizeof(used_text)),
               (unsigned long long)info->objects, d->tcp_endpoint[0] ? d->tcp_endpoint : "-",
               d->shm_socket[0] ? d->shm_socket : "-");
    }
    printf("%zu segments, %s of %s used, %llu keys, %llu clients\n", reply->n_segments,
           egm__format_size(used, used_text, sizeof(used_text)),
           egm__format_size(total, size_text, sizeof(size_text)), (unsigned long long)reply->keys,
           (unsigned long long)reply->clients);
    egm__rpc_msg_free(&reply->base);
    return EGM_EXIT_OK;
}

static void print_stat(const char *key, const Egm__StatKeyReply *r)
{
    char size_text[32], id_text[EGM_ID_STRLEN];

    printf("key       %s\n", key);
    printf("size      %llu (%s)\n", (unsigned long long)r->size,
           egm__format_size(r->size, size_text, sizeof(size_text)));
    printf("state     %s\n",
           r->state == EGM__OBJECT_STATE__OBJECT_COMPLETE ? "complete" : "pending (put not ended)");
    if (r->lease_remaining_ms > 0)
        printf("lease     expires in %.3f s\n", (double)r->lease_remaining_ms / 1000.0);
    else
        printf("lease     none\n");
    printf("pins      %s\n", r->hard_pin && r->soft_pin ? "soft, hard"
                             : r->hard_pin              ? "hard"
                             : r->soft_pin              ? "soft"
                                                        : "none");
    printf("writer    %s\n", egm__id_format(egm__id_from_pb(r->writer), id_text));
    printf("age       %.3f s since PutStart\n", (double)r->age_ms / 1000.0);
    if (r->state == EGM__OBJECT_STATE__OBJECT_COMPLETE)
        printf("idle      %.3f s since the last access\n", (double)r->idle_ms / 1000.0);
    printf("replicas  %zu\n", r->n_replicas);
    if (r->n_replicas > 0)
        printf("  %-24s %-36s %12s %12s  %s\n", "SEGMENT", "ID", "OFFSET", "LENGTH", "HOST");
    for (size_t i = 0; i < r->n_replicas; i++) {
        const Egm__ReplicaInfo *rep = r->replicas[i];
        printf("  %-24s %-36s %12llu %12llu  %s\n", rep->segment_name,
               egm__id_format(egm__id_from_pb(rep->segment), id_text),
               (unsigned long long)rep->offset, (unsigned long long)rep->length,
               rep->host_id[0] ? rep->host_id : "-");
    }
}

int egm__cmd_stat(egm_cli_t *cli)
{
    Egm__StatKeyReply *reply = NULL;

    if (need_args(cli, 1, "stat KEY") != 0)
        return EGM_EXIT_USAGE;
    egm_client_t *client = connect_client(cli);
    if (client == NULL)
        return EGM_EXIT_FAIL;
    egm_status_t status = egm__client_stat(client, cli->argv[0], &reply);
    if (status == EGM_OK && reply->status != EGM_OK)
        status = egm__set_error(reply->status, "\"%s\": %s", cli->argv[0],
                                reply->error[0] ? reply->error : egm_status_string(reply->status));
    if (status != EGM_OK) /* before the client's teardown can replace the detail */
        egm__cli_error("stat", status);
    egm_client_destroy(client);
    if (status == EGM_OK)
        print_stat(cli->argv[0], reply);
    egm__rpc_msg_free(reply != NULL ? &reply->base : NULL);
    return status == EGM_OK ? EGM_EXIT_OK : EGM_EXIT_FAIL;
}
