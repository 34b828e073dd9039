"""One prompt to one completion, colocated or disaggregated: what `prfaas generate` runs.

Disaggregated: engine A prefills and exports layer by layer; the export is serialised to bytes
(what would cross the link); engine B imports the bytes into its own pool and decodes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from prfaas.engine.config import EngineConfig
from prfaas.engine.engine import Engine
from prfaas.engine.errors import BadRequestError
from prfaas.engine.export import ExportedPrefill
from prfaas.engine.models import LoadedModel
from prfaas.engine.sampling import SamplingParams

CLI_CAPACITY_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class GenerateResult:
    model: str
    text: str
    token_ids: tuple[int, ...]
    finish_reason: str
    num_prompt_tokens: int
    is_disaggregated: bool
    exported_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "text": self.text,
            "token_ids": list(self.token_ids),
            "finish_reason": self.finish_reason,
            "num_prompt_tokens": self.num_prompt_tokens,
            "disaggregated": self.is_disaggregated,
            "exported_bytes": self.exported_bytes,
        }


def generate_text(
    model: LoadedModel,
    prompt: str,
    params: SamplingParams,
    *,
    disaggregated: bool = False,
    config: EngineConfig | None = None,
) -> GenerateResult:
    config = config or EngineConfig(capacity_bytes=CLI_CAPACITY_BYTES)
    decode = Engine(model, config)
    tokens = decode.encode(prompt)
    exported_bytes = 0
    if disaggregated:
        prefill = Engine(model, config)
        exported = prefill.export_prefill(
            "cli-0", tokens, params, from_token=decode.cached_prefix_tokens(tokens)
        )
        if exported is None:
            raise BadRequestError("the prompt does not fit the prefill engine's pool")
        payload = exported.to_bytes()
        exported_bytes = len(payload)
        decode.submit_import(ExportedPrefill.from_bytes(payload), params)
    else:
        decode.submit("cli-0", tokens, params)
    (completion,) = decode.run()
    return GenerateResult(
        model.name,
        completion.text,
        completion.token_ids,
        completion.finish_reason.value,
        len(tokens),
        disaggregated,
        exported_bytes,
    )
