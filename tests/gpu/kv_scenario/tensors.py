"""The tensor library of the KV-cache scenario's workers: torch, or numpy where torch is absent.

model.py and worker.py do their tensor work through one of these two objects, so that the
scenario also runs where there is no torch (CI: torch with its CUDA libraries is several GB)
with every check intact: pages byte for byte, decode from the fetched cache == full recompute,
the wrong-page control, the mapping counters. numpy runs on the CPU only (--device cpu, and the
fake driver's device memory, which is host memory). Its model has the same shape and flow but
its own weights (numpy's generator) and the tanh form of GELU, so its logits are not torch's;
each run compares a library with itself. run.py picks one (--tensors) and passes it to every
worker, so the storer and the fetcher of a page always agree.
"""

import contextlib
import ctypes
import math


def load(name):
    """The Torch or Numpy object; ImportError when its library is not importable."""
    return {"torch": Torch, "numpy": Numpy}[name]()


class Torch:
    name = "torch"

    def __init__(self):
        import torch
        import torch.nn.functional as F

        self.torch, self.F = torch, F
        self.version = torch.__version__

    def float_dtype(self, device):
        return self.torch.float32 if device == "cpu" else self.torch.float16

    def no_grad(self):
        return self.torch.no_grad()

    def sync(self, device):
        if device != "cpu":
            self.torch.cuda.synchronize(device)

    def zeros(self, shape, dtype, device):
        return self.torch.zeros(shape, device=device, dtype=dtype)

    def from_address(self, ptr, shape, dtype):
        """A tensor over memory this process owns at ptr (fake device memory)."""
        n = math.prod(shape) * self.torch.empty((), dtype=dtype).element_size()
        buf = (ctypes.c_char * n).from_address(ptr)
        return self.torch.frombuffer(buf, dtype=dtype).view(shape)

    def generator(self, seed):
        return self.torch.Generator().manual_seed(seed)  # on the CPU: identical on every device

    def randn(self, g, shape, std, device, dtype):
        return (self.torch.randn(*shape, generator=g) * std).to(device=device, dtype=dtype)

    def randperm(self, n, seed):
        return self.torch.randperm(n, generator=self.generator(seed)).tolist()

    def randint(self, high, n, seed):
        return self.torch.randint(high, (n,), generator=self.generator(seed)).tolist()

    def index(self, values, device):
        return self.torch.tensor(values, device=device)

    def f32(self, x):
        return x.float()

    def cast(self, x, dtype):
        return x.to(dtype)

    def layer_norm(self, x):
        return self.F.layer_norm(x, (x.shape[-1],))

    def gelu(self, x):
        return self.F.gelu(x)

    def softmax(self, x):
        return x.softmax(-1)

    def einsum(self, spec, *xs):
        return self.torch.einsum(spec, *xs)

    def causal_fill(self, scores, tq, tk):
        """-inf where key position > query position (queries are the last tq of tk)."""
        mask = self.torch.ones(tq, tk, dtype=self.torch.bool, device=scores.device).tril(tk - tq)
        return scores.masked_fill(~mask, float("-inf"))

    def stack(self, xs):
        return self.torch.stack(xs)

    def allclose(self, a, b, atol):
        return bool(self.torch.allclose(a, b, atol=atol, rtol=0))

    def clone(self, x):
        return x.clone()

    def copy_(self, dst, src):
        dst.copy_(src)

    def zero_(self, x):
        x.zero_()

    def data_ptr(self, x):
        return x.data_ptr()

    def nbytes(self, x):
        return x.numel() * x.element_size()

    def host(self, x):
        """A contiguous CPU copy."""
        return x.cpu().contiguous()

    def host_bytes(self, x):
        """A contiguous CPU tensor's bytes as a buffer (hashlib reads it without a copy)."""
        return (ctypes.c_char * self.nbytes(x)).from_address(x.data_ptr())

    def host_buffer(self, n, fill):
        """n bytes of host memory set to fill (the CPU copy ceiling)."""
        return self.torch.full((n,), fill, dtype=self.torch.uint8)


class Numpy:
    name = "numpy"

    def __init__(self):
        import numpy

        self.np = numpy
        self.version = numpy.__version__

    def _cpu(self, device):
        if device != "cpu":
            raise RuntimeError(f"numpy runs on the CPU only, not {device}: CUDA devices need torch")

    def float_dtype(self, device):
        self._cpu(device)
        return self.np.float32

    def no_grad(self):
        return contextlib.nullcontext()

    def sync(self, device):
        pass

    def zeros(self, shape, dtype, device):
        self._cpu(device)
        return self.np.zeros(shape, dtype=dtype)

    def from_address(self, ptr, shape, dtype):
        n = math.prod(shape) * self.np.dtype(dtype).itemsize
        buf = (ctypes.c_char * n).from_address(ptr)
        return self.np.frombuffer(buf, dtype=dtype).reshape(shape)

    def generator(self, seed):
        return self.np.random.default_rng(seed)

    def randn(self, g, shape, std, device, dtype):
        self._cpu(device)
        return (g.standard_normal(shape, dtype=self.np.float32) * std).astype(dtype)

    def randperm(self, n, seed):
        return self.generator(seed).permutation(n).tolist()

    def randint(self, high, n, seed):
        return self.generator(seed).integers(0, high, n).tolist()

    def index(self, values, device):
        return self.np.asarray(values, dtype=self.np.int64)

    def f32(self, x):
        return x.astype(self.np.float32, copy=False)

    def cast(self, x, dtype):
        return x.astype(dtype, copy=False)

    def layer_norm(self, x):
        mu = x.mean(-1, keepdims=True)
        var = x.var(-1, keepdims=True)
        return (x - mu) / self.np.sqrt(var + 1e-5)

    def gelu(self, x):
        # tanh form: numpy has no erf (torch's default is the erf form)
        return 0.5 * x * (1 + self.np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))

    def softmax(self, x):
        e = self.np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    def einsum(self, spec, *xs):
        return self.np.einsum(spec, *xs)

    def causal_fill(self, scores, tq, tk):
        mask = self.np.tril(self.np.ones((tq, tk), dtype=bool), tk - tq)
        return self.np.where(mask, scores, self.np.float32(-self.np.inf))

    def stack(self, xs):
        return self.np.stack(xs)

    def allclose(self, a, b, atol):
        return bool(self.np.allclose(a, b, atol=atol, rtol=0))

    def clone(self, x):
        return x.copy()

    def copy_(self, dst, src):
        self.np.copyto(dst, src)

    def zero_(self, x):
        x.fill(0)

    def data_ptr(self, x):
        return x.ctypes.data

    def nbytes(self, x):
        return x.nbytes

    def host(self, x):
        return self.np.ascontiguousarray(x)

    def host_bytes(self, x):
        return memoryview(self.np.ascontiguousarray(x)).cast("B")

    def host_buffer(self, n, fill):
        return self.np.full(n, fill, dtype=self.np.uint8)
