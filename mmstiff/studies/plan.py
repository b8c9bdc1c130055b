"""The runs of a study and the commands of their stages, as data (nothing is started here).

A run is a variant trained with one seed, tested and analysed in its own work dir
``DIR = <work root>/<study>/<variant>/seed<S>``; its stages are processes started from the
repository root, as a user would type them (``python`` is the runner's interpreter):

    train   python tools/train.py CONFIG --work-dir DIR [--resume] --cfg-options OPTIONS
    test    python tools/test.py CONFIG CKPT --work-dir DIR/test --out DIR/metrics.json
                --cfg-options OPTIONS
    <tool>  python tools/analysis/<tool>.py CONFIG CKPT --out-dir DIR/analysis/<tool> [FLAGS]
                --cfg-options OPTIONS

``OPTIONS``: the study's and the variant's ``cfg_options`` and ``randomness.seed=S``. A
:class:`Launch` changes how train and test start (``tools/dist_*.sh`` for ``pytorch``,
``tools/slurm_*.sh`` for ``slurm``) and which GPU a run sees (docs/studies.md).
"""
import os.path as osp
import shutil
import warnings
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence

from .errors import StudyError, StudyWarning
from .files import UnreadableFile, read_state_file
from .spec import ANALYSIS_TOOLS, REPO, SEED_KEY, SEED_PLACEHOLDER, Study, repo_relative
from .state import DONE, PENDING, STATE_FILE, StudyState

LOG_FILE = 'reproduce.log'
TRAIN, TEST = 'train', 'test'
LAUNCHERS = ('none', 'pytorch', 'slurm')
DEVICES = ('cpu', 'cuda')


class Launch(NamedTuple):
    """How the stages start.

    Attributes:
        launcher (str): ``'none'`` (one process), ``'pytorch'`` (torchrun through
            ``tools/dist_train.sh`` / ``dist_test.sh``) or ``'slurm'`` (``tools/slurm_*.sh``).
        gpus (int): processes (GPUs) of a ``pytorch`` or ``slurm`` train and test stage; with
            ``device='cuda'`` and ``launcher='none'``, the GPUs the runs are spread over.
        partition (str | None): the Slurm partition (``slurm`` only).
        device (str | None): ``'cpu'`` hides every GPU (``CUDA_VISIBLE_DEVICES=``);
            ``'cuda'`` gives run ``i`` (in plan order) GPU ``i mod gpus``, so that ``--jobs N``
            packs N runs onto each GPU; None leaves the environment alone.
    """
    launcher: str = 'none'
    gpus: int = 1
    partition: Optional[str] = None
    device: Optional[str] = None


def check_launch(launch: Launch) -> Launch:
    """Raise :class:`StudyError` for a launch the runner cannot start, before any work."""
    if launch.launcher not in LAUNCHERS:
        raise StudyError(f'--launcher {launch.launcher!r}; expected one of {list(LAUNCHERS)}')
    if isinstance(launch.gpus, bool) or not isinstance(launch.gpus, int) or launch.gpus < 1:
        raise StudyError(f'--gpus {launch.gpus!r}; expected a positive integer')
    if launch.device is not None and launch.device not in DEVICES:
        raise StudyError(f'--device {launch.device!r}; expected one of {list(DEVICES)}')
    if launch.launcher == 'slurm' and not launch.partition:
        raise StudyError('--launcher slurm needs --partition PARTITION')
    if launch.launcher != 'slurm' and launch.partition:
        raise StudyError(f'--partition {launch.partition!r} is for --launcher slurm only')
    if launch.launcher != 'none' and launch.device == 'cpu':
        raise StudyError(f'--launcher {launch.launcher} starts GPU jobs; --device cpu '
                         'contradicts it')
    return launch


class RunPlan(NamedTuple):
    """What one run does.

    Attributes:
        key (str): ``<variant>/seed<S>``, its name in the state and in runs.json.
        variant (Variant): the variant of the study file.
        seed (int): the seed.
        work_dir (str): its work dir, repository-relative when inside the repository.
        analysis_args (dict[str, tuple[str]]): extra flags of each analysis tool.
        launch (Launch): how its stages start.
        slot (int): its position in the plan (picks its GPU with ``device='cuda'``).
        job (str): its Slurm job name, ``<study>/<key>``.
    """
    key: str
    variant: object
    seed: int
    work_dir: str
    analysis_args: dict
    launch: Launch = Launch()
    slot: int = 0
    job: str = ''

    @property
    def stages(self) -> List[str]:
        """The run's stages in order: train, test, then the variant's analysis tools."""
        return [TRAIN, TEST] + list(self.variant.analysis)

    @property
    def cfg_options(self) -> List[str]:
        """The run's ``--cfg-options``: the study's and the variant's, ``{seed}`` replaced by the
        seed, then ``randomness.seed=<seed>``."""
        return self.variant.options_for(self.seed) + [f'{SEED_KEY}={self.seed}']

    def spec(self) -> Dict[str, Any]:
        """What the run's results depend on; a finished run whose spec changed is refused."""
        return dict(config=self.variant.config, cfg_options=self.cfg_options, seed=self.seed)

    def _env(self):
        device = self.launch.device
        if device == 'cpu':
            return ['env', 'CUDA_VISIBLE_DEVICES=']
        if device == 'cuda' and self.launch.launcher == 'none':
            return ['env', f'CUDA_VISIBLE_DEVICES={self.slot % self.launch.gpus}']
        return []

    def _start(self, tool, positional):
        """The head of a train / test command: the launcher, the tool, its positionals."""
        launch = self.launch
        if launch.launcher == 'pytorch':
            script = f'tools/dist_{tool}.sh'
            return [script, *positional[:1 + (tool == 'test')], str(launch.gpus)]
        if launch.launcher == 'slurm':
            return [
                'env', f'GPUS={launch.gpus}', f'tools/slurm_{tool}.sh', launch.partition,
                f'{self.job}/{tool}', *positional
            ]
        return self._env() + ['python', f'tools/{tool}.py', *positional]

    def train_command(self, resume: bool = False) -> List[str]:
        """The train stage's command (module docstring), with ``--resume`` where ``resume``; through
        the launch's launcher."""
        launch = self.launch
        head = self._start('train', [self.variant.config] +
                           ([self.work_dir] if launch.launcher == 'slurm' else []))
        work_dir = [] if launch.launcher == 'slurm' else ['--work-dir', self.work_dir]
        return (head + work_dir + (['--resume'] if resume else []) + ['--cfg-options'] +
                self.cfg_options)

    def test_command(self, checkpoint: str) -> List[str]:
        """The test stage's command on ``checkpoint``: its work dir ``DIR/test``, its metrics
        written to :attr:`metrics_file`; through the launch's launcher."""
        return self._start('test', [self.variant.config, checkpoint]) + [
            '--work-dir',
            osp.join(self.work_dir, 'test'), '--out', self.metrics_file, '--cfg-options'
        ] + self.cfg_options

    def analysis_command(self, tool: str, checkpoint: str) -> List[str]:
        """The command of the analysis tool ``tool`` on ``checkpoint``, writing into
        :meth:`analysis_dir`, with the study's flags for the tool; one process, started without
        the launcher."""
        return (self._env() + [
            'python', ANALYSIS_TOOLS[tool][0], self.variant.config, checkpoint, '--out-dir',
            self.analysis_dir(tool)
        ] + list(self.analysis_args.get(tool, ())) + ['--cfg-options'] + self.cfg_options)

    @property
    def metrics_file(self) -> str:
        """``DIR/metrics.json``: where the test stage writes the run's test metrics."""
        return osp.join(self.work_dir, 'metrics.json')

    def analysis_dir(self, tool: str) -> str:
        """``DIR/analysis/<tool>``: the output folder of ``tool``."""
        return osp.join(self.work_dir, 'analysis', tool)

    def path(self, relative: str) -> str:
        """A path of the plan (repository-relative or absolute) as this process can open it."""
        return relative if osp.isabs(relative) else osp.join(REPO, relative)


def plan_runs(study: Study, work_root: str, launch: Launch = Launch()) -> List[RunPlan]:
    """Every (variant, seed) of ``study``, variants in file order, seeds in listed order."""
    root = repo_relative(work_root)
    plans = []
    for v in study.variants:
        for seed in v.seeds:
            key = f'{v.label}/seed{seed}'
            plans.append(
                RunPlan(key, v, seed, osp.join(root, study.name, v.label, f'seed{seed}'),
                        {tool: study.analysis_args.get(tool, ())
                         for tool in v.analysis}, launch, len(plans), f'{study.name}/{key}'))
    return plans


def check_against_state(plans: Sequence[RunPlan], state: StudyState) -> None:
    """Refuse a study file whose runs changed since they were trained, before any work starts.

    A run whose work dir is gone is forgotten (so deleting a work dir reruns it); an analysis
    tool added to a finished run is run on resume.
    """
    changed = []
    for plan in plans:
        entry = state.run(plan.key)
        if not entry:
            continue
        if not osp.isdir(plan.path(plan.work_dir)) and not entry.get('from_results'):
            state.update(plan.key, status=PENDING, stages=[], record=None, spec=plan.spec())
            continue
        old = entry.get('spec')
        if old is not None and old != plan.spec():
            diff = sorted(k for k in plan.spec() if old.get(k) != plan.spec()[k])
            changed.append(f'{plan.key}: ' +
                           ', '.join(f'{k} was {old.get(k)!r}, now {plan.spec()[k]!r}'
                                     for k in diff))
    if changed:
        raise StudyError('the study file changed runs that were already started:\n  ' +
                         '\n  '.join(changed) + '\nrestore the study file, or delete those '
                         'runs\' work dirs to run them again')


def check_run_configs(study: Study, check: Callable[[str, Sequence[str]], Any]) -> None:
    """Check every variant's config with its options before any run starts (a run differs
    from its variant only by the seed, which the runner sets): ``check(config path, options)``
    raises ``ValueError`` (the tool passes :func:`mmstiff.apis.config_checks.check_options`
    on the loaded config); it becomes a :class:`StudyError` naming the study file and the run.
    """
    for variant in study.variants:
        config = variant.config if osp.isabs(variant.config) else osp.join(REPO, variant.config)
        try:
            check(config, variant.options_for(variant.seeds[0]))
        except ValueError as err:
            raise StudyError(f'study file {repo_relative(study.file)}, run {variant.label!r} '
                             f'(config {variant.config}): {err}') from None


def _spec_in_runs_json(runs_data, entry):
    """The spec (config, cfg_options, seed) a runs.json entry was run with."""
    info = runs_data['study']
    variant = next((v for v in info['variants'] if v['label'] == entry['variant']), None)
    if variant is None:
        return None
    options = list(info['cfg_options']) + list(variant['cfg_options'])
    return dict(
        config=variant['config'], seed=entry['seed'],
        cfg_options=[o.replace(SEED_PLACEHOLDER, str(entry['seed']))
                     for o in options] + [f'{SEED_KEY}={entry["seed"]}'])


def adopt_published_runs(plans: Sequence[RunPlan], state: StudyState,
                         runs_data: Optional[Dict[str, Any]]) -> List[str]:
    """Give each run of ``plans`` not started yet the finished entry of the same run in a
    published runs.json (same key and spec), so that a study whose work dirs are gone (a
    fresh checkout) runs only its new seeds. Such an entry is marked ``from_results``: it has
    no work dir, and an analysis tool added later cannot run on it. Returns the keys adopted."""
    published = {r['key']: r for r in (runs_data or {}).get('runs', []) if r.get('status') == DONE}
    adopted = []
    for plan in plans:
        entry = published.get(plan.key)
        if (entry is None or state.run(plan.key).get('status') not in (None, PENDING)
                or _spec_in_runs_json(runs_data, entry) != plan.spec()
                or [s['name'] for s in entry['stages']] != plan.stages):
            continue
        stages = [
            dict(stage, spec=list(plan.analysis_args[stage['name']]))
            if stage['name'] in plan.analysis_args else dict(stage) for stage in entry['stages']
        ]
        fields = {k: v for k, v in entry.items() if k != 'key'}
        state.update(plan.key, **dict(fields, stages=stages, spec=plan.spec(), from_results=True))
        adopted.append(plan.key)
    return adopted


def needs_work(plan: RunPlan, entry: Dict[str, Any]) -> bool:
    """Whether run ``plan`` (state ``entry``) has a stage to run or its record to collect: not
    finished, or its analysis tools (or their flags) changed since it was."""
    if entry.get('status') != DONE:
        return True
    stages = entry.get('stages', [])
    if [s['name'] for s in stages] != plan.stages:
        return True
    return any(
        s['name'] in plan.analysis_args and s.get('spec') != list(plan.analysis_args[s['name']])
        for s in stages)


def read_checkpoint(work_dir: str) -> Optional[str]:
    """The checkpoint named by ``work_dir/last_checkpoint`` (as written by MMEngine), or None."""
    marker = osp.join(work_dir, 'last_checkpoint')
    if not osp.isfile(marker):
        return None
    with open(marker) as f:
        path = f.read().strip()
    if path and not osp.isabs(path):
        path = osp.join(REPO, path)  # the tools run from the repository root
    return path if path and osp.isfile(path) else None


def adopt_reused_runs(plans: Sequence[RunPlan], state: StudyState, work_root: str,
                      reuse: Sequence[str]) -> List[str]:
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
        try:
            runs = read_state_file(path)['runs']
        except UnreadableFile as err:
            warnings.warn(
                f'{err}; no run of study {other!r} is reused (this study trains them itself); '
                f'restore that file, or rebuild it with tools/reproduce.py STUDY --rebuild '
                f'(STUDY: the study file of {other!r})', StudyWarning)
            continue
        finished += [(other, key, entry) for key, entry in runs.items()
                     if entry.get('status') == DONE and entry.get('spec')]
    adopted = []
    for plan in plans:
        if state.run(plan.key).get('status') not in (None, PENDING):
            continue
        match = next(
            ((other, key, entry) for other, key, entry in finished
             if entry['spec'] == plan.spec() and osp.isdir(plan.path(entry.get('work_dir', '')))),
            None)
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
        entry['stages'] = [
            s for s in entry.get('stages', [])
            if s['name'] in (TRAIN, TEST) or s['name'] in plan.variant.analysis
        ]
        state.update(plan.key, **entry)
        adopted.append(plan.key)
    return adopted
