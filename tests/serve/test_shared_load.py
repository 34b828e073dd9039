"""Router replicas weigh each other's load: an instance reports its calls in progress by the
replica that placed them (`load_by_router`), and every other replica's ledger counts them
(`DispatchLedger.set_foreign`), so two routers sharing instances route as one would."""

from __future__ import annotations

import asyncio

import httpx
from httpx import MockTransport
from serve_helpers import fake_info

from prfaas.kvcache.ids import InstanceId, RequestId
from prfaas.scheduler import DispatchLedger, RouteDecision, RouteRequest
from prfaas.serve import protocol as p
from prfaas.serve.config.deployment import Deployment, InstanceRole, InstanceSpec
from prfaas.serve.instance.runtime import Activity
from prfaas.serve.router.instance_client import HttpInstanceClient
from prfaas.serve.router.live_scheduler import build_scheduler
from prfaas.serve.router.registry import Registry

NAMES = {8101: "pdp-0", 8102: "pdp-1", 8103: "pdd-0", 8104: "pdd-1"}
ROLES = {"pdp": InstanceRole.PD_PREFILL, "pdd": InstanceRole.PD_DECODE}


def _deployment() -> Deployment:
    specs = tuple(
        InstanceSpec(name=name, role=ROLES[name[:3]], cluster="pd", http_port=port)
        for port, name in NAMES.items()
    )
    return Deployment(threshold_tokens=100_000, instances=specs)


def _route(load: dict[str, dict[str, p.RouterLoadBody]]) -> tuple[str, RouteDecision]:
    """Router B's decision for a short prompt while the instances report `load` (by router
    id; "A" stands for the other replica's id, "B" for B's own)."""

    async def run() -> tuple[str, RouteDecision]:
        ids: dict[str, str] = {}

        def handle(request: httpx.Request) -> httpx.Response:
            name = NAMES[request.url.port or 80]
            if request.url.path == "/info":
                info = fake_info(name, role=ROLES[name[:3]].value).model_copy(
                    update={"kv_capacity_bytes": 2**40, "max_batch_size": 8}
                )
                return httpx.Response(200, content=info.model_dump_json())
            mine = {ids.get(r, r): v for r, v in load.get(name, {}).items()}
            state = p.InstanceState(
                boot_id="b", num_waiting=0, num_running=0, free_pages=1, events=[], next_seq=0
            )
            body = state.model_copy(update={"load_by_router": mine})
            return httpx.Response(200, content=body.model_dump_json())

        async with HttpInstanceClient(transport=MockTransport(handle)) as client:
            registry = Registry(_deployment(), client)
            ids.update(A="router-a", B=registry.replica_id)
            await registry.poll_once()
            scheduler = build_scheduler(registry.deployment, registry, can_move_cache=False)
            registry.ledger = scheduler.ledger
            await registry.poll_once()
            request = RouteRequest(RequestId("r"), 200, 8, {})
            decision = scheduler.route(request, registry.view(0.0))
        assert isinstance(decision, RouteDecision)
        return registry.replica_id, decision

    return asyncio.run(run())


def test_a_replica_routes_around_the_load_another_replica_placed() -> None:
    _, idle = _route({})
    assert (idle.prefill_instance_id, idle.decode_instance_id) == ("pdp-0", "pdd-0")  # ties
    busy = {
        "pdp-0": {"A": p.RouterLoadBody(prefill_work_s=30.0)},
        "pdd-0": {"A": p.RouterLoadBody(decodes=3)},
    }
    _, decision = _route(busy)
    assert (decision.prefill_instance_id, decision.decode_instance_id) == ("pdp-1", "pdd-1")


def test_a_replica_does_not_count_its_own_calls_twice() -> None:
    """Its own calls are in its ledger already: what the instance reports for it is not
    foreign load, so it routes as if idle (no request of its own is in its ledger here)."""
    own = {
        "pdp-0": {"B": p.RouterLoadBody(prefill_work_s=30.0)},
        "pdd-0": {"B": p.RouterLoadBody(decodes=3)},
    }
    _, decision = _route(own)
    assert (decision.prefill_instance_id, decision.decode_instance_id) == ("pdp-0", "pdd-0")


def test_foreign_load_adds_to_the_ledgers_own() -> None:
    ledger = DispatchLedger()
    a, d = InstanceId("pdp-0"), InstanceId("pdd-0")
    ledger.dispatch(RequestId("r"), a, 2.0, d, 10.0)
    ledger.set_foreign(a, 3.0, 4)
    ledger.set_foreign(d, 0.0, 4)
    assert ledger.prefill_work_s(a) == 5.0 and ledger.decode_requests(d) == 5
    assert ledger.decode_overlap(d, 0.0, 10.0, 0.0).peak == 5
    ledger.decode_done(RequestId("r"))
    ledger.set_foreign(d, 0.0, 0)
    assert ledger.prefill_work_s(a) == 3.0 and ledger.decode_requests(d) == 0


def test_an_instance_tallies_calls_by_router_and_forgets_finished_ones() -> None:
    activity = Activity()
    activity.prefill_started("a", 1.5)
    activity.prefill_started("b", 2.0)
    activity.decode_started("a")
    assert activity.by_router == {
        "a": p.RouterLoadBody(prefill_work_s=1.5, decodes=1),
        "b": p.RouterLoadBody(prefill_work_s=2.0),
    }
    activity.prefill_ended("a", 1.5)
    activity.prefill_ended("b", 2.0)
    activity.decode_ended("a")
    assert activity.by_router == {} and activity.is_idle
