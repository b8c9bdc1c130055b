"""What ``tools/train.py`` and ``tools/test.py`` do to a config before the Runner sees it.

The tools hand their parsed arguments here; a value that cannot run raises :class:`ConfigError`,
which they print as ``error: ...``. This is also where the stack's known breakages are worked
around and the safeguards installed (docs/reliability.md).
"""
import errno
import importlib
import logging
import os
import os.path as osp
import sys
import tempfile
from copy import deepcopy
from typing import TYPE_CHECKING, Any, Optional, Sequence

import torch
from mmengine.config import Config, ConfigDict

from mmstiff.dependencies import missing_dependency
from mmstiff.engine.atomic_files import WriteFailedError, describe_write_failure
from mmstiff.engine.resume import checkpoint_problem, find_resume_checkpoint
from mmstiff.engine.work_dir_lock import WorkDirLockedError, lock_work_dir
from mmstiff.errors import MmstiffError
from mmstiff.utils.checkpoint import (CheckpointError, check_resume_checkpoint,
                                      install_checkpoint_loader, load_checkpoint_into)

if TYPE_CHECKING:
    from mmengine.runner import Runner

#: ``default_scope`` of a config -> the codebase whose conventions the tools follow.
CODEBASES = {
    'mmpretrain': dict(dump_results='DumpResults'),
    'mmdet': dict(dump_results='DumpDetResults'),
}
DATALOADERS = ('train_dataloader', 'val_dataloader', 'test_dataloader')
METRIC_DUMP_SUFFIXES = ('.json', '.yaml', '.yml')
PREDICTION_DUMP_SUFFIXES = ('.pkl', '.pickle')


class ConfigError(ValueError, MmstiffError):
    """A config or command-line value the tools cannot run with."""


class RunWriteError(RuntimeError, MmstiffError):
    """A run stopped because a file could not be written (a full disk, a quota, a read-only
    folder, no permission); the message says what was being written, what is intact and how
    to go on."""


#: the ``errno`` values of a write the machine refused: no space, a quota, a read-only file
#: system, a file too large, no permission
WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG, errno.EACCES, errno.EPERM)


def codebase_of(cfg: Config) -> str:
    """Return the codebase (``'mmpretrain'`` or ``'mmdet'``) named by ``cfg.default_scope``."""
    scope = cfg.get('default_scope')
    if scope not in CODEBASES:
        raise ConfigError(
            f'default_scope={scope!r} in the config is not supported; expected one of '
            f'{sorted(CODEBASES)} (inherit a base config such as '
            "'mmpretrain::_base_/default_runtime.py' or 'mmdet::_base_/default_runtime.py')")
    return scope


def cfg_option(text: str) -> str:
    """One ``--cfg-options`` item, checked to have the form ``key=value`` (the tools pass this
    as the argparse ``type``; argparse then reports ``invalid key=value value: 'text'``)."""
    key, sep, _ = text.partition('=')
    if not sep or not key.strip():
        raise ValueError(f'--cfg-options item {text!r} is not of the form key=value')
    return text


cfg_option.__name__ = 'key=value'


def _config_file_of(exc, default):
    """The config file MMEngine was reading when ``exc`` was raised (the innermost
    ``Config._file2dict`` frame of its traceback: a base config, or ``default``)."""
    found, tb = default, exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_name == '_file2dict':
            found = osp.normpath(tb.tb_frame.f_locals.get('filename', found))
        tb = tb.tb_next
    return found


def load_config(path: str) -> Config:
    """Load a config file, failing clearly for a missing path, a file that does not load
    (a syntax error, a missing base config; the message names the file and the line) or an
    unsupported codebase."""
    if not osp.isfile(path):
        raise ConfigError(f'config file {path!r} does not exist')
    try:
        cfg = Config.fromfile(path)
    except SyntaxError as exc:
        where = exc.filename if exc.filename not in (None, '<unknown>') else \
            _config_file_of(exc, path)
        line = f', line {exc.lineno}' if exc.lineno else ''
        text = f': {exc.text.strip()}' if exc.text else ''
        raise ConfigError(f'config file {path!r} has a syntax error: {exc.msg} '
                          f'({where}{line}){text}') from None
    except Exception as exc:
        missing = missing_dependency(exc, f'config file {path!r}')
        if missing is not None:
            raise ConfigError(missing) from None
        raise ConfigError(f'config file {path!r} could not be loaded: '
                          f'{type(exc).__name__}: {exc}') from exc
    codebase_of(cfg)
    return cfg


def check_writable(field: str, path: str) -> None:
    """Fail before any work when the file ``path`` (the value of ``field``) cannot be written:
    a directory, an existing file without write permission, or no writable folder to create
    it in (missing folders are created later, as MMEngine's ``dump`` does)."""
    full = osp.abspath(path)
    if osp.isdir(full):
        raise ConfigError(f'{field} {path!r} is a directory; expected a file path')
    if osp.exists(full):
        try:
            with open(full, 'a'):
                pass
        except OSError as exc:
            raise ConfigError(f'{field} {path!r} cannot be written: {exc.strerror}') from None
        return
    parent = osp.dirname(full)
    while not osp.exists(parent):
        parent = osp.dirname(parent)
    if not osp.isdir(parent):
        raise ConfigError(f'{field} {path!r} cannot be created: {parent!r} is a file, not a '
                          'directory')
    try:
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as exc:
        raise ConfigError(f'{field} {path!r} cannot be created: the directory {parent!r} is '
                          f'not writable ({exc.strerror})') from None


def default_work_dir(config_path: str) -> str:
    """``./work_dirs/<config file name without its extension>``: the work dir of a run whose
    config and command line set none."""
    return osp.join('./work_dirs', osp.splitext(osp.basename(config_path))[0])


def _check_dataloader(cfg, field):
    loader = cfg.get(field)
    if loader is None:
        return
    num_workers = loader.get('num_workers', 0)
    if loader.get('persistent_workers', False) and num_workers == 0:
        raise ConfigError(
            f'{field}.persistent_workers=True needs {field}.num_workers > 0, got '
            f'num_workers={num_workers}; set persistent_workers=False or raise num_workers '
            f'(e.g. --cfg-options {field}.persistent_workers=False)')


def _set_dataloader_defaults(cfg, field, no_pin_memory=False, no_persistent_workers=False):
    """Upstream tools' dataloader defaults, made safe for CPU and ``num_workers=0``."""
    loader = cfg.get(field)
    if loader is None:
        return
    merged = ConfigDict(pin_memory=torch.cuda.is_available(),
                        persistent_workers=loader.get('num_workers', 0) > 0,
                        collate_fn=dict(type='default_collate'))
    merged.update(loader)
    if no_pin_memory:
        merged['pin_memory'] = False
    if no_persistent_workers:
        merged['persistent_workers'] = False
    cfg[field] = merged


def _check_amp():
    if not torch.cuda.is_available():
        raise ConfigError('--amp needs a CUDA device (AmpOptimWrapper runs float16 autocast on '
                          'GPU); none is available here. Train without --amp on CPU.')


def _resolve_work_dir(cfg, args):
    if args.work_dir is not None:
        cfg.work_dir = args.work_dir
    elif cfg.get('work_dir') is None:
        cfg.work_dir = default_work_dir(args.config)


def merge_train_args(cfg: Config, args: Any) -> Config:
    """Apply ``tools/train.py`` flags to ``cfg`` (in place) as mmpretrain/mmdet's tools do."""
    codebase_of(cfg)
    cfg.launcher = args.launcher
    _resolve_work_dir(cfg, args)
    if args.no_validate:
        cfg.val_cfg = None
        cfg.val_dataloader = None
        cfg.val_evaluator = None
    if args.amp:
        _check_amp()
        optim_wrapper = cfg.optim_wrapper.get('type', 'OptimWrapper')
        if optim_wrapper not in ('OptimWrapper', 'AmpOptimWrapper'):
            raise ConfigError(f'--amp is only supported with optim_wrapper.type OptimWrapper or '
                              f'AmpOptimWrapper, got {optim_wrapper!r}')
        cfg.optim_wrapper.type = 'AmpOptimWrapper'
        cfg.optim_wrapper.setdefault('loss_scale', 'dynamic')
    if getattr(args, 'resume_or_start', False):
        if args.resume is not None:
            raise ConfigError('--resume and --resume-or-start were both given; give one')
        cfg.resume = True
        cfg.load_from = None
    elif args.resume == 'auto':
        cfg.resume = True
        cfg.load_from = None
    elif args.resume is not None:
        if not osp.isfile(args.resume):
            raise ConfigError(f'--resume checkpoint {args.resume!r} does not exist')
        cfg.resume = True
        cfg.load_from = args.resume
    if getattr(args, 'auto_scale_lr', False):
        if 'auto_scale_lr' not in cfg or 'base_batch_size' not in cfg.auto_scale_lr:
            raise ConfigError('--auto-scale-lr needs auto_scale_lr.base_batch_size in the config')
        cfg.auto_scale_lr.enable = True
    for field in DATALOADERS:
        _set_dataloader_defaults(cfg, field, getattr(args, 'no_pin_memory', False),
                                 getattr(args, 'no_persistent_workers', False))
    return cfg


def merge_test_args(cfg: Config, args: Any) -> Config:
    """Apply ``tools/test.py`` flags to ``cfg`` (in place)."""
    codebase = codebase_of(cfg)
    cfg.launcher = args.launcher
    _resolve_work_dir(cfg, args)
    if not osp.isfile(args.checkpoint):
        raise ConfigError(f'checkpoint {args.checkpoint!r} does not exist')
    cfg.load_from = args.checkpoint
    if args.out is not None:
        suffix = osp.splitext(args.out)[1].lower()
        if suffix not in METRIC_DUMP_SUFFIXES + PREDICTION_DUMP_SUFFIXES:
            raise ConfigError(
                f'--out {args.out!r} has suffix {suffix!r}; expected one of '
                f'{PREDICTION_DUMP_SUFFIXES} (predictions) or {METRIC_DUMP_SUFFIXES} (metrics)')
        check_writable('--out', args.out)
        if suffix in PREDICTION_DUMP_SUFFIXES:
            evaluators = cfg.test_evaluator
            if not isinstance(evaluators, (list, tuple)):
                evaluators = [evaluators]
            dump = dict(type=CODEBASES[codebase]['dump_results'], out_file_path=args.out)
            cfg.test_evaluator = list(evaluators) + [dump]
    for field in DATALOADERS:
        _set_dataloader_defaults(cfg, field, getattr(args, 'no_pin_memory', False))
    return cfg


#: types of ``default_hooks.checkpoint`` that :func:`install_safeguards` replaces.
PLAIN_CHECKPOINT_HOOKS = ('CheckpointHook', 'mmengine.CheckpointHook')
SAFE_CHECKPOINT_HOOK = 'mmstiff.SafeCheckpointHook'
DIVERGENCE_HOOK = 'mmstiff.DivergenceHook'


def _is_divergence_hook(hook):
    hook_type = hook.get('type') if isinstance(hook, dict) else None
    name = hook_type if isinstance(hook_type, str) else getattr(hook_type, '__name__', '')
    return name.split('.')[-1] == 'DivergenceHook'


def install_safeguards(cfg: Config) -> Config:
    """Protect a training run (in place): crash-safe checkpoints and a divergence check.

    * ``default_hooks.checkpoint`` of type ``CheckpointHook`` becomes
      ``mmstiff.SafeCheckpointHook`` with the same arguments (atomic writes, old checkpoints
      removed only after the new one is complete);
    * ``mmstiff.DivergenceHook`` is appended to ``custom_hooks`` unless the config has one,
      with the settings of the config's ``divergence=dict(action=..., max_skips=...)``.
    """
    checkpoint = (cfg.get('default_hooks') or {}).get('checkpoint')
    if isinstance(checkpoint, dict) and checkpoint.get('type') in PLAIN_CHECKPOINT_HOOKS:
        checkpoint['type'] = SAFE_CHECKPOINT_HOOK
    divergence = cfg.get('divergence')
    if divergence is not None and not isinstance(divergence, dict):
        raise ConfigError(f'divergence={divergence!r} in the config is not supported; expected '
                          "a dict such as dict(action='skip', max_skips=10)")
    hooks = list(cfg.get('custom_hooks') or [])
    if any(_is_divergence_hook(hook) for hook in hooks):
        if divergence is not None:
            raise ConfigError('the config sets divergence=... and also has a DivergenceHook in '
                              'custom_hooks; give the settings in one place')
        return cfg
    hooks.append(dict(type=DIVERGENCE_HOOK, **(divergence or {})))
    cfg.custom_hooks = hooks
    return cfg


def resolve_resume(cfg: Config, args: Any) -> Optional[str]:
    """Decide what a training run resumes from, before the Runner is built.

    With ``cfg.resume`` set (``--resume``, ``--resume-or-start`` or the config) this sets
    ``cfg.load_from`` to a checked, complete checkpoint: the one given, or the one
    :func:`mmstiff.engine.find_resume_checkpoint` finds in the work dir. Returns a line for
    the log saying what was chosen and why (None when not resuming).

    Raises:
        ConfigError: the given checkpoint is damaged, or ``--resume`` finds nothing to resume
            (``--resume-or-start`` and a config's ``resume=True`` start a new run instead).
    """

    if not cfg.get('resume'):
        return None
    given = cfg.get('load_from')
    resume_arg = getattr(args, 'resume', None)
    flag = '--resume' if resume_arg not in (None, 'auto') else 'load_from'
    if given:
        problem = checkpoint_problem(given)
        if problem is not None:
            newest = find_resume_checkpoint(osp.dirname(given) or '.').path
            hint = (f'; the newest complete checkpoint beside it is {newest}' if newest else '')
            raise ConfigError(f'{flag} checkpoint {given!r} {problem}; it cannot be resumed '
                              f'from{hint}')
        return f'Resuming from {given} (given as {flag}).'
    search = find_resume_checkpoint(cfg.work_dir)
    if search.path is not None:
        cfg.load_from = search.path
        return f'Resuming from {search.path}: {search.why()}.'
    if resume_arg == 'auto':
        raise ConfigError(
            f'--resume: nothing to resume in the work dir {cfg.work_dir!r}: {search.why()}. '
            'Check --work-dir; to start a new run there, drop --resume, or use '
            '--resume-or-start, which resumes when it can and starts a new run otherwise. '
            'Nothing was written.')
    cfg.resume = False
    return f'Nothing to resume in {cfg.work_dir}: {search.why()}. Starting a new run.'


def check_config(cfg: Config, mode: str) -> None:
    """The whole-config checks of :mod:`mmstiff.apis.config_checks` (mmstiff type names; the
    entries of the lists the Runner builds; the training loop's keys in train mode), as
    :class:`ConfigError`."""
    from .config_checks import check_mmstiff_types, check_runner_lists, check_train_loop
    try:
        check_mmstiff_types(cfg)
        check_runner_lists(cfg)
        if mode == 'train':
            check_train_loop(cfg)
    except ValueError as err:
        raise ConfigError(str(err)) from None


def check_runtime(cfg: Config) -> None:
    """Checks that must pass before the Runner starts any work."""
    for field in DATALOADERS:
        _check_dataloader(cfg, field)
    wrapper = cfg.get('optim_wrapper') or {}
    if wrapper.get('type') == 'AmpOptimWrapper':
        _check_amp()


def init_cpu_distributed(cfg: Config) -> Config:
    """Prepare a distributed run on a machine without CUDA (gloo backend).

    Creates the process group from the ``torchrun`` environment before the Runner is built,
    so MMEngine skips its CUDA-only ``init_dist``, and makes the DDP wrapper CPU-friendly.
    Does nothing for non-distributed runs or when CUDA is available.
    """
    if cfg.get('launcher', 'none') == 'none' or torch.cuda.is_available():
        return cfg
    if cfg.launcher != 'pytorch':
        raise ConfigError(f'--launcher {cfg.launcher!r} needs CUDA; on CPU use --launcher '
                          "pytorch (tools/dist_train.sh does)")
    missing = [
        k for k in ('RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT') if k not in os.environ
    ]
    if missing:
        raise ConfigError(f'--launcher pytorch needs the torchrun environment; {missing} are not '
                          'set (start it with tools/dist_train.sh or torchrun)')
    env_cfg = cfg.setdefault('env_cfg', ConfigDict())
    dist_cfg = env_cfg.setdefault('dist_cfg', ConfigDict())
    dist_cfg.backend = 'gloo'
    wrapper = deepcopy(cfg.get('model_wrapper_cfg') or ConfigDict(type='MMDistributedDataParallel'))
    wrapper['device_ids'] = None
    cfg.model_wrapper_cfg = wrapper
    if not torch.distributed.is_initialized():
        torch.distributed.init_process_group(backend='gloo')
    return cfg


def check_codebase_loads(cfg: Config) -> None:
    """Import the models of the config's codebase (``mmdet.models``), as the Runner will: a
    package it needs and cannot load here (mmdet without mmcv's compiled ops, a conflicting
    stack) is a :class:`ConfigError` naming what to install, before the data checks, which it
    outranks."""
    try:
        importlib.import_module(f'{codebase_of(cfg)}.models')
    except ImportError as exc:
        missing = missing_dependency(exc, 'this config')
        if missing is None:
            raise
        raise ConfigError(missing) from None


def preflight_data(cfg: Config, fields: Sequence[str] = DATALOADERS) -> None:
    """The data checks of :mod:`mmstiff.datasets.preflight` on the dataloaders ``fields``, before
    anything is built: a failed one raises its ``DataCheckError``; warnings go to stderr as
    ``warning:`` lines."""
    from mmstiff.datasets.preflight import check_data
    for line in check_data(cfg, fields):
        print(f'warning: {line}', file=sys.stderr, flush=True)


def prepare_runner_cfg(cfg: Config, args: Any, mode: str) -> Config:
    """Everything a tool does to ``cfg`` before ``Runner.from_cfg``; ``mode`` is train or test."""
    if mode == 'train':
        merge_train_args(cfg, args)
    elif mode == 'test':
        merge_test_args(cfg, args)
    else:
        raise ValueError(f"mode={mode!r}; expected 'train' or 'test'")
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    if getattr(args, 'skip_data_checks', False):
        cfg.skip_data_checks = True
    if getattr(args, 'skip_image_checks', False):
        cfg.skip_image_checks = True
    check_config(cfg, mode)
    if mode == 'train':
        install_safeguards(cfg)
    check_runtime(cfg)
    init_cpu_distributed(cfg)
    return cfg


def write_failure(exc: Optional[BaseException]) -> Optional[str]:
    """What a write that failed with ``exc`` was, in one phrase (``could not write PATH: No
    space left on device (ENOSPC; ...)``), or None when ``exc`` (or what it was raised from)
    is no refused write (:data:`WRITE_ERRNOS`, or any failure of an atomic write)."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, WriteFailedError):
            return str(exc)
        if isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS:
            path = exc.filename or 'a file of the run'
            return describe_write_failure(str(path), None, exc)
        exc = exc.__cause__ or exc.__context__
    return None


def hold_work_dir(work_dir: str) -> None:
    """Lock ``work_dir`` for this training run (:mod:`mmstiff.engine.work_dir_lock`); a work
    dir in use by another run, or one that cannot be created, is a :class:`ConfigError`."""
    try:
        lock_work_dir(work_dir)
    except (WorkDirLockedError, OSError) as err:
        if torch.distributed.is_initialized():  # every rank stops, not only rank 0
            torch.distributed.destroy_process_group()
        failed = None if isinstance(err, WorkDirLockedError) else write_failure(err)
        if isinstance(err, OSError) and failed is None:
            raise
        message = str(err) if failed is None else (
            f'the work dir {work_dir!r} cannot be used: {failed}; pick a writable --work-dir')
        raise ConfigError(message) from None


def _raise_log_write_errors(logger):
    """Make a failed write of the run's log file (a full disk) stop the run like any other
    failed write, instead of a "--- Logging error ---" traceback on stderr and a log that
    silently ends. Other errors of a record (a bad format string) are reported as before."""

    def raise_write_error(handler):
        report = handler.handleError

        def handle_error(record):
            error = sys.exc_info()[1]
            if isinstance(error, OSError):
                error.filename = error.filename or handler.baseFilename
                raise  # the write error being handled in Handler.emit
            report(record)

        return handle_error

    for handler in getattr(logger, 'handlers', ()):
        if isinstance(handler, logging.FileHandler):
            handler.handleError = raise_write_error(handler)


def _remedy(exc):
    """What to do about the refused write ``exc``: free space, or make the folder writable."""
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
            return 'free some space'
        if isinstance(exc, OSError) and exc.errno in WRITE_ERRNOS:
            return 'make the folder writable'
        exc = exc.__cause__ or exc.__context__
    return 'free some space (or make the folder writable)'


def _intact(work_dir, config, mode, remedy):
    """What is intact after a failed write in ``work_dir``, and how to go on."""
    if mode != 'train':
        return f'Files written before are intact; {remedy} and run again'
    found = find_resume_checkpoint(work_dir)
    command = f'python tools/train.py {config} --work-dir {work_dir} --resume'
    if found.path is None:
        return f'No complete checkpoint is in {work_dir} yet; {remedy} and train again'
    return (f'Nothing written before is lost: the newest complete checkpoint is {found.path}; '
            f'{remedy} and resume from it with: {command}')


def run(runner: 'Runner', args: Any, mode: str) -> Any:
    """``runner.train()`` or ``runner.test()`` (``mode``); a file the run cannot write (a full
    disk, a quota, a read-only folder, no permission: a checkpoint, ``last_checkpoint``, a log)
    stops it with :class:`RunWriteError` naming the file, the space it needed and what is
    intact (in training: the newest complete checkpoint and the command that resumes from it).
    """
    _raise_log_write_errors(getattr(runner, 'logger', None))
    try:
        return runner.train() if mode == 'train' else runner.test()
    except Exception as exc:
        failed = write_failure(exc)
        if failed is None:
            raise
        what = 'Training' if mode == 'train' else 'Testing'
        raise RunWriteError(f'{what} stopped: {failed}. '
                            f'{_intact(runner.work_dir, args.config, mode, _remedy(exc))}') from exc


def check_resume_model(runner: 'Runner', path: str, trust: bool) -> None:
    """A resume checkpoint of another model is a :class:`ConfigError` listing the keys and
    shapes that differ, before any training step."""
    try:
        check_resume_checkpoint(runner.model, path, trust=trust)
    except CheckpointError as err:
        raise ConfigError(str(err)) from None


def build_runner(args: Any, mode: str) -> 'Runner':
    """Load ``args.config``, apply the tool's flags and checks, and build the Runner.

    Local checkpoints load weights-only (``args.trust_checkpoint``: in full). In test mode the
    checkpoint is loaded into the model strictly here, before any work
    (``args.allow_partial_load`` allows a mismatch, with a warning listing it).

    Raises:
        ConfigError: for bad input, naming the value, before any work starts.
    """
    from mmengine.registry import RUNNERS
    from mmengine.runner import Runner

    import mmstiff  # noqa: F401  (registers mmstiff's modules)

    os.environ.setdefault('LOCAL_RANK', str(getattr(args, 'local_rank', 0)))
    trust = getattr(args, 'trust_checkpoint', False)
    install_checkpoint_loader(trust=trust)
    cfg = load_config(args.config)
    prepare_runner_cfg(cfg, args, mode)
    check_codebase_loads(cfg)
    preflight_data(cfg, DATALOADERS[:2] if mode == 'train' else DATALOADERS[2:])
    note = None
    if mode == 'train':
        try:
            note = resolve_resume(cfg, args)
        except ConfigError:
            if torch.distributed.is_initialized():  # every rank fails alike
                torch.distributed.destroy_process_group()
            raise
    if mode == 'train':
        hold_work_dir(cfg.work_dir)
    try:
        runner = Runner.from_cfg(cfg) if 'runner_type' not in cfg else RUNNERS.build(cfg)
    except OSError as exc:  # the work dir or its log cannot be written
        failed = write_failure(exc)
        if failed is None:
            raise
        raise ConfigError(f'the work dir {cfg.work_dir!r} cannot be used: {failed}; pick a '
                          'writable --work-dir') from None
    if note:
        runner.logger.info(note)
    if mode == 'train' and cfg.get('resume') and cfg.get('load_from'):
        check_resume_model(runner, cfg.load_from, trust)
    if mode == 'test':
        try:
            load_checkpoint_into(runner.model, args.checkpoint, trust=trust,
                                 strict=not getattr(args, 'allow_partial_load', False),
                                 allow_non_finite=getattr(args, 'allow_non_finite', False))
        except (CheckpointError, FileNotFoundError) as err:
            raise ConfigError(str(err)) from None
    return runner


def shutdown_distributed() -> None:
    """Wait for every rank, then tear the process group down before the interpreter exits.

    Without it a rank that finishes first can exit while gloo's threads still serve the others
    ("terminate called without an active exception").
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
