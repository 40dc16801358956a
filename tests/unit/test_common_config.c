/* Configuration: the key table, sizes in every unit (and what is refused), int,
 * enum and bool validation with messages that name the key, unknown keys, INI
 * files (comments, sections, quoting, a bad line reported with its number), the
 * EGMSTORE_* environment and --flags. Files go in a directory of the test's
 * own that its teardown removes, pass or fail. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <ftw.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>
#include "support/testutil.h"

#include "common/alloc.h"
#include "common/config_int.h"
#include "common/log.h"
#include "common/sock.h"

static void assert_error_contains(const char *needle)
{
    if (strstr(egm_last_error(), needle) == NULL)
        fail_msg("last error \"%s\" lacks \"%s\"", egm_last_error(), needle);
}

static void test_key_table_names_order_defaults(void **state)
{
    (void)state;
    static const struct {
        const char *name;
        const char *def;
    } want[] = {
        {"log_level", "info"},
        {"master_server_addr", "127.0.0.1:50051"},
        {"listen_address", "0.0.0.0"},
        {"port", "50051"},
        {"http_port", "9003"},
        {"rpc_threads", "4"},
        {"rpc_server_spin_us", "0"},
        {"local_hostname", ""},
        {"zone", ""},
        {"protocol", "auto"},
        {"global_segment_size", "0"},
        {"max_mr_size", "1GiB"},
        {"allow_overcommit", "false"},
        {"data_port", "0"},
        {"replica_num", "1"},
        {"rpc_timeout_ms", "5000"},
        {"rpc_spin_us", "0"},
        {"connect_timeout_ms", "3000"},
        {"io_timeout_ms", "10000"},
        {"ping_interval_ms", "1000"},
        {"default_kv_lease_ttl", "10000"},
        {"location_cache_ms", "1000"},
        {"location_cache_entries", "65536"},
        {"slab_bytes", "256MiB"},
        {"client_ttl", "10"},
        {"client_disconnect_grace_ms", "3000"},
        {"default_kv_soft_pin_ttl", "1800000"},
        {"put_start_discard_timeout_sec", "30"},
        {"eviction_high_watermark_ratio", "0.90"},
        {"eviction_ratio", "0.05"},
        {"eviction_min_residency_ms", "10000"},
        {"placement_strategy", "random"},
        {"rereplication_bytes_per_sec", "256MiB"},
        {"max_frame_size", "64MiB"},
        {"pool_memory", "host"},
        {"pool_location", "0"},
        {"egm_handle_type", "auto"},
        {"enable_egm_store_pool", "false"},
        {"egm_numa_nodes", "auto"},
        {"egm_setup_threads", "4"},
        {"provider_http_port", "-1"},
        {"prewarm", "true"},
        {"prewarm_concurrency", "2"},
        {"nvlink_max_inflight_bytes", "0"},
        {"nvlink_chunk_size", "0"},
        {"nvlink_bounce_buffer", "0"},
        {"nvlink_low_priority_stream", "false"},
        {"auth_token", ""},
        {"auth_token_file", ""},
        {"fd_allowed_gid", "-1"},
        {"cluster_id", "egmstore"},
        {"enable_ha", "false"},
        {"etcd_endpoints", ""},
        {"ha_lease_ttl", "2"},
        {"ha_early_grants", "true"},
    };
    size_t n;
    const egm_config_key_t *keys = egm__config_keys(&n);
    assert_int_equal(n, sizeof(want) / sizeof(want[0]));
    egm_config_t *c;
    assert_int_equal(egm_config_create(&c), EGM_OK);
    for (size_t i = 0; i < n; i++) {
        assert_string_equal(keys[i].name, want[i].name);
        assert_string_equal(keys[i].def, want[i].def);
        assert_non_null(keys[i].help);
        assert_true(strlen(keys[i].help) > 0);
        assert_ptr_equal(egm__config_find_key(want[i].name), &keys[i]);
        assert_string_equal(egm_config_get(c, want[i].name), want[i].def);
        assert_false(egm__config_is_set(c, want[i].name));
    }
    assert_null(egm__config_find_key("foo"));
    assert_null(egm_config_get(c, "foo"));
    assert_int_equal(egm_config_get_int(c, "port"), 50051);
    assert_int_equal(egm_config_get_size(c, "max_mr_size"), 1ull << 30);
    assert_int_equal(egm_config_get_size(c, "max_frame_size"), 64ull << 20);
    assert_int_equal(egm_config_get_size(c, "global_segment_size"), 0);
    egm_config_destroy(c);
    egm_config_destroy(NULL);
}

static void test_sizes_every_unit(void **state)
{
    (void)state;
    static const struct {
        const char *text;
        uint64_t bytes;
    } ok[] = {
        {"0", 0},
        {"4096", 4096},
        {"7B", 7},
        {"7b", 7},
        {"3K", 3ull << 10},
        {"3KB", 3ull << 10},
        {"3KiB", 3ull << 10},
        {"3kib", 3ull << 10},
        {"3kb", 3ull << 10},
        {"5M", 5ull << 20},
        {"5MB", 5ull << 20},
        {"5MiB", 5ull << 20},
        {"5mib", 5ull << 20},
        {"2G", 2ull << 30},
        {"2GB", 2ull << 30},
        {"2GiB", 2ull << 30},
        {"2gIb", 2ull << 30},
        {"1T", 1ull << 40},
        {"1TB", 1ull << 40},
        {"1TiB", 1ull << 40},
        {"256 MiB", 256ull << 20},
        {"256\tMiB", 256ull << 20},
        {" 256MiB ", 256ull << 20},
        {"18446744073709551615", UINT64_MAX},
        {"16777215TiB", 16777215ull << 40},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        uint64_t v = 1;
        if (egm__parse_size("global_segment_size", ok[i].text, &v) != EGM_OK)
            fail_msg("\"%s\" refused: %s", ok[i].text, egm_last_error());
        assert_int_equal(v, ok[i].bytes);
    }
}

static void test_sizes_refused(void **state)
{
    (void)state;
    static const char *const bad[] = {
        "",     " ",   "-1",    "-1GiB",   "12XB", "GiB", "1.5GiB",
        "0x10", "1 2", "1GiBs", "1 G i B", "1PiB", "abc", "+1",
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v = 77;
        if (egm__parse_size("global_segment_size", bad[i], &v) != EGM_ERR_CONFIG)
            fail_msg("\"%s\" accepted", bad[i]);
        assert_int_equal(v, 77);
        assert_error_contains("global_segment_size");
    }
    uint64_t v;
    assert_int_equal(egm__parse_size("global_segment_size", "12XB", &v), EGM_ERR_CONFIG);
    assert_string_equal(egm_last_error(),
                        "global_segment_size: \"12XB\" is not a size (use bytes or a number with "
                        "KiB/MiB/GiB/TiB, e.g. 256MiB)");
    /* Overflow, in the digits or through the unit. */
    static const char *const huge[] = {"18446744073709551616", "99999999999999999999999",
                                       "16777216TiB", "17179869184GiB"};
    for (size_t i = 0; i < sizeof(huge) / sizeof(huge[0]); i++) {
        if (egm__parse_size("max_mr_size", huge[i], &v) != EGM_ERR_CONFIG)
            fail_msg("\"%s\" accepted", huge[i]);
        assert_error_contains("max_mr_size");
    }
}

static void test_format_size(void **state)
{
    (void)state;
    char buf[32];
    assert_string_equal(egm__format_size(512, buf, sizeof(buf)), "512 B");
    assert_string_equal(egm__format_size(1536ull << 20, buf, sizeof(buf)), "1.5 GiB");
    assert_string_equal(egm__format_size(1ull << 40, buf, sizeof(buf)), "1.0 TiB");
}

static void test_set_validates_each_type(void **state)
{
    (void)state;
    egm_config_t *c;
    assert_int_equal(egm_config_create(&c), EGM_OK);

    /* enum */
    assert_int_equal(egm_config_set(c, "protocol", "tcp"), EGM_OK);
    assert_string_equal(egm_config_get(c, "protocol"), "tcp");
    assert_true(egm__config_is_set(c, "protocol"));
    assert_int_equal(egm_config_set(c, "protocol", "rdma"), EGM_ERR_CONFIG);
    assert_string_equal(egm_last_error(), "protocol: \"rdma\" is not one of auto|nvlink|shm|tcp");
    assert_string_equal(egm_config_get(c, "protocol"), "tcp"); /* unchanged */
    assert_int_equal(egm_config_set(c, "protocol", ""), EGM_ERR_CONFIG);
    assert_int_equal(egm_config_set(c, "protocol", "shm|tcp"), EGM_ERR_CONFIG);
    assert_int_equal(egm_config_set(c, "log_level", "trace"), EGM_OK);
    assert_int_equal(egm_config_set(c, "log_level", "loud"), EGM_ERR_CONFIG);

    /* int, with both ends of ranges */
    assert_int_equal(egm_config_set(c, "port", "0"), EGM_OK);
    assert_int_equal(egm_config_set(c, "port", "65535"), EGM_OK);
    assert_int_equal(egm_config_get_int(c, "port"), 65535);
    assert_int_equal(egm_config_set(c, "port", "70000"), EGM_ERR_CONFIG);
    assert_string_equal(egm_last_error(), "port: 70000 is out of range 0..65535");
    assert_int_equal(egm_config_set(c, "port", "-1"), EGM_ERR_CONFIG);
    assert_int_equal(egm_config_set(c, "port", "80x"), EGM_ERR_CONFIG);
    assert_error_contains("port: \"80x\" is not an integer");
    assert_int_equal(egm_config_set(c, "port", ""), EGM_ERR_CONFIG);
    assert_int_equal(egm_config_set(c, "port", " 80"), EGM_ERR_CONFIG);
    assert_int_equal(egm_config_set(c, "port", "99999999999999999999999"), EGM_ERR_CONFIG);
    assert_int_equal(egm_config_get_int(c, "port"), 65535);
    assert_int_equal(egm_config_set(c, "rpc_threads", "1"), EGM_OK);
    assert_int_equal(egm_config_set(c, "rpc_threads", "64"), EGM_OK);
    assert_int_equal(egm_config_set(c, "rpc_threads", "0"), EGM_ERR_CONFIG);
    assert_string_equal(egm_last_error(), "rpc_threads: 0 is out of range 1..64");
    assert_int_equal(egm_config_set(c, "rpc_threads", "65"), EGM_ERR_CONFIG);
    assert_int_equal(egm_config_get_int(c, "rpc_threads"), 64);
    assert_int_equal(egm_config_set(c, "replica_num", "0"), EGM_ERR_CONFIG);
    assert_int_equal(egm_config_set(c, "replica_num", "16"), EGM_OK);
    assert_int_equal(egm_config_set(c, "replica_num", "17"), EGM_ERR_CONFIG);
    assert_int_equal(egm_config_set(c, "ping_interval_ms", "9"), EGM_ERR_CONFIG);
    assert_int_equal(egm_config_set(c, "client_ttl", "3601"), EGM_ERR_CONFIG);
    assert_int_equal(egm_config_set(c, "default_kv_lease_ttl", "86400000"), EGM_OK);
    assert_int_equal(egm_config_set(c, "default_kv_lease_ttl", "86400001"), EGM_ERR_CONFIG);

    /* ratio: a number in 0..1, both ends included */
    assert_int_equal(egm_config_set(c, "eviction_ratio", "0"), EGM_OK);
    assert_int_equal(egm_config_set(c, "eviction_ratio", "1"), EGM_OK);
    assert_int_equal(egm_config_set(c, "eviction_ratio", "0.25"), EGM_OK);
    assert_true(egm__config_settings(c)->eviction_ratio == 0.25);
    assert_string_equal(egm_config_get(c, "eviction_ratio"), "0.25");
    assert_int_equal(egm_config_set(c, "eviction_ratio", "1.5"), EGM_ERR_CONFIG);
    assert_string_equal(egm_last_error(),
                        "eviction_ratio: \"1.5\" is not a number in 0..1 (e.g. 0.9)");
    assert_int_equal(egm_config_set(c, "eviction_high_watermark_ratio", "-0.1"), EGM_ERR_CONFIG);
    assert_error_contains("eviction_high_watermark_ratio: \"-0.1\" is not a number in 0..1");
    assert_int_equal(egm_config_set(c, "eviction_high_watermark_ratio", "0.9x"), EGM_ERR_CONFIG);
    assert_int_equal(egm_config_set(c, "eviction_high_watermark_ratio", ""), EGM_ERR_CONFIG);
    assert_int_equal(egm_config_set(c, "eviction_high_watermark_ratio", " 0.9"), EGM_ERR_CONFIG);
    assert_int_equal(egm_config_set(c, "eviction_high_watermark_ratio", "nan"), EGM_ERR_CONFIG);
    assert_int_equal(egm_config_set(c, "eviction_high_watermark_ratio", "inf"), EGM_ERR_CONFIG);
    assert_true(egm__config_settings(c)->eviction_ratio == 0.25); /* unchanged */
    assert_true(egm__config_settings(c)->eviction_high_watermark_ratio == 0.90);

    /* size, with ranges */
    assert_int_equal(egm_config_set(c, "global_segment_size", "12XB"), EGM_ERR_CONFIG);
    assert_int_equal(egm_config_set(c, "global_segment_size", "4 GB"), EGM_OK);
    assert_int_equal(egm_config_get_size(c, "global_segment_size"), 4ull << 30);
    assert_string_equal(egm_config_get(c, "global_segment_size"), "4 GB");
    assert_int_equal(egm_config_set(c, "max_mr_size", "4KiB"), EGM_OK);
    assert_int_equal(egm_config_set(c, "max_mr_size", "4095"), EGM_ERR_CONFIG);
    assert_error_contains("max_mr_size");
    assert_int_equal(egm_config_set(c, "max_frame_size", "1KiB"), EGM_OK);
    assert_int_equal(egm_config_set(c, "max_frame_size", "1GiB"), EGM_OK);
    assert_int_equal(egm_config_set(c, "max_frame_size", "1025MiB"), EGM_ERR_CONFIG);
    assert_int_equal(egm_config_set(c, "max_frame_size", "1023"), EGM_ERR_CONFIG);

    /* string */
    assert_int_equal(egm_config_set(c, "local_hostname", "node-7"), EGM_OK);
    assert_string_equal(egm_config_get(c, "local_hostname"), "node-7");

    /* unknown keys and NULLs */
    assert_int_equal(egm_config_set(c, "foo", "1"), EGM_ERR_CONFIG);
    assert_string_equal(egm_last_error(), "unknown configuration key \"foo\"");
    assert_int_equal(egm_config_set(c, "PORT", "1"), EGM_ERR_CONFIG);
    assert_int_equal(egm_config_set(c, NULL, "1"), EGM_ERR_INVALID_ARG);
    assert_int_equal(egm_config_set(c, "port", NULL), EGM_ERR_INVALID_ARG);

    /* key=value pairs */
    assert_int_equal(egm_config_set_pair(c, "  data_port =  1234 "), EGM_OK);
    assert_int_equal(egm_config_get_int(c, "data_port"), 1234);
    assert_int_equal(egm_config_set_pair(c, "data_port"), EGM_ERR_CONFIG);
    assert_int_equal(egm_config_set_pair(c, "nokey=1"), EGM_ERR_CONFIG);

    /* a copy is independent */
    egm_config_t *copy;
    assert_int_equal(egm_config_copy(c, &copy), EGM_OK);
    assert_int_equal(egm_config_set(c, "data_port", "1"), EGM_OK);
    assert_int_equal(egm_config_get_int(copy, "data_port"), 1234);
    assert_true(egm__config_is_set(copy, "data_port"));
    assert_false(egm__config_is_set(copy, "rpc_timeout_ms"));
    egm_config_destroy(copy);
    egm_config_destroy(c);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
}

/* The running test's temporary directory: made by setup_tmp_dir, removed
 * with everything in it by teardown_tmp_dir, whether the test got to its end
 * or not. */
static char tmp_dir[64];

static int setup_tmp_dir(void **state)
{
    snprintf(tmp_dir, sizeof(tmp_dir), "/tmp/egm-test-config-XXXXXX");
    if (mkdtemp(tmp_dir) == NULL) {
        tmp_dir[0] = '\0';
        return -1;
    }
    return egm_test_setup_alloc(state);
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
    (void)st;
    (void)type;
    (void)ftw;
    return remove(path);
}

/* The directory goes first: the allocation check fails by a cmocka assert,
 * which does not come back. */
static int teardown_tmp_dir(void **state)
{
    int removed = tmp_dir[0] == '\0' || nftw(tmp_dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS) == 0;
    tmp_dir[0] = '\0';
    int rc = egm_test_teardown_alloc(state);
    return removed ? rc : -1;
}

static void temp_path(char *path, size_t len)
{
    snprintf(path, len, "%s/config.ini", tmp_dir);
}

static void test_file(void **state)
{
    (void)state;
    char path[128];
    temp_path(path, sizeof(path));
    write_file(path, "# egmstore\n"
                     "; another comment\n"
                     "\n"
                     "port = 6000\n"
                     "  protocol=shm  \n"
                     "global_segment_size = 2 GiB   # inline comment\n"
                     "zone = \"node # 1\"\n"
                     "[client]\n"
                     "replica_num=2 ; why two\n");
    egm_config_t *c;
    assert_int_equal(egm_config_create(&c), EGM_OK);
    assert_int_equal(egm_config_load_file(c, path), EGM_OK);
    assert_int_equal(egm_config_get_int(c, "port"), 6000);
    assert_string_equal(egm_config_get(c, "protocol"), "shm");
    assert_int_equal(egm_config_get_size(c, "global_segment_size"), 2ull << 30);
    assert_string_equal(egm_config_get(c, "zone"), "node # 1");
    assert_int_equal(egm_config_get_int(c, "replica_num"), 2);
    assert_true(egm__config_is_set(c, "port"));
    assert_false(egm__config_is_set(c, "data_port"));

    /* A bad value: the message names file, line and key. */
    write_file(path, "port = 6001\n# ok\nprotocol = rdma\nreplica_num = 3\n");
    assert_int_equal(egm_config_load_file(c, path), EGM_ERR_CONFIG);
    char want[256];
    snprintf(want, sizeof(want), "%s:3: protocol: \"rdma\" is not one of auto|nvlink|shm|tcp",
             path);
    assert_string_equal(egm_last_error(), want);
    assert_int_equal(egm_config_get_int(c, "replica_num"), 2); /* stopped at line 3 */

    /* A line that is not key = value. */
    write_file(path, "port = 6001\n\nthis is not a setting\n");
    assert_int_equal(egm_config_load_file(c, path), EGM_ERR_CONFIG);
    snprintf(want, sizeof(want), "%s:3:", path);
    assert_error_contains(want);

    /* An unknown key. */
    write_file(path, "foo = 1\n");
    assert_int_equal(egm_config_load_file(c, path), EGM_ERR_CONFIG);
    assert_error_contains(":1: unknown configuration key \"foo\"");

    /* A line longer than the reader accepts is refused, not split. */
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("local_hostname = ", f);
    for (int i = 0; i < 9000; i++)
        fputc('a', f);
    fputs("\nport = 1\n", f);
    fclose(f);
    assert_int_equal(egm_config_load_file(c, path), EGM_ERR_CONFIG);
    assert_error_contains(":1: line longer");

    unlink(path);
    assert_int_equal(egm_config_load_file(c, path), EGM_ERR_CONFIG);
    assert_error_contains(path);
    egm_config_destroy(c);
}

/* [master], [provider] and [client] sections: a process sets the lines before
 * any header and those of its own role's sections; other roles' lines are
 * still checked. */
static void test_file_sections(void **state)
{
    (void)state;
    char path[128];
    temp_path(path, sizeof(path));
    write_file(path, "replica_num = 2\n"
                     "[provider]\n"
                     "global_segment_size = 1 GiB\n"
                     "[ Master ]\n"
                     "port = 6000\n"
                     "[client]\n"
                     "rpc_timeout_ms = 700\n");
    egm_config_t *c;
    assert_int_equal(egm_config_create(&c), EGM_OK);
    /* The library reads a file as a client. */
    assert_int_equal(egm_config_load_file(c, path), EGM_OK);
    assert_int_equal(egm_config_get_int(c, "replica_num"), 2);
    assert_int_equal(egm_config_get_int(c, "rpc_timeout_ms"), 700);
    assert_int_equal(egm_config_get_size(c, "global_segment_size"), 0);
    assert_false(egm__config_is_set(c, "global_segment_size"));
    assert_int_equal(egm_config_get_int(c, "port"), 50051);
    egm_config_destroy(c);

    assert_int_equal(egm_config_create(&c), EGM_OK);
    assert_int_equal(egm__config_load_file_as(c, path, EGM_ROLE_PROVIDER), EGM_OK);
    assert_int_equal(egm_config_get_int(c, "replica_num"), 2);
    assert_int_equal(egm_config_get_size(c, "global_segment_size"), 1ull << 30);
    assert_int_equal(egm_config_get_int(c, "port"), 50051);
    assert_int_equal(egm_config_get_int(c, "rpc_timeout_ms"), 5000);
    egm_config_destroy(c);

    assert_int_equal(egm_config_create(&c), EGM_OK);
    assert_int_equal(egm__config_load_file_as(c, path, EGM_ROLE_MASTER), EGM_OK);
    assert_int_equal(egm_config_get_int(c, "port"), 6000);
    assert_int_equal(egm_config_get_size(c, "global_segment_size"), 0);
    /* The demo runs every role. */
    assert_int_equal(egm__config_load_file_as(c, path, EGM_ROLE_ALL), EGM_OK);
    assert_int_equal(egm_config_get_size(c, "global_segment_size"), 1ull << 30);
    assert_int_equal(egm_config_get_int(c, "rpc_timeout_ms"), 700);

    /* Another role's section is still checked: a typo there is an error. */
    write_file(path, "[master]\nprot = 6000\n");
    assert_int_equal(egm_config_load_file(c, path), EGM_ERR_CONFIG);
    char want[256];
    snprintf(want, sizeof(want), "%s:2: unknown configuration key \"prot\"", path);
    assert_string_equal(egm_last_error(), want);
    write_file(path, "[provider]\nglobal_segment_size = lots\n");
    assert_int_equal(egm_config_load_file(c, path), EGM_ERR_CONFIG);
    assert_error_contains(":2: global_segment_size:");

    /* An unknown section names the file and the line. */
    write_file(path, "port = 6001\n\n[servers]\nport = 6002\n");
    assert_int_equal(egm_config_load_file(c, path), EGM_ERR_CONFIG);
    snprintf(want, sizeof(want),
             "%s:3: unknown section [servers] (accepted: [master], [provider], [client])", path);
    assert_string_equal(egm_last_error(), want);
    write_file(path, "[client\nport = 6002\n");
    assert_int_equal(egm_config_load_file(c, path), EGM_ERR_CONFIG);
    assert_error_contains(":1: a section header is [master], [provider] or [client]");
    egm_config_destroy(c);
}

/* Every key says which processes it affects; the one-shot commands' help
 * leaves out the capacity keys. */
static void test_key_roles(void **state)
{
    (void)state;
    size_t n;
    const egm_config_key_t *keys = egm__config_keys(&n);
    for (size_t i = 0; i < n; i++) {
        assert_true((keys[i].roles & EGM_ROLE_ALL) != 0);
        if ((keys[i].roles & EGM_KEY_CAPACITY) != 0)
            assert_true((keys[i].roles & EGM_ROLE_PROVIDER) != 0);
    }
    assert_int_equal(egm__config_find_key("port")->roles, EGM_ROLE_MASTER);
    assert_true((egm__config_find_key("global_segment_size")->roles & EGM_KEY_CAPACITY) != 0);
    assert_true((egm__config_find_key("auth_token")->roles & EGM_ROLE_ALL) == EGM_ROLE_ALL);
}

/* NULL arguments answer INVALID_ARG as every other config call does, never crash. */
static void test_create_copy_null(void **state)
{
    (void)state;
    egm_config_t *c = NULL, *copy = NULL;
    assert_int_equal(egm_config_create(NULL), EGM_ERR_INVALID_ARG);
    assert_int_equal(egm_config_copy(NULL, &copy), EGM_ERR_INVALID_ARG);
    assert_null(copy);
    assert_int_equal(egm_config_create(&c), EGM_OK);
    assert_int_equal(egm_config_copy(c, NULL), EGM_ERR_INVALID_ARG);
    egm_config_destroy(c);
}

static void test_env(void **state)
{
    (void)state;
    egm_config_t *c;
    assert_int_equal(egm_config_create(&c), EGM_OK);
    assert_int_equal(setenv("EGMSTORE_GLOBAL_SEGMENT_SIZE", "1GiB", 1), 0);
    assert_int_equal(setenv("EGMSTORE_PROTOCOL", "tcp", 1), 0);
    assert_int_equal(setenv("EGMSTORE", "not a key: no underscore", 1), 0);
    /* not configuration keys: the mooncake.store stand-in's switch, the tests' binary */
    assert_int_equal(setenv("EGMSTORE_AS_MOONCAKE", "1", 1), 0);
    assert_int_equal(setenv("EGMSTORE_BIN", "/x/egmstore", 1), 0);
    assert_int_equal(egm_config_load_env(c), EGM_OK);
    assert_int_equal(egm_config_get_size(c, "global_segment_size"), 1ull << 30);
    assert_string_equal(egm_config_get(c, "protocol"), "tcp");
    assert_true(egm__config_is_set(c, "protocol"));

    assert_int_equal(setenv("EGMSTORE_PROTOCOL", "rdma", 1), 0);
    assert_int_equal(egm_config_load_env(c), EGM_ERR_CONFIG);
    assert_error_contains("EGMSTORE_PROTOCOL");
    assert_error_contains("auto|nvlink|shm|tcp");
    assert_int_equal(unsetenv("EGMSTORE_PROTOCOL"), 0);

    assert_int_equal(setenv("EGMSTORE_FOO", "1", 1), 0);
    assert_int_equal(egm_config_load_env(c), EGM_ERR_CONFIG);
    assert_error_contains("EGMSTORE_FOO");
    assert_int_equal(unsetenv("EGMSTORE_FOO"), 0);
    assert_int_equal(unsetenv("EGMSTORE_GLOBAL_SEGMENT_SIZE"), 0);
    /* only those two names: a key that merely starts like one is still checked */
    assert_int_equal(setenv("EGMSTORE_AS_MOONCAKEX", "1", 1), 0);
    assert_int_equal(egm_config_load_env(c), EGM_ERR_CONFIG);
    assert_error_contains("EGMSTORE_AS_MOONCAKEX");
    assert_int_equal(unsetenv("EGMSTORE_AS_MOONCAKEX"), 0);
    assert_int_equal(unsetenv("EGMSTORE_AS_MOONCAKE"), 0);
    assert_int_equal(unsetenv("EGMSTORE_BIN"), 0);
    assert_int_equal(unsetenv("EGMSTORE"), 0);
    egm_config_destroy(c);
}

static void test_flags(void **state)
{
    (void)state;
    egm_config_t *c;
    assert_int_equal(egm_config_create(&c), EGM_OK);
    assert_int_equal(egm__config_set_flag(c, "--global-segment-size", "3GiB"), EGM_OK);
    assert_int_equal(egm_config_get_size(c, "global_segment_size"), 3ull << 30);
    assert_int_equal(egm__config_set_flag(c, "--global_segment_size", "4GiB"), EGM_OK);
    assert_int_equal(egm_config_get_size(c, "global_segment_size"), 4ull << 30);
    assert_int_equal(egm__config_set_flag(c, "--master", "10.0.0.1:7000"), EGM_OK);
    assert_string_equal(egm_config_get(c, "master_server_addr"), "10.0.0.1:7000");
    assert_int_equal(egm__config_set_flag(c, "--master-server-addr", "10.0.0.2:7000"), EGM_OK);
    assert_string_equal(egm_config_get(c, "master_server_addr"), "10.0.0.2:7000");

    assert_int_equal(egm__config_set_flag(c, "--bogus-flag", "1"), EGM_ERR_CONFIG);
    assert_error_contains("--bogus-flag");
    assert_int_equal(egm__config_set_flag(c, "--port", "70000"), EGM_ERR_CONFIG);
    assert_string_equal(egm_last_error(), "port: 70000 is out of range 0..65535");
    char longflag[300];
    memset(longflag, 'x', sizeof(longflag) - 1);
    longflag[sizeof(longflag) - 1] = '\0';
    assert_int_equal(egm__config_set_flag(c, longflag, "1"), EGM_ERR_CONFIG);
    egm_config_destroy(c);
}

/* The config takes addr as master_server_addr when the client's parser
 * does, and refuses it with the parser's words. */
static void assert_same_verdict(egm_config_t *c, const char *addr)
{
    char host[EGM_SOCK_HOST_MAX], sock_error[512], want[600];
    uint16_t port;
    egm_status_t sock = egm__sock_split_peer_hostport(addr, host, sizeof(host), &port);
    snprintf(sock_error, sizeof(sock_error), "%s", egm_last_error());
    egm_status_t config = egm_config_set(c, "master_server_addr", addr);
    if ((sock == EGM_OK) != (config == EGM_OK))
        fail_msg("\"%s\": the client's parser says %d, the config %d", addr, sock, config);
    if (sock != EGM_OK) {
        snprintf(want, sizeof(want), "master_server_addr: %s", sock_error);
        assert_string_equal(egm_last_error(), want);
    }
}

/* master_server_addr is checked where it is given (file, environment, flag,
 * API), not at connect time: a host and a port 1..65535, IPv6 in brackets. */
static void test_master_addr_validated(void **state)
{
    (void)state;
    egm_config_t *c;
    assert_int_equal(egm_config_create(&c), EGM_OK);
    static const char *const good[] = {"127.0.0.1:50051", "localhost:1", "node-1.example:65535",
                                       "[::1]:50051", "[fe80::1%eth0]:7000"};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        if (egm_config_set(c, "master_server_addr", good[i]) != EGM_OK)
            fail_msg("\"%s\" refused: %s", good[i], egm_last_error());
        assert_string_equal(egm_config_get(c, "master_server_addr"), good[i]);
    }
    static const struct {
        const char *addr, *says;
    } bad[] = {
        {"host:70000", "port must be 1..65535"},
        {"host:0", "port must be 1..65535"},
        {"host:", "port must be 1..65535"},
        {"host:80x", "port must be 1..65535"},
        {"host:-1", "port must be 1..65535"},
        {"host:+80", "port must be 1..65535"},
        {"host:0000080", "port must be 1..65535"},
        {"host", "has no port"},
        {"", "has no port"},
        {":50051", "has no host"},
        {"[]:50051", "has no host"},
        {"::1:50051", "an IPv6 address goes in brackets: [::1]:50051"},
        {"[::1]50051", "is not HOST:PORT"},
        {"[::1", "is not HOST:PORT"},
        {"my host:80", "contains a space"},
        {"ho\nst:80", "control character"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (egm_config_set(c, "master_server_addr", bad[i].addr) != EGM_ERR_CONFIG)
            fail_msg("\"%s\" accepted", bad[i].addr);
        assert_error_contains("master_server_addr");
        assert_error_contains(bad[i].says);
    }
    /* The last good value stays. */
    assert_string_equal(egm_config_get(c, "master_server_addr"), "[fe80::1%eth0]:7000");
    /* One parser: the config refuses what egm__sock_split_peer_hostport (the
     * client's) refuses, in its words, and takes what it takes. They used to
     * disagree (a 7-digit port, a host longer than the client holds). */
    static const char *const both[] = {"host:0",  "::1:50051", "[::1]:0",    "host:0000080",
                                       ":1",      "a b:1",     "[::1]50051", "10.0.0.1",
                                       "x:65535", "[::1]:1"};
    for (size_t i = 0; i < sizeof(both) / sizeof(both[0]); i++)
        assert_same_verdict(c, both[i]);
    char long_host[EGM_SOCK_HOST_MAX + 8];
    memset(long_host, 'h', sizeof(long_host) - 3);
    memcpy(long_host + sizeof(long_host) - 3, ":1", 3);
    assert_same_verdict(c, long_host);
    /* The --master alias and the environment go through the same check. */
    assert_int_equal(egm__config_set_flag(c, "--master", "10.0.0.1:70000"), EGM_ERR_CONFIG);
    assert_error_contains("port must be 1..65535");
    assert_int_equal(setenv("EGMSTORE_MASTER_SERVER_ADDR", "10.0.0.1", 1), 0);
    assert_int_equal(egm_config_load_env(c), EGM_ERR_CONFIG);
    assert_error_contains("EGMSTORE_MASTER_SERVER_ADDR");
    assert_error_contains("has no port");
    assert_int_equal(unsetenv("EGMSTORE_MASTER_SERVER_ADDR"), 0);
    egm_config_destroy(c);
}

static void test_get_bool_and_unknown_getters(void **state)
{
    (void)state;
    /* No key of this release is a bool; egm_config_get_bool reads any value as
     * true|false|1|0|yes|no|on|off and answers 0 for anything else. */
    egm_config_t *c;
    assert_int_equal(egm_config_create(&c), EGM_OK);
    assert_int_equal(egm_config_set(c, "data_port", "1"), EGM_OK);
    assert_int_equal(egm_config_get_bool(c, "data_port"), 1);
    assert_int_equal(egm_config_set(c, "data_port", "0"), EGM_OK);
    assert_int_equal(egm_config_get_bool(c, "data_port"), 0);
    assert_int_equal(egm_config_set(c, "local_hostname", "YES"), EGM_OK);
    assert_int_equal(egm_config_get_bool(c, "local_hostname"), 1);
    assert_int_equal(egm_config_set(c, "local_hostname", "off"), EGM_OK);
    assert_int_equal(egm_config_get_bool(c, "local_hostname"), 0);
    assert_int_equal(egm_config_get_bool(c, "protocol"), 0);
    assert_int_equal(egm_config_get_bool(c, "nope"), 0);
    assert_int_equal(egm_config_get_int(c, "nope"), 0);
    assert_int_equal(egm_config_get_size(c, "nope"), 0);
    egm_config_destroy(c);
}

/* The GPU pressure keys: sizes (0 = unbounded) and a bool, checked when set. */
static void test_nvlink_pressure_keys(void **state)
{
    (void)state;
    egm_config_t *c;
    assert_int_equal(egm_config_create(&c), EGM_OK);
    assert_int_equal(egm_config_get_size(c, "nvlink_max_inflight_bytes"), 0);
    assert_int_equal(egm_config_get_bool(c, "nvlink_low_priority_stream"), 0);
    assert_int_equal(egm_config_set(c, "nvlink_max_inflight_bytes", "64MiB"), EGM_OK);
    assert_int_equal(egm_config_get_size(c, "nvlink_max_inflight_bytes"), 64ull << 20);
    assert_int_equal(egm_config_set_pair(c, "nvlink_chunk_size = 2 MiB"), EGM_OK);
    assert_int_equal(egm_config_get_size(c, "nvlink_chunk_size"), 2ull << 20);
    assert_int_equal(egm_config_set(c, "nvlink_chunk_size", "-1"), EGM_ERR_CONFIG);
    assert_error_contains("nvlink_chunk_size");
    assert_int_equal(egm_config_set(c, "nvlink_low_priority_stream", "yes"), EGM_OK);
    assert_int_equal(egm_config_get_bool(c, "nvlink_low_priority_stream"), 1);
    assert_int_equal(egm_config_set(c, "nvlink_low_priority_stream", "low"), EGM_ERR_CONFIG);
    assert_error_contains("nvlink_low_priority_stream");
    egm_config_destroy(c);
}

static void test_file_refuses_devices_and_nul_bytes(void **state)
{
    (void)state;
    egm_config_t *c;
    assert_int_equal(egm_config_create(&c), EGM_OK);
    assert_int_equal(egm_config_load_file(c, "/dev/zero"), EGM_ERR_CONFIG);
    assert_non_null(strstr(egm_last_error(), "not a regular file"));
    char path[128];
    temp_path(path, sizeof(path));
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    assert_true(fd >= 0);
    static const char text[] = "port = 1\0junk\n";
    assert_int_equal(write(fd, text, sizeof(text) - 1), (ssize_t)(sizeof(text) - 1));
    close(fd);
    assert_int_equal(egm_config_load_file(c, path), EGM_ERR_CONFIG);
    assert_non_null(strstr(egm_last_error(), ":1: NUL byte"));
    assert_string_equal(egm_config_get(c, "port"), "50051"); /* nothing half-applied */
    egm_config_destroy(c);
}

static void write_token_file(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    assert_int_equal(fputs(text, f) >= 0, 1);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(chmod(path, mode), 0);
}

/* auth_token / auth_token_file: the trailing newline goes, a file others may
 * read, both keys, an empty or multi-line file are errors naming the key and
 * never the token. */
static void test_auth_token_keys(void **state)
{
    (void)state;
    char path[128];
    snprintf(path, sizeof(path), "%s/t", tmp_dir);
    char token[EGM_AUTH_TOKEN_MAX + 1];
    egm_config_t *c;
    assert_int_equal(egm_config_create(&c), EGM_OK);

    assert_int_equal(egm__config_auth_token(c, token, sizeof(token)), EGM_OK);
    assert_string_equal(token, ""); /* none by default */
    assert_int_equal(egm_config_set(c, "auth_token", "inline-secret"), EGM_OK);
    assert_int_equal(egm__config_auth_token(c, token, sizeof(token)), EGM_OK);
    assert_string_equal(token, "inline-secret");

    write_token_file(path, "file-secret\r\n", 0600);
    assert_int_equal(egm_config_set(c, "auth_token_file", path), EGM_OK);
    assert_int_equal(egm__config_auth_token(c, token, sizeof(token)), EGM_ERR_CONFIG);
    assert_non_null(strstr(egm_last_error(), "both set"));
    assert_int_equal(egm_config_set(c, "auth_token", ""), EGM_OK);
    assert_int_equal(egm__config_auth_token(c, token, sizeof(token)), EGM_OK);
    assert_string_equal(token, "file-secret");

    const mode_t bad_modes[] = {0640, 0604, 0660};
    for (size_t i = 0; i < 3; i++) {
        assert_int_equal(chmod(path, bad_modes[i]), 0);
        assert_int_equal(egm__config_auth_token(c, token, sizeof(token)), EGM_ERR_CONFIG);
        assert_non_null(strstr(egm_last_error(), "auth_token_file"));
        assert_null(strstr(egm_last_error(), "file-secret"));
        assert_string_equal(token, "");
    }
    write_token_file(path, "\n", 0600);
    assert_int_equal(egm__config_auth_token(c, token, sizeof(token)), EGM_ERR_CONFIG);
    write_token_file(path, "two\nlines\n", 0600);
    assert_int_equal(egm__config_auth_token(c, token, sizeof(token)), EGM_ERR_CONFIG);
    assert_null(strstr(egm_last_error(), "lines"));
    unlink(path);
    assert_int_equal(egm__config_auth_token(c, token, sizeof(token)), EGM_ERR_CONFIG);
    assert_non_null(strstr(egm_last_error(), "auth_token_file"));
    egm_config_destroy(c);

    assert_true(egm__token_equal("abc", "abc", 3));
    assert_false(egm__token_equal("abc", "abd", 3));
    assert_false(egm__token_equal("abc", "ab", 2));
    assert_false(egm__token_equal("abc", "abcd", 4));
    assert_false(egm__token_equal("", "", 0)); /* an empty token never matches */
}

/* Every field equals what the public getters read from the key's text. */
static void assert_settings_match_text(const egm_config_t *c)
{
    size_t n;
    const egm_config_key_t *keys = egm__config_keys(&n);
    const egm_settings_t *s = egm__config_settings(c);
    for (size_t i = 0; i < n; i++) {
        const egm_config_key_t *k = &keys[i];
        const char *text = egm_config_get(c, k->name);
        switch (k->type) {
        case EGM_CFG_STRING: {
            const char *field;
            memcpy(&field, (const char *)s + k->offset, sizeof(field));
            assert_ptr_equal(field, text); /* the stored text itself */
            break;
        }
        case EGM_CFG_INT:
            assert_int_equal(egm__config_field_int(c, k), egm_config_get_int(c, k->name));
            break;
        case EGM_CFG_SIZE:
            assert_int_equal(egm__config_field_int(c, k), egm_config_get_size(c, k->name));
            break;
        case EGM_CFG_BOOL:
            assert_int_equal(egm__config_field_int(c, k), egm_config_get_bool(c, k->name));
            break;
        case EGM_CFG_ENUM: {
            int found = 0;
            for (const egm_config_choice_t *ch = k->choices; ch->name != NULL; ch++)
                if (strcmp(ch->name, text) == 0) {
                    assert_int_equal(egm__config_field_int(c, k), ch->value);
                    found = 1;
                }
            assert_true(found);
            break;
        }
        case EGM_CFG_RATIO:
            assert_true(egm__config_field_ratio(c, k) == strtod(text, NULL));
            break;
        }
        assert_int_equal(egm__config_field_is_set(c, k->offset), egm__config_is_set(c, k->name));
        assert_ptr_equal(egm__config_field_text(c, k->offset), text);
    }
}

/* The table binds each key to its own settings field, in the struct's order,
 * and each enum word to its value. */
static void test_settings_table_binds_fields(void **state)
{
    (void)state;
    size_t n;
    const egm_config_key_t *keys = egm__config_keys(&n);
    for (size_t i = 1; i < n; i++)
        assert_true(keys[i].offset > keys[i - 1].offset);
    assert_int_equal(egm__config_find_key("log_level")->offset,
                     offsetof(egm_settings_t, log_level));
    assert_int_equal(egm__config_find_key("fd_allowed_gid")->offset,
                     offsetof(egm_settings_t, fd_allowed_gid));
    assert_true(keys[n - 1].offset + sizeof(int64_t) <= sizeof(egm_settings_t));
    for (size_t i = 0; i < n; i++)
        assert_true((keys[i].type == EGM_CFG_ENUM) == (keys[i].choices != NULL));

    static const struct {
        const char *key, *word;
        int value;
    } words[] = {
        {"log_level", "error", EGM_LOG_ERROR},
        {"log_level", "warn", EGM_LOG_WARN},
        {"log_level", "info", EGM_LOG_INFO},
        {"log_level", "debug", EGM_LOG_DEBUG},
        {"log_level", "trace", EGM_LOG_TRACE},
        {"protocol", "auto", EGM_PROTOCOL_AUTO},
        {"protocol", "nvlink", EGM_PROTOCOL_NVLINK},
        {"protocol", "shm", EGM_PROTOCOL_SHM},
        {"protocol", "tcp", EGM_PROTOCOL_TCP},
        {"placement_strategy", "random", EGM_PLACEMENT_RANDOM},
        {"placement_strategy", "free_ratio_first", EGM_PLACEMENT_FREE_RATIO_FIRST},
        {"placement_strategy", "local_first", EGM_PLACEMENT_LOCAL_FIRST},
        {"pool_memory", "host", EGM_POOL_MEMORY_HOST},
        {"pool_memory", "host_numa", EGM_POOL_MEMORY_HOST_NUMA},
        {"pool_memory", "device", EGM_POOL_MEMORY_DEVICE},
        {"egm_handle_type", "auto", EGM_HANDLE_TYPE_AUTO},
        {"egm_handle_type", "fabric", EGM_HANDLE_TYPE_FABRIC},
        {"egm_handle_type", "posix_fd", EGM_HANDLE_TYPE_POSIX_FD},
    };
    egm_config_t *c;
    assert_int_equal(egm_config_create(&c), EGM_OK);
    const egm_settings_t *s = egm__config_settings(c);
    for (size_t i = 0; i < sizeof(words) / sizeof(words[0]); i++) {
        assert_int_equal(egm_config_set(c, words[i].key, words[i].word), EGM_OK);
        assert_int_equal(egm__config_field_int(c, egm__config_find_key(words[i].key)),
                         words[i].value);
    }
    assert_int_equal(s->protocol, EGM_PROTOCOL_TCP);
    assert_int_equal(s->pool_memory, EGM_POOL_MEMORY_DEVICE);
    char buf[128];
    assert_string_equal(
        egm__config_choices_text(egm__config_find_key("protocol"), buf, sizeof(buf)),
        "auto|nvlink|shm|tcp");
    /* --help's accepted values, from the same table */
    static const struct {
        const char *key, *range;
    } ranges[] = {{"port", "0..65535"},
                  {"http_port", "-1..65535"},
                  {"max_mr_size", "4 KiB and up"},
                  {"max_frame_size", "1 KiB..1 GiB"},
                  {"global_segment_size", "0..2^63-1 bytes"},
                  {"nvlink_chunk_size", "0, or 4 KiB and up"},
                  {"nvlink_bounce_buffer", "0, or 8 MiB to 4 GiB"},
                  {"protocol", "auto|nvlink|shm|tcp"},
                  {"eviction_ratio", "0..1"},
                  {"prewarm", ""},
                  {"local_hostname", ""}};
    for (size_t i = 0; i < sizeof(ranges) / sizeof(ranges[0]); i++) {
        egm__config_range_text(egm__config_find_key(ranges[i].key), buf, sizeof(buf));
        assert_string_equal(buf, ranges[i].range);
    }
    egm_config_destroy(c);
}

/* The settings follow every way of setting a key (defaults, set, pair, file,
 * env, flag, copy), and a refused value changes neither text nor field. */
static void test_settings_follow_every_set(void **state)
{
    (void)state;
    egm_config_t *c, *copy;
    assert_int_equal(egm_config_create(&c), EGM_OK);
    const egm_settings_t *s = egm__config_settings(c);
    assert_settings_match_text(c);
    assert_int_equal(s->port, 50051);
    assert_int_equal(s->http_port, 9003);
    assert_int_equal(s->max_mr_size, 1ull << 30);
    assert_int_equal(s->prewarm, 1);
    assert_int_equal(s->log_level, EGM_LOG_INFO);
    assert_int_equal(s->protocol, EGM_PROTOCOL_AUTO);
    assert_string_equal(s->master_server_addr, "127.0.0.1:50051");
    assert_string_equal(s->local_hostname, "");
    assert_int_equal(s->fd_allowed_gid, -1);
    assert_true(s->eviction_high_watermark_ratio == 0.90 && s->eviction_ratio == 0.05);
    assert_false(EGM_CONFIG_IS_SET(c, port));
    assert_string_equal(EGM_CONFIG_TEXT(c, max_mr_size), "1GiB");

    assert_int_equal(egm_config_set(c, "port", "6000"), EGM_OK);
    assert_int_equal(egm_config_set_pair(c, "global_segment_size = 4 GB"), EGM_OK);
    assert_int_equal(egm_config_set(c, "prewarm", "off"), EGM_OK);
    assert_int_equal(egm_config_set(c, "log_level", "debug"), EGM_OK);
    assert_int_equal(egm__config_set_flag(c, "--local-hostname", "node-7"), EGM_OK);
    assert_int_equal(egm__config_set_flag(c, "--master", "10.0.0.1:7000"), EGM_OK);
    assert_int_equal(egm__config_set_flag(c, "--eviction-ratio", "0.125"), EGM_OK);
    assert_int_equal(setenv("EGMSTORE_PLACEMENT_STRATEGY", "local_first", 1), 0);
    assert_int_equal(setenv("EGMSTORE_EVICTION_HIGH_WATERMARK_RATIO", "0.75", 1), 0);
    assert_int_equal(egm_config_load_env(c), EGM_OK);
    assert_int_equal(unsetenv("EGMSTORE_PLACEMENT_STRATEGY"), 0);
    assert_int_equal(unsetenv("EGMSTORE_EVICTION_HIGH_WATERMARK_RATIO"), 0);
    assert_int_equal(s->port, 6000);
    assert_int_equal(s->global_segment_size, 4ull << 30);
    assert_int_equal(s->prewarm, 0);
    assert_int_equal(s->log_level, EGM_LOG_DEBUG);
    assert_string_equal(s->local_hostname, "node-7");
    assert_string_equal(s->master_server_addr, "10.0.0.1:7000");
    assert_int_equal(s->placement_strategy, EGM_PLACEMENT_LOCAL_FIRST);
    assert_true(s->eviction_ratio == 0.125 && s->eviction_high_watermark_ratio == 0.75);
    assert_true(EGM_CONFIG_IS_SET(c, port));
    assert_false(EGM_CONFIG_IS_SET(c, data_port));
    assert_string_equal(EGM_CONFIG_TEXT(c, global_segment_size), "4 GB");
    assert_settings_match_text(c);

    /* refused: nothing changes */
    assert_int_equal(egm_config_set(c, "port", "70000"), EGM_ERR_CONFIG);
    assert_int_equal(egm_config_set(c, "protocol", "rdma"), EGM_ERR_CONFIG);
    assert_int_equal(egm_config_set(c, "max_mr_size", "1XB"), EGM_ERR_CONFIG);
    assert_int_equal(setenv("EGMSTORE_EVICTION_RATIO", "2", 1), 0);
    assert_int_equal(egm_config_load_env(c), EGM_ERR_CONFIG);
    assert_int_equal(unsetenv("EGMSTORE_EVICTION_RATIO"), 0);
    assert_error_contains("EGMSTORE_EVICTION_RATIO: eviction_ratio: \"2\" is not a number in 0..1");
    assert_int_equal(s->port, 6000);
    assert_int_equal(s->protocol, EGM_PROTOCOL_AUTO);
    assert_int_equal(s->max_mr_size, 1ull << 30);
    assert_settings_match_text(c);

    /* a file, its own section and another role's */
    char path[128];
    temp_path(path, sizeof(path));
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs("data_port = 1234\n[master]\nport = 7\n[client]\nnvlink_chunk_size = 2MiB\n"
          "eviction_ratio = 0.5\n",
          f);
    assert_int_equal(fclose(f), 0);
    assert_int_equal(egm_config_load_file(c, path), EGM_OK);
    assert_int_equal(s->data_port, 1234);
    assert_int_equal(s->port, 6000); /* [master]: checked, not set */
    assert_int_equal(s->nvlink_chunk_size, 2ull << 20);
    assert_true(s->eviction_ratio == 0.5);
    assert_settings_match_text(c);

    assert_int_equal(egm_config_copy(c, &copy), EGM_OK);
    egm_config_destroy(c);
    const egm_settings_t *cs = egm__config_settings(copy);
    assert_int_equal(cs->port, 6000);
    assert_string_equal(cs->local_hostname, "node-7");
    assert_true(EGM_CONFIG_IS_SET(copy, local_hostname));
    assert_settings_match_text(copy);
    egm_config_destroy(copy);
}

/* docs/configuration.md's key table: one row per key in the table's order,
 * whose key, type, default, accepted values and readers are what the table
 * says (egm__config_doc_row); only the meaning column is the doc's own. */
static void test_docs_key_table(void **state)
{
    (void)state;
    const char *root = getenv("EGM_SOURCE_DIR");
    if (root == NULL)
        fail_msg("EGM_SOURCE_DIR is not set (ctest sets it)");
    char path[1024];
    snprintf(path, sizeof(path), "%s/docs/configuration.md", root);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        fail_msg("%s: cannot open", path);
    size_t n, row = 0;
    const egm_config_key_t *keys = egm__config_keys(&n);
    char line[8192], want[1024];
    int in_keys = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "## ", 3) == 0) {
            in_keys = strcmp(line, "## Keys\n") == 0;
            continue;
        }
        if (!in_keys || strncmp(line, "| `", 3) != 0)
            continue;
        if (row >= n)
            fail_msg("docs/configuration.md lists more keys than src/common/config.c: %s", line);
        egm__config_doc_row(&keys[row], want, sizeof(want));
        if (strncmp(line, want, strlen(want)) != 0 || line[strlen(want)] != ' ')
            fail_msg("docs/configuration.md's row %zu does not match src/common/config.c's "
                     "key table.\n  doc:  %.*s\n  want: %s <meaning>",
                     row + 1, (int)strcspn(line, "\n"), line, want);
        row++;
    }
    fclose(f);
    if (row != n)
        fail_msg("docs/configuration.md lists %zu keys, src/common/config.c %zu (next: %s)", row, n,
                 keys[row].name);
}

/* The HA keys: master_server_addr takes etcd:// and a list of endpoints
 * (each checked as an address), etcd_endpoints a list or nothing, cluster_id
 * a short name fit for an etcd key; each refusal names the key. */
static void test_ha_keys(void **state)
{
    (void)state;
    egm_config_t *c;
    assert_int_equal(egm_config_create(&c), EGM_OK);
    const char *good[][2] = {
        {"master_server_addr", "etcd://127.0.0.1:2379"},
        {"master_server_addr", "etcd://10.0.0.1:2379;10.0.0.2:2379,http://[::1]:2379/"},
        {"etcd_endpoints", "127.0.0.1:2379;127.0.0.2:2379"},
        {"etcd_endpoints", ""},
        {"cluster_id", "prod-kv_1.a"},
        {"enable_ha", "on"},
        {"ha_lease_ttl", "60"},
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        assert_int_equal(egm_config_set(c, good[i][0], good[i][1]), EGM_OK);
    const char *bad[][2] = {
        {"master_server_addr", "etcd://"},
        {"master_server_addr", "etcd://127.0.0.1"},
        {"master_server_addr", "etcd://127.0.0.1:2379;;"},
        {"etcd_endpoints", "127.0.0.1:0"},
        {"cluster_id", ""},
        {"cluster_id", "a/b"},
        {"cluster_id", "01234567890123456789012345678901234567890123456789012345678901234"},
        {"ha_lease_ttl", "1"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (egm_config_set(c, bad[i][0], bad[i][1]) != EGM_ERR_CONFIG)
            fail_msg("%s = \"%s\" accepted", bad[i][0], bad[i][1]);
        assert_non_null(strstr(egm_last_error(), bad[i][0]));
    }
    egm_config_destroy(c);
}

/* Host names and zones are checked where given, by the key's name (a newline
 * in local_hostname failed only at mount, as segment.tcp_endpoint). */
static void test_host_name_keys(void **state)
{
    (void)state;
    egm_config_t *c;
    assert_int_equal(egm_config_create(&c), EGM_OK);
    const char *good[][2] = {
        {"local_hostname", ""},         {"local_hostname", "node-7.rack2"},
        {"local_hostname", "10.0.0.5"}, {"listen_address", "::"},
        {"zone", "rack 1, feed A"},     {"zone", ""},
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        assert_int_equal(egm_config_set(c, good[i][0], good[i][1]), EGM_OK);
    const char *bad[][2] = {
        {"local_hostname", "x\ny"},      {"local_hostname", "a b"}, {"listen_address", ""},
        {"listen_address", "0.0.0.0\t"}, {"zone", "a\x01b"},        {"zone", "a\x7f"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        if (egm_config_set(c, bad[i][0], bad[i][1]) != EGM_ERR_CONFIG)
            fail_msg("%s = \"%s\" accepted", bad[i][0], bad[i][1]);
        assert_non_null(strstr(egm_last_error(), bad[i][0]));
    }
    egm_config_destroy(c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ha_keys),
        cmocka_unit_test(test_host_name_keys),
        cmocka_unit_test_setup_teardown(test_file_refuses_devices_and_nul_bytes, setup_tmp_dir,
                                        teardown_tmp_dir),
        cmocka_unit_test_setup_teardown(test_key_table_names_order_defaults, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_sizes_every_unit, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_sizes_refused, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_format_size, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_set_validates_each_type, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_file, setup_tmp_dir, teardown_tmp_dir),
        cmocka_unit_test_setup_teardown(test_file_sections, setup_tmp_dir, teardown_tmp_dir),
        cmocka_unit_test(test_key_roles),
        cmocka_unit_test_setup_teardown(test_create_copy_null, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_env, egm_test_setup_alloc, egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_flags, egm_test_setup_alloc, egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_master_addr_validated, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_get_bool_and_unknown_getters, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_auth_token_keys, setup_tmp_dir, teardown_tmp_dir),
        cmocka_unit_test_setup_teardown(test_nvlink_pressure_keys, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_settings_table_binds_fields, egm_test_setup_alloc,
                                        egm_test_teardown_alloc),
        cmocka_unit_test_setup_teardown(test_settings_follow_every_set, setup_tmp_dir,
                                        teardown_tmp_dir),
        cmocka_unit_test(test_docs_key_table),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
