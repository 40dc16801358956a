"""Test scaffolding for machines without a GPU: with egmstore's fake driver (build/fake-cuda/
libcuda.so.1 on LD_LIBRARY_PATH), allocate "device memory" with its cuMemAlloc and wrap it as CPU
torch tensors or numpy arrays (tensors.py). The fake's device memory is ordinary host memory, so
the CPU computes on it while egmstore (same process, same libcuda.so.1) sees GPU buffers and takes
the nvlink path. Only `run.py --fake-gpu` uses this; on a real GPU the workers use torch's CUDA
tensors.
"""

import ctypes
import math

_api = {}


def _fn(name, *argtypes):
    if name not in _api:
        lib = ctypes.CDLL("libcuda.so.1")
        gpa = lib.cuGetProcAddress_v2
        gpa.argtypes = [
            ctypes.c_char_p,
            ctypes.POINTER(ctypes.c_void_p),
            ctypes.c_int,
            ctypes.c_uint64,
            ctypes.c_void_p,
        ]
        ptr = ctypes.c_void_p()
        if gpa(name.encode(), ctypes.byref(ptr), 12000, 0, None) != 0:
            raise RuntimeError(f"libcuda.so.1 has no {name}")
        _api[name] = ctypes.CFUNCTYPE(ctypes.c_int, *argtypes)(ptr.value)
    return _api[name]


def _check(rc, what):
    if rc != 0:
        raise RuntimeError(f"{what}: CUresult {rc}")


def use_device(ordinal):
    """cuInit, then make the device's primary context current (cuMemAlloc allocates there)."""
    _check(_fn("cuInit", ctypes.c_uint)(0), "cuInit")
    dev, ctx = ctypes.c_int(), ctypes.c_void_p()
    _check(
        _fn("cuDeviceGet", ctypes.POINTER(ctypes.c_int), ctypes.c_int)(ctypes.byref(dev), ordinal),
        "cuDeviceGet",
    )
    _check(
        _fn("cuDevicePrimaryCtxRetain", ctypes.POINTER(ctypes.c_void_p), ctypes.c_int)(
            ctypes.byref(ctx), dev.value
        ),
        "cuDevicePrimaryCtxRetain",
    )
    _check(_fn("cuCtxSetCurrent", ctypes.c_void_p)(ctx), "cuCtxSetCurrent")


def zeros(T, shape, dtype):
    """A zeroed tensor of `shape` (T: tensors.Torch or tensors.Numpy) in fake device memory,
    kept for the process's life."""
    nbytes = T.nbytes(T.zeros((1,), dtype, "cpu")) * math.prod(shape)
    ptr = ctypes.c_uint64()
    _check(
        _fn("cuMemAlloc", ctypes.POINTER(ctypes.c_uint64), ctypes.c_size_t)(ctypes.byref(ptr), nbytes),
        "cuMemAlloc",
    )
    t = T.from_address(ptr.value, shape, dtype)
    T.zero_(t)
    return t
