"""LMCache 0.5.6's MooncakestoreConnector (lmcache/v1/storage_backend/connector/
mooncakestore_connector.py), unmodified, against egmstore, in both of its modes:
- save_chunk_meta True (its default): put_parts(key, 28-byte metadata, chunk) and
  batch_get_buffer(keys);
- save_chunk_meta False: put_from / batch_put_from from its registered CPU buffer and
  batch_get_into into it.
Constructed as LMCache's connector adapter does (MooncakestoreConnector(loop,
local_cpu_backend, config)), with a real LMCacheEngineConfig, LMCacheMetadata and
LocalCPUBackend (its own allocator over host memory: no GPU is needed on this path). The
setup dict is LMCache's own (_build_setup_dict: its defaults, `master_server_address` and
`device_name` as LMCache names them), with the protocol its default ("tcp") and Mooncake's
"rdma"."""

import asyncio
import os
import uuid

import pytest
import torch

from lmcache.utils import CacheEngineKey
from lmcache.v1.config import LMCacheEngineConfig
from lmcache.v1.metadata import LMCacheMetadata
from lmcache.v1.storage_backend.connector.mooncakestore_adapter import (
    MooncakestoreConnectorAdapter,
)
from lmcache.v1.storage_backend.connector.mooncakestore_connector import (
    MooncakestoreConnector,
)
from lmcache.v1.storage_backend.local_cpu_backend import LocalCPUBackend

CHUNK = 16  # tokens per chunk
KV_SHAPE = (4, 2, CHUNK, 8, 64)  # layers, K/V, tokens, kv heads, head size
DTYPE = torch.bfloat16


def make_connector(cluster, save_chunk_meta, protocol):
    extra = {
        "master_server_address": cluster.master_addr,
        "local_hostname": "127.0.0.1",
        "metadata_server": "P2PHANDSHAKE",
        "global_segment_size": str(64 << 20),
        "local_buffer_size": str(64 << 20),
        "save_chunk_meta": save_chunk_meta,
        "transfer_timeout": 30,
    }
    if protocol is not None:
        extra["protocol"] = protocol
    config = LMCacheEngineConfig.from_defaults(
        chunk_size=CHUNK, local_cpu=True, max_local_cpu_size=0.25,
        remote_url=f"mooncakestore://{cluster.master_addr}", remote_serde="naive",
        extra_config=extra)
    metadata = LMCacheMetadata(
        model_name="egm-test-model", world_size=1, local_world_size=1, worker_id=0,
        local_worker_id=0, kv_dtype=DTYPE, kv_shape=KV_SHAPE, chunk_size=CHUNK)
    backend = LocalCPUBackend(config, metadata)
    loop = asyncio.new_event_loop()
    assert MooncakestoreConnectorAdapter().can_parse(config.remote_url)
    conn = MooncakestoreConnector(loop, backend, config)
    return conn, backend, loop, metadata


def key(chunk_hash):
    return CacheEngineKey("egm-test-model", 1, 0, chunk_hash, DTYPE)


def filled(backend, metadata, seed, tokens=CHUNK):
    shapes = metadata.get_shapes(tokens)
    obj = backend.allocate(shapes, metadata.get_dtypes())
    assert obj is not None and obj.raw_tensor is not None
    gen = torch.Generator().manual_seed(seed)
    raw = obj.raw_tensor.view(torch.uint8)
    raw.copy_(torch.randint(0, 256, raw.shape, dtype=torch.uint8, generator=gen))
    return obj


@pytest.mark.parametrize("protocol", [None, "rdma"], ids=["protocol-default", "protocol-rdma"])
@pytest.mark.parametrize("save_chunk_meta", [True, False], ids=["chunk-meta", "zero-copy"])
def test_mooncakestore_connector(cluster, save_chunk_meta, protocol):
    conn, backend, loop, metadata = make_connector(cluster, save_chunk_meta, protocol)
    run = loop.run_until_complete
    try:
        assert conn.save_chunk_meta is save_chunk_meta
        # The connector registered its CPU buffer (LocalCPUBackend's pinned allocator).
        assert conn.registered_buffer_ptr is not None
        base = uuid.uuid4().int & ((1 << 62) - 1)
        keys = [key(base + i) for i in range(5)]
        objs = [filled(backend, metadata, seed=i) for i in range(5)]
        stored = [bytes(o.byte_array) for o in objs]
        assert len(set(stored)) == 5

        # one put, then a batch of the rest (LMCache's two write calls)
        run(conn.put(keys[0], objs[0]))
        run(conn.batched_put(keys[1:], objs[1:]))
        assert all(conn.exists_sync(k) for k in keys)
        assert run(conn.exists(keys[2]))
        missing = key(base + 100)
        assert not conn.exists_sync(missing)
        assert run(conn.batched_async_contains("lookup", keys + [missing])) == 5

        got = run(conn.batched_get(keys[:3] + [missing] + keys[3:]))
        assert got[3] is None
        got = got[:3] + got[4:]
        for i, obj in enumerate(got):
            assert obj is not None, f"chunk {i} missed"
            assert bytes(obj.byte_array) == stored[i], f"chunk {i}: other bytes read back"
            assert obj.get_shapes() == objs[i].get_shapes()

        # a partial last chunk (fewer tokens), as at the end of a prompt
        part_key = key(base + 50)
        part = filled(backend, metadata, seed=50, tokens=CHUNK // 2)
        part_bytes = bytes(part.byte_array)
        run(conn.put(part_key, part))
        (back,) = run(conn.batched_get([part_key]))
        assert back is not None
        assert bytes(back.byte_array) == part_bytes  # its length too
        for obj in objs + got + [part, back]:
            obj.ref_count_down()
    finally:
        run(conn.close())
        loop.close()
