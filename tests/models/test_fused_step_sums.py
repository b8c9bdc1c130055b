"""The fused step's sums of squares for the NSI (docs/methods.md §0, "The fused step"; §5).

Where a recorder asks, the fused step writes per (sample, channel) ``Σ (x_{t+1} - x_t)²`` and
``Σ x_t²`` in its own pass; the StiffnessHook's values from them equal those from the states
(``fused=False``), and a step whose output is not the recorded ``x_{t+1}`` gives none.
"""
import copy

import pytest
import torch
import torch.nn as nn
from hook_scalars import hook_scalars  # tests/
from step_calls import residual_update  # tests/

from mmstiff.analysis import TrajectoryRecorder, stiffness_norms, stiffness_norms_from_sums
from mmstiff.models.backbones import PreActStepResNet, StepResNet, StepResNet_CIFAR, StepViT
from mmstiff.models.steps import StepNetAdaptor, set_fused
from mmstiff.models.steps.fused.torch_kernels import TorchStepKernels
from mmstiff.utils.step_sums import (StepSums, StepSumsRequest, close_step_sums, is_step_block,
                                     open_step_sums)

STEPNET = dict(type='mmstiff.StepNetAdaptor')
SE = dict(type='mmstiff.SEAdaptor', squeeze_channels=4)
VIT_ARCH = dict(embed_dims=16, num_layers=2, num_heads=2, feedforward_channels=32)
#: name -> (build, image size, whether every recorded step is a fused step giving sums)
BACKBONES = {
    'resnet18-stepnet':
    (lambda: StepResNet(18, base_channels=8, stem_channels=8, adaptor=STEPNET), 32, True),
    'resnet18-plain': (lambda: StepResNet(18, base_channels=8, stem_channels=8), 32, True),
    'cifar-se':
    (lambda: StepResNet_CIFAR(18, base_channels=4, stem_channels=4, adaptor=SE), 16, True),
    'preact-stepnet': (lambda: PreActStepResNet(20, base_channels=4, adaptor=STEPNET), 16, True),
    'vit-stepnet':
    (lambda: StepViT(VIT_ARCH, img_size=16, patch_size=8, msa_adaptor=STEPNET, mlp_adaptor=SE), 16,
     True),
    # a rescaled step (msa) and an augmented shortcut (mlp): not the recorded step, no sums
    'vit-aug-shortcut':
    (lambda: StepViT(VIT_ARCH, img_size=16, patch_size=8, msa_adaptor=STEPNET, mlp_adaptor=SE,
                     aug_shortcut=dict(scale=0.75, branches=('mlp', ))), 16, False),
}


def _pair(name, dtype=torch.float64):
    """The backbone with ``fused=False`` and a copy with ``fused=True``, parameters moved off
    their start (so that Δ varies over the samples), in ``dtype``: float64 by default, since
    the fused step folds the last BN and sums in another order than the reference (in float32
    the two differ by about 1e-5 relative, as each does from the float64 values)."""
    build, size, _ = BACKBONES[name]
    torch.manual_seed(0)
    reference = build().to(dtype)
    with torch.no_grad():
        for p in reference.parameters():
            p.add_(0.3 * torch.randn_like(p))
    fused = copy.deepcopy(reference)
    return set_fused(reference, False).train(), set_fused(fused, True).train(), size


def _both_norms(record):
    """The NSI norms of a record from its states and (None without them) from its sums."""
    from_states = stiffness_norms(record.x_t, record.x_next, record.step)
    if record.sums is None:
        return from_states, None
    return from_states, stiffness_norms_from_sums(record.sums, record.step)


#: the other kinds of step are in the fast cases (post-activation with a projection, plain, ViT)
SLOW = ('cifar-se', 'preact-stepnet')


@pytest.mark.parametrize(
    'name',
    [pytest.param(name, marks=pytest.mark.slow) if name in SLOW else name for name in BACKBONES])
def test_stiffness_hook_values_are_the_same_with_fused_on_and_off(name):
    reference, fused, size = _pair(name)
    torch.manual_seed(1)
    images = torch.randn(4, 3, size, size, dtype=torch.float64)
    for kwargs in (dict(), dict(num_samples=2)):
        expected = hook_scalars(reference, images, **kwargs)
        got = hook_scalars(fused, images, **kwargs)
        assert list(got) == list(expected) and any(k.startswith('nsi/') for k in expected)
        for key, value in expected.items():
            # a correlation in [-1, 1] near 0 is compared absolutely
            tol = dict(abs=1e-5) if key.startswith('nsi_step_corr/') else dict(rel=1e-5)
            assert got[key] == pytest.approx(value, **tol), key
    # the fused steps gave the sums (the hook read them), equal to the norms of the states
    spy = TrajectoryRecorder(fused, reduce=_both_norms, level='branch', step_sums=True)
    with torch.no_grad(), spy:
        fused(images)
    given = 0
    for name_, calls in spy.outputs.items():
        from_states, from_sums = calls[0]
        if from_sums is None:
            continue
        given += 1
        for a, b in zip(from_states, from_sums):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-7, msg=name_)
    assert given == (len(spy.outputs) if BACKBONES[name][2] else 0)
    assert not _open_requests(fused)  # every request closed with its block
    # the reference step gives none
    spy = TrajectoryRecorder(reference, level='branch', step_sums=True)
    with torch.no_grad(), spy:
        reference(images)
    assert all(calls[0].sums is None for calls in spy.outputs.values())


def test_recorder_without_step_sums_asks_for_none_and_block_level_layers_get_none():
    _, fused, size = _pair('vit-stepnet', torch.float32)
    images = torch.randn(2, 3, size, size)
    for kwargs in (dict(level='branch'), dict(level='block', step_sums=True)):
        recorder = TrajectoryRecorder(fused, **kwargs)
        with torch.no_grad(), recorder:
            fused(images)
        assert recorder.outputs and all(c[0].sums is None for c in recorder.outputs.values())


def test_upstream_blocks_are_recorded_without_a_sums_request():
    """mmpretrain's blocks run no fused step: a recorder asking for sums records them as
    without (one forward hook on a block without a projection), where mmstiff's blocks of the
    same network get the request's pre-hook."""
    from mmpretrain.models.backbones import ResNet
    torch.manual_seed(0)
    upstream = ResNet(depth=18, base_channels=8, stem_channels=8)
    ours = StepResNet(18, base_channels=8, stem_channels=8)
    ours.load_state_dict(upstream.state_dict())
    images = torch.randn(2, 3, 32, 32)
    outputs = {}
    for label, net in (('upstream', upstream), ('ours', ours)):
        net.train()
        for step_sums in (False, True):
            recorder = TrajectoryRecorder(net, step_sums=step_sums)
            blocks = [m for m in net.modules() if type(m).__name__.endswith('BasicBlock')]
            with torch.no_grad(), recorder:
                pre_hooked = [bool(b._forward_pre_hooks) for b in blocks]
                net(images)
            assert len(blocks) == 8
            if label == 'upstream' or not step_sums:  # only the projection blocks (3 of 8)
                assert sum(pre_hooked) == 3
            else:
                assert all(pre_hooked)
            outputs[label, step_sums] = recorder.outputs
    # the same records every way (mmstiff's reference step gives no sums either)
    reference = outputs['upstream', False]
    for got in outputs.values():
        assert list(got) == list(reference)
        for name, calls in reference.items():
            record, expected = got[name][0], calls[0]
            assert record.sums is None and record.step is None and expected.step is None
            torch.testing.assert_close(record.x_t, expected.x_t, msg=name)
            torch.testing.assert_close(record.x_next, expected.x_next, msg=name)


@pytest.mark.parametrize('layout, shape', [('nchw', (3, 4, 5, 2)), ('nlc', (3, 6, 4))])
@pytest.mark.parametrize('relu, state_relu', [(False, False), (True, False), (True, True)])
@pytest.mark.parametrize('dtype', [torch.float32, torch.float16])
def test_torch_measured_step_is_the_explicit_formula(layout, shape, relu, state_relu, dtype):
    torch.manual_seed(0)
    x, f = torch.randn(shape).to(dtype), torch.randn(shape).to(dtype)
    channels = shape[1] if layout == 'nchw' else shape[2]
    step = torch.rand(shape[0], channels).to(dtype)
    out, moved, state = TorchStepKernels.measured_step(x, step, f, relu, layout, state_relu)
    torch.testing.assert_close(out, TorchStepKernels.step(x, step, f, relu, layout))
    x_t = x.double().clamp(min=0) if state_relu else x.double()
    axes = (2, 3) if layout == 'nchw' else (1, )
    assert moved.dtype == state.dtype == torch.float32 and moved.shape == (shape[0], channels)
    # float32 sums of the float64 squares
    torch.testing.assert_close(moved.double(), ((out.double() - x_t)**2).sum(dim=axes), rtol=1e-6,
                               atol=1e-6)
    torch.testing.assert_close(state.double(), (x_t**2).sum(dim=axes), rtol=1e-6, atol=1e-6)


def _open_requests(model):
    """The requests the step blocks of ``model`` hold."""
    return [
        m.step_sums_request for m in model.modules()
        if is_step_block(m) and m.step_sums_request is not None
    ]


def _given(fn, state_act=False):
    """What one residual step gives a request passed to it (its list of sums)."""
    request = StepSumsRequest(state_act)
    fn(request)
    return request.sums


def test_steps_that_are_not_the_recorded_step_give_no_sums():
    torch.manual_seed(0)
    adaptor = StepNetAdaptor(4).train()
    x, f = torch.randn(2, 4, 3, 3), torch.randn(2, 4, 3, 3)
    [given
     ] = _given(lambda r: residual_update(x, f, adaptor, 'nchw', True, act=nn.ReLU(), request=r))
    assert isinstance(given, StepSums) and given.moved.shape == (2, 4)
    cases = [
        lambda r: residual_update(x, f, adaptor, 'nchw', False, act=nn.ReLU(), request=r),
        lambda r: residual_update(x, f, adaptor, 'nchw', True, act=nn.GELU(), request=r),
        lambda r: residual_update(x, f, adaptor, 'nchw', True, shortcut=x + 1, request=r),
        lambda r: residual_update(x, f, adaptor, 'nchw', True, measurable=False, request=r),
    ]  # the reference step, an activation outside the step, a shortcut not x_t, a rescaling
    for case in cases:
        assert _given(case) == []
    # the recorder's x_t is the ReLU of the shortcut, but the step applies no ReLU
    assert _given(lambda r: residual_update(x, f, adaptor, 'nchw', True, request=r), True) == []


def test_a_request_lives_on_its_block_from_open_to_close():
    _, fused, _ = _pair('resnet18-plain', torch.float32)
    block, other = fused.layer1[0], fused.layer1[1]
    request = open_step_sums(block=block)
    assert block.step_sums_request is request and other.step_sums_request is None
    stale = StepSumsRequest()
    close_step_sums(stale, block)  # another request: the block keeps its own
    assert block.step_sums_request is request
    with torch.no_grad():
        fused(torch.randn(2, 3, 32, 32))
    assert [type(s) for s in request.sums] == [StepSums]  # only the block's own step gave
    close_step_sums(request, block)
    assert block.step_sums_request is None
    assert open_step_sums().sums == []  # no block: no step sees it


def test_norms_from_sums_handle_a_saturated_step_and_refuse_a_per_element_step():
    torch.manual_seed(0)
    x = torch.randn(3, 4, 2, 2)
    step = torch.rand(3, 4, 1, 1)
    step[0, 1] = 0.0  # underflowed: the channel did not move (0 / 0 counts as 0)
    x_next = x + step * torch.randn_like(x)
    x_next[1] = x[1] + 0.5
    out, moved, state = TorchStepKernels.measured_step(x, None, x_next - x, False, 'nchw', False)
    sums = StepSums(moved, state, 'nchw')
    for given in (step, None, 2.0):
        expected = stiffness_norms(x, out, given)
        got = stiffness_norms_from_sums(sums, given)
        for a, b in zip(expected, got):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-7)
    assert stiffness_norms_from_sums(sums, torch.rand(3, 4, 2, 2)) is None
    with pytest.raises(ValueError, match='step='):
        stiffness_norms_from_sums(sums, 'one')


def test_stopping_a_recorder_closes_its_open_requests():
    _, fused, size = _pair('resnet18-plain', torch.float32)
    # the block fails after its step, before the recorder's hook closes the block's request
    fused.layer1[0].register_forward_hook(lambda *args: 1 / 0)
    recorder = TrajectoryRecorder(fused, step_sums=True).start()
    with pytest.raises(ZeroDivisionError):
        fused(torch.randn(1, 3, size, size))
    assert _open_requests(fused)
    recorder.stop()
    assert not _open_requests(fused)
