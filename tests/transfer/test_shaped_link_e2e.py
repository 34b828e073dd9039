"""Telemetry against a real kernel-shaped link (tbf in network namespaces; needs root).

Bounds that hold on a loaded 2-core host, not timings: under a link shaped to R and offered
2R, the acknowledged egress cannot read far above R (a 25% margin for bunched
acknowledgements) and must read a real share of it, and the backlog grows. How close to R
it reads is measured in `benchmarks/transfer_bench.py` (shaped mode), not asserted here: a
busy host delays the receiver's acknowledgements and bunches them (2 of 11 runs on an idle
host fell outside 10%).
Each test is bounded to a few seconds and the namespaces are removed even on failure.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import replace

import pytest
from transfer_helpers import CONFIG, IDENTITY, run

from prfaas.transfer import (
    ArraySink,
    LinkSignals,
    Receiver,
    RequestId,
    Sender,
    SliceKey,
    TcpTransport,
)
from prfaas.transfer.linkemu import (
    EmulatedLink,
    EmulatedLinkSpec,
    emulated_link,
    unavailable_reason,
)

pytestmark = pytest.mark.e2e

RATE_BITS_PER_S = 200e6
MIB = 2**20


def _link(spec: EmulatedLinkSpec) -> Iterator[EmulatedLink]:
    reason = unavailable_reason(spec)
    if reason is not None:
        pytest.skip(reason)
    with emulated_link(spec) as link:
        yield link


@pytest.fixture
def shaped_link() -> Iterator[EmulatedLink]:
    yield from _link(EmulatedLinkSpec(rate_bits_per_s=RATE_BITS_PER_S))


@pytest.fixture(params=[False, True], ids=["both-ways", "return-path"])
def delayed_link(request: pytest.FixtureRequest) -> Iterator[EmulatedLink]:
    spec = EmulatedLinkSpec(
        RATE_BITS_PER_S, one_way_delay_s=0.01, delay_return_path_only=request.param
    )
    yield from _link(spec)


async def _overload(link: EmulatedLink, duration_s: float) -> list[LinkSignals]:
    """Offer 2x the shaped rate for `duration_s`, sampling telemetry three times."""
    config = replace(
        CONFIG,
        max_frame_bytes=MIB,
        # Far above the link's bandwidth-delay product plus its queues, so the shaped link and
        # not a late acknowledgement (a busy 2-core host delays the receiver) is the bottleneck.
        max_bytes_in_flight=24 * MIB,
        rate_burst_bytes=MIB,
        telemetry_window_s=1.5,  # smooths over scheduling hiccups of a busy 2-core machine
    )
    sink = ArraySink(160 * MIB, 256 * 1024)
    receiver = Receiver(
        config, IDENTITY, TcpTransport(socket_factory=link.receiver_sockets()), sink
    )
    address = await receiver.start(link.receiver_address(0))
    sender = Sender(config, IDENTITY, TcpTransport(socket_factory=link.sender_sockets()))
    chunk = bytes(MIB)
    offered_bytes_per_s = 2 * RATE_BITS_PER_S / 8
    tick_s = 0.05
    samples: list[LinkSignals] = []
    try:
        transfer = await sender.start_transfer(address, RequestId("flood"))
        loop = asyncio.get_running_loop()
        start_s = loop.time()
        ticks = round(duration_s / tick_s)
        per_tick = round(offered_bytes_per_s * tick_s / MIB)
        for tick in range(1, ticks + 1):
            for i in range(per_tick):
                await transfer.send_slice(SliceKey(tick * 100 + i, 0, 0, 1), "uint8", (MIB,), chunk)
            if tick in (ticks // 2, 3 * ticks // 4, ticks):
                samples.extend(sender.link_signals())
            await asyncio.sleep(max(start_s + tick * tick_s - loop.time(), 0))
        await transfer.abort("test over")
    finally:
        await sender.close()
        await receiver.close()
    assert sink.num_free_pages == sink.num_pages
    return samples


def test_egress_telemetry_matches_the_shaped_rate_and_backlog_grows(
    shaped_link: EmulatedLink,
) -> None:
    samples = run(_overload(shaped_link, duration_s=3.0), timeout_s=30)
    shaped_bytes_per_s = RATE_BITS_PER_S / 8
    ratio = samples[-1].egress_bytes_per_s / shaped_bytes_per_s
    assert 0.25 <= ratio <= 1.25, f"egress reads {ratio:.3f} of the shaped rate: {samples}"
    waiting = [s.bytes_waiting for s in samples]
    assert waiting[0] < waiting[1] < waiting[2], f"backlog did not grow: {waiting}"
    assert samples[-1].rtt_s is not None and samples[-1].retransmitted_segments is not None


def test_rtt_telemetry_sees_the_emulated_delay(delayed_link: EmulatedLink) -> None:
    samples = run(_overload(delayed_link, duration_s=1.0), timeout_s=30)
    min_rtt_s = samples[-1].min_rtt_s
    assert min_rtt_s is not None and min_rtt_s >= 0.019, f"min RTT {min_rtt_s}"
