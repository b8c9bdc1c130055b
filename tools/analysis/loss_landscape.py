#!/usr/bin/env python
"""Loss landscape of a trained network along filter-normalised random directions
(docs/methods.md §12).

    python tools/analysis/loss_landscape.py CONFIG CHECKPOINT [--dim 1|2] [--range R]
                                            [--steps S] [--num-batches N] [--batch-size B]
                                            [--bias-bn zero|weight] [--exclude PATTERN ...]
                                            [--convention li|paper]
                                            [--mode eval|train] [--weight-decay W]
                                            [--split train] [--device cuda] [--seed 0]
                                            [--out-dir DIR] [--cfg-options k=v ...]

As in "How Do Vision Transformers Work?" (Fig. 1a, C.4a) with Li et al.'s filter
normalisation: the loss NLL + l2 (the config's training loss plus Σ λ/2 ||w||² of its weight
decay) at ``w + α d₁`` (``--dim 1``) or ``w + α d₁ + β d₂`` (``--dim 2``) for α, β on a grid of
``--steps`` points in ``[-R, R]``. The N batches are drawn once, through the training pipeline
and the batch augments for ``--split train`` (the default), and reused at every point, so the
landscape is a function of the coordinates alone. ``--convention paper`` rescales the
directions across output channels as the authors' ``normalize_filter`` does, instead of filter by
filter (Li et al., the default). Writes

* ``landscape.json``: the coordinates, the loss and its NLL and l2 parts at every point, the
  loss at the trained weights, and how the directions were made;
* ``landscape_1d.png`` (``--dim 1``) or ``landscape_contour.png`` and ``landscape_surface.png``
  (``--dim 2``).
"""
import os.path as osp

from mmstiff.apis.analysis_output import dump_json, finite
from mmstiff.apis.analysis_setup import instrument_setup
from mmstiff.apis.batches import preprocessed_batches
from mmstiff.apis.cli import add_instrument_args, add_loss_args, analysis_parser
from mmstiff.apis.training_loss import decay_summary, training_loss, weight_decays
from mmstiff.tool_main import run_tool

#: parameters whose direction is 0 by default, as in the How-do-ViTs authors' landscapes:
#: position embeddings and relative position bias tables.
DEFAULT_EXCLUDE = ['*pos_embed*', '*relative_position*']


def parse_args(argv=None):
    parser = analysis_parser(__doc__.strip().splitlines()[0], num_batches=4)
    add_instrument_args(parser)
    add_loss_args(parser)
    parser.add_argument('--dim', type=int, choices=(1, 2), default=2,
                        help='number of random directions (default 2)')
    parser.add_argument('--range', type=float, default=1.0, dest='span',
                        help='the coordinates span [-R, R] (default 1.0)')
    parser.add_argument('--steps', type=int, default=21,
                        help='grid points per direction (default 21)')
    parser.add_argument(
        '--bias-bn', choices=('zero', 'weight'), default='zero',
        help='direction of parameters of at most one axis (biases, norm '
        'scales): zero (default, Li et al.\'s ignore=biasbn) or the weight')
    parser.add_argument(
        '--exclude', nargs='*', default=DEFAULT_EXCLUDE,
        help='fnmatch patterns of parameter names whose direction is 0 '
        f'(default {" ".join(DEFAULT_EXCLUDE)}; pass none for no exclusion)')
    parser.add_argument(
        '--convention', choices=('li', 'paper'), default='li',
        help='li (default): each filter of a direction gets the norm of the '
        "weight's filter; paper: the How-do-ViTs authors' normalize_filter, "
        'the norm across output channels at every other index')
    args = parser.parse_args(argv)
    if not args.span > 0:
        parser.error(f'--range {args.span} is not positive')
    if args.steps < 2:
        parser.error(f'--steps {args.steps} is too small; expected at least 2')
    return args


def build_loss(model, cached, params, decays, mode):
    """``() -> float``: mean training loss over the cached batches plus the l2 term; each
    evaluation appends ``(nll, l2)`` to the returned list."""
    import torch

    from mmstiff.analysis.landscape import l2_penalty, preserved_buffers
    parts = []

    def loss_fn():
        model.train(mode == 'train')
        with torch.no_grad(), preserved_buffers(model):
            nll = sum(float(training_loss(model, data)) for data in cached)
            nll /= len(cached)
            l2 = float(l2_penalty(params, decays))
        model.eval()
        parts.append((nll, l2))
        return nll + l2

    return loss_fn, parts


def main(argv=None):
    args = parse_args(argv)
    import torch
    from mmengine.utils import ProgressBar

    from mmstiff.analysis.landscape import (filter_normalised_direction, grid_coordinates,
                                            loss_landscape)
    cfg, model, loader, out_dir, device = instrument_setup(args, 'loss_landscape')
    named = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    params = [p for _, p in named]
    decays = weight_decays(cfg, model, params, args.weight_decay)
    training = args.split == 'train'
    print('drawing the batches')
    cached = list(preprocessed_batches(model, loader, args.num_batches, training))
    generator = torch.Generator().manual_seed(args.seed)
    directions = [
        filter_normalised_direction(named, generator, args.bias_bn, args.exclude, args.convention)
        for _ in range(args.dim)
    ]
    coords = [grid_coordinates(args.span, args.steps) for _ in range(args.dim)]
    loss_fn, parts = build_loss(model, cached, params, decays, args.mode)
    centre = loss_fn()
    centre_nll, centre_l2 = parts.pop()
    print(f'evaluating {args.steps ** args.dim} points')
    bar = ProgressBar(args.steps**args.dim)
    landscape = loss_landscape(loss_fn, params, directions, coords, on_point=bar.update)
    print()
    shape = tuple(landscape.losses.shape)
    nll = torch.tensor([p[0] for p in parts], dtype=torch.float64).view(shape)
    l2 = torch.tensor([p[1] for p in parts], dtype=torch.float64).view(shape)

    def grid(t):
        return [[finite(v) for v in row] for row in t.tolist()] if t.dim() == 2 else \
            [finite(v) for v in t.tolist()]

    zeroed = sorted(n for n, d in directions[0].items() if not bool(d.abs().sum() > 0))
    norms = [
        float(torch.sqrt(sum(d.double().pow(2).sum() for d in ds.values()))) for ds in directions
    ]
    result = dict(
        config=args.config, checkpoint=args.checkpoint, split=args.split, augmented=training,
        mode=args.mode, device=str(device), dim=args.dim, span=args.span, steps=args.steps,
        num_samples=sum(len(d['inputs']) for d in cached), directions=dict(
            seed=args.seed, bias_bn=args.bias_bn, exclude=args.exclude, convention=args.convention,
            norms=norms, zero_params=zeroed,
            weight_norm=float(torch.sqrt(sum(p.detach().double().pow(2).sum() for p in params)))),
        weight_decays=decay_summary(decays),
        centre=dict(loss=finite(centre), nll=finite(centre_nll),
                    l2=finite(centre_l2)), coords=[c.tolist() for c in landscape.coords],
        loss=grid(landscape.losses), nll=grid(nll), l2=grid(l2))
    if args.dim == 2:
        cos = sum(
            float((a.double() * b.double()).sum())
            for a, b in zip(directions[0].values(), directions[1].values())) / (
                norms[0] * norms[1])
        result['directions']['cosine'] = finite(cos)

    from mmstiff.visualization import instruments
    if args.dim == 1:
        files = [
            instruments.landscape_line(
                landscape.coords[0], dict([('NLL + l2', landscape.losses), ('NLL', nll),
                                           ('l2', l2)]), osp.join(out_dir, 'landscape_1d.png'))
        ]
    else:
        a, b = landscape.coords
        files = [
            instruments.landscape_contour(a, b, landscape.losses,
                                          osp.join(out_dir, 'landscape_contour.png')),
            instruments.landscape_surface(a, b, landscape.losses,
                                          osp.join(out_dir, 'landscape_surface.png'))
        ]
    result['figures'] = [osp.basename(f) for f in files]
    path = dump_json(result, osp.join(out_dir, 'landscape.json'))
    numbers = [v for v in landscape.losses.flatten().tolist() if v == v]
    print(f'loss at the weights {centre:.4g}; over the grid {min(numbers):.4g} .. '
          f'{max(numbers):.4g}')
    print(f'wrote {path} and {len(files)} figure{"s" if len(files) > 1 else ""} to {out_dir}')
    return result


if __name__ == '__main__':
    run_tool(main)
