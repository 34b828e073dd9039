"""Ports `prfaas up` chooses (those left at 0): held by the launcher for the whole run.

A port picked free at launch and let go is anyone's until the child that will listen on it
binds, and a vLLM engine binds its transfer port about two minutes later: the kernel hands
free ports to outgoing connections too, and one took a transfer port in 1 start of 8. So
each chosen port stays bound by the launcher (`hold_port`): SO_REUSEADDR set, never
listening. The child's listener (SO_REUSEADDR too: uvicorn, asyncio and
`socket.create_server` set it) binds and listens beside it, while the kernel hands the port
neither to an outgoing connection nor to a bind to port 0, and refuses a plain bind of it.
Held until `Launcher.stop`, so a restarted child finds its port again.

    with_held_ports(deployment) -> (deployment, held sockets)   every 0 replaced, each held
"""

from __future__ import annotations

import socket

from prfaas.serve.config.deployment import Deployment


def hold_port(host: str) -> socket.socket:
    """A socket bound to a free port of `host` (read it with `getsockname`), kept so that
    the port stays ours: the child that listens on it binds beside it (module docstring)."""
    family, kind, proto, _, address = socket.getaddrinfo(host or None, 0, type=socket.SOCK_STREAM)[
        0
    ]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
    except BaseException:
        sock.close()
        raise
    return sock


def with_held_ports(deployment: Deployment) -> tuple[Deployment, list[socket.socket]]:
    """The deployment with every port left at 0 replaced by a held free one, and the
    sockets that hold them (the caller closes them when the run ends)."""
    held: list[socket.socket] = []

    def chosen(host: str, port: int) -> int:
        if port:
            return port
        held.append(hold_port(host))
        return int(held[-1].getsockname()[1])

    try:
        router = deployment.router
        router = router.model_copy(update={"port": chosen(router.host, router.port)})
        instances = tuple(
            spec.model_copy(
                update={
                    "http_port": chosen(spec.host, spec.http_port),
                    "transfer_port": chosen(spec.host, spec.transfer_port),
                }
            )
            for spec in deployment.instances
        )
    except BaseException:
        for sock in held:
            sock.close()
        raise
    return deployment.model_copy(update={"router": router, "instances": instances}), held
