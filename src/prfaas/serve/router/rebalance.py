"""The router's long timescale: the scheduler's slow loop run live, and PD role flips.

    every rebalance.period_s   stats = what was observed since the last step (below)
                               actions = scheduler.rebalance(registry.view(now), stats)
                               SetThreshold: the scheduler already uses the new t
                               FlipRole:     flip(instance, role)
    POST /admin/instances/{name}/role {"role": ...}   flip(instance, role) by hand

A flip drains first: the instance is marked draining (the `ClusterView` says not accepting,
so the scheduler places nothing new on it; the instance is told too, `POST /drain`, and says
so in `/state`, so other router replicas stop placing work on it at their next poll), the
router waits until the requests it placed on the instance finished their stage there
(`LiveInstance.inflight` 0) and the instance reports no prefill or decode call in progress,
then asks the instance to switch (`POST /role`), then routes the new role's work to it. A
flip that does not drain within `drain_timeout_s`, or that the instance refuses, is
abandoned: the instance keeps its role and accepts again. One flip at a time (the
scheduler's rule too).

Observed stats, measured as the simulator measures them (`sim.cluster.stage_stats`):

    pd_prefill_utilisation    PD-P seconds with a prefill running (instance-reported) / period
    pd_decode_utilisation     PD-D running decodes / max_batch_size, integrated over the polls
    pd_prefill_queue_s        mean dispatch-ledger prefill seconds queued at the PD-P instances
    decode_waiting_requests   PD-D requests waiting for a batch slot (instance-reported)
    link_capacity_bytes_per_s the link's bandwidth (the `LinkView` the router routes with)

The post-prefix-match lengths are the scheduler's own window (every routed request), and so
are the admission refusals by stage that drive the slow loop in overload (docs/scheduler.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from prfaas.kvcache.ids import InstanceId
from prfaas.planner.model import Cluster, Hardware
from prfaas.scheduler import FlipRole, Role, SetThreshold, StageStats
from prfaas.serve import protocol as p
from prfaas.serve.config.deployment import (
    Deployment,
    InstanceRole,
    InstanceSpec,
    RebalanceSpec,
)
from prfaas.serve.errors import (
    BadRequestError,
    ConflictError,
    ServeError,
    StaleEpochError,
    from_response,
)
from prfaas.serve.profile import LiveProfile
from prfaas.serve.router.instance_client import CallRefused, InstanceCallError
from prfaas.serve.router.lease import TERM_S

if TYPE_CHECKING:
    from prfaas.serve.router.flow import RouterRuntime
    from prfaas.serve.router.registry import LiveInstance

PD_ROLES = (InstanceRole.PD_PREFILL, InstanceRole.PD_DECODE)
DRAIN_HOLD_S = TERM_S  # how long one drain notice holds an instance out of routing
TO_INSTANCE_ROLE = {
    Role.PD_PREFILL: InstanceRole.PD_PREFILL,
    Role.PD_DECODE: InstanceRole.PD_DECODE,
}
MAX_HISTORY = 100


def instance_shape(deployment: Deployment, spec: InstanceSpec) -> str:
    """What a role's instances must share to swap roles: the chip, the GPUs per instance and
    their split (`prfaas plan --search-parallelism` may give PD-P and PD-D different ones),
    e.g. `8 x h200 tp1 ep8 dp8`; a vllm instance without `parallelism` runs the engine's
    defaults (no split to compare). The chip is the one the name resolves to (the file's
    `chips:`, else the catalog's), so two spellings of one chip are one shape."""
    split = deployment.split_of(spec)
    label = "" if split is None else f" {split.label()}"
    chip = "gpu" if spec.chip is None else deployment.chip_of(spec).name
    return f"{spec.gpus_per_instance} x {chip}{label}"


def _check_shape(rt: RouterRuntime, inst: LiveInstance, to_role: InstanceRole) -> None:
    """400 unless the deployment file gives `to_role` instances of `inst`'s shape: a plan
    with a shape per PD role sized and split each role's instances for that role only
    (docs/planner.md), so an instance takes a role only in a shape the file configured for it."""
    deployment = rt.deployment
    shapes = {
        instance_shape(deployment, i.spec)
        for i in rt.registry.instances.values()
        if i.spec.role is to_role
    }
    shape = instance_shape(deployment, inst.spec)
    if shapes and shape not in shapes:
        raise BadRequestError(
            f"instance {inst.name} ({shape}) cannot take {to_role.value}: the deployment's "
            f"{to_role.value} instances are {', '.join(sorted(shapes))} (a role flip keeps "
            "an instance's shape)"
        )


def live_hardware(
    spec: RebalanceSpec, prfaas: LiveProfile | None, pd: LiveProfile, link_gbps: float
) -> Hardware:
    """What the slow loop plans with, from the live profiles (`scheduler.assemble` builds the
    loop). Instance counts and the link rate are replaced by the live ones at every step."""
    return Hardware(
        prfaas=Cluster(prfaas or pd, 0),
        pd=Cluster(pd, 0),
        link_gbps=link_gbps,
        decode_slo_tokens_per_s=spec.decode_slo_tokens_per_s,
    )


@dataclass(slots=True)
class SlowLoop:
    """Role flips and the periodic rebalance step of one router (state for /admin/state)."""

    spec: RebalanceSpec
    steps: int = 0
    actions: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_HISTORY))
    flips: deque[dict[str, Any]] = field(default_factory=lambda: deque(maxlen=MAX_HISTORY))
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)
    _last_step_s: float = field(default_factory=time.monotonic)
    _last_busy_s: dict[str, float] = field(default_factory=dict)
    _last_slot_s: dict[str, float] = field(default_factory=dict)

    # --- the periodic step -------------------------------------------------------------------

    async def run(self, rt: RouterRuntime) -> None:
        """Step every `period_s` while this replica holds the slow-loop lease
        (`serve.router.lease`; never when disabled); one failed step never stops the loop."""
        if not self.spec.enabled:
            return
        while True:
            await asyncio.sleep(self.spec.period_s)
            if not rt.lease.is_held:
                continue
            try:
                self.step(rt)
            except Exception as err:  # reported in /admin/state; the loop goes on
                self.actions.append({"t_s": round(rt.now_s(), 3), "error": repr(err)})

    def stats(self, rt: RouterRuntime) -> StageStats:
        """What was observed since the last step (module docstring); resets the window."""
        now = time.monotonic()
        period_s = max(now - self._last_step_s, 1e-9)
        self._last_step_s = now
        p_busy = d_slots = 0.0
        p_count = d_count = waiting = 0
        queues: list[float] = []
        ledger = rt.scheduler.ledger
        for inst in rt.registry.instances.values():
            busy = inst.prefill_busy_s - self._last_busy_s.get(inst.name, inst.prefill_busy_s)
            slots = inst.decode_slot_s - self._last_slot_s.get(inst.name, 0.0)
            self._last_busy_s[inst.name] = inst.prefill_busy_s
            self._last_slot_s[inst.name] = inst.decode_slot_s
            if not inst.is_healthy:
                continue
            if inst.role is InstanceRole.PD_PREFILL:
                p_busy += max(0.0, busy)
                p_count += 1
                queues.append(ledger.prefill_work_s(InstanceId(inst.name)))
            elif inst.role is InstanceRole.PD_DECODE:
                d_slots += max(0.0, slots)
                d_count += 1
                waiting += inst.num_waiting
        return StageStats(
            pd_prefill_utilisation=min(1.0, p_busy / (period_s * max(p_count, 1))),
            pd_decode_utilisation=min(1.0, d_slots / (period_s * max(d_count, 1))),
            pd_prefill_queue_s=sum(queues) / max(1, len(queues)),
            decode_waiting_requests=waiting,
            link_capacity_bytes_per_s=rt.registry.link_view().capacity_bytes_per_s,
        )

    def step(self, rt: RouterRuntime) -> list[dict[str, Any]]:
        """One slow-loop step: the scheduler decides, the router carries the flips out."""
        scheduler = rt.scheduler
        stats = self.stats(rt)
        self.steps += 1
        done: list[dict[str, Any]] = []
        before = scheduler.threshold_tokens
        for action in scheduler.rebalance(rt.registry.view(rt.now_s()), stats):
            record: dict[str, Any] = {"t_s": round(rt.now_s(), 3), "reason": action.reason.value}
            if isinstance(action, SetThreshold):
                record.update(action="set-threshold", before=before, after=action.threshold_tokens)
            elif isinstance(action, FlipRole):
                to_role = TO_INSTANCE_ROLE[action.to_role]
                record.update(action="flip-role", instance=action.instance_id, to=to_role.value)
                try:
                    self.request_flip(rt, action.instance_id, to_role, trigger=action.reason.value)
                except ServeError as err:
                    record["refused"] = str(err)
            rt.metrics.rebalance_actions.labels(record["action"], record["reason"]).inc()
            self.actions.append(record)
            done.append(record)
        return done

    # --- role flips ----------------------------------------------------------------------------

    def request_flip(
        self, rt: RouterRuntime, name: str, to_role: InstanceRole, *, trigger: str
    ) -> dict[str, Any]:
        """Start draining `name` for `to_role` (returns at once; the flip runs as a task);
        409 when this replica does not hold the slow-loop lease."""
        rt.lease.fence()
        inst = rt.registry.instances.get(name)
        if inst is None:
            raise BadRequestError(f"no instance named {name!r}")
        if inst.role not in PD_ROLES or to_role not in PD_ROLES:
            raise BadRequestError("only PD instances flip, between pd-prefill and pd-decode")
        _check_shape(rt, inst, to_role)
        if inst.is_draining or any(i.is_draining for i in rt.registry.instances.values()):
            raise ConflictError("a flip is already draining (one at a time)")
        if inst.role is to_role:
            raise ConflictError(f"instance {name} already is {to_role.value}")
        if not inst.is_healthy:
            raise ConflictError(f"instance {name} is not healthy")
        others = [i for i in rt.registry.healthy(inst.role) if i.name != name]
        if not others:
            raise ConflictError(f"instance {name} is the last healthy {inst.role.value}")
        record: dict[str, Any] = {
            "instance": name,
            "from": inst.role.value,
            "to": to_role.value,
            "trigger": trigger,
            "requested_t_s": round(rt.now_s(), 3),
            "status": "draining",
        }
        inst.is_draining, inst.flip_to = True, to_role
        self.flips.append(record)
        task = asyncio.get_running_loop().create_task(self._flip(rt, inst, to_role, record))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return record

    async def _flip(
        self, rt: RouterRuntime, inst: LiveInstance, to_role: InstanceRole, record: dict[str, Any]
    ) -> None:
        deadline = time.monotonic() + self.spec.drain_timeout_s
        interval = rt.deployment.router.poll_interval_s
        try:
            while True:
                if not inst.is_healthy:
                    raise ConflictError("the instance failed while draining")
                epoch = rt.lease.fence()  # a lease lost while draining abandons the flip
                await self._drain(rt, inst, DRAIN_HOLD_S)
                if inst.inflight == 0 and inst.active_calls == 0:
                    info = await self._switch(rt, inst, to_role, epoch)
                    if info is not None:
                        break
                if time.monotonic() > deadline:
                    raise ConflictError(f"not drained within {self.spec.drain_timeout_s:g} s")
                await asyncio.sleep(interval)
        except (ServeError, InstanceCallError, ValueError) as err:
            record.update(status="abandoned", error=str(err) or repr(err))
            rt.metrics.role_flips.labels(inst.name, to_role.value, "abandoned").inc()
            with contextlib.suppress(ServeError, InstanceCallError):
                await self._drain(rt, inst, 0.0)  # the others may place work on it again
        else:
            inst.role_epoch += 1
            inst.role, inst.is_reported_draining = InstanceRole(info.role), False
            record.update(status="done", done_t_s=round(rt.now_s(), 3))
            rt.metrics.role_flips.labels(inst.name, to_role.value, "done").inc()
        finally:
            inst.is_draining, inst.flip_to = False, None

    async def _drain(self, rt: RouterRuntime, inst: LiveInstance, timeout_s: float) -> None:
        """Tell the instance it drains for `timeout_s` (0: no more), under the lease's epoch:
        it says so in `/state`, so every router replica stops placing work on it. Renewed at
        every look at the drain, for the lease's term only: a holder that dies or loses the
        lease mid-drain leaves no instance out of routing for longer than that."""
        body = p.DrainRequest(epoch=rt.lease.fence(), timeout_s=timeout_s)
        try:
            await rt.client.drain(inst.spec.url, body)
        except CallRefused as err:
            raise from_response(err.status_code, err.body) from None

    async def _switch(
        self, rt: RouterRuntime, inst: LiveInstance, to_role: InstanceRole, epoch: int | None
    ) -> p.InstanceInfo | None:
        """Ask the instance to switch, under the lease's `epoch` (fencing: the instance
        refuses a stale one); None when it is still busy (409: try again later)."""
        body = p.RoleRequest(role=to_role.value, epoch=epoch)
        try:
            return await rt.client.role(inst.spec.url, body)
        except CallRefused as err:
            if err.status_code != ConflictError.status_code:
                raise ConflictError(f"the instance refused: {err.message}") from None
            refused = from_response(err.status_code, err.body)
            if refused.code == StaleEpochError.code:
                raise refused from None
            return None

    async def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()


def admin_view(slow: SlowLoop) -> dict[str, Any]:
    spec = slow.spec
    return {
        "enabled": spec.enabled,
        "period_s": spec.period_s,
        "min_samples": spec.min_samples,
        "steps": slow.steps,
        "recent_actions": list(slow.actions),
        "flips": list(slow.flips),
    }
