#!/usr/bin/env python
"""Total neural stiffness of a trained network over a dataset split (docs/methods.md §5).

    python tools/analysis/tns.py CONFIG CHECKPOINT [--out-dir DIR] [--num-batches N]
                                 [--split test] [--device cpu] [--to-visualizer]
                                 [--cfg-options k=v ...]

Records every residual step of the backbone on the first N batches and writes

* ``tns.json``: per block the mean / std NSI, mean step size and NSI–step correlation; per stage
  and for the whole network μ, the max/mean ratio ζ*/μ and TNS = E[(ζ*/μ - 1) ζ*];
* ``nsi_heatmap.png``: NSI, blocks × samples (StepNet paper, Appendix E, Fig. 3);
* ``nsi_per_block.png``: mean NSI per block, with the mean step size where blocks report one;
* ``tns_per_stage.png``: TNS per stage and for the whole network;
* ``nsi_vs_step.png``: NSI against the mean step size per sample, one colour per block with an
  adaptor (Appendix D), when the network has step-size adaptors.
"""
import os.path as osp

from mmstiff.apis.analysis_output import dump_json, finite, send_figures
from mmstiff.apis.analysis_setup import setup
from mmstiff.apis.batches import iterate
from mmstiff.apis.block_families import block_families, families_label
from mmstiff.apis.block_types_arg import block_types_for
from mmstiff.apis.cli import (add_block_types_arg, add_device_arg, add_visualizer_arg,
                              analysis_parser)
from mmstiff.apis.trained_model import backbone_of
from mmstiff.tool_main import run_tool

HEATMAP_SAMPLES = 64


def analyse(model, batches, block_types=None):
    import torch

    from mmstiff.analysis import (TrajectoryRecorder, mean_step_size, neural_stiffness_index,
                                  nsi_step_correlation, stage_of, stiffness_ratio,
                                  tns_per_trajectory, trajectory_mean)

    def reduce(record):
        nsi = neural_stiffness_index(record.x_t, record.x_next, record.step)
        step = None if record.step is None else mean_step_size(record.step, nsi.shape[0])
        return nsi, step

    backbone = backbone_of(model)
    recorder = TrajectoryRecorder(backbone, reduce=reduce, level='branch', block_types=block_types)
    with torch.no_grad(), recorder:
        for inputs, _ in batches:
            backbone(inputs)
    names = list(recorder.outputs)
    nsi = torch.stack([torch.cat([c[0] for c in recorder.outputs[n]]) for n in names], dim=1).cpu()
    steps = {}
    for name in names:
        calls = recorder.outputs[name]
        if all(c[1] is not None for c in calls):
            steps[name] = torch.cat([c[1] for c in calls]).cpu()

    blocks = {}
    for j, name in enumerate(names):
        entry = dict(
            nsi_mean=finite(nsi[:, j].double().mean()),
            nsi_std=finite(nsi[:, j].double().std()) if len(nsi) > 1 else None)
        if name in steps:
            entry['step_mean'] = finite(steps[name].double().mean())
            entry['nsi_step_corr'] = finite(nsi_step_correlation(nsi[:, j], steps[name]))
        blocks[name] = entry

    groups = {}
    for j, name in enumerate(names):
        groups.setdefault(stage_of(name) or 'network', []).append(j)
    groups['network'] = list(range(len(names)))
    trajectories = {}
    for stage, cols in groups.items():
        zeta = nsi[:, cols].double()
        trajectories[stage] = dict(
            num_steps=len(cols), mu=finite(trajectory_mean(zeta).mean()),
            ratio=finite(stiffness_ratio(zeta).mean()), tns=finite(tns_per_trajectory(zeta).mean()),
            tns_std=finite(tns_per_trajectory(zeta).std()) if len(zeta) > 1 else None)
    families = block_families(recorder)
    for name, entry in blocks.items():
        entry.update(families.get(name.rpartition('.')[0] if name not in families else name, {}))
    return names, nsi, steps, blocks, trajectories


def plot(out_dir, names, nsi, steps, blocks, trajectories):
    from mmstiff.visualization import plots
    files = [
        plots.nsi_heatmap(nsi[:HEATMAP_SAMPLES], names, osp.join(out_dir, 'nsi_heatmap.png'),
                          title=f'NSI per block (first {min(len(nsi), HEATMAP_SAMPLES)} samples)'),
        plots.bar_chart({
            k: v['tns']
            for k, v in trajectories.items() if v['tns'] is not None
        }, osp.join(out_dir, 'tns_per_stage.png'), ylabel='TNS (dimensionless)',
                        title='Total neural stiffness per trajectory'),
    ]
    series = {'mean NSI ζ': [blocks[n]['nsi_mean'] or float('nan') for n in names]}
    if steps:
        series['mean step size Δ'] = [blocks[n].get('step_mean') or float('nan') for n in names]
    files.append(
        plots.per_block_lines(names, series, osp.join(out_dir, 'nsi_per_block.png'),
                              ylabel='value (dimensionless)',
                              title=f'NSI and step size per block ({families_label(blocks)})'))
    adaptive = {
        n: (nsi[:, names.index(n)], s)
        for n, s in steps.items() if float(s.double().std()) > 0
    }
    if adaptive:
        files.append(plots.nsi_step_scatter(adaptive, osp.join(out_dir, 'nsi_vs_step.png')))
    return files


def main(argv=None):
    parser = analysis_parser(__doc__.strip().splitlines()[0])
    add_device_arg(parser)
    add_visualizer_arg(parser)
    add_block_types_arg(parser)
    args = parser.parse_args(argv)
    cfg, model, loader, out_dir = setup(args, 'tns')
    names, nsi, steps, blocks, trajectories = analyse(model, iterate(model, loader,
                                                                     args.num_batches),
                                                      block_types_for(args, cfg))
    result = dict(config=args.config, checkpoint=args.checkpoint, split=args.split,
                  num_samples=int(nsi.shape[0]), blocks=blocks, trajectories=trajectories,
                  network_tns=trajectories['network']['tns'])
    files = plot(out_dir, names, nsi, steps, blocks, trajectories)
    result['figures'] = [osp.basename(f) for f in files]
    path = dump_json(result, osp.join(out_dir, 'tns.json'))
    send_figures(args, cfg, files, 'tns')
    print(f'TNS (network) = {result["network_tns"]}; ' +
          '  '.join(f'{k}: {v["tns"]:.4g}'
                    for k, v in trajectories.items() if v['tns'] is not None))
    print(f'wrote {path} and {len(files)} figures to {out_dir}')
    return result


if __name__ == '__main__':
    run_tool(main)
