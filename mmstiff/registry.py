"""mmstiff's own registries, children of the MMEngine roots.

Every registry here has ``scope='mmstiff'`` and ``locations`` pointing at the modules that fill
it. MMEngine resolves a scoped type such as ``type='mmstiff.StepResNet'`` from any codebase's
registry (mmpretrain, mmdet, ...) by importing ``mmstiff.registry`` and walking the registry
tree, so configs of either codebase use mmstiff's types with no ``custom_imports``.

mmstiff's configs always write the scoped form ``mmstiff.Name``.
"""
from mmengine.registry import DATA_SAMPLERS as MMENGINE_DATA_SAMPLERS
from mmengine.registry import DATASETS as MMENGINE_DATASETS
from mmengine.registry import EVALUATOR as MMENGINE_EVALUATOR
from mmengine.registry import HOOKS as MMENGINE_HOOKS
from mmengine.registry import LOOPS as MMENGINE_LOOPS
from mmengine.registry import METRICS as MMENGINE_METRICS
from mmengine.registry import MODEL_WRAPPERS as MMENGINE_MODEL_WRAPPERS
from mmengine.registry import MODELS as MMENGINE_MODELS
from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS as MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS
from mmengine.registry import PARAM_SCHEDULERS as MMENGINE_PARAM_SCHEDULERS
from mmengine.registry import TRANSFORMS as MMENGINE_TRANSFORMS
from mmengine.registry import VISBACKENDS as MMENGINE_VISBACKENDS
from mmengine.registry import Registry

SCOPE = 'mmstiff'


def _child(name, parent, locations):
    return Registry(name, parent=parent, scope=SCOPE, locations=locations)


#: Backbones, step-size adaptors, attention layers, plugins.
MODELS = _child('model', MMENGINE_MODELS, ['mmstiff.models'])
#: Model wrappers (DDP on CPU, ...).
MODEL_WRAPPERS = _child('model_wrapper', MMENGINE_MODEL_WRAPPERS, ['mmstiff.engine'])
#: Training diagnostics (StiffnessHook, FrequencyHook, ...).
HOOKS = _child('hook', MMENGINE_HOOKS, ['mmstiff.engine'])
#: Datasets mmpretrain lacks (STL-10) and format-checking variants (CIFAR).
DATASETS = _child('dataset', MMENGINE_DATASETS, ['mmstiff.datasets'])
DATA_SAMPLERS = _child('data sampler', MMENGINE_DATA_SAMPLERS, ['mmstiff.datasets'])
#: Data transforms (frequency-band noise, ...).
TRANSFORMS = _child('transform', MMENGINE_TRANSFORMS, ['mmstiff.datasets'])
METRICS = _child('metric', MMENGINE_METRICS, ['mmstiff.evaluation'])
EVALUATOR = _child('evaluator', MMENGINE_EVALUATOR, ['mmstiff.evaluation'])
LOOPS = _child('loop', MMENGINE_LOOPS, ['mmstiff.engine'])
PARAM_SCHEDULERS = _child('parameter scheduler', MMENGINE_PARAM_SCHEDULERS, ['mmstiff.engine'])
OPTIM_WRAPPER_CONSTRUCTORS = _child('optimizer wrapper constructor',
                                    MMENGINE_OPTIM_WRAPPER_CONSTRUCTORS, ['mmstiff.engine'])
VISBACKENDS = _child('vis_backend', MMENGINE_VISBACKENDS, ['mmstiff.engine'])
