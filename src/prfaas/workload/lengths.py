"""Length distributions (input or output tokens) and the histogram the planner works on.

The planner needs, for every candidate threshold t, the offload fraction p = P(L > t) and the
conditional means l_long = E[L | L > t] and l_short = E[L | L <= t] (paper section 4), plus
expectations of prefill latency over lengths for TTFT. Every distribution therefore reduces to
one currency, a `LengthHistogram` on a fixed grid of edges 0, s, 2s, ...:

    bin i = (edges[i], edges[i+1]]     mass[i] = P(L in bin i)     mean[i] = E[L | L in bin i]

Because each bin carries its exact conditional mean, p, l_long and l_short at every edge are
exact sums (for the lognormal: exact up to float rounding), not midpoint approximations; only
expectations of non-linear functions (prefill time) see the bin width.

Distributions: `TruncatedLognormal` (the paper's workload, closed form), `EmpiricalLengths`
(samples, e.g. a trace's uncached lengths) and `FixedLength` (a point mass, e.g. 1024 output
tokens). Callers: `workload.workload` builds a `Workload` from them; `planner` consumes it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]

_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def _normal_cdf(z: FloatArray) -> FloatArray:
    """Phi(z) as erfc(-z / sqrt 2) / 2: accurate deep in the lower tail, where 1 + erf is not."""
    result: FloatArray = 0.5 * _erfc(-np.asarray(z, dtype=np.float64) / math.sqrt(2.0))
    return result


def grid_edges(max_tokens: float, step_tokens: int) -> FloatArray:
    """Edges 0, s, 2s, ... up to the first multiple of s at or above `max_tokens`."""
    if step_tokens < 1:
        raise ValueError("step_tokens must be at least 1")
    num_bins = max(1, math.ceil(max_tokens / step_tokens))
    return np.arange(num_bins + 1, dtype=np.float64) * step_tokens


@dataclass(frozen=True, slots=True)
class ThresholdSplit:
    """p, l_long and l_short at each threshold (arrays aligned with `threshold_tokens`).

    l_long is NaN where nothing is offloaded (p = 0) and l_short NaN where everything is (p = 1).
    """

    threshold_tokens: FloatArray
    offload_fraction: FloatArray
    long_mean_tokens: FloatArray
    short_mean_tokens: FloatArray


@dataclass(frozen=True, slots=True, eq=False)
class LengthHistogram:
    """A length distribution binned on edges 0, s, 2s, ...; see the module docstring."""

    edges_tokens: FloatArray
    mass: FloatArray
    mean_tokens: FloatArray

    def __post_init__(self) -> None:
        n = len(self.edges_tokens) - 1
        if n < 1 or self.mass.shape != (n,) or self.mean_tokens.shape != (n,):
            raise ValueError("a histogram needs n+1 edges, n masses and n bin means")
        if np.any(self.mass < 0) or not math.isclose(float(self.mass.sum()), 1.0, rel_tol=1e-9):
            raise ValueError("bin masses must be non-negative and sum to 1")

    @property
    def step_tokens(self) -> float:
        return float(self.edges_tokens[1] - self.edges_tokens[0])

    @property
    def mean(self) -> float:
        return float(self.mass @ self.mean_tokens)

    def expect(self, values: FloatArray) -> float:
        """E[f(L)] given f evaluated at each bin's mean length."""
        return float(self.mass @ values)

    def split(self) -> ThresholdSplit:
        """p, l_long, l_short at every edge (the thresholds the planner searches)."""
        mass_above = np.concatenate([np.cumsum(self.mass[::-1])[::-1], [0.0]])
        sum_above = np.concatenate([np.cumsum((self.mass * self.mean_tokens)[::-1])[::-1], [0.0]])
        mass_below = np.concatenate([[0.0], np.cumsum(self.mass)])
        sum_below = np.concatenate([[0.0], np.cumsum(self.mass * self.mean_tokens)])
        # Round-off can leave ~1e-17 of mass past the last occupied bin: call it zero, and take
        # p as above / (above + below) so that p is exactly 0 or 1 where one side is empty.
        mass_above[mass_above < 1e-12] = 0.0
        mass_below[mass_below < 1e-12] = 0.0
        with np.errstate(invalid="ignore", divide="ignore"):
            long_mean = np.where(mass_above > 0, sum_above / mass_above, np.nan)
            short_mean = np.where(mass_below > 0, sum_below / mass_below, np.nan)
        offload = mass_above / (mass_above + mass_below)
        return ThresholdSplit(self.edges_tokens, offload, long_mean, short_mean)

    def quantile(self, q: float) -> float:
        """The q-quantile, linear in the cumulative mass inside a bin."""
        cdf = np.concatenate([[0.0], np.cumsum(self.mass)])
        return float(np.interp(q, cdf, self.edges_tokens))


class LengthDistribution(Protocol):
    """Anything the planner can take as input or output lengths."""

    @property
    def mean_tokens(self) -> float: ...

    @property
    def max_tokens(self) -> float: ...

    def histogram(self, step_tokens: int) -> LengthHistogram: ...


@dataclass(frozen=True, slots=True)
class TruncatedLognormal:
    """ln L ~ Normal(mu, sigma), conditioned on min_tokens <= L <= max_tokens (paper section 5).

    Closed forms with a = (ln x - mu) / sigma and Z the mass inside the bounds:
        P(L <= x)    = (Phi(a_x) - Phi(a_min)) / Z
        E[L; L <= x] = exp(mu + sigma^2/2) (Phi(a_x - sigma) - Phi(a_min - sigma)) / Z
    """

    mu: float
    sigma: float
    min_tokens: float
    max_tokens: float

    def __post_init__(self) -> None:
        if not 0 < self.min_tokens < self.max_tokens or self.sigma <= 0:
            raise ValueError("need 0 < min_tokens < max_tokens and sigma > 0")
        if self._mass_inside() <= 0:
            raise ValueError("the bounds hold no mass of this lognormal")

    def _z(self, x: FloatArray) -> FloatArray:
        clipped = np.clip(np.asarray(x, dtype=np.float64), self.min_tokens, self.max_tokens)
        z: FloatArray = (np.log(clipped) - self.mu) / self.sigma
        return z

    def _mass_inside(self) -> float:
        ends = self._z(np.array([self.min_tokens, self.max_tokens]))
        cdf = _normal_cdf(ends)
        return float(cdf[1] - cdf[0])

    def cdf(self, x: FloatArray) -> FloatArray:
        """P(L <= x), elementwise."""
        low = _normal_cdf(self._z(np.array(self.min_tokens)))
        result: FloatArray = (_normal_cdf(self._z(x)) - low) / self._mass_inside()
        return result

    def partial_mean(self, x: FloatArray) -> FloatArray:
        """E[L; L <= x] (the mean restricted to L <= x, not divided by P(L <= x))."""
        s = self.sigma
        low = _normal_cdf(self._z(np.array(self.min_tokens)) - s)
        scale = math.exp(self.mu + s * s / 2) / self._mass_inside()
        result: FloatArray = scale * (_normal_cdf(self._z(x) - s) - low)
        return result

    @property
    def mean_tokens(self) -> float:
        return float(self.partial_mean(np.array(self.max_tokens)))

    def quantile(self, q: float) -> float:
        """Inverse cdf by bisection on ln L (60 halvings: far below a token)."""
        lo, hi = math.log(self.min_tokens), math.log(self.max_tokens)
        for _ in range(60):
            mid = (lo + hi) / 2
            lo, hi = (mid, hi) if float(self.cdf(np.array(math.exp(mid)))) < q else (lo, mid)
        return math.exp((lo + hi) / 2)

    def histogram(self, step_tokens: int) -> LengthHistogram:
        edges = grid_edges(self.max_tokens, step_tokens)
        mass = np.diff(self.cdf(edges))
        partial = np.diff(self.partial_mean(edges))
        midpoints = (edges[:-1] + edges[1:]) / 2
        with np.errstate(invalid="ignore", divide="ignore"):
            means = np.where(mass > 0, partial / np.where(mass > 0, mass, 1.0), midpoints)
        return LengthHistogram(edges, mass / mass.sum(), means)


@dataclass(frozen=True, slots=True, eq=False)
class EmpiricalLengths:
    """Observed lengths (e.g. a trace's post-prefix-match uncached lengths), each equally likely.

    `work_tokens`, when given, is what each sample's prefill really computes where that differs
    from the length a router judges it by (`samples_tokens`): a pool replay sees a request's
    hit at dispatch, and the prefill, starting later, may find more of it cached (its previous
    turn committed meanwhile). The histogram then splits by the judged length (which requests
    cross a threshold) and its bins carry the mean *work* of their samples (what each side
    computes); the mean is the mean work.
    """

    samples_tokens: NDArray[np.int64]
    work_tokens: NDArray[np.int64] | None = None

    @classmethod
    def of(
        cls,
        samples_tokens: Sequence[int] | NDArray[np.int64],
        work_tokens: Sequence[int] | NDArray[np.int64] | None = None,
    ) -> EmpiricalLengths:
        samples = np.asarray(samples_tokens, dtype=np.int64)
        if samples.size == 0 or np.any(samples < 1):
            raise ValueError("need at least one sample, every sample at least 1 token")
        if work_tokens is None:
            return cls(samples)
        work = np.asarray(work_tokens, dtype=np.int64)
        if work.shape != samples.shape or np.any(work < 1):
            raise ValueError("work_tokens: one per sample, each at least 1 token")
        return cls(samples, work)

    @property
    def _work(self) -> NDArray[np.int64]:
        return self.samples_tokens if self.work_tokens is None else self.work_tokens

    @property
    def mean_tokens(self) -> float:
        return float(self._work.mean())

    @property
    def max_tokens(self) -> float:
        return float(self.samples_tokens.max())

    def histogram(self, step_tokens: int) -> LengthHistogram:
        edges = grid_edges(self.max_tokens, step_tokens)
        # Bin i holds (edges[i], edges[i+1]]: a sample equal to an edge belongs to the bin below.
        index = np.searchsorted(edges, self.samples_tokens, side="left") - 1
        counts = np.bincount(index, minlength=len(edges) - 1).astype(np.float64)
        sums = np.bincount(index, weights=self._work, minlength=len(edges) - 1)
        midpoints = (edges[:-1] + edges[1:]) / 2
        means = np.where(counts > 0, sums / np.maximum(counts, 1.0), midpoints)
        return LengthHistogram(edges, counts / counts.sum(), means)


@dataclass(frozen=True, slots=True)
class FixedLength:
    """Every request has exactly `tokens` tokens (the paper's 1024 output tokens)."""

    tokens: int

    def __post_init__(self) -> None:
        if self.tokens < 1:
            raise ValueError("a fixed length must be at least 1 token")

    @property
    def mean_tokens(self) -> float:
        return float(self.tokens)

    @property
    def max_tokens(self) -> float:
        return float(self.tokens)

    def histogram(self, step_tokens: int) -> LengthHistogram:
        return EmpiricalLengths.of([self.tokens]).histogram(step_tokens)
