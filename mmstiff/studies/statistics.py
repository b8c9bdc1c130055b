"""Inference over the seeds of a study: Welch intervals, TOST, power, Benjamini–Hochberg, and
rank correlations across runs.

Every distribution comes from SciPy (Student's t, Pearson's r, Spearman's ρ, the normal, the BH
step-up); the formulas
and the choices (two-sided 95 %, power 80 %) are in docs/methods.md §13 and docs/studies.md.
Pure functions on sequences of floats.
"""
import math
import warnings
from typing import List, NamedTuple, Optional, Sequence, Tuple

import numpy as np
from scipy import stats

from mmstiff.analysis.statistics import sample_std

#: a standard error this small relative to the values is floating-point rounding, not spread
_ROUNDING = 1e-12


class Difference(NamedTuple):
    """``mean(variant) - mean(baseline)`` with its Welch t confidence interval.

    ``low``, ``high``, ``df``, ``std_error``, ``t`` and ``p_value`` are None when a group has
    fewer than two values; when neither group has any spread the interval is the point
    ``[difference, difference]`` and ``t``, ``p_value`` are None.
    """
    difference: float
    low: Optional[float]
    high: Optional[float]
    df: Optional[float]
    std_error: Optional[float]
    t: Optional[float]
    p_value: Optional[float]
    confidence: float


class Correlation(NamedTuple):
    """A correlation (Pearson's r or Spearman's ρ) of ``n`` pairs with its Fisher-z interval and
    two-sided p-value."""
    n: int
    r: float
    low: Optional[float]
    high: Optional[float]
    p_value: Optional[float]


def _floats(values, name):
    values = [float(v) for v in values]
    if not values:
        raise ValueError(f'{name} is empty; expected at least one number')
    return values


def _check_confidence(confidence):
    if not 0.0 < confidence < 1.0:
        raise ValueError(f'confidence={confidence}; expected a number in (0, 1)')


def mean_interval(values: Sequence[float],
                  confidence: float = 0.95) -> Optional[Tuple[float, float]]:
    """The Student-t interval ``(low, high)`` of the mean of ``values``; None below 2 values."""
    _check_confidence(confidence)
    values = _floats(values, 'values')
    if len(values) < 2:
        return None
    if sample_std(values) == 0:
        return float(values[0]), float(values[0])
    low, high = stats.t.interval(confidence,
                                 len(values) - 1, loc=np.mean(values),
                                 scale=sample_std(values) / math.sqrt(len(values)))
    return float(low), float(high)


def welch_difference(baseline: Sequence[float], variant: Sequence[float],
                     confidence: float = 0.95) -> Difference:
    """:class:`Difference` of ``mean(variant) - mean(baseline)`` (Welch's unequal-variance t)."""
    _check_confidence(confidence)
    a, b = _floats(baseline, 'baseline'), _floats(variant, 'variant')
    difference = float(np.mean(b) - np.mean(a))
    if len(a) < 2 or len(b) < 2:
        return Difference(difference, None, None, None, None, None, None, confidence)
    va, vb = np.var(a, ddof=1) / len(a), np.var(b, ddof=1) / len(b)
    std_error = math.sqrt(va + vb)
    if std_error <= _ROUNDING * max(1.0, abs(float(np.mean(a))), abs(float(np.mean(b)))):
        # no spread beyond floating-point rounding: the difference is known exactly
        return Difference(difference, difference, difference, None, 0.0, None, None, confidence)
    with warnings.catch_warnings():
        # a group without spread (every seed equal) is valid input for Welch's t
        warnings.filterwarnings('ignore', 'Precision loss occurred', RuntimeWarning)
        result = stats.ttest_ind(b, a, equal_var=False)
    interval = result.confidence_interval(confidence)
    return Difference(difference, float(interval.low), float(interval.high), float(result.df),
                      std_error, float(result.statistic), float(result.pvalue), confidence)


def one_sample_difference(values: Sequence[float], confidence: float = 0.95) -> Difference:
    """:class:`Difference` of ``mean(values) - 0`` with the one-sample Student-t interval."""
    _check_confidence(confidence)
    values = _floats(values, 'values')
    mean = float(np.mean(values))
    if len(values) < 2:
        return Difference(mean, None, None, None, None, None, None, confidence)
    std_error = sample_std(values) / math.sqrt(len(values))
    if std_error <= _ROUNDING * max(1.0, abs(mean)):
        return Difference(mean, mean, mean, None, 0.0, None, None, confidence)
    result = stats.ttest_1samp(values, 0.0)
    interval = result.confidence_interval(confidence)
    return Difference(mean, float(interval.low), float(interval.high), float(result.df), std_error,
                      float(result.statistic), float(result.pvalue), confidence)


def tost_p_value(difference: Difference, margin: float) -> Optional[float]:
    """Two one-sided tests of ``|true difference| < margin`` from a :class:`Difference`: the
    larger one-sided p-value (equivalence shown at level α when it is below α)."""
    if not margin > 0:
        raise ValueError(f'margin={margin}; expected a positive smallest effect of interest')
    d = difference
    if d.std_error is None:
        return None
    if d.std_error == 0.0:
        return 0.0 if abs(d.difference) < margin else 1.0
    lower = stats.t.sf((d.difference + margin) / d.std_error, d.df)
    upper = stats.t.cdf((d.difference - margin) / d.std_error, d.df)
    return float(max(lower, upper))


def minimum_detectable_effect(std_error: Optional[float], df: Optional[float], alpha: float = 0.05,
                              power: float = 0.8) -> Optional[float]:
    """The true difference a two-sided level-``alpha`` Welch test finds with probability
    ``power``: ``(t_{1-α/2, ν} + t_{power, ν}) · se`` for the observed ``se`` and ``ν``."""
    if std_error is None or df is None:
        return None
    return float((stats.t.ppf(1 - alpha / 2, df) + stats.t.ppf(power, df)) * std_error)


def seeds_for_effect(std_a: Optional[float], std_b: Optional[float], effect: float,
                     alpha: float = 0.05, power: float = 0.8, limit: int = 1000) -> Optional[int]:
    """Seeds per variant for a minimum detectable effect of at most ``effect`` with the
    standard deviations ``std_a``, ``std_b`` (Welch–Satterthwaite ν); None beyond ``limit``."""
    if None in (std_a, std_b) or not effect > 0:
        return None
    for n in range(2, limit + 1):
        va, vb = std_a**2 / n, std_b**2 / n
        if va + vb == 0:
            return n
        df = (va + vb)**2 / (va**2 / (n - 1) + vb**2 / (n - 1))
        if minimum_detectable_effect(math.sqrt(va + vb), df, alpha, power) <= effect:
            return n
    return None


def bh_q_values(p_values: Sequence[Optional[float]]) -> List[Optional[float]]:
    """Benjamini–Hochberg adjusted p-values (q-values), in the order given; None stays None."""
    known = [i for i, p in enumerate(p_values) if p is not None]
    q = [None] * len(p_values)
    if known:
        adjusted = stats.false_discovery_control([p_values[i] for i in known], method='bh')
        for i, value in zip(known, adjusted):
            q[i] = float(value)
    return q


def sign_counts(pairs: Sequence[Tuple[float, float]]) -> Tuple[int, int, int]:
    """``(above, below, equal)``: how many ``(variant, baseline)`` pairs of the same seed have
    the variant above, below or equal to the baseline."""
    above = sum(1 for v, b in pairs if v > b)
    below = sum(1 for v, b in pairs if v < b)
    return above, below, len(pairs) - above - below


def correlation(x: Sequence[float], y: Sequence[float], confidence: float = 0.95) -> Correlation:
    """:class:`Correlation` of the paired values ``x``, ``y`` (None fields below 3 pairs)."""
    x, y = _floats(x, 'x'), _floats(y, 'y')
    if len(x) != len(y):
        raise ValueError(f'x has {len(x)} values and y {len(y)}; expected pairs')
    if len(x) < 3 or np.std(x) == 0 or np.std(y) == 0:
        return Correlation(len(x), math.nan, None, None, None)
    result = stats.pearsonr(x, y)
    interval = result.confidence_interval(confidence)
    return Correlation(
        len(x), float(result.statistic), float(interval.low), float(interval.high),
        float(result.pvalue))


#: Fieller, Hartley & Pearson (1957): the variance of atanh(ρ̂) of Spearman's ρ̂ is about
#: 1.06 / (n - 3) (Pearson's r: 1 / (n - 3))
SPEARMAN_Z_VARIANCE = 1.06


def _spearman_z_se(n):
    return math.sqrt(SPEARMAN_Z_VARIANCE / (n - 3))


def rank_correlation(x: Sequence[float], y: Sequence[float],
                     confidence: float = 0.95) -> Correlation:
    """:class:`Correlation` of Spearman's ρ of the paired values ``x``, ``y``.

    ρ and its two-sided p-value from :func:`scipy.stats.spearmanr`; the interval is Fisher's z
    with the standard error ``sqrt(1.06 / (n - 3))`` of Fieller, Hartley & Pearson (1957):
    ``tanh(atanh ρ ± z_{(1+confidence)/2} · se)``. Below 4 pairs, or without spread in either
    variable, ρ is NaN and the other fields None; a ρ of ±1 gives the point interval.
    """
    _check_confidence(confidence)
    x, y = _floats(x, 'x'), _floats(y, 'y')
    if len(x) != len(y):
        raise ValueError(f'x has {len(x)} values and y {len(y)}; expected pairs')
    if len(x) < 4 or np.ptp(x) == 0 or np.ptp(y) == 0:
        return Correlation(len(x), math.nan, None, None, None)
    result = stats.spearmanr(x, y)
    rho = float(result.statistic)
    if abs(rho) >= 1.0:
        return Correlation(len(x), rho, rho, rho, float(result.pvalue))
    half = stats.norm.ppf((1 + confidence) / 2) * _spearman_z_se(len(x))
    z = math.atanh(rho)
    return Correlation(len(x), rho, math.tanh(z - half), math.tanh(z + half), float(result.pvalue))


def rank_correlation_mde(n: int, alpha: float = 0.05, power: float = 0.8) -> Optional[float]:
    """The true Spearman ρ that a two-sided level-``alpha`` test of ρ = 0 on ``n`` pairs finds
    with probability ``power`` (Fisher z, :func:`rank_correlation`'s standard error):
    ``tanh((z_{1-α/2} + z_{power}) · sqrt(1.06 / (n - 3)))``; None below 4 pairs."""
    if n < 4:
        return None
    return math.tanh((stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) * _spearman_z_se(n))


def pairs_for_rank_correlation(effect: float, alpha: float = 0.05, power: float = 0.8,
                               limit: int = 100000) -> Optional[int]:
    """The fewest pairs whose :func:`rank_correlation_mde` is at most ``effect`` (0 < effect
    < 1); None beyond ``limit``."""
    if not 0 < effect < 1:
        return None
    z = (stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) / math.atanh(effect)
    n = max(4, math.ceil(3 + SPEARMAN_Z_VARIANCE * z * z))
    while rank_correlation_mde(n, alpha, power) > effect:  # guard against rounding at the edge
        n += 1
    return n if n <= limit else None
