"""Adaptors grafted onto a plain checkpoint (docs/methods.md §3, "Starting from a plain
checkpoint").

With ``start='identity'`` every adaptor starts at Δ ≡ 1, so a plain network's state dict, loaded
into the adapted backbone with only the adaptor keys missing, computes exactly the plain network;
``init_weights()`` (Kaiming / Constant initialisers, a ``Pretrained`` checkpoint) keeps that
start. Under ``norm_eval=True`` the adaptors' BN learns the statistics the checkpoint did not
hold (``adaptor_norm='auto'``) while the backbone's BN stays frozen; a backbone that loaded
nothing keeps them frozen too.
"""
import copy
import math
import os.path as osp

import pytest
import torch
from mmpretrain.models.backbones import ResNet, VisionTransformer
from reference_weights import assert_same_outputs, randomise_bn
from torch.nn.modules.batchnorm import _BatchNorm

from mmstiff.models.backbones import PreActStepResNet, StepResNet, StepViT
from mmstiff.models.steps import SEAdaptor, StepAdaptor, StepNetAdaptor

REPO = osp.dirname(osp.dirname(osp.dirname(osp.abspath(__file__))))
SIGMOID_MINUS_ONE = 1.0 / (1.0 + math.exp(1.0))

IDENTITY_ADAPTORS = {
    'stepnet': dict(type='mmstiff.StepNetAdaptor', start='identity'),
    'stepnet-iebn': dict(type='mmstiff.StepNetAdaptor', norm='iebn', start='identity'),
    'se': dict(type='mmstiff.SEAdaptor', start='identity'),
}
VIT = dict(
    arch=dict(embed_dims=32, num_layers=2, num_heads=4, feedforward_channels=64), img_size=32,
    patch_size=8)


def det_resnet():
    pytest.importorskip('mmdet.models', reason='needs mmdet: pip install "mmstiff[det]"')
    from mmdet.models.backbones import ResNet as DetResNet

    from mmstiff.models.backbones.det_step_resnet import DetStepResNet
    return DetResNet, DetStepResNet


def pair(backbone, adaptor, **kwargs):
    """``(plain, adapted)`` builders of one backbone: the plain network is the upstream one (or
    ours without adaptors), the adapted one has ``adaptor`` in every block / both ViT branches.
    Each builder takes extra keyword arguments (``init_cfg``, ``norm_eval``, ...)."""
    narrow = dict(stem_channels=16, base_channels=16)  # ResNet-18 at a quarter width
    if backbone == 'step_resnet':
        return (lambda **kw: ResNet(18, **narrow, **kw),
                lambda **kw: StepResNet(18, adaptor=adaptor, **narrow, **kwargs, **kw))
    if backbone == 'det_step_resnet':
        DetResNet, DetStepResNet = det_resnet()
        narrow = dict(narrow, norm_eval=False)
        return (lambda **kw: DetResNet(18, **dict(narrow, **kw)),
                lambda **kw: DetStepResNet(18, adaptor=adaptor, **dict(narrow, **kwargs, **kw)))
    if backbone == 'preact':
        arch = dict(depth=11, base_channels=8)  # bottlenecks, projection shortcuts
        return (lambda **kw: PreActStepResNet(**arch, **kw),
                lambda **kw: PreActStepResNet(**arch, adaptor=adaptor, **kwargs, **kw))
    assert backbone == 'vit'
    return (lambda **kw: VisionTransformer(**VIT, **kw),
            lambda **kw: StepViT(**VIT, msa_adaptor=adaptor, mlp_adaptor=adaptor, **kw))


BACKBONES = ['step_resnet', pytest.param('det_step_resnet', marks=pytest.mark.det), 'preact', 'vit']
CNN_BACKBONES = BACKBONES[:3]


def plain_model(build):
    """A plain network with non-trivial weights: random BN affine and statistics, and for a ViT
    a random class token and position embedding."""
    model = build()
    randomise_bn(model)
    with torch.no_grad():
        for name in ('pos_embed', 'cls_token'):
            if getattr(model, name, None) is not None:
                getattr(model, name).normal_(std=0.5)
    return model


def adaptors(model):
    return [m for m in model.modules() if isinstance(m, StepAdaptor)]


def adaptor_keys(model):
    """The adaptor keys of ``model``'s state dict that ``load_state_dict`` reports missing (BN
    fills a missing ``num_batches_tracked`` itself)."""
    return {
        k
        for k in model.state_dict() if '_adaptor.' in k and not k.endswith('num_batches_tracked')
    }


@pytest.mark.slow
@pytest.mark.parametrize('backbone', BACKBONES)
@pytest.mark.parametrize('adaptor', IDENTITY_ADAPTORS.values(), ids=IDENTITY_ADAPTORS.keys())
def test_identity_graft_on_a_plain_state_dict_computes_the_plain_network(backbone, adaptor):
    torch.manual_seed(0)
    build_plain, build_adapted = pair(backbone, adaptor)
    plain = plain_model(build_plain)
    model = build_adapted()
    model.init_weights()  # the initialisers of init_cfg run first, as in a Runner
    result = model.load_state_dict(plain.state_dict(), strict=False)
    assert set(result.missing_keys) == adaptor_keys(model) != set()
    assert result.unexpected_keys == []
    x = torch.randn(4, 3, 32, 32)
    # eval mode, then train mode on the same batch (the same batch statistics in both)
    assert_same_outputs(plain, model, x)


@pytest.mark.slow
@pytest.mark.parametrize('backbone', BACKBONES)
@pytest.mark.parametrize('adaptor', IDENTITY_ADAPTORS.values(), ids=IDENTITY_ADAPTORS.keys())
def test_identity_graft_through_pretrained_init_cfg_and_load_checkpoint(
        backbone, adaptor, tmp_path):
    from mmengine.runner import load_checkpoint
    torch.manual_seed(1)
    build_plain, build_adapted = pair(backbone, adaptor)
    plain = plain_model(build_plain)
    path = str(tmp_path / 'plain.pth')
    torch.save({'state_dict': plain.state_dict()}, path)
    x = torch.randn(4, 3, 32, 32)

    # (a train-mode pass moves the BN statistics: each comparison gets its own plain copy)
    model = build_adapted(init_cfg=dict(type='Pretrained', checkpoint=path))
    model.init_weights()
    assert_same_outputs(copy.deepcopy(plain), model, x)

    model = build_adapted()
    model.init_weights()
    load_checkpoint(model, path, strict=False, logger='current')
    assert_same_outputs(plain, model, x)


def record_steps(model, x):
    """Every adaptor's output Δ for input ``x``."""
    steps = []
    handles = [
        a.register_forward_hook(lambda m, i, out: steps.append(out)) for a in adaptors(model)
    ]
    try:
        model(x)
    finally:
        for h in handles:
            h.remove()
    return steps


@pytest.mark.slow
@pytest.mark.parametrize('backbone', BACKBONES)
@pytest.mark.parametrize('adaptor', IDENTITY_ADAPTORS.values(), ids=IDENTITY_ADAPTORS.keys())
def test_init_weights_keeps_the_identity_start(backbone, adaptor):
    torch.manual_seed(2)
    _, build_adapted = pair(backbone, adaptor)
    model = build_adapted()
    model.init_weights()
    for mode in (False, True):
        model.train(mode)
        steps = record_steps(model, torch.randn(3, 3, 32, 32))
        assert len(steps) == len(adaptors(model)) > 0
        for step in steps:
            assert torch.equal(step, torch.ones_like(step))


def test_init_weights_reaches_adaptors_that_mmengine_initialises():
    """Kaiming on every Conv2d and Constant on every BN do reach the adaptors (they sit in
    ``nn.Sequential`` stages); only the parameters that fix the start are given back."""
    torch.manual_seed(3)
    model = StepResNet(18, adaptor=IDENTITY_ADAPTORS['se'])
    se = model.layer2[1].step_adaptor
    with torch.no_grad():
        se.conv1.conv.weight.zero_()
    model.init_weights()
    assert se.conv1.conv.weight.abs().sum() > 0  # Kaiming ran on W1
    assert torch.count_nonzero(se.conv2.conv.weight) == 0  # W2 = 0 again
    assert torch.count_nonzero(se.conv2.conv.bias) == 0

    model = PreActStepResNet(depth=20, base_channels=8, adaptor=IDENTITY_ADAPTORS['stepnet-iebn'])
    norm = model.layer3[2].step_adaptor.norm
    model.init_weights()  # Constant(val=1) on every BN
    assert torch.count_nonzero(norm.weight) == 0 and torch.count_nonzero(norm.bias) == 0
    assert torch.equal(norm.ie_bias, torch.full_like(norm.ie_bias, -1.0))  # the IEBN gate


@pytest.mark.slow
@pytest.mark.parametrize('adaptor', IDENTITY_ADAPTORS.values(), ids=IDENTITY_ADAPTORS.keys())
def test_identity_start_is_trainable(adaptor):
    """Δ = 2 sigmoid(z) with z's last affine map at 0: the first step's gradient reaches that
    map, the second every parameter of the adaptor; Δ moves off 1 and stays in (0, 2)."""
    torch.manual_seed(4)
    model = PreActStepResNet(depth=20, base_channels=8, adaptor=adaptor)
    model.init_weights()
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(8, 3, 32, 32)
    target = torch.randn_like(model(x)[0])
    grads = []
    for _ in range(2):
        optimizer.zero_grad()
        loss = (model(x)[0] - target).pow(2).mean()
        loss.backward()
        grads.append({
            name: p.grad.abs().sum().item()
            for name, p in model.named_parameters() if '_adaptor.' in name
        })
        optimizer.step()
    first = {name.split('step_adaptor.')[1] for name, g in grads[0].items() if g > 0}
    assert first == {
        'stepnet': {'ie_weight', 'ie_bias'},
        'iebn': {'norm.weight', 'norm.bias'},
        'se': {'conv2.conv.weight', 'conv2.conv.bias'}
    }[adaptor.get('norm', 'se' if 'SE' in adaptor['type'] else 'stepnet')]
    assert all(g > 0 for g in grads[1].values()), [n for n, g in grads[1].items() if g == 0]
    steps = torch.cat([s.flatten() for s in record_steps(model, x)])
    assert not torch.equal(steps, torch.ones_like(steps))
    assert steps.min() > 0 and steps.max() < 2


def test_paper_start_is_the_default_and_unchanged():
    torch.manual_seed(5)
    x_t, f = torch.randn(3, 16, 4, 4), torch.randn(3, 16, 4, 4)
    for cfg in (dict(), dict(start='paper')):
        stepnet = StepNetAdaptor(16, **cfg)
        stepnet.init_weights()
        assert stepnet.start == 'paper'
        assert (stepnet.ie_weight.tolist(), stepnet.ie_bias.tolist()) == ([0.0] * 16, [-1.0] * 16)
        torch.testing.assert_close(stepnet(x_t, f), torch.full((3, 16, 1, 1), SIGMOID_MINUS_ONE))
    # the paper's SE: sigmoid(W2 relu(W1 GAP f) + b2) at whatever weights the initialisers set
    se = SEAdaptor(16, squeeze_channels=4)
    se.init_weights()
    w1, b1 = se.conv1.conv.weight.flatten(1), se.conv1.conv.bias
    w2, b2 = se.conv2.conv.weight.flatten(1), se.conv2.conv.bias
    assert torch.count_nonzero(w2) > 0
    expected = torch.sigmoid(torch.relu(f.mean((2, 3)) @ w1.T + b1) @ w2.T + b2)
    torch.testing.assert_close(se(x_t, f), expected[:, :, None, None])
    # a paper-start adaptor is not re-initialised by reset_start
    model = StepResNet(18, adaptor=dict(type='mmstiff.SEAdaptor'))
    model.init_weights()
    assert torch.count_nonzero(model.layer1[0].step_adaptor.conv2.conv.weight) > 0


def test_identity_step_is_twice_the_sigmoid():
    """Away from the start, Δ = 2 sigmoid(W_IE ⊙ BN(z) + b_IE), computed by hand."""
    torch.manual_seed(6)
    adaptor = StepNetAdaptor(8, start='identity').eval()
    with torch.no_grad():
        adaptor.ie_weight.uniform_(-1, 1)
        adaptor.ie_bias.uniform_(-1, 1)
        adaptor.conv.weight.normal_()
    x_t, f = torch.randn(2, 8, 3, 3), torch.randn(2, 8, 3, 3)
    u, v = x_t.mean((2, 3)), (x_t + f).mean((2, 3))
    w = adaptor.conv.weight.view(8, 2)
    z = (u * w[:, 0] + v * w[:, 1]) / math.sqrt(1 + adaptor.norm.eps)  # BN at mean 0, var 1
    expected = 2 * torch.sigmoid(adaptor.ie_weight * z + adaptor.ie_bias)
    torch.testing.assert_close(adaptor(x_t, f), expected[:, :, None, None])


@pytest.mark.parametrize('kwargs, message', [
    (dict(start='plain'), "start='plain' is not supported"),
    (dict(start='identity', ie_bias_init=-1.0), "start='identity'"),
])
def test_bad_start_names_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        StepNetAdaptor(8, **kwargs)
    if 'ie_bias_init' not in kwargs:
        with pytest.raises(ValueError, match=message):
            SEAdaptor(8, **kwargs)


# ------------------------------------------------------------------ adaptor BN under norm_eval


def norm_eval_pair(backbone, adaptor_norm='auto', **kwargs):
    """A plain network and the adapted one with ``norm_eval=True`` (StepNet adaptors)."""
    build_plain, build_adapted = pair(backbone, dict(type='mmstiff.StepNetAdaptor',
                                                     start='identity'), adaptor_norm=adaptor_norm,
                                      **kwargs)
    return plain_model(build_plain), build_adapted(norm_eval=True)


def statistics(modules):
    return [(m.running_mean.clone(), m.running_var.clone()) for m in modules]


def adaptor_norms(model):
    return [m for a in adaptors(model) for m in a.modules() if isinstance(m, _BatchNorm)]


def backbone_norms(model):
    inside = {id(m) for m in adaptor_norms(model)}
    return [m for m in model.modules() if isinstance(m, _BatchNorm) and id(m) not in inside]


def train_a_little(model, passes=3, batch=4):
    """Training-mode forward passes (what moves BN statistics); returns the model."""
    model.train()
    with torch.no_grad():
        for _ in range(passes):
            model(torch.randn(batch, 3, 32, 32))
    return model


def moved(before, modules):
    return [
        not (torch.equal(m, mb) and torch.equal(v, vb))
        for (mb, vb), (m, v) in zip(before, statistics(modules))
    ]


@pytest.mark.slow
@pytest.mark.parametrize('backbone', CNN_BACKBONES)
def test_auto_learns_the_statistics_a_plain_checkpoint_lacks(backbone):
    torch.manual_seed(7)
    plain, model = norm_eval_pair(backbone)
    model.load_state_dict(plain.state_dict(), strict=False)
    assert all(a.statistics_loaded is False for a in adaptors(model))
    model.train()
    assert all(m.training for m in adaptor_norms(model))
    assert not any(m.training for m in backbone_norms(model))
    adaptor_before, backbone_before = statistics(adaptor_norms(model)), \
        statistics(backbone_norms(model))
    train_a_little(model)
    assert all(moved(adaptor_before, adaptor_norms(model)))
    assert not any(moved(backbone_before, backbone_norms(model)))


@pytest.mark.parametrize('backbone', CNN_BACKBONES)
def test_auto_keeps_statistics_a_checkpoint_holds_frozen(backbone):
    torch.manual_seed(8)
    plain, model = norm_eval_pair(backbone)
    source = randomise_bn(pair(backbone, IDENTITY_ADAPTORS['stepnet'])[1]())
    model.load_state_dict(source.state_dict())  # adaptors' statistics included
    assert all(a.statistics_loaded is True for a in adaptors(model))
    before = statistics(adaptor_norms(model) + backbone_norms(model))
    train_a_little(model)
    assert not any(m.training for m in adaptor_norms(model))
    assert not any(moved(before, adaptor_norms(model) + backbone_norms(model)))
    # a later load (resuming) does not change the rule: the first state dict decided
    model.load_state_dict(plain.state_dict(), strict=False)
    assert all(a.statistics_loaded is True for a in adaptors(model))


@pytest.mark.parametrize('backbone', CNN_BACKBONES)
def test_fresh_model_keeps_norm_eval_and_a_resumed_graft_keeps_learning(backbone):
    torch.manual_seed(9)
    plain, model = norm_eval_pair(backbone)
    assert all(a.statistics_loaded is None for a in adaptors(model))
    model.train()
    # nothing loaded: norm_eval=True freezes the adaptors' statistics too
    assert not any(m.training for m in adaptor_norms(model))
    before = statistics(adaptor_norms(model))
    assert not any(moved(before, adaptor_norms(train_a_little(model))))
    # a plain init checkpoint, then a resumed full one: the statistics keep being learned
    model.load_state_dict(plain.state_dict(), strict=False)
    model.load_state_dict(train_a_little(model).state_dict())
    before = statistics(adaptor_norms(model))
    assert all(moved(before, adaptor_norms(train_a_little(model))))


@pytest.mark.parametrize('backbone', CNN_BACKBONES)
def test_follow_and_train_override_auto(backbone):
    torch.manual_seed(10)
    plain, model = norm_eval_pair(backbone, adaptor_norm='follow')
    model.load_state_dict(plain.state_dict(), strict=False)
    before = statistics(adaptor_norms(model))
    assert not any(moved(before, adaptor_norms(train_a_little(model))))

    source, model = norm_eval_pair(backbone, adaptor_norm='train')
    full = randomise_bn(pair(backbone, IDENTITY_ADAPTORS['stepnet'])[1]())
    model.load_state_dict(full.state_dict())
    before = statistics(adaptor_norms(model)), statistics(backbone_norms(model))
    train_a_little(model)
    assert all(moved(before[0], adaptor_norms(model)))
    assert not any(moved(before[1], backbone_norms(model)))


@pytest.mark.parametrize('backbone', CNN_BACKBONES)
def test_frozen_stages_and_a_batch_of_one_keep_adaptor_statistics(backbone):
    torch.manual_seed(11)
    _, model = norm_eval_pair(backbone, adaptor_norm='train', frozen_stages=1)
    model.train()
    first_stage = [
        m for a in adaptors(model.layer1) for m in a.modules() if isinstance(m, _BatchNorm)
    ]
    later = [m for m in adaptor_norms(model) if all(m is not f for f in first_stage)]
    assert first_stage and not any(m.training for m in first_stage)
    assert later and all(m.training for m in later)
    before = statistics(adaptor_norms(model))
    train_a_little(model, batch=1)  # the batch-of-one rule: nothing moves
    assert not any(moved(before, adaptor_norms(model)))
    train_a_little(model, batch=2)
    assert moved(before, adaptor_norms(model)) == [False] * len(first_stage) + \
        [True] * len(later)


@pytest.mark.parametrize('backbone', CNN_BACKBONES)
def test_bad_adaptor_norm_names_the_field(backbone):
    with pytest.raises(ValueError, match="adaptor_norm='frozen' is not supported"):
        pair(backbone, None, adaptor_norm='frozen')[1]()


# ------------------------------------------------------------------------ Faster R-CNN, tiny COCO


@pytest.mark.slow
@pytest.mark.det
def test_faster_rcnn_from_a_plain_checkpoint_learns_adaptor_statistics(tiny_data, tmp_path):
    """The StepNet detector as configured, started from a plain ResNet-50 checkpoint with mmdet's
    ``norm_eval=True``: two iterations move the adaptors' BN statistics, not the backbone's,
    and the identity start survives the Runner's ``init_weights``."""
    DetResNet, _ = det_resnet()
    from mmengine.config import Config
    from mmengine.runner import Runner

    torch.manual_seed(12)
    plain = randomise_bn(DetResNet(50))
    checkpoint = str(tmp_path / 'resnet50-plain.pth')
    torch.save({'state_dict': plain.state_dict()}, checkpoint)
    root = tiny_data('coco') + '/'
    cfg = Config.fromfile(osp.join(REPO, 'tests/data/configs/faster_rcnn_r50_fpn_tiny.py'))
    stepnet = Config.fromfile(
        osp.join(REPO, 'configs/faster_rcnn/faster-rcnn_r50-stepnet_fpn_1x_coco.py'))
    cfg.model.backbone = stepnet.model.backbone
    cfg.model.backbone.init_cfg = dict(type='Pretrained', checkpoint=checkpoint)
    assert cfg.model.backbone.norm_eval and cfg.model.backbone.adaptor.start == 'identity'
    for loader in (cfg.train_dataloader, cfg.val_dataloader, cfg.test_dataloader):
        loader.dataset.data_root = root
    cfg.val_evaluator.ann_file = cfg.test_evaluator.ann_file = \
        root + 'annotations/instances_val2017.json'
    cfg.work_dir = str(tmp_path / 'work')

    runner = Runner.from_cfg(cfg)
    backbone = runner.model.backbone
    runner.model.init_weights()  # what runner.train() does first (it will not repeat it)
    steps = record_steps(backbone.eval(), torch.randn(2, 3, 64, 64))
    assert len(steps) == 16 and all(torch.equal(s, torch.ones_like(s)) for s in steps)
    # frozen_stages=1 (mmdet's default) freezes the first stage's adaptors with it
    learning = [
        m for layer in (backbone.layer2, backbone.layer3, backbone.layer4)
        for m in adaptor_norms(layer)
    ]
    frozen = adaptor_norms(backbone.layer1) + backbone_norms(backbone)
    learning_before, frozen_before = statistics(learning), statistics(frozen)
    runner.train()
    assert runner.iter == 2
    assert all(moved(learning_before, learning))
    assert not any(moved(frozen_before, frozen))
    for name, value in plain.state_dict().items():
        if 'running' in name:
            assert torch.equal(backbone.state_dict()[name], value), name
