"""Mooncake Store's Python API on egmstore.

``from egmstore.mooncake import MooncakeDistributedStore, ReplicateConfig`` in
place of ``from mooncake.store import ...``: the same method names, signatures
and return conventions (0 or a negative Mooncake ErrorCode; bytes read for the
get-into calls; 1/0 for ``is_exist``; ``b""`` from ``get`` of a missing key;
one entry per key from batch calls). Nothing here raises for a store failure;
bad Python arguments raise TypeError/ValueError as Mooncake's binding does.
docs/python.md lists every method and each difference from Mooncake.

An engine that imports ``mooncake.store`` itself gets this module with
EGMSTORE_AS_MOONCAKE=1 in its environment (the package's .pth file) or after
``install()``; docs/mooncake-compat.md says how and when that is refused.
"""

import ctypes
import enum
import inspect
import logging
import os
import random
import re
import socket

from . import Status, _egmstore, _standin

__all__ = [
    "MooncakeDistributedStore", "ReplicateConfig", "ErrorCode", "install", "BufferHandle",
    "SoftPinAction", "ObjectDataType", "ReplicaStatus", "TaskStatus", "TaskType",
    "ReplicaDescriptor", "MemoryDescriptor", "DiskDescriptor", "Descriptor", "bind_to_numa_node",
]

log = logging.getLogger(__name__)


class ErrorCode:
    """The Mooncake ErrorCode values this module answers."""

    OK = 0
    INTERNAL_ERROR = -1
    BUFFER_OVERFLOW = -10
    NO_AVAILABLE_HANDLE = -200
    INVALID_PARAMS = -600
    OBJECT_NOT_FOUND = -704
    OBJECT_ALREADY_EXISTS = -705
    OBJECT_HAS_LEASE = -706
    RPC_FAIL = -900
    UNAVAILABLE_IN_CURRENT_STATUS = -1010
    NOT_SUPPORTED = -1012
    DFS_SERVICE_UNAVAILABLE = -1601


#: What get_buffer / batch_get_buffer answer: the object's bytes as the library
#: read them, without a copy (buffer protocol: writable, format "b"; len(),
#: ptr(), size()), freed when the last reference or view goes.
BufferHandle = _egmstore.BufferHandle


class _PybindEnum(enum.Enum):
    """Behaves as Mooncake's pybind11 enums: repr <SoftPinAction.ENABLE: 1>,
    str SoftPinAction.ENABLE, int() and use as an index work, but a member is
    not an int and never equals one."""

    def __int__(self):
        return self.value

    def __index__(self):
        return self.value


class SoftPinAction(_PybindEnum):
    """ReplicateConfig.soft_pin_action: PRESERVE (a new object is not
    soft-pinned; an existing one keeps its pin), ENABLE (soft-pin), DISABLE."""

    PRESERVE = 0
    ENABLE = 1
    DISABLE = 2


class ObjectDataType(_PybindEnum):
    """ReplicateConfig.data_type: a label, accepted and not used by egmstore."""

    UNKNOWN = 0
    KVCACHE = 1
    TENSOR = 2
    WEIGHT = 3
    SAMPLE = 4
    ACTIVATION = 5
    GRADIENT = 6
    OPTIMIZER_STATE = 7
    METADATA = 8
    GENERAL = 9


class ReplicaStatus(_PybindEnum):
    UNDEFINED = 0
    INITIALIZED = 1
    PROCESSING = 2
    COMPLETE = 3
    REMOVED = 4
    FAILED = 5


class TaskStatus(_PybindEnum):
    PENDING = 0
    PROCESSING = 1
    SUCCESS = 3  # Mooncake's values and order
    FAILED = 2


class TaskType(_PybindEnum):
    REPLICA_COPY = 0
    REPLICA_MOVE = 1


# Mooncake's module also exports the members by name; as there, TaskStatus's
# FAILED and PROCESSING win over ReplicaStatus's.
for _enum in (ObjectDataType, ReplicaStatus, TaskStatus, TaskType):
    globals().update(_enum.__members__)
del _enum


# The longest soft pin a put may ask for (ms): Mooncake's limit, measured (24 h).
_SOFT_PIN_TTL_MAX_MS = 24 * 3600 * 1000
# Mooncake's own default sizes for the dict form of setup().
_DEFAULT_SEGMENT = 16 * 1024 * 1024
_DEFAULT_BUFFER = 16 * 1024 * 1024
_DEFAULT_MASTER = "127.0.0.1:50051"
# egmstore's protocols keep their meaning (tcp, shm, nvlink: that transport only).
_PROTOCOLS = ("tcp", "shm", "nvlink", "auto")
# Mooncake's transfer-engine protocols that egmstore has no transport for (its
# "tcp" and "nvlink" are egmstore's too): setup takes them as "auto", the best
# transport this client has for each replica (nvlink > shm > tcp), and says so once.
_MOONCAKE_PROTOCOLS = ("rdma", "efa", "nvlink_intra", "nvmeof", "hip", "barex", "cxl", "ascend")
# Mooncake setup keys that have no egmstore meaning (accepted, ignored).
_IGNORED_KEYS = {
    "metadata_server", "local_buffer_size", "rdma_devices", "ipc_socket_path",
    "enable_ssd_offload", "ssd_offload_path", "tenant_id", "enable_client_http_server",
    "client_http_port", "engine",
}
# setup(config_dict): the names LMCache sends for two of Mooncake's keys (Mooncake
# itself reads only its own, so LMCache's master address is lost there); the
# Mooncake name wins when both are given.
_DICT_ALIASES = {"master_server_address": "master_server_addr", "device_name": "rdma_devices"}


def _code(status):
    """egm status -> Mooncake ErrorCode (0 for success), for the put calls."""
    if status >= 0:
        return 0
    # Measured: Mooncake's puts answer an empty key with INVALID_PARAMS.
    if status == Status.INVALID_KEY:
        return ErrorCode.INVALID_PARAMS
    return _egmstore.status_to_mooncake(status)


def _lookup_code(status):
    """As _code, for the calls that look a key up (get_size, get_into, remove and
    their batches): measured, Mooncake answers an empty key there, alone or in a
    batch, with OBJECT_NOT_FOUND; a key egmstore cannot store is never found."""
    if status == Status.INVALID_KEY:
        return ErrorCode.OBJECT_NOT_FOUND
    return _code(status)


def _buffer_code(status):
    # Measured: Mooncake answers a second registration of a buffer, and the
    # unregistration of an unknown one, with INVALID_PARAMS.
    if status in (Status.EXISTS, Status.NOT_FOUND):
        return ErrorCode.INVALID_PARAMS
    return _code(status)


def _put_code(status):
    # Mooncake's client treats a put of an existing key as success (value unchanged).
    return 0 if status == Status.EXISTS else _code(status)


def _read_code(status, nbytes):
    if status >= 0:
        return nbytes
    # Measured: Mooncake answers a too-small destination with INVALID_PARAMS.
    if status == Status.BUFFER_TOO_SMALL:
        return ErrorCode.INVALID_PARAMS
    return _lookup_code(status)


# A batch's codes: a batch whose keys all succeeded (the common case) with no step per key
# (min() over the statuses runs in C: for 1024 keys 12 us against 72 us for the comprehension
# on the development VM); else a success converted inline (no call per key: a batch of 1024
# keys spent 0.35 ms in such calls) and anything else by the function of one key.
def _put_codes(results):
    if not results or min(results) >= 0:
        return [0] * len(results)
    return [0 if st >= 0 else _put_code(st) for st in results]


def _read_codes(results, nbytes):
    if not results or min(results) >= 0:
        return nbytes  # a new list from the binding: the bytes read
    return [n if st >= 0 else _read_code(st, n) for st, n in zip(results, nbytes)]


def _exist_codes(results):
    if not results or min(results) >= 0:
        return [1] * len(results)
    return [1 if st >= 0 else _exist_code(st) for st in results]


def _exist_code(status):
    # Measured: is_exist and batch_is_exist answer 0 for an empty key.
    if status >= 0:
        return 1
    if status in (Status.NOT_FOUND, Status.INVALID_KEY):
        return 0
    return _code(status)


_SIZE_T_MAX = (1 << 64) - 1


def _check_count(name, value):
    # As Mooncake's (pybind11, size_t / uint64_t): a non-int, a negative value or one past
    # 2**64 - 1 raises TypeError (measured); True is taken as 1.
    if not isinstance(value, int) or not 0 <= value <= _SIZE_T_MAX:
        raise TypeError(f"{name} must be an int in 0..2**64-1, not {value!r}")
    return int(value)


def _check_flag(name, value):
    if not isinstance(value, int):  # bool is an int; pybind11 takes 1 as True too
        raise TypeError(f"{name} must be a bool, not {type(value).__name__}")
    return bool(value)


def _check_names(name, value, optional=False):
    if value is None and optional:
        return None
    if isinstance(value, (str, bytes)) or not all(isinstance(v, str) for v in value):
        raise TypeError(f"{name} must be a list of str{' or None' if optional else ''}, "
                        f"not {value!r}")
    return list(value)


def _check_str(name, value):
    if not isinstance(value, str):
        raise TypeError(f"{name} must be a str, not {type(value).__name__}")
    return value


def _check_enum(cls):
    def check(name, value):
        if not isinstance(value, cls):
            raise TypeError(f"{name} must be a {cls.__name__}, not {value!r}")
        return value

    return check


def _check_ttl(name, value):
    if value is None:
        return None
    return _check_count(name, value)


# ReplicateConfig's fields as in Mooncake 0.3.13.post1: name -> (default, check).
_RC_FIELDS = {
    "replica_num": (1, _check_count),
    "nof_replica_num": (0, _check_count),
    "dfs_replica_num": (0, _check_count),
    "soft_pin_action": (SoftPinAction.PRESERVE, _check_enum(SoftPinAction)),
    "soft_pin_ttl_ms": (None, _check_ttl),
    "with_hard_pin": (False, _check_flag),
    "preferred_segments": ((), _check_names),
    "preferred_nof_segments": ((), _check_names),
    "preferred_segment": ("", _check_str),
    "prefer_alloc_in_same_node": (False, _check_flag),
    "data_type": (ObjectDataType.UNKNOWN, _check_enum(ObjectDataType)),
    "group_ids": (None, lambda name, v: _check_names(name, v, optional=True)),
}


def _rc_field(name, check):
    attr = "_" + name

    def get(self):
        return getattr(self, attr)

    def set_(self, value):
        setattr(self, attr, check(name, value))

    return property(get, set_)


class ReplicateConfig:
    """Mooncake 0.3.13.post1's ReplicateConfig: the same fields, defaults and
    type checks (a wrong type raises TypeError on assignment; an unknown field,
    such as the removed ``with_soft_pin``, raises AttributeError). Unlike
    Mooncake's, the constructor also takes the fields as keyword arguments.

    What egmstore does with them: ``replica_num`` (1..16), ``with_hard_pin``,
    ``preferred_segments`` (``preferred_segment`` when empty) and
    ``soft_pin_action`` (ENABLE soft-pins the new object; PRESERVE and DISABLE
    do not) place the object. ``nof_replica_num`` > 0 answers -600 and
    ``dfs_replica_num`` > 0 answers -1601, as Mooncake does without NVMe-oF
    segments or a DFS. ``soft_pin_ttl_ms`` is checked as Mooncake checks it
    (set, it goes with ENABLE only and at most 24 h, else -600) and otherwise
    has no effect (the master's soft-pin TTL applies); ``preferred_nof_segments``,
    ``prefer_alloc_in_same_node``, ``data_type`` and ``group_ids`` are accepted
    and have no effect."""

    __slots__ = tuple("_" + name for name in _RC_FIELDS)

    def __init__(self, **fields):
        for name, (default, _) in _RC_FIELDS.items():
            setattr(self, name, default)
        for name, value in fields.items():
            if name not in _RC_FIELDS:
                raise TypeError(f"ReplicateConfig() got an unexpected keyword argument {name!r}")
            setattr(self, name, value)

    def _as_tuple(self):
        segs = list(self.preferred_segments)
        if not segs and self.preferred_segment:
            segs = [self.preferred_segment]
        soft = self.soft_pin_action is SoftPinAction.ENABLE
        return (self.replica_num, soft, bool(self.with_hard_pin), segs)

    def __str__(self):
        def names(v):
            return "[" + ", ".join(v) + "]"

        ttl = "default" if self.soft_pin_ttl_ms is None else str(self.soft_pin_ttl_ms)
        deprecated = (f"preferred_segment (deprecated): {self.preferred_segment}, "
                      if self.preferred_segment else "")
        return (f"ReplicateConfig: {{ replica_num: {self.replica_num}, "
                f"nof_replica_num: {self.nof_replica_num}, "
                f"dfs_replica_num: {self.dfs_replica_num}, "
                f"soft_pin_action: {self.soft_pin_action.name}, soft_pin_ttl_ms: {ttl}, "
                f"with_hard_pin: {int(self.with_hard_pin)}, "
                f"preferred_segments: {names(self.preferred_segments)}, {deprecated}"
                f"preferred_nof_segments: {names(self.preferred_nof_segments)}, "
                f"prefer_alloc_in_same_node: {int(self.prefer_alloc_in_same_node)}, "
                f"data_type: {self.data_type.name} }}")


for _name, (_default, _check) in _RC_FIELDS.items():
    setattr(ReplicateConfig, _name, _rc_field(_name, _check))
del _name, _default, _check


def _rc(config):
    """The binding's replicate tuple or None; or, for a config no put can
    honour, the ErrorCode the put calls answer (logged). Measured on Mooncake:
    replica_num 0 and nof_replica_num > 0 (no NVMe-oF segments) answer
    INVALID_PARAMS, dfs_replica_num > 0 (no DFS) DFS_SERVICE_UNAVAILABLE, and so
    does a soft_pin_ttl_ms given without SoftPinAction.ENABLE or above 24 h
    (INVALID_PARAMS; 0 is accepted)."""
    if config is None:
        return None
    if not isinstance(config, ReplicateConfig):
        raise TypeError("config must be an egmstore.mooncake.ReplicateConfig, "
                        f"not {type(config).__name__}")
    rc = config._as_tuple()
    if config.dfs_replica_num > 0:
        log.error("put: ReplicateConfig.dfs_replica_num is %d; egmstore has no DFS replicas",
                  config.dfs_replica_num)
        return ErrorCode.DFS_SERVICE_UNAVAILABLE
    if config.nof_replica_num > 0:
        log.error("put: ReplicateConfig.nof_replica_num is %d; egmstore has no NVMe-oF "
                  "segments", config.nof_replica_num)
        return ErrorCode.INVALID_PARAMS
    ttl = config.soft_pin_ttl_ms
    if ttl is not None and config.soft_pin_action is not SoftPinAction.ENABLE:
        log.error("put: ReplicateConfig.soft_pin_ttl_ms is set (%d) but soft_pin_action is %s; "
                  "a TTL goes only with SoftPinAction.ENABLE", ttl, config.soft_pin_action.name)
        return ErrorCode.INVALID_PARAMS
    if ttl is not None and ttl > _SOFT_PIN_TTL_MAX_MS:
        log.error("put: ReplicateConfig.soft_pin_ttl_ms must be at most %d (24 h), not %d",
                  _SOFT_PIN_TTL_MAX_MS, ttl)
        return ErrorCode.INVALID_PARAMS
    if not 1 <= rc[0] <= _egmstore.REPLICA_MAX:
        log.error("put: ReplicateConfig.replica_num must be 1..%d, not %d",
                  _egmstore.REPLICA_MAX, rc[0])
        return ErrorCode.INVALID_PARAMS
    return rc


def _nbytes(value):
    """Bytes in a bytes-like value (0 for anything else: the binding then raises
    TypeError naming it)."""
    try:
        return memoryview(value).nbytes
    except TypeError:
        return 0


def _same_lengths(call, keys, ptrs, sizes, parts=False):
    """Whether a batch's lists match (and, for parts, each key's two lists):
    measured, Mooncake answers INVALID_PARAMS for every key when they do not.
    The calls with parts leave each key's two lists to the binding (_parts_call),
    which compares them while it converts them."""
    try:
        ok = len(ptrs) == len(sizes) == len(keys)
        if ok and parts:
            ok = list(map(len, ptrs)) == list(map(len, sizes))
    except TypeError:
        return True  # not lists: the binding raises TypeError naming the argument
    if not ok:
        _mismatch(call)
    return ok


def _mismatch(call):
    log.error("%s(): keys, buffer pointers and sizes must have matching lengths", call)


def _parts_call(call, fn, keys, *args):
    """fn(keys, *args) of the binding; None when a key's lists of addresses and
    sizes differ in length (logged: the caller answers INVALID_PARAMS)."""
    try:
        return fn(keys, *args)
    except _egmstore.PartsMismatchError:
        _mismatch(call)
        return None


def _refused(rc):
    """Whether _rc answered a code instead of a tuple."""
    return isinstance(rc, int)


def _registered(regions, ptr, size):
    """Whether [ptr, ptr+size) lies inside one registered region {base: size}."""
    return any(base <= ptr and ptr + size <= base + length for base, length in regions.items())


# set_mempolicy(2)'s number per machine (no libc wrapper; libnuma may be absent).
_SYS_SET_MEMPOLICY = {"x86_64": 238, "aarch64": 237}
_MPOL_PREFERRED = 1


def _prefer_node_memory(node):
    """set_mempolicy(MPOL_PREFERRED, {node}) for the calling thread; False if
    this machine's system call number is unknown or the call fails."""
    number = _SYS_SET_MEMPOLICY.get(os.uname().machine)
    if number is None or not 0 <= node < 1024:
        return False
    mask = (ctypes.c_ulong * (1024 // (8 * ctypes.sizeof(ctypes.c_ulong))))()
    bits = 8 * ctypes.sizeof(ctypes.c_ulong)
    mask[node // bits] = 1 << (node % bits)
    libc = ctypes.CDLL(None, use_errno=True)
    return libc.syscall(ctypes.c_long(number), ctypes.c_int(_MPOL_PREFERRED), mask,
                        ctypes.c_ulong(1024 + 1)) == 0


def bind_to_numa_node(node):
    """Mooncake's bind_to_numa_node(node) -> None: binds the calling thread to
    the CPUs of NUMA node `node` (as listed in /sys/devices/system/node) and
    prefers that node for the thread's new memory (set_mempolicy
    MPOL_PREFERRED, as libnuma's numa_set_preferred). A node this machine does
    not have is logged and ignored, as Mooncake does (its libnuma warns and
    carries on)."""
    if not isinstance(node, int) or isinstance(node, bool):
        raise TypeError(f"bind_to_numa_node(): node must be an int, not {type(node).__name__}")
    path = f"/sys/devices/system/node/node{node}/cpulist"
    try:
        with open(path) as f:
            text = f.read().strip()
        cpus = set()
        for part in filter(None, text.split(",")):
            low, _, high = part.partition("-")
            cpus.update(range(int(low), int(high or low) + 1))
        if node < 0 or not cpus:
            raise ValueError("no CPUs")
        os.sched_setaffinity(0, cpus)
    except (OSError, ValueError) as e:
        log.warning("bind_to_numa_node(%d): no such NUMA node here (%s); not bound", node, e)
        return
    if not _prefer_node_memory(node):
        log.warning("bind_to_numa_node(%d): CPUs bound, but memory could not be preferred "
                    "(set_mempolicy: %s)", node, os.strerror(ctypes.get_errno()) or "unsupported")


class _PutSession:
    """A put session's object, assembled in a zeroed host buffer of its size.
    The buffer is registered with the client (a local record, no RPC), so that
    batch_put_session_end stores a batch of them with one batch put."""

    __slots__ = ("data", "addr", "size", "rc", "registered")

    def __init__(self, client, size, rc):
        self.data = bytearray(size)
        self.addr = ctypes.addressof((ctypes.c_char * size).from_buffer(self.data))
        self.size = size
        self.rc = rc
        self.registered = client.register_buffer(self.addr, size) == Status.OK

    def release(self, client):
        if self.registered:
            self.registered = client.unregister_buffer(self.addr) != Status.OK


class Descriptor:
    """A memory replica's buffer: address, size and the endpoint serving it."""

    def __init__(self, buffer_address=0, size=0, transport_endpoint=""):
        self.buffer_address = buffer_address
        self.size = size
        self.transport_endpoint = transport_endpoint

    def __repr__(self):
        return (f"<Descriptor size={self.size} buffer_address={self.buffer_address} "
                f"transport_endpoint={self.transport_endpoint}>")


class MemoryDescriptor:
    def __init__(self, buffer_descriptor):
        self.buffer_descriptor = buffer_descriptor


class DiskDescriptor:
    """Never answered by egmstore (no SSD replicas); here for isinstance checks."""

    def __init__(self, file_path="", object_size=0):
        self.file_path = file_path
        self.object_size = object_size


class ReplicaDescriptor:
    """One replica of an object, as batch_get_replica_desc answers it. egmstore's
    replicas are all in memory (COMPLETE once readable)."""

    def __init__(self, status, memory=None, disk=None):
        self.status = status
        self._memory = memory
        self._disk = disk

    def is_memory_replica(self):
        return self._memory is not None

    def is_disk_replica(self):
        return self._disk is not None

    def is_local_disk_replica(self):
        return False

    def get_memory_descriptor(self):
        if self._memory is None:
            raise RuntimeError("Expected MemoryDescriptor")
        return self._memory

    def get_disk_descriptor(self):
        if self._disk is None:
            raise RuntimeError("Expected DiskDescriptor")
        return self._disk


def install(force=False):
    """Make ``import mooncake.store`` (and ``mooncake.allocator``) load
    egmstore's modules in this process from now on, as EGMSTORE_AS_MOONCAKE
    does. Raises RuntimeError, changing nothing, when the real Mooncake is
    importable too (call install(force=True) to take egmstore's anyway; the
    real package's other modules stay its own) or when the real
    mooncake.store is already imported. docs/mooncake-compat.md."""
    _standin.install(force)


# Where Mooncake's transfer engine takes its port when local_hostname names none: a
# random free one of these (get_hostname() shows it; Mooncake's own tests check it).
_DATA_PORTS = range(12300, 14301)


def _free_port():
    """A free port of _DATA_PORTS, tried in random order (a bounded number of
    times), else any free port the kernel gives (logged)."""
    for port in random.sample(_DATA_PORTS, 64):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind(("", port))
                return port
            except OSError:
                continue
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        port = sock.getsockname()[1]
    log.warning("setup(): no free data port among 64 tried in %d..%d (Mooncake's range); "
                "took %d", _DATA_PORTS[0], _DATA_PORTS[-1], port)
    return port


def _need(value, kind, name):
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"setup(): {name} must be {kind.__name__}, not {type(value).__name__}")
    return value


def _no_ssd_offload():
    log.warning("setup(): enable_ssd_offload: egmstore has no SSD offload; the store runs as "
                "Mooncake's does with it off (objects live in memory segments only)")


class _BadSetting(Exception):
    """A value of setup()'s config dict with a type setup cannot use."""


# setup(config_dict): the type each Mooncake key must have.
_DICT_STR_KEYS = ("local_hostname", "metadata_server", "protocol", "rdma_devices",
                  "master_server_addr", "master_server_address", "device_name")
_DICT_SIZE_KEYS = ("global_segment_size", "local_buffer_size")


def _dict_str(config, key, default=None):
    value = config.get(key, default)
    if not isinstance(value, str):
        raise _BadSetting(f"setup(): config[{key!r}] must be a str, not {type(value).__name__}")
    return value


def _dict_size(config, key, default):
    """An int, or a size text in egmstore's syntax ("16777216", "16MB", "256MiB";
    docs/configuration.md), returned as it is. Measured: Mooncake's dict form
    also reads sizes from strings ("16MB", "16M") and answers INVALID_PARAMS for
    a float, a bool or a list."""
    value = config.get(key, default)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str):
        try:  # egmstore's size syntax, checked by the library's parser
            _egmstore.config_get("global_segment_size", {"global_segment_size": value})
            return value
        except _egmstore.StatusError:
            pass
    raise _BadSetting(f"setup(): config[{key!r}] must be an int or a str holding a size (bytes, "
                      f"or a number with KB/MB/GB or KiB/MiB/GiB, e.g. \"16MB\"), "
                      f"not {type(value).__name__} {value!r}")


def _size_positive(size):
    """Whether an int or a (valid) size text is more than 0 bytes."""
    if isinstance(size, int):
        return size > 0
    return int(re.match(r"\s*(\d+)", size).group(1)) > 0


def _dict_extra(key, value):
    # egmstore configuration keys, as egmstore.Store takes them.
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, str)):
        return str(value)
    raise _BadSetting(f"setup(): config[{key!r}] must be a str, int or bool, "
                      f"not {type(value).__name__}")


_SIZE_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20,
               "mb": 1 << 20, "mib": 1 << 20, "g": 1 << 30, "gb": 1 << 30, "gib": 1 << 30,
               "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


def _size_bytes(size):
    """An int, or a size text _dict_size accepted ("16MB": binary units, as
    docs/configuration.md), in bytes."""
    if isinstance(size, int):
        return size
    m = re.fullmatch(r"\s*(\d+)\s*([A-Za-z]*)\s*", size)
    return int(m.group(1)) * _SIZE_UNITS.get(m.group(2).lower(), 1) if m else 0


def _fits(local_buffer_size, nbytes):
    """Whether one call's nbytes fit in Mooncake's client buffer (logged when not).

    Mooncake's client copies the bytes of its copying calls (put, put_parts,
    put_batch, the upserts of bytes, get, get_buffer, batch_get_buffer,
    get_batch) through a buffer of local_buffer_size bytes of its own; a call
    whose bytes do not fit fails (measured on 0.3.13.post1: a put answers -600
    and stores nothing, a read b"" or None; 0 bytes fails them all; a batch
    put's values must fit together, a batch read's keys are taken in turn; the
    zero-copy calls are not affected). egmstore needs no such buffer; the facade
    applies the same limit to each call so that it answers as Mooncake does.
    Each call is counted alone: on Mooncake, concurrent calls and live
    get_buffer handles share the buffer (docs/mooncake-compat.md)."""
    if local_buffer_size is None or nbytes <= local_buffer_size:
        return True
    log.error("%d bytes do not fit in local_buffer_size (%d), through which Mooncake's client "
              "copies the bytes of this call", nbytes, local_buffer_size)
    return False


class MooncakeDistributedStore:
    """Mooncake's store client, answering Mooncake's codes from egmstore."""

    def __init__(self):
        self._client = None
        self._hostname = ""
        self._transports = []
        self._regions = {}       # registered buffers, address -> size (get_into_ranges)
        self._get_sessions = {}  # key -> None (not read yet), a BufferHandle, or a code
        self._put_sessions = {}  # key -> _PutSession
        self._local = None       # local_buffer_size once set up (_fits)

    # ---- setup / teardown ----
    def setup(self, *args, **kwargs):
        """setup(local_hostname, metadata_server, global_segment_size,
        local_buffer_size, protocol, rdma_devices, master_server_addr, ...)
        or setup(config_dict) -> 0 or a negative ErrorCode."""
        if len(args) == 1 and not kwargs and isinstance(args[0], dict):
            return self._setup_dict(args[0])
        try:
            inspect.signature(self._setup_args).bind(*args, **kwargs)
        except TypeError as e:
            raise TypeError(f"setup(): {e}; expected setup(local_hostname, metadata_server, "
                            "global_segment_size, local_buffer_size, protocol, rdma_devices, "
                            "master_server_addr) or setup(config_dict)") from None
        return self._setup_args(*args, **kwargs)

    def _setup_args(self, local_hostname, metadata_server, global_segment_size,
                    local_buffer_size, protocol, rdma_devices, master_server_addr, engine=None,
                    enable_ssd_offload=False, ssd_offload_path="", tenant_id="default",
                    enable_client_http_server=False, client_http_port=9300):
        _need(local_hostname, str, "local_hostname")
        _need(metadata_server, str, "metadata_server")
        _need(global_segment_size, int, "global_segment_size")
        _need(local_buffer_size, int, "local_buffer_size")
        _need(protocol, str, "protocol")
        _need(rdma_devices, str, "rdma_devices")
        _need(master_server_addr, str, "master_server_addr")
        if enable_ssd_offload:
            _no_ssd_offload()
        return self._connect(local_hostname, global_segment_size, protocol, master_server_addr, {},
                             local_buffer_size)

    def _setup_dict(self, config):
        """Like Mooncake's dict form, a value setup cannot use answers
        INVALID_PARAMS (logged, naming the key and the accepted type) rather
        than raising."""
        for key in ("local_hostname", "metadata_server"):
            if key not in config:
                log.error("setup(): the config dict needs %r", key)
                return ErrorCode.INVALID_PARAMS
        extra = {}
        config = dict(config)
        for alias, key in _DICT_ALIASES.items():
            if alias in config and key not in config:
                config[key] = config[alias]
        if str(config.get("enable_ssd_offload", "")).lower() in ("1", "true", "yes", "on"):
            _no_ssd_offload()
        try:
            for key in _DICT_STR_KEYS:
                if key in config:
                    _dict_str(config, key)
            for key in _DICT_SIZE_KEYS:
                _dict_size(config, key, 0)
            size = _dict_size(config, "global_segment_size", _DEFAULT_SEGMENT)
            for key, value in config.items():
                if key in _IGNORED_KEYS or key in _DICT_STR_KEYS or key in _DICT_SIZE_KEYS:
                    continue
                # egmstore's own configuration keys pass through (docs/configuration.md).
                if isinstance(key, str) and _egmstore.config_get(key) is not None:
                    extra[key] = _dict_extra(key, value)
                else:
                    log.warning("setup(): config key %r is not used by egmstore; ignored", key)
        except _BadSetting as e:
            log.error("%s", e)
            return ErrorCode.INVALID_PARAMS
        return self._connect(config["local_hostname"], size,
                             _dict_str(config, "protocol", "tcp"),
                             _dict_str(config, "master_server_addr", _DEFAULT_MASTER), extra,
                             _dict_size(config, "local_buffer_size", _DEFAULT_BUFFER))

    def _connect(self, local_hostname, global_segment_size, protocol, master_server_addr, extra,
                 local_buffer_size):
        config_protocol = protocol
        if self._client is not None and not self._client.closed:
            log.error("setup(): this store is already set up; close() it first")
            return ErrorCode.UNAVAILABLE_IN_CURRENT_STATUS
        mooncake_protocol = protocol in _MOONCAKE_PROTOCOLS
        if mooncake_protocol:
            protocol = "auto"
        elif protocol not in _PROTOCOLS:
            log.error("setup(): protocol %r is not supported by egmstore (accepted: %s; "
                      "Mooncake's %s mean auto)", protocol, ", ".join(_PROTOCOLS),
                      ", ".join(_MOONCAKE_PROTOCOLS))
            return ErrorCode.NOT_SUPPORTED
        if isinstance(global_segment_size, int) and global_segment_size < 0:
            log.error("setup(): global_segment_size must be >= 0, not %d", global_segment_size)
            return ErrorCode.INVALID_PARAMS
        config = {
            "master_server_addr": master_server_addr,
            "protocol": protocol,
            "global_segment_size": str(global_segment_size),
        }
        host, port = local_hostname, None
        # "host:port" names the data server's port too (not for bare IPv6 addresses).
        if host.count(":") == 1:
            host, port = host.rsplit(":", 1)
        elif "data_port" in extra:
            port = str(extra["data_port"])
        if port == "0":
            port = None
        config["local_hostname"] = host
        config.update(extra)  # already strings
        # get_hostname() answers host:port like Mooncake's: the port of the data
        # server, which only a client contributing capacity runs (else 0). A port
        # left to us is picked free here; one retry covers losing it meanwhile.
        for attempt in range(3):
            if port is not None:
                config["data_port"] = port
            elif _size_positive(global_segment_size):
                config["data_port"] = str(_free_port())
            try:
                client = _egmstore.Client(config)
                break
            except _egmstore.StatusError as e:
                status, message = e.args
                if status == Status.IO and port is None and attempt < 2:
                    continue  # the port was taken between the probe and the bind
                log.error("setup() failed: %s (%s)", message, _egmstore.status_name(status))
                return _code(status)
        data_port = config.get("data_port", "0")
        self._client = client
        self._local = max(0, _size_bytes(local_buffer_size))
        self._transports = client.transports()
        if mooncake_protocol:
            log.warning("setup(): protocol %r is Mooncake's; egmstore has no such transport and "
                        "takes the best it has for each replica (nvlink > shm > tcp): %s here, "
                        "best %s", config_protocol, " > ".join(self._transports) or "none",
                        self.transport or "none")
        self._hostname = f"[{host}]:{data_port}" if ":" in host else f"{host}:{data_port}"
        return ErrorCode.OK

    def close(self):
        """-> 0, or a negative code when a teardown step failed (call again)."""
        self._regions.clear()
        self._get_sessions.clear()
        for session in self._put_sessions.values():  # unregistered before they are freed
            session.release(self._c)
        self._put_sessions.clear()
        self._local = None
        if self._client is None:
            return ErrorCode.OK
        return _code(self._client.close())

    def health_check(self):
        """0 healthy, 1 not set up or closed, 2 master unreachable, 3 cleanup pending."""
        if self._client is None:
            return 1
        return self._client.health()

    @property
    def transport(self):
        """egmstore's own: the best transport this client may take to another
        process's segment ("nvlink", "shm" or "tcp"; "" before setup): the
        first that its protocol allows and this process can use. A copy takes
        it where the segment allows (nvlink: a CUDA VMM segment and a GPU
        buffer; shm: a segment on this host), else the next."""
        return self._transports[0] if self._transports else ""

    def get_hostname(self):
        """local_hostname:data_port of this client ("" before setup; the port is
        0 when the client contributes no capacity, so serves no data)."""
        return self._hostname

    # ---- the client, or a stand-in answering CLOSED ----
    @property
    def _c(self):
        return self._client if self._client is not None else _NOT_SET_UP

    # ---- Mooncake's local buffer (local_buffer_size) for the copying calls ----
    def _copied(self, nbytes, call, refused):
        """call(), or refused when nbytes do not fit in the local buffer."""
        return call() if _fits(self._local, nbytes) else refused

    def _read(self, value, nbytes_of):
        """A read's result, or None when its bytes do not fit in the local
        buffer (Mooncake's read fails then)."""
        if value is None or _fits(self._local, nbytes_of(value)):
            return value
        return None

    # ---- registered memory ----
    def register_buffer(self, buffer_ptr, size):
        code = _buffer_code(self._c.register_buffer(buffer_ptr, size))
        if code == 0:
            self._regions[buffer_ptr] = size
        return code

    def unregister_buffer(self, buffer_ptr):
        code = _buffer_code(self._c.unregister_buffer(buffer_ptr))
        if code == 0:
            self._regions.pop(buffer_ptr, None)
        return code

    # ---- single keys ----
    def put(self, key, value, config=None):
        rc = _rc(config)
        if _refused(rc):
            return rc
        return self._copied(_nbytes(value), lambda: _put_code(self._c.put(key, value, rc)),
                            ErrorCode.INVALID_PARAMS)

    def put_parts(self, key, *parts, config=None):
        """Stores the concatenation of the bytes-like parts."""
        return self.put(key, b"".join(parts), config)

    def put_from(self, key, buffer_ptr, size, config=None):
        rc = _rc(config)
        if _refused(rc):
            return rc
        return _put_code(self._c.put_from(key, buffer_ptr, size, rc))

    def put_from_with_metadata(self, key, buffer_ptr, metadata_buffer_ptr, size, metadata_size,
                               config=None):
        """Stores metadata_size bytes at metadata_buffer_ptr followed by size
        bytes at buffer_ptr (both registered memory) as one object: as put_from."""
        rc = _rc(config)
        if _refused(rc):
            return rc
        ptrs, sizes = [], []
        for ptr, nbytes in ((metadata_buffer_ptr, metadata_size), (buffer_ptr, size)):
            if nbytes:  # an empty part adds nothing (an empty object is refused below)
                ptrs.append(ptr)
                sizes.append(nbytes)
        status, results = self._c.batch_put_from_parts([key], [ptrs], [sizes], rc)
        return _put_code(results[0] if status >= 0 else status)

    def get(self, key):
        """The object's bytes, or b"" when it is missing or the read fails."""
        status, data = self._c.get(key)
        data = self._read(data if status >= 0 else None, len)
        return b"" if data is None else data

    def get_into(self, key, buffer_ptr, size):
        """Bytes read, or a negative code."""
        status, nbytes = self._c.get_into(key, buffer_ptr, size)
        return _read_code(status, nbytes)

    def is_exist(self, key):
        """1 if the key exists, 0 if not (or the key is invalid), negative on error."""
        return _exist_code(self._c.exist(key))

    def get_size(self, key):
        status, size = self._c.size(key)
        return size if status >= 0 else _lookup_code(status)

    def remove(self, key, force=False):
        return _lookup_code(self._c.remove(key, bool(force)))

    def remove_all(self, force=False):
        """Number of objects removed, or a negative code."""
        status, removed = self._c.remove_all(bool(force))
        return removed if status >= 0 else _code(status)

    # ---- batches: one entry per key ----
    @staticmethod
    def _whole(status, n):
        return [_code(status)] * n

    def batch_put_from(self, keys, buffer_ptrs, sizes, config=None):
        if not _same_lengths("batch_put_from", keys, buffer_ptrs, sizes):
            return [ErrorCode.INVALID_PARAMS] * len(keys)
        rc = _rc(config)
        if _refused(rc):
            return [rc] * len(keys)
        status, results = self._c.batch_put_from(keys, buffer_ptrs, sizes, rc)
        if status < 0:
            return self._whole(status, len(keys))
        return _put_codes(results)

    def batch_get_into(self, keys, buffer_ptrs, sizes):
        if not _same_lengths("batch_get_into", keys, buffer_ptrs, sizes):
            return [ErrorCode.INVALID_PARAMS] * len(keys)
        status, results, nbytes = self._c.batch_get_into(keys, buffer_ptrs, sizes)
        if status < 0:
            return self._whole(status, len(keys))
        return _read_codes(results, nbytes)

    def batch_put_from_multi_buffers(self, keys, all_buffer_ptrs, all_sizes, config=None):
        call = "batch_put_from_multi_buffers"
        if not _same_lengths(call, keys, all_buffer_ptrs, all_sizes):
            return [ErrorCode.INVALID_PARAMS] * len(keys)
        rc = _rc(config)
        if _refused(rc):
            # the lists are checked first, as Mooncake does (the binding did not see them)
            if not _same_lengths(call, keys, all_buffer_ptrs, all_sizes, parts=True):
                return [ErrorCode.INVALID_PARAMS] * len(keys)
            return [rc] * len(keys)
        out = _parts_call(call, self._c.batch_put_from_parts, keys, all_buffer_ptrs, all_sizes, rc)
        if out is None:
            return [ErrorCode.INVALID_PARAMS] * len(keys)
        status, results = out
        if status < 0:
            return self._whole(status, len(keys))
        return _put_codes(results)

    def batch_get_into_multi_buffers(self, keys, all_buffer_ptrs, all_sizes,
                                     prefer_alloc_in_same_node=False):
        call = "batch_get_into_multi_buffers"
        if not _same_lengths(call, keys, all_buffer_ptrs, all_sizes):
            return [ErrorCode.INVALID_PARAMS] * len(keys)
        out = _parts_call(call, self._c.batch_get_into_parts, keys, all_buffer_ptrs, all_sizes)
        if out is None:
            return [ErrorCode.INVALID_PARAMS] * len(keys)
        status, results, nbytes = out
        if status < 0:
            return self._whole(status, len(keys))
        return _read_codes(results, nbytes)

    def batch_is_exist(self, keys):
        status, results = self._c.batch_exist(keys)
        if status < 0:
            return self._whole(status, len(keys))
        return _exist_codes(results)

    def batch_remove(self, keys, force=False):
        status, results = self._c.batch_remove(keys, bool(force))
        if status < 0:
            return self._whole(status, len(keys))
        return [_lookup_code(st) for st in results]


    # ---- bytes: whole objects, batches -------------------------------------------
    def get_buffer(self, key):
        """The object's bytes as a BufferHandle (no copy), or None when it is
        missing or the read fails."""
        status, handle = self._c.get_buffer(key)
        return self._read(handle if status >= 0 else None, len)

    def batch_get_buffer(self, keys):
        """[BufferHandle or None per key] (each key read in turn; as on
        Mooncake, a key whose bytes no longer fit in the local buffer beside the
        keys before it answers None)."""
        status, _, handles = self._c.batch_get_buffer(keys)
        if status < 0:
            return [None] * len(keys)
        held = 0
        out = []
        for handle in handles:
            if handle is not None and _fits(self._local, held + len(handle)):
                held += len(handle)
                out.append(handle)
            else:
                out.append(None)
        return out

    def get_batch(self, keys):
        """[bytes per key], b"" for a missing key."""
        return [b"" if h is None else bytes(h) for h in self.batch_get_buffer(keys)]

    def put_batch(self, keys, values, config=None):
        """Puts each (key, value): 0 (existing keys too, first value kept), or
        the first negative code (the other keys are still put)."""
        return self._each_put(keys, values, config,
                              lambda k, v, rc: _put_code(self._c.put(k, v, rc)))

    # ---- upsert: insert or replace -----------------------------------------------
    def _upsert(self, key, put):
        """put() -> egm status; on EXISTS the old object is removed (forced: a
        read lease does not stop an upsert, as on Mooncake) and put() runs again.
        Not atomic: between the two, readers find no object. If another writer
        puts the key in between, its value stays and this answers 0, as if this
        upsert had come first."""
        status = put()
        if status != Status.EXISTS:
            return _code(status)
        removed = self._c.remove(key, True)
        if removed < 0 and removed != Status.NOT_FOUND:
            return _lookup_code(removed)
        return _put_code(put())

    def upsert(self, key, value, config=None):
        """Stores value under key, replacing an existing object. -> 0 or negative."""
        rc = _rc(config)
        if _refused(rc):
            return rc
        return self._copied(_nbytes(value),
                            lambda: self._upsert(key, lambda: self._c.put(key, value, rc)),
                            ErrorCode.INVALID_PARAMS)

    def upsert_parts(self, key, *parts, config=None):
        """upsert of the concatenation of the bytes-like parts."""
        return self.upsert(key, b"".join(parts), config)

    def upsert_from(self, key, buffer_ptr, size, config=None):
        rc = _rc(config)
        if _refused(rc):
            return rc
        return self._upsert(key, lambda: self._c.put_from(key, buffer_ptr, size, rc))

    def upsert_batch(self, keys, values, config=None):
        """upsert of each (key, value): 0, or the first negative code."""
        return self._each_put(keys, values, config,
                              lambda k, v, rc: self._upsert(k, lambda: self._c.put(k, v, rc)))

    def batch_upsert_from(self, keys, buffer_ptrs, sizes, config=None):
        """[0 or negative per key]: batch_put_from, then the keys that existed
        are removed (forced) and put again in a second batch."""
        rc = _rc(config)
        if _refused(rc):
            return [rc] * len(keys)
        status, results = self._c.batch_put_from(keys, buffer_ptrs, sizes, rc)
        if status < 0:
            return self._whole(status, len(keys))
        out = [_code(st) for st in results]
        again = [i for i, st in enumerate(results) if st == Status.EXISTS]
        if again:
            sub = [keys[i] for i in again]
            status, removed = self._c.batch_remove(sub, True)
            if status < 0:
                removed = [status] * len(sub)
            status, results = self._c.batch_put_from(
                sub, [buffer_ptrs[i] for i in again], [sizes[i] for i in again], rc)
            if status < 0:
                results = [status] * len(sub)
            for i, rm, st in zip(again, removed, results):
                out[i] = _lookup_code(rm) if rm < 0 and rm != Status.NOT_FOUND else _put_code(st)
        return out

    def _each_put(self, keys, values, config, put):
        if len(keys) != len(values):
            log.error("put_batch/upsert_batch: %d keys but %d values", len(keys), len(values))
            return ErrorCode.INVALID_PARAMS
        rc = _rc(config)
        if _refused(rc):
            return rc

        def each():  # the whole batch is held in the local buffer, as on Mooncake
            first = 0
            for key, value in zip(keys, values):
                code = put(key, value, rc)
                if code < 0 and first == 0:
                    first = code
            return first

        return self._copied(sum(_nbytes(v) for v in values), each, ErrorCode.INVALID_PARAMS)

    # ---- ranged reads -------------------------------------------------------------
    def get_into_ranges(self, buffer_ptrs, all_keys, all_dst_offsets, all_src_offsets,
                        all_sizes):
        """Copies byte ranges of objects into registered buffers: for buffer i,
        key j of all_keys[i], range k: all_sizes[i][j][k] bytes from offset
        all_src_offsets[i][j][k] of the object to buffer_ptrs[i] +
        all_dst_offsets[i][j][k]. -> the same nesting of bytes copied (0 for an
        empty range) or a negative code per range: -704 missing key, -600 a
        range past the object's end or outside registered memory; [-600] for
        a key whose lists do not match (for every key when the outer lists do
        not)."""
        bad = [ErrorCode.INVALID_PARAMS]  # measured: one code for a key whose lists do not match
        n = len(buffer_ptrs)
        if not len(all_keys) == len(all_dst_offsets) == len(all_src_offsets) == len(all_sizes) == n:
            return [[list(bad) for _ in (all_keys[i] if i < len(all_keys) else ())]
                    for i in range(n)]
        wanted = list(dict.fromkeys(k for per_buf in all_keys for k in per_buf))
        status, _, handles = self._c.batch_get_buffer(wanted)
        if status < 0:
            code = _code(status)
            return [[[code] * len(r) for r in per_buf] for per_buf in all_sizes]
        found = dict(zip(wanted, handles))
        out = []
        for ptr, keys, dsts, srcs, sizes in zip(buffer_ptrs, all_keys, all_dst_offsets,
                                                all_src_offsets, all_sizes):
            per_buf = []
            if not len(keys) == len(dsts) == len(srcs) == len(sizes):
                out.append([list(bad) for _ in keys])
                continue
            for key, dst, src, size in zip(keys, dsts, srcs, sizes):
                handle = found.get(key)
                if not len(dst) == len(src) == len(size):
                    per_buf.append(list(bad))
                    continue
                per_buf.append([self._copy_range(handle, ptr + d, s, n_)
                                for d, s, n_ in zip(dst, src, size)])
            out.append(per_buf)
        return out

    def _copy_range(self, handle, dst, src, size):
        if handle is None:
            return ErrorCode.OBJECT_NOT_FOUND
        if size == 0:
            return 0
        if src < 0 or size < 0 or src + size > len(handle) or \
                not _registered(self._regions, dst, size):
            return ErrorCode.INVALID_PARAMS
        ctypes.memmove(dst, handle.ptr() + src, size)
        return size

    # ---- get sessions (SGLang's direct linker) --------------------------------------
    def batch_get_session_start(self, keys):
        """Opens a get session per key: [0, or -704 for a missing key]. The
        object is read once, at its first ranged get, and kept until
        batch_get_session_end."""
        status, results = self._c.batch_exist(keys)
        if status < 0:
            return self._whole(status, len(keys))
        out = []
        for key, st in zip(keys, results):
            if st == Status.OK:
                self._get_sessions[key] = None
                out.append(0)
            else:
                out.append(_lookup_code(st))
        return out

    def batch_get_into_multi_buffer_ranges(self, keys, all_buffer_ptrs, all_sizes,
                                           all_src_offsets):
        """For each key with an open get session: copies all_sizes[i][j] bytes
        from offset all_src_offsets[i][j] of the object to all_buffer_ptrs[i][j].
        -> [bytes copied per key, or negative: -600 no session, a range past
        the object's end, or lists that do not match]."""
        n = len(keys)
        if not len(all_buffer_ptrs) == len(all_sizes) == len(all_src_offsets) == n:
            return [ErrorCode.INVALID_PARAMS] * n
        sessions = self._get_sessions
        unread = list(dict.fromkeys(k for k in keys if k in sessions and sessions[k] is None))
        if unread:
            status, results, handles = self._c.batch_get_buffer(unread)
            if status < 0:
                return self._whole(status, n)
            for key, st, handle in zip(unread, results, handles):
                sessions[key] = handle if st >= 0 else _lookup_code(st)
        out = []
        for key, ptrs, sizes, srcs in zip(keys, all_buffer_ptrs, all_sizes, all_src_offsets):
            handle = sessions.get(key, ErrorCode.INVALID_PARAMS)
            if isinstance(handle, int):
                out.append(handle)
            elif not len(ptrs) == len(sizes) == len(srcs) or \
                    any(s < 0 or n_ < 0 or s + n_ > len(handle) for s, n_ in zip(srcs, sizes)):
                out.append(ErrorCode.INVALID_PARAMS)
            else:
                base = handle.ptr()
                for ptr, size, src in zip(ptrs, sizes, srcs):
                    if size:
                        ctypes.memmove(ptr, base + src, size)
                out.append(sum(sizes))
        return out

    def batch_get_session_end(self, keys):
        """Closes the keys' get sessions (unknown keys too) -> 0."""
        for key in keys:
            self._get_sessions.pop(key, None)
        return ErrorCode.OK

    # ---- put sessions ----------------------------------------------------------------
    def batch_put_session_start(self, keys, sizes, config=None):
        """Opens a put session per key for an object of sizes[i] bytes: [0, or
        -705 the key exists, -600 an invalid key, a size of 0 or past what a
        buffer can hold, a session already open, lists that do not match, -200
        no memory for the session's buffer]. The object is assembled in this
        process's memory and stored by batch_put_session_end."""
        n = len(keys)
        if len(sizes) != n:
            return [ErrorCode.INVALID_PARAMS] * n
        rc = _rc(config)
        if _refused(rc):
            return [rc] * n
        status, results = self._c.batch_exist(keys)
        if status < 0:
            return self._whole(status, n)
        out = []
        for key, size, st in zip(keys, sizes, results):
            if st == Status.INVALID_KEY or not isinstance(size, int) or size <= 0 or \
                    key in self._put_sessions:
                out.append(ErrorCode.INVALID_PARAMS)
            elif st == Status.OK:
                out.append(ErrorCode.OBJECT_ALREADY_EXISTS)
            elif st != Status.NOT_FOUND:
                out.append(_code(st))
            else:
                try:
                    self._put_sessions[key] = _PutSession(self._c, size, rc)
                    out.append(0)
                except (MemoryError, OverflowError, ValueError) as e:
                    # its buffer cannot be made here: a size beyond this process's memory
                    log.warning("batch_put_session_start: %r: no buffer of %d bytes: %s", key,
                                size, type(e).__name__)
                    out.append(ErrorCode.NO_AVAILABLE_HANDLE if isinstance(e, MemoryError)
                               else ErrorCode.INVALID_PARAMS)
        return out

    def batch_put_from_multi_buffer_ranges(self, keys, all_buffer_ptrs, all_sizes,
                                           all_dst_offsets):
        """For each key with an open put session: copies all_sizes[i][j] bytes
        from all_buffer_ptrs[i][j] to offset all_dst_offsets[i][j] of the
        object. -> [bytes copied per key, or -600: no session, a range past the
        object's end, lists that do not match]."""
        n = len(keys)
        if not len(all_buffer_ptrs) == len(all_sizes) == len(all_dst_offsets) == n:
            return [ErrorCode.INVALID_PARAMS] * n
        out = []
        for key, ptrs, sizes, dsts in zip(keys, all_buffer_ptrs, all_sizes, all_dst_offsets):
            session = self._put_sessions.get(key)
            if session is None or not len(ptrs) == len(sizes) == len(dsts) or \
                    any(d < 0 or n_ < 0 or d + n_ > session.size for d, n_ in zip(dsts, sizes)):
                out.append(ErrorCode.INVALID_PARAMS)
                continue
            for ptr, size, dst in zip(ptrs, sizes, dsts):
                if size:
                    ctypes.memmove(session.addr + dst, ptr, size)
            out.append(sum(sizes))
        return out

    def batch_put_session_end(self, keys):
        """Stores each key's assembled object (bytes never written are zero):
        [0 or negative; -600 no session]. The objects go in one batch put per
        ReplicateConfig (from their registered staging buffers)."""
        out = [ErrorCode.INVALID_PARAMS] * len(keys)
        groups = {}  # the sessions' replicate tuples -> [(index, key, session)]
        for i, key in enumerate(keys):
            session = self._put_sessions.pop(key, None)
            if session is not None:
                groups.setdefault(repr(session.rc), []).append((i, key, session))
        for group in groups.values():
            batch = [(i, key, session) for i, key, session in group if session.registered]
            if batch:
                status, results = self._c.batch_put_from(
                    [key for _, key, _ in batch], [session.addr for _, _, session in batch],
                    [session.size for _, _, session in batch], batch[0][2].rc)
                if status < 0:
                    results = [status] * len(batch)
                for (i, _, _), st in zip(batch, results):
                    out[i] = _put_code(st)
            for i, key, session in group:
                if not session.registered:  # its buffer could not be registered: put a copy
                    out[i] = _put_code(self._c.put(key, session.data, session.rc))
                session.release(self._c)
        return out

    def batch_put_session_revoke(self, keys):
        """Drops the keys' put sessions, storing nothing: [0, or -600 no session]."""
        out = []
        for key in keys:
            session = self._put_sessions.pop(key, None)
            if session is not None:
                session.release(self._c)
            out.append(ErrorCode.INVALID_PARAMS if session is None else 0)
        return out

    # ---- SSD offload (egmstore has none: answered as Mooncake with it off) ------------
    def get_offload_rpc_read_count(self):
        """Reads served from an SSD offload: always 0 (no SSD offload)."""
        return 0

    def unmount_local_disk_segment(self, grace_period_seconds=0):
        """No local disk segment to unmount: 0."""
        return ErrorCode.OK

    # ---- replicas ------------------------------------------------------------------
    def get_replica_desc(self, key):
        """[ReplicaDescriptor] of the object ([] when missing)."""
        return self.batch_get_replica_desc([key]).get(key, [])

    def batch_get_replica_desc(self, keys):
        """{key: [ReplicaDescriptor]} for the keys found (missing keys are left
        out). egmstore answers one memory replica per object, COMPLETE, whose
        Descriptor has the object's size (its address is 0 and its endpoint
        "": the client does not see where the master placed it)."""
        out = {}
        for key in dict.fromkeys(keys):
            status, size = self._c.size(key)
            if status >= 0:
                memory = MemoryDescriptor(Descriptor(0, size, ""))
                out[key] = [ReplicaDescriptor(ReplicaStatus.COMPLETE, memory=memory)]
        return out


class _NotSetUp:
    """Stands in for the client before setup(): validates nothing, answers CLOSED."""

    closed = True

    def __getattr__(self, name):
        closed = Status.CLOSED

        def call(*args, **kwargs):
            if name in ("get", "get_buffer", "get_into", "size", "remove_all"):
                return closed, (None if name in ("get", "get_buffer") else 0)
            if name in ("batch_get_into", "batch_get_into_parts", "batch_get_buffer"):
                return closed, [], []
            if name.startswith("batch_"):
                return closed, []
            return closed

        return call


_NOT_SET_UP = _NotSetUp()
