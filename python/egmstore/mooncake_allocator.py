"""Mooncake's ``mooncake.allocator`` names, for the ``mooncake`` stand-in
(egmstore._standin): ``import mooncake.allocator`` loads this module.

Mooncake's allocators are PyTorch pluggable allocators over memory its
transfer engine can share (fabric NVLink, Barex, Ascend), for prefill/decode
disaggregation; egmstore has no such allocator. Engines import them only when
one of their memory-pool switches asks for it (SGLang's
SGLANG_MOONCAKE_CUSTOM_MEM_POOL, for example) and treat an ImportError as
"this Mooncake has no such allocator": they fall back to the default pool
with a warning. So ``detect_mem_backend()`` answers UNSUPPORTED and
``get_allocator()`` raises ImportError, naming egmstore.
"""

import enum

__all__ = ["MemoryBackend", "NVLinkAllocator", "BarexAllocator", "AscendAllocator"]


class MemoryBackend(enum.IntEnum):
    """Mooncake's values, as its NVLinkAllocator.detect_mem_backend answers them."""

    USE_CUDAMALLOC = 0
    USE_CUMEMCREATE = 1
    UNKNOWN = -1
    UNSUPPORTED = -2


class _NoAllocator:
    @classmethod
    def detect_mem_backend(cls):
        return MemoryBackend.UNSUPPORTED

    @classmethod
    def get_allocator(cls, device):
        raise ImportError(
            f"mooncake.allocator.{cls.__name__} is not available: egmstore stands in for "
            "mooncake.store (EGMSTORE_AS_MOONCAKE or egmstore.mooncake.install()) and has no "
            "pluggable allocator; use the default memory pool (unset the engine's Mooncake "
            "memory-pool switch), or the real Mooncake for its transfer engine",
            name="mooncake.allocator")


class NVLinkAllocator(_NoAllocator):
    """Mooncake's fabric-memory (NVLink) allocator: not available here."""


class BarexAllocator(_NoAllocator):
    """Mooncake's Barex allocator: not available here."""


class AscendAllocator(_NoAllocator):
    """Mooncake's Ascend NPU allocator: not available here."""
