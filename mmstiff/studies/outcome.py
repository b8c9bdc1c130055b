"""The primary outcome a study declares before any run, and the verdict category it yields.

A study file's ``outcome`` names one metric, one comparison (variant − baseline), the direction
the claim predicts and the smallest effect of interest; :func:`judge` turns the observed
difference into *held*, *did not hold* or *inconclusive* (rules: docs/studies.md). An outcome
with ``correlate_with`` in place of ``comparison`` is a correlation across runs: Spearman's ρ
between ``metric`` and ``correlate_with`` over every finished run of every variant, judged by
the same rules with ρ's interval in place of the difference's.
"""
import re
from typing import Any, NamedTuple, Optional, Sequence

from .errors import StudyError

DIRECTIONS = ('greater', 'less', 'equivalent')
HELD, NOT_HELD, INCONCLUSIVE, NOT_RUN = 'held', 'did not hold', 'inconclusive', 'not run'
FIELDS = {
    'metric': True,
    'comparison': False,  # required unless correlate_with is given
    'correlate_with': False,
    'direction': True,
    'margin': True,
    'link': False
}
#: phrases that assert a category, by the category they assert
_ASSERTS = {
    HELD: re.compile(r'(?<!not )(?<!whether it )\b(held|confirmed)\b', re.I),
    NOT_HELD: re.compile(r'\b(did not hold|does not hold|refuted)\b', re.I),
    INCONCLUSIVE: re.compile(r'\binconclusive\b', re.I),
}


class Outcome(NamedTuple):
    """The declared primary outcome.

    Attributes:
        metric (str): a metric name of the results page, e.g. ``'tns/network'``.
        variant (str), baseline (str | None): the difference is ``mean(variant) -
            mean(baseline)``; without a baseline, ``mean(variant) - 0`` (a one-sample claim,
            e.g. "the correlation is negative").
        direction (str): ``'greater'`` or ``'less'`` (the claim predicts the sign) or
            ``'equivalent'`` (the claim says "matches", "no difference").
        margin (float): the smallest effect of interest, in the metric's units (> 0).
        link (str | None): a metric whose correlation with ``metric`` over every finished run
            is reported beside it (e.g. accuracy for a stiffness outcome).
        correlate_with (str | None): set, the outcome is Spearman's ρ between ``metric`` and
            this metric across every finished run of every variant (``variant`` and
            ``baseline`` are None; ``margin``: the smallest ρ of interest, below 1).
    """
    metric: str
    variant: Optional[str]
    baseline: Optional[str]
    direction: str
    margin: float
    link: Optional[str] = None
    correlate_with: Optional[str] = None

    @property
    def is_correlation(self) -> bool:
        """Whether the outcome is a correlation across runs (``correlate_with`` set)."""
        return self.correlate_with is not None


class Judgement(NamedTuple):
    """The category and the number that goes with it: the effect ruled out (did not hold) or
    the minimum detectable effect (inconclusive); ``tost_p`` for an equivalence claim."""
    category: str
    difference: object
    mde: Optional[float]
    ruled_out: Optional[float]
    tost_p: Optional[float]
    reason: str


def parse_outcome(value: Any, variants: Sequence[Any]) -> Optional[Outcome]:
    """An :class:`Outcome` from a study file's ``outcome`` field; ``variants``: the checked
    :class:`~mmstiff.studies.spec.Variant` tuple."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise StudyError(f'outcome={value!r}; expected dict(metric=..., comparison=[variant, '
                         'baseline], direction=..., margin=...)')
    unknown = sorted(set(value) - set(FIELDS))
    missing = [k for k, required in FIELDS.items() if required and value.get(k) is None]
    if unknown or missing:
        raise StudyError(f'outcome has unknown field(s) {unknown} or misses {missing}; expected '
                         f'{sorted(FIELDS)}')
    metric = value['metric']
    if not isinstance(metric, str) or '/' not in metric:
        raise StudyError(f'outcome.metric={metric!r}; expected a metric name of the results '
                         "page, e.g. 'test/accuracy/top1'")
    if value.get('correlate_with') is not None:
        return _correlation_outcome(value, metric)
    if value.get('comparison') is None:
        raise StudyError("outcome misses 'comparison'; expected comparison=[variant, baseline] "
                         "(a difference of means) or correlate_with=METRIC (a correlation "
                         'across runs)')
    comparison = value['comparison']
    if (isinstance(comparison, str) or not isinstance(comparison, (list, tuple))
            or len(comparison) not in (1, 2)):
        raise StudyError(f'outcome.comparison={comparison!r}; expected [variant, baseline] or '
                         '[variant] (against 0)')
    variant, baseline = (list(comparison) + [None])[:2]
    by_label = {v.label: v for v in variants}
    if variant not in by_label:
        raise StudyError(f'outcome.comparison={list(comparison)!r} names {variant!r}, which is '
                         f'not a label of this study; labels: {list(by_label)}')
    if baseline is not None and baseline not in by_label[variant].compare_to:
        raise StudyError(f'outcome.comparison={list(comparison)!r}: {variant!r} is not compared '
                         f'with {baseline!r}; its baselines: {list(by_label[variant].compare_to)}')
    direction = value['direction']
    if direction not in DIRECTIONS:
        raise StudyError(f'outcome.direction={direction!r}; expected one of {list(DIRECTIONS)}')
    margin = value['margin']
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not margin > 0:
        raise StudyError(f'outcome.margin={margin!r}; expected the smallest effect of interest, '
                         'a number > 0 in the units of the metric')
    link = value.get('link')
    if link is not None and (not isinstance(link, str) or '/' not in link):
        raise StudyError(f'outcome.link={link!r}; expected a metric name or None')
    return Outcome(metric, variant, baseline, direction, float(margin), link)


def _correlation_outcome(value, metric):
    """The :class:`Outcome` of a correlation across runs (``correlate_with`` given)."""
    other = value['correlate_with']
    if not isinstance(other, str) or '/' not in other or other == metric:
        raise StudyError(f'outcome.correlate_with={other!r}; expected a metric name of the '
                         f'results page other than outcome.metric={metric!r}')
    if value.get('comparison') is not None:
        raise StudyError(f'outcome sets both comparison={value["comparison"]!r} and '
                         f'correlate_with={other!r}; a correlation across runs pools every '
                         'variant, so it takes no comparison')
    direction = value['direction']
    if direction not in ('greater', 'less'):
        raise StudyError(f'outcome.direction={direction!r}; a correlation outcome takes '
                         "'greater' (ρ > 0) or 'less' (ρ < 0)")
    margin = value['margin']
    if isinstance(margin, bool) or not isinstance(margin, (int, float)) or not 0 < margin < 1:
        raise StudyError(f'outcome.margin={margin!r}; expected the smallest |ρ| of interest, '
                         'a number in (0, 1)')
    link = value.get('link')
    if link is not None and (not isinstance(link, str) or '/' not in link):
        raise StudyError(f'outcome.link={link!r}; expected a metric name or None')
    return Outcome(metric, None, None, direction, float(margin), link, other)


def judge(outcome: Outcome, difference: Any, mde: Optional[float], tost_p: Optional[float],
          alpha: float = 0.05) -> Judgement:
    """The :class:`Judgement` of ``difference`` (a Welch ``Difference`` at 1 − ``alpha``, or,
    for a correlation outcome, the ρ and interval of a ``Correlation`` in its fields).

    greater (less mirrored): *held* when the interval lies above 0; *did not hold* when it
    lies below the margin (a gain of the margin or more is ruled out); else *inconclusive*.
    equivalent: *held* when TOST against ±margin gives p < ``alpha``; *did not hold* when the
    interval excludes 0 (a difference was found); else *inconclusive*.
    """
    d = difference
    if d is None or d.low is None:
        return Judgement(NOT_RUN, d, None, None, None, 'fewer than 2 finished seeds per variant')
    m = outcome.margin
    if outcome.direction == 'equivalent':
        if tost_p is not None and tost_p < alpha:
            return Judgement(HELD, d, mde, None, tost_p, f'TOST against ±{m:g}: p < {alpha:g}')
        if d.low > 0 or d.high < 0:
            return Judgement(NOT_HELD, d, mde, min(abs(d.low), abs(d.high)), tost_p,
                             'the interval excludes 0')
        return Judgement(INCONCLUSIVE, d, mde, None, tost_p,
                         'the interval holds 0 and reaches beyond the margin')
    sign = 1.0 if outcome.direction == 'greater' else -1.0
    low, high = sorted((sign * d.low, sign * d.high))
    if low > 0:
        return Judgement(HELD, d, mde, None, tost_p, 'the interval excludes 0 in the claimed '
                         'direction')
    if high < m:
        return Judgement(
            NOT_HELD, d, mde, sign * high, tost_p, 'the interval excludes an '
            f'effect of the margin {m:g} in the claimed direction')
    return Judgement(INCONCLUSIVE, d, mde, None, tost_p, 'the interval holds both 0 and the '
                     'margin')


def check_prose(category: str, text: str) -> None:
    """Raise :class:`StudyError` when the verdict prose asserts another category."""
    for other, pattern in _ASSERTS.items():
        if other == category:
            continue
        hit = pattern.search(text or '')
        if hit:
            raise StudyError(f'the verdict text says {hit.group(0)!r}, but the declared outcome '
                             f'gives the category {category!r}; the prose explains the '
                             'category, it may not contradict it')
