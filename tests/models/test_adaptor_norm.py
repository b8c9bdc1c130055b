"""The adaptors keep the backbone's normalisation contract (docs/methods.md §3, "The adaptor's
normalisation"): ``norm_cfg`` (BN, SyncBN, GN), ``norm_eval``, frozen stages, SyncBN conversion.

The first tests port the norm checks of mmpretrain's ``test_resnet`` and mmdet's
``test_resnet_backbone`` to the step backbones with an adaptor in every block.
"""
import json
import logging
import os.path as osp

import pytest
import torch
import torch.nn as nn
from distributed_launch import run_ranks  # tests/
from mmengine.logging import MMLogger
from torch.nn.modules.batchnorm import _BatchNorm

from mmstiff.models.backbones import PreActStepResNet, StepResNet
from mmstiff.models.layers import IEBN, CPUSyncBatchNorm, SyncIEBN
from mmstiff.models.steps import StepAdaptor, StepNetAdaptor, grouped_pointwise

WORKER = osp.join(osp.dirname(osp.abspath(__file__)), 'sync_bn_worker.py')
ADAPTORS = {
    'stepnet': dict(type='mmstiff.StepNetAdaptor'),
    'stepnet-identity': dict(type='mmstiff.StepNetAdaptor', start='identity'),
    'se': dict(type='mmstiff.SEAdaptor'),
}


def det_step_resnet():
    pytest.importorskip('mmdet.models', reason='needs mmdet: pip install "mmstiff[det]"')
    from mmstiff.models.backbones.det_step_resnet import DetStepResNet
    return DetStepResNet


def build(backbone, adaptor, **kwargs):
    """A depth-50 backbone at a small width with ``adaptor`` in every block."""
    if backbone == 'mmpretrain':
        return StepResNet(50, stem_channels=8, base_channels=4, adaptor=adaptor, **kwargs)
    return det_step_resnet()(50, base_channels=4, adaptor=adaptor, **kwargs)


BACKBONES = ['mmpretrain', pytest.param('mmdet', marks=pytest.mark.det)]


def check_norm_state(modules, train_state):
    """Every BN layer in ``train_state`` (the upstream tests' helper)."""
    return all(m.training == train_state for m in modules if isinstance(m, _BatchNorm))


def is_norm(module):
    return isinstance(module, (nn.GroupNorm, _BatchNorm))


def adaptor_norm_layers(model):
    return [a.norm for a in model.modules() if isinstance(a, StepNetAdaptor)]


# ------------------------------------------------------------ upstream's norm contract, ported


@pytest.mark.parametrize('backbone', BACKBONES)
@pytest.mark.parametrize('adaptor', ADAPTORS.values(), ids=ADAPTORS.keys())
def test_norm_eval_puts_every_bn_in_eval_mode(backbone, adaptor):
    model = build(backbone, adaptor, norm_eval=True)
    model.init_weights()
    model.train()
    assert check_norm_state(model.modules(), False)
    assert any(isinstance(m, StepAdaptor) for m in model.modules())


@pytest.mark.parametrize('backbone', BACKBONES)
@pytest.mark.parametrize('adaptor', ADAPTORS.values(), ids=ADAPTORS.keys())
def test_frozen_stages_freeze_the_stem_and_the_adaptors_of_the_stage(backbone, adaptor):
    model = build(backbone, adaptor, frozen_stages=1, norm_eval=False)
    model.init_weights()
    model.train()
    assert model.norm1.training is False
    for layer in (model.conv1, model.norm1):
        assert not any(p.requires_grad for p in layer.parameters())
    for mod in model.layer1.modules():
        if isinstance(mod, _BatchNorm):
            assert mod.training is False
    assert not any(p.requires_grad for p in model.layer1.parameters())
    assert all(m.training for m in model.layer2.modules() if isinstance(m, _BatchNorm))


@pytest.mark.parametrize('backbone', BACKBONES)
@pytest.mark.parametrize('adaptor', ADAPTORS.values(), ids=ADAPTORS.keys())
def test_group_norm_reaches_every_norm_layer_and_runs(backbone, adaptor):
    model = build(backbone, adaptor, norm_eval=False, norm_cfg=dict(type='GN', num_groups=2,
                                                                    requires_grad=True))
    norms = [m for m in model.modules() if is_norm(m)]
    assert norms and all(isinstance(m, nn.GroupNorm) for m in norms)
    if adaptor['type'].endswith('StepNetAdaptor'):
        assert len(adaptor_norm_layers(model)) == 16
    model.init_weights()
    model.train()
    feats = model(torch.randn(1, 3, 32, 32))  # a batch of one: GN needs no batch
    if backbone == 'mmpretrain':  # the last stage only, by default
        assert [tuple(f.shape) for f in feats] == [(1, 128, 1, 1)]
    else:
        assert [tuple(f.shape) for f in feats] == [(1, 16, 8, 8), (1, 32, 4, 4), (1, 64, 2, 2),
                                                   (1, 128, 1, 1)]


@pytest.mark.parametrize('backbone', BACKBONES)
def test_sync_bn_norm_cfg_reaches_the_adaptors(backbone):
    model = build(backbone, ADAPTORS['stepnet'], norm_cfg=dict(type='SyncBN'))
    bns = [m for m in model.modules() if isinstance(m, _BatchNorm)]
    assert all(isinstance(m, nn.SyncBatchNorm) for m in bns)
    assert all(type(m) is CPUSyncBatchNorm for m in adaptor_norm_layers(model))
    # on one process (no process group) SyncBN is plain BN: a train step runs on the CPU
    model.train()
    model(torch.randn(2, 3, 32, 32))


def test_adaptor_norm_cfg_overrides_the_backbone_norm():
    model = StepResNet(18, stem_channels=8, base_channels=8, adaptor=ADAPTORS['stepnet'],
                       adaptor_norm_cfg=dict(type='GN', num_groups=2))
    inside = {id(m) for m in adaptor_norm_layers(model)}
    assert len(inside) == 8
    assert all(isinstance(m, nn.GroupNorm) for m in adaptor_norm_layers(model))
    outside = [m for m in model.modules() if is_norm(m) and id(m) not in inside]
    assert outside and all(type(m) is nn.BatchNorm2d for m in outside)
    # an adaptor built alone keeps the paper's BN
    assert type(StepNetAdaptor(8).norm) is nn.BatchNorm2d


def test_adaptor_norm_cfg_reaches_the_cifar_preact_backbone():
    model = PreActStepResNet(depth=11, base_channels=8, adaptor=ADAPTORS['stepnet'],
                             norm_cfg=dict(type='GN', num_groups=2))
    assert all(isinstance(m, nn.GroupNorm) for m in adaptor_norm_layers(model))
    model = PreActStepResNet(depth=11, base_channels=8, adaptor=ADAPTORS['stepnet'],
                             adaptor_norm_cfg=dict(type='SyncBN'))
    assert all(isinstance(m, nn.SyncBatchNorm) for m in adaptor_norm_layers(model))


def test_group_norm_adaptor_matches_its_formula():
    """Δ = σ(W_IE ⊙ GN(z) + b_IE), GN over the channels of each group of one sample."""
    torch.manual_seed(0)
    adaptor = StepNetAdaptor(8, norm_cfg=dict(type='GN', num_groups=2), ie_weight_init=0.7,
                             ie_bias_init=0.1)
    with torch.no_grad():
        adaptor.norm.weight.uniform_(0.5, 1.5)
        adaptor.norm.bias.uniform_(-0.5, 0.5)
    x_t, f = torch.randn(3, 8, 5, 5), torch.randn(3, 8, 5, 5)
    u = x_t.mean((2, 3))
    v = (x_t + f).mean((2, 3))
    z = grouped_pointwise(u, v, adaptor.conv.weight, 8).detach()  # (3, 8)
    groups = z.view(3, 2, 4)
    mean = groups.mean(-1, keepdim=True)
    var = groups.var(-1, unbiased=False, keepdim=True)
    normed = ((groups - mean) / torch.sqrt(var + 1e-5)).view(3, 8)
    normed = normed * adaptor.norm.weight + adaptor.norm.bias
    expected = torch.sigmoid(0.7 * normed + 0.1)
    for mode in (True, False):  # GN has no batch statistics: train and eval agree
        adaptor.train(mode)
        torch.testing.assert_close(adaptor(x_t, f).detach().view(3, 8), expected.detach())


@pytest.mark.parametrize('norm_cfg, message', [
    (dict(type='IN'), 'InstanceNorm2d normalises each value alone'),
    (dict(type='GN', num_groups=8), 'GroupNorm normalises each value alone'),
    (dict(type='LN'), 'LayerNorm normalises each value alone'),
    ('BN', "norm_cfg='BN' is not supported; expected a dict with a 'type'"),
])
def test_norm_cfg_that_makes_z_constant_is_refused(norm_cfg, message):
    with pytest.raises(ValueError, match=message):
        StepNetAdaptor(8, norm_cfg=norm_cfg)


def test_both_norm_overrides_are_an_error():
    with pytest.raises(ValueError, match='both set the adaptors'):
        StepResNet(18, adaptor=dict(ADAPTORS['stepnet'], norm_cfg=dict(type='BN')),
                   adaptor_norm_cfg=dict(type='SyncBN'))


def test_iebn_follows_bn_and_sync_bn_and_refuses_other_norms():
    assert type(StepNetAdaptor(8, norm='iebn').norm) is IEBN
    # one process: an IEBN (MMEngine would turn a SyncBatchNorm into a plain BN)
    assert type(StepNetAdaptor(8, norm='iebn', norm_cfg=dict(type='SyncBN')).norm) is IEBN
    with pytest.raises(ValueError, match="not supported with norm='iebn'"):
        StepNetAdaptor(8, norm='iebn', norm_cfg=dict(type='GN', num_groups=2))
    model = StepResNet(18, stem_channels=8, base_channels=8,
                       adaptor=dict(ADAPTORS['stepnet'],
                                    norm='iebn'), adaptor_norm_cfg=dict(type='BN', eps=1e-3))
    assert all(type(m) is IEBN and m.eps == 1e-3 for m in adaptor_norm_layers(model))


def test_sync_iebn_on_one_process_equals_iebn():
    torch.manual_seed(1)
    reference = IEBN(6, ie_weight_init=0.3, ie_bias_init=-0.2)
    with torch.no_grad():
        reference.weight.uniform_(0.5, 1.5)
        reference.running_var.uniform_(0.5, 1.5)
    sync = SyncIEBN(6, ie_weight_init=0.3, ie_bias_init=-0.2)
    sync.load_state_dict(reference.state_dict())
    x = torch.randn(4, 6, 3, 3)
    for mode in (True, False):
        reference.train(mode), sync.train(mode)
        torch.testing.assert_close(sync(x), reference(x))
    torch.testing.assert_close(sync.running_mean, reference.running_mean)


# ------------------------------------------------------------------------- SyncBN conversions


def converters():
    from mmengine.model import convert_sync_batchnorm
    return {
        'torch': nn.SyncBatchNorm.convert_sync_batchnorm,
        'mmengine': lambda m: convert_sync_batchnorm(m, implementation='torch')
    }


@pytest.mark.parametrize('converter', ['torch', 'mmengine'])
def test_sync_bn_conversion_reaches_the_adaptor_norms(converter):
    torch.manual_seed(2)
    model = StepResNet(18, stem_channels=8, base_channels=8, adaptor=ADAPTORS['stepnet'])
    for norm in adaptor_norm_layers(model):
        norm.running_mean.uniform_(-1, 1)
    before = [norm.running_mean.clone() for norm in adaptor_norm_layers(model)]
    model = converters()[converter](model)
    norms = adaptor_norm_layers(model)
    assert len(norms) == 8 and all(isinstance(m, nn.SyncBatchNorm) for m in norms)
    for norm, mean in zip(norms, before):
        assert torch.equal(norm.running_mean, mean)
    model.train()
    model(torch.randn(2, 3, 32, 32))


@pytest.mark.parametrize('converter', ['torch', 'mmengine'])
def test_converting_an_iebn_adaptor_is_refused_at_train(converter):
    model = StepResNet(18, stem_channels=8, base_channels=8,
                       adaptor=dict(ADAPTORS['stepnet'], norm='iebn'))
    model = converters()[converter](model)
    with pytest.raises(RuntimeError, match=r"norm='iebn' holds a SyncBatchNorm.*"
                       r"dict\(type='SyncBN'\)"):
        model.train()


def run_sync_workers(tmp_path, device='cpu', world=2):
    run_ranks(WORKER, tmp_path, device, world=world)
    return [json.loads((tmp_path / f'rank{r}.json').read_text()) for r in range(world)]


def check_layer_against_one_bn(ranks):
    """Each rank's synchronised BN equals one BN on the batch of both ranks: its slice of the
    output, the running statistics, and (summed over the ranks, as DDP does before averaging)
    the parameter gradients; the input gradient is each rank's slice."""
    layers = [r['layer'] for r in ranks]
    torch.manual_seed(0)
    reference = nn.BatchNorm2d(3)
    with torch.no_grad():
        reference.weight.uniform_(0.5, 1.5)
        reference.bias.uniform_(-0.5, 0.5)
    x = torch.cat([torch.tensor(r['x']) for r in layers]).requires_grad_()
    coeff = torch.arange(12.0).view(4, 3, 1, 1)
    out = reference(x)
    (out * coeff).sum().backward()
    for i, r in enumerate(layers):
        torch.testing.assert_close(torch.tensor(r['out']), out[2 * i:2 * i + 2].detach())
        torch.testing.assert_close(torch.tensor(r['x_grad']), x.grad[2 * i:2 * i + 2])
        torch.testing.assert_close(torch.tensor(r['running_mean']), reference.running_mean)
        torch.testing.assert_close(torch.tensor(r['running_var']), reference.running_var)
    for name, value in (('weight_grad', reference.weight.grad), ('bias_grad', reference.bias.grad)):
        torch.testing.assert_close(sum(torch.tensor(r[name]) for r in layers), value)


@pytest.mark.slow
def test_two_gloo_processes_synchronise_the_adaptor_statistics(tmp_path):
    """Two CPU processes (gloo), a different batch on each: the adaptors' SyncBN statistics
    are those of both batches, the same on both ranks."""
    ranks = run_sync_workers(tmp_path)
    check_layer_against_one_bn(ranks)
    backbones = [r['backbone'] for r in ranks]
    assert all(b['norm_types'] == ['CPUSyncBatchNorm'] for b in backbones)
    means = [[torch.tensor(m) for m in b['running_means']] for b in backbones]
    assert len(means[0]) == 8
    for a, b in zip(*means):
        torch.testing.assert_close(a, b)
        assert a.abs().sum() > 0  # the batch moved them


# --------------------------------------------------------------------- 'auto' and its log line


def plain_resnet_state(model_kwargs):
    """The state dict of the same backbone without adaptors (a plain checkpoint)."""
    return StepResNet(18, **model_kwargs).state_dict()


class Lines(logging.Handler):

    def __init__(self):
        super().__init__(logging.INFO)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@pytest.fixture
def log_lines():
    logger = MMLogger.get_current_instance()  # where the backbones log
    level = logger.level
    logger.setLevel(logging.INFO)
    handler = Lines()
    logger.addHandler(handler)
    yield handler.lines
    logger.removeHandler(handler)
    logger.setLevel(level)


def test_auto_releases_only_what_a_loaded_checkpoint_lacked_and_says_so(log_lines):
    narrow = dict(stem_channels=8, base_channels=8)
    fresh = StepResNet(18, adaptor=ADAPTORS['stepnet-identity'], norm_eval=True, frozen_stages=1,
                       **narrow)
    fresh.init_weights()
    fresh.train()
    assert check_norm_state(fresh.modules(), False)  # nothing loaded: norm_eval holds
    assert not any('learn theirs' in line for line in log_lines)

    grafted = StepResNet(18, adaptor=ADAPTORS['stepnet-identity'], norm_eval=True, frozen_stages=1,
                         **narrow)
    grafted.load_state_dict(plain_resnet_state(narrow), strict=False)
    grafted.train()
    grafted.train()  # a second epoch: no second line
    learning = [m for m in adaptor_norm_layers(grafted) if m.training]
    assert len(learning) == 6  # layer1's two are frozen
    lines = [line for line in log_lines if 'learn theirs' in line]
    assert lines == [
        "StepResNet: norm_eval=True freezes the BN statistics, but 6 of 8 step "
        "adaptors learn theirs (adaptor_norm='auto': the loaded checkpoint lacked "
        "their statistics); adaptor_norm='follow' freezes them too"
    ]
