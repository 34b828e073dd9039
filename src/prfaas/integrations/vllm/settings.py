"""What the instance shell tells the connector: `kv_connector_extra_config`, validated.

Shared by both halves (the shell writes it in the core venv, the connector reads it inside
vLLM), so it imports neither vLLM nor the serve package. The transfer secret never travels in
the config (vLLM logs its config): the connector reads it from the environment variable named
by `secret_env`, which the shell sets for its vLLM child.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from prfaas.specs.catalog import resolve_model
from prfaas.specs.errors import SpecError
from prfaas.transfer import PeerIdentity, checkpoint_fingerprint, identity_for
from prfaas.transfer.shipping import ShippingPlan

CONNECTOR_CLASS = "PrfaasConnector"
CONNECTOR_MODULE = "prfaas.integrations.vllm.connector"


class ConnectorSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    # how this instance ships and receives KV: the deployment's one shipping path (TLS, the
    # link's shaping, the transfer knobs), resolved by the shell (`serve.kv_shipping.shipping_plan`)
    shipping: ShippingPlan
    secret_env: str = "PRFAAS_TRANSFER_SECRET"
    hash_seed: int = 0
    staged_ttl_s: float = Field(default=120.0, gt=0)
    load_timeout_s: float = Field(default=60.0, gt=0)
    status_path: str | None = None

    def peer_identity(self, model_dir: str, block_tokens: int) -> PeerIdentity:
        """Model fingerprint (prfaas's, from config.json; for a model_type prfaas's reader
        does not know, the config.json digest, as the instance shell's), vLLM's block size,
        the hash seed: two engines whose blocks would not line up refuse each other at the
        handshake."""
        try:
            fingerprint = identity_for(resolve_model(model_dir), block_tokens, 0).model_fingerprint
        except SpecError:
            fingerprint = checkpoint_fingerprint(Path(model_dir))
        return PeerIdentity(fingerprint, block_tokens, self.hash_seed)
