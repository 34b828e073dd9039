"""Which instance shapes an engine can pair in disaggregated serving (issue 30): a plan the
parallelism search returns under an engine's data must be one a user can deploy on that engine.

The rule per engine, as NVIDIA aiconfigurator 0.12.0 applies it when it pairs a prefill worker
with a decode worker (`Task._require_same_tp_gate` in its `aiconfigurator.sdk.task_v2`; the
pairing loop in `sweep._find_best_disagg_under_constraint`):

    sglang   prefill and decode have the same attention TP (`tp`; SGLang's KV transfer lays
             the cache out per TP rank, ai-dynamo/dynamo#5870), unless a side runs wide
             (large) EP: experts all-to-all over `moe_ep` > 1 with `moe_tp` = 1 on a
             DeepEP-style backend for which aiconfigurator has all-to-all data
    vllm     none (aiconfigurator pairs any two shapes)
    trtllm   none

The wide-EP exception never arises for a shape prfaas times: `specs.aic` compiles every split on
aiconfigurator's fused MoE path (no all-to-all backend), and aiconfigurator itself finds no
all-to-all coverage for the catalog's MoE models on H200 or B200 (its gate is then a plain
"same TP"). So the rule here is the plain one; a shape timed on a wide-EP path would be the
place to add the exception.

Which pairs the rule covers: a KV cache crosses from a prefill instance to a decode instance in
two places, PD-P -> PD-D inside the PD cluster and PrfaaS prefill -> PD-D over the link, and
the engine's transfer layout binds both alike (distance changes the transport, not the layout
the receiver expects). A deployment without PrfaaS instances (homogeneous PD, equal cost) is
bound by the first pair only. Callers: `planner.parallel.search_parallelism`.
"""

from __future__ import annotations

from prfaas.planner.model import Hardware
from prfaas.specs.timing import AicEngine, Parallelism, TimingChoice, TimingSource

#: The deployments (`planner.plan.DEPLOYMENTS`) whose decode instances receive KV from the
#: PrfaaS cluster.
USES_PRFAAS = frozenset({"prfaas_pd", "naive_heterogeneous"})


def _pairs_within_tp(engine: AicEngine) -> bool:
    return engine is AicEngine.SGLANG


def pair_refusal(engine: AicEngine, prefill: Parallelism, decode: Parallelism) -> str | None:
    """Why `engine` cannot serve prefill instances of `prefill` beside decode instances of
    `decode` disaggregated, or None where it can (module docstring)."""
    if _pairs_within_tp(engine) and prefill.tp != decode.tp:
        return (
            f"sglang pairs prefill and decode of the same attention TP only "
            f"({prefill.label()} prefill, {decode.label()} decode)"
        )
    return None


def pairing_class(choice: TimingChoice, split: Parallelism) -> int | None:
    """What a shape must share with its partner under `choice`'s engine rule: the attention
    TP for SGLang under its data, None where any two shapes pair. The search prunes a shape
    only against shapes of its class, so pruning never drops the one shape a pair that keeps
    the rule needs (`planner.parallel`)."""
    if choice.source is TimingSource.AIC and _pairs_within_tp(choice.engine):
        return split.tp
    return None


def plan_refusal(hardware: Hardware, choice: TimingChoice, deployment: str) -> str | None:
    """Why the engine `choice` names cannot serve `deployment` on `hardware`'s shapes, or None.
    Only a plan timed by an engine's data (`TimingSource.AIC`) is bound by that engine."""
    if choice.source is not TimingSource.AIC:
        return None
    decode = hardware.decode_cluster.split
    pairs = [("PD-P", hardware.pd.split)]
    if deployment in USES_PRFAAS:
        pairs.append(("PrfaaS", hardware.prfaas.split))
    for role, split in pairs:
        refusal = pair_refusal(choice.engine, split, decode)
        if refusal is not None:
            return f"{role} -> PD-D: {refusal}"
    return None
