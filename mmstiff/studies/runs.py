"""``runs.json``: the raw data of a study page, built from the study file and its state."""
from typing import Any, Dict, Optional, Sequence

from .plan import RunPlan
from .spec import Study, repo_relative
from .state import PENDING, StudyState

FORMAT = 1


def runs_json(study: Study, plans: Sequence[RunPlan], state: StudyState,
              config_set: Optional[str] = None, overrides: Sequence[str] = ()) -> Dict[str, Any]:
    """The study as run and every run's entry (status, stages, wall times, numbers)."""
    entries = state.runs()
    runs = []
    for plan in plans:
        entry = entries.get(plan.key, {})
        runs.append(
            dict(
                key=plan.key, variant=plan.variant.label, seed=plan.seed, work_dir=plan.work_dir,
                status=entry.get('status', PENDING), error=entry.get('error'),
                started=entry.get('started'), finished=entry.get('finished'),
                wall_time_s=entry.get('wall_time_s'), checkpoint=entry.get('checkpoint'),
                environment=entry.get('environment'), reused_from=entry.get('reused_from'), stages=[
                    dict(name=s['name'], status=s.get('status'), attempts=s.get('attempts', []))
                    for s in entry.get('stages', [])
                ], record=entry.get('record') or dict(metrics={}, curves={}, profiles={})))
    common = len(study.cfg_options)
    variants = [
        dict(label=v.label, config=v.config, cfg_options=list(v.cfg_options[common:]),
             is_baseline=v.is_baseline, compare_to=list(v.compare_to), seeds=list(v.seeds),
             analysis=list(v.analysis)) for v in study.variants
    ]
    info = dict(name=study.name, file=repo_relative(study.file), claim=study.claim._asdict(),
                cfg_options=list(study.cfg_options), variants=variants, analysis_args={
                    k: list(v)
                    for k, v in study.analysis_args.items()
                })
    if config_set is not None:
        info['config_set'] = config_set
    if overrides:
        info['overrides'] = list(overrides)
    return dict(format=FORMAT, study=info, runs=runs)
