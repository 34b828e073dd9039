"""Configuration checked before anything starts: every problem in one pass, one line each,
naming the field; strict types; ports against each other and against this host."""

from __future__ import annotations

import contextlib
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from prfaas.serve.config.deployment import (
    Deployment,
    InstanceRole,
    InstanceSpec,
    RouterSpec,
    default_deployment,
    load_deployment,
)
from prfaas.serve.errors import DeploymentError
from prfaas.serve.launch.preflight import Scope, check_deployment
from prfaas.specs.presets import PRESETS

SECRET = "preflight-test-secret-0123456789"


@pytest.fixture(autouse=True)
def _clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PRFAAS_TRANSFER_SECRET", SECRET)
    monkeypatch.delenv("PRFAAS_ADMIN_TOKEN", raising=False)


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield int(sock.getsockname()[1])


def _instances(*specs: tuple[str, InstanceRole, int, int]) -> tuple[InstanceSpec, ...]:
    return tuple(
        InstanceSpec(
            name=name,
            role=role,
            cluster="prfaas" if role is InstanceRole.PRFAAS_PREFILL else "pd",
            http_port=http,
            transfer_port=transfer,
        )
        for name, role, http, transfer in specs
    )


def _with(**updates: object) -> Deployment:
    return default_deployment().model_copy(update={"router": RouterSpec(port=0), **updates})


def test_the_default_deployment_passes() -> None:
    assert check_deployment(_with(), Scope.ALL) == []


def test_empty_and_decode_less_deployments_are_refused() -> None:
    assert check_deployment(_with(instances=()), Scope.ALL) == [
        "instances: the deployment has no instance (it needs a prefill and a decode one)"
    ]
    no_decode = _instances(("a", InstanceRole.PRFAAS_PREFILL, 0, 0))
    assert check_deployment(_with(instances=no_decode), Scope.ALL) == [
        "instances: no pd-decode instance (every request needs one to decode)"
    ]
    no_prefill = _instances(("d", InstanceRole.PD_DECODE, 0, 0))
    assert check_deployment(_with(instances=no_prefill), Scope.ALL) == [
        "instances: no prefill instance (prfaas-prefill or pd-prefill)"
    ]


def test_duplicate_names_are_named() -> None:
    twice = _instances(
        ("a", InstanceRole.PD_PREFILL, 0, 0),
        ("d", InstanceRole.PD_DECODE, 0, 0),
        ("a", InstanceRole.PD_DECODE, 0, 0),
    )
    assert check_deployment(_with(instances=twice), Scope.ALL) == [
        "instances.2.name: 'a' is also instances.0.name"
    ]


def _unused_ports(count: int) -> list[int]:
    """`count` distinct ports free on this host a moment ago (all bound at once, then let go:
    the checks below must find them free, so they cannot stay held)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in socks]


def test_port_clashes_between_listeners_are_named() -> None:
    clash = _instances(
        ("p", InstanceRole.PRFAAS_PREFILL, 0, 0),
        ("a", InstanceRole.PD_PREFILL, 0, 0),
        ("d", InstanceRole.PD_DECODE, 0, 0),
    )
    base = _with(instances=clash)
    one, two, three, four = _unused_ports(4)
    http = [clash[0], clash[1].model_copy(update={"http_port": 0}), clash[2]]
    cases = {
        f"instances.1.http_port: port {one} is also instances.0.http_port (127.0.0.1)": [
            ("http_port", 0, one),
            ("http_port", 1, one),
        ],
        f"instances.2.transfer_port: port {two} is also instances.1.transfer_port (127.0.0.1)": [
            ("transfer_port", 1, two),
            ("transfer_port", 2, two),
        ],
        f"instances.0.transfer_port: port {three} is also instances.0.http_port (127.0.0.1)": [
            ("http_port", 0, three),
            ("transfer_port", 0, three),
        ],
    }
    for expected, edits in cases.items():
        specs = list(http)
        for field, index, port in edits:
            specs[index] = specs[index].model_copy(update={field: port})
        problems = check_deployment(base.model_copy(update={"instances": tuple(specs)}), Scope.ALL)
        assert problems == [expected]
    router_clash = base.model_copy(
        update={
            "router": RouterSpec(port=four),
            "instances": (clash[0].model_copy(update={"http_port": four}), *clash[1:]),
        }
    )
    assert check_deployment(router_clash, Scope.ALL) == [
        f"instances.0.http_port: port {four} is also router.port (127.0.0.1)"
    ]
    wildcard = router_clash.model_copy(update={"router": RouterSpec(host="0.0.0.0", port=four)})
    assert check_deployment(wildcard, Scope.ALL) == [
        f"instances.0.http_port: port {four} is also router.port (0.0.0.0)"
    ]


def test_a_port_in_use_on_this_host_is_named(taken_port: int) -> None:
    deployment = _with(router=RouterSpec(port=taken_port))
    expected = f"router.port: 127.0.0.1:{taken_port} is already in use on this host"
    assert check_deployment(deployment, Scope.ALL) == [expected]
    assert check_deployment(deployment, Scope.ROUTER) == [expected]
    # an instance on this host does not bind the router's port
    assert check_deployment(deployment, Scope.INSTANCE, instance_name="pdd-0") == []
    pdd = deployment.instance("pdd-0").model_copy(update={"transfer_port": taken_port})
    mine = _with(instances=(*default_deployment().instances[:2], pdd))
    assert check_deployment(mine, Scope.INSTANCE, instance_name="pdd-0") == [
        f"instances.2.transfer_port: 127.0.0.1:{taken_port} is already in use on this host"
    ]
    assert check_deployment(mine, Scope.INSTANCE, instance_name="pdp-0") == []
    assert check_deployment(mine, Scope.INSTANCE, instance_name="nobody") == [
        "--name: no instance named 'nobody' in the deployment"
    ]


def test_secrets_are_long_enough(monkeypatch: pytest.MonkeyPatch) -> None:
    assert check_deployment(_with(secret="short"), Scope.ALL) == ["secret: needs at least 16 bytes"]
    monkeypatch.setenv("PRFAAS_TRANSFER_SECRET", "tiny")
    assert check_deployment(_with(), Scope.ALL) == [
        "$PRFAAS_TRANSFER_SECRET: needs at least 16 bytes"
    ]
    monkeypatch.delenv("PRFAAS_TRANSFER_SECRET")
    assert check_deployment(_with(), Scope.ALL, secret_generated=True) == []
    assert check_deployment(_with(), Scope.ROUTER) == [
        "secret: no transfer secret (set `secret` or $PRFAAS_TRANSFER_SECRET)"
    ]
    monkeypatch.setenv("PRFAAS_TRANSFER_SECRET", SECRET)
    monkeypatch.setenv("PRFAAS_ADMIN_TOKEN", "short")
    assert check_deployment(_with(), Scope.ALL) == ["$PRFAAS_ADMIN_TOKEN: needs at least 16 bytes"]


def test_models_are_resolved_without_loading(tmp_path: Path) -> None:
    assert check_deployment(_with(model="no-such-model"), Scope.ALL) == [
        "model: unknown model 'no-such-model': not a preset (`prfaas generate "
        "--list-models`), smollm2-135m or a checkpoint directory"
    ]
    assert check_deployment(_with(model=str(tmp_path)), Scope.ALL) == [
        f"model: {tmp_path}: neither a checkpoint directory with config.json nor a .gguf file"
    ]
    missing = str(tmp_path / "gone")
    assert check_deployment(_with(model=missing), Scope.ALL) == [
        f"model: {missing}: no such checkpoint directory or file"
    ]
    (tmp_path / "config.json").write_text("{}")
    assert check_deployment(_with(model=str(tmp_path)), Scope.ALL) == []
    for preset in PRESETS:
        assert check_deployment(_with(model=preset), Scope.ALL) == []


def test_every_problem_is_listed_in_one_pass(taken_port: int) -> None:
    http_port, transfer_port = _unused_ports(2)
    instances = _instances(
        ("p", InstanceRole.PRFAAS_PREFILL, http_port, transfer_port),
        ("p", InstanceRole.PD_PREFILL, http_port, 0),
    )
    deployment = _with(
        model="nothing-like-it",
        secret="0123",
        router=RouterSpec(port=taken_port),
        instances=instances,
    )
    problems = check_deployment(deployment, Scope.ALL)
    assert problems == [
        "instances: no pd-decode instance (every request needs one to decode)",
        "instances.1.name: 'p' is also instances.0.name",
        f"instances.1.http_port: port {http_port} is also instances.0.http_port (127.0.0.1)",
        f"router.port: 127.0.0.1:{taken_port} is already in use on this host",
        "secret: needs at least 16 bytes",
        problems[-1],
    ]
    assert problems[-1].startswith("model: unknown model 'nothing-like-it'")


STRICT = """\
model: tiny-qwen3-next
hash_seed: 18446744073709551616
threshold_tokens: '96'
payload_checks: 'no'
router: {port: '8000', request_timeout_s: 'soon'}
link: {rate_gbps: 2}
instances:
  - {name: a, role: pd-prefill, cluster: pd, max_batch_size: 4.0}
  - {name: d, role: pd-decode, cluster: pd, http_port: true}
"""


def test_types_are_strict_and_every_error_is_listed(tmp_path: Path) -> None:
    path = tmp_path / "deploy.yaml"
    path.write_text(STRICT)
    with pytest.raises(DeploymentError) as caught:
        load_deployment(path)
    fields = [line.split(": ")[1] for line in caught.value.problems]
    assert fields == [
        "hash_seed",
        "threshold_tokens",
        "payload_checks",
        "router.port",
        "router.request_timeout_s",
        "instances.0.max_batch_size",
        "instances.1.http_port",
    ]
    assert all(line.startswith(f"{path}: ") for line in caught.value.problems)


def test_json_forms_still_load(tmp_path: Path) -> None:
    """An integer for a float, a list for a tuple, a string for an enum: what YAML writes."""
    path = tmp_path / "deploy.yaml"
    path.write_text(
        STRICT.replace("threshold_tokens: '96'\npayload_checks: 'no'\n", "")
        .replace("18446744073709551616", "18446744073709551615")
        .replace("{port: '8000', request_timeout_s: 'soon'}", "{port: 8000}")
        .replace("max_batch_size: 4.0", "max_batch_size: 4")
        .replace(", http_port: true", "")
    )
    deployment = load_deployment(path)
    assert deployment.link.rate_gbps == 2.0 and deployment.instances[1].role.value == "pd-decode"


def test_a_host_that_is_not_ours_is_named_once() -> None:
    first = (
        default_deployment()
        .instances[0]
        .model_copy(update={"host": "192.0.2.1", "http_port": 41021, "transfer_port": 41022})
    )
    deployment = _with(instances=(first, *default_deployment().instances[1:]))
    assert check_deployment(deployment, Scope.ALL) == [
        "instances.0.host: 192.0.2.1 is not an address of this host"
    ]
    # several hosts: the router's host does not start that instance, so does not bind it
    assert check_deployment(deployment, Scope.ROUTER) == []
