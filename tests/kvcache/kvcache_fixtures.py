"""Helpers of the kvcache tests: tiny models whose pages are easy to count by hand.

Every tiny model uses 4-token blocks and a 512-byte page:
    attention  GQA, 1 layer, 2 KV heads of 16 dims, bf16: 128 B/token -> 512 B block = 1 page
    linear     GDN, 1 layer, 4 heads of 8 x 8, fp32 state: 1,024 B    = 2 pages
    swa        1 layer, 8-token window, 128 B/token: 1,024 B           = 2 pages
"""

from __future__ import annotations

import errno
from collections.abc import Sequence

from prfaas.kvcache import (
    CacheConfig,
    CacheRequest,
    HybridPrefixCache,
    InstanceId,
    RequestId,
    SnapshotPolicy,
)
from prfaas.kvcache.tiers import MemoryTierStorage, UnitKey
from prfaas.specs.model import (
    DenseMlp,
    GqaAttention,
    LinearAttention,
    LinearKind,
    MixerGroup,
    ModelSpec,
    SlidingWindowAttention,
)

BLOCK_TOKENS = 4


def _spec(name: str, mixers: tuple[MixerGroup, ...]) -> ModelSpec:
    layers = sum(g.num_layers for g in mixers)
    return ModelSpec(name, 16, 32, mixers, (DenseMlp(layers, 8),))


ATTENTION = GqaAttention(num_layers=1, num_q_heads=2, num_kv_heads=2, head_dim=16)
LINEAR = LinearAttention(
    num_layers=1,
    kind=LinearKind.GATED_DELTANET,
    num_heads=4,
    num_key_heads=4,
    key_head_dim=8,
    value_head_dim=8,
)
WINDOW = SlidingWindowAttention(
    num_layers=1, window_tokens=8, num_q_heads=2, num_kv_heads=2, head_dim=16
)

DENSE = _spec("tiny-dense", (ATTENTION,))
HYBRID = _spec("tiny-hybrid", (ATTENTION, LINEAR))
TRIPLE = _spec("tiny-triple", (ATTENTION, LINEAR, WINDOW))


def make_cache(
    spec: ModelSpec = HYBRID,
    num_pages: int = 64,
    policy: SnapshotPolicy | None = None,
    instance: str = "i0",
    block_tokens: int = BLOCK_TOKENS,
) -> HybridPrefixCache:
    """A bookkeeping-only pool; snapshots at every block unless a test says otherwise."""
    config = CacheConfig.for_model(
        spec,
        block_tokens=block_tokens,
        num_pages=num_pages,
        snapshot_policy=policy or SnapshotPolicy.every_block(),
    )
    return HybridPrefixCache(config, InstanceId(instance))


def ext_request(
    cache: HybridPrefixCache,
    request_id: str,
    ids: Sequence[int],
    num_tokens: int | None = None,
    max_hit_blocks: int | None = None,
) -> CacheRequest:
    """A request whose blocks are named by external ids (as in a Mooncake trace)."""
    scheme = cache.config.hash_scheme
    tokens = len(ids) * scheme.block_tokens if num_tokens is None else num_tokens
    return CacheRequest(RequestId(request_id), scheme.hash_external(ids), tokens, max_hit_blocks)


class FillableDisk(MemoryTierStorage):
    """A tier storage whose medium can fill up: while `full`, every write fails as a full
    disk's does (`OSError` ENOSPC)."""

    def __init__(self, full: bool = False) -> None:
        super().__init__()
        self.full = full

    def put(self, key: UnitKey, data: bytes) -> None:
        if self.full:
            raise OSError(errno.ENOSPC, "No space left on device")
        super().put(key, data)

    def tear(self, key: UnitKey) -> None:
        """Damage a unit already on the medium (a write torn by an earlier crash): it takes
        no new space, so it happens on a full disk too."""
        super().put(key, b"torn")
