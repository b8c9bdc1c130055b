"""What a recorded iteration of the diagnostics hooks costs, structurally.

* During the forward pass the hooks only queue tensor ops on the model's device: nothing is read
  back to the host (no ``.item()``, ``float()``, ``.tolist()``, ``.cpu()``), so on a GPU a
  recorded iteration never waits for the device.
* When the recorded iterations are written, the work does not grow with the number of blocks:
  the same number of tensor ops for a network of 8 blocks as for one of 33 (the values of all
  blocks are stacked and reduced together, by groups of equal shapes).

``tests/cuda/`` checks the first point again with CUDA's synchronisation debug mode.
"""
import math
from collections import Counter

import pytest
import torch
from diagnostics_toy import tiny_backbone
from host_reads import HostReadOps, no_host_reads
from torch.utils._python_dispatch import TorchDispatchMode

from mmstiff.engine.hooks import FrequencyHook, StiffnessHook
from mmstiff.engine.hooks.scalar_rows import BatchedReductions


class OpCounter(TorchDispatchMode):
    """Counts the ATen ops dispatched inside it."""

    def __init__(self):
        super().__init__()
        self.ops = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def _vit(layers, attn_scale=False):
    if attn_scale:
        from mmstiff.models.backbones import StepViT
        return StepViT(
            arch=dict(embed_dims=16, num_layers=layers, num_heads=2, feedforward_channels=32),
            img_size=16, patch_size=4, attn_scale_layers='all')
    from mmpretrain.models.backbones import VisionTransformer
    return VisionTransformer(
        arch=dict(embed_dims=16, num_layers=layers, num_heads=2, feedforward_channels=32),
        img_size=16, patch_size=4)


def _recorded_rows(backbone, hooks, iterations=3, size=16):
    """Run ``iterations`` recorded forward passes (training mode, with autograd as in training)
    and return each hook's rows, ``{hook: [{role: outputs}]}``."""
    backbone.train()
    recorders = {hook: hook.build_recorders(backbone) for hook in hooks}
    rows = {hook: [] for hook in hooks}
    for seed in range(iterations):
        images = torch.randn(4, 3, size, size, generator=torch.Generator().manual_seed(seed))
        for found in recorders.values():
            for recorder in found.values():
                recorder.clear()
                recorder.start()
        backbone(images)
        for hook, found in recorders.items():
            for recorder in found.values():
                recorder.stop()
            rows[hook].append({role: recorder.outputs for role, recorder in found.items()})
    return rows


@pytest.mark.parametrize('build', [
    lambda: tiny_backbone(channels=4, adaptor=dict(type='mmstiff.StepNetAdaptor')),
    lambda: tiny_backbone(channels=4, adaptor=dict(type='mmstiff.ConstantStep', step=0.5)),
    lambda: _vit(2),
    lambda: _vit(2, attn_scale=True),
], ids=['stepnet', 'constant-step', 'vit', 'vit-attnscale'])
def test_a_recorded_forward_pass_reads_nothing_back_to_the_host(build, monkeypatch):
    torch.manual_seed(0)
    backbone = build()
    hooks = [StiffnessHook(interval=1), FrequencyHook(interval=1, num_samples=2)]
    with no_host_reads(monkeypatch), HostReadOps() as ops:
        rows = _recorded_rows(backbone, hooks, iterations=1)
    assert ops.reads == []
    for hook in hooks:  # the values are there, and finite, once written
        (scalars, ) = hook.summarise_rows(rows[hook])
        assert scalars and all(
            math.isfinite(v)
            for k, v in scalars.items() if not k.startswith(('dlogamp/', 'nsi_step_corr/')))


def _summary_ops(backbone, hook):
    """The ATen ops of compacting three recorded iterations and writing them."""
    rows = _recorded_rows(backbone, [hook])[hook]
    hook.summarise_rows(rows)  # once first: what is computed once per network is cached
    with OpCounter() as counter:
        summaries = hook.summarise_rows([hook.compact(outputs) for outputs in rows])
    return counter.ops, summaries


@pytest.mark.slow
@pytest.mark.parametrize(
    'make_hook',
    [lambda: StiffnessHook(interval=1), lambda: FrequencyHook(interval=1, num_samples=2)],
    ids=['stiffness', 'frequency'])
def test_writing_costs_the_same_tensor_ops_at_any_depth(make_hook):
    torch.manual_seed(0)
    shallow, shallow_rows = _summary_ops(tiny_backbone(depth=18, channels=4), make_hook())
    deep, deep_rows = _summary_ops(tiny_backbone(depth=101, channels=4), make_hook())
    assert len(deep_rows[0]) > 2 * len(shallow_rows[0])  # 33 blocks against 8
    assert deep == shallow, (deep - shallow, shallow - deep)
    # transformers: 6 layers cost what 2 do
    shallow, _ = _summary_ops(_vit(2), make_hook())
    deep, _ = _summary_ops(_vit(6), make_hook())
    assert deep == shallow, (deep - shallow, shallow - deep)


def test_batched_reductions_keep_the_order_of_the_values():
    batch = BatchedReductions()
    mean = lambda stack: stack.double().flatten(1).mean(dim=1)  # noqa: E731
    total = lambda stack: stack.double().flatten(1).sum(dim=1)  # noqa: E731
    tensors = [
        torch.tensor([1.0, 3.0]),
        torch.tensor([[1.0, 2.0], [3.0, 4.0]]),
        torch.tensor([5.0, 7.0]),
        torch.tensor([2.0, 4.0], dtype=torch.float64)
    ]
    indices = [
        batch.add(tensors[0], mean),
        batch.add(tensors[1], total),
        batch.add(tensors[2], mean),
        batch.add(tensors[3], mean),
        batch.add(tensors[0], total)
    ]
    assert indices == [0, 1, 2, 3, 4]
    assert batch.compute() == [2.0, 10.0, 6.0, 3.0, 4.0]
    assert BatchedReductions().compute() == []
