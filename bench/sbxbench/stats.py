"""Summary statistics of benchmark samples, with bootstrap confidence intervals.

Definitions (also in docs/benchmarks.md, "sbx-bench: results format"):

- Percentiles: linear interpolation between closest ranks, Hyndman & Fan
  (1996), "Sample quantiles in statistical packages", definition 7: for
  sorted x[0..n-1] and probability p, h = (n - 1) p, and
  Q(p) = x[floor(h)] + (h - floor(h)) (x[floor(h) + 1] - x[floor(h)]).
  It is numpy's default ("linear") and R's type 7. The median is Q(0.5),
  which is the usual median (the mean of the two middle values for even n).
- Confidence interval of the median: the percentile bootstrap (Efron &
  Tibshirani 1993, "An Introduction to the Bootstrap", ch. 13): draw B
  resamples of size n with replacement, take each one's median, and report
  the type-7 percentiles alpha/2 and 1 - alpha/2 of those B medians.
- Ratio of medians (other VMM / baseline) and its interval: each bootstrap
  round resamples both sides independently (they are independent samples),
  and the interval is the percentile interval of the B ratios.

Random numbers come from a random.Random seeded per (seed, label), so a
result is reproducible and does not depend on the order figures are
computed in. n = 1 gives a degenerate interval [x, x]; n = 0 or 0 resamples
give None (no interval).
"""

from __future__ import annotations

import hashlib
import math
import random
from dataclasses import dataclass
from typing import Sequence

DEFAULT_SEED = 17  # issue 17; any fixed value keeps results reproducible
DEFAULT_RESAMPLES = 10000
DEFAULT_CONFIDENCE = 0.95


def percentile(values: Sequence[float], p: float) -> float:
    """Hyndman & Fan (1996) type 7 sample quantile of `values` at p in [0, 1]."""
    if not values:
        raise ValueError("percentile of no values")
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"percentile probability {p} outside [0, 1]")
    xs = sorted(values)
    return _sorted_percentile(xs, p)


def _sorted_percentile(xs: Sequence[float], p: float) -> float:
    h = (len(xs) - 1) * p
    lo = math.floor(h)
    if lo + 1 >= len(xs):
        return float(xs[-1])
    return xs[lo] + (h - lo) * (xs[lo + 1] - xs[lo])


def median(values: Sequence[float]) -> float:
    """Q(0.5) of Hyndman & Fan type 7: the ordinary sample median."""
    return percentile(values, 0.5)


def _sorted_median(xs: Sequence[float]) -> float:
    n = len(xs)
    mid = n // 2
    return float(xs[mid]) if n % 2 else (xs[mid - 1] + xs[mid]) / 2.0


def seeded_rng(seed: int, label: str) -> random.Random:
    """A generator of its own for one (seed, label): the same label gets the
    same stream whatever else was computed before it."""
    digest = hashlib.sha256(f"{seed}:{label}".encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "big"))


def _bootstrap_medians(values: Sequence[float], resamples: int, rng: random.Random) -> list[float]:
    n = len(values)
    pick = rng.choices
    return [_sorted_median(sorted(pick(values, k=n))) for _ in range(resamples)]


def _interval(draws: list[float], confidence: float) -> tuple[float, float]:
    draws.sort()
    alpha = 1.0 - confidence
    return (_sorted_percentile(draws, alpha / 2.0), _sorted_percentile(draws, 1.0 - alpha / 2.0))


def bootstrap_median_ci(values: Sequence[float], *, resamples: int = DEFAULT_RESAMPLES,
                        confidence: float = DEFAULT_CONFIDENCE, seed: int = DEFAULT_SEED,
                        label: str = "") -> tuple[float, float] | None:
    """Percentile-bootstrap interval of the median (Efron & Tibshirani 1993,
    ch. 13). None for no values or no resamples; [x, x] for a single value."""
    if not values or resamples < 1:
        return None
    if len(values) == 1:
        m = median(values)
        return (m, m)
    draws = _bootstrap_medians(list(values), resamples, seeded_rng(seed, label))
    return _interval(draws, confidence)


def bootstrap_ratio_ci(numerator: Sequence[float], denominator: Sequence[float], *,
                       resamples: int = DEFAULT_RESAMPLES, confidence: float = DEFAULT_CONFIDENCE,
                       seed: int = DEFAULT_SEED, label: str = "") -> tuple[float, float] | None:
    """Percentile-bootstrap interval of median(numerator) / median(denominator),
    both sides resampled independently in each round. None when either side is
    empty or a resampled denominator median is 0 (the ratio is undefined)."""
    if not numerator or not denominator or resamples < 1:
        return None
    rng = seeded_rng(seed, label)
    num = list(numerator)
    den = list(denominator)
    rounds = resamples
    top = _bootstrap_medians(num, rounds, rng) if len(num) > 1 else [median(num)] * rounds
    bottom = _bootstrap_medians(den, rounds, rng) if len(den) > 1 else [median(den)] * rounds
    if any(b == 0 for b in bottom):
        return None
    return _interval([t / b for t, b in zip(top, bottom)], confidence)


@dataclass(frozen=True)
class Summary:
    """The statistics of one figure of one VMM (all in the figure's unit)."""
    n: int
    median: float | None
    p5: float | None
    p95: float | None
    min: float | None
    max: float | None
    mean: float | None
    median_ci: tuple[float, float] | None

    def as_dict(self) -> dict:
        return {
            "n": self.n, "median": self.median, "p5": self.p5, "p95": self.p95,
            "min": self.min, "max": self.max, "mean": self.mean,
            "median_ci": list(self.median_ci) if self.median_ci else None,
        }


def summarize(values: Sequence[float], *, resamples: int = DEFAULT_RESAMPLES,
              confidence: float = DEFAULT_CONFIDENCE, seed: int = DEFAULT_SEED,
              label: str = "") -> Summary:
    """n, median, p5, p95 (type 7), min, max, mean and the median's bootstrap CI."""
    if not values:
        return Summary(0, None, None, None, None, None, None, None)
    xs = sorted(float(v) for v in values)
    return Summary(
        n=len(xs),
        median=_sorted_percentile(xs, 0.5),
        p5=_sorted_percentile(xs, 0.05),
        p95=_sorted_percentile(xs, 0.95),
        min=xs[0],
        max=xs[-1],
        mean=math.fsum(xs) / len(xs),
        median_ci=bootstrap_median_ci(xs, resamples=resamples, confidence=confidence,
                                      seed=seed, label=label),
    )


@dataclass(frozen=True)
class Ratio:
    """median(numerator) / median(denominator) and its bootstrap interval."""
    ratio: float | None
    ci: tuple[float, float] | None
    n_numerator: int
    n_denominator: int

    def as_dict(self) -> dict:
        return {"ratio": self.ratio, "ci": list(self.ci) if self.ci else None,
                "n": self.n_numerator, "n_baseline": self.n_denominator}


def ratio_of_medians(numerator: Sequence[float], denominator: Sequence[float], *,
                     resamples: int = DEFAULT_RESAMPLES, confidence: float = DEFAULT_CONFIDENCE,
                     seed: int = DEFAULT_SEED, label: str = "") -> Ratio:
    if not numerator or not denominator:
        return Ratio(None, None, len(numerator), len(denominator))
    bottom = median(denominator)
    value = median(numerator) / bottom if bottom != 0 else None
    ci = bootstrap_ratio_ci(numerator, denominator, resamples=resamples, confidence=confidence,
                            seed=seed, label=label) if value is not None else None
    return Ratio(value, ci, len(numerator), len(denominator))
