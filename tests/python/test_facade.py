"""egmstore.mooncake.MooncakeDistributedStore against a real master and
provider: every method with Mooncake's return conventions (the values below are
what Mooncake's own wheel, 0.3.13.post1, answered for the same calls), setup's
argument forms and errors, calls before setup and after close."""

import logging
import socket

import pytest

from conftest import ReadOnlyPage, unmapped_address
from egmstore import _egmstore
from egmstore.mooncake import MooncakeDistributedStore, ReplicateConfig, SoftPinAction

MIB = 1 << 20
CLOSED = -1010  # UNAVAILABLE_IN_CURRENT_STATUS: egm CLOSED as Mooncake sees it


def setup_store(addr, protocol="tcp", segment=0):
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", segment, 16 * MIB, protocol, "", addr) == 0
    return s


@pytest.fixture(params=["tcp", "shm"])
def protocol(request):
    return request.param


def test_batch_past_one_request(make_cluster):
    """batch_is_exist and batch_remove of more keys than one request to the master carries
    (65536): sent in several, every key answered (they answered -600 for every key)."""
    c = make_cluster(segment="64MiB")
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MIB, 16 * MIB, "tcp", "", c.master_addr) == 0
    assert s.put("first", b"1") == 0 and s.put("last", b"2") == 0
    keys = ["first"] + [f"absent-{i}" for i in range(70000)] + ["", "last"]
    got = s.batch_is_exist(keys)
    assert len(got) == len(keys)
    assert got[0] == 1 and got[-1] == 1  # one in the first request, one in the second
    assert got[1:-2] == [0] * 70000
    # an invalid key is answered in its own slot as in a small batch, the rest sent
    assert got[-2] == s.batch_is_exist([""])[0]
    got = s.batch_remove(keys, True)
    assert got[0] == 0 and got[-1] == 0 and got[-2] == s.batch_remove([""], True)[0]
    assert got[1:-2] == [-704] * 70000
    assert s.batch_is_exist(["first", "last"]) == [0, 0]
    assert s.close() == 0


def test_put_session_sizes_past_memory(make_cluster):
    """A put session whose buffer cannot be made answers a code (it raised MemoryError or
    OverflowError out of batch_put_session_start); the other keys' sessions still open."""
    c = make_cluster(segment="64MiB")
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MIB, 16 * MIB, "tcp", "", c.master_addr) == 0
    got = s.batch_put_session_start(["huge", "past", "ok"], [2**64 - 1, 2**62, 10])
    assert got[0] == -600  # no buffer can have that size
    assert got[1] in (-200, -600)  # -200 where it is memory the process lacks
    assert got[2] == 0
    assert s.batch_put_session_end(["ok"]) == [0]
    assert s.is_exist("ok") == 1 and s.is_exist("huge") == 0 and s.is_exist("past") == 0
    assert s.close() == 0


def test_mooncake_sequence(make_cluster, buffer, protocol):
    """One session of facade calls, each answer as Mooncake gives it."""
    c = make_cluster(segment="64MiB")
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 16 * MIB, 16 * MIB, protocol, "",
                   c.master_addr) == 0
    assert s.health_check() == 0
    # host:port of its data server, as Mooncake answers host:port of its transfer engine
    host, port = s.get_hostname().rsplit(":", 1)
    assert host == "127.0.0.1" and int(port) > 0

    assert s.put("k", b"hello") == 0
    assert s.put("k", b"other") == 0  # existing key: success, value unchanged
    assert s.get("k") == b"hello"
    assert s.get("missing") == b""
    assert s.is_exist("k") == 1
    assert s.is_exist("missing") == 0
    assert s.batch_is_exist(["k", "missing"]) == [1, 0]
    assert s.get_size("k") == 5
    assert s.get_size("missing") == -704
    assert s.remove("k") == -706  # just read: under a live lease
    assert s.remove("k", True) == 0
    assert s.is_exist("k") == 0

    src, dst = buffer(4096), buffer(4096)
    assert s.register_buffer(src.ptr, src.size) == 0
    assert s.register_buffer(dst.ptr, dst.size) == 0
    src.write(0, b"abcdefgh")
    assert s.put_from("pf", src.ptr, 4) == 0
    assert s.get_into("pf", dst.ptr, 4096) == 4
    assert dst.read(0, 4) == b"abcd"
    assert s.register_buffer(src.ptr, src.size) == -600  # twice: INVALID_PARAMS, as Mooncake
    assert s.unregister_buffer(src.ptr + 1) == -600  # never registered
    # Memory that is not there: refused, and the process lives on (egmstore's
    # own answer, not compared with Mooncake's wheel).
    nothing = unmapped_address()
    assert s.register_buffer(nothing, 4096) == -600
    assert s.get_into("pf", nothing, 4096) < 0
    # Memory it may not write: a put's source, no get's destination.
    ro = ReadOnlyPage(b"readonly")
    assert s.register_buffer(ro.addr, ro.size) == 0
    assert s.put_from("ro", ro.addr, 8) == 0
    assert s.get("ro") == b"readonly"
    assert s.get_into("pf", ro.addr, 4096) == -600
    assert s.batch_get_into(["pf", "ro"], [dst.ptr, ro.addr], [4096, 8]) == [4, -600]
    assert s.unregister_buffer(ro.addr) == 0
    ro.close()
    assert s.put("", b"x") == -600  # empty key: INVALID_PARAMS, as Mooncake
    assert s.get_into("pf", dst.ptr, 2) == -600  # too small: INVALID_PARAMS, as Mooncake
    assert s.get_into("missing", dst.ptr, 4096) == -704

    assert s.put_parts("pp", b"ab", b"cd") == 0
    assert s.get("pp") == b"abcd"

    assert s.put("z", b"zz") == 0
    assert s.batch_put_from(["b1", "b2", "z"], [src.ptr, src.ptr + 4, src.ptr],
                            [4, 4, 1]) == [0, 0, 0]
    assert s.get("z") == b"zz"
    assert s.batch_get_into(["b1", "nope", "b2"], [dst.ptr, dst.ptr + 100, dst.ptr + 200],
                            [100, 100, 2]) == [4, -704, -600]
    assert dst.read(0, 4) == b"abcd"

    p, q = src.ptr + 1000, dst.ptr + 1000
    src.write(1000, b"xyz")
    assert s.batch_put_from_multi_buffers(["m1", "m2"], [[p, p + 1], [p + 2]],
                                          [[1, 2], [2]]) == [0, 0]
    assert s.batch_get_into_multi_buffers(["m1", "m2", "m3"], [[q, q + 10], [q + 20], [q + 30]],
                                          [[2, 1], [2], [3]]) == [3, 2, -704]
    assert dst.read(1000, 2) + dst.read(1010, 1) == b"xyz"
    assert dst.read(1020, 2) == b"z\0"  # m2 is the 2 bytes at p + 2: "z" and a zero
    # A key whose lists of addresses and sizes differ: INVALID_PARAMS for every key, found by
    # the binding (a ValueError of its own) after the first key converted; before a config
    # that no put honours, as Mooncake checks the lists first.
    assert issubclass(_egmstore.PartsMismatchError, ValueError)
    assert s.batch_put_from_multi_buffers(["m4", "m5"], [[p], [p, p + 1]],
                                          [[1], [1]]) == [-600, -600]
    assert s.batch_get_into_multi_buffers(["m1", "m2"], [[q, q + 10], [q + 20]],
                                          [[2], [2]]) == [-600, -600]
    dfs = ReplicateConfig()
    dfs.dfs_replica_num = 1  # refused on its own with DFS_SERVICE_UNAVAILABLE (-1601)
    assert s.batch_put_from_multi_buffers(["m4", "m5"], [[p], [p]], [[1], [1]], dfs) == [-1601] * 2
    assert s.batch_put_from_multi_buffers(["m4", "m5"], [[p], [p, p + 1]], [[1], [1]],
                                          dfs) == [-600, -600]
    assert s.batch_is_exist(["m4", "m5"]) == [0, 0]

    assert s.batch_remove(["b2", "nope"]) == [-706, -704]  # b2 was just read
    # Everything left is under a read lease: nothing is removed.
    left = ["pf", "pp", "z", "b1", "b2", "m1", "m2", "ro"]
    assert s.batch_is_exist(left) == [1] * len(left)
    assert s.remove_all() == 0
    assert s.remove_all(True) == len(left)
    assert s.batch_is_exist(left) == [0] * len(left)

    assert s.unregister_buffer(src.ptr) == 0
    assert s.unregister_buffer(dst.ptr) == 0
    assert s.close() == 0
    assert s.health_check() == 1
    assert s.close() == 0


def test_every_call_after_close_answers_closed(cluster, buffer):
    s = setup_store(cluster.master_addr)
    assert s.close() == 0
    check_closed(s, buffer(16))


def test_every_call_before_setup_answers_closed(buffer):
    s = MooncakeDistributedStore()
    assert s.health_check() == 1
    assert s.get_hostname() == ""
    check_closed(s, buffer(16))
    assert s.close() == 0


def check_closed(s, buf):
    assert s.health_check() == 1
    assert s.register_buffer(buf.ptr, 16) == CLOSED
    assert s.unregister_buffer(buf.ptr) == CLOSED
    assert s.put("k", b"v") == CLOSED
    assert s.put_parts("k", b"v") == CLOSED
    assert s.put_from("k", buf.ptr, 1) == CLOSED
    assert s.get("k") == b""
    assert s.get_into("k", buf.ptr, 16) == CLOSED
    assert s.is_exist("k") == CLOSED
    assert s.get_size("k") == CLOSED
    assert s.remove("k") == CLOSED
    assert s.remove_all() == CLOSED
    assert s.batch_put_from(["a", "b"], [buf.ptr] * 2, [1, 1]) == [CLOSED] * 2
    assert s.batch_get_into(["a", "b"], [buf.ptr] * 2, [1, 1]) == [CLOSED] * 2
    assert s.batch_put_from_multi_buffers(["a"], [[buf.ptr]], [[1]]) == [CLOSED]
    assert s.batch_get_into_multi_buffers(["a"], [[buf.ptr]], [[1]]) == [CLOSED]
    assert s.batch_is_exist(["a", "b"]) == [CLOSED] * 2
    assert s.batch_remove(["a"]) == [CLOSED]


def test_setup_dict_form_with_mooncake_defaults(make_cluster):
    c = make_cluster(segment="64MiB")
    s = MooncakeDistributedStore()
    # global_segment_size defaults to 16 MiB, contributed by this client.
    assert s.setup({"local_hostname": "127.0.0.1", "metadata_server": "http://127.0.0.1:8080",
                    "master_server_addr": c.master_addr, "rdma_devices": "",
                    "enable_ssd_offload": False, "replica_num": 1}) == 0
    assert s.health_check() == 0
    assert "egm_client_pool_capacity_bytes 16777216" in s._client.metrics()
    assert s.put("d", b"dict") == 0
    assert s.get("d") == b"dict"
    assert s.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                    "master_server_addr": c.master_addr}) == CLOSED  # already set up
    assert s.close() == 0


def test_invalid_keys_answer_as_mooncake(cluster, buffer):
    """An empty key (Mooncake's answers, measured on 0.3.13.post1) and one longer
    than egmstore's limit, which egmstore can never store: puts answer -600,
    lookups find nothing (0, -704, b""), alone and inside batches, where the
    other keys go through."""
    s = setup_store(cluster.master_addr)
    buf = buffer(64)
    p = buf.ptr
    assert s.register_buffer(p, 64) == 0
    assert s.put("ik/a", b"abc") == 0
    for bad in ("", "k" * 4097):
        assert s.put(bad, b"x") == -600
        assert s.put_from(bad, p, 4) == -600
        assert s.put_parts(bad, b"a", b"b") == -600
        assert s.is_exist(bad) == 0
        assert s.get_size(bad) == -704
        assert s.get(bad) == b""
        assert s.get_into(bad, p, 64) == -704
        assert s.remove(bad) == -704
        assert s.remove(bad, True) == -704
        assert s.batch_is_exist(["ik/a", bad, "ik/missing"]) == [1, 0, 0]
        assert s.batch_get_into(["ik/a", bad, "ik/missing"], [p, p + 16, p + 32],
                                [16, 16, 16]) == [3, -704, -704]
        assert s.batch_get_into_multi_buffers(["ik/a", bad], [[p], [p + 16]], [[3], [4]]) == [3, -704]
        assert s.batch_put_from(["ik/b", bad], [p, p + 16], [4, 4]) == [0, -600]
        assert s.batch_put_from_multi_buffers([bad, "ik/c"], [[p], [p]], [[4], [4]]) == [-600, 0]
        assert s.batch_remove(["ik/b", bad, "ik/missing"]) == [0, -704, -704]
        assert s.remove("ik/c") == 0
    assert s.remove("ik/a", True) == 0
    assert s.unregister_buffer(p) == 0
    assert s.close() == 0


@pytest.mark.parametrize("key,value,accepted", [
    ("global_segment_size", [1], "an int"),
    ("global_segment_size", 1.5, "an int"),
    ("global_segment_size", True, "an int"),
    ("global_segment_size", "16 bytes", "an int"),
    ("global_segment_size", "0x1000", "an int"),
    ("global_segment_size", "-5", "an int"),
    ("local_buffer_size", "x", "an int"),
    ("local_buffer_size", None, "an int"),
    ("local_hostname", 5, "a str"),
    ("protocol", b"tcp", "a str"),
    ("master_server_addr", ["127.0.0.1", 1], "a str"),
    ("rdma_devices", None, "a str"),
    ("metadata_server", 0, "a str"),
    ("replica_num", [1], "a str, int or bool"),
    ("rpc_timeout_ms", 1.5, "a str, int or bool"),
])
def test_setup_dict_form_refuses_wrong_types(cluster, caplog, key, value, accepted):
    """A value of the wrong type answers -600 (as Mooncake's dict form does for its
    sizes) with an error naming the key and the accepted type; nothing is coerced."""
    config = {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
              "master_server_addr": cluster.master_addr, "global_segment_size": 0}
    config[key] = value
    s = MooncakeDistributedStore()
    with caplog.at_level(logging.ERROR, logger="egmstore.mooncake"):
        assert s.setup(config) == -600
    assert f"config[{key!r}] must be {accepted}" in caplog.text
    assert s.health_check() == 1


@pytest.mark.parametrize("text,size", [("4194304", 4 << 20), ("4MB", 4 << 20),
                                       (" 4 mib ", 4 << 20), ("0", 0)])
def test_setup_dict_form_takes_sizes_as_text(make_cluster, text, size):
    c = make_cluster(segment="64MiB")
    s = MooncakeDistributedStore()
    # Measured: Mooncake's dict form reads a size from a str too ("16777216", "16MB").
    assert s.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                    "master_server_addr": c.master_addr, "global_segment_size": text,
                    "local_buffer_size": "16MB", "rpc_timeout_ms": "5000",
                    "enable_ssd_offload": False}) == 0
    assert f"egm_client_pool_capacity_bytes {size}" in s._client.metrics()
    host, port = s.get_hostname().rsplit(":", 1)
    assert (int(port) > 0) == (size > 0)  # a data server only when it contributes
    assert s.close() == 0


def test_setup_dict_form_needs_hostname_and_metadata_server(caplog):
    s = MooncakeDistributedStore()
    with caplog.at_level(logging.ERROR, logger="egmstore.mooncake"):
        assert s.setup({}) == -600
        assert s.setup({"local_hostname": "127.0.0.1"}) == -600
    assert "metadata_server" in caplog.text


def test_setup_argument_errors(cluster):
    s = MooncakeDistributedStore()
    with pytest.raises(TypeError, match="master_server_addr"):
        s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 0, "tcp", "")
    with pytest.raises(TypeError, match="global_segment_size must be int"):
        s.setup("127.0.0.1", "P2PHANDSHAKE", "16MB", 0, "tcp", "", cluster.master_addr)
    with pytest.raises(TypeError, match="local_hostname must be str"):
        s.setup(None, "P2PHANDSHAKE", 0, 0, "tcp", "", cluster.master_addr)
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", -1, 0, "tcp", "", cluster.master_addr) == -600
    assert s.health_check() == 1


MOONCAKE_PROTOCOLS = ["rdma", "efa", "nvlink_intra", "nvmeof", "hip", "barex", "cxl", "ascend"]


def said_protocol(caplog):
    return [r for r in caplog.records
            if r.name == "egmstore.mooncake" and "is Mooncake's" in r.getMessage()]


@pytest.mark.parametrize("protocol", MOONCAKE_PROTOCOLS)
def test_setup_takes_mooncake_protocols_as_auto(cluster, caplog, protocol):
    """vLLM's and SGLang's default ("rdma") and Mooncake's other protocol names:
    the best transport this client has, said once (a warning), and it works."""
    auto = setup_store(cluster.master_addr, "auto")
    best = auto._client.transports()
    assert auto.close() == 0
    # nvlink only with a CUDA driver and a GPU; shm and tcp always.
    assert best in (["nvlink", "shm", "tcp"], ["shm", "tcp"])
    s = MooncakeDistributedStore()
    with caplog.at_level(logging.INFO, logger="egmstore.mooncake"):
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, protocol, "mlx5_0",
                       cluster.master_addr) == 0
    assert s._client.transports() == best  # egmstore's auto
    assert s.transport == best[0]
    said = said_protocol(caplog)
    assert len(said) == 1 and said[0].levelno == logging.WARNING
    text = said[0].getMessage()
    assert repr(protocol) in text and " > ".join(best) in text and f"best {best[0]}" in text
    key = f"proto-{protocol}"
    assert s.put(key, b"v" * 100) == 0
    assert s.get(key) == b"v" * 100
    assert s.remove(key, True) == 0
    assert s.close() == 0
    assert len(said_protocol(caplog)) == 1  # once: nothing more after setup


@pytest.mark.parametrize("protocol,walk", [("tcp", ["tcp"]), ("shm", ["shm"])])
def test_egmstore_protocols_keep_their_meaning(cluster, caplog, protocol, walk):
    s = MooncakeDistributedStore()
    with caplog.at_level(logging.INFO, logger="egmstore.mooncake"):
        assert s.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                        "master_server_addr": cluster.master_addr, "protocol": protocol,
                        "global_segment_size": 0}) == 0
    assert s._client.transports() == walk and s.transport == walk[0]
    assert said_protocol(caplog) == []
    assert s.put("kept-" + protocol, b"x") == 0 and s.get("kept-" + protocol) == b"x"
    assert s.close() == 0
    assert s._client.transports() == []  # closed


def test_transport_before_setup():
    assert MooncakeDistributedStore().transport == ""


@pytest.mark.parametrize("protocol", ["", "RDMA", "infiniband"])
def test_setup_refuses_unknown_protocols(cluster, caplog, protocol):
    s = MooncakeDistributedStore()
    with caplog.at_level(logging.ERROR, logger="egmstore.mooncake"):
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 0, protocol, "mlx5_0",
                       cluster.master_addr) == -1012
    assert repr(protocol) in caplog.text and "tcp, shm, nvlink, auto" in caplog.text
    assert "rdma" in caplog.text  # the Mooncake names it takes
    assert s.health_check() == 1


def test_setup_unreachable_master_and_bad_address(caplog):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    s = MooncakeDistributedStore()
    with caplog.at_level(logging.ERROR, logger="egmstore.mooncake"):
        assert s.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                        "master_server_addr": f"127.0.0.1:{port}",
                        "connect_timeout_ms": 2000}) in (-900, -901)
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 0, "tcp", "", "no-port") == -600
    assert "setup() failed" in caplog.text


def test_hostname_with_port_and_other_protocols(cluster, caplog):
    for protocol in ("auto", "shm", "nvlink"):
        s = MooncakeDistributedStore()
        with caplog.at_level(logging.ERROR, logger="egmstore.mooncake"):
            rc = s.setup("127.0.0.1:0", "P2PHANDSHAKE", 0, 0, protocol, "", cluster.master_addr)
        if protocol == "nvlink" and rc != 0:
            # Accepted by name; without a CUDA driver (CI) egmstore answers NO_CUDA.
            assert rc == -1012 and "CUDA" in caplog.text
            continue
        assert rc == 0
        assert s.get_hostname() == "127.0.0.1:0"  # contributes nothing: no data server
        assert s.close() == 0
    free = socket.socket()
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
    free.close()
    s = MooncakeDistributedStore()
    assert s.setup(f"127.0.0.1:{port}", "P2PHANDSHAKE", 4 * MIB, 4 * MIB, "tcp", "",
                   cluster.master_addr) == 0
    assert s.get_hostname() == f"127.0.0.1:{port}"
    assert s.put("hp", b"x") == 0
    assert s.close() == 0


def test_replicate_config(cluster, buffer, caplog):
    rc = ReplicateConfig()
    assert (rc.replica_num, rc.soft_pin_action, rc.with_hard_pin) == \
        (1, SoftPinAction.PRESERVE, False)
    assert rc.preferred_segments == [] and rc.preferred_segment == ""
    assert rc.prefer_alloc_in_same_node is False
    assert "replica_num: 1" in str(rc)
    # Mooncake 0.3.13.post1 removed with_soft_pin: assigning it raises, as there.
    assert not hasattr(rc, "with_soft_pin")
    with pytest.raises(AttributeError):
        rc.with_soft_pin = True
    with pytest.raises(TypeError, match="with_soft_pin"):
        ReplicateConfig(with_soft_pin=True)
    s = setup_store(cluster.master_addr)
    rc.replica_num = 1
    rc.soft_pin_action = SoftPinAction.ENABLE
    assert rc._as_tuple()[1] is True  # egmstore's soft pin
    assert s.put("rc/soft", b"pinned", rc) == 0
    for action in (SoftPinAction.PRESERVE, SoftPinAction.DISABLE):
        rc.soft_pin_action = action
        assert rc._as_tuple()[1] is False
    assert s.put("rc/kw", b"kw", config=ReplicateConfig(prefer_alloc_in_same_node=True)) == 0
    assert s.put_parts("rc/parts", b"a", b"b", config=ReplicateConfig()) == 0
    assert s.get("rc/parts") == b"ab"
    # A preferred segment nobody has: placement falls back or fails, never crashes.
    rc2 = ReplicateConfig()
    rc2.preferred_segment = "no-such-segment"
    assert s.put("rc/pref", b"p", rc2) in (0, -101, -200)
    # Measured on Mooncake: replica_num 0 answers INVALID_PARAMS from put (it does
    # not raise). egmstore places at most 16 replicas, so 17 is refused the same way.
    src = buffer(8)
    assert s.register_buffer(src.ptr, 8) == 0
    for num in (0, 17, 2**64 - 1):
        bad = ReplicateConfig()
        bad.replica_num = num
        caplog.clear()
        with caplog.at_level(logging.ERROR, logger="egmstore.mooncake"):
            assert s.put("rc/bad", b"x", bad) == -600
            assert s.put_from("rc/bad", src.ptr, 1, bad) == -600
            assert s.put_parts("rc/bad", b"x", config=bad) == -600
            assert s.batch_put_from(["rc/bad", "rc/bad2"], [src.ptr] * 2, [1, 1], bad) == [-600] * 2
            assert s.batch_put_from_multi_buffers(["rc/bad"], [[src.ptr]], [[1]], bad) == [-600]
        assert f"replica_num must be 1..16, not {num}" in caplog.text
    assert s.batch_is_exist(["rc/bad", "rc/bad2"]) == [0, 0]
    rc16 = ReplicateConfig()
    rc16.replica_num = 16  # accepted; one segment can hold one replica only
    assert s.put("rc/16", b"x", rc16) in (0, -200)
    # As Mooncake's (pybind11, size_t) field: a negative, too large or non-int value raises
    # on assignment; a bool is an int there (measured: True is 1).
    for num in (-1, "1", 1.0, 2**64):
        with pytest.raises(TypeError, match=r"replica_num must be an int in 0\.\.2\*\*64-1"):
            ReplicateConfig().replica_num = num
    flag = ReplicateConfig()
    flag.replica_num = True
    assert flag.replica_num == 1 and type(flag.replica_num) is int
    with pytest.raises(TypeError, match="replica_num"):
        ReplicateConfig(replica_num=-1)
    with pytest.raises(TypeError, match="ReplicateConfig"):
        s.put("rc/bad", b"x", {"replica_num": 1})
    assert s.unregister_buffer(src.ptr) == 0
    assert s.close() == 0


def test_argument_errors_raise_like_mooncake(cluster):
    s = setup_store(cluster.master_addr)
    with pytest.raises(TypeError):
        s.put(1, b"x")
    with pytest.raises(TypeError):
        s.put("k", "str is not a buffer")
    # Lists of different lengths are no argument error: measured, Mooncake answers -600 for
    # every key (logged here), as the differential test's surface sequence compares.
    assert s.batch_get_into(["a", "b"], [0], [1, 1]) == [-600, -600]
    assert s.batch_put_from(["a", "b"], [0, 0], [1]) == [-600, -600]
    assert s.batch_put_from_multi_buffers(["a"], [[1, 2]], [[1]]) == [-600]
    assert s.batch_get_into_multi_buffers(["a", "b"], [[1], [2]], [[1]]) == [-600, -600]
    with pytest.raises(TypeError):
        s.batch_get_into(["a"], 0, [1])
    assert s.close() == 0
