"""GPU buffers for the bench/gpu workloads: `TorchBackend` (a real GPU through PyTorch: HBM
tensors, pinned host tensors, events, streams) and `FakeBackend` (egmstore's fake CUDA driver
through ctypes, no torch: its "device memory" is host memory, so only the flow is tested, never
a speed). Both fill blocks with gpulib's pattern and check blocks against it.
"""

import ctypes
import time

import gpulib


class Buf:
    """A device buffer: address, size, and what keeps it alive."""

    def __init__(self, ptr, nbytes, obj=None):
        self.ptr, self.nbytes, self.obj = ptr, nbytes, obj


class FakeBackend:
    kind = "fake"

    def __init__(self, ordinal=0):
        why = gpulib.check_fake_driver()
        if why:
            raise SystemExit("--fake-gpu: " + why)
        self.dev = gpulib.FakeDevice(ordinal)
        self.name = self.dev.name
        self.info = {"device": self.name, "fake_gpu": True}

    def alloc(self, nbytes):
        return Buf(self.dev.alloc(nbytes), nbytes)

    def sync(self):
        pass

    def fill(self, buf, block_bytes, ids):
        """Block i of buf <- pattern of block ids[i]."""
        for i, b in enumerate(ids):
            data = gpulib.pattern_bytes(b, block_bytes)
            ctypes.memmove(buf.ptr + i * block_bytes, data, block_bytes)

    def zero(self, buf, block_bytes, positions):
        for j in positions:
            ctypes.memset(buf.ptr + j * block_bytes, 0, block_bytes)

    def mismatches(self, buf, block_bytes, positions, ids):
        """How many of the blocks at `positions` differ from the pattern of `ids`."""
        bad = 0
        for j, b in zip(positions, ids):
            if ctypes.string_at(buf.ptr + j * block_bytes, block_bytes) != gpulib.pattern_bytes(
                    b, block_bytes):
                bad += 1
        return bad

    def ceiling_h2d(self, nbytes, reps):
        """memmove between two fake buffers: a CPU figure, not a GPU one."""
        a, b = self.alloc(nbytes), self.alloc(nbytes)
        times = []
        for _ in range(reps + 1):
            t0 = time.perf_counter_ns()
            ctypes.memmove(b.ptr, a.ptr, nbytes)
            times.append(time.perf_counter_ns() - t0)
        times = times[1:]
        return {"transport": "memcpy", "what": "memmove between two fake-driver buffers (host "
                "memory; not a GPU figure)", "samples_ns": times}


class TorchBackend:
    kind = "cuda"

    def __init__(self, device):
        import torch

        self.torch = torch
        if not torch.cuda.is_available():
            raise SystemExit("no CUDA device visible to torch (use --fake-gpu on a machine "
                             "without a GPU)")
        self.device = torch.device(device)
        if self.device.index is None:
            self.device = torch.device("cuda", torch.cuda.current_device())
        torch.cuda.set_device(self.device)
        self.name = torch.cuda.get_device_name(self.device)
        least, greatest = torch.cuda.Stream.priority_range()
        self.info = {"device": str(self.device), "name": self.name, "torch": torch.__version__,
                     "cuda": torch.version.cuda, "gpu_count": torch.cuda.device_count(),
                     "stream_priority_range": {"least": least, "greatest": greatest},
                     "fake_gpu": False}
        self._bases = {}

    def alloc(self, nbytes):
        t = self.torch.zeros(nbytes // 8, dtype=self.torch.int64, device=self.device)
        return Buf(t.data_ptr(), nbytes, t)

    def sync(self):
        self.torch.cuda.synchronize(self.device)

    def _base(self, block_bytes):
        if block_bytes not in self._bases:
            self._bases[block_bytes] = self.torch.arange(
                block_bytes // 8, dtype=self.torch.int64, device=self.device)
        return self._bases[block_bytes]

    def _rows(self, buf, block_bytes):
        return buf.obj.view(-1, block_bytes // 8)

    def _expected(self, block_bytes, ids):
        ids_t = self.torch.tensor(ids, dtype=self.torch.int64, device=self.device)
        return self._base(block_bytes).unsqueeze(0) + (ids_t << 32).unsqueeze(1)

    def fill(self, buf, block_bytes, ids):
        self._rows(buf, block_bytes)[: len(ids)].copy_(self._expected(block_bytes, ids))
        self.sync()

    def zero(self, buf, block_bytes, positions):
        pos = self.torch.tensor(positions, dtype=self.torch.int64, device=self.device)
        self._rows(buf, block_bytes).index_fill_(0, pos, 0)
        self.sync()

    def mismatches(self, buf, block_bytes, positions, ids):
        pos = self.torch.tensor(positions, dtype=self.torch.int64, device=self.device)
        rows = self._rows(buf, block_bytes).index_select(0, pos)
        return int((rows != self._expected(block_bytes, ids)).any(dim=1).sum().item())

    def ceiling_h2d(self, nbytes, reps):
        """torch copy of nbytes, pinned host -> HBM, one contiguous tensor, event-timed: the
        link's rate for the bytes a step moves (what the C tool measures with cuMemcpy)."""
        torch = self.torch
        host = torch.ones(nbytes, dtype=torch.uint8, pin_memory=True)
        dev = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        times = []
        for i in range(reps + 1):  # the first is a warm-up
            self.sync()
            start.record()
            dev.copy_(host, non_blocking=True)
            end.record()
            end.synchronize()
            if i:
                times.append(int(start.elapsed_time(end) * 1e6))
        del host, dev
        return {"transport": "cuMemcpy", "what": "torch copy_ pinned host -> %s, one contiguous "
                "tensor of %s, event-timed" % (self.device, gpulib.fmt_size(nbytes)), "samples_ns": times}
