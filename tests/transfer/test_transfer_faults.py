"""Faults: corrupt frames, wrong secret or model, cut connections, stalls, no space.

Each test checks both ends: the sender reports an explicit failure, and the receiver's sink
holds no page afterwards (nothing leaks). Run over the in-memory and the TCP transport.
"""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest
from transfer_helpers import (
    CONFIG,
    IDENTITY,
    TINY_HYBRID,
    FaultyTransport,
    collect,
    make_transport,
    run,
    running_pair,
    wait_until,
)

from prfaas.transfer import (
    AbortReason,
    AuthenticationError,
    ConnectionLostError,
    IncompatiblePeerError,
    OutgoingTransfer,
    PeerIdentity,
    PeerRefused,
    RejectReason,
    RequestId,
    Sender,
    SliceKey,
    TransferAborted,
    TransferAbortedError,
    TransferFailed,
    TransferReceived,
    identity_for,
)

KINDS = ["memory", "tcp"]
BLOB = bytes(range(256)) * 1000  # 256,000 bytes: four 64 KiB frames


async def _send_layers(transfer: OutgoingTransfer, layers: int) -> None:
    for layer in range(layers):
        await transfer.send_slice(SliceKey(layer, 0, 0, 16), "uint8", (len(BLOB),), BLOB)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("part", ["payload", "header"])
def test_corrupt_frame_fails_the_transfer_and_frees_pages(kind: str, part: str) -> None:
    async def scenario() -> None:
        inner = make_transport(kind)
        faulty = FaultyTransport(inner)
        async with running_pair(inner, sender_transport=faulty) as pair:
            transfer = await pair.sender.start_transfer(pair.address, RequestId("bad"))
            await _send_layers(transfer, 1)
            await wait_until(lambda: transfer.acked_bytes == len(BLOB))
            faulty.corrupt_part = part
            await _send_layers(transfer, 1)
            error = TransferAbortedError if part == "payload" else ConnectionLostError
            with pytest.raises(error) as info:
                await transfer.finish()
            if part == "payload":
                assert info.value.reason is AbortReason.CHECKSUM_MISMATCH  # type: ignore[attr-defined]
            (aborted,) = await collect(pair.receiver, 1)
            assert isinstance(aborted, TransferAborted)
            expected = (
                AbortReason.CHECKSUM_MISMATCH
                if part == "payload"
                else AbortReason.PROTOCOL_VIOLATION
            )
            assert aborted.reason is expected
            assert pair.sink.num_free_pages == pair.sink.num_pages
            (failed,) = pair.sender.take_events()
            assert isinstance(failed, TransferFailed)

    run(scenario())


@pytest.mark.parametrize("kind", KINDS)
def test_wrong_secret_is_refused(kind: str) -> None:
    async def scenario() -> None:
        wrong = replace(CONFIG, secret=b"an entirely different secret!!!")
        async with running_pair(make_transport(kind), sender_config=wrong) as pair:
            with pytest.raises(AuthenticationError):
                await pair.sender.start_transfer(pair.address, RequestId("r"))
            refusals = await collect(pair.receiver, 1)
            assert all(isinstance(e, PeerRefused) for e in refusals)
            assert refusals[0].reason is RejectReason.AUTHENTICATION  # type: ignore[union-attr]
            assert pair.receiver.num_active_requests == 0

    run(scenario())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(
    ("identity", "reason"),
    [
        (
            identity_for(replace(TINY_HYBRID, name="other-model"), 16, 1234),
            RejectReason.MODEL_FINGERPRINT,
        ),
        (identity_for(TINY_HYBRID, 32, 1234), RejectReason.BLOCK_SIZE),
        (identity_for(TINY_HYBRID, 16, 1), RejectReason.HASH_SEED),
    ],
)
def test_incompatible_peer_is_refused(
    kind: str, identity: PeerIdentity, reason: RejectReason
) -> None:
    async def scenario() -> None:
        transport = make_transport(kind)
        async with running_pair(transport) as pair:
            sender = Sender(CONFIG, identity, transport)
            with pytest.raises(IncompatiblePeerError) as info:
                await sender.start_transfer(pair.address, RequestId("r"))
            assert info.value.reason is reason
            refusals = await collect(pair.receiver, CONFIG.num_connections)
            assert all(isinstance(e, PeerRefused) for e in refusals)
            await sender.close()

    run(scenario())


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("sender_checks", [True, False])
def test_ends_that_disagree_on_payload_checks_are_refused(kind: str, sender_checks: bool) -> None:
    async def scenario() -> None:
        receiver_config = replace(CONFIG, payload_checks=not sender_checks)
        sender_config = replace(CONFIG, payload_checks=sender_checks)
        async with running_pair(
            make_transport(kind), config=receiver_config, sender_config=sender_config
        ) as pair:
            with pytest.raises(IncompatiblePeerError) as info:
                await pair.sender.start_transfer(pair.address, RequestId("r"))
            assert info.value.reason is RejectReason.PAYLOAD_CHECKS
            refusals = await collect(pair.receiver, CONFIG.num_connections)
            assert all(isinstance(e, PeerRefused) for e in refusals)
            assert pair.receiver.num_active_requests == 0

    run(scenario())


@pytest.mark.parametrize("kind", KINDS)
def test_without_payload_checks_bytes_arrive_and_a_corrupt_payload_goes_unnoticed(
    kind: str,
) -> None:
    """The documented trade of `payload_checks=False`: integrity is left to TCP, so a payload
    corrupted past TCP's checksum (here: before it reaches the socket) is delivered as is."""

    async def scenario() -> None:
        inner = make_transport(kind)
        faulty = FaultyTransport(inner)
        unchecked = replace(CONFIG, payload_checks=False)
        async with running_pair(inner, config=unchecked, sender_transport=faulty) as pair:
            transfer = await pair.sender.start_transfer(pair.address, RequestId("clean"))
            await _send_layers(transfer, 2)
            await transfer.finish()
            faulty.corrupt_part = "payload"
            transfer = await pair.sender.start_transfer(pair.address, RequestId("dirty"))
            await _send_layers(transfer, 1)
            await transfer.finish()
            events = await collect(pair.receiver, 2)
            assert [type(e) for e in events] == [TransferReceived, TransferReceived]
            clean = pair.sink.committed(RequestId("clean"))
            assert all(data == BLOB for _, data in clean.values())
            (dirty,) = pair.sink.committed(RequestId("dirty")).values()
            assert dirty[1] != BLOB and len(dirty[1]) == len(BLOB)

    run(scenario())


@pytest.mark.parametrize("kind", KINDS)
def test_cut_connection_fails_sender_and_frees_every_page(kind: str) -> None:
    async def scenario() -> None:
        inner = make_transport(kind)
        faulty = FaultyTransport(inner)
        async with running_pair(inner, sender_transport=faulty) as pair:
            transfers = [
                await pair.sender.start_transfer(pair.address, RequestId(f"r{i}")) for i in range(3)
            ]
            for transfer in transfers:
                await _send_layers(transfer, 2)
            await wait_until(lambda: all(t.acked_bytes > 0 for t in transfers))
            assert pair.sink.num_free_pages < pair.sink.num_pages
            faulty.cut_all()
            for transfer in transfers:
                with pytest.raises(ConnectionLostError):
                    await transfer.finish()
            events = await collect(pair.receiver, 3)
            assert {e.reason for e in events if isinstance(e, TransferAborted)} == {
                AbortReason.CONNECTION_LOST
            }
            assert pair.sink.num_free_pages == pair.sink.num_pages
            assert pair.receiver.num_active_requests == 0
            # the sender re-handshakes on a fresh link for the next transfer
            again = await pair.sender.start_transfer(pair.address, RequestId("again"))
            await _send_layers(again, 1)
            await again.finish()

    run(scenario())


@pytest.mark.parametrize("kind", KINDS)
def test_stalled_transfer_is_aborted_and_freed(kind: str) -> None:
    config = replace(CONFIG, stall_timeout_s=0.2)

    async def scenario() -> None:
        async with running_pair(make_transport(kind), config=config) as pair:
            transfer = await pair.sender.start_transfer(pair.address, RequestId("slow"))
            await _send_layers(transfer, 1)  # ...and the prefill never produces the rest
            await wait_until(lambda: transfer.is_done)
            with pytest.raises(TransferAbortedError) as info:
                await transfer.finish()
            assert info.value.reason is AbortReason.STALLED
            assert pair.sink.num_free_pages == pair.sink.num_pages

    run(scenario())


@pytest.mark.parametrize("kind", KINDS)
def test_sender_abort_frees_receiver_pages(kind: str) -> None:
    async def scenario() -> None:
        async with running_pair(make_transport(kind)) as pair:
            transfer = await pair.sender.start_transfer(pair.address, RequestId("gone"))
            await _send_layers(transfer, 2)
            await wait_until(lambda: transfer.acked_bytes > 0)
            await transfer.abort("prefill instance preempted")
            (aborted,) = await collect(pair.receiver, 1)
            assert isinstance(aborted, TransferAborted)
            assert aborted.reason is AbortReason.SENDER_ABORTED
            await wait_until(lambda: pair.sink.num_free_pages == pair.sink.num_pages)
            with pytest.raises(TransferAbortedError):
                await transfer.finish()

    run(scenario())


@pytest.mark.parametrize("kind", KINDS)
def test_pages_still_being_written_are_freed_only_when_their_read_ends(kind: str) -> None:
    """An abort processed on one connection while another is mid-payload must not hand those
    pages back yet: a new request could get them and have its KV overwritten."""

    async def scenario() -> None:
        inner = make_transport(kind)
        faulty = FaultyTransport(inner)
        async with running_pair(inner, sender_transport=faulty) as pair:
            gate = asyncio.Event()
            faulty.stall_next_payload = gate
            transfer = await pair.sender.start_transfer(pair.address, RequestId("torn"))
            await _send_layers(transfer, 1)
            await faulty.stalled.wait()
            # The receiver has read the frame's header and is reading its payload into pages.
            await wait_until(lambda: pair.sink.num_free_pages < pair.sink.num_pages)
            await transfer.abort("prefill instance preempted")
            (aborted,) = await collect(pair.receiver, 1)
            assert isinstance(aborted, TransferAborted)
            assert pair.sink.num_free_pages < pair.sink.num_pages  # the landing frame's pages
            gate.set()
            await wait_until(lambda: pair.sink.num_free_pages == pair.sink.num_pages)

    run(scenario())


@pytest.mark.parametrize("kind", KINDS)
def test_out_of_pages_aborts_cleanly(kind: str) -> None:
    async def scenario() -> None:
        async with running_pair(make_transport(kind), sink_bytes=300_000) as pair:
            transfer = await pair.sender.start_transfer(pair.address, RequestId("big"))
            await _send_layers(transfer, 3)
            with pytest.raises(TransferAbortedError) as info:
                await transfer.finish()
            assert info.value.reason is AbortReason.OUT_OF_SPACE
            assert pair.sink.num_free_pages == pair.sink.num_pages
            ok = await pair.sender.start_transfer(pair.address, RequestId("small"))
            await _send_layers(ok, 1)
            await ok.finish()
            events = await collect(pair.receiver, 2)
            assert isinstance(events[-1], TransferReceived)

    run(scenario())


@pytest.mark.parametrize("kind", KINDS)
def test_receiver_close_frees_pages_of_unfinished_requests(kind: str) -> None:
    async def scenario() -> None:
        async with running_pair(make_transport(kind)) as pair:
            transfer = await pair.sender.start_transfer(pair.address, RequestId("r"))
            await _send_layers(transfer, 2)
            await wait_until(lambda: transfer.acked_bytes > 0)
            await pair.receiver.close()
            assert pair.sink.num_free_pages == pair.sink.num_pages
            with pytest.raises((ConnectionLostError, TransferAbortedError)):
                await transfer.finish()

    run(scenario())


def test_identity_of_the_test_model_is_stable() -> None:
    assert identity_for(TINY_HYBRID, 16, 1234) == IDENTITY
    assert len(IDENTITY.model_fingerprint) == 32
