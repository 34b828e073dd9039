"""Snapshot policy: at which block boundaries a request leaves a copy of its state groups.

A state group can only resume from a snapshot taken at exactly the hit boundary, so the policy
decides which prefixes of a request are reusable at all on a hybrid model. Each snapshot costs a
whole state (e.g. 11 pages for Kimi-Linear at B=512, against 1 page per attention block), so
snapshotting every block multiplies the pool's footprint, while snapshotting rarely loses hits.
The knobs combine freely:

- `interval_blocks=k`: at every boundary that is a multiple of k blocks (k=1: every block).
- `at_request_end`: at the prompt's last *full* block boundary. The next turn of a
  conversation extends this prompt, but its content diverges inside a partial last block
  (the old prompt's tail is followed by the reply), so the last full boundary is the deepest
  point it can resume from. Snapshotting after a partial block instead would reuse almost
  nothing: 0.8% of the conversation trace's blocks, against 34.3% at the last full boundary
  (Kimi-Linear-48B, unbounded pool).
- `at_junction`: at the point where the prompt leaves the longest attention prefix already
  cached (SGLang's branching point). A second request sharing a system prompt with an earlier
  one thereby leaves a snapshot where the shared part ends, and the third one hits it.

Boundaries are counted in blocks; boundary b is the state after b * block_tokens tokens.
Measured effect on the Mooncake conversation trace: docs/kvcache.md and docs/benchmarks.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    interval_blocks: int = 1
    at_request_end: bool = False
    at_junction: bool = False

    def __post_init__(self) -> None:
        if self.interval_blocks < 0:
            raise ValueError(f"interval_blocks must be >= 0, got {self.interval_blocks}")
        if self.interval_blocks == 0 and not (self.at_request_end or self.at_junction):
            raise ValueError("a snapshot policy that never snapshots makes no state reusable")

    @classmethod
    def every_block(cls) -> SnapshotPolicy:
        return cls(interval_blocks=1)

    @classmethod
    def every_k_blocks(cls, k: int) -> SnapshotPolicy:
        return cls(interval_blocks=k)

    @classmethod
    def request_end(cls) -> SnapshotPolicy:
        return cls(interval_blocks=0, at_request_end=True)

    @classmethod
    def junction(cls) -> SnapshotPolicy:
        """Request end plus shared-prefix junctions."""
        return cls(interval_blocks=0, at_request_end=True, at_junction=True)

    def describe(self) -> str:
        parts = []
        if self.interval_blocks:
            parts.append(f"every {self.interval_blocks} block(s)")
        if self.at_request_end:
            parts.append("request end")
        if self.at_junction:
            parts.append("junction")
        return " + ".join(parts)

    def boundaries(
        self, *, hit_blocks: int, num_blocks: int, full_blocks: int, junction_blocks: int
    ) -> tuple[int, ...]:
        """Boundaries in (hit_blocks, num_blocks] at which a new snapshot is taken.

        `num_blocks` counts the prompt's hashed blocks, `full_blocks` (<= num_blocks) those that
        are complete; `junction_blocks` is the longest attention prefix already cached (the
        match's `attention_blocks`). The hit boundary itself has a snapshot already.
        """
        chosen: set[int] = set()
        k = self.interval_blocks
        if k:
            first = (hit_blocks // k + 1) * k
            chosen.update(range(first, num_blocks + 1, k))
        if self.at_request_end and hit_blocks < full_blocks:
            chosen.add(full_blocks)
        if self.at_junction and hit_blocks < junction_blocks <= num_blocks:
            chosen.add(junction_blocks)
        return tuple(sorted(chosen))
