"""``WithSteps``: a step-size adaptor on the residual steps of any backbone the recorders read.

The backbone is built as its config says and stays that backbone (its class, its state-dict
keys, its ``out_indices`` / ``frozen_stages`` / ``norm_eval`` / ``with_cp``); each chosen step
gets an adaptor, a submodule of its block (``<block>.step_adaptor``, or
``<block>.step_adaptors.<step>`` in a block of several steps), and the hooks of
:class:`~mmstiff.models.written.step_writer.StepWriter`, placed by the block's
:class:`~mmstiff.analysis.step_specs.BlockSpec` (docs/methods.md §15).
"""
from typing import Dict, List, Optional, Sequence, Tuple, Union

import torch
import torch.nn as nn

from mmstiff.analysis.blocks import (WRITTEN_SPEC_ATTR, ResidualBlock, block_spec, block_types_of,
                                     find_blocks)
from mmstiff.analysis.step_specs import BlockSpec, Step, write_refusal
from mmstiff.analysis.trajectory import stage_of
from mmstiff.analysis.zoo import non_residual_reason
from mmstiff.models.steps import (StepAdaptor, adaptor_placement, adaptor_with_norm, build_adaptor,
                                  check_adaptor_norm, init_keeping_starts,
                                  release_adaptor_statistics, resolve_adaptor)
from mmstiff.models.steps.norm import check_norm_cfg
from mmstiff.registry import MODELS
from .step_writer import StepWriter, written_steps

#: the values of ``steps``: every block of the chosen stages, or the last block of each
PLACEMENTS = ('all', 'last')
#: the name of the adaptor of a one-step block, and the ModuleDict of a block of several
SINGLE, SEVERAL = 'step_adaptor', 'step_adaptors'


class WrittenBackbone:
    """Mixed into the class of a backbone whose steps were written: its ``init_weights``
    keeps the adaptors' start, and its ``train`` lets the adaptors' BN follow
    ``adaptor_norm`` under ``norm_eval`` (as :class:`~mmstiff.models.backbones.StepResNet`)."""

    adaptor_norm = 'auto'

    def init_weights(self) -> None:
        init_keeping_starts(self, super().init_weights)

    def train(self, mode: bool = True) -> nn.Module:
        super().train(mode)
        if mode and getattr(self, 'norm_eval', False):
            # adaptors of frozen stages have no trainable parameter: they stay frozen
            adaptors = [
                m for m in self.modules()
                if isinstance(m, StepAdaptor) and any(p.requires_grad for p in m.parameters())
            ]
            release_adaptor_statistics(adaptors, self.adaptor_norm, owner=self)
        return self


def written_class(cls: type) -> type:
    """The subclass of ``cls`` with :class:`WrittenBackbone` mixed in (same name; a new class
    per built model, so that no module-level table of classes grows)."""
    return type(cls.__name__, (WrittenBackbone, cls), {'__doc__': cls.__doc__})


def _check_choice(name, value, choices):
    if value not in choices:
        raise ValueError(f'{name}={value!r} is not supported; expected one of {choices}')
    return value


def _check_branches(branches):
    if branches is None:
        return None
    if isinstance(branches, str):
        branches = (branches, )
    if not isinstance(branches, (list, tuple)) or not branches or not all(
            isinstance(b, str) and b for b in branches):
        raise ValueError(f'branches={branches!r} is not supported; expected None (every step) '
                         "or a sequence of step names, e.g. ('msa', 'mlp')")
    return tuple(branches)


def _batch_norm_cfg(backbone: nn.Module) -> Optional[dict]:
    """The backbone's ``norm_cfg`` where it is a batch norm (BN, SyncBN): the adaptors normalise
    their pooled statistics over the batch, as the backbone's own BN layers do; a layer or group
    norm backbone leaves the adaptor's default."""
    cfg = getattr(backbone, 'norm_cfg', None)
    if isinstance(cfg, dict) and 'BN' in str(cfg.get('type', '')):
        return dict(cfg)
    return None


def _probe_input(backbone: nn.Module, probe_input) -> torch.Tensor:
    if probe_input is not None:
        if not (isinstance(probe_input, (list, tuple)) and len(probe_input) >= 3
                and all(isinstance(n, int) and n > 0 for n in probe_input)):
            raise ValueError(f'probe_input={probe_input!r} is not supported; expected the shape '
                             'of one input batch, e.g. (1, 3, 224, 224)')
        shape = tuple(probe_input)
    else:
        size = getattr(backbone, 'img_size', None) or 224
        size = tuple(size) if isinstance(size, (list, tuple)) else (int(size), int(size))
        # the stem's input channels: those of the first convolution (an ``in_channels``
        # attribute of the backbone may name another layer's)
        first = next((m for m in backbone.modules() if isinstance(m, nn.Conv2d)), None)
        shape = (1, first.in_channels if first is not None else 3) + size
    return torch.randn(*shape, generator=torch.Generator().manual_seed(0))


def _stages(blocks: List[ResidualBlock]) -> Tuple[List[str], List[List[ResidualBlock]]]:
    names, groups = [], []
    for block in blocks:
        stage = stage_of(block.name)
        if not names or names[-1] != stage:
            names.append(stage)
            groups.append([])
        groups[-1].append(block)
    return names, groups


def _refuse(backbone: nn.Module, block: ResidualBlock, why: str) -> ValueError:
    return ValueError(f'{type(backbone).__name__}: the steps of block {block.name} '
                      f'({type(block.module).__name__}) cannot be written: {why}')


def _spec_of(backbone, block, declared) -> BlockSpec:
    spec = block_spec(block.module, declared)
    if spec is None:
        raise _refuse(
            backbone, block, f"it is read by the '{block.kind}' kind but no spec says "
            'where its f is formed; declare one in block_types with a branch tap '
            '(docs/methods.md §15)')
    return spec


def _layout(backbone, block, name, shapes) -> Tuple[str, int]:
    x_shape, f_shape = shapes
    if x_shape != f_shape:
        raise _refuse(
            backbone, block, f'step {name!r}: x_t {tuple(x_shape)} and f '
            f'{tuple(f_shape)} differ in shape')
    if len(f_shape) == 4:
        return 'nchw', f_shape[1]
    if len(f_shape) == 3:
        return 'nlc', f_shape[2]
    raise _refuse(
        backbone, block, f'step {name!r}: f has shape {tuple(f_shape)}; expected '
        '(B, C, H, W) feature maps or (B, N, C) tokens')


def _probe(backbone, chosen, probe_input):
    """``{block name: {step name: (x_t shape, f shape)}}`` from one pass in eval mode."""
    writers = {}
    handles = []
    for block, steps in chosen:
        writer = StepWriter(block.module, written_steps(block.module, steps))
        writers[block.name] = writer
        handles += writer.register()
    was_training = backbone.training
    backbone.eval()
    try:
        with torch.no_grad():
            backbone(_probe_input(backbone, probe_input))
    finally:
        for handle in handles:
            handle.remove()
        backbone.train(was_training)
    return {name: (writer.called, writer.shapes) for name, writer in writers.items()}


@MODELS.register_module()
def WithSteps(backbone: dict, adaptor: dict, steps: str = 'all',
              adaptor_stages: Optional[Sequence[bool]] = None,
              adaptor_blocks: Optional[Sequence[Optional[Sequence[int]]]] = None,
              branches: Optional[Union[str, Sequence[str]]] = None, adaptor_norm: str = 'auto',
              adaptor_norm_cfg: Optional[dict] = None, block_types: Optional[dict] = None,
              probe_input: Optional[Sequence[int]] = None) -> nn.Module:
    """Build ``backbone`` and give its chosen residual steps a step-size adaptor.

    Args:
        backbone (dict): the backbone's config, e.g. ``dict(type='mmpretrain.ConvNeXt',
            arch='tiny')``; any residual backbone of mmpretrain, mmdet or timm
            (``mmpretrain.TIMMBackbone``) the recorders read.
        adaptor (dict): the adaptor, e.g. ``dict(type='mmstiff.StepNetAdaptor',
            start='identity')``; each step builds its own with its channels and layout.
        steps (str): ``'all'`` (default): every block of the chosen stages; ``'last'``: the last
            block of each chosen stage (``adaptor_blocks`` overrides it).
        adaptor_stages (Sequence[bool], optional): one flag per stage (the blocks' parent
            modules, in order); None: every stage.
        adaptor_blocks (Sequence[Sequence[int] | None], optional): per stage, the indices of
            the blocks that get adaptors (negative from the end).
        branches (str | Sequence[str], optional): the steps of a block of several steps that
            get adaptors, by name (``('msa', 'mlp')``, ``'mlp'``); None: every step.
        adaptor_norm (str): ``'auto'``, ``'follow'`` or ``'train'``: which adaptor BN layers
            learn their statistics under ``norm_eval=True`` (as ``StepResNet``).
        adaptor_norm_cfg (dict, optional): the adaptors' norm layer; None: the backbone's
            ``norm_cfg`` where it is a batch norm, else the adaptor's default (BN).
        block_types (dict, optional): ``{class name: BlockSpec fields}`` for block classes the
            zoo tables do not describe (a ``branch`` per step says where f is formed).
        probe_input (Sequence[int], optional): the input shape of the one pass that measures
            each step's channels at build time; None: one image of the backbone's
            ``img_size`` (224 where it has none) with the input channels of its first
            convolution.

    Returns:
        nn.Module: the backbone itself, its blocks holding their adaptors.

    Raises:
        ValueError: a bad argument, a backbone with no residual step, or a chosen block whose
            steps cannot be written, naming it and the reason.
    """
    if not isinstance(backbone, dict) or 'type' not in backbone:
        raise ValueError(f'backbone={backbone!r} is not supported; expected a backbone config '
                         "with a 'type', e.g. dict(type='mmpretrain.ConvNeXt', arch='tiny')")
    adaptor = resolve_adaptor(adaptor)
    if adaptor is None:
        raise ValueError("adaptor=None is not supported; expected an adaptor config, e.g. "
                         "dict(type='mmstiff.StepNetAdaptor', start='identity')")
    _check_choice('steps', steps, PLACEMENTS)
    branches = _check_branches(branches)
    adaptor_norm = check_adaptor_norm(adaptor_norm)
    adaptor_norm_cfg = None if adaptor_norm_cfg is None else check_norm_cfg(adaptor_norm_cfg)
    adaptor_with_norm(adaptor, None, adaptor_norm_cfg)  # both setting the norm fails here
    declared = block_types_of(block_types)

    model = MODELS.build(backbone)
    why = non_residual_reason(model)
    if why:
        raise ValueError(f'{type(model).__name__} has no residual step to write: {why}')
    blocks = find_blocks(model, block_types=block_types)
    if not blocks:
        raise ValueError(f'{type(model).__name__} has no residual block the recorders know; '
                         'declare its block classes in block_types (docs/methods.md §15)')
    stage_names, groups = _stages(blocks)
    if steps == 'last' and adaptor_blocks is None:
        adaptor_blocks = [[-1]] * len(groups)
    placement = adaptor_placement([len(g) for g in groups], adaptor_stages, adaptor_blocks)

    chosen = []
    for group, flags in zip(groups, placement):
        for block, flag in zip(group, flags):
            if not flag:
                continue
            spec = _spec_of(model, block, declared)
            picked = [s for s in spec.steps if branches is None or s.name in branches]
            why = write_refusal(spec, picked)
            if why:
                raise _refuse(model, block, why)
            if picked:
                chosen.append((block, picked, spec))
    if branches is not None:
        known = {s.name for _, _, spec in chosen for s in spec.steps}
        unknown = [b for b in branches if b not in known]
        if unknown or not chosen:
            names = sorted({
                s.name
                for b in blocks
                for s in (block_spec(b.module, declared) or BlockSpec('', '')).steps
            })
            raise ValueError(f'branches={branches!r}: {unknown or list(branches)} name no step '
                             f'of the chosen blocks; their steps are {names}')
    if not chosen:
        raise ValueError(f'adaptor_stages={adaptor_stages!r}, adaptor_blocks={adaptor_blocks!r} '
                         f'choose no block of {type(model).__name__} (stages {stage_names})')

    shapes = _probe(model, [(b, s) for b, s, _ in chosen], probe_input)
    norm_cfg = adaptor_with_norm(adaptor, _batch_norm_cfg(model), adaptor_norm_cfg)
    for block, picked, spec in chosen:
        called, measured = shapes[block.name]
        if not called:
            continue  # the pass did not reach this block (an unused branch of the network)
        _write_block(model, block, picked, spec, measured, norm_cfg)

    model.__class__ = written_class(type(model))
    model.adaptor_norm = adaptor_norm
    return model


def _write_block(model, block, picked, spec, measured, adaptor_cfg) -> None:
    """Build the adaptors of one block's picked steps and register its writer."""
    module = block.module
    several = len(spec.steps) > 1
    if several:
        module.add_module(SEVERAL, nn.ModuleDict())
    paths: Dict[str, str] = {}
    for step in picked:
        if step.name not in measured:
            raise _refuse(
                model, block, f'step {step.name!r}: its taps were not reached in the '
                f'forward pass (branch {step.branch!r}, state {step.start!r})')
        layout, channels = _layout(model, block, step.name, measured[step.name])
        adaptor = build_adaptor(adaptor_cfg, channels, layout)
        if several:
            getattr(module, SEVERAL)[step.name] = adaptor
            paths[step.name] = f'{SEVERAL}.{step.name}'
        else:
            module.add_module(SINGLE, adaptor)
            paths[step.name] = SINGLE
    StepWriter(module, written_steps(module, picked, paths)).register()
    if spec.kind is None:  # read by its taps: Δ is the adaptor's times the block's own
        setattr(
            module, WRITTEN_SPEC_ATTR,
            spec._replace(
                steps=tuple(_with_adaptor(step, paths.get(step.name)) for step in spec.steps)))


def _with_adaptor(step: Step, path: Optional[str]) -> Step:
    if path is None:
        return step
    scale = f'output:{path}' if step.scale is None else f'output:{path} * {step.scale}'
    return step._replace(scale=scale)


__all__ = ['WithSteps', 'WrittenBackbone', 'written_class', 'PLACEMENTS']
