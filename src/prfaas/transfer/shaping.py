"""Transports that shape a link in user space or route it through network namespaces.

The PrfaaS -> PD link is emulated on one host in one of two ways (`serve.config`'s `LinkSpec`),
and `transfer.shipping` picks the transports here from an instance's `ShippingPlan`:

- kernel: `prfaas up` built two network namespaces joined by a tbf-shaped veth pair, or a TUN
  pair with the user-space `delayline` between them when the RTT is not 0 (`linkemu`). Decode
  instances listen twice: on their host address (PD-P) and in the receiver namespace
  (`DualListenTransport`); PrfaaS senders open sockets in the sender namespace and reach a
  decode instance's `host:transfer_port` at `receiver_ip:transfer_port` (`RoutedTransport`).
  No token bucket, no user-space write delay: the kernel does both.

      prfaas-prefill ─socket in ns "<id>s"─► tbf ─veth/TUN(+delay)─► ns "<id>r" ─► pd-decode
      pd-prefill     ─host network───────────────────────────────────────────────► pd-decode

  Every PD instance (pd-prefill too: the router may flip it to pd-decode) listens both ways
  and connects over the host network, so a flip needs no new socket.

- token-bucket: the sender's token bucket caps the rate (`TransferConfig.rate_limit_bytes_per_s`)
  and `DelayedTransport` holds every write for the link's RTT before it reaches the socket, in
  order (a one-way delay of a full RTT on the data direction: ACKs come back undelayed, so a
  transfer's completion sees one RTT, as on a real link).

Pure transport wrappers over `transfer.transport`: no knowledge of deployments or roles.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping, Sequence

from prfaas.transfer.errors import ConnectionLostError
from prfaas.transfer.telemetry import TcpInfo
from prfaas.transfer.transport import (
    BeforeSend,
    Buffer,
    Connection,
    ConnectionHandler,
    Digest,
    Listener,
    PeerAddress,
    Transport,
)


class _DelayedConnection:
    """Writes reach the inner connection `delay_s` after they were made, in order."""

    def __init__(self, inner: Connection, delay_s: float) -> None:
        self._inner = inner
        self._delay_s = delay_s
        self._queue: asyncio.Queue[tuple[float, list[bytes]]] = asyncio.Queue()
        self._error: BaseException | None = None
        self._pump = asyncio.get_running_loop().create_task(self._run())

    @property
    def peer_name(self) -> str:
        return self._inner.peer_name

    async def write(self, parts: Sequence[Buffer], before_send: BeforeSend | None = None) -> None:
        if self._error is not None:
            raise ConnectionLostError(f"{self.peer_name}: {self._error}")
        if before_send is not None:  # the parts are copied now: they must be complete
            before_send()
        due = asyncio.get_running_loop().time() + self._delay_s
        self._queue.put_nowait((due, [bytes(p) for p in parts]))

    async def read_into(self, view: memoryview, digest: Digest | None = None) -> None:
        await self._inner.read_into(view, digest)

    async def readv_into(self, views: Sequence[memoryview], digest: Digest | None = None) -> None:
        for view in views:
            await self.read_into(view, digest)

    def tcp_info(self) -> TcpInfo | None:
        return self._inner.tcp_info()

    def close(self) -> None:
        self._pump.cancel()
        self._inner.close()

    def abort(self) -> None:
        self._pump.cancel()
        self._inner.abort()

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            due, parts = await self._queue.get()
            wait_s = due - loop.time()
            if wait_s > 0:
                await asyncio.sleep(wait_s)
            try:
                await self._inner.write(parts)
            except Exception as err:  # the reader side reports the loss
                self._error = err
                with contextlib.suppress(Exception):
                    self._inner.abort()
                return


class DelayedTransport:
    """A `Transport` whose outgoing connections add `delay_s` to every write."""

    def __init__(self, inner: Transport, delay_s: float) -> None:
        self._inner = inner
        self._delay_s = delay_s

    async def connect(self, address: PeerAddress) -> Connection:
        conn = await self._inner.connect(address)
        if self._delay_s <= 0:
            return conn
        return _DelayedConnection(conn, self._delay_s)

    async def listen(self, address: PeerAddress, handler: ConnectionHandler) -> Listener:
        return await self._inner.listen(address, handler)


class RoutedTransport:
    """Connects to the addresses in `routes` through `shaped` (at the routed address), to every
    other address through `direct`; listens through `direct`."""

    def __init__(
        self, routes: Mapping[PeerAddress, PeerAddress], shaped: Transport, direct: Transport
    ) -> None:
        self._routes = dict(routes)
        self._shaped = shaped
        self._direct = direct

    async def connect(self, address: PeerAddress) -> Connection:
        routed = self._routes.get(address)
        if routed is None:
            return await self._direct.connect(address)
        return await self._shaped.connect(routed)

    async def listen(self, address: PeerAddress, handler: ConnectionHandler) -> Listener:
        return await self._direct.listen(address, handler)


class _BothListeners:
    def __init__(self, primary: Listener, secondary: Listener) -> None:
        self._primary = primary
        self._secondary = secondary

    @property
    def address(self) -> PeerAddress:
        return self._primary.address

    async def close(self) -> None:
        await self._secondary.close()
        await self._primary.close()


class DualListenTransport:
    """Listens on the given address through `direct` and on the same port at `shaped_host`
    through `shaped` (one handler for both); connects through `direct`."""

    def __init__(self, direct: Transport, shaped: Transport, shaped_host: str) -> None:
        self._direct = direct
        self._shaped = shaped
        self._shaped_host = shaped_host

    async def connect(self, address: PeerAddress) -> Connection:
        return await self._direct.connect(address)

    async def listen(self, address: PeerAddress, handler: ConnectionHandler) -> Listener:
        primary = await self._direct.listen(address, handler)
        shaped_address = PeerAddress(self._shaped_host, primary.address.port)
        try:
            secondary = await self._shaped.listen(shaped_address, handler)
        except BaseException:
            await primary.close()
            raise
        return _BothListeners(primary, secondary)
