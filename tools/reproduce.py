#!/usr/bin/env python
"""Run a reproduction study: every variant × seed trained, tested and analysed, then its page.

    python tools/reproduce.py STUDY [--jobs N] [--report-only] [--dry-run] [--rebuild]
                              [--configs NAME] [--set KEY=VALUE ...]
                              [--launcher none|pytorch|slurm] [--gpus N] [--partition P]
                              [--device cpu|cuda]
                              [--work-dir work_dirs/studies] [--results-dir docs/results]

``STUDY`` is a study file (``configs/studies/<name>.py`` or ``.yaml``; its fields are described
in docs/studies.md) or its name; the library half is :mod:`mmstiff.studies`, this file starts
the processes. Every run (variant, seed) goes through
``tools/train.py`` (seed: ``--cfg-options randomness.seed=S``), ``tools/test.py CONFIG CKPT
--out metrics.json`` and the study's analysis tools, each a separate process, in the run's own
work dir ``<work dir>/<study>/<variant>/seed<S>/``; ``--jobs N`` runs N runs at a time. A
progress line per finished run gives an ETA from the mean wall time of the finished runs.

The study is resumable: ``<work dir>/<study>/state.json`` records every run's status, stages,
commands, wall times and numbers. Running the same command again skips the finished runs and
resumes an interrupted one (``tools/train.py --resume``, from the last checkpoint of its work
dir); stop a study with Ctrl-C. After every run the numbers go to
``<results dir>/<study>/runs.json`` (the raw data to commit), the page
``<results dir>/<study>/README.md`` with its figures is written from it (mmstiff/studies/report.py),
and ``<results dir>/README.md`` indexes the studies. ``--report-only`` rewrites the page and
the index from the existing runs.json without running anything (same bytes for the same
runs.json and study file); do that after filling in the study's ``verdict``.

A study file with a bad field (unknown file, missing config, repeated label, a seed that is not
an int, an unknown analysis tool, ...) or an option that names no field of its run's config
(``train_cfg.max_epoch``) stops the runner before any work, naming the field. A truncated or
foreign state.json or runs.json of the study stops it too, naming the file; ``--rebuild``
rebuilds both from the run folders (keeping the unreadable file as
``<file>.corrupt-<time>``). Another study's unreadable files are skipped with a warning.
"""
import argparse
import concurrent.futures
import math
import os
import os.path as osp
import platform
import shlex
import subprocess
import sys
import threading
import time
import warnings
from importlib import metadata

from mmstiff.apis.cli import positive_int
from mmstiff.studies import (Launch, StudyError, check_launch, load_study, plan_runs, runs_json,
                             write_index, write_page, write_runs)
from mmstiff.studies.collect import collect_run
from mmstiff.studies.errors import StudyWarning
from mmstiff.studies.execute import execute, now
from mmstiff.studies.files import UnreadableFile, keep_copy, read_runs_file
from mmstiff.studies.format import fmt_duration
from mmstiff.studies.plan import (adopt_published_runs, adopt_reused_runs, check_against_state,
                                  check_run_configs, needs_work)
from mmstiff.studies.rebuild import entry_from_folder
from mmstiff.studies.spec import REPO, repo_relative
from mmstiff.studies.state import DONE, PENDING, STATE_FILE, RunnerLock, StudyState
from mmstiff.tool_main import run_tool

PACKAGES = ('torch', 'mmengine', 'mmcv', 'mmpretrain', 'mmdet')
_print_lock = threading.Lock()


def say(text):
    with _print_lock:
        print(text, flush=True)


def show_warning(message, category, filename, lineno, file=None, line=None):
    """The runner's warnings (another study's unreadable file, a corrupt file kept aside) as
    ``warning: ...`` lines, each once (the index is rewritten after every run); other
    warnings as Python prints them."""
    if issubclass(category, StudyWarning):
        if str(message) not in _warned:
            _warned.add(str(message))
            say(f'warning: {message}')
    else:
        _show_warning(message, category, filename, lineno, file, line)


_show_warning = warnings.showwarning
_warned = set()
DEFAULT_WORK_DIR = osp.join(REPO, 'work_dirs', 'studies')
DEFAULT_RESULTS_DIR = osp.join(REPO, 'docs', 'results')


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.strip().splitlines()[0])
    parser.add_argument('study', help='study file (configs/studies/<name>.py|.yaml) or its name')
    parser.add_argument('--jobs', type=positive_int, default=1,
                        help='runs at a time (default 1); each run is one process at a time')
    parser.add_argument('--report-only', action='store_true',
                        help='only rewrite the page and the index from the existing runs.json')
    parser.add_argument(
        '--recollect', action='store_true',
        help='read the numbers of the finished runs again from their work dirs '
        '(after an upgrade of mmstiff/studies/collect.py), then go on as usual')
    parser.add_argument(
        '--rebuild', action='store_true',
        help='rebuild state.json and runs.json from the run folders under --work-dir '
        '(each run\'s stages from its reproduce.log, its numbers from its work dir), '
        'keeping an unreadable file as <file>.corrupt-<time>; then write the page and '
        'the index; runs nothing')
    parser.add_argument(
        '--dry-run', action='store_true',
        help="check every run's config and options, print the runs and their commands, run "
        'nothing')
    parser.add_argument('--work-dir', default=DEFAULT_WORK_DIR,
                        help='root of the runs\' work dirs (default work_dirs/studies)')
    parser.add_argument('--results-dir', default=DEFAULT_RESULTS_DIR,
                        help='where runs.json, the page and the index go (default docs/results)')
    parser.add_argument(
        '--configs', metavar='NAME',
        help="apply the study file's configs[NAME] (another config, e.g. the "
        'paper-scale one); the study is then named <name>.<NAME>')
    parser.add_argument(
        '--set', action='append', default=[], metavar='KEY=VALUE',
        help='a config option added to every run (repeatable); use your own '
        '--work-dir and --results-dir for such a run')
    parser.add_argument(
        '--launcher', default='none', help='how train and test start: none '
        '(one process), pytorch (tools/dist_*.sh) or slurm (tools/slurm_*.sh)')
    parser.add_argument(
        '--gpus', type=positive_int, default=1,
        help='GPUs of each train / test stage (pytorch, slurm), or the GPUs the '
        'runs are spread over (--device cuda)')
    parser.add_argument('--partition', help='the Slurm partition (--launcher slurm)')
    parser.add_argument(
        '--device', help='cpu: hide the GPUs; cuda: run i on GPU i mod --gpus, '
        '--jobs runs at a time (several small runs packed onto each GPU)')
    return parser.parse_args(argv)


def environment():
    """The machine and the versions a run used, in one line."""
    versions = []
    for package in PACKAGES:
        try:
            versions.append(f'{package} {metadata.version(package)}')
        except metadata.PackageNotFoundError:
            pass
    try:
        import torch
        device = (f'GPU {torch.cuda.get_device_name(0)}'
                  if torch.cuda.is_available() else f'CPU, {os.cpu_count()} cores')
    except ImportError:
        device = 'CPU'
    return f'{device}; Python {platform.python_version()}, ' + ', '.join(versions)


def draw():
    from mmstiff.visualization.study_figures import draw_study_figures
    return draw_study_figures


def write_report(study, results_dir, strict=True):
    return write_page(results_dir, study, strict, draw()), write_index(results_dir)


def publish(study, plans, state, results_dir, args):
    """Write runs.json from the state, then the page and the index from runs.json."""
    write_runs(results_dir, runs_json(study, plans, state, args.configs, args.set))
    return write_report(study, results_dir, strict=False)


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
    argv = list(command)
    if 'python' in argv:  # the program (after `env NAME=VALUE ...`, if any) is this interpreter
        argv[argv.index('python')] = sys.executable
    env = dict(os.environ)
    # one compute thread per process: next to data-loading workers (and other runs with
    # --jobs) more threads oversubscribe the cores
    env.setdefault('OMP_NUM_THREADS', '1')
    with open(log_path, 'a') as log:
        log.write(f'\n[{now()}] $ {shlex.join(command)}\n')
        log.flush()
        start = time.monotonic()
        with _children_lock:
            proc = subprocess.Popen(argv, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, env=env)
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


class ProcessLauncher:
    """Starts the stages' processes for :func:`mmstiff.studies.execute.execute`."""

    @staticmethod
    def call(command, log_path):
        return call(command, log_path)

    @staticmethod
    def stopped():
        return STOP.is_set()


def _stage_times(entry):
    parts = []
    for stage in entry.get('stages', []):
        attempts = stage.get('attempts', [])
        times = [a['wall_time_s'] for a in attempts if a.get('wall_time_s') is not None]
        note = f' ({len(attempts)} attempts)' if len(attempts) > 1 else ''
        parts.append(f'{stage["name"]} {fmt_duration(sum(times)) if times else "–"}{note}')
    return ', '.join(parts)


class Progress:
    """``[done/total] run: status in T (stages); R left, ETA E`` lines, ETA from the mean wall
    time of every finished run (this invocation's and earlier ones')."""

    def __init__(self, plans, state, jobs):
        self.total = len(plans)
        self.state = state
        self.jobs = jobs
        self.left = sum(1 for p in plans if needs_work(p, state.run(p.key)))

    def finished(self, key, entry):
        self.left -= 1
        runs = self.state.runs().values()
        done = [r for r in runs if r.get('status') == DONE]
        times = [r['wall_time_s'] for r in done if r.get('wall_time_s')]
        eta = (
            fmt_duration(sum(times) / len(times) *
                         math.ceil(self.left / self.jobs)) if times and self.left else
            ('0 s' if not self.left else 'unknown'))
        status = entry.get('status')
        what = (f'done in {fmt_duration(entry.get("wall_time_s"))}'
                if status == DONE else f'FAILED ({entry.get("error")})')
        say(f'[{len(done)}/{self.total}] {key}: {what} ({_stage_times(entry)}); '
            f'{self.left} left, ETA {eta}')


def dry_run(plans):
    for plan in plans:
        say(f'{plan.key}  ({plan.work_dir})')
        commands = [plan.train_command(), plan.test_command('CKPT')]
        commands += [plan.analysis_command(tool, 'CKPT') for tool in plan.variant.analysis]
        for command in commands:
            say('  ' + shlex.join(command))


def recollect(plans, state):
    """Read every finished run's numbers again from its work dir (after the collector learnt
    new metrics); a run whose work dir is gone keeps its record."""
    for plan in plans:
        entry = state.run(plan.key)
        if entry.get('status') == DONE and osp.isdir(plan.path(plan.work_dir)):
            state.update(plan.key,
                         record=collect_run(plan.path(plan.work_dir), plan.variant.analysis))


def check_config(path, options):
    """``path`` loaded with the ``key=value`` ``options`` and checked as tools/train.py would
    check it (ValueError)."""
    from mmengine.config import DictAction

    from mmstiff.apis import load_config
    from mmstiff.apis.config_checks import check_options
    parsed = argparse.Namespace(options=None)
    DictAction(option_strings=[], dest='options')(None, parsed, list(options))
    check_options(load_config(path), parsed.options or {})


def rebuild_command(args):
    """The command that rebuilds this study's files from its run folders."""
    words = ['python', 'tools/reproduce.py', args.study, '--rebuild']
    words += ['--configs', args.configs] if args.configs else []
    for item in args.set:
        words += ['--set', item]
    for flag, value, default in (('--work-dir', args.work_dir, DEFAULT_WORK_DIR),
                                 ('--results-dir', args.results_dir, DEFAULT_RESULTS_DIR)):
        if osp.abspath(value) != osp.abspath(default):
            words += [flag, value]
    return shlex.join(words)


def rebuild(study, plans, args, results_dir, study_dir):
    """``--rebuild``: state.json from the run folders where it is unreadable or lacks a run,
    then runs.json, the page and the index from it; nothing runs."""
    path = osp.join(study_dir, STATE_FILE)
    try:
        state = StudyState(path, study.name)
    except UnreadableFile as err:
        say(f'{err}; kept it as {repo_relative(keep_copy(path))}')
        state = StudyState(path, study.name)
    rebuilt = []
    for plan in plans:
        if state.run(plan.key).get('status') not in (None, PENDING):
            continue
        entry, why = entry_from_folder(plan)
        if entry is None:
            if osp.isdir(plan.path(plan.work_dir)):
                say(f'{plan.key}: not rebuilt: {why}')
            continue
        state.update(plan.key, **entry)
        rebuilt.append(plan.key)
    published = osp.join(results_dir, study.name, 'runs.json')
    adopted = []
    try:
        if osp.isfile(published):
            adopted = adopt_published_runs(plans, state, read_runs_file(published))
    except UnreadableFile as err:
        say(f'{err}; it is written again from the state')
    statuses = [state.run(p.key).get('status', PENDING) for p in plans]
    say(f'study {study.name}: {len(rebuilt)} run(s) rebuilt from their folders, '
        f'{len(adopted)} taken from {repo_relative(published)}; '
        f'{statuses.count(DONE)} of {len(plans)} runs done; state: {repo_relative(state.path)}')
    return publish(study, plans, state, results_dir, args)


def run_study(study, plans, state, args, results_dir, work_root):
    published = osp.join(results_dir, study.name, 'runs.json')
    if osp.isfile(published):
        adopted = adopt_published_runs(plans, state, read_runs_file(published))
        if adopted:
            say(f'{len(adopted)} finished run(s) taken from {repo_relative(published)}')
    check_against_state(plans, state)
    for key in adopt_reused_runs(plans, state, work_root, study.reuse):
        say(f'{key}: reusing {state.run(key)["reused_from"]}')
    if args.recollect:
        recollect(plans, state)
    todo = [p for p in plans if needs_work(p, state.run(p.key))]
    say(f'study {study.name}: {len(plans)} runs, {len(plans) - len(todo)} finished, '
        f'{len(todo)} to run ({args.jobs} at a time); state: '
        f'{repo_relative(state.path)}')
    if not todo:
        return []
    machine = environment()
    progress = Progress(plans, state, args.jobs)
    failed = []

    started = {}  # key -> future, in plan order: a run's `after` runs were submitted first

    def work(plan):
        for key in (f'{label}/seed{plan.seed}' for label in plan.variant.after):
            if key in started:
                concurrent.futures.wait([started[key]])
            if state.run(key).get('status') != DONE:
                why = f'not started: it comes after {key}, which did not finish'
                say(f'{plan.key} {why}')
                state.update(plan.key, error=why)
                return state.run(plan.key)
        # a run of a reused study may have finished since this invocation started
        if adopt_reused_runs([plan], state, work_root, study.reuse):
            say(f'{plan.key}: reusing {state.run(plan.key)["reused_from"]}')
            if not needs_work(plan, state.run(plan.key)):
                return state.run(plan.key)
        entry = state.run(plan.key)
        resuming = entry.get('status') not in (None, PENDING)
        say(f'start {plan.key}{" (resuming)" if resuming else ""}: {plan.work_dir}')
        return execute(plan, state, machine, ProcessLauncher)

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs)
    try:
        futures = {}
        for plan in todo:
            started[plan.key] = pool.submit(work, plan)
            futures[started[plan.key]] = plan
        for future in concurrent.futures.as_completed(futures):
            plan = futures[future]
            entry = future.result()
            if entry.get('status') != DONE:
                failed.append(plan.key)
            progress.finished(plan.key, entry)
            try:
                publish(study, plans, state, results_dir, args)
            except Exception as err:  # the runs in flight go on; the last publish says it again
                say(f'warning: the page was not written after {plan.key} ({type(err).__name__}: '
                    f'{err}); the runs go on')
    except BaseException:
        stop_all()
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown()
    return failed


def main(argv=None):
    args = parse_args(argv)
    results_dir = osp.abspath(args.results_dir)
    warnings.showwarning = show_warning
    try:
        study = load_study(args.study, args.configs, args.set)
        launch = check_launch(Launch(args.launcher, args.gpus, args.partition, args.device))
        if args.report_only:
            page, index = write_report(study, results_dir)
            say(f'wrote {repo_relative(page)} and {repo_relative(index)}')
            return 0
        plans = plan_runs(study, osp.abspath(args.work_dir), launch)
        study_dir = osp.join(osp.abspath(args.work_dir), study.name)
        if args.rebuild:
            with RunnerLock(study_dir):
                page, index = rebuild(study, plans, args, results_dir, study_dir)
            say(f'wrote {repo_relative(osp.join(results_dir, study.name, "runs.json"))}, '
                f'{repo_relative(page)} and {repo_relative(index)}')
            return 0
        check_run_configs(study, check_config)
        if args.dry_run:
            dry_run(plans)
            return 0
        with RunnerLock(study_dir):
            state = StudyState(osp.join(study_dir, STATE_FILE), study.name)
            failed = run_study(study, plans, state, args, results_dir, osp.abspath(args.work_dir))
            page, index = publish(study, plans, state, results_dir, args)
    except UnreadableFile as err:
        restore = (f', or restore it (git checkout -- {repo_relative(err.path)})'
                   if osp.basename(err.path) == 'runs.json' else '')
        sys.exit(f'error: {err}. Nothing was run. Rebuild it from the run folders with: '
                 f'{rebuild_command(args)} (the unreadable file is kept as '
                 f'{osp.basename(err.path)}.corrupt-<time>){restore}')
    except (StudyError, RuntimeError) as err:
        sys.exit(f'error: {err}')
    except KeyboardInterrupt:
        sys.exit('interrupted; run the same command again to resume')
    say(f'wrote {repo_relative(osp.join(results_dir, study.name, "runs.json"))}, '
        f'{repo_relative(page)} and {repo_relative(index)}')
    if failed:
        say(f'{len(failed)} run(s) failed: {", ".join(failed)}; their logs are '
            f'<work dir>/reproduce.log; run the same command again to retry them')
        return 1
    return 0


if __name__ == '__main__':
    sys.exit(run_tool(main))
