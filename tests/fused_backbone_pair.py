"""A StepResNet-18 computed by the reference step and by the fused step on given kernels, for
the tests of the adaptors' (B, C) passes. Importable from any test folder (it sits beside the
root conftest.py)."""
import contextlib
import copy

import torch

from mmstiff.models.backbones import StepResNet
from mmstiff.models.steps import forced_step_kernels, set_fused


def backbone_pair(adaptor, kernels, train, batch=4, base_channels=8, **kwargs):
    """``[output, input and parameter gradients..., buffers...]`` of a StepResNet-18 with
    ``adaptor`` (a config dict) through its modules and through a copy with ``fused=True`` on
    ``kernels``, after a forward and backward pass of one batch (``batch`` images, 32² or 64²
    for one sample) in ``train`` mode; ``kwargs`` go to the backbone."""
    torch.manual_seed(0)
    reference = StepResNet(18, base_channels=base_channels, stem_channels=base_channels,
                           adaptor=adaptor, **kwargs)
    with torch.no_grad():  # off the initialisation
        for p in reference.parameters():
            p.add_(0.05 * torch.randn_like(p))
    fused = set_fused(copy.deepcopy(reference), True)
    size = 32 if batch > 1 else 64
    images = torch.randn(batch, 3, size, size)
    results = []
    for net, forced in ((reference, None), (fused, kernels)):
        net.train(train)
        x = images.detach().clone().requires_grad_()
        # the backward inside the block too: with_cp recomputes the blocks there
        with forced_step_kernels(forced, net) if forced else contextlib.nullcontext():
            out = net(x)[-1]
            (out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum().backward()
        grads = [x.grad] + [p.grad for p in net.parameters() if p.grad is not None]
        results.append([out, *grads, *[b.clone() for b in net.buffers()]])
    assert len(results[0]) == len(results[1])
    return results
