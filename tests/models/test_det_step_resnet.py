"""DetStepResNet: mmdet's ResNet contract with step-size adaptors (docs/methods.md §1, §4)."""
import pytest
import torch

pytestmark = pytest.mark.det
pytest.importorskip('mmdet.models', reason='needs mmdet: pip install "mmstiff[det]"')

from mmdet.models.backbones import ResNet as DetResNet
from reference_weights import assert_same_outputs, randomise_bn
from torch.nn.modules.batchnorm import _BatchNorm

from mmstiff.models.backbones import DetStepResNet
from mmstiff.registry import MODELS

STEPNET = dict(type='mmstiff.StepNetAdaptor')


@pytest.mark.parametrize('depth', [
    18,
    pytest.param(34, marks=pytest.mark.slow),
    pytest.param(50, marks=pytest.mark.slow),
    pytest.param(101, marks=pytest.mark.slow),
    pytest.param(152, marks=pytest.mark.slow)
])
@pytest.mark.parametrize('adaptor', [None, dict(type='mmstiff.ConstantStep')])
def test_constant_step_equals_mmdet_resnet(depth, adaptor):
    torch.manual_seed(depth)
    # norm_eval=False so that train mode really uses batch statistics in both networks
    reference = DetResNet(depth, norm_eval=False)
    randomise_bn(reference)
    model = DetStepResNet(depth, adaptor=adaptor, norm_eval=False)
    model.load_state_dict(reference.state_dict())
    assert_same_outputs(reference, model, torch.randn(2, 3, 32, 32), num_outputs=4)


def test_mmdet_plugins_still_work_inside_step_blocks():
    torch.manual_seed(0)
    plugins = [
        dict(
            cfg=dict(type='ContextBlock', ratio=1. / 16), position='after_conv3',
            stages=(False, True, True, True))
    ]
    reference = DetResNet(50, plugins=plugins, norm_eval=False)
    randomise_bn(reference)
    model = DetStepResNet(50, plugins=plugins, norm_eval=False)
    model.load_state_dict(reference.state_dict())
    assert_same_outputs(reference, model, torch.randn(2, 3, 32, 32), num_outputs=4)
    with_steps = DetStepResNet(50, plugins=plugins, adaptor=STEPNET)
    assert hasattr(with_steps.layer2[0], 'context_block')
    assert with_steps.layer2[0].step_adaptor is not None
    with_steps.train()
    assert len(with_steps(torch.randn(2, 3, 32, 32))) == 4


def test_dcn_argument_still_works():
    dcn = dict(type='DCNv2', deform_groups=1, fallback_on_stride=False)
    model = DetStepResNet(50, dcn=dcn, stage_with_dcn=(False, False, False, True), adaptor=STEPNET,
                          adaptor_stages=(False, False, False, True))
    conv2 = model.layer4[0].conv2
    assert type(conv2).__name__ == 'ModulatedDeformConv2dPack'
    model.eval()
    outs = model(torch.randn(1, 3, 32, 32))
    assert outs[3].shape == (1, 2048, 1, 1)


def test_basic_block_depth_takes_stepnet_where_mmdet_plugins_cannot():
    with pytest.raises(AssertionError):  # mmdet's BasicBlock refuses plugins
        DetResNet(18, plugins=[dict(cfg=dict(type='mmstiff.StepPlugin'), position='after_conv3')])
    model = DetStepResNet(18, adaptor=STEPNET)
    model.train()
    outs = model(torch.randn(2, 3, 32, 32))
    assert [o.shape[1] for o in outs] == [64, 128, 256, 512]
    assert model.layer1[0].step_adaptor.channels == 64


def test_frozen_stages_freezes_adaptors_of_frozen_stages():
    model = DetStepResNet(18, adaptor=STEPNET, frozen_stages=2)
    model.train()
    for module in (model.conv1, model.norm1, model.layer1, model.layer2):
        assert not any(p.requires_grad for p in module.parameters())
    assert not model.layer2[1].step_adaptor.training
    assert all(p.requires_grad for p in model.layer3.parameters())
    assert model.layer3[0].step_adaptor.training


def test_norm_eval_keeps_every_bn_and_the_adaptor_statistics_frozen():
    # mmdet default: norm_eval=True; adaptor_norm='follow' freezes the adaptors' BN with it
    model = DetStepResNet(18, adaptor=STEPNET, adaptor_norm='follow')
    assert model.norm_eval
    model.train()
    bns = [m for m in model.modules() if isinstance(m, _BatchNorm)]
    assert bns and not any(m.training for m in bns)
    adaptor = model.layer2[0].step_adaptor
    assert adaptor.training and not adaptor.norm.training
    before = adaptor.norm.running_mean.clone()
    out = model(torch.randn(2, 3, 32, 32))
    assert torch.equal(adaptor.norm.running_mean, before)
    out[-1].sum().backward()
    assert adaptor.ie_weight.grad is not None


def test_pretrained_init_cfg_leaves_only_adaptor_keys_missing(tmp_path):
    torch.manual_seed(1)
    upstream = DetResNet(50)
    randomise_bn(upstream)
    path = tmp_path / 'resnet50.pth'
    torch.save(upstream.state_dict(), path)
    model = DetStepResNet(50, adaptor=STEPNET, init_cfg=dict(type='Pretrained',
                                                             checkpoint=str(path)))
    model.init_weights()
    for name, value in upstream.state_dict().items():
        assert torch.equal(model.state_dict()[name], value), name
    result = DetStepResNet(50, adaptor=STEPNET).load_state_dict(upstream.state_dict(), strict=False)
    assert result.unexpected_keys == []
    # BN fills a missing num_batches_tracked itself: every other adaptor key is reported
    assert set(result.missing_keys) == {
        k
        for k in model.state_dict()
        if '.step_adaptor.' in k and not k.endswith('num_batches_tracked')
    }
    # the adaptors keep their construction-time step: Δ ≡ sigmoid(-1)
    assert torch.equal(model.layer1[0].step_adaptor.ie_bias, torch.full((256, ), -1.0))


@pytest.mark.parametrize(
    'depth, last_norm',
    [(18, 'norm2'), pytest.param(50, 'norm3', marks=pytest.mark.slow)])
def test_zero_init_residual_matches_mmdet(depth, last_norm):
    model = DetStepResNet(depth, adaptor=STEPNET)
    model.init_weights()
    for name in model.res_layers:
        for block in getattr(model, name):
            assert torch.count_nonzero(getattr(block, last_norm).weight) == 0
            adaptor = block.step_adaptor
            assert torch.equal(adaptor.norm.weight, torch.ones(adaptor.channels))


@pytest.mark.parametrize('kwargs, message', [
    (dict(depth=26), 'depth=26'),
    (dict(depth=50, adaptor=dict(type='NoSuchStep')), "'NoSuchStep'"),
    (dict(depth=50, adaptor_stages=(True, ) * 5), 'adaptor_stages='),
    (dict(depth=50, adaptor_blocks=(None, None, [6], None)), 'adaptor_blocks\\[2\\] holds 6'),
])
def test_bad_configuration_fails_at_build_naming_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MODELS.build(dict(type='mmstiff.DetStepResNet', **kwargs))
