"""What the analysis tools share: arguments, loading a trained model and its data, output files.

Every tool takes ``CONFIG CHECKPOINT [--out-dir DIR] [--cfg-options k=v ...] [--num-batches N]
[--split test|val|train]``, builds the model of ``CONFIG`` with the codebase of its
``default_scope`` (mmpretrain or mmdet), loads ``CHECKPOINT`` on the CPU and iterates over the
first ``N`` batches of the split's dataloader.

tns.py, spectrum.py and freq_noise.py also take ``--device cpu|cuda|cuda:N``
(:func:`add_device_arg`; the CPU by default; a device that is not available is an error naming
it, before anything is loaded) and ``--to-visualizer`` (:func:`add_visualizer_arg`), which
also sends every figure, as an image, to the backends of the config's
``visualizer`` (MMEngine's ``Visualizer.add_image``, at step 0, named after the PNG file):
``LocalVisBackend`` writes ``<out dir>/vis_data/vis_image/<figure>_0.png``, a
``TensorboardVisBackend`` an image summary, W&B and MLflow their own image records.

The tools run as scripts (``python tools/analysis/tns.py ...``), so this folder is first on
``sys.path`` and they ``import common`` directly. Configs load through
:func:`mmstiff.apis.runtime.load_config`, as in ``tools/train.py`` and ``tools/test.py``.

``CHECKPOINT`` loads weights-only, with the allow-list of the objects MMEngine checkpoints hold
(:mod:`mmstiff.utils.checkpoint`; ``--trust-checkpoint`` unpickles it in full), and strictly:
keys or shapes that do not match the config's model are an error naming them
(``--allow-partial-load`` loads the matching part, with a warning); NaN or inf weights or
statistics are an error naming them (``--allow-non-finite`` goes on anyway), and so is a split
whose dataloader yields no batch.
"""
import argparse
import json
import os
import os.path as osp
import sys
import time

from mmengine.config import DictAction

from mmstiff.apis.runtime import ConfigError, cfg_option, codebase_of, load_config
from mmstiff.utils.checkpoint import (CheckpointError, install_checkpoint_loader,
                                      load_checkpoint_into)

SPLITS = ('test', 'val', 'train')
#: ``--trust-checkpoint``, ``--allow-partial-load`` and ``--allow-non-finite`` of the command
#: line, set by load_cfg.
LOAD_OPTIONS = dict(trust=False, allow_partial=False, allow_non_finite=False)


def positive_int(text):
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f'{text!r} is not a positive integer')
    return value


def base_parser(description, num_batches=10):
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument('config', help='config file the checkpoint was trained with')
    parser.add_argument('checkpoint', help='checkpoint file (loaded weights-only and strictly)')
    parser.add_argument(
        '--out-dir', default=None, help='where to write the JSON and PNG files (default: '
        '<checkpoint dir>/analysis/<tool>)')
    parser.add_argument('--num-batches', type=positive_int, default=num_batches,
                        help=f'batches of the split to analyse (default {num_batches})')
    parser.add_argument('--split', choices=SPLITS, default='test',
                        help='dataloader of the config to read (default test)')
    parser.add_argument('--batch-size', type=positive_int, default=None,
                        help='override the dataloader batch size')
    parser.add_argument('--cfg-options', nargs='+', action=DictAction, default=None,
                        type=cfg_option, help='override config settings, key=value')
    parser.add_argument(
        '--trust-checkpoint', action='store_true',
        help='unpickle the checkpoint in full; only for files from a source '
        'you trust (a pickle can run code)')
    parser.add_argument(
        '--allow-partial-load', action='store_true',
        help='analyse even when the checkpoint does not match the model '
        '(parameters it lacks keep their initial values); by default an error')
    parser.add_argument(
        '--allow-non-finite', action='store_true',
        help='analyse even when the checkpoint holds NaN or inf weights or '
        'statistics (a diverged run); by default an error naming them')
    return parser


def add_device_arg(parser):
    """``--device`` of tns.py, spectrum.py and freq_noise.py (the CPU by default)."""
    parser.add_argument(
        '--device', default='cpu',
        help="where the model runs: 'cpu' (default), 'cuda' or 'cuda:N'; "
        'an error when that device is not available')


def add_visualizer_arg(parser):
    """``--to-visualizer``: the figures also go to the config's visualizer backends."""
    parser.add_argument(
        '--to-visualizer', action='store_true',
        help="also send each figure to the backends of the config's "
        "'visualizer' (Visualizer.add_image at step 0; LocalVisBackend "
        'writes OUT_DIR/vis_data/vis_image/<figure>_0.png, '
        'TensorboardVisBackend an image summary under OUT_DIR/vis_data)')


def check_device(device):
    """``device`` (``--device``) as a ``torch.device``; exits naming it when it is not a device
    name or not available here."""
    import torch
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        sys.exit(f"error: --device {device!r} is not a device; expected 'cpu', 'cuda' or "
                 "'cuda:N'")
    if parsed.type == 'cpu':
        return parsed
    if parsed.type != 'cuda':
        sys.exit(f"error: --device {device!r} is not supported; expected 'cpu', 'cuda' or "
                 "'cuda:N'")
    if not torch.cuda.is_available():
        sys.exit(f"error: --device {device!r}: CUDA is not available on this machine; use "
                 "--device cpu")
    if parsed.index is not None and parsed.index >= torch.cuda.device_count():
        sys.exit(f'error: --device {device!r}: this machine has {torch.cuda.device_count()} '
                 'CUDA device(s), numbered from 0')
    return parsed


def out_dir_of(args, tool):
    out_dir = args.out_dir or osp.join(osp.dirname(osp.abspath(args.checkpoint)), 'analysis', tool)
    os.makedirs(out_dir, exist_ok=True)
    return out_dir


def load_cfg(args):
    """The config of ``args.config`` with ``--cfg-options`` merged; bad input exits naming it."""
    try:
        cfg = load_config(args.config)
        if not osp.isfile(args.checkpoint):
            raise ConfigError(f'checkpoint {args.checkpoint!r} does not exist')
        if args.cfg_options:
            cfg.merge_from_dict(args.cfg_options)
            codebase_of(cfg)
    except ConfigError as err:
        sys.exit(f'error: {err}')
    LOAD_OPTIONS.update(
        trust=getattr(args, 'trust_checkpoint',
                      False), allow_partial=getattr(args, 'allow_partial_load', False),
        allow_non_finite=getattr(args, 'allow_non_finite', False))
    install_checkpoint_loader(trust=LOAD_OPTIONS['trust'])  # for any other MMEngine load
    return cfg


def load_model(cfg, checkpoint, trust=None, allow_partial=None):
    """Build ``cfg.model`` in the config's scope and load ``checkpoint`` on the CPU (eval mode),
    weights-only unless ``trust`` and strictly unless ``allow_partial`` (None: the command
    line's flags, :data:`LOAD_OPTIONS`); a refused or mismatched checkpoint exits naming it."""
    trust = LOAD_OPTIONS['trust'] if trust is None else trust
    allow_partial = LOAD_OPTIONS['allow_partial'] if allow_partial is None else allow_partial
    from mmengine.registry import MODELS, init_default_scope

    import mmstiff  # noqa: F401  (registers mmstiff's modules through its registry locations)
    init_default_scope(cfg.default_scope)
    model_cfg = cfg.model.copy()
    if cfg.get('data_preprocessor') is not None:
        # as the Runner does: mmpretrain configs keep the normalisation at top level
        model_cfg.setdefault('data_preprocessor', cfg.data_preprocessor)
    model = MODELS.build(model_cfg)
    try:
        load_checkpoint_into(model, checkpoint, strict=not allow_partial, trust=trust,
                             allow_non_finite=LOAD_OPTIONS['allow_non_finite'])
    except CheckpointError as err:
        sys.exit(f'error: {err}')
    model.eval()
    return model


#: :func:`load_model` is strict unless ``--allow-partial-load`` is given
load_model_strict = load_model


def build_loader(cfg, split, batch_size=None):
    from mmengine.runner import Runner
    field = f'{split}_dataloader'
    loader_cfg = cfg.get(field)
    if not loader_cfg:
        sys.exit(f'error: the config has no {field}; pick another --split')
    loader_cfg = loader_cfg.copy()
    if batch_size is not None:
        loader_cfg['batch_size'] = batch_size
    if loader_cfg.get('num_workers', 0) == 0:
        loader_cfg['persistent_workers'] = False
    loader = Runner.build_dataloader(loader_cfg)
    if len(loader) == 0:
        sys.exit(f'error: --split {split}: {field} yields no batch (its dataset has '
                 f'{len(loader.dataset)} samples; batch_size={loader_cfg.get("batch_size")}); '
                 'nothing to analyse. Check the dataset paths of the config or pick another '
                 '--split')
    return loader


def setup(args, tool):
    """``(cfg, model, loader, out_dir)`` for a tool's parsed arguments; the model on
    ``args.device``."""
    device = check_device(getattr(args, 'device', 'cpu'))
    cfg = load_cfg(args)
    check_visualizer(args, cfg)
    model = load_model(cfg, args.checkpoint).to(device)
    loader = build_loader(cfg, args.split, args.batch_size)
    return cfg, model, loader, out_dir_of(args, tool)


def check_visualizer(args, cfg):
    """With ``--to-visualizer``, the config's ``visualizer`` (it must have backends); exits
    naming what is missing otherwise. Called before any work and again when sending."""
    vis_cfg = cfg.get('visualizer')
    if getattr(args, 'to_visualizer', False) and (not vis_cfg or not vis_cfg.get('vis_backends')):
        sys.exit(f'error: --to-visualizer: the config has no visualizer.vis_backends '
                 f'(visualizer={vis_cfg!r}); expected e.g. '
                 "visualizer=dict(type='Visualizer', vis_backends=[dict(type='LocalVisBackend')])")
    return vis_cfg


def send_figures(args, cfg, files, tool):
    """With ``--to-visualizer``: every PNG of ``files`` to the backends of ``cfg.visualizer``
    (``add_image`` at step 0, named after the file), saved under ``<out dir>/vis_data``.
    Returns the visualizer (None without the flag)."""
    if not getattr(args, 'to_visualizer', False):
        return None
    import cv2
    from mmengine.registry import VISUALIZERS
    vis_cfg = check_visualizer(args, cfg).copy()
    vis_cfg['save_dir'] = out_dir_of(args, tool)
    vis_cfg['name'] = f'analysis_{tool}_{time.time_ns()}'  # a new instance, not a reused one
    visualizer = VISUALIZERS.build(vis_cfg)
    for path in files:
        image = cv2.imread(path, cv2.IMREAD_COLOR)
        if image is None:
            sys.exit(f'error: --to-visualizer: cannot read the figure {path!r}')
        visualizer.add_image(
            osp.splitext(osp.basename(path))[0], cv2.cvtColor(image, cv2.COLOR_BGR2RGB), step=0)
    visualizer.close()
    print(f'sent {len(files)} figures to the visualizer backends '
          f'{[type(b).__name__ for b in visualizer._vis_backends.values()]}')
    return visualizer


def iterate(model, loader, num_batches):
    """Yield ``(inputs, data_samples)`` of the first ``num_batches`` batches, preprocessed by the
    model's data preprocessor, with a progress bar."""
    from mmengine.utils import ProgressBar
    total = min(num_batches, len(loader))
    bar = ProgressBar(total)
    for i, data in enumerate(loader):
        if i >= total:
            break
        data = model.data_preprocessor(data, False)
        yield data['inputs'], data.get('data_samples')
        bar.update()
    sys.stdout.write('\n')


def backbone_of(model):
    return getattr(model, 'backbone', model)


def dump_json(obj, path):
    with open(path, 'w') as f:
        json.dump(obj, f, indent=2, allow_nan=True)
    return path


def finite(value):
    """A float for JSON, None where not finite."""
    value = float(value)
    return value if value == value and abs(value) != float('inf') else None
