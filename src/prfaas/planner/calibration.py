"""Calibrating the H20 prefill curve of the paper's case study from its Table 6.

The paper times the 1T model on 8xH200 (Table 5) but publishes no H20 number, and a roofline
from datasheets alone puts 8xH20 at ~6.7x slower than 8xH200 where Table 6 implies ~2.5x. So
the H20 curve is a calibration: a quadratic T(l) = a + b l + c l^2 (the shape of prefill time,
see `specs.perf`) fitted to the four Table 6 cells that depend on H20 prefill alone, each read
as a latency through the planner's own model on the case-study workload:

    PrfaaS-PD  Theta_pdp = 1.64 at N_p = 3, t = 19.4K   ->  T(l_short(t)) = 3 / 1.64 s
    homog. PD  Theta_pdp = 2.11 at N_p = 9              ->  T(E[l])       = 9 / 2.11 s
    homog. PD  mean TTFT = 4.44 s                       ->  E[T(l)]       = 4.44 s
    homog. PD  P90 TTFT  = 9.73 s                       ->  T(q90(l))     = 9.73 s

Every observation is linear in (a, b, c) (a mean of T over lengths is a + b E[l] + c E[l^2]), so
the fit is a linear least squares on relative errors: no search, one answer. The fitted curve is
shipped as the measured-style profile `prfaas-1t` on `h20` x8 in specs/data/profiles.yaml
(points on the curve from 1K to 128K, sqrt(2) apart); a test re-runs this fit and checks
the catalog.
These four cells are therefore inputs; every other cell of Table 6 is a prediction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from prfaas.workload.lengths import LengthHistogram

#: Table 6 inputs of the calibration (paper section 5): threshold t (19.4K read as thousands,
#: which gives the paper's 49.6% offload fraction) and the H20-only cells listed above.
PAPER_THRESHOLD_TOKENS = 19_400
PAPER_PRFAAS_PD_N_P, PAPER_PRFAAS_PD_THETA_PDP = 3, 1.64
PAPER_HOMOGENEOUS_N_P, PAPER_HOMOGENEOUS_THETA_PDP = 9, 2.11
PAPER_HOMOGENEOUS_TTFT_MEAN_S, PAPER_HOMOGENEOUS_TTFT_P90_S = 4.44, 9.73


@dataclass(frozen=True, slots=True)
class LatencyObservation:
    """E[T(l)] over `weights` on `lengths_tokens` was observed to be `seconds`."""

    label: str
    lengths_tokens: tuple[float, ...]
    weights: tuple[float, ...]
    seconds: float

    @classmethod
    def at(cls, label: str, length_tokens: float, seconds: float) -> LatencyObservation:
        return cls(label, (length_tokens,), (1.0,), seconds)

    def features(self) -> np.ndarray:
        """(E[1], E[l], E[l^2]) under the weights: T's mean is features @ (a, b, c)."""
        lengths = np.asarray(self.lengths_tokens)
        weights = np.asarray(self.weights) / sum(self.weights)
        return np.array([1.0, weights @ lengths, weights @ lengths**2])


@dataclass(frozen=True, slots=True)
class QuadraticPrefill:
    """T(l) = constant_s + linear_s_per_token * l + quadratic_s_per_token2 * l^2."""

    constant_s: float
    linear_s_per_token: float
    quadratic_s_per_token2: float
    rms_relative_error: float

    def __call__(self, length_tokens: float) -> float:
        l = length_tokens  # noqa: E741 - the paper's symbol
        return self.constant_s + self.linear_s_per_token * l + self.quadratic_s_per_token2 * l * l


def fit_quadratic_prefill(observations: Sequence[LatencyObservation]) -> QuadraticPrefill:
    """Least squares on relative errors, (predicted - observed) / observed."""
    if len(observations) < 3:
        raise ValueError("need at least three observations for three coefficients")
    observed = np.array([o.seconds for o in observations])
    design = np.stack([o.features() for o in observations]) / observed[:, None]
    coeffs = np.linalg.lstsq(design, np.ones_like(observed), rcond=None)[0]
    rms = math.sqrt(float(np.mean((design @ coeffs - 1.0) ** 2)))
    return QuadraticPrefill(float(coeffs[0]), float(coeffs[1]), float(coeffs[2]), rms)


def table6_h20_observations(histogram: LengthHistogram) -> tuple[LatencyObservation, ...]:
    """The four H20-only Table 6 cells as latencies on the case-study length histogram."""
    split = histogram.split()
    index = int(np.searchsorted(split.threshold_tokens, PAPER_THRESHOLD_TOKENS))
    if split.threshold_tokens[index] != PAPER_THRESHOLD_TOKENS:
        raise ValueError(f"the histogram grid must have an edge at {PAPER_THRESHOLD_TOKENS}")
    lengths = tuple(histogram.mean_tokens.tolist())
    return (
        LatencyObservation.at(
            "PrfaaS-PD PD-P: T(l_short)",
            float(split.short_mean_tokens[index]),
            PAPER_PRFAAS_PD_N_P / PAPER_PRFAAS_PD_THETA_PDP,
        ),
        LatencyObservation.at(
            "homogeneous PD-P: T(E[l])",
            histogram.mean,
            PAPER_HOMOGENEOUS_N_P / PAPER_HOMOGENEOUS_THETA_PDP,
        ),
        LatencyObservation(
            "homogeneous mean TTFT: E[T(l)]",
            lengths,
            tuple(histogram.mass.tolist()),
            PAPER_HOMOGENEOUS_TTFT_MEAN_S,
        ),
        LatencyObservation.at(
            "homogeneous P90 TTFT: T(q90)", histogram.quantile(0.9), PAPER_HOMOGENEOUS_TTFT_P90_S
        ),
    )
