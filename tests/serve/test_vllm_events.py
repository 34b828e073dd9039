"""vLLM KV events -> prfaas cache events: the global index ends up with what vLLM holds.

Batches are built as vLLM 0.32 publishes them (`[ts, events, rank]`, each event a map tagged
by `type`, block hashes bytes or ints). No vLLM, no sockets.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from prfaas.kvcache import BlockRemoved, BlockStored, GlobalKVCacheIndex, HashScheme
from prfaas.kvcache.hashing import HASH_ALGORITHM, CacheIdentity
from prfaas.kvcache.ids import ClusterId, InstanceId
from prfaas.kvcache.layout import GroupKind
from prfaas.serve.backends.vllm.events import (
    ATTENTION_GROUP,
    MAX_WAITING,
    STATE_GROUP,
    EventTranslator,
)

VLLM_BLOCK = 128
SCHEME = HashScheme(block_tokens=64, model_fingerprint="tiny-llama:test", seed=0)
ME = InstanceId("pdd-0")


def stored(
    hashes: list[Any], parent: Any, tokens: list[int], group: int = 0, kind: str = "full_attention"
) -> dict[str, Any]:
    return {
        "type": "BlockStored",
        "block_hashes": hashes,
        "parent_block_hash": parent,
        "token_ids": tokens,
        "block_size": VLLM_BLOCK,
        "lora_id": None,
        "medium": "CPU",
        "lora_name": None,
        "group_idx": group,
        "kv_cache_spec_kind": kind,
    }


def removed(hashes: list[Any], group: int = 0) -> dict[str, Any]:
    return {"type": "BlockRemoved", "block_hashes": hashes, "medium": "CPU", "group_idx": group}


def batch(*events: dict[str, Any]) -> list[Any]:
    return [1.0, list(events), None]


def test_stored_blocks_become_prfaas_blocks_the_router_matches() -> None:
    prompt = list(range(3, 3 + 300))
    t = EventTranslator(ME, SCHEME, is_hybrid=False)
    out = t.translate(
        batch(stored([b"h1"], None, prompt[:128]), stored([b"h2"], b"h1", prompt[128:256]))
    )
    expected = SCHEME.hash_tokens(prompt[:256])
    assert [e.block_hash for e in out] == list(expected)
    assert all(isinstance(e, BlockStored) and e.group_index == ATTENTION_GROUP for e in out)
    index = GlobalKVCacheIndex(CacheIdentity(SCHEME, HASH_ALGORITHM, (GroupKind.ATTENTION,)))
    index.register_instance(ME, ClusterId("pd"), index.identity)
    index.apply(out)
    hit = index.match(SCHEME.hash_tokens(prompt[:-1])).per_instance[ME]
    assert hit * SCHEME.block_tokens == 256
    assert t.held_prefix_tokens(prompt) == 256


def test_removal_and_clear_undo_exactly_what_was_stored() -> None:
    prompt = list(range(3, 3 + 256))
    t = EventTranslator(ME, SCHEME, is_hybrid=False)
    t.translate(batch(stored([7, 8], None, prompt)))
    out = t.translate(batch(removed([8])))
    assert [type(e) for e in out] == [BlockRemoved, BlockRemoved]
    assert {e.block_hash for e in out} == set(SCHEME.hash_tokens(prompt)[2:])
    assert t.held_prefix_tokens(prompt) == 128
    out = t.translate(batch({"type": "AllBlocksCleared"}))
    assert {e.block_hash for e in out} == set(SCHEME.hash_tokens(prompt)[:2])
    assert t.held_prefix_tokens(prompt) == 0


def test_a_block_stored_before_its_parent_was_seen_is_not_guessed() -> None:
    t = EventTranslator(ME, SCHEME, is_hybrid=False)
    assert t.translate(batch(stored([b"x"], b"unknown", list(range(128))))) == []
    assert t.num_waiting == 1
    for k in range(MAX_WAITING):  # a parent that never comes: dropped, oldest first
        t.translate(batch(stored([k], b"never", list(range(128)))))
    assert (t.num_waiting, t.num_dropped) == (MAX_WAITING, 1)


def test_an_align_mode_state_event_names_only_its_last_block() -> None:
    # vLLM 0.32, prefix caching on a hybrid: the mamba group keeps the state at the replay
    # boundary only, and its event spans every token from the root with that block's hash
    prompt = list(range(3, 3 + 3 * VLLM_BLOCK))
    t = EventTranslator(ME, SCHEME, is_hybrid=True)
    out = t.translate(
        batch(
            stored([13], None, prompt, group=0, kind="mamba"),
            stored([11, 12, 13], None, prompt, group=1),
        )
    )
    states = [e.block_hash for e in out if e.group_index == STATE_GROUP]
    assert states == [SCHEME.hash_tokens(prompt)[-1]]  # at 384 tokens, not at 128
    assert t.held_prefix_tokens([*prompt, 7]) == 3 * VLLM_BLOCK


def test_a_state_block_stored_before_its_parent_attention_block_is_chained() -> None:
    # vLLM stores a hybrid's mamba group first: its state block names a parent whose
    # attention block comes later in the same batch (or the next one)
    prompt = list(range(3, 3 + 256))
    t = EventTranslator(ME, SCHEME, is_hybrid=True)
    state = stored([2], 1, prompt[128:], group=0, kind="mamba")
    out = t.translate(batch(state))
    assert out == [] and t.num_waiting == 1
    out = t.translate(batch(stored([1, 2], None, prompt, group=1)))
    assert (STATE_GROUP, SCHEME.hash_tokens(prompt)[-1]) in [
        (e.group_index, e.block_hash) for e in out
    ]
    assert t.held_prefix_tokens(prompt) == 256
    assert t.num_waiting == 0


def test_hybrid_mamba_blocks_are_state_snapshots_at_the_block_end() -> None:
    prompt = list(range(3, 3 + 256))
    t = EventTranslator(ME, SCHEME, is_hybrid=True)
    t.translate(batch(stored([1, 2], None, prompt, group=0)))
    assert t.held_prefix_tokens(prompt) == 0  # attention without a state: no restorable hit
    out = t.translate(batch(stored([1], None, prompt[:128], group=1, kind="mamba")))
    assert [(e.group_index, e.block_hash) for e in out] == [
        (STATE_GROUP, SCHEME.hash_tokens(prompt)[1])
    ]
    assert t.held_prefix_tokens(prompt) == 128
    out = t.translate(batch(removed([1], group=1)))  # the kind is remembered per group
    assert [e.group_index for e in out] == [STATE_GROUP]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.integers(0, 5)), max_size=40))
def test_index_never_sees_an_inconsistent_stream(ops: list[tuple[bool, int]]) -> None:
    """Any interleaving of vLLM stores/removes (duplicates included) folds into the index
    without errors, and what the index holds is what vLLM still holds."""
    chains = [list(range(i * 1000, i * 1000 + 128)) for i in range(6)]
    t = EventTranslator(ME, SCHEME, is_hybrid=False)
    index = GlobalKVCacheIndex(CacheIdentity(SCHEME, HASH_ALGORITHM, (GroupKind.ATTENTION,)))
    index.register_instance(ME, ClusterId("pd"), index.identity)
    held: dict[int, int] = {}
    for is_store, i in ops:
        if is_store:
            index.apply(t.translate(batch(stored([i], None, chains[i]))))
            held[i] = held.get(i, 0) + 1
        else:
            index.apply(t.translate(batch(removed([i]))))
            if held.get(i):
                held[i] -= 1
    for i, chain in enumerate(chains):
        assert (t.held_prefix_tokens(chain) == 128) == bool(held.get(i))
    assert index.num_entries(ME) == 2 * sum(1 for n in held.values() if n)
