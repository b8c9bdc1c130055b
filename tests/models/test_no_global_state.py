"""No module of ``mmstiff.models``, nor the modules of ``mmstiff.utils`` its forward path reads
(the reference-step switch, the step sums, the layouts), keeps mutable global state: what a
step needs (its kernels, a recorder's request, the reference step) lives on the blocks or is
passed to it.

Read in the sources (no ``global`` statement, no module-level container that any code of the
module mutates, no module-level cache) and checked at run time (a train step of each kind of
step, recorded, on forced kernels and under the switch, leaves every module-level container of
``mmstiff.models`` as it was).
"""
import ast
import copy
import importlib
import pkgutil
from pathlib import Path

import pytest
import torch

import mmstiff.models
from mmstiff.analysis import TrajectoryRecorder
from mmstiff.models.backbones import StepResNet, StepViT
from mmstiff.models.steps import forced_step_kernels, set_fused
from mmstiff.models.steps.fused.torch_kernels import TorchStepKernels
from mmstiff.utils.reference_steps import reference_steps

ROOT = Path(mmstiff.models.__file__).parent
#: the modules outside ``mmstiff.models`` that a block's forward reads
FORWARD_UTILS = ('reference_steps.py', 'step_sums.py', 'layout.py')
MUTATORS = frozenset(('append', 'extend', 'insert', 'pop', 'remove', 'clear', 'update', 'add',
                      'setdefault', 'discard', 'popitem', 'sort', 'reverse'))
CACHES = frozenset(('lru_cache', 'cache', 'cached_property'))


def _sources():
    return sorted(ROOT.rglob('*.py')) + [ROOT.parent / 'utils' / name for name in FORWARD_UTILS]


def _module_names(tree):
    """The names the module's top level binds."""
    names = set()
    for node in tree.body:
        targets = node.targets if isinstance(node, ast.Assign) else \
            [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else []
        for target in targets:
            names.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
    return names


def _mutations(tree, names):
    """``(line, what)`` of every statement that mutates a module-level name in place (a
    rebinding needs ``global``, which is found too)."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Global):
            found.append((node.lineno, f'global {", ".join(node.names)}'))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) \
                and node.func.attr in MUTATORS and isinstance(node.func.value, ast.Name) \
                and node.func.value.id in names:
            found.append((node.lineno, f'{node.func.value.id}.{node.func.attr}()'))
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.Delete)):
            targets = node.targets if isinstance(node, (ast.Assign, ast.Delete)) else \
                [node.target]
            for target in targets:
                if isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) \
                        and target.value.id in names:
                    found.append((node.lineno, f'{target.value.id}[...] assigned'))
    return found


def _caches(tree):
    return [(node.lineno, ast.unparse(d)) for node in ast.walk(tree)
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) for d in node.decorator_list
            if any(
                isinstance(n, (ast.Name, ast.Attribute)) and (
                    getattr(n, 'id', None) or getattr(n, 'attr', None)) in CACHES
                for n in ast.walk(d))]


@pytest.mark.parametrize('path', _sources(), ids=lambda p: str(p.relative_to(ROOT.parent)))
def test_no_module_mutates_its_globals(path):
    tree = ast.parse(path.read_text())
    names = _module_names(tree)
    assert _mutations(tree, names) == []
    assert _caches(tree) == []


def test_the_source_check_finds_each_kind_of_mutation():
    tree = ast.parse('_STACK = []\nCACHE = {}\n'
                     'def push(x):\n    _STACK.append(x)\n'
                     'def put(k, v):\n    CACHE[k] = v\n'
                     'def bump():\n    global N\n    N = 1\n'
                     '@functools.lru_cache()\ndef kernels():\n    return 1\n')
    found = [what for _, what in _mutations(tree, _module_names(tree))]
    assert sorted(found) == ['CACHE[...] assigned', '_STACK.append()', 'global N']
    assert [what for _, what in _caches(tree)] == ['functools.lru_cache()']


def _containers():
    """Deep copies of every module-level list, dict and set of ``mmstiff.models``."""
    held = {}
    for info in pkgutil.walk_packages(mmstiff.models.__path__, 'mmstiff.models.'):
        if info.name.endswith('det_step_resnet'):
            continue  # needs mmdet; checked by the sources
        module = importlib.import_module(info.name)
        for key, value in vars(module).items():
            if isinstance(value, (list, dict, set)) and not key.startswith('__'):
                held[f'{info.name}.{key}'] = copy.deepcopy(value)
    return held


def test_a_recorded_train_step_of_every_kind_leaves_the_module_state_as_it_was():
    before = _containers()
    assert before  # the constants (registries of names, layer tables) are seen
    torch.manual_seed(0)
    nets = [
        StepResNet(18, base_channels=4, stem_channels=4,
                   adaptor=dict(type='mmstiff.StepNetAdaptor')),
        StepViT(
            dict(embed_dims=16, num_layers=1, num_heads=2, feedforward_channels=32), img_size=16,
            patch_size=8, msa_adaptor=dict(type='mmstiff.SEAdaptor')),
    ]
    for net in nets:
        size = 32 if isinstance(net, StepResNet) else 16
        for fused in (False, True):
            set_fused(net, fused).train()
            with TrajectoryRecorder(net, step_sums=True):
                net(torch.randn(2, 3, size, size))[-1].sum().backward()
            with forced_step_kernels(TorchStepKernels, net), reference_steps(net):
                net(torch.randn(2, 3, size, size))[-1].sum().backward()
    assert _containers() == before
