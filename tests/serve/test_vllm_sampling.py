"""The sampling fields a vLLM child gets: what the client set, and nothing it left unset,
so the model's generation_config.json decides those as in `vllm serve` alone."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from prfaas.serve.backends.vllm.api import vllm_sampling
from prfaas.serve.edge.openai_api import CompletionRequest, parse_body
from prfaas.serve.router.completions import _sampling

_VALUES = {
    "temperature": st.floats(min_value=0.0, max_value=2.0),
    "top_p": st.floats(min_value=0.01, max_value=1.0),
    "top_k": st.integers(min_value=1, max_value=100),
}


@given(fields=st.fixed_dictionaries({}, optional=_VALUES))
def test_the_child_gets_exactly_the_sampling_fields_the_client_set(fields: dict[str, Any]) -> None:
    raw = json.dumps({"model": "m", "prompt": "x", **fields}).encode()
    req = parse_body(raw, CompletionRequest, 10_000)
    child = vllm_sampling(_sampling(req, 8, 0), 8, stop=True)
    assert {k for k in _VALUES if k in child} == set(fields)
    for name, value in fields.items():
        sent = req.sampling_temperature if name == "temperature" else value
        assert child[name] == sent
    assert child["max_tokens"] == 8 and child["seed"] == 0
