"""The simulator's report: the shared metrics summary plus what only a simulator knows.

`summary` is `prfaas.metrics.summarize` over the per-request records, the same definitions of
TTFT, TPOT, ITL, E2E and goodput the benchmark client uses. Added: the per-path split with the
scheduler's reason codes, per-path TTFT, link utilisation, prefix reuse, the slow loop's
actions and the sampled timelines, and each role's instance shape (`shapes`: its GPUs per
instance, its timing source and the GPUs its instances use, counted by that shape).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from prfaas.metrics.summary import Distribution, MetricsSummary, Slo, summarize
from prfaas.planner.scenario import SloFile
from prfaas.scheduler import FlipRole, SetThreshold
from prfaas.sim.config import RunConfig
from prfaas.sim.runner import SimResult
from prfaas.sim.timeline import Timeline


@dataclass(frozen=True, slots=True)
class SimReport:
    policy: str
    deployment: dict[str, int]
    plan_mode: str  # the trace mode of the plan that chose the deployment (sim.config)
    summary: MetricsSummary
    reasons: dict[str, int]
    path_ttft_s: dict[str, Distribution]
    link_mean_utilisation: float
    link_peak_backlog_gb: float
    prefix_hit_fraction: float
    rejections: dict[str, int]  # refused requests by reason (admission control, no instance)
    num_deferrals: int  # times admission control held a request back (a request may repeat)
    actions: list[dict[str, Any]]
    timeline: Timeline
    num_events: int
    timing: dict[str, str]  # what timed each cluster (PerfProfile.source), as the plan's
    shapes: dict[str, dict[str, Any]]  # per role: instances, GPUs per instance, GPUs, source
    notes: tuple[str, ...] = ()  # what the run changed of the scenario (sim.config)

    def to_json(self, with_timeline: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema": "prfaas.simulation/1",
            "policy": self.policy,
            "deployment": self.deployment,
            "plan_mode": self.plan_mode,
            "metrics": self.summary.to_json(),
            "reasons": self.reasons,
            "path_ttft_s": {k: vars_of(v) for k, v in self.path_ttft_s.items()},
            "link_mean_utilisation": self.link_mean_utilisation,
            "link_peak_backlog_gb": self.link_peak_backlog_gb,
            "prefix_hit_fraction": self.prefix_hit_fraction,
            "rejections": self.rejections,
            "num_deferrals": self.num_deferrals,
            "actions": self.actions,
            "num_events": self.num_events,
            "timing": self.timing,
            "shapes": self.shapes,
            "notes": list(self.notes),
        }
        if with_timeline:
            out["timeline"] = self.timeline.to_json()
        return out


def vars_of(d: Distribution) -> dict[str, Any]:
    return {"count": d.count, "mean": d.mean, "median": d.median, "p90": d.p90, "p99": d.p99}


def _action_json(time_s: float, action: FlipRole | SetThreshold) -> dict[str, Any]:
    if isinstance(action, FlipRole):
        return {
            "time_s": time_s,
            "flip": action.instance_id,
            "to": str(action.to_role),
            "reason": str(action.reason),
        }
    return {
        "time_s": time_s,
        "threshold_tokens": action.threshold_tokens,
        "reason": str(action.reason),
    }


def role_shapes(config: RunConfig) -> dict[str, dict[str, Any]]:
    """Each role's instances at the start of the run, in the shape that times them."""
    hw, d = config.hardware, config.deployment
    roles = (
        ("prfaas", hw.prfaas.profile, d.n_prfaas),
        ("pd_p", hw.pd.profile, d.n_p),
        ("pd_d", hw.decode_cluster.profile, d.n_d),
    )
    return {
        role: {
            "num_instances": n,
            "gpus_per_instance": profile.gpus_per_instance,
            "num_gpus": n * profile.gpus_per_instance,
            "source": profile.source,
        }
        for role, profile, n in roles
    }


def build_report(config: RunConfig, result: SimResult, slo_body: SloFile | None) -> SimReport:
    slo = None
    if slo_body is not None and (slo_body.ttft_s is not None or slo_body.tpot_s is not None):
        slo = Slo(slo_body.ttft_s, slo_body.tpot_s)
    summary = summarize(result.records, slo)
    by_path: dict[str, list[float]] = {}
    for r in result.records:
        if r.path is not None and r.ttft_s is not None:
            by_path.setdefault(r.path, []).append(r.ttft_s)
    tl = result.timeline
    caps, egress = np.asarray(tl.link_capacity_gbps), np.asarray(tl.link_egress_gbps)
    util = float(np.mean(egress[1:] / caps[1:])) if len(caps) > 1 else 0.0
    d = config.deployment
    return SimReport(
        policy=config.policy,
        deployment={
            "n_prfaas": d.n_prfaas,
            "n_p": d.n_p,
            "n_d": d.n_d,
            "threshold_tokens": d.threshold_tokens,
        },
        plan_mode=config.plan_mode,
        summary=summary,
        reasons=dict(sorted(result.reasons.items())),
        path_ttft_s={k: Distribution.of(v) for k, v in sorted(by_path.items())},
        link_mean_utilisation=util,
        link_peak_backlog_gb=max(tl.link_backlog_gb, default=0.0),
        prefix_hit_fraction=result.hit_tokens / max(1, result.input_tokens),
        rejections={
            k.removeprefix("rejected:"): v
            for k, v in sorted(result.reasons.items())
            if k.startswith("rejected:")
        },
        num_deferrals=result.reasons.get("deferred", 0),
        actions=[_action_json(t, a) for t, a in result.actions],
        timeline=tl,
        num_events=result.num_events,
        timing={
            "prfaas": config.hardware.prfaas.profile.source,
            "pd": config.hardware.pd.profile.source,
        },
        shapes=role_shapes(config),
        notes=config.notes,
    )
