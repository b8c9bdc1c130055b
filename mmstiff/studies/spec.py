"""The study file: what a study runs and what it asks, checked before any work starts.

A study file is a Python file (top-level names, like a config) or a YAML mapping, usually under
``configs/studies/``; docs/studies.md describes every field::

    name = 'stepnet_vs_se_fashion_mnist'          # folder name of the work dirs and results
    claim = dict(quote='...', source='paper, section, link', tested='what is measured here')
    seeds = [0, 1, 2]                              # default seeds of every variant
    analysis = ['tns', 'spectrum', 'freq_noise']   # default analysis tools of every variant
    analysis_args = dict(tns=['--num-batches', '4'])   # extra flags per tool (optional)
    cfg_options = ['train_dataloader.dataset.data_root=data/x']  # for every run (optional)
    runs = [                                       # the variants, in table order
        dict(label='plain', config='configs/demo/x.py',
             cfg_options=['model.backbone.adaptor=None'], baseline=True),
        dict(label='se', config='configs/demo/x.py',
             cfg_options=['model.backbone.adaptor.type=mmstiff.SEAdaptor'], baseline='plain'),
        dict(label='stepnet', config='configs/demo/x.py', baseline=['plain', 'se'],
             seeds=[0, 1, 2, 3], analysis=['tns']),
    ]
    outcome = dict(metric='test/accuracy/top1', comparison=['stepnet', 'plain'],
                   direction='greater', margin=0.5)   # the primary outcome, declared first
    reuse = ['other_study']                        # take identical finished runs (optional)
    # after looking: None (not yet judged) or text with the numbers as placeholders
    verdict = 'StepNet − SE: {diff[stepnet][se][test/accuracy/top1]} points'

``reuse``: names of other studies whose finished runs this study takes instead of training
them again: a run of this study with the same config, ``cfg_options`` and seed as a finished
run of a listed study (in the same work root) gets a copy of that run's work dir and state
entry, marked with where it came from; its missing analysis tools then run on the copy.

``baseline`` of a variant: ``True`` marks a reference; a label (or a list of labels) names what
the variant is compared with; left out, the variant is compared with the study's only
``baseline=True`` variant, if it has exactly one; ``False`` compares it with nothing.

The verdict is a ``str.format`` template over the study's numbers (each a formatted string):
``{mean[V][M]}``, ``{std[V][M]}``, ``{n[V][M]}``, ``{mean_ci[V][M]}`` (the 95% t-interval
of V's mean over its seeds), ``{diff[V][M]}``, ``{ci[V][M]}``,
``{p[V][M]}`` for variant ``V`` and metric ``M`` (the metric names of the results page; the
difference is to ``V``'s first baseline), or ``{diff[V][B][M]}``, ``{ci[V][B][M]}``,
``{p[V][B][M]}`` against baseline ``B``.
"""
import difflib
import os.path as osp
import re
import runpy
import string
from typing import Any, Dict, List, NamedTuple, Optional, Sequence

from .errors import StudyError
from .outcome import parse_outcome

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
STUDY_DIR = osp.join('configs', 'studies')
STUDY_SUFFIXES = ('.py', '.yaml', '.yml')

#: analysis tool -> (script, JSON file it writes into its --out-dir)
ANALYSIS_TOOLS = {
    'tns': ('tools/analysis/tns.py', 'tns.json'),
    'spectrum': ('tools/analysis/spectrum.py', 'spectrum.json'),
    'freq_noise': ('tools/analysis/freq_noise.py', 'freq_noise.json'),
    'hessian': ('tools/analysis/hessian.py', 'hessian.json'),
}
#: the fields a study file may set, and whether it must
FIELDS = {
    'name': True,
    'claim': True,
    'runs': True,
    'seeds': False,
    'analysis': False,
    'analysis_args': False,
    'cfg_options': False,
    'reuse': False,
    'verdict': False,
    'outcome': False,
    'configs': False
}
RUN_FIELDS = {
    'label': True,
    'config': True,
    'cfg_options': False,
    'baseline': False,
    'seeds': False,
    'analysis': False,
    'after': False
}
CLAIM_FIELDS = {'quote': True, 'source': True, 'tested': False}
VERDICT_NAMES = ('mean', 'std', 'n', 'mean_ci', 'diff', 'ci', 'p', 'q', 'primary')
NAME_PATTERN = re.compile(r'^[A-Za-z0-9][A-Za-z0-9_.-]*$')
#: set by the runner from the seeds; a study may not set it through cfg_options
SEED_KEY = 'randomness.seed'
#: in a ``cfg_options`` value, replaced by the run's seed (e.g. the checkpoint of the same seed
#: of another variant)
SEED_PLACEHOLDER = '{seed}'


class Claim(NamedTuple):
    """The claim a study tests.

    Attributes:
        quote (str): the claimed sentence, verbatim.
        source (str): where it stands (paper, section or figure, link).
        tested (str | None): what the study measures of it, and at which scale.
    """
    quote: str
    source: str
    tested: Optional[str]


class Variant(NamedTuple):
    """One variant of a study: a config and its overrides, trained with every seed.

    Attributes:
        label (str): its name in tables, figures and work dirs.
        config (str): the config path as written in the study file (relative to the repo root
            unless absolute).
        cfg_options (tuple[str]): the study's common ``key=value`` overrides, then the variant's.
        is_baseline (bool): ``baseline=True`` in the study file.
        compare_to (tuple[str]): labels of the variants it is compared with.
        seeds (tuple[int]): seeds, in order.
        analysis (tuple[str]): analysis tools to run on its final checkpoints.
        after (tuple[str]): earlier variants whose run of the same seed must finish before
            this variant's starts (it reads their work dir, e.g. a checkpoint).
    """
    label: str
    config: str
    cfg_options: tuple
    is_baseline: bool
    compare_to: tuple
    seeds: tuple
    analysis: tuple
    after: tuple = ()

    def options_for(self, seed: int) -> List[str]:
        """The variant's ``cfg_options`` with ``{seed}`` replaced by ``seed``."""
        return [option.replace(SEED_PLACEHOLDER, str(seed)) for option in self.cfg_options]


class Study(NamedTuple):
    """A checked study file; ``cfg_options`` are the options common to every variant."""
    name: str
    file: str
    claim: Claim
    variants: tuple
    cfg_options: tuple
    analysis_args: dict
    verdict: Optional[str]
    reuse: tuple = ()
    outcome: object = None
    configs: tuple = ()


def resolve_study_path(study: str) -> str:
    """The file a user means by ``study``: a path, or a name under ``configs/studies/``."""
    candidates = [study, osp.join(REPO, study)]
    candidates += [osp.join(REPO, STUDY_DIR, study + suffix) for suffix in STUDY_SUFFIXES]
    for path in candidates:
        if osp.isfile(path):
            if not path.endswith(STUDY_SUFFIXES):
                raise StudyError(f'study file {study!r} has suffix {osp.splitext(path)[1]!r}; '
                                 f'expected one of {list(STUDY_SUFFIXES)}')
            return path
    raise StudyError(f'study file {study!r} does not exist (looked for it as a path and as '
                     f'{STUDY_DIR}/{study}{{.py,.yaml,.yml}})')


def read_study_fields(path: str) -> Dict[str, Any]:
    """The study file's fields as a dict (a Python file's public top-level data names)."""
    if path.endswith('.py'):
        try:
            namespace = runpy.run_path(path, run_name='__study__')
        except Exception as err:  # the file's own error, reported with its path
            raise StudyError(f'study file {path!r} failed to load: {type(err).__name__}: {err}')
        return {
            k: v
            for k, v in namespace.items()
            if not k.startswith('_') and not callable(v) and type(v).__name__ != 'module'
        }
    import yaml
    with open(path) as f:
        try:
            fields = yaml.safe_load(f)
        except yaml.YAMLError as err:
            raise StudyError(f'study file {path!r} is not valid YAML: {err}')
    if not isinstance(fields, dict):
        raise StudyError(f'study file {path!r} holds a {type(fields).__name__}; expected a '
                         'mapping of the study fields')
    return fields


def _check_fields(fields, allowed, where):
    unknown = sorted(set(fields) - set(allowed))
    if unknown:
        close = {
            name: difflib.get_close_matches(str(name), list(allowed), n=1, cutoff=0.6)
            for name in unknown
        }
        hint = ', '.join(f'{close[name][0]!r} for {name!r}' for name in unknown if close[name])
        raise StudyError(f'{where} has unknown field(s) {unknown}' +
                         (f' (did you mean {hint}?)' if hint else '') +
                         f'; expected some of {sorted(allowed)}')
    missing = [k for k, required in allowed.items() if required and fields.get(k) is None]
    if missing:
        raise StudyError(f'{where} misses the required field(s) {missing}')


def _text(value, field):
    if not isinstance(value, str) or not value.strip():
        raise StudyError(f'{field}={value!r}; expected a non-empty string')
    return value.strip()


def _string_list(value, field):
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise StudyError(f'{field}={value!r}; expected a list of strings')
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise StudyError(f'{field}[{i}]={item!r} is not a string; expected a list of strings')
    return tuple(value)


def _seeds(value, field):
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not value:
        raise StudyError(f'{field}={value!r}; expected a non-empty list of int seeds')
    for i, seed in enumerate(value):
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise StudyError(f'{field}[{i}]={seed!r} is not a seed; expected a list of ints >= 0')
    duplicates = sorted({s for s in value if list(value).count(s) > 1})
    if duplicates:
        raise StudyError(f'{field}={list(value)!r} repeats the seed(s) {duplicates}')
    return tuple(value)


def _cfg_options(value, field):
    options = _string_list(value, field)
    for i, option in enumerate(options):
        key = option.split('=', 1)[0].strip()
        if '=' not in option or not key:
            raise StudyError(f'{field}[{i}]={option!r}; expected key=value, as for '
                             '--cfg-options')
        if key == SEED_KEY:
            raise StudyError(f'{field}[{i}]={option!r} sets the seed; list seeds in the '
                             '`seeds` field instead (the runner sets randomness.seed per run)')
    return options


def _analysis(value, field):
    tools = _string_list(value, field)
    for i, tool in enumerate(tools):
        if tool not in ANALYSIS_TOOLS:
            raise StudyError(f'{field}[{i}]={tool!r} is not an analysis tool; expected one of '
                             f'{sorted(ANALYSIS_TOOLS)}')
    if len(set(tools)) != len(tools):
        raise StudyError(f'{field}={list(tools)!r} lists a tool twice')
    return tools


def _config(value, field):
    path = _text(value, field)
    if not osp.isfile(path if osp.isabs(path) else osp.join(REPO, path)):
        raise StudyError(f'{field}={value!r} does not exist (config paths are relative to the '
                         f'repository root {REPO})')
    return path


def _verdict(value):
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if not isinstance(value, str):
        raise StudyError(f'verdict={value!r}; expected a string (or None: not yet judged)')
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(value) if f is not None]
    except ValueError as err:
        raise StudyError(f'verdict={value!r} is not a valid template: {err} (write a literal '
                         'brace as {{ or }})')
    for field in fields:
        head = re.split(r'[.\[]', field, maxsplit=1)[0]
        if head not in VERDICT_NAMES:
            raise StudyError(f'verdict refers to {{{field}}}; expected a placeholder that starts '
                             f'with one of {list(VERDICT_NAMES)}, e.g. '
                             '{diff[stepnet][test/accuracy/top1]}')
    return value.strip()


def _baselines(runs, labels):
    marked = [label for label, run in zip(labels, runs) if run.get('baseline') is True]
    resolved = []
    for i, (label, run) in enumerate(zip(labels, runs)):
        baseline = run.get('baseline')
        field = f'runs[{i}].baseline'
        if baseline is True:
            resolved.append((True, ()))
            continue
        if baseline is None:
            resolved.append((False, tuple(marked) if len(marked) == 1 else ()))
            continue
        if baseline is False:
            resolved.append((False, ()))
            continue
        names = [baseline] if isinstance(baseline, str) else baseline
        if not isinstance(names, (list, tuple)) or not names:
            raise StudyError(f'{field}={baseline!r}; expected True, False, a label or a list '
                             'of labels')
        for name in names:
            if name not in labels:
                raise StudyError(f'{field}={baseline!r} names {name!r}, which is not a label of '
                                 f'this study; labels: {labels}')
            if name == label:
                raise StudyError(f'{field}={baseline!r}: variant {label!r} cannot be its own '
                                 'baseline')
        if len(set(names)) != len(names):
            raise StudyError(f'{field}={baseline!r} lists a label twice')
        resolved.append((False, tuple(names)))
    return resolved


def _after(value, field, label, earlier):
    """The labels a variant comes after: earlier variants, each training its seeds."""
    if value is None:
        return ()
    names = [value] if isinstance(value, str) else value
    if not isinstance(names,
                      (list, tuple)) or not names or not all(isinstance(n, str) for n in names):
        raise StudyError(f'{field}={value!r}; expected a label or a list of labels')
    for name in names:
        if name not in earlier:
            raise StudyError(f'{field}={value!r} names {name!r}, which is not a variant listed '
                             f'before {label!r}; expected one of {earlier} (a run waits for the '
                             'runs it comes after, so they come first in `runs`)')
    if len(set(names)) != len(names):
        raise StudyError(f'{field}={value!r} lists a label twice')
    return tuple(names)


def _config_sets(value):
    """The names of the study's ``configs`` entries, each checked for its fields."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise StudyError(f'configs={value!r}; expected dict(NAME=dict(config=..., '
                         'cfg_options=[...]))')
    for name, chosen in value.items():
        if not isinstance(chosen, dict) or set(chosen) - set(CONFIG_SET_FIELDS):
            raise StudyError(f'configs[{name!r}]={chosen!r}; expected a dict of some of '
                             f'{list(CONFIG_SET_FIELDS)}')
    return tuple(sorted(value))


def parse_study(fields: Dict[str, Any], path: str) -> Study:
    """A :class:`Study` from the raw fields of ``path``; :class:`StudyError` on bad input."""
    _check_fields(fields, FIELDS, f'study file {path!r}')
    name = _text(fields['name'], 'name')
    if not NAME_PATTERN.match(name):
        raise StudyError(f'name={name!r}; expected letters, digits, "_", "." or "-" (it names '
                         'folders)')
    claim = fields['claim']
    if not isinstance(claim, dict):
        raise StudyError(f'claim={claim!r}; expected dict(quote=..., source=..., tested=...)')
    _check_fields(claim, CLAIM_FIELDS, 'claim')
    claim = Claim(
        _text(claim['quote'], 'claim.quote'), _text(claim['source'], 'claim.source'),
        None if claim.get('tested') is None else _text(claim['tested'], 'claim.tested'))

    seeds = None if fields.get('seeds') is None else _seeds(fields['seeds'], 'seeds')
    analysis = _analysis(fields.get('analysis') or [], 'analysis')
    common = _cfg_options(fields.get('cfg_options') or [], 'cfg_options')
    analysis_args = fields.get('analysis_args') or {}
    if not isinstance(analysis_args, dict):
        raise StudyError(f'analysis_args={analysis_args!r}; expected dict(tool=[flags, ...])')
    for tool, args in analysis_args.items():
        if tool not in ANALYSIS_TOOLS:
            raise StudyError(f'analysis_args has the key {tool!r}, which is not an analysis '
                             f'tool; expected one of {sorted(ANALYSIS_TOOLS)}')
        for flag in ('--out-dir', '--cfg-options'):
            if flag in _string_list(args, f'analysis_args[{tool!r}]'):
                raise StudyError(f'analysis_args[{tool!r}]={list(args)!r} sets {flag}; the '
                                 'runner sets it (use cfg_options for config overrides)')
    analysis_args = {tool: tuple(args) for tool, args in sorted(analysis_args.items())}

    runs = fields['runs']
    if isinstance(runs, (str, dict)) or not isinstance(runs, (list, tuple)) or not runs:
        raise StudyError(f'runs={runs!r}; expected a non-empty list of dict(label=..., '
                         'config=..., ...)')
    labels = []
    for i, run in enumerate(runs):
        if not isinstance(run, dict):
            raise StudyError(f'runs[{i}]={run!r}; expected dict(label=..., config=..., ...)')
        _check_fields(run, RUN_FIELDS, f'runs[{i}]')
        label = _text(run['label'], f'runs[{i}].label')
        if not NAME_PATTERN.match(label):
            raise StudyError(f'runs[{i}].label={label!r}; expected letters, digits, "_", "." '
                             'or "-" (it names folders)')
        if label in labels:
            raise StudyError(f'runs[{i}].label={label!r} is used twice (runs[{labels.index(label)}]'
                             f' and runs[{i}]); labels must be unique')
        labels.append(label)
    baselines = _baselines(runs, labels)

    variants = []
    for i, (run, label, (is_baseline, compare_to)) in enumerate(zip(runs, labels, baselines)):
        run_seeds = seeds if run.get('seeds') is None else _seeds(run['seeds'], f'runs[{i}].seeds')
        if run_seeds is None:
            raise StudyError(f'runs[{i}] ({label!r}) has no seeds: set `seeds` for the study or '
                             f'runs[{i}].seeds')
        run_analysis = analysis if run.get('analysis') is None else _analysis(
            run['analysis'], f'runs[{i}].analysis')
        after = _after(run.get('after'), f'runs[{i}].after', label, labels[:i])
        for other in (v for v in variants if v.label in after):
            missing = sorted(set(run_seeds) - set(other.seeds))
            if missing:
                raise StudyError(f'runs[{i}] ({label!r}) comes after {other.label!r}, which '
                                 f'does not train the seed(s) {missing}; a run waits for the '
                                 'run of the same seed of each variant in `after`')
        variants.append(
            Variant(
                label=label, config=_config(run['config'],
                                            f'runs[{i}].config'), cfg_options=common +
                _cfg_options(run.get('cfg_options') or [], f'runs[{i}].cfg_options'),
                is_baseline=is_baseline, compare_to=compare_to, seeds=run_seeds,
                analysis=run_analysis, after=after))
    reuse = _string_list(fields.get('reuse') or [], 'reuse')
    for i, other in enumerate(reuse):
        if not NAME_PATTERN.match(other) or other == name:
            raise StudyError(f'reuse[{i}]={other!r}; expected the name of another study')
    return Study(name=name, file=path, claim=claim, variants=tuple(variants), cfg_options=common,
                 analysis_args=analysis_args, verdict=_verdict(fields.get('verdict')), reuse=reuse,
                 outcome=parse_outcome(fields.get('outcome'),
                                       variants), configs=_config_sets(fields.get('configs')))


CONFIG_SET_FIELDS = ('config', 'cfg_options', 'seeds', 'analysis_args')


def apply_config_set(fields: Dict[str, Any], config_set: str) -> Dict[str, Any]:
    """The raw fields with the study's ``configs[config_set]`` applied: its ``config`` (a path
    for every variant, or ``{label: path}``) replaces the variants' configs, its
    ``cfg_options`` follow the study's, its ``seeds`` and ``analysis_args`` replace the study's,
    and the study is named ``<name>.<config_set>`` (its own work dirs and page)."""
    sets = fields.get('configs') or {}
    if not isinstance(sets, dict):
        raise StudyError(f'configs={sets!r}; expected dict(NAME=dict(config=..., '
                         'cfg_options=[...]))')
    if config_set not in sets:
        raise StudyError(f'--configs {config_set!r}: the study file has no such entry; its '
                         f'configs: {sorted(sets)}')
    chosen = sets[config_set]
    if not isinstance(chosen, dict) or set(chosen) - set(CONFIG_SET_FIELDS):
        raise StudyError(f'configs[{config_set!r}]={chosen!r}; expected a dict of some of '
                         f'{list(CONFIG_SET_FIELDS)}')
    if not NAME_PATTERN.match(str(config_set)):
        raise StudyError(f'configs has the key {config_set!r}; expected letters, digits, "_", '
                         '"." or "-" (it names folders)')
    fields = dict(fields, name=f'{fields.get("name")}.{config_set}')
    config = chosen.get('config')
    runs = [dict(run) for run in fields.get('runs') or []]
    for run in runs:
        if isinstance(config, dict):
            run['config'] = config.get(run.get('label'), run.get('config'))
        elif config is not None:
            run['config'] = config
    fields['runs'] = runs
    fields['cfg_options'] = list(fields.get('cfg_options') or []) + list(
        _string_list(chosen.get('cfg_options') or [], f'configs[{config_set!r}].cfg_options'))
    for key in ('seeds', 'analysis_args'):
        if chosen.get(key) is not None:
            fields[key] = chosen[key]
    return fields


def load_study(study: str, config_set: Optional[str] = None,
               overrides: Sequence[str] = ()) -> Study:
    """Find, read and check a study file; see docs/studies.md for its fields.

    Args:
        study (str): a path or a name under ``configs/studies/``.
        config_set (str | None): an entry of the file's ``configs`` to apply
            (:func:`apply_config_set`).
        overrides (Sequence[str]): ``key=value`` config options added to every run after the
            study's own (``--set``).
    """
    path = resolve_study_path(study)
    fields = read_study_fields(path)
    if config_set is not None:
        fields = apply_config_set(fields, config_set)
    if overrides:
        fields = dict(
            fields, cfg_options=list(fields.get('cfg_options') or []) +
            list(_cfg_options(list(overrides), '--set')))
    return parse_study(fields, path)


def repo_relative(path: str) -> str:
    """``path`` relative to the repository root when it is inside it, else absolute."""
    path = osp.abspath(path if osp.isabs(path) else osp.join(REPO, path))
    relative = osp.relpath(path, REPO)
    return path if relative.startswith('..') else relative
