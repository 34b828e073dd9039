"""Chained block identities: what makes two prefixes "the same" to every party.

A block's hash chains its parent's hash with the block's content, so one 64-bit value names the
whole prefix up to that block boundary:

    root   = H("R" | seed | block_tokens | model fingerprint | salt)
    h[0]   = H(root | "T" | token ids of block 0)        token-level identity (engines)
    h[i]   = H(h[i-1] | "T" | token ids of block i)
    h'[i]  = H(h'[i-1] | "X" | external id i)            external identity (Mooncake hash_ids)

H is BLAKE2b with an 8-byte digest and a fixed personalisation, so hashes are stable across
processes and machines (Python's `hash` of a str is salted per process). The model fingerprint,
seed and salt sit in the root, so two models, two seeds or two tenants never share a block.
Router and engines must agree on all of it (a block size or
hash mismatch fails silently otherwise: Dynamo PRs #1233, #2981): `CacheIdentity`
is what they compare when an instance registers with the global index.

Mooncake traces name 512-token blocks by remapped integers (`hash_ids`); identical ids at the
same position are the same prefix. `mooncake_request` chains them as external ids, so the
simulator replays traces through exactly the pool and index code the live system runs.
"""

from __future__ import annotations

import hashlib
import sys
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from prfaas.kvcache.errors import IncompatibleCacheError, InvalidRequestError
from prfaas.kvcache.ids import BlockHash, RequestId
from prfaas.kvcache.layout import GroupKind
from prfaas.kvcache.values import CacheRequest
from prfaas.specs.model import ModelSpec

#: Tokens per `hash_ids` block in Mooncake-format traces.
MOONCAKE_BLOCK_TOKENS = 512
HASH_ALGORITHM = "blake2b-64/prfaas-kv-v1"
_PERSON = b"prfaas-kv-v1"


def _digest(data: bytes) -> BlockHash:
    raw = hashlib.blake2b(data, digest_size=8, person=_PERSON).digest()
    return BlockHash(int.from_bytes(raw, "little"))


def _le_bytes(parent: BlockHash) -> bytes:
    return parent.to_bytes(8, "little")


def model_fingerprint(spec: ModelSpec) -> str:
    """Name plus a digest of the full architecture, so a changed config never matches."""
    digest = hashlib.blake2b(repr(spec).encode(), digest_size=8).hexdigest()
    return f"{spec.name}:{digest}"


@dataclass(frozen=True, slots=True)
class HashScheme:
    """Everything that decides a block's identity. Equal schemes produce equal hashes."""

    block_tokens: int
    model_fingerprint: str
    seed: int = 0

    def __post_init__(self) -> None:
        if self.block_tokens < 1:
            raise ValueError(f"block_tokens must be positive, got {self.block_tokens}")

    def root(self, salt: str = "") -> BlockHash:
        """Identity of the empty prefix: the parent of every first block."""
        head = b"R" + self.seed.to_bytes(8, "little", signed=True)
        head += self.block_tokens.to_bytes(4, "little")
        return _digest(head + self.model_fingerprint.encode() + b"\0" + salt.encode())

    def next_token_block(self, parent: BlockHash, token_ids: Sequence[int]) -> BlockHash:
        """Extend a chain by one full block of token ids (the incremental form)."""
        if len(token_ids) != self.block_tokens:
            raise InvalidRequestError(
                f"a block holds {self.block_tokens} tokens, got {len(token_ids)}"
            )
        try:
            packed = array("I", token_ids)
        except OverflowError as exc:
            raise InvalidRequestError(f"token ids must fit in 32 bits: {exc}") from None
        if sys.byteorder == "big":
            packed.byteswap()
        return _digest(_le_bytes(parent) + b"T" + packed.tobytes())

    def next_external_block(self, parent: BlockHash, external_id: int) -> BlockHash:
        """Extend a chain by a block named by an external id (e.g. a Mooncake hash_id)."""
        return _digest(_le_bytes(parent) + b"X" + external_id.to_bytes(8, "little", signed=True))

    def hash_tokens(self, token_ids: Sequence[int], salt: str = "") -> tuple[BlockHash, ...]:
        """Hashes of every *full* block of a prompt; a partial tail has no identity."""
        parent = self.root(salt)
        hashes: list[BlockHash] = []
        b = self.block_tokens
        for start in range(0, len(token_ids) - b + 1, b):
            parent = self.next_token_block(parent, token_ids[start : start + b])
            hashes.append(parent)
        return tuple(hashes)

    def hash_external(self, external_ids: Sequence[int], salt: str = "") -> tuple[BlockHash, ...]:
        parent = self.root(salt)
        hashes: list[BlockHash] = []
        for external_id in external_ids:
            parent = self.next_external_block(parent, external_id)
            hashes.append(parent)
        return tuple(hashes)

    def mooncake_request(
        self, request_id: RequestId, hash_ids: Sequence[int], input_length: int
    ) -> CacheRequest:
        """A trace request as the pool sees it: every `hash_ids` entry is one block, including a
        partial last block, which the trace names (and so may reuse) like any other."""
        if self.block_tokens != MOONCAKE_BLOCK_TOKENS:
            raise IncompatibleCacheError(
                f"Mooncake hash_ids name {MOONCAKE_BLOCK_TOKENS}-token blocks; this scheme "
                f"uses {self.block_tokens}"
            )
        return CacheRequest(request_id, self.hash_external(hash_ids), input_length)


@dataclass(frozen=True, slots=True)
class CacheIdentity:
    """What an instance and the global index must agree on before events can be trusted."""

    scheme: HashScheme
    algorithm: str
    group_kinds: tuple[GroupKind, ...]

    def describe(self) -> str:
        kinds = ",".join(k.value for k in self.group_kinds)
        s = self.scheme
        return (
            f"{self.algorithm} block_tokens={s.block_tokens} seed={s.seed} "
            f"model={s.model_fingerprint} groups=[{kinds}]"
        )
