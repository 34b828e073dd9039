"""Exhaustive grid search for the throughput-optimal threshold and P/D split (paper Eq. 7-8).

The paper states the optimum as two balance conditions, Theta_prfaas / p = Theta_pdp / (1 - p)
(7) and Theta_prfaas + Theta_pdp = Theta_pdd (8), and finds it by a 2-D grid search over t and
N_p / N_d. We search the same grid (every histogram edge, i.e. a threshold step of the histogram
bin width, times every N_p with N_d = N - N_p) and take the largest Lambda_max (Eq. 6). Ties
(e.g. a decode-bound plateau of thresholds) go to the point with the most prefill headroom,
min(Theta_prfaas / p, Theta_pdp / (1 - p)), which is where Eq. 7 balances.

Callers: `planner.plan` for the PrfaaS-PD optimum, the baselines and the figure sweeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from prfaas.planner.model import StageModel, StageRates
from prfaas.workload.lengths import FloatArray

#: Relative slack under which two Lambda_max values count as a tie.
TIE_TOLERANCE = 1e-12


class Stage(StrEnum):
    """The stage that limits Lambda_max."""

    PRFAAS = "prfaas"  # PrfaaS prefill compute
    LINK = "link"  # PrfaaS egress over the inter-cluster link
    PD_P = "pd-p"
    PD_D = "pd-d"


@dataclass(frozen=True, slots=True)
class OperatingPoint:
    """One configuration at one threshold: stage rates (req/s), TTFT and traffic.

    `threshold_tokens` is None for deployments without one (homogeneous and naive); a stage's
    theta is None where it has no instances.
    """

    threshold_tokens: int | None
    n_prfaas: int
    n_p: int
    n_d: int
    theta_prfaas: float | None
    theta_pd_p: float | None
    theta_pd_d: float
    lambda_max: float
    bottleneck: Stage
    offload_fraction: float
    long_mean_tokens: float | None
    short_mean_tokens: float | None
    egress_gbps: float
    ttft_mean_s: float
    ttft_p90_s: float
    num_gpus: int
    price: float


def weighted_quantile(values: FloatArray, weights: FloatArray, q: float) -> float:
    """The smallest value whose cumulative weight reaches q of the total."""
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    index = int(np.searchsorted(cumulative, q * cumulative[-1]))
    return float(values[order][min(index, len(values) - 1)])


def _bottleneck(model: StageModel, rates: StageRates, k: int) -> Stage:
    bounds = {
        Stage.PRFAAS: float(rates.prfaas_bound[k]),
        Stage.PD_P: float(rates.pd_p_bound[k]),
        Stage.PD_D: float(rates.theta_pd_d[k]),
    }
    stage = min(bounds, key=lambda s: bounds[s])
    if stage is Stage.PRFAAS:
        compute = float(rates.prfaas_compute[k])
        egress = model.link_bytes_per_s / model.prfaas_cache_bytes[k]
        return Stage.LINK if egress < compute else Stage.PRFAAS
    return stage


def operating_point(
    model: StageModel, n_prfaas: int, n_p: int, n_d: int, k: int, *, has_threshold: bool
) -> OperatingPoint:
    """Everything about one configuration at threshold index `k` (t = the k-th edge)."""
    rates = model.rates(n_prfaas, float(n_p), float(n_d))
    split = model.split
    p = float(split.offload_fraction[k])
    lam = float(rates.lambda_max[k])
    # Steady state at Lambda_max: PrfaaS prefills p * Lambda requests/s of S_kv(l_long) each.
    egress_gbps = p * lam * float(model.prfaas_cache_bytes[k]) * 8 / 1e9 if p > 0 else 0.0
    ttft = model.ttft_s(k)
    mass = model.histogram.mass
    hw = model.hardware
    prfaas_gpus = n_prfaas * hw.prfaas.profile.gpus_per_instance
    pd_gpus = hw.pd_gpus(n_p, n_d)
    return OperatingPoint(
        threshold_tokens=round(float(split.threshold_tokens[k])) if has_threshold else None,
        n_prfaas=n_prfaas,
        n_p=n_p,
        n_d=n_d,
        theta_prfaas=float(rates.theta_prfaas[k]) if n_prfaas > 0 else None,
        theta_pd_p=float(rates.theta_pd_p[k]) if n_p > 0 else None,
        theta_pd_d=float(rates.theta_pd_d[k]),
        lambda_max=lam,
        bottleneck=_bottleneck(model, rates, k),
        offload_fraction=p,
        long_mean_tokens=float(split.long_mean_tokens[k]) if p > 0 else None,
        short_mean_tokens=float(split.short_mean_tokens[k]) if p < 1 else None,
        egress_gbps=egress_gbps,
        ttft_mean_s=float(mass @ ttft),
        ttft_p90_s=weighted_quantile(ttft, mass, 0.9),
        num_gpus=prfaas_gpus + pd_gpus,
        price=prfaas_gpus * hw.prfaas.profile.chip.relative_price
        + pd_gpus * hw.pd.profile.chip.relative_price,
    )


def best_configuration(
    model: StageModel,
    n_prfaas: int,
    n_p_choices: Sequence[int],
    num_pd_instances: int,
    threshold_indices: Sequence[int] | None = None,
) -> tuple[int, int]:
    """(N_p, threshold index) maximising Lambda_max over the grid, N_d = num_pd - N_p: the
    grid of PD instances of one shape, which the slow loop flips between the two roles.

    `threshold_indices` restricts the thresholds (default: every edge).
    """
    splits = [(n_p, num_pd_instances - n_p) for n_p in n_p_choices]
    (n_p, _), k = best_split(model, n_prfaas, splits, threshold_indices)
    return n_p, k


def best_split(
    model: StageModel,
    n_prfaas: int,
    splits: Sequence[tuple[int, int]],
    threshold_indices: Sequence[int] | None = None,
) -> tuple[tuple[int, int], int]:
    """((N_p, N_d), threshold index) maximising Lambda_max over the given splits (as
    `Hardware.pd_splits` lists them) and the thresholds (default: every edge)."""
    columns = (
        np.arange(model.num_thresholds)
        if threshold_indices is None
        else np.asarray(threshold_indices, dtype=np.int64)
    )
    pairs = np.asarray(splits, dtype=np.float64).reshape(-1, 2)
    rates = model.rates(n_prfaas, pairs[:, :1], pairs[:, 1:])
    lam = rates.lambda_max[:, columns]
    headroom = np.minimum(rates.prfaas_bound, rates.pd_p_bound)[:, columns]
    best = float(lam.max())
    tied = lam >= best * (1 - TIE_TOLERANCE)
    row, col = np.unravel_index(int(np.argmax(np.where(tied, headroom, -np.inf))), lam.shape)
    n_p, n_d = splits[int(row)]
    return (int(n_p), int(n_d)), int(columns[col])


@dataclass(frozen=True, slots=True, eq=False)
class ThresholdSweep:
    """The two prefill bounds and the decode bound versus t at fixed N_p / N_d (Fig. 5b)."""

    n_p: int
    n_d: int
    threshold_tokens: FloatArray
    prfaas_bound: FloatArray
    pd_p_bound: FloatArray
    pd_d_bound: float
    lambda_max: FloatArray


def threshold_sweep(model: StageModel, n_prfaas: int, n_p: int, n_d: int) -> ThresholdSweep:
    rates = model.rates(n_prfaas, float(n_p), float(n_d))
    return ThresholdSweep(
        n_p=n_p,
        n_d=n_d,
        threshold_tokens=model.split.threshold_tokens,
        prfaas_bound=rates.prfaas_bound,
        pd_p_bound=rates.pd_p_bound,
        pd_d_bound=float(rates.theta_pd_d[0]),
        lambda_max=rates.lambda_max,
    )
