"""The planner: the paper's steady-state throughput model (Eq. 2-6), the grid search for the
optimal threshold and P/D split (Eq. 7-8), the baselines (homogeneous PD, naive heterogeneous,
equal cost), TTFT estimates and scenario files. Pure logic (docs/architecture.md); `plots` imports
matplotlib lazily and only when asked for figures."""

from __future__ import annotations

from prfaas.planner.errors import InfeasiblePlanError, PlanError
from prfaas.planner.model import Cluster, DecodeCapacity, Hardware, StageModel, StageRates
from prfaas.planner.optimise import OperatingPoint, Stage, ThresholdSweep, best_configuration
from prfaas.planner.plan import DEPLOYMENTS, PlanReport, plan
from prfaas.planner.scenario import Scenario, bundled_scenarios, load_scenario

__all__ = [
    "DEPLOYMENTS",
    "Cluster",
    "DecodeCapacity",
    "Hardware",
    "InfeasiblePlanError",
    "OperatingPoint",
    "PlanError",
    "PlanReport",
    "Scenario",
    "Stage",
    "StageModel",
    "StageRates",
    "ThresholdSweep",
    "best_configuration",
    "bundled_scenarios",
    "load_scenario",
    "plan",
]
