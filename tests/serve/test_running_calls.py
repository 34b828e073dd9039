"""`POST /cancel` ends a prefill call in progress (`serve.instance.running_calls`).

A non-streamed call runs on when its caller leaves (Starlette does not cancel it), so the
router's `/cancel` is what stops a prefill whose client left: the call's task is cancelled
(its `finally` and `except` blocks run: the transfer is aborted, the engine work dropped)
and it answers 409. A cancellation of the caller itself (shutdown) still propagates, and a
call whose `/cancel` came first is refused before it runs.
"""

from __future__ import annotations

import asyncio

import pytest

from prfaas.serve.errors import ConflictError
from prfaas.serve.instance.running_calls import RunningCalls


def test_cancel_ends_the_call_and_it_answers_409_after_cleaning_up() -> None:
    calls = RunningCalls()
    cleaned: list[str] = []

    started = asyncio.Event()

    async def prefill() -> str:
        started.set()
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.append("transfer aborted")
        return "never"

    async def run() -> None:
        call = asyncio.create_task(calls.run("r1", prefill()))
        await started.wait()
        assert len(calls) == 1 and calls.cancel("r1")
        with pytest.raises(ConflictError, match="r1 was cancelled"):
            await call
        assert len(calls) == 0 and not calls.cancel("r1")  # idempotent

    asyncio.run(run())
    assert cleaned == ["transfer aborted"]


def test_a_cancelled_caller_still_sees_its_cancellation() -> None:
    calls = RunningCalls()

    async def run() -> None:
        call = asyncio.create_task(calls.run("r1", asyncio.Event().wait()))
        await asyncio.sleep(0)
        call.cancel()
        with pytest.raises(asyncio.CancelledError):
            await call
        assert len(calls) == 0

    asyncio.run(run())


def test_a_second_call_for_a_running_request_is_refused() -> None:
    calls = RunningCalls()

    async def run() -> None:
        first = asyncio.create_task(calls.run("r1", asyncio.Event().wait()))
        await asyncio.sleep(0)
        with pytest.raises(ConflictError, match="running already"):
            await calls.run("r1", asyncio.sleep(0))
        first.cancel()

    asyncio.run(run())


def test_a_call_whose_cancel_came_first_is_refused_and_never_runs() -> None:
    """`/cancel` overtook its `/prefill` (they come on different connections)."""
    calls = RunningCalls()
    ran: list[str] = []

    async def prefill() -> None:
        ran.append("prefill")

    async def run() -> None:
        assert not calls.cancel("r1")
        with pytest.raises(ConflictError, match="r1 was cancelled"):
            await calls.run("r1", prefill())
        await calls.run("r2", prefill())  # other requests run

    asyncio.run(run())
    assert ran == ["prefill"]
