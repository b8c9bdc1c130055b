#!/usr/bin/env python
"""Feature-map variance along the depth of a trained network (docs/methods.md §12).

    python tools/analysis/feature_variance.py CONFIG CHECKPOINT [--num-batches N]
                                              [--split test] [--level branch|block]
                                              [--device cuda] [--out-dir DIR]
                                              [--cfg-options k=v ...]

As in "How Do Vision Transformers Work?" (Fig. 9, D.1: MSAs reduce the variance of feature
map points, Convs and MLPs increase it): records the trajectory of the backbone's residual
steps on the first N batches (eval mode, test pipeline) and, for the input of the first step,
every projected shortcut (subsampling) and the state after every step, the variance over
positions per channel averaged over channels (class tokens left out). Writes

* ``feature_variance.json``: per state its kind (``input``, ``shortcut``, ``block``, ``msa``,
  ``mlp``), whether it follows an MSA, its stage, and the mean and std of the variance over the
  samples; per stage its states and the variance at its end;
* ``feature_variance.png``: variance against the normalised depth, MSA steps shaded grey and
  subsampling states blue (Fig. 9).
"""
import functools
import os.path as osp

from mmstiff.apis.analysis_output import dump_json, finite
from mmstiff.apis.analysis_setup import instrument_setup
from mmstiff.apis.batches import preprocessed_batches
from mmstiff.apis.cli import add_instrument_args, analysis_parser
from mmstiff.apis.trained_model import backbone_of
from mmstiff.tool_main import run_tool


def parse_args(argv=None):
    parser = analysis_parser(__doc__.strip().splitlines()[0])
    add_instrument_args(parser)
    parser.add_argument(
        '--level', choices=('branch', 'block'), default='branch',
        help='transformer layers as their MSA and MLP steps (branch, default) '
        'or as one step (block)')
    return parser.parse_args(argv)


def is_msa_step(backbone, state):
    """Whether a state follows a multi-head self-attention step: the MSA branch of a
    transformer layer, or a residual block (not a transformer layer) holding an attention
    module, such as AlterNet's MSA blocks."""
    from mmstiff.analysis import block_kind
    if state.kind == 'msa':
        return True
    if state.kind != 'block':
        return False
    block = backbone.get_submodule(state.step)
    if block_kind(block) == 'transformer':
        return False
    return any('attention' in type(m).__name__.lower() or 'msa' in type(m).__name__.lower()
               for m in block.modules())


def analyse(backbone, batches, level):
    import torch

    from mmstiff.analysis import TrajectoryRecorder, stage_of
    from mmstiff.analysis.feature_variance import step_variance, variance_trajectory
    extra = int(getattr(backbone, 'num_extra_tokens', 0) or 0)
    recorder = TrajectoryRecorder(backbone, level=level,
                                  reduce=functools.partial(step_variance, num_extra_tokens=extra))
    with torch.no_grad(), recorder:
        for data in batches:
            backbone(data['inputs'])
    trajectory = variance_trajectory(recorder.outputs)
    states, stages = {}, {}
    for name, state in trajectory.items():
        v = state.variance
        stage = 'input' if state.kind == 'input' else (stage_of(state.step) or 'network')
        states[name] = dict(kind=state.kind, step=state.step, stage=stage,
                            msa=is_msa_step(backbone, state), variance=finite(v.mean()),
                            variance_std=finite(v.std()) if v.numel() > 1 else None)
        stages.setdefault(stage, []).append(name)
    per_stage = {
        stage: dict(states=names, end_variance=states[names[-1]]['variance'])
        for stage, names in stages.items()
    }
    num_samples = int(next(iter(trajectory.values())).variance.numel()) if trajectory else 0
    return states, per_stage, num_samples, extra


def main(argv=None):
    args = parse_args(argv)
    cfg, model, loader, out_dir, device = instrument_setup(args, 'feature_variance')
    backbone = backbone_of(model)
    states, stages, num_samples, extra = analyse(
        backbone, preprocessed_batches(model, loader, args.num_batches, False), args.level)
    result = dict(config=args.config, checkpoint=args.checkpoint, split=args.split,
                  device=str(device), level=args.level, num_samples=num_samples,
                  num_extra_tokens=extra, states=states, stages=stages)
    from mmstiff.visualization import instruments
    names = list(states)
    files = [
        instruments.feature_variance(
            names, [
                states[n]['variance'] if states[n]['variance'] is not None else float('nan')
                for n in names
            ], osp.join(out_dir,
                        'feature_variance.png'), msa={n
                                                      for n in names if states[n]['msa']},
            subsampling={n
                         for n in names if states[n]['kind'] == 'shortcut'})
    ]
    result['figures'] = [osp.basename(f) for f in files]
    path = dump_json(result, osp.join(out_dir, 'feature_variance.json'))
    print('variance at the end of each stage: ' +
          '  '.join(f'{k}: {v["end_variance"]:.4g}'
                    for k, v in stages.items() if v['end_variance'] is not None))
    print(f'wrote {path} and {len(files)} figure to {out_dir}')
    return result


if __name__ == '__main__':
    run_tool(main)
