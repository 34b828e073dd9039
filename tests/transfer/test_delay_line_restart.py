"""A delayed link's user-space delay line can die and be restarted: while it is gone the link
is cut and a `RouteProbe` in the sender namespace says so; after `restart()` the same
addresses carry TCP again (needs root, iproute2 and /dev/net/tun; skipped otherwise)."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import pytest

from prfaas.transfer.linkemu import (
    EmulatedLink,
    EmulatedLinkSpec,
    RouteProbe,
    emulated_link,
    socket_in_netns,
    unavailable_reason,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(params=[False, True], ids=["both-ways", "return-path"])
def delayed_link(request: pytest.FixtureRequest) -> Iterator[EmulatedLink]:
    spec = EmulatedLinkSpec(100e6, one_way_delay_s=0.002, delay_return_path_only=request.param)
    reason = unavailable_reason(spec)
    if reason is not None:
        pytest.skip(reason)
    with emulated_link(spec) as link:
        yield link


def _echo_once(link: EmulatedLink) -> bytes:
    """One TCP round trip from the sender namespace to a listener in the receiver's."""
    with socket_in_netns(link.receiver_netns) as server:
        server.bind((link.receiver_ip, 0))
        server.listen(1)
        port = server.getsockname()[1]
        with socket_in_netns(link.sender_netns) as client:
            client.settimeout(10)
            client.connect((link.receiver_ip, port))
            peer, _ = server.accept()
            with peer:
                client.sendall(b"ping")
                return peer.recv(4)


def test_a_killed_delay_line_cuts_the_link_and_a_restart_mends_it(
    delayed_link: EmulatedLink,
) -> None:
    line = delayed_link.delay_line
    assert line is not None
    probe = RouteProbe(delayed_link.sender_netns, delayed_link.receiver_ip)
    try:
        assert probe.has_route() and _echo_once(delayed_link) == b"ping"
        line.process.send_signal(signal.SIGKILL)
        line.process.wait(timeout=30)
        # both ways: the data path went with the process (return path only: the veth
        # still carries data, and replies take it too, undelayed)
        assert probe.has_route() is delayed_link.spec.delay_return_path_only
        line.restart()
        assert line.process.poll() is None
        assert probe.has_route() and _echo_once(delayed_link) == b"ping"
    finally:
        probe.close()
