"""Every import inside ``mmstiff/`` follows the import table of docs/design.md, as written.

The table is parsed from the page (its ``layer`` and ``imports of mmstiff`` columns); every
``import`` / ``from ... import`` of every module, those inside functions included, is resolved
to the layer of the module it names and checked against the importing module's row.
"""
import ast
import os
import os.path as osp
import re

import pytest

REPO = osp.dirname(osp.dirname(osp.abspath(__file__)))
PACKAGE = osp.join(REPO, 'mmstiff')
DESIGN = osp.join(REPO, 'docs', 'design.md')


def import_table(text):
    """``{layer: set of layers it may import}`` from the page's import table."""
    section = text.split('## Import rules', 1)[1].split('\n## ', 1)[0]
    rows = [line for line in section.splitlines() if line.startswith('| `')]
    table = {}
    for row in rows:
        cells = [cell.strip() for cell in row.strip('|').split('|')]
        names = re.findall(r'`([^`]+)`', cells[0])  # the layers of one row import each other
        for layer in names:
            table[layer] = set(re.findall(r'`([^`]+)`', cells[1])) | set(names) - {layer}
    return table


def layer_of(relpath, table):
    """The table row of a package path (``'models/steps/base.py'``): the longest matching
    folder row, or a file row of the package root; None when no row holds it."""
    if relpath in table:
        return relpath
    folders = [layer for layer in table if layer.endswith('/') and relpath.startswith(layer)]
    return max(folders, key=len) if folders else None


def module_path(name):
    """``'mmstiff.a.b'`` -> ``'a/b.py'`` or ``'a/b/__init__.py'`` (relative to the package),
    or None when no such module exists (a name imported from a module)."""
    parts = name.split('.')[1:]
    base = osp.join(PACKAGE, *parts)
    if osp.isfile(base + '.py'):
        return osp.relpath(base + '.py', PACKAGE)
    if osp.isfile(osp.join(base, '__init__.py')):
        return osp.relpath(osp.join(base, '__init__.py'), PACKAGE)
    return None


def imported_modules(tree, relpath):
    """``(line, module name)`` of every mmstiff module ``tree`` imports."""
    package = ['mmstiff'] + osp.dirname(relpath).split(osp.sep) if osp.dirname(relpath) else [
        'mmstiff'
    ]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                module = '.'.join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ''
            # ``from pkg import sub`` imports the module ``pkg.sub`` where one exists
            names = [
                f'{module}.{alias.name}' if module_path(f'{module}.{alias.name}') else module
                for alias in node.names
            ]
        else:
            continue
        for name in names:
            if name == 'mmstiff' or name.startswith('mmstiff.'):
                yield node.lineno, name


def layer_violations(relpath, source, table):
    """``['file:line: ...']`` for each import of ``source`` (the module at ``relpath`` in the
    package) that its layer's row does not allow."""
    own = layer_of(relpath, table)
    if own is None:
        return [f'{relpath}: in no row of the import table']
    found = []
    for line, name in imported_modules(ast.parse(source, relpath), relpath):
        target_path = module_path(name) or ('__init__.py' if name == 'mmstiff' else None)
        target = layer_of(target_path, table) if target_path else None
        if target is None:
            found.append(f'{relpath}:{line}: imports {name}, which is in no row')
        elif target != own and target not in table[own]:
            found.append(f'{relpath}:{line}: {own} imports {name} ({target}), which its row '
                         'does not allow')
    return found


@pytest.fixture(scope='module')
def table():
    with open(DESIGN, encoding='utf-8') as f:
        return import_table(f.read())


def test_the_table_is_read_from_the_page(table):
    assert table['utils/'] == {'errors.py'}
    assert table['analysis/'] == {'utils/'}
    assert 'analysis/' in table['engine/'] and 'engine/' in table['apis/']
    assert table['models/steps/'] == {'utils/', 'registry.py', 'models/utils/', 'models/layers/'}


def test_every_import_of_the_package_follows_the_table(table):
    found = []
    for folder, _, files in os.walk(PACKAGE):
        for name in sorted(files):
            if name.endswith('.py'):
                path = osp.join(folder, name)
                with open(path, encoding='utf-8') as f:
                    found += layer_violations(osp.relpath(path, PACKAGE), f.read(), table)
    assert found == []


@pytest.mark.parametrize('relpath, source', [
    ('analysis/x.py', 'from mmstiff.models.steps import StepAdaptor\n'),
    ('analysis/x.py', 'def f():\n    import mmstiff.engine\n'),
    ('models/steps/x.py', 'from mmstiff.analysis.blocks import find_blocks\n'),
    ('models/layers/x.py', 'from ..steps import base\n'),
    ('utils/x.py', 'from mmstiff.apis import runtime\n'),
    ('engine/x.py', 'from mmstiff import models\n'),
])
def test_a_planted_upward_import_fails(relpath, source, table):
    assert layer_violations(relpath, source, table), source


def test_allowed_and_same_layer_imports_pass(table):
    assert layer_violations('engine/x.py', 'from mmstiff.analysis import stiffness\n', table) == []
    assert layer_violations('models/steps/x.py', 'from .base import StepAdaptor\n', table) == []
    assert layer_violations('newpkg/x.py', 'import torch\n',
                            table) == ['newpkg/x.py: in no row of the import table']
