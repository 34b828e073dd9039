"""Engine configuration, and the one place the engine touches the environment.

transformers reads `HF_HUB_OFFLINE` and `USE_HUB_KERNELS` when it is first imported, so this
module sets them (unless the user already did) before any engine module imports it: nothing
downloads at run time, and no hub kernel replaces the reference PyTorch code paths. Every
engine module that imports torch or transformers imports this module first.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from prfaas.engine.disk_tier import DiskTierConfig
from prfaas.kvcache import SnapshotPolicy

#: Pool size when neither pages nor bytes are given.
DEFAULT_CAPACITY_BYTES = 64 * 1024 * 1024

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("USE_HUB_KERNELS", "NO")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """One engine instance: its pool and its batching limits.

    The pool is `num_pages` pages, or `capacity_bytes` (default 64 MiB) of whole pages.
    `block_tokens` is the pool's unit of prefix identity (B). `chunk_tokens` bounds one
    prefill forward pass; chunks also stop at every snapshot boundary, because a state can be
    copied only where the prefill stands. `max_batch_size` caps the decode batch; requests past
    it, or past the pool's free pages, wait (admission control). `disk_tier` keeps what the
    pool evicts in files on local disk and loads it back on a hit (`engine.disk_tier`).
    """

    block_tokens: int = 16
    num_pages: int | None = None
    capacity_bytes: int | None = None
    chunk_tokens: int = 256
    max_batch_size: int = 32
    snapshot_policy: SnapshotPolicy = field(default_factory=SnapshotPolicy.junction)
    instance_id: str = "engine-0"
    hash_seed: int = 0
    disk_tier: DiskTierConfig | None = None

    def __post_init__(self) -> None:
        if self.block_tokens < 1 or self.chunk_tokens < 1 or self.max_batch_size < 1:
            raise ValueError("block_tokens, chunk_tokens and max_batch_size must be positive")
        if self.num_pages is not None and self.capacity_bytes is not None:
            raise ValueError("give at most one of num_pages and capacity_bytes")

    @property
    def pool_capacity_bytes(self) -> int | None:
        """The pool's size in bytes unless it is given in pages (default 64 MiB)."""
        if self.num_pages is not None:
            return None
        return DEFAULT_CAPACITY_BYTES if self.capacity_bytes is None else self.capacity_bytes
