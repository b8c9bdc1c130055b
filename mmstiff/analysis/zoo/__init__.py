"""The block specs of upstream model zoos, one module per group of backbones.

Each module holds data only: ``SPECS`` (a list of
:class:`~mmstiff.analysis.step_specs.BlockSpec`, by class name: no model is imported) and
``NON_RESIDUAL`` (``{'scope.Backbone': why it has no residual step}``). docs/diagnostics.md,
"Which modules are steps", lists every family with its steps and step size.
"""
import importlib
import pkgutil
from functools import lru_cache
from typing import Any, Dict, Optional

from ..step_specs import BlockSpec, check_spec


def _groups():
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda info: info.name):
        yield importlib.import_module(f'{__name__}.{info.name}')


@lru_cache(maxsize=None)
def zoo_specs() -> Dict[str, BlockSpec]:
    """``{class full name: BlockSpec}`` of every group (each spec checked once)."""
    specs = {}
    for group in _groups():
        for spec in getattr(group, 'SPECS', ()):
            if spec.cls in specs:
                raise ValueError(f'{spec.cls} has two specs ({group.__name__} and another group)')
            specs[spec.cls] = check_spec(spec)
    return specs


@lru_cache(maxsize=None)
def non_residual() -> Dict[str, str]:
    """``{'scope.Backbone': reason}`` of the backbones that have no residual step."""
    table = {}
    for group in _groups():
        table.update(getattr(group, 'NON_RESIDUAL', {}))
    return table


def non_residual_reason(model: Any) -> Optional[str]:
    """Why ``model`` (or the backbone class it is an instance of) has no residual step, or
    None if the tables do not list it."""
    cls = type(model)
    scope = cls.__module__.partition('.')[0]
    return non_residual().get(f'{scope}.{cls.__name__}')


__all__ = ['zoo_specs', 'non_residual', 'non_residual_reason']
