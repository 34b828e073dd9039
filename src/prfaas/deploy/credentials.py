"""The Secret every pod of both clusters shares: transfer secret, admin token, TLS files.

    transfer-secret   $PRFAAS_TRANSFER_SECRET in every pod (the KV handshake, signed calls)
    admin-token       $PRFAAS_ADMIN_TOKEN (the router's /admin/* bearer)
    api-key           $PRFAAS_API_KEY in the router, only when one is configured
    tls-cert.pem, tls-key.pem, tls-ca.pem    mounted at layout.TLS_DIR, when `tls` is on

Values are resolved once per render as `prfaas up` resolves them for its children: the
deployment file's value, else the renderer's environment (`PRFAAS_TRANSFER_SECRET`,
`PRFAAS_ADMIN_TOKEN`, `PRFAAS_API_KEY`, `PRFAAS_TLS_*_FILE`), else (secret and admin token
only) generated. Both clusters get the same values from one render: they must agree.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from prfaas.serve.config.deployment import (
    ADMIN_TOKEN_ENV_VAR,
    API_KEY_ENV_VAR,
    Deployment,
    configured_admin_token,
    configured_api_key,
    configured_secret,
    transfer_tls,
)
from prfaas.serve.errors import DeploymentError
from prfaas.transfer.config import MIN_SECRET_BYTES, SECRET_ENV_VAR

SECRET_NAME = "prfaas-credentials"
TRANSFER_SECRET_KEY = "transfer-secret"
ADMIN_TOKEN_KEY = "admin-token"
API_KEY_KEY = "api-key"
#: Secret key -> the file name the pods see under layout.TLS_DIR.
TLS_FILES = {"tls-cert.pem": "cert.pem", "tls-key.pem": "key.pem", "tls-ca.pem": "ca.pem"}

#: Environment variable -> Secret key, for every pod (as `prfaas up` gives every child both).
SHARED_ENV = {SECRET_ENV_VAR: TRANSFER_SECRET_KEY, ADMIN_TOKEN_ENV_VAR: ADMIN_TOKEN_KEY}
ROUTER_ONLY_ENV = {API_KEY_ENV_VAR: API_KEY_KEY}


def credentials(deployment: Deployment) -> dict[str, str]:
    """The Secret's data (module docstring); unreadable TLS files are a `DeploymentError`."""
    found_secret = configured_secret(deployment)
    found_token = configured_admin_token(deployment)
    data = {
        TRANSFER_SECRET_KEY: found_secret.value if found_secret else secrets.token_hex(24),
        ADMIN_TOKEN_KEY: found_token.value if found_token else secrets.token_urlsafe(32),
    }
    short = [
        f"{found.source}: needs at least {MIN_SECRET_BYTES} bytes"
        for found in (found_secret, found_token)
        if found is not None and len(found.value.encode()) < MIN_SECRET_BYTES
    ]
    if short:
        raise DeploymentError(*short)
    api_key = configured_api_key(deployment)
    if api_key is not None:
        data[API_KEY_KEY] = api_key
    tls = transfer_tls(deployment)
    if tls is not None:
        sources = (tls.cert_file, tls.key_file, tls.ca_file)
        data.update(
            {key: Path(src).read_text() for key, src in zip(TLS_FILES, sources, strict=True)}
        )
    return data
