"""A train step of every residual backbone reads nothing back to the host: forward, backward
and the optimiser's update, with the reference step, the fused step on its PyTorch passes, and
the fused step's Triton launchers (their kernels replaced by stand-ins that launch nothing, the
host side of a CUDA run). On a GPU such a read would make the host wait for the device once per
block, and the step would pay for every launch that the device could otherwise have overlapped
(tests/host_reads.py; tests/cuda/ checks the CUDA run itself with CUDA's synchronisation
debug mode)."""
import pytest
import torch
from host_reads import HostReadOps, no_host_reads

from mmstiff.apis.benchmark import counting_kernels
from mmstiff.models.backbones import AlterNet, PreActStepResNet, StepResNet, StepViT
from mmstiff.models.steps import forced_step_kernels, set_fused
from mmstiff.utils.triton_launch import HAS_TRITON

STEPNET = dict(type='mmstiff.StepNetAdaptor')
SE = dict(type='mmstiff.SEAdaptor', squeeze_channels=4)
VIT_ARCH = dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=32)
VIT_SWITCHES = dict(msa_adaptor=STEPNET, mlp_adaptor=SE, attn_scale_layers='all',
                    feat_scale_layers='all')
BACKBONES = {
    'resnet50-stepnet':
    (lambda: StepResNet(50, base_channels=2, stem_channels=4, adaptor=STEPNET), 32),
    'resnet50-se': (lambda: StepResNet(50, base_channels=2, stem_channels=4, adaptor=SE), 32),
    'resnet18-plain': (lambda: StepResNet(18, base_channels=4, stem_channels=4), 32),
    'preact-stepnet': (lambda: PreActStepResNet(20, base_channels=4, adaptor=STEPNET), 16),
    'alternet': (lambda: AlterNet(18, stem='cifar', base_channels=4, num_heads=(1, 1, 1, 1),
                                  head_dim=4, window_size=2), 16),
    'vit': (lambda: StepViT(VIT_ARCH, img_size=16, patch_size=8, **VIT_SWITCHES), 16),
}
PATHS = ['reference', 'fused', 'triton-launchers']


def _train_step(backbone, images, optimizer):
    optimizer.zero_grad()
    outputs = backbone(images)[-1]
    outputs = outputs[0] if isinstance(outputs, (list, tuple)) else outputs
    (outputs.float() * torch.linspace(-1, 1, outputs.numel()).view_as(outputs)).sum().backward()
    optimizer.step()


@pytest.mark.parametrize('path', PATHS)
@pytest.mark.parametrize('name', list(BACKBONES))
def test_a_train_step_reads_nothing_back_to_the_host(name, path, monkeypatch):
    if path == 'triton-launchers' and not HAS_TRITON:
        pytest.skip('needs triton (it ships with torch on Linux)')
    torch.manual_seed(0)
    build, size = BACKBONES[name]
    backbone = set_fused(build(), path != 'reference').train()
    optimizer = torch.optim.SGD(backbone.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(2, 3, size, size)
    _train_step(backbone, images, optimizer)  # the first step: the optimiser's state
    kernels = None
    if path == 'triton-launchers':
        from mmstiff.models.steps.fused.triton_step import TritonStepKernels
        kernels = counting_kernels(TritonStepKernels())
    with no_host_reads(monkeypatch), HostReadOps() as ops:
        if kernels is None:
            _train_step(backbone, images, optimizer)
        else:
            with forced_step_kernels(kernels, backbone):
                _train_step(backbone, images, optimizer)
    assert ops.reads == []


def test_the_checks_catch_a_read():
    """Both nets catch what they are for: a Python-level read, and a value read by C++ code."""
    x = torch.ones(3)
    with pytest.raises(AssertionError, match=r'Tensor\.item\(\)'):
        with pytest.MonkeyPatch.context() as patch, no_host_reads(patch):
            x.sum().item()
    with HostReadOps() as ops:
        if x.sum() > 0:  # bool() of a tensor: its value, read by C++
            x = x + 1
        torch.nonzero(x)  # an output shape that depends on the values
    assert ops.reads == ['aten::_local_scalar_dense', 'aten::nonzero']
