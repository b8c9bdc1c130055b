"""One run of a study: a variant trained with one seed, tested and analysed, in its own work dir.

A run is a sequence of stages, each a separate process started from the repository root, as a
user would type it (``python`` is the interpreter running the runner):

    train   python tools/train.py CONFIG --work-dir DIR [--resume]
                --cfg-options OPTIONS randomness.seed=S
    test    python tools/test.py CONFIG CKPT --work-dir DIR/test --out DIR/metrics.json
                --cfg-options OPTIONS randomness.seed=S
    <tool>  python tools/analysis/<tool>.py CONFIG CKPT --out-dir DIR/analysis/<tool> [FLAGS]
                --cfg-options OPTIONS randomness.seed=S

with ``OPTIONS`` the study's and the variant's ``cfg_options``, ``FLAGS`` the tool's
``analysis_args``, ``DIR = <work root>/<study>/<variant>/seed<S>`` and ``CKPT`` the final checkpoint named by
``DIR/last_checkpoint``. The output of every process is appended to ``DIR/reproduce.log``. A
stage that is already done is skipped; an unfinished train stage restarts with ``--resume``
when the work dir holds a checkpoint (MMEngine resumes from the latest one).
"""
import datetime
import json
import os
import os.path as osp
import shlex
import shutil
import subprocess
import sys
import threading
import time
from typing import NamedTuple

from study_collect import collect_run
from study_spec import ANALYSIS_TOOLS, REPO, SEED_KEY, StudyError, repo_relative
from study_state import DONE, FAILED, PENDING, RUNNING, STATE_FILE

LOG_FILE = 'reproduce.log'
TRAIN, TEST = 'train', 'test'


class RunPlan(NamedTuple):
    """What one run does.

    Attributes:
        key (str): ``<variant>/seed<S>``, its name in the state and in runs.json.
        variant (Variant): the variant of the study file.
        seed (int): the seed.
        work_dir (str): its work dir, repository-relative when inside the repository.
        analysis_args (dict[str, tuple[str]]): extra flags of each analysis tool.
    """
    key: str
    variant: object
    seed: int
    work_dir: str
    analysis_args: dict

    @property
    def stages(self):
        return [TRAIN, TEST] + list(self.variant.analysis)

    @property
    def cfg_options(self):
        return list(self.variant.cfg_options) + [f'{SEED_KEY}={self.seed}']

    def spec(self):
        """What the run's results depend on; a finished run whose spec changed is refused."""
        return dict(config=self.variant.config, cfg_options=self.cfg_options, seed=self.seed)

    def train_command(self, resume=False):
        return (['python', 'tools/train.py', self.variant.config, '--work-dir', self.work_dir]
                + (['--resume'] if resume else []) + ['--cfg-options'] + self.cfg_options)

    def test_command(self, checkpoint):
        return ['python', 'tools/test.py', self.variant.config, checkpoint, '--work-dir',
                osp.join(self.work_dir, 'test'), '--out', self.metrics_file,
                '--cfg-options'] + self.cfg_options

    def analysis_command(self, tool, checkpoint):
        return (['python', ANALYSIS_TOOLS[tool][0], self.variant.config, checkpoint,
                 '--out-dir', self.analysis_dir(tool)] + list(self.analysis_args.get(tool, ()))
                + ['--cfg-options'] + self.cfg_options)

    @property
    def metrics_file(self):
        return osp.join(self.work_dir, 'metrics.json')

    def analysis_dir(self, tool):
        return osp.join(self.work_dir, 'analysis', tool)

    def path(self, relative):
        """A path of the plan (repository-relative or absolute) as this process can open it."""
        return relative if osp.isabs(relative) else osp.join(REPO, relative)


def plan_runs(study, work_root):
    """Every (variant, seed) of ``study``, variants in file order, seeds in listed order."""
    root = repo_relative(work_root)
    return [RunPlan(f'{v.label}/seed{seed}', v, seed, osp.join(root, study.name, v.label,
                                                                 f'seed{seed}'),
                    {tool: study.analysis_args.get(tool, ()) for tool in v.analysis})
            for v in study.variants for seed in v.seeds]


def check_against_state(plans, state):
    """Refuse a study file whose runs changed since they were trained, before any work starts.

    A run whose work dir is gone is forgotten (so deleting a work dir reruns it); an analysis
    tool added to a finished run is run on resume.
    """
    changed = []
    for plan in plans:
        entry = state.run(plan.key)
        if not entry:
            continue
        if not osp.isdir(plan.path(plan.work_dir)):
            state.update(plan.key, status=PENDING, stages=[], record=None, spec=plan.spec())
            continue
        old = entry.get('spec')
        if old is not None and old != plan.spec():
            diff = sorted(k for k in plan.spec() if old.get(k) != plan.spec()[k])
            changed.append(f'{plan.key}: ' + ', '.join(
                f'{k} was {old.get(k)!r}, now {plan.spec()[k]!r}' for k in diff))
    if changed:
        raise StudyError('the study file changed runs that were already started:\n  '
                         + '\n  '.join(changed) + '\nrestore the study file, or delete those '
                         'runs\' work dirs to run them again')


def needs_work(plan, entry):
    """Whether run ``plan`` (state ``entry``) has a stage to run or its record to collect: not
    finished, or its analysis tools (or their flags) changed since it was."""
    if entry.get('status') != DONE:
        return True
    stages = entry.get('stages', [])
    if [s['name'] for s in stages] != plan.stages:
        return True
    return any(s['name'] in plan.analysis_args and
               s.get('spec') != list(plan.analysis_args[s['name']]) for s in stages)


def now():
    return datetime.datetime.now().astimezone().isoformat(timespec='seconds')


def read_checkpoint(work_dir):
    """The checkpoint named by ``work_dir/last_checkpoint`` (as written by MMEngine), or None."""
    marker = osp.join(work_dir, 'last_checkpoint')
    if not osp.isfile(marker):
        return None
    with open(marker) as f:
        path = f.read().strip()
    if path and not osp.isabs(path):
        path = osp.join(REPO, path)  # the tools run from the repository root
    return path if path and osp.isfile(path) else None


#: set when the runner stops (Ctrl-C): no new stage starts, running processes are terminated
STOP = threading.Event()
_children = set()
_children_lock = threading.Lock()


def stop_all():
    """Stop the study: no stage starts any more, the running ones are terminated; the runs stay
    ``running`` in the state, and resume in the next invocation."""
    with _children_lock:
        STOP.set()
        for proc in _children:
            if proc.poll() is None:
                proc.terminate()


def call(command, log_path):
    """Run ``command`` from the repository root, output appended to ``log_path``; return
    ``(return code, wall time in seconds)``."""
    argv = [sys.executable if command[0] == 'python' else command[0]] + list(command[1:])
    env = dict(os.environ)
    # one compute thread per process: next to data-loading workers (and other runs with
    # --jobs) more threads oversubscribe the cores
    env.setdefault('OMP_NUM_THREADS', '1')
    with open(log_path, 'a') as log:
        log.write(f'\n[{now()}] $ {shlex.join(command)}\n')
        log.flush()
        start = time.monotonic()
        with _children_lock:
            proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                    env=env)
            _children.add(proc)
            if STOP.is_set():
                proc.terminate()
        try:
            returncode = proc.wait()
        finally:
            with _children_lock:
                _children.discard(proc)
        wall = time.monotonic() - start
        log.write(f'[{now()}] exit {returncode} after {wall:.1f} s\n')
    return returncode, wall


def _stage(entry, name):
    return next((s for s in entry.get('stages', []) if s['name'] == name), None)


def _run_stage(state, plan, name, command, spec=None):
    entry = state.run(plan.key)
    stage = _stage(entry, name) or {}
    attempts = stage.get('attempts', [])
    attempts.append(dict(command=shlex.join(command), started=now(), returncode=None,
                         wall_time_s=None))
    state.update_stage(plan.key, name, status=RUNNING, attempts=attempts, spec=spec)
    returncode, wall = call(command, plan.path(osp.join(plan.work_dir, LOG_FILE)))
    attempts[-1].update(returncode=returncode, wall_time_s=round(wall, 3), finished=now())
    state.update_stage(plan.key, name, status=DONE if returncode == 0 else FAILED,
                       attempts=attempts, spec=spec)
    return returncode == 0


def wall_time(entry):
    """Seconds the run's finished attempts took (an interrupted attempt's time is unknown)."""
    return round(sum(a['wall_time_s'] for s in entry.get('stages', [])
                     for a in s.get('attempts', []) if a.get('wall_time_s') is not None), 3)


def _fail(state, plan, message):
    if STOP.is_set():  # stopped, not failed: the run resumes next time
        return state.run(plan.key)
    state.update(plan.key, status=FAILED, error=message, finished=now(),
                 wall_time_s=wall_time(state.run(plan.key)))
    return state.run(plan.key)


def execute(plan, state, environment):
    """Run the stages of ``plan`` that are not done, collect its numbers; return its entry."""
    work_dir = plan.path(plan.work_dir)
    os.makedirs(work_dir, exist_ok=True)
    entry = state.run(plan.key)
    # keep the stages still planned, in plan order (an analysis tool dropped from the study
    # file is forgotten)
    stages = [s for name in plan.stages for s in entry.get('stages', []) if s['name'] == name]
    state.update(plan.key, variant=plan.variant.label, seed=plan.seed, work_dir=plan.work_dir,
                 spec=plan.spec(), status=RUNNING, started=entry.get('started') or now(),
                 stages=stages, error=None, environment=environment)

    if STOP.is_set():
        return state.run(plan.key)
    if (_stage(state.run(plan.key), TRAIN) or {}).get('status') != DONE:
        resume = read_checkpoint(work_dir) is not None
        if not _run_stage(state, plan, TRAIN, plan.train_command(resume)):
            return _fail(state, plan, f'tools/train.py failed; see {plan.work_dir}/{LOG_FILE}')
    checkpoint = read_checkpoint(work_dir)
    if checkpoint is None:
        return _fail(state, plan, f'training finished but {plan.work_dir}/last_checkpoint names '
                     'no checkpoint; does the config save one (default_hooks.checkpoint)?')
    checkpoint = repo_relative(checkpoint)

    if STOP.is_set():
        return state.run(plan.key)
    if (_stage(state.run(plan.key), TEST) or {}).get('status') != DONE:
        if not _run_stage(state, plan, TEST, plan.test_command(checkpoint)):
            return _fail(state, plan, f'tools/test.py failed; see {plan.work_dir}/{LOG_FILE}')
    for tool in plan.variant.analysis:
        stage = _stage(state.run(plan.key), tool) or {}
        spec = list(plan.analysis_args.get(tool, ()))
        if stage.get('status') == DONE and stage.get('spec') == spec:
            continue
        if STOP.is_set():
            return state.run(plan.key)
        out_dir = plan.path(plan.analysis_dir(tool))
        if osp.isdir(out_dir):
            shutil.rmtree(out_dir)  # no stale figures from other flags
        if not _run_stage(state, plan, tool, plan.analysis_command(tool, checkpoint), spec):
            return _fail(state, plan, f'{ANALYSIS_TOOLS[tool][0]} failed; see '
                         f'{plan.work_dir}/{LOG_FILE}')

    try:
        record = collect_run(work_dir, plan.variant.analysis)
    except (OSError, ValueError, KeyError) as err:
        return _fail(state, plan, f'could not read the results of {plan.work_dir}: '
                     f'{type(err).__name__}: {err}')
    entry = state.run(plan.key)
    state.update(plan.key, status=DONE, finished=now(), checkpoint=checkpoint,
                 wall_time_s=wall_time(entry), record=record)
    return state.run(plan.key)


def adopt_reused_runs(plans, state, work_root, reuse):
    """Give each run of ``plans`` not started yet a copy of an identical finished run of the
    studies named in ``reuse`` (same spec: config, cfg_options, seed): its work dir is copied
    into the run's and its state entry taken over with ``reused_from`` set. Returns the keys
    adopted. An analysis tool this study adds (or runs with other flags) then runs on the copy.
    """
    finished = []  # (study, key, entry) of every finished run of the reused studies
    for other in reuse:
        path = osp.join(work_root, other, STATE_FILE)
        if not osp.isfile(path):
            continue
        with open(path) as f:
            runs = json.load(f).get('runs', {})
        finished += [(other, key, entry) for key, entry in runs.items()
                     if entry.get('status') == DONE and entry.get('spec')]
    adopted = []
    for plan in plans:
        if state.run(plan.key).get('status') not in (None, PENDING):
            continue
        match = next(((other, key, entry) for other, key, entry in finished
                      if entry['spec'] == plan.spec() and
                      osp.isdir(plan.path(entry.get('work_dir', '')))), None)
        if match is None:
            continue
        other, key, entry = match
        target = plan.path(plan.work_dir)
        if osp.isdir(target):
            shutil.rmtree(target)
        shutil.copytree(plan.path(entry['work_dir']), target, symlinks=True)
        entry = dict(entry, work_dir=plan.work_dir, variant=plan.variant.label,
                     reused_from=f'{other}/{key}')
        # the analysis tools this study plans, in its order; the others are dropped
        entry['stages'] = [s for s in entry.get('stages', [])
                           if s['name'] in (TRAIN, TEST) or s['name'] in plan.variant.analysis]
        state.update(plan.key, **entry)
        adopted.append(plan.key)
    return adopted
