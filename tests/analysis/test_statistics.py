"""Seed statistics: Student's t against closed forms and printed tables, Welch by hand."""
import math

import pytest

from mmstiff.analysis.statistics import (mean, pointwise_summary, regularized_incomplete_beta,
                                         sample_std, sample_variance, student_t_cdf,
                                         student_t_quantile, summarize,
                                         welch_degrees_of_freedom, welch_difference)


def test_mean_and_sample_std_by_hand():
    assert mean([1, 2, 3, 6]) == 3.0
    # deviations -2, -1, 0, 3: sum of squares 14, divisor n - 1 = 3
    assert sample_variance([1, 2, 3, 6]) == pytest.approx(14 / 3)
    assert sample_std([1, 2, 3, 6]) == pytest.approx(math.sqrt(14 / 3))
    assert sample_std([5.0]) is None
    assert summarize([2.0, 4.0]) == (2, 3.0, pytest.approx(math.sqrt(2)))
    with pytest.raises(ValueError, match='empty'):
        mean([])


@pytest.mark.parametrize('a, b, x, expected', [
    (2.0, 1.0, 0.3, 0.3 ** 2),                                   # I_x(a, 1) = x^a
    (3.5, 1.0, 0.8, 0.8 ** 3.5),
    (1.0, 4.0, 0.25, 1 - 0.75 ** 4),                             # I_x(1, b) = 1 - (1 - x)^b
    (0.5, 0.5, 0.6, 2 / math.pi * math.asin(math.sqrt(0.6))),    # arcsine distribution
    (0.5, 0.5, 0.02, 2 / math.pi * math.asin(math.sqrt(0.02))),
    (3.0, 3.0, 0.5, 0.5),                                        # symmetric
])
def test_incomplete_beta_closed_forms(a, b, x, expected):
    assert regularized_incomplete_beta(a, b, x) == pytest.approx(expected, rel=1e-12, abs=1e-14)


@pytest.mark.parametrize('t', [-7.0, -1.3, 0.0, 0.4, 2.0, 12.7])
def test_t_cdf_closed_forms_for_one_and_two_degrees_of_freedom(t):
    assert student_t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-13)
    assert student_t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)),
                                                abs=1e-13)
    assert student_t_cdf(t, math.inf) == pytest.approx(0.5 * (1 + math.erf(t / math.sqrt(2))))


@pytest.mark.parametrize('p', [0.6, 0.9, 0.975, 0.995, 0.025])
def test_t_quantile_closed_forms(p):
    assert student_t_quantile(p, 1) == pytest.approx(math.tan(math.pi * (p - 0.5)), rel=1e-10)
    assert student_t_quantile(p, 2) == pytest.approx(
        (2 * p - 1) / math.sqrt(2 * p * (1 - p)), rel=1e-10)


# Two-sided 95% critical values t_{0.975, ν} as printed in standard t tables.
@pytest.mark.parametrize('df, table', [
    (1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (5, 2.571), (6, 2.447), (8, 2.306),
    (10, 2.228), (20, 2.086), (30, 2.042), (120, 1.980), (math.inf, 1.960)])
def test_t_quantile_matches_printed_table(df, table):
    assert student_t_quantile(0.975, df) == pytest.approx(table, abs=5e-4)
    assert student_t_quantile(0.025, df) == pytest.approx(-table, abs=5e-4)


def _t_cdf_by_simpson(t, df, steps=20000):
    """P(T <= t) = 1/2 + ∫_0^t pdf, the pdf integrated with Simpson's rule (t >= 0)."""
    log_norm = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)

    def pdf(x):
        return math.exp(log_norm - (df + 1) / 2 * math.log1p(x * x / df))

    h = t / steps
    total = pdf(0.0) + pdf(t) + sum((4 if i % 2 else 2) * pdf(i * h) for i in range(1, steps))
    return 0.5 + total * h / 3


@pytest.mark.parametrize('df', [2.5, 2.9411764705882355, 7.3])
@pytest.mark.parametrize('t', [0.7, 2.0, 3.5])
def test_t_cdf_with_fractional_degrees_of_freedom_against_integrated_density(t, df):
    assert student_t_cdf(t, df) == pytest.approx(_t_cdf_by_simpson(t, df), abs=1e-10)


def test_t_quantile_inverts_the_cdf():
    for df in (1.5, 3.0, 17.2):
        for p in (0.55, 0.8, 0.975, 0.999):
            assert student_t_cdf(student_t_quantile(p, df), df) == pytest.approx(p, abs=1e-12)


def test_welch_equal_spread_by_hand():
    # baseline 1, 2, 3 and variant 3, 4, 5: both variances 1, se = sqrt(1/3 + 1/3),
    # ν = (2/3)² / ((1/3)²/2 + (1/3)²/2) = 4, t = 2 / se = sqrt(6); t_{0.975, 4} = 2.776445
    d = welch_difference([1, 2, 3], [3, 4, 5])
    se = math.sqrt(2 / 3)
    assert d.difference == 2.0
    assert d.std_error == pytest.approx(se)
    assert d.df == pytest.approx(4.0)
    assert d.t == pytest.approx(math.sqrt(6))
    assert d.low == pytest.approx(2 - 2.776445 * se, abs=1e-6)
    assert d.high == pytest.approx(2 + 2.776445 * se, abs=1e-6)
    # closed-form cdf for ν = 4: F(t) = 1/2 + (3/8) u (1 - u²/12 ... ) with u = t / sqrt(1 + t²/4)
    u = math.sqrt(6) / math.sqrt(1 + 6 / 4)
    cdf = 0.5 + 3 / 8 * u * (1 - (6 / (1 + 6 / 4)) / 12)
    assert d.p_value == pytest.approx(2 * (1 - cdf), rel=1e-9)
    assert d.confidence == 0.95


def test_welch_unequal_spread_degrees_of_freedom_by_hand():
    # variances 1 and 4, n = 3: ν = (1/3 + 4/3)² / ((1/3)²/2 + (4/3)²/2) = 50/17
    assert welch_degrees_of_freedom(1.0, 3, 4.0, 3) == pytest.approx(50 / 17)
    d = welch_difference([1, 2, 3], [4, 6, 8])
    assert d.difference == 4.0
    assert d.df == pytest.approx(50 / 17)
    assert d.std_error == pytest.approx(math.sqrt(5 / 3))
    half = (d.high - d.low) / 2
    assert half == pytest.approx(student_t_quantile(0.975, 50 / 17) * math.sqrt(5 / 3))
    assert d.low < 0 < d.high and 0.05 < d.p_value < 0.06
    # a 90% interval is narrower and uses t_{0.95}
    narrow = welch_difference([1, 2, 3], [4, 6, 8], confidence=0.9)
    assert narrow.high - narrow.low < d.high - d.low
    # swapping the groups flips the sign of the difference and of the interval
    flipped = welch_difference([4, 6, 8], [1, 2, 3])
    assert (flipped.low, flipped.high) == pytest.approx((-d.high, -d.low))


def test_welch_degenerate_groups():
    single = welch_difference([1.0], [2.0, 3.0])
    assert single.difference == 1.5 and single.low is None and single.p_value is None
    flat = welch_difference([1.0, 1.0], [2.0, 2.0, 2.0])
    assert (flat.low, flat.high, flat.std_error, flat.df) == (1.0, 1.0, 0.0, None)
    with pytest.raises(ValueError, match='confidence'):
        welch_difference([1, 2], [3, 4], confidence=95)
    with pytest.raises(ValueError, match='baseline is empty'):
        welch_difference([], [3, 4])


def test_pointwise_summary_aligns_series():
    summary = pointwise_summary([{2: 1.0, 1: 3.0}, {2: 3.0, 3: 5.0}])
    assert summary.x == [1, 2, 3]
    assert summary.mean == [3.0, 2.0, 5.0]
    assert summary.std == [None, pytest.approx(math.sqrt(2)), None]
    assert summary.count == [1, 2, 1]
    # names keep the order they first appear in (blocks in trajectory order)
    blocks = pointwise_summary([{'layer1.0': 1.0, 'layer1.10': 2.0, 'layer1.2': 3.0}])
    assert blocks.x == ['layer1.0', 'layer1.10', 'layer1.2']


def test_mean_interval_by_hand():
    from mmstiff.analysis.statistics import mean_interval
    # values 1, 2, 6: mean 3, s = sqrt(7), t_{0.975, 2} = 4.302653 (tables)
    low, high = mean_interval([1, 2, 6])
    half = 4.302653 * math.sqrt(7) / math.sqrt(3)
    assert low == pytest.approx(3 - half, rel=1e-6) and high == pytest.approx(3 + half, rel=1e-6)
    assert mean_interval([5.0]) is None
    with pytest.raises(ValueError, match='confidence=1.5'):
        mean_interval([1, 2], confidence=1.5)
