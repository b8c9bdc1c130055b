"""What ``tools/train.py`` and ``tools/test.py`` do to a config before the Runner sees it.

The tools parse their own command lines (as mmpretrain's and mmdet's tools do) and hand the
parsed arguments here; every function takes them as plain attributes (``args.work_dir``,
``args.cfg_options`` as a dict, ...) and raises :class:`ConfigError` for a value it cannot run
with, which the tools print as ``error: ...``. The config handling follows mmpretrain's and
mmdet's own tools. On top of it, this module works around the known breakages of the pinned
stack (see the README):

* torch >= 2.6 loads checkpoints with ``weights_only=True``; MMEngine 0.10.7 checkpoints hold
  non-tensor objects (``HistoryBuffer``, numpy scalars), so ``--resume``, ``load_from`` and
  ``test.py CHECKPOINT`` fail. :func:`trust_checkpoints` restores full unpickling for the tool's
  process; only load checkpoints you trust.
* On a machine without CUDA, MMEngine's ``init_dist`` calls ``torch.cuda.set_device`` and its DDP
  wrapper passes ``device_ids=[local_rank]``. :func:`init_cpu_distributed` creates a gloo process
  group first and makes the wrapper CPU-friendly.
* ``--amp`` and ``persistent_workers`` with ``num_workers=0`` fail deep inside the Runner on CPU;
  here they fail before any work starts, with a message that says what to change.
"""
import os
import os.path as osp
from copy import deepcopy

import torch
from mmengine.config import Config, ConfigDict

#: ``default_scope`` of a config -> the codebase whose conventions the tools follow.
CODEBASES = {
    'mmpretrain': dict(dump_results='DumpResults'),
    'mmdet': dict(dump_results='DumpDetResults'),
}
DATALOADERS = ('train_dataloader', 'val_dataloader', 'test_dataloader')
METRIC_DUMP_SUFFIXES = ('.json', '.yaml', '.yml')
PREDICTION_DUMP_SUFFIXES = ('.pkl', '.pickle')


class ConfigError(ValueError):
    """A config or command-line value the tools cannot run with."""


def trust_checkpoints():
    """Let ``torch.load`` unpickle MMEngine checkpoints (torch >= 2.6 defaults to weights only).

    Sets ``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` for this process and its children, unless the
    user already set it. Only use it with checkpoints from a source you trust.
    """
    os.environ.setdefault('TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD', '1')


def codebase_of(cfg):
    """Return the codebase (``'mmpretrain'`` or ``'mmdet'``) named by ``cfg.default_scope``."""
    scope = cfg.get('default_scope')
    if scope not in CODEBASES:
        raise ConfigError(
            f'default_scope={scope!r} in the config is not supported; expected one of '
            f'{sorted(CODEBASES)} (inherit a base config such as '
            "'mmpretrain::_base_/default_runtime.py' or 'mmdet::_base_/default_runtime.py')")
    return scope


def load_config(path):
    """Load a config file, failing clearly for a missing path or an unsupported codebase."""
    if not osp.isfile(path):
        raise ConfigError(f'config file {path!r} does not exist')
    cfg = Config.fromfile(path)
    codebase_of(cfg)
    return cfg


def default_work_dir(config_path):
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
    merged = ConfigDict(
        pin_memory=torch.cuda.is_available(),
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


def merge_train_args(cfg, args):
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
    if args.resume == 'auto':
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


def merge_test_args(cfg, args):
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
        if suffix in PREDICTION_DUMP_SUFFIXES:
            evaluators = cfg.test_evaluator
            if not isinstance(evaluators, (list, tuple)):
                evaluators = [evaluators]
            dump = dict(type=CODEBASES[codebase]['dump_results'], out_file_path=args.out)
            cfg.test_evaluator = list(evaluators) + [dump]
    for field in DATALOADERS:
        _set_dataloader_defaults(cfg, field, getattr(args, 'no_pin_memory', False))
    return cfg


def check_runtime(cfg):
    """Checks that must pass before the Runner starts any work."""
    for field in DATALOADERS:
        _check_dataloader(cfg, field)
    wrapper = cfg.get('optim_wrapper') or {}
    if wrapper.get('type') == 'AmpOptimWrapper':
        _check_amp()


def init_cpu_distributed(cfg):
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
    missing = [k for k in ('RANK', 'WORLD_SIZE', 'MASTER_ADDR', 'MASTER_PORT') if k not in os.environ]
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


def prepare_runner_cfg(cfg, args, mode):
    """Everything a tool does to ``cfg`` before ``Runner.from_cfg``; ``mode`` is train or test."""
    if mode == 'train':
        merge_train_args(cfg, args)
    elif mode == 'test':
        merge_test_args(cfg, args)
    else:
        raise ValueError(f"mode={mode!r}; expected 'train' or 'test'")
    if args.cfg_options:
        cfg.merge_from_dict(args.cfg_options)
    check_runtime(cfg)
    init_cpu_distributed(cfg)
    return cfg


def build_runner(args, mode):
    """Load ``args.config``, apply the tool's flags and checks, and build the Runner.

    Raises:
        ConfigError: for bad input, naming the value, before any work starts.
    """
    import mmstiff  # noqa: F401  (registers mmstiff's modules)
    from mmengine.registry import RUNNERS
    from mmengine.runner import Runner

    os.environ.setdefault('LOCAL_RANK', str(getattr(args, 'local_rank', 0)))
    trust_checkpoints()
    cfg = load_config(args.config)
    prepare_runner_cfg(cfg, args, mode)
    return Runner.from_cfg(cfg) if 'runner_type' not in cfg else RUNNERS.build(cfg)


def shutdown_distributed():
    """Wait for every rank, then tear the process group down before the interpreter exits.

    Without it a rank that finishes first can exit while gloo's threads still serve the others
    ("terminate called without an active exception").
    """
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()
