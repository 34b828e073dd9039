"""Two datacenters on one Linux host: network namespaces as hosts, a shaped veth as the WAN.

    DC 0 "prfaas"  10.N.1.0/24                       DC 1 "pd"  10.N.2.0/24
    host ns ──veth──┐                                  ┌──veth── host ns
    host ns ──veth──┤ br0 .1   gateway ns   gateway ns  br0 .1 ├──veth── host ns
                    └────────  wan 10.N.0.1 ══tbf══ 10.N.0.2 wan ────────┘
                               tun ◄── delay line (2 x one-way delay) ◄── tun
                                      (the return path, DC 1 -> DC 0)

Every host is a namespace of its own with one address (`add_host`); the hosts of a
datacenter share a bridge in its gateway namespace, which routes to the other datacenter
over the WAN: a veth pair with tbf at the WAN rate on both ends, and the round trip added in
user space the way the transfer benchmarks add it (`transfer.linkemu`'s return-path delay
line: data crosses the veth at the shaped rate, the return path is held for the whole RTT).
`cut_wan` makes both gateways drop everything for the other side (blackhole routes: a
silent cut, nothing is refused) and `restore_wan` puts the routes back (and restarts the
delay line if it was killed: without it the return path is gone, a cut too).

Processes run in a host with `ip netns exec` (`start`), which also mounts the host's own
/etc/hosts (written by `resolve`: the names the cluster DNS would answer), and in a UTS
namespace of the host's own whose host name is the host's (`unshare --uts`), as Kubernetes
gives each pod its pod name: a router replica's id (`serve.router.lease.replica_id`) starts
with its pod's name, not with this machine's. A thread of the
caller joins a host with `enter` (setns moves one thread only), so a test's HTTP client can
sit in a host of its own. `close` (always run by `open_testbed`) kills every process in the
bed's namespaces, stops the delay line, deletes the namespaces (their veths go with them)
and the hosts files; `leftovers` says what is still there (nothing, after `close`).

Namespaces are named `pftb<6 hex>-<n>`, fresh per bed, so two beds (or a running `prfaas up`,
whose namespaces are `pf<6 hex>s`/`r`) never share one; addresses live only inside the bed's
own namespaces, so they collide with nothing outside it. Needs root, `ip`, `tc` and
`unshare` (`unavailable_reason`).
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from prfaas.transfer.delayline import enter_netns
from prfaas.transfer.errors import LinkEmulationError
from prfaas.transfer.linkemu import DelayLine, EmulatedLink, EmulatedLinkSpec
from prfaas.transfer.linkemu import unavailable_reason as link_unavailable_reason

NETNS_ETC = Path("/etc/netns")
PREFIX = "pftb"
# A process's own UTS namespace named after its host: `sh -c SCRIPT <host name> argv...`
OWN_HOST_NAME = ("unshare", "--uts", "--", "sh", "-c", 'hostname "$0" && exec "$@"')
STOP_TIMEOUT_S = 5.0
# The gateway's sysctls: it forwards, and DC 0's takes the return path on the TUN although
# its route to DC 1 is the veth (reverse-path filtering off).
GATEWAY_SYSCTLS = {
    "net/ipv4/ip_forward": "1",
    "net/ipv4/conf/all/rp_filter": "0",
    "net/ipv4/conf/default/rp_filter": "0",
}


@dataclass(frozen=True, slots=True)
class WanSpec:
    """The link between the datacenters: its rate, one-way delay and MTU (every device of
    the bed takes the MTU: jumbo frames, so tbf's per-packet count costs little goodput)."""

    rate_bits_per_s: float
    one_way_delay_s: float = 0.0
    mtu_bytes: int = 9000


@dataclass(frozen=True, slots=True)
class Host:
    name: str
    netns: str
    address: str
    datacenter: int  # 0 or 1


def unavailable_reason(wan: WanSpec | None = None) -> str | None:
    """Why a test bed cannot be built here (root, iproute2, /dev/net/tun), or None."""
    delay_s = 0.0 if wan is None else wan.one_way_delay_s
    if shutil.which("unshare") is None:
        return "no `unshare` (util-linux): a host's processes get their own host name with it"
    return link_unavailable_reason(EmulatedLinkSpec(1e9, one_way_delay_s=delay_s))


def _run(*argv: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise LinkEmulationError(f"`{' '.join(argv)}` failed: {result.stderr.strip()}")


def _sysctls(netns: str, values: Mapping[str, str]) -> None:
    for name, value in values.items():
        _run("ip", "netns", "exec", netns, "sysctl", "-qw", f"{name.replace('/', '.')}={value}")


class Testbed:
    """One bed (module docstring); build it with `open_testbed`, which closes it."""

    def __init__(self, wan: WanSpec, log_dir: Path) -> None:
        self.wan = wan
        self.tag = f"{PREFIX}{secrets.token_hex(3)}"
        self.octet = 100 + secrets.randbelow(100)  # 10.N: for reading logs, not for safety
        self.log_dir = log_dir
        self.hosts: dict[str, Host] = {}
        self.processes: list[subprocess.Popen[bytes]] = []
        self._namespaces: list[str] = []
        self._inodes: set[int] = set()  # the namespaces' identities, outliving their names
        self._delay_line: DelayLine | None = None

    # --- building ---------------------------------------------------------------------------

    def _netns(self) -> str:
        name = f"{self.tag}-{len(self._namespaces)}"
        _run("ip", "netns", "add", name)
        self._namespaces.append(name)
        self._inodes.add(os.stat(f"/run/netns/{name}").st_ino)
        _run("ip", "-n", name, "link", "set", "lo", "up")
        return name

    def gateway(self, datacenter: int) -> str:
        return f"{self.tag}-{datacenter}"

    def subnet(self, datacenter: int) -> str:
        return f"10.{self.octet}.{datacenter + 1}"

    def build(self) -> None:
        """Both gateways with their bridges, the WAN between them, routes both ways."""
        mtu = str(self.wan.mtu_bytes)
        for dc in (0, 1):
            gw = self._netns()
            _sysctls(gw, GATEWAY_SYSCTLS)
            _run("ip", "-n", gw, "link", "add", "br0", "mtu", mtu, "type", "bridge")
            _run("ip", "-n", gw, "addr", "add", f"{self.subnet(dc)}.1/24", "dev", "br0")
            _run("ip", "-n", gw, "link", "set", "br0", "up")
        gw0, gw1 = self.gateway(0), self.gateway(1)
        _run("ip", "-n", gw0, "link", "add", "wan", "type", "veth", "peer", "name", "wan",
             "netns", gw1)  # fmt: skip
        for dc, gw in ((0, gw0), (1, gw1)):
            _run("ip", "-n", gw, "addr", "add", f"10.{self.octet}.0.{dc + 1}/30", "dev", "wan")
            _run("ip", "-n", gw, "link", "set", "wan", "mtu", mtu, "up")
            self._shape(gw, "wan")
        if self.wan.one_way_delay_s > 0:
            self._delay_line = self._return_path()
        self._route_wan()

    def _shape(self, netns: str, device: str) -> None:
        """tbf at the WAN rate (as `linkemu` shapes: a few packets or 1 ms of burst)."""
        rate = self.wan.rate_bits_per_s
        burst_bytes = max(4 * self.wan.mtu_bytes, int(rate / 8 / 1000))
        _run("tc", "-n", netns, "qdisc", "add", "dev", device, "root", "tbf", "rate",
             f"{int(rate)}bit", "burst", str(burst_bytes), "latency", "50ms")  # fmt: skip

    def _return_path(self) -> DelayLine:
        """DC 1 -> DC 0 through a TUN pair held by the delay line for the whole round trip."""
        gw0, gw1 = self.gateway(0), self.gateway(1)
        spec = EmulatedLinkSpec(self.wan.rate_bits_per_s, self.wan.one_way_delay_s)
        link = EmulatedLink(spec, gw0, gw1, "", "", "wan")

        def configure() -> None:
            for gw in (gw0, gw1):
                _sysctls(gw, {"net/ipv4/conf/tun/rp_filter": "0"})
                _run("ip", "-n", gw, "link", "set", "tun", "mtu", str(self.wan.mtu_bytes), "up")
            self._shape(gw1, "tun")

        line = DelayLine(link, ("tun", "tun"), 2 * self.wan.one_way_delay_s, configure)
        line.start()
        return line

    def _route_wan(self) -> None:
        """Each gateway's route to the other datacenter (replacing a cut's blackhole)."""
        gw0, gw1 = self.gateway(0), self.gateway(1)
        _run("ip", "-n", gw0, "route", "replace", f"{self.subnet(1)}.0/24",
             "via", f"10.{self.octet}.0.2")  # fmt: skip
        back = ["dev", "tun"] if self._delay_line else ["via", f"10.{self.octet}.0.1"]
        _run("ip", "-n", gw1, "route", "replace", f"{self.subnet(0)}.0/24", *back)

    def add_host(self, name: str, datacenter: int) -> Host:
        """A host in `datacenter` (0 or 1): a namespace with one address on its bridge."""
        if name in self.hosts:
            raise LinkEmulationError(f"host {name} exists already")
        netns = self._netns()
        number = 10 + sum(h.datacenter == datacenter for h in self.hosts.values())
        address = f"{self.subnet(datacenter)}.{number}"
        gw, port = self.gateway(datacenter), f"h{len(self._namespaces)}"
        _run("ip", "-n", netns, "link", "add", "eth0", "type", "veth", "peer", "name", port,
             "netns", gw)  # fmt: skip
        _run("ip", "-n", gw, "link", "set", port, "master", "br0", "mtu",
             str(self.wan.mtu_bytes), "up")  # fmt: skip
        _run("ip", "-n", netns, "addr", "add", f"{address}/24", "dev", "eth0")
        _run("ip", "-n", netns, "link", "set", "eth0", "mtu", str(self.wan.mtu_bytes), "up")
        _run("ip", "-n", netns, "route", "add", "default", "via", f"{self.subnet(datacenter)}.1")
        host = Host(name, netns, address, datacenter)
        self.hosts[name] = host
        return host

    def resolve(self, names: Mapping[str, str]) -> None:
        """Every host's /etc/hosts (under `ip netns exec`): `names` (name -> address), as the
        cluster DNS would answer them, and localhost."""
        lines = ["127.0.0.1 localhost", *(f"{addr} {name}" for name, addr in names.items())]
        for host in self.hosts.values():
            directory = NETNS_ETC / host.netns
            directory.mkdir(parents=True, exist_ok=True)
            (directory / "hosts").write_text("\n".join(lines) + "\n")

    # --- running ----------------------------------------------------------------------------

    def start(
        self, host: Host, argv: Sequence[str], env: Mapping[str, str]
    ) -> subprocess.Popen[bytes]:
        """`argv` in `host` with exactly `env`, its host name `host.name` (module
        docstring); its output in `log_dir/<host>.log`."""
        log: IO[bytes] = (self.log_dir / f"{host.name}.log").open("ab")
        with log:
            process = subprocess.Popen(
                ["ip", "netns", "exec", host.netns, *OWN_HOST_NAME, host.name, *argv],
                env=dict(env), stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                start_new_session=True,  # its own group: `kill` reaches what it forked
            )  # fmt: skip
        self.processes.append(process)
        return process

    @staticmethod
    def kill(process: subprocess.Popen[bytes], sig: signal.Signals = signal.SIGKILL) -> None:
        """Signal `process` and everything it forked (its own process group)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        if sig is signal.SIGKILL:
            process.wait()

    def enter(self, host: Host) -> None:
        """Move the calling thread into `host` (a client thread; see the module docstring)."""
        enter_netns(host.netns)

    def cut_wan(self) -> None:
        """Both gateways drop everything for the other datacenter, silently."""
        for dc in (0, 1):
            other = f"{self.subnet(1 - dc)}.0/24"
            _run("ip", "-n", self.gateway(dc), "route", "replace", "blackhole", other)

    def restore_wan(self) -> None:
        """The WAN as built: the routes, and the delay line restarted if it died (its TUN
        devices, and the return path's route, go with it)."""
        if self._delay_line is not None and self._delay_line.process.poll() is not None:
            self._delay_line.restart()
        self._route_wan()

    @property
    def delay_line(self) -> DelayLine | None:
        return self._delay_line

    # --- tearing down -----------------------------------------------------------------------

    def close(self) -> None:
        """Stop everything the bed holds (module docstring); never raises for what is gone."""
        for process in self.processes:
            self.kill(process, signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.kill(process)
        for netns in self._namespaces:
            for pid in _pids(netns):  # forked by our processes, in our namespaces
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if self._delay_line is not None:
            self._delay_line.stop()
        for netns in reversed(self._namespaces):
            subprocess.run(["ip", "netns", "del", netns], capture_output=True, check=False)
            shutil.rmtree(NETNS_ETC / netns, ignore_errors=True)

    def leftovers(self) -> list[str]:
        """What of this bed is still on the host: namespaces, hosts files, live processes."""
        listed = _output("ip", "netns", "list")
        left = [f"namespace {n}" for n in self._namespaces if n in listed.split()]
        left += [f"hosts file {n}" for n in self._namespaces if (NETNS_ETC / n).exists()]
        left += [f"process {p.pid}" for p in self.processes if p.poll() is None]
        left += [f"process {pid} in a bed namespace" for pid in _pids_in(self._inodes)]
        if self._delay_line is not None and self._delay_line.process.poll() is None:
            left.append("the delay line")
        return left


def _pids(netns: str) -> list[int]:
    return [int(pid) for pid in _output("ip", "netns", "pids", netns).split()]


def _pids_in(inodes: set[int]) -> list[int]:
    """Every process whose network namespace is one of `inodes` (even after `ip netns del`:
    a namespace lives on while a process is in it)."""
    found: list[int] = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.stat(entry / "ns" / "net").st_ino in inodes:
                    found.append(int(entry.name))
    return found


def _output(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, check=False).stdout


@contextlib.contextmanager
def open_testbed(wan: WanSpec, log_dir: Path) -> Iterator[Testbed]:
    """A built bed, closed on the way out whatever happens in the body."""
    reason = unavailable_reason(wan)
    if reason is not None:
        raise LinkEmulationError(reason)
    bed = Testbed(wan, log_dir)
    try:
        bed.build()
        yield bed
    finally:
        bed.close()
