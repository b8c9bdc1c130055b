"""An adaptor is its equation, ``forward(x_t, f) -> Δ_t`` (docs/design.md, "The step-size
adaptor contract"): the same Δ_t from the states and from their means over the pooled axes,
and the fused step's passes taken over by what the adaptor declares, not by its class."""
import inspect

import pytest
import torch
import torch.nn as nn
from fused_backbone_pair import backbone_pair  # tests/

from mmstiff.models.steps import (ConstantStep, SEAdaptor, StepAdaptor, StepNetAdaptor, pool_state,
                                  step_from_means)
from mmstiff.models.steps.fused import FusedPhi
from mmstiff.models.steps.fused.se_phi import TorchSEPhiKernels
from mmstiff.models.steps.fused.stepnet_phi import TorchPhiKernels
from mmstiff.models.steps.fused.torch_kernels import TorchStepKernels
from mmstiff.registry import MODELS


def _adaptors():
    return [
        cls for cls in MODELS.module_dict.values()
        if isinstance(cls, type) and issubclass(cls, StepAdaptor)
    ]


def test_every_adaptor_takes_only_the_state_and_the_branch():
    classes = _adaptors()
    assert {SEAdaptor, StepNetAdaptor, ConstantStep} <= set(classes)
    for cls in classes:
        assert list(inspect.signature(cls.forward).parameters) == ['self', 'x_t', 'f'], cls


@pytest.mark.parametrize('cls', [SEAdaptor, StepNetAdaptor])
@pytest.mark.parametrize('layout, shape', [('nchw', (3, 16, 5, 4)), ('nlc', (3, 7, 16))])
def test_the_means_give_the_states_step(cls, layout, shape):
    torch.manual_seed(0)
    adaptor = cls(16, layout=layout).eval()
    with torch.no_grad():
        for p in adaptor.parameters():
            p.add_(0.5 * torch.randn_like(p))
    x_t, f = torch.randn(shape), torch.randn(shape)
    from_states = adaptor(x_t, f)
    means = pool_state(x_t, layout, keepdim=False), pool_state(f, layout, keepdim=False)
    from_means = adaptor(*means)
    assert from_states.shape == ((3, 16, 1, 1) if layout == 'nchw' else (3, 1, 16))
    torch.testing.assert_close(from_means, from_states)
    torch.testing.assert_close(step_from_means(adaptor, *means), from_states)
    # the adaptor's equation on the means, written out
    torch.testing.assert_close(adaptor.step_from_pooled(*means), from_states)


def test_the_fused_passes_follow_the_declaration_not_the_class():
    torch.manual_seed(0)
    se, stepnet = SEAdaptor(32), StepNetAdaptor(32)
    u, p = torch.randn(4, 32), torch.randn(4, 32)
    assert (se.fused_arithmetic, stepnet.fused_arithmetic) == ('se', 'stepnet')
    assert FusedPhi(TorchSEPhiKernels)(se, None, p) is not None
    assert FusedPhi(TorchPhiKernels)(stepnet, u, p) is not None
    for adaptor in (se, stepnet):
        adaptor.fused_arithmetic = None
        assert FusedPhi(TorchSEPhiKernels)(adaptor, u, p) is None
        assert FusedPhi(TorchPhiKernels)(adaptor, u, p) is None
    assert ConstantStep.fused_arithmetic is None


def test_a_take_over_is_asked_within_its_call_only():
    torch.manual_seed(0)
    adaptor = StepNetAdaptor(8).eval()
    u, p = torch.randn(2, 8), torch.randn(2, 8)
    asked, seen = [], []
    adaptor.register_forward_hook(lambda module, args, output: seen.append(output))

    def take_over(module, state, residual):
        asked.append(module)
        return torch.full_like(residual, 0.5)

    step = step_from_means(adaptor, u, p, take_over)
    assert asked == [adaptor] and step.shape == (2, 8, 1, 1)
    assert (step == 0.5).all() and seen[-1] is step  # the hooks see the Δ_t taken over
    assert adaptor._take_over is None and '_take_over' not in adaptor.__dict__
    declined = step_from_means(adaptor, u, p, lambda *args: None)
    torch.testing.assert_close(declined, adaptor(u, p))  # None: the modules compute
    assert len(seen) == 3

    def failing(module, state, residual):
        raise RuntimeError('no kernel')

    with pytest.raises(RuntimeError, match='no kernel'):
        step_from_means(adaptor, u, p, failing)
    assert '_take_over' not in adaptor.__dict__
    torch.testing.assert_close(adaptor(u, p), declined)


class ChannelGate(StepAdaptor):
    """docs/design.md, "A new step-size adaptor": Δ_t = 2 sigmoid(w ⊙ GAP(f))."""

    from_pooled = True

    def __init__(self, channels, layout='nchw', init_cfg=None):
        super().__init__(layout=layout, init_cfg=init_cfg)
        self.weight = nn.Parameter(torch.zeros(channels))

    def step_from_pooled(self, state, residual):
        return self.broadcast(2 * torch.sigmoid(self.weight * residual))


def test_a_new_adaptor_takes_the_fused_step_as_it_is():
    f = torch.randn(2, 4, 3, 3)
    gate = ChannelGate(4)
    torch.testing.assert_close(gate(torch.randn(2, 4, 3, 3), f), torch.ones(2, 4, 1, 1))
    with torch.no_grad():
        gate.weight.copy_(torch.tensor([1.0, -2.0, 0.5, 0.0]))
    expected = 2 * torch.sigmoid(gate.weight * f.mean(dim=(2, 3)))
    torch.testing.assert_close(gate(None, f), expected.view(2, 4, 1, 1))
    for a, b in zip(*backbone_pair(dict(type=ChannelGate), TorchStepKernels, True)):
        torch.testing.assert_close(b, a, rtol=1e-4, atol=1e-4 * max(1.0, a.abs().max().item()))
