"""Telling instances that a request is over without its decode: `POST /cancel`, fire and forget.

The router (`serve.router.flow`) calls `cancel_on` whenever an attempt ends without completing, at
any stage: the client left (its task is being cancelled), or the attempt failed. The calls
run as background tasks held in `tasks` (the caller may be a cancelled task that must not
await), with a short timeout and every transport error ignored: an instance that is down
holds nothing, and the instance side's 60 s lifetime for unclaimed KV (`serve.instance.kv_claims`)
covers a `/cancel` that is lost.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable

from prfaas.serve import protocol as p
from prfaas.serve.router.instance_client import InstanceCallError, InstanceClient

CANCEL_TIMEOUT_S = 5.0


def cancel_on(
    client: InstanceClient, tasks: set[asyncio.Task[None]], request_id: str, urls: Iterable[str]
) -> None:
    """`POST /cancel {request_id}` to every instance base URL in `urls`, once each."""
    body = p.CancelRequest(request_id=request_id)

    async def cancel(url: str) -> None:
        with contextlib.suppress(InstanceCallError, ValueError):
            await client.cancel(url, body, timeout_s=CANCEL_TIMEOUT_S)

    for url in dict.fromkeys(urls):
        task = asyncio.get_running_loop().create_task(cancel(url))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
