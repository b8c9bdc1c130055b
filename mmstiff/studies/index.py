"""``docs/results/README.md``: one row per study folder, with its verdict category."""
import glob
import os
import os.path as osp
import warnings

from .errors import StudyError, StudyWarning
from .files import UnreadableFile, read_runs_file
from .format import code, fmt, fmt_interval, fmt_signed, table
from .numbers import StudyNumbers
from .report import PAGE, RUNS_FILE
from .spec import load_study, repo_relative
from .state import DONE


def _primary(numbers):
    if numbers.primary is None:
        return 'no declared outcome', '–', '–'
    o, j = numbers.outcome, numbers.primary['judgement']
    d = j.difference
    if d is None or d.low is None:
        return j.category, '–', '–'
    if o.is_correlation:
        return (j.category, f'Spearman ρ({code(o.metric)}, {code(o.correlate_with)}): '
                f'{d.difference:+.2f} [{d.low:.2f}, {d.high:.2f}]', f'ρ = {j.mde:.2f}')
    scale = (d.high - d.low) / 2 if d.high != d.low else None
    return (j.category, f'{code(o.metric)} {o.variant} − {o.baseline or 0}: '
            f'{fmt_signed(d.difference, scale)} {fmt_interval(d.low, d.high, scale)}',
            fmt(j.mde, scale))


def _row(path):
    """The index row of the study whose runs.json is ``path``."""
    runs_data = read_runs_file(path)
    info = runs_data['study']
    try:
        study = load_study(info['file'], info.get('config_set'), info.get('overrides', ()))
        source = study.claim.source
        category, effect, mde = _primary(StudyNumbers(runs_data, study.outcome))
    except StudyError as err:
        source, category, effect, mde = info['claim'].get(
            'source', '–'), (f'(study file {info["file"]} unreadable: {err})'), '–', '–'
    done = sum(1 for r in runs_data['runs'] if r['status'] == DONE)
    folder = osp.basename(osp.dirname(path))
    return [
        f'[{info["name"]}]({folder}/{PAGE})', source, category, effect, mde,
        f'{done}/{len(runs_data["runs"])}'
    ]


def write_index(results_dir: str) -> str:
    """Write ``<results_dir>/README.md`` from every ``<results_dir>/*/runs.json``.

    A study whose runs.json is unreadable (truncated, not JSON, not a runs.json) gets a row
    saying so and a :class:`StudyWarning` naming the file; the other rows are written as usual.
    """
    rows = []
    for path in sorted(glob.glob(osp.join(results_dir, '*', RUNS_FILE))):
        try:
            rows.append(_row(path))
        except (UnreadableFile, KeyError, TypeError, ValueError) as err:
            # another study's file: it never stops the study whose page is being written
            folder = osp.basename(osp.dirname(path))
            problem = (
                err.problem if isinstance(err, UnreadableFile) else
                f'has numbers the page cannot use ({type(err).__name__}: {err})')
            warnings.warn(
                f'{repo_relative(path)} {problem}; the index lists study {folder!r} '
                'as unreadable', StudyWarning)
            rows.append(
                [folder, '–', f'(unreadable: {folder}/{RUNS_FILE} {problem})', '–', '–', '–'])
    lines = [
        '# Reproduction studies', '',
        'Each folder holds one study run by `tools/reproduce.py`: its page (`README.md`), '
        'the raw numbers of every run (`runs.json`) and the figures. A study file in '
        '`configs/studies/` names the claim, the variants, the seeds and, before any run, '
        'the primary outcome and the smallest effect of interest (docs/studies.md); run '
        'one with', '', '```bash', 'make reproduce STUDY=configs/studies/<study>.py   # or: python '
        'tools/reproduce.py configs/studies/<study>.py [--jobs N]', '```', '',
        'and regenerate its page with `python tools/reproduce.py '
        'configs/studies/<study>.py --report-only`. The verdict category is computed by '
        'the runner from the declared outcome: *held* (the 95% interval excludes 0 in the '
        'claimed direction), *did not hold* (it excludes the smallest effect of interest), '
        '*inconclusive* (neither; the MDE column says what the study could have seen). '
        'This index is rewritten with every page.', ''
    ]
    if rows:
        lines += table([
            'study', 'claim from', 'verdict', 'primary effect, 95% CI', 'MDE (80% power)',
            'runs done'
        ], rows)
    else:
        lines += ['No study has been run yet.']
    out = osp.join(results_dir, PAGE)
    os.makedirs(results_dir, exist_ok=True)
    with open(out, 'w') as f:
        f.write('\n'.join(lines) + '\n')
    return out
