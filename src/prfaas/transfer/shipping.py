"""One KV shipping path: what an instance ships and receives KV with, built in one place.

Every backend's instance ships KV through the same `Sender`s and `Receiver`: the instance
shell builds them for the torch and emulated backends (`serve.instance.runtime`), the vLLM
connector inside its engine (`integrations.vllm.transfer_io`). Both start from a
`ShippingPlan`, which the shell resolves once from the deployment file
(`serve.kv_shipping.shipping_plan`) and hands the vLLM connector as JSON in its
`kv_connector_extra_config`; `KvEndpoints.build` turns it, the secret and the peer identity
into the endpoints. So one plan decides, for every backend alike:

- the transfer knobs (connections, frame and in-flight sizes, the token bucket's burst);
- TLS around every connection (`tls`: the deployment's files, or plain TCP);
- how the inter-cluster link is shaped: a PrfaaS instance's sends through the token bucket
  and a write delay of one RTT (`send`), or through the kernel-shaped namespaces
  (`sender_netns`, `receiver_netns`; `transfer.shaping`); a PD instance's cache moves, which
  cross the link the other way, through a second sender paced like the link (`move`).

The secret is never in the plan: the plan travels in vLLM's logged config.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prfaas.transfer.config import MIB, TlsConfig, TransferConfig
from prfaas.transfer.linkemu import socket_in_netns
from prfaas.transfer.receiver import Receiver
from prfaas.transfer.sender import Sender
from prfaas.transfer.shaping import DelayedTransport, DualListenTransport, RoutedTransport
from prfaas.transfer.sink import ArraySink
from prfaas.transfer.transport import PeerAddress, TcpTransport, Transport
from prfaas.transfer.wire import PeerIdentity

# Sized for one instance's transfers on a small host: 2 connections per peer, 1 MiB frames,
# 16 MiB in flight (1 Gbit/s x 128 ms of bandwidth-delay product), a one-frame burst.
NUM_CONNECTIONS = 2
MAX_FRAME_BYTES = 1 * MIB
MAX_BYTES_IN_FLIGHT = 16 * MIB
RATE_BURST_BYTES = 1 * MIB


@dataclass(frozen=True, slots=True)
class Pacing:
    """User-space shaping of one sender: a token bucket (None: unpaced) and a delay of every
    write (the link's RTT; 0: none)."""

    rate_bytes_per_s: float | None = None
    delay_s: float = 0.0


@dataclass(frozen=True, slots=True)
class SenderNamespace:
    """A PrfaaS instance on a kernel-shaped link: its connections to the `routed` transfer
    endpoints (host, port) leave from network namespace `netns` and reach each at
    `receiver_ip` on the same port."""

    netns: str
    receiver_ip: str
    routed: tuple[tuple[str, int], ...]


@dataclass(frozen=True, slots=True)
class ReceiverNamespace:
    """A PD instance on a kernel-shaped link: it also listens in network namespace `netns`
    at `ip`, on its transfer port."""

    netns: str
    ip: str


@dataclass(frozen=True, slots=True)
class ShippingPlan:
    """Everything but the secret that an instance's KV endpoints are built from."""

    listen_host: str
    listen_port: int
    payload_checks: bool
    sink_bytes: int
    tls: TlsConfig | None = None
    send: Pacing = field(default_factory=Pacing)  # every transfer this instance sends
    move: Pacing | None = None  # a second sender for cache moves (PD: they cross the link)
    sender_netns: SenderNamespace | None = None
    receiver_netns: ReceiverNamespace | None = None

    def config(self, secret: bytes, pacing: Pacing | None = None) -> TransferConfig:
        """The transfer knobs of a sender paced by `pacing` (the plan's `send` by default)
        or of the receiver, which a token bucket does not touch."""
        paced = self.send if pacing is None else pacing
        return TransferConfig(
            secret=secret,
            num_connections=NUM_CONNECTIONS,
            max_frame_bytes=MAX_FRAME_BYTES,
            max_bytes_in_flight=MAX_BYTES_IN_FLIGHT,
            rate_limit_bytes_per_s=paced.rate_bytes_per_s,
            rate_burst_bytes=RATE_BURST_BYTES,
            payload_checks=self.payload_checks,
        )

    @property
    def listen_address(self) -> PeerAddress:
        return PeerAddress(self.listen_host, self.listen_port)


def endpoint_transport(plan: ShippingPlan) -> Transport:
    """The transport of the main sender and the receiver: the link's end (kernel namespaces
    or a write delay), every TCP connection in TLS when the plan has it."""
    direct = TcpTransport(plan.tls)
    out_ns, in_ns = plan.sender_netns, plan.receiver_netns
    if out_ns is not None:
        shaped = TcpTransport(plan.tls, socket_factory=lambda: socket_in_netns(out_ns.netns))
        routes = {
            PeerAddress(host, port): PeerAddress(out_ns.receiver_ip, port)
            for host, port in out_ns.routed
        }
        return RoutedTransport(routes, shaped, direct)
    if in_ns is not None:
        shaped = TcpTransport(plan.tls, socket_factory=lambda: socket_in_netns(in_ns.netns))
        return DualListenTransport(direct, shaped, in_ns.ip)
    return DelayedTransport(direct, plan.send.delay_s)


@dataclass(slots=True)
class KvEndpoints:
    """One instance's KV endpoints: `sender` for prefills, `move_sender` for cache moves
    (the same sender when the plan has no `move`), `receiver` writing into `sink`.
    Lifecycle: `build`, `listen`, then `close` once."""

    sender: Sender
    move_sender: Sender
    receiver: Receiver
    sink: ArraySink

    @classmethod
    def build(cls, plan: ShippingPlan, secret: bytes, identity: PeerIdentity) -> KvEndpoints:
        transport = endpoint_transport(plan)
        sender = Sender(plan.config(secret), identity, transport)
        move_sender = sender
        if plan.move is not None:
            moves = DelayedTransport(TcpTransport(plan.tls), plan.move.delay_s)
            move_sender = Sender(plan.config(secret, plan.move), identity, moves)
        sink = ArraySink(plan.sink_bytes)
        receiver = Receiver(plan.config(secret, Pacing()), identity, transport, sink)
        return cls(sender, move_sender, receiver, sink)

    async def listen(self, plan: ShippingPlan) -> None:
        """Start the receiver on the plan's address (an `OSError` when the port is taken)."""
        await self.receiver.start(plan.listen_address)

    @property
    def senders(self) -> tuple[Sender, ...]:
        return (
            (self.sender,) if self.move_sender is self.sender else (self.sender, self.move_sender)
        )

    async def close(self) -> None:
        for sender in self.senders:
            await sender.close()
        await self.receiver.close()
