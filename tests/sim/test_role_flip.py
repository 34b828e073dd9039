"""Role flips in the simulator: an instance drains its old role's work, then switches."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from prfaas.kvcache.ids import RequestId
from prfaas.planner.scenario import (
    AdmissionFile,
    ArrivalsFile,
    RebalanceFile,
    SimulationFile,
    SloFile,
    build_scenario,
    read_scenario_file,
)
from prfaas.scheduler import Role
from prfaas.sim.api import scenario_arrivals
from prfaas.sim.arrivals import SimRequest
from prfaas.sim.config import build_run_config
from prfaas.sim.core import EventPriority
from prfaas.sim.runner import Simulator


def _simulator(policy: str, requests: list[SimRequest]) -> Simulator:
    body, base = read_scenario_file("paper-case-study")
    config = build_run_config(build_scenario(body, base, "flip"), body, base, policy)
    return Simulator(config, requests)


def test_pd_prefill_flipped_to_decode_switches_once_its_queue_drains() -> None:
    # 30 prompts at once: every PD-P instance holds a queue when the flip starts at 0.5 s.
    requests = [SimRequest(RequestId(f"r{i}"), 0.0, 3072, 16) for i in range(30)]
    sim = _simulator("homogeneous", requests)
    donor = next(i for i in sim.instances if i.role is Role.PD_PREFILL)
    sim.loop.schedule(0.5, EventPriority.CONTROL, donor.begin_flip, Role.PD_DECODE)
    result = sim.run()
    assert donor.role is Role.PD_DECODE and donor.target_role is None
    [(flipped_s, to_role)] = donor.flips
    assert to_role is Role.PD_DECODE and flipped_s > 0.5  # after its queued prefills ended
    assert len(result.records) == 30 and not any(r.error for r in result.records)


def test_pd_decode_flipped_to_prefill_switches_once_its_batch_drains() -> None:
    requests = [SimRequest(RequestId(f"r{i}"), 0.0, 3072, 64) for i in range(30)]
    sim = _simulator("homogeneous", requests)
    donor = next(i for i in sim.instances if i.role is Role.PD_DECODE)
    sim.loop.schedule(2.0, EventPriority.CONTROL, donor.begin_flip, Role.PD_PREFILL)
    sim.run()
    assert donor.role is Role.PD_PREFILL and donor.target_role is None
    assert [role for _, role in donor.flips] == [Role.PD_PREFILL]


@settings(max_examples=6, deadline=None)
@given(
    rate=st.floats(2.0, 14.0),
    period_s=st.floats(3.0, 20.0),
    mode=st.sampled_from(["off", "shed"]),
)
def test_slow_loop_flips_always_settle_and_every_arrival_ends(
    rate: float, period_s: float, mode: str
) -> None:
    # The slow loop on (overload rule included when shedding) at loads up to ~3x capacity:
    # whatever it flips, every arrival ends completed or refused and no flip is left half done.
    body, base = read_scenario_file("paper-case-study")
    sim_file = SimulationFile(
        rebalance=RebalanceFile(period_s=period_s, min_samples=10),
        admission=AdmissionFile(mode=mode),  # type: ignore[arg-type]
        slo=SloFile(ttft_s=10, tpot_s=0.025),
    )
    arrivals = ArrivalsFile(process="poisson", rate_per_s=rate, num_requests=100)
    body = body.model_copy(update={"simulation": sim_file, "arrivals": arrivals})
    config = build_run_config(build_scenario(body, base, "flip"), body, base, "prfaas")
    sim = Simulator(config, scenario_arrivals(body, base))
    result = sim.run()
    assert len(result.records) == 100
    assert all(r.error is None or r.is_rejected for r in result.records)
    assert all(i.target_role is None for i in sim.instances)
    roles = [i.role for i in sim.instances]
    assert roles.count(Role.PD_PREFILL) >= 1 and roles.count(Role.PD_DECODE) >= 1
