"""Helpers for comparing a network with an upstream reference that holds the same weights."""
import torch


def randomise_bn(model):
    """Non-trivial BN statistics and affine parameters, so eval-mode outputs mean something."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return model


def assert_same_outputs(reference, model, x, num_outputs=None):
    """Bit-identical outputs in eval and in train mode (and ``num_outputs`` of them)."""
    for mode in (False, True):
        reference.train(mode), model.train(mode)
        outs, refs = model(x), reference(x)
        assert len(outs) == len(refs)
        if num_outputs is not None:
            assert len(outs) == num_outputs
        for ref, out in zip(refs, outs):
            assert torch.equal(ref, out)
