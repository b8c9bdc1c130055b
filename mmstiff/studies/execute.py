"""One run of a study carried out: its stages that are not done, then its numbers collected.

The processes themselves are started by the caller's launcher (``tools/reproduce.py``); this
module keeps the order of the stages, their attempts in the state and the resume rules: a stage
already done is skipped, an unfinished train stage restarts with ``--resume`` when the work dir
holds a checkpoint (MMEngine resumes from the latest one).
"""
import datetime
import os
import os.path as osp
import shlex
import shutil
from typing import Any, Dict, Optional

from .collect import collect_run
from .plan import LOG_FILE, TEST, TRAIN, RunPlan, read_checkpoint
from .spec import ANALYSIS_TOOLS, repo_relative
from .state import DONE, FAILED, RUNNING, StudyState


def now() -> str:
    """The local time now, with its UTC offset, as ISO 8601 to the second."""
    return datetime.datetime.now().astimezone().isoformat(timespec='seconds')


def _stage(entry, name):
    return next((s for s in entry.get('stages', []) if s['name'] == name), None)


def _run_stage(launcher, state, plan, name, command, spec=None):
    entry = state.run(plan.key)
    stage = _stage(entry, name) or {}
    attempts = stage.get('attempts', [])
    attempts.append(
        dict(command=shlex.join(command), started=now(), returncode=None, wall_time_s=None))
    state.update_stage(plan.key, name, status=RUNNING, attempts=attempts, spec=spec)
    returncode, wall = launcher.call(command, plan.path(osp.join(plan.work_dir, LOG_FILE)))
    attempts[-1].update(returncode=returncode, wall_time_s=round(wall, 3), finished=now())
    state.update_stage(plan.key, name, status=DONE if returncode == 0 else FAILED,
                       attempts=attempts, spec=spec)
    return returncode == 0


def wall_time(entry: Dict[str, Any]) -> Optional[float]:
    """Seconds the run's finished attempts took (an interrupted attempt's time is unknown)."""
    return round(
        sum(a['wall_time_s'] for s in entry.get('stages', []) for a in s.get('attempts', [])
            if a.get('wall_time_s') is not None), 3)


def _fail(launcher, state, plan, message):
    if launcher.stopped():  # stopped, not failed: the run resumes next time
        return state.run(plan.key)
    state.update(plan.key, status=FAILED, error=message, finished=now(),
                 wall_time_s=wall_time(state.run(plan.key)))
    return state.run(plan.key)


def execute(plan: RunPlan, state: StudyState, environment: Dict[str, Any],
            launcher: Any) -> Dict[str, Any]:
    """Run the stages of ``plan`` that are not done, collect its numbers; return its entry.

    ``launcher`` starts the processes: ``launcher.call(command, log_path)`` returns
    ``(return code, wall seconds)``, ``launcher.stopped()`` says the study is being stopped
    (no stage starts; the run stays ``running`` and resumes next time).
    """
    work_dir = plan.path(plan.work_dir)
    os.makedirs(work_dir, exist_ok=True)
    entry = state.run(plan.key)
    # keep the stages still planned, in plan order (an analysis tool dropped from the study
    # file is forgotten)
    stages = [s for name in plan.stages for s in entry.get('stages', []) if s['name'] == name]
    state.update(plan.key, variant=plan.variant.label, seed=plan.seed, work_dir=plan.work_dir,
                 spec=plan.spec(), status=RUNNING, started=entry.get('started') or now(),
                 stages=stages, error=None, environment=environment)

    if launcher.stopped():
        return state.run(plan.key)
    if (_stage(state.run(plan.key), TRAIN) or {}).get('status') != DONE:
        resume = read_checkpoint(work_dir) is not None
        if not _run_stage(launcher, state, plan, TRAIN, plan.train_command(resume)):
            return _fail(launcher, state, plan,
                         f'the train stage failed; see {plan.work_dir}/{LOG_FILE}')
    checkpoint = read_checkpoint(work_dir)
    if checkpoint is None:
        return _fail(
            launcher, state, plan, f'training finished but {plan.work_dir}/'
            'last_checkpoint names no checkpoint; does the config save one '
            '(default_hooks.checkpoint)?')
    checkpoint = repo_relative(checkpoint)

    if launcher.stopped():
        return state.run(plan.key)
    if (_stage(state.run(plan.key), TEST) or {}).get('status') != DONE:
        if not _run_stage(launcher, state, plan, TEST, plan.test_command(checkpoint)):
            return _fail(launcher, state, plan,
                         f'the test stage failed; see {plan.work_dir}/{LOG_FILE}')
    for tool in plan.variant.analysis:
        stage = _stage(state.run(plan.key), tool) or {}
        spec = list(plan.analysis_args.get(tool, ()))
        if stage.get('status') == DONE and stage.get('spec') == spec:
            continue
        if launcher.stopped():
            return state.run(plan.key)
        out_dir = plan.path(plan.analysis_dir(tool))
        if osp.isdir(out_dir):
            shutil.rmtree(out_dir)  # no stale figures from other flags
        command = plan.analysis_command(tool, checkpoint)
        if not _run_stage(launcher, state, plan, tool, command, spec):
            return _fail(launcher, state, plan, f'{ANALYSIS_TOOLS[tool][0]} failed; see '
                         f'{plan.work_dir}/{LOG_FILE}')

    try:
        record = collect_run(work_dir, plan.variant.analysis)
    except (OSError, ValueError, KeyError) as err:
        return _fail(
            launcher, state, plan, f'could not read the results of {plan.work_dir}: '
            f'{type(err).__name__}: {err}')
    entry = state.run(plan.key)
    state.update(plan.key, status=DONE, finished=now(), checkpoint=checkpoint,
                 wall_time_s=wall_time(entry), record=record)
    return state.run(plan.key)
