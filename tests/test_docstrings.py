"""The public functions, classes and methods of every module of ``mmstiff`` have a docstring.

Read in the sources, with the notion of public of ``test_typed_api.py``: the module-level
functions and classes whose names have no leading underscore, and the methods of such a class
whose names have none, plus ``__call__``. ``__init__`` needs none (the class docstring documents
its Args), nor does a method named in :data:`UPSTREAM_OVERRIDES`. Functions and classes nested
in others are not API.
"""
import ast
from pathlib import Path

import pytest

import mmstiff

ROOT = Path(mmstiff.__file__).parent
PUBLIC_DUNDERS = frozenset(('__call__', ))
# methods overriding a contract documented upstream (nn.Module, autograd.Function, mmengine Hook /
# BaseModule / BaseModel, Dataset, pickle.Unpickler); only as methods, a function needs its own
UPSTREAM_OVERRIDES = frozenset(
    ('forward', 'backward', 'extra_repr', 'train', 'init_weights', 'reset_parameters',
     'load_data_list', 'parse_data_info', 'find_class', 'persistent_load', 'train_step',
     'before_run', 'after_run', 'before_train', 'after_train', 'before_val', 'after_val',
     'before_test', 'after_test', 'before_train_epoch', 'after_train_epoch', 'before_val_epoch',
     'after_val_epoch', 'before_test_epoch', 'after_test_epoch', 'before_train_iter',
     'after_train_iter', 'before_val_iter', 'after_val_iter', 'before_test_iter', 'after_test_iter',
     'before_save_checkpoint', 'after_load_checkpoint'))

DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def _sources():
    return sorted(ROOT.rglob('*.py'))


def _public_method(name):
    if name in UPSTREAM_OVERRIDES or name == '__init__':
        return False
    return not name.startswith('_') or name in PUBLIC_DUNDERS


def undocumented_api(tree):
    """The public functions, classes and methods of the module ``tree`` without a docstring:
    ``['function', 'Class', 'Class.method']``, in source order."""
    found = []
    for node in tree.body:
        if not isinstance(node, DEFINITIONS) or node.name.startswith('_'):
            continue
        if ast.get_docstring(node) is None:
            found.append(node.name)
        if isinstance(node, ast.ClassDef):
            found += [
                f'{node.name}.{item.name}' for item in node.body if isinstance(item, FUNCTIONS)
                and _public_method(item.name) and ast.get_docstring(item) is None
            ]
    return found


@pytest.mark.parametrize('path', _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_public_functions_classes_and_methods_are_documented(path):
    assert undocumented_api(ast.parse(path.read_text())) == []


def test_the_check_finds_each_missing_docstring():
    tree = ast.parse('def step(x): ...\n'
                     'def told(x):\n'
                     '    """Told."""\n'
                     'def _private(x): ...\n'
                     'def forward(x): ...\n'
                     'class Block:\n'
                     '    def __init__(self, channels): ...\n'
                     '    def forward(self, x): ...\n'
                     '    def after_train_iter(self, runner): ...\n'
                     '    def residual(self, x): ...\n'
                     '    def told(self, x):\n'
                     '        """Told."""\n'
                     '    def __call__(self, x): ...\n'
                     '    def __repr__(self): ...\n'
                     '    def _helper(self, x): ...\n'
                     'class Told:\n'
                     '    """Told."""\n'
                     'class _Hidden:\n'
                     '    def residual(self, x): ...\n')
    assert undocumented_api(tree) == [
        'step', 'forward', 'Block', 'Block.residual', 'Block.__call__'
    ]


def test_each_exempt_name_is_an_upstream_method():
    # the exemption holds only names whose contract an upstream class documents
    import pickle

    import torch
    from mmengine.dataset import BaseDataset
    from mmengine.hooks import Hook
    from mmengine.model import BaseModel, BaseModule
    upstream = (torch.nn.Module, torch.nn.Linear, torch.autograd.Function, Hook, BaseModule,
                BaseModel, BaseDataset, pickle.Unpickler)
    assert [n for n in sorted(UPSTREAM_OVERRIDES) if not any(hasattr(c, n) for c in upstream)] \
        == []
    points = {n for n in dir(Hook) if n.startswith(('before_', 'after_'))}
    assert points <= UPSTREAM_OVERRIDES  # every hook point of mmengine's Hook


def test_every_package_is_covered():
    # the parametrised test reads every module of the package, the root ones included
    covered = {p.relative_to(ROOT).parts[0] for p in _sources()}
    packages = {p.name for p in ROOT.iterdir() if (p / '__init__.py').is_file()}
    assert packages <= covered and 'tool_main.py' in covered
