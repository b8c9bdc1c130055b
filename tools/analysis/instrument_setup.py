"""What the How-do-ViTs instrument tools (hessian.py, loss_landscape.py, feature_variance.py)
share on top of :mod:`common`: the device, batches preprocessed with or without the training
augmentations, the training loss and the weight decay of the config's optimizer
(docs/methods.md §12).
"""
import sys

import common

MODES = ('eval', 'train')


def default_device():
    import torch
    return 'cuda' if torch.cuda.is_available() else 'cpu'


def add_device_args(parser):
    parser.add_argument('--device', default=None,
                        help='where to run: cpu, cuda, cuda:1 (default: cuda where present)')
    parser.add_argument(
        '--seed', type=int, default=0,
        help='seed of the data order, the augmentations and the random vectors '
        '(default 0)')


def add_loss_args(parser):
    """Options of the tools that evaluate the training loss (hessian.py, loss_landscape.py)."""
    parser.add_argument(
        '--mode', choices=MODES, default='eval',
        help='model mode while the loss is evaluated: eval (BN running '
        'statistics, no dropout / drop path; default) or train (batch '
        'statistics, one random draw per batch; buffers restored)')
    parser.add_argument(
        '--weight-decay', type=float, default=None,
        help="coefficient λ of the l2 term Σ λ/2 ||w||² for every parameter "
        "(default: each parameter's decay from the config's optim_wrapper)")
    parser.set_defaults(split='train')


def resolve_device(text):
    """The torch device named by ``--device``; exits naming it when it cannot be used."""
    import torch
    text = text or default_device()
    try:
        device = torch.device(text)
    except RuntimeError as err:
        sys.exit(f'error: --device {text!r} is not a device ({err}); expected cpu or cuda[:N]')
    if device.type == 'cuda' and not torch.cuda.is_available():
        sys.exit(f'error: --device {text!r} asks for CUDA, which is not available here; '
                 'use --device cpu')
    return device


def setup(args, tool):
    """``(cfg, model, loader, out_dir, device)``: the model on ``--device`` in eval mode (loaded
    strictly by ``common.load_model``: a checkpoint of another model exits naming the
    mismatched weights), the loader of ``--split`` with the data order and augmentations seeded
    by ``--seed``."""
    from mmengine.runner import set_random_seed
    device = resolve_device(args.device)
    cfg = common.load_cfg(args)
    model = common.load_model(cfg, args.checkpoint).to(device)
    model.eval()
    set_random_seed(args.seed)  # the sampler's shuffle seed and the augmentations follow it
    loader = common.build_loader(cfg, args.split, args.batch_size)
    return cfg, model, loader, common.out_dir_of(args, tool), device


def batches(model, loader, num_batches, training):
    """Yield the first ``num_batches`` batches of ``loader`` through the model's data
    preprocessor (``training=True`` applies its batch augments, e.g. Mixup / CutMix), with a
    progress bar."""
    from mmengine.utils import ProgressBar
    total = min(num_batches, len(loader))
    bar = ProgressBar(total)
    for i, data in enumerate(loader):
        if i >= total:
            break
        yield model.data_preprocessor(data, training)
        bar.update()
    sys.stdout.write('\n')


def training_loss(model, data):
    """The model's training loss on preprocessed ``data``: every ``loss`` term summed as the
    Runner does (``parse_losses``), a differentiable scalar."""
    if isinstance(data, dict):
        losses = model(**data, mode='loss')
    else:
        losses = model(*data, mode='loss')
    loss, _ = model.parse_losses(losses)
    return loss


def weight_decays(cfg, model, params, override=None):
    """The ``ℓ2`` coefficient of each parameter: ``override`` for all of them, or each one's
    weight decay in the optimizer the config's ``optim_wrapper`` builds (its paramwise settings
    included); 0 where the config has no optimizer."""
    if override is not None:
        if override < 0:
            sys.exit(f'error: --weight-decay {override!r} is negative; expected a float >= 0')
        return [float(override)] * len(params)
    from mmengine.optim import build_optim_wrapper

    from mmstiff.analysis.landscape import param_weight_decays
    from mmstiff.engine.hooks.hessian_hook import optimizer_param_groups
    optim_cfg = cfg.get('optim_wrapper')
    if not optim_cfg:
        print('the config has no optim_wrapper: the l2 term is 0 (pass --weight-decay)')
        return [0.0] * len(params)
    optim_cfg = optim_cfg.copy()
    if optim_cfg.get('type') == 'AmpOptimWrapper':
        # only the parameter groups are read; AMP's wrapper refuses to build without a GPU
        optim_cfg['type'] = 'OptimWrapper'
        for key in ('loss_scale', 'dtype', 'use_fsdp'):
            optim_cfg.pop(key, None)
    optim_wrapper = build_optim_wrapper(model, optim_cfg)
    return param_weight_decays(params, optimizer_param_groups(optim_wrapper))


def decay_summary(decays):
    """``{decay: number of parameters}`` for the JSON (the distinct coefficients used)."""
    summary = {}
    for d in decays:
        summary[repr(float(d))] = summary.get(repr(float(d)), 0) + 1
    return summary
