"""Token ids on the router <-> instance wire: base64 of little-endian uint32s, any list of
uint32s (empty and 2**32 - 1 included) round-trips, and a JSON list of integers is refused."""

from __future__ import annotations

import base64
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from prfaas.serve import protocol as p

IDS = st.lists(st.integers(0, p.MAX_TOKEN_ID), max_size=2_000)
SAMPLING = p.Sampling(max_tokens=1, temperature=0, top_p=1, top_k=0, seed=0)


@given(IDS)
def test_any_uint32_ids_round_trip_through_the_packed_form(ids: list[int]) -> None:
    packed = p.pack_token_ids(ids)
    assert len(base64.b64decode(packed)) == 4 * len(ids)
    assert p.unpack_token_ids(packed) == ids


@given(IDS)
def test_a_body_carries_its_ids_as_one_packed_string(ids: list[int]) -> None:
    body = p.TokenizeResult(token_ids=ids)
    wire = body.model_dump_json()
    assert json.loads(wire) == {"token_ids": p.pack_token_ids(ids)}
    assert p.TokenizeResult.model_validate_json(wire).token_ids == ids


def test_the_edges_and_the_byte_order() -> None:
    assert p.pack_token_ids([]) == ""
    assert base64.b64decode(p.pack_token_ids([1, p.MAX_TOKEN_ID])) == b"\x01\0\0\0\xff\xff\xff\xff"


@pytest.mark.parametrize(
    "wire",
    [
        '{"token_ids": [1, 2, 3]}',  # the old JSON list: never on this wire
        '{"token_ids": "AQAAAAI="}',  # 5 bytes: not whole uint32s
        '{"token_ids": "not base64!"}',
    ],
)
def test_ids_in_any_other_form_are_refused(wire: str) -> None:
    with pytest.raises(ValidationError):
        p.TokenizeResult.model_validate_json(wire)


@pytest.mark.parametrize("bad", [-1, 2**32, 1.5])
def test_ids_outside_uint32_are_refused(bad: object) -> None:
    with pytest.raises(ValidationError):
        p.TokenizeResult(token_ids=[1, bad])  # type: ignore[list-item]


def test_a_prefill_needs_at_least_one_id() -> None:
    with pytest.raises(ValidationError):
        p.PrefillRequest(
            request_id="r",
            token_ids=[],
            sampling=SAMPLING,
            decode_transfer_host="h",
            decode_transfer_port=1,
        )
