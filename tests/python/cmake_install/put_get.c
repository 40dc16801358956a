/* A program outside the project, built only from what `cmake --install` wrote: the header and
 * `pkg-config --cflags --libs egmstore` (tests/python/test_cmake_install.py). Puts one object
 * through the master at argv[1] and reads it back.
 * Usage: put_get MASTER KEY PROTOCOL; prints "ok LEN" and exits 0 when the bytes match. */
#include <egmstore/egmstore.h>

#include <stdio.h>
#include <string.h>

static int fail(const char *what, egm_status_t status)
{
    fprintf(stderr, "put_get.c: %s: %s (%s)\n", what, egm_status_name(status), egm_last_error());
    return 1;
}

int main(int argc, char **argv)
{
    if (argc != 4) {
        fprintf(stderr, "usage: %s MASTER KEY PROTOCOL\n", argv[0]);
        return 2;
    }
    char value[256];
    int len = snprintf(value, sizeof(value), "C, linked through pkg-config, egmstore %s, key %s",
                       EGMSTORE_VERSION, argv[2]);
    egm_config_t *config = NULL;
    egm_client_t *client = NULL;
    void *got = NULL;
    size_t got_len = 0;
    int rc = 1;
    egm_status_t status = egm_config_create(&config);
    if (status != EGM_OK)
        return fail("egm_config_create", status);
    if ((status = egm_config_set(config, "master_server_addr", argv[1])) != EGM_OK ||
        (status = egm_config_set(config, "protocol", argv[3])) != EGM_OK) {
        rc = fail("egm_config_set", status);
        goto out;
    }
    if ((status = egm_client_create(config, &client)) != EGM_OK) {
        rc = fail("egm_client_create", status);
        goto out;
    }
    if ((status = egm_put(client, argv[2], value, (size_t)len, NULL)) != EGM_OK) {
        rc = fail("egm_put", status);
        goto out;
    }
    if ((status = egm_get(client, argv[2], &got, &got_len)) != EGM_OK) {
        rc = fail("egm_get", status);
        goto out;
    }
    if (got_len != (size_t)len || memcmp(got, value, got_len) != 0) {
        fprintf(stderr, "put_get.c: got %zu bytes, not the %d put\n", got_len, len);
        goto out;
    }
    printf("ok %zu\n", got_len);
    rc = 0;
out:
    egm_buffer_free(got);
    if (client != NULL && (status = egm_client_close(client)) != EGM_OK && rc == 0)
        rc = fail("egm_client_close", status);
    egm_client_destroy(client);
    egm_config_destroy(config);
    return rc;
}
