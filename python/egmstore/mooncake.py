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

import inspect
import logging
import re
import socket

from . import Status, _egmstore, _standin

__all__ = ["MooncakeDistributedStore", "ReplicateConfig", "ErrorCode", "install"]

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


def _exist_code(status):
    # Measured: is_exist and batch_is_exist answer 0 for an empty key.
    if status >= 0:
        return 1
    if status in (Status.NOT_FOUND, Status.INVALID_KEY):
        return 0
    return _code(status)


class ReplicateConfig:
    """Mooncake's ReplicateConfig. ``preferred_segment`` is the deprecated
    single-segment form of ``preferred_segments``; ``prefer_alloc_in_same_node``
    is accepted and has no effect."""

    def __init__(self, replica_num=1, with_soft_pin=False, with_hard_pin=False,
                 preferred_segments=None, preferred_segment="", prefer_alloc_in_same_node=False):
        self.replica_num = replica_num  # the setter checks the type
        self.with_soft_pin = with_soft_pin
        self.with_hard_pin = with_hard_pin
        self.preferred_segments = list(preferred_segments or [])
        self.preferred_segment = preferred_segment
        self.prefer_alloc_in_same_node = prefer_alloc_in_same_node

    @property
    def replica_num(self):
        return self._replica_num

    @replica_num.setter
    def replica_num(self, value):
        # As Mooncake's (pybind11, size_t): a non-int or negative value raises
        # TypeError when assigned; 0 is accepted here and refused by the put.
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise TypeError(f"replica_num must be an int >= 0, not {value!r}")
        self._replica_num = value

    def _as_tuple(self):
        segs = list(self.preferred_segments)
        if not segs and self.preferred_segment:
            segs = [self.preferred_segment]
        if not all(isinstance(s, str) for s in segs):
            raise TypeError("preferred_segments must be a list of str")
        return (self.replica_num, bool(self.with_soft_pin), bool(self.with_hard_pin), segs)

    def __repr__(self):
        return (f"ReplicateConfig: {{ replica_num: {self.replica_num}, "
                f"with_soft_pin: {int(bool(self.with_soft_pin))}, "
                f"with_hard_pin: {int(bool(self.with_hard_pin))}, "
                f"preferred_segments: {self.preferred_segments}, "
                f"prefer_alloc_in_same_node: {int(bool(self.prefer_alloc_in_same_node))} }}")


_BAD_RC = object()  # _rc's answer for a replica_num no put can honour


def _rc(config):
    """The binding's replicate tuple, None, or _BAD_RC (logged) for a replica_num
    outside 1..REPLICA_MAX, which the put calls answer with INVALID_PARAMS:
    measured, Mooncake answers replica_num 0 so rather than raising."""
    if config is None:
        return None
    if not isinstance(config, ReplicateConfig):
        raise TypeError("config must be an egmstore.mooncake.ReplicateConfig, "
                        f"not {type(config).__name__}")
    rc = config._as_tuple()
    if not 1 <= rc[0] <= _egmstore.REPLICA_MAX:
        log.error("put: ReplicateConfig.replica_num must be 1..%d, not %d",
                  _egmstore.REPLICA_MAX, rc[0])
        return _BAD_RC
    return rc


def install(force=False):
    """Make ``import mooncake.store`` (and ``mooncake.allocator``) load
    egmstore's modules in this process from now on, as EGMSTORE_AS_MOONCAKE
    does. Raises RuntimeError, changing nothing, when the real Mooncake is
    importable too (call install(force=True) to take egmstore's anyway; the
    real package's other modules stay its own) or when the real
    mooncake.store is already imported. docs/mooncake-compat.md."""
    _standin.install(force)


def _free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("", 0))
        return sock.getsockname()[1]


def _need(value, kind, name):
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise TypeError(f"setup(): {name} must be {kind.__name__}, not {type(value).__name__}")
    return value


class _BadSetting(Exception):
    """A value of setup()'s config dict with a type setup cannot use."""


# setup(config_dict): the type each Mooncake key must have.
_DICT_STR_KEYS = ("local_hostname", "metadata_server", "protocol", "rdma_devices",
                  "master_server_addr")
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


class MooncakeDistributedStore:
    """Mooncake's store client, answering Mooncake's codes from egmstore."""

    def __init__(self):
        self._client = None
        self._hostname = ""
        self._transports = []

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
        return self._connect(local_hostname, global_segment_size, protocol, master_server_addr, {})

    def _setup_dict(self, config):
        """Like Mooncake's dict form, a value setup cannot use answers
        INVALID_PARAMS (logged, naming the key and the accepted type) rather
        than raising."""
        for key in ("local_hostname", "metadata_server"):
            if key not in config:
                log.error("setup(): the config dict needs %r", key)
                return ErrorCode.INVALID_PARAMS
        extra = {}
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
                             _dict_str(config, "master_server_addr", _DEFAULT_MASTER), extra)

    def _connect(self, local_hostname, global_segment_size, protocol, master_server_addr, extra):
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

    # ---- registered memory ----
    def register_buffer(self, buffer_ptr, size):
        return _buffer_code(self._c.register_buffer(buffer_ptr, size))

    def unregister_buffer(self, buffer_ptr):
        return _buffer_code(self._c.unregister_buffer(buffer_ptr))

    # ---- single keys ----
    def put(self, key, value, config=None):
        rc = _rc(config)
        if rc is _BAD_RC:
            return ErrorCode.INVALID_PARAMS
        return _put_code(self._c.put(key, value, rc))

    def put_parts(self, key, *parts, config=None):
        """Stores the concatenation of the bytes-like parts."""
        return self.put(key, b"".join(parts), config)

    def put_from(self, key, buffer_ptr, size, config=None):
        rc = _rc(config)
        if rc is _BAD_RC:
            return ErrorCode.INVALID_PARAMS
        return _put_code(self._c.put_from(key, buffer_ptr, size, rc))

    def get(self, key):
        """The object's bytes, or b"" when it is missing or the read fails."""
        status, data = self._c.get(key)
        return data if status >= 0 else b""

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
        rc = _rc(config)
        if rc is _BAD_RC:
            return [ErrorCode.INVALID_PARAMS] * len(keys)
        status, results = self._c.batch_put_from(keys, buffer_ptrs, sizes, rc)
        if status < 0:
            return self._whole(status, len(keys))
        return [_put_code(st) for st in results]

    def batch_get_into(self, keys, buffer_ptrs, sizes):
        status, results, nbytes = self._c.batch_get_into(keys, buffer_ptrs, sizes)
        if status < 0:
            return self._whole(status, len(keys))
        return [_read_code(st, n) for st, n in zip(results, nbytes)]

    def batch_put_from_multi_buffers(self, keys, all_buffer_ptrs, all_sizes, config=None):
        rc = _rc(config)
        if rc is _BAD_RC:
            return [ErrorCode.INVALID_PARAMS] * len(keys)
        status, results = self._c.batch_put_from_parts(keys, all_buffer_ptrs, all_sizes, rc)
        if status < 0:
            return self._whole(status, len(keys))
        return [_put_code(st) for st in results]

    def batch_get_into_multi_buffers(self, keys, all_buffer_ptrs, all_sizes,
                                     prefer_alloc_in_same_node=False):
        status, results, nbytes = self._c.batch_get_into_parts(keys, all_buffer_ptrs, all_sizes)
        if status < 0:
            return self._whole(status, len(keys))
        return [_read_code(st, n) for st, n in zip(results, nbytes)]

    def batch_is_exist(self, keys):
        status, results = self._c.batch_exist(keys)
        if status < 0:
            return self._whole(status, len(keys))
        return [_exist_code(st) for st in results]

    def batch_remove(self, keys, force=False):
        status, results = self._c.batch_remove(keys, bool(force))
        if status < 0:
            return self._whole(status, len(keys))
        return [_lookup_code(st) for st in results]


class _NotSetUp:
    """Stands in for the client before setup(): validates nothing, answers CLOSED."""

    closed = True

    def __getattr__(self, name):
        closed = Status.CLOSED

        def call(*args, **kwargs):
            if name in ("get", "get_into", "size", "remove_all"):
                return closed, (None if name == "get" else 0)
            if name in ("batch_get_into", "batch_get_into_parts"):
                return closed, [], []
            if name.startswith("batch_"):
                return closed, []
            return closed

        return call


_NOT_SET_UP = _NotSetUp()
