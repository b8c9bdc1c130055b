"""Every residual backbone computes the same with ``fused=True`` as with ``fused=False``: outputs,
gradients, BN statistics, and what the diagnostics read (docs/methods.md §0, "The fused step").

On the CPU ``fused=True`` runs the fused step's autograd Functions on the PyTorch kernels, the
same Functions that run the Triton kernels on CUDA (tests/cuda/test_fused_step_cuda.py).
"""
import copy
import types

import pytest
import torch

from mmstiff.analysis import TrajectoryRecorder
from mmstiff.engine.hooks.divergence_hook import DivergenceHook
from mmstiff.models.backbones import (AlterNet, PreActStepResNet, StepResNet, StepResNet_CIFAR,
                                      StepViT)

STEPNET = dict(type='mmstiff.StepNetAdaptor')
SE = dict(type='mmstiff.SEAdaptor', squeeze_channels=4)
VIT_ARCH = dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=32)
BACKBONES = {
    'resnet18-stepnet':
    (lambda **kw: StepResNet(18, base_channels=8, stem_channels=8, adaptor=STEPNET, **kw), 32),
    'resnet50-se':
    (lambda **kw: StepResNet(50, base_channels=4, stem_channels=8, adaptor=SE, **kw), 32),
    'resnet50-stepnet-groups': (lambda **kw: StepResNet(50, base_channels=4, stem_channels=8,
                                                        adaptor=dict(STEPNET, groups=2), **kw), 32),
    'resnet18-plain': (lambda **kw: StepResNet(18, base_channels=8, stem_channels=8, **kw), 32),
    'cifar-stepnet':
    (lambda **kw: StepResNet_CIFAR(18, base_channels=4, stem_channels=4, adaptor=STEPNET, **kw),
     16),
    'preact-stepnet':
    (lambda **kw: PreActStepResNet(20, base_channels=4, adaptor=STEPNET, **kw), 16),
    'preact-se': (lambda **kw: PreActStepResNet(20, base_channels=8, adaptor=SE, **kw), 16),
    'alternet': (lambda **kw: AlterNet(18, stem='cifar', base_channels=8, num_heads=(1, 1, 1, 1),
                                       head_dim=4, window_size=2, **kw), 16),
    'vit-stepnet': (lambda **kw: StepViT(VIT_ARCH, img_size=16, patch_size=8, msa_adaptor=STEPNET,
                                         mlp_adaptor=SE, **kw), 16),
}

#: the comparisons run in float64: the fused step sums in another order than the reference
#: (the folded BN's statistics and backward, mmstiff.models.steps.fused.fold), and in float32
#: both are as far from the float64 values as from each other (a conv weight's gradient, a sum
#: over the batch and the map, up to 1e-4 relative)
DTYPE = torch.float64


def _pair(name, dtype=DTYPE, **kwargs):
    """The backbone with ``fused=False`` and a copy with ``fused=True`` (same weights), in
    ``dtype``."""
    build, size = BACKBONES[name]
    torch.manual_seed(0)
    reference = build(fused=False, **kwargs).to(dtype)
    fused = build(fused=True, **kwargs).to(dtype)
    # both load the same state dict: the adaptors' statistics count as loaded in both
    # (adaptor_norm='auto' under norm_eval reads that)
    state = copy.deepcopy(reference.state_dict())
    reference.load_state_dict(state)
    fused.load_state_dict(state)
    with torch.no_grad():  # move the identity-start and zero-init parameters off their start
        for a, b in zip(reference.parameters(), fused.parameters()):
            noise = 0.05 * torch.randn_like(a)
            a.add_(noise)
            b.add_(noise)
    return reference, fused, size


def _forward_backward(net, images, train=True):
    net.train(train)
    outs = net(images)
    outs = outs if isinstance(outs, (tuple, list)) else [outs]
    outs = [o[0] if isinstance(o, (tuple, list)) else o for o in outs]
    loss = sum((o * torch.linspace(-1, 1, o.numel(), dtype=o.dtype).view_as(o)).sum() for o in outs)
    if train:
        loss.backward()
    grads = {n: p.grad for n, p in net.named_parameters() if p.grad is not None}
    return outs, grads, {n: b.clone() for n, b in net.named_buffers()}


def _assert_same(reference, fused, images, train=True, rtol=1e-7, atol=1e-9):
    ref = _forward_backward(reference, images, train)
    got = _forward_backward(fused, images, train)
    for a, b in zip(ref[0], got[0]):
        torch.testing.assert_close(b, a, rtol=rtol, atol=atol)
    assert set(ref[1]) == set(got[1])
    for key in ref[1]:
        torch.testing.assert_close(got[1][key], ref[1][key], rtol=rtol, atol=atol, msg=key)
    for key in ref[2]:
        torch.testing.assert_close(got[2][key], ref[2][key], rtol=rtol, atol=atol, msg=key)
    return ref


#: the bottleneck ResNet-50s take longest (sixteen blocks each way)
SLOW = ('resnet50-se', 'resnet50-stepnet-groups')


@pytest.mark.parametrize(
    'name',
    [pytest.param(name, marks=pytest.mark.slow) if name in SLOW else name for name in BACKBONES])
def test_fused_backbone_equals_reference_in_train_and_eval(name):
    reference, fused, size = _pair(name)
    torch.manual_seed(1)
    images = torch.randn(2, 3, size, size, dtype=DTYPE)
    outs, grads, _ = _assert_same(reference, fused, images, train=True)
    assert grads  # gradients reached the parameters
    _assert_same(reference, fused, images, train=False)


@pytest.mark.parametrize(
    'kwargs',
    [
        dict(norm_eval=True),
        dict(norm_eval=True, frozen_stages=1),
        pytest.param(dict(with_cp=True), marks=pytest.mark.slow),  # recomputes every block
        dict(adaptor_norm='follow', norm_eval=True),
    ])
def test_fused_resnet_keeps_bn_rules(kwargs):
    reference, fused, size = _pair('resnet18-stepnet', **kwargs)
    images = torch.randn(2, 3, size, size, dtype=DTYPE)
    _assert_same(reference, fused, images, train=True)
    _assert_same(reference, fused, images, train=True)  # the statistics moved alike, twice


@pytest.mark.parametrize('adaptor', [dict(STEPNET, start='identity'), dict(SE, start='identity')])
def test_fused_identity_start_is_the_plain_network(adaptor):
    torch.manual_seed(0)
    plain = StepResNet(18, base_channels=8, stem_channels=8, fused=False)
    plain.init_weights()
    fused = StepResNet(18, base_channels=8, stem_channels=8, adaptor=adaptor, fused=True)
    fused.load_state_dict(plain.state_dict(), strict=False)
    fused.init_weights()  # keeps the identity start
    fused.load_state_dict(plain.state_dict(), strict=False)
    images = torch.randn(2, 3, 64, 64)
    torch.testing.assert_close(fused.eval()(images)[-1], plain.eval()(images)[-1])


def test_fused_one_sample_batch():
    reference, fused, _ = _pair('resnet18-stepnet')
    # one sample: the adaptors' BN uses running statistics
    images = torch.randn(1, 3, 96, 96, dtype=DTYPE)
    _assert_same(reference, fused, images, train=True)


def test_bad_fused_value_fails_before_building():
    with pytest.raises(ValueError, match=r"fused='yes' is not supported"):
        StepResNet(18, fused='yes')
    with pytest.raises(ValueError, match=r'fused=1 is not supported'):
        StepViT(VIT_ARCH, img_size=16, patch_size=8, fused=1)
    with pytest.raises(ValueError, match=r'fused=None is not supported'):
        PreActStepResNet(20, fused=None)
    with pytest.raises(ValueError, match=r"fused='on' is not supported"):
        AlterNet(18, stem='cifar', fused='on')


@pytest.mark.parametrize('name',
                         ['resnet18-stepnet', 'resnet50-se', 'vit-stepnet', 'preact-stepnet'])
def test_recorders_see_the_same_trajectory(name):
    reference, fused, size = _pair(name)
    images = torch.randn(2, 3, size, size, dtype=DTYPE)
    records = []
    for net in (reference, fused):
        with TrajectoryRecorder(net.train(), level='branch') as recorder:
            net(images)
        records.append(recorder.outputs)
    assert list(records[0]) == list(records[1]) and records[0]
    steps = 0
    for key in records[0]:
        for a, b in zip(records[0][key], records[1][key]):
            torch.testing.assert_close(b.x_t, a.x_t)
            torch.testing.assert_close(b.x_next, a.x_next, rtol=1e-7, atol=1e-9)
            assert (a.step is None) == (b.step is None)
            if torch.is_tensor(a.step):
                steps += 1
                assert a.step.shape == b.step.shape
                torch.testing.assert_close(b.step, a.step, rtol=1e-7, atol=1e-9)
    assert steps  # the adaptors' Δ was recorded


def test_divergence_hook_sees_the_same_step_sizes():
    reference, fused, size = _pair('resnet18-stepnet')
    images = torch.randn(2, 3, size, size, dtype=DTYPE)
    images[1, :, :8, :8] = float('inf')  # Δ of the second sample is not finite from layer1 on
    found = []
    for net in (reference, fused):
        hook = DivergenceHook(interval=1)
        runner = types.SimpleNamespace(model=net.train(), hooks=[], iter=0)
        hook.before_train(runner)
        hook.before_train_iter(runner, 0)
        net(images)
        found.append(hook._non_finite_adaptors())
    assert found[0] == found[1] and 'layer1.0.step_adaptor' in found[0]
    clean = copy.deepcopy(fused)
    hook = DivergenceHook(interval=1)
    runner = types.SimpleNamespace(model=clean, hooks=[], iter=0)
    hook.before_train(runner)
    hook.before_train_iter(runner, 0)
    clean(torch.randn(2, 3, size, size, dtype=DTYPE))
    assert hook._non_finite_adaptors() == []


@pytest.mark.parametrize('name', ['resnet18-stepnet', 'cifar-stepnet', 'preact-se'])
@pytest.mark.parametrize('fused', [False, True])
def test_autocast_keeps_the_residual_stream_in_half_precision(name, fused):
    """Under autocast a step size computed in float32 (the adaptor's BN) does not promote
    x_{t+1} to float32: the states keep the dtype of the plain network's states (which is
    what a half-precision stream costs in memory), on both paths alike."""
    reference, fused_net, size = _pair(name, dtype=torch.float32)
    net = fused_net if fused else reference
    build, _ = BACKBONES[name]
    torch.manual_seed(0)
    plain = build(fused=False).train()
    blocks = [m for m in plain.modules() if getattr(m, 'step_adaptor', None) is not None]
    assert blocks
    for block in blocks:  # the same network without its adaptors: Δ ≡ 1
        block.step_adaptor = None
    images = torch.randn(2, 3, size, size)
    with torch.autocast('cpu', dtype=torch.bfloat16):
        plain_dtypes = [o.dtype for o in plain(images)]
        outs = net.train()(images)
    assert plain_dtypes[-1] == torch.bfloat16
    assert [o.dtype for o in outs] == plain_dtypes
    if fused:  # and the fused path is as close to the float32 network as the reference
        truth = copy.deepcopy(reference).train()(images)
        with torch.autocast('cpu', dtype=torch.bfloat16):
            expected = reference.train()(images)
        for exact, a, b in zip(truth, expected, outs):
            reference_error = (a.float() - exact).abs().max().item()
            fused_error = (b.float() - exact).abs().max().item()
            assert fused_error <= 1.25 * reference_error + 1e-3, (fused_error, reference_error)


@pytest.mark.slow
@pytest.mark.parametrize('name', ['resnet18-stepnet', 'resnet50-se'])
def test_compiled_fused_backbone_is_one_graph_equal_to_the_reference(name, monkeypatch):
    """Inside ``torch.compile`` ``fused=True`` is the fused step on PyTorch's passes, the
    branch's last BN folded: one graph (``fullgraph``), forward and backward traced through
    the autograd Functions, equal to the eager reference."""
    import torch._dynamo

    from mmstiff.models.steps.fused import step as fused_step
    folded = []

    def counted(*args, **kwargs):
        folded.append(args[0])
        return fused_step.folded_step.__wrapped__(*args, **kwargs)

    counted.__wrapped__ = fused_step.folded_step
    monkeypatch.setattr(fused_step, 'folded_step', counted)
    reference, fused, size = _pair(name)
    images = torch.randn(2, 3, size, size, dtype=DTYPE)
    ref = _forward_backward(reference, images)
    torch._dynamo.reset()
    compiled = torch.compile(fused, backend='aot_eager', fullgraph=True)
    got = _forward_backward(compiled, images)
    torch._dynamo.reset()
    blocks = [m for m in fused.modules() if hasattr(type(m), 'fold_norm')]
    assert len(folded) == len(blocks)  # every block's step folded its BN while traced
    for a, b in zip(ref[0], got[0]):
        torch.testing.assert_close(b, a, rtol=1e-7, atol=1e-9)
    assert set(got[1]) == {f'_orig_mod.{key}' for key in ref[1]}
    for key, value in ref[1].items():
        torch.testing.assert_close(got[1][f'_orig_mod.{key}'], value, rtol=1e-7, atol=1e-9, msg=key)
    for key, value in ref[2].items():  # the running statistics moved alike
        torch.testing.assert_close(got[2][f'_orig_mod.{key}'], value, rtol=1e-7, atol=1e-9, msg=key)


def test_fused_se_resnet50_in_float32_is_as_close_to_float64_as_the_reference():
    """In float32 and train mode (batch 4 at 64²: layer4's BN normalises 16 values per
    channel) an SE-ResNet-50's stem gradient is ill-conditioned: the reference step and the
    fused one differ by about 1e-3 of its largest entry, each about 1 % of it from the float64
    result. The fused step is judged by that distance, tensor by tensor: no farther than the
    reference's."""
    from float64_reference import assert_no_farther, relative_errors  # tests/

    from mmstiff.models.steps import set_fused
    torch.manual_seed(0)
    reference = StepResNet(50, adaptor=dict(type='mmstiff.SEAdaptor'), fused=False)
    images = torch.randn(4, 3, 64, 64)

    def run(net, dtype):
        x = images.to(dtype).requires_grad_()
        net = net.to(dtype).train()
        out = net(x)[-1]
        out.square().mean().backward()
        return [out, x.grad] + [p.grad for p in net.parameters()]

    exact = run(copy.deepcopy(reference), torch.float64)
    expected = run(copy.deepcopy(reference), torch.float32)
    got = run(set_fused(copy.deepcopy(reference), True), torch.float32)
    stem = 2  # the stem convolution's weight gradient
    assert relative_errors([got[stem]], [expected[stem]])[0] > 1e-4  # beyond 1e-4 apart
    assert relative_errors([expected[stem]], [exact[stem]])[0] > 1e-3  # both far from exact
    assert_no_farther(got, expected, exact)
