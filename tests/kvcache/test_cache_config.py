"""CacheConfig: capacity in whole pages, the default snapshot policy, consistency checks."""

from __future__ import annotations

import pytest
from kvcache_fixtures import HYBRID

from prfaas.kvcache import (
    CacheConfig,
    CacheConfigError,
    GroupKind,
    HashScheme,
    SnapshotPolicy,
    model_fingerprint,
)
from prfaas.specs.catalog import get_model


def test_capacity_is_whole_pages_and_the_default_policy_is_request_end_plus_junction() -> None:
    config = CacheConfig.for_model(
        get_model("kimi-linear-48b"), block_tokens=512, capacity_bytes=64 * 2**30
    )
    assert config.num_pages == 64 * 2**30 // 4_128_768 == 16_644
    assert config.capacity_bytes == 16_644 * 4_128_768
    assert config.snapshot_policy == SnapshotPolicy.junction()
    identity = config.identity
    assert identity.scheme.model_fingerprint == model_fingerprint(get_model("kimi-linear-48b"))
    assert identity.group_kinds == (GroupKind.ATTENTION, GroupKind.STATE)


def test_exactly_one_size_must_be_given() -> None:
    with pytest.raises(CacheConfigError):
        CacheConfig.for_model(HYBRID, block_tokens=4)
    with pytest.raises(CacheConfigError):
        CacheConfig.for_model(HYBRID, block_tokens=4, num_pages=8, capacity_bytes=4096)
    with pytest.raises(CacheConfigError):
        CacheConfig.for_model(HYBRID, block_tokens=4, capacity_bytes=511)  # under one page


def test_hash_blocks_and_layout_blocks_must_agree() -> None:
    config = CacheConfig.for_model(HYBRID, block_tokens=4, num_pages=8)
    with pytest.raises(CacheConfigError, match="hash blocks of 8 tokens"):
        CacheConfig(config.layout, 8, HashScheme(8, "m"))
