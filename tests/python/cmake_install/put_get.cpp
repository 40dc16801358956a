// The C++ side of put_get.c: the public headers included from C++ (their extern "C"), linked
// through `pkg-config --cflags --libs egmstore` against what `cmake --install` wrote
// (tests/python/test_cmake_install.py). Usage: put_get_cpp MASTER KEY PROTOCOL; prints
// "ok LEN" and exits 0 when the bytes read back are those put.
#include <egmstore/egmstore.h>

#include <cstdio>
#include <memory>
#include <stdexcept>
#include <string>

namespace {

void check(egm_status_t status, const char *what)
{
    if (status != EGM_OK)
        throw std::runtime_error(std::string(what) + ": " + egm_status_name(status) + " (" +
                                 egm_last_error() + ")");
}

struct ConfigDeleter {
    void operator()(egm_config_t *c) const
    {
        egm_config_destroy(c);
    }
};
struct ClientDeleter {
    void operator()(egm_client_t *c) const
    {
        egm_client_close(c);
        egm_client_destroy(c);
    }
};
struct BufferDeleter {
    void operator()(void *p) const
    {
        egm_buffer_free(p);
    }
};

} // namespace

int main(int argc, char **argv)
{
    if (argc != 4) {
        std::fprintf(stderr, "usage: %s MASTER KEY PROTOCOL\n", argv[0]);
        return 2;
    }
    try {
        const std::string value = std::string("C++, linked through pkg-config, egmstore ") +
                                  EGMSTORE_VERSION + ", key " + argv[2];
        egm_config_t *raw_config = nullptr;
        check(egm_config_create(&raw_config), "egm_config_create");
        std::unique_ptr<egm_config_t, ConfigDeleter> config(raw_config);
        check(egm_config_set(config.get(), "master_server_addr", argv[1]), "egm_config_set");
        check(egm_config_set(config.get(), "protocol", argv[3]), "egm_config_set");
        egm_client_t *raw_client = nullptr;
        check(egm_client_create(config.get(), &raw_client), "egm_client_create");
        std::unique_ptr<egm_client_t, ClientDeleter> client(raw_client);
        check(egm_put(client.get(), argv[2], value.data(), value.size(), nullptr), "egm_put");
        void *raw_got = nullptr;
        size_t got_len = 0;
        check(egm_get(client.get(), argv[2], &raw_got, &got_len), "egm_get");
        std::unique_ptr<void, BufferDeleter> got(raw_got);
        if (std::string(static_cast<const char *>(got.get()), got_len) != value) {
            std::fprintf(stderr, "put_get.cpp: got %zu bytes, not the %zu put\n", got_len,
                         value.size());
            return 1;
        }
        std::printf("ok %zu\n", got_len);
        return 0;
    } catch (const std::exception &e) {
        std::fprintf(stderr, "put_get.cpp: %s\n", e.what());
        return 1;
    }
}
