"""The statistics of a study's runs.json: per variant and metric, against baselines, and the
judgement of the declared primary outcome (docs/studies.md, docs/methods.md §13)."""
import math
import string
from typing import Any, Dict, List, Optional, Tuple

from mmstiff.analysis.statistics import summarize
from .errors import StudyError
from .format import fmt, fmt_interval, fmt_p, fmt_signed, metric_sort_key
from .outcome import Outcome, judge
from .state import DONE
from .statistics import (Difference, bh_q_values, correlation, mean_interval,
                         minimum_detectable_effect, one_sample_difference,
                         pairs_for_rank_correlation, rank_correlation, rank_correlation_mde,
                         seeds_for_effect, sign_counts, tost_p_value, welch_difference)

CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE
POWER = 0.8
VERDICT_NAMES = ('mean', 'std', 'n', 'mean_ci', 'diff', 'ci', 'p', 'q', 'primary')


def trajectory_correlations(record: Dict[str, Any]) -> Dict[str, float]:
    """``{stage: r}``: Pearson r across the blocks of each stage between the mean NSI and the
    mean step size of each block (``tns/nsi``, ``tns/step`` profiles of the test batches),
    one correlation per trajectory through the stage (docs/methods.md §13)."""
    profiles = record.get('profiles', {})
    nsi, step = profiles.get('tns/nsi'), profiles.get('tns/step')
    if not nsi or not step:
        return {}
    by_block = dict(zip(nsi['x'], nsi['y']))
    stages = {}
    for block, value in zip(step['x'], step['y']):
        if block in by_block:
            stages.setdefault(str(block).split('.')[0], []).append((by_block[block], value))
    out = {}
    for stage, pairs in stages.items():
        r = correlation([p[0] for p in pairs], [p[1] for p in pairs]).r if len(pairs) >= 3 \
            else math.nan
        if not math.isnan(r):
            out[f'derived/nsi_step_corr/per_trajectory/{stage}'] = r
    return out


#: metrics computed from a run's record when the page is written: functions record -> {name: v}
DERIVED = (trajectory_correlations, )


class StudyNumbers:
    """Per variant and metric: seed values, summaries, mean intervals; per compared pair: Welch
    differences, BH q-values over every comparison but the primary one; the primary judgement.

    Args:
        runs_data (dict): a runs.json.
        outcome (Outcome | None): the study's declared primary outcome.
    """

    def __init__(self, runs_data: Dict[str, Any], outcome: Optional[Outcome] = None):
        self.variants = runs_data['study']['variants']
        self.labels = [v['label'] for v in self.variants]
        self.runs = runs_data['runs']
        self.done = {
            label: [r for r in self.runs if r['variant'] == label and r['status'] == DONE]
            for label in self.labels
        }
        self.values = {}  # label -> metric -> [(seed, value)]
        for label, runs in self.done.items():
            per_metric = self.values.setdefault(label, {})
            for run in runs:
                metrics = dict(run['record']['metrics'])
                for function in DERIVED:
                    metrics.update(function(run['record']))
                for metric, value in metrics.items():
                    per_metric.setdefault(metric, []).append((run['seed'], value))
        self.metrics = sorted({m for per in self.values.values() for m in per}, key=metric_sort_key)
        self.summary = {
            label: {
                m: summarize([v for _, v in pairs])
                for m, pairs in self.values[label].items()
            }
            for label in self.labels
        }
        self.mean_intervals = {
            label: {
                m: mean_interval([v for _, v in pairs], CONFIDENCE)
                for m, pairs in self.values[label].items()
            }
            for label in self.labels
        }
        self.differences = {}  # (label, baseline) -> metric -> Difference
        for variant in self.variants:
            for baseline in variant['compare_to']:
                pair = self.differences.setdefault((variant['label'], baseline), {})
                for metric in self.metrics:
                    a = self.values[baseline].get(metric)
                    b = self.values[variant['label']].get(metric)
                    if a and b:
                        pair[metric] = welch_difference([v for _, v in a], [v for _, v in b],
                                                        CONFIDENCE)
        self.outcome = outcome
        self.q_values = self._q_values()
        self.primary = self._primary() if outcome is not None else None

    def _is_primary(self, label, baseline, metric):
        o = self.outcome
        return o is not None and (label, baseline, metric) == (o.variant, o.baseline, o.metric)

    def _q_values(self):
        """BH q-values of every secondary comparison (all but the primary one), as one family."""
        keys = [(pair, metric) for pair, per_metric in self.differences.items()
                for metric in per_metric if not self._is_primary(*pair, metric)]
        qs = bh_q_values([self.differences[pair][metric].p_value for pair, metric in keys])
        return dict(zip(keys, qs))

    def paired(self, label: str, baseline: str, metric: str) -> List[Tuple[float, float]]:
        """``[(variant value, baseline value)]`` of the seeds both have, in seed order."""
        a = dict(self.values[baseline].get(metric, []))
        b = dict(self.values[label].get(metric, []))
        return [(b[s], a[s]) for s in sorted(set(a) & set(b))]

    def mde(self, label: str, baseline: str, metric: str) -> Optional[float]:
        """The minimum detectable effect (level :data:`ALPHA`, power :data:`POWER`) of the
        difference ``label`` − ``baseline`` on ``metric``, or None where the pair has no
        difference or its standard error is undefined."""
        d = self.differences.get((label, baseline), {}).get(metric)
        return None if d is None else minimum_detectable_effect(d.std_error, d.df, ALPHA, POWER)

    def run_pairs(self, x_metric: str, y_metric: str) -> List[Tuple[str, int, float, float]]:
        """``[(label, seed, x, y)]`` of every finished run that has both metrics (derived ones
        included), in variant then seed order."""
        out = []
        for label in self.labels:
            x, y = dict(self.values[label].get(x_metric,
                                               [])), dict(self.values[label].get(y_metric, []))
            out += [(label, r['seed'], x[r['seed']], y[r['seed']]) for r in self.done[label]
                    if r['seed'] in x and r['seed'] in y]
        return out

    def _link(self):
        o = self.outcome
        if not o.link:
            return None
        pairs = [(r['record']['metrics'][o.metric], r['record']['metrics'][o.link])
                 for label in self.labels for r in self.done[label]
                 if o.metric in r['record']['metrics'] and o.link in r['record']['metrics']]
        if not pairs:
            return None
        return correlation([p[0] for p in pairs], [p[1] for p in pairs], CONFIDENCE)

    def _primary_correlation(self):
        """Spearman's ρ between the outcome's two metrics across every finished run, judged
        from its Fisher-z interval; the MDE is the ρ these many runs find with 80% power."""
        o = self.outcome
        pairs = self.run_pairs(o.metric, o.correlate_with)
        rho = rank_correlation([p[2]
                                for p in pairs], [p[3]
                                                  for p in pairs], CONFIDENCE) if pairs else None
        if rho is None or rho.low is None:
            d = None
        else:
            d = Difference(rho.r, rho.low, rho.high, None, None, None, rho.p_value, CONFIDENCE)
        mde = rank_correlation_mde(len(pairs), ALPHA, POWER)
        judgement = judge(o, d, mde, None, ALPHA)
        if d is None:
            judgement = judgement._replace(reason='fewer than 4 finished runs with both metrics, '
                                           'or no spread in one of them')
        return dict(judgement=judgement, correlation=rho, pairs=pairs,
                    runs_for_margin=pairs_for_rank_correlation(o.margin, ALPHA, POWER),
                    seeds_for_margin=None, link=self._link(), signs=None)

    def _primary(self):
        o = self.outcome
        if o.is_correlation:
            return self._primary_correlation()
        sb = self.summary[o.variant].get(o.metric)
        if o.baseline is None:  # against 0: the one-sample t
            values = [v for _, v in self.values[o.variant].get(o.metric, [])]
            d = one_sample_difference(values, CONFIDENCE) if values else None
            signs = sign_counts([(v, 0.0) for v in values])
            mde = None if d is None else minimum_detectable_effect(d.std_error, d.df, ALPHA, POWER)
            seeds = None if sb is None else seeds_for_effect(sb.std, 0.0, o.margin, ALPHA, POWER)
        else:
            d = self.differences.get((o.variant, o.baseline), {}).get(o.metric)
            signs = sign_counts(self.paired(o.variant, o.baseline, o.metric))
            mde = self.mde(o.variant, o.baseline, o.metric)
            sa = self.summary[o.baseline].get(o.metric)
            seeds = None if sa is None or sb is None else seeds_for_effect(
                sa.std, sb.std, o.margin, ALPHA, POWER)
        tost = None if d is None or d.std_error is None else tost_p_value(d, o.margin)
        judgement = judge(o, d, mde, tost, ALPHA)
        return dict(judgement=judgement, seeds_for_margin=seeds, link=self._link(), signs=signs)

    def verdict_namespace(self) -> Dict[str, Any]:
        """The values a verdict template can use (docs/studies.md), as strings."""
        ns = {name: {} for name in VERDICT_NAMES}
        for label in self.labels:
            for metric, s in self.summary[label].items():
                ns['mean'].setdefault(label, {})[metric] = fmt(s.mean, s.std)
                interval = self.mean_intervals[label][metric]
                ns['mean_ci'].setdefault(label,
                                         {})[metric] = fmt_interval(*(interval or (None, None)),
                                                                    s.std)
                ns['std'].setdefault(label, {})[metric] = fmt(s.std, s.std)
                ns['n'].setdefault(label, {})[metric] = str(s.n)
        for variant in self.variants:
            label = variant['label']
            for i, baseline in enumerate(variant['compare_to']):
                for metric, d in self.differences[(label, baseline)].items():
                    scale = None if d.low is None else (d.high - d.low) / 2
                    q = self.q_values.get(((label, baseline), metric))
                    texts = dict(
                        diff=fmt_signed(d.difference, scale), ci=fmt_interval(d.low, d.high, scale),
                        p=fmt_p(d.p_value), q=fmt_p(q) if q is not None else '– (primary outcome)')
                    for name, text in texts.items():
                        ns[name].setdefault(label, {}).setdefault(baseline, {})[metric] = text
                        if i == 0:
                            ns[name][label][metric] = text
        ns['primary'] = self.primary_namespace()
        return ns

    def primary_namespace(self) -> Dict[str, str]:
        """``{primary[effect]}``, ``{primary[ci]}``, ``{primary[p]}``, ``{primary[mde]}``,
        ``{primary[n]}`` of the declared outcome (the difference, or ρ and the runs it pools)."""
        if self.primary is None:
            return {}
        j = self.primary['judgement']
        d = j.difference
        if d is None or d.low is None:
            return {}
        scale = (d.high - d.low) / 2 if d.high != d.low else None
        if self.outcome.is_correlation:
            n = len(self.primary['pairs'])
            effect, mde = f'{d.difference:+.2f}', f'{j.mde:.2f}' if j.mde is not None else '–'
            ci = f'[{d.low:.2f}, {d.high:.2f}]'
        else:
            n = self.summary[self.outcome.variant][self.outcome.metric].n
            effect, mde, ci = fmt_signed(d.difference,
                                         scale), fmt(j.mde,
                                                     scale), fmt_interval(d.low, d.high, scale)
        return dict(effect=effect, ci=ci, p=fmt_p(d.p_value), mde=mde, n=str(n))


class _VerdictFormatter(string.Formatter):

    def get_field(self, field_name, args, kwargs):
        try:
            return super().get_field(field_name, args, kwargs)
        except (KeyError, IndexError, AttributeError) as err:
            raise StudyError(f'verdict refers to {{{field_name}}}, which has no value ({err!r} '
                             'is missing); use the variant labels, baseline labels and metric '
                             'names of the results page') from None


def verdict_text(verdict: Optional[str], numbers: StudyNumbers, strict: bool = True) -> str:
    """The verdict prose with its numbers filled in, or ``not yet judged``.

    A placeholder without a value raises :class:`StudyError`; with ``strict=False`` (a study
    still running) the text says so instead.
    """
    if not verdict:
        return 'not yet judged'
    try:
        return _VerdictFormatter().vformat(verdict, (), numbers.verdict_namespace())
    except StudyError as err:
        if strict:
            raise
        return f'not yet judged ({err})'
