"""The backbones of mmpretrain's and mmdet's registries, their test cases and the independent
capture of their blocks' inputs and outputs, for the registry walk (test_zoo.py)."""
import glob
import importlib.util
import os.path as osp
import re

import torch

HERE = osp.dirname(osp.abspath(__file__))
SCOPES = (('mmpretrain', 'mmpretrain.models.backbones'), ('mmdet', 'mmdet.models.backbones'))


def _case_modules():
    for path in sorted(glob.glob(osp.join(HERE, 'zoo_cases', '*.py'))):
        name = f'zoo_cases_{osp.splitext(osp.basename(path))[0]}'
        spec = importlib.util.spec_from_file_location(name, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        yield module


def load_cases():
    """``(CASES, BRANCHES)`` merged over tests/analysis/zoo_cases/*.py."""
    cases, branches = {}, {}
    for module in _case_modules():
        for key, case in getattr(module, 'CASES', {}).items():
            assert key not in cases, f'{key} has two cases'
            cases[key] = case
        for cls, steps in getattr(module, 'BRANCHES', {}).items():
            assert cls not in branches, f'{cls} has two branch tables'
            branches[cls] = steps
    return cases, branches


def backbone_param(key):
    """``pytest.param`` of a backbone key, marked ``det`` for mmdet's."""
    import pytest
    marks = [pytest.mark.det] if key.startswith('mmdet.') else []
    return pytest.param(key, marks=marks, id=key)


def registry_backbones():
    """``['scope.Name', ...]`` of every backbone class the installed packages register (a
    package that is not installed gives none)."""
    names = []
    for scope, package in SCOPES:
        try:
            module = importlib.import_module(package)
        except ImportError:
            continue
        names.extend(f'{scope}.{name}' for name in module.__all__)
    return names


def build_backbone(key, case):
    """The backbone ``key`` (``'scope.Name'``) built from its case, in eval mode, after the
    case's ``setup`` (a callable with no argument: state some backbones read, e.g. a sparse
    mask) where it has one. A class its package exports without registering it is built from
    the class."""
    scope, _, name = key.partition('.')
    registry = importlib.import_module(f'{scope}.registry').MODELS
    torch.manual_seed(0)
    cfg = dict(case.get('cfg', {}))
    if registry.get(key) is None:
        package = dict(SCOPES)[scope]
        model = getattr(importlib.import_module(package), name)(**cfg)
    else:  # in the registry of its own scope, whatever the default scope is
        cfg.setdefault('_scope_', scope)
        model = registry.build(dict(type=name, **cfg))
    if case.get('prepare') is not None:  # e.g. weights a backbone leaves uninitialised
        case['prepare'](model)
    model.eval()  # some backbones override train() without returning self
    _randomise_layer_scales(model)
    if case.get('setup') is not None:
        case['setup']()
    return model


#: the leaf names of layer-scale parameters (a learned per-channel step size)
LAYER_SCALE = re.compile(r'(^|\.)(gamma\w*|layer_scale\w*|(ls|gamma)\d\.weight)$')


def _randomise_layer_scales(model):
    """Layer scales start at 1e-6 to 1e-2 in most zoo models, so the step is tiny beside the
    state; drawn in [0.3, 1.2] instead, a wrong reading of f or Δ cannot hide in the rounding."""
    gen = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if param.dim() == 1 and LAYER_SCALE.search(name):
                param.copy_(0.3 + 0.9 * torch.rand(param.shape, generator=gen))


def case_input(case):
    return torch.randn(*case['input'], generator=torch.Generator().manual_seed(1))


class BlockCalls:
    """Forward hooks on blocks that keep each call's arguments and output (cloned: the
    independent view the recorder's states are checked against)."""

    def __init__(self, blocks):
        self.calls = {block.name: [] for block in blocks}
        self._handles = [
            block.module.register_forward_hook(self._hook(block.name), with_kwargs=True)
            for block in blocks
        ]
        self._inputs = {}
        self._handles += [
            block.module.register_forward_pre_hook(self._pre(block.name), with_kwargs=True)
            for block in blocks
        ]

    def _pre(self, name):

        def pre(module, args, kwargs):
            self._inputs[name] = [a.clone() if torch.is_tensor(a) else a for a in args]

        return pre

    def _hook(self, name):

        def hook(module, args, kwargs, output):
            out = output if torch.is_tensor(output) else output[0]
            self.calls[name].append((self._inputs.pop(name), dict(kwargs), out.detach().clone()))

        return hook

    def remove(self):
        for handle in self._handles:
            handle.remove()
