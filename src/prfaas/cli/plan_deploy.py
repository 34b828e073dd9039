"""`prfaas plan --deployment-out FILE`: the chosen PrfaaS-PD plan as a deployment file that
`prfaas up` accepts (serve.config.deployment), on the emulated backend at full scale.

One instance per planned PrfaaS prefill, PD-P and PD-D instance, each with the chip, GPUs
per instance, split of those GPUs (`parallelism: {tp, dp, ep}`) and timing source (`timing:
{source, engine}`) of its cluster and role, as the plan (and its parallelism search) timed
them, so the emulated instances `prfaas up` starts are timed as planned; the plan's
threshold, the scenario's link and decode SLO; ports 0 (picked free at launch). A chip the
scenario describes itself (its `chips:`) is written into the file's `chips:` as the scenario
gave it, so `prfaas up` times the instances on it as the plan did. A plan whose
PD-P and PD-D instances have different shapes is written with the slow loop off
(`rebalance.enabled: false`): the loop flips PD instances between the roles and a deployment
file cannot say which instance may take which role, so it would put an instance into a role
whose shape the plan did not give it. The file is validated by the
same loader `prfaas up` uses before it is written, so a plan that `up` would refuse (a model
not in the catalog, for instance) is an error here, not at launch.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from prfaas.planner.model import Cluster, Hardware
from prfaas.planner.plan import PlanReport
from prfaas.serve.config.deployment import Deployment, validation_problems
from prfaas.serve.config.parallelism_spec import ParallelismSpec, TimingSpec
from prfaas.specs.aic import AicProfile
from prfaas.specs.errors import SpecError
from prfaas.specs.files import ChipFile
from prfaas.specs.timing import (
    AicEngine,
    Parallelism,
    TimingChoice,
    TimingSource,
)

MIB = 2**20
#: Emulated KV payloads are this fraction of the real bytes (serve.config's EmulationSpec default).
BYTE_FACTOR = 1 / 256
#: Prefix pool per instance where the memory model defines no KV capacity (the weights do not
#: fit), as in configs/case-study-prfaas-pd.yaml.
FALLBACK_CAPACITY_MIB = 102_400


def planned_timing(cluster: Cluster) -> tuple[Parallelism, TimingChoice]:
    """The split the plan gave `cluster`'s instances (`Cluster.split`) and the source that
    timed them: aiconfigurator's profile names its engine; any other was timed by the roofline
    (the catalog's measured points where it has them, which the roofline source also prefers)."""
    profile = cluster.profile
    if isinstance(profile, AicProfile):
        return cluster.split, TimingChoice(TimingSource.AIC, AicEngine(profile.engine))
    return cluster.split, TimingChoice(TimingSource.ROOFLINE)


def _shape(cluster: Cluster) -> dict[str, Any]:
    """An instance's chip, GPUs, split and timing source, as the deployment file says them."""
    split, choice = planned_timing(cluster)
    timing = TimingSpec.of(choice).model_dump(mode="json")
    if choice.source is not TimingSource.AIC:
        del timing["engine"]  # aiconfigurator's engine: meaningless for another source
    return {
        "chip": cluster.profile.chip.name,
        "gpus_per_instance": cluster.profile.gpus_per_instance,
        "parallelism": ParallelismSpec.of(split).model_dump(),
        "timing": timing,
    }


def _instances(report: PlanReport, hardware: Hardware) -> list[dict[str, Any]]:
    point = report.deployments["prfaas_pd"]
    kv = report.decode.kv_capacity_bytes
    capacity_mib = FALLBACK_CAPACITY_MIB if kv is None else max(1, int(kv * BYTE_FACTOR / MIB))
    rows = []
    for prefix, role, cluster_name, cluster, count in (
        ("prfaas", "prfaas-prefill", "prfaas", hardware.prfaas, point.n_prfaas),
        ("pdp", "pd-prefill", "pd", hardware.pd, point.n_p),
        ("pdd", "pd-decode", "pd", hardware.decode_cluster, point.n_d),
    ):
        rows += [
            {
                "name": f"{prefix}-{i}",
                "role": role,
                "cluster": cluster_name,
                "backend": "emulated",
                **_shape(cluster),
                "capacity_mib": capacity_mib,
                "max_batch_size": report.decode.max_batch_size,
            }
            for i in range(count)
        ]
    return rows


def _described(instances: list[dict[str, Any]], chips: Mapping[str, ChipFile]) -> dict[str, Any]:
    """The scenario's own chips (`chips:`) that `instances` run on, as the scenario wrote them,
    under the lower-case name the instances give (specs.described_chips)."""
    used = {row["chip"] for row in instances}
    return {
        name.lower(): chip.model_dump(mode="json", exclude_defaults=True)
        for name, chip in chips.items()
        if name.lower() in used
    }


def deployment_dict(
    report: PlanReport, hardware: Hardware, chips: Mapping[str, ChipFile]
) -> dict[str, Any]:
    """The deployment file's content for the PrfaaS-PD column of `report`; `chips` is the
    scenario's `chips:` section (those the plan's instances run on are written)."""
    point = report.deployments["prfaas_pd"]
    instances = _instances(report, hardware)
    described = _described(instances, chips)
    return {
        "model": hardware.pd.profile.model.name,
        "block_tokens": 512,
        "threshold_tokens": point.threshold_tokens or 0,
        "router": {"port": 0},
        "link": {"rate_gbps": hardware.link_gbps, "rtt_ms": 20, "shaping": "token-bucket"},
        "emulation": {"time_factor": 1.0, "byte_factor": BYTE_FACTOR},
        "rebalance": {
            # Instances of two shapes cannot flip roles (the slow loop would flip one into a
            # role whose shape differs): a plan with a shape per PD role runs as planned.
            "enabled": hardware.pd_decode is None,
            "decode_slo_tokens_per_s": hardware.decode_slo_tokens_per_s,
        },
        **({"chips": described} if described else {}),
        "instances": instances,
    }


def write_deployment(
    report: PlanReport, hardware: Hardware, chips: Mapping[str, ChipFile], path: Path
) -> None:
    """Validate the plan's deployment as `prfaas up` would, then write it to `path`."""
    content = deployment_dict(report, hardware, chips)
    try:
        Deployment.model_validate(content)
    except ValidationError as err:
        problems = "; ".join(validation_problems(str(path), err))
        raise SpecError(f"the plan is not a deployment prfaas up accepts: {problems}") from None
    header = (
        f"# Written by `prfaas plan`: PrfaaS-PD, timing "
        f"{hardware.prfaas.profile.source} (PrfaaS) / {hardware.pd.profile.source} (PD).\n"
        "# Each emulated instance is timed by its `timing` source at its `parallelism` split, "
        "as planned\n# (serve.backends.emulated).\n"
    )
    if hardware.pd_decode is not None:
        p_split, d_split = hardware.pd.split, hardware.pd_decode.split
        header += (
            f"# PD-P instances x{hardware.pd.profile.gpus_per_instance} ({p_split.label()}) "
            f"and PD-D instances x{hardware.pd_decode.profile.gpus_per_instance} "
            f"({d_split.label()}) GPUs: instances of two shapes cannot flip roles, so the "
            "slow loop is off\n# (rebalance.enabled: false; t and the roles stay as planned).\n"
        )
    path.write_text(header + yaml.safe_dump(content, sort_keys=False))
