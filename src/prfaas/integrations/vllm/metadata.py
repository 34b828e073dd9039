"""What the connector's scheduler half tells its worker half each step (`PrfaasMetadata`).

vLLM builds the metadata in the scheduler process (`PrfaasConnector.build_connector_meta`)
and hands it to the worker (`ConnectorWorker`), which ships (`SaveSpec`) and loads
(`LoadSpec`) the named blocks; `discards` and `aborts` name transfers the worker drops.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata


@dataclass(frozen=True, slots=True)
class SaveSpec:
    """Ship tokens [ship_start, ship_end) of a request this step; `is_last`: then its state
    and END."""

    req_id: str
    transfer_id: str
    host: str
    port: int
    block_ids: tuple[list[int], ...]
    ship_start: int
    ship_end: int
    is_last: bool
    num_tokens: int
    is_move: bool  # a cache move: sent paced as the inter-cluster link


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """Load tokens [start, end) of transfer `transfer_id` into `block_ids` (state at end)."""

    req_id: str
    transfer_id: str
    block_ids: tuple[list[int], ...]
    start: int
    end: int


@dataclass
class PrfaasMetadata(KVConnectorMetadata):
    saves: list[SaveSpec] = field(default_factory=list)
    loads: list[LoadSpec] = field(default_factory=list)
    discards: list[str] = field(default_factory=list)
    aborts: list[str] = field(default_factory=list)
