#!/usr/bin/env python
"""Hessian max-eigenvalue spectrum of a trained network's training loss (docs/methods.md §12).

    python tools/analysis/hessian.py CONFIG CHECKPOINT [--num-batches N] [--batch-size 16]
                                     [--top-k 5] [--most-negative] [--method power|lanczos]
                                     [--max-iter 100] [--tol 1e-3] [--lanczos-steps 50]
                                     [--trace-samples N] [--density-runs N]
                                     [--density-steps 100]
                                     [--mode eval|train] [--weight-decay W]
                                     [--split train] [--device cuda] [--seed 0]
                                     [--out-dir DIR] [--cfg-options k=v ...]

As in "How Do Vision Transformers Work?" (Fig. 4, Appendix A): on each of N batches of 16
images of the training split, drawn through the config's *training* pipeline and the data
preprocessor's batch augments (measuring on clean data "would give incorrect results"), the
top-k eigenvalues (largest magnitude) of the Hessian of the training loss plus the l2 term
Σ λ/2 ||w||² of the config's weight decay, by power iteration on Hessian-vector products
(the paper's PyHessian algorithm; ``--method lanczos`` ranks the Ritz values of a Lanczos run
instead, which separates a leading positive and negative eigenvalue of near-equal magnitude
that power iteration mixes; see docs/methods.md §12). Writes

* ``hessian.json``: per batch the eigenvalues, the most negative eigenvalue (with
  ``--most-negative``), the loss, the products spent and whether every power iteration met its
  stopping rule (``converged``); over all batches the spectrum (every
  eigenvalue), its histogram density, NEP (negative max-eigenvalue proportion) and APE (average
  positive max eigenvalue) of Appendix C.5;
  with ``--trace-samples N``, per batch Hutchinson's estimate of the Hessian's trace from N
  Rademacher vectors and its standard error, and their mean; with ``--density-runs N``, per
  batch the nodes and weights of stochastic Lanczos quadrature (N runs of ``--density-steps``
  Lanczos steps) and over all batches the smoothed density of the whole spectrum on a grid
  (PyHessian's trace and density);
* ``hessian_spectrum.png``: the density of the max eigenvalues over the batches.
"""
import os.path as osp

from mmstiff.apis.analysis_output import dump_json, finite
from mmstiff.apis.analysis_setup import instrument_setup
from mmstiff.apis.batches import preprocessed_batches
from mmstiff.apis.cli import add_instrument_args, add_loss_args, analysis_parser, positive_int
from mmstiff.apis.training_loss import decay_summary, training_loss, weight_decays
from mmstiff.tool_main import run_tool

BATCH_SIZE = 16  # the paper's
BINS = 40
#: the most points of the smoothed density's grid
MAX_DENSITY_POINTS = 200_000


def parse_args(argv=None):
    parser = analysis_parser(__doc__.strip().splitlines()[0], num_batches=10)
    parser.set_defaults(batch_size=BATCH_SIZE)
    add_instrument_args(parser)
    add_loss_args(parser)
    parser.add_argument(
        '--top-k', type=positive_int, default=5,
        help='eigenvalues of largest magnitude per batch (default 5, the '
        "paper's)")
    parser.add_argument(
        '--most-negative', action='store_true',
        help='also find the most negative eigenvalue of each batch (power '
        'iteration on H - |λ_1| I)')
    parser.add_argument(
        '--method', choices=('power', 'lanczos'), default='power',
        help="power iteration with deflation (default, the paper's) or the "
        'Ritz values of a Lanczos run')
    parser.add_argument(
        '--max-iter', type=positive_int, default=100,
        help='power: Hessian-vector products per eigenvalue at most (default '
        '100)')
    parser.add_argument(
        '--tol', type=float, default=1e-3,
        help='power: relative change at which an eigenvalue has converged '
        '(default 1e-3)')
    parser.add_argument(
        '--lanczos-steps', type=positive_int, default=50,
        help='lanczos: steps (products) per batch; keeps that many vectors of '
        'the size of the model in memory (default 50)')
    parser.add_argument(
        '--trace-samples', type=int, default=0,
        help="Hutchinson's trace from this many Rademacher vectors per batch "
        '(default 0: none)')
    parser.add_argument(
        '--density-runs', type=int, default=0,
        help='stochastic Lanczos quadrature runs per batch for the density of '
        'the whole spectrum (default 0: none)')
    parser.add_argument('--density-steps', type=positive_int, default=100,
                        help='Lanczos steps per quadrature run (default 100, PyHessian\'s)')
    args = parser.parse_args(argv)
    for flag in ('trace_samples', 'density_runs'):
        if getattr(args, flag) < 0:
            parser.error(f'--{flag.replace("_", "-")} {getattr(args, flag)} is negative; '
                         'expected 0 (off) or a positive count')
    if not args.tol > 0:
        parser.error(f'--tol {args.tol} is not positive')
    if args.method == 'lanczos' and args.lanczos_steps < args.top_k:
        parser.error(f'--lanczos-steps {args.lanczos_steps} is smaller than --top-k '
                     f'{args.top_k}')
    return args


def analyse(args, model, batches, decays):
    import torch

    from mmstiff.analysis.hessian import double_backward_kernels, hessian_eigenvalues
    from mmstiff.analysis.landscape import l2_penalty, preserved_buffers
    params = [p for p in model.parameters() if p.requires_grad]
    model.train(args.mode == 'train')
    generator = torch.Generator().manual_seed(args.seed)
    results = []
    for data in batches:
        with preserved_buffers(model), double_backward_kernels(model):
            loss = training_loss(model, data) + l2_penalty(params, decays)
            found = hessian_eigenvalues(loss, params, args.top_k, args.most_negative, args.max_iter,
                                        args.tol, generator, args.method, args.lanczos_steps)
        entry = dict(eigenvalues=[finite(v) for v in found.values], loss=finite(loss.detach()),
                     products=found.iterations, converged=found.converged)
        if args.most_negative:
            entry['most_negative'] = finite(found.most_negative)
        if args.trace_samples or args.density_runs:
            with preserved_buffers(model), double_backward_kernels(model):
                entry.update(whole_spectrum(args, model, data, params, decays, generator))
        results.append(entry)
    model.eval()
    return results


def whole_spectrum(args, model, data, params, decays, generator):
    """Hutchinson's trace and the quadrature of stochastic Lanczos quadrature on one batch."""
    from mmstiff.analysis.hessian import loss_hessian
    from mmstiff.analysis.hessian_density import hutchinson_trace, slq_density
    from mmstiff.analysis.landscape import l2_penalty
    loss = training_loss(model, data) + l2_penalty(params, decays)
    matvec, dim = loss_hessian(loss.reshape(()), params)
    dtype, device = params[0].dtype, params[0].device
    entry = {}
    if args.trace_samples:
        trace = hutchinson_trace(matvec, dim, args.trace_samples, generator, dtype, device)
        entry.update(trace=finite(trace.trace), trace_std_error=finite(trace.std_error))
    if args.density_runs:
        density = slq_density(matvec, dim, args.density_runs, args.density_steps, generator, dtype,
                              device)
        entry['quadrature'] = dict(nodes=[t.tolist() for t in density.nodes],
                                   weights=[w.tolist() for w in density.weights])
    return entry


def density_summary(results, points=1000):
    """The quadratures of every batch pooled into one smoothed density on a grid."""
    import torch

    from mmstiff.analysis.hessian_density import SpectralDensity, density_on_grid, smoothing_width
    nodes = [
        torch.tensor(n, dtype=torch.float64) for r in results
        for n in r.get('quadrature', {}).get('nodes', [])
    ]
    weights = [
        torch.tensor(w, dtype=torch.float64) for r in results
        for w in r.get('quadrature', {}).get('weights', [])
    ]
    if not nodes:
        return None
    density = SpectralDensity(nodes, weights, 0)
    sigma = smoothing_width(density)
    theta = torch.cat(nodes)
    # 5 σ beyond the extreme nodes, and at least 4 points per σ, so that the grid holds the
    # whole mass of every Gaussian
    low, high = float(theta.min()) - 5 * sigma, float(theta.max()) + 5 * sigma
    points = min(MAX_DENSITY_POINTS, max(points, int(4 * (high - low) / sigma) + 1))
    grid = torch.linspace(low, high, points, dtype=torch.float64)
    return dict(sigma=sigma, grid=grid.tolist(), density=density_on_grid(density, grid,
                                                                         sigma).tolist())


def spectrum_summary(results, bins=BINS):
    import torch

    from mmstiff.analysis.hessian import average_positive_eigenvalue, negative_eigenvalue_proportion
    values = [v for r in results for v in r['eigenvalues'] if v is not None]
    summary = dict(values=values, nep=finite(negative_eigenvalue_proportion(values)),
                   ape=finite(average_positive_eigenvalue(values)))
    if values:
        t = torch.tensor(values, dtype=torch.float64)
        summary.update(max=float(t.max()), min=float(t.min()), mean=float(t.mean()))
        low, high = float(t.min()), float(t.max())
        if low == high:
            low, high = low - 0.5 * (abs(low) or 1.0), high + 0.5 * (abs(high) or 1.0)
        counts = torch.histc(t, bins=bins, min=low, max=high)
        width = (high - low) / bins
        summary['histogram'] = dict(
            edges=torch.linspace(low, high, bins + 1, dtype=torch.float64).tolist(),
            density=(counts.double() / (counts.sum() * width)).tolist())
    traces = [r['trace'] for r in results if r.get('trace') is not None]
    if traces:
        summary['trace'] = dict(values=traces, mean=sum(traces) / len(traces))
    density = density_summary(results)
    if density is not None:
        summary['density'] = density
    lowest = [r['most_negative'] for r in results if r.get('most_negative') is not None]
    if lowest:
        summary['most_negative'] = dict(values=lowest, min=min(lowest),
                                        mean=sum(lowest) / len(lowest))
    return summary


def main(argv=None):
    args = parse_args(argv)
    cfg, model, loader, out_dir, device = instrument_setup(args, 'hessian')
    params = [p for p in model.parameters() if p.requires_grad]
    decays = weight_decays(cfg, model, params, args.weight_decay)
    training = args.split == 'train'
    results = analyse(args, model, preprocessed_batches(model, loader, args.num_batches, training),
                      decays)
    summary = spectrum_summary(results)
    result = dict(config=args.config, checkpoint=args.checkpoint, split=args.split,
                  augmented=training, batch_size=loader.batch_size, mode=args.mode,
                  device=str(device), top_k=args.top_k, method=args.method, max_iter=args.max_iter,
                  tol=args.tol, lanczos_steps=args.lanczos_steps, trace_samples=args.trace_samples,
                  density_runs=args.density_runs, density_steps=args.density_steps,
                  num_params=sum(p.numel() for p in params), weight_decays=decay_summary(decays),
                  batches=results, spectrum=summary)
    from mmstiff.visualization import instruments
    label = f'NEP {summary["nep"]:.3g}, APE {summary["ape"] or float("nan"):.4g}' \
        if summary['nep'] is not None else 'eigenvalues'
    files = [
        instruments.eigenvalue_spectrum({label: summary['values']},
                                        osp.join(out_dir, 'hessian_spectrum.png'),
                                        title=f'Hessian max-eigenvalue spectrum (top-{args.top_k}, '
                                        f'{len(results)} batches of {loader.batch_size})')
    ]
    result['figures'] = [osp.basename(f) for f in files]
    path = dump_json(result, osp.join(out_dir, 'hessian.json'))
    print(f'max eigenvalue {summary.get("max")}, NEP {summary["nep"]}, APE {summary["ape"]}')
    unconverged = sum(not r['converged'] for r in results)
    if unconverged:
        print(f'{unconverged} of {len(results)} batches did not converge within --max-iter '
              f'{args.max_iter}')
    print(f'wrote {path} and {len(files)} figure to {out_dir}')
    return result


if __name__ == '__main__':
    run_tool(main)
