"""Synchronised batch normalisation that also runs on the CPU (docs/methods.md §3, "The
adaptor's normalisation").

torch's ``nn.SyncBatchNorm`` synchronises only CUDA tensors: in a distributed CPU run (gloo,
``tools/dist_train.sh`` on a machine without a GPU) its training forward raises "expected input
tensor to be on GPU". :class:`CPUSyncBatchNorm` is that class with a CPU path: the per-channel
sums ``Σx``, ``Σx²`` and the sample count of every process are summed with an all-reduce that
carries gradients (``torch.distributed.nn.functional.all_reduce``), so the batch mean and
variance are those of the samples of all processes, as on the GPU:

    mean = Σ_r Σx / N,   var = Σ_r Σx² / N − mean²   (N: samples of all processes)

It is meant for small inputs such as the pooled (B, C, 1, 1) values of a step-size adaptor;
CUDA tensors, eval mode and single-process runs take torch's own path unchanged. Being an
``nn.SyncBatchNorm``, torch's and MMEngine's conversions and MMEngine's revert to plain BN on one
process treat it as one.
"""
from typing import Optional, Tuple

import torch
import torch.distributed as dist
import torch.nn as nn

from mmstiff.registry import MODELS


def distributed() -> bool:
    """Whether this process is one of several of an initialised process group."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def synchronised_statistics(
        x: torch.Tensor, group: Optional['dist.ProcessGroup'] = None
) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(mean, biased variance, N)`` per channel of ``x`` over the samples of every process
    of ``group``, differentiable through the all-reduce."""
    from torch.distributed.nn.functional import all_reduce
    dims = [0] + list(range(2, x.dim()))
    channels = x.shape[1]
    local = torch.cat([x.sum(dims), (x * x).sum(dims), x.new_full((1, ), x.numel() // channels)])
    total = all_reduce(local, group=group if group is not None else dist.group.WORLD)
    count = total[-1]
    mean = total[:channels] / count
    var = total[channels:2 * channels] / count - mean * mean
    return mean, var.clamp_min(0), count


@MODELS.register_module()
class CPUSyncBatchNorm(nn.SyncBatchNorm):
    """``nn.SyncBatchNorm`` that synchronises CPU tensors too (module docstring); same
    arguments."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.is_cuda or not (self.training and distributed()):
            return super().forward(x)
        mean, var, count = synchronised_statistics(x, self.process_group)
        if self.track_running_stats:
            with torch.no_grad():
                self.num_batches_tracked.add_(1)
                momentum = 1.0 / float(self.num_batches_tracked) if self.momentum is None \
                    else self.momentum
                unbiased = var * count / (count - 1).clamp_min(1)
                self.running_mean.lerp_(mean.detach(), momentum)
                self.running_var.lerp_(unbiased.detach(), momentum)
        shape = (1, -1) + (1, ) * (x.dim() - 2)
        out = (x - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        if self.affine:
            out = out * self.weight.view(shape) + self.bias.view(shape)
        return out
