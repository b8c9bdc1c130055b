"""mmstiff's own registries, children of the MMEngine roots.

Every registry here has ``scope='mmstiff'`` and ``locations`` pointing at the modules that fill
it. MMEngine resolves a scoped type such as ``type='mmstiff.StepResNet'`` from any codebase's
registry (mmpretrain, mmdet, ...) by importing ``mmstiff.registry`` and walking the registry
tree, so configs of either codebase use mmstiff's types with no ``custom_imports``.

mmstiff's configs always write the scoped form ``mmstiff.Name``. Only the registries mmstiff
registers something in are declared; a scoped name in any other registry fails as unknown.
"""
from mmengine.registry import DATASETS as MMENGINE_DATASETS
from mmengine.registry import HOOKS as MMENGINE_HOOKS
from mmengine.registry import METRICS as MMENGINE_METRICS
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import Registry

SCOPE = 'mmstiff'


def _child(name, parent, locations):
    return Registry(name, parent=parent, scope=SCOPE, locations=locations)


#: Backbones, step-size adaptors, normalisation layers, plugins.
MODELS = _child('model', MMENGINE_MODELS, ['mmstiff.models'])
#: Training diagnostics (StiffnessHook, FrequencyHook, HessianHook) and safeguards
#: (SafeCheckpointHook, DivergenceHook).
HOOKS = _child('hook', MMENGINE_HOOKS, ['mmstiff.engine'])
#: Datasets mmpretrain lacks (STL-10) and checking variants (CIFAR, MNIST, COCO).
DATASETS = _child('dataset', MMENGINE_DATASETS, ['mmstiff.datasets'])
#: Metrics of the stiff-dynamics testbed (FlowMetric).
METRICS = _child('metric', MMENGINE_METRICS, ['mmstiff.evaluation'])
