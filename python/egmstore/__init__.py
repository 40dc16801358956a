"""egmstore: a KV-cache store for inference engines (Python binding).

``egmstore.Store`` is the Pythonic API: it raises an ``egmstore.Error`` subclass
per status (``NotFound``, ``NoSpace``, ...). ``egmstore.mooncake`` offers
Mooncake Store's ``MooncakeDistributedStore`` with its integer return codes.
Both sit on ``egmstore._egmstore``, a thin C binding of libegmstore that
answers raw status values and releases the GIL while it waits. See
docs/python.md.
"""

import enum

from . import _egmstore

__all__ = [
    "Store",
    "ReplicateConfig",
    "Status",
    "Health",
    "Error",
    "error_for",
    "status_name",
    "status_string",
    "status_to_mooncake",
]

__version__ = _egmstore.VERSION

status_name = _egmstore.status_name
status_string = _egmstore.status_string
status_to_mooncake = _egmstore.status_to_mooncake


class Status(enum.IntEnum):
    """egm_status_t values (include/egmstore/status.h); they never change."""

    OK = 0
    INPROGRESS = 1
    INTERNAL = -1
    INVALID_ARG = -2
    NO_MEMORY = -3
    NOT_FOUND = -4
    EXISTS = -5
    NO_SPACE = -6
    HAS_LEASE = -7
    LEASE_EXPIRED = -8
    TIMEOUT = -9
    IO = -10
    PROTOCOL = -11
    UNREACHABLE = -12
    NOT_SUPPORTED = -13
    SEGMENT_NOT_FOUND = -14
    SEGMENT_EXISTS = -15
    CLIENT_NOT_FOUND = -16
    TRANSFER = -17
    BUFFER_TOO_SMALL = -18
    NOT_READY = -19
    PERMISSION = -20
    NO_CUDA = -21
    INVALID_KEY = -22
    BUSY = -23
    CLOSED = -24
    VERSION = -25
    CONFIG = -26
    NOT_REGISTERED = -27


class Health(enum.IntEnum):
    """egm_health_t values (egm_client_health)."""

    HEALTHY = 0
    NOT_INITIALIZED = 1
    MASTER_UNREACHABLE = 2
    CLEANUP_PENDING = 3


# ---- exceptions ----------------------------------------------------------------


class Error(Exception):
    """An egmstore call failed. ``status`` is the egm status value, ``name``
    its stable name (``"NOT_FOUND"``), ``message`` the library's detail;
    ``key`` the key a batch entry failed for (None elsewhere)."""

    def __init__(self, status, message=None, key=None):
        self.status = int(status)
        self.name = _egmstore.status_name(self.status)
        self.message = message or _egmstore.status_string(self.status)
        self.key = key
        super().__init__(self.status, self.message)

    def __str__(self):
        return f"{self.name} ({self.status}): {self.message}"


def _error_class(class_name, status, doc):
    cls = type(class_name, (Error,), {"__doc__": doc, "STATUS": status})
    cls.__module__ = __name__
    return cls


# One class per status value a caller may want to catch; each has STATUS.
InternalError = _error_class("InternalError", Status.INTERNAL,
                              "A bug or an unexpected system state.")
InvalidArgument = _error_class("InvalidArgument", Status.INVALID_ARG,
                                "Bad argument or request field.")
NoMemory = _error_class("NoMemory", Status.NO_MEMORY, "Local memory allocation failed.")
NotFound = _error_class("NotFound", Status.NOT_FOUND, "No object with this key.")
Exists = _error_class("Exists", Status.EXISTS, "An object with this key already exists.")
NoSpace = _error_class("NoSpace", Status.NO_SPACE, "No segment can hold the object.")
HasLease = _error_class("HasLease", Status.HAS_LEASE, "The object is under a live read lease.")
LeaseExpired = _error_class("LeaseExpired", Status.LEASE_EXPIRED,
                             "The read lease ran out during the copy.")
Timeout = _error_class("Timeout", Status.TIMEOUT,
                        "An RPC, connect or transfer passed its deadline.")
IOFailure = _error_class("IOFailure", Status.IO, "A system call failed.")
ProtocolError = _error_class("ProtocolError", Status.PROTOCOL,
                              "Malformed frame or message from a peer.")
Unreachable = _error_class("Unreachable", Status.UNREACHABLE,
                            "Peer not reachable or connection lost.")
NotSupported = _error_class("NotSupported", Status.NOT_SUPPORTED,
                             "Operation or transport not supported.")
SegmentNotFound = _error_class("SegmentNotFound", Status.SEGMENT_NOT_FOUND,
                                "No segment with this id or name.")
SegmentExists = _error_class("SegmentExists", Status.SEGMENT_EXISTS,
                              "A segment with this id or name is mounted.")
ClientNotFound = _error_class("ClientNotFound", Status.CLIENT_NOT_FOUND,
                               "The master does not know this client.")
TransferFailed = _error_class("TransferFailed", Status.TRANSFER, "A data copy failed.")
BufferTooSmall = _error_class("BufferTooSmall", Status.BUFFER_TOO_SMALL,
                               "The destination is smaller than the object.")
NotReady = _error_class("NotReady", Status.NOT_READY,
                         "The object's replicas are not yet committed.")
PermissionDenied = _error_class("PermissionDenied", Status.PERMISSION,
                                 "Refused: credentials or file permissions.")
NoCuda = _error_class("NoCuda", Status.NO_CUDA, "No CUDA driver available.")
InvalidKey = _error_class("InvalidKey", Status.INVALID_KEY, "Empty or too long object key.")
Busy = _error_class("Busy", Status.BUSY, "Resource in use.")
Closed = _error_class("Closed", Status.CLOSED, "The store is closed or not initialised.")
VersionMismatch = _error_class("VersionMismatch", Status.VERSION, "Unknown protocol version.")
ConfigError = _error_class("ConfigError", Status.CONFIG, "Bad configuration key or value.")
NotRegistered = _error_class("NotRegistered", Status.NOT_REGISTERED,
                              "Zero-copy buffer not inside a registered range.")

#: egm status value -> exception class (statuses not listed raise ``Error``).
EXCEPTIONS = {
    cls.STATUS: cls
    for cls in (
        InternalError, InvalidArgument, NoMemory, NotFound, Exists, NoSpace, HasLease,
        LeaseExpired, Timeout, IOFailure, ProtocolError, Unreachable, NotSupported,
        SegmentNotFound, SegmentExists, ClientNotFound, TransferFailed, BufferTooSmall,
        NotReady, PermissionDenied, NoCuda, InvalidKey, Busy, Closed, VersionMismatch,
        ConfigError, NotRegistered,
    )
}
__all__ += [cls.__name__ for cls in EXCEPTIONS.values()] + ["EXCEPTIONS"]


def error_for(status, message=None, key=None):
    """The exception instance for an egm status value (not raised)."""
    return EXCEPTIONS.get(int(status), Error)(status, message, key)


# Keys longer than this are cut in messages (an invalid key may be very long).
_KEY_SHOWN = 80


def _key_error(key, status):
    """The exception for one key of a batch: its message names the key and the
    status detail, as the library's detail does for a single-key call
    ('"k": not found'). The library keeps one detail per call, not per key."""
    status = int(status)
    shown = key if len(key) <= _KEY_SHOWN else f"{key[:_KEY_SHOWN]}...({len(key)} characters)"
    detail = _egmstore.status_string(status)
    if status == Status.INVALID_KEY:
        nbytes = len(key.encode())
        detail += f" (a key has 1..{_egmstore.KEY_MAX} bytes; this one has {nbytes})"
    return error_for(status, f'"{shown}": {detail}', key)


# ---- Store ---------------------------------------------------------------------


class ReplicateConfig:
    """Placement of new objects (egm_replicate_config_t). ``replica_num`` 0
    means the store's ``replica_num`` configuration key."""

    def __init__(self, replica_num=0, with_soft_pin=False, with_hard_pin=False,
                 preferred_segments=()):
        self.replica_num = replica_num
        self.with_soft_pin = with_soft_pin
        self.with_hard_pin = with_hard_pin
        self.preferred_segments = list(preferred_segments)

    def _as_tuple(self):
        segs = self.preferred_segments
        if isinstance(segs, str) or not all(isinstance(s, str) for s in segs):
            raise TypeError("preferred_segments must be a list of str")
        num = self.replica_num
        if not isinstance(num, int) or isinstance(num, bool):
            raise TypeError(f"replica_num must be an int, not {type(num).__name__}")
        # The range (0..REPLICA_MAX, 0 meaning the replica_num key) is checked by
        # the binding, whose ValueError names replica_num.
        return (num, bool(self.with_soft_pin), bool(self.with_hard_pin), list(segs))

    def __repr__(self):
        return (f"ReplicateConfig(replica_num={self.replica_num!r}, "
                f"with_soft_pin={self.with_soft_pin!r}, with_hard_pin={self.with_hard_pin!r}, "
                f"preferred_segments={self.preferred_segments!r})")


def _config_value(key, value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, str)):
        return str(value)
    raise TypeError(f"config value of {key!r} must be a str, int or bool, "
                    f"not {type(value).__name__}")


def _config_dict(config, kwargs):
    merged = {}
    if config is not None:
        if not isinstance(config, dict):
            raise TypeError(f"config must be a dict, not {type(config).__name__}")
        merged.update(config)
    merged.update(kwargs)
    out = {}
    for key, value in merged.items():
        if not isinstance(key, str):
            raise TypeError(f"config keys must be str, not {type(key).__name__}")
        out[key] = _config_value(key, value)
    return out


def _rc(replicate):
    if replicate is None:
        return None
    if not hasattr(replicate, "_as_tuple"):
        raise TypeError("replicate must be an egmstore.ReplicateConfig or None, "
                        f"not {type(replicate).__name__}")
    return replicate._as_tuple()


class Store:
    """A connection to an egmstore cluster.

    ``Store(master_server_addr="10.0.0.1:50051", protocol="tcp")`` or
    ``Store({"master_server_addr": ...})``: configuration keys as in
    docs/configuration.md (values may be str, int or bool). Use it as a
    context manager, or call ``close()``.

    Single-key calls raise an ``egmstore.Error`` subclass. Batch calls return
    one entry per key -- the result, or an exception instance for that key (not
    raised) -- and raise only when the whole batch failed.
    """

    def __init__(self, config=None, /, **kwargs):
        if hasattr(self, "_client"):  # as _egmstore.Client: one client per Store, for good
            raise RuntimeError("Store.__init__ may run only once; create a new Store")
        try:
            self._client = _egmstore.Client(_config_dict(config, kwargs))
        except _egmstore.StatusError as e:
            raise error_for(e.args[0], e.args[1]) from None

    # -- plumbing --
    def _error(self, status):
        if status == Status.CLOSED and self._client.closed:
            return Closed(status, "the store is closed")
        detail = _egmstore.last_error()
        return error_for(status, detail or None)

    def _check(self, status):
        if status < 0:
            raise self._error(status)
        return status

    @staticmethod
    def _per_key(keys, results, values=None):
        out = []
        for i, st in enumerate(results):
            if st < 0:
                out.append(_key_error(keys[i], st))
            else:
                out.append(values[i] if values is not None else None)
        return out

    # -- lifecycle --
    def close(self):
        """Withdraw contributed capacity and disconnect. Idempotent; raises if
        a teardown step failed (call again to retry)."""
        self._check(self._client.close())

    @property
    def closed(self):
        return self._client.closed

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def health(self):
        """``egmstore.Health`` of this client (an IntEnum; 0 is HEALTHY)."""
        return Health(self._client.health())

    def metrics(self):
        """Prometheus text of this client's metrics ("" once closed)."""
        return self._client.metrics()

    # -- registered memory --
    def register_buffer(self, ptr, size):
        """Register ``size`` bytes at address ``ptr`` for the zero-copy calls.
        The memory stays the caller's and must outlive the registration.
        Raises ``InvalidArgument`` for a range that is neither GPU memory nor
        host memory mapped in this process. A range with memory the process may
        not write is a put's source only (see ``get_into``)."""
        self._check(self._client.register_buffer(ptr, size))

    def unregister_buffer(self, ptr):
        self._check(self._client.unregister_buffer(ptr))

    # -- single keys --
    def put(self, key, value, replicate=None):
        """Store a bytes-like ``value``. Raises ``Exists`` if the key exists."""
        self._check(self._client.put(key, value, _rc(replicate)))

    def put_from(self, key, ptr, size, replicate=None):
        """Store ``size`` bytes from registered memory at ``ptr``."""
        self._check(self._client.put_from(key, ptr, size, _rc(replicate)))

    def get(self, key):
        """The object's bytes. Raises ``NotFound`` for a missing key."""
        status, data = self._client.get(key)
        self._check(status)
        return data

    def get_into(self, key, ptr, size):
        """Copy the object into registered memory; returns its size in bytes.
        Raises ``BufferTooSmall`` when ``size`` is smaller than the object, and
        ``InvalidArgument`` when ``ptr`` lies in a registered range with memory
        the process may not write (checked at the first get into the range)."""
        status, nbytes = self._client.get_into(key, ptr, size)
        self._check(status)
        return nbytes

    def exists(self, key):
        """True if the key is committed (and refreshes its read lease)."""
        status = self._client.exist(key)
        if status == Status.NOT_FOUND:
            return False
        self._check(status)
        return True

    def size(self, key):
        status, nbytes = self._client.size(key)
        self._check(status)
        return nbytes

    def remove(self, key, force=False):
        """Remove the key; raises ``HasLease`` under a live read lease unless
        ``force``, ``NotFound`` if missing."""
        self._check(self._client.remove(key, bool(force)))

    def remove_all(self, force=False):
        """Remove every object not under a live read lease (all if
        ``force``); returns how many were removed."""
        status, removed = self._client.remove_all(bool(force))
        self._check(status)
        return removed

    # -- batches: one entry per key, an exception instance for a failed key --
    def batch_put_from(self, keys, ptrs, sizes, replicate=None):
        """[None or exception per key]."""
        status, results = self._client.batch_put_from(keys, ptrs, sizes, _rc(replicate))
        self._check(status)
        return self._per_key(keys, results)

    def batch_get_into(self, keys, ptrs, sizes):
        """[object size or exception per key]."""
        status, results, nbytes = self._client.batch_get_into(keys, ptrs, sizes)
        self._check(status)
        return self._per_key(keys, results, nbytes)

    def batch_put_from_parts(self, keys, ptrs, sizes, replicate=None):
        """Scatter-gather put: key i's object is the concatenation of the
        buffers ptrs[i][j] of sizes[i][j] bytes. [None or exception per key]."""
        status, results = self._client.batch_put_from_parts(keys, ptrs, sizes, _rc(replicate))
        self._check(status)
        return self._per_key(keys, results)

    def batch_get_into_parts(self, keys, ptrs, sizes):
        """Scatter-gather get: key i's object fills its buffers in order.
        [object size or exception per key]."""
        status, results, nbytes = self._client.batch_get_into_parts(keys, ptrs, sizes)
        self._check(status)
        return self._per_key(keys, results, nbytes)

    def batch_exists(self, keys):
        """[True, False or exception per key]."""
        status, results = self._client.batch_exist(keys)
        self._check(status)
        return [True if st == 0 else False if st == Status.NOT_FOUND else _key_error(k, st)
                for k, st in zip(keys, results)]

    def batch_remove(self, keys, force=False):
        """[None or exception per key]."""
        status, results = self._client.batch_remove(keys, bool(force))
        self._check(status)
        return self._per_key(keys, results)
