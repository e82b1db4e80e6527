"""A prefix cache: prompts that begin with tokens an earlier prompt had skip their prefill (vLLM's automatic prefix
caching, llama.cpp's slot reuse). Requests that share a system prompt, a conversation's earlier turns, or a whole
prompt sent again reuse the KV the first one computed.

The key is vLLM's: each full block of ``BLOCK`` tokens is hashed together with the hash of the block before it,
so a block's hash names its whole prefix. The hash is SHA-256 over the tokens' bytes (vLLM moved there after
CVE-2025-25183: with Python's unkeyed tuple hash a client found two 16-token prefixes that collide in 3 CPU-minutes
and was served another prompt's KV), and a hit is also checked token for token against the entry's own tokens.
When a prompt's prefill is done, its KV (whole blocks only) and, where
its drafter reads them, the target's taps at those positions are kept as one entry; every block hash of it points
there. A new prompt walks its block hashes and takes the deepest one held, always leaving at least one token to
compute (its logits give the first token). Entries leave least recently used first, past a memory budget. A
cached entry is never written: the cache layers that take it copy it into buffers of their own first.

Exact: a request served from the cache gives what it gives cold (tests/test_prefix_cache.py, fp32).
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field

import torch
from transformers import DynamicCache

from engine.decode.batch import roomy_cache, roomy_layers

BLOCK = 16  # tokens a block holds (vLLM's default block size)


def block_hashes(ids: list[int], block: int = BLOCK, salt: str = "") -> list[bytes]:
    """The chained SHA-256 of every full block: the i-th covers tokens 0 .. (i + 1) * block. A request's
    ``cache_salt`` (vLLM's field) seeds the chain, so prompts with another salt, or none, never share a block: a load
    sweep's cold protocol gives every pass its own salt, and a tenant its own cache."""
    out: list[bytes] = []
    h = hashlib.sha256(b"cache_salt:" + salt.encode("utf-8")).digest() if salt else b""
    for start in range(0, len(ids) - len(ids) % block, block):
        chunk = b"".join(int(t).to_bytes(8, "little", signed=True) for t in ids[start : start + block])
        h = hashlib.sha256(h + chunk).digest()
        out.append(h)
    return out


@dataclass
class Entry:
    keys: list[torch.Tensor]  # per cache layer, [1, heads, length, head_dim]
    values: list[torch.Tensor]
    features: torch.Tensor | None  # the target's taps at these positions [length, taps x hidden], where read
    length: int
    hashes: list[bytes]
    nbytes: int
    tokens: tuple[int, ...] = ()  # the prefix itself: a hit must match it token for token


@dataclass
class PrefixStats:
    lookups: int = 0
    hits: int = 0
    tokens_saved: int = 0  # prompt tokens served from the cache instead of prefilled
    evicted: int = 0


@dataclass
class PrefixCache:
    budget_bytes: int
    entries: OrderedDict[bytes, Entry] = field(default_factory=OrderedDict)  # by last block hash, oldest use first
    index: dict[bytes, bytes] = field(default_factory=dict)  # block hash -> the entry that holds that prefix
    used: int = 0
    stats: PrefixStats = field(default_factory=PrefixStats)

    @property
    def usage(self) -> float:
        """The share of the budget in use (vLLM's kv_cache_usage_perc, for this cache)."""
        return self.used / self.budget_bytes if self.budget_bytes else 0.0

    def health(self) -> dict:
        st = self.stats
        return {
            "lookups": st.lookups,
            "hits": st.hits,
            "tokens_saved": st.tokens_saved,
            "entries": len(self.entries),
            "usage": round(self.usage, 4),
        }

    def lookup(self, ids: list[int], taps: bool, salt: str = "") -> tuple[Entry, int] | None:
        """The deepest cached prefix of ``ids`` shorter than ``ids`` (one with taps where ``taps``), and its length;
        only entries stored under the same ``salt``."""
        self.stats.lookups += 1
        best = None
        for i, h in enumerate(block_hashes(ids, salt=salt)):
            length = (i + 1) * BLOCK
            entry = self.entries.get(self.index.get(h, b""))
            if length >= len(ids) or entry is None or (taps and entry.features is None):
                break
            if entry.tokens[:length] != tuple(ids[:length]):  # a hash collision: never serve another prompt's KV
                break
            best = (entry, length)
        if best is not None:
            self.entries.move_to_end(best[0].hashes[-1])
            self.stats.hits += 1
            self.stats.tokens_saved += best[1]
        return best

    def store(
        self, ids: list[int], keys: list[torch.Tensor], values: list[torch.Tensor], features, salt: str = ""
    ) -> None:
        """Keep a finished prefill's whole blocks: ``keys``/``values`` per layer cover at least those positions;
        found again only under the same ``salt``."""
        hashes = block_hashes(ids, salt=salt)
        if not hashes:
            return
        last = hashes[-1]
        held = self.entries.get(last)
        if held is not None and (held.features is not None or features is None):
            self.entries.move_to_end(last)
            return
        if held is not None:
            self._evict(last)
        length = len(hashes) * BLOCK
        ks = [k[:, :, :length].clone() for k in keys]
        vs = [v[:, :, :length].clone() for v in values]
        feats = features[:length].clone() if features is not None else None
        nbytes = sum(t.numel() * t.element_size() for t in ks + vs) + (
            feats.numel() * feats.element_size() if feats is not None else 0
        )
        if nbytes > self.budget_bytes:
            return
        self.entries[last] = Entry(ks, vs, feats, length, hashes, nbytes, tuple(ids[:length]))
        for h in hashes:
            self.index[h] = last
        self.used += nbytes
        while self.used > self.budget_bytes and self.entries:
            self._evict(next(iter(self.entries)))

    def _evict(self, key: bytes) -> None:
        entry = self.entries.pop(key)
        self.used -= entry.nbytes
        self.stats.evicted += 1
        for h in entry.hashes:
            if self.index.get(h) == key:
                del self.index[h]


def restore(entry: Entry, length: int, config) -> DynamicCache:
    """A one-row cache holding the entry's first ``length`` positions; the entry stays as it is (the layers copy
    it into buffers of their own at their first write)."""
    cache = roomy_cache(config)
    for layer, k, v in zip(roomy_layers(cache) or [], entry.keys, entry.values):
        layer.lazy_initialization(k, v)
        layer.keys, layer.values = k[:, :, :length], v[:, :, :length]
    return cache


def kv_of(cache: DynamicCache) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    layers = [layer for layer in cache.layers if layer.keys is not None and layer.values is not None]  # type: ignore[union-attr]
    return [layer.keys for layer in layers], [layer.values for layer in layers]  # type: ignore[union-attr,misc]
