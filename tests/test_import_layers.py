"""Every import inside ``mmstiff/`` follows the import table of docs/design.md, as written, and
no module of the package reaches itself through its imports.

The table is parsed from the page (its ``layer`` and ``imports of mmstiff`` columns); every
``import`` / ``from ... import`` of every module, those inside functions included, is resolved
to the layer of the module it names and checked against the importing module's row. The same
imports, module to module, make a graph that must have no circle: a module that imports
another (at the top or inside a function) is never imported back by it, directly or through
others. An import names one module: ``from pkg import name`` the module ``pkg.name`` where one
exists, else ``pkg/__init__.py``; a package's ``__init__.py`` that Python runs first is not an
edge of its own.
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


def package_sources():
    """``{path relative to the package: source}`` of every module of ``mmstiff/``."""
    sources = {}
    for folder, _, files in os.walk(PACKAGE):
        for name in sorted(files):
            if name.endswith('.py'):
                path = osp.join(folder, name)
                with open(path, encoding='utf-8') as f:
                    sources[osp.relpath(path, PACKAGE)] = f.read()
    return sources


def import_graph(sources):
    """``{module path: {module paths it imports}}`` of the modules in ``sources`` (``{path:
    source}``), imports inside functions included, each edge with the first line that makes
    it: ``{path: {target: line}}``."""
    graph = {}
    for relpath, source in sources.items():
        edges = graph.setdefault(relpath, {})
        for line, name in imported_modules(ast.parse(source, relpath), relpath):
            target = module_path(name) or ('__init__.py' if name == 'mmstiff' else None)
            if target is not None and target != relpath:
                edges.setdefault(target, line)
    return graph


def import_circles(graph):
    """Every circle of ``graph`` (:func:`import_graph`) as ``'a.py:3 -> b.py:7 -> a.py'``: one
    path around each set of modules that reach each other (Tarjan's strongly connected
    components), empty when there is none."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = set()
            while True:
                member = stack.pop()
                on_stack.discard(member)
                group.add(member)
                if member == node:
                    break
            if len(group) > 1:
                groups.append(group)

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return [_circle_through(graph, group) for group in groups]


def _circle_through(graph, group):
    """A path from the first module of ``group`` back to it inside ``group``, with the line of
    each import."""
    start = min(group)
    paths, seen = [[start]], {start}
    while paths:  # breadth first: the shortest way back
        path = paths.pop(0)
        for target in sorted(graph[path[-1]]):
            if target == start:
                steps = [f'{a}:{graph[a][b]}' for a, b in zip(path, path[1:] + [start])]
                return ' -> '.join(steps + [start])
            if target in group and target not in seen:
                seen.add(target)
                paths.append(path + [target])
    raise AssertionError(f'no circle through {sorted(group)}')  # pragma: no cover


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
    for relpath, source in package_sources().items():
        found += layer_violations(relpath, source, table)
    assert found == []


def test_the_package_has_no_import_circle():
    assert import_circles(import_graph(package_sources())) == []


def test_planted_circles_are_found():
    """A circle through an import inside a function, one through three modules, and a module
    left out of both."""
    sources = {
        'errors.py': 'def f():\n    from .dependencies import missing_dependency\n',
        'dependencies.py': 'import os\nfrom .errors import MmstiffError\n',
        'models/steps/step.py': 'def choose():\n    from .fused import FusedStep\n',
        'models/steps/fused/__init__.py': 'from .step import FusedStep\n',
        'models/steps/fused/step.py': 'from ..step import reference_step\n',
        'models/steps/update.py': 'import torch\n',
    }
    assert sorted(import_circles(import_graph(sources))) == [
        'dependencies.py:2 -> errors.py:2 -> dependencies.py',
        'models/steps/fused/__init__.py:1 -> models/steps/fused/step.py:1 -> '
        'models/steps/step.py:2 -> models/steps/fused/__init__.py',
    ]
    sources['models/steps/fused/step.py'] = 'from ..update import reference_step\n'
    sources['errors.py'] = 'import re\n'
    assert import_circles(import_graph(sources)) == []


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
