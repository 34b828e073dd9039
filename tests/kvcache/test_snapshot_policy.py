"""Snapshot policies: exactly which boundaries a request leaves a state snapshot at."""

from __future__ import annotations

import pytest

from prfaas.kvcache import SnapshotPolicy


def test_every_block_snapshots_each_new_boundary() -> None:
    assert SnapshotPolicy.every_block().boundaries(
        hit_blocks=2, num_blocks=6, full_blocks=6, junction_blocks=4
    ) == (3, 4, 5, 6)


def test_every_k_blocks_snapshots_multiples_of_k_past_the_hit() -> None:
    assert SnapshotPolicy.every_k_blocks(4).boundaries(
        hit_blocks=4, num_blocks=13, full_blocks=13, junction_blocks=0
    ) == (8, 12)
    assert (
        SnapshotPolicy.every_k_blocks(4).boundaries(
            hit_blocks=5, num_blocks=7, full_blocks=7, junction_blocks=0
        )
        == ()
    )


def test_request_end_snapshots_the_last_full_boundary_only() -> None:
    assert SnapshotPolicy.request_end().boundaries(
        hit_blocks=0, num_blocks=9, full_blocks=9, junction_blocks=5
    ) == (9,)
    assert (
        SnapshotPolicy.request_end().boundaries(
            hit_blocks=9, num_blocks=9, full_blocks=9, junction_blocks=9
        )
        == ()
    )


def test_request_end_skips_a_partial_last_block_a_next_turn_would_diverge_in() -> None:
    policy = SnapshotPolicy.request_end()
    assert policy.boundaries(hit_blocks=0, num_blocks=9, full_blocks=8, junction_blocks=0) == (8,)
    assert policy.boundaries(hit_blocks=8, num_blocks=9, full_blocks=8, junction_blocks=0) == ()


def test_junction_adds_the_point_where_the_prompt_leaves_the_cached_prefix() -> None:
    assert SnapshotPolicy.junction().boundaries(
        hit_blocks=0, num_blocks=9, full_blocks=9, junction_blocks=5
    ) == (5, 9)
    assert SnapshotPolicy.junction().boundaries(
        hit_blocks=5, num_blocks=9, full_blocks=9, junction_blocks=5
    ) == (9,)


def test_policies_combine() -> None:
    policy = SnapshotPolicy(interval_blocks=4, at_request_end=True, at_junction=True)
    assert policy.boundaries(hit_blocks=0, num_blocks=10, full_blocks=10, junction_blocks=6) == (
        4,
        6,
        8,
        10,
    )
    assert policy.describe() == "every 4 block(s) + request end + junction"


def test_a_policy_that_never_snapshots_is_refused() -> None:
    with pytest.raises(ValueError):
        SnapshotPolicy(interval_blocks=0)
    with pytest.raises(ValueError):
        SnapshotPolicy(interval_blocks=-1)
