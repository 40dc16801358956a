"""egmstore.mooncake's calls beyond issue 5's, on egmstore alone: what the
differential test (test_mooncake_diff.py::test_surface_matches_mooncake) cannot
compare with Mooncake: zero-copy BufferHandle lifetimes, setup's dict aliases
without Mooncake's names (Mooncake retries 127.0.0.1:50051 for 90 s), SSD
offload switched on, a key twice in one batch, sessions and ranged calls over
shm and tcp with engine-sized objects, upserts racing readers, calls after close."""

import ctypes
import gc
import logging
import threading

import pytest

from conftest import pattern
from egmstore import _egmstore
from egmstore.mooncake import (BufferHandle, MooncakeDistributedStore, ObjectDataType,
                               ReplicateConfig, SoftPinAction, bind_to_numa_node)

MIB = 1 << 20
CLOSED = -1010


@pytest.fixture(params=["tcp", "shm"])
def store(request, cluster):
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, request.param, "",
                   cluster.master_addr) == 0
    yield s
    s.close()


def test_buffer_handle_zero_copy(store, key):
    data = pattern(3 * MIB + 5)
    assert store.put(key(), data) == 0
    h = store.get_buffer(key())
    assert isinstance(h, BufferHandle) and len(h) == h.size() == len(data)
    view = memoryview(h)
    assert (view.readonly, view.format, view.nbytes) == (False, "b", len(data))
    # The handle's memory is the view's: no copy between them.
    assert ctypes.addressof(ctypes.c_char.from_buffer(view)) == h.ptr()
    assert bytes(h) == data
    del h
    gc.collect()
    assert view.tobytes() == data  # the view keeps the bytes alive
    view.release()
    with pytest.raises(TypeError):
        BufferHandle()
    assert store.get_buffer(key("missing")) is None


def test_batch_get_buffer_repeated_and_missing_keys(store, key):
    """Mooncake 0.3.13.post1 answers wrong bytes in the first of two handles for one key;
    egmstore answers the object in both."""
    assert store.put(key("a"), b"alpha") == 0
    got = store.batch_get_buffer([key("a"), key("none"), key("a"), ""])
    assert [None if h is None else bytes(h) for h in got] == [b"alpha", None, b"alpha", None]
    assert got[0].ptr() != got[2].ptr()
    assert store.get_batch([key("a"), key("none")]) == [b"alpha", b""]


def test_lmcache_put_parts_batch_get_buffer(store, key):
    """LMCache's default mode: a 28-byte metadata part and the chunk, read back whole."""
    meta, chunk = pattern(28, 1), pattern(2 * MIB, 2)
    keys = [key(f"chunk{i}") for i in range(4)]
    for k in keys:
        assert store.put_parts(k, meta, chunk) == 0
    for h in store.batch_get_buffer(keys):
        view = memoryview(h)
        assert view[:28].tobytes() == meta and view[28:].tobytes() == chunk


def test_sessions_engine_sized(store, key, buffer):
    """SGLang's direct linker: 64 pieces of 32 KiB per key written through a put session
    and read back through a get session, over both transports."""
    piece, n = 32 * 1024, 64
    src, dst = buffer(piece * n), buffer(piece * n)
    src.write(0, pattern(piece * n, 3))
    assert store.register_buffer(src.ptr, src.size) == 0
    assert store.register_buffer(dst.ptr, dst.size) == 0
    keys = [key("s0"), key("s1")]
    assert store.batch_put_session_start(keys, [piece * n] * 2) == [0, 0]
    ptrs = [[src.ptr + i * piece for i in range(n)]] * 2
    sizes = [[piece] * n] * 2
    offsets = [[i * piece for i in reversed(range(n))]] * 2  # stored in reverse order
    assert store.batch_put_from_multi_buffer_ranges(keys, ptrs, sizes, offsets) == [piece * n] * 2
    assert store.batch_is_exist(keys) == [0, 0]  # not readable before the end
    assert store.batch_put_session_end(keys) == [0, 0]
    assert store.batch_get_session_start(keys) == [0, 0]
    # Read back with the same reversal: the destination equals the source.
    dptrs = [[dst.ptr + i * piece for i in range(n)]] * 2
    assert store.batch_get_into_multi_buffer_ranges(keys, dptrs, sizes, offsets) == [piece * n] * 2
    assert dst.read(0, dst.size) == src.read(0, src.size)
    assert store.batch_get_session_end(keys) == 0
    assert store.batch_get_into_multi_buffer_ranges(keys[:1], dptrs[:1], sizes[:1],
                                                    offsets[:1]) == [-600]


def test_put_session_end_groups_configs(store, key, buffer):
    """Sessions opened with different ReplicateConfigs and ended in one call are each
    stored with their own; the staging buffers are released (a user buffer at the same
    place could be registered again only if they were; here: ending twice is -600)."""
    src = buffer(64)
    src.write(0, pattern(64, 5))
    assert store.register_buffer(src.ptr, src.size) == 0
    pinned = ReplicateConfig()
    pinned.soft_pin_action = SoftPinAction.ENABLE
    keys = [key("a"), key("b"), key("c")]
    assert store.batch_put_session_start(keys[:1], [64]) == [0]
    assert store.batch_put_session_start(keys[1:], [64, 32], pinned) == [0, 0]
    assert store.batch_put_from_multi_buffer_ranges(
        keys, [[src.ptr]] * 3, [[64], [64], [32]], [[0]] * 3) == [64, 64, 32]
    assert store.batch_put_session_end(keys + [key("none")]) == [0, 0, 0, -600]
    assert store.get_batch(keys) == [src.read(0, 64), src.read(0, 64), src.read(0, 32)]
    assert store.batch_put_session_end(keys) == [-600] * 3
    # A revoked session stores nothing and can be opened again.
    assert store.batch_put_session_start([key("r")], [16]) == [0]
    assert store.batch_put_session_revoke([key("r")]) == [0]
    assert store.batch_put_session_start([key("r")], [16]) == [0]
    assert store.batch_put_session_end([key("r")]) == [0]
    assert store.get(key("r")) == bytes(16)


def test_upsert_replaces_under_reads(store, key):
    """Upserts while another thread reads: every read sees a whole value (one of those
    written) or nothing; the last upsert's value stays."""
    k = key()
    values = [bytes([i]) * (64 * 1024 + i) for i in range(1, 21)]
    assert store.upsert(k, values[0]) == 0
    seen, stop = [], threading.Event()

    def reader():
        while not stop.is_set():
            seen.append(store.get(k))

    t = threading.Thread(target=reader)
    t.start()
    try:
        for v in values[1:]:
            assert store.upsert(k, v) == 0
    finally:
        stop.set()
        t.join(10)
    assert store.get(k) == values[-1]
    assert all(v == b"" or v in values for v in seen)


def test_setup_dict_aliases(cluster):
    """LMCache's names: master_server_address and device_name (Mooncake reads only
    master_server_addr and rdma_devices)."""
    s = MooncakeDistributedStore()
    assert s.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                    "master_server_address": cluster.master_addr, "device_name": "mlx5_0",
                    "protocol": "rdma", "global_segment_size": "0",
                    "local_buffer_size": str(16 * MIB)}) == 0
    assert s.put("alias/k", b"v") == 0 and s.get("alias/k") == b"v"
    assert s.remove("alias/k", True) == 0
    assert s.close() == 0
    bad = MooncakeDistributedStore()
    assert bad.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                      "master_server_address": 5}) == -600


def test_ssd_offload_accepted_off(cluster, caplog):
    with caplog.at_level(logging.WARNING, logger="egmstore.mooncake"):
        s = MooncakeDistributedStore()
        assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "", cluster.master_addr,
                       enable_ssd_offload=True, ssd_offload_path="/nonexistent") == 0
        assert s.close() == 0
        s = MooncakeDistributedStore()
        assert s.setup({"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                        "master_server_addr": cluster.master_addr, "global_segment_size": 0,
                        "enable_ssd_offload": "true"}) == 0
        assert s.close() == 0
    assert caplog.text.count("egmstore has no SSD offload") == 2


def test_replicate_config_0313(store, key):
    rc = ReplicateConfig()
    rc.soft_pin_action, rc.soft_pin_ttl_ms = SoftPinAction.ENABLE, 60000
    rc.group_ids, rc.data_type = ["g"], ObjectDataType.KVCACHE
    assert store.put(key(), b"x", rc) == 0
    assert store.batch_put_session_start([key("s")], [8], rc) == [0]
    assert store.batch_put_session_revoke([key("s")]) == [0]
    rc.dfs_replica_num = 1
    assert store.upsert(key(), b"y", rc) == -1601
    assert store.batch_upsert_from([key("b")], [0], [1], rc) == [-1601]
    rc.dfs_replica_num, rc.nof_replica_num = 0, 1
    assert store.put_batch([key("n")], [b"y"], rc) == -600
    assert store.get(key()) == b"x"


def test_bind_to_numa_node(caplog):
    import os

    from egmstore import mooncake

    before = os.sched_getaffinity(0)
    try:
        with caplog.at_level(logging.WARNING, logger="egmstore.mooncake"):
            assert bind_to_numa_node(0) is None
            assert "could not be preferred" not in caplog.text  # set_mempolicy succeeded
            node0 = os.sched_getaffinity(0)
            assert bind_to_numa_node(4096) is None  # no such node: logged, nothing changes
            assert "no such NUMA node" in caplog.text
            assert os.sched_getaffinity(0) == node0
        with pytest.raises(TypeError):
            bind_to_numa_node("0")
    finally:
        os.sched_setaffinity(0, before)
        number = mooncake._SYS_SET_MEMPOLICY.get(os.uname().machine)
        if number is not None:  # back to MPOL_DEFAULT for the rest of the session
            ctypes.CDLL(None).syscall(ctypes.c_long(number), ctypes.c_int(0), None,
                                      ctypes.c_ulong(0))


def test_calls_before_setup_and_after_close(cluster, key):
    s = MooncakeDistributedStore()
    for store in (s, None):
        if store is None:
            store = MooncakeDistributedStore()
            assert store.setup("127.0.0.1", "P2PHANDSHAKE", 0, 16 * MIB, "tcp", "",
                               cluster.master_addr) == 0
            assert store.batch_get_session_start([key("none")]) == [-704]
            assert store.batch_put_session_start([key("p")], [8]) == [0]
            assert store.close() == 0
            # close dropped the sessions
            assert store.batch_put_session_end([key("p")]) == [-600]
        assert store.get_buffer("k") is None
        assert store.batch_get_buffer(["k", "j"]) == [None, None]
        assert store.get_batch(["k"]) == [b""]
        assert store.put_batch(["k"], [b"v"]) == CLOSED
        assert store.upsert("k", b"v") == CLOSED
        assert store.upsert_batch(["k"], [b"v"]) == CLOSED
        assert store.batch_upsert_from(["k"], [1], [1]) == [CLOSED]
        assert store.batch_get_session_start(["k"]) == [CLOSED]
        assert store.batch_put_session_start(["k"], [8]) == [CLOSED]
        assert store.get_into_ranges([1], [["k"]], [[[0]]], [[[0]]], [[[8]]]) == [[[CLOSED]]]
        assert store.batch_get_replica_desc(["k"]) == {}
    assert _egmstore.BufferHandle is BufferHandle


def test_local_buffer_limits_each_call_alone(cluster):
    """local_buffer_size bounds what one call copies, as Mooncake's client buffer does
    (compared in test_mooncake_diff.py); each call is counted alone, a failed one too, so
    calls in turn or from threads that each fit always succeed (Mooncake's calls share the
    buffer: docs/mooncake-compat.md)."""
    s = MooncakeDistributedStore()
    assert s.setup("127.0.0.1", "P2PHANDSHAKE", 0, 1 * MIB, "tcp", "", cluster.master_addr) == 0
    value = b"v" * (600 * 1024)
    for i in range(10):
        assert s.put(f"lbcall/{i}", value) == 0
        assert s.put_batch([f"lbcall/b{i}"], [value]) == 0
        held = s.get_buffer(f"lbcall/{i}")  # a live handle: not counted against the next call
        assert s.get(f"lbcall/b{i}") == value and bytes(held) == value
        assert [h is not None for h in s.batch_get_buffer([f"lbcall/{i}", f"lbcall/b{i}"])] \
            == [True, False]  # the second does not fit beside the first
        with pytest.raises(TypeError):
            s.put(f"lbcall/bad{i}", 12345)  # raised by the binding
        assert s.put(f"lbcall/big{i}", value * 2) == -600  # 1.2 MiB: never fits
        assert s.is_exist(f"lbcall/big{i}") == 0
    errors = []

    def reader(n):
        for i in range(10):
            if s.get(f"lbcall/{i}") != value or s.put(f"lbcall/t{n}.{i}", value) != 0:
                errors.append((n, i))

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    assert s.remove_all(True) >= 60
    assert s.close() == 0
