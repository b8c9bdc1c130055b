"""SE's (B, C) arithmetic as one forward and one backward computation (docs/methods.md §0, "The
fused step"; the math: §3).

``Δ = scale · σ(W2 · relu(W1 · p + b1) + b2)`` with ``p = GAP(f)``, ``W1`` (S, C) and ``W2``
(C, S) the squeeze and excitation 1×1 convolutions' weights: a two-layer perceptron on the
batch's rows. :class:`SEPhi` computes it where the fused step's kernels have the passes
(``se_forward`` / ``se_backward``; :func:`se_phi_mode` says where the adaptor's modules run
instead) and keeps for the backward only ``p``, the hidden ``h`` and Δ.
:class:`TorchSEPhiKernels` is the PyTorch expression of both passes (the reference of the
Triton kernels of :mod:`.triton_se`, checked by ``gradcheck``). Outside a fused step, plain
units compute the same perceptron as two matrix products (:func:`se_excitation`) rather than
two 1×1 convolutions of a 1×1 map.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F
from mmcv.cnn import ConvModule

from mmstiff.utils.reference_steps import first_order
from .stepnet_phi import hooked


class TorchSEPhiKernels:
    """The two passes of :class:`SEPhi` as PyTorch operations on (B, C) tensors."""

    #: the largest batch the SE passes take (any)
    SE_MAX_BATCH = float('inf')

    @staticmethod
    def se_forward(p, w1, b1, w2, b2, scale):
        """``(Δ, h)``: ``h = relu(p W1ᵀ + b1)`` (B, S), ``Δ = scale σ(h W2ᵀ + b2)`` (B, C), in
        the weights' dtype (a half-precision ``p`` under AMP is read in it)."""
        hidden = torch.addmm(b1, p.to(w1.dtype), w1.t()).relu_()
        return scale * torch.sigmoid(torch.addmm(b2, hidden, w2.t())), hidden

    @staticmethod
    def se_backward(grad, p, hidden, step, w1, w2, scale):
        """The gradients of ``(p, W1, b1, W2, b2)`` from Δ's: ``σ' = Δ (1 - Δ / scale) / scale``
        and the ReLU's mask ``h > 0``."""
        g_z = grad * step * (1 - step / scale)
        g_h = (g_z @ w2).masked_fill_(hidden <= 0, 0.0)
        return ((g_h @ w1).to(p.dtype), g_h.t() @ p.to(w1.dtype), g_h.sum(dim=0), g_z.t() @ hidden,
                g_z.sum(dim=0))


class SEPhi(torch.autograd.Function):
    """Δ (B, C) of an SE adaptor from ``p = GAP(f)`` through ``kernels``
    (:class:`TorchSEPhiKernels` or the Triton set)."""

    @staticmethod
    def forward(ctx, p, w1, b1, w2, b2, scale, kernels):
        step, hidden = kernels.se_forward(p, w1, b1, w2, b2, scale)
        ctx.scale, ctx.kernels = scale, kernels
        ctx.save_for_backward(p, hidden, step, w1, w2)
        return step

    @staticmethod
    @first_order
    def backward(ctx, grad):
        p, hidden, step, w1, w2 = ctx.saved_tensors
        grad = grad if grad.is_contiguous() else grad.contiguous()
        grads = ctx.kernels.se_backward(grad, p, hidden, step, w1, w2, ctx.scale)
        return (*grads, None, None)


def _plain_unit(unit, act):
    """Whether ``unit`` is a ConvModule of a biased 1×1 convolution followed by ``act`` only."""
    conv = getattr(unit, 'conv', None)
    return (type(unit) is ConvModule and type(conv) is nn.Conv2d and conv.bias is not None
            and conv.groups == 1 and conv.kernel_size == (1, 1) and unit.norm_name is None
            and not unit.with_spectral_norm and unit.order == ('conv', 'norm', 'act')
            and type(unit.activate) is act)


def plain_units(adaptor):
    """Whether ``adaptor``'s two units are a biased 1×1 convolution with ReLU, then Sigmoid,
    and nothing else, with no hook on them (their hooks see what the modules compute): then
    its Δ may be computed from their weights without calling them."""
    units = (adaptor.conv1, adaptor.conv2)
    if not (_plain_unit(adaptor.conv1, nn.ReLU) and _plain_unit(adaptor.conv2, nn.Sigmoid)):
        return False
    return not hooked(*units, *(m for unit in units for m in unit.children()))


def unit_weights(adaptor):
    """``(W1, b1, W2, b2)`` of ``adaptor``'s units, the weights as (S, C) and (C, S) views."""
    conv1, conv2 = adaptor.conv1.conv, adaptor.conv2.conv
    return (conv1.weight.view(conv1.weight.shape[:2]), conv1.bias,
            conv2.weight.view(conv2.weight.shape[:2]), conv2.bias)


def se_excitation(p, w1, b1, w2, b2, scale):
    """``Δ = scale · σ(W2 · relu(W1 · p + b1) + b2)`` (B, C) of ``p = GAP(f)`` (B, C) as two
    matrix products: what the units compute on ``p`` as a (B, C, 1, 1) map, with autograd's
    backward, without a convolution's overhead on a 1×1 map (docs/benchmarks.md, "SE's
    excitation as matrix products")."""
    step = torch.sigmoid(F.linear(F.linear(p, w1, b1).relu_(), w2, b2))
    return step * scale if scale != 1.0 else step


def se_phi_mode(adaptor, batch, kernels):
    """Whether :class:`SEPhi` computes ``adaptor``'s Δ on ``kernels`` for a batch of ``batch``
    samples: kernels with the SE passes, :func:`plain_units` and a batch the kernels hold."""
    if kernels is None or not hasattr(kernels, 'se_forward') or batch > kernels.SE_MAX_BATCH:
        return False
    return plain_units(adaptor)
