"""A tiny classifier on random images for running the diagnostics hooks through a real Runner."""
import torch
import torch.nn as nn
import torch.nn.functional as F
from mmengine.model import BaseModel
from torch.utils.data import DataLoader, TensorDataset

NUM_CLASSES = 4


def tiny_backbone(depth=18, channels=8, adaptor=None):
    """mmpretrain's CIFAR ResNet (4 stages of basic blocks), or mmstiff's step ResNet.

    The last norm of each residual branch keeps its default initialisation (mmpretrain zeroes
    it): with the zero-initialised residuals every block would start as the identity and every
    NSI would be exactly 0, which would test nothing.
    """
    kwargs = dict(depth=depth, stem_channels=channels, base_channels=channels,
                  zero_init_residual=False)
    if adaptor is None:
        from mmpretrain.models.backbones import ResNet_CIFAR
        return ResNet_CIFAR(**kwargs)
    from mmstiff.models.backbones import StepResNet_CIFAR
    return StepResNet_CIFAR(adaptor=adaptor, **kwargs)


class ToyClassifier(BaseModel):
    """``backbone -> global average pool -> linear``; ``forward(inputs, labels, mode)``."""

    def __init__(self, backbone):
        super().__init__()
        self.backbone = backbone
        channels = getattr(backbone, 'feat_dim', None) or backbone.embed_dims
        self.head = nn.Linear(channels, NUM_CLASSES)

    def forward(self, inputs, labels=None, mode='tensor'):
        logits = self.head(self.backbone(inputs)[-1].mean(dim=(2, 3)))
        if mode == 'loss':
            return dict(loss=F.cross_entropy(logits, labels))
        return logits


def toy_dataset(num=16, size=16, seed=0):
    gen = torch.Generator().manual_seed(seed)
    images = torch.randn(num, 3, size, size, generator=gen)
    labels = torch.randint(0, NUM_CLASSES, (num, ), generator=gen)
    return TensorDataset(images, labels)


def toy_loader(batch_size=4, sampler=None, **kwargs):
    return DataLoader(toy_dataset(**kwargs), batch_size=batch_size, shuffle=False, sampler=sampler)


def read_json_lines(path):
    import json
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
