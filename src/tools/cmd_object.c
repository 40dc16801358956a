/* Object commands: put, get, exist, rm, ls, stat. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/stat.h>
#include <egmstore/egmstore.h>
#include "client/client_int.h"
#include "client/inspect.h"
#include "client/master_leader.h"
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

/* What `put` stores, read part by part: a regular file where it lies (its size
 * from fstat, nothing read before the pool is known to hold it), or stdin, a
 * pipe or another stream, whose size is only known at its end: copied first
 * into an unlinked temporary file in $TMPDIR (stopping as soon as it passes
 * what one object of the pool can hold), then read back from there. */
typedef struct {
    const char *name; /* the path, or "stdin" */
    int fd;
    int owned; /* fd closed by close_input */
    int spool; /* not a regular file: copy it to a temporary file first */
    uint64_t size;
    uint64_t done; /* bytes handed to the put */
} put_input_t;

static egm_status_t open_input(const char *path, put_input_t *in)
{
    struct stat st;

    *in = (put_input_t){.name = path, .fd = -1};
    if (strcmp(path, "-") == 0) {
        in->name = "stdin";
        in->fd = STDIN_FILENO;
    } else if ((in->fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        return egm__set_error(EGM_ERR_IO, "%s: %s", path, strerror(errno));
    } else {
        in->owned = 1;
    }
    if (fstat(in->fd, &st) != 0)
        return egm__set_error(EGM_ERR_IO, "%s: %s", in->name, strerror(errno));
    if (S_ISDIR(st.st_mode))
        return egm__set_error(EGM_ERR_INVALID_ARG, "%s: %s", in->name, strerror(EISDIR));
    if (!S_ISREG(st.st_mode)) {
        in->spool = 1;
        return EGM_OK;
    }
    /* stdin redirected from a file: what is left of it from its offset. */
    off_t at = lseek(in->fd, 0, SEEK_CUR);
    in->size = (uint64_t)st.st_size - (at > 0 && at <= st.st_size ? (uint64_t)at : 0);
    return EGM_OK;
}

static void close_input(put_input_t *in)
{
    if (in->owned && in->fd >= 0)
        close(in->fd);
    in->fd = -1;
}

/* An unlinked file in $TMPDIR (or /tmp): O_TMPFILE, else mkstemp + unlink. */
static int spool_file(const char **dir_p)
{
    const char *dir = getenv("TMPDIR");
    char path[4096];

    if (dir == NULL || dir[0] == '\0')
        dir = "/tmp";
    *dir_p = dir;
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd >= 0 || (errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL))
        return fd;
    if ((size_t)snprintf(path, sizeof(path), "%s/egmstore-put-XXXXXX", dir) >= sizeof(path)) {
        errno = ENAMETOOLONG;
        return -1;
    }
    fd = mkostemp(path, O_CLOEXEC);
    if (fd >= 0)
        unlink(path);
    return fd;
}

/* Copies the stream into a temporary file; more than `limit` bytes (what
 * one object of the pool can hold) is NO_SPACE without reading the rest. */
static egm_status_t spool_input(put_input_t *in, uint64_t limit, uint64_t pool, size_t segments)
{
    const char *dir;
    char limit_text[32], pool_text[32];
    size_t cap = (size_t)1 << 20;
    egm_status_t status = EGM_OK;
    int fd = spool_file(&dir);

    if (fd < 0)
        return egm__set_error(EGM_ERR_IO, "a temporary file in %s for %s: %s", dir, in->name,
                              strerror(errno));
    char *buf = egm_malloc(cap, "cli.spool");
    if (buf == NULL) {
        close(fd);
        return egm__set_error(EGM_ERR_NO_MEMORY, "%s: out of memory", in->name);
    }
    uint64_t total = 0;
    for (;;) {
        ssize_t n = read(in->fd, buf, cap);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            status = egm__set_error(EGM_ERR_IO, "%s: %s", in->name, strerror(errno));
            break;
        }
        if (n == 0)
            break;
        total += (uint64_t)n;
        if (total > limit) {
            status = egm__set_error(
                EGM_ERR_NO_SPACE,
                "%s: more than %llu bytes (%s), the most one object can take in this pool "
                "(%llu bytes (%s) in %zu segments; a replica lies in one segment)",
                in->name, (unsigned long long)limit,
                egm__format_size(limit, limit_text, sizeof(limit_text)), (unsigned long long)pool,
                egm__format_size(pool, pool_text, sizeof(pool_text)), segments);
            break;
        }
        for (ssize_t w = 0; w < n && status == EGM_OK;) {
            ssize_t k = write(fd, buf + w, (size_t)(n - w));
            if (k < 0 && errno == EINTR)
                continue;
            if (k < 0)
                status = egm__set_error(EGM_ERR_IO, "%s: a temporary file in %s: %s", in->name, dir,
                                        strerror(errno));
            else
                w += k;
        }
        if (status != EGM_OK)
            break;
    }
    egm_free(buf);
    if (status == EGM_OK && lseek(fd, 0, SEEK_SET) != 0)
        status = egm__set_error(EGM_ERR_IO, "%s: a temporary file in %s: %s", in->name, dir,
                                strerror(errno));
    if (status != EGM_OK) {
        close(fd);
        return status;
    }
    close_input(in);
    in->fd = fd;
    in->owned = 1;
    in->size = total;
    return EGM_OK;
}

/* egm_put_read_fn: the input's next len bytes. */
static egm_status_t read_input(void *ctx, void *buf, size_t len)
{
    put_input_t *in = ctx;
    size_t got = 0;

    while (got < len) {
        ssize_t n = read(in->fd, (char *)buf + got, len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return egm__set_error(EGM_ERR_IO, "%s: %s", in->name, strerror(errno));
        if (n == 0)
            return egm__set_error(EGM_ERR_IO,
                                  "%s: ended after %llu of its %llu bytes (it changed while "
                                  "being stored)",
                                  in->name, (unsigned long long)(in->done + got),
                                  (unsigned long long)in->size);
        got += (size_t)n;
    }
    in->done += len;
    return EGM_OK;
}

int egm__cmd_put(egm_cli_t *cli)
{
    put_input_t in;
    egm_client_t *client = NULL;
    egm_status_t status;

    if (need_args(cli, 2, "put KEY FILE|-") != 0)
        return EGM_EXIT_USAGE;
    /* The file's own errors come before connecting. */
    status = open_input(cli->argv[1], &in);
    if (status == EGM_OK && (client = connect_client(cli)) == NULL) {
        close_input(&in);
        return EGM_EXIT_FAIL;
    }
    if (status == EGM_OK && in.spool) {
        /* The one ListSegments of a put: a stream is spooled to learn its
         * size, and must stop once past what one segment can hold. */
        uint64_t pool = 0, largest = 0;
        size_t segments = 0;
        status = egm__client_pool_capacity(client, &pool, &largest, &segments);
        if (status == EGM_OK)
            status = spool_input(&in, largest, pool, segments);
    }
    if (status == EGM_OK) {
        egm_put_stream_params_t params = {.release_pages = 1}; /* a one-shot process */
        status = egm__put_stream(client, cli->argv[0], in.size, read_input, &in, &params);
        if (status == EGM_ERR_NO_SPACE) { /* name the input the size is of */
            char why[512];
            snprintf(why, sizeof(why), "%s", egm_last_error());
            egm__set_error(status, "%s: %s", in.name, why);
        }
    }
    if (status != EGM_OK) /* before the client's teardown can replace the detail */
        egm__cli_error("put", status);
    egm_client_destroy(client);
    close_input(&in);
    if (status != EGM_OK)
        return EGM_EXIT_FAIL;
    char key_text[EGM_CLI_QUOTE_MAX];
    printf("stored %s (%llu bytes)\n", egm__cli_quote(cli->argv[0], key_text, sizeof(key_text)),
           (unsigned long long)in.size);
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
        char path_text[EGM_CLI_QUOTE_MAX];
        fprintf(stderr, "egmstore: error: %s: %s\n",
                egm__cli_quote(cli->argv[1], path_text, sizeof(path_text)), strerror(errno));
        return EGM_EXIT_FAIL;
    }
    if (!to_stdout) {
        char key_text[EGM_CLI_QUOTE_MAX], path_text[EGM_CLI_QUOTE_MAX];
        printf("fetched %s (%zu bytes) into %s\n",
               egm__cli_quote(cli->argv[0], key_text, sizeof(key_text)), len,
               egm__cli_quote(cli->argv[1], path_text, sizeof(path_text)));
    }
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
    char key_text[EGM_CLI_QUOTE_MAX];
    printf("%s exists\n", egm__cli_quote(cli->argv[0], key_text, sizeof(key_text)));
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
    char key_text[EGM_CLI_QUOTE_MAX];
    printf("removed %s\n", egm__cli_quote(cli->argv[0], key_text, sizeof(key_text)));
    return EGM_EXIT_OK;
}

int egm__cmd_ls(egm_cli_t *cli)
{
    Egm__ListSegmentsReply *reply = NULL;
    char size_text[32], used_text[32], id_text[EGM_ID_STRLEN];
    char name_text[256], tcp_text[256], shm_text[256];
    uint64_t total = 0, used = 0;

    if (need_args(cli, 0, "ls") != 0)
        return EGM_EXIT_USAGE;
    if (egm__master_leader_is_etcd(egm__config_settings(cli->config)->master_server_addr)) {
        egm_status_t ms = egm__cli_print_masters(cli->config);
        if (ms != EGM_OK) {
            egm__cli_error("ls: the masters in etcd", ms);
            return EGM_EXIT_FAIL;
        }
    }
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
        /* Names and endpoints come from providers: escaped like keys. */
        printf("%-24s %-36s %10s %10s %8llu  tcp=%s shm=%s\n",
               egm__cli_escape(d->name, name_text, sizeof(name_text)),
               egm__id_format(egm__id_from_pb(d->id), id_text),
               egm__format_size(d->size, size_text, sizeof(size_text)),
               egm__format_size(info->used, used_text, sizeof(used_text)),
               (unsigned long long)info->objects,
               d->tcp_endpoint[0] ? egm__cli_escape(d->tcp_endpoint, tcp_text, sizeof(tcp_text))
                                  : "-",
               d->shm_socket[0] ? egm__cli_escape(d->shm_socket, shm_text, sizeof(shm_text)) : "-");
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
    char size_text[32], id_text[EGM_ID_STRLEN], key_text[EGM_CLI_QUOTE_MAX];
    char name_text[256], host_text[512];

    printf("key       %s\n", egm__cli_quote(key, key_text, sizeof(key_text)));
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
    printf("age       %.3f s since %s\n", (double)r->age_ms / 1000.0,
           r->state == EGM__OBJECT_STATE__OBJECT_COMPLETE ? "it was committed" : "PutStart");
    if (r->state == EGM__OBJECT_STATE__OBJECT_COMPLETE)
        printf("idle      %.3f s since the last access\n", (double)r->idle_ms / 1000.0);
    printf("replicas  %zu\n", r->n_replicas);
    if (r->n_replicas > 0)
        printf("  %-24s %-36s %12s %12s  %s\n", "SEGMENT", "ID", "OFFSET", "LENGTH", "HOST");
    for (size_t i = 0; i < r->n_replicas; i++) {
        const Egm__ReplicaInfo *rep = r->replicas[i];
        printf("  %-24s %-36s %12llu %12llu  %s\n",
               egm__cli_escape(rep->segment_name, name_text, sizeof(name_text)),
               egm__id_format(egm__id_from_pb(rep->segment), id_text),
               (unsigned long long)rep->offset, (unsigned long long)rep->length,
               rep->host_id[0] ? egm__cli_escape(rep->host_id, host_text, sizeof(host_text)) : "-");
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
    if (status == EGM_OK && reply->status != EGM_OK) {
        char key_text[EGM_CLI_QUOTE_MAX];
        status = egm__set_error(reply->status, "\"%s\": %s",
                                egm__cli_escape(cli->argv[0], key_text, sizeof(key_text)),
                                reply->error[0] ? reply->error : egm_status_string(reply->status));
    }
    if (status != EGM_OK) /* before the client's teardown can replace the detail */
        egm__cli_error("stat", status);
    egm_client_destroy(client);
    if (status == EGM_OK)
        print_stat(cli->argv[0], reply);
    egm__rpc_msg_free(reply != NULL ? &reply->base : NULL);
    return status == EGM_OK ? EGM_EXIT_OK : EGM_EXIT_FAIL;
}
