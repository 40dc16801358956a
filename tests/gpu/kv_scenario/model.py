"""A small decoder-only transformer with a paged KV cache, for the KV-cache scenario.

Weights are random from a seeded generator (no download): two processes that build the
same Config get bit-identical weights. The KV cache is paged the way vLLM/SGLang lay it
out: per layer one K and one V tensor of shape [num_blocks, block_size, heads, head_dim],
so one block (page) of one layer is a contiguous range of block_bytes bytes.

The tensor work goes through T, a tensors.Torch or tensors.Numpy (see tensors.py).
"""

import dataclasses
import math


@dataclasses.dataclass(frozen=True)
class Config:
    name: str
    layers: int
    heads: int
    head_dim: int
    vocab: int
    block_size: int  # tokens per KV page
    prompt_tokens: int  # a multiple of block_size: only whole pages are stored
    max_pos: int = 16384
    seed: int = 1234

    @property
    def d_model(self):
        return self.heads * self.head_dim


# KV bytes per round (fp16 on a GPU, fp32 on the CPU) = layers * 2 * prompt * heads * head_dim * elt.
PRESETS = {
    "tiny": Config("tiny", layers=2, heads=2, head_dim=16, vocab=128, block_size=16, prompt_tokens=64),
    "small": Config("small", layers=4, heads=4, head_dim=64, vocab=1024, block_size=16, prompt_tokens=256),
    "medium": Config(
        "medium", layers=8, heads=8, head_dim=128, vocab=4096, block_size=16, prompt_tokens=2048
    ),
    "large": Config("large", layers=16, heads=8, head_dim=128, vocab=4096, block_size=32, prompt_tokens=8192),
}


class PagedKVCache:
    """Per layer K and V tensors [num_blocks, block_size, heads, head_dim]; a block table maps
    a sequence's logical block i to a physical slot."""

    def __init__(self, T, cfg, num_blocks, device, dtype, alloc=None):
        shape = (num_blocks, cfg.block_size, cfg.heads, cfg.head_dim)
        alloc = alloc or (lambda shape, dtype: T.zeros(shape, dtype, device))
        self.T = T
        self.cfg = cfg
        self.num_blocks = num_blocks
        self.k = [alloc(shape, dtype) for _ in range(cfg.layers)]
        self.v = [alloc(shape, dtype) for _ in range(cfg.layers)]
        self.block_bytes = T.nbytes(self.k[0]) // num_blocks

    def tensors(self):
        return self.k + self.v

    def block_ptrs(self, layer, slot):
        """(K address, V address) of one physical block of one layer."""
        return (
            self.T.data_ptr(self.k[layer]) + slot * self.block_bytes,
            self.T.data_ptr(self.v[layer]) + slot * self.block_bytes,
        )

    def write(self, layer, block_table, pos, k, v):
        """Store k, v ([T, heads, head_dim]) for positions pos .. pos+T-1."""
        bs = self.cfg.block_size
        for t in range(k.shape[0]):
            slot, off = block_table[(pos + t) // bs], (pos + t) % bs
            self.k[layer][slot, off] = k[t]
            self.v[layer][slot, off] = v[t]

    def write_pages(self, layer, block_table, k, v):
        """Store a whole prefill (T a multiple of block_size) page by page."""
        bs = self.cfg.block_size
        idx = self.T.index(block_table[: k.shape[0] // bs], self.device(layer))
        self.k[layer][idx] = k.reshape(-1, bs, *k.shape[1:])
        self.v[layer][idx] = v.reshape(-1, bs, *v.shape[1:])

    def read(self, layer, block_table, length):
        """Gather the first `length` positions of a sequence: ([length, h, d], [length, h, d])."""
        nb = (length + self.cfg.block_size - 1) // self.cfg.block_size
        idx = self.T.index(block_table[:nb], self.device(layer))
        k = self.k[layer][idx].reshape(-1, *self.k[layer].shape[2:])[:length]
        v = self.v[layer][idx].reshape(-1, *self.v[layer].shape[2:])[:length]
        return k, v

    def device(self, layer):
        return getattr(self.k[layer], "device", "cpu")  # numpy arrays: the CPU


class Model:
    """Pre-LayerNorm GPT: learned positions, multi-head attention, GELU MLP."""

    def __init__(self, T, cfg, device, dtype):
        self.T, self.cfg, self.device, self.dtype = T, cfg, device, dtype
        g = T.generator(cfg.seed)  # on the CPU: identical on every device
        d = cfg.d_model

        def w(*shape, std=0.02):
            return T.randn(g, shape, std, device, dtype)

        self.tok = w(cfg.vocab, d)
        self.pos = w(cfg.max_pos, d)
        self.layers = []
        for _ in range(cfg.layers):
            self.layers.append(
                {
                    "qkv": w(d, 3 * d),
                    "proj": w(d, d, std=0.02 / math.sqrt(2 * cfg.layers)),
                    "fc": w(d, 4 * d),
                    "out": w(4 * d, d, std=0.02 / math.sqrt(2 * cfg.layers)),
                }
            )
        self.head = w(d, cfg.vocab)

    def _norm(self, x):
        T = self.T
        return T.cast(T.layer_norm(T.f32(x)), self.dtype)

    def _attend(self, q, k, v, causal):
        """q [Tq, h, d], k/v [Tk, h, d] -> [Tq, h*d]; softmax in fp32."""
        T = self.T
        scores = T.einsum("qhd,khd->hqk", T.f32(q), T.f32(k)) / math.sqrt(self.cfg.head_dim)
        if causal:
            scores = T.causal_fill(scores, q.shape[0], k.shape[0])
        p = T.cast(T.softmax(scores), self.dtype)
        return T.einsum("hqk,khd->qhd", p, v).reshape(q.shape[0], -1)

    def _layer(self, i, x, attend_kv):
        lw, h, hd = self.layers[i], self.cfg.heads, self.cfg.head_dim
        qkv = (self._norm(x) @ lw["qkv"]).reshape(x.shape[0], 3, h, hd)
        q, k, v = qkv[:, 0], qkv[:, 1], qkv[:, 2]
        x = x + attend_kv(i, q, k, v) @ lw["proj"]
        return x + self.T.gelu(self._norm(x) @ lw["fc"]) @ lw["out"]

    def _logits(self, x):
        return self.T.f32(self._norm(x) @ self.head)

    def _embed(self, tokens, pos0):
        t = self.T.index(tokens, self.device)
        return self.tok[t] + self.pos[pos0 : pos0 + len(tokens)]

    def forward_full(self, tokens):
        """Reference: full recompute with a causal mask, no cache. Logits [T, vocab] (fp32)."""
        with self.T.no_grad():
            x = self._embed(tokens, 0)
            for i in range(self.cfg.layers):
                x = self._layer(i, x, lambda _i, q, k, v: self._attend(q, k, v, causal=True))
            return self._logits(x)

    def prefill(self, tokens, cache, block_table):
        """Full forward over the prompt, writing every layer's K/V into the pages of block_table."""
        assert len(tokens) % self.cfg.block_size == 0

        def attend(i, q, k, v):
            cache.write_pages(i, block_table, k, v)
            return self._attend(q, k, v, causal=True)

        with self.T.no_grad():
            x = self._embed(tokens, 0)
            for i in range(self.cfg.layers):
                x = self._layer(i, x, attend)
            return self._logits(x)

    def decode_step(self, token, pos, cache, block_table):
        """One token at position pos: its K/V appended to the pages, attention over the paged
        cache positions 0..pos. Logits [vocab] (fp32)."""

        def attend(i, q, k, v):
            cache.write(i, block_table, pos, k, v)
            kc, vc = cache.read(i, block_table, pos + 1)
            return self._attend(q, kc, vc, causal=False)

        with self.T.no_grad():
            x = self._embed([token], pos)
            for i in range(self.cfg.layers):
                x = self._layer(i, x, attend)
            return self._logits(x)[0]
