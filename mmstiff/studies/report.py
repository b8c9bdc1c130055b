"""A study page, written from its ``runs.json`` and its study file alone.

``docs/results/<study>/runs.json`` holds everything the page shows (the study as it was run,
every run's status, wall times, commands and collected numbers); the claim, the declared
outcome and the verdict prose come from the study file, so a verdict written after looking at
the numbers only needs ``tools/reproduce.py STUDY --report-only``. The page is a pure function
of the two: no clock, no machine state, rows in a fixed order, every number through
:mod:`mmstiff.studies.format`, so writing it again gives the same bytes. It opens with the
claim, the declared outcome, the verdict category the runner computed, the effect with its
interval and the minimum detectable effect (docs/studies.md).
"""
import glob
import os
import os.path as osp
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import tables
from .errors import StudyError, StudyWarning
from .files import UnreadableFile, keep_copy, read_runs_file
from .format import code, fmt, fmt_interval, fmt_signed, p_text
from .numbers import ALPHA, POWER, StudyNumbers, verdict_text
from .outcome import INCONCLUSIVE, NOT_HELD, NOT_RUN, Outcome, check_prose
from .spec import Study
from .state import DONE, dump_json

RUNS_FILE = 'runs.json'
PAGE = 'README.md'
WORDS = dict(greater='greater than', less='less than')


def outcome_line(outcome: Optional[Outcome]) -> str:
    """The declared primary outcome, in words."""
    if outcome is None:
        return ('- **Declared outcome:** none (the study file declares no primary outcome; '
                'every comparison on this page is exploratory).')
    o = outcome
    if o.is_correlation:
        return (f'- **Declared outcome:** Spearman ρ between {code(o.metric)} and '
                f'{code(o.correlate_with)} across every finished run of every variant: ρ '
                f'{WORDS[o.direction]} 0, smallest effect of interest |ρ| = {fmt(o.margin)}.')
    against = o.baseline or '0'
    claim = (f'equivalent within ±{fmt(o.margin)}' if o.direction == 'equivalent' else
             f'{o.variant} {WORDS[o.direction]} {against}, smallest effect of interest '
             f'{fmt(o.margin)}')
    return f'- **Declared outcome:** {code(o.metric)}, {o.variant} − {against}: {claim}.'


def _why(outcome, judgement, scale):
    j = judgement
    if j.category == INCONCLUSIVE:
        return f'{j.reason}; the effect it could have detected: {fmt(j.mde, scale)}'
    if j.category == NOT_HELD and outcome.direction == 'equivalent':
        return f'{j.reason}; it rules out a difference smaller than {fmt(j.ruled_out, scale)}'
    if j.category == NOT_HELD:
        return (f'{j.reason}; it rules out an effect beyond {fmt_signed(j.ruled_out, scale)} '
                'in the claimed direction')
    return j.reason


def _link_line(numbers):
    o, link = numbers.outcome, numbers.primary['link']
    if link is None:
        return []
    text = (f'r = {link.r:.2f}, 95% CI [{link.low:.2f}, {link.high:.2f}], '
            f'{p_text(link.p_value)}'
            if link.low is not None else 'undefined (fewer than 3 runs or no spread)')
    return [
        f'- **Link:** Pearson {text} between {code(o.metric)} and '
        f'{code(o.link)} over the {link.n} finished runs of every variant.'
    ]


def correlation_lines(numbers: StudyNumbers) -> List[str]:
    """The verdict lines of a correlation outcome: ρ with its interval, the runs it pools, the
    ρ those runs could detect and the runs that would detect the margin."""
    o, primary = numbers.outcome, numbers.primary
    j, pairs = primary['judgement'], primary['pairs']
    per_variant = ', '.join(f'{label} {sum(1 for p in pairs if p[0] == label)}'
                            for label in numbers.labels)
    if j.category == NOT_RUN:
        return [
            f'- **Verdict: {NOT_RUN}** ({j.reason}; runs with both metrics: '
            f'{per_variant}).'
        ]
    d = j.difference
    if j.category == INCONCLUSIVE:
        why = f'{j.reason}; the ρ it could have detected: {j.mde:.2f}'
    elif j.category == NOT_HELD:
        bound = (f'above {d.high:+.2f}' if o.direction == 'greater' else f'below {d.low:+.2f}')
        why = f'{j.reason}; it rules out ρ {bound}'
    else:
        why = j.reason
    runs = primary['runs_for_margin']
    return [
        f'- **Verdict: {j.category}** ({why}).',
        f'- **Effect:** Spearman ρ = {d.difference:+.2f}, 95% CI [{d.low:.2f}, {d.high:.2f}] '
        f'(Fisher z, SE √(1.06 / (n − 3)); {p_text(d.p_value)}) over n = {len(pairs)} runs '
        f'({per_variant}).',
        f'- **Minimum detectable effect:** ρ = {j.mde:.2f} ({POWER:.0%} power, two-sided '
        f'α = {ALPHA:.2f}, {len(pairs)} runs); runs to detect |ρ| = {fmt(o.margin)}: '
        f'{runs if runs else "more than 100000"}.',
    ] + _link_line(numbers)


def primary_lines(numbers: StudyNumbers) -> List[str]:
    """The verdict category, the effect with its interval, the MDE, the signs, the link."""
    o, primary = numbers.outcome, numbers.primary
    if o is None:
        return []
    if o.is_correlation:
        return correlation_lines(numbers)
    j = primary['judgement']
    if j.category == NOT_RUN:
        return [f'- **Verdict: {NOT_RUN}** ({j.reason}).']
    d = j.difference
    scale = (d.high - d.low) / 2 if d.high != d.low else None
    against = o.baseline or '0'
    seeds = primary['seeds_for_margin']
    n = (f'{numbers.summary[o.variant][o.metric].n} seeds, one-sample t'
         if o.baseline is None else f'Welch; {numbers.summary[o.variant][o.metric].n} and '
         f'{numbers.summary[o.baseline][o.metric].n} seeds')
    lines = [
        f'- **Verdict: {j.category}** ({_why(o, j, scale)}).',
        f'- **Effect:** {fmt_signed(d.difference, scale)}, 95% CI '
        f'{fmt_interval(d.low, d.high, scale)} ({n}; {p_text(d.p_value)}); seeds with '
        f'{o.variant} above / below {against}: '
        f'{primary["signs"][0]} / {primary["signs"][1]}' +
        (f' ({primary["signs"][2]} equal).' if primary['signs'][2] else '.'),
        f'- **Minimum detectable effect:** {fmt(j.mde, scale)} ({POWER:.0%} power, '
        f'two-sided α = {ALPHA:.2f}, the observed seed SDs); seeds per variant to detect '
        f'{fmt(o.margin)}: {seeds if seeds else "more than 1000"}.'
    ]
    if o.direction == 'equivalent':
        lines.append(f'- **Equivalence (TOST against ±{fmt(o.margin)}):** '
                     f'{p_text(j.tost_p)}.')
    return lines + _link_line(numbers)


def category(numbers: StudyNumbers) -> Optional[str]:
    """The runner's verdict category (None without a declared outcome)."""
    return None if numbers.primary is None else numbers.primary['judgement'].category


def checked_verdict(verdict: Optional[str], numbers: StudyNumbers, strict: bool = True) -> str:
    """The verdict prose filled in, refused (:class:`StudyError`) when it contradicts the
    category, with ``strict``; without it, a contradiction is said in the text."""
    text = verdict_text(verdict, numbers, strict)
    found = category(numbers)
    if verdict and found not in (None, NOT_RUN):
        try:
            check_prose(found, text)
        except StudyError as err:
            if strict:
                raise
            text += f' (not checked: {err})'
    return text


def render_page(runs_data: Dict[str, Any], study: Study, figures: Sequence[Tuple[str, str]],
                strict: bool = True) -> str:
    """The Markdown of a study page (a string); ``study``: the checked study file."""
    info = runs_data['study']
    numbers = StudyNumbers(runs_data, study.outcome)
    claim = study.claim
    study_file = info['file']
    done = sum(1 for r in runs_data['runs'] if r['status'] == DONE)
    lines = [
        f'# {info["name"]}', '',
        *[f'> {line}' if line else '>'
          for line in claim.quote.splitlines()], '', f'— {claim.source}', '',
        outcome_line(study.outcome), *primary_lines(numbers), '',
        '<!-- Written by tools/reproduce.py from runs.json and the study file; regenerate '
        f'with: python tools/reproduce.py {study_file} --report-only -->', '',
        f'Study file: {code(study_file)} · raw data: [{RUNS_FILE}]({RUNS_FILE}) · '
        f'{done} of {len(runs_data["runs"])} runs done.', ''
    ]
    if claim.tested:
        lines += [f'Tested here: {claim.tested}', '']
    lines += [
        '## Verdict', '',
        checked_verdict(study.verdict, numbers, strict), '', '## Setup', '', *tables.setup(info),
        '', '## Results: mean ± std over seeds', '',
        'Sample standard deviation (n − 1); n = finished seeds. `test/` from '
        '`tools/test.py --out`, `val/` the last validation during training, `train/` '
        'from the JSON log (time per iteration: MMEngine\'s smoothed iteration time), '
        '`log/` the last values of the diagnostic hooks, `derived/` computed from a '
        'run\'s profiles when the page is written, the others from the analysis tools. '
        'Decimals: two significant digits of the SD.', '', *tables.results(numbers), '',
        '## Secondary comparisons (Welch t, Benjamini–Hochberg q)', '',
        'Difference = mean(variant) − mean(baseline), with the 95% Welch interval '
        '(mmstiff/studies/statistics.py; docs/methods.md §13). These are exploratory: '
        'the primary outcome above is the study\'s test.', '', *tables.differences(numbers), '',
        '## Per seed', '', *tables.per_seed(numbers), '', '## Wall time', '',
        *tables.wall_times(runs_data), ''
    ]
    if figures:
        lines += [
            '## Figures', '', 'One line per variant: the mean over its seeds; shaded or '
            'error bars: ± one standard deviation.', ''
        ]
        for file, caption in figures:
            lines += [f'![{caption}]({file})', '', f'*{caption}.*', '']
    lines += ['## Commands', '', *tables.commands(runs_data), '']
    return '\n'.join(lines)


def read_runs(results_dir: str, name: str) -> Dict[str, Any]:
    """The checked data of ``<results_dir>/<name>/runs.json``; :class:`StudyError` when it is
    missing, :class:`~.files.UnreadableFile` when it is truncated or not a runs.json."""
    path = osp.join(results_dir, name, RUNS_FILE)
    if not osp.isfile(path):
        raise StudyError(f'{path} does not exist; run the study first (without --report-only)')
    return read_runs_file(path)


def write_page(results_dir: str, study: Study, strict: bool = True,
               draw: Optional[Callable[..., List[Tuple[str, str]]]] = None) -> str:
    """Write ``<results_dir>/<study>/README.md`` (and its figures) from its runs.json.

    Args:
        study (Study): the checked study file.
        strict (bool): refuse a verdict that cannot be filled in or contradicts the category.
        draw (callable | None): ``draw(labels, done, out_dir) -> [(file, caption)]`` writes the
            figures (:func:`mmstiff.visualization.study_figures.draw_study_figures`; for a
            correlation outcome it also gets ``correlation=(metric, correlate_with)``); None
            keeps the page without figures.
    """
    runs_data = read_runs(results_dir, study.name)
    out_dir = osp.join(results_dir, study.name)
    numbers = StudyNumbers(runs_data, study.outcome)
    checked_verdict(study.verdict, numbers, strict)  # a bad verdict fails before any writing
    o = numbers.outcome
    extra = dict(correlation=(o.metric, o.correlate_with)) if o and o.is_correlation else {}
    figures = draw(numbers.labels, numbers.done, out_dir, **extra) if draw else []
    for stale in glob.glob(osp.join(out_dir, '*.png')):
        if draw and osp.basename(stale) not in {f for f, _ in figures}:
            os.remove(stale)
    path = osp.join(out_dir, PAGE)
    with open(path, 'w') as f:
        f.write(render_page(runs_data, study, figures, strict))
    return path


def write_runs(results_dir: str, runs_data: Dict[str, Any]) -> str:
    """Write ``<results_dir>/<study>/runs.json`` (sorted keys: equal data, equal bytes); an
    unreadable file there is first kept as ``runs.json.corrupt-<time>`` (a
    :class:`StudyWarning` says where)."""
    path = osp.join(results_dir, runs_data['study']['name'], RUNS_FILE)
    if osp.exists(path):
        try:
            read_runs_file(path)
        except UnreadableFile as err:
            warnings.warn(f'{err}; kept it as {keep_copy(path)} before writing a new one',
                          StudyWarning)
    return dump_json(runs_data, path)
