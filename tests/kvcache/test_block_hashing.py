"""Chained block identities: stable across processes, prefix-consistent, domain-separated."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from kvcache_fixtures import HYBRID, TRIPLE

from prfaas.kvcache import (
    CacheIdentity,
    GroupKind,
    HashScheme,
    IncompatibleCacheError,
    InvalidRequestError,
    RequestId,
    model_fingerprint,
)

SCHEME = HashScheme(block_tokens=4, model_fingerprint="m", seed=0)


def test_hashes_are_pinned_so_router_and_engines_of_any_version_agree() -> None:
    # A change here silently breaks every cross-process match (Dynamo PRs #1233, #2981): bump the
    # algorithm name in hashing.py if it is ever intended.
    assert SCHEME.root() == 0x46E2ADCBAA85E902
    assert SCHEME.hash_tokens([1, 2, 3, 4, 5, 6, 7, 8]) == (0x29059ACD5706F2D4, 0x50FF7E8DC000229C)
    assert SCHEME.hash_external([0, 1]) == (0xFF33D63A14E96FC1, 0xE1BADC6B4053B467)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), max_size=30))
def test_token_hashes_cover_full_blocks_and_extend_incrementally(tokens: list[int]) -> None:
    hashes = SCHEME.hash_tokens(tokens)
    assert len(hashes) == len(tokens) // 4
    parent = SCHEME.root()
    for i, expected in enumerate(hashes):
        parent = SCHEME.next_token_block(parent, tokens[4 * i : 4 * i + 4])
        assert parent == expected
    assert SCHEME.hash_tokens(tokens[:8]) == hashes[:2]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 50), min_size=1, max_size=8), st.integers(0, 50))
def test_a_block_hash_names_its_whole_prefix(ids: list[int], other: int) -> None:
    changed = [other, *ids[1:]]
    same_first = ids[0] == other
    assert (SCHEME.hash_external(ids)[-1] == SCHEME.hash_external(changed)[-1]) is same_first


def test_model_seed_salt_and_kind_of_identity_all_separate_blocks() -> None:
    base = SCHEME.hash_tokens([1, 2, 3, 4])
    assert HashScheme(4, "other-model").hash_tokens([1, 2, 3, 4]) != base
    assert HashScheme(4, "m", seed=1).hash_tokens([1, 2, 3, 4]) != base
    assert SCHEME.hash_tokens([1, 2, 3, 4], salt="tenant-a") != base
    assert HashScheme(8, "m").hash_external([7]) != SCHEME.hash_external([7])
    assert SCHEME.hash_external([1]) != SCHEME.hash_tokens([1, 0, 0, 0])


def test_model_fingerprints_follow_the_architecture() -> None:
    assert model_fingerprint(HYBRID).startswith("tiny-hybrid:")
    assert model_fingerprint(HYBRID) == model_fingerprint(HYBRID)
    assert model_fingerprint(HYBRID) != model_fingerprint(TRIPLE)


def test_mooncake_ids_become_one_block_each_including_a_partial_tail() -> None:
    scheme = HashScheme(512, "m")
    request = scheme.mooncake_request(RequestId("r"), [0, 1, 2], input_length=1100)
    assert request.block_hashes == scheme.hash_external([0, 1, 2])
    assert request.num_tokens == 1100


def test_mooncake_ids_need_512_token_blocks() -> None:
    with pytest.raises(IncompatibleCacheError, match="512"):
        SCHEME.mooncake_request(RequestId("r"), [0], 4)


def test_malformed_token_blocks_are_refused() -> None:
    with pytest.raises(InvalidRequestError):
        SCHEME.next_token_block(SCHEME.root(), [1, 2, 3])
    with pytest.raises(InvalidRequestError):
        SCHEME.hash_tokens([2**32, 0, 0, 0])
    with pytest.raises(ValueError):
        HashScheme(0, "m")


def test_identity_describes_everything_that_must_match() -> None:
    identity = CacheIdentity(SCHEME, "blake2b-64/prfaas-kv-v1", (GroupKind.ATTENTION,))
    assert identity.describe() == (
        "blake2b-64/prfaas-kv-v1 block_tokens=4 seed=0 model=m groups=[attention]"
    )
