"""The inference of the study runner: Welch, one-sample t, TOST, MDE, BH q-values, Pearson r,
checked against closed forms, printed tables and hand computations."""
import math

import pytest
from scipy import stats

from mmstiff.studies.statistics import (bh_q_values, correlation, mean_interval,
                                        minimum_detectable_effect, one_sample_difference,
                                        seeds_for_effect, sign_counts, tost_p_value,
                                        welch_difference)


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
    # closed-form cdf for ν = 4: F(t) = 1/2 + (3/8) u (1 - u²/12) with u = t / sqrt(1 + t²/4)
    u = math.sqrt(6) / math.sqrt(1 + 6 / 4)
    cdf = 0.5 + 3 / 8 * u * (1 - (6 / (1 + 6 / 4)) / 12)
    assert d.p_value == pytest.approx(2 * (1 - cdf), rel=1e-9)
    assert d.confidence == 0.95


def test_welch_unequal_spread_degrees_of_freedom_by_hand():
    # variances 1 and 4, n = 3: ν = (1/3 + 4/3)² / ((1/3)²/2 + (4/3)²/2) = 50/17
    d = welch_difference([1, 2, 3], [4, 6, 8])
    assert d.difference == 4.0
    assert d.df == pytest.approx(50 / 17)
    assert d.std_error == pytest.approx(math.sqrt(5 / 3))
    half = (d.high - d.low) / 2
    assert half == pytest.approx(stats.t.ppf(0.975, 50 / 17) * math.sqrt(5 / 3))
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


def test_mean_interval_by_hand():
    # values 1, 2, 6: mean 3, s = sqrt(7), t_{0.975, 2} = 4.302653 (tables)
    low, high = mean_interval([1, 2, 6])
    half = 4.302653 * math.sqrt(7) / math.sqrt(3)
    assert low == pytest.approx(3 - half, rel=1e-6) and high == pytest.approx(3 + half, rel=1e-6)
    assert mean_interval([5.0]) is None
    with pytest.raises(ValueError, match='confidence=1.5'):
        mean_interval([1, 2], confidence=1.5)


def test_one_sample_difference_by_hand():
    # values 1, 2, 6: mean 3, se = sqrt(7/3), ν = 2, t_{0.975, 2} = 4.302653 (tables)
    d = one_sample_difference([1, 2, 6])
    assert d.difference == pytest.approx(3.0) and d.df == 2
    assert d.std_error == pytest.approx(math.sqrt(7 / 3))
    assert d.high - 3 == pytest.approx(4.302653 * math.sqrt(7 / 3), rel=1e-6)
    # ν = 2: P(T > t) = (1 - t / sqrt(t² + 2)) / 2
    t = 3 / math.sqrt(7 / 3)
    assert d.p_value == pytest.approx(1 - t / math.sqrt(t * t + 2), rel=1e-9)


def test_tost_by_hand():
    # difference 2, se = sqrt(2/3), ν = 4, margin 3: the two one-sided t are (2 + 3)/se and
    # (2 - 3)/se; the p-value is the larger tail, here P(T_4 > 1/se) (closed form for ν = 4)
    d = welch_difference([1, 2, 3], [3, 4, 5])
    t = 1 / math.sqrt(2 / 3)
    u = t / math.sqrt(1 + t * t / 4)
    upper_tail = 0.5 - 3 / 8 * u * (1 - (t * t / (1 + t * t / 4)) / 12)
    assert tost_p_value(d, 3.0) == pytest.approx(upper_tail, rel=1e-9)
    assert tost_p_value(d, 100.0) < 1e-4 and tost_p_value(d, 0.5) > 0.9
    with pytest.raises(ValueError, match='margin=0'):
        tost_p_value(d, 0)


def test_minimum_detectable_effect_and_seeds():
    # ν = 4, se = 1: (t_{0.975, 4} + t_{0.80, 4}) = 2.776445 + 0.940965 (tables)
    assert minimum_detectable_effect(1.0, 4) == pytest.approx(2.776445 + 0.940965, abs=1e-5)
    assert minimum_detectable_effect(None, 4) is None
    # SD 1 in both groups: n seeds give se = sqrt(2/n), ν = 2n - 2; the first n whose MDE is
    # at most 1.5
    n = seeds_for_effect(1.0, 1.0, 1.5)
    mde = [minimum_detectable_effect(math.sqrt(2 / k), 2 * k - 2) for k in (n - 1, n)]
    assert mde[0] > 1.5 >= mde[1]


def test_benjamini_hochberg_by_hand():
    # p sorted 0.01, 0.02, 0.03, 0.5 (m = 4): p·m/rank = 0.04, 0.04, 0.04, 0.5, then the
    # running minimum from the top; None keeps its place and is not counted
    q = bh_q_values([0.03, None, 0.5, 0.01, 0.02])
    assert q[1] is None
    assert q[0] == pytest.approx(0.04) and q[3] == pytest.approx(0.04)
    assert q[4] == pytest.approx(0.04) and q[2] == pytest.approx(0.5)


def test_signs_and_correlation():
    assert sign_counts([(2, 1), (1, 2), (3, 3), (5, 0)]) == (2, 1, 1)
    c = correlation([1, 2, 3, 4], [2, 4, 6, 8.5])
    assert c.r == pytest.approx(stats.pearsonr([1, 2, 3, 4], [2, 4, 6, 8.5]).statistic)
    # Fisher z interval: tanh(atanh r ± 1.959964 / sqrt(n - 3))
    assert c.low == pytest.approx(math.tanh(math.atanh(c.r) - 1.959964), rel=1e-5)
    assert math.isnan(correlation([1, 1, 1], [1, 2, 3]).r)


def test_welch_with_one_group_without_spread(recwarn):
    # every baseline seed equal: Welch reduces to the variant's own t interval, ν = n - 1 = 2,
    # t_{0.975, 2} = 4.302653 (tables); no warning about the constant group
    variant = [25.33, 25.04, 23.30]
    d = welch_difference([90.28] * 3, variant)
    se = stats.tstd(variant) / math.sqrt(3)
    assert d.df == pytest.approx(2.0)
    assert d.high - d.difference == pytest.approx(4.302653 * se, rel=1e-6)
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    # spread at the level of floating-point rounding is no spread: the point interval
    tiny = welch_difference([1.0, 1.0 + 2e-16, 1.0], [2.0, 2.0, 2.0])
    assert (tiny.low, tiny.high, tiny.std_error) == (tiny.difference, tiny.difference, 0.0)
