"""egmstore.Store against a real master and provider: round trips, zero-copy and
batch calls, one exception class per status, the context manager, the GIL
released during RPCs, configuration errors."""

import mmap
import os
import signal
import threading

import pytest

import egmstore
from egmstore import _egmstore
from conftest import ReadOnlyPage, pattern, stop_process, unmapped_address

PROTOCOLS = ["shm", "tcp"]


@pytest.fixture(params=PROTOCOLS)
def store(request, cluster):
    with egmstore.Store(master_server_addr=cluster.master_addr, protocol=request.param) as s:
        yield s


# ---- the binding itself ----------------------------------------------------------


def test_extension_is_stable_abi_and_beside_libegmstore():
    path = _egmstore.__file__
    assert path.endswith("_egmstore.abi3.so")
    assert os.path.exists(os.path.join(os.path.dirname(path), "libegmstore.so.0"))


def test_status_enum_matches_the_library():
    for value in range(_egmstore.STATUS_MIN, 2):
        assert egmstore.Status(value).name == egmstore.status_name(value)
    assert egmstore.status_name(-1000) == "UNKNOWN"
    assert egmstore.status_to_mooncake(egmstore.Status.NOT_FOUND) == -704
    assert egmstore.status_to_mooncake(egmstore.Status.HAS_LEASE) == -706


def test_every_error_status_has_its_exception_class():
    for value in range(_egmstore.STATUS_MIN, 0):
        err = egmstore.error_for(value, "detail")
        assert isinstance(err, egmstore.Error)
        assert type(err) is not egmstore.Error, egmstore.status_name(value)
        assert type(err).STATUS == value
        assert err.status == value and err.name == egmstore.status_name(value)
        assert err.message == "detail"
        assert str(err) == f"{err.name} ({value}): detail"
    assert type(egmstore.error_for(-1000)) is egmstore.Error
    assert egmstore.EXCEPTIONS[-4] is egmstore.NotFound


def test_status_helpers_refuse_values_outside_int():
    # 2**32 - 4 is -4 once truncated to a C int: it must not name NOT_FOUND.
    for fn in (_egmstore.status_name, _egmstore.status_string, _egmstore.status_to_mooncake):
        with pytest.raises(ValueError, match=r"status must be -2147483648\.\.2147483647"):
            fn(2**32 - 4)
        with pytest.raises(ValueError, match="status must be"):
            fn(-(2**63))
        with pytest.raises(TypeError, match="status must be an int, not str"):
            fn("-4")
    assert _egmstore.status_name(-4) == "NOT_FOUND"
    assert _egmstore.status_to_mooncake(-4) == -704
    with pytest.raises(ValueError, match="health must be"):
        _egmstore.health_string(2**32 + 1)
    assert _egmstore.health_string(1) == "not_initialized"


def test_config_get_defaults_and_overrides():
    assert _egmstore.config_get("protocol") == "auto"
    assert _egmstore.config_get("replica_num", {"replica_num": "3"}) == "3"
    assert _egmstore.config_get("no_such_key") is None


# ---- round trips -----------------------------------------------------------------


@pytest.mark.parametrize("size", [1, 5, 4095, 4096, 65537, 4 << 20])
def test_put_get_round_trip(store, key, size):
    data = pattern(size, size)
    store.put(key(), data)
    assert store.get(key()) == data
    assert store.size(key()) == size
    assert store.exists(key())


def test_put_accepts_any_bytes_like(store, key):
    store.put(key("ba"), bytearray(b"abc"))
    store.put(key("mv"), memoryview(b"xxdefxx")[2:5])
    assert store.get(key("ba")) == b"abc"
    assert store.get(key("mv")) == b"def"
    with pytest.raises(TypeError, match="value must be a contiguous bytes-like object"):
        store.put(key("s"), "text")


def test_empty_value_is_rejected(store, key):
    with pytest.raises(egmstore.InvalidArgument) as info:
        store.put(key(), b"")
    assert info.value.name == "INVALID_ARG"
    assert not store.exists(key())


def test_zero_copy_round_trip(store, key, buffer):
    size = 1 << 20
    src, dst = buffer(size), buffer(size)
    data = pattern(size, 3)
    src.write(0, data)
    store.register_buffer(src.ptr, size)
    store.register_buffer(dst.ptr, size)
    store.put_from(key(), src.ptr, size)
    assert store.get_into(key(), dst.ptr, size) == size
    assert dst.read(0, size) == data
    store.unregister_buffer(src.ptr)
    store.unregister_buffer(dst.ptr)


def test_register_refuses_memory_that_is_not_there(store, key):
    # An address nothing maps (a page past a freed mapping): refused, where a
    # copy into it would kill the process.
    page = mmap.PAGESIZE
    addr = unmapped_address()
    with pytest.raises(egmstore.InvalidArgument) as info:
        store.register_buffer(addr, page)
    assert "neither GPU memory nor host memory mapped" in info.value.message
    store.put(key(), b"hello")
    with pytest.raises(egmstore.NotRegistered):
        store.get_into(key(), addr, page)


def test_get_into_refuses_memory_it_may_not_write(store, key):
    # A read-only page: a put's source, but a get into it raises instead of
    # killing the process, and names the key.
    ro = ReadOnlyPage(b"read only")
    try:
        store.register_buffer(ro.addr, ro.size)
        k = key()
        store.put_from(k, ro.addr, 9)
        assert store.get(k) == b"read only"
        with pytest.raises(egmstore.InvalidArgument) as info:
            store.get_into(k, ro.addr, ro.size)
        assert "may not write" in info.value.message and k in info.value.message
        store.unregister_buffer(ro.addr)
    finally:
        ro.close()


def test_get_into_reports_object_size_in_a_larger_buffer(store, key, buffer):
    dst = buffer(100)
    store.register_buffer(dst.ptr, 100)
    store.put(key(), b"hello")
    assert store.get_into(key(), dst.ptr, 100) == 5
    assert dst.read(0, 5) == b"hello"
    store.unregister_buffer(dst.ptr)


# ---- exceptions per status -------------------------------------------------------


def test_exceptions_carry_status_name_and_detail(store, key, buffer):
    with pytest.raises(egmstore.NotFound) as info:
        store.get(key("missing"))
    assert info.value.status == -4 and info.value.name == "NOT_FOUND"
    assert key("missing") in info.value.message

    store.put(key(), b"abcd")
    with pytest.raises(egmstore.Exists) as info:
        store.put(key(), b"other")
    assert info.value.name == "EXISTS"
    assert store.get(key()) == b"abcd"  # unchanged

    # get() took a read lease: remove without force is refused.
    with pytest.raises(egmstore.HasLease) as info:
        store.remove(key())
    assert info.value.name == "HAS_LEASE"
    store.remove(key(), force=True)
    assert not store.exists(key())
    with pytest.raises(egmstore.NotFound):
        store.remove(key())

    small = buffer(2)
    store.register_buffer(small.ptr, 2)
    store.put(key("big"), b"0123456789")
    with pytest.raises(egmstore.BufferTooSmall) as info:
        store.get_into(key("big"), small.ptr, 2)
    assert info.value.name == "BUFFER_TOO_SMALL"
    store.unregister_buffer(small.ptr)

    unreg = buffer(16)
    with pytest.raises(egmstore.NotRegistered) as info:
        store.put_from(key("unreg"), unreg.ptr, 16)
    assert info.value.name == "NOT_REGISTERED"

    with pytest.raises(egmstore.InvalidKey):
        store.put("", b"x")
    with pytest.raises(egmstore.InvalidKey):
        store.put("k" * (_egmstore.KEY_MAX + 1), b"x")


def test_no_space(make_cluster):
    c = make_cluster(segment="4MiB")
    with egmstore.Store(master_server_addr=c.master_addr) as s:
        with pytest.raises(egmstore.NoSpace) as info:
            s.put("too-big", bytes(5 << 20))  # no 4 MiB segment can hold it
        assert info.value.name == "NO_SPACE"


def test_bad_python_arguments_name_the_argument(store, key):
    with pytest.raises(TypeError, match="key must be a str"):
        store.put(b"bytes-key", b"x")
    with pytest.raises(ValueError, match="NUL"):
        store.put("a\0b", b"x")
    with pytest.raises(TypeError, match="ptr must be an int address"):
        store.put_from(key(), "0x10", 4)
    with pytest.raises(ValueError, match="size must be a size >= 0"):
        store.get_into(key(), 4096, -1)
    with pytest.raises(ValueError, match="ptrs has 1 items but keys has 2"):
        store.batch_get_into([key("a"), key("b")], [4096], [1, 1])
    with pytest.raises(ValueError, match="sizes has 1 items but keys has 2"):
        store.batch_put_from([key("a"), key("b")], [4096, 4096], [1])
    with pytest.raises(TypeError, match=r"keys\[1\] must be a str"):
        store.batch_exists([key("a"), 7])
    with pytest.raises(TypeError, match="keys must be a list"):
        store.batch_exists(key("a"))
    with pytest.raises(ValueError, match=r"ptrs\[0\] has 2 items but sizes\[0\] has 1"):
        store.batch_put_from_parts([key("a")], [[4096, 4097]], [[1]])
    with pytest.raises(TypeError, match=r"ptrs\[0\] must be a list"):
        store.batch_get_into_parts([key("a")], [4096], [[1]])
    with pytest.raises(TypeError, match=r"ptrs\[1\] must be an int address"):
        store.batch_get_into([key("a"), key("b")], [4096, "4097"], [1, 1])
    with pytest.raises(ValueError, match=r"sizes\[0\] must be a size >= 0"):
        store.batch_put_from([key("a"), key("b")], [4096, 4096], [-1, 1])
    with pytest.raises(ValueError, match=r"ptrs\[1\] is not a valid address"):
        store.batch_get_into([key("a"), key("b")], [4096, 1 << 64], [1, 1])
    # An item of a key's lists (lists or tuples, mixed) is named by key and position.
    with pytest.raises(TypeError, match=r"ptrs\[1\]\[1\] must be an int address"):
        store.batch_get_into_parts([key("a"), key("b")], [(4096,), [4096, "4097"]], [[1], (1, 1)])
    with pytest.raises(TypeError, match=r"ptrs\[0\]\[0\] must be an int address"):
        store.batch_get_into_parts([key("a")], [(4096.0,)], [[1]])
    with pytest.raises(ValueError, match=r"ptrs\[0\]\[1\] is not a valid address"):
        store.batch_put_from_parts([key("a")], [[4096, -1]], [(1, 1)])
    with pytest.raises(ValueError, match=r"ptrs\[0\]\[0\] is not a valid address"):
        store.batch_put_from_parts([key("a")], [[1 << 64]], [[1]])
    with pytest.raises(ValueError, match=r"sizes\[1\]\[0\] must be a size >= 0"):
        store.batch_get_into_parts([key("a"), key("b")], [[4096], (4096,)], [[1], [-1]])
    with pytest.raises(TypeError, match="replicate must be an egmstore.ReplicateConfig"):
        store.put(key(), b"x", replicate={"replica_num": 1})


# ---- batches ---------------------------------------------------------------------


def test_batch_forms_with_missing_keys(store, key, buffer):
    n, size = 4, 8192
    src, dst = buffer(n * size), buffer(n * size + 100)
    store.register_buffer(src.ptr, src.size)
    store.register_buffer(dst.ptr, dst.size)
    datas = [pattern(size - i, i) for i in range(n)]
    for i, d in enumerate(datas):
        src.write(i * size, d)
    keys = [key(str(i)) for i in range(n)]
    assert store.batch_put_from(keys, [src.ptr + i * size for i in range(n)],
                                [len(d) for d in datas]) == [None] * n

    # A key that exists already fails alone; the others go through.
    res = store.batch_put_from([keys[0], key("new")], [src.ptr, src.ptr], [1, 1])
    assert isinstance(res[0], egmstore.Exists) and res[1] is None

    order = [keys[2], key("missing"), keys[0], keys[3], keys[1]]
    ptrs = [dst.ptr + i * size for i in range(4)] + [dst.ptr + n * size]
    sizes = [size] * 4 + [10]  # the last buffer is too small for keys[1]
    res = store.batch_get_into(order, ptrs, sizes)
    assert res[0] == len(datas[2]) and res[2] == len(datas[0]) and res[3] == len(datas[3])
    assert isinstance(res[1], egmstore.NotFound)
    assert isinstance(res[4], egmstore.BufferTooSmall)
    assert dst.read(0, len(datas[2])) == datas[2]
    assert dst.read(2 * size, len(datas[0])) == datas[0]

    assert store.batch_exists([keys[0], key("missing")]) == [True, False]
    res = store.batch_remove([keys[0], key("missing")], force=True)
    assert res[0] is None and isinstance(res[1], egmstore.NotFound)
    assert store.batch_exists([]) == []


def test_batch_exceptions_name_the_key_and_the_detail(store, key, buffer):
    dst = buffer(64)
    store.register_buffer(dst.ptr, 64)
    store.put(key("big"), b"0123456789")
    res = store.batch_get_into([key("missing"), key("big")], [dst.ptr, dst.ptr + 32], [16, 2])
    assert isinstance(res[0], egmstore.NotFound) and isinstance(res[1], egmstore.BufferTooSmall)
    assert res[0].key == key("missing") and res[1].key == key("big")
    assert str(res[0]) == f'NOT_FOUND (-4): "{key("missing")}": not found'
    assert str(res[1]) == f'BUFFER_TOO_SMALL (-18): "{key("big")}": buffer too small for the object'

    long_key = "L" * (_egmstore.KEY_MAX + 1)
    res = store.batch_exists(["", key("big"), long_key])
    assert isinstance(res[0], egmstore.InvalidKey) and res[1] is True
    assert isinstance(res[2], egmstore.InvalidKey)
    assert res[0].key == "" and res[2].key == long_key
    assert res[0].message == '"": invalid key (a key has 1..4096 bytes; this one has 0)'
    # An over-long key is cut in the message, which still says how long it was.
    assert res[2].message.startswith('"' + "L" * 80 + '...(4097 characters)": invalid key')
    assert "this one has 4097" in res[2].message

    res = store.batch_remove([key("missing")])
    assert res[0].key == key("missing") and key("missing") in str(res[0])
    store.get(key("big"))  # a read lease
    res = store.batch_remove([key("big")])
    assert str(res[0]) == f'HAS_LEASE (-7): "{key("big")}": object is under a read lease'
    res = store.batch_put_from([key("big")], [dst.ptr], [1])
    assert isinstance(res[0], egmstore.Exists) and key("big") in res[0].message
    res = store.batch_get_into_parts([key("missing")], [[dst.ptr]], [[4]])
    assert key("missing") in res[0].message and "not found" in res[0].message
    store.unregister_buffer(dst.ptr)


def test_scatter_gather_batches(store, key, buffer):
    src, dst = buffer(64), buffer(64)
    src.write(0, b"abcdefghij")
    store.register_buffer(src.ptr, 64)
    store.register_buffer(dst.ptr, 64)
    keys = [key("m1"), key("m2")]
    res = store.batch_put_from_parts(keys, [[src.ptr, src.ptr + 5], [src.ptr + 2]],
                                     [[2, 3], [4]])
    assert res == [None, None]
    assert store.get(keys[0]) == b"abfgh"
    assert store.get(keys[1]) == b"cdef"
    res = store.batch_get_into_parts(keys + [key("m3")],
                                     [[dst.ptr, dst.ptr + 10], [dst.ptr + 20], [dst.ptr + 30]],
                                     [[1, 9], [4], [3]])
    assert res[:2] == [5, 4] and isinstance(res[2], egmstore.NotFound)
    assert dst.read(0, 1) + dst.read(10, 4) == b"abfgh"
    assert dst.read(20, 4) == b"cdef"


def test_remove_all_returns_count(make_cluster):
    c = make_cluster(segment="64MiB")
    with egmstore.Store(master_server_addr=c.master_addr) as s:
        for i in range(3):
            s.put(f"ra/{i}", b"x")
        s.get("ra/0")  # leased: kept without force
        assert s.remove_all() == 2
        assert s.exists("ra/0")
        assert s.remove_all(force=True) == 1
        assert not s.exists("ra/0")


def test_replicate_config(store, key, buffer):
    store.put(key(), b"r", replicate=egmstore.ReplicateConfig(replica_num=1))
    assert store.get(key()) == b"r"
    store.put(key("default"), b"d", replicate=egmstore.ReplicateConfig(replica_num=0))
    assert store.get(key("default")) == b"d"
    assert _egmstore.REPLICA_MAX == 16
    src = buffer(8)
    store.register_buffer(src.ptr, 8)
    # 17 replicas (more than the master places), negative counts and counts that a
    # C unsigned long would truncate (2**64 + 1 -> 1) are refused before any RPC.
    for bad in (17, -1, 2**64 + 1, 2**100):
        rc = egmstore.ReplicateConfig(replica_num=bad)
        with pytest.raises(ValueError) as info:
            store.put(key("bad"), b"x", replicate=rc)
        assert str(info.value) == (f"replica_num must be 0 (the replica_num configuration key) "
                                   f"or 1..16, not {bad}")
        with pytest.raises(ValueError, match="replica_num"):
            store.put_from(key("bad"), src.ptr, 1, replicate=rc)
        with pytest.raises(ValueError, match="replica_num"):
            store.batch_put_from([key("bad")], [src.ptr], [1], replicate=rc)
        with pytest.raises(ValueError, match="replica_num"):
            store.batch_put_from_parts([key("bad")], [[src.ptr]], [[1]], replicate=rc)
    for bad in ("2", 1.0, True, None):
        with pytest.raises(TypeError, match="replica_num must be an int"):
            store.put(key("bad"), b"x", replicate=egmstore.ReplicateConfig(replica_num=bad))
    # The binding itself, without the Python layer's type check.
    with pytest.raises(ValueError, match="replica_num must be 0 .* or 1..16, not 18446744073709551617"):
        store._client.put(key("bad"), b"x", (2**64 + 1, False, False, []))
    with pytest.raises(TypeError, match="replica_num must be an int, not bool"):
        store._client.put(key("bad"), b"x", (True, False, False, []))
    assert not store.exists(key("bad"))
    store.unregister_buffer(src.ptr)


# ---- lifecycle -------------------------------------------------------------------


def test_context_manager_closes(cluster, key):
    with egmstore.Store(master_server_addr=cluster.master_addr) as s:
        assert s.health() == egmstore.Health.HEALTHY
        assert "egm_client_health 0" in s.metrics()
        s.put(key(), b"v")
        assert not s.closed
    assert s.closed
    assert s.health() == egmstore.Health.NOT_INITIALIZED
    assert s.metrics() == ""
    with pytest.raises(egmstore.Closed) as info:
        s.get(key())
    assert info.value.name == "CLOSED" and "closed" in info.value.message
    with pytest.raises(egmstore.Closed):
        s.batch_put_from([key()], [4096], [1])
    s.close()  # idempotent


RACE_ROUNDS = 200
RACE_READERS = 3
RACE_MAX_CALLS = 200000  # per reader and round: a bound, never reached unless close stalls


def test_store_closed_from_another_thread_races_every_call(cluster, key, buffer):
    """Readers call the store in a loop while another thread closes it: every
    call must succeed or raise Closed (health: answer NOT_INITIALIZED), and once
    one has seen the store closed every later call must too. close() runs only
    after every reader has completed a call, so it always races with readers
    still calling (the calls in flight as it begins are counted: there must be
    some); a close that could not make progress behind them would leave the
    readers at RACE_MAX_CALLS without ever seeing Closed."""
    overlaps = 0
    for rnd in range(RACE_ROUNDS):
        s = egmstore.Store(master_server_addr=cluster.master_addr)
        k = key(str(rnd))
        s.put(k, b"v")
        dst = buffer(16 * RACE_READERS)
        s.register_buffer(dst.ptr, dst.size)
        barrier = threading.Barrier(RACE_READERS + 1)
        called = [threading.Event() for _ in range(RACE_READERS)]
        outcomes = [[] for _ in range(RACE_READERS)]
        errors = []

        def one_call(i, n):
            """'ok' or 'closed'; anything else raises."""
            op = n % 5
            try:
                if op == 0:
                    assert s.get(k) == b"v"
                elif op == 1:
                    assert s.exists(k) is True
                elif op == 2:
                    assert s.batch_get_into([k], [dst.ptr + 16 * i], [16]) == [1]
                elif op == 3:
                    health = s.health()
                    if health == egmstore.Health.NOT_INITIALIZED:
                        return "closed"
                    assert health == egmstore.Health.HEALTHY
                else:
                    text = s.metrics()
                    if text == "":
                        return "closed"
                    assert "egm_client_health" in text
                return "ok"
            except egmstore.Closed:
                return "closed"

        def reader(i):
            try:
                barrier.wait(30)
                for n in range(RACE_MAX_CALLS):
                    outcome = one_call(i, n)
                    if outcome == "ok" and s.closed:
                        outcome = "ok during close"  # the call was in flight as close began
                    outcomes[i].append(outcome)
                    called[i].set()
                    if outcome == "closed":
                        # Closed stays closed, for every kind of call.
                        outcomes[i].extend(one_call(i, m) for m in range(n + 1, n + 6))
                        break
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)
                called[i].set()

        threads = [threading.Thread(target=reader, args=(i,)) for i in range(RACE_READERS)]
        for t in threads:
            t.start()
        barrier.wait(30)
        for ev in called:
            assert ev.wait(30)
        s.close()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)
        assert not errors, f"round {rnd}: {errors[0]!r}"
        for i, seen in enumerate(outcomes):
            first_closed = seen.index("closed") if "closed" in seen else None
            assert first_closed is not None, f"round {rnd}, reader {i}: close never took effect"
            assert seen[0] == "ok" and set(seen[:first_closed]) <= {"ok", "ok during close"}
            assert set(seen[first_closed:]) == {"closed"}, f"round {rnd}, reader {i}: {seen[-8:]}"
            # Once close() has begun, only the call then in flight may still succeed.
            assert seen.count("ok during close") <= 1, f"round {rnd}, reader {i}: {seen[-8:]}"
        assert s.closed and s.health() == egmstore.Health.NOT_INITIALIZED
        overlaps += sum(seen.count("ok during close") for seen in outcomes)
    # Calls that were in flight when close() began (they answered, then found the
    # store closed): the race this test is about did happen.
    assert overlaps > 0


def contributing_store(cluster, **kwargs):
    """A store that contributes capacity, so that close() unmounts it with an RPC."""
    return egmstore.Store(master_server_addr=cluster.master_addr, global_segment_size="4MiB",
                          local_hostname="127.0.0.1", **kwargs)


def test_calls_during_close_answer_closed_without_waiting(make_cluster, key):
    """close() is held in its unmount RPC by a stopped master. Calls made
    meanwhile answer as closed at once (health NOT_INITIALIZED, data calls
    Closed) instead of queueing behind close() until its RPC times out."""
    c = make_cluster(segment="64MiB")
    s = contributing_store(c, rpc_timeout_ms=60000)
    s.put(key(), b"v")
    result = {}

    def closer():
        try:
            s.close()
            result["close"] = "ok"
        except egmstore.Error as exc:
            result["close"] = exc

    stop_process(c.master.pid)
    try:
        t = threading.Thread(target=closer)
        t.start()
        for _ in range(30000):  # until close() has begun (bounded: 30 s)
            if s.closed:
                break
            t.join(0.001)
        assert s.closed
        assert s.health() == egmstore.Health.NOT_INITIALIZED
        assert s.metrics() == ""
        with pytest.raises(egmstore.Closed):
            s.get(key())
        with pytest.raises(egmstore.Closed):
            s.batch_exists([key()])
        assert t.is_alive(), "close() returned while the master was stopped"
    finally:
        os.kill(c.master.pid, signal.SIGCONT)
    t.join(120)
    assert result["close"] == "ok"
    assert s.health() == egmstore.Health.NOT_INITIALIZED


def test_failed_close_answers_cleanup_pending_then_retries(make_cluster, key):
    c = make_cluster(segment="64MiB")
    s = contributing_store(c, rpc_timeout_ms=1000)
    stop_process(c.master.pid)
    try:
        with pytest.raises(egmstore.Timeout) as info:
            s.close()  # the unmount RPC gets no answer
        assert "unmount" in info.value.message
        assert s.closed
        assert s.health() == egmstore.Health.CLEANUP_PENDING
        assert s.metrics() == ""
        with pytest.raises(egmstore.Closed):
            s.put(key(), b"v")
    finally:
        os.kill(c.master.pid, signal.SIGCONT)
    s.close()  # the retry releases what is left
    assert s.health() == egmstore.Health.NOT_INITIALIZED


def test_client_init_runs_once(cluster):
    config = {"master_server_addr": cluster.master_addr}
    c = _egmstore.Client(config)
    with pytest.raises(RuntimeError, match="already initialised"):
        c.__init__(config)
    assert c.exist("init-once") == egmstore.Status.NOT_FOUND  # the same, live client
    assert c.close() == 0
    # A closed client is never revived.
    with pytest.raises(RuntimeError, match="this Client is closed"):
        c.__init__(config)
    assert c.closed
    assert c.exist("init-once") == egmstore.Status.CLOSED
    assert c.health() == egmstore.Health.NOT_INITIALIZED

    # Closed before any __init__: stays closed.
    c = _egmstore.Client.__new__(_egmstore.Client)
    assert c.close() == 0
    with pytest.raises(RuntimeError, match="this Client is closed"):
        c.__init__(config)

    # A failed __init__ created nothing and may be retried.
    c = _egmstore.Client.__new__(_egmstore.Client)
    with pytest.raises(_egmstore.StatusError):
        c.__init__({"bogus_key": "1"})
    c.__init__(config)
    assert c.exist("init-once") == egmstore.Status.NOT_FOUND
    assert c.close() == 0

    # The Store over it, likewise: never a second client, never a revived one.
    s = egmstore.Store(config)
    with pytest.raises(RuntimeError, match="only once"):
        s.__init__(config)
    s.close()
    with pytest.raises(RuntimeError, match="only once"):
        s.__init__(config)
    assert s.closed


def test_gil_released_while_a_batch_waits(make_cluster, key, buffer):
    """The master is stopped (SIGSTOP), so a batch waits in its RPC. The main
    thread must be able to count while it waits and then resume the master; a
    binding that held the GIL would block the main thread until the RPC timed
    out and the batch would fail."""
    c = make_cluster(segment="64MiB")
    s = egmstore.Store(master_server_addr=c.master_addr, rpc_timeout_ms=30000)
    n = 32
    dst = buffer(n * 64)
    s.register_buffer(dst.ptr, dst.size)
    keys = [key(str(i)) for i in range(n)]
    for k in keys:
        s.put(k, b"value")
    started, done = threading.Event(), threading.Event()
    result = {}

    def worker():
        started.set()
        result["res"] = s.batch_get_into(keys, [dst.ptr + 64 * i for i in range(n)], [64] * n)
        done.set()

    stop_process(c.master.pid)
    try:
        t = threading.Thread(target=worker)
        t.start()
        assert started.wait(30)
        counter = 0
        while counter < 200 and not done.is_set():
            counter += 1
            done.wait(0.001)  # a blocking wait: the worker may take the GIL here
        progressed_while_waiting = counter == 200 and not done.is_set()
    finally:
        os.kill(c.master.pid, signal.SIGCONT)
    t.join(60)
    assert progressed_while_waiting, f"main thread stalled after {counter} steps"
    assert result["res"] == [5] * n
    s.close()


# ---- configuration ---------------------------------------------------------------


def test_config_errors_name_the_key(cluster):
    with pytest.raises(egmstore.ConfigError) as info:
        egmstore.Store(master_server_addr=cluster.master_addr, protocol="rdma")
    assert info.value.name == "CONFIG"
    assert "protocol" in info.value.message and "rdma" in info.value.message
    with pytest.raises(egmstore.ConfigError, match="bogus_key"):
        egmstore.Store({"bogus_key": "1"})
    with pytest.raises(egmstore.ConfigError, match="replica_num"):
        egmstore.Store(replica_num=0)
    with pytest.raises(TypeError, match="rpc_timeout_ms"):
        egmstore.Store(rpc_timeout_ms=1.5)


def test_unreachable_master(tmp_path):
    import socket

    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with pytest.raises((egmstore.Unreachable, egmstore.Timeout)) as info:
        egmstore.Store(master_server_addr=f"127.0.0.1:{port}", connect_timeout_ms=2000)
    assert str(port) in info.value.message
