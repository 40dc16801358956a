"""One fixed sequence of MooncakeDistributedStore calls, for the differential test.

run_sequence() drives any object with Mooncake's Python store API (the real
mooncake.store.MooncakeDistributedStore or egmstore.mooncake's facade) through the
same calls and returns [(label, normalised result), ...]. Results are normalised so
that two implementations can be compared with ==:

  * ints stay ints; bools become ("bool", v) so that True never passes for 1;
  * bytes become ("bytes", content) up to 32 bytes, else ("bytes", len, sha256 prefix);
  * lists are normalised element by element;
  * an exception becomes ("raises", ExceptionTypeName) (the message is not compared);
  * values that legitimately differ between deployments (get_hostname) are recorded
    as a shape only.

The sequence is deterministic as long as both masters run with a read lease much
longer than the sequence takes (the test uses 10 minutes): every "leased" remove
happens right after a read and every "unleased" one on a key nobody has read, so no
result depends on timing. The only timing assumption is that the whole sequence runs
within the lease TTL.
"""

import ctypes
import hashlib
import random
import re

KiB = 1024
MiB = 1024 * KiB

# Object sizes stored with put/get and put_from/get_into.
SIZES = [("1B", 1), ("4KiB", 4 * KiB), ("1MiB", 1 * MiB), ("8MiB", 8 * MiB)]

# Passed to setup on both sides: the store process contributes this much (Mooncake
# mounts it as the only segment; egmstore may or may not contribute it) and uses a
# local buffer big enough for the 8 MiB put/get.
GLOBAL_SEGMENT_SIZE = 128 * MiB
LOCAL_BUFFER_SIZE = 32 * MiB

# Registered zero-copy buffers: source and destination.
ZC_BUFFER_SIZE = 16 * MiB


class CtypesBuffer:
    """Page-aligned host memory from ctypes; .ptr is its address."""

    def __init__(self, size, align=4096):
        self._raw = ctypes.create_string_buffer(size + align)
        base = ctypes.addressof(self._raw)
        self.ptr = (base + align - 1) // align * align
        self.size = size


def ctypes_alloc(size):
    """The default buffer allocator: alloc(size) -> object with .ptr and .size."""
    return CtypesBuffer(size)


def pattern(seed, size):
    """Deterministic pseudo-random bytes (same on both sides)."""
    return random.Random(seed).randbytes(size)


def write(ptr, data):
    ctypes.memmove(ptr, data, len(data))


def read(ptr, size):
    return ctypes.string_at(ptr, size)


HOSTNAME_SHAPE = re.compile(r"^[^:\s]+:\d+$")


def hostname_shape(value):
    """get_hostname differs per deployment (ports): keep only its shape."""
    if isinstance(value, str):
        if HOSTNAME_SHAPE.match(value):
            return ("str", "host:port")
        return ("str", "not host:port", value)  # the value itself, to say what came instead
    return normalise(value)


def normalise(value):
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        data = bytes(value)
        if len(data) <= 32:
            return ("bytes", data)
        return ("bytes", len(data), hashlib.sha256(data).hexdigest()[:16])
    if isinstance(value, (list, tuple)):
        return [normalise(v) for v in value]
    if value is None:
        return None
    if isinstance(value, str):
        return ("str", value)
    return ("type", type(value).__name__)


class Recorder:
    def __init__(self, trace=None):
        self.results = []
        self._labels = set()
        self._trace = trace

    def _log(self, text):
        # Written before each call and flushed, so a crash inside a call names it.
        if self._trace is not None:
            self._trace.write(text)
            self._trace.flush()

    def call(self, label, fn, *args, shape=normalise, **kwargs):
        """Call fn, record (label, shape(result)) or the exception type; return the raw result."""
        assert label not in self._labels, "duplicate label " + label
        self._labels.add(label)
        self._log("%s ... " % label)
        try:
            value = fn(*args, **kwargs)
        except Exception as exc:  # the type is the result being compared
            self.results.append((label, ("raises", type(exc).__name__)))
            self._log("%r\n" % (self.results[-1][1],))
            return None
        self.results.append((label, shape(value)))
        self._log("%r\n" % (self.results[-1][1],))
        return value

    def skip(self, label, reason):
        assert label not in self._labels, "duplicate label " + label
        self._labels.add(label)
        self.results.append((label, ("skipped", reason)))
        self._log("%s ... skipped\n" % label)

    def note(self, label, value):
        """Record a value computed by the sequence itself (e.g. a content check)."""
        assert label not in self._labels, "duplicate label " + label
        self._labels.add(label)
        self.results.append((label, normalise(value)))
        self._log("%s ... %r\n" % (label, self.results[-1][1]))


def _method(store, name):
    """store.name, or a stand-in that raises AttributeError when called (recorded as such)."""
    fn = getattr(store, name, None)
    if fn is None:

        def missing(*args, **kwargs):
            raise AttributeError(name)

        return missing
    return fn


def run_sequence(store, alloc=ctypes_alloc, master_addr="127.0.0.1:50051", replicate_config=None,
                 trace=None, skip=None, new_store=None):
    """Run the sequence on a fresh (not set up) store; return [(label, result)].

    store: a MooncakeDistributedStore-like object, not yet set up.
    alloc: alloc(size) -> object with .ptr (address of size writable bytes).
    master_addr: "host:port" of the master to use.
    replicate_config: the ReplicateConfig class of the same implementation (optional).
    trace: a text file; each call is written to it as it happens (to locate a crash).
    skip: {label: reason} of calls not to make on this side (recorded as ("skipped", reason)).
    new_store: makes a second fresh store object, for the dict form of setup (optional).
    """
    skip = skip or {}
    r = Recorder(trace)
    m = lambda name: _method(store, name)  # noqa: E731

    # --- before setup --------------------------------------------------------------
    r.call("health_check.before_setup", m("health_check"))

    # --- setup (7 positional arguments, as vLLM/SGLang call it) ---------------------
    rc = r.call(
        "setup",
        m("setup"),
        "127.0.0.1",
        "P2PHANDSHAKE",
        GLOBAL_SEGMENT_SIZE,
        LOCAL_BUFFER_SIZE,
        "tcp",
        "",
        master_addr,
    )
    if rc != 0:
        return r.results  # nothing else is meaningful
    r.call("health_check.after_setup", m("health_check"))
    r.call("get_hostname", m("get_hostname"), shape=hostname_shape)

    if replicate_config is not None:
        cfg = replicate_config()
        for attr in ("replica_num", "with_hard_pin", "preferred_segments", "preferred_segment",
                     "prefer_alloc_in_same_node", "with_soft_pin"):
            r.note("ReplicateConfig.has." + attr, int(hasattr(cfg, attr)))
        r.note("ReplicateConfig.replica_num.default", getattr(cfg, "replica_num", None))
        r.note("ReplicateConfig.with_hard_pin.default", getattr(cfg, "with_hard_pin", None))
        r.note("ReplicateConfig.preferred_segments.default",
               list(getattr(cfg, "preferred_segments", [None])))

    # --- put/get of several sizes --------------------------------------------------
    values = {}
    for name, size in SIZES:
        data = pattern("put." + name, size)
        values[name] = data
        r.call("put." + name, m("put"), "pg." + name, data)
    for name, size in SIZES:
        got = r.call("get." + name, m("get"), "pg." + name)
        r.note("get." + name + ".matches", int(got == values[name]))
        r.call("get_size." + name, m("get_size"), "pg." + name)
        r.call("is_exist." + name, m("is_exist"), "pg." + name)
    r.call("put.bytearray", m("put"), "pg.ba", bytearray(b"bytearray-value"))
    r.call("get.bytearray", m("get"), "pg.ba")
    r.call("put.memoryview", m("put"), "pg.mv", memoryview(b"..memoryview-value..")[2:-2])
    r.call("get.memoryview", m("get"), "pg.mv")
    if replicate_config is not None:
        cfg = replicate_config()
        cfg.replica_num = 1
        r.call("put.with_config", m("put"), "pg.cfg", b"with-config", cfg)
        r.call("get.with_config", m("get"), "pg.cfg")
        # Engines (LMCache, vLLM's connector) prefer their own segment this way.
        hostname = m("get_hostname")()
        cfg = replicate_config()
        cfg.preferred_segment = hostname
        r.call("put.preferred_segment.self", m("put"), "pg.pref.self", b"self", cfg)
        cfg = replicate_config()
        cfg.preferred_segments = [hostname]
        r.call("put.preferred_segments.self", m("put"), "pg.prefs.self", b"self", cfg)
        cfg = replicate_config()
        cfg.preferred_segment = "no.such.segment:1"
        r.call("put.preferred_segment.unknown", m("put"), "pg.pref.unknown", b"x", cfg)
        r.call("is_exist.preferred_segment.unknown", m("is_exist"), "pg.pref.unknown")

    # --- missing keys -------------------------------------------------------------
    r.call("get.missing", m("get"), "no.such.key")
    r.call("get_size.missing", m("get_size"), "no.such.key")
    r.call("is_exist.missing", m("is_exist"), "no.such.key")
    r.call("remove.missing", m("remove"), "no.such.key")

    # --- duplicate puts (Mooncake's Python put answers 0: first write wins) ----------
    r.call("put.dup_same", m("put"), "pg.4KiB", values["4KiB"])
    r.call("put.dup_different", m("put"), "pg.1B", b"Z")
    got = r.call("get.after_dup", m("get"), "pg.1B")
    r.note("get.after_dup.first_write_kept", int(got == values["1B"]))
    r.call("get_size.after_dup", m("get_size"), "pg.1B")

    # --- batch_is_exist ------------------------------------------------------------
    r.call("batch_is_exist.mixed", m("batch_is_exist"), ["pg.1B", "no.such.key", "pg.8MiB"])
    r.call("batch_is_exist.empty", m("batch_is_exist"), [])

    # --- zero-copy put_from / get_into with registered buffers ------------------------
    src = alloc(ZC_BUFFER_SIZE)
    dst = alloc(ZC_BUFFER_SIZE)
    zc = pattern("zc", ZC_BUFFER_SIZE)
    write(src.ptr, zc)
    r.call("register_buffer.src", m("register_buffer"), src.ptr, ZC_BUFFER_SIZE)
    r.call("register_buffer.dst", m("register_buffer"), dst.ptr, ZC_BUFFER_SIZE)

    for name, size in SIZES:
        r.call("put_from." + name, m("put_from"), "zc." + name, src.ptr, size)
    for name, size in SIZES:
        write(dst.ptr, b"\0" * size)
        r.call("get_into.exact." + name, m("get_into"), "zc." + name, dst.ptr, size)
        r.note("get_into.exact." + name + ".matches", int(read(dst.ptr, size) == zc[:size]))
    write(dst.ptr, b"\0" * 8192)
    r.call("get_into.larger_buffer", m("get_into"), "zc.4KiB", dst.ptr, 1 * MiB)
    r.note("get_into.larger_buffer.matches", int(read(dst.ptr, 4 * KiB) == zc[: 4 * KiB]))
    r.call("get_into.too_small", m("get_into"), "zc.4KiB", dst.ptr, 4 * KiB - 1)
    r.call("get_into.missing", m("get_into"), "no.such.key", dst.ptr, 4 * KiB)
    r.call("get.of_put_from", m("get"), "zc.4KiB")
    write(dst.ptr, b"\0" * 64)
    r.call("get_into.of_put", m("get_into"), "pg.4KiB", dst.ptr, 4 * KiB)
    r.note("get_into.of_put.matches", int(read(dst.ptr, 4 * KiB) == values["4KiB"]))
    r.call("put_from.dup", m("put_from"), "zc.4KiB", src.ptr + 1, 4 * KiB)
    r.call("put_from.offset", m("put_from"), "zc.offset", src.ptr + 12345, 777)
    r.call("get.offset", m("get"), "zc.offset")

    # --- batch_put_from / batch_get_into ---------------------------------------------
    r.call(
        "batch_put_from",
        m("batch_put_from"),
        ["bp.1", "bp.2", "bp.3", "zc.1B"],
        [src.ptr, src.ptr + 4096, src.ptr + 8192, src.ptr],
        [1, 4 * KiB, 1 * MiB, 1],
    )
    r.call("batch_put_from.empty", m("batch_put_from"), [], [], [])
    write(dst.ptr, b"\0" * (3 * MiB))
    r.call(
        "batch_get_into.mixed",
        m("batch_get_into"),
        ["bp.1", "no.such.key", "bp.2", "bp.3", "bp.2"],
        [dst.ptr, dst.ptr + 4096, dst.ptr + 8192, dst.ptr + 1 * MiB, dst.ptr + 2 * MiB + 8192],
        [4096, 4096, 4 * KiB - 1, 1 * MiB, 1 * MiB],
    )
    r.note(
        "batch_get_into.mixed.matches",
        [
            int(read(dst.ptr, 1) == zc[:1]),
            int(read(dst.ptr + 1 * MiB, 1 * MiB) == zc[8192 : 8192 + 1 * MiB]),
            int(read(dst.ptr + 2 * MiB + 8192, 4096) == zc[4096:8192]),
        ],
    )
    r.call("batch_get_into.empty", m("batch_get_into"), [], [], [])

    # --- put_parts -----------------------------------------------------------------
    r.call("put_parts", m("put_parts"), "pp.1", b"ab", bytearray(b"cd"), memoryview(b"efg"), b"")
    r.call("get.put_parts", m("get"), "pp.1")
    big = [pattern("part%d" % i, 300 * KiB) for i in range(4)]
    r.call("put_parts.large", m("put_parts"), "pp.2", *big)
    got = r.call("get.put_parts.large", m("get"), "pp.2")
    r.note("get.put_parts.large.matches", int(got == b"".join(big)))
    r.call("get_size.put_parts.large", m("get_size"), "pp.2")
    r.call("put_parts.dup", m("put_parts"), "pp.1", b"x", b"y")
    r.call("get.put_parts.after_dup", m("get"), "pp.1")

    # --- multi-buffer batches (scatter-gather; vLLM's main calls) ---------------------
    s = src.ptr
    r.call(
        "batch_put_from_multi_buffers",
        m("batch_put_from_multi_buffers"),
        ["mb.1", "mb.2", "mb.3"],
        [[s, s + 1], [s + 3], [s + 16, s + 16 + 8192, s + 16 + 3 * 8192]],
        [[1, 2], [2], [4096, 4096, 100]],
    )
    write(dst.ptr, b"\0" * 65536)
    d = dst.ptr
    r.call(
        "batch_get_into_multi_buffers.mixed",
        m("batch_get_into_multi_buffers"),
        ["mb.1", "mb.2", "mb.3", "no.such.key", "mb.3"],
        [[d, d + 10], [d + 20, d + 30], [d + 100, d + 100 + 4096], [d + 9000], [d + 10000, d + 20000]],
        [[2, 1], [4, 4], [4096, 4096], [16], [4096, 4196]],
    )
    r.note(
        "batch_get_into_multi_buffers.mixed.matches",
        [
            int(read(d, 2) + read(d + 10, 1) == zc[0:1] + zc[1:3]),
            int(read(d + 20, 2) == zc[3:5]),
            int(read(d + 10000, 4096) + read(d + 20000, 4196)[:4196]
                == zc[16 : 16 + 4096] + zc[16 + 8192 : 16 + 8192 + 4096] + zc[16 + 3 * 8192 : 16 + 3 * 8192 + 100]),
        ],
    )
    r.call("get.multi_buffers", m("get"), "mb.3")
    r.call("get_size.multi_buffers", m("get_size"), "mb.3")
    r.call(
        "batch_put_from_multi_buffers.dup",
        m("batch_put_from_multi_buffers"),
        ["mb.1", "mb.4"],
        [[s + 100], [s + 200, s + 300]],
        [[3], [5, 5]],
    )
    r.call("get.multi_buffers.after_dup", m("get"), "mb.1")
    r.call("batch_put_from_multi_buffers.empty", m("batch_put_from_multi_buffers"), [], [], [])
    r.call("batch_get_into_multi_buffers.empty", m("batch_get_into_multi_buffers"), [], [], [])

    # --- leases and removes --------------------------------------------------------
    for k in ("ls.unread", "ls.get", "ls.exist", "ls.bexist", "ls.size", "ls.into",
              "ls.batch.unread", "ls.batch.read", "ls.force"):
        r.call("put." + k, m("put"), k, b"lease-" + k.encode())
    r.call("remove.unread", m("remove"), "ls.unread")
    r.call("is_exist.after_remove", m("is_exist"), "ls.unread")
    r.call("get.after_remove", m("get"), "ls.unread")

    r.call("get.lease", m("get"), "ls.get")
    r.call("remove.after_get", m("remove"), "ls.get")
    r.call("remove.after_get.again", m("remove"), "ls.get", False)
    r.call("remove.after_get.force", m("remove"), "ls.get", True)
    r.call("is_exist.after_forced_remove", m("is_exist"), "ls.get")

    r.call("is_exist.lease", m("is_exist"), "ls.exist")
    r.call("remove.after_is_exist", m("remove"), "ls.exist")
    r.call("batch_is_exist.lease", m("batch_is_exist"), ["ls.bexist"])
    r.call("remove.after_batch_is_exist", m("remove"), "ls.bexist")
    r.call("get_size.lease", m("get_size"), "ls.size")
    r.call("remove.after_get_size", m("remove"), "ls.size")
    r.call("get_into.lease", m("get_into"), "ls.into", dst.ptr, 4096)
    r.call("remove.after_get_into", m("remove"), "ls.into")
    r.call("remove.force_kw", m("remove"), "ls.into", force=True)

    r.call("get.lease.batch", m("get"), "ls.batch.read")
    r.call(
        "batch_remove.mixed",
        m("batch_remove"),
        ["ls.batch.read", "ls.batch.unread", "no.such.key"],
    )
    r.call("batch_remove.force", m("batch_remove"), ["ls.batch.read", "no.such.key"], True)
    r.call("batch_remove.empty", m("batch_remove"), [])
    r.call("batch_is_exist.after_batch_remove", m("batch_is_exist"), ["ls.batch.read", "ls.batch.unread"])
    r.call("remove.force.unread", m("remove"), "ls.force", True)

    # remove_all: the leased objects stay unless forced; the answer is how many went.
    r.call("put.ra.unread", m("put"), "ra.unread", b"x")
    r.call("remove_all", m("remove_all"))
    r.call("batch_is_exist.after_remove_all",
           m("batch_is_exist"), ["ra.unread", "pg.1B", "zc.4KiB", "mb.1", "pp.1"])
    r.call("remove_all.force", m("remove_all"), True)
    r.call("batch_is_exist.after_remove_all_force",
           m("batch_is_exist"), ["pg.1B", "zc.4KiB", "mb.1", "pp.1", "ls.exist"])
    r.call("remove_all.empty_store", m("remove_all"))
    r.call("put.after_remove_all", m("put"), "pg.1B", b"new")
    r.call("get.after_remove_all", m("get"), "pg.1B")

    # --- edge values ------------------------------------------------------------------
    r.call("put.empty_value", m("put"), "edge.empty", b"")
    r.call("is_exist.empty_value", m("is_exist"), "edge.empty")
    r.call("put.empty_key", m("put"), "", b"x")
    r.call("put_from.zero_size", m("put_from"), "edge.zero", src.ptr, 0)
    r.call("is_exist.zero_size", m("is_exist"), "edge.zero")
    r.call("put_parts.no_parts", m("put_parts"), "edge.noparts")
    r.call("is_exist.no_parts", m("is_exist"), "edge.noparts")

    # --- invalid keys -------------------------------------------------------------------
    # The empty key through every call, alone and inside batches (whose other keys
    # must still go through): puts refuse it, lookups do not find it.
    s, d = src.ptr, dst.ptr
    r.call("put.ik", m("put"), "ik.a", b"abc")
    r.call("invalid_key.put_from", m("put_from"), "", s, 4)
    r.call("invalid_key.put_parts", m("put_parts"), "", b"a", b"b")
    r.call("invalid_key.is_exist", m("is_exist"), "")
    r.call("invalid_key.get_size", m("get_size"), "")
    r.call("invalid_key.get", m("get"), "")
    r.call("invalid_key.get_into", m("get_into"), "", d, 64)
    r.call("invalid_key.remove", m("remove"), "")
    r.call("invalid_key.remove.force", m("remove"), "", True)
    r.call("invalid_key.batch_is_exist", m("batch_is_exist"), ["ik.a", "", "no.such.key"])
    r.call("invalid_key.batch_get_into", m("batch_get_into"), ["ik.a", "", "no.such.key"],
           [d, d + 64, d + 128], [64, 64, 64])
    r.call("invalid_key.batch_get_into_multi_buffers", m("batch_get_into_multi_buffers"),
           ["ik.a", ""], [[d], [d + 64]], [[3], [4]])
    r.call("invalid_key.batch_put_from", m("batch_put_from"), ["ik.b", ""], [s, s + 64], [4, 4])
    r.call("invalid_key.batch_put_from_multi_buffers", m("batch_put_from_multi_buffers"),
           ["", "ik.c"], [[s], [s]], [[4], [4]])
    r.call("invalid_key.batch_remove", m("batch_remove"), ["ik.b", "", "no.such.key"])
    r.call("invalid_key.batch_is_exist.after", m("batch_is_exist"), ["ik.b", "ik.c"])
    # A key over egmstore's 4096 bytes: Mooncake 0.3.13.post1 stores it, egmstore cannot.
    long_key = "k" * 4097
    r.call("invalid_key.long.put", m("put"), long_key, b"x")
    r.call("invalid_key.long.is_exist", m("is_exist"), long_key)
    r.call("invalid_key.long.remove.force", m("remove"), long_key, True)

    # --- replica counts out of range ----------------------------------------------------
    if replicate_config is not None:
        for num in (0, 17):
            cfg = replicate_config()
            cfg.replica_num = num
            r.call("put.replica_num_%d" % num, m("put"), "rn.%d" % num, b"x", cfg)
            r.call("batch_put_from.replica_num_%d" % num, m("batch_put_from"),
                   ["rn.b.%d" % num], [s], [4], cfg)
            r.call("batch_is_exist.replica_num_%d" % num, m("batch_is_exist"),
                   ["rn.%d" % num, "rn.b.%d" % num])
            r.call("batch_remove.replica_num_%d" % num, m("batch_remove"),
                   ["rn.%d" % num, "rn.b.%d" % num], True)

    # --- register/unregister -----------------------------------------------------------
    r.call("register_buffer.twice", m("register_buffer"), src.ptr, ZC_BUFFER_SIZE)
    r.call("unregister_buffer.unknown", m("unregister_buffer"), src.ptr + 12345)
    r.call("unregister_buffer.src", m("unregister_buffer"), src.ptr)
    r.call("unregister_buffer.src.again", m("unregister_buffer"), src.ptr)
    r.call("unregister_buffer.dst", m("unregister_buffer"), dst.ptr)
    # Mooncake's tcp transport reads and writes unregistered memory too.
    r.call("put_from.unregistered", m("put_from"), "unreg.1", src.ptr, 4096)
    r.call("remove.unregistered", m("remove"), "unreg.1", True)  # keeps later counts independent of it
    r.call("put.unreg.2", m("put"), "unreg.2", zc[:4096])
    write(dst.ptr, b"\0" * 4096)
    r.call("get_into.unregistered", m("get_into"), "unreg.2", dst.ptr, 4096)
    r.note("get_into.unregistered.matches", int(read(dst.ptr, 4096) == zc[:4096]))
    # Nothing may outlive close(): where an object lives (Mooncake: the writer's own
    # segment, which close() unmounts; egmstore: any segment) must not change results.
    r.call("remove_all.before_close", m("remove_all"), True)

    # --- health, close, calls after close ---------------------------------------------
    r.call("health_check", m("health_check"))
    r.call("close", m("close"))
    r.call("health_check.after_close", m("health_check"))
    r.call("get.after_close", m("get"), "pg.1B")
    r.call("put_from.after_close", m("put_from"), "closed.k", src.ptr, 16)
    for label, name, args in AFTER_CLOSE_CALLS:
        if label in skip:
            r.skip(label, skip[label])
        else:
            r.call(label, m(name), *[_ptr(a, src.ptr) for a in args])
    r.call("close.again", m("close"))

    # --- setup again on the same object, after close --------------------------------------
    rc = r.call(
        "setup.after_close", m("setup"), "127.0.0.1", "P2PHANDSHAKE", GLOBAL_SEGMENT_SIZE,
        LOCAL_BUFFER_SIZE, "tcp", "", master_addr)
    if rc == 0:
        r.call("health_check.after_resetup", m("health_check"))
        r.call("get.after_resetup", m("get"), "pg.1B")
        r.call("put.after_resetup", m("put"), "re.1", b"again")
        r.call("get.after_resetup.new", m("get"), "re.1")
        r.call("remove.after_resetup", m("remove"), "re.1", True)
        r.call("close.after_resetup", m("close"))

    # --- the dict form of setup, on a second object -----------------------------------------
    if new_store is not None:
        # Sizes of the wrong type, each on a fresh object: refused, not coerced.
        for name, key, value in BAD_DICT_SIZES:
            bad = new_store()
            config = {
                "local_hostname": "127.0.0.1",
                "metadata_server": "P2PHANDSHAKE",
                "global_segment_size": GLOBAL_SEGMENT_SIZE,
                "local_buffer_size": LOCAL_BUFFER_SIZE,
                "protocol": "tcp",
                "master_server_addr": master_addr,
            }
            config[key] = value
            if r.call("setup.dict.bad." + name, _method(bad, "setup"), config) == 0:
                _method(bad, "close")()
        # A size as text with a unit, which both read.
        sized = new_store()
        rc = r.call("setup.dict.size_text", _method(sized, "setup"), {
            "local_hostname": "127.0.0.1",
            "metadata_server": "P2PHANDSHAKE",
            "global_segment_size": "16MB",
            "local_buffer_size": "32MB",
            "protocol": "tcp",
            "master_server_addr": master_addr,
        })
        if rc == 0:
            r.call("setup.dict.size_text.put", _method(sized, "put"), "sized.1", b"x")
            r.call("setup.dict.size_text.remove", _method(sized, "remove"), "sized.1")
            r.call("setup.dict.size_text.close", _method(sized, "close"))
        store2 = new_store()
        m2 = lambda name: _method(store2, name)  # noqa: E731
        rc = r.call("setup.dict", m2("setup"), {
            "local_hostname": "127.0.0.1",
            "metadata_server": "P2PHANDSHAKE",
            "global_segment_size": GLOBAL_SEGMENT_SIZE,
            "local_buffer_size": LOCAL_BUFFER_SIZE,
            "protocol": "tcp",
            "master_server_addr": master_addr,
        })
        if rc == 0:
            r.call("dict.health_check", m2("health_check"))
            r.call("dict.get.from_first_store", m2("get"), "re.1")
            r.call("dict.put", m2("put"), "dict.1", b"dict-form")
            r.call("dict.get", m2("get"), "dict.1")
            r.call("dict.remove_all.force", m2("remove_all"), True)
            r.call("dict.close", m2("close"))
    return r.results


# setup(config_dict) with a size of the wrong type: (label, key, value).
BAD_DICT_SIZES = [
    ("global_segment_size.list", "global_segment_size", [1]),
    ("global_segment_size.float", "global_segment_size", 1.5),
    ("global_segment_size.bool", "global_segment_size", True),
    ("local_buffer_size.str", "local_buffer_size", "x"),
]

PTR = object()  # stands for the (registered, then unregistered) source buffer's address


def _ptr(arg, ptr):
    if arg is PTR:
        return ptr
    if isinstance(arg, list):
        return [_ptr(a, ptr) for a in arg]
    return arg

# Calls made after close() whose result is compared. On Mooncake 0.3.13.post1 every one of
# these crashes the process (segmentation fault; only health_check, get, put_from, close and
# setup survive close there), so the test skips them on that side and checks egmstore's
# answers on their own (an error code, not a crash).
AFTER_CLOSE_CALLS = [
    ("put.after_close", "put", ("closed.k", b"v")),
    ("is_exist.after_close", "is_exist", ("pg.1B",)),
    ("batch_is_exist.after_close", "batch_is_exist", (["pg.1B"],)),
    ("get_size.after_close", "get_size", ("pg.1B",)),
    ("get_into.after_close", "get_into", ("pg.1B", PTR, 16)),
    ("batch_get_into.after_close", "batch_get_into", (["pg.1B"], [PTR], [16])),
    ("batch_put_from.after_close", "batch_put_from", (["closed.k"], [PTR], [16])),
    ("put_parts.after_close", "put_parts", ("closed.k", b"a", b"b")),
    ("remove.after_close", "remove", ("pg.1B",)),
    ("batch_remove.after_close", "batch_remove", (["pg.1B"],)),
    ("remove_all.after_close", "remove_all", ()),
    ("register_buffer.after_close", "register_buffer", (PTR, 4096)),
    ("unregister_buffer.after_close", "unregister_buffer", (PTR,)),
    ("get_hostname.after_close", "get_hostname", ()),
]
MOONCAKE_CRASHES_AFTER_CLOSE = {
    label: "segfaults in Mooncake 0.3.13.post1 after close()" for label, _, _ in AFTER_CLOSE_CALLS
}
