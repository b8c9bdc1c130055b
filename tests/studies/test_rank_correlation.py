"""A correlation across runs as the declared outcome: Spearman's ρ with its Fisher-z interval,
the ρ a study of n runs can detect, the checked study field, the verdict category and the page
lines, against hand computations and closed forms."""
import math
import re

import pytest
from scipy import stats

from mmstiff.studies import HELD, INCONCLUSIVE, NOT_HELD, StudyError, StudyNumbers, load_study
from mmstiff.studies.index import _primary
from mmstiff.studies.outcome import parse_outcome
from mmstiff.studies.report import outcome_line, primary_lines
from mmstiff.studies.spec import Variant
from mmstiff.studies.statistics import (pairs_for_rank_correlation, rank_correlation,
                                        rank_correlation_mde)

Z975, Z80 = 1.959964, 0.841621  # standard normal quantiles (printed tables)
VARIANTS = (Variant('a', 'x.py', (), False, (), (0, 1, 2),
                    ()), Variant('b', 'x.py', (), False, (), (0, 1, 2), ()))
GOOD = dict(metric='tns/network', correlate_with='test/accuracy/top1', direction='greater',
            margin=0.3)


def test_rank_correlation_by_hand():
    # ranks of y against x = 1..5: 2, 1, 4, 3, 5; Σd² = 4, ρ = 1 - 6·4 / (5·24) = 0.8
    c = rank_correlation([10, 20, 30, 40, 50], [0.2, 0.1, 0.4, 0.3, 0.5])
    assert (c.n, c.r) == (5, pytest.approx(0.8))
    # Fisher z with the Fieller-Hartley-Pearson standard error sqrt(1.06 / (n - 3))
    half = Z975 * math.sqrt(1.06 / 2)
    assert c.low == pytest.approx(math.tanh(math.atanh(0.8) - half), abs=1e-6)
    assert c.high == pytest.approx(math.tanh(math.atanh(0.8) + half), abs=1e-6)
    # p from t = ρ sqrt((n - 2) / (1 - ρ²)) with ν = 3, whose cdf has the closed form
    # F(t) = 1/2 + (u / (1 + u²) + atan u) / π, u = t / sqrt(3)
    t = 0.8 * math.sqrt(3 / (1 - 0.64))
    u = t / math.sqrt(3)
    assert c.p_value == pytest.approx(2 * (0.5 - (u / (1 + u * u) + math.atan(u)) / math.pi))
    # a monotone transformation of either variable leaves ρ unchanged, a reversal flips it
    assert rank_correlation([math.exp(v) for v in (1, 2, 3, 4, 5)],
                            [0.2, 0.1, 0.4, 0.3, 0.5]).r == pytest.approx(0.8)
    assert rank_correlation([5, 4, 3, 2, 1], [0.2, 0.1, 0.4, 0.3, 0.5]).r == pytest.approx(-0.8)


def test_rank_correlation_ties_and_degenerate_input():
    # ties get mid-ranks: ρ is Pearson's r of the ranks
    x, y = [1, 2, 2, 3, 4, 5], [1, 3, 2, 2, 5, 4]
    ranks_x, ranks_y = [1, 2.5, 2.5, 4, 5, 6], [1, 4, 2.5, 2.5, 6, 5]
    assert rank_correlation(x, y).r == pytest.approx(stats.pearsonr(ranks_x, ranks_y).statistic)
    assert math.isnan(rank_correlation([1, 2, 3], [3, 2, 1]).r)  # below 4 pairs
    flat = rank_correlation([1, 1, 1, 1], [1, 2, 3, 4])
    assert math.isnan(flat.r) and flat.low is None and flat.p_value is None
    perfect = rank_correlation([1, 2, 3, 4], [2, 4, 8, 16])
    assert (perfect.r, perfect.low, perfect.high) == (1.0, 1.0, 1.0)
    with pytest.raises(ValueError, match='x has 3 values and y 2'):
        rank_correlation([1, 2, 3], [1, 2])


def test_minimum_detectable_rank_correlation_and_runs():
    # 18 runs: tanh((z_0.975 + z_0.80) · sqrt(1.06 / 15))
    expected = math.tanh((Z975 + Z80) * math.sqrt(1.06 / 15))
    assert rank_correlation_mde(18) == pytest.approx(expected, abs=1e-6)
    assert 0.62 < rank_correlation_mde(18) < 0.64
    assert rank_correlation_mde(3) is None
    # the fewest runs for ρ = 0.3: the first n whose MDE is at most 0.3
    n = pairs_for_rank_correlation(0.3)
    assert rank_correlation_mde(n) <= 0.3 < rank_correlation_mde(n - 1)
    # by hand: n ≥ 3 + 1.06 ((z_0.975 + z_0.80) / atanh 0.3)², i.e. 3 + 1.06 · 82.04 = 89.97
    assert n == 90
    assert pairs_for_rank_correlation(1.0) is None and pairs_for_rank_correlation(0) is None


@pytest.mark.parametrize('change, message', [
    (dict(comparison=['a', 'b']), 'sets both comparison='),
    (dict(direction='equivalent'), "a correlation outcome takes 'greater'"),
    (dict(margin=1.0), 'expected the smallest |ρ| of interest, a number in (0, 1)'),
    (dict(correlate_with='tns/network'), 'other than outcome.metric'),
    (dict(correlate_with='top1'), "outcome.correlate_with='top1'"),
])
def test_bad_correlation_outcome_names_the_field(change, message):
    with pytest.raises(StudyError, match=re.escape(message)):
        parse_outcome(dict(GOOD, **change), VARIANTS)


def test_an_outcome_needs_a_comparison_or_a_correlation():
    with pytest.raises(StudyError, match="misses 'comparison'.*correlate_with=METRIC"):
        parse_outcome(dict(metric='tns/network', direction='greater', margin=0.2), VARIANTS)
    o = parse_outcome(GOOD, VARIANTS)
    assert o.is_correlation and (o.variant, o.baseline) == (None, None)
    assert (o.metric, o.correlate_with, o.margin) == ('tns/network', 'test/accuracy/top1', 0.3)


def runs_data(tns, top1):
    """runs.json of variants a and b (no baselines), three seeds each, by hand."""
    runs = []
    for i, (x, y) in enumerate(zip(tns, top1)):
        label, seed = ('a', 'b')[i // 3], i % 3
        runs.append(
            dict(
                key=f'{label}/seed{seed}', variant=label, seed=seed, status='done',
                record=dict(metrics={
                    'tns/network': x,
                    'test/accuracy/top1': y
                }, curves={}, profiles={})))
    variants = [
        dict(label=label, config='x.py', cfg_options=[], is_baseline=False, compare_to=[],
             seeds=[0, 1, 2], analysis=[]) for label in ('a', 'b')
    ]
    return dict(format=1, runs=runs, study=dict(name='zoo', file='zoo.py', variants=variants))


@pytest.mark.parametrize(
    'top1, category',
    [
        ([1, 2, 3, 4, 5, 6], HELD),  # ρ = 1
        ([6, 5, 4, 3, 2, 1], NOT_HELD),  # ρ = -1: a ρ of 0.3 or more is ruled out
        ([3, 1, 2, 6, 4, 5], INCONCLUSIVE),  # ρ = 0.66, the interval [-0.36, 0.96] holds 0
    ])
def test_the_category_comes_from_the_interval_of_rho(top1, category):
    outcome = parse_outcome(GOOD, VARIANTS)
    numbers = StudyNumbers(runs_data([1, 2, 3, 4, 5, 6], top1), outcome)
    j = numbers.primary['judgement']
    rho = stats.spearmanr([1, 2, 3, 4, 5, 6], top1).statistic
    assert j.category == category
    assert j.difference.difference == pytest.approx(rho)
    assert j.mde == pytest.approx(math.tanh((Z975 + Z80) * math.sqrt(1.06 / 3)), abs=1e-6)
    assert len(numbers.primary['pairs']) == 6


def test_page_lines_of_a_correlation_outcome():
    outcome = parse_outcome(GOOD, VARIANTS)
    numbers = StudyNumbers(runs_data([1, 2, 3, 4, 5, 6], [3, 1, 2, 6, 4, 5]), outcome)
    # Σd² = 4 + 1 + 1 + 4 + 1 + 1 = 12: ρ = 1 - 6 · 12 / 210 = 0.657; z ± 1.959964 · sqrt(1.06 / 3)
    z = math.atanh(1 - 72 / 210)
    low, high = (math.tanh(z - Z975 * math.sqrt(1.06 / 3)),
                 math.tanh(z + Z975 * math.sqrt(1.06 / 3)))
    mde = math.tanh((Z975 + Z80) * math.sqrt(1.06 / 3))
    lines = primary_lines(numbers)
    assert outcome_line(outcome) == (
        '- **Declared outcome:** Spearman ρ between `tns/network` and `test/accuracy/top1` '
        'across every finished run of every variant: ρ greater than 0, smallest effect of '
        'interest |ρ| = 0.3.')
    assert lines[0] == ('- **Verdict: inconclusive** (the interval holds both 0 and the '
                        f'margin; the ρ it could have detected: {mde:.2f}).')
    assert lines[1].startswith(f'- **Effect:** Spearman ρ = +0.66, 95% CI [{low:.2f}, '
                               f'{high:.2f}] (Fisher z, SE √(1.06 / (n − 3)); p = ')
    assert lines[1].endswith('over n = 6 runs (a 3, b 3).')
    assert lines[2] == (f'- **Minimum detectable effect:** ρ = {mde:.2f} (80% power, '
                        'two-sided α = 0.05, 6 runs); runs to detect |ρ| = 0.3: 90.')
    assert _primary(numbers) == (INCONCLUSIVE, 'Spearman ρ(`tns/network`, '
                                 f'`test/accuracy/top1`): +0.66 [{low:.2f}, {high:.2f}]',
                                 f'ρ = {mde:.2f}')
    ns = numbers.verdict_namespace()['primary']
    assert (ns['effect'], ns['n'], ns['mde']) == ('+0.66', '6', f'{mde:.2f}')


@pytest.mark.parametrize('direction, top1, bound', [
    ('greater', [6, 5, 4, 3, 2, 1], 'above -1.00'),
    ('less', [1, 2, 3, 4, 5, 6], 'below +1.00'),
])
def test_a_correlation_that_did_not_hold_says_what_it_rules_out(direction, top1, bound):
    outcome = parse_outcome(dict(GOOD, direction=direction), VARIANTS)
    numbers = StudyNumbers(runs_data([1, 2, 3, 4, 5, 6], top1), outcome)
    assert primary_lines(numbers)[0] == (
        '- **Verdict: did not hold** (the interval excludes an effect of the margin 0.3 in the '
        f'claimed direction; it rules out ρ {bound}).')


def test_too_few_runs_is_not_run():
    outcome = parse_outcome(GOOD, VARIANTS)
    data = runs_data([1, 2, 3, 4, 5, 6], [1, 2, 3, 4, 5, 6])
    for run in data['runs'][1:]:
        run['status'] = 'failed'
    numbers = StudyNumbers(data, outcome)
    assert numbers.primary['judgement'].category == 'not run'
    assert primary_lines(numbers) == [
        '- **Verdict: not run** (fewer than 4 finished runs with both metrics, or no spread in '
        'one of them; runs with both metrics: a 1, b 0).'
    ]


def test_primary_placeholders_of_a_difference_outcome():
    # a = 1, 2, 3 and b = 3, 4, 5 (b compared with a): the primary effect is the Welch one
    outcome = parse_outcome(
        dict(metric='tns/network', comparison=['b', 'a'], direction='greater', margin=1.0),
        (VARIANTS[0]._replace(is_baseline=True), VARIANTS[1]._replace(compare_to=('a', ))))
    data = runs_data([1, 2, 3, 3, 4, 5], [0, 0, 0, 0, 0, 0])
    data['study']['variants'][1]['compare_to'] = ['a']
    numbers = StudyNumbers(data, outcome)
    ns = numbers.verdict_namespace()
    assert ns['primary']['effect'] == ns['diff']['b']['tns/network'] == '+2.0'
    assert ns['primary']['ci'] == ns['ci']['b']['tns/network'] and ns['primary']['n'] == '3'


def test_the_zoo_study_declares_its_correlation():
    study = load_study('configs/studies/zoo_tns_fashion_mnist.py')
    o = study.outcome
    assert (o.metric, o.correlate_with, o.direction) == ('tns/network', 'test/accuracy/top1',
                                                         'greater')
    runs = sum(len(v.seeds) for v in study.variants)
    assert runs == 18 and len({v.config for v in study.variants}) == 6
    # the MDE and the runs for the margin that the study file states
    assert f'{rank_correlation_mde(runs):.2f}' == '0.63'
    assert pairs_for_rank_correlation(o.margin) == 90


def test_the_correlation_figure_shows_every_run_with_both_metrics(tmp_path):
    from mmstiff.visualization.study_figures import correlation_points, draw_study_figures
    data = runs_data([0.01, 0.1, 1.0, 2.0, 3.0, 4.0], [70, 71, 72, 80, 81, 82])
    del data['runs'][4]['record']['metrics']['tns/network']  # b/seed1 has no TNS
    done = {label: [r for r in data['runs'] if r['variant'] == label] for label in ('a', 'b')}
    points = correlation_points(['a', 'b'], done, 'tns/network', 'test/accuracy/top1')
    assert points == {'a': [(0.01, 70), (0.1, 71), (1.0, 72)], 'b': [(2.0, 80), (4.0, 82)]}
    figures = draw_study_figures(['a', 'b'], done, str(tmp_path),
                                 correlation=('tns/network', 'test/accuracy/top1'))
    assert figures[0][0] == 'tns_network_vs_test_accuracy_top1.png'
    assert (tmp_path / figures[0][0]).read_bytes()[:8] == b'\x89PNG\r\n\x1a\n'
    # without a correlation outcome the figure is not drawn
    assert all(f != figures[0][0]
               for f, _ in draw_study_figures(['a', 'b'], done, str(tmp_path / 'x')))
