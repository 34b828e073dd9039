"""Start-up progress of `prfaas up` and `prfaas demo`: one line per instance as it comes up.

A deployment's instances take tens of seconds to start on a small host (torch import, model
build, profiling). `wait_with_progress` polls each instance's `/info` (a signed call: 200
once it serves) and prints a line the moment it answers, with its role, backend and the time
since start, then waits for the router's `/health` to say "ok" (`Launcher.wait_healthy`).
A child that exits while starting is a `DeploymentError`, as in `wait_healthy`.
"""

from __future__ import annotations

import contextlib
import sys
import time
from typing import TextIO

import httpx

from prfaas.serve.errors import DeploymentError
from prfaas.serve.launch.launcher import Launcher
from prfaas.serve.launch.stopping import raise_if_requested

POLL_INTERVAL_S = 0.25


def wait_with_progress(
    launcher: Launcher, timeout_s: float = 300.0, out: TextIO | None = None
) -> None:
    """Block until the deployment is healthy, printing each instance as it comes up."""
    stream = out if out is not None else sys.stderr
    started = time.monotonic()
    deadline = started + timeout_s
    waiting = {spec.name: spec for spec in launcher.deployment.instances}
    print(f"prfaas: starting {len(waiting)} instances and the router", file=stream, flush=True)
    auth = launcher.instance_auth()  # the instances' control API takes signed calls only
    while waiting:
        raise_if_requested()
        for name, child in launcher.children.items():
            if child.poll() is not None:
                raise DeploymentError(f"{name} exited with code {child.returncode}")
        for name, spec in list(waiting.items()):
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(spec.url + "/info", timeout=1.0, auth=auth).status_code == 200:
                    del waiting[name]
                    print(
                        f"prfaas:   {name} ({spec.role.value}, {spec.backend.value}) up after "
                        f"{time.monotonic() - started:.1f} s",
                        file=stream,
                        flush=True,
                    )
        if time.monotonic() > deadline:
            names = ", ".join(waiting)
            raise DeploymentError(f"{names} not up within {timeout_s:.0f} s")
        if waiting:
            time.sleep(POLL_INTERVAL_S)
    launcher.wait_healthy(timeout_s=max(1.0, deadline - time.monotonic()))
    print(
        f"prfaas:   router ready after {time.monotonic() - started:.1f} s", file=stream, flush=True
    )
