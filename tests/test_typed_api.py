"""The public functions and classes of every module of ``mmstiff`` are typed.

Read in the sources: every public function and method (a name without a leading underscore,
plus ``__init__`` and ``__call__``) of a public class or module annotates each of its
parameters (not ``self``, ``cls``, an autograd Function's ``ctx``, ``*args`` or ``**kwargs``)
and, but for ``__init__``, its return value. Functions nested in others are not API.
"""
import ast
from pathlib import Path

import pytest

import mmstiff

ROOT = Path(mmstiff.__file__).parent
UNTYPED_PARAMS = frozenset(('self', 'cls', 'ctx'))
PUBLIC_DUNDERS = frozenset(('__init__', '__call__'))


def _sources():
    return sorted(ROOT.rglob('*.py'))


def _public(name):
    return not name.startswith('_') or name in PUBLIC_DUNDERS


def _untyped(function, owner=''):
    """What ``function`` leaves unannotated: ``['name(param)', 'name -> return']``."""
    name = f'{owner}{function.name}'
    args = function.args
    params = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    missing = [
        f'{name}({a.arg})' for a in params if a.arg not in UNTYPED_PARAMS and a.annotation is None
    ]
    if function.returns is None and function.name != '__init__':
        missing.append(f'{name} -> return')
    return missing


def untyped_api(tree):
    """Every unannotated parameter and return of the public API in the module ``tree``."""
    found = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _public(node.name):
            found += _untyped(node)
        elif isinstance(node, ast.ClassDef) and not node.name.startswith('_'):
            for item in node.body:
                if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) \
                        and _public(item.name):
                    found += _untyped(item, f'{node.name}.')
    return found


@pytest.mark.parametrize('path', _sources(), ids=lambda p: str(p.relative_to(ROOT)))
def test_public_functions_and_methods_are_typed(path):
    assert untyped_api(ast.parse(path.read_text())) == []


def test_the_check_finds_each_missing_annotation():
    tree = ast.parse('def step(x, f: int) -> int: ...\n'
                     'def _private(x): ...\n'
                     'class Block:\n'
                     '    def __init__(self, channels, *args, **kwargs): ...\n'
                     '    def forward(self, x: int): ...\n'
                     '    def _helper(self, x): ...\n'
                     '    def __repr__(self): ...\n'
                     'class _Hidden:\n'
                     '    def forward(self, x): ...\n')
    assert untyped_api(tree) == ['step(x)', 'Block.__init__(channels)', 'Block.forward -> return']


def test_every_package_is_covered():
    # the parametrised test reads every module of the package, the root ones included
    covered = {p.relative_to(ROOT).parts[0] for p in _sources()}
    packages = {p.name for p in ROOT.iterdir() if (p / '__init__.py').is_file()}
    assert packages <= covered and 'tool_main.py' in covered
