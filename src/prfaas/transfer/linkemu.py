"""Emulated inter-cluster links for tests, demos and benchmarks: real kernel shaping on Linux.

    emulated_link(EmulatedLinkSpec(rate_bits_per_s=1e9))
        veth pair, tbf each way
    emulated_link(EmulatedLinkSpec(rate_bits_per_s=1e9, one_way_delay_s=0.01))
        TUN pair joined by the user-space `delayline` (20 ms RTT), tbf each way
    emulated_link(EmulatedLinkSpec(..., one_way_delay_s=0.01, delay_return_path_only=True))
        veth pair for data, the whole 20 ms on the return path (fast; benchmarks)

    ns "<id>s" (sender)  10.213.X.1  ──tbf──►  link  ──tbf──►  10.213.X.2  ns "<id>r" (receiver)

Both namespaces are made fresh and deleted on exit, even when the body raises. Sockets are
placed in a namespace by `socket_factory`, which opens them from a short-lived thread that has
entered the namespace (network namespaces are per thread), so one process can hold both ends.
tbf counts whole packets (headers included), hence the jumbo default MTU: 9,000-byte packets
carry 99.3% payload, so goodput can approach the shaped rate (1,500-byte packets: 95.7%).
Needs root and iproute2; `unavailable_reason()` says why it cannot run, for clean skips.

A delayed link's `delay_line` is its user-space process (`DelayLine`): the TUN devices, and
with them the link's addresses and routes, live only as long as it does, so its owner
watches it and `restart()`s it (`prfaas up`'s supervisor). `RouteProbe` tells from inside a
namespace whether the link is there now (a route to the far address).
"""

from __future__ import annotations

import functools
import os
import secrets
import shutil
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from typing import TypeVar

from prfaas.transfer.delayline import enter_netns
from prfaas.transfer.errors import LinkEmulationError
from prfaas.transfer.transport import PeerAddress, SocketFactory

T = TypeVar("T")

DEFAULT_MTU_BYTES = 9000
TBF_LATENCY_MS = 50
# Both hosts are tuned as inter-cluster transfer hosts are (long fat network): socket buffers
# may grow to 64 MiB (a 5 Gbit/s x 20 ms path needs 12.5 MB in flight, the kernel default caps
# one connection at 4 MiB), and a connection idle between two transfers keeps its congestion
# window instead of slow-starting again (persistent links carry bursty per-request traffic).
HOST_SYSCTLS = {
    "net/ipv4/tcp_rmem": "4096 131072 67108864",
    "net/ipv4/tcp_wmem": "4096 16384 67108864",
    "net/ipv4/tcp_slow_start_after_idle": "0",
}


@dataclass(frozen=True, slots=True)
class EmulatedLinkSpec:
    """What an emulated link is built with: rate, one-way delay, MTU. (The deployment file's
    `link:` block is `serve.config`'s `LinkSpec`; the launcher builds one of these from it.)"""

    rate_bits_per_s: float
    one_way_delay_s: float = 0.0
    mtu_bytes: int = DEFAULT_MTU_BYTES
    # Same RTT, but the whole of it on the return path: data never crosses the user-space
    # delay line (fast), yet lands one_way_delay_s early. For goodput benchmarks; see
    # `_return_path_delayed`.
    delay_return_path_only: bool = False


@dataclass(frozen=True, slots=True)
class EmulatedLink:
    spec: EmulatedLinkSpec
    sender_netns: str
    receiver_netns: str
    sender_ip: str
    receiver_ip: str
    # The sender's data device (its egress tbf counts every byte the link carries forward).
    sender_device: str
    # The user-space delay process, when the link has one (its owner supervises it).
    delay_line: DelayLine | None = field(default=None, compare=False)

    def sender_sockets(self) -> SocketFactory:
        return lambda: socket_in_netns(self.sender_netns)

    def receiver_sockets(self) -> SocketFactory:
        return lambda: socket_in_netns(self.receiver_netns)

    def receiver_address(self, port: int) -> PeerAddress:
        return PeerAddress(self.receiver_ip, port)


def unavailable_reason(spec: EmulatedLinkSpec | None = None) -> str | None:
    """Why an emulated link cannot be built here, or None when it can."""
    if sys.platform != "linux":
        return "link emulation needs Linux network namespaces"
    if os.geteuid() != 0:
        return "link emulation needs root (ip netns, tc)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"link emulation needs `{tool}` (Debian package iproute2)"
    if spec is not None and spec.one_way_delay_s > 0 and not os.path.exists("/dev/net/tun"):
        return "emulated delay needs /dev/net/tun"
    return None


def socket_in_netns(netns: str) -> socket.socket:
    """A TCP socket that lives in network namespace `netns`."""
    return _in_netns(
        netns, "open a socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    )


DISCARD_PORT = 9


class RouteProbe:
    """Whether namespace `netns` has a route to `address` now: the connect of a UDP socket
    made in it (a route lookup, no packet sent). A killed delay line takes its TUN devices,
    their addresses and their routes with it: no route until it is restarted."""

    def __init__(self, netns: str, address: str) -> None:
        udp = functools.partial(socket.socket, socket.AF_INET, socket.SOCK_DGRAM)
        self._sock = _in_netns(netns, "open a socket", udp)
        self._address = address

    def has_route(self) -> bool:
        try:
            self._sock.connect((self._address, DISCARD_PORT))
        except OSError:
            return False
        return True

    def close(self) -> None:
        self._sock.close()


def _write_sysctls(netns: str, values: dict[str, str]) -> None:
    """Write /proc/sys entries inside `netns` (/proc/sys/net is per network namespace)."""

    def write() -> None:
        for name, value in values.items():
            with open(f"/proc/sys/{name}", "w") as f:
                f.write(value)

    _in_netns(netns, "set sysctls", write)


def _in_netns(netns: str, what: str, work: Callable[[], T]) -> T:
    """`work()` on a short-lived thread that has entered `netns`: setns moves only the calling
    thread, so the caller's own namespace never changes."""
    done: list[T] = []
    failed: list[OSError] = []

    def run() -> None:
        try:
            enter_netns(netns)
            done.append(work())
        except OSError as exc:
            failed.append(exc)

    thread = threading.Thread(target=run, name=f"netns-{netns}")
    thread.start()
    thread.join()
    if failed:
        raise LinkEmulationError(f"cannot {what} in {netns}: {failed[0]}")
    return done[0]


def _ip(*args: str) -> None:
    result = subprocess.run(args, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise LinkEmulationError(f"`{' '.join(args)}` failed: {result.stderr.strip()}")


def _shape(netns: str, device: str, spec: EmulatedLinkSpec) -> None:
    """tbf at the spec's rate; the bucket holds a few packets or 1 ms of traffic, whichever is
    more, so high rates are not throttled by timer granularity."""
    burst_bytes = max(4 * spec.mtu_bytes, int(spec.rate_bits_per_s / 8 / 1000))
    _ip("tc", "-n", netns, "qdisc", "add", "dev", device, "root", "tbf",
        "rate", f"{int(spec.rate_bits_per_s)}bit", "burst", str(burst_bytes),
        "latency", f"{TBF_LATENCY_MS}ms")  # fmt: skip


def _veth(link: EmulatedLink, prefix: str) -> None:
    a, b = f"{prefix}a", f"{prefix}b"
    _ip("ip", "link", "add", a, "type", "veth", "peer", "name", b)
    ends = [(link.sender_netns, a, link.sender_ip), (link.receiver_netns, b, link.receiver_ip)]
    for netns, dev, ip in ends:
        _ip("ip", "link", "set", dev, "netns", netns)
        _ip("ip", "-n", netns, "addr", "add", f"{ip}/24", "dev", dev)
        _ip("ip", "-n", netns, "link", "set", dev, "mtu", str(link.spec.mtu_bytes), "up")
        _shape(netns, dev, link.spec)


class DelayLine:
    """The `delayline` process owning TUN devices `tun_s` (sender ns) and `tun_r` (receiver
    ns), and how to set them up: the devices (with their addresses, routes and tbf) vanish
    with the process, so `restart()` starts it again and runs `configure` again.

        start() -> running (process.poll() is None) -> killed: the link is cut
                -> restart(): the same devices, addresses and shaping again
    """

    def __init__(
        self,
        link: EmulatedLink,
        tuns: tuple[str, str],
        delay_s: float,
        configure: Callable[[], None],
    ) -> None:
        self._argv = [
            sys.executable, "-m", "prfaas.transfer.delayline",
            link.sender_netns, tuns[0], link.receiver_netns, tuns[1], str(delay_s),
        ]  # fmt: skip
        self._configure = configure
        self._process: subprocess.Popen[str] | None = None

    @property
    def process(self) -> subprocess.Popen[str]:
        assert self._process is not None, "the delay line was never started"
        return self._process

    def start(self) -> None:
        """The process up with its TUN devices, then the devices configured."""
        self._process = subprocess.Popen(
            self._argv,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            start_new_session=True,  # the terminal's Ctrl-C is for its owner, who stops it
        )  # fmt: skip
        assert self._process.stdout is not None
        if self._process.stdout.readline().strip() != "ready":
            raise LinkEmulationError("the delay line did not start")
        try:
            self._configure()
        except BaseException:
            self.stop()  # a line half set up is no line: its owner sees it exited
            raise

    def restart(self) -> None:
        """Start it again (after it exited): the link is back as it was built."""
        self.stop()
        self.start()

    def stop(self) -> None:
        if self._process is not None:
            _stop(self._process)


def _start_delay_line(
    link: EmulatedLink,
    tuns: tuple[str, str],
    delay_s: float,
    configure: Callable[[], None],
    stack: ExitStack,
) -> DelayLine:
    line = DelayLine(link, tuns, delay_s, configure)
    stack.callback(line.stop)
    line.start()
    return line


def _tun_pair(link: EmulatedLink, prefix: str, stack: ExitStack) -> DelayLine:
    """Both directions through the delay line, each held one_way_delay_s: faithful one-way
    timing (KV lands one_way_delay_s after it leaves), but every data packet crosses user
    space, which caps the rate at what one Python process forwards (through a 5 Gbit/s link,
    iperf3 got 1.3-3.6 Gbit/s on the 2-core development host)."""
    a, b = f"{prefix}a", f"{prefix}b"

    def configure() -> None:
        ends = [
            (link.sender_netns, a, link.sender_ip, link.receiver_ip),
            (link.receiver_netns, b, link.receiver_ip, link.sender_ip),
        ]
        for netns, dev, ip, peer in ends:
            _ip("ip", "-n", netns, "addr", "add", ip, "peer", peer, "dev", dev)
            _ip("ip", "-n", netns, "link", "set", dev, "mtu", str(link.spec.mtu_bytes), "up")
            _shape(netns, dev, link.spec)

    return _start_delay_line(link, (a, b), link.spec.one_way_delay_s, configure, stack)


def _return_path_delayed(link: EmulatedLink, prefix: str, stack: ExitStack) -> DelayLine:
    """The shaped veth pair for data, plus a return path through the delay line holding every
    packet for the whole round trip (2 x one_way_delay_s).

    TCP reacts to the round-trip time only: where on the path the delay sits matters neither
    to the congestion window nor to the RTT the kernel measures. Delaying the return path
    alone keeps the bulk data off the user-space delay line, which only sees ACKs and the
    receiver's small frames, so goodput through the link can be measured at gigabit rates.
    What it changes: data lands at once and the reply takes the whole RTT, so the receiver
    sees a transfer one_way_delay_s early (a sender still sees completion one RTT after its
    last byte). Hence opt-in (`EmulatedLinkSpec.delay_return_path_only`), for goodput measurements.

        ns "<id>s"  veth ──tbf──► veth  ns "<id>r"       data: shaped, not delayed
                    tun  ◄──── delay ◄── tun ◄─tbf─       return path (route to the sender's
                                                          address): shaped, held 2 x delay
    """
    _veth(link, prefix)
    tun_s, tun_r = f"{prefix}x", f"{prefix}y"

    def configure() -> None:
        mtu = str(link.spec.mtu_bytes)
        # The sender accepts the receiver's packets on the TUN, not on the veth it sends from.
        rp_filter = {f"net/ipv4/conf/{n}/rp_filter": "0" for n in ("all", tun_s)}
        _write_sysctls(link.sender_netns, rp_filter)
        _ip("ip", "-n", link.sender_netns, "link", "set", tun_s, "mtu", mtu, "up")
        _ip("ip", "-n", link.receiver_netns, "link", "set", tun_r, "mtu", mtu, "up")
        _ip("ip", "-n", link.receiver_netns, "route", "add", f"{link.sender_ip}/32", "dev", tun_r)
        _shape(link.receiver_netns, tun_r, link.spec)

    delay_s = 2 * link.spec.one_way_delay_s
    return _start_delay_line(link, (tun_s, tun_r), delay_s, configure, stack)


def _stop(process: subprocess.Popen[str]) -> None:
    assert process.stdin is not None
    process.stdin.close()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


@contextmanager
def emulated_link(spec: EmulatedLinkSpec) -> Iterator[EmulatedLink]:
    """Two fresh namespaces joined by a shaped (and optionally delayed) link; removed on exit."""
    reason = unavailable_reason(spec)
    if reason is not None:
        raise LinkEmulationError(reason)
    prefix = f"pf{secrets.token_hex(3)}"
    subnet = f"10.213.{secrets.randbelow(250) + 1}"
    link = EmulatedLink(
        spec, f"{prefix}s", f"{prefix}r", f"{subnet}.1", f"{subnet}.2", f"{prefix}a"
    )
    with ExitStack() as stack:
        for netns in (link.sender_netns, link.receiver_netns):
            _ip("ip", "netns", "add", netns)
            stack.callback(subprocess.run, ["ip", "netns", "del", netns], check=False)
            _ip("ip", "-n", netns, "link", "set", "lo", "up")
            _write_sysctls(netns, HOST_SYSCTLS)
        if spec.one_way_delay_s > 0 and spec.delay_return_path_only:
            link = replace(link, delay_line=_return_path_delayed(link, prefix, stack))
        elif spec.one_way_delay_s > 0:
            link = replace(link, delay_line=_tun_pair(link, prefix, stack))
        else:
            _veth(link, prefix)
        yield link
