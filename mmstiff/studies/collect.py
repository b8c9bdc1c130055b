"""The numbers of one finished run, read from its work dir into a JSON-ready record.

A record has

* ``metrics``: one float per name, the values compared between variants:
  ``test/<metric>`` (``metrics.json`` of ``tools/test.py``), ``val/<metric>`` (the last
  validation of training), ``train/final_<loss>``, ``train/time_per_iter_s`` (mean of MMEngine's
  smoothed iteration time), ``train/time_per_epoch_s`` (that times the iterations per epoch),
  ``log/stiffness/{mu,ratio,tns}/<trajectory>`` (the last values the diagnostic hooks logged),
  ``tns/<trajectory>``, ``spectrum/{hf_ratio,dlogamp}/last``, ``freq_noise/clean_accuracy`` and
  ``freq_noise/mean_drop`` (from the analysis tools' JSON files);
* ``curves``: ``{name: {x, y, x_label}}`` over training: ``train/<loss>`` per iteration and
  ``val/<metric>`` per validation (epoch or iteration);
* ``profiles``: ``{name: {x, y, x_label}}`` along the network or a frequency axis:
  ``tns/nsi``, ``tns/step`` (per block, test split), ``spectrum/hf_ratio``,
  ``spectrum/dlogamp`` (per state), ``freq_noise/drop`` (per noise band) and ``log/nsi``,
  ``log/step``, ``log/hf_ratio``, ``log/dlogamp`` (the last training-batch values);
* ``train_info``: iterations, epochs and iterations per epoch as logged.

The training logs are the JSON logs ``<work dir>/<timestamp>/vis_data/<timestamp>.json`` of
every training process (a resumed run has several), merged by step with the later process
winning; ``scalars.json`` is read where no timestamped log exists. Iterations per epoch come
from the text log's ``Epoch(train) [e][i/N]`` lines.
"""
import glob
import json
import math
import os.path as osp
import re
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from mmstiff.analysis.quantities import PREFIXES, QUANTITIES, along
from .spec import ANALYSIS_TOOLS

#: a run's record: ``{'metrics': {name: value}, 'curves': {name: curve}, 'profiles': {name:
#: profile}}``
Record = Dict[str, Dict[str, Any]]

#: a curve longer than this is thinned to every k-th point (the last one always kept)
MAX_CURVE_POINTS = 1000
#: logged per step / per state (docs/diagnostics.md, "Logged quantities"): final values go to
#: ``profiles`` (group -> profile name)
BLOCK_GROUPS = {q.group: q.profile for q in QUANTITIES if q.profile}
#: logged per step: the mean per step over every recorded iteration of training goes to
#: ``profiles`` as ``<profile>_training_mean``, and the mean over each stage's steps (last
#: recorded iteration, and over training) to ``metrics`` as ``log/<group>/<stage>``
STAGE_MEAN_GROUPS = tuple(q.group for q in QUANTITIES if q.stage_means)
#: the last state's value of these per-state profiles goes to ``metrics`` as ``<name>/last``
LAST_STATE_PROFILES = tuple(q.profile for q in QUANTITIES if q.last_state)
#: the kind of a step from its name: MSA, MLP or (otherwise) a conv block
STEP_KINDS = (('msa', re.compile(r'(^|\.)msa\d*$')), ('mlp', re.compile(r'(^|\.)mlp\d*$')))
#: logged per trajectory (stage or network): final values go to ``metrics``
TRAJECTORY_GROUPS = tuple(q.group for q in along('trajectory'))
#: the diagnostics hooks' rows, told from the training and validation rows by their names
DIAGNOSTIC_PREFIXES = PREFIXES
BOOKKEEPING = ('step', 'iter', 'epoch', 'time', 'data_time', 'memory')
EPOCH_HEADER = re.compile(r'Epoch\(train\)\s*\[\s*\d+\]\s*\[\s*\d+/(\d+)\]')


def _finite(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def training_logs(work_dir: str) -> List[str]:
    """The JSON logs of every training process in ``work_dir``, oldest first."""
    runs = sorted(d for d in glob.glob(osp.join(work_dir, '*', 'vis_data')))
    logs = []
    for vis_data in runs:
        stamped = sorted(
            p for p in glob.glob(osp.join(vis_data, '*.json')) if osp.basename(p) != 'scalars.json')
        logs += stamped or glob.glob(osp.join(vis_data, 'scalars.json'))
    return logs


def read_rows(paths: Iterable[str]) -> Dict[str, List[Dict[str, Any]]]:
    """The rows of JSON-lines logs, tagged train / val / diagnostics, later files winning."""
    rows = {}
    for order, path in enumerate(paths):
        with open(path) as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    row = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut off by a killed process
                if not isinstance(row, dict) or not _finite(row.get('step')):
                    continue
                if any(k.startswith(DIAGNOSTIC_PREFIXES) for k in row):
                    kind = 'diagnostics'
                elif 'lr' in row or 'base_lr' in row or any('loss' in k for k in row):
                    kind = 'train'
                else:
                    kind = 'val'
                # later rows of a kind at the same step replace earlier ones
                rows.setdefault(kind, {}).setdefault(int(row['step']), {}).update(row)
    return {kind: [by_step[s] for s in sorted(by_step)] for kind, by_step in rows.items()}


def thin(xs: Sequence[Any], ys: Sequence[Any],
         limit: int = MAX_CURVE_POINTS) -> Tuple[List[Any], List[Any]]:
    """At most ``limit`` points: every k-th one and the last."""
    if len(xs) <= limit:
        return list(xs), list(ys)
    k = math.ceil(len(xs) / limit)
    keep = list(range(0, len(xs), k))
    if keep[-1] != len(xs) - 1:
        keep.append(len(xs) - 1)
    return [xs[i] for i in keep], [ys[i] for i in keep]


def _curve(rows, key, x_label):
    points = [(row['step'], float(row[key])) for row in rows if _finite(row.get(key))]
    xs, ys = thin([int(p[0]) for p in points], [p[1] for p in points])
    return dict(x=xs, y=ys, x_label=x_label)


def iters_per_epoch(work_dir: str) -> Optional[int]:
    """``N`` of the last ``Epoch(train) [e][i/N]`` line of the training text logs, or None."""
    found = None
    for path in sorted(glob.glob(osp.join(work_dir, '*', '*.log'))):
        with open(path, errors='replace') as f:
            for match in EPOCH_HEADER.finditer(f.read()):
                found = int(match.group(1))
    return found


def collect_training(work_dir: str, record: Record) -> None:
    """Add the numbers of the training logs of ``work_dir`` to ``record`` (in place).

    The losses' curves and final values, the mean iteration time (and the time per epoch of an
    epoch-based run), the validation metrics' curves and last values, the diagnostics hooks'
    last logged values (per-block profiles, per-trajectory metrics, the last state of
    :data:`LAST_STATE_PROFILES`, per-stage means) and their means over training (per block and
    per stage), and ``record['train_info']``.
    """
    rows = read_rows(training_logs(work_dir))
    train, val, diagnostics = rows.get('train', []), rows.get('val',
                                                              []), rows.get('diagnostics', [])
    metrics, curves, profiles = record['metrics'], record['curves'], record['profiles']
    by_epoch = any('epoch' in row for row in train)
    losses = sorted({k for row in train for k in row if 'loss' in k and _finite(row[k])})
    for key in losses:
        curves[f'train/{key}'] = _curve(train, key, 'iteration')
        metrics[f'train/final_{key}'] = curves[f'train/{key}']['y'][-1]
    times = [float(row['time']) for row in train if _finite(row.get('time'))]
    per_epoch = iters_per_epoch(work_dir) if by_epoch else None
    if times:
        metrics['train/time_per_iter_s'] = math.fsum(times) / len(times)
        if per_epoch:
            metrics['train/time_per_epoch_s'] = metrics['train/time_per_iter_s'] * per_epoch
    val_keys = sorted({k for row in val for k in row if k not in BOOKKEEPING and _finite(row[k])})
    for key in val_keys:
        curves[f'val/{key}'] = _curve(val, key, 'epoch' if by_epoch else 'iteration')
        metrics[f'val/{key}'] = curves[f'val/{key}']['y'][-1]

    final = {}
    for row in diagnostics:
        final.update({k: v for k, v in row.items() if k.startswith(DIAGNOSTIC_PREFIXES)})
    for group, name in BLOCK_GROUPS.items():
        blocks = [(k[len(group) + 1:], v) for k, v in final.items()
                  if k.startswith(group + '/') and _finite(v)]
        if blocks:
            profiles[name] = dict(x=[b for b, _ in blocks], y=[float(v) for _, v in blocks],
                                  x_label='block')
    for key, value in final.items():
        if key.startswith(TRAJECTORY_GROUPS) and _finite(value):
            metrics[f'log/{key}'] = float(value)
    for name in LAST_STATE_PROFILES:
        if profiles.get(name, {}).get('y'):
            metrics[f'{name}/last'] = profiles[name]['y'][-1]
    for group in STAGE_MEAN_GROUPS:
        for stage, value in _stage_means(final, group).items():
            metrics[f'log/{group}/{stage}'] = value
        means = _training_means(diagnostics, group)
        if means:
            profiles[f'{BLOCK_GROUPS[group]}_training_mean'] = dict(
                x=list(means), y=list(means.values()), x_label='block')
            for stage, value in _stage_means({
                    f'{group}/{b}': v
                    for b, v in means.items()
            }, group).items():
                metrics[f'log/{group}/{stage}/training_mean'] = value
    record['train_info'] = dict(
        iterations=max((int(row['step']) for row in train), default=None), epochs=max(
            (int(row['epoch']) for row in train if 'epoch' in row), default=None),
        iters_per_epoch=per_epoch, logs=len({osp.dirname(p)
                                             for p in training_logs(work_dir)}))  # processes


def _stage_means(values, group):
    """``{stage: mean}`` of the finite ``<group>/<block>`` values, a block's stage being the
    first part of its name (``layer1.0`` -> ``layer1``)."""
    stages = {}
    for key, value in values.items():
        if key.startswith(group + '/') and _finite(value):
            stages.setdefault(key[len(group) + 1:].split('.')[0], []).append(float(value))
    return {stage: math.fsum(v) / len(v) for stage, v in stages.items()}


def _training_means(diagnostics, group):
    """``{block: mean}`` of every finite ``<group>/<block>`` value logged over training."""
    sums = {}
    for row in diagnostics:
        for key, value in row.items():
            if key.startswith(group + '/') and _finite(value):
                sums.setdefault(key[len(group) + 1:], []).append(float(value))
    return {block: math.fsum(v) / len(v) for block, v in sums.items()}


def step_kind(name: str) -> str:
    """``'msa'``, ``'mlp'`` or ``'conv'``: the kind of the step whose state is ``name``."""
    for kind, pattern in STEP_KINDS:
        if pattern.search(name):
            return kind
    return 'conv'


def dlogamp_steps(states: Sequence[Tuple[str, Any, Optional[int]]]) -> Dict[str, float]:
    """``{kind: mean change}`` of the Δ log amplitude across the steps of each kind, from the
    ``[(state, Δ log amplitude, map size)]`` in network order (``input`` first): the change
    across the step whose output is state ``i`` is ``value[i] - value[i - 1]``. A step that
    changes the map size (a strided step: its 1.0π is another frequency) counts as
    ``'downsample'``, whatever its kind; a size of None matches any."""
    changes = {}
    for (_, before, size_before), (name, after, size) in zip(states, states[1:]):
        if _finite(before) and _finite(after):
            kind = (
                step_kind(name)
                if None in (size, size_before) or size == size_before else 'downsample')
            changes.setdefault(kind, []).append(float(after) - float(before))
    return {kind: math.fsum(v) / len(v) for kind, v in changes.items()}


def _profile(pairs, x_label):
    pairs = [(x, float(y)) for x, y in pairs if _finite(y)]
    return dict(x=[x for x, _ in pairs], y=[y for _, y in pairs], x_label=x_label)


def collect_tns(result: Dict[str, Any], record: Record) -> None:
    """Add the numbers of ``tools/analysis/tns.py``'s ``result`` to ``record`` (in place): the
    TNS of each trajectory (``tns/<trajectory>``) and the per-block profiles of the mean NSI
    and, where measured, the mean step size."""
    for trajectory, values in result.get('trajectories', {}).items():
        if _finite(values.get('tns')):
            record['metrics'][f'tns/{trajectory}'] = float(values['tns'])
    blocks = result.get('blocks', {})
    record['profiles']['tns/nsi'] = _profile([(n, b.get('nsi_mean')) for n, b in blocks.items()],
                                             'block')
    steps = [(n, b['step_mean']) for n, b in blocks.items() if 'step_mean' in b]
    if steps:
        record['profiles']['tns/step'] = _profile(steps, 'block')


def collect_spectrum(result: Dict[str, Any], record: Record) -> None:
    """Add the numbers of ``tools/analysis/spectrum.py``'s ``result`` to ``record`` (in place):
    the per-state profiles of the high-frequency ratio, the token cosine similarity and the Δ
    log amplitude, their last states' values, and the mean change of the Δ log amplitude
    across each kind of step (:func:`dlogamp_steps`)."""
    states = result.get('states', {})
    hf = [(n, s.get('hf_ratio')) for n, s in states.items()]
    dla = [(n, s['dlogamp']) for n, s in states.items() if 'dlogamp' in s]
    # the map size of each state: the number of frequency bins of its profile
    sizes = {
        n: len(s['freqs']) if isinstance(s.get('freqs'), list) else None
        for n, s in states.items()
    }
    record['profiles']['spectrum/hf_ratio'] = _profile(hf, 'state')
    if hf and _finite(hf[-1][1]):
        record['metrics']['spectrum/hf_ratio/last'] = float(hf[-1][1])
    cos = [(n, s['token_cos']) for n, s in states.items() if 'token_cos' in s]
    if cos:
        record['profiles']['spectrum/token_cos'] = _profile(cos, 'state')
        if _finite(cos[-1][1]):
            record['metrics']['spectrum/token_cos/last'] = float(cos[-1][1])
    if dla:
        record['profiles']['spectrum/dlogamp'] = _profile(dla, 'state')
        if _finite(dla[-1][1]):
            record['metrics']['spectrum/dlogamp/last'] = float(dla[-1][1])
        for kind, value in dlogamp_steps([(n, v, sizes[n]) for n, v in dla]).items():
            record['metrics'][f'spectrum/dlogamp_step/{kind}'] = value


def collect_freq_noise(result: Dict[str, Any], record: Record) -> None:
    """Add the numbers of ``tools/analysis/freq_noise.py``'s ``result`` to ``record`` (in
    place): the clean accuracy, the mean accuracy drop over the noise bands and the drop per
    band."""
    bands = result.get('bands', [])
    record['metrics']['freq_noise/clean_accuracy'] = float(result['clean_accuracy'])
    drops = [b['drop'] for b in bands if _finite(b.get('drop'))]
    if drops:
        record['metrics']['freq_noise/mean_drop'] = math.fsum(drops) / len(drops)
    record['profiles']['freq_noise/drop'] = _profile([(float(b['freq']), b.get('drop'))
                                                      for b in bands], 'noise band centre (×π)')


def collect_hessian(result: Dict[str, Any], record: Record) -> None:
    """The Hessian spectrum's summaries (docs/methods.md §12): NEP, APE and its natural log,
    the largest and smallest top-k eigenvalue, and where measured the most negative eigenvalue
    and Hutchinson's trace, each over all the tool's batches."""
    spectrum, metrics = result.get('spectrum', {}), record['metrics']
    for key in ('nep', 'ape', 'max', 'min'):
        if _finite(spectrum.get(key)):
            metrics[f'hessian/{key}'] = float(spectrum[key])
    if _finite(spectrum.get('ape')) and spectrum['ape'] > 0:
        metrics['hessian/log_ape'] = math.log(spectrum['ape'])
    for key in ('most_negative', 'trace'):
        if _finite(spectrum.get(key, {}).get('mean')):
            metrics[f'hessian/{key}'] = float(spectrum[key]['mean'])


COLLECTORS = dict(tns=collect_tns, spectrum=collect_spectrum, freq_noise=collect_freq_noise,
                  hessian=collect_hessian)


def collect_run(work_dir: str, analysis: Iterable[str]) -> Record:
    """The record of the run in ``work_dir`` whose analysis tools ``analysis`` ran."""
    record = dict(metrics={}, curves={}, profiles={})
    with open(osp.join(work_dir, 'metrics.json')) as f:
        for key, value in json.load(f).items():
            if _finite(value):
                record['metrics'][f'test/{key}'] = float(value)
    collect_training(work_dir, record)
    for tool in analysis:
        with open(osp.join(work_dir, 'analysis', tool, ANALYSIS_TOOLS[tool][1])) as f:
            COLLECTORS[tool](json.load(f), record)
    return record
