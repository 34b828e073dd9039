"""An HAProxy configuration in front of router replicas (docs/deploy.md, "Router replicas").

    client ──► HAProxy :port ──► prfaas-router-0 :8000   health: GET /health every 0.5 s
                       ├──────► prfaas-router-1 :8000   (two misses: out; two answers: in)
                       └──────► prfaas-router-2 :8000

What a client sees when a replica is lost (killed, its host gone):

- a request not yet sent to it: HAProxy retries the connection on another replica
  (`retries`, `option redispatch`): nothing was sent, so nothing can run twice;
- a request it held (sent, no answer yet): 502 with an OpenAI-style error body, code
  `router_lost`, saying the request may have run. HAProxy never resends it (it retries
  connection failures only): an LLM request is not idempotent, so the client decides;
- a stream it was sending: cut short (the status line was already sent): the client sees
  the stream end without its final `[DONE]`;
- no replica left: 503, code `no_router`.

Every answer names the replica that produced it (header `X-Prfaas-Router`), HAProxy's own
errors included, so a lost request can be told apart in logs and tests.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

ROUTER_HEADER = "X-Prfaas-Router"
HEALTH_INTERVAL_MS = 500


def _error(message: str, code: str) -> str:
    body = {"error": {"message": message, "type": "server_error", "param": None, "code": code}}
    return json.dumps(body, separators=(",", ":"))


ERRORS = {
    502: _error(
        "the router replica holding this request was lost before it answered; the request "
        "may have run: retry it only if running it twice is safe",
        "router_lost",
    ),
    503: _error("no router replica is available", "no_router"),
    504: _error("the router replica did not answer in time", "router_timeout"),
}


def haproxy_config(
    routers: Sequence[tuple[str, str, int]], *, port: int, timeout_s: float = 300.0
) -> str:
    """The configuration for `haproxy -f FILE -db`: (name, address, port) per replica."""
    servers = [f"    server {name} {address}:{rport}" for name, address, rport in routers]
    errors = [
        f"    http-error status {status} content-type application/json string '{body}'"
        for status, body in ERRORS.items()
    ]
    return "\n".join(
        [
            "global",
            "    maxconn 4096",
            "defaults",
            "    mode http",
            "    timeout connect 1s",
            f"    timeout client {int(timeout_s)}s",
            f"    timeout server {int(timeout_s)}s",
            "    retries 3",
            "    option redispatch 1",
            *errors,
            "frontend api",
            f"    bind 0.0.0.0:{port}",
            "    default_backend routers",
            "backend routers",
            "    balance roundrobin",
            "    option httpchk GET /health",
            "    http-check expect status 200",
            f"    default-server check inter {HEALTH_INTERVAL_MS}ms fall 2 rise 2",
            f"    http-after-response set-header {ROUTER_HEADER} %s",
            *servers,
            "",
        ]
    )
