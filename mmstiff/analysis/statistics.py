"""Summaries over the seeds of a study: mean, sample standard deviation, pointwise bands.

Descriptive statistics only (NumPy on sequences of floats, no torch); the inference
over seeds (Welch intervals, equivalence tests, power, q-values) is
:mod:`mmstiff.studies.statistics`.
"""
import math
from typing import Iterable, Mapping, NamedTuple, Optional, Sequence

import numpy as np


class Summary(NamedTuple):
    """Mean and sample standard deviation of ``n`` values (``std`` is None for ``n < 2``)."""
    n: int
    mean: float
    std: Optional[float]


class PointwiseSummary(NamedTuple):
    """Mean and standard deviation at each x over several series (:func:`pointwise_summary`)."""
    x: list
    mean: list
    std: list
    count: list


def _values(values, name='values'):
    values = [float(v) for v in values]
    if not values:
        raise ValueError(f'{name} is empty; expected at least one number')
    return values


def mean(values: Iterable[float]) -> float:
    """Arithmetic mean of a non-empty sequence."""
    return float(np.mean(_values(values)))


def sample_variance(values: Iterable[float]) -> Optional[float]:
    """Unbiased sample variance (divisor ``n - 1``); None for fewer than two values."""
    values = _values(values)
    if len(values) < 2:
        return None
    return float(np.var(values, ddof=1))


def sample_std(values: Iterable[float]) -> Optional[float]:
    """Sample standard deviation (divisor ``n - 1``); None for fewer than two values."""
    var = sample_variance(values)
    return None if var is None else math.sqrt(var)


def summarize(values: Iterable[float]) -> Summary:
    """:class:`Summary` ``(n, mean, std)`` of a non-empty sequence."""
    values = _values(values)
    return Summary(len(values), mean(values), sample_std(values))


def pointwise_summary(series: Sequence[Mapping]) -> PointwiseSummary:
    """Mean and std at every x of several ``{x: y}`` series (e.g. one curve per seed).

    The x values are the union over the series: sorted when they are all numbers, else in the
    order they first appear. At each x the statistics use the series that have it (``count``);
    ``std`` is None where fewer than two do.
    """
    xs = []
    seen = set()
    for s in series:
        for x in s:
            if x not in seen:
                seen.add(x)
                xs.append(x)
    if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in xs):
        xs.sort()
    means, stds, counts = [], [], []
    for x in xs:
        values = [float(s[x]) for s in series if x in s and s[x] is not None]
        values = [v for v in values if math.isfinite(v)]
        counts.append(len(values))
        means.append(mean(values) if values else math.nan)
        stds.append(sample_std(values) if values else None)
    return PointwiseSummary(xs, means, stds, counts)
