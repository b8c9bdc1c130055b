"""mmstiff's types build from mmpretrain and mmdet configs with no custom_imports."""
import subprocess
import sys

import pytest
from mmengine.registry import DefaultScope

SCRIPT = r'''
import sys
from mmengine.config import Config
from mmengine.registry import DefaultScope, init_default_scope
scope = sys.argv[1]
init_default_scope(scope)
if scope == 'mmpretrain':
    from mmpretrain.registry import MODELS
else:
    from mmdet.registry import MODELS
assert 'mmstiff' not in sys.modules, 'mmstiff must not be imported up front'
cfg = Config(dict(default_scope=scope, step=dict(type='mmstiff.ConstantStep', step=0.5)))
step = MODELS.build(cfg.step)
assert type(step).__module__.startswith('mmstiff.'), type(step)
print(type(step).__name__, step.step)
'''


@pytest.mark.parametrize('scope', ['mmpretrain', 'mmdet'])
def test_scoped_type_builds_without_custom_imports(scope):
    # A fresh interpreter, so nothing has imported mmstiff before the registry lookup.
    proc = subprocess.run([sys.executable, '-c', SCRIPT, scope], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split()[-2:] == ['ConstantStep', '0.5']


@pytest.mark.parametrize('scope', ['mmpretrain', 'mmdet'])
def test_mmstiff_registries_are_children_of_the_roots(scope):
    from mmengine import registry as root

    import mmstiff.registry as reg

    for name in ('MODELS', 'HOOKS', 'DATASETS', 'METRICS'):
        child = getattr(reg, name)
        assert child.scope == 'mmstiff'
        assert child.parent is getattr(root, name)
        assert getattr(root, name).children['mmstiff'] is child
    with DefaultScope.overwrite_default_scope(scope):
        from mmengine.registry import MODELS
        step = MODELS.build(dict(type='mmstiff.ConstantStep'))
    assert step.step == 1.0


def test_each_registry_is_filled_from_its_locations():
    """Every declared registry holds something, and only from the modules its locations name."""
    from mmengine.registry import Registry

    import mmstiff.registry as reg

    declared = {
        name: value
        for name, value in vars(reg).items()
        if isinstance(value, Registry) and value.scope == 'mmstiff'
    }
    assert sorted(declared) == ['DATASETS', 'HOOKS', 'METRICS', 'MODELS']
    for name, registry in declared.items():
        registry.import_from_location()
        assert registry.module_dict, f'{name} is declared but nothing is registered in it'
        for key, cls in registry.module_dict.items():
            assert cls.__module__.startswith(tuple(f'{loc}.' for loc in registry._locations)), \
                (name, key, cls.__module__, registry._locations)
    assert {'StepResNet', 'StepNetAdaptor', 'IEBN'} <= set(reg.MODELS.module_dict)
    assert {'StiffnessHook', 'FrequencyHook'} <= set(reg.HOOKS.module_dict)
    assert {'STL10', 'CIFAR10', 'CIFAR100'} <= set(reg.DATASETS.module_dict)


def test_unknown_mmstiff_type_fails_naming_it():
    from mmpretrain.registry import MODELS
    with pytest.raises(KeyError, match='NoSuchAdaptor'):
        MODELS.build(dict(type='mmstiff.NoSuchAdaptor'))
