"""SGLang 0.5.23's HiCache Mooncake backend (sglang/srt/mem_cache/storage/mooncake_store/
mooncake_store.py), unmodified, against egmstore. Its configuration comes from the
environment as SGLang reads it (MOONCAKE_MASTER; MOONCAKE_PROTOCOL left unset, so its
default "rdma"; MOONCAKE_TE_META_DATA_SERVER its default "P2PHANDSHAKE"; only the segment
size set smaller than its 4 GB default). MooncakeStore.__init__ runs the engine's setup (7
positional arguments and the transfer engine) and warm-up (put of 4 KiB, is_exist, get).

SGLang's own test module, shipped in the wheel (test_mooncake_store.py), runs as it is: its
mock host KV pool (a CPU tensor standing in for the host pool a GPU server allocates) is the
only thing not SGLang's. Then batch_set_v1 / batch_exists / batch_get_v1 again with the bytes
compared exactly, clear() (remove_all), and set/get single keys."""

import gc
import uuid

import pytest
import torch

SEGMENT = str(256 << 20)


@pytest.fixture(autouse=True)
def sglang_env(cluster, monkeypatch):
    monkeypatch.setenv("MOONCAKE_MASTER", cluster.master_addr)
    monkeypatch.setenv("MOONCAKE_GLOBAL_SEGMENT_SIZE", SEGMENT)
    monkeypatch.delenv("MOONCAKE_PROTOCOL", raising=False)
    monkeypatch.delenv("SGLANG_HICACHE_MOONCAKE_CONFIG_PATH", raising=False)
    yield
    # SGLang's MooncakeStore.close() is a no-op (it leaves the client to its destructor):
    # collect this test's stores now, while the master is up.
    gc.collect()


def sgl_test():
    from sglang.srt.mem_cache.storage.mooncake_store import test_mooncake_store
    return test_mooncake_store


def test_default_protocol_is_rdma():
    from sglang.srt.mem_cache.storage.mooncake_store.mooncake_store import MooncakeStore
    t = sgl_test()
    store = MooncakeStore(t.make_hicache_storage_config(is_mla_model=False, tp_rank=0,
                                                        tp_size=1))
    assert store.config.protocol == "rdma"
    assert store.store.health_check() == 0


def test_sglang_single_operation():
    sgl_test().test_single_operation()


@pytest.mark.parametrize("mla,tp_rank,tp_size", [(False, 0, 1), (True, 0, 1), (False, 1, 4),
                                                 (True, 3, 8)])
def test_sglang_batch_operation(mla, tp_rank, tp_size):
    t = sgl_test()
    t.test_batch_operation(t.make_hicache_storage_config(is_mla_model=mla, tp_rank=tp_rank,
                                                         tp_size=tp_size))


@pytest.mark.parametrize("mla", [False, True], ids=["mha", "mla"])
def test_sglang_batch_bytes(mla):
    """batch_set_v1 from one half of a host pool, batch_get_v1 into the other half: the bytes
    read back are the bytes stored, byte for byte; keys already stored are not written again;
    clear() (remove_all) answers."""
    from sglang.srt.mem_cache.storage.mooncake_store.mooncake_store import MooncakeStore
    t = sgl_test()
    store = MooncakeStore(t.make_hicache_storage_config(is_mla_model=mla, tp_rank=0,
                                                        tp_size=1))
    entries = 1 if mla else 2
    elements = 1024  # float32 elements per entry: 4 KiB
    pool, buf = t.create_mock_host_kv_cache(1 << 22, entries_per_page=entries,
                                            page_elements=elements)
    store.register_mem_pool_host(pool)
    n = 8
    keys = [f"egm-{uuid.uuid4().hex}" for _ in range(n)]
    raw = buf.view(torch.uint8)
    raw[: 2 * n * entries * elements * 4] = torch.randint(
        0, 256, (2 * n * entries * elements * 4,), dtype=torch.uint8)
    assert store.batch_exists(keys) == 0
    assert all(store.batch_set_v1(keys, torch.arange(n)))
    assert store.batch_exists(keys) == n
    assert all(store.batch_set_v1(keys, torch.arange(n)))  # all exist: nothing written
    stored = bytes(raw[: n * entries * elements * 4].numpy())
    raw[n * entries * elements * 4: 2 * n * entries * elements * 4] = 0
    assert all(store.batch_get_v1(keys, torch.arange(n, 2 * n)))
    back = bytes(raw[n * entries * elements * 4: 2 * n * entries * elements * 4].numpy())
    assert back == stored
    missing = [f"egm-missing-{uuid.uuid4().hex}"]
    assert store.batch_get_v1(missing, torch.arange(2 * n, 2 * n + 1)) == [False]
    assert store.batch_exists(keys + missing) == n
    # clear() is remove_all() without force: objects under a read lease stay (as on
    # Mooncake); the call must still answer.
    store.clear()


class CpuLayerPool:
    """Stands in for the device KV pool of SGLang's direct linker (GPU memory there): per
    layer one `piece` of each page, laid out [layer, page, piece], and the two calls
    load_layer_wise makes of a pool (prepare_locations, get_prepared_layer_range_meta:
    per key the destination pointers, sizes and offsets in the stored object)."""

    def __init__(self, layers, pages, piece):
        self.piece = piece
        self.buf = torch.zeros((layers, pages, piece), dtype=torch.uint8)

    def get_hybrid_pool_buffer(self):
        return [self.buf]

    def prepare_locations(self, host_indices):
        return [int(i) for i in host_indices]

    def get_prepared_layer_range_meta(self, locations, layer):
        ptrs = [[self.buf[layer, loc].data_ptr()] for loc in locations]
        sizes = [[self.piece] for _ in locations]
        offsets = [[layer * self.piece] for _ in locations]
        return ptrs, sizes, offsets


def test_sglang_direct_linker_get_session():
    """The direct linker's layer-wise load (MooncakeDirectLinker.load_layer_wise, SGLang's
    code): batch_get_session_start over the pages' keys, then per layer
    batch_get_into_multi_buffer_ranges of that layer's range of each object into the pool,
    then batch_get_session_end; the per-layer completion counter must report every layer
    landed and the pool hold each page's bytes. Then a batch with a missing key: the session
    start fails, the counter reports the failure, nothing is left open.

    The linker is built without its __init__ (which resolves the GPU device pools and the
    model runtime); its pool is CpuLayerPool and its storage SGLang's MooncakeStore. The
    objects are written as SGLang writes them (batch_put_from_multi_buffers through
    MooncakeStore._put_batch_zero_copy_impl), one object per page with the layers one after
    another."""
    from sglang.srt.mem_cache.hicache_storage import PoolName, PoolTransfer
    from sglang.srt.mem_cache.storage.mooncake_store.mooncake_direct_linker import (
        MooncakeDirectLinker,
    )
    from sglang.srt.mem_cache.storage.mooncake_store.mooncake_store import MooncakeStore
    from sglang.srt.mem_cache.unified_cache.unified_cache_linker import LayerWiseLoadCounter
    t = sgl_test()
    layers, pages, piece = 4, 6, 4096
    storage = MooncakeStore(t.make_hicache_storage_config(is_mla_model=True, tp_rank=0,
                                                          tp_size=1))
    pool = CpuLayerPool(layers, pages, piece)
    linker = MooncakeDirectLinker.__new__(MooncakeDirectLinker)
    linker.storage = storage
    linker.pools = {PoolName.KV: pool}
    linker.num_layers = layers
    linker.layer_done_counter = LayerWiseLoadCounter(layers)
    storage.registered_pools = linker.pools
    linker.register_buffers()  # the linker's own registration of its pool

    page_keys = [f"egm-page-{uuid.uuid4().hex}" for _ in range(pages)]
    transfer = PoolTransfer(name=PoolName.KV, host_indices=torch.arange(pages),
                            keys=page_keys)
    keys, per_page = storage._get_hybrid_page_component_keys(page_keys, transfer)
    assert per_page == 1
    src = torch.randint(0, 256, (pages, layers, piece), dtype=torch.uint8)
    assert storage.store.register_buffer(src.data_ptr(), src.numel()) == 0
    ptrs = [[src[p, l].data_ptr() for l in range(layers)] for p in range(pages)]
    sizes = [[piece] * layers for _ in range(pages)]
    assert storage._put_batch_zero_copy_impl(storage._tag_keys(keys), ptrs, sizes) == \
        [0] * pages

    counter = linker.layer_done_counter
    index = counter.update_producer()
    linker.load_layer_wise(index, [[transfer]])
    assert counter.finish(index) is True
    for p in range(pages):
        for l in range(layers):
            assert bytes(pool.buf[l, p].numpy()) == bytes(src[p, l].numpy()), (p, l)

    missing = PoolTransfer(name=PoolName.KV, host_indices=torch.arange(2),
                           keys=[page_keys[0], f"egm-missing-{uuid.uuid4().hex}"])
    index = counter.update_producer()
    linker.load_layer_wise(index, [[missing]])
    assert counter.finish(index) is False
    # the first batch's sessions were ended: a new session on its keys opens again
    again = counter.update_producer()
    pool.buf.zero_()
    linker.load_layer_wise(again, [[transfer]])
    assert counter.finish(again) is True
    assert bytes(pool.buf.permute(1, 0, 2).contiguous().numpy()) == bytes(src.numpy())
