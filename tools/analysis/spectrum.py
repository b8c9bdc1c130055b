#!/usr/bin/env python
"""Fourier diagnostics of a trained network's trajectory (docs/methods.md §8).

    python tools/analysis/spectrum.py CONFIG CHECKPOINT [--out-dir DIR] [--num-batches N]
                                      [--split test] [--convention {exact,paper}]
                                      [--device cpu] [--to-visualizer] [--cfg-options k=v ...]

For the input of the first residual step and the state after every step (the MSA and MLP
steps of transformer layers separately) writes

* ``spectrum.json``: high-frequency ratio ||HC[X]||/||X||, Δ log amplitude at 1.0π and the full
  relative log-amplitude profile; for transformers also the token cosine similarity M_feat, and
  per layer the attention-column cosine similarity M_attn and the spectral response ||Λ_i|| of
  the attention maps;
* ``dlogamp_profiles.png`` (How-do-ViTs paper, Fig. 2a), ``dlogamp_per_block.png`` (Fig. 8, MSA
  steps shaded), ``hf_ratio_per_block.png`` (anti-oversmoothing Fig. 11), and for transformers
  ``attention_spectra.png`` (Fig. 2, 5) and ``cosine_similarity.png`` (Fig. 4).

``--convention paper`` takes the profile's points and labels as the authors' notebook does
(on even-sized maps its "1.0π" is the bin ``(1 - 2 / size)π``; docs/methods.md §8).
"""
import math
import os.path as osp

from mmstiff.apis.analysis_output import dump_json, finite, send_figures
from mmstiff.apis.analysis_setup import setup
from mmstiff.apis.batches import iterate
from mmstiff.apis.block_types_arg import block_types_for
from mmstiff.apis.cli import (add_block_types_arg, add_device_arg, add_visualizer_arg,
                              analysis_parser)
from mmstiff.apis.trained_model import backbone_of
from mmstiff.tool_main import run_tool

INPUT = 'input'


class StateStats:
    """Running sums over samples of one state's diagnostics."""

    def __init__(self, convention='exact'):
        self.convention = convention
        self.count = 0
        self.hf = 0.0
        self.cos = 0.0
        self.cos_count = 0
        self.spectrum = None
        self.spectrum_count = 0

    def add(self, x, num_extra_tokens, grid):
        from mmstiff.analysis import (high_frequency_ratio, log_amplitude_spectrum,
                                      token_cosine_similarity, tokens_to_maps)
        b = x.shape[0]
        self.count += b
        self.hf += float(high_frequency_ratio(x).double().sum())
        maps = x if x.dim() == 4 else None
        if x.dim() == 3:
            self.cos += float(token_cosine_similarity(x).sum())
            self.cos_count += b
            if grid is not None and x.shape[1] - num_extra_tokens == grid[0] * grid[1]:
                maps = tokens_to_maps(x, num_extra_tokens, grid)
        if maps is not None and maps.shape[-1] == maps.shape[-2] and maps.shape[-1] > 1:
            spec = log_amplitude_spectrum(maps).double() * b
            self.spectrum = spec if self.spectrum is None else self.spectrum + spec
            self.spectrum_count += b

    def result(self):
        from mmstiff.analysis.frequency import diagonal_frequencies, diagonal_indices
        out = dict(hf_ratio=finite(self.hf / self.count))
        if self.cos_count:
            out['token_cos'] = finite(self.cos / self.cos_count)
        if self.spectrum is not None:
            spectrum = self.spectrum / self.spectrum_count
            size = spectrum.shape[-1]
            idx = diagonal_indices(size, self.convention)
            diag = spectrum[idx, idx]
            profile = diag - diag[0]
            out['freqs'] = [float(f) for f in diagonal_frequencies(size, self.convention)]
            out['profile'] = [float(v) for v in profile]
            out['dlogamp'] = float(profile[-1])
        return out


def _grid(backbone):
    grid = getattr(backbone, 'patch_resolution', None)
    return tuple(grid) if isinstance(grid, (tuple, list)) and len(grid) == 2 else None


def analyse(model, batches, convention='exact', block_types=None):
    import torch

    from mmstiff.analysis import (AttentionRecorder, TrajectoryRecorder,
                                  attention_column_cosine_similarity, attention_spectral_response)
    backbone = backbone_of(model)
    extra = getattr(backbone, 'num_extra_tokens', 0)
    extra = extra if isinstance(extra, int) else 0
    grid = _grid(backbone)
    stats = {}
    first = []

    def reduce(record):
        if not first:
            first.append(record.name)
        if record.name == first[0]:
            stats.setdefault(INPUT, StateStats(convention)).add(record.x_t, extra, grid)
        stats.setdefault(record.name, StateStats(convention)).add(record.x_next, extra, grid)

    attention = {}

    def reduce_attention(name, attn):
        entry = attention.setdefault(name, dict(count=0, cos=0.0, response=None))
        b = attn.shape[0]
        entry['count'] += b
        entry['cos'] += float(attention_column_cosine_similarity(attn).sum())
        response = attention_spectral_response(attn).mean(dim=1).sum(dim=0)  # heads, samples
        entry['response'] = response if entry['response'] is None else entry['response'] + response

    recorders = [
        TrajectoryRecorder(backbone, reduce=reduce, level='branch', block_types=block_types)
    ]
    try:
        recorders.append(AttentionRecorder(backbone, reduce=reduce_attention))
    except ValueError:
        pass  # no transformer layers
    with torch.no_grad():
        for r in recorders:
            r.start()
        try:
            for inputs, _ in batches:
                backbone(inputs)
        finally:
            for r in recorders:
                r.stop()
    states = {name: s.result() for name, s in stats.items()}
    layers = {
        name:
        dict(
            attn_cos=finite(e['cos'] / e['count']),
            spectral_response=[float(v) for v in e['response'] / e['count']])
        for name, e in attention.items()
    }
    return states, layers


def plot(out_dir, states, layers):
    from mmstiff.visualization import plots
    names = list(states)
    files = [
        plots.per_block_lines(
            names, {'||HC[X]|| / ||X||': [states[n]['hf_ratio'] or math.nan for n in names]},
            osp.join(out_dir, 'hf_ratio_per_block.png'), ylabel='high-frequency ratio (fraction)',
            title='High-frequency ratio of the state after each step')
    ]
    with_profile = [n for n in names if 'profile' in states[n]]
    if with_profile:
        files.append(
            plots.frequency_profiles({n: states[n]['freqs']
                                      for n in with_profile},
                                     {n: states[n]['profile']
                                      for n in with_profile},
                                     osp.join(out_dir, 'dlogamp_profiles.png')))
        files.append(
            plots.per_block_lines(
                with_profile,
                {'Δ log amplitude at 1.0π': [states[n]['dlogamp'] for n in with_profile]},
                osp.join(out_dir, 'dlogamp_per_block.png'), ylabel='Δ log amplitude (log units)',
                hline=0.0, title='High-frequency (1.0π) log amplitude relative to DC'))
    if layers:
        files.append(
            plots.attention_spectra({
                n: v['spectral_response']
                for n, v in layers.items()
            }, osp.join(out_dir, 'attention_spectra.png')))
        token_states = [n for n in names if 'token_cos' in states[n]]
        layer_names = list(layers)
        series = {}
        # M_feat of each layer's output (the state after its MLP step) next to M_attn
        outputs = [n for n in token_states if not n.endswith('.msa')]
        by_layer = {n[:-4] if n.endswith('.mlp') else n: states[n]['token_cos'] for n in outputs}
        series['M_feat (tokens, layer output)'] = [by_layer.get(n, math.nan) for n in layer_names]
        series['M_attn (attention columns)'] = [layers[n]['attn_cos'] for n in layer_names]
        files.append(
            plots.per_block_lines(layer_names, series, osp.join(out_dir, 'cosine_similarity.png'),
                                  ylabel='mean |cosine similarity|',
                                  title='Token and attention similarity per layer',
                                  xlabel='transformer layer'))
    return files


def main(argv=None):
    parser = analysis_parser(__doc__.strip().splitlines()[0])
    add_device_arg(parser)
    add_visualizer_arg(parser)
    parser.add_argument(
        '--convention', choices=('exact', 'paper'), default='exact',
        help="diagonal of the log-amplitude profile: 'exact' ends at the "
        "Nyquist bin 1.0π (default), 'paper' takes the How-do-ViTs authors' "
        'points and labels (docs/methods.md §8)')
    add_block_types_arg(parser)
    args = parser.parse_args(argv)
    cfg, model, loader, out_dir = setup(args, 'spectrum')
    states, layers = analyse(model, iterate(model, loader, args.num_batches), args.convention,
                             block_types_for(args, cfg))
    files = plot(out_dir, states, layers)
    result = dict(config=args.config, checkpoint=args.checkpoint, split=args.split,
                  convention=args.convention, states=states, attention=layers,
                  figures=[osp.basename(f) for f in files])
    path = dump_json(result, osp.join(out_dir, 'spectrum.json'))
    send_figures(args, cfg, files, 'spectrum')
    dla = [(n, s['dlogamp']) for n, s in states.items() if 'dlogamp' in s]
    if dla:
        print('Δ log amplitude at 1.0π: ' + '  '.join(f'{n}: {v:.3f}' for n, v in dla))
    print(f'wrote {path} and {len(files)} figures to {out_dir}')
    return result


if __name__ == '__main__':
    run_tool(main)
