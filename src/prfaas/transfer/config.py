"""Transfer configuration: the one frozen object every sender and receiver is built from.

This is the only module of `prfaas.transfer` that reads the environment: the shared secret for
the HMAC handshake comes from the deployment file or, when that leaves it out, from
`PRFAAS_TRANSFER_SECRET`. Keeping secrets out of YAML files that get committed is the point.
TLS is optional and only encrypts; authentication is always the HMAC handshake.
"""

from __future__ import annotations

import os
import ssl
from collections.abc import Mapping
from dataclasses import dataclass

from prfaas.transfer.errors import ConfigError

SECRET_ENV_VAR = "PRFAAS_TRANSFER_SECRET"
MIB = 2**20
MIN_SECRET_BYTES = 16


@dataclass(frozen=True, slots=True)
class TlsConfig:
    """Certificate files for optional TLS. The client verifies the server against `ca_file`;
    `server_hostname` must match the server certificate (inter-cluster peers are named)."""

    cert_file: str
    key_file: str
    ca_file: str
    server_hostname: str

    def server_context(self) -> ssl.SSLContext:
        try:
            context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH, cafile=self.ca_file)
            context.load_cert_chain(self.cert_file, self.key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot load TLS server certificate: {exc}") from exc
        return context

    def client_context(self) -> ssl.SSLContext:
        try:
            return ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(f"cannot load TLS CA file: {exc}") from exc


@dataclass(frozen=True, slots=True)
class TransferConfig:
    """Knobs of one sender or receiver.

    Defaults are sized for an inter-cluster link of 10-100 Gbps with tens of ms of RTT:
    64 MiB in flight covers 100 Gbps x 5 ms or 10 Gbps x 50 ms of bandwidth-delay product.
    """

    secret: bytes
    num_connections: int = 4
    max_frame_bytes: int = 4 * MIB
    max_bytes_in_flight: int = 64 * MIB
    max_waiting_bytes: int = 1024 * MIB
    rate_limit_bytes_per_s: float | None = None
    rate_burst_bytes: int = 4 * MIB
    stall_timeout_s: float = 30.0
    handshake_timeout_s: float = 10.0
    telemetry_window_s: float = 1.0
    tls: TlsConfig | None = None
    # An XXH3 check of every payload byte, end to end (buffers, copies, software), on top of
    # TCP's 16-bit checksum. Off only where the link and both hosts are trusted (same host or
    # rack, ECC memory): a corrupt payload is then not detected. Both ends must agree; the
    # handshake refuses a mismatch. Costs about 0.07 CPU-seconds per GB on each side.
    payload_checks: bool = True

    def __post_init__(self) -> None:
        if len(self.secret) < MIN_SECRET_BYTES:
            raise ConfigError(f"the shared secret needs at least {MIN_SECRET_BYTES} bytes")
        if self.num_connections < 1:
            raise ConfigError("num_connections must be at least 1")
        if self.max_frame_bytes < 1 or self.max_bytes_in_flight < self.max_frame_bytes:
            raise ConfigError("max_bytes_in_flight must hold at least one frame")
        if self.rate_limit_bytes_per_s is not None and self.rate_limit_bytes_per_s <= 0:
            raise ConfigError("rate_limit_bytes_per_s must be positive when set")
        if self.rate_burst_bytes < self.max_frame_bytes:
            raise ConfigError("rate_burst_bytes must hold at least one frame")
        if min(self.stall_timeout_s, self.handshake_timeout_s, self.telemetry_window_s) <= 0:
            raise ConfigError("timeouts and the telemetry window must be positive")


def resolve_secret(
    configured: str | bytes | None, environ: Mapping[str, str] | None = None
) -> bytes:
    """The shared secret: the configured value if given, else `PRFAAS_TRANSFER_SECRET`.

    `environ` defaults to the process environment; tests pass a dict instead.
    """
    if configured is not None:
        return configured.encode() if isinstance(configured, str) else configured
    env = os.environ if environ is None else environ
    value = env.get(SECRET_ENV_VAR)
    if not value:
        raise ConfigError(f"no transfer secret: set it in the config or in ${SECRET_ENV_VAR}")
    return value.encode()
