"""A second fixed sequence for the differential test: the calls of Mooncake
0.3.13.post1's store beyond the basics that vLLM, SGLang and LMCache make (issue
18): get_buffer / batch_get_buffer / get_batch / put_batch, put_parts read back
with batch_get_buffer (LMCache's default mode), get_into_ranges, the get and put
sessions with their ranged calls (SGLang's direct linker), the upsert family,
batch_get_replica_desc, ReplicateConfig's 0.3.13 fields and enums, setup's dict
aliases and bind_to_numa_node.

run_surface_sequence() runs it on a fresh store object of either implementation
and returns [(label, normalised result)] as mooncake_sequence.run_sequence does
(same Recorder, same normalisation, plus shapes for BufferHandle objects and
replica descriptors). Every key is removed (forced) before close, so nothing
depends on where an implementation placed an object.
"""

import ctypes

from mooncake_sequence import (GLOBAL_SEGMENT_SIZE, LOCAL_BUFFER_SIZE, Recorder, _method,
                               ctypes_alloc, normalise, pattern, read, write)

KiB = 1024
BUF = 1024 * KiB  # each registered buffer


def handle_shape(value):
    """A BufferHandle: ("handle", len(), size(), bytes); None stays None."""
    if value is None:
        return None
    if isinstance(value, (list, tuple)):
        return [handle_shape(v) for v in value]
    if isinstance(value, (bytes, bytearray)):  # a handle must not be plain bytes
        return ("bytes-not-handle", normalise(value))
    try:
        view = memoryview(value)
        return ("handle", len(value), value.size(), normalise(view.tobytes()),
                ("bool", view.readonly), view.format, value.ptr() == _view_address(view))
    except Exception as exc:
        return ("not-a-handle", type(exc).__name__)


def _view_address(view):
    """The address of a writable view's first byte (None for a read-only one)."""
    if view.readonly:
        return None
    return ctypes.addressof(ctypes.c_char.from_buffer(view))


def replica_shape(desc):
    """{key: [ReplicaDescriptor]} -> sorted [(key, [(status, memory, disk, local disk,
    size)])]; endpoints are compared by replica_endpoint_shape."""
    if not isinstance(desc, dict):
        return normalise(desc)
    out = []
    for key in sorted(desc):
        reps = []
        for rep in desc[key]:
            size = rep.get_memory_descriptor().buffer_descriptor.size if rep.is_memory_replica() \
                else None
            reps.append((rep.status.name, ("bool", rep.is_memory_replica()),
                         ("bool", rep.is_disk_replica()), ("bool", rep.is_local_disk_replica()),
                         size))
        out.append((key, reps))
    return out


def replica_endpoint_shape(desc):
    """Whether each memory replica names a host:port endpoint and a buffer address."""
    out = []
    for key in sorted(desc):
        for rep in desc[key]:
            bd = rep.get_memory_descriptor().buffer_descriptor
            out.append((key, ":" in str(bd.transport_endpoint), bd.buffer_address != 0))
    return out


def enum_shape(value):
    return ("enum", type(value).__name__, value.name, int(value), repr(value), str(value),
            ("bool", value == int(value)), ("bool", isinstance(value, int)))


def run_surface_sequence(store, module, master_addr, trace=None, new_store=None,
                         after_close=False):
    """module: mooncake.store or egmstore.mooncake (ReplicateConfig, the enums,
    bind_to_numa_node). new_store: makes another fresh store object.
    after_close: also make AFTER_CLOSE_CALLS (not on Mooncake, which crashes)."""
    r = Recorder(trace)
    m = lambda name: _method(store, name)  # noqa: E731
    RC = module.ReplicateConfig

    # --- ReplicateConfig and the enums of 0.3.13.post1 --------------------------------
    cfg = RC()
    for attr in ("replica_num", "nof_replica_num", "dfs_replica_num", "soft_pin_action",
                 "soft_pin_ttl_ms", "with_hard_pin", "preferred_segments",
                 "preferred_nof_segments", "preferred_segment", "prefer_alloc_in_same_node",
                 "data_type", "group_ids", "with_soft_pin", "session_ids"):
        r.note("rc.has." + attr, int(hasattr(cfg, attr)))
        value = getattr(cfg, attr, None)
        r.note("rc.default." + attr, enum_shape(value) if hasattr(value, "name") else value)
    r.note("rc.str.default", str(cfg))

    def assign(attr, value):
        c = RC()
        setattr(c, attr, value)
        got = getattr(c, attr)
        return enum_shape(got) if hasattr(got, "name") else got

    SPA, ODT = module.SoftPinAction, module.ObjectDataType
    for label, attr, value in [
        ("group_ids.list", "group_ids", ["g1", "g2"]), ("group_ids.none", "group_ids", None),
        ("group_ids.str", "group_ids", "abc"), ("soft_pin_ttl_ms.int", "soft_pin_ttl_ms", 1000),
        ("soft_pin_ttl_ms.none", "soft_pin_ttl_ms", None),
        ("soft_pin_ttl_ms.negative", "soft_pin_ttl_ms", -1),
        ("soft_pin_action.enum", "soft_pin_action", SPA.ENABLE),
        ("soft_pin_action.int", "soft_pin_action", 1),
        ("data_type.enum", "data_type", ODT.KVCACHE), ("data_type.int", "data_type", 1),
        ("replica_num.negative", "replica_num", -1), ("replica_num.float", "replica_num", 1.5),
        ("nof_replica_num", "nof_replica_num", 2), ("dfs_replica_num", "dfs_replica_num", 3),
        ("preferred_nof_segments", "preferred_nof_segments", ["x"]),
        ("prefer_alloc_in_same_node.int", "prefer_alloc_in_same_node", 1),
        ("with_hard_pin.int", "with_hard_pin", 1),
        ("preferred_segments.tuple", "preferred_segments", ("a",)),
        ("with_soft_pin", "with_soft_pin", True), ("session_ids", "session_ids", ["s"]),
        # Mooncake's own test_distributed_object_store.py: uint64 range, None allowed
        ("soft_pin_ttl_ms.u64_max", "soft_pin_ttl_ms", (1 << 64) - 1),
        ("soft_pin_ttl_ms.u64_over", "soft_pin_ttl_ms", 1 << 64),
        ("soft_pin_ttl_ms.zero", "soft_pin_ttl_ms", 0),
        ("soft_pin_ttl_ms.bool", "soft_pin_ttl_ms", True),
        ("soft_pin_ttl_ms.float", "soft_pin_ttl_ms", 1.5),
        ("replica_num.u64_max", "replica_num", (1 << 64) - 1),
        ("replica_num.u64_over", "replica_num", 1 << 64),
        ("replica_num.bool", "replica_num", True),
    ]:
        r.call("rc.assign." + label, assign, attr, value)
    full = RC()
    full.replica_num, full.nof_replica_num, full.dfs_replica_num = 2, 1, 1
    full.soft_pin_action, full.soft_pin_ttl_ms = SPA.ENABLE, 1000
    full.with_hard_pin, full.preferred_segments = True, ["a", "b"]
    full.preferred_segment, full.preferred_nof_segments = "x", ["y"]
    full.prefer_alloc_in_same_node, full.data_type = True, ODT.KVCACHE
    r.note("rc.str.full", str(full))
    r.call("rc.ctor.kwargs", lambda: RC(replica_num=2).replica_num)  # egmstore's extension
    for enum_name in ("SoftPinAction", "ObjectDataType", "ReplicaStatus", "TaskStatus", "TaskType"):
        enum_cls = getattr(module, enum_name, None)
        r.note("enum." + enum_name,
               None if enum_cls is None else [enum_shape(v) for v in enum_cls.__members__.values()])
    for const in ("UNKNOWN", "KVCACHE", "GENERAL", "UNDEFINED", "COMPLETE", "REMOVED", "FAILED",
                  "PROCESSING", "PENDING", "SUCCESS", "REPLICA_COPY"):
        value = getattr(module, const, None)
        r.note("const." + const, None if value is None else enum_shape(value))
    r.call("enum.SoftPinAction.index", lambda: [10, 11, 12][SPA.DISABLE])

    # --- bind_to_numa_node (None; a node this machine lacks is no error) -------------
    r.call("bind_to_numa_node.0", module.bind_to_numa_node, 0)
    r.call("bind_to_numa_node.absent", module.bind_to_numa_node, 63)
    r.call("bind_to_numa_node.str", module.bind_to_numa_node, "0")

    # --- setup dict with LMCache's aliases beside Mooncake's own names ---------------
    # Both sides read master_server_addr when both are given; with only the alias
    # egmstore connects there and Mooncake retries 127.0.0.1:50051 for 90 s
    # (test_facade.py checks egmstore's side of that).
    if new_store is not None:
        aliased = new_store()
        r.call("setup.dict.aliases", _method(aliased, "setup"), {
            "local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
            "master_server_addr": master_addr, "master_server_address": "127.0.0.1:1",
            "device_name": "", "protocol": "tcp", "global_segment_size": str(16 << 20),
            "local_buffer_size": str(16 << 20), "enable_ssd_offload": "false",
            "tenant_id": "default"})
        r.call("setup.dict.aliases.put", _method(aliased, "put"), "alias.k", b"via-alias")
        r.call("setup.dict.aliases.remove", _method(aliased, "remove"), "alias.k")
        r.call("setup.dict.aliases.close", _method(aliased, "close"))

    # --- setup ------------------------------------------------------------------------
    rc = r.call("setup", m("setup"), "127.0.0.1", "P2PHANDSHAKE", GLOBAL_SEGMENT_SIZE,
                LOCAL_BUFFER_SIZE, "tcp", "", master_addr)
    if rc != 0:
        return r.results
    # Mooncake's transfer engine takes a port of 12300..14300 when local_hostname names none
    # (Mooncake's own test_basic_get_hostname checks it); so does the facade's data server.
    host_port = m("get_hostname")()
    r.note("get_hostname.port_range", isinstance(host_port, str) and ":" in host_port
           and 12300 <= int(host_port.rsplit(":", 1)[1]) <= 14300)

    # --- put then get_buffer / batch_get_buffer / get_batch ---------------------------
    data = {"a": b"hello world", "b": pattern("b", 300 * KiB), "c": pattern("c", 2 * KiB)}
    for k, v in data.items():
        r.call("put." + k, m("put"), "s." + k, v)
    r.call("get_buffer", m("get_buffer"), "s.a", shape=handle_shape)
    r.call("get_buffer.large", m("get_buffer"), "s.b", shape=handle_shape)
    r.call("get_buffer.missing", m("get_buffer"), "s.none", shape=handle_shape)
    r.call("get_buffer.empty_key", m("get_buffer"), "", shape=handle_shape)
    # (Not a key twice: Mooncake 0.3.13.post1 then answers wrong bytes in the first
    # handle; test_facade.py checks egmstore's answer to that.)
    r.call("batch_get_buffer", m("batch_get_buffer"), ["s.a", "s.none", "", "s.c"],
           shape=handle_shape)
    r.call("batch_get_buffer.empty", m("batch_get_buffer"), [], shape=handle_shape)
    held = m("get_buffer")("s.c")
    view = memoryview(held) if held is not None else None
    del held  # the view keeps the bytes alive
    r.note("get_buffer.view_outlives_handle", None if view is None else view.tobytes() == data["c"])
    r.call("get_batch", m("get_batch"), ["s.a", "s.none", "", "s.c"])
    r.call("get_batch.empty", m("get_batch"), [])

    # --- put_batch -------------------------------------------------------------------------
    r.call("put_batch", m("put_batch"), ["pb.1", "pb.2"], [b"x" * 10, bytearray(b"y" * 20)])
    r.call("put_batch.get", m("get_batch"), ["pb.1", "pb.2"])
    r.call("put_batch.existing", m("put_batch"), ["pb.1", "pb.3"], [b"z", memoryview(b"w")])
    r.call("put_batch.existing.get", m("get_batch"), ["pb.1", "pb.3"])
    r.call("put_batch.mismatch", m("put_batch"), ["pb.4", "pb.5"], [b"x"])
    r.call("put_batch.mismatch.exist", m("batch_is_exist"), ["pb.4", "pb.5"])
    r.call("put_batch.empty", m("put_batch"), [], [])
    r.call("put_batch.empty_value", m("put_batch"), ["pb.6"], [b""])
    r.call("put_batch.empty_key", m("put_batch"), ["", "pb.7"], [b"x", b"y"])
    r.call("put_batch.empty_key.exist", m("is_exist"), "pb.7")
    cfg0 = RC()
    cfg0.replica_num = 0
    r.call("put_batch.replica_num_0", m("put_batch"), ["pb.8"], [b"x"], cfg0)
    r.call("put_batch.replica_num_0.exist", m("is_exist"), "pb.8")

    # --- LMCache's default mode: put_parts(key, meta, data), batch_get_buffer ----------
    meta = pattern("meta", 28)
    chunk = pattern("chunk", 256 * KiB)
    r.call("lmcache.put_parts", m("put_parts"), "lm.0", meta, chunk)
    r.call("lmcache.put_parts.2", m("put_parts"), "lm.1", meta, memoryview(chunk)[:1000])
    handles = r.call("lmcache.batch_get_buffer", m("batch_get_buffer"), ["lm.0", "lm.1", "lm.2"],
                     shape=handle_shape)
    if handles and handles[0] is not None:
        view = memoryview(handles[0])
        r.note("lmcache.meta", view[:28].tobytes() == meta)
        r.note("lmcache.data", view[28:].tobytes() == chunk)

    # --- registered buffers for the ranged calls -----------------------------------------
    src, dst, plain = ctypes_alloc(BUF), ctypes_alloc(BUF), ctypes_alloc(64 * KiB)
    src_data = pattern("src", BUF)
    write(src.ptr, src_data)
    r.call("register.src", m("register_buffer"), src.ptr, BUF)
    r.call("register.dst", m("register_buffer"), dst.ptr, BUF)
    obj1 = pattern("obj1", 4096)
    obj2 = pattern("obj2", 4096)
    r.call("put.r1", m("put"), "r.1", obj1)
    r.call("put.r2", m("put"), "r.2", obj2)

    def dst_bytes(offset, size):
        return read(dst.ptr + offset, size)

    # --- issue 5's batch calls with lists that do not match: -600 for every key -----------------
    r.call("batch_put_from.short_ptrs", m("batch_put_from"), ["ml.a", "ml.b"], [src.ptr], [8, 8])
    r.call("batch_put_from.short_sizes", m("batch_put_from"), ["ml.a", "ml.b"], [src.ptr] * 2, [8])
    r.call("batch_get_into.short_ptrs", m("batch_get_into"), ["r.1", "r.2"], [dst.ptr], [8, 8])
    r.call("batch_put_from_multi_buffers.outer", m("batch_put_from_multi_buffers"),
           ["ml.a", "ml.b"], [[src.ptr]], [[8], [8]])
    r.call("batch_put_from_multi_buffers.inner", m("batch_put_from_multi_buffers"),
           ["ml.a", "ml.b"], [[src.ptr], [src.ptr, src.ptr]], [[8], [8]])
    r.call("batch_put_mismatch.is_exist", m("batch_is_exist"), ["ml.a", "ml.b"])
    r.call("batch_get_into_multi_buffers.outer", m("batch_get_into_multi_buffers"),
           ["r.1", "r.2"], [[dst.ptr]], [[8], [8]])
    r.call("batch_get_into_multi_buffers.inner", m("batch_get_into_multi_buffers"),
           ["r.1", "r.2"], [[dst.ptr], [dst.ptr, dst.ptr]], [[8], [8]])

    # --- put_from_with_metadata: the object is the metadata, then the data ------------------
    pf = r.call("put_from_with_metadata", m("put_from_with_metadata"), "wm.1", src.ptr,
                src.ptr + 5000, 300, 28)
    r.call("put_from_with_metadata.get", m("get"), "wm.1")
    if pf == 0:
        r.note("put_from_with_metadata.matches",
               m("get")("wm.1") == src_data[5000:5028] + src_data[0:300])
    r.call("put_from_with_metadata.existing", m("put_from_with_metadata"), "wm.1", src.ptr + 1,
           src.ptr, 300, 28)
    r.call("put_from_with_metadata.no_metadata", m("put_from_with_metadata"), "wm.2", src.ptr,
           src.ptr, 300, 0)
    r.call("put_from_with_metadata.no_metadata.get", m("get"), "wm.2")
    r.call("put_from_with_metadata.no_data", m("put_from_with_metadata"), "wm.3", src.ptr,
           src.ptr, 0, 28)
    r.call("put_from_with_metadata.no_data.is_exist", m("is_exist"), "wm.3")
    r.call("put_from_with_metadata.empty_key", m("put_from_with_metadata"), "", src.ptr,
           src.ptr, 10, 4)
    r.call("put_from_with_metadata.replica_num_0", m("put_from_with_metadata"), "wm.4", src.ptr,
           src.ptr, 10, 4, cfg0)
    write(plain.ptr, b"UNREG")
    r.call("put_from_with_metadata.unregistered", m("put_from_with_metadata"), "wm.5", src.ptr,
           plain.ptr, 10, 5)
    r.call("put_from_with_metadata.unregistered.is_exist", m("is_exist"), "wm.5")

    # --- get_into_ranges ---------------------------------------------------------------------
    r.call("get_into_ranges", m("get_into_ranges"), [dst.ptr, dst.ptr + 8192],
           [["r.1", "r.2"], ["r.1"]], [[[0, 10], [20]], [[0]]], [[[0, 100], [7]], [[50]]],
           [[[10, 10], [5]], [[30]]])
    r.note("get_into_ranges.bytes", [dst_bytes(0, 10) == obj1[0:10],
                                     dst_bytes(10, 10) == obj1[100:110],
                                     dst_bytes(20, 5) == obj2[7:12],
                                     dst_bytes(8192, 30) == obj1[50:80]])
    r.call("get_into_ranges.missing", m("get_into_ranges"), [dst.ptr], [["r.none", "r.1"]],
           [[[0, 100], [10]]], [[[0, 0], [0]]], [[[10, 10], [10]]])
    r.call("get_into_ranges.past_end", m("get_into_ranges"), [dst.ptr], [["r.1"]], [[[0, 16]]],
           [[[4090, 0]]], [[[10, 16]]])
    r.call("get_into_ranges.to_end", m("get_into_ranges"), [dst.ptr], [["r.1"]], [[[0]]],
           [[[4000]]], [[[96]]])
    r.call("get_into_ranges.zero", m("get_into_ranges"), [dst.ptr], [["r.1"]], [[[0]]], [[[0]]],
           [[[0]]])
    r.call("get_into_ranges.top_mismatch", m("get_into_ranges"), [dst.ptr], [["r.1"], ["r.2"]],
           [[[0]]], [[[0]]], [[[10]]])
    r.call("get_into_ranges.empty", m("get_into_ranges"), [], [], [], [], [])
    r.call("get_into_ranges.inner_mismatch", m("get_into_ranges"), [dst.ptr], [["r.1", "r.2"]],
           [[[0], []]], [[[0, 1], []]], [[[4, 4], []]])
    r.call("get_into_ranges.keys_mismatch", m("get_into_ranges"), [dst.ptr], [["r.1", "r.2"]],
           [[[0]]], [[[0]]], [[[4]]])
    r.call("get_into_ranges.unregistered", m("get_into_ranges"), [plain.ptr], [["r.1"]], [[[0]]],
           [[[0]]], [[[10]]])
    r.call("get_into_ranges.past_registered", m("get_into_ranges"), [dst.ptr + BUF - 8],
           [["r.1"]], [[[0]]], [[[0]]], [[[16]]])
    r.call("get_into_ranges.empty_key", m("get_into_ranges"), [dst.ptr], [[""]], [[[0]]],
           [[[0]]], [[[10]]])

    # --- get sessions (SGLang's direct linker) ------------------------------------------
    ctypes.memset(dst.ptr, 0, BUF)
    r.call("get_session.start", m("batch_get_session_start"), ["r.1", "r.2", "r.none", ""])
    r.call("get_session.ranges.outer_mismatch", m("batch_get_into_multi_buffer_ranges"),
           ["r.1", "r.2"], [[dst.ptr, dst.ptr + 100]], [[10, 20]], [[0, 100]])
    r.call("get_session.ranges", m("batch_get_into_multi_buffer_ranges"), ["r.1", "r.2"],
           [[dst.ptr, dst.ptr + 100], [dst.ptr + 200]], [[10, 20], [30]], [[0, 100], [5]])
    r.note("get_session.ranges.bytes", [dst_bytes(0, 10) == obj1[0:10],
                                        dst_bytes(100, 20) == obj1[100:120],
                                        dst_bytes(200, 30) == obj2[5:35]])
    r.call("get_session.ranges.no_session", m("batch_get_into_multi_buffer_ranges"),
           ["r.none", "r.1", "s.a"], [[dst.ptr], [dst.ptr], [dst.ptr]], [[10], [10], [10]],
           [[0], [0], [0]])
    r.call("get_session.ranges.past_end", m("batch_get_into_multi_buffer_ranges"), ["r.1"],
           [[dst.ptr]], [[100]], [[4000]])
    r.call("get_session.ranges.to_end", m("batch_get_into_multi_buffer_ranges"), ["r.1"],
           [[dst.ptr]], [[96]], [[4000]])
    r.call("get_session.ranges.zero", m("batch_get_into_multi_buffer_ranges"), ["r.1"],
           [[dst.ptr]], [[0]], [[0]])
    r.call("get_session.ranges.none", m("batch_get_into_multi_buffer_ranges"), ["r.1"], [[]],
           [[]], [[]])
    r.call("get_session.ranges.inner_mismatch", m("batch_get_into_multi_buffer_ranges"), ["r.1"],
           [[dst.ptr]], [[10, 10]], [[0]])
    r.call("get_session.ranges.empty", m("batch_get_into_multi_buffer_ranges"), [], [], [], [])
    r.call("get_session.end", m("batch_get_session_end"), ["r.1", "r.2", "r.none"])
    r.call("get_session.ranges.after_end", m("batch_get_into_multi_buffer_ranges"), ["r.1"],
           [[dst.ptr]], [[10]], [[0]])
    r.call("get_session.end.again", m("batch_get_session_end"), ["r.1"])
    r.call("get_session.end.never_started", m("batch_get_session_end"), ["r.zzz"])
    r.call("get_session.start.empty", m("batch_get_session_start"), [])
    r.call("get_session.end.empty", m("batch_get_session_end"), [])
    r.call("get_session.start.unregistered", m("batch_get_session_start"), ["r.1"])
    r.call("get_session.ranges.unregistered", m("batch_get_into_multi_buffer_ranges"), ["r.1"],
           [[plain.ptr]], [[10]], [[0]])
    r.note("get_session.ranges.unregistered.bytes", read(plain.ptr, 10) == obj1[0:10])
    r.call("get_session.end.unregistered", m("batch_get_session_end"), ["r.1"])

    # --- put sessions -----------------------------------------------------------------------
    r.call("put_session.start", m("batch_put_session_start"), ["p.1", "p.2", "r.1", ""],
           [100, 50, 10, 10])
    r.call("put_session.start.again", m("batch_put_session_start"), ["p.1"], [100])
    r.call("put_session.start.zero", m("batch_put_session_start"), ["p.0"], [0])
    r.call("put_session.is_exist.during", m("is_exist"), "p.1")
    r.call("put_session.get.during", m("get"), "p.1")
    r.call("put_session.ranges", m("batch_put_from_multi_buffer_ranges"), ["p.1", "p.2"],
           [[src.ptr, src.ptr + 1000], [src.ptr + 2000]], [[60, 40], [50]], [[0, 60], [0]])
    r.call("put_session.ranges.no_session", m("batch_put_from_multi_buffer_ranges"),
           ["p.none"], [[src.ptr]], [[10]], [[0]])
    r.call("put_session.ranges.past_end", m("batch_put_from_multi_buffer_ranges"), ["p.1"],
           [[src.ptr]], [[10]], [[95]])
    r.call("put_session.ranges.outer_mismatch", m("batch_put_from_multi_buffer_ranges"),
           ["p.1", "p.2"], [[src.ptr]], [[10]], [[0]])
    r.call("put_session.end", m("batch_put_session_end"), ["p.1", "p.2", "p.none"])
    r.note("put_session.p1", m("get")("p.1") == src_data[0:60] + src_data[1000:1040])
    r.note("put_session.p2", m("get")("p.2") == src_data[2000:2050])
    r.call("put_session.end.again", m("batch_put_session_end"), ["p.1"])
    r.call("put_session.partial.start", m("batch_put_session_start"), ["p.q"], [100])
    r.call("put_session.partial.ranges", m("batch_put_from_multi_buffer_ranges"), ["p.q"],
           [[src.ptr]], [[10]], [[0]])
    r.call("put_session.partial.end", m("batch_put_session_end"), ["p.q"])
    r.call("put_session.partial.size", m("get_size"), "p.q")
    r.call("put_session.revoke.start", m("batch_put_session_start"), ["p.r"], [100])
    r.call("put_session.revoke", m("batch_put_session_revoke"), ["p.r", "p.none"])
    r.call("put_session.revoke.is_exist", m("is_exist"), "p.r")
    r.call("put_session.end.after_revoke", m("batch_put_session_end"), ["p.r"])
    r.call("put_session.start.mismatch", m("batch_put_session_start"), ["p.m1", "p.m2"], [10])
    r.call("put_session.start.replica_num_0", m("batch_put_session_start"), ["p.m3"], [10], cfg0)
    r.call("put_session.start.empty", m("batch_put_session_start"), [], [])
    r.call("put_session.end.empty", m("batch_put_session_end"), [])

    # --- upsert family --------------------------------------------------------------------------
    r.call("upsert.new", m("upsert"), "u.1", b"one")
    r.call("upsert.new.get", m("get"), "u.1")
    r.call("upsert.same_size", m("upsert"), "u.1", b"two")
    r.call("upsert.bigger", m("upsert"), "u.1", b"three33")
    r.call("upsert.bigger.get", m("get"), "u.1")
    r.call("upsert.leased.is_exist", m("is_exist"), "u.1")
    r.call("upsert.leased", m("upsert"), "u.1", b"four")
    r.call("upsert.leased.get", m("get"), "u.1")
    r.call("upsert.empty_value", m("upsert"), "u.2", b"")
    r.call("upsert.empty_key", m("upsert"), "", b"x")
    r.call("upsert.replica_num_0", m("upsert"), "u.1", b"five", cfg0)
    r.call("upsert.replica_num_0.get", m("get"), "u.1")
    r.call("upsert_parts", m("upsert_parts"), "u.1", b"ab", bytearray(b"cd"))
    r.call("upsert_parts.get", m("get"), "u.1")
    r.call("upsert_batch", m("upsert_batch"), ["u.1", "u.3"], [b"AAA", b"BBB"])
    r.call("upsert_batch.get", m("get_batch"), ["u.1", "u.3"])
    r.call("upsert_batch.mismatch", m("upsert_batch"), ["u.1", "u.3"], [b"C"])
    r.call("upsert_batch.mismatch.get", m("get_batch"), ["u.1", "u.3"])
    r.call("upsert_from", m("upsert_from"), "u.1", src.ptr, 16)
    r.call("upsert_from.get", m("get"), "u.1")
    r.call("batch_upsert_from", m("batch_upsert_from"), ["u.1", "u.4"], [src.ptr, src.ptr + 4],
           [4, 8])
    r.call("batch_upsert_from.get", m("get_batch"), ["u.1", "u.4"])
    r.call("batch_upsert_from.empty_key", m("batch_upsert_from"), ["", "u.5"], [src.ptr, src.ptr],
           [4, 4])
    r.call("put_batch.after_upsert", m("put_batch"), ["u.1"], [b"zz"])
    r.call("put_batch.after_upsert.get", m("get"), "u.1")
    full_cfg = RC()
    full_cfg.soft_pin_action, full_cfg.soft_pin_ttl_ms = SPA.ENABLE, 1000
    full_cfg.group_ids, full_cfg.data_type = ["g"], ODT.KVCACHE
    full_cfg.preferred_nof_segments = ["nowhere"]
    r.call("put.config_0313", m("put"), "cfg.1", b"abc", full_cfg)
    r.call("upsert.config_0313", m("upsert"), "cfg.1", b"abcd", full_cfg)
    nof = RC()
    nof.nof_replica_num = 1
    r.call("put.nof_replica_num", m("put"), "cfg.2", b"abc", nof)
    dfs = RC()
    dfs.dfs_replica_num = 1
    r.call("put.dfs_replica_num", m("put"), "cfg.3", b"abc", dfs)
    r.call("batch_put_from.dfs_replica_num", m("batch_put_from"), ["cfg.4"], [src.ptr], [8], dfs)
    r.call("config_0313.exist", m("batch_is_exist"), ["cfg.1", "cfg.2", "cfg.3", "cfg.4"])

    # --- soft_pin_ttl_ms goes with SoftPinAction.ENABLE only, at most 24 h ----------------
    # (Mooncake's own test_soft_pin_config_forwarding checks the upsert; every put form here.)
    def pin(action=None, ttl=None):
        c = RC()
        if action is not None:
            c.soft_pin_action = action
        if ttl is not None:
            c.soft_pin_ttl_ms = ttl
        return c

    write(src.ptr, pattern("pin", 64))
    for name, c in [("preserve_ttl", pin(ttl=1000)), ("preserve_ttl0", pin(ttl=0)),
                    ("disable_ttl", pin(SPA.DISABLE, 1000)), ("enable_ttl", pin(SPA.ENABLE, 1000)),
                    ("enable_ttl0", pin(SPA.ENABLE, 0)),
                    ("enable_ttl_24h", pin(SPA.ENABLE, 24 * 3600 * 1000)),
                    ("enable_ttl_over_24h", pin(SPA.ENABLE, 24 * 3600 * 1000 + 1)),
                    ("disable", pin(SPA.DISABLE))]:
        k = "sp." + name + "."
        r.call("pin.put." + name, m("put"), k + "put", b"pinned", c)
        r.call("pin.put_parts." + name, m("put_parts"), k + "parts", b"a", b"b", config=c)
        r.call("pin.put_batch." + name, m("put_batch"), [k + "b1", k + "b2"], [b"a", b"b"], c)
        r.call("pin.put_from." + name, m("put_from"), k + "from", src.ptr, 16, c)
        r.call("pin.batch_put_from." + name, m("batch_put_from"), [k + "bpf"], [src.ptr], [16],
               c)
        r.call("pin.multi_buffers." + name, m("batch_put_from_multi_buffers"), [k + "mb"],
               [[src.ptr, src.ptr + 16]], [[8, 8]], c)
        r.call("pin.upsert." + name, m("upsert"), k + "put", b"again", c)
        r.call("pin.upsert_new." + name, m("upsert"), k + "ups", b"new", c)
        r.call("pin.upsert_parts." + name, m("upsert_parts"), k + "up", b"a", config=c)
        r.call("pin.upsert_batch." + name, m("upsert_batch"), [k + "ub"], [b"a"], c)
        r.call("pin.upsert_from." + name, m("upsert_from"), k + "uf", src.ptr, 16, c)
        r.call("pin.batch_upsert_from." + name, m("batch_upsert_from"), [k + "buf"], [src.ptr],
               [16], c)
        r.call("pin.put_session." + name, m("batch_put_session_start"), [k + "ps"], [16], c)
        r.call("pin.put_session.revoke." + name, m("batch_put_session_revoke"), [k + "ps"])
        r.call("pin.exist." + name, m("batch_is_exist"),
               [k + x for x in ("put", "parts", "b1", "b2", "from", "bpf", "mb", "ups", "up",
                                "ub", "uf", "buf", "ps")])

    # --- local_buffer_size: Mooncake copies put/get bytes through a client buffer of it ------
    # (Mooncake's own test_zero_local_buffer_size: a put through a client with 0 fails.)
    # Stores contributing no segment, so that nothing depends on placement; they read what
    # the main store wrote and remove what they wrote before they close.
    MiB = 1024 * KiB
    lb_data = {"lb.small": pattern("lbs", 1000), "lb.big": pattern("lbb", 2 * MiB),
               "lb.exact": pattern("lbe", MiB), "lb.under": pattern("lbu", MiB - 1),
               "lb.six": pattern("lb6", 600 * KiB), "lb.six2": pattern("lb62", 600 * KiB)}
    for k, v in lb_data.items():
        r.call("lb.put." + k, m("put"), k, v)
    for lbs in ((0, MiB) if new_store is not None else ()):
        t = "lb%d." % lbs
        small = new_store()
        rc_small = r.call(t + "setup", _method(small, "setup"), "127.0.0.1", "P2PHANDSHAKE", 0,
                          lbs, "tcp", "", master_addr)
        if rc_small != 0:
            continue
        s_ = lambda name: _method(small, name)  # noqa: E731
        written = []  # what this store may have stored (removed before it closes)
        lbuf = ctypes_alloc(4 * MiB)
        write(lbuf.ptr, lb_data["lb.big"])
        r.call(t + "register", s_("register_buffer"), lbuf.ptr, 4 * MiB)
        for nm in ("lb.small", "lb.big", "lb.exact", "lb.under"):
            data = lb_data[nm]
            w = t + nm[3:] + "."
            r.call(w + "put", s_("put"), w + "k.put", data)
            r.call(w + "put_parts", s_("put_parts"), w + "k.parts", data[:10], data[10:])
            r.call(w + "put_batch", s_("put_batch"), [w + "k.batch"], [data])
            r.call(w + "upsert", s_("upsert"), w + "k.upsert", data)
            r.call(w + "upsert_parts", s_("upsert_parts"), w + "k.upsert_parts", data)
            r.call(w + "upsert_batch", s_("upsert_batch"), [w + "k.upsert_batch"], [data])
            r.call(w + "put_from", s_("put_from"), w + "k.from", lbuf.ptr, len(data))
            r.call(w + "get", s_("get"), nm)
            r.call(w + "get_buffer", s_("get_buffer"), nm, shape=handle_shape)
            r.call(w + "batch_get_buffer", s_("batch_get_buffer"), [nm], shape=handle_shape)
            r.call(w + "get_batch", s_("get_batch"), [nm])
            r.call(w + "get_into", s_("get_into"), nm, lbuf.ptr, 4 * MiB)
            r.call(w + "batch_get_into", s_("batch_get_into"), [nm], [lbuf.ptr], [4 * MiB])
            r.call(w + "get_into_ranges", s_("get_into_ranges"), [lbuf.ptr], [[nm]], [[[0]]],
                   [[[0]]], [[[5]]])
            mine = [w + "k." + x for x in ("put", "parts", "batch", "upsert", "upsert_parts",
                                           "upsert_batch", "from")]
            r.call(w + "exist", s_("batch_is_exist"), mine)
            written += mine
        # what is held at once: a batch's bytes together, each key of a read in turn
        r.call(t + "put_batch.together", s_("put_batch"), [t + "pb1", t + "pb2"],
               [lb_data["lb.six"]] * 2)
        r.call(t + "upsert_batch.together", s_("upsert_batch"), [t + "ub1", t + "ub2"],
               [lb_data["lb.six"]] * 2)
        together = [t + "pb1", t + "pb2", t + "ub1", t + "ub2"]
        r.call(t + "together.exist", s_("batch_is_exist"), together)
        written += together
        r.call(t + "batch_get_buffer.together", s_("batch_get_buffer"), ["lb.six", "lb.six2"],
               shape=handle_shape)
        r.call(t + "get_batch.together", s_("get_batch"), ["lb.six", "lb.six2"])
        r.call(t + "unregister", s_("unregister_buffer"), lbuf.ptr)
        r.call(t + "remove.force", s_("batch_remove"), written, True)
        r.call(t + "close", s_("close"))

    # setup(dict): local_buffer_size as a size text, and its default (16 MiB)
    for label, lbs in ((("1MB", "1MB"), ("default", None)) if new_store is not None else ()):
        t = "lb.dict." + label + "."
        d = new_store()
        conf = {"local_hostname": "127.0.0.1", "metadata_server": "P2PHANDSHAKE",
                "global_segment_size": 0, "protocol": "tcp", "master_server_addr": master_addr}
        if lbs is not None:
            conf["local_buffer_size"] = lbs
        if r.call(t + "setup", _method(d, "setup"), conf) != 0:
            continue
        sizes = {"1MiB": MiB, "1MiB+1": MiB + 1, "16MiB": 16 * MiB, "16MiB+1": 16 * MiB + 1}
        for name, size in sizes.items():
            r.call(t + "put." + name, _method(d, "put"), t + name, b"d" * size)
        r.call(t + "remove.force", _method(d, "batch_remove"), [t + n for n in sizes], True)
        r.call(t + "close", _method(d, "close"))

    # --- replica descriptors -----------------------------------------------------------------------
    desc = r.call("batch_get_replica_desc", m("batch_get_replica_desc"),
                  ["s.a", "s.none", "", "s.b"], shape=replica_shape)
    if isinstance(desc, dict):
        r.note("batch_get_replica_desc.endpoint", replica_endpoint_shape(desc))
        rep = desc.get("s.a", [None])[0]
        if rep is not None:
            r.call("replica.disk_descriptor", rep.get_disk_descriptor)
    r.call("get_replica_desc", lambda k: replica_shape({k: m("get_replica_desc")(k)}), "s.b")
    r.call("get_replica_desc.missing", m("get_replica_desc"), "s.none")
    r.call("batch_get_replica_desc.empty", m("batch_get_replica_desc"), [], shape=replica_shape)

    # --- SSD offload calls, off on both -------------------------------------------------------
    r.call("get_offload_rpc_read_count", m("get_offload_rpc_read_count"))
    r.call("unmount_local_disk_segment", m("unmount_local_disk_segment"))
    r.call("unmount_local_disk_segment.grace", m("unmount_local_disk_segment"), 5)

    # --- cleanup -------------------------------------------------------------------------------------
    r.call("unregister.src", m("unregister_buffer"), src.ptr)
    r.call("unregister.dst", m("unregister_buffer"), dst.ptr)
    r.call("remove_all.force", m("remove_all"), True)
    r.call("close", m("close"))
    if after_close:
        for label, name, args in AFTER_CLOSE_CALLS:
            r.call(label, m(name), *args, shape=handle_shape if "buffer" in name else normalise)
    return r.results


# Calls made after close() on egmstore only (Mooncake 0.3.13.post1 crashes on calls after
# close): each must answer an error, not crash.
AFTER_CLOSE_CALLS = [
    ("get_buffer.after_close", "get_buffer", ("s.a",)),
    ("batch_get_buffer.after_close", "batch_get_buffer", (["s.a"],)),
    ("get_batch.after_close", "get_batch", (["s.a"],)),
    ("put_batch.after_close", "put_batch", (["x"], [b"x"])),
    ("upsert.after_close", "upsert", ("x", b"x")),
    ("batch_get_session_start.after_close", "batch_get_session_start", (["s.a"],)),
    ("batch_put_session_start.after_close", "batch_put_session_start", (["x"], [10])),
    ("get_replica_desc.after_close", "get_replica_desc", ("s.a",)),
]
