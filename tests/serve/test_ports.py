"""Ports `prfaas up` chooses are held for the whole run (`serve.launch.ports`): the child that
listens on one binds beside the launcher's hold, nobody else gets it meanwhile (not a plain
bind, not a bind to port 0), and a port an instance cannot listen on is named with the
cause in its one error line."""

from __future__ import annotations

import asyncio
import errno
import socket
from pathlib import Path

import pytest
from serve_helpers import emulated_deployment

from prfaas.serve.config.deployment import RouterSpec, load_deployment
from prfaas.serve.errors import DeploymentError
from prfaas.serve.instance.runtime import _start_transfer, build_runtime
from prfaas.serve.launch.ports import with_held_ports

GOOD = """\
model: tiny-qwen3-next
router: {port: 9000}
instances:
  - {name: prfaas-0, role: prfaas-prefill, cluster: prfaas, http_port: 9101}
  - {name: pdd-0, role: pd-decode, cluster: pd}
"""


def test_only_ports_left_at_zero_are_chosen_and_each_is_held(tmp_path: Path) -> None:
    path = tmp_path / "deploy.yaml"
    path.write_text(GOOD)
    d, held = with_held_ports(load_deployment(path))
    try:
        assert d.router.port == 9000 and d.instance("prfaas-0").http_port == 9101
        chosen = [
            d.instance("prfaas-0").transfer_port,
            d.instance("pdd-0").http_port,
            d.instance("pdd-0").transfer_port,
        ]
        assert sorted(chosen) == sorted(s.getsockname()[1] for s in held)
        for port in chosen:
            with socket.socket() as plain, pytest.raises(OSError) as refused:
                plain.bind(("127.0.0.1", port))  # anyone else: refused
            assert refused.value.errno == errno.EADDRINUSE
            with (
                socket.create_server(("127.0.0.1", port)) as child,  # the child: binds
                socket.create_connection(("127.0.0.1", port), timeout=10),
            ):
                child.accept()[0].close()
        for _ in range(3000):  # the kernel hands none of them out as a free port
            with socket.socket() as other:
                other.bind(("127.0.0.1", 0))
                assert other.getsockname()[1] not in chosen
    finally:
        for sock in held:
            sock.close()


def test_an_instance_that_cannot_listen_on_its_transfer_port_names_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Taken after the preflight checked it (a race the hold above closes for `prfaas up`):
    the instance's start-up error names the port and the cause (the CLI prints it as its
    one `prfaas: error:` line, exit 2)."""
    monkeypatch.setenv("PRFAAS_TRANSFER_SECRET", "ports-test-secret-0123456789")
    with socket.create_server(("127.0.0.1", 0)) as taken:  # someone else's listener
        port = taken.getsockname()[1]
        base = emulated_deployment(router=RouterSpec(port=0))
        instances = tuple(
            s.model_copy(update={"transfer_port": port}) if s.name == "pdd-0" else s
            for s in base.instances
        )
        rt = build_runtime(base.model_copy(update={"instances": instances}), "pdd-0")
        with pytest.raises(DeploymentError) as failed:
            asyncio.run(_start_transfer(rt))
    assert str(failed.value) == (
        f"pdd-0: transfer_port: cannot listen on 127.0.0.1:{port}: Address already in use"
    )
