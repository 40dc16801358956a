"""vLLM 0.33.0's Mooncake store connector worker (vllm/distributed/kv_transfer/kv_connector/
v1/mooncake/store/worker.py, and vllm/distributed/mooncake_store.py for its configuration
and setup), unmodified, against egmstore, on the code paths that need no GPU:
MooncakeStoreWorker.__init__ (MooncakeStoreConfig from MOONCAKE_CONFIG_PATH with vLLM's
defaults: protocol "rdma"; setup_mooncake_store's 7-argument setup; ReplicateConfig),
register_kv_caches (register_buffer of each KV-cache region; the real sending and receiving
threads started), a save through the sending thread (batch_is_exist, then
batch_put_from_multi_buffers: one key per block, one piece per layer region), lookup
(batch_is_exist), a load by a second worker through start_load_kv and its receiving threads
(batch_get_into_multi_buffers) into other blocks of its own KV cache, the bytes compared with
the producer's (again with VLLM_MOONCAKE_STORE_TIER_LOG=1: batch_get_replica_desc), and
close(); and the embedding-cache store client (test_embedding_store_client).

What is replaced, as vLLM's own unit tests of this worker replace it (tests/v1/kv_connector/
unit/test_mooncake_store_worker.py and test_mooncake_store_hma_e2e.py in its sdist): the
distributed-group accessors (one rank), get_ip, the scheduler-side LookupKeyServer (a ZMQ
server), and the model/vLLM config objects (minimal stand-ins). The KV caches are CPU tensors
viewed with vLLM's own create_kv_cache_views, where vLLM would allocate them on the GPU; the
sending thread gets requests with no CUDA event, as wait_for_save would give it one."""

import json
import threading
import time
import uuid
from unittest.mock import MagicMock

import pytest
import torch

from vllm.distributed import mooncake_store as vllm_mooncake_store
from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store import worker
from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store.data import (
    LoadSpec,
    MooncakeStoreConnectorMetadata,
    ReqMeta,
)
from vllm.v1.core.kv_cache_utils import BlockHash
from vllm.v1.kv_cache_interface import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheTensor,
    compute_layout_strides,
    create_kv_cache_views,
)
from vllm.v1.kv_cache_layout import KVCacheLayout

NUM_BLOCKS = 12
BLOCK = 16
LAYERS = ["model.layers.0.attn", "model.layers.1.attn"]
LAYOUT = KVCacheLayout.LBNHC
WAIT_S = 60


def spec():
    return FullAttentionSpec(block_size=BLOCK, num_kv_heads=8, head_size=64,
                             dtype=torch.bfloat16)


def kv_cache_config():
    s = spec()
    tensors = [KVCacheTensor(size=NUM_BLOCKS * s.page_size_bytes, layers=[name],
                             layer_stride=NUM_BLOCKS * s.page_size_bytes,
                             block_stride=s.page_size_bytes) for name in LAYERS]
    return KVCacheConfig(num_blocks=NUM_BLOCKS, kv_cache_tensors=tensors,
                         kv_cache_groups=[KVCacheGroupSpec(list(LAYERS), s)])


def kv_caches(cfg):
    """One int8 buffer per layer (as vLLM allocates them, here on the CPU), viewed with
    vLLM's create_kv_cache_views."""
    s = spec()
    raws, views = {}, {}
    for t in cfg.kv_cache_tensors:
        raw = torch.zeros(t.size, dtype=torch.int8)
        (view,) = create_kv_cache_views(raw, s, NUM_BLOCKS, LAYOUT, t)
        raws[t.layers[0]] = raw
        views[t.layers[0]] = view
    return raws, views


def vllm_config(kv_role):
    cfg = MagicMock()
    cfg.cache_config.block_size = BLOCK
    cfg.cache_config.num_gpu_blocks = NUM_BLOCKS
    cfg.cache_config.hash_block_size = None
    cfg.cache_config.prefix_match_unit = None
    cfg.cache_config.enable_prefix_caching = True
    cfg.cache_config.get_resolved_kv_cache_layout = lambda: LAYOUT
    cfg.parallel_config.prefill_context_parallel_size = 1
    cfg.parallel_config.decode_context_parallel_size = 1
    cfg.parallel_config.pipeline_parallel_size = 1
    cfg.parallel_config.world_size = 1
    cfg.parallel_config.rank = 0
    cfg.parallel_config.data_parallel_index = 0
    cfg.parallel_config.data_parallel_rank_local = 0
    cfg.parallel_config.data_parallel_size_local = 1
    cfg.kv_transfer_config.kv_role = kv_role
    cfg.kv_transfer_config.kv_connector_extra_config = {}
    cfg.kv_events_config = None
    cfg.model_config.model = "/models/egm-test-model"
    cfg.model_config.use_mla = False
    cfg.model_config.enable_sleep_mode = False
    cfg.model_config.enable_cumem_allocator = False
    cfg.model_config.get_num_layers.return_value = len(LAYERS)
    cfg.model_config.get_total_num_kv_heads.return_value = 8
    cfg.model_config.max_model_len = 4096
    cfg.scheduler_config.max_num_batched_tokens = 8192
    cfg.scheduler_config.disable_hybrid_kv_cache_manager = True
    cfg.speculative_config = None
    return cfg


@pytest.fixture
def mooncake_config(cluster, tmp_path, monkeypatch):
    """vLLM's MOONCAKE_CONFIG_PATH file: no protocol (vLLM's default "rdma"), segments
    smaller than its 4 GiB defaults."""
    path = tmp_path / "mooncake.json"
    path.write_text(json.dumps({
        "metadata_server": "P2PHANDSHAKE",
        "master_server_address": cluster.master_addr,
        "global_segment_size": "128MB",
        "local_buffer_size": "64MB",
    }))
    monkeypatch.setenv("MOONCAKE_CONFIG_PATH", str(path))
    # one rank: what vLLM's parallel state would answer
    group = MagicMock(world_size=1, rank_in_group=0)
    monkeypatch.setattr(worker, "get_tensor_model_parallel_rank", lambda: 0)
    monkeypatch.setattr(worker, "get_tensor_model_parallel_world_size", lambda: 1)
    monkeypatch.setattr(worker, "get_pcp_group", lambda: group)
    monkeypatch.setattr(worker, "get_dcp_group", lambda: group)
    monkeypatch.setattr(worker, "get_ip", lambda: "127.0.0.1")
    monkeypatch.setattr(worker, "LookupKeyServer", MagicMock())
    return path


def wait_until(pred, what):
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError(f"timed out waiting for {what}")


def test_config_defaults_to_rdma(mooncake_config):
    cfg = vllm_mooncake_store.MooncakeStoreConfig.load_from_config()
    assert cfg.protocol == "rdma"


@pytest.mark.parametrize("tier_log", [False, True], ids=["plain", "tier-log"])
def test_store_worker_save_lookup_load(mooncake_config, monkeypatch, tier_log):
    """With VLLM_MOONCAKE_STORE_TIER_LOG=1 the receiving thread also asks
    batch_get_replica_desc for each loaded key's tier (is_memory_replica and friends): every
    key must be found in memory."""
    tiers = []
    if tier_log:
        monkeypatch.setenv("VLLM_MOONCAKE_STORE_TIER_LOG", "1")
        real = worker._log_mooncake_load_tier_summary

        def record(req_id, batch_keys, load_results, tiers_by_key):
            tiers.append((list(batch_keys), list(load_results), dict(tiers_by_key)))
            return real(req_id, batch_keys, load_results, tiers_by_key)

        monkeypatch.setattr(worker, "_log_mooncake_load_tier_summary", record)
    else:
        monkeypatch.delenv("VLLM_MOONCAKE_STORE_TIER_LOG", raising=False)
    cfg = kv_cache_config()
    producer = worker.MooncakeStoreWorker(vllm_config("kv_both"), cfg)
    consumer = None
    try:
        assert isinstance(producer.store, worker_store_class())
        p_raws, p_views = kv_caches(cfg)
        gen = torch.Generator().manual_seed(7)
        for raw in p_raws.values():
            raw.copy_(torch.randint(-128, 128, raw.shape, dtype=torch.int8, generator=gen))
        producer.register_kv_caches(p_views)
        assert producer.kv_send_thread is not None and producer.kv_recv_threads

        # four full blocks of a prompt, in the producer's blocks 1..4 (0 is vLLM's null block)
        hashes = [BlockHash(uuid.uuid4().bytes) for _ in range(4)]
        tokens = 4 * BLOCK
        save = ReqMeta(req_id="req-save", token_len_chunk=tokens, block_ids=([1, 2, 3, 4],),
                       block_hashes=hashes, can_save=True, store_job_id=1)
        assert producer.lookup(num_tokens=tokens + 1, block_hashes=hashes).hit_length == 0
        producer.kv_send_thread.add_request(save)
        wait_until(lambda: producer.kv_send_thread.request_queue.unfinished_tasks == 0,
                   "the save")
        assert producer.lookup(num_tokens=tokens + 1, block_hashes=hashes).hit_length == tokens

        # a second worker (another vLLM instance) loads them into its blocks 5..8
        consumer = worker.MooncakeStoreWorker(vllm_config("kv_consumer"), cfg)
        c_raws, c_views = kv_caches(cfg)
        consumer.register_kv_caches(c_views)
        assert consumer.kv_send_thread is None  # a consumer does not save
        hit = consumer.lookup(num_tokens=tokens + 1, block_hashes=hashes)
        assert hit.hit_length == tokens
        meta = MooncakeStoreConnectorMetadata(set(), set())
        load = ReqMeta(req_id="req-load", token_len_chunk=tokens, block_ids=([5, 6, 7, 8],),
                       block_hashes=hashes,
                       load_spec=LoadSpec(vllm_cached_tokens=0, kvpool_cached_tokens=tokens,
                                          can_load=True,
                                          tail_key_boundaries=hit.tail_key_boundaries))
        meta.add_request(load)
        consumer.start_load_kv(meta)
        done = set()

        def loaded():
            _, recving = consumer.get_finished(set(), meta)
            done.update(recving)
            return "req-load" in done

        wait_until(loaded, "the load")
        assert consumer.get_block_ids_with_load_errors() == set()
        s = spec()
        page = s.page_size_bytes
        for name in LAYERS:
            p = p_raws[name].view(torch.uint8)
            c = c_raws[name].view(torch.uint8)
            for src, dst in zip([1, 2, 3, 4], [5, 6, 7, 8]):
                want = bytes(p[src * page:(src + 1) * page].numpy())
                got = bytes(c[dst * page:(dst + 1) * page].numpy())
                assert got == want, f"{name} block {src} -> {dst}: other bytes"
            # nothing else of the consumer's cache was written
            assert not c[: 5 * page].any() and not c[9 * page:].any()
        if tier_log:
            assert tiers, "the tier summary was not logged"
            keys = [k for batch_keys, _, _ in tiers for k in batch_keys]
            assert len(keys) == 4
            for batch_keys, results, by_key in tiers:
                assert all(r == 2 * page for r in results), results  # both layers' pieces
                assert all(by_key[k] == "memory" for k in batch_keys), by_key
    finally:
        producer.close()
        if consumer is not None:
            consumer.close()
    assert producer.store is None


def worker_store_class():
    import egmstore.mooncake
    return egmstore.mooncake.MooncakeDistributedStore


def test_embedding_store_client(mooncake_config, monkeypatch):
    """vLLM's embedding-cache store client (vllm/distributed/ec_transfer/ec_connector/
    mooncake_store_embedding/store_client.py): create_mooncake_embedding_store_client (the
    shared config and setup; ReplicateConfig.data_type = ObjectDataType.TENSOR), put_tensor
    (a registered header + the tensor through batch_put_from_multi_buffers), batch_exists,
    load_tensors into CPU tensors (batch_get_into into its registered read buffer), a missing
    key skipped, close (unregister_buffer of both buffers, close)."""
    from vllm.distributed.ec_transfer.ec_connector.mooncake_store_embedding import (
        store_client,
    )
    from vllm.distributed.ec_transfer.ec_connector.mooncake_store_embedding.data import (
        TensorSpec,
        make_embedding_key,
    )
    monkeypatch.setattr(store_client, "get_ip", lambda: "127.0.0.1")
    client = store_client.create_mooncake_embedding_store_client(read_buffer_bytes=4 << 20)
    try:
        ns = f"egm-test@{uuid.uuid4().hex}"
        tensors = {
            make_embedding_key(ns, "a"): torch.randn(7, 64, dtype=torch.float32),
            make_embedding_key(ns, "b"): torch.randn(33, 128, dtype=torch.bfloat16),
            make_embedding_key(ns, "c"): torch.randn(1, 4096, dtype=torch.float16),
        }
        for key, t in tensors.items():
            client.put_tensor(key, t)
        missing = make_embedding_key(ns, "missing")
        assert client.batch_exists(list(tensors) + [missing]) == [True, True, True, False]
        expected = {key: TensorSpec(tuple(t.shape), str(t.dtype), t.numel() * t.element_size())
                    for key, t in tensors.items()}
        expected[missing] = TensorSpec((2, 2), "torch.float32", 16)
        loaded = client.load_tensors(expected, "cpu")
        assert set(loaded) == set(tensors)
        for key, t in tensors.items():
            assert loaded[key].dtype == t.dtype and loaded[key].shape == t.shape
            assert bytes(loaded[key].view(torch.uint8).reshape(-1).numpy()) == \
                bytes(t.view(torch.uint8).reshape(-1).numpy()), key
    finally:
        client.close()
