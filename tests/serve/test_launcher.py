"""How `prfaas up` resolves the link's shaping, and that a failed start leaves nothing behind."""

from __future__ import annotations

import logging
import subprocess

import pytest

from prfaas.serve import kv_shipping
from prfaas.serve.config.deployment import (
    Deployment,
    InstanceRole,
    LinkShaping,
    LinkSpec,
    NamespaceLink,
    RouterSpec,
    default_deployment,
)
from prfaas.serve.errors import DeploymentError
from prfaas.serve.launch import launcher
from prfaas.serve.launch.launcher import Launcher
from prfaas.transfer import PeerAddress, TcpTransport, Transport, linkemu
from prfaas.transfer.shaping import DelayedTransport, DualListenTransport, RoutedTransport
from prfaas.transfer.shipping import Pacing, endpoint_transport


def _deployment(shaping: LinkShaping, rtt_ms: float = 20.0) -> Deployment:
    return default_deployment().model_copy(
        update={"router": RouterSpec(port=0), "link": LinkSpec(shaping=shaping, rtt_ms=rtt_ms)}
    )


def _no_spawn(self: Launcher) -> None:
    raise RuntimeError("spawning is not part of this test")


def _netns_names() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return {line.split()[0] for line in out.stdout.splitlines() if line.strip()}


def test_token_bucket_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Launcher, "_spawn_all", lambda self: None)
    up = Launcher(_deployment(LinkShaping.TOKEN_BUCKET))
    up.start()
    link = up.deployment.link
    assert (link.shaping, link.netns, link.shaping_in_force) == (
        LinkShaping.TOKEN_BUCKET,
        None,
        "token-bucket",
    )
    assert link.shaping_reason is not None and "asks for the token bucket" in link.shaping_reason
    prfaas = up.deployment.instance("prfaas-0")
    plan = kv_shipping.shipping_plan(up.deployment, prfaas, 2**20)
    assert plan.send == Pacing(125e6, 20e-3)  # the token bucket and the RTT's write delay
    assert isinstance(endpoint_transport(plan), DelayedTransport)
    up.stop()


def test_auto_falls_back_with_a_logged_reason(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(Launcher, "_spawn_all", lambda self: None)
    monkeypatch.setattr(linkemu, "unavailable_reason", lambda spec=None: "no root here")
    up = Launcher(_deployment(LinkShaping.AUTO))
    with caplog.at_level(logging.WARNING, logger=launcher.__name__):
        up.start()
    assert up.deployment.link.shaping is LinkShaping.TOKEN_BUCKET
    assert up.deployment.link.shaping_reason == "no root here"
    assert "token bucket: no root here" in caplog.text
    up.stop()


def test_kernel_when_impossible_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(linkemu, "unavailable_reason", lambda spec=None: "no root here")
    up = Launcher(_deployment(LinkShaping.KERNEL))
    with pytest.raises(DeploymentError, match=r"link\.shaping is kernel but no root here"):
        up.start()
    assert up.children == {}


def test_nothing_crosses_the_link_without_a_prfaas_instance() -> None:
    deployment = _deployment(LinkShaping.AUTO)
    pd_only = tuple(i for i in deployment.instances if i.role is not InstanceRole.PRFAAS_PREFILL)
    reason = launcher._kernel_unavailable_reason(
        deployment.model_copy(update={"instances": pd_only})
    )
    assert reason is not None and "nothing crosses the link" in reason


def test_kernel_transports_route_prfaas_kv_into_the_namespaces() -> None:
    netns = NamespaceLink(
        sender_netns="pfxs", receiver_netns="pfxr", sender_ip="10.213.9.1", receiver_ip="10.213.9.2"
    )
    base = default_deployment()
    deployment = base.model_copy(update={"link": LinkSpec(netns=netns)})
    by_role = {i.role: i for i in deployment.instances}

    def transport(role: InstanceRole) -> Transport:
        return endpoint_transport(kv_shipping.shipping_plan(deployment, by_role[role], 2**20))

    prfaas = transport(InstanceRole.PRFAAS_PREFILL)
    assert isinstance(prfaas, RoutedTransport)
    decode = by_role[InstanceRole.PD_DECODE]
    assert prfaas._routes == {
        PeerAddress(decode.host, decode.transfer_port): PeerAddress("10.213.9.2", 0)
    }
    assert isinstance(transport(InstanceRole.PD_DECODE), DualListenTransport)
    # a PD-P may be flipped to decode: it listens in the namespace too, and sends directly
    pd_p = transport(InstanceRole.PD_PREFILL)
    assert isinstance(pd_p, DualListenTransport)
    assert isinstance(pd_p._direct, TcpTransport)
    # no token bucket: the kernel shapes; a PD instance's moves are paced as the link
    prfaas_plan = kv_shipping.shipping_plan(deployment, by_role[InstanceRole.PRFAAS_PREFILL], 2**20)
    assert prfaas_plan.send == Pacing()
    assert kv_shipping.shipping_plan(deployment, decode, 2**20).move == Pacing(125e6, 20e-3)


@pytest.mark.parametrize("rtt_ms", [0.0, 20.0])
def test_a_failed_start_removes_the_namespaces(
    monkeypatch: pytest.MonkeyPatch, rtt_ms: float
) -> None:
    """veth (no delay) and TUN + delay line: both are gone when the start fails."""
    reason = linkemu.unavailable_reason(linkemu.EmulatedLinkSpec(1e9, one_way_delay_s=rtt_ms / 2e3))
    if reason is not None:
        pytest.skip(reason)
    seen: list[NamespaceLink] = []

    def spawn_then_fail(self: Launcher) -> None:
        assert self.deployment.link.netns is not None
        seen.append(self.deployment.link.netns)
        assert {seen[0].sender_netns, seen[0].receiver_netns} <= _netns_names()
        raise RuntimeError("a child could not be started")

    monkeypatch.setattr(Launcher, "_spawn_all", spawn_then_fail)
    up = Launcher(_deployment(LinkShaping.KERNEL, rtt_ms=rtt_ms))
    with pytest.raises(RuntimeError, match="could not be started"):
        up.start()
    assert seen and not {seen[0].sender_netns, seen[0].receiver_netns} & _netns_names()
