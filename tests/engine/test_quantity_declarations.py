"""Every key the diagnostics hooks log is declared in ``mmstiff/analysis/quantities.py``, and
every declaration is a key some hook logs; the readers (collector, figures, dashboard,
plot_logs.py, the docs' table) take their names from those declarations."""
import glob
import os.path as osp
import runpy

import pytest
import torch
from diagnostics_toy import ToyClassifier, read_json_lines, tiny_backbone, toy_loader
from hook_scalars import hook_outputs  # tests/
from mmengine.runner import Runner

from mmstiff.analysis.quantities import (BY_GROUP, QUANTITIES, declaration_of, markdown_table,
                                         of_hook)

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
#: what MMEngine itself writes to scalars.json on a training run without validation
MMENGINE_KEYS = {'loss', 'lr', 'base_lr', 'time', 'data_time', 'memory', 'step', 'iter', 'epoch'}


def undeclared(keys):
    """The logged keys no declaration matches."""
    return sorted(k for k in keys if declaration_of(k) is None)


def _trained_keys(work_dir):
    """Every key of scalars.json after 2 iterations of a CIFAR StepNet ResNet with the three
    hooks on every iteration (the Hessian's with two eigenvalues and the most negative)."""
    torch.manual_seed(0)
    backbone = tiny_backbone(depth=18, channels=4, adaptor=dict(type='mmstiff.StepNetAdaptor'))
    with torch.no_grad():  # Δ varies over the samples: its correlation with the NSI is defined
        for name, p in backbone.named_parameters():
            if 'adaptor' in name:
                p.add_(0.5 * torch.randn_like(p))
    hooks = [
        dict(type='mmstiff.StiffnessHook', interval=1, dashboard=False),
        dict(type='mmstiff.FrequencyHook', interval=1, num_samples=2, dashboard=False),
        dict(type='mmstiff.HessianHook', interval=2, num_eigs=2, negative=True, max_iter=3),
    ]
    runner = Runner(
        model=ToyClassifier(backbone), work_dir=str(work_dir), train_dataloader=toy_loader(),
        train_cfg=dict(by_epoch=False, max_iters=2),
        optim_wrapper=dict(optimizer=dict(type='SGD', lr=0.0)), custom_hooks=hooks,
        default_hooks=dict(logger=dict(type='LoggerHook', interval=1),
                           checkpoint=None), randomness=dict(seed=0), default_scope='mmengine',
        experiment_name=osp.basename(str(work_dir)))
    runner.train()
    path, = glob.glob(osp.join(runner.log_dir, 'vis_data', 'scalars.json'))
    return {k for row in read_json_lines(path) for k in row} - MMENGINE_KEYS


def _vit_keys():
    """The FrequencyHook's keys on a small ViT: token and attention similarities."""
    from mmpretrain.models.backbones import VisionTransformer

    from mmstiff.engine.hooks import FrequencyHook
    torch.manual_seed(0)
    vit = VisionTransformer(
        arch=dict(embed_dims=32, num_layers=2, num_heads=2, feedforward_channels=64), img_size=32,
        patch_size=8)
    vit.eval()  # mmpretrain's train() override returns None
    hook = FrequencyHook(interval=1, num_samples=2)
    scalars = hook.summarise(hook_outputs(hook, vit, torch.randn(2, 3, 32, 32)))
    return {f'{hook.prefix}/{k}' for k in scalars}


def test_every_logged_key_is_declared_and_every_declaration_logged(tmp_path):
    keys = _trained_keys(tmp_path) | _vit_keys()
    assert undeclared(keys) == []
    logged = {declaration_of(k).key for k in keys}
    assert [q.key for q in QUANTITIES if q.key not in logged] == []
    # the hook a key is declared with is the hook that logged it: its namespace
    for key in keys:
        assert key.split('/')[0] == declaration_of(key).namespace


def test_an_undeclared_key_is_found():
    assert undeclared([
        'stiffness/nsi/layer1.0', 'stiffness/curvature/layer1.0', 'hessian/eigenvalue_2',
        'hessian/eigenvalue_x', 'freq/hf_ratio/input'
    ]) == ['hessian/eigenvalue_x', 'stiffness/curvature/layer1.0']
    # a group's name alone, or a step name with another component, is no logged key
    assert declaration_of('stiffness/nsi') is None
    assert declaration_of('stiffness/nsi/layer1.0/x') is None


def test_declarations_are_well_formed():
    keys = [q.key for q in QUANTITIES]
    assert len(set(keys)) == len(keys) and len(BY_GROUP) == len(QUANTITIES)
    for q in QUANTITIES:
        assert q.strip in (None, 'log', 'linear', 'gain'), q.key
        assert q.section.startswith(('docs/methods.md §', 'StepNet paper')), q.key
        # per-stage means and last-state values are taken from a study profile
        assert not (q.stage_means or q.last_state) or q.profile, q.key
        assert not q.figure or q.along in ('step', 'state'), q.key
    hooks = ('StiffnessHook', 'FrequencyHook', 'HessianHook')
    assert sum(len(of_hook(h)) for h in hooks) == len(QUANTITIES)
    assert {q.namespace for q in of_hook('StiffnessHook')} == {'stiffness'}


def test_the_readers_take_the_declarations():
    from mmstiff.studies import collect
    from mmstiff.visualization import dashboard, study_figures
    assert collect.BLOCK_GROUPS['stiffness/nsi'] == 'log/nsi'
    assert collect.STAGE_MEAN_GROUPS == ('stiffness/nsi_step_corr', )
    assert set(collect.TRAJECTORY_GROUPS) == {'stiffness/mu', 'stiffness/ratio', 'stiffness/tns'}
    assert [s[0] for s in dashboard.STRIPS] == [q.group for q in QUANTITIES if q.strip]
    sources, label, *_ = study_figures.PROFILE_FIGURES['nsi_per_block.png']
    assert sources == ('tns/nsi', 'log/nsi') and label == BY_GROUP['stiffness/nsi'].label
    plot_logs = runpy.run_path(osp.join(REPO, 'tools', 'analysis', 'plot_logs.py'))
    assert plot_logs['GROUPS']['freq/hf_ratio'] == (BY_GROUP['freq/hf_ratio'].label,
                                                    BY_GROUP['freq/hf_ratio'].title)
    assert 'hessian/loss' not in plot_logs['GROUPS']  # a single scalar, not a per-step group


def test_the_docs_table_is_written_from_the_declarations():
    with open(osp.join(REPO, 'docs', 'diagnostics.md'), encoding='utf-8') as f:
        page = f.read()
    assert markdown_table() in page, 'run python tools/misc/quantity_table.py'
    for q in QUANTITIES:
        assert f'| `{q.key}` |' in page


@pytest.mark.parametrize('key, group', [('stiffness/tns/network', 'stiffness/tns'),
                                        ('hessian/eigenvalue_12', 'hessian/eigenvalue'),
                                        ('hessian/min_eigenvalue', 'hessian/min_eigenvalue'),
                                        ('freq/attn_cos/layers.1', 'freq/attn_cos')])
def test_a_key_finds_its_declaration(key, group):
    assert declaration_of(key).group == group
