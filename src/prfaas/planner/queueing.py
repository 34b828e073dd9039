"""Prefill queueing against a TTFT objective: how busy a prefill stage may run (issue 30).

Eq. 3-4 rate a prefill stage at N / T: every instance busy all the time. A stage that busy
has an unbounded queue, so a plan with a TTFT objective must leave headroom. We model a
prefill stage of N instances as one queue served by c = N x d servers, d the prompts an
instance prefills at once (`PerfProfile.prefill_concurrency`: its attention-DP ranks; 1
without attention DP), each server taking the one-request latency S (the router sends each
request to the instance that finishes it first, `scheduler.choose_prefill`), Poisson arrivals,
and service times with the stage's mean S and squared coefficient of variation C_s^2 (from the
length histogram). The mean wait is the Allen-Cunneen form over Sakasegawa's M/M/c wait:

    W_q = (1 + C_s^2) / 2 * S * rho^(sqrt(2 (c + 1)) - 1) / (c (1 - rho)),   rho = lambda S / c

exact for M/M/1 and, with C_s^2 = 0, for M/D/1 (Pollaczek-Khinchine). A stage meets the
objective while its requests' mean TTFT, their mean prefill time plus W_q, is within the SLO;
the largest such rho (`usable_utilisation`, found by bisection since W_q rises with rho) derates
the stage's rate to rho * c / T. Where even an idle instance misses the SLO, rho is 0.

Worked example: 4 instances, S = 1 s, C_s^2 = 0, SLO 2 s: the wait may reach 1 s, i.e.
rho^2.16 / (1 - rho) <= 8, rho = 0.90: the stage runs 90% busy, 3.6 req/s instead of 4.

Callers: `planner.model.StageModel.rates` (every plan whose `Hardware` carries `ttft_slo_s`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from prfaas.workload.lengths import FloatArray

#: Bisection steps for rho: 2^-50 of the unit interval, far below any figure we print.
BISECTION_STEPS = 50


def mean_wait_s(
    rate_per_s: FloatArray | float,
    num_servers: FloatArray | float,
    service_s: FloatArray | float,
    service_scv: FloatArray | float,
) -> FloatArray:
    """W_q at arrival rate `rate_per_s` (module docstring); infinite at or past saturation."""
    c = np.asarray(num_servers, dtype=np.float64)
    s = np.asarray(service_s, dtype=np.float64)
    rho = np.asarray(rate_per_s, dtype=np.float64) * s / c
    with np.errstate(divide="ignore", invalid="ignore"):
        wait = (
            (1.0 + np.asarray(service_scv)) / 2.0 * s
            * rho ** (np.sqrt(2.0 * (c + 1.0)) - 1.0) / (c * (1.0 - rho))
        )  # fmt: skip
    result: FloatArray = np.where(rho < 1.0, wait, np.inf)
    return result


def usable_utilisation(
    num_servers: FloatArray | float,
    service_s: FloatArray | float,
    prefill_mean_s: FloatArray | float,
    service_scv: FloatArray | float,
    ttft_slo_s: float,
) -> FloatArray:
    """The largest rho in [0, 1) at which prefill_mean_s + W_q <= ttft_slo_s (0 where even
    rho = 0 misses it); arrays broadcast together. `service_s` is the service time the rate
    uses (T of the stage's mean length, Eq. 3), `prefill_mean_s` the stage's mean prefill
    time, which a request's TTFT adds to its wait."""
    c, s, own, scv = np.broadcast_arrays(
        *(np.asarray(x, dtype=np.float64) for x in (num_servers, service_s, prefill_mean_s,
                                                    service_scv))
    )  # fmt: skip
    budget_s = ttft_slo_s - own
    lo, hi = np.zeros(c.shape), np.ones(c.shape)
    for _ in range(BISECTION_STEPS):
        mid = (lo + hi) / 2.0
        meets = mean_wait_s(mid * c / s, c, s, scv) <= budget_s
        lo, hi = np.where(meets, mid, lo), np.where(meets, hi, mid)
    result: FloatArray = np.where(budget_s >= 0, lo, 0.0)
    return result


@dataclass(frozen=True, slots=True, eq=False)
class StageServiceMoments:
    """Per threshold edge k: the mean prefill time and its C_s^2 over the bins each stage
    serves (PD-P: bins below k; PrfaaS: bins at and above k). NaN where a stage is empty."""

    short_mean_s: FloatArray
    short_scv: FloatArray
    long_mean_s: FloatArray
    long_scv: FloatArray

    @classmethod
    def of(
        cls, mass: FloatArray, short_bin_s: FloatArray, long_bin_s: FloatArray
    ) -> StageServiceMoments:
        """From the histogram's bin masses and each stage's prefill time at every bin mean."""
        short_mean, short_scv = _moments(mass, short_bin_s, below=True)
        long_mean, long_scv = _moments(mass, long_bin_s, below=False)
        return cls(short_mean, short_scv, long_mean, long_scv)


def _moments(mass: FloatArray, bin_s: FloatArray, *, below: bool) -> tuple[FloatArray, FloatArray]:
    """Mean and C_s^2 of bin_s over the bins below (or at and above) every edge."""
    weight = np.where(mass > 0, mass, 0.0)
    times = np.where(mass > 0, np.nan_to_num(bin_s), 0.0)
    sums = [weight, weight * times, weight * times**2]
    if below:
        m0, m1, m2 = (np.concatenate([[0.0], np.cumsum(x)]) for x in sums)
    else:
        m0, m1, m2 = (np.concatenate([np.cumsum(x[::-1])[::-1], [0.0]]) for x in sums)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(m0 > 1e-12, m1 / m0, np.nan)
        scv = np.maximum(m2 / m0 / mean**2 - 1.0, 0.0)
    return mean, np.where(m0 > 1e-12, scv, np.nan)
