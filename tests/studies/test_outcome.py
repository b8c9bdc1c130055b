"""The declared primary outcome: checked fields, the verdict category from an interval, and
the prose check that keeps a page from contradicting its category."""
import re

import pytest

from mmstiff.studies import HELD, INCONCLUSIVE, NOT_HELD, StudyError, judge
from mmstiff.studies.outcome import check_prose, parse_outcome
from mmstiff.studies.spec import Variant
from mmstiff.studies.statistics import Difference

VARIANTS = (Variant('plain', 'x.py', (), True, (), (0, 1),
                    ()), Variant('stepnet', 'x.py', (), False, ('plain', ), (0, 1), ()))
GOOD = dict(metric='tns/network', comparison=['stepnet', 'plain'], direction='greater', margin=0.2)


def diff(low, high):
    return Difference((low + high) / 2, low, high, 4.0, (high - low) / 5.552, None, 0.5, 0.95)


@pytest.mark.parametrize('change, message', [
    (dict(direction='up'), "outcome.direction='up'; expected one of"),
    (dict(margin=0), 'outcome.margin=0; expected the smallest effect of interest'),
    (dict(margin=True), 'outcome.margin=True'),
    (dict(comparison=['se', 'plain']), "names 'se', which is not a label"),
    (dict(comparison=['plain', 'stepnet']), "'plain' is not compared with 'stepnet'"),
    (dict(comparison='stepnet'), "outcome.comparison='stepnet'; expected [variant, baseline]"),
    (dict(metric='top1'), "outcome.metric='top1'; expected a metric name"),
    (dict(effect=1), "outcome has unknown field(s) ['effect']"),
])
def test_bad_outcome_names_the_field(change, message):
    with pytest.raises(StudyError, match=re.escape(message)):
        parse_outcome(dict(GOOD, **change), VARIANTS)


def test_one_sample_outcome_has_no_baseline():
    outcome = parse_outcome(dict(GOOD, comparison=['stepnet'], direction='less'), VARIANTS)
    assert (outcome.variant, outcome.baseline, outcome.direction) == ('stepnet', None, 'less')


@pytest.mark.parametrize(
    'direction, low, high, category, ruled_out',
    [
        ('greater', 0.1, 0.9, HELD, None),  # above 0
        ('greater', -0.5, 0.15, NOT_HELD, 0.15),  # below the margin 0.2: a gain of 0.2 ruled out
        ('greater', -0.5, 0.6, INCONCLUSIVE, None),
        ('greater', -0.9, -0.1, NOT_HELD, -0.1),  # the other way
        ('less', -0.9, -0.1, HELD, None),
        ('less', -0.15, 0.5, NOT_HELD, -0.15),
        ('less', -0.6, 0.5, INCONCLUSIVE, None),
    ])
def test_directional_categories(direction, low, high, category, ruled_out):
    outcome = parse_outcome(dict(GOOD, direction=direction), VARIANTS)
    judgement = judge(outcome, diff(low, high), mde=0.7, tost_p=None)
    assert judgement.category == category
    assert judgement.ruled_out == (None if ruled_out is None else pytest.approx(ruled_out))


@pytest.mark.parametrize(
    'low, high, tost_p, category',
    [
        (-0.1, 0.1, 0.01, HELD),  # TOST shows |d| < margin
        (0.05, 0.6, 0.3, NOT_HELD),  # a difference found
        (-0.5, 0.6, 0.4, INCONCLUSIVE),
    ])
def test_equivalence_categories(low, high, tost_p, category):
    outcome = parse_outcome(dict(GOOD, direction='equivalent'), VARIANTS)
    assert judge(outcome, diff(low, high), mde=0.7, tost_p=tost_p).category == category


def test_too_few_seeds_is_not_run():
    outcome = parse_outcome(GOOD, VARIANTS)
    single = Difference(0.3, None, None, None, None, None, None, 0.95)
    assert judge(outcome, single, None, None).category == 'not run'


@pytest.mark.parametrize('category, text', [
    (INCONCLUSIVE, 'Held at this scale: +0.4 points.'),
    (INCONCLUSIVE, 'Confirmed.'),
    (HELD, 'The claim did not hold.'),
    (NOT_HELD, 'Inconclusive: too few seeds.'),
    (HELD, 'inconclusive'),
])
def test_prose_that_contradicts_the_category_is_refused(category, text):
    with pytest.raises(StudyError, match=f"gives the category '{category}'"):
        check_prose(category, text)


@pytest.mark.parametrize('category, text', [
    (INCONCLUSIVE, 'Inconclusive; whether it held needs 20 seeds.'),
    (NOT_HELD, 'Did not hold: the interval excludes the margin.'),
    (HELD, 'Held: every seed agrees.'),
])
def test_prose_that_explains_the_category_passes(category, text):
    check_prose(category, text)
