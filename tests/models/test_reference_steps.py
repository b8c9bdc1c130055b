"""Second derivatives of models with the fused step: its autograd Functions have none, so a
backward pass that builds a graph through them fails naming the way out, and inside
``reference_steps(model)`` (which the Hessian tools and hooks open) every step is the reference
step, whose Hessian-vector products are those of a model built with ``fused=False``."""
import pytest
import torch

from mmstiff.analysis.hessian import double_backward_kernels, loss_hessian
from mmstiff.models.backbones import StepResNet
from mmstiff.models.steps import reference_step, set_fused
from mmstiff.models.steps.fused import FusedStep
from mmstiff.utils.reference_steps import reference_steps

ADAPTORS = {
    'stepnet': dict(type='mmstiff.StepNetAdaptor'),  # the folded BN and StepNet's (B, C) pass
    'se': dict(type='mmstiff.SEAdaptor'),  # the folded BN and SE's (B, C) pass
}


def _net(adaptor, fused):
    torch.manual_seed(0)
    return StepResNet(depth=18, base_channels=4, stem_channels=4, adaptor=adaptor,
                      fused=fused).train()


def _hvp(net, images, vector=None):
    params = list(net.parameters())
    hvp, size = loss_hessian(net(images)[-1].square().mean(), params)
    if vector is None:
        vector = torch.randn(size, generator=torch.Generator().manual_seed(1))
    return hvp(vector)


def test_the_switch_on_a_model_sets_its_blocks_to_the_reference_step_and_back():
    net = _net(ADAPTORS['stepnet'], True)
    other = _net(ADAPTORS['stepnet'], True)
    blocks = [net.layer1[0], net.layer4[1]]
    assert all(isinstance(b.take_step, FusedStep) for b in blocks)
    with reference_steps(net):
        with reference_steps(net):
            assert all(b.take_step is reference_step for b in blocks)
        assert all(b.take_step is reference_step for b in blocks)
        assert isinstance(other.layer1[0].take_step, FusedStep)  # another model keeps its step
    assert all(isinstance(b.take_step, FusedStep) for b in blocks)


@pytest.mark.parametrize('adaptor', list(ADAPTORS.values()), ids=list(ADAPTORS))
def test_a_double_backward_through_the_fused_step_fails_naming_the_way_out(adaptor):
    net, images = _net(adaptor, True), torch.randn(2, 3, 32, 32)
    loss = net(images)[-1].square().mean()
    with pytest.raises(
            RuntimeError, match=r'no second derivative.*create_graph=True.*'
            r'reference_steps\(model\)'):
        torch.autograd.grad(loss, list(net.parameters()), create_graph=True)
    loss = net(images)[-1].square().mean()  # a first-order backward is unaffected
    assert all(g is not None for g in torch.autograd.grad(loss, list(net.parameters())))


@pytest.mark.parametrize('adaptor', list(ADAPTORS.values()), ids=list(ADAPTORS))
def test_inside_the_hessian_tools_a_fused_model_has_the_reference_hessian(adaptor):
    """``double_backward_kernels`` (the Hessian tools' and HessianHook's context) runs the
    reference step: a fused=True model's Hessian-vector product in train mode (batch
    statistics) equals that of the same weights built with fused=False."""
    images = torch.randn(2, 3, 32, 32)
    reference = _hvp(_net(adaptor, False), images)
    fused = _net(adaptor, True)
    with double_backward_kernels(fused):
        got = _hvp(fused, images)
    torch.testing.assert_close(got, reference, rtol=1e-4, atol=1e-4 * reference.abs().max())
    with reference_steps(fused):  # the switch on the model: the same
        torch.testing.assert_close(_hvp(fused, images), got)
    assert reference.abs().max() > 0
    set_fused(fused, True)  # and outside it the fused step is back
    with pytest.raises(RuntimeError, match='no second derivative'):
        _hvp(fused, images)
