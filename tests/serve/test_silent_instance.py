"""A call to an instance that goes silent (a cut WAN drops its packets: no reset, no answer)
ends when the registry marks the instance down, not at `router.request_timeout_s`
(`serve.router.attempts.unless_down`): the request is then placed again."""

from __future__ import annotations

import asyncio

import pytest

from prfaas.serve.config.deployment import default_deployment
from prfaas.serve.router.attempts import InstanceDown, unless_down
from prfaas.serve.router.registry import LiveInstance


def _instance() -> LiveInstance:
    spec = default_deployment().instance("prfaas-0")
    return LiveInstance(spec, spec.role, is_healthy=True)


def test_a_call_to_an_instance_marked_down_while_it_waits_ends_and_is_cancelled() -> None:
    inst = _instance()
    cancelled = asyncio.Event()

    async def silent() -> str:
        try:
            await asyncio.sleep(3600)  # no answer ever comes
        except asyncio.CancelledError:
            cancelled.set()
            raise
        return "never"

    async def run() -> None:
        waiting = asyncio.ensure_future(unless_down(inst, "prefill", silent()))
        await asyncio.sleep(0)
        inst.went_down.set()  # what `Registry.mark_failed` does when its polls fail
        with pytest.raises(InstanceDown, match="prefill instance prfaas-0 went silent"):
            await waiting
        assert cancelled.is_set()

    asyncio.run(run())


def test_an_answer_before_any_failure_is_returned_and_errors_pass_through() -> None:
    inst = _instance()

    async def answer() -> str:
        return "first token"

    async def broken() -> str:
        raise ConnectionResetError("reset")

    async def run() -> None:
        assert await unless_down(inst, "prefill", answer()) == "first token"
        with pytest.raises(ConnectionResetError):
            await unless_down(inst, "prefill", broken())

    asyncio.run(run())


def test_a_client_that_leaves_cancels_the_call_too() -> None:
    inst = _instance()
    cancelled = asyncio.Event()

    async def silent() -> None:
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.set()
            raise

    async def run() -> None:
        waiting = asyncio.ensure_future(unless_down(inst, "prefill", silent()))
        await asyncio.sleep(0)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert cancelled.is_set() and not inst.went_down.is_set()

    asyncio.run(run())
