"""tools/model_converters/torchvision_to_mmpretrain_resnet.py on random torchvision ResNets."""
from pathlib import Path

import pytest
import torch
import torchvision
from mmpretrain.models import ImageClassifier
from mmpretrain.models.backbones import ResNet
from reference_weights import randomise_bn
from script_modules import load_script  # tests/

from mmstiff.models.backbones import StepResNet

SCRIPT = (
    Path(__file__).parents[1] / 'tools' / 'model_converters' /
    'torchvision_to_mmpretrain_resnet.py')


def _load_converter():
    return load_script(str(SCRIPT))


converter = _load_converter()


def _random_torchvision(name):
    torch.manual_seed(0)
    return randomise_bn(getattr(torchvision.models, name)(weights=None)).eval()


def _torchvision_features(model, x):
    x = model.maxpool(model.relu(model.bn1(model.conv1(x))))
    return model.layer4(model.layer3(model.layer2(model.layer1(x))))


def _classifier(depth, feat_dim):
    return ImageClassifier(
        backbone=dict(type='ResNet', depth=depth), neck=dict(type='GlobalAveragePooling'),
        head=dict(type='LinearClsHead', num_classes=1000, in_channels=feat_dim))


@pytest.mark.slow
def test_converted_resnet18_classifier_reproduces_torchvision(tmp_path):
    reference = _random_torchvision('resnet18')
    src, dst = tmp_path / 'resnet18.pth', tmp_path / 'resnet18_mmpretrain.pth'
    torch.save(reference.state_dict(), src)
    converter.main([str(src), str(dst)])
    state_dict = torch.load(dst, weights_only=True)['state_dict']

    classifier = _classifier(18, 512).eval()
    classifier.load_state_dict(state_dict)  # strict: every key matches
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(classifier(x, mode='tensor'), reference(x))
        torch.testing.assert_close(classifier.backbone(x)[0], _torchvision_features(reference, x))


@pytest.mark.slow
def test_converted_resnet50_loads_into_step_resnet_with_only_adaptor_keys_missing():
    reference = _random_torchvision('resnet50')
    backbone_sd = converter.convert_resnet(reference.state_dict(), backbone_only=True)
    assert not any(key.startswith('fc.') for key in backbone_sd)

    plain = ResNet(50)
    plain.eval()
    plain.load_state_dict(backbone_sd)
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(plain(x)[0], _torchvision_features(reference, x))

    model = StepResNet(50, adaptor=dict(type='mmstiff.StepNetAdaptor'))
    result = model.load_state_dict(backbone_sd, strict=False)
    assert result.unexpected_keys == []
    # BN fills a missing num_batches_tracked itself: every other adaptor key is reported
    assert set(result.missing_keys) == {
        k
        for k in model.state_dict()
        if '.step_adaptor.' in k and not k.endswith('num_batches_tracked')
    }
    assert len(result.missing_keys) > 0


def test_unknown_key_is_named():
    with pytest.raises(ValueError, match="'classifier.weight'"):
        converter.convert_resnet({'classifier.weight': torch.zeros(1)})
