"""A run's state entry rebuilt from its run folder, for a study whose state.json or runs.json
is lost or unreadable (``tools/reproduce.py STUDY --rebuild``, docs/studies.md).

The runner appends every stage's command and exit to ``<work dir>/reproduce.log``
(``[time] $ COMMAND`` ... ``[time] exit RC after W s``): the stages and their attempts are read
from there, the numbers from the work dir as for a finished run (:func:`.collect.collect_run`).
A folder whose train command ran other options than the study file's is not taken.
"""
import os.path as osp
import re
import shlex
from typing import Any, Dict, List, Optional, Tuple

from .collect import collect_run
from .plan import LOG_FILE, TEST, TRAIN, RunPlan, read_checkpoint
from .spec import ANALYSIS_TOOLS, repo_relative
from .state import DONE, FAILED, RUNNING

START = re.compile(r'^\[(?P<time>[^\]]+)\] \$ (?P<command>.+)$')
EXIT = re.compile(r'^\[(?P<time>[^\]]+)\] exit (?P<code>-?\d+) after (?P<wall>[0-9.]+) s$')
SCRIPTS = {
    TRAIN: ('tools/train.py', 'tools/dist_train.sh', 'tools/slurm_train.sh'),
    TEST: ('tools/test.py', 'tools/dist_test.sh', 'tools/slurm_test.sh'),
    **{
        tool: (script, )
        for tool, (script, _) in ANALYSIS_TOOLS.items()
    }
}


def stage_of(command: str) -> Optional[str]:
    """The stage (``train``, ``test``, an analysis tool) a logged command runs, or None."""
    words = shlex.split(command)
    return next((stage for stage, scripts in SCRIPTS.items() if set(words) & set(scripts)), None)


def read_attempts(log_text: str) -> Dict[str, List[Dict[str, Any]]]:
    """``{stage: [attempt, ...]}`` from the text of a ``reproduce.log``; an attempt without its
    exit line (the runner was stopped) has ``returncode`` None."""
    stages, last = {}, None
    for line in log_text.splitlines():
        start, end = START.match(line), EXIT.match(line)
        if start and stage_of(start['command']):
            last = dict(command=start['command'], started=start['time'], returncode=None,
                        wall_time_s=None)
            stages.setdefault(stage_of(start['command']), []).append(last)
        elif end and last is not None and last['returncode'] is None:
            last.update(
                returncode=int(end['code']), wall_time_s=float(end['wall']), finished=end['time'])
    return stages


def _options(command):
    words = shlex.split(command)
    return words[words.index('--cfg-options') + 1:] if '--cfg-options' in words else []


def entry_from_folder(plan: RunPlan) -> Tuple[Optional[Dict[str, Any]], Optional[str]]:
    """``(entry, None)``: the state entry of run ``plan`` rebuilt from its work dir, or
    ``(None, why)`` when the folder holds no run of this plan (no log, other options)."""
    work_dir = plan.path(plan.work_dir)
    log = osp.join(work_dir, LOG_FILE)
    if not osp.isfile(log):
        return None, f'{plan.work_dir} has no {LOG_FILE}'
    with open(log, errors='replace') as f:
        attempts = read_attempts(f.read())
    train = attempts.get(TRAIN)
    if not train:
        return None, f'{plan.work_dir}/{LOG_FILE} records no train command'
    if _options(train[0]['command']) != plan.cfg_options:
        return None, (f'{plan.work_dir} was trained with --cfg-options '
                      f'{_options(train[0]["command"])}, the study file gives {plan.cfg_options}')
    stages = []
    for name in plan.stages:
        if name not in attempts:
            break
        code = attempts[name][-1]['returncode']
        status = RUNNING if code is None else DONE if code == 0 else FAILED
        spec = list(plan.analysis_args[name]) if name in plan.analysis_args else None
        stages.append(dict(name=name, status=status, attempts=attempts[name], spec=spec))
    wall = round(sum(a['wall_time_s'] or 0 for s in stages for a in s['attempts']), 3)
    entry = dict(variant=plan.variant.label, seed=plan.seed, work_dir=plan.work_dir,
                 spec=plan.spec(), stages=stages, started=train[0]['started'], error=None,
                 environment=None, wall_time_s=wall, status=RUNNING)
    failed = next((s['name'] for s in stages if s['status'] == FAILED), None)
    checkpoint = read_checkpoint(work_dir)
    if failed:
        entry.update(status=FAILED, error=f'the {failed} stage failed; see '
                     f'{plan.work_dir}/{LOG_FILE}')
    elif len(stages) == len(plan.stages) and all(s['status'] == DONE for s in stages) \
            and checkpoint is not None:
        finished = stages[-1]['attempts'][-1].get('finished')
        try:
            entry.update(status=DONE, record=collect_run(work_dir, plan.variant.analysis),
                         checkpoint=repo_relative(checkpoint), finished=finished)
        except (OSError, ValueError, KeyError) as err:
            entry.update(
                status=FAILED, finished=finished, error=(
                    f'could not read the results of {plan.work_dir}: {type(err).__name__}: {err}'))
    return entry, None
