"""Configuration: where the secret comes from, and limits that cannot work."""

from __future__ import annotations

from dataclasses import replace

import pytest

from prfaas.transfer import ConfigError, TransferConfig, resolve_secret
from prfaas.transfer.config import SECRET_ENV_VAR


def test_configured_secret_wins_over_the_environment() -> None:
    env = {SECRET_ENV_VAR: "from-the-environment"}
    assert resolve_secret("from-the-config", env) == b"from-the-config"
    assert resolve_secret(None, env) == b"from-the-environment"


def test_missing_secret_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match=SECRET_ENV_VAR):
        resolve_secret(None, {})


@pytest.mark.parametrize(
    "change",
    [
        {"secret": b"short"},
        {"num_connections": 0},
        {"max_bytes_in_flight": 1024},
        {"rate_limit_bytes_per_s": 0.0},
        {"stall_timeout_s": 0.0},
    ],
)
def test_impossible_limits_are_refused(change: dict[str, object]) -> None:
    base = TransferConfig(secret=b"0123456789abcdef0123")
    with pytest.raises(ConfigError):
        replace(base, **change)  # type: ignore[arg-type]
