"""Statistics over the seeds of a reproduction study: mean ± std, Welch's t interval.

A study trains every variant with a few seeds; a claim "B beats A" is judged by the difference
of the seed means, ``mean(B) - mean(A)``, and its confidence interval from Welch's t test
(unequal variances):

    se² = s_A² / n_A + s_B² / n_B,
    ν   = se⁴ / ((s_A² / n_A)² / (n_A - 1) + (s_B² / n_B)² / (n_B - 1))    (Welch–Satterthwaite),
    CI  = mean(B) - mean(A) ± t_{(1 + c) / 2, ν} · se,

with ``s²`` the unbiased sample variances and ``t_{q, ν}`` the q-quantile of Student's t with
ν (generally non-integer) degrees of freedom. The t distribution is computed here from the
regularised incomplete beta function (continued fraction), so nothing beyond ``math`` is
needed:

    P(T <= t) = 1 - I_{ν / (ν + t²)}(ν / 2, 1 / 2) / 2    for t >= 0.

Pure functions on sequences of floats; no torch, no scipy.
"""
import math
from typing import Mapping, NamedTuple, Optional, Sequence


class Summary(NamedTuple):
    """Mean and sample standard deviation of ``n`` values (``std`` is None for ``n < 2``)."""
    n: int
    mean: float
    std: Optional[float]


class Difference(NamedTuple):
    """``mean(variant) - mean(baseline)`` with its Welch t confidence interval.

    Attributes:
        difference (float): the difference of the means.
        low, high (float | None): the interval bounds; None when a group has fewer than two
            values (no variance to estimate). When both groups have no spread at all
            (``std_error == 0``) the interval is the point ``[difference, difference]``.
        df (float | None): Welch–Satterthwaite degrees of freedom ν.
        std_error (float | None): ``se``.
        t (float | None): ``difference / se``.
        p_value (float | None): two-sided ``P(|T_ν| >= |t|)``.
        confidence (float): the interval's coverage, e.g. 0.95.
    """
    difference: float
    low: Optional[float]
    high: Optional[float]
    df: Optional[float]
    std_error: Optional[float]
    t: Optional[float]
    p_value: Optional[float]
    confidence: float


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


def mean(values):
    """Arithmetic mean of a non-empty sequence."""
    values = _values(values)
    return math.fsum(values) / len(values)


def sample_variance(values):
    """Unbiased sample variance (divisor ``n - 1``); None for fewer than two values."""
    values = _values(values)
    if len(values) < 2:
        return None
    m = math.fsum(values) / len(values)
    return math.fsum((v - m) ** 2 for v in values) / (len(values) - 1)


def sample_std(values):
    """Sample standard deviation (divisor ``n - 1``); None for fewer than two values."""
    var = sample_variance(values)
    return None if var is None else math.sqrt(var)


def summarize(values):
    """:class:`Summary` ``(n, mean, std)`` of a non-empty sequence."""
    values = _values(values)
    return Summary(len(values), mean(values), sample_std(values))


def _beta_continued_fraction(a, b, x, max_terms=500, eps=1e-15):
    """Continued fraction of the incomplete beta function (modified Lentz evaluation)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, max_terms + 1):
        for numerator in (m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
                          -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1))):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            h *= c * d
        if abs(c * d - 1.0) < eps:
            return h
    raise ArithmeticError(f'incomplete beta continued fraction did not converge for '
                          f'a={a}, b={b}, x={x}')


def regularized_incomplete_beta(a, b, x):
    """``I_x(a, b) = B(x; a, b) / B(a, b)`` for ``a, b > 0`` and ``0 <= x <= 1``."""
    if not (a > 0 and b > 0):
        raise ValueError(f'a={a}, b={b}; expected both > 0')
    if not 0.0 <= x <= 1.0:
        raise ValueError(f'x={x}; expected 0 <= x <= 1')
    if x in (0.0, 1.0):
        return float(x)
    log_front = (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x)
                 + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _beta_continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _beta_continued_fraction(b, a, 1.0 - x) / b


def _check_df(df):
    if not (isinstance(df, (int, float)) and df > 0):
        raise ValueError(f'df={df!r}; expected degrees of freedom > 0 (math.inf: normal)')


def student_t_cdf(t, df):
    """``P(T <= t)`` for Student's t with ``df > 0`` degrees of freedom (``math.inf``: normal)."""
    _check_df(df)
    if math.isinf(df):
        return 0.5 * math.erfc(-t / math.sqrt(2.0))
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * regularized_incomplete_beta(df / 2.0, 0.5, df / (df + t * t))
    return 1.0 - tail if t > 0 else tail


def student_t_quantile(p, df, tol=1e-12):
    """The ``t`` with ``P(T <= t) = p`` (``0 < p < 1``), by bisection on :func:`student_t_cdf`."""
    _check_df(df)
    if not 0.0 < p < 1.0:
        raise ValueError(f'p={p}; expected 0 < p < 1')
    if p == 0.5:
        return 0.0
    if p < 0.5:
        return -student_t_quantile(1.0 - p, df, tol)
    low, high = 0.0, 1.0
    while student_t_cdf(high, df) < p:
        low, high = high, 2.0 * high
    while high - low > tol * max(1.0, high):
        middle = 0.5 * (low + high)
        if student_t_cdf(middle, df) < p:
            low = middle
        else:
            high = middle
    return 0.5 * (low + high)


def welch_degrees_of_freedom(var_a, n_a, var_b, n_b):
    """Welch–Satterthwaite ν of two groups with sample variances ``var_*`` and sizes ``n_* >= 2``;
    None when both variances are 0 (ν is undefined)."""
    if n_a < 2 or n_b < 2:
        raise ValueError(f'n_a={n_a}, n_b={n_b}; expected at least 2 values per group')
    a, b = var_a / n_a, var_b / n_b
    denominator = a * a / (n_a - 1) + b * b / (n_b - 1)
    if denominator == 0.0:
        return None
    return (a + b) ** 2 / denominator


def mean_interval(values, confidence=0.95):
    """The two-sided Student-t interval ``(low, high)`` of the mean of ``values`` (one per
    seed): ``mean ± t_{(1+c)/2, n-1} · s / sqrt(n)``; None for fewer than two values."""
    if not 0.0 < confidence < 1.0:
        raise ValueError(f'confidence={confidence}; expected a number in (0, 1)')
    values = _values(values)
    if len(values) < 2:
        return None
    half_width = (student_t_quantile(0.5 + confidence / 2.0, len(values) - 1) *
                  sample_std(values) / math.sqrt(len(values)))
    return mean(values) - half_width, mean(values) + half_width


def welch_difference(baseline, variant, confidence=0.95):
    """:class:`Difference` of ``mean(variant) - mean(baseline)`` with Welch's t interval.

    Args:
        baseline (Sequence[float]): the values (one per seed) of the reference.
        variant (Sequence[float]): the values of the variant compared with it.
        confidence (float): coverage of the two-sided interval, in (0, 1).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f'confidence={confidence}; expected a number in (0, 1)')
    a, b = _values(baseline, 'baseline'), _values(variant, 'variant')
    difference = mean(b) - mean(a)
    if len(a) < 2 or len(b) < 2:
        return Difference(difference, None, None, None, None, None, None, confidence)
    var_a, var_b = sample_variance(a), sample_variance(b)
    std_error = math.sqrt(var_a / len(a) + var_b / len(b))
    df = welch_degrees_of_freedom(var_a, len(a), var_b, len(b))
    if std_error == 0.0:
        return Difference(difference, difference, difference, df, 0.0, None, None, confidence)
    t = difference / std_error
    half_width = student_t_quantile(0.5 + confidence / 2.0, df) * std_error
    p_value = 2.0 * (1.0 - student_t_cdf(abs(t), df))
    return Difference(difference, difference - half_width, difference + half_width, df,
                      std_error, t, p_value, confidence)


def pointwise_summary(series: Sequence[Mapping]):
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
