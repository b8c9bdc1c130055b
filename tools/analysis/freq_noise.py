#!/usr/bin/env python
"""Accuracy drop of a classifier under frequency-band noise (How-do-ViTs paper, Fig. 2b;
docs/methods.md §8).

    python tools/analysis/freq_noise.py CONFIG CHECKPOINT [--out-dir DIR] [--num-batches N]
        [--freqs 0 0.1 ... 1.0] [--eps 0.1] [--width 0.1] [--seed 0]
        [--convention {exact,paper}] [--device cpu] [--to-visualizer] [--cfg-options k=v ...]

Adds ``Re(F^{-1}(M_f ⊙ F(ε · sign(N(0, 1)))))`` to the preprocessed (normalised) images, one
band of width ``--width`` (units of π) around each frequency of ``--freqs``, and measures the
top-1 accuracy against the clean images on the same batches. Writes ``freq_noise.json`` and
``freq_noise.png``. Classification models (mmpretrain) only. ``--convention paper`` draws the
bands as the authors' ``FreqAttack`` does (floor-rounded centred squares, even square images
only; docs/methods.md §8).
"""
import os.path as osp
import sys

from mmstiff.apis.analysis_output import dump_json, send_figures
from mmstiff.apis.analysis_setup import setup
from mmstiff.apis.batches import iterate
from mmstiff.apis.cli import add_device_arg, add_visualizer_arg, analysis_parser
from mmstiff.tool_main import run_tool

DEFAULT_FREQS = [round(0.1 * i, 1) for i in range(11)]


def _correct(model, inputs, data_samples):
    import torch
    predictions = model(inputs, data_samples, mode='predict')
    pred = torch.stack([p.pred_label.reshape(-1)[0] for p in predictions])
    gt = torch.stack([p.gt_label.reshape(-1)[0] for p in predictions])
    return int((pred == gt).sum())


def analyse(model, batches, freqs, eps, width, seed, convention='exact'):
    import torch

    from mmstiff.analysis import frequency_band_mask, frequency_band_noise
    generator = torch.Generator().manual_seed(seed)
    total, clean = 0, 0
    noisy = [0] * len(freqs)
    bins = None
    with torch.no_grad():
        for inputs, data_samples in batches:
            if bins is None:
                h, w = inputs.shape[-2:]
                bins = [int(frequency_band_mask(h, w, f, width, convention).sum()) for f in freqs]
            total += inputs.shape[0]
            clean += _correct(model, inputs, data_samples)
            for i, freq in enumerate(freqs):
                # drawn on the CPU, so that --seed gives the same noise on every device
                noise = frequency_band_noise(inputs.shape, freq, eps, width, generator,
                                             dtype=inputs.dtype,
                                             convention=convention).to(inputs.device)
                noisy[i] += _correct(model, inputs + noise, data_samples)
    clean_acc = 100.0 * clean / total
    bands = [
        dict(freq=f, num_bins=n, accuracy=100.0 * c / total, drop=clean_acc - 100.0 * c / total)
        for f, n, c in zip(freqs, bins, noisy)
    ]
    return dict(num_samples=total, clean_accuracy=clean_acc, bands=bands)


def main(argv=None):
    parser = analysis_parser(__doc__.strip().splitlines()[0])
    add_device_arg(parser)
    add_visualizer_arg(parser)
    parser.add_argument('--freqs', type=float, nargs='+', default=DEFAULT_FREQS,
                        help='band centres in units of π, each in [0, 1]')
    parser.add_argument('--eps', type=float, default=0.1,
                        help='amplitude of the sign noise on the normalised images')
    parser.add_argument('--width', type=float, default=0.1, help='band width in units of π')
    parser.add_argument('--seed', type=int, default=0)
    parser.add_argument(
        '--convention', choices=('exact', 'paper'), default='exact',
        help="frequency bands: 'exact' Chebyshev-radius bands (default) or "
        "'paper', the How-do-ViTs authors' floor-rounded centred squares "
        '(docs/methods.md §8)')
    args = parser.parse_args(argv)
    for f in args.freqs:
        if not 0.0 <= f <= 1.0:
            parser.error(f'--freqs holds {f}; expected values in [0, 1] (units of π)')
    if args.eps < 0 or args.width <= 0:
        parser.error(f'--eps {args.eps} / --width {args.width}: expected eps >= 0, width > 0')
    cfg, model, loader, out_dir = setup(args, 'freq_noise')
    if cfg.default_scope != 'mmpretrain':
        sys.exit('error: freq_noise.py measures top-1 accuracy; it needs a classification '
                 f'(mmpretrain) config, got default_scope={cfg.default_scope!r}')
    result = analyse(model, iterate(model, loader, args.num_batches), args.freqs, args.eps,
                     args.width, args.seed, args.convention)
    result.update(config=args.config, checkpoint=args.checkpoint, split=args.split, eps=args.eps,
                  width=args.width, seed=args.seed, convention=args.convention)

    from mmstiff.visualization import plots
    figure = plots.noise_robustness(
        [b['freq'] for b in result['bands']],
        {f'ε = {args.eps}, band width {args.width}π': [b['drop'] for b in result['bands']]},
        osp.join(out_dir, 'freq_noise.png'),
        title=f'Accuracy drop under frequency-band noise (clean {result["clean_accuracy"]:.1f}%)')
    result['figures'] = [osp.basename(figure)]
    path = dump_json(result, osp.join(out_dir, 'freq_noise.json'))
    send_figures(args, cfg, [figure], 'freq_noise')
    print(f'clean top-1 {result["clean_accuracy"]:.2f}%; drop per band: ' +
          '  '.join(f'{b["freq"]:.1f}π: {b["drop"]:+.2f}' for b in result['bands']))
    print(f'wrote {path} and {figure}')
    return result


if __name__ == '__main__':
    run_tool(main)
